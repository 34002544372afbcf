//! Delta Lake tables (`CREATE EXTERNAL TABLE ... STORED AS DELTA LOCATION '<table dir>'`).
//!
//! The scheduler resolves a table's snapshot **once per query** with the Delta kernel
//! (delta-kernel-rs): the log and its checkpoints, the protocol's reader features, data
//! skipping over the log's partition values and statistics, and each file's deletion
//! vector. It then plans an ordinary Parquet scan of exactly the snapshot's files, split
//! into tasks by bytes like any other scan, so every task of the query reads the same
//! snapshot whatever is committed meanwhile. Column mapping becomes a projection that
//! renames physical columns to logical ones; partition values become DataFusion partition
//! columns. A file with a deletion vector travels with its descriptor in a
//! [`crate::format_scan::FormatScanExec`]: the task that reads the file loads the vector
//! and skips the deleted rows with a Parquet row selection.
//!
//! Time travel (`t VERSION AS OF 3`, `t TIMESTAMP AS OF '2026-01-01 00:00:00'`) reaches
//! [`open`] as a [`Version`]; see [`crate::sql::parse`] for how it is spelled.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray, MapArray, RecordBatch, StringArray, StructArray};
use datafusion::arrow::datatypes::{
    DataType, Field, FieldRef, Int32Type, Int64Type, Schema, SchemaRef, TimeUnit,
};
use datafusion::catalog::{Session, TableProvider, TableProviderFactory};
use datafusion::common::{Column as DfColumn, DFSchema, ScalarValue};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    BinaryExpr, CreateExternalTable, Expr, Operator, TableProviderFilterPushDown, TableType,
};
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use delta_kernel::actions::deletion_vector::{DeletionVectorDescriptor, DeletionVectorStorageType};
use delta_kernel::engine::arrow_conversion::TryFromKernel;
use delta_kernel::engine::arrow_data::ArrowEngineData;
use delta_kernel::expressions::{Expression, Predicate, Scalar};
use delta_kernel::schema::{ColumnMetadataKey, MetadataValue};
use delta_kernel::snapshot::{Snapshot, SnapshotRef};
use delta_kernel::table_features::ColumnMappingMode;
use delta_kernel::Engine;
use delta_kernel_engine::DefaultEngine;
use object_store::path::Path;
use object_store::ObjectMeta;
use serde::{Deserialize, Serialize};
use url::Url;

/// The format name (`STORED AS DELTA`) Delta tables are stored under in the catalog.
pub const FORMAT: &str = "DELTA";

/// Which snapshot of a table a query reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The newest commit when the query is planned.
    Latest,
    /// A commit version (`VERSION AS OF n`).
    At(u64),
    /// The newest commit at or before a time, in ms since the epoch (`TIMESTAMP AS OF`).
    AsOf(i64),
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => write!(f, "the latest version"),
            Version::At(v) => write!(f, "version {v}"),
            Version::AsOf(ms) => write!(f, "the version as of {ms} ms since the epoch"),
        }
    }
}

/// Creates the provider of `CREATE EXTERNAL TABLE ... STORED AS DELTA`: the log decides
/// the columns and partitions, so the statement may declare neither.
#[derive(Debug, Default)]
pub struct DeltaTableFactory;

#[async_trait]
impl TableProviderFactory for DeltaTableFactory {
    async fn create(
        &self,
        state: &dyn Session,
        cmd: &CreateExternalTable,
    ) -> DfResult<Arc<dyn TableProvider>> {
        if !cmd.schema.fields().is_empty() || !cmd.table_partition_cols.is_empty() {
            return Err(DataFusionError::Plan(format!(
                "table {}: a Delta table's columns and partitions come from its log; \
                 declare neither (CREATE EXTERNAL TABLE {} STORED AS DELTA LOCATION '...')",
                cmd.name, cmd.name
            )));
        }
        if let Some(key) = cmd.options.keys().find(|k| !k.starts_with("format.")) {
            return Err(DataFusionError::Plan(format!(
                "table {}: option {key} is not supported for Delta tables",
                cmd.name
            )));
        }
        let [location] = cmd.locations.as_slice() else {
            return Err(DataFusionError::Plan(format!(
                "table {}: a Delta table has one location (its directory), got {}",
                cmd.name,
                cmd.locations.len()
            )));
        };
        let name = cmd.name.to_string();
        Ok(open(state.runtime_env(), location, Version::Latest, Some(&name)).await?)
    }
}

