//! [`spread`]: one plan partition of a stage cut into several, so that a task runs its
//! input on every thread it has.
//!
//! A task runs one partition of its stage's plan; DataFusion runs a partition on one
//! thread. Three ways to share it out, tried in turn:
//!
//! 1. **Along a chain.** Where the partition is a file scan under operators that work
//!    row by row or partition by partition — projections, filters, partial aggregates, a
//!    partition's own sort or limit, the probe side of a join whose build side is read
//!    whole — the task's files (or Parquet byte ranges) are cut into pieces, every such
//!    operator is rebuilt over them, and the task runs the pieces at once (its writer
//!    merges them, [`crate::shuffle::ShuffleWriterExec::task_plan`]).
//! 2. **As DataFusion would** ([`parallelize`]). A plan of one partition (a stage of one
//!    task: a small query, a final aggregate, a join of small inputs) is handed to
//!    DataFusion's own distribution and sorting rules at the task's threads, which cut
//!    its scans and add in-process exchanges, so its final aggregates, joins and sorts
//!    run on every thread too. Only where the task reads at least two pieces' worth
//!    (`min_spread_bytes` each, of files and of other stages' output), its memory pool
//!    leaves each thread enough ([`MIN_MEMORY_PER_THREAD`]), and the plan holds no row
//!    limit and no operator of ours whose partitions mean more than a share of the rows.
//! 3. **Below.** Otherwise, in a plan of one partition, the chains of (1) below an
//!    operator that needs its input whole are spread and merged again into the one
//!    partition the operator reads ([`SpreadExec`]): the scans, filters and partial
//!    aggregates run on every thread, the operator on one.
//!
//! What the partition reads and what the task writes are the same rows; only the work
//! is shared out. A sorted scan is cut into contiguous pieces, each sorted, and merged in
//! order again (by the writer, or by [`SpreadExec`]).
//!
//! Nothing is spread where a partition's output depends on seeing all of it at once: a
//! chain with a row limit in a plan of one partition (where the limit may be the query's
//! own, folded into the operator by the planner), a scan with a declared partitioning, a
//! chain through any other operator in a stage of several partitions (a final
//! aggregate, a window, a partitioned join read partition by partition), or a scan
//! reading less than two pieces' worth (`min_spread_bytes` each: threads for less cost
//! more than they save).

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::error::Result as DfResult;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::ensure_requirements::EnsureRequirements;
use datafusion::physical_optimizer::output_requirements::OutputRequirements;
use datafusion::physical_optimizer::sanity_checker::SanityCheckPlan;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::limit::LocalLimitExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties, ReplaceChildrenOptions, SendableRecordBatchStream,
};

use super::{file_bytes, file_scan, group_bytes};
use crate::format_scan::FormatScanExec;

/// A task's partition spread over its threads ([`spread`]).
#[derive(Debug)]
pub struct Spread {
    /// The plan whose partitions, all run at once, produce the partition's rows.
    pub plan: Arc<dyn ExecutionPlan>,
    /// The most partitions it runs at once: the pieces its scans were cut into, or the
    /// widest operator of a plan planned again at the task's threads.
    pub pieces: usize,
}

/// Least memory per thread (of a task's pool) for a plan of one partition to be planned
/// again at the task's threads ([`parallelize`]).
pub const MIN_MEMORY_PER_THREAD: usize = 64 * 1024 * 1024;

/// What a task has to spread its partition over, and how much it reads.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    /// Threads the task runs on.
    pub threads: usize,
    /// Least bytes one piece of a scan reads (`min_spread_bytes`).
    pub min_piece_bytes: u64,
    /// The task's memory pool, if bounded.
    pub memory: Option<usize>,
    /// Bytes the task reads of other stages.
    pub shuffle_bytes: u64,
}

