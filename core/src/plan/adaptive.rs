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

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::DataFusionError;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use crate::shuffle::{ReadMode, ShuffleReaderExec, ShuffleWriterExec};
use crate::state::{
    AdaptiveRule, EdgeKind, JobSnapshot, SkewRead, StageDecision, StageRecord, SwitchMode,
    TaskOutput, TaskState,
};
use crate::{EngineConfig, Error, Result};

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

/// Decides how `stage` runs, from the committed outputs of its inputs in `snapshot`
/// (all of which must be complete). See the [module docs](self).
pub fn decide(
    stage: &StageRecord,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> Result<StageDecision> {
    if let Some(decision) = switched_join(stage, snapshot)? {
        return Ok(decision);
    }
    if let Some(input) = stage.combines {
        return combine(stage, input, snapshot, config);
    }
    let sized = size(stage, snapshot, config)?;
    let sized = switch_join(stage, sized, snapshot, config);
    let mut decision = fuse_into_consumer(stage, sized, snapshot, config);
    decision.read_from = decision
        .input_tasks
        .iter()
        .filter_map(|&(input, _)| {
            let source = source_of(snapshot, input);
            (source != input).then_some((input, source))
        })
        .collect();
    Ok(decision)
}

/// Bytes `outputs` hold in all.
fn total_bytes(outputs: &[&TaskOutput]) -> u64 {
    outputs.iter().map(|o| o.all().end).sum()
}

/// The switch rule on the large side of a switchable join ([`super::switch`]): once
/// its small side is committed, at most `max_broadcast_bytes` switches the join to a
/// broadcast of it — this stage's tasks read it whole and mark its rows.
fn switch_join(
    stage: &StageRecord,
    sized: StageDecision,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> StageDecision {
    let Some(switch) = stage.switch.filter(|_| config.adaptive) else {
        return sized;
    };
    let small = committed(snapshot, switch.small);
    let bytes = total_bytes(&small);
    let limit = config.max_broadcast_bytes;
    let partitioned = |why: String| StageDecision {
        note: format!(
            "{}; partitioned: {why}, so stage {}'s join reads both sides hash-shuffled, as \
             planned",
            sized.note, switch.join
        ),
        ..sized.clone()
    };
    if limit == 0 || bytes > limit {
        return partitioned(format!(
            "stage {} ({}) is over the broadcast limit ({})",
            switch.small,
            human_bytes(bytes),
            human_bytes(limit)
        ));
    }
    // Every task reads (and builds a hash table of) the small side: worth it while that
    // costs less than shuffling this stage's rows, taken as a quarter of what it scans.
    let scanned: u64 = stage.scan_bytes.iter().sum();
    let broadcast = bytes.saturating_mul(u64::from(sized.tasks.max(1)));
    if scanned > 0 && broadcast > scanned / BROADCAST_SHARE_OF_SCAN {
        return partitioned(format!(
            "stage {} ({}) read by each of {} tasks ({}) would outweigh shuffling this \
             stage's rows (about a quarter of its {} scan)",
            switch.small,
            human_bytes(bytes),
            sized.tasks,
            human_bytes(broadcast),
            human_bytes(scanned)
        ));
    }
    let mut input_tasks = sized.input_tasks.clone();
    input_tasks.push((switch.small, small.len() as u32));
    input_tasks.sort_unstable();
    let what = match switch.mode {
        SwitchMode::Marks => "marks the rows of it that its own rows match".to_string(),
        SwitchMode::Join => format!(
            "joins its own rows to it and runs the rest of stage {} (which runs no tasks)",
            switch.join
        ),
    };
    StageDecision {
        rule: AdaptiveRule::Broadcast,
        input_tasks,
        switched: Some(switch),
        read_from: vec![],
        input_rows: sized.input_rows + small.iter().map(|o| o.rows).sum::<u64>(),
        input_bytes: sized.input_bytes + bytes * u64::from(sized.tasks),
        note: format!(
            "{}; broadcast: stage {} ({}, at most {}) read whole by each task, which \
             {what}: stage {}'s join switched from partitioned, and this stage's rows are \
             not hash-shuffled for it",
            sized.note,
            switch.small,
            human_bytes(bytes),
            human_bytes(limit),
            switch.join
        ),
        ..sized
    }
}

/// A join switches only while its small side, read by every task of the large side, is
/// at most this fraction's inverse of the bytes the large side scans (what it would
/// shuffle instead is taken as a quarter of that: projected and filtered).
const BROADCAST_SHARE_OF_SCAN: u64 = 4;

/// The decision of a stage whose join was switched at its large side's claim: one task
/// combining the large side's marks over the small side, read whole.
fn switched_join(stage: &StageRecord, snapshot: &JobSnapshot) -> Result<Option<StageDecision>> {
    let switch = stage.inputs.iter().find_map(|i| {
        snapshot
            .stages
            .iter()
            .find(|s| s.stage == i.stage)
            .and_then(|s| s.decision.as_ref())
            .and_then(|d| d.switched)
            .filter(|sw| sw.join == stage.stage)
    });
    let Some(switch) = switch else {
        return Ok(None);
    };
    let small = committed(snapshot, switch.small);
    let large = committed(snapshot, switch.large);
    let (small_bytes, large_bytes) = (total_bytes(&small), total_bytes(&large));
    let mut input_tasks = vec![
        (switch.small, small.len() as u32),
        (switch.large, large.len() as u32),
    ];
    input_tasks.sort_unstable();
    let decision = StageDecision {
        rule: AdaptiveRule::Broadcast,
        partitions: 1,
        tasks: 1,
        starts: vec![],
        input_tasks,
        fused: vec![],
        skew: vec![],
        switched: Some(switch),
        read_from: vec![],
        input_rows: small.iter().chain(&large).map(|o| o.rows).sum(),
        input_bytes: small_bytes + large_bytes,
        note: String::new(),
    };
    if switch.mode == SwitchMode::Join {
        // It ran inside the large side's tasks, which wrote its output.
        return Ok(Some(StageDecision {
            partitions: stage.tasks,
            tasks: 0,
            input_bytes: small_bytes * large.len() as u64,
            note: format!(
                "0 tasks: its join switched from partitioned to broadcast, so it ran inside \
                 the {} task{} of stage {}, each reading stage {} ({}) whole; its consumers \
                 read their output ({})",
                large.len(),
                if large.len() == 1 { "" } else { "s" },
                switch.large,
                switch.small,
                human_bytes(small_bytes),
                human_bytes(large_bytes)
            ),
            ..decision
        }));
    }
    if let Some(bad) = large.iter().find(|o| o.ends.len() != 1) {
        return Err(Error::Internal(format!(
            "stage {} marks in one slice for stage {}, but {} holds {} slices",
            switch.large,
            stage.stage,
            bad.object,
            bad.ends.len()
        )));
    }
    Ok(Some(StageDecision {
        note: format!(
            "1 task: its join switched from partitioned to broadcast — stage {} ({}) read \
             whole, combined with the marks of stage {}'s {} task{} ({})",
            switch.small,
            human_bytes(small_bytes),
            switch.large,
            large.len(),
            if large.len() == 1 { "" } else { "s" },
            human_bytes(large_bytes)
        ),
        ..decision
    }))
}

/// Whether `stage` was fused into its consumer.
fn is_fused(snapshot: &JobSnapshot, stage: u32) -> Option<&StageRecord> {
    snapshot
        .stages
        .iter()
        .find(|s| s.stage == stage)
        .filter(|s| {
            s.decision
                .as_ref()
                .is_some_and(|d| d.rule == AdaptiveRule::Fused)
        })
}

/// The coalesce rule (or none): how many tasks, over which partitions.
fn size(
    stage: &StageRecord,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> Result<StageDecision> {
    let partitions = stage.tasks;
    let mut input_tasks = Vec::with_capacity(stage.inputs.len());
    let mut fused = Vec::new();
    let mut input_rows = 0u64;
    let mut hash_inputs = Vec::new();
    // Hash inputs whose slices do not line up with this stage's partitions, and their bytes.
    let (mut other_widths, mut other_width_bytes) = (Vec::new(), 0u64);
    let mut whole_bytes = 0u64; // read whole by every task (broadcast) or by the one task
    for input in &stage.inputs {
        // A fused input runs inside this stage's tasks: they read what it would have read.
        if let Some(producer) = is_fused(snapshot, input.stage) {
            fused.push(input.stage);
            for i in &producer.inputs {
                input_tasks.push((i.stage, committed(snapshot, i.stage).len() as u32));
            }
            continue;
        }
        let outputs = committed(snapshot, input.stage);
        input_tasks.push((input.stage, outputs.len() as u32));
        input_rows += outputs.iter().map(|o| o.rows).sum::<u64>();
        match input.kind {
            EdgeKind::Hash => {
                // The slices each producer wrote must be those its reader was planned for
                // (the stage's partitions, when records do not say).
                let width = input.width.unwrap_or(partitions);
                if let Some(o) = outputs.iter().find(|o| o.ends.len() != width as usize) {
                    return Err(Error::Internal(format!(
                        "stage {} cannot be planned: it reads a hash shuffle of {width} \
                         partitions from stage {}, whose object {} holds {} slices",
                        stage.stage,
                        input.stage,
                        o.object,
                        o.ends.len()
                    )));
                }
                if width != partitions {
                    // A union of hash-shuffled inputs: its partitions are its inputs'
                    // partitions one after another, each reading its own input's slice.
                    other_widths.push(input.stage);
                    other_width_bytes += total_bytes(&outputs);
                    continue;
                }
                hash_inputs.push((input.stage, input.splittable, outputs));
            }
            EdgeKind::Gather | EdgeKind::Broadcast => {
                whole_bytes += outputs.iter().map(|o| o.all().end).sum::<u64>();
            }
        }
    }
    if !other_widths.is_empty() {
        return Ok(StageDecision {
            rule: AdaptiveRule::Planned,
            partitions,
            tasks: partitions,
            starts: vec![],
            input_tasks,
            fused,
            skew: vec![],
            switched: None,
            read_from: vec![],
            input_rows,
            input_bytes: other_width_bytes + whole_bytes * u64::from(partitions.max(1)),
            note: format!(
                "{partitions} task{} as planned: its partitions are those of the hash shuffles \
                 of stage{} {} one after another (a union), not slices of one width",
                if partitions == 1 { "" } else { "s" },
                if other_widths.len() == 1 { "" } else { "s" },
                other_widths
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    let mut per_partition = vec![0u64; partitions as usize];
    for (_, _, outputs) in &hash_inputs {
        for (p, bytes) in per_partition.iter_mut().enumerate() {
            *bytes += slice_bytes(outputs, p)?;
        }
    }
    let hash_bytes: u64 = per_partition.iter().sum();
    // How the stage's joins meet their inputs, with the committed sizes.
    let mut joins = Vec::new();
    if hash_inputs.len() >= 2 {
        joins.push(format!(
            "partitioned: hash shuffles of {}",
            hash_inputs
                .iter()
                .map(|(s, _, outputs)| {
                    let bytes: u64 = outputs.iter().map(|o| o.all().end).sum();
                    format!("stage {s} ({})", human_bytes(bytes))
                })
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    for input in stage
        .inputs
        .iter()
        .filter(|i| i.kind == EdgeKind::Broadcast)
    {
        let bytes: u64 = committed(snapshot, input.stage)
            .iter()
            .map(|o| o.all().end)
            .sum();
        joins.push(format!(
            "broadcast: stage {} ({}) read whole by each task",
            input.stage,
            human_bytes(bytes)
        ));
    }
    let with_fused_stages = |note: String| match fused.as_slice() {
        [] => note,
        stages => format!(
            "{note}; runs stage{} {} inside its task{} (fused)",
            if stages.len() == 1 { "" } else { "s" },
            stages
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            if partitions == 1 { "" } else { "s" },
        ),
    };
    let with_fused = |note: String| {
        let note = if joins.is_empty() {
            note
        } else {
            format!("{note}; {}", joins.join("; "))
        };
        with_fused_stages(note)
    };
    let planned = |note: String| StageDecision {
        rule: AdaptiveRule::Planned,
        partitions,
        tasks: partitions,
        starts: vec![],
        input_tasks: input_tasks.clone(),
        fused: fused.clone(),
        skew: vec![],
        switched: None,
        read_from: vec![],
        input_rows,
        input_bytes: hash_bytes + whole_bytes * u64::from(partitions.max(1)),
        note: with_fused(note),
    };
    if hash_inputs.is_empty() && fused.is_empty() && config.adaptive && partitions > 1 {
        if let Some((starts, note)) = size_scan(stage, config) {
            let tasks = starts.len() as u32;
            return Ok(StageDecision {
                rule: AdaptiveRule::Coalesced,
                tasks,
                starts,
                input_bytes: whole_bytes * u64::from(tasks),
                ..planned(note)
            });
        }
    }
    if hash_inputs.is_empty() || partitions <= 1 || !config.adaptive {
        let why = if !config.adaptive {
            "adaptive stages are off"
        } else if hash_inputs.is_empty() {
            "no hash-shuffle input"
        } else {
            "one partition"
        };
        return Ok(planned(format!(
            "{partitions} task{} as planned ({why})",
            if partitions == 1 { "" } else { "s" }
        )));
    }
    let starts = coalesce(&per_partition, config.shuffle_bytes_per_task);
    // A partition far above the target and the median is split over several tasks, each
    // reading some producers of its largest splittable input — when the stage writes a
    // hash shuffle (its consumers read any number of producers).
    let splittable: Vec<_> = hash_inputs
        .iter()
        .filter(|(_, splittable, _)| *splittable && stage.output_partitions > 1)
        .collect();
    let mut median = per_partition.clone();
    median.sort_unstable();
    let median = median[median.len() / 2];
    let mut task_starts = Vec::with_capacity(starts.len());
    let mut skew = Vec::new();
    let mut split_notes = Vec::new();
    let mut extra_bytes = 0u64;
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(partitions);
        let bytes = per_partition[start as usize];
        let skewed = end == start + 1
            && bytes > config.shuffle_bytes_per_task
            && bytes > median.saturating_mul(SKEW_FACTOR);
        let pieces = skewed
            .then(|| {
                splittable
                    .iter()
                    .map(|(s, _, outputs)| {
                        let slices: Vec<u64> = outputs
                            .iter()
                            .map(|o| o.slice(start as usize).map(|r| r.end - r.start))
                            .collect::<Result<_>>()?;
                        Ok((*s, slices))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?
            .and_then(|candidates| {
                candidates
                    .into_iter()
                    .max_by_key(|(s, slices)| (slices.iter().sum::<u64>(), std::cmp::Reverse(*s)))
            })
            .map(|(s, slices)| {
                let pieces = bytes
                    .div_ceil(config.shuffle_bytes_per_task.max(1))
                    .min(MAX_SPLIT as u64) as usize;
                (
                    s,
                    slices.iter().sum::<u64>(),
                    split_producers(&slices, pieces),
                )
            })
            .filter(|(_, _, groups)| groups.len() > 1);
        match pieces {
            Some((input, own, groups)) => {
                extra_bytes += (bytes - own) * (groups.len() as u64 - 1);
                split_notes.push(format!(
                    "partition {start} ({}) over {} tasks by stage {input}'s producers",
                    human_bytes(bytes),
                    groups.len()
                ));
                for producers in groups {
                    skew.push(SkewRead {
                        task: task_starts.len() as u32,
                        stage: input,
                        producers,
                    });
                    task_starts.push(start);
                }
            }
            None => task_starts.push(start),
        }
    }
    if task_starts.len() as u32 == partitions && skew.is_empty() {
        return Ok(planned(format!(
            "{partitions} tasks as planned: {} of shuffle input, none of its partitions \
             small enough to merge",
            human_bytes(hash_bytes)
        )));
    }
    let tasks = task_starts.len() as u32;
    let merged = starts.len() as u32 != partitions;
    let mut note = if merged {
        format!(
            "coalesced {partitions} shuffle partitions ({}) into {} task{} of about {} each",
            human_bytes(hash_bytes),
            starts.len(),
            if starts.len() == 1 { "" } else { "s" },
            human_bytes(config.shuffle_bytes_per_task),
        )
    } else {
        format!(
            "{partitions} shuffle partitions ({})",
            human_bytes(hash_bytes)
        )
    };
    if !skew.is_empty() {
        note = format!(
            "{note}; split skewed {}: {tasks} tasks",
            split_notes.join(", ")
        );
    }
    Ok(StageDecision {
        rule: if skew.is_empty() {
            AdaptiveRule::Coalesced
        } else {
            AdaptiveRule::Split
        },
        partitions,
        tasks,
        starts: task_starts,
        input_tasks,
        fused: fused.clone(),
        skew,
        switched: None,
        read_from: vec![],
        input_rows,
        input_bytes: hash_bytes + extra_bytes + whole_bytes * u64::from(tasks),
        note: with_fused(note),
    })
}

/// The coalesce rule for a stage that scans (a leaf, or a scan probing broadcast build
/// sides): contiguous plan partitions scanning less than `min_scan_bytes_per_task`
/// together run as one task. `None` when nothing merges.
fn size_scan(stage: &StageRecord, config: &EngineConfig) -> Option<(Vec<u32>, String)> {
    let partitions = stage.tasks;
    if stage.scan_bytes.len() != partitions as usize {
        return None;
    }
    let total: u64 = stage.scan_bytes.iter().sum();
    let target = config.min_scan_bytes_per_task;
    let starts = coalesce(&stage.scan_bytes, target);
    if starts.len() as u32 >= partitions {
        return None;
    }
    let tasks = starts.len();
    let note = format!(
        "coalesced {partitions} scan partitions ({}) into {tasks} task{} of up to {} each",
        human_bytes(total),
        if tasks == 1 { "" } else { "s" },
        human_bytes(target),
    );
    Some((starts, note))
}

/// A partition is skewed when it holds more than this many times the median partition's
/// bytes (and more than the target per task).
const SKEW_FACTOR: u64 = 4;

/// A combining task regroups about this many times `shuffle_bytes_per_task`: it only
/// reads, re-slices and writes.
const COMBINE_FACTOR: u64 = 4;

/// The combine rule (see the [module docs](self)) for combining stage `stage` over the
/// hash shuffle of stage `input`.
fn combine(
    stage: &StageRecord,
    input: u32,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> Result<StageDecision> {
    let partitions = stage.tasks;
    let outputs = committed(snapshot, input);
    let producers = outputs.len() as u32;
    if let Some(bad) = outputs.iter().find(|o| o.ends.len() != partitions as usize) {
        return Err(Error::Internal(format!(
            "combining stage {} reads a hash shuffle of {partitions} partitions from stage \
             {input}, but {} holds {} slices",
            stage.stage,
            bad.object,
            bad.ends.len()
        )));
    }
    let per_partition = (0..partitions as usize)
        .map(|p| slice_bytes(&outputs, p))
        .collect::<Result<Vec<u64>>>()?;
    let total: u64 = per_partition.iter().sum();
    let consumer_tasks = if config.adaptive {
        coalesce(&per_partition, config.shuffle_bytes_per_task).len() as u64
    } else {
        u64::from(partitions)
    };
    let direct = u64::from(producers) * consumer_tasks;
    let consumers = snapshot
        .stages
        .iter()
        .filter(|s| s.inputs.iter().any(|i| i.stage == stage.stage))
        .map(|s| format!("stage {}", s.stage))
        .collect::<Vec<_>>()
        .join(", ");
    let pass_through = |why: String| StageDecision {
        rule: AdaptiveRule::Combined,
        partitions,
        tasks: 0,
        starts: vec![],
        input_tasks: vec![(input, producers)],
        fused: vec![],
        skew: vec![],
        switched: None,
        read_from: vec![],
        input_rows: outputs.iter().map(|o| o.rows).sum(),
        input_bytes: 0,
        note: format!("passed through ({why}): {consumers} reads stage {input} directly"),
    };
    if !config.adaptive || direct <= config.max_shuffle_reads || producers <= 1 {
        return Ok(pass_through(format!(
            "{producers} producers × {consumer_tasks} consumer tasks = {direct} reads, at most \
             {}",
            config.max_shuffle_reads
        )));
    }
    let combine_bytes = config
        .shuffle_bytes_per_task
        .saturating_mul(COMBINE_FACTOR)
        .max(1);
    let (gp, gc) = combine_groups(producers, consumer_tasks, partitions, total, combine_bytes);
    let partition_starts = coalesce(&per_partition, total.div_ceil(u64::from(gc)).max(1));
    let producer_bytes: Vec<u64> = outputs.iter().map(|o| o.all().end).collect();
    let producer_groups = split_producers(&producer_bytes, gp as usize);
    let reads = u64::from(producers) * partition_starts.len() as u64
        + consumer_tasks * producer_groups.len() as u64;
    if reads >= direct {
        return Ok(pass_through(format!(
            "combining would take {reads} reads, direct reading {direct}"
        )));
    }
    let mut starts = Vec::new();
    let mut skew = Vec::new();
    for &start in &partition_starts {
        for &producers in &producer_groups {
            skew.push(SkewRead {
                task: starts.len() as u32,
                stage: input,
                producers,
            });
            starts.push(start);
        }
    }
    let tasks = starts.len() as u32;
    Ok(StageDecision {
        tasks,
        starts,
        skew,
        input_bytes: total,
        note: format!(
            "combined stage {input}'s hash shuffle ({}): {producers} producers in {} groups × \
             {partitions} partitions in {} groups = {tasks} tasks; about {reads} reads \
             instead of {producers} × {consumer_tasks} = {direct}",
            human_bytes(total),
            producer_groups.len(),
            partition_starts.len(),
        ),
        ..pass_through(String::new())
    })
}

/// Producer groups and partition groups of a combining stage: together about as many
/// tasks as `total` bytes make tasks of `combine_bytes`, divided so that the reads —
/// `producers` × partition groups by the combining tasks, plus `consumer_tasks` ×
/// producer groups by the consumer — are fewest (the two products equal), within
/// `1..=producers` and `1..=partitions`.
pub fn combine_groups(
    producers: u32,
    consumer_tasks: u64,
    partitions: u32,
    total: u64,
    combine_bytes: u64,
) -> (u32, u32) {
    let n = total.div_ceil(combine_bytes.max(1)).max(1) as f64;
    let (p, c) = (f64::from(producers.max(1)), consumer_tasks.max(1) as f64);
    let gc = (n * c / p)
        .sqrt()
        .round()
        .clamp(1.0, f64::from(partitions.max(1)));
    let gp = (n / gc).ceil().clamp(1.0, p);
    (gp as u32, gc as u32)
}

/// At most this many tasks share one skewed partition.
const MAX_SPLIT: usize = 32;

/// Divides producers with `slices` bytes each (of the skewed partition) into at most
/// `pieces` contiguous groups of about equal bytes, none empty of bytes (producers with
/// nothing ride along); returns each group's producer range.
pub fn split_producers(slices: &[u64], pieces: usize) -> Vec<(u32, u32)> {
    let total: u64 = slices.iter().sum();
    let pieces = pieces.min(slices.iter().filter(|&&b| b > 0).count()).max(1);
    let mut groups = Vec::with_capacity(pieces);
    let (mut start, mut held) = (0usize, 0u64);
    for (p, &bytes) in slices.iter().enumerate() {
        held += bytes;
        let cut = total * (groups.len() as u64 + 1) / pieces as u64;
        if held >= cut && held > 0 && groups.len() + 1 < pieces {
            groups.push((start as u32, p as u32 + 1));
            start = p + 1;
        }
    }
    groups.push((start as u32, slices.len() as u32));
    groups
}

/// The fuse rule: a stage sized to one task, with no fused stage of its own, whose one
/// consumer is a single-task stage reading nothing else runs inside that consumer's task.
/// Like the coalesce rule it depends only on the stage's committed inputs and the stage
/// graph cut at submit — never on how far other stages have got — so every scheduler
/// that claims the stage decides the same. (The consumer cannot have been claimed yet:
/// it waits for this stage.)
fn fuse_into_consumer(
    stage: &StageRecord,
    sized: StageDecision,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> StageDecision {
    if !config.adaptive || sized.tasks != 1 || !sized.fused.is_empty() || sized.switched.is_some() {
        return sized;
    }
    // A stage waiting for this one to decide a join switch counts as a consumer.
    let mut consumers = snapshot
        .stages
        .iter()
        .filter(|c| c.waits_for(true).any(|s| s == stage.stage));
    let (Some(consumer), None) = (consumers.next(), consumers.next()) else {
        return sized;
    };
    if consumer.tasks != 1 || consumer.inputs.len() != 1 {
        return sized;
    }
    StageDecision {
        rule: AdaptiveRule::Fused,
        tasks: 0,
        starts: vec![],
        note: format!(
            "fused into stage {}: one task feeding one task, so its plan runs inside that \
             task instead of writing and reading a shuffle",
            consumer.stage
        ),
        ..sized
    }
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
    match decision.switched {
        Some(switch) if switch.large == stage.stage => match switch.mode {
            SwitchMode::Marks => super::switch::marking_plan(&plan, &stored(switch.join)?, switch),
            SwitchMode::Join => super::switch::joining_plan(&plan, &stored(switch.join)?, switch),
        },
        // Its tasks never run: the large side's ran its plan.
        Some(switch) if switch.mode == SwitchMode::Join => Ok(plan),
        Some(switch) => {
            let large_tasks = decision
                .input_tasks
                .iter()
                .find(|(s, _)| *s == switch.large)
                .map_or(1, |&(_, n)| n as usize);
            super::switch::combining_plan(&plan, switch, large_tasks)
        }
        None => Ok(plan),
    }
}

/// `consumer` (a stage plan) with the reader of every stage in `fused` replaced by that
/// stage's own plan (the input of its writer): what a task of a stage with fused inputs
/// runs. A gather reads the producer's partitions one by one — exactly the producer's
/// plan partitions; a broadcast reads them all as one; a hash shuffle repartitions them
/// in process.
pub fn fuse(
    consumer: Arc<dyn ExecutionPlan>,
    fused: &HashMap<u32, Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if fused.is_empty() {
        return Ok(consumer);
    }
    let plan = consumer.transform_up(|node| {
        let Some(reader) = node.downcast_ref::<ShuffleReaderExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(producer) = fused.get(&reader.stage()) else {
            return Ok(Transformed::no(node));
        };
        let input = ShuffleWriterExec::from_plan(producer)
            .map_err(DataFusionError::from)?
            .input()
            .clone();
        let replaced: Arc<dyn ExecutionPlan> = match reader.mode() {
            ReadMode::Gather => input,
            ReadMode::All if input.output_partitioning().partition_count() <= 1 => input,
            ReadMode::All => Arc::new(CoalescePartitionsExec::new(input)),
            ReadMode::Hash(partitioning) => {
                Arc::new(RepartitionExec::try_new(input, partitioning.clone())?)
            }
        };
        Ok(Transformed::yes(replaced))
    })?;
    Ok(plan.data)
}

/// Groups consecutive partitions so that each group holds at most `target` bytes (a
/// partition larger than `target` is a group of its own); returns each group's first
/// partition. Deterministic: the same sizes give the same groups.
pub fn coalesce(per_partition: &[u64], target: u64) -> Vec<u32> {
    let mut starts = Vec::new();
    let mut held = 0u64;
    for (p, &bytes) in per_partition.iter().enumerate() {
        if starts.is_empty() || (held > 0 && held.saturating_add(bytes) > target) {
            starts.push(p as u32);
            held = 0;
        }
        held = held.saturating_add(bytes);
    }
    starts
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
        JobKind, JobRecord, JobState, JoinSwitch, StageInput, StageState, TaskOutput, TaskRecord,
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
        scanning.stages[1].scan_bytes = vec![40, 40, 40];
        let cheap = decide(&scanning.stages[1].clone(), &scanning, &at(8)).unwrap();
        assert_eq!(cheap.rule, AdaptiveRule::Broadcast, "{}", cheap.note);

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
