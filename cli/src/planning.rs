//! `lambdafusion bench plan`: how long the scheduler takes to plan the 22 TPC-H queries —
//! planned once and resized to their input (what every query does), against planned a
//! second time at the right width (what every query did before; still the fallback) —
//! in the same run, both warmed, their order alternating.

use std::time::{Duration, Instant};

use lambdafusion::plan::{self, Sizing, StageSplitter};
use lambdafusion::EngineConfig;
use lambdafusion_embedded::Embedded;

use crate::bench::{median, BenchOptions};
use crate::display::text_table;
use crate::error::CliError;
use crate::tpch;

/// One query's planning figures.
struct PlanRow {
    query: usize,
    resized: Vec<Duration>,
    replanned: Vec<Duration>,
    /// Stages and tasks of each plan.
    resized_shape: (usize, usize),
    replanned_shape: (usize, usize),
}

/// Plans each query of `options` both ways, `options.iterations` times each after one
/// warm-up, and returns the report.
pub async fn run(options: &BenchOptions) -> Result<String, CliError> {
    let (dir, _scratch, engine) = crate::bench::prepare(options).await?;
    let mut rows = Vec::new();
    for &q in &options.queries {
        let sql = tpch::query(q);
        let plan = |sizing| plan_query(&engine, &options.config, sql, sizing);
        let (_, resized_shape) = plan(Sizing::Resize).await?;
        let (_, replanned_shape) = plan(Sizing::Replan).await?;
        let (mut resized, mut replanned) = (Vec::new(), Vec::new());
        for i in 0..options.iterations.max(1) {
            for resize_turn in [i % 2 == 0, i % 2 == 1] {
                if resize_turn {
                    resized.push(plan(Sizing::Resize).await?.0);
                } else {
                    replanned.push(plan(Sizing::Replan).await?.0);
                }
            }
        }
        rows.push(PlanRow {
            query: q,
            resized,
            replanned,
            resized_shape,
            replanned_shape,
        });
    }
    Ok(report(options, &dir, &rows))
}

/// Plans `sql` as the scheduler does (catalog, logical plan, physical plan, stages) and
/// returns the time of the physical planning and the stage graph's stages and tasks.
async fn plan_query(
    engine: &Embedded,
    config: &EngineConfig,
    sql: &str,
    sizing: Sizing,
) -> Result<(Duration, (usize, usize)), CliError> {
    let services = engine.services();
    let mut state = services.session_state(config.stage_width());
    state.mark_start_execution();
    lambdafusion::catalog::install(&state, services, false).await?;
    let logical = state
        .create_logical_plan(sql)
        .await
        .map_err(|e| format!("planning: {e}"))?;
    let started = Instant::now();
    let physical = plan::physical_plan_sized(&state, &logical, config, sizing).await?;
    let took = started.elapsed();
    let graph = StageSplitter::split(physical, config)?;
    let tasks = graph.stages.iter().map(|s| s.tasks).sum();
    Ok((took, (graph.stages.len(), tasks)))
}

fn report(options: &BenchOptions, dir: &std::path::Path, rows: &[PlanRow]) -> String {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    let shape = |(stages, tasks): (usize, usize)| format!("{stages} / {tasks}");
    let mut table = Vec::new();
    let (mut once_total, mut twice_total) = (Duration::ZERO, Duration::ZERO);
    for r in rows {
        let (once, twice) = (median(&r.resized), median(&r.replanned));
        once_total += once;
        twice_total += twice;
        table.push(vec![
            format!("q{}", r.query),
            ms(once),
            ms(twice),
            format!("{:.2}", ratio(once, twice)),
            shape(r.resized_shape),
            shape(r.replanned_shape),
        ]);
    }
    table.push(vec![
        "total".into(),
        ms(once_total),
        ms(twice_total),
        format!("{:.2}", ratio(once_total, twice_total)),
        String::new(),
        String::new(),
    ]);
    format!(
        "Physical planning of TPC-H SF {} ({:?} tables under {}), median of {} runs each \
         after one warm-up, order alternating; bytes_per_task {}, widest stage {}{}\n\n{}",
        options.sf,
        options.table_format,
        dir.display(),
        options.iterations.max(1),
        options.config.bytes_per_task,
        options.config.stage_width(),
        if options.settings.is_empty() {
            String::new()
        } else {
            format!(", {}", options.settings.join(", "))
        },
        text_table(
            &[
                "query",
                "once, resized (ms)",
                "twice (ms)",
                "once / twice",
                "stages / tasks (once)",
                "stages / tasks (twice)",
            ],
            &table,
        )
    )
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}
