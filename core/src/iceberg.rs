//! Apache Iceberg tables (`CREATE EXTERNAL TABLE ... STORED AS ICEBERG LOCATION
//! '<metadata.json or table directory>'`, and Glue tables with `table_type = ICEBERG`).
//!
//! A narrow reader of formats v1 and v2: the scheduler reads the table metadata (JSON),
//! the chosen snapshot's manifest list and its manifests (Avro, read with `arrow-avro`, the
//! Arrow project's own reader, in our Arrow version) **once per query**, and plans an
//! ordinary Parquet scan of exactly that snapshot's data files, split into tasks by bytes.
//! Every task reads those files, whatever is committed meanwhile. Time travel:
//! `VERSION AS OF <snapshot id>`, `TIMESTAMP AS OF '...'` (the newest snapshot at or before
//! it).
//!
//! Delete files — position deletes (merge-on-read, as Athena, Spark and Trino write them)
//! and equality deletes (as Flink writes them) — are matched to data files at planning by
//! the spec's rules (sequence numbers, partitions, the delete file's
//! `referenced_data_file` or `file_path` bounds) and applied by the task that reads the
//! data file ([`FormatScanExec`]).
//!
//! The query's filters skip data files by the column bounds and null counts of their
//! manifest entries before any task starts. Columns are read by name while no column was
//! renamed, or dropped and added again under its old name; once one was, by the field ids
//! of each file ([`crate::format_scan::FieldIdAdapterFactory`]). A table with a struct
//! field renamed or non-Parquet files is refused — a 400 naming the
//! table and the reason, never wrong rows. Every file the metadata names must lie inside
//! the table's directory, the location the access policy allowed.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, AsArray, Int64Array, RecordBatch, StringArray, StructArray, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{CreateExternalTable, Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use serde::Deserialize;
use url::Url;

use crate::delta::Version;
use crate::format_scan::{DeleteFile, Deleted, EqualityDeletes, FormatScanExec, IcebergPositions};

/// The format name (`STORED AS ICEBERG`) Iceberg tables are stored under in the catalog.
pub const FORMAT: &str = "ICEBERG";

/// Largest metadata, manifest list or manifest file read (a table past it is refused).
const MAX_METADATA_BYTES: usize = 256 * 1024 * 1024;

/// Largest delete file a task reads whole (a table with a larger one is refused).
const MAX_DELETE_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Creates the provider of `CREATE EXTERNAL TABLE ... STORED AS ICEBERG`: the metadata
/// decides the columns, so the statement declares none.
#[derive(Debug, Default)]
pub struct IcebergTableFactory;

#[async_trait]
impl TableProviderFactory for IcebergTableFactory {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> DfResult<Arc<dyn TableProvider>> {
        if !cmd.schema.fields().is_empty() || !cmd.table_partition_cols.is_empty() {
            return Err(DataFusionError::Plan(format!(
                "table {}: an Iceberg table's columns and partitions come from its metadata; \
                 declare neither (CREATE EXTERNAL TABLE {} STORED AS ICEBERG LOCATION '...')",
                cmd.name, cmd.name
            )));
        }
        if let Some(key) = cmd.options.keys().find(|k| !k.starts_with("format.")) {
            return Err(DataFusionError::Plan(format!(
                "table {}: option {key} is not supported for Iceberg tables",
                cmd.name
            )));
        }
        let [location] = cmd.locations.as_slice() else {
            return Err(DataFusionError::Plan(format!(
                "table {}: an Iceberg table has one location (its metadata file or its \
                 directory), got {}",
                cmd.name,
                cmd.locations.len()
            )));
        };
        let name = cmd.name.to_string();
        Ok(open(state.runtime_env(), location, Version::Latest, Some(&name)).await?)
    }
}

/// Registers `STORED AS ICEBERG` with `state`.
pub fn register(state: &mut datafusion::execution::SessionState) {
    state
        .table_factories_mut()
        .insert(FORMAT.to_string(), Arc::new(IcebergTableFactory));
}

