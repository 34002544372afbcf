//! Speculative attempts for stragglers, as Starling does (Perron et al., SIGMOD 2020):
//! one slow invocation (a cold start, a slow S3 GET, a noisy neighbour) should not set
//! the pace of its stage. Once half of a stage's tasks have committed, a task that has
//! been running `speculation_percent`% of their median run time (and at least
//! `speculation_floor`) gets a second attempt beside it. The first commit wins — the
//! conditional commit already makes the other harmless — and the other stops at its next
//! batch ([`crate::executor`]). Each task is speculated at most once.
//!
//! Nothing wakes the scheduler while a stage runs, so the step that dispatches a stage
//! asks for a wake-up after the floor, and each check asks for the next one: when the
//! first candidate becomes due, or (no median yet) after half the time the stage has run
//! so far, so that a long stage is checked a logarithmic number of times.

use crate::config::EngineConfig;
use crate::dispatch::InvocationState;
use crate::state::{JobSnapshot, StageRecord, TaskState};

/// What a check found for one stage.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Check {
    /// Tasks to speculate now: `(partition, the new attempt)`.
    pub due: Vec<(u32, u32)>,
    /// When to check again (ms since epoch), if anything may still become due.
    pub next_ms: Option<u64>,
}

/// The median of the committed tasks' run times, once at least half of `stage`'s tasks
/// have committed.
fn median_run_ms(snapshot: &JobSnapshot, stage: &StageRecord) -> Option<u64> {
    let mut runs: Vec<u64> = snapshot
        .tasks_of(stage.stage)
        .filter(|t| t.state == TaskState::Succeeded)
        .filter_map(|t| t.output.as_ref())
        .map(|o| o.finished_ms.saturating_sub(o.started_ms))
        .collect();
    if runs.is_empty() || (runs.len() as u32) * 2 < stage.tasks {
        return None;
    }
    runs.sort_unstable();
    Some(runs[runs.len() / 2])
}

