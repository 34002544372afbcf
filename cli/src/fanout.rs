//! `lambdafusion bench fanout`: how fast a wide stage starts. A query over one small
//! table cut into N byte ranges runs a leaf stage of N tasks; from the records of the
//! finished job it reads the time from that stage's claim to the last invocation
//! accepted and to the start of each of its tasks — once through the invocation tree
//! (`dispatch_fanout` invocations per dispatcher) and once with the claiming scheduler
//! sending every task itself, in the same run.
//!
//! Embedded, invocations cost microseconds, dispatchers run on the engine's control
//! plane (not queued behind the tasks), and every task up to [`MAX_SLOTS`] gets a slot
//! of its own, so the last invocation accepted is the engine's own dispatch work. On the
//! local AWS stack (`measure_fanout` in `tests/tests/end_to_end/aws_local.rs`) every invocation goes
//! through the emulated Invoke API with AWS's latency, so the tree's effect shows; there
//! the task starts wait for the stack's few execution environments, and the figure to
//! read is the last invocation accepted.

use std::path::Path;
use std::time::Instant;

use lambdafusion::scheduler::{is_tree, tree_dispatchers};
use lambdafusion::state::JobSnapshot;
use lambdafusion::EngineConfig;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};

use crate::display::text_table;
use crate::error::CliError;

/// The most tasks an embedded fan-out run has at work at once: each holds a few MB
/// (its plan, its scan's reader and buffers), and 5,000 at once ran a 24 GiB machine out
/// of memory. Past it, tasks wait for a slot, and their starts include the wait; the
/// last invocation accepted is still the dispatch's own figure.
pub const MAX_SLOTS: usize = 1_000;

/// Rows of the table every fan-out query reads.
pub const ROWS: u64 = 200_000;

/// The fan-out query (its result is checked: `ROWS` rows, their sum).
pub const QUERY: &str = "SELECT count(*) AS n, sum(v) AS total FROM fanout";

/// How one wide stage started.
#[derive(Debug, Clone, PartialEq)]
pub struct FanoutRun {
    /// Where it ran (`embedded`, `local stack`).
    pub target: String,
    /// `tree` or `direct`.
    pub mode: String,
    /// Tasks of the stage.
    pub tasks: u32,
    /// Dispatcher invocations of its invocation tree (0 when sent directly).
    pub dispatchers: u32,
    /// From the claim to the last task invocation accepted (ms).
    pub dispatched_ms: u64,
    /// From the claim to the first task start (ms).
    pub first_start_ms: u64,
    /// From the claim to the median task start (ms).
    pub median_start_ms: u64,
    /// From the claim to the last task start (ms).
    pub last_start_ms: u64,
    /// The whole query, submission to result (ms).
    pub query_ms: u64,
}

/// The figures of the widest stage of a finished job, or `None` when it has none.
pub fn measure(
    snapshot: &JobSnapshot,
    target: &str,
    fanout: u32,
    query_ms: u64,
) -> Option<FanoutRun> {
    let stage = snapshot.stages.iter().max_by_key(|s| s.tasks)?;
    let claim = stage.dispatched_ms?;
    let tree = is_tree(stage.tasks, fanout);
    let accepted = if tree {
        snapshot
            .counters
            .iter()
            .filter(|c| c.stage == stage.stage)
            .filter_map(|c| c.dispatched_ms)
            .max()?
    } else {
        stage.confirmed_ms?
    };
    let mut starts: Vec<u64> = snapshot
        .tasks_of(stage.stage)
        .filter_map(|t| t.output.as_ref().map(|o| o.started_ms))
        .collect();
    starts.sort_unstable();
    let since = |t: u64| t.saturating_sub(claim);
    Some(FanoutRun {
        target: target.to_string(),
        mode: if tree { "tree" } else { "direct" }.to_string(),
        tasks: stage.tasks,
        dispatchers: if tree {
            tree_dispatchers(stage.tasks, fanout)
        } else {
            0
        },
        dispatched_ms: since(accepted),
        first_start_ms: since(*starts.first()?),
        median_start_ms: since(starts[starts.len() / 2]),
        last_start_ms: since(*starts.last()?),
        query_ms,
    })
}

