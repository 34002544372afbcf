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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::ExecutionPlan;
use object_store::ObjectStoreExt;
use tracing::{debug, info, warn, Instrument};

use crate::dispatch::TaskSpec;
use crate::faults::{job_key, FaultKind};
use crate::plan;
use crate::shuffle::{task_output_path, ShuffleInputs, ShuffleWriterExec};
use crate::state::{
    counters_of, CommitOutcome, JobKind, JobRecord, JobState, StageRecord, TaskCommit, TaskOutput,
    TaskState,
};
use crate::time::now_ms;
use crate::{Error, Result, Services};

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

/// Stage plans kept per executor (per warm Lambda container).
const PLAN_CACHE_ENTRIES: usize = 64;

/// Tries of a commit that fails transiently, before the attempt is given up (about a
/// minute of waiting with the pauses below, on top of the store's own retries).
const COMMIT_TRIES: u32 = 10;
/// First pause between commit tries.
const COMMIT_RETRY_BASE: Duration = Duration::from_millis(100);
/// Longest pause between commit tries.
const COMMIT_RETRY_CAP: Duration = Duration::from_secs(10);

/// Runs tasks. Create one per process (it caches decoded stage plans).
pub struct Executor {
    services: Services,
    state: SessionState,
    plans: Mutex<HashMap<(String, u32), Arc<dyn ExecutionPlan>>>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").finish_non_exhaustive()
    }
}

impl Executor {
    /// An executor over `services`.
    pub fn new(services: Services) -> Self {
        let state = services.session_state(1);
        Self {
            services,
            state,
            plans: Mutex::new(HashMap::new()),
        }
    }

