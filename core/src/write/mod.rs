//! Writes: `COPY (query) TO 'location'`, run as a query whose final stage writes files
//! ([`sink::TableWriterExec`]), made visible by one commit.
//!
//! - **Where**: only inside the write locations (`--allow-write`,
//!   `LAMBDAFUSION_WRITE_LOCATIONS`), never the engine's own locations, never a catalog
//!   table's location, and only to an empty location ([`check_target`]).
//! - **Distributed**: every task of the final stage writes its own files, in parallel
//!   (each piece of a spread task too); no task gathers the result.
//! - **Exactly once**: a task's files carry a name of its run, so two attempts never share
//!   a file; the task's completion record lists the files of the one attempt that
//!   committed. When every task has committed, the scheduler's [`commit`] writes the
//!   manifest `_SUCCESS` (JSON: every file, its rows and bytes) and deletes every other
//!   file of the job it finds under the location (attempts that lost, crashed or were
//!   duplicated). A job that fails or is cancelled has every file of it deleted
//!   ([`discard`]). A reader that trusts `_SUCCESS` (as Spark's S3A committers' readers
//!   do) sees all of a write or nothing; one that lists the location sees files appear as
//!   tasks write them, until the commit or the clean-up (see docs/using.md).

pub mod sink;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::logical_expr::dml::CopyTo;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::state::TaskOutput;
use crate::{Error, Result, Services};

/// The manifest a commit writes at the root of the location.
pub const MANIFEST: &str = "_SUCCESS";

/// The file formats a write makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum WriteFormat {
    /// Apache Parquet, zstd-compressed by default.
    Parquet,
    /// CSV with a header line.
    Csv,
    /// Newline-delimited JSON.
    Json,
}

impl WriteFormat {
    /// The name in `STORED AS`.
    pub fn name(self) -> &'static str {
        match self {
            WriteFormat::Parquet => "PARQUET",
            WriteFormat::Csv => "CSV",
            WriteFormat::Json => "JSON",
        }
    }

    /// The extension of its files.
    pub fn extension(self) -> &'static str {
        match self {
            WriteFormat::Parquet => "parquet",
            WriteFormat::Csv => "csv",
            WriteFormat::Json => "json",
        }
    }

    /// The options a statement may give it (`OPTIONS (key value, ...)`).
    fn options(self) -> &'static [&'static str] {
        match self {
            WriteFormat::Parquet => &["compression", "max_row_group_size"],
            WriteFormat::Csv => &["has_header", "delimiter"],
            WriteFormat::Json => &[],
        }
    }
}

/// What a write job writes, where: recorded on its job, carried by its writing stage's
/// plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteTarget {
    /// The job writing: every file it writes is named after it.
    pub job_id: String,
    /// The directory written, a URL ending in `/` (`s3://bucket/prefix/`,
    /// `file:///dir/`).
    pub location: String,
    /// The files' format.
    pub format: WriteFormat,
    /// Columns whose values name directories (`column=value/`), left out of the files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_by: Vec<String>,
    /// The format's options, by their names without `format.`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

