//! The executor: runs one task — one partition of one stage — and commits it.
//!
//! [`Executor::handle`] is what an executor function calls per task event: it loads the
//! stage plan (decoded once per stage and cached), hands the stage's readers the
//! committed outputs of its input stages, writes the task's shuffle object and commits
//! the completion record in one conditional step. A duplicate delivery, or a slower
//! twin attempt, loses the commit and changes nothing. If the commit completed the
//! stage, the executor wakes the scheduler at once (the fast path).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::execution::{SessionState, TaskContext};
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::ExecutionPlan;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use tracing::{debug, info, warn, Instrument};

use crate::dispatch::TaskSpec;
use crate::plan;
use crate::shuffle::{task_output_path, ShuffleInputs, ShuffleWriterExec};
use crate::state::{CommitOutcome, JobState, StageRecord, TaskCommit, TaskOutput, TaskState};
use crate::time::now_ms;
use crate::{Error, Result, Services};

/// How a task invocation ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskReport {
    /// This attempt committed; the stage has `remaining` tasks left.
    Committed {
        /// Tasks of the stage still running.
        remaining: u32,
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
                Err(Error::Cancelled(_)) => Ok(TaskReport::Skipped("job cancelled".into())),
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
        let started_ms = now_ms();
        let job = store
            .get_job(&task.job_id)
            .await?
            .ok_or_else(|| Error::InvalidInput(format!("task for unknown job {}", task.job_id)))?;
        if job.state.is_terminal() {
            return Ok(TaskReport::Skipped(format!(
                "job is {}",
                job.state.as_str()
            )));
        }
        if let Some(t) = store
            .get_task(&task.job_id, task.stage, task.partition)
            .await?
        {
            if t.state == TaskState::Succeeded {
                return Ok(TaskReport::Skipped("task already succeeded".into()));
            }
        }
        let stage = store
            .get_stage(&task.job_id, task.stage)
            .await?
            .ok_or_else(|| {
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
        let plan = reset_plan_states(self.stage_plan(&stage).await?)?;
        let writer = ShuffleWriterExec::from_plan(&plan)?;
        let context = self.task_context(&stage).await?;

        let cancelled = Arc::new(AtomicBool::new(false));
        let watcher = self.watch_cancellation(&task.job_id, cancelled.clone());
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
        let written = writer
            .write_partition(
                task.partition as usize,
                context,
                shuffle.as_ref(),
                &path,
                &cancelled,
                &task.job_id,
            )
            .await;
        watcher.abort();
        let summary = written?;
        let finished_ms = now_ms();
        let commit = TaskCommit {
            job_id: task.job_id.clone(),
            stage: task.stage,
            partition: task.partition,
            output: TaskOutput {
                attempt: task.attempt,
                object: path.to_string(),
                ends: summary.ends.clone(),
                rows: summary.rows,
                bytes: summary.bytes,
                started_ms,
                finished_ms,
            },
            now_ms: finished_ms,
            expires_at: self.services.expires_at(),
        };
        match store.commit_task(&commit).await? {
            CommitOutcome::Committed { remaining } => {
                debug!(
                    rows = summary.rows,
                    bytes = summary.bytes,
                    remaining,
                    "task committed"
                );
                if remaining == 0 {
                    info!(stage = task.stage, "stage complete");
                    if self.services.config.fast_path {
                        if let Err(e) = self.services.invoker.wake_scheduler(&task.job_id).await {
                            // The stream trigger is the durable path; this was only a shortcut.
                            warn!(error = %e, "fast-path wake-up failed");
                        }
                    }
                }
                Ok(TaskReport::Committed {
                    remaining,
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

    /// The decoded stage plan, from the cache or the store.
    async fn stage_plan(&self, stage: &StageRecord) -> Result<Arc<dyn ExecutionPlan>> {
        let key = (stage.job_id.clone(), stage.stage);
        if let Some(plan) = self.plans.lock().ok().and_then(|p| p.get(&key).cloned()) {
            return Ok(plan);
        }
        let bytes = match (&stage.plan, &stage.plan_object) {
            (Some(bytes), _) => bytes.clone(),
            (None, Some(object)) => self
                .services
                .shuffle_store()?
                .get(&Path::from(object.as_str()))
                .await?
                .bytes()
                .await?
                .to_vec(),
            (None, None) => {
                return Err(Error::Internal(format!(
                    "stage {} of job {} has no plan",
                    stage.stage, stage.job_id
                )))
            }
        };
        let plan = plan::decode_plan(&bytes, &self.state.task_ctx())?;
        if let Ok(mut plans) = self.plans.lock() {
            if plans.len() >= PLAN_CACHE_ENTRIES {
                plans.clear();
            }
            plans.insert(key, plan.clone());
        }
        Ok(plan)
    }

    /// A task context whose session carries the committed outputs of the input stages.
    async fn task_context(&self, stage: &StageRecord) -> Result<Arc<TaskContext>> {
        let mut stages = HashMap::new();
        for input in &stage.inputs {
            let tasks = self
                .services
                .store
                .list_tasks(&stage.job_id, input.stage)
                .await?;
            let outputs: Vec<TaskOutput> = tasks
                .into_iter()
                .filter(|t| t.state == TaskState::Succeeded)
                .filter_map(|t| t.output)
                .collect();
            stages.insert(input.stage, outputs);
        }
        let inputs = ShuffleInputs {
            store: self.services.shuffle_store()?,
            stages,
            fetch_concurrency: 8,
        };
        let config = self.state.config().clone().with_extension(Arc::new(inputs));
        let ctx = TaskContext::from(&self.state).with_session_config(config);
        Ok(Arc::new(ctx))
    }

    /// Polls the job state while the task runs and raises `cancelled` when it ends.
    fn watch_cancellation(
        &self,
        job_id: &str,
        cancelled: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.services.store.clone();
        let every = self.services.config.cancel_check_interval;
        let job_id = job_id.to_string();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Ok(Some(job)) = store.get_job(&job_id).await {
                    if job.state != JobState::Running {
                        cancelled.store(true, Ordering::Relaxed);
                        return;
                    }
                }
            }
        })
    }
}
