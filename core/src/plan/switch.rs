//! Join strategy from real sizes: a partitioned semi, anti or mark join switches to a
//! broadcast of the side that turned out small.
//!
//! DataFusion chooses a join's strategy when it plans, from estimates. A semi, anti or
//! mark join whose inputs it cannot size (TPC-H q21's `NOT EXISTS`, under two joins and a
//! filter) is planned *partitioned*: both sides hash-shuffled on the join keys, the large
//! one — often a scan of the largest table — included. Such a join emits rows of one side
//! only (call it the *small* side: the rows kept, dropped or marked); the other (*large*)
//! side only says which of them found a match. When the large side is a stage of its own
//! that reads no hash shuffle and feeds only this join, the stage splitter records a
//! [`JoinSwitch`] on it ([`annotate`]), and:
//!
//! - the large side's stage waits for the small side's stage as well as for its inputs
//!   ([`crate::state::StageRecord::waits_for`]);
//! - at its claim the scheduler compares what the small side really committed with
//!   `max_broadcast_bytes` ([`super::adaptive`]). At most that, the join switches
//!   ([`crate::state::AdaptiveRule::Broadcast`]): each task of the large side reads the
//!   small side whole and runs the join's left-mark form over its own rows
//!   ([`marking_plan`], the probe stage of [`super::marks`]), writing one mark per
//!   small-side row instead of hash-shuffling its rows; the join's stage runs one task
//!   that combines the marks ([`combining_plan`]) where the join was. Above the limit,
//!   both sides are hash-shuffled and joined as planned.
//!
//! An *inner* join planned partitioned (DataFusion puts the side it guesses smaller on
//! the left, as build side) is offered the same switch when every operator between it
//! and its stage's writer handles rows on their own (projections, filters, partial
//! aggregates, probes of joins with inline build sides): switched
//! ([`crate::state::SwitchMode::Join`]), each task of the large side runs the join's whole
//! stage over its own rows with the small side read whole as build side
//! ([`joining_plan`]) and writes that stage's output; the join's stage runs no tasks, and
//! its consumers read the large side's output in its place
//! ([`crate::state::StageDecision::read_from`]).
//!
//! An inner join under an aggregate that needs its input hash-partitioned on the join
//! key (DataFusion's `SinglePartitioned`, as TPC-H q3 groups by `l_orderkey`) cannot run
//! in the large side's tasks as a whole: their rows are not partitioned so. It is offered
//! the switch when the operators between the join and the aggregate handle rows on their
//! own ([`crate::state::SwitchMode::Aggregate`]): switched, each task of the large side
//! runs the join and the aggregate's partial form ([`aggregating_plan`]), writing the
//! partial states hash-partitioned on the group keys — far fewer bytes than its rows —
//! and the join's stage runs the aggregate's final form over them and the rest of its
//! plan ([`finishing_plan`]). Not switched, the stage runs as planned: the offer costs
//! nothing.
//!
//! Both rewrites are made by the executor from the two stored stage plans and the
//! recorded decisions, so every scheduler and executor arrives at the same plans.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::JoinType;
use datafusion::error::Result as DfResult;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::Partitioning;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, ReplaceChildrenOptions,
};

use super::marks;
use super::stages::{reads_a_stage, row_local, Stage};
use crate::shuffle::{ReadMode, ShuffleReaderExec, ShuffleWriterExec};
use crate::state::{EdgeKind, JoinSwitch, SwitchMode};
use crate::{Error, Result};

/// A switchable join found in a stage plan.
struct Candidate {
    /// The [`HashJoinExec`] node.
    join: Arc<dyn ExecutionPlan>,
    /// Whether the small side is the join's left child.
    small_left: bool,
    /// The stage read on the small side.
    small: u32,
    /// The stage read on the large side.
    large: u32,
    /// How the join runs once switched.
    mode: SwitchMode,
    /// The partitioned aggregate above an inner join ([`SwitchMode::Aggregate`]).
    aggregate: Option<Arc<dyn ExecutionPlan>>,
}

impl Candidate {
    /// The partitioned aggregate above the join, as a plan node and as itself.
    fn aggregate(&self) -> Result<(&Arc<dyn ExecutionPlan>, &AggregateExec)> {
        self.aggregate
            .as_ref()
            .and_then(|node| Some((node, partitioned_aggregate(node)?)))
            .ok_or_else(|| Error::Internal("the switched join has no aggregate above it".into()))
    }
}

