//! [`resize`]: narrows a physical plan planned at the widest parallelism a query may use
//! to the partitions its input needs, without planning it again.
//!
//! How many partitions a query needs depends on the bytes its scans read, which only the
//! scans know once they are planned (a Parquet listing, a Delta log, Iceberg manifests).
//! Planning once more at the right width would read all of that twice, so the plan made
//! at the widest width is resized instead:
//! - each file scan's files (or byte ranges of them) are dealt into `partitions` groups,
//!   contiguously and evenly by bytes, adjacent ranges of one file joined again — never
//!   split further, so a scan that may not be split by ranges (compressed text, Iceberg
//!   deletes) stays whole;
//! - each hash (or round-robin) exchange is made `partitions` wide; at one partition an
//!   exchange is removed, or becomes a coalesce where its input still has several (a
//!   union), so a small query is one stage as if planned at one partition;
//! - every other operator is rebuilt over its new inputs, which recomputes what it derives
//!   from them.
//!
//! A plan whose partitioning means more than a count is not resized (`None`), and the
//! caller plans it again: a scan that declares its partitioning, or an order-preserving
//! exchange that would have to become a coalesce. The result is checked
//! with DataFusion's own [`SanityCheckPlan`] (every operator's required distribution and
//! ordering) and its invariants for a plan about to run (a partitioned join's inputs
//! co-partitioned: equally many partitions); a plan failing either is not used.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::error::Result as DfResult;
use datafusion::physical_optimizer::sanity_checker::SanityCheckPlan;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::InvariantLevel;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

use super::{file_bytes, file_scan, group_bytes, with_file_groups};

/// Why a plan was not resized: it is planned again instead.
struct NotResizable;

/// `plan` with `partitions` partitions wherever it had more (see the [module docs](self)),
/// or `None` when it cannot be resized safely. `partitions` must be at least 1.
pub fn resize(
    plan: Arc<dyn ExecutionPlan>,
    partitions: usize,
    options: &ConfigOptions,
) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
    let partitions = partitions.max(1);
    let mut refused = false;
    let resized = plan
        .transform_up(|node| match resize_node(&node, partitions) {
            Ok(Some(new)) => Ok(Transformed::yes(new)),
            Ok(None) => Ok(Transformed::no(node)),
            Err(NotResizable) => {
                refused = true;
                Ok(Transformed::new(node, false, TreeNodeRecursion::Stop))
            }
        })
        .data()?;
    if refused {
        return Ok(None);
    }
    if !executable(&resized)? {
        return Ok(None);
    }
    match SanityCheckPlan::new().optimize(resized.clone(), options) {
        Ok(_) => Ok(Some(resized)),
        Err(_) => Ok(None),
    }
}

/// The node resized, `None` when it derives everything from its inputs (the tree walk
/// rebuilds it over them).
fn resize_node(
    node: &Arc<dyn ExecutionPlan>,
    partitions: usize,
) -> Result<Option<Arc<dyn ExecutionPlan>>, NotResizable> {
    if let Some(config) = file_scan(node) {
        let Some(groups) = resize_scan(config, partitions)? else {
            return Ok(None);
        };
        return with_file_groups(node, config, groups)
            .map(Some)
            .map_err(|_| NotResizable);
    }
    if let Some(exchange) = node.downcast_ref::<RepartitionExec>() {
        return resize_exchange(exchange, partitions).map(Some);
    }
    Ok(None)
}

/// A file scan's files dealt into at most `partitions` groups; `None` when it already
/// has no more.
fn resize_scan(
    config: &FileScanConfig,
    partitions: usize,
) -> Result<Option<Vec<FileGroup>>, NotResizable> {
    if config.file_groups.len() <= partitions {
        return Ok(None);
    }
    // Groups that mean more than a count: hash-partitioned by file group. (A sorted
    // scan's groups may be joined: the new scan keeps its order only where the joined
    // files' statistics show them in order, and an operator that needs the order it
    // loses fails the sanity check.)
    if config.output_partitioning.is_some() {
        return Err(NotResizable);
    }
    Ok(Some(deal(&config.file_groups, partitions)))
}

/// The pieces of `groups` (files or byte ranges of them), in order, dealt into at most
/// `partitions` contiguous groups of about equal bytes; a file's adjacent ranges that
/// land in one group become one range.
pub(crate) fn deal(groups: &[FileGroup], partitions: usize) -> Vec<FileGroup> {
    let pieces: Vec<&PartitionedFile> = groups.iter().flat_map(|g| g.files()).collect();
    let total: u64 = groups.iter().map(group_bytes).sum();
    let mut dealt: Vec<Vec<PartitionedFile>> = vec![Vec::new(); partitions];
    let mut before = 0u64;
    for (i, piece) in pieces.iter().enumerate() {
        let size = file_bytes(piece);
        // A piece goes where its middle byte falls; without bytes to go by, by count.
        let group = if total == 0 {
            i * partitions / pieces.len()
        } else {
            (((before as u128 * 2 + size as u128) * partitions as u128) / (total as u128 * 2))
                as usize
        };
        before += size;
        let files = &mut dealt[group.min(partitions - 1)];
        match (files.last_mut(), &piece.range) {
            (Some(last), Some(next))
                if last.object_meta.location == piece.object_meta.location
                    && last.range.as_ref().is_some_and(|r| r.end == next.start) =>
            {
                if let Some(range) = last.range.as_mut() {
                    range.end = next.end;
                }
            }
            _ => files.push((*piece).clone()),
        }
    }
    dealt
        .into_iter()
        .filter(|files| !files.is_empty())
        .map(FileGroup::new)
        .collect()
}

