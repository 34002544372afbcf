//! Delta Lake tables written by the tools teams use — the `deltalake` Python package
//! (delta-rs) for appends, DELETE, UPDATE, schema evolution, column mapping and
//! checkpoints; Databricks for a deletion vector — read through the embedded engine with
//! every scan split into tasks, and compared with what the writer's own reader answers
//! (`tests/delta/fixtures.py`: DuckDB over deltalake's reading of each version). Time
//! travel, the snapshot a query keeps while the table is committed to, and the errors a
//! user meets are checked here too.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::prelude::SessionContext;
use lambdafusion::EngineConfig;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};

/// Writes the fixtures under `dir` (see `tests/delta/fixtures.py`); returns cases.json.
fn fixtures(dir: &Path) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("delta/fixtures.py");
    let out = std::process::Command::new(lambdafusion_tests::test_python("the Delta tests"))
        .arg(&script)
        .arg(dir)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(dir.join("cases.json")).unwrap()).unwrap()
}

async fn engine(
    config: EngineConfig,
    dir: &Path,
    faults: lambdafusion::faults::Faults,
) -> Arc<Embedded> {
    Embedded::start(EmbeddedOptions {
        data_dir: None,
        config: config.with_data_location(dir.display().to_string()),
        slots: 8,
        faults,
        ..EmbeddedOptions::default()
    })
    .await
    .unwrap()
}

/// Every scan split as finely as allowed: the distribution is under test.
fn split_everything() -> EngineConfig {
    EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_shuffle_bytes_per_task(1)
        .with_max_tasks_per_stage(6)
}

async fn register(engine: &Embedded, cases: &serde_json::Value) {
    for (name, location) in cases["tables"].as_object().unwrap() {
        let location = location.as_str().unwrap();
        engine
            .sql(&format!(
                "CREATE EXTERNAL TABLE {name} STORED AS DELTA LOCATION '{location}'"
            ))
            .await
            .unwrap_or_else(|e| panic!("registering {name} at {location}: {e}"));
    }
}

