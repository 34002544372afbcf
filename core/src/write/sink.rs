//! [`TableWriterExec`]: the top of a writing stage. Each partition it runs writes its
//! rows as files of the target's format under the target's location — routed to
//! `column=value/` directories for a partitioned write — and yields one row per file
//! written ([`file_list_schema`]): what the task's completion record carries to the
//! commit ([`super::commit()`]).
//!
//! Files are named `<job>-<partition>-<run>-<n>.<ext>`: the job, so that the commit and
//! the clean-up of a failed job find every file of it (and only of it); a random run id,
//! so that two attempts of one task (a retry, a duplicate delivery, a speculative twin)
//! never write to one name; `n` counts the files one run writes (one per partition
//! value, and a new one past [`TARGET_FILE_BYTES`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;
use object_store::buffered::BufWriter;
use object_store::path::{Path, PathPart};
use object_store::{ObjectStore, ObjectStoreExt};

use super::{WriteFormat, WriteTarget};
use crate::state::Written;

/// A file is closed, and the next begun, once it holds about this much (before
/// compression for CSV and JSON, encoded for Parquet): large enough that readers do few
/// requests per byte, small enough that many tasks share a big write.
pub const TARGET_FILE_BYTES: usize = 128 * 1024 * 1024;

/// Most files one run keeps open at once (one per partition value it meets); past it, the
/// one open longest is closed, and a row for its value starts a new file.
pub const MAX_OPEN_FILES: usize = 64;

/// Most partition directories one run may write to: past it the write fails, naming
/// the limit, rather than leave a file per row (`PARTITIONED BY` a near-unique column).
pub const MAX_PARTITION_VALUES: usize = 1000;

/// Most bytes the open Parquet files of one run may buffer (their row groups in
/// progress); past it, the largest is flushed to its file as a row group.
const MAX_BUFFERED_BYTES: usize = 256 * 1024 * 1024;

/// The directory name of a partition value that is NULL or empty, as Hive, Spark and
/// Athena write it.
pub const DEFAULT_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// The rows a writing task yields: one per file it wrote.
pub fn file_list_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("rows", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, false),
        // A partitioned write's partition values of the file, a JSON object of the
        // values as text (`{"col": "v", "other": null}`; NULL and empty are null).
        Field::new("partition", DataType::Utf8, true),
        // A Delta write's statistics of the file (the `stats` JSON of its `add` action).
        Field::new("stats", DataType::Utf8, true),
    ]))
}

/// Files written by the runs of one task attempt, kept in its task context, so that the
/// executor can delete them when the attempt's output is not the one committed.
#[derive(Debug, Default)]
pub struct WrittenFiles {
    files: Mutex<Vec<(Arc<dyn ObjectStore>, Path)>>,
    /// What the finished files hold; `None` until a table writer runs in the attempt.
    totals: Mutex<Option<Written>>,
}

impl WrittenFiles {
    fn add(&self, store: &Arc<dyn ObjectStore>, path: &Path) {
        if let Ok(mut files) = self.files.lock() {
            files.push((store.clone(), path.clone()));
        }
    }

    /// Counts a finished file (`None`: only that a table writer ran).
    fn finished(&self, file: Option<(u64, u64)>) {
        if let Ok(mut totals) = self.totals.lock() {
            let totals = totals.get_or_insert_with(Written::default);
            if let Some((rows, bytes)) = file {
                totals.rows += rows;
                totals.bytes += bytes;
                totals.files += 1;
            }
        }
    }

    /// What the attempt's finished files hold, if it ran a table writer.
    pub fn totals(&self) -> Option<Written> {
        self.totals.lock().ok().and_then(|t| *t)
    }

    /// Deletes every file recorded (best effort), returning how many were deleted.
    pub async fn delete_all(&self) -> usize {
        let files = self.files.lock().map(|f| f.clone()).unwrap_or_default();
        let mut deleted = 0;
        for (store, path) in files {
            if store.delete(&path).await.is_ok() {
                deleted += 1;
            }
        }
        deleted
    }
}

/// Writes its input's partitions as files of [`WriteTarget`]; see the [module docs](self).
#[derive(Debug)]
pub struct TableWriterExec {
    input: Arc<dyn ExecutionPlan>,
    target: Arc<WriteTarget>,
    properties: Arc<PlanProperties>,
}

