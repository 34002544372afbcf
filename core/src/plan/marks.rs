//! Distributed semi, anti and mark joins with a broadcast build side: each probe task
//! marks the build rows it matched, and one task combines the marks.
//!
//! DataFusion plans `EXISTS` / `NOT EXISTS` / `IN` as a collect-left hash join of type
//! left semi, left anti or left mark when the build side is the small one: the join emits
//! the build rows that some probe row matched (or none did) once the *last* probe
//! partition has finished, from a bitmap shared by the partitions of one process. Split
//! into tasks, no task sees every probe partition. Rewriting the join as a partitioned
//! one ([`super::distribute_joins`]) is correct but shuffles the large probe side on the
//! join keys. Instead, the stage splitter cuts three stages:
//!
//! 1. the build side, broadcast (read whole by every task of the next two);
//! 2. one task per probe partition, each running a [`TaskJoinExec`]: its own left-mark
//!    join of the whole build side against its probe partition, which writes one boolean
//!    per build row — "matched here";
//! 3. one task running a [`MarkCombineExec`]: the build rows (through the same join, so
//!    in the same order as every task of 2 holds them) with the marks of all tasks
//!    OR-ed position by position, filtered to the matched rows (semi), the unmatched
//!    rows (anti) or given the combined mark (mark).
//!
//! The probe side is scanned once and never shuffled; what moves is one bit-sized value
//! per build row per probe task.

use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatchOptions;
use datafusion::arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::compute::kernels::boolean::{not, or};
use datafusion::arrow::compute::{concat, concat_batches, filter_record_batch};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::JoinType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream,
};
use futures::{StreamExt, TryStreamExt};

use crate::shuffle::PartitionRangeExec;

/// Whether `join` is one this module distributes: a collect-left hash join of type left
/// semi, anti or mark (not null-aware) over several probe partitions.
pub fn applies(join: &HashJoinExec) -> bool {
    *join.partition_mode() == PartitionMode::CollectLeft
        && matches!(
            join.join_type(),
            JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark
        )
        && !join.null_aware
        && join.right().output_partitioning().partition_count() > 1
}

/// `join` as a left-mark join over `left` and `right`, projected to `projection`, fresh
/// (no build side collected yet, no metrics).
fn mark_join(
    join: &HashJoinExec,
    left: Arc<dyn ExecutionPlan>,
    right: Arc<dyn ExecutionPlan>,
    projection: Option<Vec<usize>>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    join.builder()
        .with_type(JoinType::LeftMark)
        .with_projection(projection)
        .with_fetch(None)
        .with_new_children(vec![left, right])?
        .reset_state()
        .recompute_properties()
        .build_exec()
}

/// The two halves of a distributed semi / anti / mark `join` whose build side `build`
/// is now a whole-output read of a broadcast stage: the probe stage's plan (a
/// [`TaskJoinExec`], one partition per probe partition, writing one mark per build row)
/// and, given a whole-output read of that stage (`marks`), the combining plan.
pub fn split(
    join: &HashJoinExec,
    build: Arc<dyn ExecutionPlan>,
) -> DfResult<(Arc<dyn ExecutionPlan>, MarkPlan)> {
    split_over(join, build, join.right().clone())
}

/// [`split`] with the probe tasks scanning `probe` (a plan with the join's right schema)
/// instead of the join's own right side.
pub fn split_over(
    join: &HashJoinExec,
    build: Arc<dyn ExecutionPlan>,
    probe: Arc<dyn ExecutionPlan>,
) -> DfResult<(Arc<dyn ExecutionPlan>, MarkPlan)> {
    let mark = build.schema().fields().len();
    let probe = mark_join(join, build.clone(), probe, Some(vec![mark]))?;
    let rows = mark_join(
        join,
        build,
        Arc::new(EmptyExec::new(join.right().schema())),
        None,
    )?;
    let combine = MarkPlan {
        join_type: *join.join_type(),
        projection: join.projection.as_ref().map(|p| p.to_vec()),
        fetch: join.fetch(),
        rows,
        schema: join.schema(),
    };
    Ok((Arc::new(TaskJoinExec::try_new(probe)?), combine))
}

/// The combining half of [`split`], waiting for the reader of the probe stage's marks.
pub struct MarkPlan {
    join_type: JoinType,
    projection: Option<Vec<usize>>,
    fetch: Option<usize>,
    rows: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
}

