//! [`PartitionRangeExec`]: a contiguous range of another plan's partitions, as a plan of
//! its own.
//!
//! A coalesced task ([`crate::plan::adaptive`]) runs several partitions of its stage plan.
//! The writer puts this node over the stage plan and a merge above it —
//! `CoalescePartitionsExec`, or `SortPreservingMergeExec` when the output is ordered — so
//! the partitions run concurrently, like any DataFusion plan, and come out as one stream.

use std::ops::Range;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};

/// Partitions `range` of `input`, renumbered from 0. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct PartitionRangeExec {
    input: Arc<dyn ExecutionPlan>,
    range: Range<usize>,
    properties: Arc<PlanProperties>,
}

impl PartitionRangeExec {
    /// Partitions `range` of `input`; an error if `input` has fewer.
    pub fn try_new(input: Arc<dyn ExecutionPlan>, range: Range<usize>) -> DfResult<Self> {
        let available = input.properties().partitioning.partition_count();
        if range.is_empty() || range.end > available {
            return Err(DataFusionError::Internal(format!(
                "partitions {range:?} requested of a plan with {available}"
            )));
        }
        let properties = Arc::new(
            input
                .properties()
                .as_ref()
                .clone()
                .with_partitioning(Partitioning::UnknownPartitioning(range.len())),
        );
        Ok(Self {
            input,
            range,
            properties,
        })
    }
}

impl DisplayAs for PartitionRangeExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match t {
            DisplayFormatType::TreeRender => write!(f, "partitions: {:?}", self.range),
            _ => write!(f, "PartitionRangeExec: partitions={:?}", self.range),
        }
    }
}

impl ExecutionPlan for PartitionRangeExec {
    fn name(&self) -> &'static str {
        "PartitionRangeExec"
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

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let child = crate::plan::only_child("PartitionRangeExec", children)?;
        Ok(Arc::new(Self::try_new(child, self.range.clone())?))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition >= self.range.len() {
            return Err(DataFusionError::Internal(format!(
                "PartitionRangeExec has {} partitions, asked for {partition}",
                self.range.len()
            )));
        }
        self.input.execute(self.range.start + partition, context)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int32Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_plan::{
        collect_partitioned, ChildrenPropertiesMode, ReplaceChildrenOptions,
    };

    use super::*;

    /// Partition `i` of the range is partition `start + i` of the input; ranges past the
    /// input are refused.
    #[tokio::test]
    async fn renumbers_a_range_of_partitions() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        let part = |v: i32| {
            vec![
                RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(vec![v]))])
                    .unwrap(),
            ]
        };
        let input = MemorySourceConfig::try_new_exec(
            &[part(0), part(1), part(2), part(3)],
            schema.clone(),
            None,
        )
        .unwrap();
        let range = Arc::new(PartitionRangeExec::try_new(input.clone(), 1..3).unwrap());
        let got = collect_partitioned(range, Arc::new(TaskContext::default()))
            .await
            .unwrap();
        let values: Vec<i32> = got
            .iter()
            .map(|p| {
                p[0].column(0)
                    .as_any()
                    .downcast_ref::<Int32Array>()
                    .unwrap()
                    .value(0)
            })
            .collect();
        assert_eq!(values, vec![1, 2]);
        assert!(PartitionRangeExec::try_new(input.clone(), 3..5).is_err());
        assert!(PartitionRangeExec::try_new(input.clone(), 2..2).is_err());

        // Rebuilt with one child it keeps its range; with another number it refuses,
        // naming itself (plan::only_child, shared by every single-input node of ours).
        let range: Arc<dyn ExecutionPlan> =
            Arc::new(PartitionRangeExec::try_new(input.clone(), 1..3).unwrap());
        let recompute = || ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        let rebuilt = range
            .clone()
            .replace_children(vec![input.clone()], recompute())
            .unwrap();
        assert_eq!(rebuilt.properties().partitioning.partition_count(), 2);
        let two: Vec<Arc<dyn ExecutionPlan>> = vec![input.clone(), input];
        for children in [vec![], two] {
            let err = range
                .clone()
                .replace_children(children, recompute())
                .unwrap_err();
            assert!(
                err.to_string()
                    .contains("PartitionRangeExec takes one child"),
                "{err}"
            );
        }
    }
}
