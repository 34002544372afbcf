//! The stateless scheduler: every call reads what it needs from the job store, decides,
//! writes with conditional writes and dispatches; nothing about any job survives in
//! memory between calls, so any number of scheduler invocations may run at once and any
//! of them may die at any line: the next change record or sweep re-drives the job.
//!
//! - [`Scheduler::submit`]: plan the SQL, record job, stages; dispatch the leaf stages.
//! - [`Scheduler::on_records`]: a batch of change records -> advance each job named.
//! - [`Scheduler::sweep`]: find tasks past their deadline, fail those attempts (the
//!   retry path then re-dispatches them).

mod statements;

use std::collections::{BTreeSet, HashMap};

use datafusion::logical_expr::LogicalPlan;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use tracing::{debug, info, warn};

use crate::dispatch::TaskSpec;
use crate::plan::{self, StageGraph, StageSplitter};
use crate::shuffle::stage_plan_path;
use crate::state::{
    ChangeRecord, JobKind, JobRecord, JobSnapshot, JobState, StageRecord, StageState, TaskState,
};
use crate::time::now_ms;
use crate::{Error, Result, Services};

/// What a submission created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// The new job's id.
    pub job_id: String,
    /// Its state right after submission (statements finish at once).
    pub state: JobState,
}

/// What a sweep found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Active jobs looked at.
    pub jobs: usize,
    /// Attempts declared lost (past their deadline) and failed, to be retried.
    pub lost_attempts: usize,
}

/// The scheduler. Cheap to create: make a fresh one per event if you like — it holds
/// nothing but the shared [`Services`].
#[derive(Debug, Clone)]
pub struct Scheduler {
    services: Services,
}

impl Scheduler {
    /// A scheduler over `services`.
    pub fn new(services: Services) -> Self {
        Self { services }
    }

    /// Plans `sql` and starts it. Statements (DDL, `SHOW TABLES`, `EXPLAIN`, ...) are
    /// answered here and finish before this returns; queries are cut into stages,
    /// recorded and their first stages dispatched.
    pub async fn submit(&self, sql: &str) -> Result<Submitted> {
        let sql = sql.trim();
        if sql.is_empty() {
            return Err(Error::InvalidInput("empty SQL statement".into()));
        }
        let job_id = uuid::Uuid::new_v4().simple().to_string();
        let span = tracing::info_span!("submit", job = %job_id);
        let _enter = span.enter();
        let state = self
            .services
            .session_state(self.services.config.max_tasks_per_stage);
        crate::catalog::install(&state, self.services.store.as_ref()).await?;
        let logical = state
            .create_logical_plan(sql)
            .await
            .map_err(|e| Error::InvalidInput(e.strip_backtrace().to_string()))?;
        if statements::is_statement(&logical) {
            return statements::run(&self.services, &state, &job_id, sql, logical).await;
        }
        self.start_query(&state, &job_id, sql, &logical).await
    }

    async fn start_query(
        &self,
        state: &datafusion::execution::SessionState,
        job_id: &str,
        sql: &str,
        logical: &LogicalPlan,
    ) -> Result<Submitted> {
        let physical = plan::physical_plan(state, logical, &self.services.config)
            .await
            .map_err(user_planning_error)?;
        let graph = StageSplitter::split(physical).map_err(user_planning_error)?;
        let (job, stages) = self.records(job_id, sql, &graph).await?;
        self.services.store.create_job(&job, &stages, &[]).await?;
        info!(job = %job_id, stages = stages.len(), "job submitted");
        self.advance(job_id).await?;
        let state = self
            .services
            .store
            .get_job(job_id)
            .await?
            .map_or(JobState::Running, |j| j.state);
        Ok(Submitted {
            job_id: job_id.to_string(),
            state,
        })
    }

