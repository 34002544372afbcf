//! The broadcast rule (a join switch, [`crate::plan::switch`]): at the large side's
//! claim, a partitioned join whose small side committed little switches to reading it
//! whole in every task; the join's own stage then combines marks, or runs no tasks.

use crate::state::{AdaptiveRule, JobSnapshot, StageDecision, StageRecord, SwitchMode};
use crate::{EngineConfig, Error, Result};

use super::sizing::plural;
use super::{committed, human_bytes, total_bytes};

/// The switch rule on the large side of a switchable join ([`super::switch`]): once
/// its small side is committed, at most `max_broadcast_bytes` switches the join to a
/// broadcast of it — this stage's tasks read it whole and mark its rows.
pub(super) fn switch_join(
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
    // costs less than shuffling this stage's rows, taken as `broadcast_scan_percent` of
    // what it scans.
    let scanned: u64 = stage.scan_bytes.iter().sum();
    let broadcast = bytes.saturating_mul(u64::from(sized.tasks.max(1)));
    let percent = u64::from(config.broadcast_scan_percent);
    if scanned > 0 && broadcast > scanned.saturating_mul(percent) / 100 {
        return partitioned(format!(
            "stage {} ({}) read by each of {} tasks ({}) would outweigh shuffling this \
             stage's rows ({percent}% of its {} scan, broadcast_scan_percent)",
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
        SwitchMode::Aggregate => format!(
            "joins its own rows to it and aggregates them partially for stage {} (which \
             finishes the aggregate)",
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

/// The decision of a stage whose join was switched at its large side's claim: one task
/// combining the large side's marks over the small side, read whole; no task, when the
/// large side ran the whole stage; or its tasks sized from the partial states the large
/// side wrote, when it ran the join and an aggregate's partial form.
pub(super) fn switched_join(
    stage: &StageRecord,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> Result<Option<StageDecision>> {
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
    if switch.mode == SwitchMode::Aggregate {
        // Sized as a stage reading the states alone, which is all its tasks read.
        let mut reads = stage.clone();
        reads.inputs.retain(|i| i.stage != switch.small);
        let sized = super::size(&reads, snapshot, config)?;
        return Ok(Some(StageDecision {
            rule: AdaptiveRule::Broadcast,
            switched: Some(switch),
            input_rows: large.iter().map(|o| o.rows).sum(),
            input_bytes: large_bytes,
            note: format!(
                "{}; its join switched from partitioned to broadcast: the {} task{} of stage {} \
                 each read stage {} ({}) whole, joined their rows to it and aggregated them \
                 partially; this stage finishes the aggregate over their states ({}), \
                 hash-shuffled on the group keys",
                sized.note,
                large.len(),
                plural(large.len()),
                switch.large,
                switch.small,
                human_bytes(small_bytes),
                human_bytes(large_bytes)
            ),
            ..sized
        }));
    }
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
        size: Default::default(),
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
                plural(large.len()),
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
            plural(large.len()),
            human_bytes(large_bytes)
        ),
        ..decision
    }))
}
