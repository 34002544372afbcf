//! A Parquet scan as a table format adjusts it in the task that reads the files:
//!
//! - **Rows deleted by position**: Delta's deletion vectors and Iceberg's position delete
//!   files. The scheduler decides which files have deleted rows and where those rows are
//!   written down; the task that reads a data file loads its positions and hands the
//!   Parquet scan a row selection that skips them, so no deleted row leaves the scan.
//! - **Columns by field id** (Iceberg): a column renamed, or dropped and added again under
//!   an old name, is found in each file by the field id the file's Parquet schema carries,
//!   not by its name ([`FieldIdAdapterFactory`]). DataFusion's plan encoding does not carry
//!   a scan's expression adapter, so the node carries the ids and sets the adapter in the
//!   task.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_expr_adapter::{
    DefaultPhysicalExprAdapterFactory, PhysicalExprAdapter, PhysicalExprAdapterFactory,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use delta_kernel::Engine;
use delta_kernel_engine::DefaultEngine;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use url::Url;

/// Where one data file's deleted rows are written down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Deleted {
    /// A Delta file's deletion vector, loaded through the Delta kernel.
    Delta(crate::delta::Deletions),
    /// An Iceberg data file's position delete files.
    Iceberg(IcebergPositions),
}

/// The delete files that apply to one Iceberg data file (the scheduler chose them by the
/// spec's rules: sequence numbers, partitions, `file_path` bounds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IcebergPositions {
    /// The data file as the table's metadata names it: the delete files' `file_path`.
    pub file: String,
    /// The data file's rows (its manifest's `record_count`).
    pub rows: u64,
    /// The position delete files, Parquet with the columns `file_path` and `pos`.
    pub delete_files: Vec<DeleteFile>,
    /// The equality delete files: a row whose key equals one of theirs is deleted.
    #[serde(default)]
    pub equality: Vec<EqualityDeletes>,
}

/// One Iceberg equality delete file as it applies to a scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EqualityDeletes {
    /// The delete file: Parquet with a column for each key field.
    pub file: DeleteFile,
    /// The key's field ids (`equality_ids`), as the delete file's columns carry them.
    pub field_ids: Vec<i32>,
    /// The key's columns in the scan's output, in the same order.
    pub columns: Vec<usize>,
}

/// One Iceberg position delete file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeleteFile {
    /// Its object path in the table's store.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

/// A Parquet scan that skips the rows its files' deletion vectors or position delete files
/// delete, and (given field ids) matches columns to each file by field id. The deletions
/// travel as descriptions; the task that reads a file loads its positions and hands the
/// scan a row selection that skips those rows.
///
/// A leaf: it holds its scan rather than having it as a child, so that no optimizer rule
/// puts anything (a coalesce, a repartition) between the two.
#[derive(Debug)]
pub struct FormatScanExec {
    scan: Arc<dyn ExecutionPlan>,
    root: Url,
    /// Object path -> where that file's deleted rows are written down.
    deletions: Arc<BTreeMap<String, Deleted>>,
    /// Column name -> field id, when columns are matched by field id (Iceberg).
    field_ids: Option<Arc<BTreeMap<String, i32>>>,
    /// The scan's columns this node outputs, when the scan reads more (equality delete
    /// keys the query does not select).
    output: Option<Vec<usize>>,
    properties: Arc<PlanProperties>,
}

impl FormatScanExec {
    /// Wraps `scan`, which must be a file scan ([`DataSourceExec`] of Parquet files).
    pub fn try_new(
        scan: Arc<dyn ExecutionPlan>,
        root: Url,
        deletions: BTreeMap<String, Deleted>,
    ) -> DfResult<Self> {
        scan_config(&scan)?;
        Ok(Self {
            properties: scan.properties().clone(),
            scan,
            root,
            deletions: Arc::new(deletions),
            field_ids: None,
            output: None,
        })
    }

