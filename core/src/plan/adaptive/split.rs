//! The split rule: a partition far larger than the others runs as several tasks, each
//! reading some producers of its largest splittable input.

use crate::state::{SkewRead, StageRecord};
use crate::{EngineConfig, Result};

use super::human_bytes;
use super::sizing::HashInput;

/// An input to split a partition by, its bytes of the partition, and the producer
/// groups of the tasks it is split into.
type SplitBy = (u32, u64, Vec<(u32, u32)>);

/// A partition is skewed when it holds more than this many times the median partition's
/// bytes (and more than the target per task).
pub(super) const SKEW_FACTOR: u64 = 4;

/// At most this many tasks share one skewed partition.
pub(super) const MAX_SPLIT: usize = 32;

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

/// How a stage's coalesced partitions run once skewed ones are split.
pub(super) struct Split {
    /// Each task's first partition (a split partition is the start of several tasks).
    pub task_starts: Vec<u32>,
    /// The producers each task of a split partition reads.
    pub skew: Vec<SkewRead>,
    /// `partition p (size) over n tasks by stage s's producers`, per split partition.
    pub notes: Vec<String>,
    /// Bytes read more than once: a split partition's other inputs, by each extra task.
    pub extra_bytes: u64,
}

/// The split rule over coalesced `starts`: a partition alone in its task, far above the
/// target and the median, is split over several tasks, each reading some producers of
/// its largest splittable input — when the stage writes a hash shuffle (its consumers
/// read any number of producers).
pub(super) fn split_skewed(
    stage: &StageRecord,
    config: &EngineConfig,
    per_partition: &[u64],
    starts: &[u32],
    hash_inputs: &[HashInput],
) -> Result<Split> {
    let partitions = stage.tasks;
    let splittable: Vec<_> = hash_inputs
        .iter()
        .filter(|(_, splittable, _)| *splittable && stage.output_partitions > 1)
        .collect();
    let mut median = per_partition.to_vec();
    median.sort_unstable();
    let median = median[median.len() / 2];
    let mut split = Split {
        task_starts: Vec::with_capacity(starts.len()),
        skew: Vec::new(),
        notes: Vec::new(),
        extra_bytes: 0,
    };
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(partitions);
        let bytes = per_partition[start as usize];
        let skewed = end == start + 1
            && bytes > config.shuffle_bytes_per_task
            && bytes > median.saturating_mul(SKEW_FACTOR);
        let pieces = if skewed {
            largest_split(&splittable, start, bytes, config)?
        } else {
            None
        };
        match pieces {
            Some((input, own, groups)) => {
                split.extra_bytes += (bytes - own) * (groups.len() as u64 - 1);
                split.notes.push(format!(
                    "partition {start} ({}) over {} tasks by stage {input}'s producers",
                    human_bytes(bytes),
                    groups.len()
                ));
                for producers in groups {
                    split.skew.push(SkewRead {
                        task: split.task_starts.len() as u32,
                        stage: input,
                        producers,
                    });
                    split.task_starts.push(start);
                }
            }
            None => split.task_starts.push(start),
        }
    }
    Ok(split)
}

/// For skewed partition `start` of `bytes`: its largest splittable input, that input's
/// bytes of the partition, and the producer groups to split it by (`None` when it
/// cannot be split into more than one).
fn largest_split(
    splittable: &[&HashInput],
    start: u32,
    bytes: u64,
    config: &EngineConfig,
) -> Result<Option<SplitBy>> {
    let candidates = splittable
        .iter()
        .map(|(s, _, outputs)| {
            let slices: Vec<u64> = outputs
                .iter()
                .map(|o| o.slice(start as usize).map(|r| r.end - r.start))
                .collect::<Result<_>>()?;
            Ok((*s, slices))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(candidates
        .into_iter()
        .max_by_key(|(s, slices)| (slices.iter().sum::<u64>(), std::cmp::Reverse(*s)))
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
        .filter(|(_, _, groups)| groups.len() > 1))
}
