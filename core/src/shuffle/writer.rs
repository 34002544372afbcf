//! [`ShuffleWriterExec`]: the root of every stage plan. It runs one partition of its
//! input (or a coalesced task's range of them), splits the rows into the stage's output slices (hash partitioning, or a single
//! slice for gather / broadcast / result stages) and uploads them as one object — from
//! memory, or, once the task's memory pool says no, from local spill files in parts.

use std::ops::Range;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time,
};
use datafusion::physical_plan::repartition::BatchPartitioner;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties, ReplaceChildrenOptions, SendableRecordBatchStream,
};
use futures::StreamExt;
use object_store::path::Path;
use object_store::ObjectStore;

use super::format::ObjectBuilder;
use super::range::PartitionRangeExec;
use crate::{Error, Result};

/// Writes one task's output as a shuffle object. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct ShuffleWriterExec {
    stage: u32,
    input: Arc<dyn ExecutionPlan>,
    /// `Some(Hash(..))` for a hash shuffle; `None` writes everything to one slice.
    partitioning: Option<Partitioning>,
    properties: Arc<PlanProperties>,
    /// Rows written, time spent partitioning and encoding (`elapsed_compute`), bytes
    /// uploaded ([`BYTES_WRITTEN`]) and time uploading ([`UPLOAD_TIME`]) of the task
    /// that ran this instance — what `EXPLAIN ANALYZE` shows for the writer.
    metrics: ExecutionPlanMetricsSet,
}

/// Name of the writer's metric counting the bytes it uploaded.
pub const BYTES_WRITTEN: &str = "bytes_written";
/// Name of the writer's metric timing its upload.
pub const UPLOAD_TIME: &str = "upload_time";

/// What one task's write produced.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteSummary {
    /// Object written.
    pub path: Path,
    /// End offset of each slice.
    pub ends: Vec<u64>,
    /// Rows per slice.
    pub slice_rows: Vec<u64>,
    /// Total rows.
    pub rows: u64,
    /// Object size in bytes (footer included).
    pub bytes: u64,
}