    /// Runs a task and reports how it ended; a failure is recorded in the store (so the
    /// scheduler retries it or fails the job) rather than returned. Errors are returned
    /// only when even recording the failure failed.
    pub async fn handle(&self, task: &TaskSpec) -> Result<TaskReport> {
        let span = tracing::info_span!(
            "task",
            job = %task.job_id,
            stage = task.stage,
            task = task.partition,
            attempt = task.attempt
        );
        async {
            match self.run(task).await {
                Ok(report) => Ok(report),
                Err(Error::Cancelled(_)) => Ok(TaskReport::Skipped("job ended".into())),
                Err(error) => {
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
    pub async fn run(&self, task: &TaskSpec) -> Result<TaskReport> {
        let store = &self.services.store;
        let faults = &self.services.faults;
        let started_ms = now_ms();
        // The job, the stage, the task's item and (unless cached) the plan: one read.
        let cached = self.cached_plan(&task.job_id, task.stage);
        let view = store
            .task_view(&task.job_id, task.stage, task.partition, cached.is_none())
            .await?;
        let job = view
            .job
            .ok_or_else(|| Error::InvalidInput(format!("task for unknown job {}", task.job_id)))?;
        let key = format!(
            "{}/{}/{}/{}",
            job_key(&job.sql),
            task.stage,
            task.partition,
            task.attempt
        );
        faults.crash_point(FaultKind::ExecutorCrashBeforeWork, &key)?;
        if job.state.is_terminal() {
            return Ok(TaskReport::Skipped(format!(
                "job is {}",
                job.state.as_str()
            )));
        }
        if job.is_overdue(started_ms) {
            // The scheduler fails it (and cleans up); this task has nothing to add.
            let _ = self.services.invoker.wake_scheduler(&job.job_id).await;
            return Ok(TaskReport::Skipped("job is past its deadline".into()));
        }
        if view.task.is_some_and(|t| t.state == TaskState::Succeeded) {
            return Ok(TaskReport::Skipped("task already succeeded".into()));
        }
        let stage = view.stage.ok_or_else(|| {
            Error::InvalidInput(format!(
                "task for unknown stage {} of job {}",
                task.stage, task.job_id
            ))
        })?;
        if task.partition >= stage.tasks {
            return Err(Error::InvalidInput(format!(
                "task {} does not exist: stage {} has {} tasks",
                task.partition, task.stage, stage.tasks
            )));
        }
        // A fresh copy of the cached plan: operators keep per-execution state (a hash
        // join's build side, scan bookkeeping) that must not leak between tasks.
        let stop = Arc::new(AtomicBool::new(false));
        let plan = match cached {
            Some(plan) => plan,
            None => self.load_plan(&stage, view.plan).await?,
        };
        let plan = reset_plan_states(plan)?;
        let writer = ShuffleWriterExec::from_plan(&plan)?;
        let writer = writer.with_input(stop::StopExec::wrap_leaves_and_joins(
            writer.input().clone(),
            stop.clone(),
            &task.job_id,
        )?);
        let context = self.task_context(&stage, task.partition).await?;

        let watcher = self.watch_job(job.clone(), stop.clone());
        let execution = uuid::Uuid::new_v4().simple().to_string();
        let path = task_output_path(
            &self.services.shuffle.prefix,
            &task.job_id,
            task.stage,
            task.partition,
            task.attempt,
            &execution[..12],
        );
        let shuffle = self.services.shuffle_store()?;
        // The stream hands over its first batch only after reading and computing it: a
        // crash there is a crash mid-work, whatever the task's size.
        let before_batch = |written: usize| -> Result<()> {
            if written == 0 {
                faults.crash_point(FaultKind::ExecutorCrashMidWork, &key)?;
            }
            Ok(())
        };
        let partitions = stage.partitions_of(task.partition);
        let written = writer
            .write_partitions(
                partitions.start as usize..partitions.end as usize,
                context,
                &shuffle,
                &path,
                &before_batch,
            )
            .await;
        watcher.abort();
        let summary = written?;
        // EXPLAIN ANALYZE: the operators' figures go into the completion record.
        let metrics = match job.kind {
            JobKind::Analyze => crate::analyze::task_metrics(&writer, &summary),
            JobKind::Query | JobKind::Statement => Vec::new(),
        };
        faults.crash_point(FaultKind::ExecutorCrashAfterPut, &key)?;
        let finished_ms = now_ms();
        let commit = TaskCommit {
            job_id: task.job_id.clone(),
            stage: task.stage,
            partition: task.partition,
            stage_tasks: stage.tasks,
            output: TaskOutput {
                attempt: task.attempt,
                object: path.to_string(),
                ends: summary.ends.clone(),
                rows: summary.rows,
                bytes: summary.bytes,
                started_ms,
                finished_ms,
                metrics,
            },
            now_ms: finished_ms,
            expires_at: self.services.expires_at(),
        };
        match self.commit(&commit).await? {
            CommitOutcome::Committed { counter_done } => {
                debug!(
                    rows = summary.rows,
                    bytes = summary.bytes,
                    counter_done,
                    "task committed"
                );
                faults.crash_point(FaultKind::ExecutorCrashAfterCommit, &key)?;
                if counter_done {
                    self.wake_if_stage_done(task, &stage).await;
                }
                // A job that ended while this task ran (failed, cancelled) was cleaned up
                // already; this object would outlive it.
                if let Ok(Some(now)) = store.get_job(&task.job_id).await {
                    if matches!(now.state, JobState::Failed | JobState::Cancelled) {
                        let _ = shuffle.delete(&path).await;
                    }
                }
                Ok(TaskReport::Committed {
                    counter_done,
                    rows: summary.rows,
                })
            }
            CommitOutcome::AlreadySucceeded => {
                debug!("another attempt committed first; discarding this output");
                let _ = shuffle.delete(&path).await;
                Ok(TaskReport::Duplicate)
            }
        }
    }

    /// Commits, trying again while the store fails transiently (throttled, conflicting,
    /// unavailable): the output is written, and running the task again to get past a
    /// busy store would waste it. The commit is idempotent — a try whose answer was lost
    /// is recognized by its object — so trying again is always safe.
    async fn commit(&self, commit: &TaskCommit) -> Result<CommitOutcome> {
        let mut pause = COMMIT_RETRY_BASE;
        let mut tries = 1;
        loop {
            match self.services.store.commit_task(commit).await {
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

    /// The fast path: when every commit counter of the stage is at 0, wake the scheduler
    /// now instead of waiting for the change stream (which stays the durable path).
    async fn wake_if_stage_done(&self, task: &TaskSpec, stage: &StageRecord) {
        if !self.services.config.fast_path {
            return;
        }
        let done = match self
            .services
            .store
            .list_counters(&task.job_id, task.stage)
            .await
        {
            Ok(counters) => {
                counters.len() as u32 == counters_of(stage.tasks)
                    && counters.iter().all(|c| c.remaining == 0)
            }
            Err(e) => {
                warn!(error = %e, "could not read the stage's commit counters");
                false
            }
        };
        if done {
            info!(stage = task.stage, "stage complete");
            if let Err(e) = self.services.invoker.wake_scheduler(&task.job_id).await {
                // The stream trigger is the durable path; this was only a shortcut.
                warn!(error = %e, "fast-path wake-up failed");
            }
        }
    }

    /// The decoded plan of a stage, if this executor has it cached.
    fn cached_plan(&self, job_id: &str, stage: u32) -> Option<Arc<dyn ExecutionPlan>> {
        let key = (job_id.to_string(), stage);
        self.plans.lock().ok().and_then(|p| p.get(&key).cloned())
    }

    /// Decodes a stage's plan record (reading the plan object when the plan lives in
    /// object storage) and caches the plan.
    async fn load_plan(
        &self,
        stage: &StageRecord,
        record: Option<crate::state::PlanRecord>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let key = (stage.job_id.clone(), stage.stage);
        let record = record.ok_or_else(|| {
            Error::Internal(format!(
                "stage {} of job {} has no plan",
                stage.stage, stage.job_id
            ))
        })?;
        let bytes = plan::stage_plan_bytes(&self.services, record).await?;
        let plan = plan::decode_plan(&bytes, &self.state.task_ctx())?;
        // Stages fused into this one, a switched join: the plan its tasks really run.
        let mut others = HashMap::new();
        for producer in plan::adaptive::plans_needed(stage) {
            let ctx = self.state.task_ctx();
            let other =
                plan::read_stage_plan(&self.services, &stage.job_id, producer, &ctx).await?;
            others.insert(producer, other);
        }
        let plan = plan::adaptive::task_plan(stage, plan, &others)?;
        if let Ok(mut plans) = self.plans.lock() {
            if plans.len() >= PLAN_CACHE_ENTRIES {
                plans.clear();
            }
            plans.insert(key, plan.clone());
        }
        Ok(plan)
    }

    /// A task context whose session carries the committed outputs of every stage the
    /// task reads (its inputs, and those of stages fused into it) — exactly as many as
    /// the stage's decision counted when it was claimed; of a split partition's input,
    /// only the producers the decision gave task `task`.
    async fn task_context(&self, stage: &StageRecord, task: u32) -> Result<Arc<TaskContext>> {
        let reads: Vec<(u32, Option<u32>)> = match &stage.decision {
            Some(d) => d.input_tasks.iter().map(|&(s, n)| (s, Some(n))).collect(),
            None => stage.inputs.iter().map(|i| (i.stage, None)).collect(),
        };
        let mut stages = HashMap::new();
        for (input, expected) in reads {
            // An input whose output another stage wrote (a switched join's stage).
            let source = stage
                .decision
                .as_ref()
                .and_then(|d| d.read_from.iter().find(|(i, _)| *i == input))
                .map_or(input, |&(_, s)| s);
            let tasks = self
                .services
                .store
                .list_tasks(&stage.job_id, source)
                .await?;
            let outputs: Vec<TaskOutput> = tasks
                .into_iter()
                .filter(|t| t.state == TaskState::Succeeded)
                .filter_map(|t| t.output)
                .collect();
            if let Some(expected) = expected {
                if outputs.len() != expected as usize {
                    return Err(Error::Internal(format!(
                        "input stage {input} has {} committed outputs; stage {} was planned \
                         for {expected}",
                        outputs.len(),
                        stage.stage,
                    )));
                }
            }
            let producers = stage
                .decision
                .as_ref()
                .and_then(|d| d.producers_of(task, input));
            let outputs = match producers {
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
        let inputs = ShuffleInputs {
            store: self.services.shuffle_store()?,
            stages,
            fetch_concurrency: 8,
        };
        let config = self.state.config().clone().with_extension(Arc::new(inputs));
        let mut ctx = TaskContext::from(&self.state).with_session_config(config);
        if let Some(limit) = self.services.config.task_memory_limit {
            // Each task its own pool: one task's hash table cannot starve its neighbours,
            // and past the limit operators spill (to the runtime's disk manager).
            let runtime = RuntimeEnvBuilder::from_runtime_env(self.state.runtime_env())
                .with_memory_pool(Arc::new(FairSpillPool::new(limit)))
                .build_arc()?;
            ctx = ctx.with_runtime(runtime);
        }
        Ok(Arc::new(ctx))
    }

    /// Polls the job while the task runs and raises `stop` (see [`stop::StopExec`]) when
    /// it is no longer running — cancelled, failed, or past its deadline (then it also
    /// wakes the scheduler, which fails the job, so the job ends even if nothing else
    /// would wake it).
    fn watch_job(&self, job: JobRecord, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
        let store = self.services.store.clone();
        let invoker = self.services.invoker.clone();
        let every = self.services.config.cancel_check_interval;
        tokio::spawn(async move {
            loop {
                let sleep = match job.deadline_ms {
                    Some(d) => every.min(Duration::from_millis(d.saturating_sub(now_ms()) + 1)),
                    None => every,
                };
                tokio::time::sleep(sleep).await;
                match store.get_job(&job.job_id).await {
                    Ok(Some(current)) if current.is_overdue(now_ms()) => {
                        stop.store(true, Ordering::Relaxed);
                        if let Err(e) = invoker.wake_scheduler(&job.job_id).await {
                            warn!(error = %e, "could not wake the scheduler for a job past its deadline");
                        }
                        return;
                    }
                    Ok(Some(current)) if current.state != JobState::Running => {
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                    _ => {}
                }
            }
        })
    }
}