/// Partition `partition` of `plan` as a plan of up to `room.threads` partitions, each
/// scanning at least `room.min_piece_bytes`, that together produce its rows; `None`
/// when it is not spread (see the [module docs](self)).
pub fn spread(plan: &Arc<dyn ExecutionPlan>, partition: usize, room: Room) -> Option<Spread> {
    let Room {
        threads,
        min_piece_bytes,
        memory,
        shuffle_bytes,
    } = room;
    if threads < 2 {
        return None;
    }
    let pieces = |bytes: u64| (bytes / min_piece_bytes.max(1)).min(threads as u64) as usize;
    let whole = partition == 0 && plan.output_partitioning().partition_count() == 1;
    if let Some(plan) = along(plan, partition, &pieces) {
        let pieces = plan.output_partitioning().partition_count();
        return Some(Spread { plan, pieces });
    }
    if !whole {
        return None;
    }
    // Operators that hold their input (a hash table, a sort) share the task's memory
    // among their partitions: too little each, and they fail where one would spill. And
    // in-process exchanges cost more than they save on a few MiB.
    let roomy = memory.is_none_or(|m| m / threads >= MIN_MEMORY_PER_THREAD)
        && super::scan_bytes(plan).saturating_add(shuffle_bytes)
            >= min_piece_bytes.saturating_mul(2);
    if let Some(plan) = roomy
        .then(|| parallelize(plan, threads, min_piece_bytes))
        .flatten()
    {
        return Some(Spread {
            pieces: widest(&plan, |_| true),
            plan,
        });
    }
    let plan = below(plan, &pieces)?;
    Some(Spread {
        pieces: widest(&plan, |node| node.name() == "SpreadExec"),
        plan,
    })
}