/// Registers `STORED AS DELTA` with `state`.
pub fn register(state: &mut datafusion::execution::SessionState) {
    state
        .table_factories_mut()
        .insert(FORMAT.to_string(), Arc::new(DeltaTableFactory));
}

/// The name a query's versioned reference to `table` resolves through (see
/// [`crate::sql::parse`]): `table@v3`, `table@t1767225600000`.
pub fn versioned_name(table: &str, version: Version) -> String {
    match version {
        Version::Latest => table.to_string(),
        Version::At(v) => format!("{table}@v{v}"),
        Version::AsOf(ms) => format!("{table}@t{ms}"),
    }
}

/// The inverse of [`versioned_name`]: the table and the version it names.
pub fn parse_versioned_name(name: &str) -> Option<(&str, Version)> {
    let (table, version) = name.rsplit_once('@')?;
    let version = if let Some(v) = version.strip_prefix('v') {
        Version::At(v.parse().ok()?)
    } else {
        Version::AsOf(version.strip_prefix('t')?.parse().ok()?)
    };
    Some((table, version))
}

/// Opens the Delta table at `location` (a URL or path of its directory) at `version`;
/// `name`, the catalog's name for it, is what its errors call it.
pub async fn open(
    runtime: &Arc<datafusion::execution::runtime_env::RuntimeEnv>,
    location: &str,
    version: Version,
    name: Option<&str>,
) -> DfResult<Arc<DeltaTable>> {
    let label = match name {
        Some(name) => format!("Delta table {name} at {location}"),
        None => format!("the Delta table at {location}"),
    };
    let root = table_root(location)?;
    let store_url = store_url(&root)?;
    let store = runtime.object_store(&store_url)?;
    let engine: Arc<dyn Engine> = Arc::new(DefaultEngine::builder(store).build());
    let (snapshot, engine) = {
        let root = root.clone();
        tokio::task::spawn_blocking(move || -> Result<_, delta_kernel::Error> {
            let latest = |at: Option<u64>| {
                let builder = Snapshot::builder_for(root.as_str());
                match at {
                    Some(v) => builder.at_version(v),
                    None => builder,
                }
                .build(engine.as_ref())
            };
            let snapshot = match version {
                Version::Latest => latest(None)?,
                Version::At(v) => latest(Some(v))?,
                Version::AsOf(ms) => {
                    let newest = latest(None)?;
                    let commit = delta_kernel::history_manager::latest_version_as_of(
                        &newest,
                        engine.as_ref(),
                        ms,
                        delta_kernel::history_manager::HistoryCommitType::Recreatable,
                    )?;
                    latest(Some(commit.version))?
                }
            };
            Ok((snapshot, engine))
        })
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
        .map_err(|e| kernel_error(&label, version, e))?
    };
    DeltaTable::try_new(&label, root, store_url, snapshot, engine).map(Arc::new)
}

/// The table directory as a URL ending in `/` (what the kernel resolves files against).
pub(crate) fn table_root(location: &str) -> DfResult<Url> {
    let mut url = if location.contains("://") {
        Url::parse(location)
            .map_err(|e| DataFusionError::Plan(format!("{location} is not a valid URL: {e}")))?
    } else {
        let path = std::path::absolute(location)
            .map_err(|e| DataFusionError::Plan(format!("{location} is not a valid path: {e}")))?;
        Url::from_directory_path(&path)
            .map_err(|()| DataFusionError::Plan(format!("{location} is not a valid path")))?
    };
    if !url.path().ends_with('/') {
        url.set_path(&format!("{}/", url.path()));
    }
    Ok(url)
}

/// The object store (scheme and bucket) a URL is read through.
pub(crate) fn store_url(url: &Url) -> DfResult<ObjectStoreUrl> {
    ObjectStoreUrl::parse(format!("{}://{}", url.scheme(), url.authority()))
}

/// A kernel error about `table` (what errors call it: "Delta table t at s3://...") as
/// the statement's fault (4xx: no such table or version, a reader feature we lack, a
/// corrupt log), but storage failures as what they are.
fn kernel_error(table: &str, version: Version, e: delta_kernel::Error) -> DataFusionError {
    match e {
        delta_kernel::Error::ObjectStore(o) => DataFusionError::ObjectStore(Box::new(o)),
        other if is_missing(&other) => no_table(table, version, &other),
        other => DataFusionError::Plan(format!("cannot read {table} ({version}): {other}")),
    }
}

