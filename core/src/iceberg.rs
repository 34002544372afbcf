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
//! Columns are read by name, which is only right while no column was renamed, or dropped
//! and added again under its old name: a table whose schemas disagree so is refused, as is
//! one whose snapshot has delete files (merge-on-read) or non-Parquet data files — a 400
//! naming the table and the reason, never wrong rows. Every file the metadata names must lie
//! inside the table's directory, the location the access policy allowed.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::DFSchema;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{CreateExternalTable, Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use serde::Deserialize;
use url::Url;

use crate::delta::Version;

/// The format name (`STORED AS ICEBERG`) Iceberg tables are stored under in the catalog.
pub const FORMAT: &str = "ICEBERG";

/// Largest metadata, manifest list or manifest file read (a table past it is refused).
const MAX_METADATA_BYTES: usize = 256 * 1024 * 1024;

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

/// Every field of `schema` with its path (`a`, `a.b` for a struct's field), by id.
fn field_paths(fields: &[IcebergField], prefix: &str, out: &mut BTreeMap<i32, String>) {
    for f in fields {
        let path = format!("{prefix}{}", f.name);
        if f.kind.get("type").and_then(|t| t.as_str()) == Some("struct") {
            if let Some(inner) = f
                .kind
                .get("fields")
                .and_then(|v| serde_json::from_value::<Vec<IcebergField>>(v.clone()).ok())
            {
                field_paths(&inner, &format!("{path}."), out);
            }
        }
        out.insert(f.id, path);
    }
}

/// Why reading `schemas` by name could return the wrong column: a field renamed (one id,
/// two names) or a name reused by another field (dropped, then added again).
fn renamed_or_reused(schemas: &[IcebergSchema]) -> Option<String> {
    let mut names_of: BTreeMap<i32, String> = BTreeMap::new();
    let mut ids_of: HashMap<String, i32> = HashMap::new();
    for schema in schemas {
        let mut paths = BTreeMap::new();
        field_paths(&schema.fields, "", &mut paths);
        for (id, path) in paths {
            if let Some(before) = names_of.get(&id) {
                if before != &path {
                    return Some(format!(
                        "column {before} was renamed to {path}; reading renamed columns is \
                         not supported yet"
                    ));
                }
            }
            if let Some(other) = ids_of.get(&path) {
                if *other != id {
                    return Some(format!(
                        "the name {path} belonged to another column before (dropped and \
                         added again); such tables are not supported yet"
                    ));
                }
            }
            names_of.insert(id, path.clone());
            ids_of.insert(path, id);
        }
    }
    None
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
    size: u64,
    records: Option<u64>,
}

// ---- the table ----------------------------------------------------------------------

/// A snapshot of an Iceberg table, planned as a Parquet scan of its data files.
pub struct IcebergTable {
    label: String,
    store_url: ObjectStoreUrl,
    schema: SchemaRef,
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
    if let Some(why) = renamed_or_reused(&schemas) {
        return Err(refuse(why));
    }
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
        schema: Arc::new(Schema::new(fields)),
        files,
    }))
}

/// The data files of `snapshot`: its manifest list's manifests, their live entries.
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
            for i in 0..batch.num_rows() {
                if content
                    .as_ref()
                    .is_some_and(|c| c.is_valid(i) && c.value(i) != 0)
                {
                    return Err(refuse(
                        "its snapshot has delete files (merge-on-read deletes), which \
                         lambdafusion does not apply yet"
                            .into(),
                    ));
                }
                manifests.push(paths.value(i).to_string());
            }
        }
    } else {
        manifests.extend(snapshot.manifests.iter().cloned());
    }
    let per_manifest: Vec<Vec<DataFile>> =
        futures::stream::iter(manifests.into_iter().map(|m| async move {
            let path = resolve(&m, "a manifest")?;
            let mut out = Vec::new();
            for batch in avro_batches(read(store, &path, "manifest").await?, &m)? {
                out.extend(manifest_entries(&batch, &m, &resolve, refuse)?);
            }
            Ok::<_, DataFusionError>(out)
        }))
        .buffered(16)
        .try_collect()
        .await?;
    Ok(per_manifest.into_iter().flatten().collect())
}

