//! [`Services`]: the handles scheduler, executor and API share — the job store, the
//! invoker, object storage and the engine settings. Built once per process (or per
//! Lambda container) and cloned cheaply.

use std::sync::Arc;

use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SessionState;
use object_store::path::Path;
use object_store::ObjectStore;

use crate::dispatch::Invoker;
use crate::state::JobStore;
use crate::{EngineConfig, Result};

/// Where shuffle objects, results and large stage plans live.
#[derive(Debug, Clone)]
pub struct ShuffleLocation {
    /// Object store URL registered in the runtime (`s3://bucket`, `file:///`, `memory://`).
    pub url: ObjectStoreUrl,
    /// Key prefix inside that store.
    pub prefix: Path,
}

/// Shared handles. See the [module docs](self).
#[derive(Clone)]
pub struct Services {
    /// The job store.
    pub store: Arc<dyn JobStore>,
    /// Dispatches tasks and wakes the scheduler.
    pub invoker: Arc<dyn Invoker>,
    /// DataFusion runtime: its object store registry resolves table data and shuffle URLs.
    pub runtime: Arc<RuntimeEnv>,
    /// Shuffle location.
    pub shuffle: ShuffleLocation,
    /// Engine settings.
    pub config: EngineConfig,
    /// The attached Glue databases and their client; `None` when none are attached.
    pub glue: Option<crate::glue::Glue>,
    /// Presigns URLs to the shuffle store, so clients can download large results from
    /// object storage directly (S3); `None` where there is nothing to presign (embedded).
    pub presigner: Option<Arc<dyn object_store::signer::Signer>>,
    /// The seeded fault plan of this process (empty unless testing the failure model).
    pub faults: crate::faults::Faults,
    /// Told of each job this process ended (succeeded, failed or cancelled it), with its
    /// final status and owner; the AWS functions write it as CloudWatch metrics.
    pub on_job_end: Option<JobEndHook>,
}

/// See [`Services::on_job_end`].
pub type JobEndHook = Arc<dyn Fn(&crate::status::JobStatus, &str) + Send + Sync>;

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("store", &self.store)
            .field("invoker", &self.invoker)
            .field("shuffle", &self.shuffle)
            .finish_non_exhaustive()
    }
}

impl Services {
    /// The object store holding shuffle data.
    pub fn shuffle_store(&self) -> Result<Arc<dyn ObjectStore>> {
        Ok(self.runtime.object_store(&self.shuffle.url)?)
    }

    /// A DataFusion session state configured for this engine, planning with
    /// `target_partitions` partitions.
    pub fn session_state(&self, target_partitions: usize) -> SessionState {
        crate::plan::session_state(self.runtime.clone(), &self.config, target_partitions)
    }

    /// The object store URL of the shuffle location as a table location would name it
    /// (`s3://bucket/prefix`, `file:///dir`), for the access policy's reserved list.
    pub fn shuffle_location(&self) -> String {
        format!(
            "{}/{}",
            self.shuffle.url.as_str().trim_end_matches('/'),
            self.shuffle.prefix
        )
    }

    /// These services as one task attempt (or one submission) uses them: every store call
    /// and object request counted into `tally` ([`crate::requests`]), a cache of table
    /// listings of their own, and, with `memory_limit`, a memory pool of that size of its
    /// own (operators spill past it).
    pub fn counted(
        &self,
        tally: &Arc<crate::requests::Tally>,
        memory_limit: Option<usize>,
    ) -> Result<Services> {
        use crate::requests::{count_store_call, sink, CountingRegistry};
        use crate::state::intercept::{Action, Hook};
        let counting = tally.clone();
        let hook: Hook = Arc::new(move |call| {
            count_store_call(&counting, call.op);
            Action::Proceed
        });
        let registry = Arc::new(CountingRegistry::new(
            self.runtime.object_store_registry.clone(),
            sink(tally.clone()),
        ));
        let mut runtime =
            datafusion::execution::runtime_env::RuntimeEnvBuilder::from_runtime_env(&self.runtime)
                .with_object_store_registry(registry);
        // A list of a table's files of its own: DataFusion keeps listings without expiry,
        // and one shared across queries hid the files added to a table since its first
        // query from every later one (a warm scheduler's or `serve`'s). Within one
        // submission or attempt, a table is listed once.
        runtime.cache_manager.list_files_cache = None;
        if let Some(limit) = memory_limit {
            runtime = runtime.with_memory_pool(Arc::new(
                datafusion::execution::memory_pool::FairSpillPool::new(limit),
            ));
        }
        Ok(Services {
            store: Arc::new(crate::state::Intercepted::new(self.store.clone(), hook)),
            runtime: runtime.build_arc()?,
            ..self.clone()
        })
    }

    /// TTL for records written now (seconds since epoch).
    pub fn expires_at(&self) -> u64 {
        (crate::time::now_ms() / 1000) + self.config.job_ttl.as_secs()
    }
}