/// Whether the kernel's error says there is no table (or no such version) there: an
/// empty or missing `_delta_log`.
pub(crate) fn is_missing(e: &delta_kernel::Error) -> bool {
    matches!(
        e,
        delta_kernel::Error::FileNotFound(_)
            | delta_kernel::Error::MissingVersion
            | delta_kernel::Error::InvalidTableLocation(_)
    ) || e.to_string().contains("No files in log segment")
}

fn no_table(table: &str, version: Version, e: &delta_kernel::Error) -> DataFusionError {
    DataFusionError::Plan(format!(
        "{table} ({version}): no such Delta table or version: {e} (a Delta table's \
         directory holds a _delta_log)"
    ))
}

/// One column of a Delta table: its logical name and type, where it is read from.
#[derive(Debug, Clone)]
struct DeltaColumn {
    field: FieldRef,
    /// The name in the Parquet files (or in `partitionValues`): the logical name unless
    /// column mapping gives it another.
    physical: String,
    partition: bool,
}

/// A Delta table at one snapshot: its provider plans a Parquet scan of the snapshot's
/// files (see the module docs).
pub struct DeltaTable {
    location: String,
    root: Url,
    store_url: ObjectStoreUrl,
    snapshot: SnapshotRef,
    engine: Arc<dyn Engine>,
    schema: SchemaRef,
    columns: Vec<DeltaColumn>,
    /// The files of each predicate scanned so far: the planner sizes a scan before it
    /// plans it ([`crate::plan::dimension_joins`]), with the same filters, and the
    /// snapshot is fixed, so the second read of the log would give these. A provider
    /// lives for one query (the catalog opens the table for each).
    files_read: std::sync::Mutex<HashMap<String, Vec<DeltaFile>>>,
}

impl fmt::Debug for DeltaTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaTable")
            .field("location", &self.location)
            .field("version", &self.snapshot.version())
            .finish()
    }
}

