//! Push dispatch: the [`Invoker`] seam ("run this task", "scheduler, wake up"), both
//! asynchronous and fire-and-forget like a Lambda `Event` invocation. Implemented
//! in-process by `lambdafusion-embedded` (tokio tasks in a limited number of function
//! slots) and on Lambda by `lambdafusion-aws`.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::state::{JobKind, JobRecord, PlanRecord, StageRecord, TaskOutput};

use crate::Result;

/// The payload of a task invocation: which partition of which stage, and which attempt.
/// The executor reads everything else (the stage plan, input locations) from the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// Partition to run.
    pub partition: u32,
    /// Attempt number, from 1.
    pub attempt: u32,
}

impl TaskSpec {
    /// The failure record of this attempt.
    pub fn failure(
        &self,
        error: String,
        retryable: bool,
        expires_at: u64,
    ) -> crate::state::TaskFailure {
        crate::state::TaskFailure {
            job_id: self.job_id.clone(),
            stage: self.stage,
            partition: self.partition,
            attempt: self.attempt,
            error,
            retryable,
            expires_at,
        }
    }
}

impl std::fmt::Display for TaskSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job {} stage {} task {} attempt {}",
            self.job_id, self.stage, self.partition, self.attempt
        )
    }
}

/// Which executor function runs a stage's tasks: the executor, or — where the deployment
/// has one (`large_executor_memory_mb`) — the large executor, chosen per stage at its
/// claim ([`crate::plan::adaptive::executor_size`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorSize {
    /// The executor function (`executor_memory_mb`).
    #[default]
    Standard,
    /// The large executor function (`large_executor_memory_mb`).
    Large,
}

impl ExecutorSize {
    /// Whether this is the standard executor (for `skip_serializing_if`).
    pub fn is_standard(&self) -> bool {
        *self == Self::Standard
    }
}

/// The payload of a task invocation: the task, and — when the dispatcher could send it
/// within the payload limit — what it already read for the task, so that the executor
/// starts its work without reading the store first (see [`DispatchContext`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskInvocation {
    /// The task.
    #[serde(flatten)]
    pub task: TaskSpec,
    /// What the dispatcher knew of it; `None`: the executor reads it from the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Arc<DispatchContext>>,
    /// When the process running the task must have answered, in ms since the epoch (on
    /// Lambda, the invocation's deadline): the task stops
    /// [`EngineConfig::deadline_margin`](crate::EngineConfig) before it. Set by the
    /// function that receives the event, never part of it.
    #[serde(skip)]
    pub deadline_ms: Option<u64>,
    /// The function that runs it (its stage's choice): the invoker's target, never part
    /// of the event.
    #[serde(skip)]
    pub size: ExecutorSize,
}

impl From<TaskSpec> for TaskInvocation {
    fn from(task: TaskSpec) -> Self {
        Self {
            task,
            context: None,
            deadline_ms: None,
            size: ExecutorSize::Standard,
        }
    }
}

/// What the scheduler that claimed a stage hands its tasks, read once for all of them:
/// the job, the stage as claimed, its inputs' committed outputs and its plans. Records
/// are immutable once written (a claimed stage, committed outputs, plans), so a copy in
/// the payload is as good as a read — except the job's state, which the executor watches
/// while it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchContext {
    /// The job, as far as a task needs it.
    pub job: JobBrief,
    /// The stage as claimed (its decision included).
    pub stage: StageRecord,
    /// The committed outputs of every stage its tasks read, per stage read (the stage
    /// whose tasks wrote them), in producer order; empty when they did not fit the
    /// payload (the executor reads them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<(u32, Vec<TaskOutput>)>,
    /// The stored plans its tasks run (its own and those of the stages run inside it);
    /// empty when they did not fit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plans: Vec<PlanRecord>,
    /// The path from the commit that made the stage ready to this dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Handoff>,
}

/// What a task needs of its job record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobBrief {
    /// Query or `EXPLAIN ANALYZE` (whose tasks record their operators' metrics).
    pub kind: JobKind,
    /// When the job must have finished (ms since epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// The job's key in the fault plan ([`crate::faults::job_key`] of its SQL).
    pub key: String,
}

