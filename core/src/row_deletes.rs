//! Rows a table format deletes by position: Delta's deletion vectors and Iceberg's position
//! delete files. The scheduler decides which files have deleted rows and where those rows
//! are written down; the task that reads a data file loads its positions and hands the
//! Parquet scan a row selection that skips them, so no deleted row leaves the scan.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use delta_kernel::Engine;
use delta_kernel_engine::DefaultEngine;
use futures::TryStreamExt;
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

/// The position delete files that apply to one Iceberg data file (the scheduler chose them
/// by sequence number and `file_path` bounds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IcebergPositions {
    /// The data file as the table's metadata names it: the delete files' `file_path`.
    pub file: String,
    /// The data file's rows (its manifest's `record_count`).
    pub rows: u64,
    /// The delete files, Parquet with the columns `file_path` and `pos`.
    pub delete_files: Vec<DeleteFile>,
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
/// delete. The deletions travel as descriptions; the task that reads a file loads its
/// positions and hands the scan a row selection that skips those rows.
///
/// A leaf: it holds its scan rather than having it as a child, so that no optimizer rule
/// puts anything (a coalesce, a repartition) between the two.
#[derive(Debug)]
pub struct DeletionVectorExec {
    scan: Arc<dyn ExecutionPlan>,
    root: Url,
    /// Object path -> where that file's deleted rows are written down.
    deletions: Arc<BTreeMap<String, Deleted>>,
}

impl DeletionVectorExec {
    /// Wraps `scan`, which must be a file scan ([`DataSourceExec`] of Parquet files).
    pub fn try_new(
        scan: Arc<dyn ExecutionPlan>,
        root: Url,
        deletions: BTreeMap<String, Deleted>,
    ) -> DfResult<Self> {
        scan_config(&scan)?;
        Ok(Self {
            scan,
            root,
            deletions: Arc::new(deletions),
        })
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

    /// The inverse of [`Self::deletions_json`].
    pub fn from_json(scan: Arc<dyn ExecutionPlan>, root: &str, json: &str) -> DfResult<Self> {
        let root = Url::parse(root)
            .map_err(|e| DataFusionError::Internal(format!("deletion vector root: {e}")))?;
        let deletions = serde_json::from_str(json)
            .map_err(|e| DataFusionError::Internal(format!("deletions: {e}")))?;
        Self::try_new(scan, root, deletions)
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

impl DisplayAs for DeletionVectorExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "DeletionVectorExec: files_with_deletions={}, scan=",
            self.deletions.len()
        )?;
        match self.scan.downcast_ref::<DataSourceExec>() {
            Some(scan) => scan.fmt_as(t, f),
            None => write!(f, "{}", self.scan.name()),
        }
    }
}

impl ExecutionPlan for DeletionVectorExec {
    fn name(&self) -> &str {
        "DeletionVectorExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.scan.properties()
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
        crate::plan::no_children("DeletionVectorExec", self, children)
    }

    fn partition_statistics(
        &self,
        partition: Option<usize>,
    ) -> DfResult<Arc<datafusion::common::Statistics>> {
        // Row counts and the like without the deletions would overstate: unknown.
        let _ = partition;
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
        let deletions = self.deletions.clone();
        let root = self.root.clone();
        let schema = self.schema();
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
            let engine: Arc<dyn Engine> = Arc::new(DefaultEngine::builder(store).build());
            let mut files = Vec::with_capacity(group.len());
            for file in group.files() {
                let (deleted, rows) = match deletions.get(file.object_meta.location.as_ref()) {
                    None => {
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
            config.file_groups[partition] = FileGroup::new(files);
            DataSourceExec::from_data_source(config).execute(partition, ctx)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(opened).try_flatten(),
        )))
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
    // One GET: delete files are small next to the data files they name.
    let bytes = store.get(&path).await?.bytes().await?;
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
}
