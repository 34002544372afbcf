//! `lambdafusion bench tpch`: the 22 TPC-H queries through the embedded engine (the
//! whole serverless path in one process) and through single-process DataFusion on the
//! same files, in the same run, with results checked against each other.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use datafusion::prelude::SessionContext;
use lambdafusion::state::AdaptiveRule;
use lambdafusion::EngineConfig;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};

use crate::display::{bytes, text_table};
use crate::error::CliError;
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
    /// Measured runs per query and engine (after one warm-up run each), their order
    /// alternating: DataFusion first in even runs, lambdafusion first in odd ones.
    pub iterations: usize,
    /// Engine settings for lambdafusion.
    pub config: EngineConfig,
    /// The settings given by name (`--set`), printed with the figures.
    pub settings: Vec<String>,
    /// Function slots of the embedded engine.
    pub slots: usize,
    /// Also run each query with adaptive stages off.
    pub compare_planned: bool,
    /// Memory all slots of the embedded engine share (each task an equal part as its own
    /// pool, spilling past it); `None`: the engine's default (half the machine's).
    pub memory_limit: Option<usize>,
    /// Also keep each query's profile for the AWS model ([`crate::model`]).
    pub model: bool,
    /// What lambdafusion reads: the Parquet files, or their Delta Lake copy under
    /// `<data>/sf<sf>/delta/` (`scripts/tpch-as-delta`), or their Iceberg copy under
    /// `<data>/sf<sf>/iceberg/` (`scripts/tpch-as-iceberg`). DataFusion reads the Parquet
    /// files.
    pub table_format: TableFormat,
}

/// The table format lambdafusion reads in a benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TableFormat {
    /// The generated Parquet files.
    #[default]
    Parquet,
    /// The Delta Lake copy of them (`scripts/tpch-as-delta`).
    Delta,
    /// The Apache Iceberg copy of them (`scripts/tpch-as-iceberg`).
    Iceberg,
}

/// The `CREATE EXTERNAL TABLE` statements lambdafusion's tables are made with: the
/// Parquet files under `dir`, or the Delta tables under `dir/delta/` (an error saying how
/// to make them when they are missing).
fn table_statements(dir: &std::path::Path, format: TableFormat) -> Result<Vec<String>, CliError> {
    match format {
        TableFormat::Parquet => Ok(tpch::create_statements(&dir.display().to_string())),
        TableFormat::Delta => tpch::TABLES
            .iter()
            .map(|table| {
                let location = dir.join("delta").join(table);
                if !location.join("_delta_log").is_dir() {
                    return Err(CliError::from(format!(
                        "{} is not a Delta table: write the Delta copy of the data with \
                         scripts/tpch-as-delta {}",
                        location.display(),
                        dir.display()
                    )));
                }
                Ok(format!(
                    "CREATE EXTERNAL TABLE {table} STORED AS DELTA LOCATION '{}'",
                    location.display()
                ))
            })
            .collect(),
        TableFormat::Iceberg => {
            let listing = dir.join("iceberg").join("tables.json");
            let text = std::fs::read(&listing).map_err(|e| {
                CliError::from(format!(
                    "{}: {e}: write the Iceberg copy of the data with scripts/tpch-as-iceberg {}",
                    listing.display(),
                    dir.display()
                ))
            })?;
            let tables: std::collections::BTreeMap<String, String> = serde_json::from_slice(&text)
                .map_err(|e| CliError::from(format!("{}: {e}", listing.display())))?;
            tpch::TABLES
                .iter()
                .map(|table| {
                    let metadata = tables.get(*table).ok_or_else(|| {
                        CliError::from(format!("{} lists no table {table}", listing.display()))
                    })?;
                    Ok(format!(
                        "CREATE EXTERNAL TABLE {table} STORED AS ICEBERG LOCATION '{metadata}'"
                    ))
                })
                .collect()
        }
    }
}