/// The stragglers of a dispatched, unfinished `stage` at `now`. `state` tells whether an
/// attempt has started (embedded, which queues tasks for its slots) or not known (Lambda,
/// where a task runs from its dispatch).
pub(super) fn check(
    snapshot: &JobSnapshot,
    stage: &StageRecord,
    now: u64,
    config: &EngineConfig,
    state: impl Fn(u32, u32) -> InvocationState,
) -> Check {
    let Some(dispatched) = stage.dispatched_ms else {
        return Check::default();
    };
    if !config.speculation || stage.tasks < 2 || snapshot.stage_complete(stage) {
        return Check::default();
    }
    let floor = config.speculation_floor.as_millis() as u64;
    let Some(median) = median_run_ms(snapshot, stage) else {
        // No median yet: look again after half the time the stage has run, at least the
        // floor.
        let ran = now.saturating_sub(dispatched);
        return Check {
            due: Vec::new(),
            next_ms: Some(now + (ran / 2).max(floor)),
        };
    };
    let after = (median * u64::from(config.speculation_percent) / 100).max(floor);
    let items: std::collections::HashMap<u32, &crate::state::TaskRecord> = snapshot
        .tasks_of(stage.stage)
        .map(|t| (t.partition, t))
        .collect();
    let mut out = Check::default();
    for partition in 0..stage.tasks {
        // The running attempt and since when it was sent.
        let (attempt, sent) = match items.get(&partition) {
            None => (1, dispatched),
            Some(t) if t.state == TaskState::Running && t.speculative.is_none() => {
                (t.attempt, t.dispatched_ms.unwrap_or(dispatched))
            }
            // Succeeded, failed (the retry path's), throttled (not running), or already
            // speculated.
            Some(_) => continue,
        };
        let since = match state(partition, attempt) {
            InvocationState::Queued => continue,
            InvocationState::Running { since_ms } => since_ms,
            InvocationState::Unknown => sent,
        };
        let at = since + after;
        if at <= now {
            out.due.push((partition, attempt + 1));
        } else {
            out.next_ms = Some(out.next_ms.map_or(at, |n: u64| n.min(at)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{JobRecord, JobState, StageState, TaskOutput, TaskRecord};
    use std::time::Duration;

    fn snapshot(tasks: u32, finished: &[(u32, u64)]) -> JobSnapshot {
        let stage = StageRecord {
            job_id: "j".into(),
            stage: 0,
            state: StageState::Dispatched,
            tasks,
            output_partitions: 1,
            inputs: vec![],
            summary: String::new(),
            scan_bytes: vec![],
            switch: None,
            combines: None,
            dispatched_ms: Some(1_000),
            confirmed_ms: Some(1_000),
            decision: None,
            expires_at: 0,
        };
        let tasks = finished
            .iter()
            .map(|&(partition, run)| {
                let mut t = TaskRecord::new("j", 0, partition, TaskState::Succeeded, 1, 0);
                t.output = Some(TaskOutput {
                    attempt: 1,
                    object: String::new(),
                    ends: vec![0],
                    rows: 0,
                    bytes: 0,
                    started_ms: 1_000,
                    finished_ms: 1_000 + run,
                    metrics: vec![],
                    requests: Default::default(),
                    handoff: None,
                    cpu: None,
                    written: None,
                });
                t
            })
            .collect();
        JobSnapshot {
            job: JobRecord {
                job_id: "j".into(),
                sql: String::new(),
                kind: crate::state::JobKind::Query,
                state: JobState::Running,
                stage_count: 1,
                result_schema: vec![],
                owner: String::new(),
                created_ms: 0,
                deadline_ms: None,
                finished_ms: None,
                error: None,
                requests: Default::default(),
                task_limit: None,
                write: None,
                expires_at: 0,
            },
            stages: vec![stage],
            tasks,
            counters: vec![],
        }
    }

    fn config() -> EngineConfig {
        EngineConfig {
            speculation_floor: Duration::from_millis(500),
            ..EngineConfig::default()
        }
    }

    #[test]
    fn stragglers_past_the_median_are_speculated_once_half_have_committed() {
        // 4 tasks, 1 done: no median yet; look again after the floor.
        let s = snapshot(4, &[(0, 1_000)]);
        let c = check(&s, &s.stages[0], 3_000, &config(), |_, _| {
            InvocationState::Unknown
        });
        assert_eq!(c.due, vec![]);
        assert_eq!(c.next_ms, Some(3_000 + 1_000));
        // 2 of 4 done in 1 s: the others are due at 1.5 s from their start.
        let s = snapshot(4, &[(0, 1_000), (1, 1_000)]);
        let c = check(&s, &s.stages[0], 2_400, &config(), |_, _| {
            InvocationState::Unknown
        });
        assert_eq!((c.due, c.next_ms), (vec![], Some(2_500)));
        let c = check(&s, &s.stages[0], 2_500, &config(), |_, _| {
            InvocationState::Unknown
        });
        assert_eq!(c.due, vec![(2, 2), (3, 2)]);
        // Queued tasks have not started; a later start is due later.
        let c = check(&s, &s.stages[0], 2_500, &config(), |p, _| match p {
            2 => InvocationState::Queued,
            _ => InvocationState::Running { since_ms: 2_000 },
        });
        assert_eq!((c.due, c.next_ms), (vec![], Some(3_500)));
    }

    #[test]
    fn a_task_is_speculated_once_and_the_floor_holds() {
        let mut s = snapshot(4, &[(0, 100), (1, 100)]);
        // 150% of 100 ms is below the 500 ms floor.
        let c = check(&s, &s.stages[0], 1_400, &config(), |_, _| {
            InvocationState::Unknown
        });
        assert_eq!((c.due, c.next_ms), (vec![], Some(1_500)));
        let mut speculated = TaskRecord::new("j", 0, 2, TaskState::Running, 2, 0);
        speculated.speculative = Some(2);
        s.tasks.push(speculated);
        let c = check(&s, &s.stages[0], 1_500, &config(), |_, _| {
            InvocationState::Unknown
        });
        assert_eq!(c.due, vec![(3, 2)]);
        let mut off = config();
        off.speculation = false;
        assert_eq!(
            check(&s, &s.stages[0], 9_000, &off, |_, _| {
                InvocationState::Unknown
            }),
            Check::default()
        );
    }
}
