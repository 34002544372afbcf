//! Adaptive stages: each stage is shaped when it becomes ready, from what its input
//! stages really committed, not from the estimates the plan was cut with.
//!
//! Stages are cut at submit ([`super::StageSplitter`]), where the planner can only guess
//! how much a filter, a join or an aggregate leaves. A hash shuffle is planned as wide as
//! the widest scan, so a query that ends in 60 rows may still run 64 tasks over them. When
//! the scheduler claims a stage, every input stage has committed and its completion
//! records carry the byte offsets of each output slice: [`decide`] turns them into a
//! [`StageDecision`], written with the claim (so only the winning scheduler's decision is
//! ever recorded, and any racing one computed the same: the decision reads only committed,
//! immutable records).
//!
//! Rules:
//! - **coalesce**: a stage reading hash shuffles runs contiguous ranges of its plan
//!   partitions as one task, each range holding about `shuffle_bytes_per_task` of
//!   shuffle input (at least one partition per task). Partition `p` of a hash-shuffled
//!   plan depends on slice `p` of its inputs alone, so one task may run several of them;
//!   its writer merges them (sort-preserving when the output is ordered).
//! - **fuse**: a stage sized to one task whose one consumer is a single-task stage
//!   reading nothing else runs *inside* that consumer's task: no tasks of its own
//!   (it is complete at its claim), no shuffle written or read, no hand-off. The
//!   consumer's decision lists it, and its task runs [`fuse`]d plan.
//! - **split**: a partition far above the target and the median runs as several tasks,
//!   each reading some producers of its largest splittable input.
//! - **broadcast** (a join switch, [`super::switch`]): the large side of a partitioned
//!   semi / anti / mark join whose other side committed at most `max_broadcast_bytes`
//!   reads that side whole and writes marks; the join's stage then combines them in one
//!   task.
//! - **combine** (a two-level exchange, for a hash shuffle planned for more than
//!   `max_shuffle_reads` reads): with P producers and consumers of C tasks, every consumer
//!   task would read every producer — P × C ranged GETs. The combining stage cut between
//!   them ([`StageRecord::combines`]) divides the producers into Gp groups and the
//!   partitions into Gc groups; task (j, i) reads its partition group of each producer of
//!   group i (one GET each, the slices lie back to back) and writes them as one object, so
//!   a consumer task reads Gp objects: P × Gc + C × Gp reads in all, with Gp × Gc about the
//!   shuffle's bytes over four times `shuffle_bytes_per_task` and the two balanced to read
//!   least — near √(P·C·n) rather than P·C. A shuffle that turns out to need few reads (or
//!   whose combination would not save any) passes through: no tasks, and the consumer
//!   reads the producers directly.
//! - otherwise the stage runs as planned: one task per plan partition.
//!
//! One file per rule (`coalesce.rs`, `split.rs`, `fuse.rs`, `broadcast.rs`,
//! `combine.rs`); `sizing.rs` gathers what a stage's inputs committed and applies the
//! coalesce and split rules in order. Then, where the deployment has two executor
//! sizes, [`executor_size`] picks the function the stage's tasks run on.

mod broadcast;
mod coalesce;
mod combine;
pub mod executor_size;
mod fuse;
mod sizing;
mod split;

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::physical_plan::ExecutionPlan;

use crate::state::{
    AdaptiveRule, JobSnapshot, StageDecision, StageRecord, SwitchMode, TaskOutput, TaskState,
};
use crate::{EngineConfig, Error, Result};

pub use coalesce::coalesce;
pub use combine::combine_groups;
pub use fuse::fuse;
pub use split::split_producers;

use broadcast::{switch_join, switched_join};
use combine::combine;
use fuse::fuse_into_consumer;
use sizing::size;

