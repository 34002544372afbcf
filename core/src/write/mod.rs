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
    /// `CREATE TABLE ... AS`: the catalog table the commit creates over the files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// The columns the files hold ([`crate::plan::encode_schema`]): a write of no rows
    /// still leaves one file with them.
    #[serde(
        default,
        with = "crate::state::b64",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub schema: Vec<u8>,
}

/// The columns of `input` the files of a write partitioned by `partition_by` hold.
fn file_schema(input: &datafusion::common::DFSchema, partition_by: &[String]) -> Result<Vec<u8>> {
    let fields: Vec<_> = input
        .fields()
        .iter()
        .filter(|f| !partition_by.contains(f.name()))
        .cloned()
        .collect();
    crate::plan::encode_schema(&Arc::new(Schema::new(fields)))
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
            table: None,
            schema: file_schema(copy.input.schema(), &copy.partition_by)?,
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

/// What `CREATE TABLE name [WITH (...)] AS query` says besides its query, in Athena's
/// words, taken off the statement before DataFusion plans it (it refuses table options).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableOptions {
    /// `format`: `PARQUET` (the default), `CSV`, `JSON`.
    pub format: Option<String>,
    /// `external_location`: the table's directory; by default `<first write location>/<name>/`.
    pub location: Option<String>,
    /// `partitioned_by`: `ARRAY['col', ...]`.
    pub partitioned_by: Vec<String>,
    /// `write_compression` (Parquet): `ZSTD`, `SNAPPY`, `GZIP`, ...
    pub compression: Option<String>,
}

/// Takes the table options off a `CREATE TABLE ... AS` statement, returning them; `None`
/// for any other statement (left untouched). Unknown options are refused by name.
pub fn take_table_options(
    statement: &mut datafusion::sql::parser::Statement,
) -> Result<Option<TableOptions>> {
    use datafusion::sql::sqlparser::ast::{CreateTableOptions, SqlOption, Statement};
    let datafusion::sql::parser::Statement::Statement(inner) = statement else {
        return Ok(None);
    };
    let Statement::CreateTable(create) = inner.as_mut() else {
        return Ok(None);
    };
    if create.query.is_none() {
        return Ok(None);
    }
    let mut table = TableOptions::default();
    let options = match std::mem::take(&mut create.table_options) {
        CreateTableOptions::None => Vec::new(),
        CreateTableOptions::With(options) => options,
        other => {
            return Err(Error::InvalidInput(format!(
                "CREATE TABLE ... AS takes its options as WITH (format = 'PARQUET', \
                 external_location = '...', partitioned_by = ARRAY['col']), not {other}"
            )))
        }
    };
    for option in options {
        let SqlOption::KeyValue { key, value } = option else {
            return Err(Error::InvalidInput(format!(
                "CREATE TABLE ... AS: option {option} is not key = value"
            )));
        };
        let name = key.value.to_ascii_lowercase();
        let text = |value: &datafusion::sql::sqlparser::ast::Expr| -> Result<String> {
            option_text(value).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "CREATE TABLE ... AS: {name} = {value} is not a string"
                ))
            })
        };
        match name.as_str() {
            "format" => table.format = Some(text(&value)?),
            "external_location" | "location" => table.location = Some(text(&value)?),
            "write_compression" | "compression" => table.compression = Some(text(&value)?),
            "partitioned_by" => {
                let datafusion::sql::sqlparser::ast::Expr::Array(array) = &value else {
                    return Err(Error::InvalidInput(format!(
                        "CREATE TABLE ... AS: partitioned_by = {value}: write ARRAY['col', ...]"
                    )));
                };
                table.partitioned_by = array.elem.iter().map(&text).collect::<Result<_>>()?;
            }
            other => {
                return Err(Error::InvalidInput(format!(
                    "CREATE TABLE ... AS does not take the option {other} (it takes format, \
                     external_location, partitioned_by, write_compression)"
                )))
            }
        }
    }
    Ok(Some(table))
}

/// The text of an option's value: a quoted string, a number or a bare word.
fn option_text(value: &datafusion::sql::sqlparser::ast::Expr) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{Expr, Value};
    match value {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
            Value::Number(n, _) => Some(n.to_string()),
            _ => None,
        },
        Expr::Identifier(i) => Some(i.value.clone()),
        _ => None,
    }
}