/// Writes the fan-out table (one Parquet file of [`ROWS`] rows) into `dir/fanout/`.
pub async fn write_table(dir: &Path) -> Result<(), CliError> {
    use datafusion::dataframe::DataFrameWriteOptions;
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.sql(&format!(
        "SELECT value AS v FROM generate_series(1, {ROWS})"
    ))
    .await?
    .write_parquet(
        dir.join("fanout")
            .join("data.parquet")
            .to_str()
            .unwrap_or_default(),
        DataFrameWriteOptions::new().with_single_file_output(true),
        None,
    )
    .await?;
    Ok(())
}

/// The engine settings of a fan-out run: the scan cut into `tasks` byte ranges (one byte
/// per task, no coalescing), and `fanout` invocations per dispatcher.
pub fn config(tasks: u32, fanout: u32) -> EngineConfig {
    EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_max_tasks_per_stage(tasks as usize)
        .with_dispatch_fanout(fanout as usize)
}

/// Checks a fan-out query's result: [`ROWS`] rows summing to 1 + 2 + ... + ROWS.
pub fn check(batches: &[datafusion::arrow::array::RecordBatch]) -> Result<(), CliError> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::Int64Type;
    let batch = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .ok_or("the fan-out query returned no rows")?;
    let n = batch.column(0).as_primitive::<Int64Type>().value(0) as u64;
    let total = batch.column(1).as_primitive::<Int64Type>();
    let total = if total.is_null(0) {
        0
    } else {
        total.value(0) as u64
    };
    let want = ROWS * (ROWS + 1) / 2;
    if n != ROWS || total != want {
        return Err(format!(
            "the fan-out query counted {n} rows summing to {total}; expected {ROWS} and {want}"
        )
        .into());
    }
    Ok(())
}

/// Runs the fan-out query embedded, for every count in `tasks`, through the invocation
/// tree (`fanout` per dispatcher) and sent directly; prints progress to stderr.
pub async fn embedded(tasks: &[u32], fanout: u32) -> Result<Vec<FanoutRun>, CliError> {
    let dir = tempfile::tempdir()?;
    write_table(dir.path()).await?;
    let mut runs = Vec::new();
    for &n in tasks {
        for per_dispatcher in [fanout, n + 1] {
            let engine = Embedded::start(EmbeddedOptions {
                data_dir: None,
                config: config(n, per_dispatcher)
                    .with_data_location(dir.path().display().to_string()),
                // A slot per task up to MAX_SLOTS: up to there nothing waits for a slot
                // and the figures are dispatch; past it tasks queue for slots.
                slots: (n as usize).min(MAX_SLOTS) + 1,
                // One job may hold a quarter of the queue: room for all its tasks.
                max_queued_tasks: 8 * n as usize + 8,
                memory_limit: Some(4 << 30),
                ..EmbeddedOptions::default()
            })
            .await?;
            engine
                .sql(&format!(
                    "CREATE EXTERNAL TABLE fanout STORED AS PARQUET LOCATION '{}/'",
                    dir.path().join("fanout").display()
                ))
                .await?;
            let started = Instant::now();
            let out = engine.sql(QUERY).await?;
            let query_ms = started.elapsed().as_millis() as u64;
            check(&out.batches)?;
            let snapshot = engine
                .services()
                .store
                .load_job(&out.status.id)
                .await?
                .ok_or("the job's records are gone")?;
            let run = measure(&snapshot, "embedded", per_dispatcher, query_ms)
                .ok_or("the job has no dispatched stage")?;
            // DataFusion cuts the file into byte ranges of equal size: one fewer than
            // asked for when the sizes do not divide.
            if run.tasks < n.saturating_sub(n / 100 + 1) {
                return Err(
                    format!("the fan-out stage ran {} tasks, not about {n}", run.tasks).into(),
                );
            }
            eprintln!(
                "{n:>6} tasks {:<6}: last invocation {} ms, last start {} ms after the claim",
                run.mode, run.dispatched_ms, run.last_start_ms
            );
            runs.push(run);
        }
    }
    Ok(runs)
}

/// The fan-out table.
pub fn report(runs: &[FanoutRun]) -> String {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.target.clone(),
                r.tasks.to_string(),
                r.mode.clone(),
                r.dispatchers.to_string(),
                r.dispatched_ms.to_string(),
                r.first_start_ms.to_string(),
                r.median_start_ms.to_string(),
                r.last_start_ms.to_string(),
                r.query_ms.to_string(),
            ]
        })
        .collect();
    text_table(
        &[
            "target",
            "tasks",
            "dispatch",
            "dispatchers",
            "last invoke ms",
            "first start ms",
            "median start ms",
            "last start ms",
            "query ms",
        ],
        &rows,
    )
}