/// The live data files of one batch of a manifest's entries.
fn manifest_entries(
    batch: &RecordBatch,
    manifest: &str,
    resolve: &(dyn Fn(&str, &str) -> DfResult<Path> + Sync),
    refuse: &(dyn Fn(String) -> DataFusionError + Sync),
) -> DfResult<Vec<DataFile>> {
    let missing = |what: &str| refuse(format!("its manifest {manifest} has no {what}"));
    let status = ints(batch.column_by_name("status"))?.ok_or_else(|| missing("status"))?;
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
    let mut out = Vec::new();
    for i in 0..batch.num_rows() {
        // 2: deleted from the table by this snapshot.
        if status.value(i) == 2 {
            continue;
        }
        if content
            .as_ref()
            .is_some_and(|c| c.is_valid(i) && c.value(i) != 0)
        {
            return Err(refuse(
                "its snapshot has delete files (merge-on-read deletes), which lambdafusion \
                 does not apply yet"
                    .into(),
            ));
        }
        let file = path.value(i);
        if !format.value(i).eq_ignore_ascii_case("parquet") {
            return Err(refuse(format!(
                "data file {file} is {}; lambdafusion reads Parquet data files only",
                format.value(i)
            )));
        }
        out.push(DataFile {
            path: resolve(file, "a data file")?,
            size: size.value(i).max(0) as u64,
            records: records
                .as_ref()
                .filter(|r| r.is_valid(i))
                .map(|r| r.value(i).max(0) as u64),
        });
    }
    Ok(out)
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
        if self.files.is_empty() {
            let schema = Arc::new(self.schema.project(&logical)?);
            return Ok(Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
                schema,
            )));
        }
        let table_schema = TableSchema::builder(self.schema.clone()).build();
        let mut source = ParquetSource::new(table_schema);
        if let Some(predicate) = conjunction(filters.iter().cloned()) {
            let df_schema = DFSchema::try_from(self.schema.as_ref().clone())?;
            if let Ok(expr) = state.create_physical_expr(predicate, &df_schema) {
                source = source.with_predicate(expr);
            }
        }
        let files: Vec<PartitionedFile> = self
            .files
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
        let rows: Option<u64> = self.files.iter().map(|f| f.records).sum();
        if let Some(rows) = rows {
            statistics.num_rows = Precision::Inexact(rows as usize);
        }
        statistics.total_byte_size =
            Precision::Inexact(self.files.iter().map(|f| f.size as usize).sum());
        let groups = crate::plan::split_files(state, files, true);
        let config = FileScanConfigBuilder::new(self.store_url.clone(), Arc::new(source))
            .with_file_groups(groups)
            .with_statistics(statistics)
            .with_projection_indices(Some(logical))?
            .with_limit(limit)
            .build();
        Ok(DataSourceExec::from_data_source(config))
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
    fn renamed_and_reused_columns_are_found() {
        let schema = |fields: serde_json::Value| -> IcebergSchema {
            serde_json::from_value(json!({"schema-id": 0, "fields": fields})).unwrap()
        };
        let a = schema(json!([{"id": 1, "name": "a", "required": false, "type": "long"}]));
        let added = schema(json!([
            {"id": 1, "name": "a", "required": false, "type": "long"},
            {"id": 2, "name": "b", "required": false, "type": "long"}]));
        assert_eq!(renamed_or_reused(&[a.clone(), added]), None);
        let renamed = schema(json!([{"id": 1, "name": "z", "required": false, "type": "long"}]));
        assert!(renamed_or_reused(&[a.clone(), renamed])
            .unwrap()
            .contains("renamed"));
        let reused = schema(json!([{"id": 7, "name": "a", "required": false, "type": "long"}]));
        assert!(renamed_or_reused(&[a, reused])
            .unwrap()
            .contains("added again"));
    }
}
