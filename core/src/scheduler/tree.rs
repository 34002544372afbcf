//! The invocation tree: a stage wider than `dispatch_fanout` is sent through dispatchers
//! (invocations of the scheduler function) that each send one commit counter's range of
//! tasks or split their range further; a range its dispatcher never confirmed is sent
//! again by the next step past the dispatch deadline.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
use tracing::{warn, Instrument};

use crate::dispatch::{DispatchContext, DispatchRange, ExecutorSize, TaskSpec};
use crate::faults::FaultKind;
use crate::state::{
    counter_of, counters_of, DispatchConfirmation, JobSnapshot, StageRecord, COUNTER_TASKS,
};
use crate::time::now_ms;
use crate::{Error, Result};

use super::*;

impl Scheduler {
    /// Whether a stage of `tasks` tasks is sent through an invocation tree.
    pub(super) fn is_tree(&self, tasks: u32) -> bool {
        is_tree(tasks, self.fanout())
    }

    /// Invokes the first attempt of every task of a claimed stage: directly, or — for a
    /// stage wider than `dispatch_fanout` — through an invocation tree whose leaves each
    /// send one commit counter's range of tasks ([`Scheduler::dispatch_range`]).
    pub(super) async fn dispatch_stage(
        &self,
        job_id: &str,
        stage: u32,
        tasks: u32,
        context: Option<Arc<DispatchContext>>,
        size: ExecutorSize,
        stage_key: &str,
    ) -> Result<()> {
        let faults = &self.services.faults;
        if self.is_tree(tasks) {
            let mut nodes: Vec<DispatchRange> = tree_children(0, tasks, self.fanout())
                .into_iter()
                .map(|(from, to)| DispatchRange {
                    job_id: job_id.to_string(),
                    stage,
                    from,
                    to,
                    context: context.as_ref().map(|c| with_handoff(c, 1)),
                    size,
                })
                .collect();
            if faults.fires(FaultKind::SchedulerCrashMidDispatch, stage_key) {
                let rest = nodes.split_off(nodes.len() / 2);
                self.invoke_nodes(nodes).await;
                faults.crash_point(FaultKind::SchedulerCrashMidDispatch, stage_key)?;
                nodes = rest;
            }
            self.invoke_nodes(nodes).await;
            return Ok(());
        }
        let context = context.as_ref().map(|c| with_handoff(c, 1));
        let mut sends: Vec<PendingInvocation> = (0..tasks)
            .map(|partition| {
                PendingInvocation::first(
                    first_attempt(job_id, stage, partition),
                    context.clone(),
                    size,
                )
            })
            .collect();
        if faults.fires(FaultKind::SchedulerCrashMidDispatch, stage_key) {
            let rest = sends.split_off(sends.len() / 2);
            self.dispatch(sends).await;
            faults.crash_point(FaultKind::SchedulerCrashMidDispatch, stage_key)?;
            sends = rest;
        }
        self.dispatch(sends).await;
        Ok(())
    }

    fn fanout(&self) -> u32 {
        self.config().dispatch_fanout.max(2) as u32
    }

    /// Invokes dispatchers, `dispatch_concurrency` at a time. A refused one is left to
    /// the sweep: its range stays unconfirmed and is sent again after the dispatch
    /// deadline.
    async fn invoke_nodes(&self, nodes: Vec<DispatchRange>) {
        let invoker = self.services.invoker.clone();
        let results: Vec<(DispatchRange, Result<()>)> = futures::stream::iter(nodes)
            .map(|node| {
                let invoker = invoker.clone();
                async move {
                    let result = invoker.dispatch(&node).await;
                    (node, result)
                }
            })
            .buffer_unordered(self.config().dispatch_concurrency.max(1))
            .collect()
            .await;
        for (node, result) in results {
            if let Err(e) = result {
                warn!(range = %node, error = %e,
                    "dispatcher invocation refused; its range is sent again after the dispatch deadline");
            }
        }
    }

