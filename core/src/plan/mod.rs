//! SQL -> DataFusion physical plan -> [`StageGraph`].
//!
//! [`physical_plan`] plans with DataFusion, sizing the plan's parallelism from the bytes
//! its scans read; [`StageSplitter`] cuts the plan into stages at every exchange; the
//! stage plans travel as bytes ([`encode_plan`] / [`decode_plan`]: datafusion-proto with
//! [`crate::shuffle::LambdaFusionCodec`]). When a stage becomes ready, [`adaptive::decide`] shapes it from
//! what its inputs committed.

pub mod adaptive;
pub mod dimension_joins;
pub mod encoding;
pub mod functions;
mod joins;
pub mod marks;
mod resize;
pub mod rules;
pub mod semi_joins;
pub mod single_task;
pub mod spread;
mod stages;
pub mod switch;

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use datafusion_proto::protobuf;
use prost::Message;

pub use adaptive::human_bytes;
pub use joins::distribute_joins;
pub use stages::{edge_name, Stage, StageGraph, StageSplitter};

use crate::state::PlanRecord;
use crate::{EngineConfig, Error, Result, Services};

/// The DataFusion session settings every lambdafusion plan is made with.
///
/// - Round-robin repartitioning is off: it only spreads rows over threads of one
///   process, and our partitions are already separate tasks.
/// - Dynamic filter pushdown is off: those filters are runtime state shared inside one
///   process (a hash join's build side even waits for *every* output partition of the
///   join to report, which in a task running one partition would wait forever).
/// - File-scan work stealing is off: a task runs one partition and never its siblings,
///   so a partition must read exactly the files planned for it.
/// - Uncorrelated scalar subqueries in filters and projections are planned as joins
///   (DataFusion's setting for distributed engines), which distribute like any join;
///   [`rules::ScalarSubqueryCardinality`] keeps their "more than one row" error. Those
///   elsewhere (`ORDER BY`, aggregate and window arguments, join conditions, `GROUP BY`),
///   which no rule rewrites, are planned as DataFusion's `ScalarSubqueryExec`: see
///   [`physical_plan`] and the splitter ([`stages`]), which makes each subquery a stage
///   every consuming task reads whole.
/// - A scan smaller than one task's worth of bytes is not split by byte ranges.
pub fn session_config(config: &EngineConfig, target_partitions: usize) -> SessionConfig {
    let mut c = SessionConfig::new()
        .with_target_partitions(target_partitions.max(1))
        .with_batch_size(config.batch_size)
        .with_information_schema(true);
    let o = c.options_mut();
    o.optimizer.enable_round_robin_repartition = false;
    // Uncorrelated scalar subqueries the optimizer can rewrite become joins (see
    // `physical_plan` for the others).
    o.optimizer.enable_physical_uncorrelated_scalar_subquery = false;
    // Each task runs one partition alone: a partition must read its own files only.
    o.execution.enable_file_stream_work_stealing = false;
    // Set each one: assigning the umbrella field does not propagate like `SET` does.
    o.optimizer.enable_dynamic_filter_pushdown = false;
    o.optimizer.enable_join_dynamic_filter_pushdown = false;
    o.optimizer.enable_topk_dynamic_filter_pushdown = false;
    o.optimizer.enable_aggregate_dynamic_filter_pushdown = false;
    o.optimizer.repartition_file_min_size = config.bytes_per_task as usize;
    c
}

/// A session state over `runtime` with [`session_config`].
pub fn session_state(
    runtime: Arc<RuntimeEnv>,
    config: &EngineConfig,
    target_partitions: usize,
) -> SessionState {
    let mut state = SessionStateBuilder::new()
        .with_config(session_config(config, target_partitions))
        .with_runtime_env(runtime)
        .with_default_features()
        .with_optimizer_rule(Arc::new(rules::WindowFilterToCase))
        .with_optimizer_rule(Arc::new(semi_joins::SemiJoinsFirst))
        .with_analyzer_rule(Arc::new(rules::ScalarSubqueryCardinality))
        .build();
    functions::install(&mut state, config);
    crate::delta::register(&mut state);
    crate::iceberg::register(&mut state);
    // Beside the default functions (a task decodes it by name).
    let _ = datafusion::execution::FunctionRegistry::register_udaf(
        &mut state,
        Arc::new(datafusion::logical_expr::AggregateUDF::from(
            rules::SingleValue::default(),
        )),
    );
    state
}

