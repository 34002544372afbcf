//! The sizing every ordinary stage goes through ([`size`]): what its inputs committed,
//! gathered once ([`Inputs`]), then the coalesce rule over hash-shuffle partitions (or
//! over a scan's partitions), the skew split, and the note saying how its joins meet
//! their inputs.

use crate::state::{AdaptiveRule, EdgeKind, JobSnapshot, StageDecision, StageRecord, TaskOutput};
use crate::{EngineConfig, Error, Result};

use super::coalesce::{coalesce, size_scan};
use super::fuse::is_fused;
use super::split::split_skewed;
use super::{committed, human_bytes, slice_bytes, total_bytes};

/// A hash-shuffle input read one slice per partition: its stage, whether it may be split
/// by producers, and its committed outputs.
pub(super) type HashInput<'a> = (u32, bool, Vec<&'a TaskOutput>);

/// What a stage's inputs committed, gathered for its decision.
struct Inputs<'a> {
    /// Tasks each input stage ran (for a fused input: its own inputs').
    input_tasks: Vec<(u32, u32)>,
    /// Inputs fused into this stage.
    fused: Vec<u32>,
    /// Rows the inputs committed.
    rows: u64,
    /// Hash shuffles one slice per partition of this stage: stage, splittable, outputs.
    hash: Vec<HashInput<'a>>,
    /// Hash shuffles of another width (a union's branches), and their bytes.
    other_widths: Vec<u32>,
    other_width_bytes: u64,
    /// Bytes read whole by every task (broadcast) or by the one task (gather).
    whole_bytes: u64,
}

/// Gathers what `stage`'s inputs committed; an input whose objects do not hold the
/// slices its reader was planned for is an error naming the object.
fn gather<'a>(stage: &StageRecord, snapshot: &'a JobSnapshot) -> Result<Inputs<'a>> {
    let partitions = stage.tasks;
    let mut inputs = Inputs {
        input_tasks: Vec::with_capacity(stage.inputs.len()),
        fused: Vec::new(),
        rows: 0,
        hash: Vec::new(),
        other_widths: Vec::new(),
        other_width_bytes: 0,
        whole_bytes: 0,
    };
    for input in &stage.inputs {
        // A fused input runs inside this stage's tasks: they read what it would have read.
        if let Some(producer) = is_fused(snapshot, input.stage) {
            inputs.fused.push(input.stage);
            for i in &producer.inputs {
                let tasks = committed(snapshot, i.stage).len() as u32;
                inputs.input_tasks.push((i.stage, tasks));
            }
            continue;
        }
        let outputs = committed(snapshot, input.stage);
        inputs.input_tasks.push((input.stage, outputs.len() as u32));
        inputs.rows += outputs.iter().map(|o| o.rows).sum::<u64>();
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
                    inputs.other_widths.push(input.stage);
                    inputs.other_width_bytes += total_bytes(&outputs);
                    continue;
                }
                inputs.hash.push((input.stage, input.splittable, outputs));
            }
            EdgeKind::Gather | EdgeKind::Broadcast => {
                inputs.whole_bytes += total_bytes(&outputs);
            }
        }
    }
    Ok(inputs)
}