/// Gives a partitioned semi, anti or mark join whose small side is computed in the
/// join's own stage a stage edge under that side, so that the switch can be offered.
///
/// A switch needs both sides of the join to be stages of their own. When the small
/// side is itself a join on the same key (TPC-H q21's `EXISTS` over the line items that
/// met their suppliers and orders, its `NOT EXISTS` over that), DataFusion hash-shuffles
/// nothing between them — the rows are already partitioned on the key — and the stacked
/// joins run in one stage, every large side hash-shuffled whole. With a hash exchange
/// on the join's keys put under the small side (the same partitions: the same hash over
/// equal keys), it becomes a stage, the join is offered the switch, and the large side
/// is broadcast into only when the small side turns out small. Not switched, the cost is
/// one more shuffle of the small side. Only where the large side is an exchange over a
/// plan that reads no hash shuffle: no other join could be switched.
pub(crate) fn cut_small_sides(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(join) = node.downcast_ref::<HashJoinExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(small_left) = small_side_is_left(*join.join_type()) else {
            return Ok(Transformed::no(node));
        };
        let n = node.output_partitioning().partition_count();
        if *join.partition_mode() != PartitionMode::Partitioned || join.null_aware || n <= 1 {
            return Ok(Transformed::no(node));
        }
        let (small, large) = if small_left {
            (join.left(), join.right())
        } else {
            (join.right(), join.left())
        };
        let scan_side = hash_exchange(large).is_some_and(|input| {
            !input
                .exists(|n| Ok(hash_exchange(n).is_some()))
                .unwrap_or(true)
        });
        if hash_exchange(small).is_some() || !scan_side {
            return Ok(Transformed::no(node));
        }
        let keys = join
            .on()
            .iter()
            .map(|(l, r)| if small_left { l.clone() } else { r.clone() })
            .collect();
        let cut: Arc<dyn ExecutionPlan> = Arc::new(RepartitionExec::try_new(
            small.clone(),
            Partitioning::Hash(keys, n),
        )?);
        let children = if small_left {
            vec![cut, large.clone()]
        } else {
            vec![large.clone(), cut]
        };
        let cut = node.clone().replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )?;
        Ok(Transformed::yes(cut))
    })
    .map(|t| t.data)
}

/// The input of the hash exchange `plan` is, under row-by-row wrappers.
fn hash_exchange(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let node = below_wrappers(plan);
    let exchange = node.downcast_ref::<RepartitionExec>()?;
    matches!(exchange.partitioning(), Partitioning::Hash(..)).then(|| exchange.input().clone())
}

/// The first node of `plan` that is not a row-by-row wrapper of one input (projection,
/// filter, batch coalescing).
fn below_wrappers(plan: &Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    let mut node = plan.clone();
    while matches!(
        node.name(),
        "ProjectionExec" | "FilterExec" | "CoalesceBatchesExec" | "CooperativeExec"
    ) {
        node = match node.children().as_slice() {
            [only] => (*only).clone(),
            _ => break,
        };
    }
    node
}

/// For a join emitting one side's rows: whether that side is the left one.
fn small_side_is_left(join_type: JoinType) -> Option<bool> {
    match join_type {
        JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => Some(true),
        JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => Some(false),
        _ => None,
    }
}

/// The stage `plan` reads, when `plan` is a hash-shuffle reader under row-by-row
/// wrappers only.
fn thin_reader(plan: &Arc<dyn ExecutionPlan>) -> Option<u32> {
    let node = below_wrappers(plan);
    let reader = node.downcast_ref::<ShuffleReaderExec>()?;
    matches!(reader.mode(), ReadMode::Hash(_)).then(|| reader.stage())
}

/// Whether `node`, on the way from a stage's writer down to its join, handles the rows
/// of each partition on their own, whatever the partitions are: what a stage may be run
/// over the large side's scan partitions instead of hash partitions with.
fn row_by_row(node: &Arc<dyn ExecutionPlan>) -> bool {
    if let Some(join) = node.downcast_ref::<HashJoinExec>() {
        return *join.partition_mode() == PartitionMode::CollectLeft
            && matches!(
                join.join_type(),
                JoinType::Inner
                    | JoinType::Right
                    | JoinType::RightSemi
                    | JoinType::RightAnti
                    | JoinType::RightMark
            );
    }
    row_local(node)
}