    /// The same node over another scan of the table's files (the plan resized).
    pub fn with_scan(&self, scan: Arc<dyn ExecutionPlan>) -> DfResult<Self> {
        scan_config(&scan)?;
        let node = Self {
            properties: scan.properties().clone(),
            scan,
            root: self.root.clone(),
            deletions: self.deletions.clone(),
            field_ids: self.field_ids.clone(),
            output: None,
        };
        match self.output.clone() {
            Some(output) => node.with_output(output),
            None => Ok(node),
        }
    }

    /// Outputs only these columns of the scan (by index), which reads more.
    pub fn with_output(mut self, output: Vec<usize>) -> DfResult<Self> {
        let schema = Arc::new(self.scan.schema().project(&output)?);
        self.properties = Arc::new(
            self.scan
                .properties()
                .as_ref()
                .clone()
                .with_eq_properties(EquivalenceProperties::new(schema)),
        );
        self.output = Some(output);
        Ok(self)
    }

    /// The scan's columns this node outputs, when not all of them.
    pub fn output(&self) -> Option<&[usize]> {
        self.output.as_deref()
    }

    /// Matches the scan's columns to each file's by these field ids (column name -> id)
    /// rather than by name.
    pub fn with_field_ids(mut self, field_ids: BTreeMap<String, i32>) -> Self {
        self.field_ids = Some(Arc::new(field_ids));
        self
    }

    /// The scan it reads through.
    pub fn scan(&self) -> &Arc<dyn ExecutionPlan> {
        &self.scan
    }

    /// The scan's files and their partitions.
    pub fn scan_config(&self) -> &FileScanConfig {
        scan_config(&self.scan).expect("checked at construction")
    }

    /// The table directory Delta vectors' paths are relative to.
    pub fn root(&self) -> &Url {
        &self.root
    }

    /// The deletions, by object path, as JSON (how they travel to the tasks).
    pub fn deletions_json(&self) -> DfResult<String> {
        serde_json::to_string(self.deletions.as_ref())
            .map_err(|e| DataFusionError::Internal(format!("deletions: {e}")))
    }

    /// The field ids by column name as JSON, empty when columns are matched by name.
    pub fn field_ids_json(&self) -> DfResult<String> {
        match &self.field_ids {
            None => Ok(String::new()),
            Some(ids) => serde_json::to_string(ids.as_ref())
                .map_err(|e| DataFusionError::Internal(format!("field ids: {e}"))),
        }
    }

    /// The inverse of [`Self::deletions_json`], [`Self::field_ids_json`] and
    /// [`Self::output`].
    pub fn from_json(
        scan: Arc<dyn ExecutionPlan>,
        root: &str,
        deletions: &str,
        field_ids: &str,
        output: Option<Vec<usize>>,
    ) -> DfResult<Self> {
        let root = Url::parse(root)
            .map_err(|e| DataFusionError::Internal(format!("table format scan root: {e}")))?;
        let deletions = serde_json::from_str(deletions)
            .map_err(|e| DataFusionError::Internal(format!("deletions: {e}")))?;
        let mut scan = Self::try_new(scan, root, deletions)?;
        if let Some(output) = output {
            scan = scan.with_output(output)?;
        }
        if field_ids.is_empty() {
            return Ok(scan);
        }
        let ids = serde_json::from_str(field_ids)
            .map_err(|e| DataFusionError::Internal(format!("field ids: {e}")))?;
        Ok(scan.with_field_ids(ids))
    }
}

fn scan_config(plan: &Arc<dyn ExecutionPlan>) -> DfResult<&FileScanConfig> {
    plan.downcast_ref::<DataSourceExec>()
        .and_then(|scan| scan.data_source().downcast_ref::<FileScanConfig>())
        .ok_or_else(|| {
            DataFusionError::Internal(format!(
                "deletion vectors apply to a file scan, not to {}",
                plan.name()
            ))
        })
}