impl JobBrief {
    /// The brief of `job`.
    pub fn of(job: &JobRecord) -> Self {
        Self {
            kind: job.kind,
            deadline_ms: job.deadline_ms,
            key: crate::faults::job_key(&job.sql),
        }
    }
}

/// The hand-off path that led to a dispatch: how many requests were made one after
/// another between the commit that completed a stage's last input and the invocation
/// of its tasks — the commit, the counter reads, the scheduler's snapshot read, the
/// claim, the invocations (one per level of an invocation tree); the executor adds its
/// own reads before work and records the total in its completion record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    /// Sequential requests so far.
    pub calls: u32,
    /// Whether the scheduler was woken by the change stream (whose delivery adds its
    /// polling latency but no request) rather than by the committing task itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

impl Handoff {
    /// `n` more sequential requests.
    pub fn plus(self, n: u32) -> Self {
        Self {
            calls: self.calls + n,
            ..self
        }
    }
}

/// A node of an invocation tree: dispatch tasks `from..to` of a claimed stage (or, for a
/// wide range, further nodes over parts of it). See [`crate::scheduler`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchRange {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// First task.
    pub from: u32,
    /// One past the last task.
    pub to: u32,
    /// What the tasks are handed (see [`TaskInvocation::context`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Arc<DispatchContext>>,
    /// The function its tasks run on (their stage's choice).
    #[serde(default, skip_serializing_if = "ExecutorSize::is_standard")]
    pub size: ExecutorSize,
}

impl std::fmt::Display for DispatchRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job {} stage {} tasks {}..{}",
            self.job_id, self.stage, self.from, self.to
        )
    }
}

/// The event of a node of an invocation tree, as the scheduler function receives it:
/// `{"dispatch": {...}}`. Dispatchers are scheduler invocations — short, small, and
/// never waiting for a function slot behind the very tasks they are to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchEvent {
    /// The range to dispatch.
    pub dispatch: DispatchRange,
}

/// What an invoker knows of one task invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationState {
    /// Nothing (Lambda does not tell): the task's deadline runs from its dispatch.
    Unknown,
    /// Accepted and waiting for a free function slot: not running, no deadline yet.
    Queued,
    /// Running since this time (ms since epoch): the deadline runs from here.
    Running {
        /// When it got its slot.
        since_ms: u64,
    },
}

/// Starts functions asynchronously. `Ok` means the invocation was accepted, not that it
/// ran: like Lambda's `Event` invocations, it may run later, twice, or never (the sweep
/// finds tasks that never report). A refusal says whether it may be sent again later
/// ([`crate::Error::is_retryable`]: throttled or transient) or never.
#[async_trait]
pub trait Invoker: Send + Sync + std::fmt::Debug {
    /// Invokes the executor for one task.
    async fn run_task(&self, invocation: &TaskInvocation) -> Result<()>;

    /// Invokes a dispatcher (the scheduler function) for a range of a stage's tasks (a
    /// node of an invocation tree), which invokes them — or further dispatchers — in turn.
    async fn dispatch(&self, range: &DispatchRange) -> Result<()>;

    /// Invokes the scheduler for one job (the fast path after a stage completes).
    async fn wake_scheduler(&self, job_id: &str) -> Result<()>;

    /// Has the scheduler step run for one job no sooner than `at_ms` (the next check for
    /// stragglers, [`crate::scheduler`]'s speculation). Default: nothing; the job's next
    /// event checks instead.
    async fn wake_scheduler_at(&self, _job_id: &str, _at_ms: u64) -> Result<()> {
        Ok(())
    }

    /// What is known of an invocation of `task` (default: nothing).
    fn state(&self, _task: &TaskSpec) -> InvocationState {
        InvocationState::Unknown
    }

    /// `Some(retry_after)` when so much work is queued that new queries should wait
    /// (default: never).
    fn saturated(&self) -> Option<std::time::Duration> {
        None
    }
}