/// `a, b, c` of stage numbers.
fn stage_list(stages: &[u32]) -> String {
    stages
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"s"` unless `n` is one, for counts in notes.
pub(super) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// How the stage's joins meet their inputs, with the committed sizes.
fn join_notes(stage: &StageRecord, snapshot: &JobSnapshot, inputs: &Inputs) -> Vec<String> {
    let mut joins = Vec::new();
    if inputs.hash.len() >= 2 {
        joins.push(format!(
            "partitioned: hash shuffles of {}",
            inputs
                .hash
                .iter()
                .map(|(s, _, outputs)| format!("stage {s} ({})", human_bytes(total_bytes(outputs))))
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    for input in stage
        .inputs
        .iter()
        .filter(|i| i.kind == EdgeKind::Broadcast)
    {
        let bytes = total_bytes(&committed(snapshot, input.stage));
        joins.push(format!(
            "broadcast: stage {} ({}) read whole by each task",
            input.stage,
            human_bytes(bytes)
        ));
    }
    joins
}

/// The coalesce rule, the scan coalesce rule and the skew split — or the stage as
/// planned, with the reason.
///
/// Long because each rule's decision and its reason are read in order in one place;
/// the rules themselves live in their own modules.
pub(super) fn size(
    stage: &StageRecord,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> Result<StageDecision> {
    let partitions = stage.tasks;
    let inputs = gather(stage, snapshot)?;
    let planned_decision = StageDecision {
        rule: AdaptiveRule::Planned,
        partitions,
        tasks: partitions,
        starts: vec![],
        input_tasks: inputs.input_tasks.clone(),
        fused: inputs.fused.clone(),
        skew: vec![],
        switched: None,
        read_from: vec![],
        input_rows: inputs.rows,
        input_bytes: 0,
        note: String::new(),
        size: Default::default(),
    };
    if !inputs.other_widths.is_empty() {
        return Ok(StageDecision {
            input_bytes: inputs.other_width_bytes
                + inputs.whole_bytes * u64::from(partitions.max(1)),
            note: format!(
                "{partitions} task{} as planned: its partitions are those of the hash shuffles \
                 of stage{} {} one after another (a union), not slices of one width",
                plural(partitions as usize),
                plural(inputs.other_widths.len()),
                stage_list(&inputs.other_widths)
            ),
            ..planned_decision
        });
    }
    let mut per_partition = vec![0u64; partitions as usize];
    for (_, _, outputs) in &inputs.hash {
        for (p, bytes) in per_partition.iter_mut().enumerate() {
            *bytes += slice_bytes(outputs, p)?;
        }
    }
    let hash_bytes: u64 = per_partition.iter().sum();
    let joins = join_notes(stage, snapshot, &inputs);
    let with_fused = |note: String| {
        let note = if joins.is_empty() {
            note
        } else {
            format!("{note}; {}", joins.join("; "))
        };
        match inputs.fused.as_slice() {
            [] => note,
            stages => format!(
                "{note}; runs stage{} {} inside its task{} (fused)",
                plural(stages.len()),
                stage_list(stages),
                plural(partitions as usize),
            ),
        }
    };
    let planned = |note: String| StageDecision {
        input_bytes: hash_bytes + inputs.whole_bytes * u64::from(partitions.max(1)),
        note: with_fused(note),
        ..planned_decision.clone()
    };
    let adaptive = config.adaptive;
    if inputs.hash.is_empty() && inputs.fused.is_empty() && adaptive && partitions > 1 {
        if let Some((starts, note)) = size_scan(stage, config) {
            let tasks = starts.len() as u32;
            return Ok(StageDecision {
                rule: AdaptiveRule::Coalesced,
                tasks,
                starts,
                input_bytes: inputs.whole_bytes * u64::from(tasks),
                ..planned(note)
            });
        }
    }
    if inputs.hash.is_empty() || partitions <= 1 || !adaptive {
        let why = if !adaptive {
            "adaptive stages are off"
        } else if inputs.hash.is_empty() {
            "no hash-shuffle input"
        } else {
            "one partition"
        };
        return Ok(planned(format!(
            "{partitions} task{} as planned ({why})",
            plural(partitions as usize)
        )));
    }
    let starts = coalesce(&per_partition, config.shuffle_bytes_per_task);
    let split = split_skewed(stage, config, &per_partition, &starts, &inputs.hash)?;
    if split.task_starts.len() as u32 == partitions && split.skew.is_empty() {
        return Ok(planned(format!(
            "{partitions} tasks as planned: {} of shuffle input, none of its partitions \
             small enough to merge",
            human_bytes(hash_bytes)
        )));
    }
    let tasks = split.task_starts.len() as u32;
    let mut note = if starts.len() as u32 != partitions {
        format!(
            "coalesced {partitions} shuffle partitions ({}) into {} task{} of about {} each",
            human_bytes(hash_bytes),
            starts.len(),
            plural(starts.len()),
            human_bytes(config.shuffle_bytes_per_task),
        )
    } else {
        format!(
            "{partitions} shuffle partitions ({})",
            human_bytes(hash_bytes)
        )
    };
    if !split.skew.is_empty() {
        note = format!(
            "{note}; split skewed {}: {tasks} tasks",
            split.notes.join(", ")
        );
    }
    Ok(StageDecision {
        rule: if split.skew.is_empty() {
            AdaptiveRule::Coalesced
        } else {
            AdaptiveRule::Split
        },
        tasks,
        starts: split.task_starts,
        skew: split.skew,
        input_bytes: hash_bytes + split.extra_bytes + inputs.whole_bytes * u64::from(tasks),
        note: with_fused(note),
        ..planned_decision.clone()
    })
}