/// How [`physical_plan_sized`] fits a plan planned at the widest width to its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    /// Resize the plan ([`resize`]); plan again only where it cannot be resized.
    Resize,
    /// Plan again at the right width (what every query did before [`resize`]; kept as
    /// the fallback and for `bench plan` to compare with).
    Replan,
}

/// Creates the physical plan of `logical`, sized to its input: planned once at the widest
/// allowed parallelism, which finds the bytes its scans read, then resized to
/// `tasks_for_bytes(scan bytes)` partitions if that differs ([`resize`]). Small queries
/// become one single-partition stage; large ones fan out up to `max_tasks_per_stage`.
pub async fn physical_plan(
    state: &SessionState,
    logical: &LogicalPlan,
    config: &EngineConfig,
) -> Result<Arc<dyn ExecutionPlan>> {
    physical_plan_sized(state, logical, config, Sizing::Resize).await
}

/// [`physical_plan`], with the way it is sized to its input chosen.
pub async fn physical_plan_sized(
    state: &SessionState,
    logical: &LogicalPlan,
    config: &EngineConfig,
    sizing: Sizing,
) -> Result<Arc<dyn ExecutionPlan>> {
    // Optimized with scalar subqueries rewritten to joins where DataFusion can; those
    // left (outside filters and projections) are then planned as `ScalarSubqueryExec`
    // rather than refused.
    let optimized = optimized(state, logical, config).await?;
    let plan_with = |n: usize| {
        let mut planning = with_target_partitions(state, n);
        planning
            .config_mut()
            .options_mut()
            .optimizer
            .enable_physical_uncorrelated_scalar_subquery = true;
        planning
    };
    let widest = config.stage_width();
    let first = plan_with(widest);
    let plan = first
        .query_planner()
        .create_physical_plan(&optimized, &first)
        .await?;
    let partitions = config.tasks_for_bytes(scan_bytes(&plan));
    if partitions == widest {
        return Ok(plan);
    }
    if sizing == Sizing::Resize {
        if let Some(resized) = resize::resize(plan, partitions, first.config_options())? {
            return Ok(resized);
        }
    }
    let sized = plan_with(partitions);
    Ok(sized
        .query_planner()
        .create_physical_plan(&optimized, &sized)
        .await?)
}

/// `logical` optimized: DataFusion's rules (ours among them, see [`session_state`]), then
/// the dimension joins moved ([`dimension_joins`], which needs the files listed).
pub async fn optimized(
    state: &SessionState,
    logical: &LogicalPlan,
    config: &EngineConfig,
) -> Result<LogicalPlan> {
    let optimized = state.optimize(logical)?;
    if !config.dimension_joins {
        return Ok(optimized);
    }
    Ok(
        dimension_joins::dimension_joins_first(optimized, state, config.max_broadcast_bytes)
            .await?,
    )
}

/// `state` planning at `n` partitions: a clone with that one setting changed (building
/// a state again registers every function anew, half a millisecond per query).
fn with_target_partitions(state: &SessionState, n: usize) -> SessionState {
    let mut planning = state.clone();
    planning
        .config_mut()
        .options_mut()
        .execution
        .target_partitions = n.max(1);
    planning
}

