//! [`ShuffleReaderExec`]: a leaf that reads the committed output of another stage.
//!
//! Which slices a reader partition reads depends on the edge:
//! - [`ReadMode::Hash`]: partition `p` reads slice `p` of every producer;
//! - [`ReadMode::Gather`]: partition `p` reads all of producer `p` (one partition per
//!   planned producer, order within each kept — a coalesce or sort-preserving merge sits
//!   above); a producer stage that ran fewer tasks (coalesced) leaves partitions empty;
//! - [`ReadMode::All`]: one partition reading all of every producer.
//!
//! Producer locations come from the task's [`ShuffleInputs`], which the executor checks
//! against the producer counts its stage's decision recorded; empty slices cost nothing.

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    ReplaceChildrenOptions, SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::ObjectStoreExt;

use super::format::decode_slice;
use super::ShuffleInputs;
use crate::state::{EdgeKind, TaskOutput};
use crate::{Error, Result};

/// How a reader maps producer slices to its partitions.
#[derive(Debug, Clone)]
pub enum ReadMode {
    /// Hash shuffle with this partitioning (its partition count is the reader's).
    Hash(Partitioning),
    /// One partition per producer task.
    Gather,
    /// One partition with everything (a broadcast when several tasks read it).
    All,
}

impl ReadMode {
    /// The edge kind this mode reads.
    pub fn edge(&self) -> EdgeKind {
        match self {
            ReadMode::Hash(_) => EdgeKind::Hash,
            ReadMode::Gather => EdgeKind::Gather,
            ReadMode::All => EdgeKind::Gather,
        }
    }
}

/// Reads another stage's shuffle output. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct ShuffleReaderExec {
    stage: u32,
    producers: usize,
    mode: ReadMode,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

/// Name of the reader's count of shuffle bytes fetched.
pub const BYTES_READ: &str = "bytes_read";
/// Name of the reader's count of ranged GETs made.
pub const FETCHES: &str = "fetches";

