//! A hand-driven engine for the failure-model tests: an in-memory store (optionally
//! behind a hook that fails, delays or records calls), an invoker that only records what
//! it is asked to run (optionally refusing some invocations), and the stream delivered
//! to a fresh scheduler on demand — so each test decides exactly which events happen.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use lambdafusion::dispatch::{DispatchRange, InvocationState, Invoker, TaskInvocation, TaskSpec};
use lambdafusion::executor::Executor;
use lambdafusion::faults::Faults;
use lambdafusion::scheduler::{Scheduler, SubmitOptions};
use lambdafusion::state::intercept::Hook;
use lambdafusion::state::{ChangeRecord, Intercepted, JobState, JobStore};
use lambdafusion::{EngineConfig, Error, Services};
use lambdafusion_embedded::in_memory_services;
use lambdafusion_embedded::EmbeddedStore;
use tokio::sync::mpsc::UnboundedReceiver;

/// A join over both test tables: several stages, a broadcast and a hash shuffle.
pub const JOIN: &str = "SELECT d.label, count(*) AS n, sum(f.v) AS total FROM facts f \
                    JOIN dims d ON f.k = d.k GROUP BY d.label";

/// An invoker that only records what it was asked to run.
#[derive(Default)]
pub struct RecordingInvoker {
    /// Tasks accepted and not yet taken.
    pub tasks: Mutex<Vec<TaskSpec>>,
    /// The same invocations, with what their dispatcher handed them.
    pub invocations: Mutex<Vec<TaskInvocation>>,
    /// Invocation-tree dispatchers accepted and not yet taken.
    pub ranges: Mutex<Vec<DispatchRange>>,
    /// Errors to answer the next invocations with, in order.
    pub refusals: Mutex<VecDeque<Error>>,
    /// What `state` reports for every task.
    pub state: Mutex<Option<InvocationState>>,
}

impl std::fmt::Debug for RecordingInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingInvoker").finish_non_exhaustive()
    }
}

#[async_trait]
impl Invoker for RecordingInvoker {
    async fn run_task(&self, invocation: &TaskInvocation) -> lambdafusion::Result<()> {
        if let Some(refusal) = self.refusals.lock().unwrap().pop_front() {
            return Err(refusal);
        }
        self.tasks.lock().unwrap().push(invocation.task.clone());
        self.invocations.lock().unwrap().push(invocation.clone());
        Ok(())
    }
    async fn dispatch(&self, range: &DispatchRange) -> lambdafusion::Result<()> {
        if let Some(refusal) = self.refusals.lock().unwrap().pop_front() {
            return Err(refusal);
        }
        self.ranges.lock().unwrap().push(range.clone());
        Ok(())
    }
    async fn wake_scheduler(&self, _job_id: &str) -> lambdafusion::Result<()> {
        Ok(())
    }
    fn state(&self, _task: &TaskSpec) -> InvocationState {
        self.state
            .lock()
            .unwrap()
            .unwrap_or(InvocationState::Unknown)
    }
}

impl RecordingInvoker {
    /// Takes the tasks accepted so far.
    pub fn take(&self) -> Vec<TaskSpec> {
        self.invocations.lock().unwrap().clear();
        std::mem::take(&mut *self.tasks.lock().unwrap())
    }

    /// Takes the task invocations accepted so far, with what they were handed.
    pub fn take_invocations(&self) -> Vec<TaskInvocation> {
        self.tasks.lock().unwrap().clear();
        std::mem::take(&mut *self.invocations.lock().unwrap())
    }

    /// Takes the dispatchers accepted so far.
    pub fn take_ranges(&self) -> Vec<DispatchRange> {
        std::mem::take(&mut *self.ranges.lock().unwrap())
    }
}

/// The hand-driven engine. See the [module docs](self).
pub struct Harness {
    /// What schedulers and executors are built on (the store may be intercepted).
    pub services: Services,
    /// The store itself, never intercepted: for assertions.
    pub store: EmbeddedStore,
    /// The invoker.
    pub invoker: Arc<RecordingInvoker>,
    /// The store's change stream.
    pub stream: UnboundedReceiver<Vec<ChangeRecord>>,
    /// Where the test tables are.
    pub dir: tempfile::TempDir,
}

impl Harness {
    /// A harness with `config`, the test tables registered.
    pub async fn new(config: EngineConfig) -> Self {
        Self::with(config, None, Faults::default()).await
    }

    /// A harness whose store calls go through `hook` (after the tables are registered),
    /// with the fault plan `faults`.
    pub async fn with(config: EngineConfig, hook: Option<Hook>, faults: Faults) -> Self {
        let dir = tempfile::tempdir().unwrap();
        super::write_tables(dir.path()).await;
        let invoker = Arc::new(RecordingInvoker::default());
        let config = super::allow(config.with_fast_path(false), dir.path());
        let (mut services, store) = in_memory_services(invoker.clone(), config).unwrap();
        let stream = store.take_stream().unwrap();
        for sql in super::create_statements(dir.path()) {
            Scheduler::new(services.clone())
                .submit(&sql, &SubmitOptions::default())
                .await
                .unwrap();
        }
        if let Some(hook) = hook {
            services.store = Arc::new(Intercepted::new(Arc::new(store.clone()), hook));
        }
        services.faults = faults;
        Self {
            services,
            store,
            invoker,
            stream,
            dir,
        }
    }

    /// A fresh scheduler.
    pub fn scheduler(&self) -> Scheduler {
        Scheduler::new(self.services.clone())
    }

    /// Submits `sql` as the local caller; returns the job id.
    pub async fn submit(&self, sql: &str) -> String {
        self.scheduler()
            .submit(sql, &SubmitOptions::default())
            .await
            .unwrap()
            .job_id
    }

    /// A fresh executor.
    pub fn executor(&self) -> Executor {
        Executor::new(self.services.clone())
    }

    /// Delivers every queued stream batch to a fresh scheduler; returns how many.
    pub async fn deliver_stream(&mut self) -> usize {
        let mut batches = 0;
        while let Ok(batch) = self.stream.try_recv() {
            self.scheduler().on_records(&batch).await.unwrap();
            batches += 1;
        }
        batches
    }

    /// The job's state.
    pub async fn state(&self, job: &str) -> JobState {
        self.store.get_job(job).await.unwrap().unwrap().state
    }

    /// Runs dispatched tasks (each through `run`) and stream events until the job ends.
    pub async fn drive<F, Fut>(&mut self, job: &str, mut run: F)
    where
        F: FnMut(Executor, TaskSpec) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        for _ in 0..200 {
            for range in self.invoker.take_ranges() {
                self.scheduler().dispatch_range(&range).await.unwrap();
            }
            for task in self.invoker.take() {
                run(self.executor(), task).await;
            }
            self.deliver_stream().await;
            if self.state(job).await.is_terminal() {
                return;
            }
        }
        panic!("job {job} made no progress");
    }

    /// Runs every dispatched task with a fresh executor until the job ends.
    pub async fn run_to_end(&mut self, job: &str) {
        self.drive(job, |executor, task| async move {
            executor.handle(&task).await.unwrap();
        })
        .await;
    }

    /// Checks the result of a [`JOIN`] job against DataFusion.
    pub async fn check_result(&self, job: &str) {
        let (_, batches) = lambdafusion::results::collect(&self.services, job)
            .await
            .unwrap();
        let expected = super::reference(self.dir.path(), JOIN).await;
        lambdafusion_embedded::verify::compare(&expected, &batches, false).unwrap();
    }
}
