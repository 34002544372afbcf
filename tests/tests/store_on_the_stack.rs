//! The DynamoDB job store against the local stack's DynamoDB — moto behind the front,
//! which reproduces DynamoDB's transaction conflicts, per-item throttling and latency:
//!
//! - the one specification of the store (`lambdafusion_tests::conformance`) gives the
//!   same answers here as on the embedded store;
//! - a stage of 1,000 tasks whose commits are all issued within one second completes with
//!   every commit counted once and no task failed — while the old design (every commit a
//!   transaction on one stage item) meets TransactionConflict cancellations on the same
//!   stack;
//! - 2,000 commits leave moto's memory and the per-commit latency flat (the last 100
//!   commits within 2x of the first 100).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use lambdafusion::state::*;
use lambdafusion_aws::store::DynamoDbJobStore;
use lambdafusion_tests::conformance;
use lambdafusion_tests::stack::{fault_report, set_fault_plan, Stack};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

const TTL: u64 = 4_000_000_000;

async fn store(stack: &Stack) -> DynamoDbJobStore {
    DynamoDbJobStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk("AWS_ENDPOINT_URL_DYNAMODB").await),
        stack.var("LAMBDAFUSION_TABLE"),
    )
}

/// A running job with one stage of `tasks` tasks, as records.
fn wide_records(tasks: u32) -> NewJob {
    let id = format!("wide-{}", uuid_like());
    // Dispatched now: the stack's sweep (every minute) must not take the tasks for lost
    // ones past their timeout while the test commits them.
    let now = lambdafusion::time::now_ms();
    let job = JobRecord {
        task_limit: None,
        job_id: id.clone(),
        sql: "SELECT 1".into(),
        kind: JobKind::Query,
        state: JobState::Running,
        stage_count: 1,
        result_schema: vec![],
        owner: "test".into(),
        created_ms: now,
        deadline_ms: None,
        finished_ms: None,
        error: None,
        requests: Default::default(),
        write: None,
        expires_at: TTL,
    };
    let stage = StageRecord {
        job_id: id,
        stage: 0,
        state: StageState::Dispatched,
        tasks,
        output_partitions: 1,
        inputs: vec![],
        summary: "wide".into(),
        scan_bytes: vec![],
        switch: None,
        combines: None,
        dispatched_ms: Some(now),
        confirmed_ms: Some(now),
        decision: None,
        expires_at: TTL,
    };
    NewJob {
        job,
        stages: vec![stage],
        plans: vec![],
        tasks: vec![],
    }
}

/// A running job with one stage of `tasks` tasks.
async fn wide_job(store: &DynamoDbJobStore, tasks: u32) -> String {
    let new = wide_records(tasks);
    store.create_job(&new).await.unwrap();
    new.job.job_id
}

fn uuid_like() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn commit(job: &str, partition: u32, tasks: u32) -> TaskCommit {
    TaskCommit {
        job_id: job.to_string(),
        stage: 0,
        partition,
        stage_tasks: tasks,
        output: TaskOutput {
            attempt: 1,
            object: format!("p/jobs/{job}/stage-0/task-{partition}/attempt-1-x.arrows"),
            ends: vec![100],
            rows: 1,
            bytes: 100,
            started_ms: 1,
            finished_ms: 2,
            metrics: Vec::new(),
            requests: Default::default(),
            handoff: None,
            cpu: None,
            written: None,
        },
        now_ms: 3,
        expires_at: TTL,
    }
}

/// Waits up to 2 minutes: the scheduler finishes the job from the stream of 1,000 commit
/// records, which on a machine running the other suites beside this one (as
/// scripts/test.sh does) once took longer than 30 s.
/// On a timeout it shows what the stack logged of stream batches it gave up on and the
/// scheduler's last lines.
async fn wait_for_state(stack: &Stack, store: &DynamoDbJobStore, job: &str, state: JobState) {
    for _ in 0..1200 {
        if store.get_job(job).await.unwrap().map(|j| j.state) == Some(state) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "job {job} never became {state:?}\n{}{}",
        stack.log_tails("stream-failures", 5),
        stack.log_tails("lambdafusion-scheduler", 20)
    );
}

