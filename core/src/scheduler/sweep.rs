//! The sweep ([`Scheduler::sweep`]): the timer that finds attempts past their deadline
//! and fails them (so they are retried), then advances every active job; bounded in
//! time, resumable from a bookmark.

use std::collections::HashMap;
use std::time::Instant;

use tracing::warn;

use crate::dispatch::{InvocationState, TaskSpec};
use crate::state::{JobSnapshot, StageState, TaskState};
use crate::time::now_ms;
use crate::Result;

use super::*;

/// Active jobs read per page by the sweep.
const SWEEP_PAGE: usize = 100;

impl Scheduler {
    /// Looks at active jobs, from where the last sweep stopped, for attempts past their
    /// deadline (failing them, so they are retried) and advances each job (which re-sends
    /// throttled and unconfirmed dispatches and enforces deadlines). One job's failure
    /// does not stop the others, nor does one whose calls hang (it gets what is left of
    /// the budget); past `sweep_budget` the sweep saves where it stopped.
    pub async fn sweep(&self) -> Result<SweepReport> {
        let started = Instant::now();
        let store = &self.services.store;
        let mut report = SweepReport::default();
        let mut after = store.sweep_cursor().await?;
        loop {
            let page = store.active_jobs(after.as_deref(), SWEEP_PAGE).await?;
            if page.is_empty() {
                store.set_sweep_cursor(None).await?;
                return Ok(report);
            }
            for job_id in page {
                if started.elapsed() >= self.config().sweep_budget {
                    store.set_sweep_cursor(after.as_deref()).await?;
                    report.incomplete = true;
                    warn!(
                        jobs = report.jobs,
                        "sweep out of time; the next one continues"
                    );
                    return Ok(report);
                }
                report.jobs += 1;
                // A job whose store or invoke calls hang gets what is left of the budget,
                // not the whole run: past it the sweep moves on (and the bookmark past
                // the job), so the next run does not stop at the same job again.
                let left = self.config().sweep_budget.saturating_sub(started.elapsed());
                match tokio::time::timeout(left, self.sweep_job(&job_id)).await {
                    Ok(Ok(lost)) => report.lost_attempts += lost,
                    Ok(Err(e)) => {
                        warn!(job_id = %job_id, error = %e, "sweep could not handle job");
                        report.errors.push((job_id.clone(), e.to_string()));
                    }
                    Err(_) => {
                        warn!(job_id = %job_id, "sweep of job out of time; skipped this run");
                        report.errors.push((
                            job_id.clone(),
                            format!(
                                "not handled within the sweep's budget of {:?}",
                                self.config().sweep_budget
                            ),
                        ));
                    }
                }
                after = Some(job_id);
            }
        }
    }

    /// Whether an ended job may leave the active jobs: at once, but a write only once no
    /// attempt of it can still be running (the task timeout after its end), after the
    /// last clean-up of its files ([`crate::write::last_clean_up`]) and of its objects: a
    /// late attempt (a delayed or repeated delivery, which runs longer in a write) that
    /// put its output after the job's clean-up and died before deleting it left one.
    async fn write_settled(&self, snapshot: &crate::state::JobSnapshot) -> bool {
        let job = &snapshot.job;
        if job.write.is_none() {
            return true;
        }
        let timeout = self.config().task_timeout.as_millis() as u64;
        if now_ms() <= job.finished_ms.unwrap_or(0).saturating_add(timeout) {
            return false;
        }
        let deleted = crate::write::last_clean_up(&self.services, snapshot).await;
        if deleted > 0 {
            warn!(job_id = %job.job_id, files = deleted,
                "deleted files of attempts that ended after their write did");
        }
        let keep = match job.state {
            crate::state::JobState::Succeeded => super::step::result_objects(snapshot),
            _ => Vec::new(),
        };
        self.cleanup(&job.job_id, super::step::job_shards(snapshot), &keep)
            .await;
        true
    }

    /// One job of the sweep: fail attempts past their deadline, then advance.
    async fn sweep_job(&self, job_id: &str) -> Result<usize> {
        let store = &self.services.store;
        let snapshot = match store.load_job(job_id).await? {
            Some(s) if !s.job.state.is_terminal() => s,
            Some(s) if !self.write_settled(&s).await => return Ok(0),
            _ => {
                store.remove_active(job_id).await?;
                return Ok(0);
            }
        };
        let now = now_ms();
        let timeout = self.config().task_timeout.as_millis() as u64;
        let mut lost = 0;
        for (task, dispatched) in in_flight(&snapshot) {
            let started = match self.services.invoker.state(&task) {
                InvocationState::Queued => continue,
                InvocationState::Running { since_ms } => since_ms,
                InvocationState::Unknown => dispatched,
            };
            if now.saturating_sub(started) <= timeout {
                continue;
            }
            let error = format!(
                "no completion record {}s after the task started: the invocation was lost or crashed",
                timeout / 1000
            );
            let failure = task.failure(error, true, self.services.expires_at());
            if store.fail_attempt(&failure).await? {
                warn!(%task, "attempt presumed lost");
                lost += 1;
            }
        }
        self.advance(job_id).await?;
        Ok(lost)
    }
}

/// Unfinished attempts of dispatched stages with their dispatch time. Attempt 1 of a
/// task with no item yet was dispatched with its stage.
fn in_flight(snapshot: &JobSnapshot) -> Vec<(TaskSpec, u64)> {
    let items: HashMap<(u32, u32), &crate::state::TaskRecord> = snapshot
        .tasks
        .iter()
        .map(|t| ((t.stage, t.partition), t))
        .collect();
    let mut out = Vec::new();
    for stage in &snapshot.stages {
        let (StageState::Dispatched, Some(stage_dispatched)) = (stage.state, stage.dispatched_ms)
        else {
            continue;
        };
        if snapshot.stage_complete(stage) {
            continue;
        }
        for partition in 0..stage.tasks {
            let (attempt, dispatched) = match items.get(&(stage.stage, partition)) {
                None => (1, stage_dispatched),
                Some(t) if t.state == TaskState::Running => {
                    (t.attempt, t.dispatched_ms.unwrap_or(stage_dispatched))
                }
                Some(_) => continue,
            };
            out.push((
                TaskSpec {
                    job_id: stage.job_id.clone(),
                    stage: stage.stage,
                    partition,
                    attempt,
                },
                dispatched,
            ));
        }
    }
    out
}
