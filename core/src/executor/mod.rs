//! The executor: runs one task — one partition of one stage — and commits it.
//!
//! [`Executor::handle`] is what an executor function calls per task event: it loads the
//! stage plan (decoded once per stage and cached), hands the stage's readers the
//! committed outputs of its input stages, writes the task's shuffle object and commits
//! the completion record in one conditional step. A duplicate delivery, or a slower
//! twin attempt, loses the commit and changes nothing. If the commit completed the
//! stage, the executor wakes the scheduler at once (the fast path). A task whose job ends
//! while it runs (cancelled, failed, past its deadline) stops at once.

mod stop;
pub mod threads;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::execution::{SessionState, TaskContext};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use object_store::ObjectStoreExt;
use tracing::{debug, info, warn, Instrument};

use crate::dispatch::{Handoff, JobBrief, TaskInvocation, TaskSpec};
use crate::faults::FaultKind;
use crate::plan;
use crate::requests::{Request, Tally};
use crate::shuffle::{task_output_path, SharedFetches, ShuffleInputs, ShuffleWriterExec};
use crate::state::{
    counters_of, CommitOutcome, JobKind, JobState, PlanRecord, StageRecord, TaskCommit, TaskCpu,
    TaskOutput, TaskState,
};
use crate::time::now_ms;
use crate::write::sink::{TableWriterExec, WrittenFiles};
use crate::{EngineConfig, Error, Result, Services};

/// How a task invocation ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskReport {
    /// This attempt committed.
    Committed {
        /// Whether its commit counter reached 0 (a share of the stage is done).
        counter_done: bool,
        /// Rows written.
        rows: u64,
    },
    /// Another attempt had committed first; this one's output was discarded.
    Duplicate,
    /// Nothing to do: the job is finished or cancelled, or the task already succeeded.
    Skipped(String),
    /// The attempt failed; the failure was recorded for the scheduler.
    Failed(String),
}

/// Stages whose plans are kept per executor (per warm Lambda container).
const PLAN_CACHE_ENTRIES: usize = 64;

/// Tries of a commit that fails transiently, before the attempt is given up (about a
/// minute of waiting with the pauses below, on top of the store's own retries).
const COMMIT_TRIES: u32 = 10;
/// First pause between commit tries.
const COMMIT_RETRY_BASE: Duration = Duration::from_millis(100);
/// Longest pause between commit tries.
const COMMIT_RETRY_CAP: Duration = Duration::from_secs(10);

/// Runs tasks. Create one per process (it caches encoded stage plans).
pub struct Executor {
    services: Services,
    state: SessionState,
    /// The threads a task may use ([`threads::TaskThreads::for_stage`]).
    threads: threads::TaskThreads,
    plans: Mutex<HashMap<(String, u32), StagePlans>>,
}

/// What a task starts from ([`Executor::start`]).
struct Start {
    job: JobBrief,
    stage: StageRecord,
    /// The stage's plan record, when read or given (else cached or read later).
    plan: Option<PlanRecord>,
}

/// The encoded plans the tasks of one stage run: the stage's own, and those of the
/// stages [`plan::adaptive::plans_needed`] names.
#[derive(Clone)]
struct StagePlans {
    own: Arc<Vec<u8>>,
    others: Vec<(u32, Arc<Vec<u8>>)>,
}

impl StagePlans {
    /// Decodes them with `ctx` into the plan a task of `stage` runs.
    fn decode(&self, stage: &StageRecord, ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
        let own = plan::decode_plan(&self.own, ctx)?;
        let others = self
            .others
            .iter()
            .map(|(s, bytes)| Ok((*s, plan::decode_plan(bytes, ctx)?)))
            .collect::<Result<HashMap<_, _>>>()?;
        plan::adaptive::task_plan(stage, own, &others)
    }
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").finish_non_exhaustive()
    }
}

impl Executor {
    /// An executor over `services`.
    pub fn new(services: Services) -> Self {
        // Every task's spills (operators' and the shuffle writer's) count against one
        // process-wide limit: the local disk is the process's.
        if let Some(bytes) = services.config.max_spill_bytes {
            let disk = &services.runtime.disk_manager;
            if let Err(e) = disk.set_max_temp_directory_size(bytes as u64) {
                warn!(error = %e, "max_spill_bytes not applied");
            }
        }
        let state = services.session_state(1);
        Self {
            services,
            state,
            threads: threads::TaskThreads::process(),
            plans: Mutex::new(HashMap::new()),
        }
    }