impl WriteTarget {
    /// The target of `COPY`, checked: a format this engine writes, options it knows, a
    /// directory (not one file), partition columns the query yields (and not all of them).
    pub fn from_copy(copy: &CopyTo, job_id: &str) -> Result<Self> {
        let invalid = |m: String| Error::InvalidInput(m);
        let format = match copy.file_type.get_ext().to_ascii_lowercase().as_str() {
            "parquet" => WriteFormat::Parquet,
            "csv" => WriteFormat::Csv,
            "json" => WriteFormat::Json,
            other => {
                return Err(invalid(format!(
                    "COPY writes PARQUET, CSV or JSON, not {}",
                    other.to_ascii_uppercase()
                )))
            }
        };
        let location = directory_url(&copy.output_url, format)?;
        let mut options = BTreeMap::new();
        for (key, value) in &copy.options {
            let name = key
                .strip_prefix("format.")
                .unwrap_or(key)
                .to_ascii_lowercase();
            if !format.options().contains(&name.as_str()) {
                let known = if format.options().is_empty() {
                    "none".to_string()
                } else {
                    format.options().join(", ")
                };
                return Err(invalid(format!(
                    "COPY ... STORED AS {} does not take the option '{key}' (it takes: {known})",
                    format.name()
                )));
            }
            options.insert(name, value.clone());
        }
        let columns = copy.input.schema();
        for column in &copy.partition_by {
            if columns.field_with_unqualified_name(column).is_err() {
                return Err(invalid(format!(
                    "PARTITIONED BY names {column}, which the query does not yield"
                )));
            }
        }
        if !copy.partition_by.is_empty() && copy.partition_by.len() >= columns.fields().len() {
            return Err(invalid(
                "PARTITIONED BY names every column the query yields: the files would hold none"
                    .into(),
            ));
        }
        let target = WriteTarget {
            job_id: job_id.to_string(),
            location,
            format,
            partition_by: copy.partition_by.clone(),
            options,
        };
        // Malformed option values are refused now, not in every task.
        target.parquet_properties()?;
        target.csv_delimiter()?;
        Ok(target)
    }

    /// The Parquet writer's properties from the options (zstd unless told otherwise).
    pub fn parquet_properties(&self) -> std::result::Result<WriterProperties, Error> {
        let compression = match self.options.get("compression") {
            Some(c) => c
                .parse::<Compression>()
                .map_err(|e| Error::InvalidInput(format!("compression '{c}': {e}")))?,
            None => sink::default_compression(),
        };
        let rows = match self.options.get("max_row_group_size") {
            Some(r) => Some(r.parse::<usize>().ok().filter(|r| *r > 0).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "max_row_group_size '{r}': a positive number of rows"
                ))
            })?),
            None => None,
        };
        Ok(sink::parquet_properties(compression, rows))
    }

    /// Whether CSV files start with a header line (yes, unless `has_header false`).
    pub fn csv_header(&self) -> bool {
        self.options
            .get("has_header")
            .is_none_or(|h| !h.eq_ignore_ascii_case("false"))
    }

    /// The CSV delimiter: one ASCII character, `,` by default.
    pub fn csv_delimiter(&self) -> std::result::Result<u8, Error> {
        match self.options.get("delimiter") {
            None => Ok(b','),
            Some(d) if d.len() == 1 && d.is_ascii() => Ok(d.as_bytes()[0]),
            Some(d) => Err(Error::InvalidInput(format!(
                "delimiter '{d}': one ASCII character"
            ))),
        }
    }
}

/// `location` as the URL of a directory (ending in `/`). A name ending in the format's
/// extension is one file, which one writer would have to write: refused.
fn directory_url(location: &str, format: WriteFormat) -> Result<String> {
    let trimmed = location.trim();
    let last = trimmed.rsplit('/').next().unwrap_or_default();
    if !trimmed.ends_with('/') && last.contains('.') {
        return Err(Error::InvalidInput(format!(
            "COPY writes a directory of files (every task of the query writes its own): \
             {location} names one file; name a directory instead, such as '{}/'",
            trimmed.trim_end_matches(&format!(".{}", format.extension()))
        )));
    }
    let url = ListingTableUrl::parse(format!("{}/", trimmed.trim_end_matches('/')))
        .map_err(|e| Error::InvalidInput(format!("{location}: {e}")))?;
    Ok(url.as_str().to_string())
}