// ---- table metadata (JSON) -------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Metadata {
    format_version: u8,
    #[serde(default)]
    schemas: Vec<IcebergSchema>,
    current_schema_id: Option<i32>,
    /// Format v1's only schema.
    schema: Option<IcebergSchema>,
    #[serde(default)]
    snapshots: Vec<SnapshotEntry>,
    current_snapshot_id: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct SnapshotEntry {
    snapshot_id: i64,
    timestamp_ms: i64,
    manifest_list: Option<String>,
    /// Format v1 may list the manifests here instead of in a manifest list.
    #[serde(default)]
    manifests: Vec<String>,
    schema_id: Option<i32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct IcebergSchema {
    #[serde(default)]
    schema_id: i32,
    fields: Vec<IcebergField>,
}

#[derive(Debug, Clone, Deserialize)]
struct IcebergField {
    id: i32,
    name: String,
    #[serde(default)]
    required: bool,
    #[serde(rename = "type")]
    kind: serde_json::Value,
}

/// The Arrow type of an Iceberg type (a primitive's name, or a struct, list or map).
fn arrow_type(kind: &serde_json::Value, depth: usize) -> Result<DataType, String> {
    if depth > 32 {
        return Err("types nested deeper than 32 levels".into());
    }
    if let Some(name) = kind.as_str() {
        let name = name.trim();
        if let Some(args) = name
            .strip_prefix("decimal(")
            .and_then(|r| r.strip_suffix(')'))
        {
            let (p, s) = args
                .split_once(',')
                .ok_or("decimal(p, s) without a scale")?;
            let p: u8 = p
                .trim()
                .parse()
                .map_err(|_| format!("{name}: bad precision"))?;
            let s: i8 = s.trim().parse().map_err(|_| format!("{name}: bad scale"))?;
            if !(1..=38).contains(&p) || s < 0 || s as u8 > p {
                return Err(format!("{name} is outside decimal(1..38, 0..p)"));
            }
            return Ok(DataType::Decimal128(p, s));
        }
        if let Some(n) = name
            .strip_prefix("fixed[")
            .and_then(|r| r.strip_suffix(']'))
        {
            let n: i32 = n.parse().map_err(|_| format!("{name}: bad length"))?;
            return Ok(DataType::FixedSizeBinary(n));
        }
        return Ok(match name {
            "boolean" => DataType::Boolean,
            "int" => DataType::Int32,
            "long" => DataType::Int64,
            "float" => DataType::Float32,
            "double" => DataType::Float64,
            "date" => DataType::Date32,
            "time" => DataType::Time64(TimeUnit::Microsecond),
            "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, None),
            "timestamptz" => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            "string" => DataType::Utf8,
            "uuid" => DataType::FixedSizeBinary(16),
            "binary" => DataType::Binary,
            other => {
                return Err(format!(
                    "{other} is not a type lambdafusion reads (format v3 types such as \
                     timestamp_ns, variant, geometry are not supported)"
                ))
            }
        });
    }
    let nested = |key: &str| kind.get(key).ok_or_else(|| format!("{kind} has no {key}"));
    let required = |key: &str| kind.get(key).and_then(|v| v.as_bool()).unwrap_or(false);
    match kind.get("type").and_then(|t| t.as_str()) {
        Some("struct") => {
            let fields: Vec<IcebergField> = serde_json::from_value(nested("fields")?.clone())
                .map_err(|e| format!("a struct's fields: {e}"))?;
            Ok(DataType::Struct(Fields::from(
                fields
                    .iter()
                    .map(|f| {
                        Ok(Field::new(
                            &f.name,
                            arrow_type(&f.kind, depth + 1)?,
                            !f.required,
                        ))
                    })
                    .collect::<Result<Vec<_>, String>>()?,
            )))
        }
        Some("list") => Ok(DataType::new_list(
            arrow_type(nested("element")?, depth + 1)?,
            !required("element-required"),
        )),
        Some("map") => Ok(DataType::Map(
            Arc::new(Field::new(
                "key_value",
                DataType::Struct(Fields::from(vec![
                    Field::new("key", arrow_type(nested("key")?, depth + 1)?, false),
                    Field::new(
                        "value",
                        arrow_type(nested("value")?, depth + 1)?,
                        !required("value-required"),
                    ),
                ])),
                false,
            )),
            false,
        )),
        _ => Err(format!("{kind} is not an Iceberg type")),
    }
}

/// Every field of `fields` by id: its parent struct's id (`None` at the top) and its name.
fn field_names(
    fields: &[IcebergField],
    parent: Option<i32>,
    out: &mut BTreeMap<i32, (Option<i32>, String)>,
) {
    for f in fields {
        if f.kind.get("type").and_then(|t| t.as_str()) == Some("struct") {
            if let Some(inner) = f
                .kind
                .get("fields")
                .and_then(|v| serde_json::from_value::<Vec<IcebergField>>(v.clone()).ok())
            {
                field_names(&inner, Some(f.id), out);
            }
        }
        out.insert(f.id, (parent, f.name.clone()));
    }
}

/// How a table whose schemas were `schemas` must be read: `Ok(false)` by column name,
/// `Ok(true)` by field id — a column was renamed, or a name reused by another column
/// (dropped, then added again), so a name can find the wrong column or none in older files
/// — and `Err` not at all: a field inside a struct was renamed or its name reused.
fn columns_by_field_id(schemas: &[IcebergSchema]) -> Result<bool, String> {
    let mut names_of: BTreeMap<i32, (Option<i32>, String)> = BTreeMap::new();
    let mut ids_of: HashMap<(Option<i32>, String), i32> = HashMap::new();
    let mut by_id = false;
    for schema in schemas {
        let mut names = BTreeMap::new();
        field_names(&schema.fields, None, &mut names);
        for (id, key) in names {
            let renamed = names_of.get(&id).filter(|before| **before != key);
            let reused = ids_of.get(&key).filter(|other| **other != id);
            if renamed.is_some() || reused.is_some() {
                if let Some(parent) = key.0 {
                    return Err(match renamed {
                        Some((_, before)) => format!(
                            "field {before} of the struct column with id {parent} was \
                             renamed to {}; renamed fields inside structs are not read yet",
                            key.1
                        ),
                        None => format!(
                            "the name {} inside the struct column with id {parent} belonged \
                             to another field before; such tables are not read yet",
                            key.1
                        ),
                    });
                }
                by_id = true;
            }
            names_of.insert(id, key.clone());
            ids_of.insert(key, id);
        }
    }
    Ok(by_id)
}

// ---- locations ------------------------------------------------------------------------

/// `location` (a URL or a path) as a URL.
fn as_url(location: &str) -> DfResult<Url> {
    if location.contains("://") {
        return Url::parse(location)
            .map_err(|e| DataFusionError::Plan(format!("{location} is not a valid URL: {e}")));
    }
    let path = std::path::absolute(location)
        .map_err(|e| DataFusionError::Plan(format!("{location} is not a valid path: {e}")))?;
    Url::from_file_path(&path)
        .map_err(|()| DataFusionError::Plan(format!("{location} is not a valid path")))
}

/// The object path of `url`, checked to lie inside the table directory `root`.
fn path_inside(root: &Url, url: &Url, what: &str) -> DfResult<Path> {
    crate::delta::inside(root, url)
        .map_err(|why| DataFusionError::Plan(format!("{what} is {url}, {why}")))?;
    Path::from_url_path(url.path()).map_err(|e| DataFusionError::External(Box::new(e)))
}

async fn read(store: &dyn ObjectStore, path: &Path, what: &str) -> DfResult<bytes::Bytes> {
    let meta = store.head(path).await?;
    if meta.size as usize > MAX_METADATA_BYTES {
        return Err(DataFusionError::Plan(format!(
            "{what} {path} is {} bytes, more than the {MAX_METADATA_BYTES} read",
            meta.size
        )));
    }
    Ok(store.get(path).await?.bytes().await?)
}

/// The metadata file of the table at `location`: the file itself (`….metadata.json`), or
/// in a table directory the one `metadata/version-hint.text` names, else the newest
/// `metadata/*.metadata.json` by its version number.
async fn metadata_file(store: &dyn ObjectStore, location: &Url) -> DfResult<(Url, Url)> {
    if location.path().ends_with(".metadata.json") {
        let root = location
            .join("..")
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        return Ok((root, location.clone()));
    }
    let mut root = location.clone();
    if !root.path().ends_with('/') {
        root.set_path(&format!("{}/", root.path()));
    }
    let dir = root
        .join("metadata/")
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let dir_path =
        Path::from_url_path(dir.path()).map_err(|e| DataFusionError::External(Box::new(e)))?;
    if let Ok(hint) = store.get(&dir_path.clone().join("version-hint.text")).await {
        let text = String::from_utf8_lossy(&hint.bytes().await?)
            .trim()
            .to_string();
        if let Ok(v) = text.parse::<u64>() {
            let file = dir
                .join(&format!("v{v}.metadata.json"))
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            return Ok((root, file));
        }
    }
    let listed: Vec<ObjectMeta> = store.list(Some(&dir_path)).try_collect().await?;
    let version = |name: &str| -> Option<u64> {
        let stem = name.strip_suffix(".metadata.json")?;
        let digits = stem.strip_prefix('v').unwrap_or(stem);
        digits.split('-').next()?.parse().ok()
    };
    let newest = listed
        .iter()
        .filter_map(|m| {
            let name = m.location.filename()?;
            Some((version(name)?, name.to_string()))
        })
        .max()
        .ok_or_else(|| {
            DataFusionError::Plan(format!(
                "no Iceberg table at {location}: no metadata/*.metadata.json"
            ))
        })?;
    let file = dir
        .join(&newest.1)
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    Ok((root, file))
}

// ---- manifests (Avro) -----------------------------------------------------------------

/// The record batches of an Avro object container file, read with the schema it was
/// written with — less the records of no fields (an unpartitioned table's `partition`),
/// which Arrow cannot hold.
fn avro_batches(bytes: bytes::Bytes, what: &str) -> DfResult<Vec<RecordBatch>> {
    use arrow_avro::reader::{read_header_info, ReaderBuilder};
    let unreadable = |e: &dyn fmt::Display| {
        DataFusionError::Plan(format!("{what} is not a readable Avro file: {e}"))
    };
    let info = read_header_info(std::io::Cursor::new(bytes.clone())).map_err(|e| unreadable(&e))?;
    let writer = info.writer_schema().map_err(|e| unreadable(&e))?;
    let mut builder = ReaderBuilder::new();
    let mut schema: serde_json::Value =
        serde_json::from_str(&writer.json_string).map_err(|e| unreadable(&e))?;
    if drop_empty_records(&mut schema) {
        builder =
            builder.with_reader_schema(arrow_avro::schema::AvroSchema::new(schema.to_string()));
    }
    let reader = builder
        .build(std::io::Cursor::new(bytes))
        .map_err(|e| unreadable(&e))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| DataFusionError::Plan(format!("{what}: {e}")))
}

