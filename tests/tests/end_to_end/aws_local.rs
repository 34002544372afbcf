//! End to end against the local AWS stack: the release-shaped function binaries, the
//! real `aws-sdk-*` clients, DynamoDB (with its stream driving the scheduler), S3 and the
//! emulated Lambda service, all on 127.0.0.1.
//!
//! One test, in steps sharing one stack (starting it costs seconds): TPC-H queries over
//! `s3://` tables equal single-process DataFusion; the API through the function URL; a
//! task event delivered twice commits once; an executor that crashes mid-task is retried;
//! the sweep event is routed. `measure_stage_handoff` (ignored; run it by hand) prints the
//! hand-off latency with and without the fast path and the requests per task;
//! `measure_a_real_workload` (ignored) runs TPC-H at SF 0.1 in 1 MiB tasks, one query at a
//! time, and prints each query's tasks, time and moto's memory after it.

use std::time::Duration;

use datafusion::prelude::SessionContext;
use lambdafusion::dispatch::TaskSpec;
use lambdafusion::state::{JobStore, TaskState};
use lambdafusion::status::JobStatus;
use lambdafusion_aws::store::DynamoDbJobStore;
use lambdafusion_cli::client::{Client, ClientError};
use lambdafusion_cli::tpch;
use lambdafusion_tests::stack::{set_fault_plan, Stack};
use lambdafusion_tests::workload;
use object_store::path::Path;

const QUERIES: [usize; 6] = [1, 3, 5, 10, 12, 18];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(16 * 1024 * 1024)
        .enable_all()
        .build()
        .unwrap()
}

async fn load_tpch(stack: &Stack, client: &Client, dir: &std::path::Path) {
    workload::load_tpch(stack, client, dir, 0.01).await
}

async fn run(
    client: &Client,
    sql: &str,
) -> (JobStatus, Vec<datafusion::arrow::array::RecordBatch>) {
    workload::run(client, sql).await
}

async fn baseline(dir: &std::path::Path) -> SessionContext {
    workload::baseline(dir).await
}

async fn check_query(client: &Client, ctx: &SessionContext, q: usize) -> JobStatus {
    let sql = tpch::query(q);
    let (status, batches) = run(client, sql).await;
    let expected = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    if let Err(diff) =
        lambdafusion_embedded::verify::compare(&expected, &batches, tpch::is_ordered(q))
    {
        panic!("q{q} differs from DataFusion: {diff}");
    }
    status
}