/// Whether `node` is an aggregate that needs its input hash-partitioned on (some of) its
/// group keys and runs in one step (`SinglePartitioned`: DataFusion's partial and final
/// forms combined, as it plans them over input already partitioned so), without
/// grouping sets.
fn partitioned_aggregate(node: &Arc<dyn ExecutionPlan>) -> Option<&AggregateExec> {
    node.downcast_ref::<AggregateExec>().filter(|a| {
        *a.mode() == AggregateMode::SinglePartitioned
            && a.group_expr().is_single()
            && !a.group_expr().expr().is_empty()
    })
}

/// The switchable join of a stage plan: a partitioned join (not null-aware) over two
/// hash-shuffle readers, reached from the root through operators of one child, or
/// through the probe side of joins whose build side reads no stage. A semi / anti / mark
/// join switches to marks: once its rows come in one partition, the rest of the stage
/// runs on them in that partition unchanged. An inner join (its build side the small
/// one) switches to running the stage in the large side's tasks, which needs every
/// operator above it to handle rows [`row_by_row`] — or, under a
/// [`partitioned_aggregate`] with only such operators between the two, to running the
/// join and the aggregate's partial form there ([`SwitchMode::Aggregate`]).
fn find(plan: &Arc<dyn ExecutionPlan>) -> Option<Candidate> {
    let mut node = plan.clone();
    let mut rows_alone = true;
    let mut aggregate = None;
    loop {
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            if *join.partition_mode() == PartitionMode::Partitioned {
                if join.null_aware {
                    return None;
                }
                let (small_left, mode) = match small_side_is_left(*join.join_type()) {
                    Some(left) => (left, SwitchMode::Marks),
                    None if *join.join_type() == JoinType::Inner && rows_alone => {
                        let mode = match aggregate {
                            Some(_) => SwitchMode::Aggregate,
                            None => SwitchMode::Join,
                        };
                        (true, mode)
                    }
                    None => return None,
                };
                let (left, right) = (thin_reader(join.left())?, thin_reader(join.right())?);
                let (small, large) = if small_left {
                    (left, right)
                } else {
                    (right, left)
                };
                return (small != large).then(|| Candidate {
                    join: node.clone(),
                    small_left,
                    small,
                    large,
                    mode,
                    aggregate: aggregate.filter(|_| mode == SwitchMode::Aggregate),
                });
            }
            if reads_a_stage(join.left()) {
                return None;
            }
            rows_alone &= row_by_row(&node);
            node = join.right().clone();
            continue;
        }
        if aggregate.is_none() && partitioned_aggregate(&node).is_some() {
            // The first such aggregate from the top: below it, the large side's tasks
            // could run the join and its partial form.
            aggregate = Some(node.clone());
            rows_alone = true;
        } else {
            rows_alone &= row_by_row(&node);
        }
        let build_side = node
            .downcast_ref::<NestedLoopJoinExec>()
            .map(|j| j.left().clone())
            .or_else(|| {
                node.downcast_ref::<CrossJoinExec>()
                    .map(|j| j.left().clone())
            });
        node = match (build_side, node.children().as_slice()) {
            (Some(left), [_, right]) if !reads_a_stage(&left) => (*right).clone(),
            (None, [only]) => (*only).clone(),
            _ => return None,
        };
    }
}

/// Records a [`JoinSwitch`] on the large side of every switchable join (see the
/// [module docs](self)): the join's stage reads exactly its two sides, and the large
/// side is a stage reading no hash shuffle that no other stage reads.
pub(super) fn annotate(stages: &mut [Stage]) {
    for j in 0..stages.len() {
        let Some(candidate) = find(&stages[j].plan) else {
            continue;
        };
        let (small, large) = (candidate.small, candidate.large);
        let mut read: Vec<u32> = stages[j].inputs.iter().map(|i| i.stage).collect();
        read.sort_unstable();
        if read != [small.min(large), small.max(large)] {
            continue;
        }
        let Some(large_stage) = stages.get(large as usize) else {
            continue;
        };
        let readers = stages
            .iter()
            .filter(|s| s.inputs.iter().any(|i| i.stage == large))
            .count();
        if readers != 1
            || large_stage.switch.is_some()
            || large_stage.inputs.iter().any(|i| i.kind == EdgeKind::Hash)
        {
            continue;
        }
        let switch = JoinSwitch {
            join: stages[j].id,
            small,
            large,
            mode: candidate.mode,
        };
        // Only a join its rewrites accept is offered the switch; a joining switch leaves
        // the join's stage without tasks, so not the result stage.
        let plan = &stages[j].plan;
        let accepted = match switch.mode {
            SwitchMode::Marks => {
                marking_plan(&large_stage.plan, plan, switch).is_ok()
                    && combining_plan(plan, switch, large_stage.tasks).is_ok()
            }
            SwitchMode::Join => {
                j + 1 < stages.len() && joining_plan(&large_stage.plan, plan, switch).is_ok()
            }
            SwitchMode::Aggregate => {
                aggregating_plan(&large_stage.plan, plan, switch).is_ok()
                    && finishing_plan(plan, switch, large_stage.tasks).is_ok()
            }
        };
        if !accepted {
            continue;
        }
        stages[large as usize].switch = Some(switch);
    }
}