/// Removes every record field whose type is a record of no fields; true if any was.
fn drop_empty_records(schema: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    let empty_record = |t: &Value| {
        t.get("type").and_then(Value::as_str) == Some("record")
            && t.get("fields")
                .and_then(Value::as_array)
                .is_some_and(|f| f.is_empty())
    };
    match schema {
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, t| drop_empty_records(t) | changed),
        Value::Object(object) => {
            let mut changed = false;
            if let Some(Value::Array(fields)) = object.get_mut("fields") {
                let before = fields.len();
                fields.retain(|f| !f.get("type").is_some_and(empty_record));
                changed = fields.len() != before;
                for field in fields.iter_mut() {
                    if let Some(t) = field.get_mut("type") {
                        changed |= drop_empty_records(t);
                    }
                }
            }
            for key in ["items", "values"] {
                if let Some(t) = object.get_mut(key) {
                    changed |= drop_empty_records(t);
                }
            }
            changed
        }
        _ => false,
    }
}

fn strings(array: &dyn Array) -> DfResult<StringArray> {
    let cast = datafusion::arrow::compute::cast(array, &DataType::Utf8)?;
    Ok(cast.as_string::<i32>().clone())
}

fn ints(array: Option<&Arc<dyn Array>>) -> DfResult<Option<Int64Array>> {
    array
        .map(|a| {
            let cast = datafusion::arrow::compute::cast(a, &DataType::Int64)?;
            Ok(cast
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .clone())
        })
        .transpose()
}

/// One data file of a snapshot.
#[derive(Debug, Clone)]
struct DataFile {
    path: Path,
    /// The file as the metadata names it (what position delete files name).
    name: String,
    size: u64,
    records: Option<u64>,
    /// Its data sequence number (0 in format v1).
    sequence: i64,
    /// The position delete files that apply to it.
    deletes: Vec<DeleteFile>,
    /// The equality delete files that apply to it.
    equality: Vec<EqualityDelete>,
    /// Its partition: the spec it was written with and its values, rendered (`None` when
    /// the spec has no fields).
    partition: (i64, Option<String>),
    /// Its column metrics as the manifest keeps them, for pruning.
    metrics: Metrics,
}

/// An equality delete file of a snapshot, with what decides the data files it applies to.
#[derive(Debug, Clone)]
struct EqualityDelete {
    file: DeleteFile,
    sequence: i64,
    /// The key: `equality_ids`.
    field_ids: Vec<i32>,
    /// Its partition, as [`DataFile::partition`].
    partition: (i64, Option<String>),
}

impl EqualityDelete {
    /// Whether it may delete rows of `data` (the spec's rule: the data file's sequence
    /// number is below the delete file's, and an equality delete file of a partitioned
    /// spec applies to its own partition only).
    fn applies_to(&self, data: &DataFile) -> bool {
        data.sequence < self.sequence
            && (self.partition.1.is_none() || self.partition == data.partition)
    }
}

/// A data file's column metrics from its manifest entry, by field id: the lower and upper
/// bounds (Iceberg's single-value serialization) and the null counts.
#[derive(Debug, Clone, Default)]
struct Metrics {
    lower: HashMap<i32, Vec<u8>>,
    upper: HashMap<i32, Vec<u8>>,
    nulls: HashMap<i32, u64>,
}

/// A position delete file of a snapshot, with what decides the data files it applies to.
#[derive(Debug, Clone)]
struct PositionDeletes {
    file: DeleteFile,
    sequence: i64,
    /// `referenced_data_file`: the one data file it deletes from, when the writer says.
    referenced: Option<String>,
    /// The lower and upper bounds of its `file_path` column, when the writer kept them.
    bounds: Option<(Vec<u8>, Vec<u8>)>,
}

impl PositionDeletes {
    /// Whether it may delete rows of `data` (the spec's rule: the data file's sequence
    /// number is at most the delete file's, and the delete file may name the data file).
    fn applies_to(&self, data: &DataFile) -> bool {
        data.sequence <= self.sequence
            && self.referenced.as_ref().is_none_or(|r| *r == data.name)
            && self.bounds.as_ref().is_none_or(|(low, high)| {
                low.as_slice() <= data.name.as_bytes() && data.name.as_bytes() <= high.as_slice()
            })
    }
}

/// The reserved field id of a position delete file's `file_path` column.
const FILE_PATH_FIELD_ID: i32 = 2147483546;

/// One live entry of a manifest.
enum Entry {
    Data(DataFile),
    PositionDeletes(PositionDeletes),
    EqualityDeletes(EqualityDelete),
}

/// A manifest as its snapshot's manifest list lists it.
struct Manifest {
    path: String,
    /// 0: data files, 1: delete files.
    content: i64,
    /// The sequence number its added entries inherit.
    sequence: i64,
    /// The partition spec its files were written with.
    spec_id: i64,
}