impl DisplayAs for FormatScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "FormatScanExec: files_with_deletions={}, ",
            self.deletions.len()
        )?;
        let equality: std::collections::BTreeSet<&str> = self
            .deletions
            .values()
            .filter_map(|d| match d {
                Deleted::Iceberg(p) => Some(p.equality.iter().map(|e| e.file.path.as_str())),
                Deleted::Delta(_) => None,
            })
            .flatten()
            .collect();
        if !equality.is_empty() {
            write!(f, "equality_delete_files={}, ", equality.len())?;
        }
        if self.field_ids.is_some() {
            write!(f, "columns_by_field_id, ")?;
        }
        write!(f, "scan=")?;
        match self.scan.downcast_ref::<DataSourceExec>() {
            Some(scan) => scan.fmt_as(t, f),
            None => write!(f, "{}", self.scan.name()),
        }
    }
}

impl ExecutionPlan for FormatScanExec {
    fn name(&self) -> &str {
        "FormatScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        crate::plan::no_children("FormatScanExec", self, children)
    }

    fn partition_statistics(
        &self,
        partition: Option<usize>,
    ) -> DfResult<Arc<datafusion::common::Statistics>> {
        if self.deletions.is_empty() && self.output.is_none() {
            // The scan's own: a leaf has no inputs for DataFusion's statistics walk.
            #[allow(deprecated)]
            return self.scan.partition_statistics(partition);
        }
        // Row counts and the like without the deletions would overstate: unknown.
        Ok(Arc::new(datafusion::common::Statistics::new_unknown(
            &self.schema(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let mut config = self.scan_config().clone();
        if let Some(ids) = &self.field_ids {
            config.expr_adapter_factory = Some(Arc::new(FieldIdAdapterFactory {
                field_ids: ids.clone(),
            }));
        }
        let deletions = self.deletions.clone();
        let root = self.root.clone();
        let schema = self.schema();
        let output = self.output.clone();
        let opened = async move {
            let Some(group) = config.file_groups.get(partition).cloned() else {
                return Err(DataFusionError::Internal(format!(
                    "a scan with deletions has no partition {partition}"
                )));
            };
            let store = ctx.runtime_env().object_store(&config.object_store_url)?;
            let iceberg = iceberg_positions(
                store.clone(),
                group.files().iter().filter_map(|f| {
                    match deletions.get(f.object_meta.location.as_ref()) {
                        Some(Deleted::Iceberg(p)) => Some(p),
                        _ => None,
                    }
                }),
            )
            .await?;
            let engine: Arc<dyn Engine> = Arc::new(DefaultEngine::builder(store.clone()).build());
            let mut files = Vec::with_capacity(group.len());
            for file in group.files() {
                let (deleted, rows) = match deletions.get(file.object_meta.location.as_ref()) {
                    None => {
                        files.push(file.clone());
                        continue;
                    }
                    Some(Deleted::Iceberg(p)) if p.delete_files.is_empty() => {
                        // Equality deletes only: applied to the rows below.
                        files.push(file.clone());
                        continue;
                    }
                    Some(Deleted::Iceberg(p)) => (
                        iceberg.get(p.file.as_str()).cloned().unwrap_or_default(),
                        p.rows,
                    ),
                    Some(Deleted::Delta(d)) => {
                        let (engine, root, path) =
                            (engine.clone(), root.clone(), file.path().to_string());
                        let d = d.clone();
                        let rows = d.rows();
                        let deleted =
                            tokio::task::spawn_blocking(move || d.load(engine.as_ref(), &root))
                                .await
                                .map_err(|e| DataFusionError::External(Box::new(e)))?
                                .map_err(|e| {
                                    DataFusionError::Execution(format!(
                                        "cannot read the deletion vector of {path}: {e}"
                                    ))
                                })?;
                        (deleted, rows)
                    }
                };
                files.push(file.clone().with_extension(
                    datafusion::datasource::physical_plan::parquet::ParquetRowSelection::new(
                        keep_selection(&deleted, rows, file.path().as_ref())?,
                    ),
                ));
            }
            let equality: Vec<Vec<EqualityDeletes>> = files
                .iter()
                .map(|f| match deletions.get(f.object_meta.location.as_ref()) {
                    Some(Deleted::Iceberg(p)) => p.equality.clone(),
                    _ => Vec::new(),
                })
                .collect();
            if equality.iter().all(|e| e.is_empty()) {
                config.file_groups[partition] = FileGroup::new(files);
                let stream = DataSourceExec::from_data_source(config).execute(partition, ctx)?;
                return Ok(project(stream, output));
            }
            // Equality deletes filter each file's rows by its own delete files: one file at a
            // time, the key sets loaded once for the partition.
            let mut keys = EqualityKeys::default();
            let scan_schema = DataSourceExec::from_data_source(config.clone()).schema();
            for e in equality.iter().flatten() {
                keys.load(store.as_ref(), e, &scan_schema).await?;
            }
            let keys = Arc::new(keys);
            let mut streams = Vec::with_capacity(files.len());
            for (file, equality) in files.into_iter().zip(equality) {
                let mut one = config.clone();
                one.file_groups = vec![FileGroup::new(vec![file])];
                let stream = DataSourceExec::from_data_source(one).execute(0, ctx.clone())?;
                let keys = keys.clone();
                streams.push(stream.and_then(move |batch| {
                    let keys = keys.clone();
                    let equality = equality.clone();
                    async move { keys.keep(&batch, &equality) }
                }));
            }
            let stream: SendableRecordBatchStream = Box::pin(RecordBatchStreamAdapter::new(
                scan_schema,
                futures::stream::iter(streams).flatten(),
            ));
            Ok(project(stream, output))
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(opened).try_flatten(),
        )))
    }
}

/// `stream` with only the `output` columns, when given.
fn project(
    stream: SendableRecordBatchStream,
    output: Option<Vec<usize>>,
) -> SendableRecordBatchStream {
    let Some(output) = output else {
        return stream;
    };
    let schema = match stream.schema().project(&output) {
        Ok(schema) => Arc::new(schema),
        Err(e) => {
            return Box::pin(RecordBatchStreamAdapter::new(
                stream.schema(),
                futures::stream::once(async move { Err(e.into()) }),
            ))
        }
    };
    Box::pin(RecordBatchStreamAdapter::new(
        schema,
        stream.and_then(move |batch| {
            let projected = batch.project(&output).map_err(DataFusionError::from);
            async move { projected }
        }),
    ))
}

/// The keys of a partition's equality delete files, one set for each key (its columns in
/// the scan's output), rows encoded by Arrow's row format so that nulls equal nulls, as
/// the spec wants.
#[derive(Default)]
struct EqualityKeys {
    /// Delete files loaded already.
    loaded: HashSet<String>,
    /// Key columns -> the converter of their types and the deleted keys.
    sets: HashMap<Vec<usize>, (RowConverter, HashSet<OwnedRow>)>,
}

impl EqualityKeys {
    /// Adds the keys of `deletes`, its columns cast to the scan's types.
    async fn load(
        &mut self,
        store: &dyn ObjectStore,
        deletes: &EqualityDeletes,
        scan_schema: &SchemaRef,
    ) -> DfResult<()> {
        if !self.loaded.insert(deletes.file.path.clone()) {
            return Ok(());
        }
        let failed = |e: String| {
            DataFusionError::Execution(format!(
                "cannot read the Iceberg equality delete file {}: {e}",
                deletes.file.path
            ))
        };
        let types: Vec<DataType> = deletes
            .columns
            .iter()
            .map(|&c| scan_schema.field(c).data_type().clone())
            .collect();
        if !self.sets.contains_key(&deletes.columns) {
            let converter = RowConverter::new(types.iter().cloned().map(SortField::new).collect())?;
            self.sets
                .insert(deletes.columns.clone(), (converter, HashSet::new()));
        }
        let (converter, set) = self.sets.get_mut(&deletes.columns).expect("inserted");
        let path = Path::parse(&deletes.file.path).map_err(|e| failed(e.to_string()))?;
        let bytes = store.get_range(&path, 0..deletes.file.size).await?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
        let file_schema = builder.schema().clone();
        let indices = deletes
            .field_ids
            .iter()
            .map(|id| {
                file_schema
                    .fields()
                    .iter()
                    .position(|f| {
                        f.metadata().get(PARQUET_FIELD_ID).map(String::as_str)
                            == Some(id.to_string().as_str())
                    })
                    .ok_or_else(|| failed(format!("it has no column of field id {id}")))
            })
            .collect::<DfResult<Vec<_>>>()?;
        for batch in builder.build()? {
            let batch = batch?;
            let columns = indices
                .iter()
                .zip(&types)
                .map(|(&i, t)| datafusion::arrow::compute::cast(batch.column(i), t))
                .collect::<Result<Vec<_>, _>>()?;
            let rows = converter.convert_columns(&columns)?;
            set.extend(rows.iter().map(|r| r.owned()));
        }
        Ok(())
    }

    /// The rows of `batch` (from one data file) no key of `deletes` deletes.
    fn keep(&self, batch: &RecordBatch, deletes: &[EqualityDeletes]) -> DfResult<RecordBatch> {
        if deletes.is_empty() || batch.num_rows() == 0 {
            return Ok(batch.clone());
        }
        let mut keep = vec![true; batch.num_rows()];
        let mut seen = HashSet::new();
        for d in deletes {
            if !seen.insert(&d.columns) {
                continue;
            }
            let (converter, set) = self.sets.get(&d.columns).ok_or_else(|| {
                DataFusionError::Internal("an equality delete file was not loaded".into())
            })?;
            let columns: Vec<_> = d.columns.iter().map(|&c| batch.column(c).clone()).collect();
            let rows = converter.convert_columns(&columns)?;
            for (i, row) in rows.iter().enumerate() {
                if keep[i] && set.contains(&row.owned()) {
                    keep[i] = false;
                }
            }
        }
        Ok(datafusion::arrow::compute::filter_record_batch(
            batch,
            &BooleanArray::from(keep),
        )?)
    }
}

/// Matches a table's columns to a Parquet file's by field id (the `PARQUET:field_id` of
/// the file's schema): each column the expressions name is renamed to the file's column of
/// its field id, or to a name the file lacks (read as `NULL`) when the file has no column
/// of that id — so a renamed column is found under its old name, and a column dropped and
/// added again under an old name does not read the old column's values. A file without
/// field ids is matched by name. DataFusion's own adapter then casts as for any file.
#[derive(Debug)]
pub struct FieldIdAdapterFactory {
    field_ids: Arc<BTreeMap<String, i32>>,
}

/// The field id metadata key parquet's Arrow reader sets.
const PARQUET_FIELD_ID: &str = "PARQUET:field_id";

impl PhysicalExprAdapterFactory for FieldIdAdapterFactory {
    fn create(
        &self,
        logical_file_schema: SchemaRef,
        physical_file_schema: SchemaRef,
    ) -> DfResult<Arc<dyn PhysicalExprAdapter>> {
        let in_file: HashMap<i32, &str> = physical_file_schema
            .fields()
            .iter()
            .filter_map(|f| {
                let id = f.metadata().get(PARQUET_FIELD_ID)?.parse().ok()?;
                Some((id, f.name().as_str()))
            })
            .collect();
        if in_file.is_empty() {
            return DefaultPhysicalExprAdapterFactory
                .create(logical_file_schema, physical_file_schema);
        }
        let mut renames = HashMap::new();
        let fields: Vec<Field> = logical_file_schema
            .fields()
            .iter()
            .map(|f| {
                let name = match self.field_ids.get(f.name()) {
                    Some(id) => in_file
                        .get(id)
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| format!("\u{1}iceberg field {id} not in this file")),
                    None => f.name().clone(),
                };
                if &name != f.name() {
                    renames.insert(f.name().clone(), name.clone());
                }
                f.as_ref().clone().with_name(name)
            })
            .collect();
        let renamed = Arc::new(Schema::new_with_metadata(
            fields,
            logical_file_schema.metadata().clone(),
        ));
        Ok(Arc::new(FieldIdAdapter {
            renames,
            inner: DefaultPhysicalExprAdapterFactory.create(renamed, physical_file_schema)?,
        }))
    }
}

/// [`FieldIdAdapterFactory`]'s adapter for one file.
#[derive(Debug)]
struct FieldIdAdapter {
    /// Table column name -> the name it has (or lacks) in this file.
    renames: HashMap<String, String>,
    inner: Arc<dyn PhysicalExprAdapter>,
}

impl PhysicalExprAdapter for FieldIdAdapter {
    fn rewrite(&self, expr: Arc<dyn PhysicalExpr>) -> DfResult<Arc<dyn PhysicalExpr>> {
        let renamed = expr
            .transform(|e| {
                if let Some(column) = e.downcast_ref::<Column>() {
                    if let Some(name) = self.renames.get(column.name()) {
                        return Ok(Transformed::yes(
                            Arc::new(Column::new(name, column.index())) as Arc<dyn PhysicalExpr>,
                        ));
                    }
                }
                Ok(Transformed::no(e))
            })
            .data()?;
        self.inner.rewrite(renamed)
    }
}

/// The deleted positions of `files` (Iceberg data files, by the name the delete files use),
/// reading each of their position delete files once.
async fn iceberg_positions<'a>(
    store: Arc<dyn ObjectStore>,
    files: impl Iterator<Item = &'a IcebergPositions>,
) -> DfResult<HashMap<String, Vec<u64>>> {
    let mut wanted = HashSet::new();
    let mut delete_files = std::collections::BTreeSet::new();
    for f in files {
        wanted.insert(f.file.clone());
        delete_files.extend(f.delete_files.iter().cloned());
    }
    let mut positions: HashMap<String, Vec<u64>> = HashMap::new();
    for delete in delete_files {
        read_position_deletes(store.clone(), &delete, &wanted, &mut positions)
            .await
            .map_err(|e| {
                DataFusionError::Execution(format!(
                    "cannot read the Iceberg position delete file {}: {e}",
                    delete.path
                ))
            })?;
    }
    Ok(positions)
}