/// Refuses a write to `target` unless it lies inside a write location, outside the
/// engine's own and every catalog table's locations, and holds nothing yet.
pub async fn check_target(services: &Services, target: &WriteTarget) -> Result<()> {
    services
        .config
        .access
        .check_write_location(&target.location)?;
    for table in services.store.list_tables().await? {
        for location in &table.locations {
            let inside = |a: &str, b: &str| {
                a.trim_end_matches('/') == b.trim_end_matches('/')
                    || a.starts_with(&format!("{}/", b.trim_end_matches('/')))
            };
            if inside(&target.location, location) || inside(location, &target.location) {
                return Err(Error::InvalidInput(format!(
                    "{} is, or contains, the location of table {} ({location}): COPY writes \
                     a location of its own, not a table's",
                    target.location, table.name
                )));
            }
        }
    }
    let (store, root) = store_of(services, &target.location)?;
    // Listings leave markers out ([`crate::hidden`]): a manifest is looked for by name.
    let manifest = root.clone().join(MANIFEST);
    let first = match store.head(&manifest).await {
        Ok(meta) => Some(meta),
        Err(object_store::Error::NotFound { .. }) => store
            .list(Some(&root))
            .try_next()
            .await
            .map_err(Error::from)?,
        Err(e) => return Err(e.into()),
    };
    if let Some(first) = first {
        return Err(Error::Conflict(format!(
            "{} is not empty (it holds {}, among others perhaps): COPY writes to an empty \
             location; name a new one, or delete what is there",
            target.location, first.location
        )));
    }
    Ok(())
}

/// The object store of `location` and its path there.
fn store_of(services: &Services, location: &str) -> Result<(Arc<dyn ObjectStore>, Path)> {
    let url = ListingTableUrl::parse(location).map_err(Error::from)?;
    let store = services.runtime.object_store(&url).map_err(Error::from)?;
    Ok((store, url.prefix().clone()))
}

/// The manifest's contents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `lambdafusion`.
    pub committer: String,
    /// The job that wrote the files.
    pub job_id: String,
    /// The files' format.
    pub format: WriteFormat,
    /// Rows in all.
    pub rows: u64,
    /// Bytes in all.
    pub bytes: u64,
    /// Every file, with its rows and bytes.
    pub files: Vec<WrittenFile>,
}

/// One file of a write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WrittenFile {
    /// Its URL.
    pub path: String,
    /// Rows in it.
    pub rows: u64,
    /// Its size.
    pub bytes: u64,
}

/// The files the committed attempts of the writing stage wrote (its tasks' outputs).
pub async fn written_files(
    services: &Services,
    stage: u32,
    outputs: Vec<TaskOutput>,
) -> Result<Vec<WrittenFile>> {
    let batches: Vec<RecordBatch> =
        crate::results::read_outputs(services, stage, outputs, sink::file_list_schema())?
            .try_collect()
            .await?;
    let mut files = Vec::new();
    for batch in batches {
        let paths = batch.column(0).as_string::<i32>();
        let rows = batch.column(1).as_primitive::<UInt64Type>();
        let bytes = batch.column(2).as_primitive::<UInt64Type>();
        for i in 0..batch.num_rows() {
            files.push(WrittenFile {
                path: paths.value(i).to_string(),
                rows: rows.value(i),
                bytes: bytes.value(i),
            });
        }
    }
    Ok(files)
}

