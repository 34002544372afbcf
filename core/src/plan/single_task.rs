//! Sub-plans the splitter cannot cut, run whole in one task.
//!
//! A recursive query (`WITH RECURSIVE`) runs its recursive term again and again over a
//! work table that lives in the process: no exchange inside it may become a stage
//! boundary. [`run_whole`] wraps every such sub-plan in a [`SingleTaskExec`], which shows
//! the splitter no children — so its exchanges stay in-process operators — and runs its
//! sub-plan's one output partition in the task of the stage it lands in. The sub-plan
//! travels whole ([`crate::shuffle::codec`]): its `RecursiveQueryExec` with its name and
//! distinctness, its work table readers with the table's full schema and projection.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::recursive_query::RecursiveQueryExec;
use datafusion::physical_plan::work_table::WorkTableExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PhysicalExpr,
    PlanProperties, SendableRecordBatchStream,
};

/// Runs a sub-plan whole (every partition of it, in-process) as one partition. See the
/// [module docs](self).
#[derive(Debug)]
pub struct SingleTaskExec {
    inner: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl SingleTaskExec {
    /// `inner`, one partition (coalesced if it has more).
    pub fn new(inner: Arc<dyn ExecutionPlan>) -> Self {
        let inner: Arc<dyn ExecutionPlan> = if inner.output_partitioning().partition_count() > 1 {
            Arc::new(CoalescePartitionsExec::new(inner))
        } else {
            inner
        };
        let properties = Arc::new(inner.properties().as_ref().clone());
        Self { inner, properties }
    }

    /// The sub-plan it runs.
    pub fn inner(&self) -> &Arc<dyn ExecutionPlan> {
        &self.inner
    }
}

impl DisplayAs for SingleTaskExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let shown = datafusion::physical_plan::displayable(self.inner.as_ref())
            .one_line()
            .to_string();
        write!(
            f,
            "SingleTaskExec: runs whole in one task: {}",
            shown.trim()
        )
    }
}

impl ExecutionPlan for SingleTaskExec {
    fn name(&self) -> &'static str {
        "SingleTaskExec"
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

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        crate::plan::no_children("SingleTaskExec", self, children)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.inner.metrics()
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        self.inner.execute(partition, context)
    }
}

/// Wraps every sub-plan the splitter must not cut (recursive queries) in a
/// [`SingleTaskExec`].
pub fn run_whole(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_down(|node| {
        if node.downcast_ref::<RecursiveQueryExec>().is_some() {
            let wrapped: Arc<dyn ExecutionPlan> = Arc::new(SingleTaskExec::new(node));
            return Ok(Transformed::new(wrapped, true, TreeNodeRecursion::Jump));
        }
        Ok(Transformed::no(node))
    })
    .map(|t| t.data)
}

/// A work table reader as it travels: the work table's full schema (the recursive
/// query's output) and the reader's projection of it, which `WorkTableExec` does not
/// expose — found here by matching the reader's columns to the query's by name.
#[derive(Debug)]
pub struct WorkTableRef {
    /// The recursive query's (and its work table's) name.
    pub name: String,
    /// The work table's full schema.
    pub table_schema: SchemaRef,
    /// The columns the reader keeps, if not all.
    pub projection: Option<Vec<usize>>,
    properties: Arc<PlanProperties>,
}

impl WorkTableRef {
    /// The reference for `reader` of a work table with `table_schema`.
    pub fn of(reader: &WorkTableExec, table_schema: &SchemaRef) -> DfResult<Self> {
        let read = reader.schema();
        let projection = if read.fields() == table_schema.fields() {
            None
        } else {
            let indices = read
                .fields()
                .iter()
                .map(|f| {
                    table_schema.index_of(f.name()).map_err(|_| {
                        DataFusionError::Internal(format!(
                            "work table {} has no column {}",
                            reader.name(),
                            f.name()
                        ))
                    })
                })
                .collect::<DfResult<Vec<_>>>()?;
            Some(indices)
        };
        Ok(Self {
            name: reader.name().to_string(),
            table_schema: table_schema.clone(),
            projection,
            properties: reader.properties().clone(),
        })
    }

    /// The reader again (its work table is assigned by the recursive query around it).
    pub fn reader(&self) -> DfResult<WorkTableExec> {
        WorkTableExec::new(
            self.name.clone(),
            self.table_schema.clone(),
            self.projection.clone(),
        )
    }
}

impl DisplayAs for WorkTableRef {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "WorkTableRef: name={}", self.name)
    }
}

impl ExecutionPlan for WorkTableRef {
    fn name(&self) -> &'static str {
        "WorkTableRef"
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

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        Err(DataFusionError::Internal(
            "a WorkTableRef only travels; it is decoded as a WorkTableExec".into(),
        ))
    }
}

/// `recursive`'s recursive term with its work table readers replaced by
/// [`WorkTableRef`]s, ready to encode.
pub fn with_work_table_refs(recursive: &RecursiveQueryExec) -> DfResult<Arc<dyn ExecutionPlan>> {
    let table_schema = recursive.schema();
    let name = recursive.name().to_string();
    recursive
        .recursive_term()
        .clone()
        .transform_down(|node| match node.downcast_ref::<WorkTableExec>() {
            Some(reader) if reader.name() == name => {
                let reference: Arc<dyn ExecutionPlan> =
                    Arc::new(WorkTableRef::of(reader, &table_schema)?);
                Ok(Transformed::yes(reference))
            }
            _ => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
}