/// Adds the positions `delete` lists for the `wanted` data files to `out`.
async fn read_position_deletes(
    store: Arc<dyn ObjectStore>,
    delete: &DeleteFile,
    wanted: &HashSet<String>,
    out: &mut HashMap<String, Vec<u64>>,
) -> DfResult<()> {
    let path = Path::parse(&delete.path).map_err(|e| DataFusionError::External(Box::new(e)))?;
    // One GET: delete files are small next to the data files they name, and no more than
    // the manifest's size is read.
    let bytes = store.get_range(&path, 0..delete.size).await?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)?;
    let schema = builder.schema().clone();
    let column = |name: &str| {
        schema.index_of(name).map_err(|_| {
            DataFusionError::Execution(format!(
                "it has no column {name}; it is not a position delete file"
            ))
        })
    };
    let mask = ProjectionMask::roots(
        builder.parquet_schema(),
        [column("file_path")?, column("pos")?],
    );
    for batch in builder.with_projection(mask).build()? {
        let batch = batch?;
        let paths = datafusion::arrow::compute::cast(
            batch.column_by_name("file_path").expect("projected"),
            &DataType::Utf8,
        )?;
        let paths = paths.as_string::<i32>();
        let pos = datafusion::arrow::compute::cast(
            batch.column_by_name("pos").expect("projected"),
            &DataType::Int64,
        )?;
        let pos = pos.as_primitive::<Int64Type>();
        for i in 0..batch.num_rows() {
            if paths.is_null(i) || pos.is_null(i) || !wanted.contains(paths.value(i)) {
                continue;
            }
            let p = pos.value(i);
            if p < 0 {
                return Err(DataFusionError::Execution(format!(
                    "it deletes position {p} of {}",
                    paths.value(i)
                )));
            }
            out.entry(paths.value(i).to_string())
                .or_default()
                .push(p as u64);
        }
    }
    Ok(())
}