async fn faults(stack: &Stack) -> serde_json::Value {
    fault_report(&stack.faults_url()).await
}

#[test]
fn the_dynamodb_store_on_the_stack() {
    // The test commits its jobs' tasks itself; the executor has no plan for them. Under
    // load the scheduler would speculate the slowest commits and their executor attempts
    // fail the job ("has no plan"): seen twice under the full suite.
    let stack = Stack::up(&[("LAMBDAFUSION_SPECULATION", "false")]);
    runtime().block_on(async {
        let store = store(&stack).await;

        // One specification, the same answers as the embedded store.
        let cases = conformance::run_all(&store).await;
        println!("conformance: {} cases passed on DynamoDB", cases.len());

        // The old design on the same stack: one transaction per commit on one hot item.
        let client = aws_sdk_dynamodb::Client::new(&stack.sdk("AWS_ENDPOINT_URL_DYNAMODB").await);
        let table = stack.var("LAMBDAFUSION_TABLE");
        let hot = uuid_like();
        let old_design = futures::future::join_all((0..50).map(|p| {
            let (client, table, hot) = (client.clone(), table.clone(), hot.clone());
            async move {
                let key = |sk: String| {
                    std::collections::HashMap::from([
                        ("pk".to_string(), AttributeValue::S(format!("HOT#{hot}"))),
                        ("sk".to_string(), AttributeValue::S(sk)),
                    ])
                };
                let task = Update::builder()
                    .table_name(&table)
                    .set_key(Some(key(format!("TASK#{p}"))))
                    .update_expression("SET #s = :s")
                    .expression_attribute_names("#s", "state")
                    .expression_attribute_values(":s", AttributeValue::S("SUCCEEDED".into()))
                    .build()
                    .unwrap();
                let stage = Update::builder()
                    .table_name(&table)
                    .set_key(Some(key("STAGE".into())))
                    .update_expression("ADD #r :m")
                    .expression_attribute_names("#r", "remaining")
                    .expression_attribute_values(":m", AttributeValue::N("-1".into()))
                    .build()
                    .unwrap();
                client
                    .transact_write_items()
                    .transact_items(TransactWriteItem::builder().update(task).build())
                    .transact_items(TransactWriteItem::builder().update(stage).build())
                    .send()
                    .await
            }
        }))
        .await;
        let conflicts = old_design
            .iter()
            .filter(|r| {
                r.as_ref()
                    .err()
                    .map(|e| format!("{:?}", e))
                    .is_some_and(|e| e.contains("TransactionConflict"))
            })
            .count();
        println!("old design: {conflicts} of 50 concurrent commit transactions on one stage item were cancelled for TransactionConflict");
        assert!(conflicts > 0, "the stack reproduces DynamoDB's conflicts");

        // 1,000 tasks of one stage, all commits issued within one second.
        let tasks = 1000;
        let job = wide_job(&store, tasks).await;
        let store = Arc::new(store);
        let started = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|p| {
                let store = store.clone();
                let c = commit(&job, p, tasks);
                tokio::spawn(async move { store.commit_task(&c).await })
            })
            .collect();
        let issued = started.elapsed();
        let mut counters_done = 0;
        for (p, handle) in handles.into_iter().enumerate() {
            match handle.await.unwrap() {
                Ok(CommitOutcome::Committed { counter_done }) => {
                    counters_done += usize::from(counter_done)
                }
                other => panic!("task {p}: {other:?}"),
            }
        }
        let finished = started.elapsed();
        let snapshot = store.load_job(&job).await.unwrap().unwrap();
        assert_eq!(snapshot.succeeded(0), tasks, "every task committed");
        assert!(snapshot.tasks.iter().all(|t| t.failures == 0));
        assert_eq!(snapshot.counters.len() as u32, counters_of(tasks));
        assert!(snapshot.counters.iter().all(|c| c.remaining == 0));
        assert_eq!(counters_done as u32, counters_of(tasks), "each counter reached 0 once");
        let counts = faults(&stack).await;
        println!(
            "1000-task stage: commits issued in {issued:?}, all committed in {finished:?}; front: {}",
            counts["injected"]
        );
        assert!(issued < Duration::from_secs(1), "issued within a second: {issued:?}");
        // The counters reaching 0 woke the stack's scheduler through the stream filter,
        // which found every task committed and finished the job.
        wait_for_state(&stack, &store, &job, JobState::Succeeded).await;

        // 2,000 more commits, eight at a time: memory and latency stay flat.
        let rss_before = stack.moto_rss_mb();
        let mut latencies = Vec::new();
        for round in 0..10u64 {
            let job = wide_job(&store, 200).await;
            let mut partitions = (0..200u32).collect::<Vec<_>>().into_iter();
            loop {
                let batch: Vec<u32> = partitions.by_ref().take(8).collect();
                if batch.is_empty() {
                    break;
                }
                let timed = futures::future::join_all(batch.iter().map(|p| {
                    let store = store.clone();
                    let c = commit(&job, *p, 200);
                    async move {
                        let t = Instant::now();
                        let outcome = store.commit_task(&c).await.unwrap();
                        assert!(matches!(outcome, CommitOutcome::Committed { .. }));
                        t.elapsed()
                    }
                }))
                .await;
                latencies.extend(timed);
            }
            wait_for_state(&stack, &store, &job, JobState::Succeeded).await;
            let _ = round;
        }
        let rss_after = stack.moto_rss_mb();
        let mean = |d: &[Duration]| d.iter().sum::<Duration>() / d.len() as u32;
        let (first, last) = (mean(&latencies[..100]), mean(&latencies[latencies.len() - 100..]));
        println!(
            "2000 commits: first 100 {first:?}/commit, last 100 {last:?}/commit; moto RSS {rss_before:.0} -> {rss_after:.0} MiB"
        );
        assert!(last < first * 2, "latency grew: {first:?} -> {last:?}");
        assert!(
            rss_after - rss_before < 150.0,
            "moto grew {:.0} MiB over 2000 commits",
            rss_after - rss_before
        );
    });
}

