//! Holds the IAM contract (`lambdafusion_aws::contract`) against what each function
//! really does: a whole job — DDL, a multi-stage query, a lost task retried by the sweep,
//! a cancel — is driven with the scheduler and the executor each on its own recording
//! job store, object store and invoker. Every DynamoDB action, S3 request kind and Lambda
//! invocation each of them made must be granted to that function, and every action
//! granted must have been used by it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::SessionContext;
use lambdafusion::access::Caller;
use lambdafusion::dispatch::{DispatchRange, Invoker, TaskInvocation, TaskSpec};
use lambdafusion::executor::Executor;
use lambdafusion::requests::{CountingStore, Request};
use lambdafusion::scheduler::{Scheduler, SubmitOptions};
use lambdafusion::services::ShuffleLocation;
use lambdafusion::state::intercept::{Action, Call};
use lambdafusion::state::*;
use lambdafusion::{EngineConfig, Result, Services};
use lambdafusion_aws::contract::*;
use lambdafusion_aws::store::actions_of;
use lambdafusion_embedded::EmbeddedStore;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;

type Log = Arc<Mutex<BTreeSet<String>>>;

/// A job store that records which operations are called.
fn recording(store: &EmbeddedStore, log: Log) -> Intercepted {
    Intercepted::new(
        Arc::new(store.clone()),
        Arc::new(move |call: Call<'_>| {
            log.lock().unwrap().insert(call.op.to_string());
            Action::Proceed
        }),
    )
}

/// An invoker that queues what it is asked and records which function it invoked.
#[derive(Debug, Default)]
struct Queue {
    tasks: Mutex<Vec<TaskSpec>>,
    ranges: Mutex<Vec<DispatchRange>>,
    wakes: Mutex<Vec<String>>,
    log: Log,
}

#[async_trait]
impl Invoker for Queue {
    async fn run_task(&self, invocation: &TaskInvocation) -> Result<()> {
        self.log
            .lock()
            .unwrap()
            .insert("lambda:InvokeFunction -> executor".into());
        self.tasks.lock().unwrap().push(invocation.task.clone());
        Ok(())
    }
    async fn dispatch(&self, range: &DispatchRange) -> Result<()> {
        self.log
            .lock()
            .unwrap()
            .insert("lambda:InvokeFunction -> scheduler".into());
        self.ranges.lock().unwrap().push(range.clone());
        Ok(())
    }
    async fn wake_scheduler(&self, job_id: &str) -> Result<()> {
        self.log
            .lock()
            .unwrap()
            .insert("lambda:InvokeFunction -> scheduler".into());
        self.wakes.lock().unwrap().push(job_id.to_string());
        Ok(())
    }
}

/// One function's view: its own recording store, invoker and object stores.
struct Function {
    services: Services,
    store_log: Log,
    s3_log: Log,
    invoker: Arc<Queue>,
}

fn function(
    store: &EmbeddedStore,
    shuffle: Arc<dyn ObjectStore>,
    data: Arc<dyn ObjectStore>,
    config: &EngineConfig,
) -> Function {
    let store_log = Log::default();
    let s3_log = Log::default();
    let invoker = Arc::new(Queue::default());
    let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
    let sink = |log: Log, bucket: &'static str| -> lambdafusion::requests::Sink {
        Arc::new(move |r: Request, _| {
            let action = match r {
                Request::ObjectGet => "s3:GetObject",
                Request::ObjectPut => "s3:PutObject",
                Request::ObjectDelete => "s3:DeleteObject",
                Request::ObjectList => "s3:ListBucket",
                Request::ObjectGetBytes => return,
                other => panic!("{other:?} from an object store"),
            };
            log.lock().unwrap().insert(format!("{bucket} {action}"));
        })
    };
    runtime.register_object_store(
        ObjectStoreUrl::parse("s3://shuffle").unwrap().as_ref(),
        Arc::new(CountingStore::new(shuffle, sink(s3_log.clone(), "shuffle"))),
    );
    runtime.register_object_store(
        ObjectStoreUrl::parse("s3://data").unwrap().as_ref(),
        Arc::new(CountingStore::new(data, sink(s3_log.clone(), "data"))),
    );
    let services = Services {
        store: Arc::new(recording(store, store_log.clone())),
        invoker: invoker.clone(),
        runtime,
        shuffle: ShuffleLocation {
            url: ObjectStoreUrl::parse("s3://shuffle").unwrap(),
            prefix: Path::from("lambdafusion"),
        },
        config: config.clone(),
        glue: None,
        presigner: None,
        faults: Default::default(),
        on_job_end: None,
    };
    Function {
        services,
        store_log,
        s3_log,
        invoker,
    }
}

