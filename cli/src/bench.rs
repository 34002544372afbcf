//! `lambdafusion bench tpch`: the 22 TPC-H queries through the embedded engine (the
//! whole serverless path in one process) and through single-process DataFusion on the
//! same files, in the same run, with results checked against each other.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use datafusion::prelude::SessionContext;
use lambdafusion::embedded::{Embedded, EmbeddedOptions};
use lambdafusion::EngineConfig;

use crate::display::{bytes, text_table};
use crate::tpch;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Scale factor.
    pub sf: f64,
    /// Directory holding generated data (`<dir>/sf<sf>`), generated if absent.
    pub data: PathBuf,
    /// Queries to run (1..=22).
    pub queries: Vec<usize>,
    /// Runs per query and engine; the fastest counts.
    pub iterations: usize,
    /// Engine settings for lambdafusion.
    pub config: EngineConfig,
    /// Function slots of the embedded engine.
    pub slots: usize,
}

/// One query's figures.
#[derive(Debug, Clone)]
pub struct BenchRow {
    /// Query number.
    pub query: usize,
    /// Fastest DataFusion run.
    pub datafusion: Duration,
    /// Fastest lambdafusion run.
    pub lambdafusion: Duration,
    /// Stages of the lambdafusion plan.
    pub stages: usize,
    /// Tasks run.
    pub tasks: u32,
    /// Shuffle objects written (intermediate stages).
    pub shuffle_objects: u64,
    /// Shuffle bytes written (intermediate stages).
    pub shuffle_bytes: u64,
    /// Result rows.
    pub rows: u64,
    /// `None` when the results matched, else the difference.
    pub mismatch: Option<String>,
}

/// Runs the benchmark; prints progress to stderr and returns the rows.
pub async fn run(options: &BenchOptions) -> Result<Vec<BenchRow>, String> {
    let dir = tpch::data_dir(&options.data, options.sf);
    if !tpch::is_generated(&dir) {
        eprintln!(
            "generating TPC-H SF {} into {} ...",
            options.sf,
            dir.display()
        );
        let started = Instant::now();
        tpch::generate(&dir, options.sf, 2, &|_, _| {})?;
        eprintln!("generated in {:.1} s", started.elapsed().as_secs_f64());
    }
    let baseline = SessionContext::new();
    tpch::register_baseline(&baseline, &dir)
        .await
        .map_err(|e| e.to_string())?;
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let engine = Embedded::start(EmbeddedOptions {
        data_dir: Some(scratch.path().to_path_buf()),
        config: options
            .config
            .clone()
            .with_data_location(dir.display().to_string()),
        slots: options.slots,
        ..EmbeddedOptions::default()
    })
    .await
    .map_err(|e| e.to_string())?;
    for sql in tpch::create_statements(&dir.display().to_string()) {
        engine.sql(&sql).await.map_err(|e| e.to_string())?;
    }
    let mut rows = Vec::new();
    for &q in &options.queries {
        let sql = tpch::query(q);
        let mut best_df = Duration::MAX;
        let mut expected = Vec::new();
        for _ in 0..options.iterations.max(1) {
            let started = Instant::now();
            let df = baseline
                .sql(sql)
                .await
                .map_err(|e| format!("q{q} on DataFusion: {e}"))?;
            expected = df
                .collect()
                .await
                .map_err(|e| format!("q{q} on DataFusion: {e}"))?;
            best_df = best_df.min(started.elapsed());
        }
        let mut best_lf = Duration::MAX;
        let mut last = None;
        for _ in 0..options.iterations.max(1) {
            let started = Instant::now();
            let out = engine
                .sql(sql)
                .await
                .map_err(|e| format!("q{q} on lambdafusion: {e}"))?;
            best_lf = best_lf.min(started.elapsed());
            last = Some(out);
        }
        let out = last.expect("at least one iteration");
        let mismatch =
            lambdafusion::verify::compare(&expected, &out.batches, tpch::is_ordered(q)).err();
        let intermediate = &out.status.stages[..out.status.stages.len().saturating_sub(1)];
        let row = BenchRow {
            query: q,
            datafusion: best_df,
            lambdafusion: best_lf,
            stages: out.status.stages.len(),
            tasks: out.status.tasks,
            shuffle_objects: intermediate.iter().map(|s| s.objects).sum(),
            shuffle_bytes: intermediate.iter().map(|s| s.bytes).sum(),
            rows: out.status.result_rows.unwrap_or(0),
            mismatch,
        };
        eprintln!(
            "q{q:<2} datafusion {:>7.1} ms  lambdafusion {:>7.1} ms{}",
            ms(row.datafusion),
            ms(row.lambdafusion),
            if row.mismatch.is_some() {
                "  RESULT MISMATCH"
            } else {
                ""
            }
        );
        rows.push(row);
    }
    Ok(rows)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The benchmark table, with totals.
pub fn report(options: &BenchOptions, rows: &[BenchRow]) -> String {
    let mut table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                format!("q{}", r.query),
                format!("{:.1}", ms(r.datafusion)),
                format!("{:.1}", ms(r.lambdafusion)),
                format!("{:.2}x", ms(r.lambdafusion) / ms(r.datafusion).max(0.001)),
                r.stages.to_string(),
                r.tasks.to_string(),
                r.shuffle_objects.to_string(),
                bytes(r.shuffle_bytes),
                r.rows.to_string(),
                if r.mismatch.is_none() {
                    "ok".into()
                } else {
                    "MISMATCH".into()
                },
            ]
        })
        .collect();
    let total_df: f64 = rows.iter().map(|r| ms(r.datafusion)).sum();
    let total_lf: f64 = rows.iter().map(|r| ms(r.lambdafusion)).sum();
    let geo = (rows
        .iter()
        .map(|r| (ms(r.lambdafusion) / ms(r.datafusion).max(0.001)).ln())
        .sum::<f64>()
        / rows.len().max(1) as f64)
        .exp();
    table.push(vec![
        "total".into(),
        format!("{total_df:.1}"),
        format!("{total_lf:.1}"),
        format!(
            "{:.2}x (geo mean {geo:.2}x)",
            total_lf / total_df.max(0.001)
        ),
        rows.iter().map(|r| r.stages).sum::<usize>().to_string(),
        rows.iter().map(|r| r.tasks).sum::<u32>().to_string(),
        rows.iter()
            .map(|r| r.shuffle_objects)
            .sum::<u64>()
            .to_string(),
        bytes(rows.iter().map(|r| r.shuffle_bytes).sum()),
        String::new(),
        format!(
            "{}/{} ok",
            rows.iter().filter(|r| r.mismatch.is_none()).count(),
            rows.len()
        ),
    ]);
    let mut out = format!(
        "TPC-H SF {} — single-process DataFusion vs lambdafusion embedded ({} function slots, {} bytes/task, at most {} tasks/stage); best of {} run{}\n\n",
        options.sf,
        options.slots,
        bytes(options.config.bytes_per_task),
        options.config.max_tasks_per_stage,
        options.iterations,
        if options.iterations == 1 { "" } else { "s" },
    );
    out.push_str(&text_table(
        &[
            "query",
            "datafusion ms",
            "lambdafusion ms",
            "ratio",
            "stages",
            "tasks",
            "shuffle objects",
            "shuffle bytes",
            "rows",
            "result",
        ],
        &table,
    ));
    for r in rows.iter().filter(|r| r.mismatch.is_some()) {
        out.push_str(&format!(
            "\nq{} mismatch: {}\n",
            r.query,
            r.mismatch.as_deref().unwrap_or("")
        ));
    }
    out
}