impl MarkPlan {
    /// The [`MarkCombineExec`] over `marks`; an error if it would not answer with the
    /// original join's schema.
    pub fn combine(self, marks: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
        let exec = MarkCombineExec::try_new(
            self.join_type,
            self.projection,
            self.fetch,
            self.rows,
            marks,
        )?;
        if exec.schema().fields() != self.schema.fields() {
            return Err(DataFusionError::Internal(format!(
                "mark combine answers {:?}, the join {:?}",
                exec.schema(),
                self.schema
            )));
        }
        Ok(Arc::new(exec))
    }
}

/// Each partition runs its own copy of a collect-left hash join over that one probe
/// partition: the join's end-of-probe output (its unmatched or marked build rows) then
/// comes once per partition, for what that partition saw. See the [module docs](self).
#[derive(Debug)]
pub struct TaskJoinExec {
    join: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    /// The copies run so far (their metrics are this node's).
    runs: Mutex<Vec<Arc<dyn ExecutionPlan>>>,
}

/// The hash join at the top of `plan`, under any wrappers of one child (the executor
/// wraps joins to stop them promptly).
fn top_join(plan: &Arc<dyn ExecutionPlan>) -> Option<&HashJoinExec> {
    match plan.downcast_ref::<HashJoinExec>() {
        Some(join) => Some(join),
        None => match plan.children().as_slice() {
            [only] => top_join(only),
            _ => None,
        },
    }
}

impl TaskJoinExec {
    /// Over `join`: a collect-left [`HashJoinExec`], possibly under wrappers of one child.
    pub fn try_new(join: Arc<dyn ExecutionPlan>) -> DfResult<Self> {
        let Some(hash) = top_join(&join) else {
            return Err(DataFusionError::Internal(format!(
                "TaskJoinExec runs a hash join, not {}",
                join.name()
            )));
        };
        if *hash.partition_mode() != PartitionMode::CollectLeft {
            return Err(DataFusionError::Internal(
                "TaskJoinExec runs a collect-left hash join".into(),
            ));
        }
        let probe_partitions = hash.right().output_partitioning().partition_count();
        let properties = Arc::new(
            join.properties()
                .as_ref()
                .clone()
                .with_partitioning(Partitioning::UnknownPartitioning(probe_partitions)),
        );
        Ok(Self {
            join,
            properties,
            runs: Mutex::new(Vec::new()),
        })
    }
}

impl DisplayAs for TaskJoinExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match t {
            DisplayFormatType::TreeRender => write!(f, "a join per probe partition"),
            _ => write!(f, "TaskJoinExec: a join per probe partition"),
        }
    }
}

impl ExecutionPlan for TaskJoinExec {
    fn name(&self) -> &'static str {
        "TaskJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.join]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let child = crate::plan::only_child("TaskJoinExec", children)?;
        Ok(Arc::new(Self::try_new(child)?))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        let mut set = MetricsSet::new();
        for run in self.runs.lock().expect("runs lock").iter() {
            let metrics = top_join(run).and_then(|join| join.metrics());
            for metric in metrics.iter().flat_map(|m| m.iter()) {
                set.push(metric.clone());
            }
        }
        Some(set)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        // A fresh copy of the join (and of its wrappers) over this one probe partition.
        let run = self
            .join
            .clone()
            .transform_down(|node| {
                let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                    return Ok(Transformed::no(node));
                };
                let probe = Arc::new(PartitionRangeExec::try_new(
                    join.right().clone(),
                    partition..partition + 1,
                )?);
                let fresh = join
                    .builder()
                    .with_new_children(vec![join.left().clone(), probe])?
                    .reset_state()
                    .recompute_properties()
                    .build_exec()?;
                Ok(Transformed::new(fresh, true, TreeNodeRecursion::Jump))
            })?
            .data;
        self.runs.lock().expect("runs lock").push(run.clone());
        run.execute(0, context)
    }
}