async fn expected(dir: &Path, name: &str) -> Vec<datafusion::arrow::array::RecordBatch> {
    let path: PathBuf = dir.join("expected").join(format!("{name}.parquet"));
    SessionContext::new()
        .read_parquet(path.display().to_string(), Default::default())
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delta_tables_answer_as_their_writer_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let cases = fixtures(dir.path());
    let engine = engine(split_everything(), dir.path(), Default::default()).await;
    register(&engine, &cases).await;
    let mut failures = Vec::new();
    for case in cases["cases"].as_array().unwrap() {
        let (name, sql) = (
            case["name"].as_str().unwrap(),
            case["sql"].as_str().unwrap(),
        );
        let want = expected(dir.path(), name).await;
        match engine.sql(sql).await {
            Ok(out) => {
                if let Err(e) = lambdafusion_embedded::verify::compare(
                    &want,
                    &out.batches,
                    case["ordered"].as_bool().unwrap(),
                ) {
                    failures.push(format!("{name}: {e}\n  {sql}"));
                }
            }
            Err(e) => failures.push(format!("{name}: {e}\n  {sql}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The scans were split: the partitioned table's ~70 files over several tasks.
    let out = engine.sql("SELECT count(*) FROM events").await.unwrap();
    assert!(out.status.stages[0].tasks > 1, "{:?}", out.status.stages[0]);
    // The columns are the log's, the latest version's (one was added after creation).
    let described = engine.sql("DESCRIBE events").await.unwrap();
    let columns = lambdafusion_embedded::verify::rows(&described.batches);
    assert_eq!(columns.len(), 6, "{columns:?}");
    // EXPLAIN shows where the deletion vectors are applied.
    let explained = engine.sql("EXPLAIN SELECT * FROM dv_small").await.unwrap();
    let text = format!(
        "{:?}",
        lambdafusion_embedded::verify::rows(&explained.batches)
    );
    assert!(
        text.contains("DeletionVectorExec: files_with_deletions=1"),
        "{text}"
    );
}

/// The snapshot is resolved once, when the query is planned: a commit while its tasks
/// run (a DELETE of every row, by deltalake) changes nothing they read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_query_keeps_its_snapshot_while_the_table_is_committed_to() {
    use lambdafusion::faults::{FaultPlan, Faults};
    let dir = tempfile::tempdir().unwrap();
    let cases = fixtures(dir.path());
    // Every task of the scan waits 2 s more than it takes: the commit lands meanwhile.
    let slow = r#"{"faults": {"executor.slow_task": {"factor": 1, "ms": 2000}}}"#;
    let mut config = split_everything();
    config.speculation = false;
    let engine = engine(
        config,
        dir.path(),
        Faults::in_process(FaultPlan::parse(slow).unwrap()),
    )
    .await;
    register(&engine, &cases).await;
    let sql = "SELECT count(*) AS n, sum(amount) AS total FROM events";
    let id = engine.submit(sql).await.unwrap();
    let events = dir.path().join("events");
    let deleted = std::process::Command::new(lambdafusion_tests::test_python("the Delta tests"))
        .args([
            "-c",
            "import sys; from deltalake import DeltaTable; DeltaTable(sys.argv[1]).delete()",
        ])
        .arg(&events)
        .output()
        .unwrap();
    assert!(
        deleted.status.success(),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
    let out = engine
        .finish(&id, Duration::from_secs(120), |_| {})
        .await
        .unwrap();
    lambdafusion_embedded::verify::compare(
        &expected(dir.path(), "count").await,
        &out.batches,
        false,
    )
    .unwrap();
    // The next query plans the new version: nothing is left.
    let after = engine.sql(sql).await.unwrap();
    assert_eq!(
        lambdafusion_embedded::verify::rows(&after.batches)[0][0],
        lambdafusion_embedded::verify::Cell::Text("0".into())
    );
}

/// What a user gets wrong, or a table we cannot read, is a 4xx naming the table and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_errors_name_the_table_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("delta/table-with-dv-small"),
        &table,
    );
    let engine = engine(EngineConfig::default(), dir.path(), Default::default()).await;
    let create = |name: &str, location: &Path| {
        format!(
            "CREATE EXTERNAL TABLE {name} STORED AS DELTA LOCATION '{}'",
            location.display()
        )
    };
    let refused = |result: Result<lambdafusion_embedded::QueryOutput, lambdafusion::Error>| {
        let e = result.expect_err("refused");
        assert!(e.is_user_error(), "{e:?}");
        e.to_string()
    };
    // Not a Delta table.
    std::fs::create_dir_all(dir.path().join("plain")).unwrap();
    let e = refused(
        engine
            .sql(&create("plain", &dir.path().join("plain")))
            .await,
    );
    assert!(
        e.contains("no such Delta table") && e.contains("_delta_log"),
        "{e}"
    );
    // Columns declared for a Delta table.
    let e = refused(
        engine
            .sql(&format!(
                "CREATE EXTERNAL TABLE c (a INT) STORED AS DELTA LOCATION '{}'",
                table.display()
            ))
            .await,
    );
    assert!(e.contains("come from its log"), "{e}");
    // Outside the allowed locations.
    let e = refused(engine.sql(&create("far", Path::new("/etc"))).await);
    assert!(e.contains("/etc"), "{e}");
    // A reader feature the kernel lacks: the log names one.
    engine.sql(&create("t", &table)).await.unwrap();
    engine.sql("SELECT count(*) FROM t").await.unwrap();
    let log = table.join("_delta_log/00000000000000000002.json");
    std::fs::write(
        &log,
        r#"{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors","futureFeature"],"writerFeatures":["deletionVectors","futureFeature"]}}"#,
    )
    .unwrap();
    let e = refused(engine.sql("SELECT count(*) FROM t").await);
    assert!(
        e.contains("Delta table t at") && e.contains("futureFeature"),
        "{e}"
    );
    std::fs::remove_file(&log).unwrap();
    // Versions that do not exist, and time travel on a table that is not Delta.
    let e = refused(engine.sql("SELECT * FROM t VERSION AS OF 9").await);
    assert!(
        e.contains("Delta table t at") && e.contains("version 9"),
        "{e}"
    );
    let e = refused(
        engine
            .sql("SELECT * FROM t TIMESTAMP AS OF '2001-01-01 00:00:00'")
            .await,
    );
    assert!(e.contains("Delta table t at"), "{e}");
    std::fs::write(dir.path().join("p.csv"), "a\n1\n").unwrap();
    engine
        .sql(&format!(
            "CREATE EXTERNAL TABLE p STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
            dir.path().join("p.csv").display()
        ))
        .await
        .unwrap();
    let e = refused(engine.sql("SELECT * FROM p VERSION AS OF 1").await);
    assert!(e.contains("Delta tables only"), "{e}");
    // A table name with @ (the versioned names' separator) is refused.
    let e = refused(engine.sql(&create("\"a@v1\"", &table)).await);
    assert!(e.contains("may not contain @"), "{e}");
    // A corrupt deletion vector fails the query, never returns the deleted rows.
    let dv = std::fs::read_dir(&table)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("deletion_vector_"))
        .unwrap();
    std::fs::write(&dv, b"garbage").unwrap();
    let e = engine
        .sql("SELECT * FROM t")
        .await
        .expect_err("corrupt vector");
    assert!(e.to_string().contains("deletion vector"), "{e}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}
