//! TPC-H: data generation with the `tpchgen` crates (Parquet files, several per large
//! table so scans split into tasks) and the 22 benchmark queries.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::error::ArrowError;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::WriterProperties;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

use crate::error::CliError;

/// The eight TPC-H tables.
pub const TABLES: [&str; 8] = [
    "customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier",
];

const QUERIES: [&str; 22] = [
    include_str!("../queries/q1.sql"),
    include_str!("../queries/q2.sql"),
    include_str!("../queries/q3.sql"),
    include_str!("../queries/q4.sql"),
    include_str!("../queries/q5.sql"),
    include_str!("../queries/q6.sql"),
    include_str!("../queries/q7.sql"),
    include_str!("../queries/q8.sql"),
    include_str!("../queries/q9.sql"),
    include_str!("../queries/q10.sql"),
    include_str!("../queries/q11.sql"),
    include_str!("../queries/q12.sql"),
    include_str!("../queries/q13.sql"),
    include_str!("../queries/q14.sql"),
    include_str!("../queries/q15.sql"),
    include_str!("../queries/q16.sql"),
    include_str!("../queries/q17.sql"),
    include_str!("../queries/q18.sql"),
    include_str!("../queries/q19.sql"),
    include_str!("../queries/q20.sql"),
    include_str!("../queries/q21.sql"),
    include_str!("../queries/q22.sql"),
];

/// The SQL of TPC-H query `n` (1..=22).
pub fn query(n: usize) -> &'static str {
    QUERIES[n - 1]
}

/// Whether query `n`'s result order is defined (it ends with an ORDER BY).
pub fn is_ordered(n: usize) -> bool {
    query(n).to_ascii_lowercase().contains("order by")
}

/// `CREATE EXTERNAL TABLE` statements for the tables under `dir` (`dir/<table>/`).
pub fn create_statements(dir: &str) -> Vec<String> {
    let dir = dir.trim_end_matches('/');
    TABLES
        .iter()
        .map(|t| {
            format!("CREATE OR REPLACE EXTERNAL TABLE {t} STORED AS PARQUET LOCATION '{dir}/{t}/'")
        })
        .collect()
}

/// Files per table at scale factor `sf`: large tables get several so that small scale
/// factors still split into several tasks.
pub fn files_for(table: &str, sf: f64) -> usize {
    match table {
        "lineitem" => ((sf * 16.0).ceil() as usize).clamp(4, 256),
        "orders" => ((sf * 4.0).ceil() as usize).clamp(2, 64),
        "partsupp" | "part" | "customer" => ((sf * 2.0).ceil() as usize).clamp(1, 32),
        _ => 1,
    }
}

/// Where generated data for `sf` lives under `base`: `base/sf<sf>`.
pub fn data_dir(base: &Path, sf: f64) -> PathBuf {
    base.join(format!("sf{sf}"))
}

/// True when `dir` holds every table (a previous generation finished).
pub fn is_generated(dir: &Path) -> bool {
    dir.join("_SUCCESS").exists()
}

fn batches(
    table: &str,
    sf: f64,
    part: i32,
    parts: i32,
) -> Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send> {
    const ROWS: usize = 64 * 1024;
    match table {
        "customer" => Box::new(
            CustomerArrow::new(CustomerGenerator::new(sf, part, parts)).with_batch_size(ROWS),
        ),
        "lineitem" => Box::new(
            LineItemArrow::new(LineItemGenerator::new(sf, part, parts)).with_batch_size(ROWS),
        ),
        "nation" => {
            Box::new(NationArrow::new(NationGenerator::new(sf, part, parts)).with_batch_size(ROWS))
        }
        "orders" => {
            Box::new(OrderArrow::new(OrderGenerator::new(sf, part, parts)).with_batch_size(ROWS))
        }
        "part" => {
            Box::new(PartArrow::new(PartGenerator::new(sf, part, parts)).with_batch_size(ROWS))
        }
        "partsupp" => Box::new(
            PartSuppArrow::new(PartSuppGenerator::new(sf, part, parts)).with_batch_size(ROWS),
        ),
        "region" => {
            Box::new(RegionArrow::new(RegionGenerator::new(sf, part, parts)).with_batch_size(ROWS))
        }
        _ => Box::new(
            SupplierArrow::new(SupplierGenerator::new(sf, part, parts)).with_batch_size(ROWS),
        ),
    }
}