/// Half of the front's injected InternalServerErrors on a write come after DynamoDB
/// applied it, as AWS documents. A job's creating transaction retried after such a lost
/// answer must not meet its own job and report "already exists" (nor a finish report
/// "someone else finished it"): the store keeps one `ClientRequestToken` across its
/// retries, which DynamoDB answers with the first success. The SDK's own retries are
/// off here, so that every 500 reaches the store's retry loop.
#[test]
fn transactions_whose_answer_was_lost_are_recognised_on_retry() {
    let stack = Stack::up(&[]);
    runtime().block_on(async {
        let config =
            aws_sdk_dynamodb::config::Builder::from(&stack.sdk("AWS_ENDPOINT_URL_DYNAMODB").await)
                .retry_config(aws_config::retry::RetryConfig::disabled())
                .build();
        let store = DynamoDbJobStore::new(
            aws_sdk_dynamodb::Client::from_conf(config),
            stack.var("LAMBDAFUSION_TABLE"),
        );
        let plan = serde_json::json!({"seed": 11, "faults": {"dynamodb.internal_error": 0.3}});
        set_fault_plan(&stack.faults_url(), &plan).await;
        let mut failures = Vec::new();
        for _ in 0..30 {
            let new = wide_records(1);
            let id = new.job.job_id.clone();
            if let Err(e) = store.create_job(&new).await {
                failures.push(format!("create {id}: {e}"));
                continue;
            }
            match store.finish_job(&id, JobState::Cancelled, None, 5).await {
                Ok(true) => {}
                other => failures.push(format!("finish {id}: {other:?}")),
            }
        }
        let report = faults(&stack).await;
        set_fault_plan(&stack.faults_url(), &serde_json::json!({})).await;
        let injected = report["injected"]["dynamodb.internal_error"]
            .as_u64()
            .unwrap_or(0);
        println!("lost answers: {injected} InternalServerErrors injected over 30 jobs");
        assert!(injected > 0, "faults were injected: {report}");
        assert!(failures.is_empty(), "{failures:#?}");
    });
}