impl TableWriterExec {
    /// A writer of `input`'s rows to `target`, partition by partition.
    pub fn new(input: Arc<dyn ExecutionPlan>, target: Arc<WriteTarget>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(file_list_schema()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self {
            input,
            target,
            properties,
        }
    }

    /// Where and how it writes.
    pub fn target(&self) -> &Arc<WriteTarget> {
        &self.target
    }

    /// Its input.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// The writer at the top of `plan` and what it writes, if `plan` is one.
    pub fn peel(
        plan: &Arc<dyn ExecutionPlan>,
    ) -> Option<(Arc<WriteTarget>, Arc<dyn ExecutionPlan>)> {
        plan.downcast_ref::<TableWriterExec>()
            .map(|w| (w.target.clone(), w.input.clone()))
    }
}

impl DisplayAs for TableWriterExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let partitioned = if self.target.partition_by.is_empty() {
            String::new()
        } else {
            format!(", partition_by=[{}]", self.target.partition_by.join(", "))
        };
        match t {
            DisplayFormatType::TreeRender => write!(
                f,
                "format={}\nlocation={}",
                self.target.format.name(),
                self.target.location
            ),
            _ => write!(
                f,
                "TableWriterExec: format={}, location={}{partitioned}",
                self.target.format.name(),
                self.target.location
            ),
        }
    }
}

impl ExecutionPlan for TableWriterExec {
    fn name(&self) -> &'static str {
        "TableWriterExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal(format!(
                "TableWriterExec takes one child, got {}",
                children.len()
            )));
        }
        Ok(Arc::new(Self::new(
            children.swap_remove(0),
            self.target.clone(),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context.clone())?;
        let target = self.target.clone();
        let url = ListingTableUrl::parse(&target.location)?;
        let store = context.runtime_env().object_store(&url)?;
        let written = context.session_config().get_extension::<WrittenFiles>();
        if let Some(written) = &written {
            written.finished(None);
        }
        let schema = file_list_schema();
        let run = uuid::Uuid::new_v4().simple().to_string();
        let target_format = target.format;
        let files = FileSet {
            store,
            root: url.prefix().clone(),
            target,
            name: format!("{}-{partition:05}-{}", self.target.job_id, &run[..8]),
            open: Vec::new(),
            done: Vec::new(),
            opened: 0,
            dirs: Default::default(),
            written,
            iceberg: match target_format {
                WriteFormat::Iceberg => Some(crate::plan::decode_schema(&self.target.schema)?),
                _ => None,
            },
        };
        let output = futures::stream::once(async move { files.write_all(input).await });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, output)))
    }
}

/// The files of one run: open ones (one per partition value) and finished ones.
struct FileSet {
    store: Arc<dyn ObjectStore>,
    /// The target location as a path of `store`.
    root: Path,
    target: Arc<WriteTarget>,
    /// Every file name of this run starts with it.
    name: String,
    /// Open files, the one opened longest ago first.
    open: Vec<OpenFile>,
    /// Every finished file.
    done: Vec<DoneFile>,
    /// Files begun so far.
    opened: usize,
    /// Partition directories written to so far.
    dirs: std::collections::HashSet<String>,
    written: Option<Arc<WrittenFiles>>,
    /// An Iceberg write's file columns (every column, each with its field id): every
    /// batch is written as them.
    iceberg: Option<SchemaRef>,
}

/// One file written.
struct DoneFile {
    url: String,
    rows: u64,
    bytes: u64,
    /// Its partition values ([`file_list_schema`]).
    partition: Option<String>,
    /// Its statistics ([`file_list_schema`]).
    stats: Option<String>,
}

/// One file being written.
struct OpenFile {
    /// Its partition directories (`a=1/b=x`), empty for an unpartitioned write.
    dirs: String,
    /// Its partition values ([`file_list_schema`]).
    partition: Option<String>,
    /// A Delta write's statistics of it, as they are gathered.
    stats: Option<super::stats::FileStats>,
    path: Path,
    out: BufWriter,
    encoder: Encoder,
    rows: u64,
    /// Bytes handed to `out` so far.
    bytes: u64,
}

/// A file's encoder: Parquet keeps its row group in progress, CSV and JSON encode each
/// batch as it comes.
enum Encoder {
    Parquet(Box<ArrowWriter<Vec<u8>>>),
    Csv { header: bool, delimiter: u8 },
    Json,
}

