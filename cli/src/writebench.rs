//! `lambdafusion bench write`: how fast a query's result is written — TPC-H `lineitem`
//! copied to Parquet whole and partitioned by its ship month, and made a Delta and an
//! Iceberg table both ways (`CREATE TABLE ... WITH (format = 'DELTA' | 'ICEBERG') AS`),
//! by lambdafusion embedded (every task of the last stage writes its own files; one
//! manifest, one Delta commit or one Iceberg snapshot makes them visible) and by
//! single-process DataFusion's `COPY` to Parquet, in the same run, both warmed, their
//! order alternating, every run into a fresh directory.

use std::time::{Duration, Instant};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::UInt64Type;

use crate::bench::{median, BenchOptions};
use crate::display::text_table;
use crate::error::CliError;
use crate::tpch;

/// The writes measured: a name, the query written, its partition column if any, and
/// the table format lambdafusion makes of it, if any (a `COPY` to Parquet otherwise;
/// DataFusion's `COPY` writes Parquet).
const CASES: [(&str, &str, Option<&str>, Option<&str>); 6] = [
    ("lineitem", "SELECT * FROM lineitem", None, None),
    ("lineitem by ship month", BY_MONTH, Some("ship_month"), None),
    (
        "Delta lineitem",
        "SELECT * FROM lineitem",
        None,
        Some("DELTA"),
    ),
    (
        "Delta lineitem by ship month",
        BY_MONTH,
        Some("ship_month"),
        Some("DELTA"),
    ),
    (
        "Iceberg lineitem",
        "SELECT * FROM lineitem",
        None,
        Some("ICEBERG"),
    ),
    (
        "Iceberg lineitem by ship month",
        BY_MONTH,
        Some("ship_month"),
        Some("ICEBERG"),
    ),
];

const BY_MONTH: &str = "SELECT *, to_char(l_shipdate, '%Y-%m') AS ship_month FROM lineitem";

/// One case's figures.
struct WriteRow {
    case: &'static str,
    ours: Vec<Duration>,
    theirs: Vec<Duration>,
    rows: u64,
    files: (u64, usize),
    bytes: (u64, u64),
}