/// The data files of `snapshot`, each with the position delete files that apply to it:
/// its manifest list's manifests, their live entries.
async fn data_files(
    store: &dyn ObjectStore,
    root: &Url,
    snapshot: &SnapshotEntry,
    refuse: &(dyn Fn(String) -> DataFusionError + Sync),
) -> DfResult<Vec<DataFile>> {
    let resolve = |p: &str, what: &str| -> DfResult<Path> {
        let url = Url::parse(p).or_else(|_| as_url(p))?;
        path_inside(root, &url, what)
    };
    let mut manifests = Vec::new();
    if let Some(list) = &snapshot.manifest_list {
        let path = resolve(list, "the manifest list")?;
        for batch in avro_batches(read(store, &path, "manifest list").await?, list)? {
            let paths = strings(batch.column_by_name("manifest_path").ok_or_else(|| {
                refuse(format!("its manifest list {list} has no manifest_path"))
            })?)?;
            let content = ints(batch.column_by_name("content"))?;
            let sequence = ints(batch.column_by_name("sequence_number"))?;
            let spec = ints(batch.column_by_name("partition_spec_id"))?;
            let value = |a: &Option<Int64Array>, i: usize| {
                a.as_ref()
                    .filter(|a| a.is_valid(i))
                    .map_or(0, |a| a.value(i))
            };
            for i in 0..batch.num_rows() {
                manifests.push(Manifest {
                    path: paths.value(i).to_string(),
                    content: value(&content, i),
                    sequence: value(&sequence, i),
                    spec_id: value(&spec, i),
                });
            }
        }
    } else {
        manifests.extend(snapshot.manifests.iter().map(|m| Manifest {
            path: m.clone(),
            content: 0,
            sequence: 0,
            spec_id: 0,
        }));
    }
    let per_manifest: Vec<Vec<Entry>> =
        futures::stream::iter(manifests.into_iter().map(|m| async move {
            let path = resolve(&m.path, "a manifest")?;
            let mut out = Vec::new();
            for batch in avro_batches(read(store, &path, "manifest").await?, &m.path)? {
                out.extend(manifest_entries(&batch, &m, &resolve, refuse)?);
            }
            Ok::<_, DataFusionError>(out)
        }))
        .buffered(16)
        .try_collect()
        .await?;
    let mut files = Vec::new();
    let mut deletes = Vec::new();
    let mut equality = Vec::new();
    for entry in per_manifest.into_iter().flatten() {
        match entry {
            Entry::Data(f) => files.push(f),
            Entry::PositionDeletes(d) => deletes.push(d),
            Entry::EqualityDeletes(d) => equality.push(d),
        }
    }
    if !deletes.is_empty() || !equality.is_empty() {
        for file in &mut files {
            file.deletes = deletes
                .iter()
                .filter(|d| d.applies_to(file))
                .map(|d| d.file.clone())
                .collect();
            file.equality = equality
                .iter()
                .filter(|d| d.applies_to(file))
                .cloned()
                .collect();
        }
    }
    Ok(files)
}

/// The live entries of one batch of a manifest's entries.
fn manifest_entries(
    batch: &RecordBatch,
    manifest: &Manifest,
    resolve: &(dyn Fn(&str, &str) -> DfResult<Path> + Sync),
    refuse: &(dyn Fn(String) -> DataFusionError + Sync),
) -> DfResult<Vec<Entry>> {
    let name = &manifest.path;
    let missing = |what: &str| refuse(format!("its manifest {name} has no {what}"));
    let status = ints(batch.column_by_name("status"))?.ok_or_else(|| missing("status"))?;
    let sequence = ints(batch.column_by_name("sequence_number"))?;
    let data_file = batch
        .column_by_name("data_file")
        .ok_or_else(|| missing("data_file"))?
        .as_struct();
    let path = strings(
        data_file
            .column_by_name("file_path")
            .ok_or_else(|| missing("file_path"))?,
    )?;
    let format = strings(
        data_file
            .column_by_name("file_format")
            .ok_or_else(|| missing("file_format"))?,
    )?;
    let size = ints(data_file.column_by_name("file_size_in_bytes"))?
        .ok_or_else(|| missing("file_size_in_bytes"))?;
    let records = ints(data_file.column_by_name("record_count"))?;
    let content = ints(data_file.column_by_name("content"))?;
    let referenced = data_file
        .column_by_name("referenced_data_file")
        .map(|a| strings(a))
        .transpose()?;
    let equality_ids = data_file
        .column_by_name("equality_ids")
        .and_then(|c| c.as_list_opt::<i32>());
    // Rendered partition values: equality deletes apply within their partition.
    let partition = data_file
        .column_by_name("partition")
        .filter(|p| p.as_struct_opt().is_some_and(|s| s.num_columns() > 0));
    let partition_key = |row: usize| {
        partition.and_then(|p| datafusion::arrow::util::display::array_value_to_string(p, row).ok())
    };
    let lower = IdMaps::new(data_file, "lower_bounds", &DataType::Binary)?;
    let upper = IdMaps::new(data_file, "upper_bounds", &DataType::Binary)?;
    let nulls = IdMaps::new(data_file, "null_value_counts", &DataType::Int64)?;
    let path_bound = |maps: &Option<IdMaps>, row: usize| {
        let maps = maps.as_ref()?;
        let values = maps.values.as_binary::<i32>();
        maps.row(row)
            .find(|(id, _)| *id == FILE_PATH_FIELD_ID)
            .map(|(_, i)| values.value(i).to_vec())
    };
    let mut out = Vec::new();
    for i in 0..batch.num_rows() {
        // 2: deleted from the table by this snapshot.
        if status.value(i) == 2 {
            continue;
        }
        let file = path.value(i);
        if !format.value(i).eq_ignore_ascii_case("parquet") {
            return Err(refuse(format!(
                "{} file {file} is {}; lambdafusion reads Parquet files only",
                if manifest.content == 0 {
                    "data"
                } else {
                    "delete"
                },
                format.value(i)
            )));
        }
        // Added entries without a sequence number inherit their manifest's.
        let entry_sequence = sequence
            .as_ref()
            .filter(|s| s.is_valid(i))
            .map_or(manifest.sequence, |s| s.value(i));
        let kind = content
            .as_ref()
            .filter(|c| c.is_valid(i))
            .map_or(0, |c| c.value(i));
        let size = size.value(i).max(0) as u64;
        if manifest.content == 1 && size > MAX_DELETE_FILE_BYTES {
            return Err(refuse(format!(
                "delete file {file} is {size} bytes, more than the {MAX_DELETE_FILE_BYTES} a \
                 task reads whole; compact the table's deletes (rewrite_position_delete_files, \
                 rewrite_data_files)"
            )));
        }
        match (manifest.content, kind) {
            (0, 0) => out.push(Entry::Data(DataFile {
                path: resolve(file, "a data file")?,
                name: file.to_string(),
                size,
                records: records
                    .as_ref()
                    .filter(|r| r.is_valid(i))
                    .map(|r| r.value(i).max(0) as u64),
                sequence: entry_sequence,
                deletes: Vec::new(),
                equality: Vec::new(),
                partition: (manifest.spec_id, partition_key(i)),
                metrics: Metrics {
                    lower: lower.as_ref().map(|m| m.bounds(i)).unwrap_or_default(),
                    upper: upper.as_ref().map(|m| m.bounds(i)).unwrap_or_default(),
                    nulls: nulls.as_ref().map(|m| m.counts(i)).unwrap_or_default(),
                },
            })),
            (1, 1) => out.push(Entry::PositionDeletes(PositionDeletes {
                file: DeleteFile {
                    path: resolve(file, "a delete file")?.to_string(),
                    size,
                },
                sequence: entry_sequence,
                referenced: referenced
                    .as_ref()
                    .filter(|r| r.is_valid(i))
                    .map(|r| r.value(i).to_string()),
                bounds: path_bound(&lower, i).zip(path_bound(&upper, i)),
            })),
            (1, 2) => {
                let ids = equality_ids
                    .as_ref()
                    .filter(|l| l.is_valid(i))
                    .map(|l| ints(Some(&l.value(i))))
                    .transpose()?
                    .flatten()
                    .map(|ids| ids.iter().flatten().map(|id| id as i32).collect::<Vec<_>>())
                    .unwrap_or_default();
                if ids.is_empty() {
                    return Err(refuse(format!(
                        "equality delete file {file} names no equality_ids"
                    )));
                }
                out.push(Entry::EqualityDeletes(EqualityDelete {
                    file: DeleteFile {
                        path: resolve(file, "a delete file")?.to_string(),
                        size,
                    },
                    sequence: entry_sequence,
                    field_ids: ids,
                    partition: (manifest.spec_id, partition_key(i)),
                }))
            }
            (m, k) => {
                return Err(refuse(format!(
                    "its manifest {name} (content {m}) lists {file} with content {k}, \
                     which the Iceberg spec does not allow"
                )))
            }
        }
    }
    Ok(out)
}

