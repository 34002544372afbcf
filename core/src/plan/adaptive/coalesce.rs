//! The coalesce rule's arithmetic: contiguous partitions grouped up to a target, for
//! hash-shuffle partitions and for a scan's partitions alike.

use crate::state::StageRecord;
use crate::EngineConfig;

use super::human_bytes;

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

/// The coalesce rule for a stage that scans (a leaf, or a scan probing broadcast build
/// sides): contiguous plan partitions scanning less than `min_scan_bytes_per_task`
/// together run as one task. `None` when nothing merges.
pub(super) fn size_scan(stage: &StageRecord, config: &EngineConfig) -> Option<(Vec<u32>, String)> {
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