impl FileSet {
    /// Writes every row of `input`, then finishes every file; on an error, aborts the
    /// open files and deletes the finished ones.
    async fn write_all(mut self, mut input: SendableRecordBatchStream) -> DfResult<RecordBatch> {
        let result = async {
            while let Some(batch) = input.next().await {
                self.write(batch?).await?;
            }
            while !self.open.is_empty() {
                self.close(0).await?;
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            for mut file in std::mem::take(&mut self.open) {
                let _ = file.out.abort().await;
            }
            for done in &self.done {
                if let Some(path) = self.path_of(&done.url) {
                    let _ = self.store.delete(&path).await;
                }
            }
            return Err(e);
        }
        let done = &self.done;
        Ok(RecordBatch::try_new(
            file_list_schema(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    done.iter().map(|f| f.url.as_str()),
                )),
                Arc::new(UInt64Array::from_iter_values(done.iter().map(|f| f.rows))),
                Arc::new(UInt64Array::from_iter_values(done.iter().map(|f| f.bytes))),
                Arc::new(StringArray::from_iter(
                    done.iter().map(|f| f.partition.as_deref()),
                )),
                Arc::new(StringArray::from_iter(
                    done.iter().map(|f| f.stats.as_deref()),
                )),
            ],
        )?)
    }

    /// The path within the store of a file this run wrote, from its URL.
    fn path_of(&self, url: &str) -> Option<Path> {
        let relative = url.strip_prefix(&self.target.location)?;
        Some(Path::from(format!("{}/{relative}", self.root)))
    }

    /// Routes `batch`'s rows to the files of their partition values.
    async fn write(&mut self, batch: RecordBatch) -> DfResult<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = match &self.iceberg {
            Some(schema) => conform(batch, schema)?,
            None => batch,
        };
        if self.target.partition_by.is_empty() {
            return self.write_to(String::new(), None, batch).await;
        }
        let schema = batch.schema();
        let keys: Vec<usize> = self
            .target
            .partition_by
            .iter()
            .map(|c| schema.index_of(c))
            .collect::<Result<_, _>>()?;
        let values: Vec<ArrayRef> = keys
            .iter()
            .map(|&i| cast(batch.column(i), &DataType::Utf8))
            .collect::<Result<_, _>>()?;
        // Hive layouts hold partition values in directory names alone; Iceberg's files
        // hold every column (its directories are only a layout).
        let iceberg = self.iceberg.is_some();
        let kept: Vec<usize> = (0..schema.fields().len())
            .filter(|i| iceberg || !keys.contains(i))
            .collect();
        // A value is NULL in a Hive layout when NULL or empty (one directory holds both);
        // in Iceberg only when NULL (`''` is a partition value of its own).
        let absent = |value: &datafusion::arrow::array::StringArray, row: usize| {
            value.is_null(row) || (!iceberg && value.value(row).is_empty())
        };
        let data = batch.project(&kept)?;
        // Rows of each partition (its values), in the order they first appear.
        let mut groups: Vec<(String, usize, Vec<u32>)> = Vec::new();
        let mut index: HashMap<Vec<Option<&str>>, usize> = HashMap::new();
        for row in 0..batch.num_rows() {
            let key: Vec<Option<&str>> = values
                .iter()
                .map(|v| {
                    let v = v.as_string::<i32>();
                    (!absent(v, row)).then(|| v.value(row))
                })
                .collect();
            if let Some(&at) = index.get(&key) {
                groups[at].2.push(row as u32);
                continue;
            }
            let dirs = self
                .target
                .partition_by
                .iter()
                .zip(&values)
                .map(|(column, value)| {
                    let value = value.as_string::<i32>();
                    let text = if absent(value, row) {
                        DEFAULT_PARTITION
                    } else {
                        value.value(row)
                    };
                    PathPart::from(format!("{column}={text}"))
                        .as_ref()
                        .to_string()
                })
                .collect::<Vec<_>>()
                .join("/");
            index.insert(key, groups.len());
            groups.push((dirs, row, vec![row as u32]));
        }
        for (dirs, first, rows) in groups {
            let partition = serde_json::Value::Object(
                self.target
                    .partition_by
                    .iter()
                    .zip(&values)
                    .map(|(column, value)| {
                        let value = value.as_string::<i32>();
                        let text = (!absent(value, first)).then(|| value.value(first).to_string());
                        (
                            column.clone(),
                            text.map_or(serde_json::Value::Null, Into::into),
                        )
                    })
                    .collect(),
            )
            .to_string();
            let rows = UInt32Array::from(rows);
            let columns = data
                .columns()
                .iter()
                .map(|c| take(c, &rows, None))
                .collect::<Result<Vec<_>, _>>()?;
            let part = RecordBatch::try_new(data.schema(), columns)?;
            self.write_to(dirs, Some(partition), part).await?;
        }
        Ok(())
    }

    /// Writes `batch` to the open file of directory `dirs` (of values `partition`),
    /// opening one if there is none, and closing it once it is large enough.
    async fn write_to(
        &mut self,
        dirs: String,
        partition: Option<String>,
        batch: RecordBatch,
    ) -> DfResult<()> {
        let found = self
            .open
            .iter()
            .position(|f| f.dirs == dirs && f.partition == partition);
        let at = match found {
            Some(at) => at,
            None => {
                if !self.dirs.contains(&dirs) {
                    if self.dirs.len() >= MAX_PARTITION_VALUES {
                        return Err(crate::Error::InvalidInput(format!(
                            "PARTITIONED BY ({}) yields more than {MAX_PARTITION_VALUES} \
                             partition values in one task: partition by a column with fewer \
                             distinct values (a day or a month rather than a timestamp)",
                            self.target.partition_by.join(", ")
                        ))
                        .into());
                    }
                    self.dirs.insert(dirs.clone());
                }
                if self.open.len() >= MAX_OPEN_FILES {
                    self.close(0).await?;
                }
                self.begin(dirs, partition, batch.schema())?;
                self.open.len() - 1
            }
        };
        let file = &mut self.open[at];
        file.rows += batch.num_rows() as u64;
        if let Some(stats) = &mut file.stats {
            stats.update(&batch)?;
        }
        let encoded = match &mut file.encoder {
            Encoder::Parquet(writer) => {
                writer.write(&batch)?;
                std::mem::take(writer.inner_mut())
            }
            Encoder::Csv { header, delimiter } => {
                let mut buffer = Vec::new();
                let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                    .with_header(*header)
                    .with_delimiter(*delimiter)
                    .build(&mut buffer);
                writer.write(&batch)?;
                drop(writer);
                *header = false;
                buffer
            }
            Encoder::Json => {
                let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(Vec::new());
                writer.write(&batch)?;
                writer.finish()?;
                writer.into_inner()
            }
        };
        file.bytes += encoded.len() as u64;
        if !encoded.is_empty() {
            file.out.put(Bytes::from(encoded)).await?;
        }
        let size = file.bytes as usize
            + match &file.encoder {
                Encoder::Parquet(w) => w.in_progress_size(),
                _ => 0,
            };
        if size >= TARGET_FILE_BYTES {
            self.close(at).await?;
        } else {
            self.bound_buffers().await?;
        }
        Ok(())
    }

    /// Flushes the largest row group in progress while the open Parquet files buffer
    /// more than [`MAX_BUFFERED_BYTES`] together.
    async fn bound_buffers(&mut self) -> DfResult<()> {
        let buffered = |f: &OpenFile| match &f.encoder {
            Encoder::Parquet(w) => w.in_progress_size(),
            _ => 0,
        };
        while self.open.iter().map(buffered).sum::<usize>() > MAX_BUFFERED_BYTES {
            let Some(largest) = (0..self.open.len()).max_by_key(|&i| buffered(&self.open[i]))
            else {
                break;
            };
            let file = &mut self.open[largest];
            if let Encoder::Parquet(writer) = &mut file.encoder {
                writer.flush()?;
                let encoded = std::mem::take(writer.inner_mut());
                file.bytes += encoded.len() as u64;
                file.out.put(Bytes::from(encoded)).await?;
            }
        }
        Ok(())
    }

    /// Opens a new file in directory `dirs` (of values `partition`) for rows of `schema`.
    fn begin(
        &mut self,
        dirs: String,
        partition: Option<String>,
        schema: SchemaRef,
    ) -> DfResult<()> {
        let file_name = format!(
            "{}-{:03}.{}",
            self.name,
            self.opened,
            self.target.format.extension()
        );
        self.opened += 1;
        let mut path = self.root.clone();
        if self.iceberg.is_some() {
            path = path.join("data");
        }
        // Each directory name was encoded once, as a path part, from `column=value`.
        for part in dirs.split('/').filter(|p| !p.is_empty()) {
            let part = PathPart::parse(part)
                .map_err(|e| DataFusionError::Internal(format!("directory {part}: {e}")))?;
            path = path.join(part);
        }
        let path = path.join(file_name);
        let stats = match self.target.format {
            WriteFormat::Delta | WriteFormat::Iceberg => {
                Some(super::stats::FileStats::new(&schema)?)
            }
            _ => None,
        };
        let encoder = match self.target.format {
            WriteFormat::Parquet | WriteFormat::Delta | WriteFormat::Iceberg => {
                Encoder::Parquet(Box::new(ArrowWriter::try_new(
                    Vec::new(),
                    schema,
                    Some(self.target.parquet_properties()?),
                )?))
            }
            WriteFormat::Csv => Encoder::Csv {
                header: self.target.csv_header(),
                delimiter: self.target.csv_delimiter()?,
            },
            WriteFormat::Json => Encoder::Json,
        };
        if let Some(written) = &self.written {
            written.add(&self.store, &path);
        }
        self.open.push(OpenFile {
            dirs,
            partition,
            stats,
            out: BufWriter::new(self.store.clone(), path.clone()),
            path,
            encoder,
            rows: 0,
            bytes: 0,
        });
        Ok(())
    }

    /// Finishes open file `at` and records it.
    async fn close(&mut self, at: usize) -> DfResult<()> {
        let mut file = self.open.remove(at);
        if let Encoder::Parquet(writer) = &mut file.encoder {
            writer.finish()?;
            let encoded = std::mem::take(writer.inner_mut());
            file.bytes += encoded.len() as u64;
            file.out.put(Bytes::from(encoded)).await?;
        }
        use tokio::io::AsyncWriteExt;
        file.out.shutdown().await?;
        let relative = file
            .path
            .as_ref()
            .strip_prefix(self.root.as_ref())
            .unwrap_or(file.path.as_ref())
            .trim_start_matches('/')
            .to_string();
        if let Some(written) = &self.written {
            written.finished(Some((file.rows, file.bytes)));
        }
        self.done.push(DoneFile {
            url: format!("{}{relative}", self.target.location),
            rows: file.rows,
            bytes: file.bytes,
            partition: file.partition,
            stats: file.stats.map(|s| s.finish(file.rows)).transpose()?,
        });
        Ok(())
    }
}