/// The stage whose tasks wrote `stage`'s output: itself, or — when its switched join ran
/// inside its large side's tasks ([`SwitchMode::Join`]) — that large side, or — for a
/// combining stage that passed through — the stage it would have combined.
pub fn source_of(snapshot: &JobSnapshot, stage: u32) -> u32 {
    let Some(record) = snapshot.stages.iter().find(|s| s.stage == stage) else {
        return stage;
    };
    let decision = record.decision.as_ref();
    if let Some(sw) = decision
        .and_then(|d| d.switched)
        .filter(|sw| sw.mode == SwitchMode::Join && sw.join == stage)
    {
        return sw.large;
    }
    match (record.combines, decision) {
        (Some(input), Some(d)) if d.rule == AdaptiveRule::Combined && d.tasks == 0 => input,
        _ => stage,
    }
}

/// The committed outputs of `stage`'s input `input`, in producer order.
fn committed(snapshot: &JobSnapshot, input: u32) -> Vec<&TaskOutput> {
    snapshot
        .tasks_of(source_of(snapshot, input))
        .filter(|t| t.state == TaskState::Succeeded)
        .filter_map(|t| t.output.as_ref())
        .collect()
}

/// Bytes of slice `slice` summed over `outputs`.
fn slice_bytes(outputs: &[&TaskOutput], slice: usize) -> Result<u64> {
    outputs.iter().try_fold(0u64, |sum, o| {
        let r = o.slice(slice)?;
        Ok(sum + (r.end - r.start))
    })
}

/// Bytes `outputs` hold in all.
fn total_bytes(outputs: &[&TaskOutput]) -> u64 {
    outputs.iter().map(|o| o.all().end).sum()
}