fn granted(
    table: &[&str],
    bucket_objects: &[&str],
    bucket: &[&str],
    data_objects: &[&str],
    data: &[&str],
    lambda_targets: &[&str],
) -> BTreeSet<String> {
    table
        .iter()
        .map(|a| a.to_string())
        .chain(
            bucket_objects
                .iter()
                .chain(bucket)
                .map(|a| format!("shuffle {a}")),
        )
        .chain(data_objects.iter().chain(data).map(|a| format!("data {a}")))
        .chain(
            lambda_targets
                .iter()
                .map(|t| format!("lambda:InvokeFunction -> {t}")),
        )
        .collect()
}

fn used(f: &Function) -> BTreeSet<String> {
    let store_ops = f.store_log.lock().unwrap().clone();
    store_ops
        .iter()
        .flat_map(|op| actions_of(op).iter().map(|a| a.to_string()))
        .chain(f.s3_log.lock().unwrap().iter().cloned())
        .chain(f.invoker.log.lock().unwrap().iter().cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_function_uses_exactly_the_permissions_it_is_granted() {
    // Table data in the "data bucket", written by DataFusion.
    let data: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // Batches of 1,000 rows dealt to three files: the scan is three tasks.
    let writer = SessionContext::new_with_config(
        datafusion::prelude::SessionConfig::new()
            .with_batch_size(1000)
            .set_usize("datafusion.execution.minimum_parallel_output_files", 3),
    );
    writer.register_object_store(&url::Url::parse("s3://data").unwrap(), data.clone());
    writer
        .sql("SELECT value AS id, value % 13 AS k, CAST(value AS DOUBLE) AS v FROM generate_series(1, 5000)")
        .await
        .unwrap()
        .repartition(datafusion::logical_expr::Partitioning::RoundRobinBatch(3))
        .unwrap()
        .write_parquet("s3://data/facts/", DataFrameWriteOptions::new(), None)
        .await
        .unwrap();

    let shuffle: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_max_tasks_per_stage(3)
        // Three tasks over two per dispatcher: the first stage goes out through an
        // invocation tree, whose nodes are scheduler invocations.
        .with_dispatch_fanout(2)
        .with_task_timeout(Duration::ZERO)
        .with_inline_plan_limit(0)
        .with_data_location("s3://data");
    let store = EmbeddedStore::in_memory().unwrap();
    let mut stream = store.take_stream().unwrap();
    let scheduler_fn = function(&store, shuffle.clone(), data.clone(), &config);
    let executor_fn = function(&store, shuffle.clone(), data.clone(), &config);
    let scheduler = || Scheduler::new(scheduler_fn.services.clone());
    let executor = Executor::new(executor_fn.services.clone());

    // Everything the scheduler function does: DDL, SHOW, a query, the stream, wake-ups,
    // the sweep finding a lost task, a cancel, a result read.
    scheduler()
        .submit(
            "CREATE EXTERNAL TABLE facts STORED AS PARQUET LOCATION 's3://data/facts/'",
            &SubmitOptions::default(),
        )
        .await
        .unwrap();
    scheduler()
        .submit("SHOW TABLES", &SubmitOptions::default())
        .await
        .unwrap();
    let job = scheduler()
        .submit(
            "SELECT k, count(*), sum(v) FROM facts GROUP BY k ORDER BY k",
            &SubmitOptions::default(),
        )
        .await
        .unwrap()
        .job_id;
    let mut lost_one = false;
    for _ in 0..100 {
        // The nodes of invocation trees, which the scheduler function runs.
        let mut ranges = std::mem::take(&mut *scheduler_fn.invoker.ranges.lock().unwrap());
        ranges.extend(std::mem::take(
            &mut *executor_fn.invoker.ranges.lock().unwrap(),
        ));
        for range in ranges {
            scheduler().dispatch_range(&range).await.unwrap();
        }
        // Tasks the scheduler dispatched, and those executors dispatched after completing
        // a stage (the fast path runs the scheduler's step in the executor).
        let mut tasks = std::mem::take(&mut *scheduler_fn.invoker.tasks.lock().unwrap());
        tasks.extend(std::mem::take(
            &mut *executor_fn.invoker.tasks.lock().unwrap(),
        ));
        for task in tasks {
            if !lost_one {
                lost_one = true; // never runs: the sweep must find it
                continue;
            }
            executor.handle(&task).await.unwrap();
        }
        let wakes = std::mem::take(&mut *executor_fn.invoker.wakes.lock().unwrap());
        for job in wakes {
            scheduler().wake(&job).await.unwrap();
        }
        while let Ok(batch) = stream.try_recv() {
            scheduler().on_records(&batch).await.unwrap();
        }
        scheduler().sweep().await.unwrap();
        if store
            .get_job(&job)
            .await
            .unwrap()
            .unwrap()
            .state
            .is_terminal()
        {
            break;
        }
    }
    assert_eq!(
        store.get_job(&job).await.unwrap().unwrap().state,
        JobState::Succeeded
    );
    lambdafusion::results::collect(&scheduler_fn.services, &job)
        .await
        .unwrap();
    let doomed = scheduler()
        .submit("SELECT * FROM facts", &SubmitOptions::default())
        .await
        .unwrap()
        .job_id;
    scheduler().cancel(&doomed, &Caller::local()).await.unwrap();
    scheduler()
        .submit("DROP TABLE facts", &SubmitOptions::default())
        .await
        .unwrap();

    let scheduler_grants = granted(
        SCHEDULER_TABLE_ACTIONS,
        SCHEDULER_BUCKET_OBJECT_ACTIONS,
        SCHEDULER_BUCKET_ACTIONS,
        SCHEDULER_DATA_OBJECT_ACTIONS,
        SCHEDULER_DATA_BUCKET_ACTIONS,
        &["executor", "scheduler"],
    );
    let executor_grants = granted(
        EXECUTOR_TABLE_ACTIONS,
        EXECUTOR_BUCKET_OBJECT_ACTIONS,
        EXECUTOR_BUCKET_ACTIONS,
        EXECUTOR_DATA_OBJECT_ACTIONS,
        EXECUTOR_DATA_BUCKET_ACTIONS,
        &["scheduler", "executor"],
    );
    // A loser's output delete only happens on a duplicate delivery; run one.
    let twin = TaskSpec {
        job_id: job.clone(),
        stage: 0,
        partition: 0,
        attempt: 1,
    };
    let _ = executor.handle(&twin).await;
    let mut executor_used = used(&executor_fn);
    let scheduler_used = used(&scheduler_fn);
    // The duplicate above found the task already succeeded and stopped before writing;
    // deleting a losing object is exercised by the core tests. Grant check, not usage:
    executor_used.insert("shuffle s3:DeleteObject".into());
    // A spilled shuffle object's multipart upload is aborted when one of its parts fails
    // (`FinishedObject::upload`), which only an S3 failure causes. Grant check, not usage:
    executor_used.insert("shuffle s3:AbortMultipartUpload".into());
    // Executors wake the scheduler only for a job past its deadline or a failed step, and
    // Lambda delivers their failed invocations to the scheduler with their role.
    executor_used.insert("lambda:InvokeFunction -> scheduler".into());
    assert_eq!(
        scheduler_used, scheduler_grants,
        "scheduler: used (left) vs granted (right)"
    );
    assert_eq!(
        executor_used, executor_grants,
        "executor: used (left) vs granted (right)"
    );
}
