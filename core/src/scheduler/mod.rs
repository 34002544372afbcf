//! The stateless scheduler: every call reads what it needs from the job store, decides,
//! writes with conditional writes and dispatches; nothing about any job survives in
//! memory between calls, so any number of scheduler invocations may run at once and any
//! of them may die at any line: the next change record or sweep re-drives the job.
//!
//! - [`Scheduler::submit`]: plan the SQL, record job, stages and plans; dispatch the leaf
//!   stages.
//! - [`Scheduler::on_records`]: a batch of change records -> advance each job named.
//! - [`Scheduler::advance`]: the one decision step (retries, re-sends, completion,
//!   claims), idempotent.
//! - [`Scheduler::sweep`]: the timer — find attempts past their deadline and fail them,
//!   then advance every active job (which re-sends throttled and unconfirmed
//!   dispatches and enforces deadlines); bounded in time, resumable.
//!
//! Dispatch is confirmed: a claimed stage records `confirmed_ms` once every invocation was
//! accepted (or deferred after a throttle), a retried attempt records it on its task.
//! Whatever a dead dispatcher left unconfirmed past `dispatch_deadline` is sent again —
//! duplicates are harmless, the commit is conditional.

mod statements;

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::LogicalPlan;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use tracing::{debug, info, warn, Instrument};

use crate::access::Caller;
use crate::dispatch::{
    DispatchContext, DispatchRange, Handoff, InvocationState, JobBrief, TaskInvocation, TaskSpec,
};
use crate::faults::{job_key, FaultKind};
use crate::plan::{self, StageGraph, StageSplitter};
use crate::requests::Tally;
use crate::shuffle::stage_plan_path;
use crate::sql::Verdict;
use crate::state::{
    counter_of, counters_of, ChangeRecord, DispatchConfirmation, JobKind, JobRecord, JobSnapshot,
    JobState, NewJob, PlanRecord, StageDecision, StageRecord, StageState, TaskDeferral, TaskOutput,
    TaskResend, TaskState, COUNTER_TASKS,
};
use crate::time::now_ms;
use crate::{EngineConfig, Error, Result, Services};

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

/// What planning made of a statement ([`Scheduler::submit`]).
enum Planned {
    /// A query's stages and their encoded plans, to record and start.
    Query {
        graph: StageGraph,
        plans: Vec<Vec<u8>>,
        kind: (JobKind, Option<SchemaRef>),
    },
    /// A statement the scheduler answered: its rows, to record as a finished job.
    Rows(SchemaRef, Vec<datafusion::arrow::array::RecordBatch>),
    /// Catalog DDL, to run against the store.
    Catalog(Box<datafusion::execution::SessionState>, LogicalPlan),
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

/// Active jobs read per page by the sweep.
const SWEEP_PAGE: usize = 100;

/// The most a job record may take: a DynamoDB item holds at most 400 KB, names included.
const JOB_ITEM_LIMIT: usize = 390 * 1024;
/// What a job record takes besides its SQL and result schema (ids, states, times).
const JOB_ITEM_OVERHEAD: usize = 2 * 1024;

/// The scheduler. Cheap to create: make a fresh one per event if you like — it holds
/// nothing but the shared [`Services`].
#[derive(Debug, Clone)]
pub struct Scheduler {
    services: Services,
}

/// A task to invoke, with what the dispatcher knows of it.
#[derive(Debug, Clone)]
struct Send {
    task: TaskSpec,
    /// What the task is handed with its invocation (a claimed stage's first dispatch).
    context: Option<Arc<DispatchContext>>,
    /// Throttled invocations so far (sizes the back-off of the next one).
    throttles: u32,
    /// Record the accepted invocation on the task item (retries and re-sends; a
    /// stage's first dispatch is confirmed on the stage instead).
    confirm: bool,
}

impl Scheduler {
    /// A scheduler over `services`.
    pub fn new(services: Services) -> Self {
        Self { services }
    }

    fn config(&self) -> &EngineConfig {
        &self.services.config
    }

