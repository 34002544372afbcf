//! Push dispatch: the [`Invoker`] seam ("run this task", "scheduler, wake up"), both
//! asynchronous and fire-and-forget like a Lambda `Event` invocation, and the in-process
//! [`LocalInvoker`] that runs them on tokio with a limited number of function slots.

mod local;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use local::{LocalInvoker, LocalTarget};

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
    async fn run_task(&self, task: &TaskSpec) -> Result<()>;

    /// Invokes the scheduler for one job (the fast path after a stage completes).
    async fn wake_scheduler(&self, job_id: &str) -> Result<()>;

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