    /// One node of an invocation tree: a range of at most one commit counter's tasks is
    /// invoked (and confirmed on that counter, [`JobStore::confirm_dispatch`]); a wider
    /// one is split over at most `dispatch_fanout` further dispatchers. Idempotent: a
    /// repeated node invokes its tasks again (duplicates are harmless) and a lost one is
    /// found unconfirmed by the next scheduler step past the dispatch deadline.
    pub async fn dispatch_range(&self, range: &DispatchRange) -> Result<()> {
        let span = tracing::info_span!("dispatch", job_id = %range.job_id, stage = range.stage,
            from = range.from, to = range.to);
        async {
            if range.from >= range.to {
                return Err(Error::InvalidInput(format!(
                    "empty dispatch range: {range}"
                )));
            }
            let context = range.context.as_ref().map(|c| with_handoff(c, 1));
            if !is_leaf(range.from, range.to) {
                let nodes = tree_children(range.from, range.to, self.fanout())
                    .into_iter()
                    .map(|(from, to)| DispatchRange {
                        from,
                        to,
                        context: context.clone(),
                        ..range.clone()
                    })
                    .collect();
                self.invoke_nodes(nodes).await;
                return Ok(());
            }
            let sends = (range.from..range.to)
                .map(|partition| {
                    let task = first_attempt(&range.job_id, range.stage, partition);
                    PendingInvocation::first(task, context.clone(), range.size)
                })
                .collect();
            self.dispatch(sends).await;
            let stage_tasks = range
                .context
                .as_ref()
                .map(|c| c.stage.tasks)
                .unwrap_or(range.to);
            self.services
                .store
                .confirm_dispatch(&DispatchConfirmation {
                    job_id: range.job_id.clone(),
                    stage: range.stage,
                    counter: counter_of(range.from),
                    stage_tasks: stage_tasks.max(range.to),
                    now_ms: now_ms(),
                    expires_at: self.services.expires_at(),
                })
                .await?;
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// Re-sends the tasks (those without items) of every range of a tree-dispatched stage
    /// whose leaf dispatcher never confirmed it, and confirms the range.
    pub(super) async fn resend_unconfirmed_ranges(
        &self,
        snapshot: &JobSnapshot,
        stage: &StageRecord,
        now: u64,
    ) -> Result<()> {
        let job_id = &stage.job_id;
        let confirmed: BTreeSet<u32> = snapshot
            .counters
            .iter()
            .filter(|c| c.stage == stage.stage && c.dispatched_ms.is_some())
            .map(|c| c.counter)
            .collect();
        for counter in (0..counters_of(stage.tasks)).filter(|c| !confirmed.contains(c)) {
            let from = counter * COUNTER_TASKS;
            let to = (from + COUNTER_TASKS).min(stage.tasks);
            let sends = self.resend_missing(snapshot, stage, from..to, now).await?;
            warn!(job_id = %job_id, stage = stage.stage, counter, tasks = sends.len(),
                "a dispatcher never confirmed its range; re-sending its tasks");
            self.dispatch(sends).await;
            self.services
                .store
                .confirm_dispatch(&DispatchConfirmation {
                    job_id: job_id.to_string(),
                    stage: stage.stage,
                    counter,
                    stage_tasks: stage.tasks,
                    now_ms: now_ms(),
                    expires_at: self.services.expires_at(),
                })
                .await?;
        }
        Ok(())
    }
}

/// Attempt 1 of task `partition` of `stage`.
fn first_attempt(job_id: &str, stage: u32, partition: u32) -> TaskSpec {
    TaskSpec {
        job_id: job_id.to_string(),
        stage,
        partition,
        attempt: 1,
    }
}

/// Ranges of `from..to` for at most `fanout` child dispatchers: whole commit counters'
/// ranges ([`COUNTER_TASKS`] tasks, the leaves' size), as evenly as they divide.
fn tree_children(from: u32, to: u32, fanout: u32) -> Vec<(u32, u32)> {
    let first = from / COUNTER_TASKS;
    let leaves = to.div_ceil(COUNTER_TASKS) - first;
    let per_child = leaves.div_ceil(fanout.max(2)).max(1);
    (0..leaves.div_ceil(per_child))
        .map(|i| {
            let start = ((first + i * per_child) * COUNTER_TASKS).max(from);
            let end = ((first + (i + 1) * per_child) * COUNTER_TASKS).min(to);
            (start, end)
        })
        .filter(|(a, b)| a < b)
        .collect()
}

/// Whether a dispatcher's range `from..to` is a leaf of the invocation tree: one
/// commit counter's tasks, which it invokes itself and confirms on that counter.
fn is_leaf(from: u32, to: u32) -> bool {
    to - from <= COUNTER_TASKS && from.is_multiple_of(COUNTER_TASKS)
}

/// Whether a stage of `tasks` tasks with `fanout` invocations per dispatcher is sent
/// through an invocation tree (it is wider than the fan-out) rather than directly.
pub fn is_tree(tasks: u32, fanout: u32) -> bool {
    tasks > fanout.max(2)
}

/// Dispatcher invocations of the invocation tree over a stage of `tasks` tasks with
/// `fanout` invocations per dispatcher, as [`Scheduler`] sends it; 0 when the stage is
/// sent directly (no wider than the fan-out).
pub fn tree_dispatchers(tasks: u32, fanout: u32) -> u32 {
    fn nodes(from: u32, to: u32, fanout: u32) -> u32 {
        if is_leaf(from, to) {
            return 1;
        }
        1 + tree_children(from, to, fanout)
            .into_iter()
            .map(|(a, b)| nodes(a, b, fanout))
            .sum::<u32>()
    }
    if !is_tree(tasks, fanout) {
        return 0;
    }
    let fanout = fanout.max(2);
    // The claiming scheduler is the root: it always sends the first level.
    tree_children(0, tasks, fanout)
        .into_iter()
        .map(|(a, b)| nodes(a, b, fanout))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree node splits its range over at most `fanout` children of whole commit
    /// counters' ranges (the leaves), covering the range exactly once.
    #[test]
    fn tree_children_split_whole_counters_over_the_fanout() {
        let leaves = |from: u32, to: u32, fanout: u32| tree_children(from, to, fanout);
        assert_eq!(leaves(0, 70, 32), vec![(0, 32), (32, 64), (64, 70)]);
        assert_eq!(leaves(0, 70, 2), vec![(0, 64), (64, 70)]);
        assert_eq!(leaves(0, 64, 2), vec![(0, 32), (32, 64)]);
        for (from, to, fanout) in [(0, 10_000, 32), (0, 1_000, 32), (320, 1_000, 4), (0, 33, 2)] {
            let children = leaves(from, to, fanout);
            assert!(children.len() <= fanout as usize, "{from}..{to} / {fanout}");
            assert_eq!(children.first().unwrap().0, from);
            assert_eq!(children.last().unwrap().1, to);
            for pair in children.windows(2) {
                assert_eq!(pair[0].1, pair[1].0, "contiguous");
            }
            for (a, b) in &children {
                assert_eq!(a % COUNTER_TASKS, 0, "starts on a counter");
                assert!(b - a >= 1);
            }
        }
        // 10,000 tasks: 313 leaves; 32 children of 10 leaves, each splitting in 10.
        let top = leaves(0, 10_000, 32);
        assert_eq!(top.len(), 32);
        assert_eq!(top[0], (0, 320));
        assert_eq!(leaves(0, 320, 32).len(), 10);
    }

    /// The dispatcher count follows the tree's shape: none up to the fan-out, one per
    /// counter's range up to fan-out ranges, inner dispatchers above.
    #[test]
    fn tree_dispatchers_count_the_trees_nodes() {
        assert_eq!(tree_dispatchers(32, 32), 0);
        assert_eq!(tree_dispatchers(100, 32), 4);
        assert_eq!(tree_dispatchers(1_000, 32), 32);
        // 157 leaves in 32 inner dispatchers of 5 (the last of 2).
        assert_eq!(tree_dispatchers(5_000, 32), 32 + 157);
        assert_eq!(tree_dispatchers(70, 2), 2 + 2);
    }
}
