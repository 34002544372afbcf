//! TPC-H on the local stack: data generated here, uploaded to the stack's bucket under
//! `data/tpch/`, registered as tables through the API; the same files registered in a
//! single-process DataFusion context for the expected results.

use std::path::Path;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use lambdafusion::status::JobStatus;
use lambdafusion_cli::client::Client;
use lambdafusion_cli::tpch;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};

use crate::stack::Stack;

/// Where `load_tpch` puts the tables in the bucket; the stack must allow it as a data
/// bucket (`TF_VAR_data_buckets=["<bucket>"]`) and location
/// (`LAMBDAFUSION_DATA_BUCKETS=<bucket>/data`).
pub const DATA_PREFIX: &str = "data";

/// Generates TPC-H at scale factor `sf` into `dir`, uploads it to the stack's bucket and
/// registers the tables through `client`.
pub async fn load_tpch(stack: &Stack, client: &Client, dir: &Path, sf: f64) {
    tpch::generate(dir, sf, 2, &|_, _| {}).unwrap();
    let s3 = stack.s3();
    for file in tpch::data_files(dir) {
        let relative = file
            .strip_prefix(dir)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let bytes = std::fs::read(&*file).unwrap();
        s3.put(
            &ObjectPath::from(format!("{DATA_PREFIX}/tpch/{relative}")),
            PutPayload::from(bytes),
        )
        .await
        .unwrap();
    }
    let bucket = stack.var("LAMBDAFUSION_BUCKET");
    let creates = tpch::create_statements(&format!("s3://{bucket}/{DATA_PREFIX}/tpch"));
    futures::future::join_all(creates.iter().map(|sql| run(client, sql))).await;
}

/// Single-process DataFusion over the same files.
pub async fn baseline(dir: &Path) -> SessionContext {
    let ctx = SessionContext::new();
    tpch::register_baseline(&ctx, dir).await.unwrap();
    ctx
}

/// The expected result of `sql`.
pub async fn expected(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql).await.unwrap().collect().await.unwrap()
}

/// Runs `sql` to its end through `client` (3 minutes at most); panics on failure.
pub async fn run(client: &Client, sql: &str) -> (JobStatus, Vec<RecordBatch>) {
    let (status, _, batches) =
        tokio::time::timeout(Duration::from_secs(180), client.run(sql, &mut |_| {}))
            .await
            .unwrap_or_else(|_| panic!("timed out running:\n{sql}"))
            .unwrap_or_else(|e| panic!("{e}\nwhile running:\n{sql}"));
    (status, batches)
}