impl DeltaTable {
    fn try_new(
        location: &str,
        root: Url,
        store_url: ObjectStoreUrl,
        snapshot: SnapshotRef,
        engine: Arc<dyn Engine>,
    ) -> DfResult<Self> {
        let config = snapshot.table_configuration();
        let mapping = config.column_mapping_mode();
        let partitions = config.metadata().partition_columns().to_vec();
        let kernel_schema = snapshot.schema();
        let arrow = Schema::try_from_kernel(kernel_schema.as_ref()).map_err(|e| {
            DataFusionError::Plan(format!(
                "{location}: its schema has a type lambdafusion cannot read: {e}"
            ))
        })?;
        let mut columns = Vec::with_capacity(arrow.fields().len());
        for (kernel_field, field) in kernel_schema.fields().zip(arrow.fields()) {
            let physical = match mapping {
                ColumnMappingMode::None => kernel_field.name().clone(),
                ColumnMappingMode::Id | ColumnMappingMode::Name => {
                    if nested(field.data_type()) {
                        return Err(DataFusionError::Plan(format!(
                            "{location}: column {} is nested ({}) and the \
                             table uses column mapping; nested columns under column mapping \
                             are not supported yet",
                            field.name(),
                            field.data_type()
                        )));
                    }
                    match kernel_field
                        .get_config_value(&ColumnMetadataKey::ColumnMappingPhysicalName)
                    {
                        Some(MetadataValue::String(name)) => name.clone(),
                        _ => {
                            return Err(DataFusionError::Plan(format!(
                                "{location}: column {} has no physical name \
                                 although the table uses column mapping",
                                field.name()
                            )))
                        }
                    }
                }
            };
            columns.push(DeltaColumn {
                // No metadata: the kernel's (column mapping ids) is not the query's business.
                field: Arc::new(Field::new(
                    field.name(),
                    field.data_type().clone(),
                    field.is_nullable(),
                )),
                partition: partitions.contains(kernel_field.name()),
                physical,
            });
        }
        let schema = Arc::new(Schema::new(
            columns.iter().map(|c| c.field.clone()).collect::<Vec<_>>(),
        ));
        Ok(Self {
            location: location.to_string(),
            root,
            store_url,
            snapshot,
            engine,
            schema,
            columns,
            files_read: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The table's directory, a URL ending in `/`.
    pub fn root(&self) -> &Url {
        &self.root
    }

    /// Its partition columns (logical names), in the log's order.
    pub fn partition_columns(&self) -> Vec<String> {
        self.snapshot
            .table_configuration()
            .metadata()
            .partition_columns()
            .to_vec()
    }

    /// Whether its files name columns other than the columns' names (column mapping).
    pub fn maps_columns(&self) -> bool {
        self.snapshot.table_configuration().column_mapping_mode() != ColumnMappingMode::None
    }

    /// The files of the snapshot that `predicate` may match (data skipping), read from
    /// the log once per predicate.
    async fn files(&self, predicate: Option<Predicate>) -> DfResult<Vec<DeltaFile>> {
        let key = format!("{predicate:?}");
        if let Some(files) = self.files_read.lock().unwrap().get(&key) {
            return Ok(files.clone());
        }
        let files = self.read_files(predicate).await?;
        self.files_read.lock().unwrap().insert(key, files.clone());
        Ok(files)
    }

    /// The snapshot's files (those `predicate` may match), from its log.
    async fn read_files(&self, predicate: Option<Predicate>) -> DfResult<Vec<DeltaFile>> {
        let snapshot = self.snapshot.clone();
        let engine = self.engine.clone();
        let location = self.location.clone();
        let version = Version::At(self.snapshot.version());
        tokio::task::spawn_blocking(move || -> DfResult<Vec<DeltaFile>> {
            let scan = snapshot
                .scan_builder()
                .with_predicate(predicate.map(Arc::new))
                .build()
                .map_err(|e| kernel_error(&location, version, e))?;
            let mut files = Vec::new();
            for metadata in scan
                .scan_metadata(engine.as_ref())
                .map_err(|e| kernel_error(&location, version, e))?
            {
                let metadata = metadata.map_err(|e| kernel_error(&location, version, e))?;
                let (data, selection) = metadata.scan_files.into_parts();
                let data = ArrowEngineData::try_from_engine_data(data)
                    .map_err(|e| kernel_error(&location, version, e))?;
                read_scan_files(data.record_batch(), &selection, &mut files)?;
            }
            Ok(files)
        })
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
    }

    /// The object path of a file of the log (a URL-encoded path relative to the table's
    /// directory, or an absolute URL). The log is data a table's writer controls: a file
    /// must lie inside the table's directory (no `..`, no absolute path elsewhere), or a
    /// crafted log would read what the caller may not.
    fn object_path(&self, path: &str) -> DfResult<Path> {
        let url = match Url::parse(path) {
            Ok(absolute) => absolute,
            Err(_) => self.root.join(path).map_err(|e| {
                DataFusionError::Plan(format!(
                    "{}: file {path} is not a valid path: {e}",
                    self.location
                ))
            })?,
        };
        inside(&self.root, &url).map_err(|why| {
            DataFusionError::Plan(format!(
                "{}: the log names file {path}, {why}",
                self.location
            ))
        })?;
        Path::from_url_path(url.path()).map_err(|e| DataFusionError::External(Box::new(e)))
    }
}

/// Checks that `url` lies inside the table directory `root` (a URL ending in `/`).
pub(crate) fn inside(root: &Url, url: &Url) -> Result<(), String> {
    let decoded = Path::from_url_path(url.path()).map_err(|e| format!("an invalid path: {e}"))?;
    let root_path =
        Path::from_url_path(root.path()).map_err(|e| format!("an invalid root: {e}"))?;
    let same_store = url.scheme() == root.scheme() && url.authority() == root.authority();
    let below = decoded
        .prefix_match(&root_path)
        .is_some_and(|mut rest| rest.next().is_some());
    if same_store && below {
        Ok(())
    } else {
        Err(format!(
            "which lies outside the table's directory {root}: lambdafusion reads only files \
             inside it"
        ))
    }
}

/// Whether a type holds fields of its own.
fn nested(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Struct(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::ListView(_)
            | DataType::FixedSizeList(_, _)
            | DataType::Map(_, _)
    )
}

/// One file of a snapshot, as the log lists it.
#[derive(Debug, Clone)]
struct DeltaFile {
    path: String,
    size: u64,
    /// Rows left after deletions, when the log counts them (`numRecords`).
    live_rows: Option<u64>,
    partition_values: HashMap<String, Option<String>>,
    deletion_vector: Option<Deletions>,
}

/// A file's deletion vector as the log describes it, carried to the task that reads the
/// file (it is loaded there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deletions {
    storage_type: String,
    path_or_inline_dv: String,
    offset: Option<i32>,
    size_in_bytes: i32,
    cardinality: i64,
    /// The file's rows before deletions: a row selection must cover them all.
    rows: u64,
}

impl Deletions {
    fn descriptor(&self) -> Result<DeletionVectorDescriptor, delta_kernel::Error> {
        let storage_type: DeletionVectorStorageType = self.storage_type.parse()?;
        DeletionVectorDescriptor::try_new(
            storage_type,
            self.path_or_inline_dv.clone(),
            self.offset,
            self.size_in_bytes,
            self.cardinality,
        )
    }

    /// Where the vector is stored (`None`: inline in the log).
    fn location(&self, root: &Url) -> Result<Option<Url>, delta_kernel::Error> {
        self.descriptor()?.absolute_path(root)
    }

    /// The file's rows before deletions: a row selection must cover them all.
    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// The deleted row positions, read through `engine`.
    pub(crate) fn load(
        &self,
        engine: &dyn Engine,
        root: &Url,
    ) -> Result<Vec<u64>, delta_kernel::Error> {
        self.descriptor()?
            .row_indexes(engine.storage_handler(), root)
    }
}

/// Reads the kernel's scan rows (one per selected file) into `files`.
fn read_scan_files(
    batch: &RecordBatch,
    selection: &[bool],
    files: &mut Vec<DeltaFile>,
) -> DfResult<()> {
    let column = |name: &str| {
        batch.column_by_name(name).ok_or_else(|| {
            DataFusionError::Internal(format!("Delta scan rows without a {name} column"))
        })
    };
    let paths = column("path")?.as_string::<i32>();
    let sizes = column("size")?.as_primitive::<Int64Type>();
    let stats = column("stats")?.as_string::<i32>();
    let dvs = column("deletionVector")?.as_struct();
    let constants = column("fileConstantValues")?.as_struct();
    let partitions = constants
        .column_by_name("partitionValues")
        .ok_or_else(|| DataFusionError::Internal("Delta scan rows without partitionValues".into()))?
        .as_map();
    for row in 0..batch.num_rows() {
        if !selection.get(row).copied().unwrap_or(true) || paths.is_null(row) {
            continue;
        }
        let rows = (!stats.is_null(row))
            .then(|| serde_json::from_str::<serde_json::Value>(stats.value(row)).ok())
            .flatten()
            .and_then(|s| s.get("numRecords").and_then(|n| n.as_u64()));
        let path = paths.value(row).to_string();
        let deletion_vector = if dvs.is_null(row) {
            None
        } else {
            Some(read_deletions(dvs, row, rows, &path)?)
        };
        files.push(DeltaFile {
            size: sizes.value(row).max(0) as u64,
            live_rows: rows.map(|n| {
                n.saturating_sub(
                    deletion_vector
                        .as_ref()
                        .map_or(0, |d| d.cardinality.max(0) as u64),
                )
            }),
            partition_values: map_row(partitions, row),
            deletion_vector,
            path,
        });
    }
    Ok(())
}

fn read_deletions(
    dvs: &StructArray,
    row: usize,
    rows: Option<u64>,
    path: &str,
) -> DfResult<Deletions> {
    let field = |name: &str| {
        dvs.column_by_name(name).ok_or_else(|| {
            DataFusionError::Internal(format!("Delta deletion vectors without {name}"))
        })
    };
    let rows = rows.ok_or_else(|| {
        DataFusionError::Plan(format!(
            "Delta file {path} has a deletion vector but the log has no numRecords for it"
        ))
    })?;
    let offset = field("offset")?.as_primitive::<Int32Type>();
    Ok(Deletions {
        storage_type: field("storageType")?
            .as_string::<i32>()
            .value(row)
            .to_string(),
        path_or_inline_dv: field("pathOrInlineDv")?
            .as_string::<i32>()
            .value(row)
            .to_string(),
        offset: (!offset.is_null(row)).then(|| offset.value(row)),
        size_in_bytes: field("sizeInBytes")?.as_primitive::<Int32Type>().value(row),
        cardinality: field("cardinality")?.as_primitive::<Int64Type>().value(row),
        rows,
    })
}

/// Row `row` of a string-to-string map column.
fn map_row(map: &MapArray, row: usize) -> HashMap<String, Option<String>> {
    if map.is_null(row) {
        return HashMap::new();
    }
    let entries = map.value(row);
    let (Some(keys), Some(values)) = (
        entries.column(0).as_any().downcast_ref::<StringArray>(),
        entries.column(1).as_any().downcast_ref::<StringArray>(),
    ) else {
        return HashMap::new();
    };
    (0..entries.len())
        .map(|i| {
            let value = (!values.is_null(i)).then(|| values.value(i).to_string());
            (keys.value(i).to_string(), value)
        })
        .collect()
}

/// A partition value as the log writes it, as a value of the column's type.
fn partition_value(raw: Option<&str>, data_type: &DataType) -> DfResult<ScalarValue> {
    let Some(raw) = raw else {
        return ScalarValue::try_from(data_type);
    };
    match data_type {
        // The log writes timestamps as `2026-01-02 03:04:05[.ffffff]`, in UTC.
        DataType::Timestamp(unit, tz) => {
            let nanos =
                datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(raw)?;
            let value = match unit {
                TimeUnit::Second => {
                    ScalarValue::TimestampSecond(Some(nanos / 1_000_000_000), tz.clone())
                }
                TimeUnit::Millisecond => {
                    ScalarValue::TimestampMillisecond(Some(nanos / 1_000_000), tz.clone())
                }
                TimeUnit::Microsecond => {
                    ScalarValue::TimestampMicrosecond(Some(nanos / 1_000), tz.clone())
                }
                TimeUnit::Nanosecond => ScalarValue::TimestampNanosecond(Some(nanos), tz.clone()),
            };
            Ok(value)
        }
        _ => ScalarValue::try_from_string(raw.to_string(), data_type),
    }
}

#[async_trait]
impl TableProvider for DeltaTable {
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
        // Filters skip files and row groups; the rows are filtered again above the scan.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let files = self.files(kernel_predicate(filters)).await?;
        // The scan's table schema: file columns, then partition columns (physical names).
        let file_columns: Vec<usize> = (0..self.columns.len())
            .filter(|&i| !self.columns[i].partition)
            .collect();
        let partition_columns: Vec<usize> = (0..self.columns.len())
            .filter(|&i| self.columns[i].partition)
            .collect();
        let physical_field = |i: usize| {
            let c = &self.columns[i];
            Arc::new(Field::new(
                &c.physical,
                c.field.data_type().clone(),
                c.field.is_nullable(),
            ))
        };
        let table_schema = TableSchema::builder(Arc::new(Schema::new(
            file_columns
                .iter()
                .map(|&i| physical_field(i))
                .collect::<Vec<_>>(),
        )))
        .with_table_partition_cols(
            partition_columns
                .iter()
                .map(|&i| physical_field(i))
                .collect::<Vec<_>>(),
        )
        .build();
        let scan_index = |logical: usize| -> usize {
            let position = |list: &[usize]| list.iter().position(|&i| i == logical);
            position(&file_columns)
                .or_else(|| position(&partition_columns).map(|p| file_columns.len() + p))
                .expect("every column is a file or a partition column")
        };

        let mut source = ParquetSource::new(table_schema.clone());
        let renamed = self.columns.iter().any(|c| c.physical != *c.field.name());
        if !renamed {
            if let Some(predicate) = conjunction(filters.iter().cloned()) {
                let df_schema = DFSchema::try_from(table_schema.table_schema().as_ref().clone())?;
                if let Ok(expr) = state.create_physical_expr(predicate, &df_schema) {
                    source = source.with_predicate(expr);
                }
            }
        }

        let mut partitioned = Vec::with_capacity(files.len());
        let mut deletions = BTreeMap::new();
        for file in &files {
            let location = self.object_path(&file.path)?;
            let values = partition_columns
                .iter()
                .map(|&i| {
                    let c = &self.columns[i];
                    let raw = file
                        .partition_values
                        .get(&c.physical)
                        .or_else(|| file.partition_values.get(c.field.name()))
                        .cloned()
                        .flatten();
                    partition_value(raw.as_deref(), c.field.data_type())
                })
                .collect::<DfResult<Vec<_>>>()?;
            if let Some(d) = &file.deletion_vector {
                if let Some(vector) = d.location(&self.root).map_err(|e| {
                    DataFusionError::Plan(format!(
                        "{}: the deletion vector of {}: {e}",
                        self.location, file.path
                    ))
                })? {
                    inside(&self.root, &vector).map_err(|why| {
                        DataFusionError::Plan(format!(
                            "{}: the deletion vector of {} is {vector}, {why}",
                            self.location, file.path
                        ))
                    })?;
                }
                deletions.insert(
                    location.to_string(),
                    crate::format_scan::Deleted::Delta(d.clone()),
                );
            }
            partitioned.push(
                PartitionedFile::new_from_meta(ObjectMeta {
                    location,
                    last_modified: Default::default(),
                    size: file.size,
                    e_tag: None,
                    version: None,
                })
                .with_partition_values(values),
            );
        }
        let logical: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..self.columns.len()).collect());
        if partitioned.is_empty() {
            // No file can match (or the snapshot has none): one partition of no rows, as
            // DataFusion plans an empty listing.
            let schema = Arc::new(self.schema.project(&logical)?);
            return Ok(Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
                schema,
            )));
        }
        let groups = crate::plan::split_files(state, partitioned, true);

        let scan = FileScanConfigBuilder::new(self.store_url.clone(), Arc::new(source))
            .with_statistics(statistics(&files, &table_schema))
            .with_file_groups(groups)
            .with_projection_indices(Some(logical.iter().map(|&i| scan_index(i)).collect()))?
            .with_limit(limit)
            .build();
        let mut plan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(scan);
        if !deletions.is_empty() {
            plan = Arc::new(crate::format_scan::FormatScanExec::try_new(
                plan,
                self.root.clone(),
                deletions,
            )?);
        }
        if renamed {
            let exprs = logical
                .iter()
                .enumerate()
                .map(|(position, &i)| {
                    let c = &self.columns[i];
                    (
                        Arc::new(PhysicalColumn::new(&c.physical, position))
                            as Arc<dyn datafusion::physical_plan::PhysicalExpr>,
                        c.field.name().clone(),
                    )
                })
                .collect::<Vec<_>>();
            plan = Arc::new(ProjectionExec::try_new(exprs, plan)?);
        }
        Ok(plan)
    }
}

