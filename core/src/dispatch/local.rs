//! The in-process invoker: every invocation becomes a tokio task that waits for one of a
//! fixed number of function slots, like Lambda's concurrency limit. The queue of tasks
//! waiting for a slot is bounded: past it an invocation is refused as throttled (the
//! scheduler sends it again later), and past half of it new queries are turned away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::Semaphore;

use super::{DispatchRange, InvocationState, Invoker, TaskInvocation, TaskSpec};
use crate::time::now_ms;
use crate::{Error, Result};

/// What the local invoker invokes: the embedded "functions".
pub trait LocalTarget: Send + Sync {
    /// Runs one task to its end (the executor function).
    fn run_task(&self, invocation: TaskInvocation) -> BoxFuture<'static, ()>;
    /// Runs one node of an invocation tree (the executor function, dispatching).
    fn dispatch(&self, range: DispatchRange) -> BoxFuture<'static, ()>;
    /// Runs the scheduler step for one job (the scheduler function).
    fn wake_scheduler(&self, job_id: String) -> BoxFuture<'static, ()>;
    /// Told when a task invocation died without reporting (a panic): the on-failure
    /// destination of a real async invocation.
    fn task_lost(&self, task: TaskSpec, error: String) -> BoxFuture<'static, ()>;
}

/// Invocations of one task attempt in the invoker.
#[derive(Debug, Default, Clone, Copy)]
struct Presence {
    /// Waiting for a slot.
    queued: u32,
    /// Running, with the earliest start.
    running_since: Option<u64>,
    running: u32,
}

/// [`Invoker`] on tokio with `slots` concurrent task invocations and at most `max_queue`
/// invocations waiting for one.
pub struct LocalInvoker {
    slots: Arc<Semaphore>,
    slot_count: usize,
    max_queue: usize,
    tasks: Arc<Mutex<HashMap<TaskSpec, Presence>>>,
    target: OnceLock<Weak<dyn LocalTarget>>,
}

impl std::fmt::Debug for LocalInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalInvoker")
            .field("free_slots", &self.slots.available_permits())
            .field("waiting", &self.waiting())
            .finish()
    }
}

/// Removes a task's presence when its invocation ends, even by panic or abort.
struct Leave {
    tasks: Arc<Mutex<HashMap<TaskSpec, Presence>>>,
    task: TaskSpec,
    running: bool,
}

impl Drop for Leave {
    fn drop(&mut self) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = tasks.get_mut(&self.task) {
            if self.running {
                p.running = p.running.saturating_sub(1);
                if p.running == 0 {
                    p.running_since = None;
                }
            } else {
                p.queued = p.queued.saturating_sub(1);
            }
            if p.queued == 0 && p.running == 0 {
                tasks.remove(&self.task);
            }
        }
    }
}

impl LocalInvoker {
    /// An invoker with `slots` function slots (at least one) and room for `max_queue`
    /// waiting invocations (at least one).
    pub fn new(slots: usize, max_queue: usize) -> Self {
        let slots = slots.max(1);
        Self {
            slots: Arc::new(Semaphore::new(slots)),
            slot_count: slots,
            max_queue: max_queue.max(1),
            tasks: Arc::new(Mutex::new(HashMap::new())),
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
            .ok_or_else(|| Error::invoke("the embedded engine has shut down"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskSpec, Presence>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Invocations waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.lock().values().map(|p| p.queued as usize).sum()
    }
}

#[async_trait]
impl Invoker for LocalInvoker {
    async fn run_task(&self, invocation: &TaskInvocation) -> Result<()> {
        let task = &invocation.task;
        let target = self.target()?;
        {
            let mut tasks = self.lock();
            let waiting: usize = tasks.values().map(|p| p.queued as usize).sum();
            if waiting >= self.max_queue {
                return Err(Error::invoke_throttled(format!(
                    "the embedded engine's task queue is full ({waiting} tasks waiting for \
                     {} function slots)",
                    self.slot_count
                )));
            }
            tasks.entry(task.clone()).or_default().queued += 1;
        }
        let slots = self.slots.clone();
        let tasks = self.tasks.clone();
        let task = task.clone();
        let invocation = invocation.clone();
        tokio::spawn(async move {
            let queued = Leave {
                tasks: tasks.clone(),
                task: task.clone(),
                running: false,
            };
            let Ok(_slot) = slots.acquire_owned().await else {
                return;
            };
            {
                let mut map = tasks.lock().unwrap_or_else(|p| p.into_inner());
                let p = map.entry(task.clone()).or_default();
                p.running += 1;
                p.running_since.get_or_insert(now_ms());
            }
            drop(queued);
            let _running = Leave {
                tasks,
                task: task.clone(),
                running: true,
            };
            let run = std::panic::AssertUnwindSafe(target.run_task(invocation));
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

    async fn dispatch(&self, range: &DispatchRange) -> Result<()> {
        // A dispatcher only invokes: it takes no function slot (on Lambda it is a short
        // invocation of its own).
        let target = self.target()?;
        tokio::spawn(target.dispatch(range.clone()));
        Ok(())
    }

    async fn wake_scheduler(&self, job_id: &str) -> Result<()> {
        let target = self.target()?;
        tokio::spawn(target.wake_scheduler(job_id.to_string()));
        Ok(())
    }

    fn state(&self, task: &TaskSpec) -> InvocationState {
        match self.lock().get(task) {
            Some(Presence {
                running_since: Some(since_ms),
                ..
            }) => InvocationState::Running {
                since_ms: *since_ms,
            },
            Some(p) if p.queued > 0 => InvocationState::Queued,
            _ => InvocationState::Unknown,
        }
    }

    fn saturated(&self) -> Option<Duration> {
        (self.waiting() >= self.max_queue.div_ceil(2)).then_some(Duration::from_secs(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Slow;

    impl LocalTarget for Slow {
        fn run_task(&self, _task: TaskInvocation) -> BoxFuture<'static, ()> {
            tokio::time::sleep(Duration::from_millis(300)).boxed()
        }
        fn dispatch(&self, _range: DispatchRange) -> BoxFuture<'static, ()> {
            async {}.boxed()
        }
        fn wake_scheduler(&self, _job_id: String) -> BoxFuture<'static, ()> {
            async {}.boxed()
        }
        fn task_lost(&self, _task: TaskSpec, _error: String) -> BoxFuture<'static, ()> {
            async {}.boxed()
        }
    }

    fn task(p: u32) -> TaskSpec {
        TaskSpec {
            job_id: "j".into(),
            stage: 0,
            partition: p,
            attempt: 1,
        }
    }

    #[tokio::test]
    async fn the_queue_is_bounded_and_tracks_each_invocation() {
        let target: Arc<dyn LocalTarget> = Arc::new(Slow);
        let invoker = LocalInvoker::new(1, 2);
        invoker.bind(Arc::downgrade(&target));
        for p in 0..3 {
            invoker.run_task(&task(p).into()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(matches!(
            invoker.state(&task(0)),
            InvocationState::Running { .. }
        ));
        assert_eq!(invoker.state(&task(1)), InvocationState::Queued);
        assert_eq!(invoker.waiting(), 2);
        assert!(invoker.saturated().is_some());
        let refused = invoker.run_task(&task(3).into()).await.unwrap_err();
        assert!(refused.is_retryable(), "a full queue throttles: {refused}");
        assert!(refused.to_string().contains("queue is full"), "{refused}");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(invoker.state(&task(0)), InvocationState::Unknown, "done");
        assert_eq!(invoker.waiting(), 0);
        assert!(invoker.saturated().is_none());
    }
}