/// The candidate of `join_plan` that `switch` names.
fn candidate(join_plan: &Arc<dyn ExecutionPlan>, switch: JoinSwitch) -> Result<Candidate> {
    find(join_plan)
        .filter(|c| c.small == switch.small && c.large == switch.large)
        .ok_or_else(|| {
            Error::Internal(format!(
                "stage {} holds no partitioned join of stages {} and {}",
                switch.join, switch.small, switch.large
            ))
        })
}

/// A candidate's join turned collect-left with its small side on the left, and the
/// join's two sides.
struct Sides {
    /// The collect-left [`HashJoinExec`] (left semi, anti or mark).
    join: Arc<dyn ExecutionPlan>,
    /// The small side's subtree (its reader reads a hash shuffle).
    small: Arc<dyn ExecutionPlan>,
    /// The large side's subtree.
    large: Arc<dyn ExecutionPlan>,
}

/// The candidate's join as a collect-left join with the small side on the left.
fn as_left(candidate: &Candidate) -> Result<Sides> {
    let join = candidate
        .join
        .downcast_ref::<HashJoinExec>()
        .ok_or_else(|| Error::Internal("the switched join is not a hash join".into()))?;
    Ok(if candidate.small_left {
        Sides {
            join: Arc::new(
                join.builder()
                    .with_partition_mode(PartitionMode::CollectLeft)
                    .build()?,
            ),
            small: join.left().clone(),
            large: join.right().clone(),
        }
    } else {
        Sides {
            join: join.swap_inputs(PartitionMode::CollectLeft)?,
            small: join.right().clone(),
            large: join.left().clone(),
        }
    })
}

/// `side` with its reader of `stage` reading that stage's whole output, in one partition.
fn read_whole(side: &Arc<dyn ExecutionPlan>, stage: u32) -> DfResult<Arc<dyn ExecutionPlan>> {
    replace_reader(side, stage, |reader| {
        Arc::new(ShuffleReaderExec::new(
            stage,
            reader.producers(),
            ReadMode::All,
            reader.schema(),
            None,
        ))
    })
}

/// `plan` with its reader of `stage` replaced by `with(reader)`.
fn replace_reader(
    plan: &Arc<dyn ExecutionPlan>,
    stage: u32,
    with: impl Fn(&ShuffleReaderExec) -> Arc<dyn ExecutionPlan>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    Ok(plan
        .clone()
        .transform_up(|node| match node.downcast_ref::<ShuffleReaderExec>() {
            Some(reader) if reader.stage() == stage => Ok(Transformed::yes(with(reader))),
            _ => Ok(Transformed::no(node)),
        })?
        .data)
}

/// The left-mark join of one stage's plan as [`HashJoinExec`].
fn hash_join(plan: &Arc<dyn ExecutionPlan>) -> Result<&HashJoinExec> {
    plan.downcast_ref::<HashJoinExec>()
        .ok_or_else(|| Error::Internal("the swapped join is not a hash join".into()))
}

/// What the large side's tasks run once `switch` is taken: their own plan (below its
/// writer) as the probe side of the join's left-mark form, whose build side is the small
/// side read whole; one mark per small-side row written as a single slice.
pub fn marking_plan(
    large_plan: &Arc<dyn ExecutionPlan>,
    join_plan: &Arc<dyn ExecutionPlan>,
    switch: JoinSwitch,
) -> Result<Arc<dyn ExecutionPlan>> {
    let sides = as_left(&candidate(join_plan, switch)?)?;
    let build = read_whole(&sides.small, switch.small)?;
    let own = ShuffleWriterExec::from_plan(large_plan)?.input().clone();
    let probe = replace_reader(&sides.large, switch.large, |_| own.clone())?;
    let (task, _) = marks::split_over(hash_join(&sides.join)?, build, probe)?;
    Ok(Arc::new(ShuffleWriterExec::try_new(
        switch.large,
        task,
        None,
    )?))
}