impl ShuffleReaderExec {
    /// A reader of stage `stage`, which runs `producers` tasks producing `schema`.
    /// `eq_properties` carries the producer's orderings into gather mode.
    pub fn new(
        stage: u32,
        producers: usize,
        mode: ReadMode,
        schema: SchemaRef,
        eq_properties: Option<EquivalenceProperties>,
    ) -> Self {
        let partitioning = match &mode {
            ReadMode::Hash(p) => p.clone(),
            ReadMode::Gather => Partitioning::UnknownPartitioning(producers),
            ReadMode::All => Partitioning::UnknownPartitioning(1),
        };
        let eq = match (&mode, eq_properties) {
            (ReadMode::Gather, Some(eq)) => eq,
            _ => EquivalenceProperties::new(schema.clone()),
        };
        let properties = Arc::new(PlanProperties::new(
            eq,
            partitioning,
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Self {
            stage,
            producers,
            mode,
            schema,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The stage read.
    pub fn stage(&self) -> u32 {
        self.stage
    }

    /// Number of producer tasks.
    pub fn producers(&self) -> usize {
        self.producers
    }

    /// How slices map to partitions.
    pub fn mode(&self) -> &ReadMode {
        &self.mode
    }

    /// The byte ranges partition `partition` reads, in order, empty slices left out; an
    /// error when a producer's output has no such slice.
    pub fn ranges(
        &self,
        partition: usize,
        outputs: &[TaskOutput],
    ) -> Result<Vec<(Path, std::ops::Range<u64>)>> {
        let whole = |o: &TaskOutput| -> Result<Vec<(Path, std::ops::Range<u64>)>> {
            (0..o.ends.len())
                .map(|s| Ok((Path::from(o.object.as_str()), o.slice(s)?)))
                .collect()
        };
        let ranges: Vec<_> = match &self.mode {
            ReadMode::Hash(_) => outputs
                .iter()
                .map(|o| Ok((Path::from(o.object.as_str()), o.slice(partition)?)))
                .collect::<Result<_>>()?,
            // Planned for `producers` tasks; the producer may have run fewer (coalesced):
            // partition `p` reads outputs `p`, `p + producers`, ... — none past the end.
            ReadMode::Gather if partition >= self.producers.max(1) => {
                return Err(Error::Internal(format!(
                    "gather partition {partition} of stage {} does not exist ({} planned \
                     producers)",
                    self.stage, self.producers
                )))
            }
            ReadMode::Gather => outputs
                .iter()
                .skip(partition)
                .step_by(self.producers.max(1))
                .map(whole)
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .flatten()
                .collect(),
            ReadMode::All => outputs
                .iter()
                .map(whole)
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .flatten()
                .collect(),
        };
        Ok(ranges.into_iter().filter(|(_, r)| !r.is_empty()).collect())
    }
}

impl DisplayAs for ShuffleReaderExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let mode = match &self.mode {
            ReadMode::Hash(p) => format!("{p}"),
            ReadMode::Gather => "gather".to_string(),
            ReadMode::All => "all".to_string(),
        };
        match t {
            DisplayFormatType::TreeRender => write!(f, "stage: {}\nmode: {mode}", self.stage),
            _ => write!(
                f,
                "ShuffleReaderExec: stage={}, producers={}, mode={mode}",
                self.stage, self.producers
            ),
        }
    }
}

impl ExecutionPlan for ShuffleReaderExec {
    fn name(&self) -> &'static str {
        "ShuffleReaderExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn reset_state(self: Arc<Self>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self {
            metrics: ExecutionPlanMetricsSet::new(),
            ..self.as_ref().clone()
        }))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let inputs = context
            .session_config()
            .get_extension::<ShuffleInputs>()
            .ok_or_else(|| {
                DataFusionError::Internal(
                    "ShuffleReaderExec needs the shuffle inputs of its task; \
                     run stage plans through the lambdafusion executor"
                        .into(),
                )
            })?;
        let outputs = inputs.stages.get(&self.stage).ok_or_else(|| {
            DataFusionError::from(Error::Internal(format!(
                "no committed outputs of input stage {} were handed to this task",
                self.stage
            )))
        })?;
        let ranges = self.ranges(partition, outputs)?;
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let bytes_read = MetricBuilder::new(&self.metrics).counter(BYTES_READ, partition);
        let fetches = MetricBuilder::new(&self.metrics).counter(FETCHES, partition);
        bytes_read.add(ranges.iter().map(|(_, r)| (r.end - r.start) as usize).sum());
        fetches.add(ranges.len());
        let store = inputs.store.clone();
        let schema = self.schema.clone();
        let batches = futures::stream::iter(ranges)
            .map(move |(path, range)| {
                let store = store.clone();
                async move {
                    let bytes = store.get_range(&path, range).await.map_err(Error::from)?;
                    let batches = decode_slice(bytes)?;
                    Ok::<_, Error>(futures::stream::iter(
                        batches.into_iter().map(Ok::<_, Error>),
                    ))
                }
            })
            .buffered(inputs.fetch_concurrency.max(1))
            .try_flatten()
            .map(move |batch| {
                let batch = batch?;
                // Same columns; adopt the plan's schema (field metadata, nullability).
                let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                baseline.record_output(batch.num_rows());
                Ok(RecordBatch::try_new_with_options(
                    schema.clone(),
                    batch.columns().to_vec(),
                    &options,
                )?)
            })
            .map_err(|e: Error| DataFusionError::from(e));
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            batches,
        )))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::state::TaskOutput;

    fn output(object: &str, ends: Vec<u64>) -> TaskOutput {
        TaskOutput {
            attempt: 1,
            object: object.into(),
            ends,
            rows: 0,
            bytes: 0,
            started_ms: 0,
            finished_ms: 0,
            metrics: Vec::new(),
            requests: Default::default(),
        }
    }

    fn reader(mode: ReadMode, producers: usize) -> ShuffleReaderExec {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, true)]));
        ShuffleReaderExec::new(3, producers, mode, schema, None)
    }

    /// Each mode reads what its edge means, empty slices left out; a partition the
    /// producers' records do not have is an error naming it, never a panic.
    #[test]
    fn ranges_per_mode_and_out_of_range_partitions() {
        let outputs = [output("a", vec![4, 4, 9]), output("b", vec![0, 7, 7])];
        let hash = reader(ReadMode::Hash(Partitioning::UnknownPartitioning(3)), 2);
        let got = hash.ranges(1, &outputs).unwrap();
        assert_eq!(got, vec![(Path::from("b"), 0..7)], "a's slice 1 is empty");
        let e = hash.ranges(3, &outputs).unwrap_err().to_string();
        assert!(e.contains("slice 3") && e.contains("has 3 slices"), "{e}");

        let gather = reader(ReadMode::Gather, 2);
        assert_eq!(
            gather.ranges(0, &outputs).unwrap(),
            vec![(Path::from("a"), 0..4), (Path::from("a"), 4..9)]
        );
        let e = gather.ranges(2, &outputs).unwrap_err().to_string();
        assert!(e.contains("gather partition 2 of stage 3"), "{e}");
        let planned_for_three = reader(ReadMode::Gather, 3);
        assert!(
            planned_for_three.ranges(2, &outputs).unwrap().is_empty(),
            "a producer coalesced to fewer tasks leaves the last partitions empty"
        );

        let all = reader(ReadMode::All, 2);
        assert_eq!(all.ranges(0, &outputs).unwrap().len(), 3);
        let corrupt = [output("c", vec![9, 3])];
        assert!(
            all.ranges(0, &corrupt).is_err(),
            "a slice ending before it starts"
        );
    }
}
