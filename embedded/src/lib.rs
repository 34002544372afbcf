//! The embedded engine: the very scheduler and executor code of the serverless path,
//! wired to in-process backends — [`EmbeddedStore`] (with its change stream playing the
//! DynamoDB stream), [`LocalInvoker`] (tokio tasks in a fixed number of function slots)
//! and the local file system (or memory) standing in for S3. `lambdafusion serve` puts
//! the HTTP API (`lambdafusion-api`) in front of it; the tests drive it directly.

pub mod dispatch;
pub mod store;
pub mod verify;

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use tracing::{info, warn};

use lambdafusion::access::ConfinedFileSystem;
use lambdafusion::dispatch::{DispatchRange, TaskInvocation, TaskSpec};
use lambdafusion::error::StoreErrorKind;
use lambdafusion::executor::Executor;
use lambdafusion::hidden::HideMarkers;
use lambdafusion::scheduler::{Scheduler, SubmitOptions};
use lambdafusion::services::ShuffleLocation;
use lambdafusion::state::{JobState, JobStore};
use lambdafusion::status::JobStatus;
use lambdafusion::time::now_ms;
use lambdafusion::{EngineConfig, Error, Result, Services};

pub use dispatch::{ControlPlane, LocalInvoker, LocalTarget};
pub use store::EmbeddedStore;

/// Options of the embedded engine.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Directory for the job store and shuffle data; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    /// Engine settings. Its access policy's data locations are the directories tables
    /// may be read from (`--allow-path`); the engine adds its own files as reserved.
    pub config: EngineConfig,
    /// Concurrent tasks ("function slots").
    pub slots: usize,
    /// Task invocations that may wait for a slot; past it (or past a quarter of it for
    /// one query) dispatches are throttled, and past three quarters of it new queries
    /// get 503.
    pub max_queued_tasks: usize,
    /// Memory all slots may use together; each task gets an equal share as its own
    /// memory pool and spills to the data directory past it. `None`: half of the
    /// machine's memory.
    pub memory_limit: Option<usize>,
    /// How often the engine sweeps (re-sends throttled and lost tasks, enforces
    /// deadlines) and expires old jobs.
    pub sweep_interval: Duration,
    /// The fault plan the engine's tasks and scheduler steps inject (tests: crashes stay
    /// in the process). None by default.
    pub faults: lambdafusion::faults::Faults,
    /// The attached Glue databases (`--glue-database`); none by default.
    pub glue: Option<lambdafusion::glue::Glue>,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        let slots = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;
        Self {
            data_dir: None,
            config: EngineConfig::default(),
            slots,
            max_queued_tasks: slots * 256,
            memory_limit: None,
            sweep_interval: Duration::from_secs(5),
            faults: Default::default(),
            glue: None,
        }
    }
}

/// Total memory of this machine, from `/proc/meminfo` (Linux); `None` elsewhere.
pub fn machine_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: usize = info
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// A finished query: its status and its rows.
#[derive(Debug, Clone)]
pub struct QueryOutput {
    /// The job's final status.
    pub status: JobStatus,
    /// Result schema.
    pub schema: SchemaRef,
    /// Result rows.
    pub batches: Vec<RecordBatch>,
}

/// The embedded engine. See the [module docs](self).
pub struct Embedded {
    services: Services,
    store: EmbeddedStore,
    executor: Arc<Executor>,
    stream: tokio::task::JoinHandle<()>,
    sweep: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("services", &self.services)
            .finish()
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.stream.abort();
        self.sweep.abort();
    }
}