/// Decides how `stage` runs, from the committed outputs of its inputs in `snapshot`
/// (all of which must be complete). See the [module docs](self).
pub fn decide(
    stage: &StageRecord,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> Result<StageDecision> {
    let mut decision = if let Some(decision) = switched_join(stage, snapshot, config)? {
        decision
    } else if let Some(input) = stage.combines {
        combine(stage, input, snapshot, config)?
    } else {
        let sized = size(stage, snapshot, config)?;
        let sized = switch_join(stage, sized, snapshot, config);
        fuse_into_consumer(stage, sized, snapshot, config)
    };
    // Every rule's tasks read an input that another stage wrote from there: a switched
    // join's stage whose own input ran inside a stage before it (chained broadcasts, as
    // TPC-H q16 over Delta tables found) as much as any other.
    decision.read_from = decision
        .input_tasks
        .iter()
        .filter_map(|&(input, _)| {
            let source = source_of(snapshot, input);
            (source != input).then_some((input, source))
        })
        .collect();
    let (size, why) = executor_size::choose(stage, &decision, snapshot, config);
    decision.size = size;
    if !why.is_empty() {
        decision.note = format!("{}; {why}", decision.note);
    }
    Ok(decision)
}

/// The other stages whose stored plans [`task_plan`] needs for `stage`: those fused into
/// it and, on the large side of a switched join, the join's stage.
pub fn plans_needed(stage: &StageRecord) -> Vec<u32> {
    let Some(decision) = &stage.decision else {
        return Vec::new();
    };
    let mut needed = decision.fused.clone();
    if let Some(switch) = decision.switched.filter(|s| s.large == stage.stage) {
        needed.push(switch.join);
    }
    needed
}

/// The plan the tasks of `stage` run, from its stored plan `plan` and the stored plans
/// of the stages [`plans_needed`] names (in `others`): the stages fused into it in place
/// of their readers ([`fuse`]), and a switched join's side of [`super::switch`].
pub fn task_plan(
    stage: &StageRecord,
    plan: Arc<dyn ExecutionPlan>,
    others: &HashMap<u32, Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(decision) = &stage.decision else {
        return Ok(plan);
    };
    let stored = |s: u32| {
        others.get(&s).cloned().ok_or_else(|| {
            Error::Internal(format!(
                "stage {} runs with stage {s}'s plan, which was not given",
                stage.stage
            ))
        })
    };
    let fused = decision
        .fused
        .iter()
        .map(|&s| Ok((s, stored(s)?)))
        .collect::<Result<HashMap<_, _>>>()?;
    let plan = fuse(plan, &fused)?;
    let large_tasks = |switch: crate::state::JoinSwitch| {
        decision
            .input_tasks
            .iter()
            .find(|(s, _)| *s == switch.large)
            .map_or(1, |&(_, n)| n as usize)
    };
    match decision.switched {
        Some(switch) if switch.large == stage.stage => {
            let join = stored(switch.join)?;
            match switch.mode {
                SwitchMode::Marks => super::switch::marking_plan(&plan, &join, switch),
                SwitchMode::Join => super::switch::joining_plan(&plan, &join, switch),
                SwitchMode::Aggregate => super::switch::aggregating_plan(&plan, &join, switch),
            }
        }
        Some(switch) => match switch.mode {
            // Its tasks never run: the large side's ran its plan.
            SwitchMode::Join => Ok(plan),
            SwitchMode::Marks => super::switch::combining_plan(&plan, switch, large_tasks(switch)),
            SwitchMode::Aggregate => {
                super::switch::finishing_plan(&plan, switch, large_tasks(switch))
            }
        },
        None => Ok(plan),
    }
}

/// `1.5 MiB`-style sizes for decision notes.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{
        EdgeKind, JobKind, JobRecord, JobState, JoinSwitch, SkewRead, StageInput, StageState,
        TaskOutput, TaskRecord,
    };

    /// The combining stage's groups, by hand: as many tasks in all as the bytes make
    /// tasks of the combining size, split so that the two levels read equally, within
    /// the producers and partitions there are.
    #[test]
    fn combining_groups_balance_the_two_levels_of_reads() {
        const MIB: u64 = 1024 * 1024;
        // 1 TiB over 1,000 × 1,000: 4,096 tasks of 256 MiB, 64 × 64; reads 1,000 × 64
        // + 1,000 × 64 = 128,000 instead of 1,000,000.
        assert_eq!(
            combine_groups(1_000, 1_000, 1_000, 1024 * 1024 * MIB, 256 * MIB),
            (64, 64)
        );
        // 512 KiB over 16 × 16 at 128 KiB: 4 tasks, 2 × 2.
        assert_eq!(combine_groups(16, 16, 16, 512 * 1024, 128 * 1024), (2, 2));
        // Few consumer tasks: one partition group, the tasks go to producer groups.
        assert_eq!(
            combine_groups(1_000, 10, 1_000, 1024 * MIB, 256 * MIB),
            (4, 1)
        );
        // Tiny: one task. Huge: capped by the partitions and producers there are.
        assert_eq!(combine_groups(100, 100, 100, 10, 256 * MIB), (1, 1));
        assert_eq!(combine_groups(10, 10, 3, u64::MAX / 2, 1), (10, 3));
    }

    #[test]
    fn coalesce_fills_groups_up_to_the_target() {
        assert_eq!(coalesce(&[1, 1, 1, 1], 10), vec![0], "all fit in one");
        assert_eq!(coalesce(&[6, 5, 4, 7, 3], 10), vec![0, 1, 3]);
        assert_eq!(
            coalesce(&[30, 1, 30], 10),
            vec![0, 1, 2],
            "large ones alone"
        );
        assert_eq!(
            coalesce(&[0, 0, 30, 0], 10),
            vec![0, 3],
            "empty ones ride along"
        );
        assert_eq!(coalesce(&[], 10), Vec::<u32>::new());
        let decision = StageDecision {
            switched: None,
            read_from: vec![],
            rule: AdaptiveRule::Coalesced,
            partitions: 5,
            tasks: 3,
            starts: vec![0, 1, 3],
            input_tasks: vec![],
            fused: vec![],
            skew: vec![],
            input_rows: 0,
            input_bytes: 0,
            note: String::new(),
            size: Default::default(),
        };
        let groups: Vec<_> = (0..3).map(|t| decision.partitions_of(t)).collect();
        assert_eq!(groups, vec![0..1, 1..3, 3..5]);
    }

    #[test]
    fn split_producers_balances_bytes_in_contiguous_groups() {
        assert_eq!(split_producers(&[10, 10, 10, 10], 2), vec![(0, 2), (2, 4)]);
        assert_eq!(split_producers(&[30, 1, 1, 28], 2), vec![(0, 1), (1, 4)]);
        assert_eq!(
            split_producers(&[5, 0, 5], 4),
            vec![(0, 1), (1, 3)],
            "no more groups than producers with bytes"
        );
        assert_eq!(split_producers(&[7], 3), vec![(0, 1)]);
        let decision = StageDecision {
            switched: None,
            read_from: vec![],
            rule: AdaptiveRule::Split,
            partitions: 3,
            tasks: 4,
            starts: vec![0, 1, 1, 2],
            input_tasks: vec![],
            fused: vec![],
            skew: vec![
                SkewRead {
                    task: 1,
                    stage: 0,
                    producers: (0, 2),
                },
                SkewRead {
                    task: 2,
                    stage: 0,
                    producers: (2, 4),
                },
            ],
            input_rows: 0,
            input_bytes: 0,
            note: String::new(),
            size: Default::default(),
        };
        let groups: Vec<_> = (0..4).map(|t| decision.partitions_of(t)).collect();
        assert_eq!(groups, vec![0..1, 1..2, 1..2, 2..3]);
        assert_eq!(decision.producers_of(2, 0), Some(2..4));
        assert_eq!(decision.producers_of(0, 0), None);
    }

    /// A partition far above the target and the median runs as several tasks over its
    /// producers when its input is splittable; the same bytes unsplittable stay one task.
    #[test]
    fn a_skewed_partition_is_split_only_when_its_input_allows() {
        let mut stage = consumer(4, EdgeKind::Hash);
        stage.output_partitions = 4;
        stage.inputs[0].splittable = true;
        // Four producers; partition 1 holds 100 bytes from each, the others 1.
        let ends = vec![1, 101, 102, 103];
        let snap = snapshot(
            (0..4).map(|p| output(p, ends.clone())).collect(),
            stage.clone(),
        );
        let config = EngineConfig {
            shuffle_bytes_per_task: 150,
            ..EngineConfig::default()
        };
        let d = decide(&stage, &snap, &config).unwrap();
        assert_eq!(d.rule, AdaptiveRule::Split, "{}", d.note);
        assert_eq!(d.starts, vec![0, 1, 1, 1, 2]);
        assert_eq!(d.tasks, 5);
        assert_eq!(d.producers_of(1, 0), Some(0..2));
        assert_eq!(d.producers_of(2, 0), Some(2..3));
        assert_eq!(d.producers_of(3, 0), Some(3..4));
        assert!(
            d.note.contains("partition 1 (400 B) over 3 tasks"),
            "{}",
            d.note
        );
        assert_eq!(decide(&stage, &snap, &config).unwrap(), d);

        stage.inputs[0].splittable = false;
        let snap = snapshot(
            (0..4).map(|p| output(p, ends.clone())).collect(),
            stage.clone(),
        );
        let d = decide(&stage, &snap, &config).unwrap();
        assert_eq!(d.rule, AdaptiveRule::Coalesced, "{}", d.note);
        assert!(d.skew.is_empty());
    }

    fn output(partition: u32, ends: Vec<u64>) -> TaskRecord {
        let mut t = TaskRecord::new("j", 0, partition, TaskState::Succeeded, 1, 0);
        t.output = Some(TaskOutput {
            attempt: 1,
            object: format!("o{partition}"),
            rows: 10,
            bytes: ends.last().copied().unwrap_or(0),
            ends,
            started_ms: 0,
            finished_ms: 0,
            metrics: Vec::new(),
            requests: Default::default(),
            handoff: None,
            cpu: None,
            written: None,
        });
        t
    }

    fn snapshot(inputs: Vec<TaskRecord>, consumer: StageRecord) -> JobSnapshot {
        let producer = StageRecord {
            stage: 0,
            tasks: inputs.len() as u32,
            inputs: vec![],
            ..consumer.clone()
        };
        JobSnapshot {
            job: JobRecord {
                task_limit: None,
                job_id: "j".into(),
                sql: String::new(),
                kind: JobKind::Query,
                state: JobState::Running,
                stage_count: 2,
                result_schema: vec![],
                owner: String::new(),
                created_ms: 0,
                deadline_ms: None,
                finished_ms: None,
                error: None,
                requests: Default::default(),
                write: None,
                expires_at: 0,
            },
            stages: vec![producer, consumer],
            tasks: inputs,
            counters: vec![],
        }
    }

    fn consumer(partitions: u32, kind: EdgeKind) -> StageRecord {
        StageRecord {
            job_id: "j".into(),
            stage: 1,
            state: StageState::Pending,
            tasks: partitions,
            output_partitions: 1,
            inputs: vec![StageInput {
                stage: 0,
                kind,
                splittable: false,
                width: None,
            }],
            summary: String::new(),
            scan_bytes: Vec::new(),
            switch: None,
            combines: None,
            dispatched_ms: None,
            confirmed_ms: None,
            decision: None,
            expires_at: 0,
        }
    }

    /// Small hash partitions are merged by their committed bytes; the same records give
    /// the same decision (racing schedulers agree).
    #[test]
    fn small_hash_partitions_are_coalesced_deterministically() {
        let stage = consumer(4, EdgeKind::Hash);
        // Two producers, four slices each: partition bytes 10+10, 0+5, 40+40, 1+1.
        let snap = snapshot(
            vec![
                output(0, vec![10, 10, 50, 51]),
                output(1, vec![10, 15, 55, 56]),
            ],
            stage.clone(),
        );
        let config = EngineConfig {
            shuffle_bytes_per_task: 30,
            ..EngineConfig::default()
        };
        let d = decide(&stage, &snap, &config).unwrap();
        assert_eq!(d.rule, AdaptiveRule::Coalesced);
        assert_eq!(d.starts, vec![0, 2, 3]);
        assert_eq!(d.tasks, 3);
        assert_eq!(d.input_tasks, vec![(0, 2)]);
        assert_eq!(d.input_bytes, 107);
        assert_eq!(
            (0..3).map(|t| d.partitions_of(t)).collect::<Vec<_>>(),
            vec![0..2, 2..3, 3..4]
        );
        assert_eq!(decide(&stage, &snap, &config).unwrap(), d);

        let off = EngineConfig {
            adaptive: false,
            ..config.clone()
        };
        let d = decide(&stage, &snap, &off).unwrap();
        assert_eq!(
            (d.rule, d.tasks, d.starts.len()),
            (AdaptiveRule::Planned, 4, 0)
        );
        assert!(d.note.contains("off"), "{}", d.note);
    }

    /// Stages without hash input run as planned; a producer whose slice count differs
    /// from the consumer's partitions is an error naming both, not a wrong grouping.
    #[test]
    fn gathers_run_as_planned_and_mismatched_slices_are_errors() {
        let gather = consumer(1, EdgeKind::Gather);
        let snap = snapshot(vec![output(0, vec![5]), output(1, vec![7])], gather.clone());
        let d = decide(&gather, &snap, &EngineConfig::default()).unwrap();
        assert_eq!(
            (d.rule, d.tasks, d.input_bytes),
            (AdaptiveRule::Planned, 1, 12)
        );

        let hash = consumer(3, EdgeKind::Hash);
        let snap = snapshot(vec![output(0, vec![5, 6])], hash.clone());
        let e = decide(&hash, &snap, &EngineConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 partitions") && e.contains("2 slices"), "{e}");
    }

    /// A stage sized to one task whose one consumer is a single-task stage reading only
    /// it is fused into it (no tasks of its own); the consumer then lists it and reads
    /// what it would have read. Not when the consumer reads another stage too (whether
    /// that one is done must not change the decision), or when the stage keeps several
    /// tasks.
    #[test]
    fn a_single_task_stage_feeding_a_single_task_stage_is_fused() {
        let middle = consumer(4, EdgeKind::Hash);
        let last = StageRecord {
            stage: 2,
            tasks: 1,
            inputs: vec![StageInput {
                stage: 1,
                kind: EdgeKind::Gather,
                splittable: false,
                width: None,
            }],
            ..middle.clone()
        };
        let mut snap = snapshot(
            vec![output(0, vec![1, 2, 3, 4]), output(1, vec![1, 2, 3, 4])],
            middle.clone(),
        );
        snap.stages.push(last.clone());
        let config = EngineConfig::default();
        let d = decide(&middle, &snap, &config).unwrap();
        assert_eq!((d.rule, d.tasks), (AdaptiveRule::Fused, 0), "{}", d.note);
        assert!(d.note.contains("fused into stage 2"), "{}", d.note);

        // Once fused, the consumer runs it: it reads stage 0's two outputs itself.
        snap.stages[1].tasks = 0;
        snap.stages[1].state = StageState::Dispatched;
        snap.stages[1].decision = Some(d);
        let c = decide(&last, &snap, &config).unwrap();
        assert_eq!((c.tasks, c.fused.clone()), (1, vec![1]));
        assert_eq!(c.input_tasks, vec![(0, 2)]);
        assert!(
            c.note.contains("runs stage 1 inside its task"),
            "{}",
            c.note
        );

        // A consumer that also reads another stage: the boundary stays.
        let mut waiting = snapshot(
            vec![output(0, vec![1, 2, 3, 4]), output(1, vec![1, 2, 3, 4])],
            middle.clone(),
        );
        let mut other = last.clone();
        other.stage = 3;
        other.inputs = vec![];
        let mut joined = last.clone();
        joined.inputs.push(StageInput {
            stage: 3,
            kind: EdgeKind::Broadcast,
            splittable: false,
            width: None,
        });
        waiting.stages.push(joined);
        waiting.stages.push(other);
        let d = decide(&middle, &waiting, &config).unwrap();
        assert_eq!(d.rule, AdaptiveRule::Coalesced, "{}", d.note);

        // Several tasks: never fused.
        let small = EngineConfig {
            shuffle_bytes_per_task: 2,
            ..config
        };
        let d = decide(&middle, &snap_without_decision(&snap), &small).unwrap();
        assert!(d.tasks > 1 && d.rule != AdaptiveRule::Fused, "{}", d.note);
    }

    /// The switch rule: the large side of a switchable join waits for the small side,
    /// switches the join to a broadcast of it when it committed at most
    /// `max_broadcast_bytes`, and the join's stage then combines the marks in one task.
    #[test]
    fn a_join_switches_to_broadcast_when_its_small_side_is_small() {
        let switch = JoinSwitch {
            join: 2,
            small: 0,
            large: 1,
            mode: SwitchMode::Marks,
        };
        let join = StageRecord {
            stage: 2,
            inputs: vec![
                StageInput {
                    stage: 0,
                    kind: EdgeKind::Hash,
                    splittable: false,
                    width: None,
                },
                StageInput {
                    stage: 1,
                    kind: EdgeKind::Hash,
                    splittable: false,
                    width: None,
                },
            ],
            ..consumer(4, EdgeKind::Hash)
        };
        let large = StageRecord {
            stage: 1,
            tasks: 3,
            output_partitions: 4,
            inputs: vec![],
            switch: Some(switch),
            combines: None,
            ..join.clone()
        };
        // The small side: two tasks of 4 bytes each.
        let mut snap = snapshot(
            vec![output(0, vec![1, 2, 3, 4]), output(1, vec![1, 2, 3, 4])],
            large.clone(),
        );
        snap.stages[0].output_partitions = 4;
        snap.stages.push(join.clone());
        assert_eq!(large.waits_for(true).collect::<Vec<_>>(), vec![0]);
        assert_eq!(large.waits_for(false).count(), 0);

        let at = |limit| EngineConfig::default().with_max_broadcast_bytes(limit);
        let d = decide(&large, &snap, &at(8)).unwrap();
        assert_eq!(d.rule, AdaptiveRule::Broadcast, "{}", d.note);
        assert_eq!((d.tasks, d.switched), (3, Some(switch)));
        assert_eq!(d.input_tasks, vec![(0, 2)], "it reads the small side");
        assert!(d.note.contains("stage 2's join switched"), "{}", d.note);
        assert_eq!(decide(&large, &snap, &at(8)).unwrap(), d, "deterministic");
        for (limit, adaptive) in [(7, true), (0, true), (8, false)] {
            let config = EngineConfig {
                adaptive,
                ..at(limit)
            };
            let p = decide(&large, &snap, &config).unwrap();
            assert_ne!(p.rule, AdaptiveRule::Broadcast, "{}", p.note);
            assert_eq!((p.switched, p.input_tasks.clone()), (None, vec![]));
        }
        assert!(decide(&large, &snap, &at(7))
            .unwrap()
            .note
            .contains("over the broadcast limit"));
        // Read by each of 3 tasks, 8 bytes cost 24: more than a quarter of a 30-byte scan
        // (partitioned), less than a quarter of a 120-byte one (switched).
        let mut scanning = snap.clone();
        scanning.stages[1].scan_bytes = vec![10, 10, 10];
        let costly = decide(&scanning.stages[1].clone(), &scanning, &at(8)).unwrap();
        assert_ne!(costly.rule, AdaptiveRule::Broadcast, "{}", costly.note);
        assert!(
            costly.note.contains("would outweigh shuffling"),
            "{}",
            costly.note
        );
        // The share is a setting: at 80% of the 30-byte scan (24 bytes) it switches.
        let generous = EngineConfig {
            broadcast_scan_percent: 80,
            ..at(8)
        };
        let d80 = decide(&scanning.stages[1].clone(), &scanning, &generous).unwrap();
        assert_eq!(d80.rule, AdaptiveRule::Broadcast, "{}", d80.note);
        scanning.stages[1].scan_bytes = vec![40, 40, 40];
        let cheap = decide(&scanning.stages[1].clone(), &scanning, &at(8)).unwrap();
        assert_eq!(cheap.rule, AdaptiveRule::Broadcast, "{}", cheap.note);
        // ... and at 5% of the 120-byte scan (6 bytes; its one coalesced task reads 8) it
        // does not.
        let strict = EngineConfig {
            broadcast_scan_percent: 5,
            ..at(8)
        };
        let d10 = decide(&scanning.stages[1].clone(), &scanning, &strict).unwrap();
        assert_ne!(d10.rule, AdaptiveRule::Broadcast, "{}", d10.note);
        assert!(d10.note.contains("broadcast_scan_percent"), "{}", d10.note);

        // Switched: the join's stage runs one task over the marks (one slice each).
        snap.stages[1].state = StageState::Dispatched;
        snap.stages[1].decision = Some(d);
        let marks = |slices: Vec<u64>| {
            (0..3).map(move |p| {
                let mut t = output(p, slices.clone());
                t.stage = 1;
                t
            })
        };
        let mut done = snap.clone();
        done.tasks.extend(marks(vec![9]));
        let j = decide(&join, &done, &at(8)).unwrap();
        assert_eq!(j.rule, AdaptiveRule::Broadcast, "{}", j.note);
        assert_eq!((j.partitions, j.tasks, j.switched), (1, 1, Some(switch)));
        assert_eq!(j.input_tasks, vec![(0, 2), (1, 3)]);
        assert!(
            j.note.contains("combined with the marks of stage 1"),
            "{}",
            j.note
        );
        // Marks in several slices are not marks: an error, not a wrong answer.
        let mut wrong = snap.clone();
        wrong.tasks.extend(marks(vec![1, 2, 3, 9]));
        assert!(decide(&join, &wrong, &at(8)).is_err());
    }

    fn snap_without_decision(snap: &JobSnapshot) -> JobSnapshot {
        let mut s = snap.clone();
        s.stages[1].decision = None;
        s.stages[1].tasks = 4;
        s.stages[1].state = StageState::Pending;
        s
    }

    #[test]
    fn sizes_read_like_a_person_writes_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(64 * 1024 * 1024), "64.0 MiB");
    }
}
