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
use std::collections::HashMap;

use futures::{FutureExt, StreamExt, TryStreamExt};
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
    /// `eq_properties` carries the producer's orderings into gather mode, and its
    /// constants (columns of one value in every row, such as `c2` under `WHERE c2 = 1`)
    /// into every mode: whatever the exchange does to the rows, they stay so.
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
            (_, Some(producer)) => {
                let mut eq = EquivalenceProperties::new(schema.clone());
                let uniform = producer.constants().into_iter().filter(|c| {
                    matches!(
                        c.across_partitions,
                        datafusion::physical_expr::AcrossPartitions::Uniform(_)
                    )
                });
                // Constants that do not fit the schema are left out, not an error.
                let _ = eq.add_constants(uniform);
                eq
            }
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

    /// The columns this reader knows to hold one value in every row, and the value when
    /// known (what [`ShuffleReaderExec::new`] kept of its producer's constants).
    pub fn constant_columns(&self) -> Vec<(usize, Option<datafusion::common::ScalarValue>)> {
        self.properties
            .equivalence_properties()
            .constants()
            .into_iter()
            .filter_map(|c| {
                let column = c
                    .expr
                    .downcast_ref::<datafusion::physical_expr::expressions::Column>()?;
                match c.across_partitions {
                    datafusion::physical_expr::AcrossPartitions::Uniform(value) => {
                        Some((column.index(), value))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Equivalence properties of `schema` holding `constants` (see
    /// [`ShuffleReaderExec::constant_columns`]), for decoding a reader.
    pub fn constants_of(
        schema: &SchemaRef,
        constants: Vec<(usize, Option<datafusion::common::ScalarValue>)>,
    ) -> EquivalenceProperties {
        let mut eq = EquivalenceProperties::new(schema.clone());
        let constants = constants.into_iter().filter_map(|(index, value)| {
            let field = schema.fields().get(index)?;
            let column: Arc<dyn PhysicalExpr> = Arc::new(
                datafusion::physical_expr::expressions::Column::new(field.name(), index),
            );
            Some(datafusion::physical_expr::ConstExpr::new(
                column,
                datafusion::physical_expr::AcrossPartitions::Uniform(value),
            ))
        });
        let _ = eq.add_constants(constants);
        eq
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

/// Most bytes one GET reads for several slices: past it, slices are read one by one
/// (a task's input is sized to `shuffle_bytes_per_task`; this bounds what one merged read
/// holds in memory at once).
pub const MAX_MERGED_FETCH: u64 = 16 * 1024 * 1024;

/// One read of shuffle data: the slices it yields, each decoded on its own.
#[derive(Debug, Clone)]
enum Read {
    /// One GET of `range` of `object`, cut into `slices` (absolute offsets, in order).
    Fetch {
        object: Path,
        range: std::ops::Range<u64>,
        slices: Vec<std::ops::Range<u64>>,
    },
    /// Slice `slice` of `range` of `object`, which the partitions of a coalesced task
    /// fetch once between them ([`SharedFetches`]); `takers` of them read from it.
    Shared {
        object: Path,
        range: std::ops::Range<u64>,
        slice: std::ops::Range<u64>,
        takers: usize,
    },
}

impl Read {
    /// Bytes of the slices it yields.
    fn bytes(&self) -> u64 {
        match self {
            Read::Fetch { slices, .. } => slices.iter().map(|r| r.end - r.start).sum(),
            Read::Shared { slice, .. } => slice.end - slice.start,
        }
    }

    /// Makes the read (counting the GETs made into `fetches`) and returns its slices.
    async fn get(
        self,
        store: &Arc<dyn object_store::ObjectStore>,
        shared: Option<&SharedFetches>,
        fetches: &datafusion::physical_plan::metrics::Count,
    ) -> Result<Vec<bytes::Bytes>> {
        match self {
            Read::Fetch {
                object,
                range,
                slices,
            } => {
                fetches.add(1);
                let bytes = store.get_range(&object, range.clone()).await?;
                cut(&bytes, range.start, &slices)
            }
            Read::Shared {
                object,
                range,
                slice,
                takers,
            } => {
                let shared = shared.ok_or_else(|| {
                    Error::Internal("a shared shuffle read without its shared fetches".into())
                })?;
                let (bytes, fetched) = shared.get(store, &object, range.clone(), takers).await?;
                if fetched {
                    fetches.add(1);
                }
                cut(&bytes, range.start, std::slice::from_ref(&slice))
            }
        }
    }
}

/// `slices` (absolute offsets) of `bytes`, which hold the object from `base` on.
fn cut(
    bytes: &bytes::Bytes,
    base: u64,
    slices: &[std::ops::Range<u64>],
) -> Result<Vec<bytes::Bytes>> {
    slices
        .iter()
        .map(|r| {
            let (start, end) = ((r.start - base) as usize, (r.end - base) as usize);
            if end > bytes.len() || start > end {
                return Err(Error::Internal(format!(
                    "shuffle read of {} bytes is missing slice {r:?} (from {base})",
                    bytes.len()
                )));
            }
            Ok(bytes.slice(start..end))
        })
        .collect()
}

/// Groups slice ranges (in reading order) into reads: consecutive slices of one object
/// that lie back to back become one GET of at most [`MAX_MERGED_FETCH`] bytes (or one
/// slice, whatever its size).
fn fetches(ranges: Vec<(Path, std::ops::Range<u64>)>) -> Vec<Read> {
    let mut reads: Vec<Read> = Vec::new();
    for (path, r) in ranges {
        if let Some(Read::Fetch {
            object,
            range,
            slices,
        }) = reads.last_mut()
        {
            if *object == path && range.end == r.start && r.end - range.start <= MAX_MERGED_FETCH {
                range.end = r.end;
                slices.push(r);
                continue;
            }
        }
        reads.push(Read::Fetch {
            object: path,
            range: r.clone(),
            slices: vec![r],
        });
    }
    reads
}

type SharedFetch = futures::future::Shared<
    futures::future::BoxFuture<
        'static,
        std::result::Result<bytes::Bytes, Arc<object_store::Error>>,
    >,
>;

/// The hash-shuffle reads of one task, shared by the reader partitions it runs. A task
/// running plan partitions `a..b` (coalesced) reads slice `p` of every producer in
/// partition `p`, and a stage fused into a task runs every partition of its readers; the
/// slices one task reads of one producer lie back to back in its object, so they are
/// fetched with one GET (at most [`MAX_MERGED_FETCH`] bytes) by whichever partition asks
/// first, and each partition takes its own slice of it — P requests per task instead of
/// P per partition. A fetched range is dropped once every partition that reads it took
/// its slice.
pub struct SharedFetches {
    own: HashMap<u32, std::ops::Range<usize>>,
    pending: std::sync::Mutex<HashMap<String, (SharedFetch, usize)>>,
}

impl std::fmt::Debug for SharedFetches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFetches")
            .field("own", &self.own)
            .finish_non_exhaustive()
    }
}

impl SharedFetches {
    /// Shared reads for a task running plan partitions `partitions` of a stage whose own
    /// inputs are `own` (readers of other stages — those of stages fused into the task —
    /// run all their partitions in the task).
    pub fn new(
        own: impl IntoIterator<Item = u32>,
        partitions: std::ops::Range<usize>,
    ) -> Arc<Self> {
        Arc::new(Self {
            own: own.into_iter().map(|s| (s, partitions.clone())).collect(),
            pending: Default::default(),
        })
    }

    /// The partitions the task runs of a reader of `stage` with `width` partitions.
    fn partitions(&self, stage: u32, width: usize) -> std::ops::Range<usize> {
        self.own.get(&stage).cloned().unwrap_or(0..width)
    }

    /// Whether reader partition `partition` of a reader of `stage` (of `width`
    /// partitions) shares its reads with other partitions of the task.
    fn shares(&self, stage: u32, width: usize, partition: usize) -> bool {
        let partitions = self.partitions(stage, width);
        partitions.len() > 1 && partitions.contains(&partition) && partitions.end <= width
    }

    /// What partition `partition` reads of `output` when the task runs `partitions`: its
    /// slice, from a fetch shared with the other partitions when several of them read
    /// something of `output` and their slices fit one merged GET; nothing for an empty
    /// slice.
    fn read(
        &self,
        output: &TaskOutput,
        partitions: &std::ops::Range<usize>,
        partition: usize,
    ) -> Result<Option<Read>> {
        let object = Path::from(output.object.as_str());
        let slice = output.slice(partition)?;
        if slice.is_empty() {
            return Ok(None);
        }
        let first = output.slice(partitions.start)?.start;
        let last = output.slice(partitions.end - 1)?.end;
        let takers = partitions
            .clone()
            .map(|p| output.slice(p).map(|r| !r.is_empty()))
            .collect::<Result<Vec<bool>>>()?
            .into_iter()
            .filter(|nonempty| *nonempty)
            .count();
        if takers < 2 || last - first > MAX_MERGED_FETCH {
            return Ok(Some(Read::Fetch {
                object,
                range: slice.clone(),
                slices: vec![slice],
            }));
        }
        Ok(Some(Read::Shared {
            object,
            range: first..last,
            slice,
            takers,
        }))
    }

    /// The bytes of `range` of `object`, fetched by the first of its `takers` to ask;
    /// whether this call fetched them.
    async fn get(
        &self,
        store: &Arc<dyn object_store::ObjectStore>,
        object: &Path,
        range: std::ops::Range<u64>,
        takers: usize,
    ) -> Result<(bytes::Bytes, bool)> {
        let key = format!("{object}#{}-{}", range.start, range.end);
        let (fetch, fetched) = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            match pending.get_mut(&key) {
                Some((fetch, left)) => {
                    let fetch = fetch.clone();
                    *left -= 1;
                    if *left == 0 {
                        pending.remove(&key);
                    }
                    (fetch, false)
                }
                None => {
                    let (store, object) = (store.clone(), object.clone());
                    let fetch: SharedFetch =
                        async move { store.get_range(&object, range).await.map_err(Arc::new) }
                            .boxed()
                            .shared();
                    if takers > 1 {
                        pending.insert(key, (fetch.clone(), takers - 1));
                    }
                    (fetch, true)
                }
            }
        };
        let bytes = fetch.await.map_err(|e| {
            Error::ObjectStore(object_store::Error::Generic {
                store: "shuffle",
                source: Box::new(SharedError(e)),
            })
        })?;
        Ok((bytes, fetched))
    }
}

/// A shared fetch's error, as each of its takers reports it.
#[derive(Debug)]
struct SharedError(Arc<object_store::Error>);

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedError {}

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
        let width = self.properties.partitioning.partition_count();
        let reads = match &inputs.shared {
            Some(shared)
                if matches!(self.mode, ReadMode::Hash(_))
                    && shared.shares(self.stage, width, partition) =>
            {
                let partitions = shared.partitions(self.stage, width);
                outputs
                    .iter()
                    .map(|o| shared.read(o, &partitions, partition))
                    .collect::<Result<Vec<_>>>()?
                    .into_iter()
                    .flatten()
                    .collect()
            }
            _ => fetches(self.ranges(partition, outputs)?),
        };
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let bytes_read = MetricBuilder::new(&self.metrics).counter(BYTES_READ, partition);
        let fetches = MetricBuilder::new(&self.metrics).counter(FETCHES, partition);
        bytes_read.add(reads.iter().map(Read::bytes).sum::<u64>() as usize);
        let store = inputs.store.clone();
        let shared = inputs.shared.clone();
        let schema = self.schema.clone();
        let batches = futures::stream::iter(reads)
            .map(move |read| {
                let (store, shared, fetches) = (store.clone(), shared.clone(), fetches.clone());
                async move {
                    let slices = read.get(&store, shared.as_deref(), &fetches).await?;
                    let mut batches = Vec::new();
                    for slice in slices {
                        batches.extend(decode_slice(slice)?);
                    }
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
            handoff: None,
            cpu: None,
            written: None,
        }
    }

    fn reader(mode: ReadMode, producers: usize) -> ShuffleReaderExec {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, true)]));
        ShuffleReaderExec::new(3, producers, mode, schema, None)
    }

    /// Slices of one object that lie back to back are read with one GET (up to the
    /// merged-read limit); a gap, another object or the limit starts a new one.
    #[test]
    fn back_to_back_slices_of_one_object_are_one_read() {
        let p = |s: &str| Path::from(s);
        let reads = fetches(vec![
            (p("a"), 0..4),
            (p("a"), 4..9),
            (p("a"), 12..20),
            (p("b"), 20..30),
            (p("b"), 30..30 + MAX_MERGED_FETCH),
        ]);
        let shape: Vec<(String, std::ops::Range<u64>, usize)> = reads
            .iter()
            .map(|r| match r {
                Read::Fetch {
                    object,
                    range,
                    slices,
                } => (object.to_string(), range.clone(), slices.len()),
                Read::Shared { .. } => unreachable!(),
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("a".into(), 0..9, 2),
                ("a".into(), 12..20, 1),
                ("b".into(), 20..30, 1),
                ("b".into(), 30..30 + MAX_MERGED_FETCH, 1),
            ]
        );
    }

    /// The partitions of a coalesced task read each producer with one GET between them,
    /// every partition getting exactly its own rows.
    #[tokio::test]
    async fn a_coalesced_task_reads_each_producer_once() {
        use crate::requests::{sink, CountingStore, Tally};
        use crate::shuffle::format::ObjectBuilder;
        use datafusion::arrow::array::Int32Array;
        use object_store::memory::InMemory;
        use object_store::ObjectStore;

        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, true)]));
        let tally = Tally::new();
        let store: Arc<dyn ObjectStore> = Arc::new(CountingStore::new(
            Arc::new(InMemory::new()),
            sink(tally.clone()),
        ));
        let mut outputs = Vec::new();
        for producer in 0..2 {
            let mut builder = ObjectBuilder::new(schema.clone(), 4).unwrap();
            for slice in 0..4 {
                let values: Int32Array = vec![producer * 100 + slice as i32].into();
                let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(values)]).unwrap();
                builder.append(slice, &batch).unwrap();
            }
            let object = builder.finish().unwrap();
            let name = format!("p{producer}");
            let ends = object.ends.clone();
            object
                .upload(&store, &Path::from(name.as_str()))
                .await
                .unwrap();
            outputs.push(output(&name, ends));
        }
        let before = tally.counts().object_gets;
        let inputs = ShuffleInputs {
            store: store.clone(),
            stages: HashMap::from([(3, outputs)]),
            fetch_concurrency: 4,
            shared: Some(SharedFetches::new([3], 1..4)),
        };
        let config = datafusion::prelude::SessionConfig::new().with_extension(Arc::new(inputs));
        let ctx = Arc::new(TaskContext::default().with_session_config(config));
        let hash = reader(ReadMode::Hash(Partitioning::UnknownPartitioning(4)), 2);
        let runs = (1..4).map(|p| {
            let stream = hash.execute(p, ctx.clone()).unwrap();
            async move {
                let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
                let mut values: Vec<i32> = batches
                    .iter()
                    .flat_map(|b| {
                        b.column(0)
                            .as_any()
                            .downcast_ref::<Int32Array>()
                            .unwrap()
                            .values()
                            .to_vec()
                    })
                    .collect();
                values.sort();
                values
            }
        });
        let values = futures::future::join_all(runs).await;
        assert_eq!(values, vec![vec![1, 101], vec![2, 102], vec![3, 103]]);
        assert_eq!(
            tally.counts().object_gets - before,
            2,
            "one GET per producer for three partitions"
        );
        let metrics = hash.metrics().unwrap();
        assert_eq!(metrics.sum_by_name(FETCHES).unwrap().as_usize(), 2);
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
