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
use datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use serde::Deserialize;
use url::Url;

use crate::delta::Version;
use crate::format_scan::{Deleted, EqualityDeletes, FormatScanExec, IcebergPositions};

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
pub(crate) fn arrow_type(kind: &serde_json::Value, depth: usize) -> Result<DataType, String> {
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

/// The object path of `location`, a file the metadata names, checked to lie inside the
/// table directory `root`. Taken literally, as Iceberg's own readers take it: the text
/// after `scheme://authority/` is the object's key, escapes and all (a writer that put a
/// partition value `a/b` in a directory name as `a%2Fb` wrote that key).
pub(crate) fn file_inside(root: &Url, location: &str, what: &str) -> DfResult<Path> {
    let outside = || {
        DataFusionError::Plan(format!(
            "{what} is {location}, which lies outside the table's directory {root}: \
             lambdafusion reads only files inside it"
        ))
    };
    let key = match location.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
            if !scheme.eq_ignore_ascii_case(root.scheme())
                || !authority.eq_ignore_ascii_case(root.authority())
            {
                return Err(outside());
            }
            key
        }
        None if location.starts_with('/') => location,
        None => return Err(outside()),
    };
    let key = Path::parse(key).map_err(|e| {
        DataFusionError::Plan(format!("{what} {location} is not a valid object path: {e}"))
    })?;
    let root_path =
        Path::from_url_path(root.path()).map_err(|e| DataFusionError::External(Box::new(e)))?;
    let below = key
        .prefix_match(&root_path)
        .is_some_and(|mut rest| rest.next().is_some());
    if below {
        Ok(key)
    } else {
        Err(outside())
    }
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
/// in a table directory the one `metadata/version-hint.text` names (or the newest
/// `v<N>.metadata.json` after it), else the newest `metadata/*.metadata.json` by its
/// version number.
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
        if let Ok(mut v) = text.parse::<u64>() {
            // The hint may lag the commit (it is written after it): versions past it
            // that exist are newer (as Iceberg's Hadoop tables look for them).
            while store
                .head(&dir_path.clone().join(format!("v{}.metadata.json", v + 1)))
                .await
                .is_ok()
            {
                v += 1;
            }
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

mod manifests;
mod metrics;

use manifests::{data_files, DataFile};
use metrics::FileMetrics;

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
}
