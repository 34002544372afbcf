//! End-to-end tests of the DynamoDB / S3 front against moto_server, through the real
//! `aws-sdk-dynamodb` client (DynamoDB) and plain HTTP (S3; moto does not check SigV4
//! signatures, so requests carry a well-formed but unsigned `Authorization` header).
//!
//! One moto_server (local/localstack/moto_server.py, which serializes DynamoDB) serves
//! every test of this file; each test uses its own tables and buckets and its own
//! emulator. Without moto_server (`$MOTO_SERVER`, `$VENV/bin` or `.venv/bin`) the tests
//! say so and pass.

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeySchemaElement, KeyType, PutRequest, ScalarAttributeType, TransactGetItem,
    TransactWriteItem, Update, WriteRequest,
};
use aws_sdk_dynamodb::Client;
use lambdafusion_faults::{FaultKind, FaultPlan};
use lambdafusion_local::{Config, Emulator};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// ---- shared moto_server ----

fn find_moto_server() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidates = [
        std::env::var_os("MOTO_SERVER").map(PathBuf::from),
        std::env::var_os("VENV").map(|v| PathBuf::from(v).join("bin/moto_server")),
        Some(repo.join(".venv/bin/moto_server")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

/// Runs local/localstack/moto_server.py, asking the kernel to stop it when the thread
/// that started it ends (PR_SET_PDEATHSIG); that thread lives as long as the process.
const MOTO_WRAPPER: &str = r#"
import ctypes, runpy, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGTERM)
script, port = sys.argv[1], sys.argv[2]
sys.argv = [script, "-H", "127.0.0.1", "-p", port]
runpy.run_path(script, run_name="__main__")
"#;

static MOTO: OnceLock<Option<String>> = OnceLock::new();

/// The shared moto_server's endpoint, started on first use; `None` (after saying so)
/// when moto_server is not installed.
fn moto(test: &str) -> String {
    let endpoint = MOTO.get_or_init(|| {
        let python = find_moto_server()?.parent()?.join("python");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../localstack/moto_server.py");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let child = std::process::Command::new(python)
                .args(["-c", MOTO_WRAPPER])
                .arg(script)
                .arg(port.to_string())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
            let started = child.is_ok();
            let _ = tx.send(started);
            let _keep = child;
            loop {
                std::thread::park();
            }
        });
        if !rx.recv().ok()? {
            return None;
        }
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "moto_server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(format!("http://127.0.0.1:{port}"))
    });
    // A test that needs moto_server and cannot find it fails (it must not pass untested).
    endpoint.clone().unwrap_or_else(|| {
        panic!(
            "{test} needs moto_server: set MOTO_SERVER or VENV, or run scripts/test.sh, \
             which installs it into .venv"
        )
    })
}

// ---- an emulator with only a front ----

struct Front {
    emulator: Option<Emulator>,
    _dir: tempfile::TempDir,
    endpoint: String,
    http: reqwest::Client,
}

impl Front {
    async fn start(moto: &str, front: Value, plan: Value) -> Front {
        let dir = tempfile::tempdir().unwrap();
        let mut front = front;
        front["listen"] = json!("127.0.0.1:0");
        front["upstream"] = json!(moto);
        let config = json!({
            "invoke_listen": "127.0.0.1:0",
            "state_dir": dir.path().join("state"),
            "front": front,
            "fault_plan": plan,
        });
        let config = Config::from_json(&config.to_string(), dir.path()).unwrap();
        let emulator = Emulator::start(config).await.unwrap();
        let endpoint = format!("http://{}", emulator.front_addr.unwrap());
        let _ = rustls::crypto::ring::default_provider().install_default();
        Front {
            emulator: Some(emulator),
            _dir: dir,
            endpoint,
            http: reqwest::Client::new(),
        }
    }

    fn ddb(&self) -> Client {
        dynamodb_client(&self.endpoint, false)
    }