/// What the join's stage runs once `switch` is taken: its plan with the join replaced by
/// the combination of the large side's marks (`large_tasks` producers) over the small
/// side read whole — one partition holding all the join's rows.
pub fn combining_plan(
    join_plan: &Arc<dyn ExecutionPlan>,
    switch: JoinSwitch,
    large_tasks: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    let found = candidate(join_plan, switch)?;
    let sides = as_left(&found)?;
    let build = read_whole(&sides.small, switch.small)?;
    let nothing = Arc::new(EmptyExec::new(sides.large.schema()));
    let (task, combine) = marks::split_over(hash_join(&sides.join)?, build, nothing)?;
    let marks = Arc::new(ShuffleReaderExec::new(
        switch.large,
        large_tasks,
        ReadMode::All,
        task.schema(),
        None,
    ));
    let combined = combine.combine(marks)?;
    if combined.schema().fields() != found.join.schema().fields() {
        return Err(Error::Internal(format!(
            "the switched join of stage {} answers {:?}, the join {:?}",
            switch.join,
            combined.schema(),
            found.join.schema()
        )));
    }
    replace_join(join_plan, &found.join, combined, switch)
}

/// `plan` with its node `join` replaced by `with`.
fn replace_join(
    plan: &Arc<dyn ExecutionPlan>,
    join: &Arc<dyn ExecutionPlan>,
    with: Arc<dyn ExecutionPlan>,
    switch: JoinSwitch,
) -> Result<Arc<dyn ExecutionPlan>> {
    let target = Arc::as_ptr(join);
    let plan = plan.clone().transform_down(|node| {
        if std::ptr::addr_eq(Arc::as_ptr(&node), target) {
            Ok(Transformed::new(
                with.clone(),
                true,
                TreeNodeRecursion::Jump,
            ))
        } else {
            Ok(Transformed::no(node))
        }
    })?;
    if !plan.transformed {
        return Err(Error::Internal(format!(
            "the join of stage {} was not found to switch",
            switch.join
        )));
    }
    Ok(plan.data)
}

/// The candidate's inner join as the large side's tasks run it: collecting the small
/// side read whole as build side and probing the large side's own plan (`large_plan`
/// below its writer).
fn collected_join(
    found: &Candidate,
    large_plan: &Arc<dyn ExecutionPlan>,
    switch: JoinSwitch,
) -> Result<Arc<dyn ExecutionPlan>> {
    let join = found
        .join
        .downcast_ref::<HashJoinExec>()
        .ok_or_else(|| Error::Internal("the switched join is not a hash join".into()))?;
    let build = read_whole(join.left(), switch.small)?;
    let own = ShuffleWriterExec::from_plan(large_plan)?.input().clone();
    let probe = replace_reader(join.right(), switch.large, |_| own.clone())?;
    Ok(join
        .builder()
        .with_partition_mode(PartitionMode::CollectLeft)
        .with_new_children(vec![build, probe])?
        .reset_state()
        .recompute_properties()
        .build_exec()?)
}

/// What the large side's tasks run once an inner join's switch is taken: the join's
/// stage plan, its join collecting the small side read whole as build side and probing
/// the large side's own plan (below its writer), written as the join's stage would.
pub fn joining_plan(
    large_plan: &Arc<dyn ExecutionPlan>,
    join_plan: &Arc<dyn ExecutionPlan>,
    switch: JoinSwitch,
) -> Result<Arc<dyn ExecutionPlan>> {
    let found = candidate(join_plan, switch)?;
    let collected = collected_join(&found, large_plan, switch)?;
    let plan = replace_join(join_plan, &found.join, collected, switch)?;
    let writer = ShuffleWriterExec::from_plan(&plan)?;
    Ok(Arc::new(ShuffleWriterExec::try_new(
        switch.large,
        writer.input().clone(),
        writer.partitioning().cloned(),
    )?))
}