    /// The job and stage records of a stage graph; large stage plans go to object storage.
    async fn records(
        &self,
        job_id: &str,
        sql: &str,
        graph: &StageGraph,
    ) -> Result<(JobRecord, Vec<StageRecord>)> {
        let expires_at = self.services.expires_at();
        let mut stages = Vec::with_capacity(graph.stages.len());
        for s in &graph.stages {
            let bytes = plan::encode_plan(s.plan.clone()).map_err(user_planning_error)?;
            let (inline, object) = if bytes.len() <= self.services.config.inline_plan_limit {
                (Some(bytes), None)
            } else {
                let path = stage_plan_path(&self.services.shuffle.prefix, job_id, s.id);
                self.services
                    .shuffle_store()?
                    .put(&path, bytes.into())
                    .await?;
                (None, Some(path.to_string()))
            };
            stages.push(StageRecord {
                job_id: job_id.to_string(),
                stage: s.id,
                state: StageState::Pending,
                tasks: s.tasks as u32,
                remaining: s.tasks as u32,
                output_partitions: s.output_partitions as u32,
                inputs: s.inputs.clone(),
                plan: inline,
                plan_object: object,
                summary: s.summary.clone(),
                dispatched_ms: None,
                last_commit_ms: None,
                expires_at,
            });
        }
        let result_schema = graph.final_stage().plan.schema();
        let job = JobRecord {
            job_id: job_id.to_string(),
            sql: sql.to_string(),
            kind: JobKind::Query,
            state: JobState::Running,
            stage_count: stages.len() as u32,
            result_schema: plan::encode_schema(&result_schema)?,
            created_ms: now_ms(),
            finished_ms: None,
            error: None,
            expires_at,
        };
        Ok((job, stages))
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
        let mut failed = Vec::new();
        for job in jobs {
            if let Err(e) = self.advance(&job).await {
                warn!(job = %job, error = %e, "advancing job failed");
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

    /// Cancels a job: it stops dispatching at once and its running tasks stop at their
    /// next batch. Returns the job's state afterwards.
    pub async fn cancel(&self, job_id: &str) -> Result<JobState> {
        let store = &self.services.store;
        let Some(job) = store.get_job(job_id).await? else {
            return Err(Error::NotFound(format!("query {job_id}")));
        };
        if job.state.is_terminal() {
            return Ok(job.state);
        }
        store
            .finish_job(
                job_id,
                JobState::Cancelled,
                Some("cancelled by request".into()),
                now_ms(),
            )
            .await?;
        let state = store
            .get_job(job_id)
            .await?
            .map_or(JobState::Cancelled, |j| j.state);
        self.cleanup(job_id, None).await;
        Ok(state)
    }

    /// Looks at every active job for attempts past their deadline and fails them, then
    /// advances the job (retrying them). Also repairs the active index.
    pub async fn sweep(&self) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        let now = now_ms();
        let timeout = self.services.config.task_timeout.as_millis() as u64;
        for job_id in self.services.store.active_jobs().await? {
            report.jobs += 1;
            let snapshot = match self.services.store.load_job(&job_id).await? {
                Some(s) if !s.job.state.is_terminal() => s,
                _ => {
                    self.services.store.remove_active(&job_id).await?;
                    continue;
                }
            };
            for (task, dispatched) in in_flight(&snapshot) {
                if now.saturating_sub(dispatched) <= timeout {
                    continue;
                }
                let error = format!(
                    "no completion record {}s after dispatch: the invocation was lost or crashed",
                    timeout / 1000
                );
                let failure = task.failure(error, true, self.services.expires_at());
                if self.services.store.fail_attempt(&failure).await? {
                    warn!(%task, "attempt presumed lost");
                    report.lost_attempts += 1;
                }
            }
            if let Err(e) = self.advance(&job_id).await {
                warn!(job = %job_id, error = %e, "sweep could not advance job");
            }
        }
        Ok(report)
    }

    /// The one decision step, idempotent: retry or give up on failed tasks, finish the
    /// job when every stage is complete, claim and dispatch the stages whose inputs are.
    pub async fn advance(&self, job_id: &str) -> Result<()> {
        let store = &self.services.store;
        let Some(snapshot) = store.load_job(job_id).await? else {
            warn!(job = %job_id, "woken for a job that does not exist");
            return Ok(());
        };
        if snapshot.job.state.is_terminal() {
            return Ok(());
        }
        let now = now_ms();
        let config = &self.services.config;
        let mut retries = Vec::new();
        for task in snapshot
            .tasks
            .iter()
            .filter(|t| t.state == TaskState::Failed)
        {
            if task.retryable && task.attempt < config.max_attempts {
                let next = task.attempt + 1;
                if store
                    .start_attempt(
                        job_id,
                        task.stage,
                        task.partition,
                        next,
                        now,
                        self.services.expires_at(),
                    )
                    .await?
                {
                    retries.push(TaskSpec {
                        job_id: job_id.to_string(),
                        stage: task.stage,
                        partition: task.partition,
                        attempt: next,
                    });
                }
            } else {
                let error = format!(
                    "stage {} task {} failed after {} attempt{}: {}",
                    task.stage,
                    task.partition,
                    task.attempt,
                    if task.attempt == 1 { "" } else { "s" },
                    task.error.as_deref().unwrap_or("unknown error")
                );
                if store
                    .finish_job(job_id, JobState::Failed, Some(error.clone()), now)
                    .await?
                {
                    info!(job = %job_id, %error, "job failed");
                    self.cleanup(job_id, None).await;
                }
                return Ok(());
            }
        }
        self.dispatch(retries).await;

        if snapshot.stages.iter().all(StageRecord::is_complete) {
            if store
                .finish_job(job_id, JobState::Succeeded, None, now)
                .await?
            {
                info!(job = %job_id, ms = now.saturating_sub(snapshot.job.created_ms), "job succeeded");
                self.cleanup(job_id, Some(snapshot.job.final_stage())).await;
            }
            return Ok(());
        }
        let complete: BTreeSet<u32> = snapshot
            .stages
            .iter()
            .filter(|s| s.is_complete())
            .map(|s| s.stage)
            .collect();
        for stage in &snapshot.stages {
            let ready = stage.state == StageState::Pending
                && stage.inputs.iter().all(|i| complete.contains(&i.stage));
            if !ready || !store.claim_stage(job_id, stage.stage, now).await? {
                continue;
            }
            debug!(job = %job_id, stage = stage.stage, tasks = stage.tasks, "stage dispatched");
            let tasks = (0..stage.tasks).map(|partition| TaskSpec {
                job_id: job_id.to_string(),
                stage: stage.stage,
                partition,
                attempt: 1,
            });
            self.dispatch(tasks.collect()).await;
        }
        Ok(())
    }

    /// Invokes the executor for each task, `dispatch_concurrency` at a time. A refused
    /// invocation becomes a failed (retryable) attempt, which re-drives the job.
    async fn dispatch(&self, tasks: Vec<TaskSpec>) {
        let invoker = self.services.invoker.clone();
        let refused: Vec<(TaskSpec, Error)> = futures::stream::iter(tasks)
            .map(|task| {
                let invoker = invoker.clone();
                async move { invoker.run_task(&task).await.err().map(|e| (task, e)) }
            })
            .buffer_unordered(self.services.config.dispatch_concurrency.max(1))
            .filter_map(|r| async move { r })
            .collect()
            .await;
        for (task, error) in refused {
            warn!(%task, %error, "dispatch refused");
            let failure = task.failure(
                format!("dispatch failed: {error}"),
                true,
                self.services.expires_at(),
            );
            if let Err(e) = self.services.store.fail_attempt(&failure).await {
                warn!(%task, error = %e, "could not record refused dispatch");
            }
        }
    }

    /// Deletes a finished job's shuffle objects, keeping the stage `keep` (the result).
    /// Best effort: object storage lifecycle rules catch whatever is left.
    async fn cleanup(&self, job_id: &str, keep: Option<u32>) {
        let Ok(store) = self.services.shuffle_store() else {
            return;
        };
        let deleted = crate::shuffle::delete_job_objects(
            store.as_ref(),
            &self.services.shuffle.prefix,
            job_id,
            keep,
        )
        .await;
        debug!(job = %job_id, objects = deleted, "cleaned up shuffle data");
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
        if stage.is_complete() {
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

/// Planning failures that are the query's fault become 400s with DataFusion's message.
fn user_planning_error(e: Error) -> Error {
    if e.is_user_error() {
        match e {
            Error::DataFusion(df) => Error::InvalidInput(df.strip_backtrace().to_string()),
            other => other,
        }
    } else {
        e
    }
}