    /// `GET /_lambdafusion/faults`.
    async fn report(&self) -> Value {
        let url = format!(
            "http://{}/_lambdafusion/faults",
            self.emulator.as_ref().unwrap().invoke_addr
        );
        self.http
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn injected(&self, name: &str) -> u64 {
        self.report().await["injected"][name].as_u64().unwrap_or(0)
    }

    async fn stop(mut self) {
        if let Some(e) = self.emulator.take() {
            e.shutdown().await;
        }
    }
}

fn dynamodb_client(endpoint: &str, retries: bool) -> Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let retry = if retries {
        aws_sdk_dynamodb::config::retry::RetryConfig::standard()
            .with_initial_backoff(Duration::from_millis(20))
    } else {
        aws_sdk_dynamodb::config::retry::RetryConfig::disabled()
    };
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .retry_config(retry)
        .http_client(http)
        .build();
    Client::from_conf(config)
}

async fn create_table(moto: &str, name: &str) {
    let ddb = dynamodb_client(moto, false);
    ddb.create_table()
        .table_name(name)
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("sk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("sk")
                .key_type(KeyType::Range)
                .build()
                .unwrap(),
        )
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn set_v(table: &str, pk: &str, sk: &str, v: &str) -> TransactWriteItem {
    TransactWriteItem::builder()
        .update(
            Update::builder()
                .table_name(table)
                .key("pk", s(pk))
                .key("sk", s(sk))
                .update_expression("SET v = :v")
                .expression_attribute_values(":v", s(v))
                .build()
                .unwrap(),
        )
        .build()
}

async fn get_v(ddb: &Client, table: &str, pk: &str, sk: &str) -> Option<String> {
    let out = ddb
        .get_item()
        .table_name(table)
        .key("pk", s(pk))
        .key("sk", s(sk))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item?.get("v")?.as_s().ok().cloned()
}

/// Cancellation reason codes of a failed `TransactWriteItems`.
fn reason_codes<R>(
    e: &aws_sdk_dynamodb::error::SdkError<
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
        R,
    >,
) -> Vec<String> {
    match e.as_service_error() {
        Some(aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c)) => c
            .cancellation_reasons()
            .iter()
            .map(|r| r.code().unwrap_or("<none>").to_string())
            .collect(),
        other => panic!("expected TransactionCanceledException, got {other:?}"),
    }
}

/// Transactions take 300 ms in the front, so that the tests can start requests while
/// one is in flight.
fn slow_transactions() -> Value {
    json!({"latency": {"dynamodb": {"default_ms": 0, "TransactWriteItems": 300, "TransactGetItems": 0},
                       "s3": "off", "dynamodb_streams": "off"},
           "throughput": "off"})
}