/// A manifest column that maps field ids to values (`lower_bounds`, `upper_bounds`,
/// `null_value_counts`: an Avro map, read as a list of key-value records), its keys and
/// values cast once for the whole batch.
struct IdMaps {
    column: Arc<dyn Array>,
    offsets: Vec<i64>,
    keys: Int64Array,
    values: Arc<dyn Array>,
}

impl IdMaps {
    /// The batch's `name` column, its values as `value_type`; `None` if it has none.
    fn new(data_file: &StructArray, name: &str, value_type: &DataType) -> DfResult<Option<Self>> {
        let Some(column) = data_file.column_by_name(name) else {
            return Ok(None);
        };
        let (offsets, entries): (Vec<i64>, &dyn Array) =
            if let Some(list) = column.as_list_opt::<i32>() {
                (
                    list.offsets().iter().map(|&o| o as i64).collect(),
                    list.values().as_ref(),
                )
            } else if let Some(map) = column.as_map_opt() {
                (
                    map.offsets().iter().map(|&o| o as i64).collect(),
                    map.entries(),
                )
            } else {
                return Ok(None);
            };
        let Some(entries) = entries.as_struct_opt() else {
            return Ok(None);
        };
        let (Some(keys), Some(values)) = (
            ints(entries.column_by_name("key"))?,
            entries.column_by_name("value"),
        ) else {
            return Ok(None);
        };
        Ok(Some(Self {
            column: column.clone(),
            offsets,
            keys,
            values: datafusion::arrow::compute::cast(values, value_type)?,
        }))
    }

    /// The entries of row `row`: (field id, index into the values).
    fn row(&self, row: usize) -> impl Iterator<Item = (i32, usize)> + '_ {
        let range = if self.column.is_null(row) {
            0..0
        } else {
            self.offsets[row] as usize..self.offsets[row + 1] as usize
        };
        range
            .filter(|&i| self.keys.is_valid(i) && self.values.is_valid(i))
            .map(|i| (self.keys.value(i) as i32, i))
    }

    /// Row `row` of a bounds map, as field id -> bytes.
    fn bounds(&self, row: usize) -> HashMap<i32, Vec<u8>> {
        let values = self.values.as_binary::<i32>();
        self.row(row)
            .map(|(id, i)| (id, values.value(i).to_vec()))
            .collect()
    }

    /// Row `row` of a counts map, as field id -> count.
    fn counts(&self, row: usize) -> HashMap<i32, u64> {
        let values = self
            .values
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        self.row(row)
            .map(|(id, i)| (id, values.value(i).max(0) as u64))
            .collect()
    }
}

/// The value of Iceberg's single-value serialization `bytes` (a column bound) as `data_type`,
/// or `None` where pruning should not trust it: floating point (bounds leave NaN out, which
/// DataFusion orders above every number) and types not listed.
fn bound_value(bytes: &[u8], data_type: &DataType) -> Option<ScalarValue> {
    let int = || -> Option<i64> {
        match bytes.len() {
            4 => Some(i32::from_le_bytes(bytes.try_into().ok()?) as i64),
            8 => Some(i64::from_le_bytes(bytes.try_into().ok()?)),
            _ => None,
        }
    };
    Some(match data_type {
        DataType::Boolean => ScalarValue::Boolean(Some(*bytes.first()? != 0)),
        DataType::Int32 if bytes.len() == 4 => ScalarValue::Int32(Some(int()? as i32)),
        // A column promoted from int keeps its older files' 4-byte bounds.
        DataType::Int64 => ScalarValue::Int64(Some(int()?)),
        DataType::Date32 if bytes.len() == 4 => ScalarValue::Date32(Some(int()? as i32)),
        DataType::Timestamp(TimeUnit::Microsecond, tz) if bytes.len() == 8 => {
            ScalarValue::TimestampMicrosecond(Some(int()?), tz.clone())
        }
        DataType::Utf8 => ScalarValue::Utf8(Some(String::from_utf8(bytes.to_vec()).ok()?)),
        DataType::Decimal128(p, s) if !bytes.is_empty() && bytes.len() <= 16 => {
            // Big-endian two's complement of the unscaled value, sign-extended.
            let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
            let mut wide = [fill; 16];
            wide[16 - bytes.len()..].copy_from_slice(bytes);
            ScalarValue::Decimal128(Some(i128::from_be_bytes(wide)), *p, *s)
        }
        _ => return None,
    })
}

/// A snapshot's data files as DataFusion's pruning sees them: one container a file, its
/// manifest's bounds, null counts and row count.
struct FileMetrics<'a> {
    files: &'a [&'a DataFile],
    /// Column name -> its field id and type.
    columns: &'a HashMap<String, (i32, DataType)>,
}

