//! The combine rule: a two-level exchange for a hash shuffle whose producers times
//! consumer tasks would take too many reads (see the [module docs](super)).

use crate::state::{AdaptiveRule, JobSnapshot, SkewRead, StageDecision, StageRecord};
use crate::{EngineConfig, Error, Result};

use super::coalesce::coalesce;
use super::split::split_producers;
use super::{committed, human_bytes, slice_bytes};

/// A combining task regroups about this many times `shuffle_bytes_per_task`: it only
/// reads, re-slices and writes.
pub(super) const COMBINE_FACTOR: u64 = 4;

/// The combine rule (see the [module docs](self)) for combining stage `stage` over the
/// hash shuffle of stage `input`.
pub(super) fn combine(
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
        size: Default::default(),
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