impl WriteTarget {
    /// The target of `CREATE TABLE name AS query` with `options`: the files of a new
    /// table, at its own location (by default `<first write location>/<name>/`).
    pub fn for_table(
        name: &str,
        input_schema: &datafusion::common::DFSchema,
        options: &TableOptions,
        access: &crate::access::AccessPolicy,
        job_id: &str,
    ) -> Result<Self> {
        let invalid = |m: String| Error::InvalidInput(m);
        let format = match options
            .format
            .as_deref()
            .unwrap_or("PARQUET")
            .to_ascii_uppercase()
            .as_str()
        {
            "PARQUET" => WriteFormat::Parquet,
            "CSV" | "TEXTFILE" => WriteFormat::Csv,
            "JSON" => WriteFormat::Json,
            other => {
                return Err(invalid(format!(
                    "CREATE TABLE ... AS writes PARQUET, CSV or JSON tables, not {other} \
                     (Delta and Iceberg tables are not written yet)"
                )))
            }
        };
        let location = match &options.location {
            Some(l) => l.clone(),
            None => {
                let Some(base) = access.write_locations.first() else {
                    return Err(invalid(format!(
                        "CREATE TABLE {name} AS needs a place to write its files, and no \
                         write location is configured: add one with {}, or name one with \
                         WITH (external_location = '...')",
                        access.write_setting
                    )));
                };
                format!("{}/{name}/", base.trim_end_matches('/'))
            }
        };
        let mut settings = BTreeMap::new();
        if let Some(c) = &options.compression {
            if format != WriteFormat::Parquet {
                return Err(invalid(format!(
                    "write_compression applies to PARQUET tables, not {}",
                    format.name()
                )));
            }
            settings.insert("compression".to_string(), c.to_ascii_lowercase());
        }
        for column in &options.partitioned_by {
            if input_schema.field_with_unqualified_name(column).is_err() {
                return Err(invalid(format!(
                    "partitioned_by names {column}, which the query does not yield"
                )));
            }
        }
        if !options.partitioned_by.is_empty()
            && options.partitioned_by.len() >= input_schema.fields().len()
        {
            return Err(invalid(
                "partitioned_by names every column the query yields: the files would hold none"
                    .into(),
            ));
        }
        let target = WriteTarget {
            job_id: job_id.to_string(),
            location: directory_url(&location, format)?,
            format,
            partition_by: options.partitioned_by.clone(),
            options: settings,
            table: Some(name.to_string()),
            schema: file_schema(input_schema, &options.partitioned_by)?,
        };
        target.parquet_properties()?;
        Ok(target)
    }

    /// The statement the table a `CREATE TABLE ... AS` made is recorded with.
    pub fn table_ddl(&self, name: &str) -> String {
        format!(
            "CREATE EXTERNAL TABLE \"{}\" STORED AS {} LOCATION '{}'",
            name.replace('"', "\"\""),
            self.format.name(),
            self.location.replace('\'', "''")
        )
    }
}

