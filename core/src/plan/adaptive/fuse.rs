//! The fuse rule: a one-task stage feeding a one-task stage runs inside it, and the
//! plan such a task runs ([`fuse`]).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::DataFusionError;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use crate::shuffle::{ReadMode, ShuffleReaderExec, ShuffleWriterExec};
use crate::state::{AdaptiveRule, JobSnapshot, StageDecision, StageRecord};
use crate::{EngineConfig, Result};

/// Whether `stage` was fused into its consumer.
pub(super) fn is_fused(snapshot: &JobSnapshot, stage: u32) -> Option<&StageRecord> {
    snapshot
        .stages
        .iter()
        .find(|s| s.stage == stage)
        .filter(|s| {
            s.decision
                .as_ref()
                .is_some_and(|d| d.rule == AdaptiveRule::Fused)
        })
}

/// The fuse rule: a stage sized to one task, with no fused stage of its own, whose one
/// consumer is a single-task stage reading nothing else runs inside that consumer's task.
/// Like the coalesce rule it depends only on the stage's committed inputs and the stage
/// graph cut at submit — never on how far other stages have got — so every scheduler
/// that claims the stage decides the same. (The consumer cannot have been claimed yet:
/// it waits for this stage.)
pub(super) fn fuse_into_consumer(
    stage: &StageRecord,
    sized: StageDecision,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> StageDecision {
    if !config.adaptive || sized.tasks != 1 || !sized.fused.is_empty() || sized.switched.is_some() {
        return sized;
    }
    // A stage waiting for this one to decide a join switch counts as a consumer.
    let mut consumers = snapshot
        .stages
        .iter()
        .filter(|c| c.waits_for(true).any(|s| s == stage.stage));
    let (Some(consumer), None) = (consumers.next(), consumers.next()) else {
        return sized;
    };
    if consumer.tasks != 1 || consumer.inputs.len() != 1 {
        return sized;
    }
    StageDecision {
        rule: AdaptiveRule::Fused,
        tasks: 0,
        starts: vec![],
        note: format!(
            "fused into stage {}: one task feeding one task, so its plan runs inside that \
             task instead of writing and reading a shuffle",
            consumer.stage
        ),
        ..sized
    }
}

/// `consumer` (a stage plan) with the reader of every stage in `fused` replaced by that
/// stage's own plan (the input of its writer): what a task of a stage with fused inputs
/// runs. A gather reads the producer's partitions one by one — exactly the producer's
/// plan partitions; a broadcast reads them all as one; a hash shuffle repartitions them
/// in process.
pub fn fuse(
    consumer: Arc<dyn ExecutionPlan>,
    fused: &HashMap<u32, Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    if fused.is_empty() {
        return Ok(consumer);
    }
    let plan = consumer.transform_up(|node| {
        let Some(reader) = node.downcast_ref::<ShuffleReaderExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(producer) = fused.get(&reader.stage()) else {
            return Ok(Transformed::no(node));
        };
        let input = ShuffleWriterExec::from_plan(producer)
            .map_err(DataFusionError::from)?
            .input()
            .clone();
        let replaced: Arc<dyn ExecutionPlan> = match reader.mode() {
            ReadMode::Gather => input,
            ReadMode::All if input.output_partitioning().partition_count() <= 1 => input,
            ReadMode::All => Arc::new(CoalescePartitionsExec::new(input)),
            ReadMode::Hash(partitioning) => {
                Arc::new(RepartitionExec::try_new(input, partitioning.clone())?)
            }
        };
        Ok(Transformed::yes(replaced))
    })?;
    Ok(plan.data)
}
