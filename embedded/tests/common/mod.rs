//! Test data shared by the engine tests: two small tables written as Parquet by
//! DataFusion itself, and the single-process reference for any query over them.
#![allow(dead_code)]

pub mod harness;

use std::path::Path;

use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::prelude::{ParquetReadOptions, SessionContext};

/// Writes two tables of generated data as several Parquet files each.
pub async fn write_tables(dir: &Path) {
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

/// Registers the two tables [`write_tables`] wrote under `dir` in `ctx`.
pub async fn register_parquet(ctx: &SessionContext, dir: &Path) {
    for t in ["facts", "dims"] {
        ctx.register_parquet(
            t,
            dir.join(t).to_str().unwrap(),
            ParquetReadOptions::default(),
        )
        .await
        .unwrap();
    }
}

pub async fn reference(dir: &Path, sql: &str) -> Vec<datafusion::arrow::array::RecordBatch> {
    let ctx = SessionContext::new();
    register_parquet(&ctx, dir).await;
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

/// The embedded engine with `config` (allowed to read `dir`) and four function slots,
/// the two tables under `dir` created in its catalog.
pub async fn engine_with_tables(
    config: lambdafusion::EngineConfig,
    dir: &Path,
) -> std::sync::Arc<lambdafusion_embedded::Embedded> {
    let engine = lambdafusion_embedded::Embedded::start(lambdafusion_embedded::EmbeddedOptions {
        data_dir: None,
        config: allow(config, dir),
        slots: 4,
        ..lambdafusion_embedded::EmbeddedOptions::default()
    })
    .await
    .unwrap();
    for sql in create_statements(dir) {
        engine.sql(&sql).await.unwrap();
    }
    engine
}

/// Bytes of the files directly under `dir` (a table's files).
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// `config` allowed to read tables under `dir`.
pub fn allow(config: lambdafusion::EngineConfig, dir: &Path) -> lambdafusion::EngineConfig {
    config.with_data_location(dir.display().to_string())
}

/// `CREATE EXTERNAL TABLE` statements for the tables under `dir`.
pub fn create_statements(dir: &Path) -> Vec<String> {
    ["facts", "dims"]
        .iter()
        .map(|t| {
            format!(
                "CREATE EXTERNAL TABLE {t} STORED AS PARQUET LOCATION '{}/'",
                dir.join(t).display()
            )
        })
        .collect()
}