impl FileMetrics<'_> {
    fn values(
        &self,
        column: &datafusion::common::Column,
        side: impl Fn(&Metrics) -> &HashMap<i32, Vec<u8>>,
    ) -> Option<datafusion::arrow::array::ArrayRef> {
        let (id, data_type) = self.columns.get(column.name())?;
        let null = ScalarValue::try_from(data_type).ok()?;
        let values = self.files.iter().map(|f| {
            side(&f.metrics)
                .get(id)
                .and_then(|b| bound_value(b, data_type))
                .unwrap_or_else(|| null.clone())
        });
        ScalarValue::iter_to_array(values).ok()
    }
}

impl datafusion::common::pruning::PruningStatistics for FileMetrics<'_> {
    fn min_values(
        &self,
        column: &datafusion::common::Column,
    ) -> Option<datafusion::arrow::array::ArrayRef> {
        self.values(column, |m| &m.lower)
    }

    fn max_values(
        &self,
        column: &datafusion::common::Column,
    ) -> Option<datafusion::arrow::array::ArrayRef> {
        self.values(column, |m| &m.upper)
    }

    fn num_containers(&self) -> usize {
        self.files.len()
    }

    fn null_counts(
        &self,
        column: &datafusion::common::Column,
    ) -> Option<datafusion::arrow::array::ArrayRef> {
        let (id, _) = self.columns.get(column.name())?;
        let counts: UInt64Array = self
            .files
            .iter()
            .map(|f| f.metrics.nulls.get(id).copied())
            .collect();
        Some(Arc::new(counts))
    }

    fn row_counts(&self) -> Option<datafusion::arrow::array::ArrayRef> {
        let counts: UInt64Array = self.files.iter().map(|f| f.records).collect();
        Some(Arc::new(counts))
    }

    fn contained(
        &self,
        _column: &datafusion::common::Column,
        _values: &std::collections::HashSet<ScalarValue>,
    ) -> Option<datafusion::arrow::array::BooleanArray> {
        None
    }
}

// ---- the table ----------------------------------------------------------------------

/// A snapshot of an Iceberg table, planned as a Parquet scan of its data files.
pub struct IcebergTable {
    label: String,
    store_url: ObjectStoreUrl,
    /// The table directory.
    root: Url,
    schema: SchemaRef,
    /// Column name -> its field id and type (what the manifests' metrics are keyed by).
    columns: HashMap<String, (i32, DataType)>,
    /// Whether the files' columns must be found by field id (a column was renamed, or a
    /// name reused), not by name.
    by_field_id: bool,
    files: Vec<DataFile>,
}

impl fmt::Debug for IcebergTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IcebergTable")
            .field("table", &self.label)
            .field("files", &self.files.len())
            .finish_non_exhaustive()
    }
}

/// Opens the Iceberg table at `location` (its metadata file, or its directory) at
/// `version`; `name`, the catalog's name for it, is what its errors call it.
pub async fn open(
    runtime: &Arc<RuntimeEnv>,
    location: &str,
    version: Version,
    name: Option<&str>,
) -> DfResult<Arc<IcebergTable>> {
    let label = match name {
        Some(name) => format!("Iceberg table {name} at {location}"),
        None => format!("the Iceberg table at {location}"),
    };
    let refuse = |why: String| DataFusionError::Plan(format!("{label}: {why}"));
    let url = as_url(location)?;
    let store_url = ObjectStoreUrl::parse(format!("{}://{}", url.scheme(), url.authority()))?;
    let store = runtime.object_store(&store_url)?;
    let (root, file) = metadata_file(store.as_ref(), &url).await?;
    let metadata_path = path_inside(&root, &file, "the metadata file")?;
    let bytes = read(store.as_ref(), &metadata_path, "metadata file")
        .await
        .map_err(|e| refuse(format!("cannot read its metadata {file}: {e}")))?;
    let metadata: Metadata = serde_json::from_slice(&bytes).map_err(|e| {
        refuse(format!(
            "its metadata {file} is not Iceberg table metadata: {e}"
        ))
    })?;
    if !(1..=2).contains(&metadata.format_version) {
        return Err(refuse(format!(
            "format version {} is not supported (lambdafusion reads versions 1 and 2)",
            metadata.format_version
        )));
    }
    let mut schemas = metadata.schemas.clone();
    if let Some(v1) = &metadata.schema {
        if schemas.is_empty() {
            schemas.push(v1.clone());
        }
    }
    let by_field_id = columns_by_field_id(&schemas).map_err(refuse)?;
    let snapshot = match version {
        Version::Latest => metadata
            .current_snapshot_id
            .filter(|id| *id >= 0)
            .map(|id| {
                metadata
                    .snapshots
                    .iter()
                    .find(|s| s.snapshot_id == id)
                    .ok_or_else(|| refuse(format!("its current snapshot {id} is not listed")))
            })
            .transpose()?,
        Version::At(id) => Some(
            metadata
                .snapshots
                .iter()
                .find(|s| s.snapshot_id as u64 == id)
                .ok_or_else(|| refuse(format!("it has no snapshot {id}")))?,
        ),
        Version::AsOf(ms) => Some(
            metadata
                .snapshots
                .iter()
                .filter(|s| s.timestamp_ms <= ms)
                .max_by_key(|s| (s.timestamp_ms, s.snapshot_id))
                .ok_or_else(|| {
                    refuse(format!("it has no snapshot as of {ms} ms since the epoch"))
                })?,
        ),
    };
    let schema_id = snapshot
        .and_then(|s| s.schema_id)
        .or(metadata.current_schema_id)
        .unwrap_or(0);
    let schema = schemas
        .iter()
        .find(|s| s.schema_id == schema_id)
        .or(schemas.last())
        .ok_or_else(|| refuse("its metadata has no schema".into()))?;
    let fields = schema
        .fields
        .iter()
        .map(|f| {
            arrow_type(&f.kind, 0)
                .map(|t| Field::new(&f.name, t, !f.required))
                .map_err(|e| refuse(format!("column {}: {e}", f.name)))
        })
        .collect::<DfResult<Vec<_>>>()?;
    let files = match snapshot {
        Some(s) => data_files(store.as_ref(), &root, s, &refuse).await?,
        None => Vec::new(),
    };
    Ok(Arc::new(IcebergTable {
        label,
        store_url,
        root,
        columns: schema
            .fields
            .iter()
            .zip(&fields)
            .map(|(f, arrow)| (f.name.clone(), (f.id, arrow.data_type().clone())))
            .collect(),
        by_field_id,
        schema: Arc::new(Schema::new(fields)),
        files,
    }))
}