/// Combines the per-task marks of a [`TaskJoinExec`] stage into the result of the
/// original semi, anti or mark join. Child 0 (`rows`) gives the build rows with a mark
/// column, in the order the tasks held them; child 1 (`marks`) every task's marks, each
/// a run of one boolean per build row. One partition. See the [module docs](self).
#[derive(Debug)]
pub struct MarkCombineExec {
    join_type: JoinType,
    projection: Option<Vec<usize>>,
    fetch: Option<usize>,
    rows: Arc<dyn ExecutionPlan>,
    marks: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl MarkCombineExec {
    /// Combines `marks` over `rows` for a join of `join_type` (left semi, anti or mark),
    /// then applies the join's `projection` and `fetch`.
    pub fn try_new(
        join_type: JoinType,
        projection: Option<Vec<usize>>,
        fetch: Option<usize>,
        rows: Arc<dyn ExecutionPlan>,
        marks: Arc<dyn ExecutionPlan>,
    ) -> DfResult<Self> {
        let fields = rows.schema().fields().clone();
        let Some(width) = fields.len().checked_sub(1) else {
            return Err(DataFusionError::Internal(
                "mark combine rows have no mark column".into(),
            ));
        };
        let kept = match join_type {
            JoinType::LeftSemi | JoinType::LeftAnti => width,
            JoinType::LeftMark => width + 1,
            other => {
                return Err(DataFusionError::Internal(format!(
                    "mark combine for a {other} join"
                )))
            }
        };
        let base = Schema::new(fields[..kept].to_vec());
        let schema = Arc::new(match &projection {
            Some(p) => base.project(p)?,
            None => base,
        });
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Ok(Self {
            join_type,
            projection,
            fetch,
            rows,
            marks,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The original join's type.
    pub fn join_type(&self) -> JoinType {
        self.join_type
    }

    /// The original join's projection.
    pub fn projection(&self) -> Option<&[usize]> {
        self.projection.as_deref()
    }
}

impl DisplayAs for MarkCombineExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match t {
            DisplayFormatType::TreeRender => write!(f, "join_type={}", self.join_type),
            _ => write!(f, "MarkCombineExec: join_type={}", self.join_type),
        }
    }
}

impl ExecutionPlan for MarkCombineExec {
    fn name(&self) -> &'static str {
        "MarkCombineExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.rows, &self.marks]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.len() != 2 {
            return Err(DataFusionError::Internal(format!(
                "MarkCombineExec takes two children, got {}",
                children.len()
            )));
        }
        let marks = children.swap_remove(1);
        let rows = children.swap_remove(0);
        Ok(Arc::new(Self::try_new(
            self.join_type,
            self.projection.clone(),
            self.fetch,
            rows,
            marks,
        )?))
    }

    fn fetch(&self) -> Option<usize> {
        self.fetch
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "MarkCombineExec has one partition, asked for {partition}"
            )));
        }
        let rows = self.rows.execute(0, context.clone())?;
        let marks = self.marks.execute(0, context.clone())?;
        let rows_schema = self.rows.schema();
        let schema = self.schema();
        let join_type = self.join_type;
        let projection = self.projection.clone();
        let fetch = self.fetch;
        let batch_size = context.session_config().batch_size().max(1);
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let out_schema = schema.clone();
        let combined = futures::stream::once(async move {
            let rows: Vec<RecordBatch> = rows.try_collect().await?;
            let marks: Vec<RecordBatch> = marks.try_collect().await?;
            let timer = baseline.elapsed_compute().timer();
            let rows = concat_batches(&rows_schema, &rows)?;
            let mark_arrays: Vec<&dyn Array> = marks.iter().map(|b| b.column(0).as_ref()).collect();
            let marks = if mark_arrays.is_empty() {
                BooleanArray::from(Vec::<bool>::new())
            } else {
                concat(&mark_arrays)?.as_boolean().clone()
            };
            let batch = combine(join_type, &rows, &marks)?;
            let batch = match &projection {
                Some(p) => batch.project(p)?,
                None => batch,
            };
            let batch = match fetch {
                Some(n) if n < batch.num_rows() => batch.slice(0, n),
                _ => batch,
            };
            // Row count given: a projection of no columns (`count(*)` over the join)
            // still has its rows.
            let batch = RecordBatch::try_new_with_options(
                out_schema,
                batch.columns().to_vec(),
                &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
            )?;
            timer.done();
            baseline.record_output(batch.num_rows());
            let pieces: Vec<DfResult<RecordBatch>> = (0..batch.num_rows())
                .step_by(batch_size)
                .map(|start| Ok(batch.slice(start, batch_size.min(batch.num_rows() - start))))
                .collect();
            Ok::<_, DataFusionError>(futures::stream::iter(pieces))
        })
        .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            combined.boxed(),
        )))
    }
}