/// Makes a finished write visible: writes the manifest listing `files` (unless this job
/// already did: a commit is re-run after a crash), then deletes every other file of the
/// job under the location. A manifest of another job there is a conflict.
pub async fn commit(
    services: &Services,
    target: &WriteTarget,
    files: &[WrittenFile],
) -> Result<Manifest> {
    let (store, root) = store_of(services, &target.location)?;
    let manifest = Manifest {
        committer: "lambdafusion".into(),
        job_id: target.job_id.clone(),
        format: target.format,
        rows: files.iter().map(|f| f.rows).sum(),
        bytes: files.iter().map(|f| f.bytes).sum(),
        files: files.to_vec(),
    };
    let path = root.clone().join(MANIFEST);
    let body = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Internal(e.to_string()))?;
    let put = store
        .put_opts(
            &path,
            PutPayload::from(body),
            PutOptions::from(PutMode::Create),
        )
        .await;
    match put {
        Ok(_) => {}
        Err(object_store::Error::AlreadyExists { .. }) => {
            let there = read_manifest(store.as_ref(), &path).await?;
            if there.as_ref().map(|m| m.job_id.as_str()) != Some(target.job_id.as_str()) {
                return Err(Error::Conflict(format!(
                    "{} was written meanwhile by another statement (its {MANIFEST} names \
                     {}): this one's files are discarded",
                    target.location,
                    there.map_or("another writer".into(), |m| format!("query {}", m.job_id))
                )));
            }
        }
        Err(e) => return Err(e.into()),
    }
    let keep: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let strays = job_files(store.as_ref(), &root, target)
        .await?
        .into_iter()
        .filter(|(_, url)| !keep.contains(url.as_str()))
        .map(|(path, _)| path)
        .collect();
    delete(store.as_ref(), strays).await;
    Ok(manifest)
}

/// Deletes every file of a write that will not be committed (its job failed or was
/// cancelled), and its manifest if the job wrote one. Best effort: returns how many
/// objects it deleted.
pub async fn discard(services: &Services, target: &WriteTarget) -> usize {
    let Ok((store, root)) = store_of(services, &target.location) else {
        return 0;
    };
    let mut paths = Vec::new();
    let manifest = root.clone().join(MANIFEST);
    if let Ok(Some(m)) = read_manifest(store.as_ref(), &manifest).await {
        if m.job_id == target.job_id {
            paths.push(manifest);
        }
    }
    if let Ok(files) = job_files(store.as_ref(), &root, target).await {
        paths.extend(files.into_iter().map(|(path, _)| path));
    }
    delete(store.as_ref(), paths).await
}

async fn read_manifest(store: &dyn ObjectStore, path: &Path) -> Result<Option<Manifest>> {
    match store.get(path).await {
        Ok(got) => {
            let bytes = got.bytes().await?;
            Ok(serde_json::from_slice(&bytes).ok())
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Every file under the location named as the job's ([`sink`]), with its URL.
async fn job_files(
    store: &dyn ObjectStore,
    root: &Path,
    target: &WriteTarget,
) -> Result<Vec<(Path, String)>> {
    let prefix = format!("{}-", target.job_id);
    let objects: Vec<_> = store.list(Some(root)).try_collect().await?;
    Ok(objects
        .into_iter()
        .filter(|o| {
            o.location
                .filename()
                .is_some_and(|f| f.starts_with(&prefix))
        })
        .map(|o| {
            let relative = o
                .location
                .as_ref()
                .strip_prefix(root.as_ref())
                .unwrap_or(o.location.as_ref())
                .trim_start_matches('/')
                .to_string();
            (o.location, format!("{}{relative}", target.location))
        })
        .collect())
}

async fn delete(store: &dyn ObjectStore, paths: Vec<Path>) -> usize {
    let mut deleted = 0;
    for path in paths {
        if store.delete(&path).await.is_ok() {
            deleted += 1;
        }
    }
    deleted
}

/// The schema of a write's result: one row saying what it wrote.
pub fn summary_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("count", DataType::UInt64, false),
        Field::new("files", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, false),
        Field::new("location", DataType::Utf8, false),
    ]))
}

/// The one row of a write's result.
pub fn summary(target: &WriteTarget, files: &[WrittenFile]) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        summary_schema(),
        vec![
            Arc::new(UInt64Array::from(vec![files
                .iter()
                .map(|f| f.rows)
                .sum::<u64>()])),
            Arc::new(UInt64Array::from(vec![files.len() as u64])),
            Arc::new(UInt64Array::from(vec![files
                .iter()
                .map(|f| f.bytes)
                .sum::<u64>()])),
            Arc::new(StringArray::from(vec![target.location.clone()])),
        ],
    )?)
}