/// The most partitions the inputs of the nodes `which` picks have (the widest when
/// `which` picks every node).
fn widest(plan: &Arc<dyn ExecutionPlan>, which: impl Fn(&dyn ExecutionPlan) -> bool) -> usize {
    let mut most = 1;
    let _ = plan.apply(|node| {
        if which(node.as_ref()) {
            for child in node.children() {
                most = most.max(child.output_partitioning().partition_count());
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    most
}

/// How many pieces a scan partition of so many bytes is cut into.
type Pieces<'a> = &'a dyn Fn(u64) -> usize;

/// `node` spread along the one path from it down to a file scan.
///
/// A row limit (`fetch`) in a plan of several partitions is each partition's own (the
/// query's limit is applied after their outputs meet): each piece keeping that many rows
/// (its top rows, for a sort) still holds the rows the limit keeps. In a plan of one
/// partition it may be the query's limit itself, and nothing under it is spread.
fn along(
    node: &Arc<dyn ExecutionPlan>,
    partition: usize,
    pieces: Pieces,
) -> Option<Arc<dyn ExecutionPlan>> {
    if node.fetch().is_some() && node.output_partitioning().partition_count() < 2 {
        return None;
    }
    if let Some(config) = file_scan(node) {
        return spread_scan(node, config, partition, pieces);
    }
    // Which child carries the partition: the only one, or a join's probe side.
    let path = if node.downcast_ref::<ProjectionExec>().is_some()
        || node.downcast_ref::<FilterExec>().is_some()
        || node.downcast_ref::<LocalLimitExec>().is_some()
        || node
            .downcast_ref::<SortExec>()
            .is_some_and(|s| s.preserve_partitioning())
        || node
            .downcast_ref::<AggregateExec>()
            .is_some_and(|a| *a.mode() == AggregateMode::Partial)
    {
        0
    } else if node
        .downcast_ref::<HashJoinExec>()
        .is_some_and(|j| *j.partition_mode() == PartitionMode::CollectLeft)
    {
        // The build side (left) is read whole, once, by every probe partition of this
        // one operator; each output partition is a probe partition's.
        1
    } else {
        return None;
    };
    let mut children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
    let spread = along(children.get(path)?, partition, pieces)?;
    children[path] = spread;
    node.clone()
        .replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
        .ok()
}

/// Operators of ours whose partitions mean more than a share of the rows (a task's
/// marks, a sub-plan run whole, a range of another plan's partitions): a plan holding
/// one is not planned again by DataFusion's rules.
const PARTITION_BOUND: &[&str] = &[
    "MarkCombineExec",
    "TaskJoinExec",
    "SingleTaskExec",
    "WorkTableRef",
    "PartitionRangeExec",
    "StopExec",
    "SpreadExec",
    "ShuffleWriterExec",
];

/// A plan of one partition (a stage of one task) as DataFusion would run it on `threads`
/// cores: its own distribution and sorting rules ([`EnsureRequirements`]) at `threads`
/// partitions cut its scans into pieces of at least
/// `min_piece_bytes` and add in-process exchanges, so a final aggregate, a join or a
/// sort runs on every thread too. The result must pass [`SanityCheckPlan`]; `None` when
/// it does not, when nothing got wider, or when the plan holds an operator of ours whose
/// partitions mean more than a share of the rows, or a row limit.
fn parallelize(
    plan: &Arc<dyn ExecutionPlan>,
    threads: usize,
    min_piece_bytes: u64,
) -> Option<Arc<dyn ExecutionPlan>> {
    // DataFusion runs these rules before it folds limits into operators; one so folded
    // would be applied per partition after them.
    let mut bound = false;
    let _ = plan.apply(|node| {
        bound |= PARTITION_BOUND.contains(&node.name()) || node.fetch().is_some();
        Ok(if bound {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    if bound {
        return None;
    }
    let mut options = ConfigOptions::default();
    options.execution.target_partitions = threads;
    options.optimizer.repartition_file_scans = true;
    options.optimizer.repartition_file_min_size =
        usize::try_from(min_piece_bytes.saturating_mul(threads as u64)).unwrap_or(usize::MAX);
    // As DataFusion's own pipeline does: the root's ordering is held by a requirement
    // node while the rules run, so that no rule drops the order its output has.
    let mut wider = plan.clone();
    let rules: [&dyn PhysicalOptimizerRule; 3] = [
        &OutputRequirements::new_add_mode(),
        &EnsureRequirements::new(),
        &OutputRequirements::new_remove_mode(),
    ];
    for rule in rules {
        wider = rule.optimize(wider, &options).ok()?;
    }
    if plan.output_ordering().is_some() && wider.output_ordering() != plan.output_ordering() {
        return None;
    }
    SanityCheckPlan::new()
        .optimize(wider.clone(), &options)
        .ok()?;
    (wider.output_partitioning().partition_count() > 1 || widest(&wider, |_| true) > 1)
        .then_some(wider)
}

/// `node` (of one partition) with every chain below it that can be spread spread and
/// merged again ([`SpreadExec`]); `None` when none can.
fn below(node: &Arc<dyn ExecutionPlan>, pieces: Pieces) -> Option<Arc<dyn ExecutionPlan>> {
    let mut changed = false;
    let mut children = Vec::new();
    for child in node.children() {
        // A child of one partition is read whole; a spread chain merged into one
        // partition is the same rows, in the same order where it had one.
        let whole = child.output_partitioning().partition_count() == 1;
        let new = whole
            .then(|| {
                along(child, 0, pieces)
                    .map(|spread| Arc::new(SpreadExec::new(spread)) as Arc<dyn ExecutionPlan>)
                    .or_else(|| below(child, pieces))
            })
            .flatten();
        changed |= new.is_some();
        children.push(new.unwrap_or_else(|| child.clone()));
    }
    if !changed {
        return None;
    }
    node.clone()
        .replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
        .ok()
}

/// A spread chain's partitions merged into one, for an operator that reads one: a
/// coalesce, or a sort-preserving merge where the chain is sorted (a sorted scan is cut
/// into contiguous pieces, each as sorted as the whole, and an operator above may have
/// been planned on that order). Named apart from the plan's own merges so that `EXPLAIN
/// ANALYZE` can leave it out: its figures stay those of the plan the stage shows.
#[derive(Debug)]
pub struct SpreadExec {
    input: Arc<dyn ExecutionPlan>,
    merged: Arc<dyn ExecutionPlan>,
}

impl SpreadExec {
    /// `input`'s partitions merged into one.
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let merged: Arc<dyn ExecutionPlan> = match input.output_ordering() {
            Some(ordering) => Arc::new(SortPreservingMergeExec::new(
                ordering.clone(),
                input.clone(),
            )),
            None => Arc::new(CoalescePartitionsExec::new(input.clone())),
        };
        Self { input, merged }
    }
}

impl DisplayAs for SpreadExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "SpreadExec: {} pieces merged",
            self.input.output_partitioning().partition_count()
        )
    }
}

impl ExecutionPlan for SpreadExec {
    fn name(&self) -> &'static str {
        "SpreadExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.merged.properties()
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
        Ok(Arc::new(Self::new(super::only_child(
            "SpreadExec",
            children,
        )?)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        self.merged.execute(partition, context)
    }
}

/// A scan reading only partition `partition`'s files, cut into `pieces` groups.
fn spread_scan(
    node: &Arc<dyn ExecutionPlan>,
    config: &FileScanConfig,
    partition: usize,
    pieces: Pieces,
) -> Option<Arc<dyn ExecutionPlan>> {
    if config.output_partitioning.is_some() || config.limit.is_some() {
        return None;
    }
    let group = config.file_groups.get(partition)?;
    let parts = pieces(group_bytes(group));
    if parts < 2 {
        return None;
    }
    // Byte ranges of a Parquet file may be cut anywhere (a row group belongs to the range
    // holding its middle); other formats, and scans applying deletes by row position,
    // keep their pieces whole.
    let by_range = node.downcast_ref::<FormatScanExec>().is_none()
        && config.file_source().file_type() == "parquet";
    let groups = if by_range {
        cut(group, parts)
    } else {
        super::resize::deal(std::slice::from_ref(group), parts)
    };
    if groups.len() < 2 {
        return None;
    }
    super::with_file_groups(node, config, groups).ok()
}

/// `group`'s pieces cut by byte ranges into `parts` groups of equal bytes, in order.
fn cut(group: &FileGroup, parts: usize) -> Vec<FileGroup> {
    let total = group_bytes(group);
    if total == 0 {
        return vec![group.clone()];
    }
    let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); parts];
    let mut at = 0u64; // bytes of the group before the current piece
    for piece in group.files() {
        let size = file_bytes(piece);
        let start = piece.range.as_ref().map_or(0, |r| r.start.max(0) as u64);
        let mut offset = 0u64; // within the piece
        while offset < size {
            let part = (((at + offset) as u128 * parts as u128) / total as u128) as usize;
            let part = part.min(parts - 1);
            // Where this part ends, in the group's bytes.
            let part_end = ((part as u128 + 1) * total as u128).div_ceil(parts as u128) as u64;
            let take = (part_end - (at + offset)).min(size - offset).max(1);
            let (from, to) = (start + offset, start + offset + take);
            groups[part].push(piece.clone().with_range(from as i64, to as i64));
            offset += take;
        }
        at += size;
    }
    groups
        .into_iter()
        .filter(|g| !g.is_empty())
        .map(FileGroup::new)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::datasource::listing::PartitionedFile;

    fn piece(name: &str, size: u64, range: Option<(i64, i64)>) -> PartitionedFile {
        let f = PartitionedFile::new(name.to_string(), size);
        match range {
            Some((a, b)) => f.with_range(a, b),
            None => f,
        }
    }

    fn shape(groups: &[FileGroup]) -> Vec<Vec<(String, i64, i64)>> {
        groups
            .iter()
            .map(|g| {
                g.files()
                    .iter()
                    .map(|f| {
                        let r = f.range.clone().unwrap();
                        (f.object_meta.location.to_string(), r.start, r.end)
                    })
                    .collect()
            })
            .collect()
    }

    /// A one-partition plan over memory (no file scan to cut) is planned again at three
    /// partitions by DataFusion's rules: its aggregate runs three wide behind an
    /// in-process hash exchange, its root keeps its order, and it answers the same. With
    /// a memory pool too small to share, it is left alone.
    #[tokio::test]
    async fn a_one_partition_plan_is_planned_again_at_the_tasks_threads() {
        use datafusion::arrow::array::Int64Array;
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::arrow::record_batch::RecordBatch;
        use datafusion::datasource::MemTable;
        use datafusion::physical_plan::{collect, displayable};
        use datafusion::prelude::{SessionConfig, SessionContext};

        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let batches: Vec<RecordBatch> = (0..8)
            .map(|b| {
                let keys = Int64Array::from_iter_values((0..1000).map(|i| (i * 7 + b) % 50));
                RecordBatch::try_new(schema.clone(), vec![Arc::new(keys)]).unwrap()
            })
            .collect();
        // Planned wide and resized to one partition, as the engine plans a small query.
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
        let table = MemTable::try_new(schema, vec![batches]).unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        let sql = "SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY k";
        let wide = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let options = ctx.state().config_options().clone();
        let plan = super::super::resize::resize(wide, 1, &options)
            .unwrap()
            .unwrap();
        assert_eq!(plan.output_partitioning().partition_count(), 1);

        // (A table in memory has no file bytes: the task's input is given as read.)
        let room = Room {
            threads: 3,
            min_piece_bytes: 1,
            memory: None,
            shuffle_bytes: 2,
        };
        let wide = spread(&plan, 0, room).expect("planned again");
        let shown = displayable(wide.plan.as_ref()).indent(true).to_string();
        assert!(
            shown.contains("RepartitionExec: partitioning=Hash"),
            "{shown}"
        );
        assert_eq!(wide.pieces, 3, "{shown}");
        assert_eq!(
            wide.plan.output_ordering(),
            plan.output_ordering(),
            "{shown}"
        );
        let task = ctx.task_ctx();
        let rows = |b: Vec<RecordBatch>| {
            datafusion::arrow::util::pretty::pretty_format_batches(&b)
                .unwrap()
                .to_string()
        };
        assert_eq!(
            rows(collect(wide.plan, task.clone()).await.unwrap()),
            rows(collect(plan.clone(), task).await.unwrap())
        );

        // 1 MiB for three threads: not planned again (nothing here to spread instead);
        // nor with 8 MiB a piece, over less than 16 MiB of input.
        let tight = Room {
            memory: Some(1 << 20),
            ..room
        };
        assert!(spread(&plan, 0, tight).is_none());
        let small = Room {
            min_piece_bytes: 8 << 20,
            shuffle_bytes: (16 << 20) - 1,
            ..room
        };
        assert!(spread(&plan, 0, small).is_none());
        let enough = Room {
            shuffle_bytes: 16 << 20,
            ..small
        };
        assert!(spread(&plan, 0, enough).is_some());
    }

    #[test]
    fn a_whole_file_is_cut_into_equal_ranges() {
        let g = FileGroup::new(vec![piece("a", 100, None)]);
        assert_eq!(
            shape(&cut(&g, 3)),
            vec![
                vec![("a".into(), 0, 34)],
                vec![("a".into(), 34, 67)],
                vec![("a".into(), 67, 100)]
            ]
        );
    }

    #[test]
    fn ranges_and_files_are_cut_where_the_bytes_fall() {
        // A task's group: the second half of one file, then a whole small file.
        let g = FileGroup::new(vec![
            piece("a", 200, Some((100, 200))),
            piece("b", 50, None),
        ]);
        let cut = cut(&g, 2);
        assert_eq!(
            shape(&cut),
            vec![
                vec![("a".into(), 100, 175)],
                vec![("a".into(), 175, 200), ("b".into(), 0, 50)]
            ]
        );
        // Every byte exactly once.
        let bytes: u64 = cut.iter().map(group_bytes).sum();
        assert_eq!(bytes, 150);
    }

    #[test]
    fn more_parts_than_bytes_leaves_no_empty_group() {
        let g = FileGroup::new(vec![piece("a", 2, None)]);
        let cut = cut(&g, 4);
        assert_eq!(cut.len(), 2);
        assert_eq!(cut.iter().map(group_bytes).sum::<u64>(), 2);
    }
}