/// The result of a `join_type` join from the build `rows` (their last column a mark,
/// ignored) and the concatenated per-task `marks`, each task's a run of `rows.num_rows()`
/// booleans in row order; a null mark counts as unmatched.
fn combine(join_type: JoinType, rows: &RecordBatch, marks: &BooleanArray) -> DfResult<RecordBatch> {
    let n = rows.num_rows();
    if n == 0 || !marks.len().is_multiple_of(n) {
        if n == 0 && marks.is_empty() {
            let width = rows.num_columns() - usize::from(join_type != JoinType::LeftMark);
            return Ok(rows.project(&(0..width).collect::<Vec<_>>())?);
        }
        return Err(DataFusionError::Internal(format!(
            "the probe tasks' marks do not line up with the build side: {} marks for {n} rows",
            marks.len()
        )));
    }
    let mut matched = BooleanArray::from(vec![false; n]);
    for run in 0..marks.len() / n {
        let slice = marks.slice(run * n, n);
        let slice = BooleanArray::new(
            slice.values()
                & &slice
                    .nulls()
                    .map(|n| n.inner().clone())
                    .unwrap_or_else(|| datafusion::arrow::buffer::BooleanBuffer::new_set(n)),
            None,
        );
        matched = or(&matched, &slice)?;
    }
    let width = rows.num_columns() - 1;
    let build = rows.project(&(0..width).collect::<Vec<_>>())?;
    Ok(match join_type {
        JoinType::LeftSemi => filter_record_batch(&build, &matched)?,
        JoinType::LeftAnti => filter_record_batch(&build, &not(&matched)?)?,
        _ => {
            let mut columns = build.columns().to_vec();
            columns.push(Arc::new(matched));
            RecordBatch::try_new(rows.schema(), columns)?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::datatypes::{DataType, Field};

    fn rows(values: &[i32]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("mark", DataType::Boolean, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(values.to_vec())),
                Arc::new(BooleanArray::from(vec![false; values.len()])),
            ],
        )
        .unwrap()
    }

    fn ints(batch: &RecordBatch) -> Vec<i32> {
        batch
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
            .values()
            .to_vec()
    }

    /// A row matched in any task is matched; duplicates keep their multiplicity; marks
    /// that do not come in whole runs are an error, not a guess.
    #[test]
    fn marks_are_or_ed_run_by_run() {
        let build = rows(&[1, 2, 2, 3]);
        // Two tasks: the first matched row 0 and one of the 2s, the second row 3.
        let marks = BooleanArray::from(vec![
            Some(true),
            Some(false),
            Some(true),
            None,
            Some(false),
            Some(false),
            Some(false),
            Some(true),
        ]);
        let semi = combine(JoinType::LeftSemi, &build, &marks).unwrap();
        assert_eq!(ints(&semi), vec![1, 2, 3]);
        assert_eq!(semi.num_columns(), 1);
        let anti = combine(JoinType::LeftAnti, &build, &marks).unwrap();
        assert_eq!(ints(&anti), vec![2]);
        let mark = combine(JoinType::LeftMark, &build, &marks).unwrap();
        assert_eq!(
            mark.column(1).as_boolean(),
            &BooleanArray::from(vec![true, false, true, true])
        );
        let uneven = BooleanArray::from(vec![true; 6]);
        let err = combine(JoinType::LeftSemi, &build, &uneven).unwrap_err();
        assert!(err.to_string().contains("6 marks for 4 rows"), "{err}");
        let empty = combine(
            JoinType::LeftAnti,
            &rows(&[]),
            &BooleanArray::from(Vec::<bool>::new()),
        );
        assert_eq!(empty.unwrap().num_rows(), 0);
        // No task at all (an empty probe side): every build row is unmatched.
        let none = combine(
            JoinType::LeftAnti,
            &build,
            &BooleanArray::from(Vec::<bool>::new()),
        );
        assert_eq!(ints(&none.unwrap()), vec![1, 2, 2, 3]);
    }
}
