//! The embedded engine end to end: SQL through stages, shuffle, and results, checked
//! against single-process DataFusion on the same files.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use lambdafusion::embedded::{Embedded, EmbeddedOptions};
use lambdafusion::EngineConfig;

/// Writes two tables of generated data as several Parquet files each.
async fn write_tables(dir: &Path) {
    let ctx = SessionContext::new();
    let facts = ctx
        .sql(
            "SELECT value AS id, value % 97 AS k, CAST(value AS DOUBLE) * 1.5 AS v, \
             concat('name-', CAST(value AS VARCHAR)) AS s \
             FROM generate_series(1, 30000)",
        )
        .await
        .unwrap()
        .repartition(datafusion::logical_expr::Partitioning::RoundRobinBatch(4))
        .unwrap();
    facts
        .write_parquet(
            dir.join("facts").to_str().unwrap(),
            DataFrameWriteOptions::new(),
            None,
        )
        .await
        .unwrap();
    let dims = ctx
        .sql("SELECT value AS k, concat('group-', CAST(value AS VARCHAR)) AS label FROM generate_series(0, 96)")
        .await
        .unwrap();
    dims.write_parquet(
        dir.join("dims").to_str().unwrap(),
        DataFrameWriteOptions::new(),
        None,
    )
    .await
    .unwrap();
}

async fn reference(dir: &Path, sql: &str) -> Vec<datafusion::arrow::array::RecordBatch> {
    let ctx = SessionContext::new();
    for t in ["facts", "dims"] {
        ctx.register_parquet(t, dir.join(t).to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
    }
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

async fn engine(config: EngineConfig) -> Arc<Embedded> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    Embedded::start(EmbeddedOptions {
        data_dir: None,
        config,
        slots: 4,
    })
    .await
    .unwrap()
}

async fn register(engine: &Embedded, dir: &Path) {
    for t in ["facts", "dims"] {
        let sql = format!(
            "CREATE EXTERNAL TABLE {t} STORED AS PARQUET LOCATION '{}/'",
            dir.join(t).display()
        );
        engine.sql(&sql).await.unwrap();
    }
}

const QUERIES: &[(&str, bool)] = &[
    ("SELECT count(*) AS n, sum(v) AS total FROM facts", false),
    ("SELECT k, count(*) AS n, sum(v) AS total, min(s) AS first FROM facts GROUP BY k ORDER BY k", true),
    (
        "SELECT d.label, count(*) AS n, avg(f.v) AS mean FROM facts f JOIN dims d ON f.k = d.k \
         WHERE f.id % 3 = 0 GROUP BY d.label ORDER BY n DESC, d.label",
        true,
    ),
    ("SELECT id, s FROM facts WHERE id % 1000 = 7", false),
    ("SELECT id, v FROM facts ORDER BY v DESC LIMIT 5", true),
    ("SELECT DISTINCT k FROM facts WHERE k < 10", false),
    (
        "SELECT f.k, count(*) FROM facts f WHERE f.k IN (SELECT k FROM dims WHERE label LIKE 'group-1%') GROUP BY f.k",
        false,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queries_match_datafusion_across_many_tasks() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    // One byte per task: every stage fans out as wide as allowed.
    let engine = engine(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_max_tasks_per_stage(6),
    )
    .await;
    register(&engine, dir.path()).await;
    for (sql, ordered) in QUERIES {
        let out = engine.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        let expected = reference(dir.path(), sql).await;
        if let Err(diff) = lambdafusion::verify::compare(&expected, &out.batches, *ordered) {
            panic!("{sql}\n{diff}");
        }
        assert!(out.status.stages.len() >= 1);
    }
    // The aggregation really ran as several stages of several tasks.
    let out = engine.sql(QUERIES[1].0).await.unwrap();
    assert!(out.status.stages.len() >= 2, "{:?}", out.status.stages);
    assert!(out.status.stages.iter().any(|s| s.tasks > 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_input_runs_as_one_task() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    let engine = engine(EngineConfig::default()).await;
    register(&engine, dir.path()).await;
    let out = engine.sql(QUERIES[1].0).await.unwrap();
    assert_eq!(out.status.tasks, 1, "{:?}", out.status.stages);
    let expected = reference(dir.path(), QUERIES[1].0).await;
    lambdafusion::verify::compare(&expected, &out.batches, true).unwrap();
    let status = engine.wait(&out.status.id, Duration::ZERO).await.unwrap();
    assert_eq!(status.state, "succeeded");
}

