//! AWS backends for lambdafusion — the only crate that knows the AWS SDK.
//!
//! - [`store::DynamoDbJobStore`]: the job store on one DynamoDB table;
//! - [`invoker::LambdaInvoker`]: task dispatch as asynchronous Lambda invocations;
//! - [`s3::S3Registry`]: S3 through `object_store`, any bucket on demand;
//! - [`signing`]: SigV4 for clients of an IAM-authorized deployment;
//! - [`stream`]: DynamoDB stream batches -> change records, partial batch failures;
//! - [`events`]: what the scheduler function receives, told apart;
//! - [`config`]: settings from environment variables, all listed in [`contract`];
//! - [`metrics`]: request counters, logged per invocation;
//! - [`services`]: all of it assembled into the core's [`Services`].

pub mod backoff;
pub mod clients;
pub mod config;
pub mod contract;
pub mod doctor;
pub mod emf;
pub mod events;
pub mod function;
pub mod glue;
pub mod invoker;
pub mod logs;
pub mod metrics;
pub mod region;
pub mod s3;
pub mod signing;
pub mod store;
pub mod stream;
pub mod test_hooks;

use std::sync::Arc;

use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use lambdafusion::services::ShuffleLocation;
use lambdafusion::{Error, Result, Services};
use object_store::path::Path;

pub use config::{AwsSettings, ConfigError, Role};

/// Share of the function's memory a task's DataFusion memory pool may use before
/// spilling to `/tmp`.
const MEMORY_FRACTION: f64 = 0.7;

/// Builds the services of a function from its environment: DynamoDB store, Lambda
/// invoker, S3 registry (the data buckets and the shuffle bucket, nothing else — no local
/// file system), a memory pool per task sized from the function's memory
/// (`AWS_LAMBDA_FUNCTION_MEMORY_SIZE`) spilling to `/tmp`, and — in builds for the local
/// stack only — the fault plan of [`test_hooks`].
pub async fn services(role: Role) -> Result<Services> {
    let settings = AwsSettings::from_env(role).map_err(|e| Error::InvalidInput(e.to_string()))?;
    let faults = test_hooks::faults()?;
    let mut services = services_with(&settings).await?;
    services.faults = faults;
    // Each query this function ends becomes CloudWatch metrics (EMF) in its log stream.
    services.on_job_end = Some(emf::hook(settings.table.clone()));
    Ok(services)
}

/// [`services`] with explicit settings (and no fault plan).
pub async fn services_with(settings: &AwsSettings) -> Result<Services> {
    let sdk = clients::sdk_config().await;
    let store = store::DynamoDbJobStore::new(aws_sdk_dynamodb::Client::new(&sdk), &settings.table);
    let invoker = invoker::LambdaInvoker::new(
        aws_sdk_lambda::Client::new(&sdk),
        settings.executor_function.clone().unwrap_or_default(),
        settings.large_executor_function.clone(),
        settings.scheduler_function.clone(),
        settings.engine.dispatch_concurrency,
    );
    let mut buckets: Vec<String> = settings
        .engine
        .access
        .data_locations
        .iter()
        .chain(&settings.engine.access.write_locations)
        .filter_map(|l| l.strip_prefix("s3://"))
        .map(|l| l.split('/').next().unwrap_or_default().to_string())
        .collect();
    buckets.push(settings.bucket.clone());
    // Spills go to /tmp, within what the function's ephemeral storage leaves free
    // (`max_spill_bytes`, which the executor applies).
    let runtime = RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(s3::S3Registry::new(buckets)))
        .with_disk_manager_builder(
            DiskManagerBuilder::default()
                .with_mode(DiskManagerMode::Directories(vec![std::env::temp_dir()])),
        )
        .build_arc()?;
    let mut engine = settings.engine.clone();
    if let Some(mb) = std::env::var("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        engine.task_memory_limit = Some((mb as f64 * 1024.0 * 1024.0 * MEMORY_FRACTION) as usize);
    }
    let url = ObjectStoreUrl::parse(format!("s3://{}", settings.bucket))?;
    let glue = if settings.glue_databases.is_empty() {
        None
    } else {
        Some(lambdafusion::glue::Glue::new(
            Arc::new(glue::SdkGlue::new(&sdk)),
            settings.glue_databases.clone(),
            settings.glue_default_database.clone(),
        )?)
    };
    Ok(Services {
        store: Arc::new(store),
        invoker: Arc::new(invoker),
        runtime,
        shuffle: ShuffleLocation {
            url,
            prefix: Path::from(settings.prefix.as_str()),
        },
        config: engine,
        glue,
        presigner: Some(s3::bucket_signer(&settings.bucket)?),
        faults: Default::default(),
        on_job_end: None,
    })
}
