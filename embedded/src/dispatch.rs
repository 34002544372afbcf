//! The in-process invoker: every invocation becomes a tokio task that waits for one of a
//! fixed number of function slots, like Lambda's concurrency limit. Slots go to the jobs
//! waiting for one in turn ([`FairSlots`]), so a query with a thousand tasks queued does
//! not hold up one with two. The queue is bounded, and so is each job's share of it
//! (a quarter): past either an invocation is refused as throttled (the scheduler sends it
//! again later), and past three quarters of it new queries are turned away.
//!
//! Scheduler-function invocations (scheduler steps, invocation-tree dispatchers) run on
//! a [`ControlPlane`]: a thread with a runtime of its own. On Lambda every invocation has
//! its own CPU; on the tokio runtime the tasks run on, a dispatcher would wait behind
//! every running task at each `.await` (tokio has no priorities), and a wide stage's
//! dispatch through the tree took 56 s at 5,000 tasks against 0.4 s sent in one loop.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use lambdafusion::dispatch::{DispatchRange, InvocationState, Invoker, TaskInvocation, TaskSpec};
use lambdafusion::time::now_ms;
use lambdafusion::{Error, Result};

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

/// The embedded scheduler function's environment: a thread running a runtime of its own,
/// so its invocations get CPU time from the operating system's scheduler beside the
/// tasks instead of queueing behind them on the tasks' runtime. Stops when dropped
/// (what it was running is dropped with it).
pub struct ControlPlane {
    handle: Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ControlPlane {
    /// Starts the control plane's thread.
    pub fn start() -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("lambdafusion-control")
            .build()
            .map_err(|e| Error::Internal(format!("cannot start the control plane: {e}")))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("lambdafusion-control".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                runtime.shutdown_background();
            })
            .map_err(|e| Error::Internal(format!("cannot start the control plane: {e}")))?;
        Ok(Self {
            handle,
            stop: Some(stop),
        })
    }

    /// Runs `future` on the control plane.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane").finish_non_exhaustive()
    }
}

/// Function slots shared fairly between jobs: a freed slot goes to the job that has
/// waited longest since its last turn (round robin over the jobs with invocations
/// waiting), and within a job to its oldest invocation.
#[derive(Debug)]
pub struct FairSlots {
    state: Mutex<Turns>,
}

#[derive(Debug, Default)]
struct Turns {
    free: usize,
    /// Jobs with invocations waiting, in the order they get their next turn.
    order: VecDeque<String>,
    /// Each waiting job's invocations, oldest first.
    waiting: HashMap<String, VecDeque<tokio::sync::oneshot::Sender<Slot>>>,
}

/// A held function slot; dropping it hands the slot on.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<FairSlots>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.release();
    }
}