/// Settings that make even SF 0.01 fan out, and let tables be read from the bucket's
/// `data/` prefix (where `load_tpch` puts them): the module's `data_buckets` grants the
/// roles the bucket, the engine's allow-list narrows it to the prefix.
const FAN_OUT: [(&str, &str); 5] = [
    ("LAMBDAFUSION_BYTES_PER_TASK", "100000"),
    ("LAMBDAFUSION_MIN_SCAN_BYTES_PER_TASK", "100000"),
    ("LAMBDAFUSION_MAX_TASKS_PER_STAGE", "4"),
    ("TF_VAR_data_buckets", r#"["lambdafusion"]"#),
    ("LAMBDAFUSION_DATA_BUCKETS", "lambdafusion/data"),
];

/// The Glue databases the end-to-end stack attaches, as a deployment does.
const GLUE: [(&str, &str); 2] = [
    (
        "TF_VAR_glue_databases",
        r#"["sales","web","tpch_iceberg","tpch_delta"]"#,
    ),
    ("TF_VAR_glue_default_database", "sales"),
];

#[test]
fn local_aws_stack_end_to_end() {
    let data = tempfile::tempdir().unwrap();
    let crash_file = data.path().join("crash");
    let crash = crash_file.display().to_string();
    let mut env = FAN_OUT.to_vec();
    env.extend(GLUE);
    env.push(("LAMBDAFUSION_TEST_CRASH_FILE", &crash));
    // Small, so that a modest result takes the presigned-download path.
    env.push(("LAMBDAFUSION_MAX_RESPONSE_BYTES", "200000"));
    // COPY may write under out/ (and only there), with the module's IAM enforced.
    env.push(("TF_VAR_write_locations", r#"["lambdafusion/out"]"#));
    let stack = Stack::up(&env);
    runtime().block_on(async {
        let client = Client::new(&stack.endpoint());
        load_tpch(&stack, &client, data.path()).await;
        let ctx = baseline(data.path()).await;

        // TPC-H over s3:// tables, distributed through DynamoDB and Lambda. Every
        // hand-off is four sequential requests on the real functions too — the commit,
        // the scheduler step's snapshot read, the claim, the invocation — and every
        // query reports the requests it made.
        let mut fault_free = std::collections::HashMap::new();
        for q in QUERIES {
            let status = check_query(&client, &ctx, q).await;
            fault_free.insert(q, status.elapsed_ms);
            assert!(status.stages.len() >= 2, "q{q} ran as several stages");
            assert!(status.stages.iter().any(|s| s.tasks > 1), "q{q} fanned out");
            for s in status.stages.iter().filter(|s| s.handoff_calls.is_some()) {
                assert_eq!(s.handoff_calls, Some(4), "q{q} stage {}: {s:?}", s.stage);
            }
            assert!(
                status.stages.iter().any(|s| s.handoff_calls.is_some()),
                "q{q}: no hand-off recorded"
            );
            let r = status.requests;
            assert!(
                r.object_gets > 0 && r.object_puts > 0 && r.store_writes > 0 && r.invocations > 0,
                "q{q}: {r}"
            );
        }

        // A straggler: task 1 of every stage held back 4 s by the fault plan. Each gets a
        // speculative attempt beside it that commits first; the results are unchanged.
        set_fault_plan(
            &stack.faults_url(),
            &serde_json::json!({"seed": 1, "faults": {
                "executor.slow_task": {"factor": 10, "ms": 4000, "partition": 1}}}),
        )
        .await;
        let q = 3;
        let status = check_query(&client, &ctx, q).await;
        set_fault_plan(&stack.faults_url(), &serde_json::json!({"faults": {}})).await;
        let wins: u32 = status.stages.iter().map(|s| s.speculative_wins).sum();
        let slowed = status.stages.iter().filter(|s| s.tasks > 1).count() as u32;
        println!(
            "q{q} with task 1 of each of its {slowed} wide stages held back 4 s: {} ms \
             (fault-free {} ms), {wins} speculative attempts won, {} ms of losing attempts",
            status.elapsed_ms,
            fault_free[&q],
            status.stages.iter().map(|s| s.wasted_ms).sum::<u64>()
        );
        assert!(wins >= 1, "{:?}", status.stages);

        // COPY to S3: every writing task puts its files, the scheduler's commit the
        // manifest; read back through the functions.
        copy_to_s3(&stack, &client, &ctx).await;

        // Delta Lake tables in the bucket, read through the functions.
        delta_tables_on_s3(&stack, &client).await;
        // (The TPC-H databases first: SHOW TABLES lists every attached database.)
        tpch_in_glue_on_s3(&stack, &client, data.path(), &ctx).await;
        glue_tables_on_s3(&stack, &client).await;

        // The API's error handling through the function URL.
        match client.submit("SELECT * FROM no_such_table").await {
            Err(ClientError::Api {
                status: 400,
                message,
            }) => assert!(message.contains("no_such_table"), "{message}"),
            other => panic!("expected a 400, got {other:?}"),
        }
        let http = reqwest::Client::new();
        let response = http
            .post(format!("{}/v1/queries", stack.endpoint()))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400);
        let response = http
            .get(format!("{}/v1/queries/nope", stack.endpoint()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404);
        let (status, batches) = run(&client, "SHOW TABLES").await;
        assert_eq!(status.state, "succeeded");
        assert!(lambdafusion_embedded::verify::rows(&batches).len() >= 8);

        // A result larger than one response: 413 inline, downloaded from S3 by the client.
        let sql = "SELECT * FROM lineitem WHERE l_quantity > 10";
        let (status, batches) = run(&client, sql).await;
        let expected = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        lambdafusion_embedded::verify::compare(&expected, &batches, false).unwrap();
        let response = http
            .get(format!(
                "{}/v1/queries/{}/result?format=json",
                stack.endpoint(),
                status.id
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 413);
        assert!(response.text().await.unwrap().contains("/result/objects"));

        let store = DynamoDbJobStore::new(
            aws_sdk_dynamodb::Client::new(&stack.sdk("AWS_ENDPOINT_URL_DYNAMODB").await),
            stack.var("LAMBDAFUSION_TABLE"),
        );
        let lambda = aws_sdk_lambda::Client::new(&stack.sdk("AWS_ENDPOINT_URL_LAMBDA").await);
        let executor = stack.var("LAMBDAFUSION_EXECUTOR_FUNCTION");

        // The same task event delivered twice more while the job runs: one commit.
        let sql = tpch::query(3);
        let id = client.submit(sql).await.unwrap();
        let task = TaskSpec {
            job_id: id.clone(),
            stage: 0,
            partition: 0,
            attempt: 1,
        };
        for _ in 0..2 {
            lambda
                .invoke()
                .function_name(&executor)
                .invocation_type(aws_sdk_lambda::types::InvocationType::Event)
                .payload(aws_sdk_lambda::primitives::Blob::new(
                    serde_json::to_vec(&task).unwrap(),
                ))
                .send()
                .await
                .unwrap();
        }
        let status = wait(&client, &id).await;
        assert_eq!(status.state, "succeeded", "{status:?}");
        let item = store.get_task(&id, 0, 0).await.unwrap().expect("task item");
        assert_eq!(item.state, TaskState::Succeeded);
        let output = item.output.expect("committed output");
        let counters = store.list_counters(&id, 0).await.unwrap();
        assert!(
            !counters.is_empty() && counters.iter().all(|c| c.remaining == 0),
            "{counters:?}"
        );
        let object = Path::from(output.object.as_str());
        let parts: Vec<_> = object.parts().collect();
        let task_dir = Path::from_iter(parts[..parts.len() - 1].iter().cloned());
        let objects: Vec<_> =
            futures::TryStreamExt::try_collect::<Vec<_>>(stack.s3().list(Some(&task_dir)))
                .await
                .unwrap();
        assert!(
            objects.len() <= 1,
            "only the winner's object may remain: {objects:?}"
        );
        let (_, batches) = client.result(&id).await.unwrap();
        let expected = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        lambdafusion_embedded::verify::compare(&expected, &batches, true).unwrap();

        // An executor that crashes mid-task: Lambda's on-failure destination tells the
        // scheduler, which retries the task with a new attempt; the query succeeds.
        std::fs::write(&crash_file, "0/0/1").unwrap();
        let status = check_query(&client, &ctx, 5).await;
        assert!(!crash_file.exists(), "the crash hook fired");
        let item = store
            .get_task(&status.id, 0, 0)
            .await
            .unwrap()
            .expect("task item");
        assert_eq!(item.failures, 1, "{item:?}");
        assert_eq!(item.output.unwrap().attempt, 2);
        assert_eq!(status.stages[0].failed_attempts, 1);

        // The sweep event is routed to the sweep.
        let out = lambda
            .invoke()
            .function_name(stack.var("LAMBDAFUSION_SCHEDULER_FUNCTION"))
            .payload(aws_sdk_lambda::primitives::Blob::new(
                br#"{"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}"#
                    .to_vec(),
            ))
            .send()
            .await
            .unwrap();
        assert!(out.function_error().is_none());
        let report: serde_json::Value =
            serde_json::from_slice(out.payload().unwrap().as_ref()).unwrap();
        assert!(report.get("jobs").is_some(), "{report}");

        // An event of no known shape is rejected, and the function keeps serving.
        let out = lambda
            .invoke()
            .function_name(stack.var("LAMBDAFUSION_SCHEDULER_FUNCTION"))
            .payload(aws_sdk_lambda::primitives::Blob::new(
                br#"{"hello": "world"}"#.to_vec(),
            ))
            .send()
            .await
            .unwrap();
        assert!(out.function_error().is_some());
        run(&client, "SELECT 1").await;

        // A view: kept in DynamoDB beside the tables, planned again at each query.
        run(
            &client,
            "CREATE VIEW urgent AS SELECT o_orderkey, o_totalprice FROM orders \
             WHERE o_orderpriority = '1-URGENT'",
        )
        .await;
        let (_, batches) = run(&client, "SELECT count(*), sum(o_totalprice) FROM urgent").await;
        let expected = ctx
            .sql(
                "SELECT count(*), sum(o_totalprice) FROM orders \
                 WHERE o_orderpriority = '1-URGENT'",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        lambdafusion_embedded::verify::compare(&expected, &batches, false).unwrap();
        run(&client, "DROP VIEW urgent").await;

        // Nothing runs; the active index holds only the writes that ended, kept there for
        // the sweep's last clean-up of their files.
        for id in store.active_jobs(None, 100).await.unwrap() {
            let job = store.get_job(&id).await.unwrap().unwrap();
            assert!(
                job.state.is_terminal() && job.write.is_some(),
                "job {id} left running: {job:?}"
            );
        }
    });
    // Everything above ran with the IAM the module grants, and needed nothing more.
    assert_eq!(stack.access_denied(), Vec::<String>::new());
}

/// The Delta fixtures (`tests/delta/fixtures.py`) uploaded under `data/delta/` and read
/// as `s3://` tables through the scheduler and executor functions (the kernel lists and
/// reads the log through S3, the tasks load the deletion vector from it); the answers
/// must be deltalake's own reader's. `TIMESTAMP AS OF` is left out: S3 dates a commit
/// by its object's upload, and an uploaded copy of a table has new dates.
async fn copy_to_s3(stack: &Stack, client: &Client, ctx: &SessionContext) {
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    let bucket = stack.var("LAMBDAFUSION_BUCKET");
    let source = "SELECT l_orderkey, l_linenumber, l_quantity, l_extendedprice, l_shipmode \
                  FROM lineitem WHERE l_quantity > 10";
    let sql = format!(
        "COPY ({source}) TO 's3://{bucket}/out/lineitem/' STORED AS PARQUET \
         PARTITIONED BY (l_shipmode)"
    );
    let (status, batches) = run(client, &sql).await;
    assert_eq!(status.state, "succeeded", "{status:?}");
    assert_eq!(status.kind, "write");
    let expected = ctx.sql(source).await.unwrap().collect().await.unwrap();
    let rows: usize = expected.iter().map(|b| b.num_rows()).sum();
    let summary = lambdafusion_embedded::verify::rows(&batches);
    assert_eq!(summary.len(), 1, "{summary:?}");
    assert_eq!(
        summary[0][0],
        lambdafusion_embedded::verify::Cell::Text(rows.to_string()),
        "{summary:?}"
    );
    let writers = status.stages.last().map_or(0, |s| s.tasks);
    assert!(writers > 1, "written by {writers} tasks");

    // The manifest lists exactly the objects under the location.
    let s3 = stack.s3();
    let manifest: lambdafusion::write::Manifest = serde_json::from_slice(
        &s3.get(&Path::from("out/lineitem/_SUCCESS"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(manifest.rows as usize, rows);
    let mut listed: Vec<String> = s3
        .list(Some(&Path::from("out/lineitem")))
        .map_ok(|m| format!("s3://{bucket}/{}", m.location))
        .try_collect()
        .await
        .unwrap();
    listed.retain(|p| !p.ends_with("/_SUCCESS"));
    listed.sort();
    let mut files: Vec<String> = manifest.files.iter().map(|f| f.path.clone()).collect();
    files.sort();
    assert_eq!(listed, files);
    assert!(
        files.iter().any(|f| f.contains("/l_shipmode=AIR/")),
        "{files:?}"
    );

    // Read back as a table, through the functions.
    run(
        client,
        &format!(
            "CREATE EXTERNAL TABLE copied STORED AS PARQUET \
             LOCATION 's3://{bucket}/out/lineitem/'"
        ),
    )
    .await;
    let check = "SELECT CAST(l_shipmode AS VARCHAR) AS mode, count(*) AS n, \
                 sum(l_extendedprice) AS total FROM {} GROUP BY 1";
    let (_, ours) = run(client, &check.replace("{}", "copied")).await;
    let want = ctx
        .sql(&check.replace("{}", &format!("({source})")))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    lambdafusion_embedded::verify::compare(&want, &ours, false).unwrap();

    // A Delta table: created by one statement, appended to by another, each one Delta
    // commit put only if absent (S3's conditional PUT) by the scheduler's role.
    let (status, _) = run(
        client,
        &format!(
            "CREATE TABLE delta_li WITH (format = 'DELTA', partitioned_by = \
             ARRAY['l_shipmode'], external_location = 's3://{bucket}/out/delta_li/') AS \
             {source} AND l_linenumber <= 4"
        ),
    )
    .await;
    assert_eq!(status.state, "succeeded", "{status:?}");
    let (status, _) = run(
        client,
        &format!("INSERT INTO delta_li {source} AND l_linenumber > 4"),
    )
    .await;
    assert_eq!(status.state, "succeeded", "{status:?}");
    let mut log: Vec<String> = s3
        .list(Some(&Path::from("out/delta_li/_delta_log")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    log.sort();
    assert_eq!(
        log,
        [
            "out/delta_li/_delta_log/00000000000000000000.json",
            "out/delta_li/_delta_log/00000000000000000001.json"
        ],
        "one commit per statement"
    );
    let (_, ours) = run(client, &check.replace("{}", "delta_li")).await;
    lambdafusion_embedded::verify::compare(&want, &ours, false).unwrap();

    // An Iceberg table: created by one statement, appended to by another, each one
    // snapshot committed by its metadata file, put only if absent.
    let (status, _) = run(
        client,
        &format!(
            "CREATE TABLE iceberg_li WITH (format = 'ICEBERG', partitioned_by = \
             ARRAY['l_shipmode'], external_location = 's3://{bucket}/out/iceberg_li/') AS \
             {source} AND l_linenumber <= 4"
        ),
    )
    .await;
    assert_eq!(status.state, "succeeded", "{status:?}");
    let (status, _) = run(
        client,
        &format!("INSERT INTO iceberg_li {source} AND l_linenumber > 4"),
    )
    .await;
    assert_eq!(status.state, "succeeded", "{status:?}");
    let mut versions: Vec<String> = s3
        .list(Some(&Path::from("out/iceberg_li/metadata")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    versions.retain(|p| p.ends_with(".metadata.json"));
    versions.sort();
    assert_eq!(
        versions,
        [
            "out/iceberg_li/metadata/v1.metadata.json",
            "out/iceberg_li/metadata/v2.metadata.json"
        ],
        "one snapshot per statement"
    );
    let (_, ours) = run(client, &check.replace("{}", "iceberg_li")).await;
    lambdafusion_embedded::verify::compare(&want, &ours, false).unwrap();

    // Nowhere but the write locations.
    for (target, says) in [
        (
            format!("s3://{bucket}/data/x/"),
            "outside the locations statements may write to",
        ),
        (
            format!("s3://{bucket}/lambdafusion/x/"),
            "this engine's own",
        ),
        (
            format!("s3://{bucket}/out/lineitem/"),
            "location of table copied",
        ),
    ] {
        let sql = format!("COPY (SELECT 1 AS a) TO '{target}' STORED AS PARQUET");
        match client.submit(&sql).await {
            Err(ClientError::Api {
                status: 400,
                message,
            }) => {
                assert!(message.contains(says), "{sql}: {message}")
            }
            other => panic!("{sql}: expected a 400, got {other:?}"),
        }
    }
}

async fn delta_tables_on_s3(stack: &Stack, client: &Client) {
    use lambdafusion_tests::delta::Fixtures;
    use object_store::{ObjectStoreExt, PutPayload};
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Fixtures::write(dir.path());
    let s3 = stack.s3();
    let bucket = stack.var("LAMBDAFUSION_BUCKET");
    for (name, _) in &fixtures.tables {
        for (relative, file) in fixtures.files(name) {
            s3.put(
                &Path::from(format!("data/delta/{name}/{relative}")),
                PutPayload::from(std::fs::read(&file).unwrap()),
            )
            .await
            .unwrap();
        }
        run(
            client,
            &format!(
                "CREATE EXTERNAL TABLE {name} STORED AS DELTA LOCATION \
                 's3://{bucket}/data/delta/{name}/'"
            ),
        )
        .await;
    }
    let mut checked = 0;
    for case in fixtures
        .cases
        .iter()
        .filter(|c| c.name != "timestamp_as_of")
    {
        let (_, batches) = run(client, &case.sql).await;
        let want = fixtures.expected(&case.name).await;
        if let Err(e) = lambdafusion_embedded::verify::compare(&want, &batches, case.ordered) {
            panic!("Delta case {} on S3: {e}\n  {}", case.name, case.sql);
        }
        checked += 1;
    }
    assert!(checked >= 14, "{checked} Delta cases");
}

/// Every file under `dir` into the stack's bucket under `prefix`, at the same relative path.
async fn upload(stack: &Stack, dir: &std::path::Path, prefix: &str) {
    use object_store::{ObjectStoreExt, PutPayload};
    let s3 = stack.s3();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap().display().to_string();
                s3.put(
                    &Path::from(format!("{prefix}/{relative}")),
                    PutPayload::from(std::fs::read(&path).unwrap()),
                )
                .await
                .unwrap();
            }
        }
    }
}

/// TPC-H SF 0.01 in the stack's Glue as the tools write it: Iceberg tables PyIceberg's Glue
/// catalog writes straight to S3 (orders partitioned by month(o_orderdate), lineitem by
/// l_returnflag, two appends a table) and Delta tables deltalake writes (uploaded), both
/// read through the functions under the module's IAM; the queries, their tables named
/// `glue.<database>.<table>`, answer as single-process DataFusion over the Parquet files.
async fn tpch_in_glue_on_s3(
    stack: &Stack,
    client: &Client,
    parquet: &std::path::Path,
    ctx: &SessionContext,
) {
    let dir = tempfile::tempdir().unwrap();
    let bucket = stack.var("LAMBDAFUSION_BUCKET");
    let delta = dir.path().join("delta");
    lambdafusion_tests::delta::python(&[
        lambdafusion_tests::delta::script("tpch_as_delta.py").as_os_str(),
        parquet.as_os_str(),
        delta.as_os_str(),
    ]);
    upload(stack, &delta, "data/glue_tpch/delta").await;
    let glue = stack.var("AWS_ENDPOINT_URL_GLUE");
    let s3 = stack.var("AWS_ENDPOINT_URL_S3");
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let delta_at = format!("s3://{bucket}/data/glue_tpch/delta");
    let iceberg_at = format!("s3://{bucket}/data/glue_tpch/iceberg");
    let iceberg = dir.path().join("iceberg");
    lambdafusion_tests::delta::python(&[
        tests.join("glue/tpch_in_glue.py").as_os_str(),
        "--delta-at".as_ref(),
        glue.as_ref(),
        delta_at.as_ref(),
    ]);
    lambdafusion_tests::delta::python(&[
        tests.join("iceberg/tpch_as_iceberg.py").as_os_str(),
        parquet.as_os_str(),
        iceberg.as_os_str(),
        "--glue".as_ref(),
        glue.as_ref(),
        "--s3".as_ref(),
        s3.as_ref(),
        "--location".as_ref(),
        iceberg_at.as_ref(),
    ]);
    for database in ["tpch_iceberg", "tpch_delta"] {
        for q in QUERIES {
            let sql = in_database(tpch::query(q), database);
            let (_, batches) = run(client, &sql).await;
            let expected = ctx
                .sql(tpch::query(q))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            if let Err(diff) =
                lambdafusion_embedded::verify::compare(&expected, &batches, tpch::is_ordered(q))
            {
                panic!("q{q} over {database} differs from DataFusion: {diff}\n{sql}");
            }
        }
    }
}

/// `sql` with every TPC-H table it names (outside quotes) as `glue.<database>.<table>`.
fn in_database(sql: &str, database: &str) -> String {
    let mut out = String::with_capacity(sql.len() * 2);
    let mut word = String::new();
    let mut quoted = false;
    let flush = |word: &mut String, out: &mut String| {
        if tpch::TABLES.contains(&word.as_str()) {
            out.push_str(&format!("glue.{database}.{word}"));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in sql.chars() {
        if !quoted && (c.is_ascii_alphanumeric() || c == '_') {
            word.push(c);
            continue;
        }
        flush(&mut word, &mut out);
        if c == '\'' {
            quoted = !quoted;
        }
        out.push(c);
    }
    flush(&mut word, &mut out);
    out
}

/// The Glue fixtures (`tests/glue/fixtures.py`) registered in the stack's Glue with
/// `s3://` locations and uploaded there, and an Iceberg table PyIceberg's Glue catalog
/// writes straight to the stack's S3 (partitioned, a column renamed, position deletes),
/// read through the scheduler's Glue client under the role the Terraform module gives it
/// (the front checks each Glue call against it): the fixture's answers, the default
/// database, and the refusals.
async fn glue_tables_on_s3(stack: &Stack, client: &Client) {
    use lambdafusion_embedded::verify::Cell;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let bucket = stack.var("LAMBDAFUSION_BUCKET");
    let out = std::process::Command::new(lambdafusion_tests::test_python("the Glue tests"))
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("glue/fixtures.py"))
        .arg(&root)
        .arg(stack.var("AWS_ENDPOINT_URL_GLUE"))
        .arg(format!("s3://{bucket}/data/glue"))
        .arg(stack.var("AWS_ENDPOINT_URL_S3"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    upload(stack, &root, "data/glue").await;
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("expected.json")).unwrap()).unwrap();
    let mut checked = 0;
    for case in expected["cases"].as_array().unwrap() {
        let sql = case["sql"].as_str().unwrap();
        let (_, batches) = run(client, sql).await;
        let got = lambdafusion_embedded::verify::rows(&batches);
        let want = case["rows"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{sql}: {got:?} vs {want:?}");
        for (row, w) in got.iter().zip(want) {
            for (cell, v) in row.iter().zip(w.as_array().unwrap()) {
                let same = match (cell, v) {
                    (Cell::Float(x), serde_json::Value::Number(n)) => {
                        (x - n.as_f64().unwrap()).abs() < 1e-6
                    }
                    (Cell::Text(t), serde_json::Value::Null) => t == "NULL",
                    (Cell::Text(t), serde_json::Value::String(s)) => t == s,
                    (Cell::Text(t), serde_json::Value::Number(n)) => t == &n.to_string(),
                    _ => false,
                };
                assert!(same, "{sql}: {got:?} vs {want:?}");
            }
        }
        checked += 1;
    }
    assert!(checked >= 8, "{checked} Glue cases");
    let shown = run(client, "SHOW TABLES").await.1;
    let shown = format!("{:?}", lambdafusion_embedded::verify::rows(&shown));
    assert!(
        shown.contains("orders") && shown.contains("clicks"),
        "{shown}"
    );
    for (table, why) in [
        ("iceberg_table", "cannot read its metadata"),
        ("outside", "outside the locations tables may be read from"),
        ("escaping_partition", "a partition cannot be read"),
    ] {
        let err = client
            .submit(&format!("SELECT * FROM glue.sales.{table}"))
            .await
            .expect_err(table)
            .to_string();
        assert!(err.contains(why), "{table}: {err}");
    }
}

async fn wait(client: &Client, id: &str) -> JobStatus {
    loop {
        let status = client.status(id, Duration::from_secs(10)).await.unwrap();
        if status.state != "running" {
            return status;
        }
    }
}

fn percentile(values: &mut [u64], p: f64) -> u64 {
    values.sort_unstable();
    let i = ((values.len() as f64 - 1.0) * p).round() as usize;
    values.get(i).copied().unwrap_or(0)
}

/// Runs the TPC-H queries twice — fast path on, then off — and prints the hand-off
/// latency (last commit of a stage's inputs to its first task start) and the requests
/// each task made. A measurement, not an assertion: run it with
/// `cargo test --workspace --test end_to_end aws_local:: -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_stage_handoff() {
    let data = tempfile::tempdir().unwrap();
    let mut report = Vec::new();
    for fast_path in ["true", "false"] {
        let mut env = FAN_OUT.to_vec();
        env.push(("LAMBDAFUSION_FAST_PATH", fast_path));
        let stack = Stack::up(&env);
        let (mut gaps, tasks) = runtime().block_on(async {
            let client = Client::new(&stack.endpoint());
            load_tpch(&stack, &client, data.path()).await;
            let ctx = baseline(data.path()).await;
            let mut gaps = Vec::new();
            let mut tasks = 0;
            for _ in 0..2 {
                for q in QUERIES {
                    let status = check_query(&client, &ctx, q).await;
                    gaps.extend(status.stages.iter().filter_map(|s| s.handoff_ms));
                    tasks += status.tasks;
                }
            }
            (gaps, tasks)
        });
        let lines: Vec<String> = stack
            .executor_log_lines()
            .into_iter()
            .filter(|l| l.contains("task done") && l.contains("Committed"))
            .collect();
        let field = |line: &str, name: &str| -> u64 {
            line.split(|c: char| c.is_whitespace() || c == '"')
                .find_map(|w| w.rsplit_once(&format!("{name}=")).map(|(_, v)| v))
                .and_then(|v| v.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
                .unwrap_or(0)
        };
        let per_task = |name: &str| {
            lines.iter().map(|l| field(l, name)).sum::<u64>() as f64 / lines.len().max(1) as f64
        };
        report.push(format!(
            "fast path {fast_path:>5}: hand-off p50 {} ms, p95 {} ms over {} stage hand-offs ({} tasks); per committed task: \
             DynamoDB writes {:.2}, reads {:.2}; S3 PUT {:.2}, GET {:.2}, LIST {:.2}, DELETE {:.2}; Lambda invokes {:.2}",
            percentile(&mut gaps, 0.5),
            percentile(&mut gaps, 0.95),
            gaps.len(),
            tasks,
            per_task("dynamodb_writes"),
            per_task("dynamodb_reads"),
            per_task("s3_puts"),
            per_task("s3_gets"),
            per_task("s3_lists"),
            per_task("s3_deletes"),
            per_task("lambda_invokes"),
        ));
    }
    println!("\n{}", report.join("\n"));
}

/// The deployment's function URL with AWS_IAM auth (`enable_function_url = true`): the
/// emulator verifies SigV4 as Lambda does, so the client's signing is checked against a
/// verifier; and each caller sees only its own queries.
#[test]
fn iam_authorized_function_url_and_callers() {
    use lambdafusion_aws::signing::RequestSigner;
    let stack = Stack::up(&[
        ("TF_VAR_enable_function_url", "true"),
        // The shuffle bucket is also a data bucket here: its reserved prefix must hold.
        ("TF_VAR_data_buckets", r#"["lambdafusion"]"#),
        // Every session of the role Ops, and the one session Analysts/alice, are admins;
        // only Ops may change the catalog.
        (
            "LAMBDAFUSION_ADMIN_PRINCIPALS",
            "arn:aws:iam::000000000000:role/Ops,arn:aws:sts::000000000000:assumed-role/Analysts/alice",
        ),
        ("LAMBDAFUSION_CATALOG_WRITERS", "arn:aws:iam::000000000000:role/Ops"),
    ]);
    runtime().block_on(async {
        let endpoint = stack.endpoint();
        let signer = |key: &str, secret: &str| {
            RequestSigner::with_credentials(key, secret, "lambda", "us-east-1")
        };
        // Unsigned, or signed with a wrong secret: refused before the function runs.
        let unsigned = reqwest::get(format!("{endpoint}/v1/tables")).await.unwrap();
        assert_eq!(unsigned.status(), 403);
        let forged = Client::new(&endpoint).with_signer(signer("test", "wrong"));
        match forged.submit("SELECT 1").await {
            Err(ClientError::Api { status: 403, .. }) => {}
            other => panic!("a wrong signature must be refused: {other:?}"),
        }
        // Signed: the caller's own queries.
        let alice = Client::new(&endpoint).with_signer(signer("test", "test"));
        let bob = Client::new(&endpoint).with_signer(signer("other", "other"));
        let (status, batches) = run(&alice, "SELECT 40 + 2 AS answer").await;
        assert_eq!(status.state, "succeeded");
        assert_eq!(lambdafusion_embedded::verify::rows(&batches).len(), 1);
        match bob.status(&status.id, Duration::ZERO).await {
            Err(ClientError::Api { status: 404, .. }) => {}
            other => panic!("another caller's query must be a 404: {other:?}"),
        }
        match bob.result(&status.id).await {
            Err(ClientError::Api { status: 404, .. }) => {}
            other => panic!("another caller's result must be a 404: {other:?}"),
        }
        assert!(bob.cancel(&status.id).await.is_err());
        let (mine, _) = run(&bob, "SELECT 1").await;
        assert_eq!(mine.state, "succeeded");
        let store = DynamoDbJobStore::new(
            aws_sdk_dynamodb::Client::new(&stack.sdk("AWS_ENDPOINT_URL_DYNAMODB").await),
            stack.var("LAMBDAFUSION_TABLE"),
        );
        let owner = |id: String| {
            let store = store.clone();
            async move { store.get_job(&id).await.unwrap().unwrap().owner }
        };
        assert_eq!(
            owner(status.id.clone()).await,
            "arn:aws:iam::000000000000:user/test"
        );
        assert_eq!(
            owner(mine.id.clone()).await,
            "arn:aws:iam::000000000000:user/other"
        );

        // Admin and writer entries name roles: any session of Ops, whatever name it
        // chose, is an admin; of Analysts only the listed session, not another one who
        // may assume the same role.
        let ops = Client::new(&endpoint).with_signer(signer("ops-a", "ops-a"));
        let analyst = Client::new(&endpoint).with_signer(signer("analyst-alice", "analyst-alice"));
        let mallory =
            Client::new(&endpoint).with_signer(signer("analyst-mallory", "analyst-mallory"));
        assert_eq!(ops.status(&status.id, Duration::ZERO).await.unwrap().id, status.id);
        assert_eq!(analyst.status(&status.id, Duration::ZERO).await.unwrap().id, status.id);
        match mallory.status(&status.id, Duration::ZERO).await {
            Err(ClientError::Api { status: 404, .. }) => {}
            other => panic!("another session of the same role is not the listed one: {other:?}"),
        }
        let table = "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 's3://lambdafusion/data/none/'";
        for caller in [&alice, &analyst, &mallory] {
            match caller.submit(table).await {
                Err(ClientError::Api { status: 403, message }) => {
                    assert!(message.contains("CATALOG_WRITERS"), "{message}")
                }
                other => panic!("only Ops may change the catalog: {other:?}"),
            }
        }
        match ops.submit(table).await {
            Err(ClientError::Api { status, .. }) => assert_ne!(status, 403, "Ops may write"),
            Ok(_) => {}
            Err(other) => panic!("{other}"),
        }

        // Hostile SQL on the AWS path: nothing a caller names becomes an object key, and
        // the reserved prefix cannot be named in another spelling.
        let s3 = stack.s3();
        for sql in [
            "EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO 's3://lambdafusion/lambdafusion/pwned.csv' STORED AS CSV",
            "EXPLAIN COPY (SELECT 1 AS x) TO 's3://lambdafusion/lambdafusion/pwned.csv' STORED AS CSV",
            "COPY (SELECT 1 AS x) TO 's3://lambdafusion/data/pwned.csv' STORED AS CSV",
        ] {
            match ops.submit(sql).await {
                // Refused as a nested COPY, as a one-file target, or as outside the
                // write locations (this stack has none).
                Err(ClientError::Api { status: 400, message }) => assert!(
                    message.contains("COPY") || message.contains("write"),
                    "{sql}: {message}"
                ),
                other => panic!("{sql} must be refused: {other:?}"),
            }
        }
        for key in ["lambdafusion/pwned.csv", "data/pwned.csv"] {
            assert!(
                object_store::ObjectStoreExt::head(&s3, &Path::from(key)).await.is_err(),
                "{key} was written"
            );
        }
        for location in [
            "s3://lambdafusion/lambdafusion%2Fjobs/",
            "s3://lambdafusion/lambdafusion%2fjobs/",
            "s3://lambdafusion/./lambdafusion/jobs/",
            "s3://lambdafusion/x/../lambdafusion/jobs/",
        ] {
            let sql = format!("CREATE EXTERNAL TABLE spy STORED AS PARQUET LOCATION '{location}'");
            match ops.submit(&sql).await {
                Err(ClientError::Api { status: 400, message }) => assert!(
                    message.contains("shuffle") || message.contains("not a valid"),
                    "{location}: {message}"
                ),
                other => panic!("{location} must be refused: {other:?}"),
            }
        }
        let (after, _) = run(&alice, "SELECT 1 AS still_here").await;
        assert_eq!(after.state, "succeeded");

        // `lambdafusion console` in front of the IAM-auth URL: the page's calls carry only
        // the session token; the console signs them with the user's credentials, which
        // the stack verifies (a wrong secret is refused there, not at the console).
        for (secret, expected) in [("test", 200), ("wrong", 403)] {
            let console = Console::start(&endpoint, secret);
            let http = reqwest::Client::new();
            let tables = http
                .get(format!("{}/v1/tables", console.base))
                .bearer_auth(&console.session)
                .send()
                .await
                .unwrap();
            assert_eq!(tables.status(), expected, "secret {secret}");
            if expected == 200 {
                let submitted: serde_json::Value = http
                    .post(format!("{}/v1/queries", console.base))
                    .bearer_auth(&console.session)
                    .json(&serde_json::json!({"sql": "SELECT 7 AS seven"}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let id = submitted["id"].as_str().expect("an id").to_string();
                assert_eq!(owner(id).await, "arn:aws:iam::000000000000:user/test");
            }
        }
    });
}

/// A `lambdafusion console` process forwarding to `endpoint` with SigV4 (forced for a
/// local endpoint by `LAMBDAFUSION_SIGV4_SERVICE`), signing as access key `test`.
struct Console {
    child: std::process::Child,
    base: String,
    session: String,
}

impl Console {
    fn start(endpoint: &str, secret: &str) -> Console {
        use std::io::BufRead as _;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let bind = format!("127.0.0.1:{port}");
        let mut child = std::process::Command::new(
            lambdafusion_tests::stack::repo_root().join("target/debug/lambdafusion"),
        )
        .args(["console", "--endpoint", endpoint, "--bind", &bind])
        .env("LAMBDAFUSION_SIGV4_SERVICE", "lambda")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_REGION", "us-east-1")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("target/debug/lambdafusion (cargo build --workspace)");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // Read on to the end: a closed pipe would fail the console's later writes.
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some((_, token)) = line.split_once("#token=") {
                    let _ = tx.send(token.trim().to_string());
                }
            }
        });
        let session = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the console printed its address");
        Console {
            child,
            base: format!("http://{bind}"),
            session,
        }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workload that once took moto_server to 24 GB: TPC-H SF 0.1 in moto's S3, tasks of
/// 1 MiB of input (`LAMBDAFUSION_BYTES_PER_TASK=1048576`), one query at a time, each
/// result checked against DataFusion. Prints per query the tasks, the time and moto's
/// memory after it. A measurement, not an assertion on time: run it with
/// `cargo test --workspace --test end_to_end aws_local::measure_a_real_workload -- --ignored
/// --nocapture` (`WORKLOAD_QUERIES=1,3,6` for another list; default the issue's six, then
/// six more).
#[test]
#[ignore]
fn measure_a_real_workload() {
    let queries: Vec<usize> = std::env::var("WORKLOAD_QUERIES")
        .unwrap_or_else(|_| "1,3,6,12,5,9,10,18,4,7,8,14".into())
        .split(',')
        .map(|q| q.trim().parse().expect("query numbers"))
        .collect();
    let data = tempfile::tempdir().unwrap();
    let stack = Stack::up(&[
        ("LAMBDAFUSION_BYTES_PER_TASK", "1048576"),
        ("LAMBDAFUSION_MIN_SCAN_BYTES_PER_TASK", "1048576"),
        ("TF_VAR_data_buckets", r#"["lambdafusion"]"#),
        ("LAMBDAFUSION_DATA_BUCKETS", "lambdafusion/data"),
    ]);
    runtime().block_on(async {
        let client = Client::new(&stack.endpoint());
        workload::load_tpch(&stack, &client, data.path(), 0.1).await;
        let ctx = baseline(data.path()).await;
        let mut table = format!(
            "query  tasks  seconds  moto RSS MiB\nsetup  -      -        {:.0}\n",
            stack.moto_rss_mb()
        );
        let mut total_tasks = 0;
        for q in queries {
            let started = std::time::Instant::now();
            let status = check_query(&client, &ctx, q).await;
            total_tasks += status.tasks;
            table.push_str(&format!(
                "q{q:<4}  {:<5}  {:<7.1}  {:.0}\n",
                status.tasks,
                started.elapsed().as_secs_f64(),
                stack.moto_rss_mb()
            ));
            println!("q{q}: {} tasks in {:?}", status.tasks, started.elapsed());
        }
        println!("\n{table}{total_tasks} tasks in all, every result equal to DataFusion's");
    });
}

/// `lambdafusion bench fanout` on the local stack: a stage of N tasks (100, 1,000 by
/// default; `FANOUT_TASKS=100,1000,5000` for more) started through the invocation tree
/// and sent directly, every invocation through the emulated Invoke API with AWS's
/// latency (the front's default `aws` table: 20 ms a call). Prints the table
/// `lambdafusion bench fanout` prints. The task starts wait for the stack's execution
/// environments (`EXECUTOR_INSTANCES`, 8 here): the figure to read is the last invocation
/// accepted. A measurement, not an assertion: run it with
/// `cargo test --workspace --test end_to_end aws_local::measure_fanout -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_fanout() {
    use lambdafusion_cli::fanout;
    use object_store::ObjectStoreExt;
    let counts: Vec<u32> = std::env::var("FANOUT_TASKS")
        .unwrap_or_else(|_| "100,1000".into())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("FANOUT_TASKS: comma-separated counts")
        })
        .collect();
    let data = tempfile::tempdir().unwrap();
    runtime()
        .block_on(fanout::write_table(data.path()))
        .unwrap();
    let mut runs = Vec::new();
    for &n in &counts {
        for per_dispatcher in [32, n + 1] {
            let (tasks, fanout_env) = (n.to_string(), per_dispatcher.to_string());
            let env = [
                ("LAMBDAFUSION_BYTES_PER_TASK", "1"),
                ("LAMBDAFUSION_MIN_SCAN_BYTES_PER_TASK", "1"),
                ("LAMBDAFUSION_MAX_TASKS_PER_STAGE", tasks.as_str()),
                ("LAMBDAFUSION_DISPATCH_FANOUT", fanout_env.as_str()),
                ("TF_VAR_data_buckets", r#"["lambdafusion"]"#),
                ("LAMBDAFUSION_DATA_BUCKETS", "lambdafusion/data"),
                ("EXECUTOR_INSTANCES", "8"),
                ("FUNCTION_RUST_LOG", "warn"),
            ];
            let stack = Stack::up(&env);
            let run = runtime().block_on(async {
                let file = data.path().join("fanout").join("data.parquet");
                stack
                    .s3()
                    .put(
                        &Path::from("data/fanout/data.parquet"),
                        std::fs::read(&file).unwrap().into(),
                    )
                    .await
                    .unwrap();
                let client = Client::new(&stack.endpoint());
                let bucket = stack.var("LAMBDAFUSION_BUCKET");
                run(
                    &client,
                    &format!(
                        "CREATE EXTERNAL TABLE fanout STORED AS PARQUET LOCATION \
                         's3://{bucket}/data/fanout/'"
                    ),
                )
                .await;
                let started = std::time::Instant::now();
                let (status, batches) = run(&client, fanout::QUERY).await;
                let query_ms = started.elapsed().as_millis() as u64;
                fanout::check(&batches).unwrap();
                let store = DynamoDbJobStore::new(
                    aws_sdk_dynamodb::Client::new(&stack.sdk("AWS_ENDPOINT_URL_DYNAMODB").await),
                    stack.var("LAMBDAFUSION_TABLE"),
                );
                let snapshot = store.load_job(&status.id).await.unwrap().unwrap();
                fanout::measure(&snapshot, "local stack", per_dispatcher, query_ms).unwrap()
            });
            eprintln!("{run:?}");
            runs.push(run);
        }
    }
    println!(
        "\nWide stages starting on the local AWS stack (Invoke API at AWS latency, 8 \
         executor environments). Times from the stage's claim.\n\n{}",
        fanout::report(&runs)
    );
}

/// A task that would outrun its function's time limit stops `deadline_margin` (10 s)
/// before Lambda's deadline and fails its attempt by name, once: the runtime never kills
/// it, and the scheduler does not run the same doomed task again.
#[test]
fn a_task_near_the_function_deadline_fails_its_attempt_by_name() {
    // 14 s of executor time: a task gets about 4 s before it must stop.
    let stack = Stack::up(&[("TF_VAR_executor_timeout_seconds", "14")]);
    runtime().block_on(async {
        let client = Client::new(&stack.endpoint());
        // 10^11 rows through a filter: hours, whatever the machine.
        let sql = "SELECT count(*) FROM generate_series(1, 100000000000) WHERE value % 7 = 100";
        let started = std::time::Instant::now();
        let id = client.submit(sql).await.unwrap();
        let status = wait(&client, &id).await;
        assert_eq!(status.state, "failed", "{status:?}");
        let error = status.error.clone().unwrap_or_default();
        assert!(
            error.contains("task exceeded the function timeout")
                && error.contains("executor_timeout_seconds"),
            "{error}"
        );
        let failed: u32 = status.stages.iter().map(|s| s.failed_attempts).sum();
        assert_eq!(failed, 1, "one attempt, not retried: {status:?}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "failed in {:?}",
            started.elapsed()
        );
        // The function answered: Lambda never had to time it out.
        let logs = std::fs::read_dir(stack.state_dir().join("logs"))
            .unwrap()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<String>();
        assert!(
            !logs.contains("Task timed out") && !logs.contains("invocation timed out"),
            "an invocation was killed"
        );

        // Where an operator looks next: the query's lines from both functions, shipped to
        // CloudWatch Logs as Lambda does, found by its id.
        let mut output = String::new();
        for _ in 0..40 {
            let run = std::process::Command::new(
                lambdafusion_tests::stack::repo_root().join("target/debug/lambdafusion"),
            )
            .args([
                "logs",
                &id,
                "--name-prefix",
                "lambdafusion",
                "--since-minutes",
                "10",
            ])
            .envs(stack.env.iter())
            .env_remove("AWS_PROFILE")
            .output()
            .expect("target/debug/lambdafusion (cargo build --workspace)");
            output = String::from_utf8_lossy(&run.stdout).to_string();
            if run.status.success() && output.contains("task exceeded the function timeout") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let lines: Vec<&str> = output.lines().collect();
        assert!(
            lines.iter().any(|l| l.starts_with("scheduler\t")),
            "the scheduler's lines: {output}"
        );
        let failed = lines
            .iter()
            .filter_map(|l| l.strip_prefix("executor\t"))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("task attempt failed"))
            })
            .unwrap_or_else(|| panic!("the executor's failure line: {output}"));
        // A task's lines carry its job, stage, task and attempt (Lambda's JSON log format).
        assert_eq!(failed["span"]["job_id"], id.as_str(), "{failed}");
        assert_eq!(failed["span"]["stage"], 0, "{failed}");
        assert_eq!(failed["span"]["task"], 0, "{failed}");
        assert_eq!(failed["span"]["attempt"], 1, "{failed}");
        assert_eq!(failed["level"], "WARN", "{failed}");
        assert!(
            lines.iter().all(|l| l.contains(&id)),
            "only this query's lines: {output}"
        );
    });
}

#[test]
fn a_permission_the_module_does_not_grant_fails_the_query_by_name() {
    // The module as an operator might have edited it: the executor's role lost
    // s3:PutObject on the shuffle prefix, so no task can write its output, and the
    // scheduler's lost glue:GetPartitions, so no partitioned Glue table can be planned.
    let module = tempfile::tempdir().unwrap();
    let source =
        lambdafusion_tests::stack::repo_root().join("infra/terraform/modules/lambdafusion");
    for entry in std::fs::read_dir(&source).unwrap().flatten() {
        std::fs::copy(entry.path(), module.path().join(entry.file_name())).unwrap();
    }
    let iam = module.path().join("iam.tf");
    let text = std::fs::read_to_string(&iam).unwrap();
    let granted = r#"actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]"#;
    assert_eq!(
        text.matches(granted).count(),
        1,
        "the executor's ShuffleObjects statement moved"
    );
    std::fs::write(
        &iam,
        text.replace(
            granted,
            r#"actions   = ["s3:GetObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]"#,
        ),
    )
    .unwrap();
    // And the scheduler's Glue grant lost glue:GetPartitions.
    let text = std::fs::read_to_string(&iam).unwrap();
    let glue = r#"actions   = ["glue:GetTable", "glue:GetTables", "glue:GetPartitions"]"#;
    assert_eq!(
        text.matches(glue).count(),
        1,
        "the GlueCatalog statement moved"
    );
    std::fs::write(
        &iam,
        text.replace(glue, r#"actions   = ["glue:GetTable", "glue:GetTables"]"#),
    )
    .unwrap();
    let stack = Stack::up(&[
        ("TERRAFORM_MODULE", module.path().to_str().unwrap()),
        ("TF_VAR_data_buckets", r#"["lambdafusion"]"#),
        ("TF_VAR_glue_databases", r#"["sales"]"#),
    ]);
    // A partitioned table registered in Glue by the deployer (no data needed: planning
    // stops at GetPartitions).
    let register = format!(
        "import boto3; g = boto3.client('glue', endpoint_url='{}', region_name='us-east-1', \
         aws_access_key_id='test', aws_secret_access_key='test'); \
         g.create_database(DatabaseInput={{'Name': 'sales'}}); \
         g.create_table(DatabaseName='sales', TableInput={{'Name': 'orders', \
         'StorageDescriptor': {{'Columns': [{{'Name': 'id', 'Type': 'bigint'}}], \
         'Location': 's3://lambdafusion/data/orders/', 'SerdeInfo': {{'SerializationLibrary': \
         'org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe'}}}}, \
         'PartitionKeys': [{{'Name': 'day', 'Type': 'string'}}]}})",
        stack.var("AWS_ENDPOINT_URL_GLUE")
    );
    let out = std::process::Command::new(lambdafusion_tests::test_python("the Glue tests"))
        .args(["-c", &register])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    runtime().block_on(async {
        let client = Client::new(&stack.endpoint());
        let err = client
            .submit("SELECT count(*) FROM glue.sales.orders WHERE day = '2026-01-01'")
            .await
            .expect_err("GetPartitions is denied")
            .to_string();
        assert!(
            err.contains("glue:GetPartitions on sales.orders was denied")
                && err.contains("is not authorized to perform: glue:GetPartitions"),
            "{err}"
        );
        let sql = "SELECT value % 7 AS k, count(*) AS n FROM generate_series(1, 100000) GROUP BY k";
        let id = client.submit(sql).await.unwrap();
        let status = wait(&client, &id).await;
        assert_eq!(status.state, "failed", "{status:?}");
        let error = status.error.clone().unwrap_or_default();
        assert!(
            error.contains("AccessDenied")
                && error.contains("assumed-role/lambdafusion-executor/lambdafusion-executor")
                && error.contains("is not authorized to perform: s3:PutObject")
                && error
                    .contains("because no identity-based policy allows the s3:PutObject action"),
            "{error}"
        );
    });
    drop(stack);

    // The module as it is: the same query runs.
    let stack = Stack::up(&[]);
    runtime().block_on(async {
        let client = Client::new(&stack.endpoint());
        let sql = "SELECT value % 7 AS k, count(*) AS n FROM generate_series(1, 100000) GROUP BY k";
        let id = client.submit(sql).await.unwrap();
        let status = wait(&client, &id).await;
        assert_eq!(status.state, "succeeded", "{status:?}");
    });
}

/// `lambdafusion doctor` against the stack's Lambda API: exit status and output.
fn doctor(stack: &Stack) -> (bool, String) {
    let run = std::process::Command::new(
        lambdafusion_tests::stack::repo_root().join("target/debug/lambdafusion"),
    )
    .args(["doctor", "--name-prefix", "lambdafusion"])
    .envs(stack.env.iter())
    .env_remove("AWS_PROFILE")
    .output()
    .expect("target/debug/lambdafusion (cargo build --workspace)");
    (
        run.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        ),
    )
}

#[test]
fn doctor_reads_the_accounts_quotas_and_says_what_will_not_work() {
    // A new account: 10 concurrent executions, nothing can be reserved.
    let stack = Stack::up(&[("LAMBDA_ACCOUNT_CONCURRENCY", "10")]);
    let (ok, out) = doctor(&stack);
    assert!(!ok, "{out}");
    assert!(
        out.contains("PROBLEM a stage of up to 1000 tasks can take all 10 of the account's concurrent executions")
            && out.contains("no reservation is possible"),
        "{out}"
    );
    assert!(
        out.contains("lambdafusion-executor: 3008 MB (1.7 vCPU)"),
        "{out}"
    );
    drop(stack);

    // The module with a reservation that leaves the scheduler room, and stages that fit.
    let stack = Stack::up(&[
        ("TF_VAR_executor_reserved_concurrency", "800"),
        ("TF_VAR_max_tasks_per_stage", "800"),
    ]);
    let (ok, out) = doctor(&stack);
    assert!(ok, "{out}");
    assert!(!out.contains("PROBLEM"), "{out}");
    assert!(
        out.contains(
            "account: 1000 concurrent executions, 200 unreserved; a stage runs at most 800 tasks"
        ) && out.contains("800 reserved"),
        "{out}"
    );
}

/// A deployment with a large executor (`large_executor_memory_mb`): the stages the
/// scheduler sizes up (here every one that would finish sooner, whatever the cost) run on
/// the module's `<executor>-large` function — invoked by both roles under the emulator's
/// IAM, its events retried by nobody but the scheduler — and the answers are DataFusion's.
#[test]
fn a_stage_sized_up_runs_on_the_large_executor() {
    let data = tempfile::tempdir().unwrap();
    let mut env = FAN_OUT.to_vec();
    // 512 MB is 0.29 of a vCPU: a task of one piece finishes sooner on 10,240 MB when a
    // seventh of its time is CPU (TPC-H at SF 0.01 spends 4-8% of it so: its tasks wait
    // on the stack's S3 and DynamoDB). The emulator holds a function to its memory.
    env.push(("TF_VAR_executor_memory_mb", "512"));
    env.push(("TF_VAR_large_executor_memory_mb", "10240"));
    env.push(("TF_VAR_size_cost_percent", "100000"));
    let stack = Stack::up(&env);
    runtime().block_on(async {
        let client = Client::new(&stack.endpoint());
        load_tpch(&stack, &client, data.path()).await;
        let ctx = baseline(data.path()).await;
        let (mut sized_up, mut notes) = (0, Vec::new());
        for q in [3, 10, 18] {
            let status = check_query(&client, &ctx, q).await;
            let first = status.stages.iter().find(|s| s.tasks > 0).unwrap();
            assert_eq!(
                first.memory_mb, 512,
                "q{q}: nothing measured before its first stage"
            );
            notes.extend(status.stages.iter().filter_map(|s| s.decision_note.clone()));
            for s in status.stages.iter().filter(|s| s.memory_mb == 10240) {
                let note = s.decision_note.as_deref().unwrap_or_default();
                assert!(
                    note.contains("on the large executor (10240 MB"),
                    "q{q}: {note}"
                );
                sized_up += s.tasks;
            }
        }
        // A first stage that computes (a 4 KB string made of each line item's comment)
        // measures the CPU share that sizes up the stages after it.
        let sql = "SELECT l_orderkey % 7 AS k, sum(length(repeat(l_comment, 100))) AS n \
                   FROM lineitem GROUP BY k ORDER BY k";
        let (status, batches) = run(&client, sql).await;
        let expected = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        lambdafusion_embedded::verify::compare(&expected, &batches, true).unwrap();
        for s in status.stages.iter().filter(|s| s.memory_mb == 10240) {
            sized_up += s.tasks;
        }
        notes.extend(status.stages.iter().filter_map(|s| s.decision_note.clone()));
        assert!(sized_up > 0, "no stage was sized up: {notes:#?}");
        // Its own log holds the tasks it ran: the function was invoked, not just named.
        let large_log = stack.log_tails("lambdafusion-executor-large", 1_000_000);
        let tasks_run = large_log
            .lines()
            .filter(|l| l.contains(r#""message":"task done""#) && l.contains("Committed"))
            .count();
        assert!(
            large_log.contains("Memory Size: 10240 MB"),
            "the large executor's REPORT lines do not say 10240 MB"
        );
        assert!(
            tasks_run > 0,
            "the large executor's log shows no committed task:\n{}",
            stack.log_tails("lambdafusion-executor-large", 20)
        );
        assert_eq!(stack.access_denied(), Vec::<String>::new());
    });
}