/// What the log says of the files' size, for DataFusion's join planning (a small side is
/// built and broadcast, as for a Parquet table whose footers it read). Inexact: the log's
/// counts are the writers', and no answer is taken from them.
fn statistics(files: &[DeltaFile], schema: &TableSchema) -> datafusion::common::Statistics {
    use datafusion::common::stats::Precision;
    let mut stats = datafusion::common::Statistics::new_unknown(schema.table_schema());
    let rows: Option<u64> = files.iter().map(|f| f.live_rows).sum();
    if let Some(rows) = rows {
        stats.num_rows = Precision::Inexact(rows as usize);
    }
    stats.total_byte_size = Precision::Inexact(files.iter().map(|f| f.size as usize).sum());
    stats
}

/// The filters the kernel can skip files with: conjuncts of comparisons between a column
/// and a literal, `IS [NOT] NULL`, and `AND`/`OR`/`NOT` of those. Others are left to the
/// scan (dropping a conjunct only keeps more files).
fn kernel_predicate(filters: &[Expr]) -> Option<Predicate> {
    let parts: Vec<Predicate> = filters
        .iter()
        .flat_map(split_conjunction)
        .filter_map(exact_predicate)
        .collect();
    (!parts.is_empty()).then(|| Predicate::and_from(parts))
}

