//! The in-process invoker: every invocation becomes a tokio task that waits for one of a
//! fixed number of function slots, like Lambda's concurrency limit.

use std::sync::{Arc, OnceLock, Weak};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::Semaphore;

use super::{Invoker, TaskSpec};
use crate::{Error, Result};

/// What the local invoker invokes: the embedded "functions".
pub trait LocalTarget: Send + Sync {
    /// Runs one task to its end (the executor function).
    fn run_task(&self, task: TaskSpec) -> BoxFuture<'static, ()>;
    /// Runs the scheduler step for one job (the scheduler function).
    fn wake_scheduler(&self, job_id: String) -> BoxFuture<'static, ()>;
    /// Told when a task invocation died without reporting (a panic): the on-failure
    /// destination of a real async invocation.
    fn task_lost(&self, task: TaskSpec, error: String) -> BoxFuture<'static, ()>;
}

/// [`Invoker`] on tokio with `slots` concurrent task invocations.
pub struct LocalInvoker {
    slots: Arc<Semaphore>,
    target: OnceLock<Weak<dyn LocalTarget>>,
}

impl std::fmt::Debug for LocalInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalInvoker")
            .field("free_slots", &self.slots.available_permits())
            .finish()
    }
}

impl LocalInvoker {
    /// An invoker with `slots` function slots (at least one).
    pub fn new(slots: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(slots.max(1))),
            target: OnceLock::new(),
        }
    }

    /// Connects the invoker to the functions it runs. The invoker holds them weakly, so
    /// dropping the embedded engine stops it.
    pub fn bind(&self, target: Weak<dyn LocalTarget>) {
        let _ = self.target.set(target);
    }

    fn target(&self) -> Result<Arc<dyn LocalTarget>> {
        self.target
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| Error::Invoke("the embedded engine has shut down".into()))
    }
}

#[async_trait]
impl Invoker for LocalInvoker {
    async fn run_task(&self, task: &TaskSpec) -> Result<()> {
        let target = self.target()?;
        let slots = self.slots.clone();
        let task = task.clone();
        tokio::spawn(async move {
            let Ok(_slot) = slots.acquire_owned().await else {
                return;
            };
            let run = std::panic::AssertUnwindSafe(target.run_task(task.clone()));
            if let Err(panic) = run.catch_unwind().await {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                target
                    .task_lost(task, format!("executor crashed: {message}"))
                    .await;
            }
        });
        Ok(())
    }

    async fn wake_scheduler(&self, job_id: &str) -> Result<()> {
        let target = self.target()?;
        tokio::spawn(target.wake_scheduler(job_id.to_string()));
        Ok(())
    }
}