impl ShuffleWriterExec {
    /// A writer for stage `stage` over `input`; `partitioning` must be `None` or
    /// `Some(Partitioning::Hash(..))`.
    pub fn try_new(
        stage: u32,
        input: Arc<dyn ExecutionPlan>,
        partitioning: Option<Partitioning>,
    ) -> Result<Self> {
        if let Some(p) = &partitioning {
            if !matches!(p, Partitioning::Hash(..)) {
                return Err(Error::Internal(format!(
                    "shuffle writer supports hash partitioning only, got {p}"
                )));
            }
        }
        let properties = Arc::new(input.properties().as_ref().clone());
        Ok(Self {
            stage,
            input,
            partitioning,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// Stage this writer belongs to.
    pub fn stage(&self) -> u32 {
        self.stage
    }

    /// The stage plan below the writer.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// The same writer over another input (with the same schema and partitioning).
    pub fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> Self {
        Self {
            input,
            metrics: ExecutionPlanMetricsSet::new(),
            ..self.clone()
        }
    }

    /// Output partitioning (`None`: one slice).
    pub fn partitioning(&self) -> Option<&Partitioning> {
        self.partitioning.as_ref()
    }

    /// Number of tasks of the stage: the input's partition count.
    pub fn tasks(&self) -> usize {
        self.input.output_partitioning().partition_count()
    }

    /// Number of slices each task writes.
    pub fn output_slices(&self) -> usize {
        self.partitioning
            .as_ref()
            .map_or(1, |p| p.partition_count())
    }

    /// What a task running input partitions `partitions` executes, and which partition
    /// of it: the input itself for one partition; for a range (a coalesced task), the
    /// range merged into one stream — order-preserving when a single-slice output is
    /// ordered (a gather consumer may merge it), concatenated otherwise.
    pub fn task_plan(&self, partitions: Range<usize>) -> Result<(Arc<dyn ExecutionPlan>, usize)> {
        if partitions.len() == 1 {
            return Ok((self.input.clone(), partitions.start));
        }
        let range: Arc<dyn ExecutionPlan> =
            Arc::new(PartitionRangeExec::try_new(self.input.clone(), partitions)?);
        let merged: Arc<dyn ExecutionPlan> =
            match (&self.partitioning, self.input.output_ordering()) {
                (None, Some(ordering)) => {
                    Arc::new(SortPreservingMergeExec::new(ordering.clone(), range))
                }
                _ => Arc::new(CoalescePartitionsExec::new(range)),
            };
        Ok((merged, 0))
    }

    /// Runs input partitions `partitions` (one, or a coalesced task's range) and writes
    /// their output to `path` in `store`. Calls `before_batch` with the number of batches
    /// written so far before each batch (the executor checks cancellation there) and
    /// gives up with its error.
    ///
    /// The encoded output is held in memory under a reservation of the task's memory
    /// pool, at most a quarter of a bounded pool (the operators above need the rest);
    /// past that, or when the pool refuses, it is spilled to local files and uploaded
    /// from them by a multipart upload, so the task's memory stays within its pool
    /// whatever the size of its output. (The reservation is not a spillable consumer of
    /// the pool: a fair pool would then halve the share of the task's sort or join
    /// whether or not the writer held anything.)
    pub async fn write_partitions(
        &self,
        partitions: Range<usize>,
        context: Arc<TaskContext>,
        store: &Arc<dyn ObjectStore>,
        path: &Path,
        before_batch: &(dyn Fn(usize) -> Result<()> + Sync),
    ) -> Result<WriteSummary> {
        let first = partitions.start;
        let (plan, partition) = self.task_plan(partitions)?;
        let baseline = BaselineMetrics::new(&self.metrics, 0);
        let bytes_written = MetricBuilder::new(&self.metrics).counter(BYTES_WRITTEN, 0);
        let upload_time = MetricBuilder::new(&self.metrics).subset_time(UPLOAD_TIME, 0);
        let spills = MetricBuilder::new(&self.metrics).spill_count(0);
        let spilled_bytes = MetricBuilder::new(&self.metrics).spilled_bytes(0);
        let pool = context.memory_pool();
        let reservation =
            MemoryConsumer::new(format!("ShuffleWriterExec[{}]", self.stage)).register(pool);
        let most = match pool.memory_limit() {
            MemoryLimit::Finite(limit) => limit / 4,
            MemoryLimit::Infinite | MemoryLimit::Unknown => usize::MAX,
        };
        let disk = context.runtime_env().disk_manager.clone();
        let mut stream = plan.execute(partition, context)?;
        let mut builder = ObjectBuilder::new(self.input.schema(), self.output_slices())?;
        let mut partitioner = match &self.partitioning {
            Some(p) => Some(BatchPartitioner::try_new(
                p.clone(),
                Time::new(),
                first,
                self.tasks(),
            )?),
            None => None,
        };
        let mut written = 0;
        while let Some(batch) = stream.next().await {
            before_batch(written)?;
            written += 1;
            let batch = batch?;
            let _timer = baseline.elapsed_compute().timer();
            baseline.record_output(batch.num_rows());
            match &mut partitioner {
                Some(partitioner) => partitioner.partition(batch, |slice, part| {
                    builder.append(slice, &part).map_err(DataFusionError::from)
                })?,
                None => builder.append(0, &batch)?,
            }
            let held = builder.buffered();
            if held > most || reservation.try_resize(held).is_err() {
                let moved = builder.spill(&disk)?;
                spills.add(1);
                spilled_bytes.add(moved as usize);
                reservation.resize(builder.buffered());
            }
        }
        let slice_rows = builder.rows().to_vec();
        let object = {
            let _timer = baseline.elapsed_compute().timer();
            builder.finish()?
        };
        let (bytes, ends) = (object.bytes(), object.ends.clone());
        {
            let _timer = upload_time.timer();
            object.upload(store, path).await?;
        }
        reservation.free();
        bytes_written.add(bytes as usize);
        baseline.done();
        Ok(WriteSummary {
            path: path.clone(),
            rows: slice_rows.iter().sum(),
            ends,
            slice_rows,
            bytes,
        })
    }
}

impl DisplayAs for ShuffleWriterExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match (t, &self.partitioning) {
            (DisplayFormatType::TreeRender, _) => write!(f, "stage: {}", self.stage),
            (_, Some(p)) => write!(
                f,
                "ShuffleWriterExec: stage={}, partitioning={p}",
                self.stage
            ),
            (_, None) => write!(
                f,
                "ShuffleWriterExec: stage={}, partitioning=single",
                self.stage
            ),
        }
    }
}

impl ExecutionPlan for ShuffleWriterExec {
    fn name(&self) -> &'static str {
        "ShuffleWriterExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        if let Some(Partitioning::Hash(exprs, _)) = &self.partitioning {
            for e in exprs {
                if f(e)? == TreeNodeRecursion::Stop {
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let child = crate::plan::only_child("ShuffleWriterExec", children)?;
        let input = child;
        let properties = match options.children_properties {
            ChildrenPropertiesMode::Keep => self.properties.clone(),
            ChildrenPropertiesMode::Recompute => Arc::new(input.properties().as_ref().clone()),
        };
        Ok(Arc::new(Self {
            stage: self.stage,
            input,
            partitioning: self.partitioning.clone(),
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        Err(DataFusionError::Internal(
            "ShuffleWriterExec is run by the lambdafusion executor through write_partitions, \
             not through execute"
                .into(),
        ))
    }
}

impl ShuffleWriterExec {
    /// Downcast helper for the root of a decoded stage plan.
    pub fn from_plan(plan: &Arc<dyn ExecutionPlan>) -> Result<&ShuffleWriterExec> {
        plan.downcast_ref::<ShuffleWriterExec>().ok_or_else(|| {
            Error::Internal(format!(
                "stage plan root is {}, not ShuffleWriterExec",
                plan.name()
            ))
        })
    }
}