/// A hash or round-robin exchange made `partitions` wide; at one partition, its input
/// (or a coalesce of it).
fn resize_exchange(
    exchange: &RepartitionExec,
    partitions: usize,
) -> Result<Arc<dyn ExecutionPlan>, NotResizable> {
    let input = exchange.input().clone();
    if partitions == 1 {
        if input.output_partitioning().partition_count() == 1 {
            return Ok(input);
        }
        if exchange.preserve_order() {
            return Err(NotResizable);
        }
        return Ok(Arc::new(CoalescePartitionsExec::new(input)));
    }
    let partitioning = match exchange.partitioning() {
        Partitioning::Hash(exprs, _) => Partitioning::Hash(exprs.clone(), partitions),
        Partitioning::RoundRobinBatch(_) => Partitioning::RoundRobinBatch(partitions),
        _ => return Err(NotResizable),
    };
    let resized = RepartitionExec::try_new(input, partitioning).map_err(|_| NotResizable)?;
    Ok(Arc::new(if exchange.preserve_order() {
        resized.with_preserve_order()
    } else {
        resized
    }))
}

/// Whether every operator meets DataFusion's invariants for a plan about to run, among
/// them that the inputs a partitioned join pairs partition by partition are
/// co-partitioned (equally many partitions, by the same keys).
fn executable(plan: &Arc<dyn ExecutionPlan>) -> DfResult<bool> {
    let mut executable = true;
    plan.apply(|node| {
        if node.check_invariants(InvariantLevel::Executable).is_err() {
            executable = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(executable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(group: &FileGroup) -> Vec<(String, Option<(i64, i64)>)> {
        group
            .files()
            .iter()
            .map(|f| {
                (
                    f.object_meta.location.to_string(),
                    f.range.as_ref().map(|r| (r.start, r.end)),
                )
            })
            .collect()
    }

    #[test]
    fn ranges_of_one_file_join_again() {
        // One 800-byte file cut into 8 ranges (one per partition at width 8).
        let groups: Vec<FileGroup> = (0..8)
            .map(|i| {
                FileGroup::new(vec![
                    PartitionedFile::new("t/a.parquet", 800).with_range(i * 100, i * 100 + 100)
                ])
            })
            .collect();
        let dealt = deal(&groups, 2);
        assert_eq!(dealt.len(), 2);
        assert_eq!(
            pieces(&dealt[0]),
            vec![("t/a.parquet".to_string(), Some((0, 400)))]
        );
        assert_eq!(
            pieces(&dealt[1]),
            vec![("t/a.parquet".to_string(), Some((400, 800)))]
        );
        let one = deal(&groups, 1);
        assert_eq!(
            pieces(&one[0]),
            vec![("t/a.parquet".to_string(), Some((0, 800)))]
        );
    }

    #[test]
    fn whole_files_are_dealt_evenly_in_order() {
        // 12 files of 10..=120 bytes over 6 groups, into 3.
        let files: Vec<PartitionedFile> = (1..=12)
            .map(|i| PartitionedFile::new(format!("t/{i:02}.parquet"), i * 10))
            .collect();
        let groups: Vec<FileGroup> = files
            .chunks(2)
            .map(|c| FileGroup::new(c.to_vec()))
            .collect();
        let dealt = deal(&groups, 3);
        assert_eq!(dealt.len(), 3);
        let sizes: Vec<u64> = dealt.iter().map(group_bytes).collect();
        assert_eq!(sizes.iter().sum::<u64>(), 780);
        assert!(sizes.iter().all(|s| (180..=340).contains(s)), "{sizes:?}");
        // Every file once, in the order they came.
        let order: Vec<String> = dealt.iter().flat_map(pieces).map(|(p, _)| p).collect();
        let expected: Vec<String> = (1..=12).map(|i| format!("t/{i:02}.parquet")).collect();
        assert_eq!(order, expected);
    }

    #[test]
    fn no_group_is_empty() {
        // One file holds nearly every byte: fewer groups than asked, none empty.
        let groups = vec![
            FileGroup::new(vec![PartitionedFile::new("t/big.parquet", 10_000)]),
            FileGroup::new(vec![PartitionedFile::new("t/a.parquet", 1)]),
            FileGroup::new(vec![PartitionedFile::new("t/b.parquet", 1)]),
            FileGroup::new(vec![PartitionedFile::new("t/c.parquet", 1)]),
        ];
        let dealt = deal(&groups, 3);
        assert!(dealt.iter().all(|g| !g.files().is_empty()));
        assert_eq!(dealt.iter().map(|g| g.files().len()).sum::<usize>(), 4);
        assert!(dealt.len() <= 3);
    }

    #[test]
    fn empty_files_are_dealt_by_count() {
        let groups: Vec<FileGroup> = (0..6)
            .map(|i| FileGroup::new(vec![PartitionedFile::new(format!("t/{i}.csv"), 0)]))
            .collect();
        let dealt = deal(&groups, 2);
        assert_eq!(dealt.len(), 2);
        assert_eq!(dealt[0].files().len(), 3);
        assert_eq!(dealt[1].files().len(), 3);
    }
}
