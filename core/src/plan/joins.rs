//! [`distribute_joins`]: the pass that makes collected-build-side joins safe to split
//! into tasks (left semi, anti and mark joins excepted: [`super::marks`]).
//!
//! A collect-left hash join or a nested-loop join whose type emits unmatched build-side
//! rows (left, left semi / anti / mark, full) emits them when the *last* of its probe
//! partitions finishes: a counter and a "visited" bitmap shared by the partitions of one
//! process. When each probe partition is a separate task, that moment never comes (or
//! comes once per task, with a partial bitmap). So such joins are rewritten first:
//! a hash join becomes a partitioned join, both sides hash-shuffled on the join keys
//! (each task then owns every build row of its keys); a null-aware anti join or a
//! nested-loop join, which have no keys to split on, read their probe side in one
//! partition (one task).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::JoinType;
use datafusion::error::Result as DfResult;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, NestedLoopJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    ReplaceChildrenOptions,
};

/// Join types that emit build-side rows after the whole probe side was seen.
fn emits_build_side_at_end(join_type: JoinType) -> bool {
    matches!(
        join_type,
        JoinType::Left
            | JoinType::LeftAnti
            | JoinType::LeftSemi
            | JoinType::LeftMark
            | JoinType::Full
    )
}

/// Rewrites the joins described in the [module docs](self).
pub fn distribute_joins(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            let probe_partitions = join.right().output_partitioning().partition_count();
            if *join.partition_mode() != PartitionMode::CollectLeft
                || !emits_build_side_at_end(*join.join_type())
                || probe_partitions <= 1
                // The stage splitter distributes these without a shuffle of the probe side.
                || super::marks::applies(join)
            {
                return Ok(Transformed::no(node));
            }
            if join.null_aware {
                let right = single_partition(join.right());
                return replace_children(&node, vec![join.left().clone(), right]);
            }
            let (left_keys, right_keys): (Vec<_>, Vec<_>) = join.on().iter().cloned().unzip();
            let left = hash_input(join.left(), left_keys, probe_partitions)?;
            let right = hash_input(join.right(), right_keys, probe_partitions)?;
            let partitioned = join
                .builder()
                .with_partition_mode(PartitionMode::Partitioned)
                .with_new_children(vec![left, right])?
                .recompute_properties()
                .build_exec()?;
            return Ok(Transformed::yes(partitioned));
        }
        if let Some(join) = node.downcast_ref::<NestedLoopJoinExec>() {
            if emits_build_side_at_end(*join.join_type())
                && join.right().output_partitioning().partition_count() > 1
            {
                let right = single_partition(join.right());
                return replace_children(&node, vec![join.left().clone(), right]);
            }
        }
        Ok(Transformed::no(node))
    })
    .map(|t| t.data)
}

fn replace_children(
    node: &Arc<dyn ExecutionPlan>,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> DfResult<Transformed<Arc<dyn ExecutionPlan>>> {
    let new = node.clone().replace_children(
        children,
        ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
    )?;
    Ok(Transformed::yes(new))
}

fn single_partition(plan: &Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    Arc::new(CoalescePartitionsExec::new(plan.clone()))
}

/// `plan` hash-partitioned on `keys` into `n` partitions, looking through a coalesce or
/// an existing repartition (which the new one replaces).
fn hash_input(
    plan: &Arc<dyn ExecutionPlan>,
    keys: Vec<Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
    n: usize,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    let mut input = plan.clone();
    loop {
        if let Some(c) = input.downcast_ref::<CoalescePartitionsExec>() {
            if c.fetch().is_none() {
                input = c.input().clone();
                continue;
            }
        }
        if let Some(r) = input.downcast_ref::<RepartitionExec>() {
            if !r.preserve_order() {
                input = r.input().clone();
                continue;
            }
        }
        break;
    }
    Ok(Arc::new(RepartitionExec::try_new(
        input,
        Partitioning::Hash(keys, n),
    )?))
}