/// `location` as the URL of a directory (ending in `/`). A name ending in the format's
/// extension is one file, which one writer would have to write: refused.
fn directory_url(location: &str, format: WriteFormat) -> Result<String> {
    let trimmed = location.trim();
    let last = trimmed.rsplit('/').next().unwrap_or_default();
    if !trimmed.ends_with('/') && last.contains('.') {
        return Err(Error::InvalidInput(format!(
            "a write makes a directory of files (every task of the query writes its own): \
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
                    "{} is, or contains, the location of table {} ({location}): a write goes \
                     to a location of its own, not a table's",
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
            "{} is not empty (it holds {}, among others perhaps): a write goes to an empty \
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
    let mut files = files.to_vec();
    if files.is_empty() {
        // No rows: one file of no rows, so that the columns are there to read.
        files.push(empty_file(store.as_ref(), &root, target).await?);
    }
    let files = files.as_slice();
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
    delete_strays(store.as_ref(), &root, target, files).await?;
    if let Some(name) = &target.table {
        create_table(services, target, name).await?;
    }
    Ok(manifest)
}

/// Writes the one file of a write of no rows: its columns and no rows.
async fn empty_file(
    store: &dyn ObjectStore,
    root: &Path,
    target: &WriteTarget,
) -> Result<WrittenFile> {
    let schema = crate::plan::decode_schema(&target.schema)?;
    let body = match target.format {
        WriteFormat::Parquet => {
            let mut writer = datafusion::parquet::arrow::ArrowWriter::try_new(
                Vec::new(),
                schema,
                Some(target.parquet_properties()?),
            )
            .map_err(|e| Error::Internal(e.to_string()))?;
            writer
                .finish()
                .map_err(|e| Error::Internal(e.to_string()))?;
            std::mem::take(writer.inner_mut())
        }
        WriteFormat::Csv if target.csv_header() => {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            let delimiter = (target.csv_delimiter()? as char).to_string();
            format!("{}\n", names.join(&delimiter)).into_bytes()
        }
        WriteFormat::Csv | WriteFormat::Json => Vec::new(),
    };
    let name = format!("{}-empty-000.{}", target.job_id, target.format.extension());
    let bytes = body.len() as u64;
    store
        .put(&root.clone().join(name.as_str()), PutPayload::from(body))
        .await?;
    Ok(WrittenFile {
        path: format!("{}{name}", target.location),
        rows: 0,
        bytes,
    })
}

/// Creates the catalog table of a `CREATE TABLE ... AS` over its committed files; a
/// commit run again finds it created. A table of that name created meanwhile by another
/// statement is a conflict.
async fn create_table(services: &Services, target: &WriteTarget, name: &str) -> Result<()> {
    use datafusion::logical_expr::{DdlStatement, LogicalPlan};
    let ddl = target.table_ddl(name);
    // Ours when it was created with this statement (its location is this write's alone):
    // a commit run again, or two steps of this job committing at once.
    let ours = |existing: Option<crate::state::TableRecord>| -> Result<()> {
        match existing {
            Some(t) if t.ddl == ddl => Ok(()),
            _ => Err(Error::Conflict(format!(
                "table {name} was created meanwhile by another statement: this one's files at \
                 {} are discarded",
                target.location
            ))),
        }
    };
    if let Some(existing) = services.store.get_table(name).await? {
        return ours(Some(existing));
    }
    let state = services.session_state(1);
    let plan = state.create_logical_plan(&ddl).await?;
    let LogicalPlan::Ddl(DdlStatement::CreateExternalTable(cmd)) = plan else {
        return Err(Error::Internal(format!(
            "{ddl} is not CREATE EXTERNAL TABLE"
        )));
    };
    match crate::catalog::create_table(
        &state,
        services.store.as_ref(),
        &services.config.access,
        &cmd,
        &ddl,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(Error::InvalidInput(why)) if why.contains("already exists") => {
            ours(services.store.get_table(name).await?)
        }
        Err(e) => Err(e),
    }
}

/// Deletes every file of the job under the location that `files` (its manifest's) does
/// not list: those of attempts that lost, crashed or were duplicated.
async fn delete_strays(
    store: &dyn ObjectStore,
    root: &Path,
    target: &WriteTarget,
    files: &[WrittenFile],
) -> Result<usize> {
    let keep: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let strays = job_files(store, root, target)
        .await?
        .into_iter()
        .filter(|(_, url)| !keep.contains(url.as_str()))
        .map(|(path, _)| path)
        .collect();
    Ok(delete(store, strays).await)
}

/// The last clean-up of a write, run by the sweep once no attempt of its job can still
/// be running (the task timeout after the job ended): an attempt that died after the
/// commit (or after the clean-up of a write that failed) left files no one else will
/// delete. Deletes every file of the job the manifest does not list — all of them, and
/// a manifest of the job, when the write was not `committed`. Best effort: returns how
/// many objects it deleted.
pub async fn last_clean_up(services: &Services, target: &WriteTarget, committed: bool) -> usize {
    if !committed {
        return discard(services, target).await;
    }
    let Ok((store, root)) = store_of(services, &target.location) else {
        return 0;
    };
    match read_manifest(store.as_ref(), &root.clone().join(MANIFEST)).await {
        Ok(Some(m)) if m.job_id == target.job_id => {
            delete_strays(store.as_ref(), &root, target, &m.files)
                .await
                .unwrap_or(0)
        }
        _ => 0,
    }
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