/// One query's figures.
#[derive(Debug, Clone)]
pub struct BenchRow {
    /// Query number.
    pub query: usize,
    /// DataFusion's runs.
    pub datafusion_runs: Vec<Duration>,
    /// lambdafusion's runs, as the client saw them (submit to rows read).
    pub lambdafusion_runs: Vec<Duration>,
    /// lambdafusion's runs as the job recorded them (submission to its end).
    pub job_runs: Vec<Duration>,
    /// Median DataFusion run.
    pub datafusion: Duration,
    /// Median lambdafusion run (as the client saw it).
    pub lambdafusion: Duration,
    /// Fastest lambdafusion run with adaptive stages off, when compared.
    pub planned: Option<Duration>,
    /// Stages coalesced by the adaptive planner.
    pub coalesced: usize,
    /// Hand-off times of the stages with inputs (last input commit to first task start).
    pub handoffs_ms: Vec<u64>,
    /// Sequential requests of those hand-offs, as their first tasks recorded them.
    pub handoff_calls: Vec<u32>,
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
    /// Peak resident memory of the process while DataFusion ran the query.
    pub datafusion_peak_rss: Option<u64>,
    /// Peak resident memory of the process while lambdafusion ran the query.
    pub peak_rss: Option<u64>,
    /// The query's profile for the AWS model (last lambdafusion run), when asked for.
    pub profile: Option<crate::model::QueryProfile>,
    /// Requests the query made (last lambdafusion run).
    pub requests: lambdafusion::requests::RequestCounts,
    /// CPU time of its tasks' threads and the thread time they had (run time × threads),
    /// ms, over all stages and over its stages of one task (last lambdafusion run).
    pub cpu: [CpuUse; 2],
}

/// CPU time and the thread time it was used of (ms): their ratio is how busy tasks kept
/// their threads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuUse {
    /// CPU time of the tasks' threads.
    pub cpu_ms: f64,
    /// Run time × threads of the same tasks.
    pub capacity_ms: f64,
}

impl CpuUse {
    /// The measured stages among `stages`, added up.
    pub fn of<'a>(stages: impl Iterator<Item = &'a lambdafusion::status::StageStatus>) -> Self {
        stages
            .filter_map(|s| {
                s.cpu_use.filter(|u| *u > 0.0).map(|u| CpuUse {
                    cpu_ms: s.cpu_ms as f64,
                    capacity_ms: s.cpu_ms as f64 / u,
                })
            })
            .fold(CpuUse::default(), |a, b| a + b)
    }

    /// `87%`, or `-` when nothing was measured.
    pub fn shown(&self) -> String {
        if self.capacity_ms > 0.0 {
            format!("{:.0}%", 100.0 * self.cpu_ms / self.capacity_ms)
        } else {
            "-".into()
        }
    }
}

impl std::ops::Add for CpuUse {
    type Output = CpuUse;
    fn add(self, other: CpuUse) -> CpuUse {
        CpuUse {
            cpu_ms: self.cpu_ms + other.cpu_ms,
            capacity_ms: self.capacity_ms + other.capacity_ms,
        }
    }
}

/// Starts a new peak-resident-memory window (Linux: `clear_refs` resets `VmHWM` to the
/// current resident set).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident memory of this process since the last [`reset_peak_rss`], in bytes
/// (`VmHWM` in `/proc/self/status`); `None` where there is none.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_peak_rss(&status)
}