/// `expr` as a kernel predicate, or `None` when any part of it has no exact equivalent.
fn exact_predicate(expr: &Expr) -> Option<Predicate> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => Some(Predicate::and(
                exact_predicate(left)?,
                exact_predicate(right)?,
            )),
            Operator::Or => Some(Predicate::or(
                exact_predicate(left)?,
                exact_predicate(right)?,
            )),
            _ => {
                let (column, op, value) = match (left.as_ref(), right.as_ref()) {
                    (Expr::Column(c), Expr::Literal(v, _)) => (c, *op, v),
                    (Expr::Literal(v, _), Expr::Column(c)) => (c, op.swap()?, v),
                    _ => return None,
                };
                let column = kernel_column(column);
                let value = Expression::literal(kernel_scalar(value)?);
                Some(match op {
                    Operator::Eq => column.eq(value),
                    Operator::NotEq => column.ne(value),
                    Operator::Lt => column.lt(value),
                    Operator::LtEq => column.le(value),
                    Operator::Gt => column.gt(value),
                    Operator::GtEq => column.ge(value),
                    _ => return None,
                })
            }
        },
        Expr::IsNull(inner) => match inner.as_ref() {
            Expr::Column(c) => Some(kernel_column(c).is_null()),
            _ => None,
        },
        Expr::IsNotNull(inner) => match inner.as_ref() {
            Expr::Column(c) => Some(kernel_column(c).is_not_null()),
            _ => None,
        },
        Expr::Not(inner) => Some(Predicate::not(exact_predicate(inner)?)),
        _ => None,
    }
}