impl FairSlots {
    /// `slots` slots, all free.
    pub fn new(slots: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Turns {
                free: slots,
                ..Turns::default()
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Slots free now.
    pub fn free(&self) -> usize {
        self.lock().free
    }

    /// Waits for a slot for an invocation of `job`.
    pub async fn acquire(self: &Arc<Self>, job: &str) -> Slot {
        let waiting = {
            let mut turns = self.lock();
            if turns.free > 0 && turns.order.is_empty() {
                turns.free -= 1;
                return Slot {
                    slots: self.clone(),
                };
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            let queue = turns.waiting.entry(job.to_string()).or_default();
            if queue.is_empty() {
                turns.order.push_back(job.to_string());
            }
            turns
                .waiting
                .entry(job.to_string())
                .or_default()
                .push_back(tx);
            rx
        };
        match waiting.await {
            Ok(slot) => slot,
            // The sender is only dropped with the slots themselves: wait forever.
            Err(_) => std::future::pending().await,
        }
    }

    /// Hands a released slot to the next job in turn, or frees it.
    fn release(self: &Arc<Self>) {
        let mut turns = self.lock();
        let mut slot = Slot {
            slots: self.clone(),
        };
        while let Some(job) = turns.order.pop_front() {
            let Some(queue) = turns.waiting.get_mut(&job) else {
                continue;
            };
            let mut handed = false;
            while let Some(tx) = queue.pop_front() {
                match tx.send(slot) {
                    Ok(()) => {
                        handed = true;
                        // A placeholder: the loop ends here.
                        slot = Slot {
                            slots: self.clone(),
                        };
                        break;
                    }
                    // That invocation stopped waiting: the next one.
                    Err(back) => slot = back,
                }
            }
            if queue.is_empty() {
                turns.waiting.remove(&job);
            } else {
                turns.order.push_back(job);
            }
            if handed {
                // The placeholder is not a slot.
                std::mem::forget(slot);
                return;
            }
        }
        turns.free += 1;
        std::mem::forget(slot);
    }
}

/// [`Invoker`] on tokio with `slots` concurrent task invocations and at most `max_queue`
/// invocations waiting for one; scheduler and dispatcher invocations on its
/// [`ControlPlane`].
pub struct LocalInvoker {
    /// The runtime tasks run on (the one the invoker was made on).
    work: Option<Handle>,
    control: ControlPlane,
    slots: Arc<FairSlots>,
    slot_count: usize,
    max_queue: usize,
    tasks: Arc<Mutex<HashMap<TaskSpec, Presence>>>,
    target: OnceLock<Weak<dyn LocalTarget>>,
}

impl std::fmt::Debug for LocalInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalInvoker")
            .field("free_slots", &self.slots.free())
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
    /// waiting invocations (at least one). Tasks run on the runtime it is made on; its
    /// control plane's thread starts here.
    pub fn new(slots: usize, max_queue: usize) -> Result<Self> {
        let slots = slots.max(1);
        Ok(Self {
            work: Handle::try_current().ok(),
            control: ControlPlane::start()?,
            slots: FairSlots::new(slots),
            slot_count: slots,
            max_queue: max_queue.max(1),
            tasks: Arc::new(Mutex::new(HashMap::new())),
            target: OnceLock::new(),
        })
    }

    /// Runs `future` on the control plane (the embedded scheduler function's
    /// environment): the stream trigger, the sweep.
    pub fn spawn_control<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.control.spawn(future)
    }

    /// Runs `future` where tasks run.
    fn spawn_work<F>(&self, future: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        match &self.work {
            Some(work) => drop(work.spawn(future)),
            None => drop(tokio::spawn(future)),
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

    /// Most invocations of one job that may wait for a slot: a quarter of the queue.
    fn job_share(&self) -> usize {
        (self.max_queue / 4).max(1)
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
            let of_job: usize = tasks
                .iter()
                .filter(|(t, _)| t.job_id == task.job_id)
                .map(|(_, p)| p.queued as usize)
                .sum();
            if of_job >= self.job_share() {
                return Err(Error::invoke_throttled(format!(
                    "query {} already has {of_job} tasks waiting for a function slot, its \
                     share of the queue",
                    task.job_id
                )));
            }
            tasks.entry(task.clone()).or_default().queued += 1;
        }
        let slots = self.slots.clone();
        let tasks = self.tasks.clone();
        let task = task.clone();
        let invocation = invocation.clone();
        self.spawn_work(async move {
            let queued = Leave {
                tasks: tasks.clone(),
                task: task.clone(),
                running: false,
            };
            let _slot = slots.acquire(&task.job_id).await;
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
        // invocation of the scheduler function).
        let target = self.target()?;
        self.control.spawn(target.dispatch(range.clone()));
        Ok(())
    }

    async fn wake_scheduler(&self, job_id: &str) -> Result<()> {
        let target = self.target()?;
        self.control
            .spawn(target.wake_scheduler(job_id.to_string()));
        Ok(())
    }

    async fn wake_scheduler_at(&self, job_id: &str, at_ms: u64) -> Result<()> {
        let target = self.target()?;
        let wait = Duration::from_millis(at_ms.saturating_sub(now_ms()));
        let step = target.wake_scheduler(job_id.to_string());
        self.control.spawn(async move {
            tokio::time::sleep(wait).await;
            step.await;
        });
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
        (self.waiting() >= self.max_queue * 3 / 4).then_some(Duration::from_secs(2))
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

    fn task_of(job: &str, p: u32) -> TaskSpec {
        TaskSpec {
            job_id: job.into(),
            ..task(p)
        }
    }

    #[tokio::test]
    async fn the_queue_is_bounded_and_tracks_each_invocation() {
        let target: Arc<dyn LocalTarget> = Arc::new(Slow);
        let invoker = LocalInvoker::new(1, 8).unwrap();
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
        // One query may hold a quarter of the queue (2 of 8).
        let refused = invoker.run_task(&task(3).into()).await.unwrap_err();
        assert!(
            refused.is_retryable(),
            "its share is full: throttled: {refused}"
        );
        assert!(refused.to_string().contains("share"), "{refused}");
        assert!(
            invoker.saturated().is_none(),
            "one query never saturates the engine"
        );
        for (job, p) in [("k", 0), ("k", 1), ("l", 0), ("l", 1)] {
            invoker.run_task(&task_of(job, p).into()).await.unwrap();
        }
        assert_eq!(invoker.waiting(), 6);
        assert!(invoker.saturated().is_some(), "three quarters of the queue");
        invoker.run_task(&task_of("m", 0).into()).await.unwrap();
        invoker.run_task(&task_of("m", 1).into()).await.unwrap();
        let refused = invoker.run_task(&task_of("n", 0).into()).await.unwrap_err();
        assert!(refused.to_string().contains("queue is full"), "{refused}");
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(invoker.state(&task(0)), InvocationState::Unknown, "done");
        assert_eq!(invoker.waiting(), 0);
        assert!(invoker.saturated().is_none());
    }

    /// Records the order tasks start in.
    struct Order(Arc<Mutex<Vec<String>>>);

    impl LocalTarget for Order {
        fn run_task(&self, task: TaskInvocation) -> BoxFuture<'static, ()> {
            let order = self.0.clone();
            async move {
                order
                    .lock()
                    .unwrap()
                    .push(format!("{}{}", task.task.job_id, task.task.partition));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            .boxed()
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

    #[tokio::test]
    async fn slots_go_to_waiting_queries_in_turn() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let target: Arc<dyn LocalTarget> = Arc::new(Order(order.clone()));
        let invoker = LocalInvoker::new(1, 1000).unwrap();
        invoker.bind(Arc::downgrade(&target));
        // A big query queues first, then two small ones.
        for p in 0..20 {
            invoker.run_task(&task_of("a", p).into()).await.unwrap();
        }
        tokio::task::yield_now().await;
        for p in 0..2 {
            invoker.run_task(&task_of("b", p).into()).await.unwrap();
            invoker.run_task(&task_of("c", p).into()).await.unwrap();
        }
        while invoker.waiting() > 0 || order.lock().unwrap().len() < 24 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let order = order.lock().unwrap().clone();
        let position = |name: &str| order.iter().position(|o| o == name).unwrap();
        // The small queries finish within the first turns, not after the big one's 20.
        assert!(position("b1") < 8 && position("c1") < 8, "{order:?}");
        assert_eq!(order.iter().filter(|o| o.starts_with('a')).count(), 20);
        let a: Vec<&String> = order.iter().filter(|o| o.starts_with('a')).collect();
        assert!(
            a.windows(2).all(|w| w[0] < w[1] || w[0].len() < w[1].len()),
            "a's in order: {a:?}"
        );
    }

    /// Tasks that hold every thread of their runtime (never yielding) until a dispatcher
    /// has run: a dispatcher queued behind them on that runtime would never run.
    struct Hogs {
        dispatched: Arc<std::sync::atomic::AtomicBool>,
        told: std::sync::mpsc::Sender<u32>,
    }

    impl LocalTarget for Hogs {
        fn run_task(&self, _task: TaskInvocation) -> BoxFuture<'static, ()> {
            let dispatched = self.dispatched.clone();
            async move {
                let give_up = std::time::Instant::now() + Duration::from_secs(20);
                while !dispatched.load(std::sync::atomic::Ordering::SeqCst)
                    && std::time::Instant::now() < give_up
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            .boxed()
        }
        fn dispatch(&self, range: DispatchRange) -> BoxFuture<'static, ()> {
            let (dispatched, told) = (self.dispatched.clone(), self.told.clone());
            async move {
                dispatched.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = told.send(range.from);
            }
            .boxed()
        }
        fn wake_scheduler(&self, _job_id: String) -> BoxFuture<'static, ()> {
            async {}.boxed()
        }
        fn task_lost(&self, _task: TaskSpec, _error: String) -> BoxFuture<'static, ()> {
            async {}.boxed()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dispatcher_runs_while_tasks_hold_every_thread_of_their_runtime() {
        let (told, heard) = std::sync::mpsc::channel();
        let target: Arc<dyn LocalTarget> = Arc::new(Hogs {
            dispatched: Default::default(),
            told,
        });
        let invoker = LocalInvoker::new(4, 64).unwrap();
        invoker.bind(Arc::downgrade(&target));
        for p in 0..4 {
            invoker.run_task(&task(p).into()).await.unwrap();
        }
        // Both worker threads are now blocked by tasks until the dispatcher has run.
        std::thread::sleep(Duration::from_millis(100));
        let range = DispatchRange {
            job_id: "j".into(),
            stage: 0,
            from: 32,
            to: 64,
            context: None,
            size: Default::default(),
        };
        invoker.dispatch(&range).await.unwrap();
        // This thread blocks too (it is the runtime's own, not a worker).
        assert_eq!(
            heard.recv_timeout(Duration::from_secs(10)),
            Ok(32),
            "the dispatcher waited behind the tasks"
        );
    }
}