/// `batch` as a batch of `schema` (an Iceberg write's file columns, with their field
/// ids): the same columns, each cast to the type the table stores where it differs.
fn conform(batch: RecordBatch, schema: &SchemaRef) -> DfResult<RecordBatch> {
    if batch.num_columns() != schema.fields().len() {
        return Err(DataFusionError::Internal(format!(
            "an Iceberg write got {} columns for a table of {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else {
                cast(c, f.data_type())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// The plan a write runs: `input`'s rows written to `target` — sorted first, within each
/// partition, by the partition columns of a partitioned write, so that a task keeps one
/// file open at a time (rows of many values in every batch would otherwise keep as many
/// files open, or close and reopen them: a file per batch and value). The sort spills
/// past the task's memory as any sort does.
pub fn writer_over(
    input: Arc<dyn ExecutionPlan>,
    target: Arc<WriteTarget>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_plan::sorts::sort::SortExec;
    let schema = input.schema();
    let keys = target
        .partition_by
        .iter()
        .map(|c| Ok(PhysicalSortExpr::new_default(col(c, &schema)?)))
        .collect::<DfResult<Vec<_>>>()?;
    let input = match LexOrdering::new(keys) {
        Some(ordering) => {
            Arc::new(SortExec::new(ordering, input).with_preserve_partitioning(true)) as _
        }
        None => input,
    };
    Ok(Arc::new(TableWriterExec::new(input, target)))
}

/// The default Parquet compression of writes.
pub fn default_compression() -> Compression {
    Compression::ZSTD(ZstdLevel::default())
}

/// Properties of the Parquet files a write makes, from the statement's options.
pub(super) fn parquet_properties(
    compression: Compression,
    max_row_group_size: Option<usize>,
) -> WriterProperties {
    let mut builder = WriterProperties::builder().set_compression(compression);
    if let Some(rows) = max_row_group_size {
        builder = builder.set_max_row_group_row_count(Some(rows));
    }
    builder.build()
}