    /// This executor for a process that runs `slots` tasks at once (the embedded engine):
    /// they share its cores.
    pub fn with_slots(mut self, slots: usize) -> Self {
        self.threads = threads::TaskThreads::shared(slots);
        self
    }

    /// Runs a task and reports how it ended; a failure is recorded in the store (so the
    /// scheduler retries it or fails the job) rather than returned. Errors are returned
    /// only when even recording the failure failed.
    pub async fn handle(&self, task: &TaskSpec) -> Result<TaskReport> {
        self.handle_invocation(&TaskInvocation::from(task.clone()))
            .await
    }

    /// [`Executor::handle`] for an invocation that may carry what its dispatcher read
    /// for it ([`TaskInvocation::context`]): then the task starts without reading the
    /// store.
    pub async fn handle_invocation(&self, invocation: &TaskInvocation) -> Result<TaskReport> {
        let task = &invocation.task;
        let span = tracing::info_span!(
            "task",
            job_id = %task.job_id,
            stage = task.stage,
            task = task.partition,
            attempt = task.attempt
        );
        async {
            match self.run(invocation).await {
                Ok(report) => Ok(report),
                Err(Error::Cancelled(_)) => Ok(TaskReport::Skipped("job ended".into())),
                Err(error) => {
                    let error = self.explain_limits(error);
                    let retryable = error.is_retryable();
                    warn!(%error, retryable, "task attempt failed");
                    let failure =
                        task.failure(error.to_string(), retryable, self.services.expires_at());
                    self.services.store.fail_attempt(&failure).await?;
                    Ok(TaskReport::Failed(error.to_string()))
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Runs a task; errors are returned, not recorded. See [`Executor::handle`].
    pub async fn run(&self, invocation: &TaskInvocation) -> Result<TaskReport> {
        let tally = Tally::new();
        // Each task its own memory pool: one task's hash table cannot starve its
        // neighbours, and past the limit operators spill (to the runtime's disk manager).
        let services = self
            .services
            .counted(&tally, self.services.config.task_memory_limit)?;
        self.attempt(invocation, &services, &tally).await
    }

    /// What a task starts from: the job, its stage and (when not cached) its plan record —
    /// from its invocation's context, or else read in one request. Counts the reads into
    /// `reads`. `Err(report)`: nothing to do (the job ended, the task already succeeded).
    async fn start(
        &self,
        invocation: &TaskInvocation,
        services: &Services,
        reads: &mut u32,
    ) -> Result<std::result::Result<Start, TaskReport>> {
        let task = &invocation.task;
        let context = invocation
            .context
            .as_deref()
            .filter(|c| c.stage.job_id == task.job_id && c.stage.stage == task.stage);
        if let Some(c) = context {
            return Ok(Ok(Start {
                job: c.job.clone(),
                stage: c.stage.clone(),
                plan: c.plans.iter().find(|p| p.stage == task.stage).cloned(),
            }));
        }
        // The job, the stage, the task's item and (unless cached) the plan: one read.
        let cached = self.cached_plans(&task.job_id, task.stage).is_some();
        let view = services
            .store
            .task_view(&task.job_id, task.stage, task.partition, !cached)
            .await?;
        *reads += 1;
        let job = view
            .job
            .ok_or_else(|| Error::InvalidInput(format!("task for unknown job {}", task.job_id)))?;
        if job.state.is_terminal() {
            return Ok(Err(TaskReport::Skipped(format!(
                "job is {}",
                job.state.as_str()
            ))));
        }
        if view.task.is_some_and(|t| t.state == TaskState::Succeeded) {
            return Ok(Err(TaskReport::Skipped("task already succeeded".into())));
        }
        let stage = view.stage.ok_or_else(|| {
            Error::InvalidInput(format!(
                "task for unknown stage {} of job {}",
                task.stage, task.job_id
            ))
        })?;
        Ok(Ok(Start {
            job: JobBrief::of(&job),
            stage,
            plan: view.plan,
        }))
    }

    /// Runs one attempt on `services` (counted into `tally`): read what the task needs,
    /// decode its plan ([`Self::task_writer`]), write its partitions to one shuffle object,
    /// commit it ([`Self::commit_output`]).
    async fn attempt(
        &self,
        invocation: &TaskInvocation,
        services: &Services,
        tally: &Tally,
    ) -> Result<TaskReport> {
        let task = &invocation.task;
        let faults = &services.faults;
        let started_ms = now_ms();
        // Sequential reads before the work starts (the end of the hand-off path).
        let mut reads = 0u32;
        let Start { job, stage, plan } = match self.start(invocation, services, &mut reads).await? {
            Ok(start) => start,
            Err(report) => return Ok(report),
        };
        let key = format!(
            "{}/{}/{}/{}",
            job.key, task.stage, task.partition, task.attempt
        );
        faults.crash_point(FaultKind::ExecutorCrashBeforeWork, &key)?;
        if job.deadline_ms.is_some_and(|d| started_ms > d) {
            // The scheduler fails it (and cleans up); this task has nothing to add.
            let _ = services.invoker.wake_scheduler(&task.job_id).await;
            return Ok(TaskReport::Skipped("job is past its deadline".into()));
        }
        if task.partition >= stage.tasks {
            return Err(Error::InvalidInput(format!(
                "task {} does not exist: stage {} has {} tasks",
                task.partition, task.stage, stage.tasks
            )));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let threads = self.threads.for_stage(
            stage.tasks,
            services.config.task_threads,
            slot_weight(&stage, &services.config),
        );
        let given = invocation
            .context
            .as_deref()
            .map_or(&[][..], |c| c.inputs.as_slice());
        let context = self
            .task_context(services, &stage, task.partition, given, &mut reads)
            .await?;
        let files = context
            .session_config()
            .get_extension::<WrittenFiles>()
            .unwrap_or_default();
        // What the task reads of other stages (a one-task stage reads all of it).
        let shuffle_bytes: u64 = context
            .session_config()
            .get_extension::<ShuffleInputs>()
            .map_or(0, |inputs| {
                inputs.stages.values().flatten().map(|o| o.bytes).sum()
            });
        let partitions = stage.partitions_of(task.partition);
        let (writer, partitions, pieces) = self
            .task_writer(
                invocation,
                services,
                (&stage, plan),
                partitions.start as usize..partitions.end as usize,
                (threads, shuffle_bytes),
                stop.clone(),
                &mut reads,
            )
            .await?;
        let handoff = invocation
            .context
            .as_deref()
            .and_then(|c| c.handoff)
            .map(|h| h.plus(reads));

        let superseded = Arc::new(AtomicBool::new(false));
        let watcher = Self::watch_job(
            services,
            task,
            job.deadline_ms,
            stop.clone(),
            superseded.clone(),
        );
        let out_of_time = invocation.deadline_ms.map(|deadline| {
            Self::watch_deadline(deadline, services.config.deadline_margin, stop.clone())
        });
        let execution = uuid::Uuid::new_v4().simple().to_string();
        let path = task_output_path(
            &services.shuffle.prefix,
            &task.job_id,
            (task.stage, stage.tasks, stage.output_partitions),
            task.partition,
            task.attempt,
            &execution[..12],
        );
        let shuffle = services.shuffle_store()?;
        // The plan runs on threads of its own, which tell its CPU time.
        let work = {
            let (writer, shuffle, path) = (writer.clone(), shuffle.clone(), path.clone());
            let (faults, key) = (faults.clone(), key.clone());
            async move {
                // The stream hands over its first batch only after reading and computing
                // it: a crash there is a crash mid-work, whatever the task's size.
                let before_batch = |written: usize| -> Result<()> {
                    if written == 0 {
                        faults.crash_point(FaultKind::ExecutorCrashMidWork, &key)?;
                    }
                    Ok(())
                };
                writer
                    .write_partitions(partitions, context, &shuffle, &path, &before_batch)
                    .await
            }
        };
        let (written, measured) = threads::run_measured(threads, work).await?;
        // A straggler (the fault plan's slow task) takes `factor` times its work time:
        // it waits before its commit, and stops if another attempt commits meanwhile.
        let written = match written {
            Ok(summary) => {
                let worked = now_ms().saturating_sub(started_ms);
                if let Some(delay) =
                    faults.slow_task_delay(&key, task.partition, task.attempt, worked)
                {
                    let until = now_ms() + delay.as_millis() as u64;
                    while now_ms() < until && !stop.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                if stop.load(Ordering::Relaxed) {
                    Err(Error::Cancelled("stopped before its commit".into()))
                } else {
                    Ok(summary)
                }
            }
            Err(e) => Err(e),
        };
        watcher.abort();
        if written.is_err() {
            // Files of a failed attempt are never committed.
            files.delete_all().await;
        }
        if written.is_err() && superseded.load(Ordering::Relaxed) {
            // Another attempt of this task committed first (a speculative one, or the
            // straggler it was started beside): this one's work is not needed.
            debug!("another attempt committed first; stopped");
            let _ = shuffle.delete(&path).await;
            return Ok(TaskReport::Duplicate);
        }
        if let Some((timer, fired)) = out_of_time {
            timer.abort();
            if written.is_err() && fired.load(Ordering::Relaxed) {
                let ran = Duration::from_millis(now_ms().saturating_sub(started_ms));
                return Err(Error::FunctionLimit(format!(
                    "task exceeded the function timeout: stopped after {:.0} s, {} s before \
                     the function's time limit, to record this. Raise the executor's timeout \
                     (Terraform executor_timeout_seconds, at most 900), or give tasks less \
                     work each (bytes_per_task, shuffle_bytes_per_task)",
                    ran.as_secs_f64(),
                    services.config.deadline_margin.as_secs()
                )));
            }
        }
        let summary = written?;
        // EXPLAIN ANALYZE: the operators' figures go into the completion record.
        let metrics = match job.kind {
            JobKind::Analyze => crate::analyze::task_metrics(&writer, &summary),
            JobKind::Query | JobKind::Statement | JobKind::Write => Vec::new(),
        };
        faults.crash_point(FaultKind::ExecutorCrashAfterPut, &key)?;
        let finished_ms = now_ms();
        // The commit's own two writes are about to be made, and a committed task then
        // reads its job once (below): the record counts them.
        let mut requests = tally.counts();
        requests.add(Request::StoreWrite, 2);
        requests.add(Request::StoreRead, 1);
        let output = TaskOutput {
            attempt: task.attempt,
            object: path.to_string(),
            ends: summary.ends.clone(),
            rows: summary.rows,
            bytes: summary.bytes,
            started_ms,
            finished_ms,
            metrics,
            requests,
            handoff,
            cpu: measured.cpu_ms.map(|cpu_ms| TaskCpu {
                threads: measured.threads as u32,
                cpu_ms,
                pieces: pieces as u32,
            }),
            written: files.totals(),
        };
        self.commit_output(
            services,
            task,
            &stage,
            output,
            (&shuffle, &path, &files),
            &key,
        )
        .await
    }

    /// Decodes the task's stage plan for this task — over its counting runtime (a decoded
    /// scan reads through the object store of the context it was decoded with), and fresh:
    /// operators keep per-execution state (a hash join's build side) that must not leak
    /// between tasks — spread over the task's `threads` where its plan allows
    /// ([`plan::spread`]; `shuffle_bytes`: what it reads of other stages), with `stop` wired into its leaves and joins. Returns the writer,
    /// the partitions of its input the task runs (`partitions`, or all of a spread
    /// plan's) and how many it reads at once.
    #[allow(clippy::too_many_arguments)]
    async fn task_writer(
        &self,
        invocation: &TaskInvocation,
        services: &Services,
        (stage, plan): (&StageRecord, Option<PlanRecord>),
        partitions: std::ops::Range<usize>,
        (threads, shuffle_bytes): (usize, u64),
        stop: Arc<AtomicBool>,
        reads: &mut u32,
    ) -> Result<(ShuffleWriterExec, std::ops::Range<usize>, usize)> {
        let task = &invocation.task;
        let context_plans = invocation
            .context
            .as_deref()
            .map_or(&[][..], |c| c.plans.as_slice());
        let plans = match self.cached_plans(&task.job_id, task.stage) {
            Some(plans) => plans,
            None => {
                self.load_plans(services, stage, plan, context_plans, reads)
                    .await?
            }
        };
        let plan = plans.decode(stage, &self.decode_context(services))?;
        let writer = ShuffleWriterExec::from_plan(&plan)?;
        // A writing stage's table writer stays on top of whatever the task runs: each
        // piece of a spread task writes its own files.
        let (target, body) = match TableWriterExec::peel(writer.input()) {
            Some((target, body)) => (Some(target), body),
            None => (None, writer.input().clone()),
        };
        // A coalesced task already runs several partitions at once.
        let spread = match partitions.len() {
            1 => plan::spread::spread(
                &body,
                partitions.start,
                plan::spread::Room {
                    threads,
                    min_piece_bytes: services.config.min_spread_bytes,
                    memory: services.config.task_memory_limit,
                    shuffle_bytes,
                },
            ),
            _ => None,
        };
        let (input, partitions, pieces) = match spread {
            Some(spread) => {
                let all = 0..spread.plan.output_partitioning().partition_count();
                debug!(
                    threads,
                    spread.pieces, "the task's scan is spread over its threads"
                );
                tracing::trace!(
                    plan = %datafusion::physical_plan::displayable(spread.plan.as_ref())
                        .indent(true),
                    "the spread plan"
                );
                (spread.plan, all, spread.pieces)
            }
            None => (body, partitions.clone(), partitions.len()),
        };
        let mut input = stop::StopExec::wrap_leaves_and_joins(input, stop, &task.job_id)?;
        if let Some(target) = target {
            input = Arc::new(TableWriterExec::new(input, target));
        }
        Ok((writer.with_input(input), partitions, pieces))
    }

    /// Commits a written output; the loser of a race with another attempt deletes its
    /// object, and so does a task whose job ended while it ran.
    #[allow(clippy::too_many_arguments)]
    async fn commit_output(
        &self,
        services: &Services,
        task: &TaskSpec,
        stage: &StageRecord,
        output: TaskOutput,
        (shuffle, path, files): (
            &Arc<dyn object_store::ObjectStore>,
            &object_store::path::Path,
            &WrittenFiles,
        ),
        key: &str,
    ) -> Result<TaskReport> {
        let rows = output.rows;
        let commit = TaskCommit {
            job_id: task.job_id.clone(),
            stage: task.stage,
            partition: task.partition,
            stage_tasks: stage.tasks,
            now_ms: output.finished_ms,
            output,
            expires_at: services.expires_at(),
        };
        match Self::commit(services, &commit).await? {
            CommitOutcome::Committed { counter_done } => {
                debug!(
                    rows,
                    bytes = commit.output.bytes,
                    counter_done,
                    "task committed"
                );
                services
                    .faults
                    .crash_point(FaultKind::ExecutorCrashAfterCommit, key)?;
                if counter_done {
                    self.advance_if_stage_done(task, stage).await;
                }
                // A job that ended while this task ran (failed, cancelled) was cleaned up
                // already; this object would outlive it.
                if let Ok(Some(now)) = services.store.get_job(&task.job_id).await {
                    if matches!(now.state, JobState::Failed | JobState::Cancelled) {
                        let _ = shuffle.delete(path).await;
                        files.delete_all().await;
                    }
                }
                Ok(TaskReport::Committed { counter_done, rows })
            }
            CommitOutcome::AlreadySucceeded => {
                debug!("another attempt committed first; discarding this output");
                let _ = shuffle.delete(path).await;
                files.delete_all().await;
                Ok(TaskReport::Duplicate)
            }
        }
    }

    /// Commits, trying again while the store fails transiently (throttled, conflicting,
    /// unavailable): the output is written, and running the task again to get past a
    /// busy store would waste it. The commit is idempotent — a try whose answer was lost
    /// is recognized by its object — so trying again is always safe.
    async fn commit(services: &Services, commit: &TaskCommit) -> Result<CommitOutcome> {
        let mut pause = COMMIT_RETRY_BASE;
        let mut tries = 1;
        loop {
            match services.store.commit_task(commit).await {
                Err(e) if e.is_retryable() && tries < COMMIT_TRIES => {
                    warn!(error = %e, tries, "commit failed transiently; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(COMMIT_RETRY_CAP);
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    /// The fast path: when every commit counter of the stage is at 0, run the scheduler's
    /// step now, in this invocation (the change stream stays the durable path, and a
    /// failed step falls back to waking the scheduler function). It starts a hand-off
    /// path of one request — the commit — plus the counter read of a stage with several
    /// counters ([`Handoff`]).
    async fn advance_if_stage_done(&self, task: &TaskSpec, stage: &StageRecord) {
        let services = &self.services;
        if !services.config.fast_path {
            return;
        }
        let mut origin = Handoff {
            calls: 1,
            stream: false,
        };
        if counters_of(stage.tasks) > 1 {
            origin.calls += 1;
            match services.store.list_counters(&task.job_id, task.stage).await {
                Ok(counters)
                    if counters.len() as u32 == counters_of(stage.tasks)
                        && counters.iter().all(|c| c.remaining == 0) => {}
                Ok(_) => return,
                Err(e) => {
                    warn!(error = %e, "could not read the stage's commit counters");
                    return;
                }
            }
        }
        info!(stage = task.stage, "stage complete");
        let scheduler = crate::scheduler::Scheduler::new(services.clone());
        if let Err(e) = scheduler.advance_with(&task.job_id, Some(origin)).await {
            warn!(error = %e, "the scheduler step after the stage failed; waking the scheduler");
            if let Err(e) = services.invoker.wake_scheduler(&task.job_id).await {
                // The stream trigger is the durable path; this was only a shortcut.
                warn!(error = %e, "fast-path wake-up failed");
            }
        }
    }

    /// The encoded plans of a stage, if this executor has them cached.
    fn cached_plans(&self, job_id: &str, stage: u32) -> Option<StagePlans> {
        let key = (job_id.to_string(), stage);
        self.plans.lock().ok().and_then(|p| p.get(&key).cloned())
    }

    /// Reads a stage's encoded plans — its own from `record` (or, without one, from the
    /// store; from object storage when it lives there) and those of the stages its tasks
    /// also run, from `given` (records its invocation carried) or the store — and caches
    /// them. Counts sequential reads into `reads`.
    async fn load_plans(
        &self,
        services: &Services,
        stage: &StageRecord,
        record: Option<crate::state::PlanRecord>,
        given: &[crate::state::PlanRecord],
        reads: &mut u32,
    ) -> Result<StagePlans> {
        let key = (stage.job_id.clone(), stage.stage);
        let record = match record {
            Some(record) => record,
            None => {
                *reads += 1;
                services
                    .store
                    .get_plan(&stage.job_id, stage.stage)
                    .await?
                    .ok_or_else(|| {
                        Error::Internal(format!(
                            "stage {} of job {} has no plan",
                            stage.stage, stage.job_id
                        ))
                    })?
            }
        };
        if record.plan.is_none() {
            *reads += 1;
        }
        let own = Arc::new(plan::stage_plan_bytes(services, record).await?);
        // Stages fused into this one, a switched join: the plan its tasks really run.
        let mut others = Vec::new();
        for producer in plan::adaptive::plans_needed(stage) {
            let bytes = match given.iter().find(|p| p.stage == producer) {
                Some(record) => {
                    if record.plan.is_none() {
                        *reads += 1;
                    }
                    plan::stage_plan_bytes(services, record.clone()).await?
                }
                None => {
                    *reads += 1;
                    plan::read_stage_plan_bytes(services, &stage.job_id, producer).await?
                }
            };
            others.push((producer, Arc::new(bytes)));
        }
        let plans = StagePlans { own, others };
        if let Ok(mut cache) = self.plans.lock() {
            if cache.len() >= PLAN_CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(key, plans.clone());
        }
        Ok(plans)
    }

    /// The context a task's plan is decoded with: the executor's session over the task's
    /// counting runtime.
    fn decode_context(&self, services: &Services) -> TaskContext {
        TaskContext::from(&self.state).with_runtime(services.runtime.clone())
    }

    /// A task context whose session carries the committed outputs of every stage the
    /// task reads (its inputs, and those of stages fused into it) — exactly as many as
    /// the stage's decision counted when it was claimed; of a split partition's input,
    /// only the producers the decision gave task `task`.
    async fn task_context(
        &self,
        services: &Services,
        stage: &StageRecord,
        task: u32,
        given: &[(u32, Vec<TaskOutput>)],
        reads: &mut u32,
    ) -> Result<Arc<TaskContext>> {
        let wanted: Vec<(u32, Option<u32>)> = match &stage.decision {
            Some(d) => d.input_tasks.iter().map(|&(s, n)| (s, Some(n))).collect(),
            None => stage.inputs.iter().map(|i| (i.stage, None)).collect(),
        };
        let mut stages = HashMap::new();
        for (input, expected) in wanted {
            // An input whose output another stage wrote (a switched join's stage).
            let source = stage
                .decision
                .as_ref()
                .and_then(|d| d.read_from.iter().find(|(i, _)| *i == input))
                .map_or(input, |&(_, s)| s);
            // A task of a split partition or of a combining stage reads some producers
            // only: those of its range (a complete stage's producer `i` is its task `i`).
            let producers = stage
                .decision
                .as_ref()
                .and_then(|d| d.producers_of(task, input));
            let committed = |tasks: Vec<crate::state::TaskRecord>| -> Vec<TaskOutput> {
                tasks
                    .into_iter()
                    .filter(|t| t.state == TaskState::Succeeded)
                    .filter_map(|t| t.output)
                    .collect()
            };
            let (outputs, sliced) = match (given.iter().find(|(s, _)| *s == input), &producers) {
                (Some((_, outputs)), _) => (outputs.clone(), false),
                (None, Some(range)) => {
                    *reads += 1;
                    let tasks = services
                        .store
                        .list_task_range(
                            &stage.job_id,
                            source,
                            range.start as u32,
                            range.end as u32,
                        )
                        .await?;
                    (committed(tasks), true)
                }
                (None, None) => {
                    *reads += 1;
                    let tasks = services.store.list_tasks(&stage.job_id, source).await?;
                    (committed(tasks), false)
                }
            };
            let want = match (&producers, sliced) {
                (Some(range), true) => Some(range.len()),
                _ => expected.map(|n| n as usize),
            };
            if let Some(want) = want {
                if outputs.len() != want {
                    return Err(Error::Internal(format!(
                        "input stage {input} has {} committed outputs; task {task} of stage \
                         {} was planned for {want}",
                        outputs.len(),
                        stage.stage,
                    )));
                }
            }
            let outputs = match producers {
                Some(_) if sliced => outputs,
                Some(range) if range.end <= outputs.len() => outputs[range].to_vec(),
                Some(range) => {
                    return Err(Error::Internal(format!(
                        "task {task} of stage {} reads producers {range:?} of stage {input}, \
                         which has {}",
                        stage.stage,
                        outputs.len()
                    )))
                }
                None => outputs,
            };
            stages.insert(input, outputs);
        }
        let partitions = stage.partitions_of(task);
        let inputs = ShuffleInputs {
            store: services.shuffle_store()?,
            stages,
            fetch_concurrency: 8,
            shared: Some(SharedFetches::new(
                stage.inputs.iter().map(|i| i.stage),
                partitions.start as usize..partitions.end as usize,
            )),
        };
        // A writing stage's files are recorded there, to delete if they are not committed.
        let config = self
            .state
            .config()
            .clone()
            .with_extension(Arc::new(inputs))
            .with_extension(Arc::new(WrittenFiles::default()));
        let ctx = TaskContext::from(&self.state)
            .with_session_config(config)
            .with_runtime(services.runtime.clone());
        Ok(Arc::new(ctx))
    }

    /// Raises `stop` `margin` before `deadline_ms` (the function's deadline), and the
    /// returned flag with it, so that the task fails as out of time rather than cancelled.
    fn watch_deadline(
        deadline_ms: u64,
        margin: Duration,
        stop: Arc<AtomicBool>,
    ) -> (tokio::task::JoinHandle<()>, Arc<AtomicBool>) {
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        let left =
            Duration::from_millis(deadline_ms.saturating_sub(now_ms())).saturating_sub(margin);
        let timer = tokio::spawn(async move {
            tokio::time::sleep(left).await;
            flag.store(true, Ordering::Relaxed);
            stop.store(true, Ordering::Relaxed);
        });
        (timer, fired)
    }

    /// A failure caused by a limit of the function (its local disk) as
    /// [`Error::FunctionLimit`], naming what to raise; other errors as they are.
    fn explain_limits(&self, error: Error) -> Error {
        // DataFusion's disk manager refuses a spill write past `max_temp_directory_size`,
        // for its operators' spills and for the shuffle writer's alike.
        if error.to_string().contains("max_temp_directory_size") {
            let limit = self.services.config.max_spill_bytes.map_or_else(
                || "DataFusion's limit".to_string(),
                |b| format!("{} MiB", b >> 20),
            );
            return Error::FunctionLimit(format!(
                "task spilled more to local disk than it may ({limit}: the function's \
                 ephemeral storage less a tenth kept free). Raise the executor's ephemeral \
                 storage (Terraform executor_ephemeral_storage_mb, at most 10240) or its \
                 memory (executor_memory_mb), or give tasks less work each (bytes_per_task, \
                 shuffle_bytes_per_task). [{error}]"
            ));
        }
        error
    }

    /// Polls the job's state while the task runs and raises `stop` (see
    /// [`stop::StopExec`]) when it is no longer running — cancelled or failed — or when
    /// it is past its deadline (then it also wakes the scheduler, which fails the job, so
    /// the job ends even if nothing else would wake it). It reads the small state item
    /// ([`JobStore::job_state`](crate::state::JobStore::job_state)) every
    /// `cancel_check_interval`, ±20% so that a stage's tasks spread their reads.
    fn watch_job(
        services: &Services,
        task: &TaskSpec,
        deadline_ms: Option<u64>,
        stop: Arc<AtomicBool>,
        superseded: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let store = services.store.clone();
        let invoker = services.invoker.clone();
        let every = services.config.cancel_check_interval;
        let job_id = task.job_id.clone();
        let task = task.clone();
        // Past the speculation floor another attempt of this task may run beside it.
        let speculated_after = services
            .config
            .speculation
            .then(|| now_ms() + services.config.speculation_floor.as_millis() as u64);
        tokio::spawn(async move {
            // A random seed per task, so that a stage's tasks do not read in step.
            let mut draw = uuid::Uuid::new_v4().as_u64_pair().0;
            loop {
                draw = draw
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let jittered =
                    every.mul_f64(0.8 + 0.4 * ((draw >> 11) as f64 / (1u64 << 53) as f64));
                let sleep = match deadline_ms {
                    Some(d) => jittered.min(Duration::from_millis(d.saturating_sub(now_ms()) + 1)),
                    None => jittered,
                };
                tokio::time::sleep(sleep).await;
                if deadline_ms.is_some_and(|d| now_ms() > d) {
                    stop.store(true, Ordering::Relaxed);
                    if let Err(e) = invoker.wake_scheduler(&job_id).await {
                        warn!(error = %e, "could not wake the scheduler for a job past its deadline");
                    }
                    return;
                }
                match store.job_state(&job_id).await {
                    Ok(Some(state)) if state != JobState::Running => {
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                    _ => {}
                }
                if speculated_after.is_some_and(|t| now_ms() >= t) {
                    if let Ok(Some(item)) = store
                        .get_task(&task.job_id, task.stage, task.partition)
                        .await
                    {
                        if item.state == TaskState::Succeeded {
                            superseded.store(true, Ordering::Relaxed);
                            stop.store(true, Ordering::Relaxed);
                            return;
                        }
                    }
                }
            }
        })
    }
}

/// Function slots a task of `stage` counts as ([`threads::TaskThreads::for_stage`]): the
/// memory of the function its stage was claimed for over the executor's, rounded (one on
/// the executor).
fn slot_weight(stage: &StageRecord, config: &EngineConfig) -> usize {
    let memory = plan::adaptive::executor_size::memory_mb(stage.size(), config);
    (memory as f64 / config.executor_memory_mb.max(1) as f64).round() as usize
}