/// Runs every case `options.iterations` times per engine after one warm-up each.
pub async fn run(options: &BenchOptions) -> Result<String, CliError> {
    let out = tempfile::tempdir()?;
    let out_dir = std::fs::canonicalize(out.path())?;
    let mut options = options.clone();
    options.config = options
        .config
        .clone()
        .with_write_location(out_dir.display().to_string());
    let (dir, _scratch, engine) = crate::bench::prepare(&options).await?;
    let baseline = datafusion::prelude::SessionContext::new();
    tpch::register_baseline(&baseline, &dir).await?;
    let mut n = 0;
    let mut next = |who: &str| {
        n += 1;
        out_dir.join(format!("{who}-{n}"))
    };
    let mut rows = Vec::new();
    for (case, query, partition, table_format) in CASES {
        let partitioned = partition.map_or(String::new(), |c| format!(" PARTITIONED BY ({c})"));
        let copy = |to: &std::path::Path| {
            format!(
                "COPY ({query}) TO '{}/' STORED AS PARQUET{partitioned}",
                to.display()
            )
        };
        // lambdafusion's statement; the catalog table it creates, to drop after.
        let ours = |to: &std::path::Path| -> (String, Option<String>) {
            let Some(format) = table_format else {
                return (copy(to), None);
            };
            let name =
                format!("bench_{}", to.file_name().unwrap().to_string_lossy()).replace('-', "_");
            let by = partition.map_or(String::new(), |c| {
                format!(", partitioned_by = ARRAY['{c}']")
            });
            (
                format!(
                    "CREATE TABLE {name} WITH (format = '{format}', external_location = \
                     '{}/'{by}) AS {query}",
                    to.display()
                ),
                Some(name),
            )
        };
        let mut row = WriteRow {
            case,
            ours: Vec::new(),
            theirs: Vec::new(),
            rows: 0,
            files: (0, 0),
            bytes: (0, 0),
        };
        // One warm-up each, then the measured runs, whose order alternates.
        for i in 0..=options.iterations.max(1) {
            for ours_first in [i % 2 == 0, i % 2 == 1] {
                if ours_first {
                    let to = next("lambdafusion");
                    let started = Instant::now();
                    let (statement, table) = ours(&to);
                    let out = engine.sql(&statement).await?;
                    let took = started.elapsed();
                    if let Some(table) = table {
                        engine.sql(&format!("DROP TABLE {table}")).await?;
                    }
                    let summary = out
                        .batches
                        .iter()
                        .find(|b| b.num_rows() == 1)
                        .ok_or("a write answers one row")?;
                    let value = |c: usize| summary.column(c).as_primitive::<UInt64Type>().value(0);
                    row.rows = value(0);
                    row.files.0 = value(1);
                    row.bytes.0 = value(2);
                    if i > 0 {
                        row.ours.push(took);
                    }
                    std::fs::remove_dir_all(&to)?;
                } else {
                    let to = next("datafusion");
                    let started = Instant::now();
                    let written = baseline
                        .sql(&copy(&to))
                        .await
                        .map_err(|e| format!("DataFusion: {e}"))?
                        .collect()
                        .await
                        .map_err(|e| format!("DataFusion: {e}"))?;
                    let took = started.elapsed();
                    let count: u64 = written
                        .iter()
                        .filter(|b| b.num_rows() > 0)
                        .map(|b| b.column(0).as_primitive::<UInt64Type>().value(0))
                        .sum();
                    if row.rows != 0 && count != row.rows {
                        return Err(format!(
                            "{case}: DataFusion wrote {count} rows, lambdafusion {}",
                            row.rows
                        )
                        .into());
                    }
                    let (files, bytes) = files_under(&to);
                    row.files.1 = files;
                    row.bytes.1 = bytes;
                    if i > 0 {
                        row.theirs.push(took);
                    }
                    std::fs::remove_dir_all(&to)?;
                }
            }
        }
        rows.push(row);
    }
    Ok(report(&options, &dir, &rows))
}

/// Data files under `dir` and their bytes.
fn files_under(dir: &std::path::Path) -> (usize, u64) {
    let mut stack = vec![dir.to_path_buf()];
    let (mut files, mut bytes) = (0, 0);
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                files += 1;
                bytes += entry.metadata().map_or(0, |m| m.len());
            }
        }
    }
    (files, bytes)
}

fn report(options: &BenchOptions, dir: &std::path::Path, rows: &[WriteRow]) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let header = [
        "write",
        "rows",
        "lambdafusion ms (median)",
        "DataFusion ms (median)",
        "ratio",
        "files ours / theirs",
        "MiB ours / theirs",
    ];
    let mut table = Vec::new();
    for r in rows {
        let (ours, theirs) = (ms(median(&r.ours)), ms(median(&r.theirs)));
        table.push(vec![
            r.case.to_string(),
            r.rows.to_string(),
            format!("{ours:.0}"),
            format!("{theirs:.0}"),
            format!("{:.2}x", ours / theirs.max(1e-9)),
            format!("{} / {}", r.files.0, r.files.1),
            format!(
                "{:.1} / {:.1}",
                r.bytes.0 as f64 / 1048576.0,
                r.bytes.1 as f64 / 1048576.0
            ),
        ]);
    }
    format!(
        "Writing TPC-H SF {} lineitem as Parquet ({}): lambdafusion embedded ({} slots, \
         bytes_per_task {}{}; COPY to Parquet, or CREATE TABLE AS a Delta or Iceberg table) vs \
         single-process DataFusion COPY to Parquet; {} measured runs each after one warm-up, \
         order alternating, each into a fresh directory.\n{}",
        options.sf,
        dir.display(),
        options.slots,
        options.config.bytes_per_task,
        if options.settings.is_empty() {
            String::new()
        } else {
            format!(", {}", options.settings.join(", "))
        },
        options.iterations.max(1),
        text_table(&header, &table)
    )
}