#[async_trait]
impl TableProvider for IcebergTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Filters prune row groups in the tasks; the rows are filtered again above.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let logical: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let mut predicate = None;
        if let Some(filter) = conjunction(filters.iter().cloned()) {
            let df_schema = DFSchema::try_from(self.schema.as_ref().clone())?;
            predicate = state.create_physical_expr(filter, &df_schema).ok();
        }
        // Files whose manifest metrics rule the filters out are not planned at all.
        let all: Vec<&DataFile> = self.files.iter().collect();
        let kept: Vec<&DataFile> = match &predicate {
            Some(expr) if !all.is_empty() => {
                let metrics = FileMetrics {
                    files: &all,
                    columns: &self.columns,
                };
                let pruning = PruningPredicateBuilder::new()
                    .with_file_schema(self.schema.clone())
                    .build(expr.clone());
                match pruning.map(|p| p.prune(&metrics)) {
                    Some(Ok(keep)) => all
                        .iter()
                        .zip(keep)
                        .filter_map(|(f, keep)| keep.then_some(*f))
                        .collect(),
                    _ => all,
                }
            }
            _ => all,
        };
        if kept.is_empty() {
            let schema = Arc::new(self.schema.project(&logical)?);
            return Ok(Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
                schema,
            )));
        }
        let table_schema = TableSchema::builder(self.schema.clone()).build();
        let mut source = ParquetSource::new(table_schema);
        if let Some(expr) = predicate {
            source = source.with_predicate(expr);
        }
        let files: Vec<PartitionedFile> = kept
            .iter()
            .map(|f| {
                PartitionedFile::new_from_meta(ObjectMeta {
                    location: f.path.clone(),
                    last_modified: Default::default(),
                    size: f.size,
                    e_tag: None,
                    version: None,
                })
            })
            .collect();
        let mut statistics = datafusion::common::Statistics::new_unknown(&self.schema);
        use datafusion::common::stats::Precision;
        let rows: Option<u64> = kept.iter().map(|f| f.records).sum();
        if let Some(rows) = rows {
            statistics.num_rows = Precision::Inexact(rows as usize);
        }
        statistics.total_byte_size = Precision::Inexact(kept.iter().map(|f| f.size as usize).sum());
        let groups = crate::plan::split_files(state, files, true);
        // Equality deletes need their key columns read, selected or not.
        let mut read = logical.clone();
        let mut key_columns = |ids: &[i32]| -> DfResult<Vec<usize>> {
            ids.iter()
                .map(|id| {
                    let name = self
                        .columns
                        .iter()
                        .find(|(_, (i, _))| i == id)
                        .map(|(name, _)| name)
                        .ok_or_else(|| {
                            DataFusionError::Plan(format!(
                                "{}: an equality delete file's key has field {id}, which is \
                                 not a column of the table's schema",
                                self.label
                            ))
                        })?;
                    let index = self.schema.index_of(name)?;
                    Ok(match read.iter().position(|&c| c == index) {
                        Some(at) => at,
                        None => {
                            read.push(index);
                            read.len() - 1
                        }
                    })
                })
                .collect()
        };
        let mut deletions = BTreeMap::new();
        for f in kept
            .iter()
            .filter(|f| !f.deletes.is_empty() || !f.equality.is_empty())
        {
            let rows = match (f.records, f.deletes.is_empty()) {
                (Some(rows), _) => rows,
                (None, true) => 0,
                (None, false) => {
                    return Err(DataFusionError::Plan(format!(
                        "{}: data file {} has position deletes but no record count",
                        self.label, f.name
                    )))
                }
            };
            let equality = f
                .equality
                .iter()
                .map(|e| {
                    Ok(EqualityDeletes {
                        file: e.file.clone(),
                        field_ids: e.field_ids.clone(),
                        columns: key_columns(&e.field_ids)?,
                    })
                })
                .collect::<DfResult<Vec<_>>>()?;
            deletions.insert(
                f.path.to_string(),
                Deleted::Iceberg(IcebergPositions {
                    file: f.name.clone(),
                    rows,
                    delete_files: f.deletes.clone(),
                    equality,
                }),
            );
        }
        let widened = read.len() > logical.len();
        let config = FileScanConfigBuilder::new(self.store_url.clone(), Arc::new(source))
            .with_file_groups(groups)
            .with_statistics(statistics)
            .with_projection_indices(Some(read))?
            // Rows an equality delete removes are removed after the scan: no limit in it.
            .with_limit(if widened { None } else { limit })
            .build();
        let scan = DataSourceExec::from_data_source(config);
        if deletions.is_empty() && !self.by_field_id {
            return Ok(scan);
        }
        let mut scan = FormatScanExec::try_new(scan, self.root.clone(), deletions)?;
        if widened {
            scan = scan.with_output((0..logical.len()).collect())?;
        }
        if self.by_field_id {
            scan = scan.with_field_ids(
                self.columns
                    .iter()
                    .map(|(name, (id, _))| (name.clone(), *id))
                    .collect(),
            );
        }
        Ok(Arc::new(scan))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn iceberg_types_read_as_arrow() {
        let t = |v: serde_json::Value| arrow_type(&v, 0);
        assert_eq!(t(json!("long")).unwrap(), DataType::Int64);
        assert_eq!(
            t(json!("decimal(10, 2)")).unwrap(),
            DataType::Decimal128(10, 2)
        );
        assert_eq!(t(json!("fixed[4]")).unwrap(), DataType::FixedSizeBinary(4));
        assert!(matches!(
            t(json!("timestamptz")).unwrap(),
            DataType::Timestamp(TimeUnit::Microsecond, Some(_))
        ));
        let list =
            json!({"type": "list", "element-id": 3, "element": "int", "element-required": true});
        assert_eq!(t(list).unwrap(), DataType::new_list(DataType::Int32, false));
        let map =
            json!({"type": "map", "key-id": 4, "key": "string", "value-id": 5, "value": "long"});
        assert!(matches!(t(map).unwrap(), DataType::Map(..)));
        for bad in [
            json!("timestamp_ns"),
            json!("variant"),
            json!("decimal(40, 2)"),
            json!({"type": "union"}),
        ] {
            assert!(t(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn records_of_no_fields_are_dropped_from_the_reader_schema() {
        let mut schema = json!({"type": "record", "name": "manifest_entry", "fields": [
            {"name": "status", "type": "int"},
            {"name": "data_file", "type": {"type": "record", "name": "r2", "fields": [
                {"name": "file_path", "type": "string"},
                {"name": "partition", "type": {"type": "record", "name": "r102", "fields": []}},
                {"name": "bounds", "type": ["null", {"type": "array", "items": {"type": "record",
                    "name": "k", "fields": [{"name": "e", "type": {"type": "record",
                    "name": "nothing", "fields": []}}]}}]}]}}]});
        assert!(drop_empty_records(&mut schema));
        let text = schema.to_string();
        assert!(
            !text.contains("\"partition\"") && !text.contains("\"e\""),
            "{text}"
        );
        assert!(
            text.contains("file_path") && text.contains("bounds"),
            "{text}"
        );
        assert!(!drop_empty_records(&mut schema), "nothing left to drop");
    }

    #[test]
    fn renamed_and_reused_columns_are_read_by_field_id() {
        let schema = |fields: serde_json::Value| -> IcebergSchema {
            serde_json::from_value(json!({"schema-id": 0, "fields": fields})).unwrap()
        };
        let a = schema(json!([{"id": 1, "name": "a", "required": false, "type": "long"}]));
        let added = schema(json!([
            {"id": 1, "name": "a", "required": false, "type": "long"},
            {"id": 2, "name": "b", "required": false, "type": "long"}]));
        assert_eq!(columns_by_field_id(&[a.clone(), added]), Ok(false));
        let renamed = schema(json!([{"id": 1, "name": "z", "required": false, "type": "long"}]));
        assert_eq!(columns_by_field_id(&[a.clone(), renamed]), Ok(true));
        let reused = schema(json!([{"id": 7, "name": "a", "required": false, "type": "long"}]));
        assert_eq!(columns_by_field_id(&[a, reused]), Ok(true));
        // Inside a struct: refused. A struct column renamed keeps its fields' names.
        let s = |name: &str, inner: &str| {
            schema(json!([{"id": 1, "name": name, "required": false, "type": {
                "type": "struct", "fields": [
                    {"id": 2, "name": inner, "required": false, "type": "long"}]}}]))
        };
        assert_eq!(columns_by_field_id(&[s("s", "x"), s("t", "x")]), Ok(true));
        let err = columns_by_field_id(&[s("s", "x"), s("s", "y")]).unwrap_err();
        assert!(
            err.contains("field x of the struct column with id 1 was renamed to y"),
            "{err}"
        );
    }

    #[test]
    fn deletes_apply_by_sequence_number_partition_and_named_file() {
        let data = |name: &str, sequence| DataFile {
            path: Path::from(name),
            name: name.to_string(),
            size: 1,
            records: Some(10),
            sequence,
            deletes: Vec::new(),
            equality: Vec::new(),
            partition: (0, None),
            metrics: Metrics::default(),
        };
        let deletes =
            |sequence, referenced: Option<&str>, bounds: Option<(&str, &str)>| PositionDeletes {
                file: DeleteFile {
                    path: "d".into(),
                    size: 1,
                },
                sequence,
                referenced: referenced.map(String::from),
                bounds: bounds.map(|(l, u)| (l.as_bytes().to_vec(), u.as_bytes().to_vec())),
            };
        // A delete file applies to data files of its sequence number or older only.
        assert!(deletes(3, None, None).applies_to(&data("s3://b/t/a", 3)));
        assert!(deletes(3, None, None).applies_to(&data("s3://b/t/a", 1)));
        assert!(!deletes(2, None, None).applies_to(&data("s3://b/t/a", 3)));
        // referenced_data_file names the one file.
        assert!(deletes(3, Some("s3://b/t/a"), None).applies_to(&data("s3://b/t/a", 1)));
        assert!(!deletes(3, Some("s3://b/t/a"), None).applies_to(&data("s3://b/t/b", 1)));
        // file_path bounds, inclusive at both ends.
        let ranged = deletes(3, None, Some(("s3://b/t/b", "s3://b/t/d")));
        assert!(ranged.applies_to(&data("s3://b/t/b", 1)));
        assert!(ranged.applies_to(&data("s3://b/t/c", 1)));
        assert!(ranged.applies_to(&data("s3://b/t/d", 1)));
        assert!(!ranged.applies_to(&data("s3://b/t/a", 1)));
        assert!(!ranged.applies_to(&data("s3://b/t/e", 1)));
        // Equality deletes: strictly newer than the data, and within their partition
        // unless their spec has none.
        let equality = |sequence, partition: Option<&str>| EqualityDelete {
            file: DeleteFile {
                path: "e".into(),
                size: 1,
            },
            sequence,
            field_ids: vec![1],
            partition: (0, partition.map(String::from)),
        };
        let mut in_eu = data("s3://b/t/a", 2);
        in_eu.partition = (0, Some("{region: eu}".into()));
        assert!(equality(3, Some("{region: eu}")).applies_to(&in_eu));
        assert!(!equality(2, Some("{region: eu}")).applies_to(&in_eu));
        assert!(!equality(3, Some("{region: us}")).applies_to(&in_eu));
        assert!(equality(3, None).applies_to(&in_eu));
        let mut other_spec = in_eu.clone();
        other_spec.partition.0 = 1;
        assert!(!equality(3, Some("{region: eu}")).applies_to(&other_spec));
    }

    #[test]
    fn bounds_decode_as_the_spec_serializes_single_values() {
        let v = |bytes: &[u8], t: DataType| bound_value(bytes, &t);
        assert_eq!(
            v(&7i32.to_le_bytes(), DataType::Int32),
            Some(ScalarValue::Int32(Some(7)))
        );
        assert_eq!(
            v(&(-3i64).to_le_bytes(), DataType::Int64),
            Some(ScalarValue::Int64(Some(-3)))
        );
        // A long column promoted from int: its older files' bounds are 4 bytes.
        assert_eq!(
            v(&(-3i32).to_le_bytes(), DataType::Int64),
            Some(ScalarValue::Int64(Some(-3)))
        );
        assert_eq!(
            v(&20000i32.to_le_bytes(), DataType::Date32),
            Some(ScalarValue::Date32(Some(20000)))
        );
        let tz = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        assert_eq!(
            v(&5i64.to_le_bytes(), tz),
            Some(ScalarValue::TimestampMicrosecond(
                Some(5),
                Some("+00:00".into())
            ))
        );
        assert_eq!(
            v(b"eu", DataType::Utf8),
            Some(ScalarValue::Utf8(Some("eu".into())))
        );
        // Decimals: big-endian two's complement, minimal length.
        assert_eq!(
            v(&[0x04, 0xd2], DataType::Decimal128(10, 2)),
            Some(ScalarValue::Decimal128(Some(1234), 10, 2))
        );
        assert_eq!(
            v(&[0xff, 0x6a], DataType::Decimal128(10, 2)),
            Some(ScalarValue::Decimal128(Some(-150), 10, 2))
        );
        assert_eq!(
            v(&[1], DataType::Boolean),
            Some(ScalarValue::Boolean(Some(true)))
        );
        // Not trusted or not understood: no bound, so no file is skipped for it.
        assert_eq!(v(&1.5f64.to_le_bytes(), DataType::Float64), None);
        assert_eq!(v(&[1, 2, 3], DataType::Int32), None);
        assert_eq!(v(&[0xff, 0xfe], DataType::Utf8), None);
    }
}
