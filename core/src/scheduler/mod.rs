//! The stateless scheduler: every call reads what it needs from the job store, decides,
//! writes with conditional writes and dispatches; nothing about any job survives in
//! memory between calls, so any number of scheduler invocations may run at once and any
//! of them may die at any line: the next change record or sweep re-drives the job.
//!
//! - [`Scheduler::submit`] (`submit.rs`, statements in `statements.rs`): plan the SQL,
//!   record job, stages and plans; dispatch the leaf stages.
//! - [`Scheduler::on_records`] (here): a batch of change records -> advance each job named.
//! - [`Scheduler::advance`] (`step.rs`): the one decision step (retries, re-sends,
//!   completion, claims), idempotent.
//! - [`Scheduler::sweep`] (`sweep.rs`): the timer — find attempts past their deadline and
//!   fail them, then advance every active job (which re-sends throttled and unconfirmed
//!   dispatches and enforces deadlines); bounded in time, resumable.
//! - [`Scheduler::dispatch_range`] (`tree.rs`): the invocation tree of wide stages;
//!   `invoke.rs` sends tasks and records what became of each invocation.
//!
//! Dispatch is confirmed: a claimed stage records `confirmed_ms` once every invocation was
//! accepted (or deferred after a throttle), a retried attempt records it on its task.
//! Whatever a dead dispatcher left unconfirmed past `dispatch_deadline` is sent again —
//! duplicates are harmless, the commit is conditional.

mod invoke;
mod speculation;
mod statements;
mod step;
mod submit;
mod sweep;
mod tree;

pub use invoke::MAX_CONTEXT_BYTES;
pub use tree::{is_tree, tree_dispatchers};

use std::collections::BTreeSet;
use std::sync::Arc;

use tracing::warn;

use crate::access::Caller;
use crate::dispatch::{DispatchContext, ExecutorSize, Handoff, TaskSpec};
use crate::state::{ChangeRecord, JobSnapshot, JobState, StageRecord};
use crate::time::now_ms;
use crate::{EngineConfig, Error, Result, Services};

use invoke::{context_for, with_handoff};
use step::job_shards;

/// What a submission created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// The new job's id.
    pub job_id: String,
    /// Its state right after submission (statements finish at once).
    pub state: JobState,
}

/// Who submits, and with which limits.
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    /// The submitting caller: the job's owner.
    pub caller: Caller,
    /// A time limit for this query, at most the deployment's `max_query_time`.
    pub max_seconds: Option<f64>,
}

/// What a sweep found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Active jobs looked at.
    pub jobs: usize,
    /// Attempts declared lost (past their deadline) and failed, to be retried.
    pub lost_attempts: usize,
    /// Jobs the sweep could not handle, with why; the sweep went on with the others.
    pub errors: Vec<(String, String)>,
    /// The time budget ran out: the next sweep continues after the last job looked at.
    pub incomplete: bool,
}

/// The scheduler. Cheap to create: make a fresh one per event if you like — it holds
/// nothing but the shared [`Services`].
#[derive(Debug, Clone)]
pub struct Scheduler {
    services: Services,
}

/// A task to invoke, with what the dispatcher knows of it.
#[derive(Debug, Clone)]
struct PendingInvocation {
    task: TaskSpec,
    /// What the task is handed with its invocation (a claimed stage's first dispatch).
    context: Option<Arc<DispatchContext>>,
    /// Throttled invocations so far (sizes the back-off of the next one).
    throttles: u32,
    /// Record the accepted invocation on the task item (retries and re-sends; a
    /// stage's first dispatch is confirmed on the stage instead).
    confirm: bool,
    /// The function it runs on: its stage's choice.
    size: ExecutorSize,
}

impl Scheduler {
    /// A scheduler over `services`.
    pub fn new(services: Services) -> Self {
        Self { services }
    }

    fn config(&self) -> &EngineConfig {
        &self.services.config
    }