impl Embedded {
    /// Starts an engine. Jobs left running by an earlier process on the same data
    /// directory are failed: their tasks died with that process.
    pub async fn start(options: EmbeddedOptions) -> Result<Arc<Self>> {
        let mut config = options.config.clone();
        let memory = options
            .memory_limit
            .or_else(|| machine_memory().map(|m| m / 2));
        if config.task_memory_limit.is_none() {
            config.task_memory_limit = memory.map(|m| m / options.slots.max(1));
        }
        let (store, shuffle, runtime) = match &options.data_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir.join("shuffle")).map_err(|e| {
                    Error::store(
                        StoreErrorKind::Invalid,
                        format!("cannot create data directory {}: {e}", dir.display()),
                    )
                })?;
                let dir = std::fs::canonicalize(dir).map_err(|e| {
                    Error::store(
                        StoreErrorKind::Invalid,
                        format!("cannot resolve {}: {e}", dir.display()),
                    )
                })?;
                let store = EmbeddedStore::open(&dir.join("state.redb"))?;
                let prefix = Path::from_filesystem_path(dir.join("shuffle"))
                    .map_err(|e| Error::InvalidInput(e.to_string()))?;
                let url = ObjectStoreUrl::parse("file://").map_err(Error::from)?;
                // Tables may be read from the allowed directories only.
                config.access.reserved_locations.extend([
                    dir.join("shuffle").display().to_string(),
                    dir.join("state.redb").display().to_string(),
                    dir.join("spill").display().to_string(),
                ]);
                // Table directories are read-only; the engine writes its shuffle directory
                // and the write locations alone (spill files go through the disk manager,
                // not this store).
                let mut writable = config.access.local_write_roots();
                writable.push(dir.join("shuffle"));
                let files = ConfinedFileSystem::new(
                    Arc::new(LocalFileSystem::new()),
                    config.access.local_roots(),
                    writable,
                );
                let runtime = RuntimeEnvBuilder::new()
                    .with_disk_manager_builder(
                        DiskManagerBuilder::default()
                            .with_mode(DiskManagerMode::Directories(vec![dir.join("spill")])),
                    )
                    .build_arc()?;
                runtime.register_object_store(
                    url.as_ref(),
                    Arc::new(HideMarkers::new(Arc::new(files))),
                );
                (store, ShuffleLocation { url, prefix }, runtime)
            }
            None => in_memory_parts(&config)?,
        };
        let invoker = Arc::new(LocalInvoker::new(options.slots, options.max_queued_tasks)?);
        let services = Services {
            store: Arc::new(store.clone()),
            invoker: invoker.clone(),
            runtime,
            shuffle,
            config,
            glue: options.glue.clone(),
            presigner: None,
            faults: options.faults.clone(),
            on_job_end: None,
        };
        let stream = store
            .take_stream()
            .ok_or_else(|| Error::Internal("job store stream already taken".into()))?;
        let every = options.sweep_interval;
        let engine = Arc::new_cyclic(|me: &Weak<Embedded>| {
            let target: Weak<dyn LocalTarget> = me.clone();
            invoker.bind(target);
            Embedded {
                // The scheduler function's triggers run where its invocations do.
                stream: invoker.spawn_control(drive_stream(services.clone(), stream)),
                sweep: invoker.spawn_control(sweep_periodically(
                    services.clone(),
                    store.clone(),
                    every,
                )),
                executor: Arc::new(Executor::new(services.clone()).with_slots(options.slots)),
                services,
                store,
            }
        });
        engine.recover().await?;
        Ok(engine)
    }

    /// Fails jobs a previous process left running. No task of theirs survived it, so the
    /// files of a write among them are cleaned up now: all of them for one that did not
    /// commit, those its commit does not list for one that did.
    async fn recover(&self) -> Result<()> {
        for job_id in self.store.active_jobs(None, usize::MAX).await? {
            // As it was before it is failed below: the clean-up keeps what a success
            // committed.
            let snapshot = self.store.load_job(&job_id).await?;
            let failed = self
                .store
                .finish_job(
                    &job_id,
                    JobState::Failed,
                    Some(
                        "the embedded engine restarted while this query ran; submit it again"
                            .into(),
                    ),
                    now_ms(),
                )
                .await;
            match failed {
                Ok(true) => info!(job = %job_id, "failed a job interrupted by a restart"),
                Ok(false) => self.store.remove_active(&job_id).await?,
                Err(e) => return Err(e),
            }
            if let Some(snapshot) = snapshot {
                lambdafusion::write::last_clean_up(&self.services, &snapshot).await;
            }
        }
        Ok(())
    }

    /// The shared services (store, invoker, object stores, settings).
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Deletes finished jobs past their TTL now (the periodic sweep does it every minute).
    pub async fn expire(&self) -> Result<usize> {
        expire(&self.services, &self.store).await
    }

    /// A fresh scheduler over this engine's services.
    pub fn scheduler(&self) -> Scheduler {
        Scheduler::new(self.services.clone())
    }

    /// Submits `sql` and returns the job id without waiting.
    pub async fn submit(&self, sql: &str) -> Result<String> {
        Ok(self
            .scheduler()
            .submit(sql, &SubmitOptions::default())
            .await?
            .job_id)
    }

    /// Waits up to `timeout` for a job to end and returns its status.
    pub async fn wait(&self, job_id: &str, timeout: Duration) -> Result<JobStatus> {
        lambdafusion::status::wait_for_status(&self.services, job_id, timeout).await
    }

    /// Runs `sql` to the end and returns its rows; a failed or cancelled query is
    /// [`Error::QueryFailed`] with the job's message.
    pub async fn sql(&self, sql: &str) -> Result<QueryOutput> {
        let job_id = self.submit(sql).await?;
        self.finish(&job_id, Duration::from_secs(3600), |_| {})
            .await
    }

    /// Waits for job `job_id` to end — handing `progress` its status at least every
    /// `every` — and reads its rows; a job that failed or was cancelled is
    /// [`Error::QueryFailed`] with its id, state and message.
    pub async fn finish(
        &self,
        job_id: &str,
        every: Duration,
        mut progress: impl FnMut(&JobStatus),
    ) -> Result<QueryOutput> {
        let status = loop {
            let status = self.wait(job_id, every).await?;
            progress(&status);
            if status.is_terminal() {
                break status;
            }
        };
        if status.state != JobState::Succeeded.as_str() {
            return Err(Error::QueryFailed(format!(
                "query {} {}: {}",
                status.id,
                status.state,
                status.error.clone().unwrap_or_default()
            )));
        }
        let (schema, batches) = lambdafusion::results::collect(&self.services, job_id).await?;
        Ok(QueryOutput {
            status,
            schema,
            batches,
        })
    }
}

