//! Tables of the AWS Glue Data Catalog, registered the way Athena, crawlers and Spark
//! register them (`tests/glue/fixtures.py`, boto3 against moto's Glue), read through the
//! embedded engine with every scan split into tasks. The answers are the fixture's own,
//! computed from the rows it wrote; partitions come from `GetPartitions` with the query's
//! filter (checked on the calls made), and every table lambdafusion cannot read is
//! refused with its name and the reason.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lambdafusion::glue::{Glue, GlueClient, GluePartition, GlueTable};
use lambdafusion::EngineConfig;
use lambdafusion_embedded::verify::Cell;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};
use serde_json::Value;

/// moto_server on a free port of 127.0.0.1, stopped when dropped.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    fn start() -> Self {
        let python = lambdafusion_tests::test_python("the Glue tests");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(python.with_file_name("moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto_server did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Glue client under test, recording each `GetPartitions` expression it sends.
#[derive(Debug)]
struct Recording {
    inner: lambdafusion_aws::glue::SdkGlue,
    expressions: Mutex<Vec<Option<String>>>,
}

#[async_trait]
impl GlueClient for Recording {
    async fn table_names(&self, database: &str) -> lambdafusion::Result<Vec<String>> {
        self.inner.table_names(database).await
    }
    async fn table(&self, database: &str, name: &str) -> lambdafusion::Result<Option<GlueTable>> {
        self.inner.table(database, name).await
    }
    async fn partitions(
        &self,
        database: &str,
        table: &str,
        expression: Option<&str>,
    ) -> lambdafusion::Result<Vec<GluePartition>> {
        self.expressions
            .lock()
            .unwrap()
            .push(expression.map(str::to_string));
        self.inner.partitions(database, table, expression).await
    }
}

async fn glue_client(endpoint: &str) -> Arc<Recording> {
    let credentials =
        aws_sdk_dynamodb::config::Credentials::new("test", "test", None, None, "local");
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(lambdafusion_aws::clients::http_client())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(credentials)
        .load()
        .await;
    Arc::new(Recording {
        inner: lambdafusion_aws::glue::SdkGlue::new(&sdk),
        expressions: Mutex::new(Vec::new()),
    })
}

/// Writes the fixtures under `dir` into the Glue at `endpoint`; returns the cases.
fn fixtures(dir: &Path, endpoint: &str) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("glue/fixtures.py");
    let out = Command::new(lambdafusion_tests::test_python("the Glue tests"))
        .arg(&script)
        .arg(dir)
        .arg(endpoint)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    expected["cases"].as_array().unwrap().clone()
}

async fn engine(dir: &Path, client: Arc<Recording>) -> Arc<Embedded> {
    let config = EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_shuffle_bytes_per_task(1)
        .with_max_tasks_per_stage(6)
        .with_data_location(dir.display().to_string());
    let glue = Glue::new(
        client,
        vec!["sales".into(), "web".into()],
        Some("sales".into()),
    )
    .unwrap();
    Embedded::start(EmbeddedOptions {
        data_dir: None,
        config,
        slots: 8,
        glue: Some(glue),
        ..EmbeddedOptions::default()
    })
    .await
    .unwrap()
}

/// Whether a cell holds what the fixture computed.
fn same(cell: &Cell, want: &Value) -> bool {
    match (cell, want) {
        (Cell::Float(v), Value::Number(n)) => (v - n.as_f64().unwrap()).abs() < 1e-6,
        (Cell::Text(t), Value::Null) => t == "NULL",
        (Cell::Text(t), Value::String(s)) => t == s,
        (Cell::Text(t), Value::Number(n)) => t == &n.to_string(),
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn glue_tables_read_as_their_catalog_describes_them() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let cases = fixtures(&dir_path, &moto.endpoint);
    let client = glue_client(&moto.endpoint).await;
    let engine = engine(&dir_path, client.clone()).await;

    let mut failures = Vec::new();
    for case in &cases {
        let sql = case["sql"].as_str().unwrap();
        let want = case["rows"].as_array().unwrap();
        match engine.sql(sql).await {
            Ok(out) => {
                let got = lambdafusion_embedded::verify::rows(&out.batches);
                let equal = got.len() == want.len()
                    && got.iter().zip(want).all(|(row, w)| {
                        let w = w.as_array().unwrap();
                        row.len() == w.len() && row.iter().zip(w).all(|(c, v)| same(c, v))
                    });
                if !equal {
                    failures.push(format!("{sql}\n  got  {got:?}\n  want {want:?}"));
                }
            }
            Err(e) => failures.push(format!("{sql}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The partition filter went to Glue: only the matching partitions were listed.
    let sent = client.expressions.lock().unwrap().clone();
    assert!(
        sent.contains(&Some("region = 'eu' AND year >= 2024".to_string())),
        "{sent:?}"
    );
    assert!(
        sent.contains(&Some(
            "(region = 'us' OR region = 'eu') AND year = 2023".to_string()
        )),
        "{sent:?}"
    );

    // The scans were split: the orders' four files over several tasks.
    let out = engine
        .sql("SELECT count(*) FROM glue.sales.orders")
        .await
        .unwrap();
    assert!(out.status.stages[0].tasks > 1, "{:?}", out.status.stages[0]);

    // Listed and described like the declared tables.
    let shown = engine.sql("SHOW TABLES").await.unwrap();
    let text = format!("{:?}", lambdafusion_embedded::verify::rows(&shown.batches));
    for table in [
        "orders",
        "events",
        "people",
        "clicks",
        "ledger",
        "iceberg_table",
    ] {
        assert!(text.contains(table), "{table} missing from {text}");
    }
    let columns = engine
        .sql(
            "SELECT column_name, data_type FROM information_schema.columns \
             WHERE table_catalog = 'glue' AND table_schema = 'sales' AND table_name = 'orders' \
             ORDER BY ordinal_position",
        )
        .await
        .unwrap();
    let columns = format!(
        "{:?}",
        lambdafusion_embedded::verify::rows(&columns.batches)
    );
    for c in ["id", "amount", "note", "region", "year", "Int64", "Int32"] {
        assert!(columns.contains(c), "{c} missing from {columns}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn glue_tables_lambdafusion_cannot_read_are_refused_by_name() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    fixtures(&dir_path, &moto.endpoint);
    let engine = engine(&dir_path, glue_client(&moto.endpoint).await).await;
    let refused = |table: &'static str, why: &'static str| (table, why);
    for (table, why) in [
        refused("iceberg_table", "cannot read its metadata"),
        refused("avro_table", "org.apache.hadoop.hive.serde2.avro.AvroSerDe"),
        refused("outside", "outside the locations tables may be read from"),
        refused("union_column", "uniontype"),
        refused("a_view", "view"),
        refused(
            "escaping_partition",
            "a partition cannot be read: /etc/ssl is outside",
        ),
    ] {
        let err = engine
            .sql(&format!("SELECT * FROM glue.sales.{table}"))
            .await
            .map(|out| format!("{:?}", out.batches))
            .expect_err(table);
        let text = err.to_string();
        assert!(err.is_user_error(), "{table}: {text}");
        assert!(
            text.contains(&format!("glue.sales.{table}"))
                || text.contains(&format!("sales.{table}")),
            "{table}: {text}"
        );
        assert!(text.contains(why), "{table}: {text}");
    }
    // Names Glue does not have, databases that are not attached, hostile names: not found.
    for sql in [
        "SELECT * FROM glue.sales.no_such_table",
        "SELECT * FROM glue.secret.orders",
        "SELECT * FROM glue.sales.\"../orders\"",
        "SELECT * FROM glue.sales.\"orders' OR '1'='1\"",
    ] {
        let err = engine.sql(sql).await.expect_err(sql);
        assert!(err.is_user_error(), "{sql}: {err}");
        assert!(err.to_string().contains("not found"), "{sql}: {err}");
    }
    // The catalog is read-only from SQL.
    let err = engine
        .sql("CREATE EXTERNAL TABLE glue.sales.mine STORED AS PARQUET LOCATION '/tmp'")
        .await
        .expect_err("DDL in glue");
    assert!(err.is_user_error(), "{err}");
}

/// TPC-H SF 0.1 registered in Glue three times (`tests/glue/tpch_in_glue.py`): as Hive
/// tables over Parquet, orders and lineitem partitioned Hive-style with a Glue partition per
/// directory, as the Delta tables deltalake writes, and as the Iceberg tables PyIceberg
/// writes (`tests/iceberg/tpch_as_iceberg.py`: orders partitioned by the hidden transform
/// month(o_orderdate), lineitem by l_returnflag, two appends a table). With each database
/// the default,
/// the 22 queries run unqualified, every stage split into tasks, and answer as
/// single-process DataFusion does over the generated Parquet files.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tpch_registered_in_glue_answers_as_tpch_as_parquet() {
    use lambdafusion_cli::tpch;
    let moto = Moto::start();
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let (parquet, delta, hive) = (root.join("parquet"), root.join("delta"), root.join("hive"));
    let iceberg = root.join("iceberg");
    tpch::generate(&parquet, 0.1, 2, &|_, _| {}).unwrap();
    lambdafusion_tests::delta::python(&[
        lambdafusion_tests::delta::script("tpch_as_delta.py").as_os_str(),
        parquet.as_os_str(),
        delta.as_os_str(),
    ]);
    lambdafusion_tests::delta::python(&[
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("iceberg/tpch_as_iceberg.py")
            .as_os_str(),
        parquet.as_os_str(),
        iceberg.as_os_str(),
    ]);
    lambdafusion_tests::delta::python(&[
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("glue/tpch_in_glue.py")
            .as_os_str(),
        parquet.as_os_str(),
        delta.as_os_str(),
        hive.as_os_str(),
        moto.endpoint.as_ref(),
        iceberg.as_os_str(),
    ]);
    let ctx = datafusion::prelude::SessionContext::new();
    tpch::register_baseline(&ctx, &parquet).await.unwrap();
    let mut failures = Vec::new();
    for database in ["tpch_hive", "tpch_delta", "tpch_iceberg"] {
        // Every scan and shuffle split, into at most 4 tasks: past that, more tasks
        // only repeat what the first ones check, at a few seconds a query here.
        let config = EngineConfig::default()
            .with_bytes_per_task(1 << 20)
            .with_min_scan_bytes_per_task(1)
            .with_shuffle_bytes_per_task(64 * 1024)
            .with_max_tasks_per_stage(4)
            .with_data_location(root.display().to_string());
        let glue = Glue::new(
            glue_client(&moto.endpoint).await,
            vec![database.to_string()],
            Some(database.to_string()),
        )
        .unwrap();
        let engine = Embedded::start(EmbeddedOptions {
            data_dir: None,
            config,
            slots: 8,
            glue: Some(glue),
            ..EmbeddedOptions::default()
        })
        .await
        .unwrap();
        failures.extend(
            lambdafusion_tests::tpch_failures(&engine, &ctx, &format!("{database} ")).await,
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