    /// Plans `sql` and starts it. Statements (DDL, `SHOW TABLES`, `EXPLAIN`, ...) are
    /// answered here and finish before this returns; queries are cut into stages,
    /// recorded and their first stages dispatched.
    pub async fn submit(&self, sql: &str, options: &SubmitOptions) -> Result<Submitted> {
        let sql = sql.trim();
        if sql.is_empty() {
            return Err(Error::InvalidInput("empty SQL statement".into()));
        }
        if sql.len() > self.config().max_sql_bytes {
            return Err(Error::TooLarge(format!(
                "the SQL text is {} bytes; at most {} are accepted (a job record must fit \
                 in one store item)",
                sql.len(),
                self.config().max_sql_bytes
            )));
        }
        let time_limit = self.time_limit(options.max_seconds)?;
        if let Some(retry_after) = self.services.invoker.saturated() {
            return Err(Error::Overloaded {
                message: "too many tasks are waiting for a function slot; try again shortly".into(),
                retry_after,
            });
        }
        crate::sql::check_text(sql, self.config())?;
        let submitted_ms = now_ms();
        let job_id = uuid::Uuid::new_v4().simple().to_string();
        let span = tracing::info_span!("submit", job = %job_id);
        // Planning's requests (the catalog, table files, large plans) are counted and
        // recorded on the job.
        let tally = Tally::new();
        let counted = Scheduler::new(self.services.counted(&tally, None)?);
        // Planning runs on a thread of its own (a deep statement cannot exhaust this
        // thread's stack) within a time budget; nothing is recorded until it is done.
        let (budget, setting) = if time_limit < self.config().max_planning_time {
            (time_limit, "the query's time limit, max_seconds")
        } else {
            (self.config().max_planning_time, "max_planning_seconds")
        };
        let planner = counted.clone();
        let (text, planning_span) = (sql.to_string(), span.clone());
        let deadline = tokio::time::Instant::now() + budget;
        let planned = crate::sql::off_thread(budget, setting, move || {
            async move { planner.plan(&text, deadline).await.map_err(Error::planning) }
                .instrument(planning_span)
        })
        .await?;
        async {
            match planned {
                Planned::Query { graph, plans, kind } => {
                    counted
                        .start_query(
                            &job_id,
                            sql,
                            graph,
                            plans,
                            options,
                            (submitted_ms, time_limit),
                            kind,
                            &tally,
                        )
                        .await
                }
                Planned::Rows(schema, batches) => {
                    statements::record_result(
                        &self.services,
                        &job_id,
                        sql,
                        &options.caller,
                        schema,
                        &batches,
                    )
                    .await
                }
                Planned::Catalog(state, logical) => {
                    statements::catalog(&self.services, &state, &job_id, sql, &logical, options)
                        .await
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Parses, checks and plans `sql` (see [`crate::sql`]): a query as far as its
    /// encoded stages, a statement the scheduler answers as its rows (explains and
    /// catalog reads, bounded by `deadline`), catalog DDL as its plan. Runs on a planning
    /// thread.
    async fn plan(&self, sql: &str, deadline: tokio::time::Instant) -> Result<Planned> {
        let mut state = self
            .services
            .session_state(self.config().max_tasks_per_stage);
        // The statement's start time: what now(), current_date() and their kin fold to
        // while planning (unset, they stay functions that cannot run in a task).
        state.mark_start_execution();
        crate::catalog::install(&state, &self.services).await?;
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state
            .sql_to_statement(sql, &dialect)
            .map_err(|e| Error::InvalidInput(e.strip_backtrace().to_string()))?;
        crate::sql::measure(&statement, self.config())?;
        let logical = state
            .statement_to_plan(statement)
            .await
            .map_err(|e| Error::InvalidInput(e.strip_backtrace().to_string()))?;
        match crate::sql::verdict(&logical)? {
            Verdict::Query(query) => self.plan_query(&state, query, (JobKind::Query, None)).await,
            // EXPLAIN ANALYZE runs its query like any other, its tasks recording metrics.
            Verdict::Analyze(query) => {
                let schema = Arc::new(logical.schema().as_arrow().clone());
                self.plan_query(&state, query, (JobKind::Analyze, Some(schema)))
                    .await
            }
            Verdict::Explain(query) => {
                let (schema, rows) = statements::explain(&self.services, &state, query).await?;
                Ok(Planned::Rows(schema, rows))
            }
            Verdict::Metadata => {
                let (schema, rows) =
                    statements::metadata(&self.services, &state, &logical, deadline).await?;
                Ok(Planned::Rows(schema, rows))
            }
            Verdict::Catalog => Ok(Planned::Catalog(Box::new(state), logical)),
        }
    }

    /// Plans a query's stages and encodes their plans, within the per-query caps.
    async fn plan_query(
        &self,
        state: &datafusion::execution::SessionState,
        logical: &LogicalPlan,
        kind: (JobKind, Option<SchemaRef>),
    ) -> Result<Planned> {
        let physical = plan::physical_plan(state, logical, self.config())
            .await
            .map_err(user_planning_error)?;
        let graph = StageSplitter::split(physical, self.config()).map_err(user_planning_error)?;
        self.check_caps(&graph)?;
        let plans = graph
            .stages
            .iter()
            .map(|s| plan::encode_plan(s.plan.clone()).map_err(user_planning_error))
            .collect::<Result<Vec<_>>>()?;
        Ok(Planned::Query { graph, plans, kind })
    }

    /// Refuses a query with more stages or tasks than one query may have.
    fn check_caps(&self, graph: &StageGraph) -> Result<()> {
        let config = self.config();
        let stages = graph.stages.len();
        if stages > config.max_stages_per_query {
            return Err(Error::InvalidInput(format!(
                "the query needs {stages} stages; one query may have at most {} \
                 (max_stages_per_query): fewer UNION branches or joins per statement",
                config.max_stages_per_query
            )));
        }
        let tasks: usize = graph.stages.iter().map(|s| s.tasks).sum();
        if tasks > config.max_tasks_per_query {
            return Err(Error::InvalidInput(format!(
                "the query is planned as {tasks} tasks; one query may have at most {} \
                 (max_tasks_per_query): read less data per statement",
                config.max_tasks_per_query
            )));
        }
        Ok(())
    }

    /// The time limit of a query: the request's (if any) within the deployment's.
    fn time_limit(&self, asked: Option<f64>) -> Result<std::time::Duration> {
        let max = self.config().max_query_time;
        match asked {
            None => Ok(max),
            Some(s) if s.is_finite() && s > 0.0 && s <= max.as_secs_f64() => {
                Ok(std::time::Duration::from_secs_f64(s))
            }
            Some(s) => Err(Error::InvalidInput(format!(
                "max_seconds must be a number of seconds above 0 and at most {} (this \
                 deployment's max_query_seconds), not {s}",
                max.as_secs()
            ))),
        }
    }

    /// Records and starts a planned query; `kind` says whether it is a plain query or an
    /// `EXPLAIN ANALYZE` (with the schema of its rendered result).
    #[allow(clippy::too_many_arguments)]
    async fn start_query(
        &self,
        job_id: &str,
        sql: &str,
        graph: StageGraph,
        plans: Vec<Vec<u8>>,
        options: &SubmitOptions,
        limits: (u64, std::time::Duration),
        kind: (JobKind, Option<SchemaRef>),
        tally: &Tally,
    ) -> Result<Submitted> {
        let mut new = self
            .records(job_id, sql, &graph, plans, &options.caller, limits, kind)
            .await?;
        new.job.requests = tally.counts();
        self.services
            .faults
            .crash_point(FaultKind::SchedulerCrashMidSubmit, &job_key(sql))?;
        self.services.store.create_job(&new).await?;
        info!(job = %job_id, stages = new.stages.len(), "job submitted");
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

    /// The records of a new job; stage plans too large for an item go to object storage.
    #[allow(clippy::too_many_arguments)]
    async fn records(
        &self,
        job_id: &str,
        sql: &str,
        graph: &StageGraph,
        encoded: Vec<Vec<u8>>,
        caller: &Caller,
        (created_ms, time_limit): (u64, std::time::Duration),
        (kind, result_schema): (JobKind, Option<SchemaRef>),
    ) -> Result<NewJob> {
        let expires_at = self.services.expires_at();
        // The job item holds the SQL and the result schema (base64): refuse what cannot
        // fit in one store item before anything is written.
        let schema = result_schema.unwrap_or_else(|| graph.final_stage().plan.schema());
        let result_schema = plan::encode_schema(&schema)?;
        let item_bytes = sql.len() + result_schema.len().div_ceil(3) * 4 + JOB_ITEM_OVERHEAD;
        if item_bytes > JOB_ITEM_LIMIT {
            return Err(Error::TooLarge(format!(
                "the query's SQL text ({} bytes) and result schema ({} columns, {} bytes \
                 encoded) do not fit in one job record (at most {} KiB): select fewer or \
                 shorter-named columns",
                sql.len(),
                schema.fields().len(),
                result_schema.len(),
                JOB_ITEM_LIMIT / 1024
            )));
        }
        let mut stages = Vec::with_capacity(graph.stages.len());
        let mut plans = Vec::with_capacity(graph.stages.len());
        for (s, bytes) in graph.stages.iter().zip(encoded) {
            let (inline, object) = if bytes.len() <= self.config().inline_plan_limit {
                (Some(bytes), None)
            } else {
                let path = stage_plan_path(&self.services.shuffle.prefix, job_id, s.id);
                self.services
                    .shuffle_store()?
                    .put(&path, bytes.into())
                    .await?;
                (None, Some(path.to_string()))
            };
            plans.push(PlanRecord {
                job_id: job_id.to_string(),
                stage: s.id,
                plan: inline,
                object,
                expires_at,
            });
            stages.push(StageRecord {
                job_id: job_id.to_string(),
                stage: s.id,
                state: StageState::Pending,
                tasks: s.tasks as u32,
                output_partitions: s.output_partitions as u32,
                inputs: s.inputs.clone(),
                summary: s.summary.clone(),
                scan_bytes: s.scan_bytes.clone(),
                switch: s.switch,
                combines: s.combines,
                dispatched_ms: None,
                confirmed_ms: None,
                decision: None,
                expires_at,
            });
        }
        let job = JobRecord {
            job_id: job_id.to_string(),
            sql: sql.to_string(),
            kind,
            state: JobState::Running,
            stage_count: stages.len() as u32,
            result_schema,
            owner: caller.principal().to_string(),
            created_ms,
            deadline_ms: Some(created_ms + time_limit.as_millis() as u64),
            finished_ms: None,
            error: None,
            requests: Default::default(),
            expires_at,
        };
        Ok(NewJob {
            job,
            stages,
            plans,
            tasks: vec![],
        })
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
            let widest = match store.load_job(job_id).await {
                Ok(Some(snapshot)) => widest(&snapshot),
                _ => self.config().max_tasks_per_stage as u32,
            };
            self.cleanup(job_id, widest, &[]).await;
            return Ok(JobState::Cancelled);
        }
        // It ended meanwhile (a success racing the cancel): leave it and its result be.
        Ok(store
            .get_job(job_id)
            .await?
            .map_or(JobState::Cancelled, |j| j.state))
    }

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
                        warn!(job = %job_id, error = %e, "sweep could not handle job");
                        report.errors.push((job_id.clone(), e.to_string()));
                    }
                    Err(_) => {
                        warn!(job = %job_id, "sweep of job out of time; skipped this run");
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

    /// One job of the sweep: fail attempts past their deadline, then advance.
    async fn sweep_job(&self, job_id: &str) -> Result<usize> {
        let store = &self.services.store;
        let snapshot = match store.load_job(job_id).await? {
            Some(s) if !s.job.state.is_terminal() => s,
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

    /// The one decision step, idempotent: enforce the deadline, retry or give up on
    /// failed tasks, send throttled and unconfirmed dispatches again, finish the job when
    /// every stage is complete, claim and dispatch the stages whose inputs are.
    pub async fn advance(&self, job_id: &str) -> Result<()> {
        self.advance_with(job_id, None).await
    }

    /// [`Scheduler::advance`] at the end of a hand-off path that started with a commit:
    /// `origin` counts the sequential requests made on it so far (see [`Handoff`]); the
    /// stages this step dispatches hand it on to their tasks, with this step's own.
    pub async fn advance_with(&self, job_id: &str, origin: Option<Handoff>) -> Result<()> {
        let store = &self.services.store;
        let Some(snapshot) = store.load_job(job_id).await? else {
            warn!(job = %job_id, "woken for a job that does not exist");
            return Ok(());
        };
        let job = &snapshot.job;
        if job.state.is_terminal() {
            return Ok(());
        }
        let now = now_ms();
        if job.is_overdue(now) {
            let error = job.deadline_message();
            if store
                .finish_job(job_id, JobState::Failed, Some(error.clone()), now)
                .await?
            {
                info!(job = %job_id, %error, "job past its deadline");
                self.cleanup(job_id, widest(&snapshot), &[]).await;
            }
            return Ok(());
        }
        let config = self.config();
        let expires_at = self.services.expires_at();
        let stale_before = now.saturating_sub(config.dispatch_deadline.as_millis() as u64);
        let mut sends = Vec::new();
        for task in &snapshot.tasks {
            let spec = |attempt| TaskSpec {
                job_id: job_id.to_string(),
                stage: task.stage,
                partition: task.partition,
                attempt,
            };
            match task.state {
                TaskState::Failed if task.retryable && task.attempt < config.max_attempts => {
                    let next = task.attempt + 1;
                    if store
                        .start_attempt(job_id, task.stage, task.partition, next, now, expires_at)
                        .await?
                    {
                        sends.push(Send {
                            task: spec(next),
                            context: None,
                            throttles: task.throttles,
                            confirm: true,
                        });
                    }
                }
                TaskState::Failed => {
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
                        self.cleanup(job_id, widest(&snapshot), &[]).await;
                    }
                    return Ok(());
                }
                // A throttled invocation whose back-off passed, or one its dispatcher
                // never confirmed (it died): the same attempt again, none used up.
                TaskState::Throttled | TaskState::Running
                    if resend_due(task, now, stale_before)
                        && self
                            .resend(task.stage, task.partition, task.attempt, job_id, now)
                            .await? =>
                {
                    debug!(job = %job_id, stage = task.stage, task = task.partition,
                        state = ?task.state, "sending an attempt again");
                    sends.push(Send {
                        task: spec(task.attempt),
                        context: None,
                        throttles: task.throttles,
                        confirm: true,
                    });
                }
                _ => {}
            }
        }
        self.dispatch(sends).await;

        let mut complete: BTreeSet<u32> = snapshot
            .stages
            .iter()
            .filter(|s| snapshot.stage_complete(s))
            .map(|s| s.stage)
            .collect();
        if complete.len() == snapshot.stages.len() {
            if store
                .finish_job(job_id, JobState::Succeeded, None, now)
                .await?
            {
                info!(job = %job_id, ms = now.saturating_sub(job.created_ms), "job succeeded");
                let keep: Vec<String> = snapshot
                    .tasks_of(job.final_stage())
                    .filter_map(|t| t.output.as_ref().map(|o| o.object.clone()))
                    .collect();
                self.cleanup(job_id, widest(&snapshot), &keep).await;
            }
            return Ok(());
        }
        let key = job_key(&job.sql);
        // Stages are visited in topological order; a stage fused into its consumer is
        // complete at its claim, which may make that consumer ready in this same pass.
        let mut snapshot = snapshot.clone();
        for index in 0..snapshot.stages.len() {
            let stage = &snapshot.stages[index].clone();
            if complete.contains(&stage.stage) {
                continue;
            }
            let ready = stage
                .waits_for(config.adaptive)
                .all(|s| complete.contains(&s));
            match stage.state {
                StageState::Pending if ready => {
                    let decision = match plan::adaptive::decide(stage, &snapshot, config) {
                        Ok(decision) => decision,
                        Err(e) => {
                            let error = format!("stage {} cannot be planned: {e}", stage.stage);
                            if store
                                .finish_job(job_id, JobState::Failed, Some(error.clone()), now)
                                .await?
                            {
                                warn!(job = %job_id, %error, "job failed");
                                self.cleanup(job_id, widest(&snapshot), &[]).await;
                            }
                            return Ok(());
                        }
                    };
                    // The claim and the reads of the stage's plans (for its tasks' payload)
                    // both only need the snapshot: one round trip for the two.
                    let (claimed, plans) = if decision.tasks > 0 {
                        let (claimed, plans) = tokio::join!(
                            store.claim_stage(job_id, stage.stage, now, &decision),
                            self.read_plans(job_id, stage.stage, &decision)
                        );
                        (claimed?, plans.unwrap_or_default())
                    } else {
                        (
                            store
                                .claim_stage(job_id, stage.stage, now, &decision)
                                .await?,
                            Vec::new(),
                        )
                    };
                    if !claimed {
                        continue;
                    }
                    let stage_key = format!("{key}/{}", stage.stage);
                    self.services
                        .faults
                        .crash_point(FaultKind::SchedulerCrashAfterClaim, &stage_key)?;
                    debug!(job = %job_id, stage = stage.stage, tasks = decision.tasks,
                        decision = %decision.note, "stage dispatched");
                    let tasks = decision.tasks;
                    {
                        let claimed = &mut snapshot.stages[index];
                        claimed.state = StageState::Dispatched;
                        claimed.tasks = tasks;
                        claimed.dispatched_ms = Some(now);
                        claimed.decision = Some(decision);
                    }
                    if tasks == 0 {
                        // Fused: it runs inside its consumer's task; nothing to send.
                        store.confirm_stage(job_id, stage.stage, now_ms()).await?;
                        complete.insert(stage.stage);
                        continue;
                    }
                    let handoff = origin.map(|h| h.plus(2));
                    let context = context_for(&snapshot, &snapshot.stages[index], plans, handoff);
                    self.dispatch_stage(job_id, stage.stage, tasks, context, &stage_key)
                        .await?;
                    store.confirm_stage(job_id, stage.stage, now_ms()).await?;
                }
                StageState::Dispatched
                    if stage.confirmed_ms.is_none()
                        && stage.dispatched_ms.is_some_and(|d| d < stale_before) =>
                {
                    // Its dispatcher died: send every task that has no item of its own.
                    let mut sends = Vec::new();
                    let items: BTreeSet<u32> = snapshot
                        .tasks_of(stage.stage)
                        .map(|t| t.partition)
                        .collect();
                    for partition in (0..stage.tasks).filter(|p| !items.contains(p)) {
                        if self.resend(stage.stage, partition, 1, job_id, now).await? {
                            sends.push(Send {
                                task: TaskSpec {
                                    job_id: job_id.to_string(),
                                    stage: stage.stage,
                                    partition,
                                    attempt: 1,
                                },
                                context: None,
                                throttles: 0,
                                confirm: true,
                            });
                        }
                    }
                    warn!(job = %job_id, stage = stage.stage, tasks = sends.len(),
                        "stage dispatch was never confirmed; re-sending its tasks");
                    self.dispatch(sends).await;
                    store.confirm_stage(job_id, stage.stage, now_ms()).await?;
                }
                StageState::Dispatched
                    if stage.confirmed_ms.is_some()
                        && self.is_tree(stage.tasks)
                        && stage.dispatched_ms.is_some_and(|d| d < stale_before)
                        && !snapshot.stage_complete(stage) =>
                {
                    // Sent through an invocation tree: a range whose dispatcher never
                    // confirmed it (lost, crashed) has its tasks without items sent again.
                    self.resend_unconfirmed_ranges(&snapshot, stage, now)
                        .await?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Reads the stored plans the tasks of `stage` will run (its own and those
    /// [`plan::adaptive::plans_needed`] names under `decision`), for their payload.
    async fn read_plans(
        &self,
        job_id: &str,
        stage: u32,
        decision: &StageDecision,
    ) -> Result<Vec<PlanRecord>> {
        let mut wanted = vec![stage];
        wanted.extend(decision.fused.iter().copied());
        if let Some(switch) = decision.switched.filter(|s| s.large == stage) {
            wanted.push(switch.join);
        }
        let store = &self.services.store;
        let plans =
            futures::future::try_join_all(wanted.iter().map(|&s| store.get_plan(job_id, s)))
                .await?;
        Ok(plans.into_iter().flatten().collect())
    }

    /// Whether a stage of `tasks` tasks is sent through an invocation tree.
    fn is_tree(&self, tasks: u32) -> bool {
        is_tree(tasks, self.fanout())
    }

    /// Invokes the first attempt of every task of a claimed stage: directly, or — for a
    /// stage wider than `dispatch_fanout` — through an invocation tree whose leaves each
    /// send one commit counter's range of tasks ([`Scheduler::dispatch_range`]).
    async fn dispatch_stage(
        &self,
        job_id: &str,
        stage: u32,
        tasks: u32,
        context: Option<Arc<DispatchContext>>,
        stage_key: &str,
    ) -> Result<()> {
        let faults = &self.services.faults;
        if self.is_tree(tasks) {
            let mut nodes: Vec<DispatchRange> = tree_children(0, tasks, self.fanout())
                .into_iter()
                .map(|(from, to)| DispatchRange {
                    job_id: job_id.to_string(),
                    stage,
                    from,
                    to,
                    context: context.as_ref().map(|c| with_handoff(c, 1)),
                })
                .collect();
            if faults.fires(FaultKind::SchedulerCrashMidDispatch, stage_key) {
                let rest = nodes.split_off(nodes.len() / 2);
                self.invoke_nodes(nodes).await;
                faults.crash_point(FaultKind::SchedulerCrashMidDispatch, stage_key)?;
                nodes = rest;
            }
            self.invoke_nodes(nodes).await;
            return Ok(());
        }
        let context = context.as_ref().map(|c| with_handoff(c, 1));
        let mut sends: Vec<Send> = (0..tasks)
            .map(|partition| Send {
                task: TaskSpec {
                    job_id: job_id.to_string(),
                    stage,
                    partition,
                    attempt: 1,
                },
                context: context.clone(),
                throttles: 0,
                confirm: false,
            })
            .collect();
        if faults.fires(FaultKind::SchedulerCrashMidDispatch, stage_key) {
            let rest = sends.split_off(sends.len() / 2);
            self.dispatch(sends).await;
            faults.crash_point(FaultKind::SchedulerCrashMidDispatch, stage_key)?;
            sends = rest;
        }
        self.dispatch(sends).await;
        Ok(())
    }

    fn fanout(&self) -> u32 {
        self.config().dispatch_fanout.max(2) as u32
    }

    /// Invokes dispatchers, `dispatch_concurrency` at a time. A refused one is left to
    /// the sweep: its range stays unconfirmed and is sent again after the dispatch
    /// deadline.
    async fn invoke_nodes(&self, nodes: Vec<DispatchRange>) {
        let invoker = self.services.invoker.clone();
        let results: Vec<(DispatchRange, Result<()>)> = futures::stream::iter(nodes)
            .map(|node| {
                let invoker = invoker.clone();
                async move {
                    let result = invoker.dispatch(&node).await;
                    (node, result)
                }
            })
            .buffer_unordered(self.config().dispatch_concurrency.max(1))
            .collect()
            .await;
        for (node, result) in results {
            if let Err(e) = result {
                warn!(range = %node, error = %e,
                    "dispatcher invocation refused; its range is sent again after the dispatch deadline");
            }
        }
    }

    /// One node of an invocation tree: a range of at most one commit counter's tasks is
    /// invoked (and confirmed on that counter, [`JobStore::confirm_dispatch`]); a wider
    /// one is split over at most `dispatch_fanout` further dispatchers. Idempotent: a
    /// repeated node invokes its tasks again (duplicates are harmless) and a lost one is
    /// found unconfirmed by the next scheduler step past the dispatch deadline.
    pub async fn dispatch_range(&self, range: &DispatchRange) -> Result<()> {
        let span = tracing::info_span!("dispatch", job = %range.job_id, stage = range.stage,
            from = range.from, to = range.to);
        async {
            if range.from >= range.to {
                return Err(Error::InvalidInput(format!(
                    "empty dispatch range: {range}"
                )));
            }
            let context = range.context.as_ref().map(|c| with_handoff(c, 1));
            if !is_leaf(range.from, range.to) {
                let nodes = tree_children(range.from, range.to, self.fanout())
                    .into_iter()
                    .map(|(from, to)| DispatchRange {
                        from,
                        to,
                        context: context.clone(),
                        ..range.clone()
                    })
                    .collect();
                self.invoke_nodes(nodes).await;
                return Ok(());
            }
            let sends = (range.from..range.to)
                .map(|partition| Send {
                    task: TaskSpec {
                        job_id: range.job_id.clone(),
                        stage: range.stage,
                        partition,
                        attempt: 1,
                    },
                    context: context.clone(),
                    throttles: 0,
                    confirm: false,
                })
                .collect();
            self.dispatch(sends).await;
            let stage_tasks = range
                .context
                .as_ref()
                .map(|c| c.stage.tasks)
                .unwrap_or(range.to);
            self.services
                .store
                .confirm_dispatch(&DispatchConfirmation {
                    job_id: range.job_id.clone(),
                    stage: range.stage,
                    counter: counter_of(range.from),
                    stage_tasks: stage_tasks.max(range.to),
                    now_ms: now_ms(),
                    expires_at: self.services.expires_at(),
                })
                .await?;
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// Re-sends the tasks (those without items) of every range of a tree-dispatched stage
    /// whose leaf dispatcher never confirmed it, and confirms the range.
    async fn resend_unconfirmed_ranges(
        &self,
        snapshot: &JobSnapshot,
        stage: &StageRecord,
        now: u64,
    ) -> Result<()> {
        let job_id = &stage.job_id;
        let confirmed: BTreeSet<u32> = snapshot
            .counters
            .iter()
            .filter(|c| c.stage == stage.stage && c.dispatched_ms.is_some())
            .map(|c| c.counter)
            .collect();
        let items: BTreeSet<u32> = snapshot
            .tasks_of(stage.stage)
            .map(|t| t.partition)
            .collect();
        for counter in (0..counters_of(stage.tasks)).filter(|c| !confirmed.contains(c)) {
            let from = counter * COUNTER_TASKS;
            let to = (from + COUNTER_TASKS).min(stage.tasks);
            let mut sends = Vec::new();
            for partition in (from..to).filter(|p| !items.contains(p)) {
                if self.resend(stage.stage, partition, 1, job_id, now).await? {
                    sends.push(Send {
                        task: TaskSpec {
                            job_id: job_id.to_string(),
                            stage: stage.stage,
                            partition,
                            attempt: 1,
                        },
                        context: None,
                        throttles: 0,
                        confirm: true,
                    });
                }
            }
            warn!(job = %job_id, stage = stage.stage, counter, tasks = sends.len(),
                "a dispatcher never confirmed its range; re-sending its tasks");
            self.dispatch(sends).await;
            self.services
                .store
                .confirm_dispatch(&DispatchConfirmation {
                    job_id: job_id.to_string(),
                    stage: stage.stage,
                    counter,
                    stage_tasks: stage.tasks,
                    now_ms: now_ms(),
                    expires_at: self.services.expires_at(),
                })
                .await?;
        }
        Ok(())
    }

    async fn resend(
        &self,
        stage: u32,
        partition: u32,
        attempt: u32,
        job_id: &str,
        now: u64,
    ) -> Result<bool> {
        let resend = TaskResend {
            job_id: job_id.to_string(),
            stage,
            partition,
            attempt,
            stale_before_ms: now.saturating_sub(self.config().dispatch_deadline.as_millis() as u64),
            now_ms: now,
            expires_at: self.services.expires_at(),
        };
        self.services.store.resend_task(&resend).await
    }

    /// Invokes the executor for each task, `dispatch_concurrency` at a time, and records
    /// what happened: an accepted retry or re-send is confirmed on its task; a throttled
    /// invocation is deferred with back-off (no attempt used up); a refused one fails its
    /// attempt for good, which fails the job with the reason.
    async fn dispatch(&self, sends: Vec<Send>) {
        if sends.is_empty() {
            return;
        }
        let invoker = self.services.invoker.clone();
        let results: Vec<(Send, Result<()>)> = futures::stream::iter(sends)
            .map(|send| {
                let invoker = invoker.clone();
                async move {
                    let invocation = TaskInvocation {
                        task: send.task.clone(),
                        context: send.context.clone(),
                    };
                    let result = invoker.run_task(&invocation).await;
                    (send, result)
                }
            })
            .buffer_unordered(self.config().dispatch_concurrency.max(1))
            .collect()
            .await;
        let store = &self.services.store;
        for (send, result) in results {
            let task = &send.task;
            let recorded = match result {
                Ok(()) if send.confirm => store
                    .confirm_attempt(
                        &task.job_id,
                        task.stage,
                        task.partition,
                        task.attempt,
                        now_ms(),
                    )
                    .await
                    .map(|_| ()),
                Ok(()) => Ok(()),
                Err(error) if error.is_retryable() => {
                    let backoff = EngineConfig::throttle_backoff(send.throttles);
                    debug!(%task, %error, ?backoff, "dispatch throttled; deferring");
                    store
                        .defer_task(&TaskDeferral {
                            job_id: task.job_id.clone(),
                            stage: task.stage,
                            partition: task.partition,
                            attempt: task.attempt,
                            retry_at_ms: now_ms() + backoff.as_millis() as u64,
                            error: format!("dispatch throttled: {error}"),
                            expires_at: self.services.expires_at(),
                        })
                        .await
                        .map(|_| ())
                }
                Err(error) => {
                    warn!(%task, %error, "dispatch refused");
                    let failure = task.failure(
                        format!("dispatch failed: {error}"),
                        false,
                        self.services.expires_at(),
                    );
                    store.fail_attempt(&failure).await.map(|_| ())
                }
            };
            if let Err(e) = recorded {
                warn!(%task, error = %e, "could not record the dispatch; the deadline re-sends it");
            }
        }
    }

    /// Deletes a finished job's objects except `keep` (its result's committed objects);
    /// `widest` is the most tasks any of its stages ran. Best effort: object storage
    /// lifecycle rules catch whatever is left.
    async fn cleanup(&self, job_id: &str, widest: u32, keep: &[String]) {
        let Ok(store) = self.services.shuffle_store() else {
            return;
        };
        let deleted = crate::shuffle::delete_job_objects(
            store.as_ref(),
            &self.services.shuffle.prefix,
            job_id,
            widest,
            keep,
        )
        .await;
        debug!(job = %job_id, objects = deleted, "cleaned up shuffle data");
    }
}

/// Ranges of `from..to` for at most `fanout` child dispatchers: whole commit counters'
/// ranges ([`COUNTER_TASKS`] tasks, the leaves' size), as evenly as they divide.
fn tree_children(from: u32, to: u32, fanout: u32) -> Vec<(u32, u32)> {
    let first = from / COUNTER_TASKS;
    let leaves = to.div_ceil(COUNTER_TASKS) - first;
    let per_child = leaves.div_ceil(fanout.max(2)).max(1);
    (0..leaves.div_ceil(per_child))
        .map(|i| {
            let start = ((first + i * per_child) * COUNTER_TASKS).max(from);
            let end = ((first + (i + 1) * per_child) * COUNTER_TASKS).min(to);
            (start, end)
        })
        .filter(|(a, b)| a < b)
        .collect()
}

/// Whether a dispatcher's range `from..to` is a leaf of the invocation tree: one
/// commit counter's tasks, which it invokes itself and confirms on that counter.
fn is_leaf(from: u32, to: u32) -> bool {
    to - from <= COUNTER_TASKS && from.is_multiple_of(COUNTER_TASKS)
}

/// Whether a stage of `tasks` tasks with `fanout` invocations per dispatcher is sent
/// through an invocation tree (it is wider than the fan-out) rather than directly.
pub fn is_tree(tasks: u32, fanout: u32) -> bool {
    tasks > fanout.max(2)
}

/// Dispatcher invocations of the invocation tree over a stage of `tasks` tasks with
/// `fanout` invocations per dispatcher, as [`Scheduler`] sends it; 0 when the stage is
/// sent directly (no wider than the fan-out).
pub fn tree_dispatchers(tasks: u32, fanout: u32) -> u32 {
    fn nodes(from: u32, to: u32, fanout: u32) -> u32 {
        if is_leaf(from, to) {
            return 1;
        }
        1 + tree_children(from, to, fanout)
            .into_iter()
            .map(|(a, b)| nodes(a, b, fanout))
            .sum::<u32>()
    }
    if !is_tree(tasks, fanout) {
        return 0;
    }
    let fanout = fanout.max(2);
    // The claiming scheduler is the root: it always sends the first level.
    tree_children(0, tasks, fanout)
        .into_iter()
        .map(|(a, b)| nodes(a, b, fanout))
        .sum()
}

/// `context` with `n` more sequential requests on its hand-off path.
fn with_handoff(context: &Arc<DispatchContext>, n: u32) -> Arc<DispatchContext> {
    match context.handoff {
        Some(h) => Arc::new(DispatchContext {
            handoff: Some(h.plus(n)),
            ..context.as_ref().clone()
        }),
        None => context.clone(),
    }
}

/// Most bytes of a task payload's [`DispatchContext`]: past it the largest committed
/// inputs, then the plans, are left for the executor to read (an async invocation
/// carries at most 1 MB; every task of the stage is sent a copy).
pub const MAX_CONTEXT_BYTES: usize = 256 * 1024;

/// What the tasks of `stage` (as claimed in `snapshot`) are handed: the job, the stage,
/// the committed outputs of every stage they read and `plans`, as far as they fit
/// [`MAX_CONTEXT_BYTES`].
fn context_for(
    snapshot: &JobSnapshot,
    stage: &StageRecord,
    plans: Vec<PlanRecord>,
    handoff: Option<Handoff>,
) -> Option<Arc<DispatchContext>> {
    let decision = stage.decision.as_ref()?;
    let mut inputs = Vec::new();
    // An input some tasks read only a range of (a split partition, a combining stage):
    // each such task reads its own range, which a shared payload cannot carry.
    for &(input, _) in decision
        .input_tasks
        .iter()
        .filter(|(i, _)| !decision.skew.iter().any(|s| s.stage == *i))
    {
        let source = decision
            .read_from
            .iter()
            .find(|(i, _)| *i == input)
            .map_or(input, |&(_, s)| s);
        let outputs: Vec<TaskOutput> = snapshot
            .tasks_of(source)
            .filter(|t| t.state == TaskState::Succeeded)
            .filter_map(|t| t.output.clone())
            .map(|o| TaskOutput {
                metrics: Vec::new(),
                requests: Default::default(),
                handoff: None,
                ..o
            })
            .collect();
        inputs.push((input, outputs));
    }
    let mut context = DispatchContext {
        job: JobBrief::of(&snapshot.job),
        stage: stage.clone(),
        inputs,
        plans,
        handoff,
    };
    let size = |c: &DispatchContext| serde_json::to_vec(c).map_or(usize::MAX, |b| b.len());
    // The largest inputs go first: each one left out is one read for the task.
    while size(&context) > MAX_CONTEXT_BYTES && !context.inputs.is_empty() {
        let largest = context
            .inputs
            .iter()
            .enumerate()
            .max_by_key(|(_, (_, outputs))| outputs.iter().map(|o| o.ends.len() + 8).sum::<usize>())
            .map(|(i, _)| i)
            .unwrap_or(0);
        context.inputs.remove(largest);
    }
    if size(&context) > MAX_CONTEXT_BYTES {
        context.plans.clear();
    }
    (size(&context) <= MAX_CONTEXT_BYTES).then(|| Arc::new(context))
}

/// The most tasks any stage of the job runs (says which object shards it wrote to).
fn widest(snapshot: &JobSnapshot) -> u32 {
    snapshot.stages.iter().map(|s| s.tasks).max().unwrap_or(1)
}

/// Whether a throttled or running task should be sent again now (see
/// [`JobStore::resend_task`](crate::state::JobStore::resend_task)).
fn resend_due(task: &crate::state::TaskRecord, now: u64, stale_before: u64) -> bool {
    match task.state {
        TaskState::Throttled => task.retry_at_ms.is_none_or(|at| at <= now),
        TaskState::Running => {
            task.confirmed_ms.is_none() && task.dispatched_ms.is_some_and(|d| d < stale_before)
        }
        TaskState::Succeeded | TaskState::Failed => false,
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

/// Planning failures that are the query's fault become 400s with DataFusion's message.
fn user_planning_error(e: Error) -> Error {
    e.planning()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree node splits its range over at most `fanout` children of whole commit
    /// counters' ranges (the leaves), covering the range exactly once.
    #[test]
    fn tree_children_split_whole_counters_over_the_fanout() {
        let leaves = |from: u32, to: u32, fanout: u32| tree_children(from, to, fanout);
        assert_eq!(leaves(0, 70, 32), vec![(0, 32), (32, 64), (64, 70)]);
        assert_eq!(leaves(0, 70, 2), vec![(0, 64), (64, 70)]);
        assert_eq!(leaves(0, 64, 2), vec![(0, 32), (32, 64)]);
        for (from, to, fanout) in [(0, 10_000, 32), (0, 1_000, 32), (320, 1_000, 4), (0, 33, 2)] {
            let children = leaves(from, to, fanout);
            assert!(children.len() <= fanout as usize, "{from}..{to} / {fanout}");
            assert_eq!(children.first().unwrap().0, from);
            assert_eq!(children.last().unwrap().1, to);
            for pair in children.windows(2) {
                assert_eq!(pair[0].1, pair[1].0, "contiguous");
            }
            for (a, b) in &children {
                assert_eq!(a % COUNTER_TASKS, 0, "starts on a counter");
                assert!(b - a >= 1);
            }
        }
        // 10,000 tasks: 313 leaves; 32 children of 10 leaves, each splitting in 10.
        let top = leaves(0, 10_000, 32);
        assert_eq!(top.len(), 32);
        assert_eq!(top[0], (0, 320));
        assert_eq!(leaves(0, 320, 32).len(), 10);
    }

    /// The dispatcher count follows the tree's shape: none up to the fan-out, one per
    /// counter's range up to fan-out ranges, inner dispatchers above.
    #[test]
    fn tree_dispatchers_count_the_trees_nodes() {
        assert_eq!(tree_dispatchers(32, 32), 0);
        assert_eq!(tree_dispatchers(100, 32), 4);
        assert_eq!(tree_dispatchers(1_000, 32), 32);
        // 157 leaves in 32 inner dispatchers of 5 (the last of 2).
        assert_eq!(tree_dispatchers(5_000, 32), 32 + 157);
        assert_eq!(tree_dispatchers(70, 2), 2 + 2);
    }
}