    /// Handles a batch of change records (the stream): advances every job that one of
    /// the records wakes, once each, in order of first appearance. Fails with the first
    /// error after trying every job.
    pub async fn on_records(&self, records: &[ChangeRecord]) -> Result<()> {
        match self.advance_records(records).await.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// Like [`Scheduler::on_records`], returning the jobs that could not be advanced
    /// with their errors (so a stream consumer can report exactly their records).
    pub async fn advance_records(&self, records: &[ChangeRecord]) -> Vec<(String, Error)> {
        let mut seen = BTreeSet::new();
        let mut jobs = Vec::new();
        for r in records.iter().filter(|r| r.wakes_scheduler()) {
            if seen.insert(r.job_id().to_string()) {
                jobs.push(r.job_id().to_string());
            }
        }
        // The stream's own delivery is no request of ours (its cost is the polling delay);
        // the commit that produced the record was one.
        let origin = Handoff {
            calls: 1,
            stream: true,
        };
        let mut failed = Vec::new();
        for job in jobs {
            if let Err(e) = self.advance_with(&job, Some(origin)).await {
                warn!(job_id = %job, error = %e, "advancing job failed");
                failed.push((job, e));
            }
        }
        failed
    }

    /// The fast path: an executor saw its stage complete.
    pub async fn wake(&self, job_id: &str) -> Result<()> {
        self.advance(job_id).await
    }

    /// An invocation of `task` died without reporting (crash, timeout, dropped event):
    /// records the failed attempt and advances the job, which retries it.
    pub async fn on_task_lost(&self, task: &TaskSpec, error: &str) -> Result<()> {
        let failure = task.failure(error.to_string(), true, self.services.expires_at());
        self.services.store.fail_attempt(&failure).await?;
        self.advance(&task.job_id).await
    }

    /// Cancels a job the caller may see: it stops dispatching at once and its running
    /// tasks stop at their next batch. A job that already ended keeps its state and its
    /// result. Returns the job's state afterwards.
    pub async fn cancel(&self, job_id: &str, caller: &Caller) -> Result<JobState> {
        let store = &self.services.store;
        let job = store
            .get_job(job_id)
            .await?
            .filter(|j| self.config().access.can_read(caller, &j.owner))
            .ok_or_else(|| Error::NotFound(format!("query {job_id}")))?;
        if job.state.is_terminal() {
            return Ok(job.state);
        }
        let cancelled = store
            .finish_job(
                job_id,
                JobState::Cancelled,
                Some("cancelled by request".into()),
                now_ms(),
            )
            .await?;
        if cancelled {
            let shards = match store.load_job(job_id).await {
                Ok(Some(snapshot)) => {
                    let job = &snapshot.job;
                    let (error, ended) = (job.error.clone(), job.finished_ms.unwrap_or_default());
                    self.job_ended(&snapshot, JobState::Cancelled, error, ended);
                    job_shards(&snapshot)
                }
                // Unknown stages: as many shards as the widest stage allowed may use.
                _ => {
                    let widest = self.config().stage_width() as u32;
                    crate::shuffle::shards_for(widest, widest)
                }
            };
            self.discard_write(&job).await;
            self.keep_write_active(&job).await;
            self.cleanup(job_id, shards, &[]).await;
            return Ok(JobState::Cancelled);
        }
        // It ended meanwhile (a success racing the cancel): leave it and its result be.
        Ok(store
            .get_job(job_id)
            .await?
            .map_or(JobState::Cancelled, |j| j.state))
    }
}

impl PendingInvocation {
    /// A task's first attempt as its stage's dispatch sends it: confirmed on the stage
    /// (or its commit counter), not on a task item.
    fn first(task: TaskSpec, context: Option<Arc<DispatchContext>>, size: ExecutorSize) -> Self {
        Self {
            task,
            context,
            throttles: 0,
            confirm: false,
            size,
        }
    }

    /// An attempt sent again (a retry, a re-send after a throttle or a dead dispatcher):
    /// confirmed on its task item once accepted; on the function its stage was claimed
    /// for (in `snapshot`).
    fn again(task: TaskSpec, throttles: u32, snapshot: &JobSnapshot) -> Self {
        let size = snapshot
            .stages
            .iter()
            .find(|s| s.stage == task.stage)
            .map(StageRecord::size)
            .unwrap_or_default();
        Self {
            task,
            context: None,
            throttles,
            confirm: true,
            size,
        }
    }
}