/// One file to generate.
#[derive(Debug, Clone)]
pub struct FileJob {
    /// Table.
    pub table: &'static str,
    /// Part number, 1-based.
    pub part: usize,
    /// Parts of the table.
    pub parts: usize,
}

/// The files generating scale factor `sf` writes.
pub fn file_jobs(sf: f64) -> Vec<FileJob> {
    TABLES
        .iter()
        .flat_map(|&table| {
            let parts = files_for(table, sf);
            (1..=parts).map(move |part| FileJob { table, part, parts })
        })
        .collect()
}

/// Writes one file of `job` under `dir/<table>/part-<n>.parquet`; returns rows written.
pub fn write_file(dir: &Path, sf: f64, job: &FileJob) -> Result<u64, CliError> {
    let table_dir = dir.join(job.table);
    std::fs::create_dir_all(&table_dir).map_err(|e| format!("{}: {e}", table_dir.display()))?;
    let path = table_dir.join(format!("part-{:03}.parquet", job.part));
    let tmp = path.with_extension("parquet.tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(1).expect("valid level"),
        ))
        .set_max_row_group_row_count(Some(128 * 1024))
        .build();
    let mut writer: Option<ArrowWriter<std::fs::File>> = None;
    let mut file = Some(file);
    let mut rows = 0u64;
    for batch in batches(job.table, sf, job.part as i32, job.parts as i32) {
        let batch = batch?;
        if writer.is_none() {
            let f = file.take().expect("file opened once");
            writer = Some(ArrowWriter::try_new(
                f,
                batch.schema(),
                Some(props.clone()),
            )?);
        }
        rows += batch.num_rows() as u64;
        writer.as_mut().expect("writer").write(&batch)?;
    }
    match writer {
        Some(w) => {
            w.close()?;
        }
        None => {
            // An empty part (tiny scale factors): an empty file with the table's schema.
            let schema = batches(job.table, 1.0, 1, 1)
                .next()
                .and_then(Result::ok)
                .map(|b| b.schema())
                .ok_or_else(|| format!("no schema for {}", job.table))?;
            let f = file.take().expect("file opened once");
            ArrowWriter::try_new(f, schema, Some(props))?.close()?;
        }
    }
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(rows)
}

/// Generates every table at scale factor `sf` into `dir`, `threads` files at a time,
/// calling `progress(table, rows)` after each file. Idempotent: a finished directory
/// (marked `_SUCCESS`) is left alone.
pub fn generate(
    dir: &Path,
    sf: f64,
    threads: usize,
    progress: &(dyn Fn(&FileJob, u64) + Sync),
) -> Result<u64, CliError> {
    if is_generated(dir) {
        return Ok(0);
    }
    if sf.is_nan() || sf <= 0.0 {
        return Err(format!("scale factor must be positive, got {sf}").into());
    }
    let jobs = file_jobs(sf);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let total = std::sync::atomic::AtomicU64::new(0);
    let error = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { return };
                match write_file(dir, sf, job) {
                    Ok(rows) => {
                        total.fetch_add(rows, std::sync::atomic::Ordering::Relaxed);
                        progress(job, rows);
                    }
                    Err(e) => {
                        *error.lock().expect("error lock") = Some(e);
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = error.into_inner().expect("error lock") {
        return Err(e);
    }
    std::fs::write(dir.join("_SUCCESS"), format!("tpch sf={sf}\n"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(total.into_inner())
}

/// Registers the tables under `dir` in a plain DataFusion context (the baseline).
pub async fn register_baseline(
    ctx: &datafusion::prelude::SessionContext,
    dir: &Path,
) -> datafusion::error::Result<()> {
    for t in TABLES {
        let path = dir.join(t);
        ctx.register_parquet(
            t,
            &format!("{}/", path.display()),
            datafusion::prelude::ParquetReadOptions::default(),
        )
        .await?;
    }
    Ok(())
}

/// The data files of `dir` as `Arc<Path>` list (for tests that upload them).
pub fn data_files(dir: &Path) -> Vec<Arc<Path>> {
    let mut files = Vec::new();
    for t in TABLES {
        if let Ok(entries) = std::fs::read_dir(dir.join(t)) {
            for e in entries.flatten() {
                if e.path().extension().is_some_and(|x| x == "parquet") {
                    files.push(Arc::from(e.path().as_path()));
                }
            }
        }
    }
    files.sort();
    files
}