/// The `VmHWM` line of a `/proc/<pid>/status` text, in bytes.
fn parse_peak_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs the benchmark; prints progress to stderr and returns the rows.
///
/// Long because it is the benchmark's protocol in order (load, warm, alternate, time,
/// verify), which reads best as one sequence.
pub async fn run(options: &BenchOptions) -> Result<Vec<BenchRow>, CliError> {
    let (dir, scratch, engine) = prepare(options).await?;
    let baseline = baseline_context(options);
    tpch::register_baseline(&baseline, &dir).await?;
    let planned_engine = match options.compare_planned {
        true => Some(start_engine(options, &dir, &scratch.path().join("planned"), false).await?),
        false => None,
    };
    let mut rows = Vec::new();
    for &q in &options.queries {
        let sql = tpch::query(q);
        let run_datafusion = || async {
            let started = Instant::now();
            let df = baseline
                .sql(sql)
                .await
                .map_err(|e| format!("q{q} on DataFusion: {e}"))?;
            let batches = df
                .collect()
                .await
                .map_err(|e| format!("q{q} on DataFusion: {e}"))?;
            Ok::<_, CliError>((started.elapsed(), batches))
        };
        let run_engine = || async {
            let cpu_before = crate::model::process_cpu_ms();
            let started = Instant::now();
            let (out, submit) = run_query(&engine, sql)
                .await
                .map_err(|e| format!("q{q} on lambdafusion: {e}"))?;
            let took = started.elapsed();
            let cpu = crate::model::process_cpu_ms()
                .zip(cpu_before)
                .map(|(after, before)| after - before);
            Ok::<_, CliError>((took, out, submit, cpu))
        };
        // Warm both once (files in the page cache, plans in the executor's cache), then
        // measure, alternating which runs first.
        let (_, mut expected) = run_datafusion().await?;
        run_engine().await?;
        let (mut df_runs, mut lf_runs, mut job_runs) = (Vec::new(), Vec::new(), Vec::new());
        let mut last = None;
        let mut profile = None;
        let (mut datafusion_peak_rss, mut engine_peak_rss) = (None, None);
        for i in 0..options.iterations.max(1) {
            for engine_turn in [i % 2 == 1, i % 2 == 0] {
                reset_peak_rss();
                if engine_turn {
                    let (took, out, submit, cpu) = run_engine().await?;
                    lf_runs.push(took);
                    job_runs.push(Duration::from_millis(
                        out.status.finished_ms.unwrap_or(out.status.created_ms)
                            - out.status.created_ms,
                    ));
                    engine_peak_rss = engine_peak_rss.max(peak_rss());
                    if options.model {
                        let snapshot = engine
                            .services()
                            .store
                            .load_job(&out.status.id)
                            .await?
                            .ok_or_else(|| format!("q{q}: the job's records are gone"))?;
                        profile = Some(crate::model::profile(
                            &format!("q{q}"),
                            options.sf,
                            &snapshot,
                            &out.status,
                            submit.as_secs_f64() * 1e3,
                            cpu,
                        ));
                    }
                    last = Some(out);
                } else {
                    let (took, batches) = run_datafusion().await?;
                    df_runs.push(took);
                    datafusion_peak_rss = datafusion_peak_rss.max(peak_rss());
                    expected = batches;
                }
            }
        }
        let mut best_planned = None;
        if let Some(planned) = &planned_engine {
            let mut runs = Vec::new();
            for _ in 0..options.iterations.max(1) {
                let started = Instant::now();
                let out = planned
                    .sql(sql)
                    .await
                    .map_err(|e| format!("q{q} on lambdafusion (planned): {e}"))?;
                runs.push(started.elapsed());
                if let Err(e) = lambdafusion_embedded::verify::compare(
                    &expected,
                    &out.batches,
                    tpch::is_ordered(q),
                ) {
                    return Err(format!("q{q} with adaptive stages off differs: {e}").into());
                }
            }
            best_planned = Some(median(&runs));
        }
        let out = last.expect("at least one iteration");
        let mismatch =
            lambdafusion_embedded::verify::compare(&expected, &out.batches, tpch::is_ordered(q))
                .err();
        let intermediate = &out.status.stages[..out.status.stages.len().saturating_sub(1)];
        let row = BenchRow {
            query: q,
            datafusion: median(&df_runs),
            lambdafusion: median(&lf_runs),
            datafusion_runs: df_runs,
            lambdafusion_runs: lf_runs,
            job_runs,
            planned: best_planned,
            coalesced: out
                .status
                .stages
                .iter()
                .filter(|s| s.decision.as_deref() == Some(AdaptiveRule::Coalesced.as_str()))
                .count(),
            handoffs_ms: out
                .status
                .stages
                .iter()
                .filter_map(|s| s.handoff_ms)
                .collect(),
            handoff_calls: out
                .status
                .stages
                .iter()
                .filter_map(|s| s.handoff_calls)
                .collect(),
            stages: out.status.stages.len(),
            tasks: out.status.tasks,
            shuffle_objects: intermediate.iter().map(|s| s.objects).sum(),
            shuffle_bytes: intermediate.iter().map(|s| s.bytes).sum(),
            rows: out.status.result_rows.unwrap_or(0),
            mismatch,
            datafusion_peak_rss,
            peak_rss: engine_peak_rss,
            profile,
            requests: out.status.requests,
            cpu: [
                CpuUse::of(out.status.stages.iter()),
                CpuUse::of(out.status.stages.iter().filter(|s| s.tasks == 1)),
            ],
        };
        eprintln!(
            "q{q:<2} datafusion {:>7.1} ms  lambdafusion {:>7.1} ms (job {:>7.1} ms){}",
            ms(row.datafusion),
            ms(row.lambdafusion),
            ms(median(&row.job_runs)),
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

/// Runs `sql` on `engine` to its end: its output, and how long its submission (planning,
/// recording, first dispatch) took.
async fn run_query(
    engine: &Embedded,
    sql: &str,
) -> Result<(lambdafusion_embedded::QueryOutput, Duration), CliError> {
    let started = Instant::now();
    let id = engine.submit(sql).await?;
    let submit = started.elapsed();
    let output = engine
        .finish(&id, Duration::from_secs(3600), |_| {})
        .await?;
    Ok((output, submit))
}

/// The data of `options` (generated if absent; its absolute path, as table locations
/// are checked against it), a scratch directory and an embedded engine over it with the
/// tables declared.
pub(crate) async fn prepare(
    options: &BenchOptions,
) -> Result<(PathBuf, tempfile::TempDir, std::sync::Arc<Embedded>), CliError> {
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
    let dir = std::fs::canonicalize(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let scratch = tempfile::tempdir()?;
    let engine = start_engine(options, &dir, &scratch.path().join("adaptive"), true).await?;
    Ok((dir, scratch, engine))
}

/// An embedded engine over the generated tables, adaptive stages on or off.
async fn start_engine(
    options: &BenchOptions,
    dir: &std::path::Path,
    scratch: &std::path::Path,
    adaptive: bool,
) -> Result<std::sync::Arc<Embedded>, CliError> {
    std::fs::create_dir_all(scratch)?;
    let engine = Embedded::start(EmbeddedOptions {
        data_dir: Some(scratch.to_path_buf()),
        config: options
            .config
            .clone()
            .with_adaptive(adaptive)
            .with_data_location(dir.display().to_string()),
        slots: options.slots,
        memory_limit: options.memory_limit,
        ..EmbeddedOptions::default()
    })
    .await?;
    for sql in table_statements(dir, options.table_format)? {
        engine.sql(&sql).await?;
    }
    Ok(engine)
}

/// The median of `runs` (the lower of the middle two of an even count).
pub fn median(runs: &[Duration]) -> Duration {
    let mut sorted = runs.to_vec();
    sorted.sort_unstable();
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or_default()
}

fn fastest(runs: &[Duration]) -> Duration {
    runs.iter().min().copied().unwrap_or_default()
}

/// Single-process DataFusion as the benchmark runs it: its default settings (one
/// partition per core), and the same memory the engine's slots share, spilling past it
/// to a temporary directory.
fn baseline_context(options: &BenchOptions) -> SessionContext {
    let memory = engine_memory(options);
    let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_memory_pool(std::sync::Arc::new(
            datafusion::execution::memory_pool::FairSpillPool::new(memory),
        ))
        .build_arc()
        .expect("a runtime");
    SessionContext::new_with_config_rt(datafusion::prelude::SessionConfig::new(), runtime)
}

/// The memory both engines get: `--memory-limit-mb`, or the engine's default (half of
/// this machine's).
fn engine_memory(options: &BenchOptions) -> usize {
    options
        .memory_limit
        .or_else(|| lambdafusion_embedded::machine_memory().map(|m| m / 2))
        .unwrap_or(8 << 30)
}

/// The `q`-quantile (0..=1) of `values` (nearest rank); `None` when empty.
pub fn quantile(values: &[u64], q: f64) -> Option<u64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The benchmark table, with totals.
///
/// Long because it is one table's columns, in the order they print.
pub fn report(options: &BenchOptions, rows: &[BenchRow]) -> String {
    let mut table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                format!("q{}", r.query),
                format!("{:.1}", ms(fastest(&r.datafusion_runs))),
                format!("{:.1}", ms(r.datafusion)),
                format!("{:.1}", ms(fastest(&r.lambdafusion_runs))),
                format!("{:.1}", ms(r.lambdafusion)),
                format!("{:.1}", ms(median(&r.job_runs))),
                format!("{:.2}x", ms(r.lambdafusion) / ms(r.datafusion).max(0.001)),
                r.planned.map_or("-".into(), |p| format!("{:.1}", ms(p))),
                r.planned.map_or("-".into(), |p| {
                    format!("{:.2}x", ms(p) / ms(r.datafusion).max(0.001))
                }),
                r.stages.to_string(),
                r.coalesced.to_string(),
                r.tasks.to_string(),
                r.shuffle_objects.to_string(),
                bytes(r.shuffle_bytes),
                r.rows.to_string(),
                r.peak_rss.map_or("-".into(), bytes),
                r.datafusion_peak_rss.map_or("-".into(), bytes),
                format!("{:.0}", r.cpu[0].cpu_ms),
                r.cpu[0].shown(),
                r.cpu[1].shown(),
                crate::display::requests(&r.requests),
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
    let planned_total: Option<f64> = rows.iter().map(|r| r.planned.map(ms)).sum::<Option<f64>>();
    let planned_geo = (rows
        .iter()
        .filter_map(|r| {
            r.planned
                .map(|p| (ms(p) / ms(r.datafusion).max(0.001)).ln())
        })
        .sum::<f64>()
        / rows.len().max(1) as f64)
        .exp();
    let total = |f: &dyn Fn(&BenchRow) -> Duration| -> String {
        format!("{:.1}", rows.iter().map(|r| ms(f(r))).sum::<f64>())
    };
    table.push(vec![
        "total".into(),
        total(&|r| fastest(&r.datafusion_runs)),
        format!("{total_df:.1}"),
        total(&|r| fastest(&r.lambdafusion_runs)),
        format!("{total_lf:.1}"),
        total(&|r| median(&r.job_runs)),
        format!(
            "{:.2}x (geo mean {geo:.2}x)",
            total_lf / total_df.max(0.001)
        ),
        planned_total.map_or("-".into(), |t| format!("{t:.1}")),
        planned_total.map_or("-".into(), |t| {
            format!(
                "{:.2}x (geo mean {:.2}x)",
                t / total_df.max(0.001),
                planned_geo
            )
        }),
        rows.iter().map(|r| r.stages).sum::<usize>().to_string(),
        rows.iter().map(|r| r.coalesced).sum::<usize>().to_string(),
        rows.iter().map(|r| r.tasks).sum::<u32>().to_string(),
        rows.iter()
            .map(|r| r.shuffle_objects)
            .sum::<u64>()
            .to_string(),
        bytes(rows.iter().map(|r| r.shuffle_bytes).sum()),
        String::new(),
        rows.iter()
            .filter_map(|r| r.peak_rss)
            .max()
            .map_or("-".into(), |m| format!("max {}", bytes(m))),
        rows.iter()
            .filter_map(|r| r.datafusion_peak_rss)
            .max()
            .map_or("-".into(), |m| format!("max {}", bytes(m))),
        format!("{:.0}", rows.iter().map(|r| r.cpu[0].cpu_ms).sum::<f64>()),
        rows.iter()
            .fold(CpuUse::default(), |a, r| a + r.cpu[0])
            .shown(),
        rows.iter()
            .fold(CpuUse::default(), |a, r| a + r.cpu[1])
            .shown(),
        crate::display::requests(&rows.iter().map(|r| r.requests).sum()),
        format!(
            "{}/{} ok",
            rows.iter().filter(|r| r.mismatch.is_none()).count(),
            rows.len()
        ),
    ]);
    let mut out = format!(
        "TPC-H SF {} — single-process DataFusion vs lambdafusion embedded; each warmed once, \
         then {} run{} each, alternating which goes first; times in ms, ratio of medians\n\
         DataFusion: one process, {} partitions, batch size {}, memory pool {} (fair, spills)\n\
         lambdafusion: {} tables, {} function slots, memory {} ({} per task), {} bytes/task, \
         {} shuffle bytes/task, at most {} tasks/stage, adaptive {}{}\n\n",
        options.sf,
        options.iterations,
        if options.iterations == 1 { "" } else { "s" },
        datafusion::prelude::SessionConfig::new().target_partitions(),
        datafusion::prelude::SessionConfig::new().batch_size(),
        bytes(engine_memory(options) as u64),
        match options.table_format {
            TableFormat::Parquet => "Parquet",
            TableFormat::Delta => "Delta Lake",
            TableFormat::Iceberg => "Apache Iceberg",
        },
        options.slots,
        bytes(engine_memory(options) as u64),
        bytes((engine_memory(options) / options.slots.max(1)) as u64),
        bytes(options.config.bytes_per_task),
        bytes(options.config.shuffle_bytes_per_task),
        options.config.max_tasks_per_stage,
        if options.config.adaptive { "on" } else { "off" },
        if options.settings.is_empty() {
            String::new()
        } else {
            format!(", {}", options.settings.join(", "))
        },
    );
    out.push_str(&text_table(
        &[
            "query",
            "datafusion min",
            "datafusion median",
            "lambdafusion min",
            "lambdafusion median",
            "job median",
            "ratio",
            "planned ms",
            "planned ratio",
            "stages",
            "coalesced",
            "tasks",
            "shuffle objects",
            "shuffle bytes",
            "rows",
            "peak rss",
            "datafusion rss",
            "cpu ms",
            "cpu use",
            "1-task cpu use",
            "requests (store r/w, GET/PUT, invokes)",
            "result",
        ],
        &table,
    ));
    let handoffs: Vec<u64> = rows.iter().flat_map(|r| r.handoffs_ms.clone()).collect();
    if let (Some(p50), Some(p95)) = (quantile(&handoffs, 0.5), quantile(&handoffs, 0.95)) {
        out.push_str(&format!(
            "\nhand-off (last input commit to first task start), {} stages: p50 {p50} ms, \
             p95 {p95} ms\n",
            handoffs.len()
        ));
    }
    let calls: Vec<u64> = rows
        .iter()
        .flat_map(|r| r.handoff_calls.iter().map(|&c| u64::from(c)))
        .collect();
    if let (Some(p50), Some(max)) = (quantile(&calls, 0.5), calls.iter().max()) {
        let mut histogram = std::collections::BTreeMap::new();
        for c in &calls {
            *histogram.entry(*c).or_insert(0) += 1;
        }
        out.push_str(&format!(
            "hand-off sequential requests (commit to first task at work), {} stages: p50 \
             {p50}, max {max} ({})\n",
            calls.len(),
            histogram
                .iter()
                .map(|(c, n)| format!("{n} × {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for r in rows.iter().filter(|r| r.mismatch.is_some()) {
        out.push_str(&format!(
            "\nq{} mismatch: {}\n",
            r.query,
            r.mismatch.as_deref().unwrap_or("")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_read_from_the_status_file() {
        let status =
            "Name:\tlambdafusion\nVmPeak:\t  900 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(parse_peak_rss(status), Some(2048 * 1024));
        assert_eq!(parse_peak_rss("Name: x\n"), None);
        if cfg!(target_os = "linux") {
            assert!(
                peak_rss().unwrap() > 1 << 20,
                "this process uses more than 1 MiB"
            );
        }
    }
}