/// The partial form of a candidate's partitioned aggregate ([`SwitchMode::Aggregate`])
/// over `input`, and the partitioning the partial states are written and read with: the
/// aggregate's own output partitioning (a hash of group columns into the join's
/// partitions), which its partial states, listing the group columns first, share — so
/// whatever above it relied on it (a join on the same key, not shuffled again) still
/// can. An aggregate whose output is ordered, or partitioned on anything but its group
/// columns, is not split.
fn partial_form(
    found: &Candidate,
    input: Arc<dyn ExecutionPlan>,
) -> Result<(Arc<dyn ExecutionPlan>, Partitioning)> {
    let not_split = |why: &str| Error::Internal(format!("the aggregate above the join {why}"));
    let (_, aggregate) = found.aggregate()?;
    if aggregate.properties().output_ordering().is_some() {
        return Err(not_split("emits its groups in order"));
    }
    let groups = aggregate.group_expr().expr().len();
    let Partitioning::Hash(keys, partitions) = &aggregate.properties().partitioning else {
        return Err(not_split("is not hash-partitioned"));
    };
    if keys.is_empty()
        || !keys.iter().all(|k| {
            k.downcast_ref::<Column>()
                .is_some_and(|c| c.index() < groups)
        })
    {
        return Err(not_split("is partitioned on more than its group columns"));
    }
    let partial: Arc<dyn ExecutionPlan> = Arc::new(AggregateExec::try_new(
        AggregateMode::Partial,
        aggregate.group_expr().clone(),
        aggregate.aggr_expr().to_vec(),
        aggregate.filter_expr().to_vec(),
        input,
        aggregate.input_schema(),
    )?);
    Ok((partial, Partitioning::Hash(keys.clone(), *partitions)))
}

/// What the large side's tasks run once an inner join under a partitioned aggregate
/// switches ([`SwitchMode::Aggregate`]): the join collecting the small side read whole
/// and probing their own rows, the operators between it and the aggregate, and the
/// aggregate's partial form, written hash-partitioned on the group keys into as many
/// slices as the join's stage has partitions.
pub fn aggregating_plan(
    large_plan: &Arc<dyn ExecutionPlan>,
    join_plan: &Arc<dyn ExecutionPlan>,
    switch: JoinSwitch,
) -> Result<Arc<dyn ExecutionPlan>> {
    let found = candidate(join_plan, switch)?;
    let collected = collected_join(&found, large_plan, switch)?;
    let (_, aggregate) = found.aggregate()?;
    let below = replace_join(aggregate.input(), &found.join, collected, switch)?;
    let (partial, partitioning) = partial_form(&found, below)?;
    Ok(Arc::new(ShuffleWriterExec::try_new(
        switch.large,
        partial,
        Some(partitioning),
    )?))
}

/// What the join's stage runs once its join switched under a partitioned aggregate
/// ([`SwitchMode::Aggregate`]): its plan with that aggregate (and the join below it)
/// replaced by the aggregate's final form over the partial states the large side's
/// `large_tasks` tasks wrote, read hash-partitioned on the group keys — the same
/// partitions, rows and schema as before, so the rest of the plan runs unchanged.
pub fn finishing_plan(
    join_plan: &Arc<dyn ExecutionPlan>,
    switch: JoinSwitch,
    large_tasks: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    let found = candidate(join_plan, switch)?;
    let (original, aggregate) = found.aggregate()?;
    let (partial, partitioning) = partial_form(&found, aggregate.input().clone())?;
    let states = Arc::new(ShuffleReaderExec::new(
        switch.large,
        large_tasks,
        ReadMode::Hash(partitioning),
        partial.schema(),
        None,
    ));
    let finished: Arc<dyn ExecutionPlan> = Arc::new(
        AggregateExec::try_new(
            AggregateMode::FinalPartitioned,
            aggregate.group_expr().as_final(),
            aggregate.aggr_expr().to_vec(),
            aggregate.filter_expr().to_vec(),
            states,
            aggregate.input_schema(),
        )?
        .with_limit_options(aggregate.limit_options()),
    );
    if finished.schema().fields() != original.schema().fields()
        || finished.output_partitioning() != original.output_partitioning()
    {
        return Err(Error::Internal(format!(
            "the final aggregate of stage {} answers {:?} partitioned {}, the aggregate {:?} \
             partitioned {}",
            switch.join,
            finished.schema(),
            finished.output_partitioning(),
            original.schema(),
            original.output_partitioning()
        )));
    }
    replace_join(join_plan, original, finished, switch)
}