fn in_memory_parts(
    config: &EngineConfig,
) -> Result<(EmbeddedStore, ShuffleLocation, Arc<RuntimeEnv>)> {
    let store = EmbeddedStore::in_memory()?;
    let url = ObjectStoreUrl::parse("memory://").map_err(Error::from)?;
    let runtime = RuntimeEnvBuilder::new().build_arc()?;
    runtime.register_object_store(url.as_ref(), Arc::new(InMemory::new()));
    // Local tables only from the allowed directories.
    let files = ConfinedFileSystem::new(
        Arc::new(LocalFileSystem::new()),
        config.access.local_roots(),
        config.access.local_write_roots(),
    );
    let file_url = ObjectStoreUrl::parse("file://").map_err(Error::from)?;
    runtime.register_object_store(
        file_url.as_ref(),
        Arc::new(HideMarkers::new(Arc::new(files))),
    );
    let prefix = Path::from("lambdafusion");
    Ok((store, ShuffleLocation { url, prefix }, runtime))
}

/// Services on an in-memory store and object store with the given invoker — for tests
/// that drive the scheduler and executor by hand. Nothing consumes the store's stream
/// unless the caller takes it ([`EmbeddedStore::take_stream`]).
pub fn in_memory_services(
    invoker: Arc<dyn lambdafusion::dispatch::Invoker>,
    config: EngineConfig,
) -> Result<(Services, EmbeddedStore)> {
    let (store, shuffle, runtime) = in_memory_parts(&config)?;
    let services = Services {
        store: Arc::new(store.clone()),
        invoker,
        runtime,
        shuffle,
        config,
        glue: None,
        presigner: None,
        faults: Default::default(),
        on_job_end: None,
    };
    Ok((services, store))
}

/// The embedded "stream trigger": every batch of change records goes to a fresh
/// scheduler, in order, like a DynamoDB stream shard to a Lambda function.
async fn drive_stream(
    services: Services,
    mut stream: tokio::sync::mpsc::UnboundedReceiver<Vec<lambdafusion::state::ChangeRecord>>,
) {
    while let Some(mut batch) = stream.recv().await {
        // Like Lambda's batching window: take whatever else is already queued.
        while let Ok(more) = stream.try_recv() {
            batch.extend(more);
        }
        if let Err(e) = Scheduler::new(services.clone()).on_records(&batch).await {
            warn!(error = %e, "scheduler failed on a stream batch; the sweep will re-drive it");
        }
    }
}

/// The embedded "scheduled rule": a sweep every `every`, re-driving jobs whose wake-ups
/// were lost, re-sending throttled tasks and retrying tasks past their deadline; and the
/// embedded TTL: finished jobs past `job_ttl` lose their records and result objects.
async fn sweep_periodically(services: Services, store: EmbeddedStore, every: Duration) {
    // The first sweep runs one interval after start, not at once: `recover` must fail
    // the jobs a previous process left running before any sweep advances them.
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Err(e) = Scheduler::new(services.clone()).sweep().await {
            warn!(error = %e, "sweep failed");
        }
        if let Err(e) = expire(&services, &store).await {
            warn!(error = %e, "expiring old jobs failed");
        }
    }
}

/// Deletes finished jobs past their TTL, records and objects.
pub async fn expire(services: &Services, store: &EmbeddedStore) -> Result<usize> {
    let expired = store.expire_jobs(now_ms() / 1000).await?;
    let objects = services.shuffle_store()?;
    let jobs: std::collections::HashSet<String> = expired.iter().cloned().collect();
    lambdafusion::shuffle::delete_jobs_objects(objects.as_ref(), &services.shuffle.prefix, &jobs)
        .await;
    if !expired.is_empty() {
        info!(jobs = expired.len(), "expired old jobs");
    }
    Ok(expired.len())
}

impl LocalTarget for Embedded {
    fn run_task(&self, invocation: TaskInvocation) -> BoxFuture<'static, ()> {
        let executor = self.executor.clone();
        async move {
            if let Err(e) = executor.handle_invocation(&invocation).await {
                warn!(task = %invocation.task, error = %e, "task failure could not be recorded");
            }
        }
        .boxed()
    }

    fn dispatch(&self, range: DispatchRange) -> BoxFuture<'static, ()> {
        let scheduler = self.scheduler();
        async move {
            if let Err(e) = scheduler.dispatch_range(&range).await {
                warn!(%range, error = %e, "dispatcher failed; its range is sent again later");
            }
        }
        .boxed()
    }

    fn wake_scheduler(&self, job_id: String) -> BoxFuture<'static, ()> {
        let scheduler = self.scheduler();
        async move {
            if let Err(e) = scheduler.wake(&job_id).await {
                warn!(job = %job_id, error = %e, "fast-path scheduler step failed");
            }
        }
        .boxed()
    }

    fn task_lost(&self, task: TaskSpec, error: String) -> BoxFuture<'static, ()> {
        let scheduler = self.scheduler();
        async move {
            if let Err(e) = scheduler.on_task_lost(&task, &error).await {
                warn!(%task, error = %e, "could not record a lost task");
            }
        }
        .boxed()
    }
}