fn kernel_column(column: &DfColumn) -> Expression {
    Expression::column([column.name.as_str()])
}

/// A literal as the kernel's scalar, for the types whose comparison means the same.
fn kernel_scalar(value: &ScalarValue) -> Option<Scalar> {
    Some(match value {
        ScalarValue::Boolean(Some(v)) => Scalar::Boolean(*v),
        ScalarValue::Int8(Some(v)) => Scalar::Byte(*v),
        ScalarValue::Int16(Some(v)) => Scalar::Short(*v),
        ScalarValue::Int32(Some(v)) => Scalar::Integer(*v),
        ScalarValue::Int64(Some(v)) => Scalar::Long(*v),
        ScalarValue::Float32(Some(v)) if !v.is_nan() => Scalar::Float(*v),
        ScalarValue::Float64(Some(v)) if !v.is_nan() => Scalar::Double(*v),
        ScalarValue::Utf8(Some(v))
        | ScalarValue::LargeUtf8(Some(v))
        | ScalarValue::Utf8View(Some(v)) => Scalar::String(v.clone()),
        ScalarValue::Date32(Some(v)) => Scalar::Date(*v),
        ScalarValue::TimestampMicrosecond(Some(v), Some(_)) => Scalar::Timestamp(*v),
        ScalarValue::TimestampMicrosecond(Some(v), None) => Scalar::TimestampNtz(*v),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_filters_reach_the_kernel() {
        use datafusion::prelude::{col, lit};
        let p = kernel_predicate(&[col("a").gt(lit(3i64)).and(col("b").eq(lit("x")))]);
        assert_eq!(
            p.unwrap().to_string(),
            "AND(Column(a) > 3, Column(b) = 'x')"
        );
        // A conjunct without an equivalent is dropped; a disjunction with one is dropped whole.
        let p = kernel_predicate(&[
            col("a").gt(lit(3i64)),
            (col("a") + lit(1i64)).eq(lit(2i64)),
            col("a")
                .eq(lit(1i64))
                .or((col("a") + lit(1i64)).eq(lit(2i64))),
        ]);
        assert_eq!(p.unwrap().to_string(), "Column(a) > 3");
        assert!(kernel_predicate(&[!lit(1i64).lt(col("a"))]).is_some());
        assert!(kernel_predicate(&[col("a").eq(lit(ScalarValue::Int64(None)))]).is_none());
    }

    #[test]
    fn partition_values_parse_as_the_log_writes_them() {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        assert_eq!(
            partition_value(Some("2026-01-02 03:04:05.000006"), &ts).unwrap(),
            ScalarValue::TimestampMicrosecond(Some(1_767_323_045_000_006), Some("UTC".into()))
        );
        assert_eq!(
            partition_value(Some("2026-01-02"), &DataType::Date32).unwrap(),
            ScalarValue::Date32(Some(20_455))
        );
        assert_eq!(
            partition_value(None, &DataType::Int32).unwrap(),
            ScalarValue::Int32(None)
        );
        assert!(partition_value(Some("x"), &DataType::Int32).is_err());
    }

    #[test]
    fn only_files_inside_the_table_directory_are_read() {
        let root = table_root("s3://b/t").unwrap();
        let ok = |u: &str| inside(&root, &Url::parse(u).unwrap()).is_ok();
        assert!(ok("s3://b/t/part-0.parquet"));
        assert!(ok("s3://b/t/p=1/part%20x.parquet"));
        assert!(ok(root.join("p=1/x.parquet").unwrap().as_str()));
        // Dot segments are resolved before the check; other buckets and schemes refused.
        assert!(!ok(root.join("../secret/x.parquet").unwrap().as_str()));
        assert!(!ok(root.join("p=1/../../x.parquet").unwrap().as_str()));
        assert!(!ok("s3://b/t2/x.parquet"));
        assert!(!ok("s3://b/t"));
        assert!(!ok("s3://b/t/"));
        assert!(!ok("s3://other/t/x.parquet"));
        assert!(!ok("file:///t/x.parquet"));
        let local = table_root("/data/t").unwrap();
        assert!(inside(&local, &Url::parse("file:///etc/passwd").unwrap()).is_err());
        assert!(inside(&local, &Url::parse("file:///data/t/x.parquet").unwrap()).is_ok());
    }

    #[test]
    fn table_roots_end_in_a_slash() {
        assert_eq!(table_root("s3://b/t").unwrap().as_str(), "s3://b/t/");
        assert_eq!(table_root("s3://b/t/").unwrap().as_str(), "s3://b/t/");
        assert_eq!(table_root("/tmp/t").unwrap().as_str(), "file:///tmp/t/");
        assert_eq!(
            store_url(&table_root("s3://b/t").unwrap())
                .unwrap()
                .as_str(),
            "s3://b/"
        );
    }
}