/// The selection of a file's `rows` rows that keeps all but the `deleted` positions.
fn keep_selection(deleted: &[u64], rows: u64, file: &str) -> DfResult<RowSelection> {
    let mut deleted = deleted.to_vec();
    deleted.sort_unstable();
    deleted.dedup();
    let mut selectors = Vec::with_capacity(deleted.len() * 2 + 1);
    let mut next = 0u64;
    for &row in &deleted {
        if row >= rows {
            return Err(DataFusionError::Execution(format!(
                "the deletions of {file} delete row {row}, but the file has {rows} rows"
            )));
        }
        if row > next {
            selectors.push(RowSelector::select((row - next) as usize));
        }
        selectors.push(RowSelector::skip(1));
        next = row + 1;
    }
    if next < rows {
        selectors.push(RowSelector::select((rows - next) as usize));
    }
    Ok(RowSelection::from(selectors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_keeps_every_row_but_the_deleted_ones() {
        let selection = keep_selection(&[9, 0, 3, 3, 4], 10, "f").unwrap();
        let kept: Vec<usize> = {
            let mut kept = Vec::new();
            let mut row = 0;
            for s in selection.iter() {
                if !s.skip {
                    kept.extend(row..row + s.row_count);
                }
                row += s.row_count;
            }
            assert_eq!(row, 10, "the selection covers the whole file");
            kept
        };
        assert_eq!(kept, vec![1, 2, 5, 6, 7, 8]);
        assert!(keep_selection(&[], 0, "f").unwrap().iter().next().is_none());
        let err = keep_selection(&[10], 10, "f").unwrap_err().to_string();
        assert!(
            err.contains("delete row 10, but the file has 10 rows"),
            "{err}"
        );
    }

    #[test]
    fn columns_are_found_in_each_file_by_field_id() {
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        let with_id = |name: &str, t: DataType, id: i32| {
            Field::new(name, t, true).with_metadata(
                [(PARQUET_FIELD_ID.to_string(), id.to_string())]
                    .into_iter()
                    .collect(),
            )
        };
        // The table now: b (id 1, once a), c (id 4, a new column under a dropped one's name).
        let logical = Arc::new(Schema::new(vec![
            Field::new("b", DataType::Int64, true),
            Field::new("c", DataType::Int64, true),
        ]));
        // A file written before: a (id 1, an int then), c (id 2, the dropped column).
        let old_file = Arc::new(Schema::new(vec![
            with_id("a", DataType::Int32, 1),
            with_id("c", DataType::Utf8, 2),
        ]));
        let factory = FieldIdAdapterFactory {
            field_ids: Arc::new([("b".to_string(), 1), ("c".to_string(), 4)].into()),
        };
        let adapter = factory.create(logical.clone(), old_file).unwrap();
        let b = adapter
            .rewrite(Arc::new(Column::new("b", 0)))
            .unwrap()
            .to_string();
        assert!(b.contains("a@0") && b.contains("Int64"), "{b}");
        let c = adapter
            .rewrite(Arc::new(Column::new("c", 1)))
            .unwrap()
            .to_string();
        assert!(!c.contains("c@1") && c.contains("NULL"), "{c}");
        // A file without field ids is matched by name.
        let unnumbered = Arc::new(Schema::new(vec![Field::new("b", DataType::Int64, true)]));
        let adapter = factory.create(logical, unnumbered).unwrap();
        let b = adapter
            .rewrite(Arc::new(Column::new("b", 0)))
            .unwrap()
            .to_string();
        assert_eq!(b, "b@0");
    }
}