/// Refuses a physical plan that writes anywhere (COPY, INSERT: a `DataSinkExec`). The
/// statement check ([`crate::sql::verdict`]) keeps writes from being planned at all;
/// this holds at the two places a plan could still carry one — cutting it into stages
/// and decoding a stage plan in a task — so nothing a caller names becomes a file or an
/// object key. It also refuses what a task could not run as planned
/// (`refuse_virtual_columns`).
pub fn refuse_writes(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    use datafusion::common::tree_node::TreeNode;
    use datafusion::datasource::sink::DataSinkExec;
    let mut writes = false;
    plan.apply(|node| {
        writes = node.downcast_ref::<DataSinkExec>().is_some();
        Ok(if writes {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if writes {
        return Err(Error::InvalidInput(
            "a plan that writes through DataFusion's own sinks is never run: lambdafusion \
             writes query results only with COPY (SELECT ...) TO 'location'"
                .into(),
        ));
    }
    refuse_virtual_columns(plan)
}

/// Refuses a scan that reads virtual columns (`file_row_index()`): the encoding a task
/// receives (datafusion-proto 55) does not carry them, so the task's scan would not
/// produce the column its plan reads.
fn refuse_virtual_columns(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    use datafusion::common::tree_node::TreeNode;
    let mut found = None;
    plan.apply(|node| {
        if let Some(config) = file_scan(node) {
            let virtual_columns = config.file_source().table_schema().virtual_columns();
            if let Some(field) = virtual_columns.first() {
                found = Some(field.name().clone());
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match found {
        Some(column) => Err(Error::InvalidInput(format!(
            "file_row_index() and other virtual file columns ({column}) are not supported: \
             a task's scan cannot produce them"
        ))),
        None => Ok(()),
    }
}

/// `with_new_children` of a node of ours that shows the optimizer no children (`this`,
/// named `node`): itself, given none; any child is an internal error naming the node.
pub(crate) fn no_children<T: ExecutionPlan + 'static>(
    node: &str,
    this: Arc<T>,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    if !children.is_empty() {
        return Err(datafusion::error::DataFusionError::Internal(format!(
            "{node} has no children to replace, got {}",
            children.len()
        )));
    }
    Ok(this)
}

/// The one child a single-input node of ours (`node`) is rebuilt with in
/// `with_new_children` / `replace_children`; any other number is an internal error naming
/// the node.
pub(crate) fn only_child(
    node: &str,
    mut children: Vec<Arc<dyn ExecutionPlan>>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    if children.len() != 1 {
        return Err(datafusion::error::DataFusionError::Internal(format!(
            "{node} takes one child, got {}",
            children.len()
        )));
    }
    Ok(children.swap_remove(0))
}

/// The files a scan node reads: a file scan's, or the scan a Delta table's deletion
/// vectors apply to ([`crate::format_scan::FormatScanExec`], a leaf holding its scan).
pub(crate) fn file_scan(node: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    if let Some(dv) = node.downcast_ref::<crate::format_scan::FormatScanExec>() {
        return Some(dv.scan_config());
    }
    node.downcast_ref::<DataSourceExec>()
        .and_then(|scan| scan.data_source().downcast_ref::<FileScanConfig>())
}

/// Scan node `node` (whose scan is `config`) reading `groups` instead of its own file
/// groups: a plain file scan, or a [`crate::format_scan::FormatScanExec`] over one (its
/// deletes and field ids kept).
pub(crate) fn with_file_groups(
    node: &Arc<dyn ExecutionPlan>,
    config: &FileScanConfig,
    groups: Vec<datafusion::datasource::physical_plan::FileGroup>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    use datafusion::datasource::physical_plan::FileScanConfigBuilder;
    let scan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(
        FileScanConfigBuilder::from(config.clone())
            .with_file_groups(groups)
            .build(),
    );
    match node.downcast_ref::<crate::format_scan::FormatScanExec>() {
        Some(format) => Ok(Arc::new(format.with_scan(scan)?)),
        None => Ok(scan),
    }
}

/// A table's files as the file groups of its scan: one per planned partition
/// (`target_partitions`, which the planner sizes by bytes). With `ranges`, large files are
/// split into byte ranges (Parquet); without, whole files are dealt out (compressed text).
pub(crate) fn split_files(
    state: &dyn datafusion::catalog::Session,
    files: Vec<datafusion::datasource::listing::PartitionedFile>,
    ranges: bool,
) -> Vec<datafusion::datasource::physical_plan::FileGroup> {
    use datafusion::datasource::physical_plan::{FileGroup, FileGroupPartitioner};
    let config = state.config_options();
    let tasks = config.execution.target_partitions.max(1);
    let all = FileGroup::new(files);
    if !ranges {
        return all.split_files(tasks);
    }
    FileGroupPartitioner::new()
        .with_target_partitions(tasks)
        .with_repartition_file_min_size(config.optimizer.repartition_file_min_size)
        .with_preserve_order_within_groups(false)
        .repartition_file_groups(std::slice::from_ref(&all))
        .unwrap_or_else(|| vec![all])
}

/// Bytes the file scans of `plan` read (whole files, or their assigned byte ranges).
pub fn scan_bytes(plan: &Arc<dyn ExecutionPlan>) -> u64 {
    use datafusion::common::tree_node::TreeNode;
    let mut total = 0u64;
    let _ = plan.apply(|node| {
        if let Some(config) = file_scan(node) {
            total += config.file_groups.iter().map(group_bytes).sum::<u64>();
        }
        Ok(TreeNodeRecursion::Continue)
    });
    total
}

/// Bytes one file group (one scan partition) reads: whole files, or their byte ranges.
pub(crate) fn group_bytes(group: &datafusion::datasource::physical_plan::FileGroup) -> u64 {
    group.files().iter().map(file_bytes).sum()
}

/// Bytes one piece of a scan reads: the whole file, or its byte range.
pub(crate) fn file_bytes(file: &datafusion::datasource::listing::PartitionedFile) -> u64 {
    match &file.range {
        Some(r) => (r.end - r.start).max(0) as u64,
        None => file.object_meta.size,
    }
}

/// The encoded plan a [`PlanRecord`] holds, read from object storage when it lives there.
pub async fn stage_plan_bytes(services: &Services, record: PlanRecord) -> Result<Vec<u8>> {
    use object_store::ObjectStoreExt;
    match (record.plan, &record.object) {
        (Some(bytes), _) => Ok(bytes),
        (None, Some(object)) => Ok(services
            .shuffle_store()?
            .get(&object_store::path::Path::from(object.as_str()))
            .await?
            .bytes()
            .await?
            .to_vec()),
        (None, None) => Err(Error::Internal(format!(
            "the plan of stage {} of job {} is empty",
            record.stage, record.job_id
        ))),
    }
}

/// Reads the stored (encoded) plan of stage `stage` of job `job_id`.
pub async fn read_stage_plan_bytes(
    services: &Services,
    job_id: &str,
    stage: u32,
) -> Result<Vec<u8>> {
    let record = services
        .store
        .get_plan(job_id, stage)
        .await?
        .ok_or_else(|| Error::Internal(format!("stage {stage} of job {job_id} has no plan")))?;
    stage_plan_bytes(services, record).await
}

/// Reads and decodes the stored plan of stage `stage` of job `job_id`; `ctx` must resolve
/// every object store the plan reads (its scans read through the stores `ctx` resolves).
pub async fn read_stage_plan(
    services: &Services,
    job_id: &str,
    stage: u32,
    ctx: &TaskContext,
) -> Result<Arc<dyn ExecutionPlan>> {
    decode_plan(&read_stage_plan_bytes(services, job_id, stage).await?, ctx)
}

pub use encoding::encode_plan;

/// Decodes a stage plan; `ctx` must resolve every object store the plan reads. A plan
/// that writes is refused ([`refuse_writes`]), whoever stored it.
pub fn decode_plan(bytes: &[u8], ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = encoding::decode_plan_unchecked(bytes, ctx)?;
    refuse_writes(&plan)?;
    Ok(plan)
}

/// Encodes an Arrow schema (datafusion-proto's `Schema` message).
pub fn encode_schema(schema: &Schema) -> Result<Vec<u8>> {
    let proto = protobuf::Schema::try_from(schema)
        .map_err(|e| Error::Internal(format!("cannot encode schema: {e}")))?;
    Ok(proto.encode_to_vec())
}

/// Decodes a schema written by [`encode_schema`].
pub fn decode_schema(bytes: &[u8]) -> Result<SchemaRef> {
    let proto = protobuf::Schema::decode(bytes)
        .map_err(|e| Error::Internal(format!("corrupt stored schema: {e}")))?;
    let schema = Schema::try_from(&proto)
        .map_err(|e| Error::Internal(format!("corrupt stored schema: {e}")))?;
    Ok(Arc::new(schema))
}