// ---- transaction conflicts ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_on_one_item_one_wins_the_other_is_cancelled() {
    let moto = moto("concurrent_transactions_on_one_item_one_wins_the_other_is_cancelled");
    create_table(&moto, "conflict").await;
    let front = Front::start(&moto, slow_transactions(), Value::Null).await;
    let ddb = front.ddb();

    let winner = {
        let ddb = ddb.clone();
        tokio::spawn(async move {
            ddb.transact_write_items()
                .transact_items(set_v("conflict", "job", "STAGE#0", "winner"))
                .transact_items(set_v("conflict", "job", "TASK#1", "winner"))
                .send()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let loser = ddb
        .transact_write_items()
        .transact_items(set_v("conflict", "job", "TASK#2", "loser"))
        .transact_items(set_v("conflict", "job", "STAGE#0", "loser"))
        .send()
        .await;
    let err = loser.expect_err("the second transaction must be cancelled");
    assert_eq!(
        err.as_service_error().unwrap().code(),
        Some("TransactionCanceledException")
    );
    assert_eq!(reason_codes(&err), ["None", "TransactionConflict"]);
    let message = err
        .as_service_error()
        .unwrap()
        .message()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("[None, TransactionConflict]"), "{message}");
    winner
        .await
        .unwrap()
        .expect("the first transaction succeeds");

    // moto saw only the winner.
    let direct = dynamodb_client(&moto, false);
    assert_eq!(
        get_v(&direct, "conflict", "job", "STAGE#0")
            .await
            .as_deref(),
        Some("winner")
    );
    assert_eq!(
        get_v(&direct, "conflict", "job", "TASK#1").await.as_deref(),
        Some("winner")
    );
    assert_eq!(get_v(&direct, "conflict", "job", "TASK#2").await, None);

    // Once the winner is done, the same transaction goes through.
    ddb.transact_write_items()
        .transact_items(set_v("conflict", "job", "TASK#2", "later"))
        .transact_items(set_v("conflict", "job", "STAGE#0", "later"))
        .send()
        .await
        .expect("no transaction in flight any more");
    assert_eq!(
        get_v(&direct, "conflict", "job", "STAGE#0")
            .await
            .as_deref(),
        Some("later")
    );
    assert_eq!(front.injected("dynamodb.transaction_conflict").await, 1);
    front.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_read_transactions_meeting_a_transaction_conflict() {
    let moto = moto("writes_and_read_transactions_meeting_a_transaction_conflict");
    create_table(&moto, "held").await;
    let front = Front::start(&moto, slow_transactions(), Value::Null).await;
    let ddb = front.ddb();

    let tx = {
        let ddb = ddb.clone();
        tokio::spawn(async move {
            ddb.transact_write_items()
                .transact_items(set_v("held", "job", "STAGE#0", "tx"))
                .send()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;

    // PutItem on the held item: TransactionConflictException.
    let put = ddb
        .put_item()
        .table_name("held")
        .item("pk", s("job"))
        .item("sk", s("STAGE#0"))
        .item("v", s("put"))
        .send()
        .await
        .expect_err("the item is held by a transaction");
    assert!(
        put.as_service_error()
            .unwrap()
            .is_transaction_conflict_exception(),
        "{put:?}"
    );
    // BatchWriteItem: the held item comes back unprocessed, the other one is written.
    let batch = ddb
        .batch_write_item()
        .request_items(
            "held",
            vec![
                WriteRequest::builder()
                    .put_request(
                        PutRequest::builder()
                            .item("pk", s("job"))
                            .item("sk", s("STAGE#0"))
                            .item("v", s("batch"))
                            .build()
                            .unwrap(),
                    )
                    .build(),
                WriteRequest::builder()
                    .put_request(
                        PutRequest::builder()
                            .item("pk", s("job"))
                            .item("sk", s("TASK#9"))
                            .item("v", s("batch"))
                            .build()
                            .unwrap(),
                    )
                    .build(),
            ],
        )
        .send()
        .await
        .unwrap();
    let unprocessed = batch.unprocessed_items().unwrap()["held"].clone();
    assert_eq!(unprocessed.len(), 1);
    assert_eq!(
        unprocessed[0].put_request().unwrap().item()["sk"],
        s("STAGE#0")
    );
    // TransactGetItems on the held item: cancelled.
    let get = ddb
        .transact_get_items()
        .transact_items(
            TransactGetItem::builder()
                .get(
                    aws_sdk_dynamodb::types::Get::builder()
                        .table_name("held")
                        .key("pk", s("job"))
                        .key("sk", s("STAGE#0"))
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .send()
        .await
        .expect_err("a read transaction cannot read an item being written");
    assert_eq!(
        get.as_service_error().unwrap().code(),
        Some("TransactionCanceledException")
    );
    // A plain GetItem is not blocked.
    get_v(&ddb, "held", "job", "STAGE#0").await;

    tx.await.unwrap().expect("the transaction succeeds");
    let direct = dynamodb_client(&moto, false);
    assert_eq!(
        get_v(&direct, "held", "job", "STAGE#0").await.as_deref(),
        Some("tx")
    );
    assert_eq!(
        get_v(&direct, "held", "job", "TASK#9").await.as_deref(),
        Some("batch")
    );
    // PutItem + one batch item + the read transaction.
    assert_eq!(front.injected("dynamodb.transaction_conflict").await, 3);
    front.stop().await;
}

// ---- throughput ----

fn big_put(
    ddb: &Client,
    table: &str,
    pk: &str,
    filler: &str,
) -> impl std::future::Future<Output = Result<(), String>> {
    let req = ddb
        .put_item()
        .table_name(table)
        .item("pk", s(pk))
        .item("sk", s("ITEM"))
        .item("v", s(filler));
    async move {
        match req.send().await {
            Ok(_) => Ok(()),
            Err(e) => Err(e
                .as_service_error()
                .and_then(|e| e.code())
                .unwrap_or("no code")
                .to_string()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_a_hot_item_are_throttled_spread_writes_are_not() {
    let moto = moto("writes_to_a_hot_item_are_throttled_spread_writes_are_not");
    create_table(&moto, "hot").await;
    let front = Front::start(&moto, json!({"latency": "off"}), Value::Null).await;
    let ddb = front.ddb();
    get_v(&ddb, "hot", "warm", "up").await; // the key schema is read once
                                            // 40 KB items: 40 WCU each, so 100 writes want 4,000 WCU from an item that holds
                                            // 1,000 and gets 1,000 more per second.
    let filler = "x".repeat(40 * 1024 - 64);
    let t = Instant::now();
    let hot =
        futures::future::join_all((0..100).map(|_| big_put(&ddb, "hot", "one-item", &filler)))
            .await;
    let took = t.elapsed().as_secs_f64();
    let throttled = hot
        .iter()
        .filter(|r| {
            r.as_ref().err().map(String::as_str) == Some("ProvisionedThroughputExceededException")
        })
        .count();
    let ok = hot.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok + throttled, 100, "{hot:?}");
    // At most the burst plus what refilled while they arrived went through.
    let most = ((1000.0 + 1000.0 * took) / 40.0).ceil() as usize;
    assert!(
        ok >= 25 && ok <= most,
        "{ok} of 100 hot writes in {took:.2} s went through (at most {most})"
    );

    let spread = futures::future::join_all(
        (0..100).map(|i| big_put(&ddb, "hot", &format!("item-{i}"), &filler)),
    )
    .await;
    assert!(spread.iter().all(Result::is_ok), "{spread:?}");
    assert_eq!(front.injected("dynamodb.throttled").await, throttled as u64);
    front.stop().await;

    // The error names the hot key; a transaction on it is cancelled with ThrottlingError.
    let front = Front::start(
        &moto,
        json!({"latency": "off", "throughput": {"write_units_per_s": 5}}),
        Value::Null,
    )
    .await;
    let ddb = front.ddb();
    for _ in 0..5 {
        big_put(&ddb, "hot", "small", "v").await.unwrap();
    }
    let err = ddb
        .put_item()
        .table_name("hot")
        .item("pk", s("small"))
        .item("sk", s("ITEM"))
        .send()
        .await
        .unwrap_err();
    let e = err.as_service_error().unwrap();
    assert!(e.is_provisioned_throughput_exceeded_exception(), "{err:?}");
    let aws_sdk_dynamodb::operation::put_item::PutItemError::ProvisionedThroughputExceededException(
        pte,
    ) = e
    else {
        unreachable!()
    };
    let reason = &pte.throttling_reasons()[0];
    assert_eq!(
        reason.reason(),
        Some("TableWriteKeyRangeThroughputExceeded")
    );
    assert_eq!(
        reason.resource(),
        Some("arn:aws:dynamodb:us-east-1:000000000000:table/hot")
    );
    let tx = ddb
        .transact_write_items()
        .transact_items(set_v("hot", "other", "ITEM", "x"))
        .transact_items(set_v("hot", "small", "ITEM", "x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(reason_codes(&tx), ["None", "ThrottlingError"]);
    front.stop().await;
}

// ---- latency ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_is_added_unless_off() {
    let moto = moto("latency_is_added_unless_off");
    create_table(&moto, "slow").await;
    let on = Front::start(
        &moto,
        json!({"latency": {"dynamodb": {"GetItem": 150}, "s3": {"first_byte_ms": 150}}}),
        Value::Null,
    )
    .await;
    let off = Front::start(&moto, json!({"latency": "off"}), Value::Null).await;
    for front in [&on, &off] {
        get_v(&front.ddb(), "slow", "warm", "up").await; // the key schema is read once
    }
    let t = Instant::now();
    get_v(&on.ddb(), "slow", "a", "b").await;
    let slow = t.elapsed();
    assert!(slow >= Duration::from_millis(150), "{slow:?}");
    let t = Instant::now();
    get_v(&off.ddb(), "slow", "a", "b").await;
    let fast = t.elapsed();
    assert!(fast < Duration::from_millis(100), "{fast:?}");

    // S3: first byte after 150 ms (the bucket does not exist: the 404 is late too).
    let t = Instant::now();
    let r = on
        .http
        .get(format!("{}/no-such-bucket/k", on.endpoint))
        .header("authorization", S3_AUTH)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );

    // DynamoDB Streams pass through.
    let streams = lambdafusion_local::streams::streams_client(&off.endpoint, "us-east-1", None);
    streams
        .list_streams()
        .send()
        .await
        .expect("ListStreams through the front");
    on.stop().await;
    off.stop().await;
}

// ---- planned DynamoDB faults ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_faults_are_injected_counted_and_decided_by_seed() {
    let moto = moto("dynamodb_faults_are_injected_counted_and_decided_by_seed");
    create_table(&moto, "faulty").await;
    let quiet = json!({"latency": "off", "throughput": "off"});

    // Each kind at rate 1: the client sees it, the report counts it.
    for (kind, code, status) in [
        (
            "dynamodb.throughput_exceeded",
            "ProvisionedThroughputExceededException",
            400,
        ),
        ("dynamodb.throttling", "ThrottlingException", 400),
        ("dynamodb.internal_error", "InternalServerError", 500),
    ] {
        let front = Front::start(
            &moto,
            quiet.clone(),
            json!({"seed": 1, "faults": {kind: 1}}),
        )
        .await;
        let err = front
            .ddb()
            .get_item()
            .table_name("faulty")
            .key("pk", s("a"))
            .key("sk", s("b"))
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            err.as_service_error().and_then(|e| e.code()),
            Some(code),
            "{kind}: {err:?}"
        );
        assert_eq!(
            err.raw_response().unwrap().status().as_u16(),
            status,
            "{kind}"
        );
        let report = front.report().await;
        assert_eq!(report["seed"], 1);
        assert_eq!(report["injected"][kind], 1, "{report}");
        front.stop().await;
    }

    // Rate 0.5: the decisions are those of the plan for the documented keys, and the
    // same on a second front with the same seed.
    let plan_json = json!({"seed": 11, "faults": {"dynamodb.internal_error": 0.5}});
    let plan = FaultPlan::parse(&plan_json.to_string()).unwrap();
    let mut expected = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let front = Front::start(&moto, quiet.clone(), plan_json.clone()).await;
        let ddb = front.ddb();
        let mut outcomes = Vec::new();
        for round in 0..3 {
            for i in 0..8 {
                let pk = format!("k{i}");
                let failed = ddb
                    .get_item()
                    .table_name("faulty")
                    .key("pk", s(&pk))
                    .key("sk", s("x"))
                    .send()
                    .await
                    .is_err();
                outcomes.push(failed);
                if runs.is_empty() {
                    expected.push(plan.fires(
                        FaultKind::DynamoDbInternalError,
                        &format!("GetItem faulty {pk} x #{round}"),
                    ));
                }
            }
        }
        assert_eq!(
            front.injected("dynamodb.internal_error").await,
            outcomes.iter().filter(|f| **f).count() as u64
        );
        runs.push(outcomes);
        front.stop().await;
    }
    assert_eq!(
        runs[0], expected,
        "decisions follow the keys `<Op> <table> <pk> <sk> #<n>`"
    );
    assert_eq!(runs[0], runs[1], "same seed, same requests: same faults");
    assert!(runs[0].iter().any(|f| *f) && runs[0].iter().any(|f| !*f));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_error_on_a_write_may_come_after_the_write() {
    let moto = moto("an_internal_error_on_a_write_may_come_after_the_write");
    create_table(&moto, "ambiguous").await;
    let quiet = json!({"latency": "off", "throughput": "off"});
    let plan_json = json!({"seed": 5, "faults": {"dynamodb.internal_error": 1}});
    let plan = FaultPlan::parse(&plan_json.to_string()).unwrap();
    let applied = |pk: &str| {
        plan.unit(
            FaultKind::DynamoDbInternalError,
            &format!("PutItem ambiguous {pk} ITEM #0#applied"),
        ) < 0.5
    };
    let pk_applied = (0..)
        .map(|i| format!("a{i}"))
        .find(|pk| applied(pk))
        .unwrap();
    let pk_not = (0..)
        .map(|i| format!("n{i}"))
        .find(|pk| !applied(pk))
        .unwrap();
    let front = Front::start(&moto, quiet.clone(), plan_json).await;
    for pk in [&pk_applied, &pk_not] {
        let err = big_put(&front.ddb(), "ambiguous", pk, "v")
            .await
            .unwrap_err();
        assert_eq!(err, "InternalServerError");
    }
    let direct = dynamodb_client(&moto, false);
    assert_eq!(
        get_v(&direct, "ambiguous", &pk_applied, "ITEM")
            .await
            .as_deref(),
        Some("v")
    );
    assert_eq!(get_v(&direct, "ambiguous", &pk_not, "ITEM").await, None);
    front.stop().await;

    // A transaction applied before its 500 is not applied twice by the SDK's retry with
    // the same ClientRequestToken (the front honours it; moto does not).
    let (seed, pk) = (0..1000u64)
        .find_map(|seed| {
            let p = FaultPlan::parse(
                &json!({"seed": seed, "faults": {"dynamodb.internal_error": 0.5}}).to_string(),
            )
            .unwrap();
            (0..50)
                .map(|i| format!("t{i}"))
                .find(|pk| {
                    let key = format!("TransactWriteItems ambiguous {pk} ITEM");
                    p.fires(FaultKind::DynamoDbInternalError, &format!("{key} #0"))
                        && p.unit(
                            FaultKind::DynamoDbInternalError,
                            &format!("{key} #0#applied"),
                        ) < 0.5
                        && !p.fires(FaultKind::DynamoDbInternalError, &format!("{key} #1"))
                })
                .map(|pk| (seed, pk))
        })
        .unwrap();
    let front = Front::start(
        &moto,
        quiet,
        json!({"seed": seed, "faults": {"dynamodb.internal_error": 0.5}}),
    )
    .await;
    let retrying = dynamodb_client(&front.endpoint, true);
    retrying
        .transact_write_items()
        .transact_items(
            TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name("ambiguous")
                        .key("pk", s(&pk))
                        .key("sk", s("ITEM"))
                        .update_expression("ADD n :one")
                        .expression_attribute_values(":one", AttributeValue::N("1".into()))
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .send()
        .await
        .expect("the retry answers the first attempt's success");
    let item = direct
        .get_item()
        .table_name("ambiguous")
        .key("pk", s(&pk))
        .key("sk", s("ITEM"))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(item["n"], AttributeValue::N("1".into()), "applied once");
    assert_eq!(front.injected("dynamodb.internal_error").await, 1);
    front.stop().await;
}

// ---- S3 ----

/// A SigV4-shaped header: moto routes by its credential scope and checks no signature.
const S3_AUTH: &str = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0000";

async fn s3(front: &Front, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    front
        .http
        .request(method, format!("{}{path}", front.endpoint))
        .header("authorization", S3_AUTH)
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_objects_round_trip_through_the_front() {
    let moto = moto("s3_objects_round_trip_through_the_front");
    let front = Front::start(&moto, json!({"latency": "off"}), Value::Null).await;
    let put = |path: &str, body: Vec<u8>| {
        let path = path.to_string();
        let front = &front;
        async move {
            s3(front, reqwest::Method::PUT, &path)
                .await
                .header("content-type", "application/octet-stream")
                .body(body)
                .send()
                .await
                .unwrap()
        }
    };
    assert!(put("/roundtrip", Vec::new()).await.status().is_success());
    let data = pattern(3 * 1024 * 1024 + 17);
    assert!(put("/roundtrip/dir/obj.bin", data.clone())
        .await
        .status()
        .is_success());

    let got = s3(&front, reqwest::Method::GET, "/roundtrip/dir/obj.bin")
        .await
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), &data[..]);

    let ranged = s3(&front, reqwest::Method::GET, "/roundtrip/dir/obj.bin")
        .await
        .header("range", "bytes=1000-1999")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status(), 206);
    assert_eq!(
        ranged.headers()["content-range"],
        format!("bytes 1000-1999/{}", data.len()).as_str()
    );
    assert_eq!(ranged.bytes().await.unwrap().as_ref(), &data[1000..2000]);

    let head = s3(&front, reqwest::Method::HEAD, "/roundtrip/dir/obj.bin")
        .await
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["content-length"],
        data.len().to_string().as_str()
    );

    let list = s3(
        &front,
        reqwest::Method::GET,
        "/roundtrip?list-type=2&prefix=dir/",
    )
    .await
    .send()
    .await
    .unwrap();
    assert_eq!(list.status(), 200);
    let text = list.text().await.unwrap();
    assert!(text.contains("<Key>dir/obj.bin</Key>"), "{text}");

    let del = s3(&front, reqwest::Method::DELETE, "/roundtrip/dir/obj.bin")
        .await
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 204);
    let gone = s3(&front, reqwest::Method::GET, "/roundtrip/dir/obj.bin")
        .await
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    assert!(gone
        .text()
        .await
        .unwrap()
        .contains("<Code>NoSuchKey</Code>"));
    front.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_faults_are_injected_and_counted() {
    let moto = moto("s3_faults_are_injected_and_counted");
    let off = json!({"latency": "off"});
    let plain = Front::start(&moto, off.clone(), Value::Null).await;
    assert!(s3(&plain, reqwest::Method::PUT, "/s3faults")
        .await
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
    let data = pattern(2 * 1000 * 1000);
    let put = s3(&plain, reqwest::Method::PUT, "/s3faults/big")
        .await
        .header("content-type", "application/octet-stream")
        .body(data.clone())
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success());
    let t = Instant::now();
    let body = s3(&plain, reqwest::Method::GET, "/s3faults/big")
        .await
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let uncapped = t.elapsed();
    assert_eq!(body.len(), data.len());
    plain.stop().await;

    for (kind, status, code) in [
        ("s3.slow_down", 503, "SlowDown"),
        ("s3.internal_error", 500, "InternalError"),
    ] {
        let front = Front::start(&moto, off.clone(), json!({"faults": {kind: 1}})).await;
        let r = s3(&front, reqwest::Method::GET, "/s3faults/big")
            .await
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{kind}");
        let text = r.text().await.unwrap();
        assert!(
            text.contains(&format!("<Error><Code>{code}</Code>")),
            "{kind}: {text}"
        );
        // A PUT is refused before it reaches moto.
        let r = s3(&front, reqwest::Method::PUT, "/s3faults/never")
            .await
            .body(vec![1u8; 100_000])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status);
        assert_eq!(front.injected(kind).await, 2);
        front.stop().await;
    }
    let check = Front::start(&moto, off.clone(), Value::Null).await;
    let r = s3(&check, reqwest::Method::GET, "/s3faults/never")
        .await
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "the refused PUTs never reached moto");
    check.stop().await;

    let front = Front::start(
        &moto,
        off.clone(),
        json!({"faults": {"s3.slow_first_byte": {"ms": 200}}}),
    )
    .await;
    let t = Instant::now();
    let r = s3(&front, reqwest::Method::HEAD, "/s3faults/big")
        .await
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(front.injected("s3.slow_first_byte").await, 1);
    front.stop().await;

    // 2 MB at 10 MB/s: at least 200 ms.
    let front = Front::start(
        &moto,
        off,
        json!({"faults": {"s3.bandwidth": {"mb_per_s": 10}}}),
    )
    .await;
    let t = Instant::now();
    let body = s3(&front, reqwest::Method::GET, "/s3faults/big")
        .await
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let capped = t.elapsed();
    assert_eq!(body.as_ref(), &data[..]);
    assert!(
        capped >= Duration::from_millis(195),
        "capped GET took {capped:?}"
    );
    assert!(
        capped > uncapped * 2,
        "capped {capped:?} vs uncapped {uncapped:?}"
    );
    assert_eq!(front.injected("s3.bandwidth").await, 1);
    front.stop().await;
}

#[tokio::test]
async fn a_fault_plan_without_the_needed_parameter_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "invoke_listen": "127.0.0.1:0",
        "state_dir": dir.path(),
        "front": {"listen": "127.0.0.1:0", "upstream": "http://127.0.0.1:9"},
        "fault_plan": {"faults": {"s3.bandwidth": 1}},
    });
    let config = Config::from_json(&config.to_string(), dir.path()).unwrap();
    let err = Emulator::start(config).await.err().expect("must not start");
    assert!(err.to_string().contains("mb_per_s"), "{err}");
}
