//! [`StageSplitter`]: the planner pass that cuts a physical plan into stages.
//!
//! Walking the plan bottom-up (`transform_up`), every exchange becomes a stage edge:
//! - a hash `RepartitionExec` -> the input becomes a stage writing a hash shuffle, read
//!   by a [`ReadMode::Hash`] reader;
//! - `CoalescePartitionsExec` / `SortPreservingMergeExec` over several partitions -> the
//!   input becomes a stage, read by a [`ReadMode::Gather`] reader under the same
//!   coalesce / merge;
//! - the build side of a collect-left hash join, nested-loop join or cross join -> a
//!   stage read whole by every consumer task ([`ReadMode::All`], a broadcast) — unless it
//!   is a tiny scan (at most `inline_scan_bytes`, no exchange below), which each
//!   consuming task reads itself.
//!
//! - a `ScalarSubqueryExec` (an uncorrelated scalar subquery outside a filter or
//!   projection) -> each subquery a stage read whole; every stage whose expressions use
//!   the values computes them first ([`StageSplitter::lift_subqueries`]).
//!
//! Round-robin repartitions only spread work over the threads of one process; they
//! are dropped (the session does not plan them in the first place). What remains
//! above the last exchange is the final stage, whose tasks write the result.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::JoinType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::physical_planning_context::ScalarSubqueryResults;
use datafusion::physical_expr::scalar_subquery::ScalarSubqueryExpr;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::scalar_subquery::{ScalarSubqueryExec, ScalarSubqueryLink};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    ReplaceChildrenOptions,
};

use crate::shuffle::{ReadMode, ShuffleReaderExec, ShuffleWriterExec};
use crate::state::{EdgeKind, JoinSwitch, StageInput, SwitchMode};
use crate::{EngineConfig, Result};

/// One stage: a plan rooted at a [`ShuffleWriterExec`], run as `tasks` tasks.
#[derive(Debug, Clone)]
pub struct Stage {
    /// Stage id; stages are numbered in topological order.
    pub id: u32,
    /// The stage plan (root: [`ShuffleWriterExec`]).
    pub plan: Arc<dyn ExecutionPlan>,
    /// Stages it reads, and how.
    pub inputs: Vec<StageInput>,
    /// Number of tasks.
    pub tasks: usize,
    /// Slices each task writes.
    pub output_partitions: usize,
    /// One line saying what it does.
    pub summary: String,
    /// Bytes each plan partition scans, for a stage reading no hash shuffle whose
    /// partitions are its scans' file groups (a leaf stage, or a scan probing broadcast
    /// build sides); empty otherwise.
    pub scan_bytes: Vec<u64>,
    /// Set on the large side of a join that may switch to a broadcast of its other
    /// side ([`super::switch`]).
    pub switch: Option<JoinSwitch>,
    /// Set on a combining stage: the hash shuffle it regroups (a two-level exchange).
    pub combines: Option<u32>,
}

/// The stages of one query; the last one produces the result.
#[derive(Debug, Clone)]
pub struct StageGraph {
    /// Stages in topological order.
    pub stages: Vec<Stage>,
}

impl StageGraph {
    /// The result stage.
    pub fn final_stage(&self) -> &Stage {
        self.stages
            .last()
            .expect("a stage graph has at least one stage")
    }

    /// A readable rendering: one block per stage with its edges and plan.
    pub fn display(&self) -> String {
        use datafusion::physical_plan::displayable;
        let mut out = String::new();
        for s in &self.stages {
            let inputs: Vec<String> = s
                .inputs
                .iter()
                .map(|i| format!("{} from stage {}", edge_name(i.kind), i.stage))
                .collect();
            let adaptive = if let Some(input) = s.combines {
                format!(
                    "; combining (a two-level exchange): when stage {input} has committed, \
                     its tasks each read one group of its producers' slices of one group of \
                     partitions, or it runs none and its consumer reads stage {input} \
                     directly when that takes few enough reads"
                )
            } else if s.tasks > 1 && s.inputs.iter().any(|i| i.kind == EdgeKind::Hash) {
                "; adaptive: its tasks are sized from the committed shuffle bytes when it \
                 becomes ready"
                    .to_string()
            } else {
                String::new()
            };
            let switch = match s.switch {
                Some(sw) => format!(
                    "; waits for stage {}: if it turns out small, stage {}'s join reads it \
                     whole (broadcast) and this stage {} instead of writing a hash shuffle \
                     of its rows",
                    sw.small,
                    sw.join,
                    match sw.mode {
                        SwitchMode::Marks => "marks its rows".to_string(),
                        SwitchMode::Join => format!("runs stage {} itself", sw.join),
                        SwitchMode::Aggregate => {
                            "joins its rows and aggregates them partially".to_string()
                        }
                    }
                ),
                None => String::new(),
            };
            out.push_str(&format!(
                "Stage {} ({} task{}, {} output slice{}){}{adaptive}{switch}\n",
                s.id,
                s.tasks,
                if s.tasks == 1 { "" } else { "s" },
                s.output_partitions,
                if s.output_partitions == 1 { "" } else { "s" },
                if inputs.is_empty() {
                    String::new()
                } else {
                    format!(" <- {}", inputs.join(", "))
                }
            ));
            out.push_str(&displayable(s.plan.as_ref()).indent(false).to_string());
        }
        out
    }
}

/// Name of an edge kind as shown to users.
pub fn edge_name(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Hash => "hash shuffle",
        EdgeKind::Gather => "gather",
        EdgeKind::Broadcast => "broadcast",
    }
}

/// Cuts a physical plan into a [`StageGraph`]. See the [module docs](self).
#[derive(Debug, Default)]
pub struct StageSplitter {
    stages: Vec<Stage>,
    /// A join build side that only scans files (no exchange below it) and reads at most
    /// this many bytes is read by each consuming task itself rather than cut into a
    /// broadcast stage.
    inline_scan_bytes: u64,
    /// A hash shuffle planned for more reads than this (producers × partitions) gets a
    /// combining stage.
    max_shuffle_reads: u64,
    /// Each lifted `ScalarSubqueryExec`'s results container, with its subqueries as
    /// they are read in the stages that use them ([`Self::lift_subqueries`]).
    subqueries: Vec<(ScalarSubqueryResults, Vec<ScalarSubqueryLink>)>,
}

impl StageSplitter {
    /// Cuts `plan` into stages, with `config`'s `inline_scan_bytes`.
    pub fn split(plan: Arc<dyn ExecutionPlan>, config: &EngineConfig) -> Result<StageGraph> {
        super::refuse_writes(&plan)?;
        let plan = super::single_task::run_whole(plan)?;
        let plan = super::distribute_joins(plan)?;
        let plan = super::switch::cut_small_sides(plan)?;
        let mut splitter = StageSplitter {
            inline_scan_bytes: config.inline_scan_bytes,
            max_shuffle_reads: config.max_shuffle_reads,
            ..StageSplitter::default()
        };
        let plan = splitter.lift_subqueries(plan)?;
        let root = plan.transform_up(|node| splitter.cut(node))?.data;
        splitter.add_stage(root, None)?;
        super::switch::annotate(&mut splitter.stages);
        Ok(StageGraph {
            stages: splitter.stages,
        })
    }

    /// Takes every `ScalarSubqueryExec` (uncorrelated scalar subqueries outside filters
    /// and projections) out of `plan`, keeping its input. Its subqueries are cut first,
    /// each into a stage of its own read whole ([`ReadMode::All`]) — or, reading no
    /// stage and at most `inline_scan_bytes`, computed in place (`SELECT 42`). The
    /// expressions that use their values may land in any stage above or below the
    /// exchanges of the input: [`Self::add_stage`] gives each stage that holds one a
    /// `ScalarSubqueryExec` of its own over the same subqueries, so every task computes
    /// the values (a row at most each) before its work.
    fn lift_subqueries(
        &mut self,
        plan: Arc<dyn ExecutionPlan>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(plan
            .transform_down(|node| {
                let Some(exec) = node.downcast_ref::<ScalarSubqueryExec>() else {
                    return Ok(Transformed::no(node));
                };
                let mut links = Vec::new();
                for link in exec.subqueries() {
                    let plan = self.lift_subqueries(link.plan.clone())?;
                    let plan = plan.transform_up(|n| self.cut(n))?.data;
                    let plan = if !reads_a_stage(&plan)
                        && super::scan_bytes(&plan) <= self.inline_scan_bytes
                    {
                        plan
                    } else {
                        self.whole(plan)?
                    };
                    links.push(ScalarSubqueryLink {
                        plan,
                        index: link.index,
                    });
                }
                links.sort_by_key(|l| l.index.as_usize());
                if links
                    .iter()
                    .enumerate()
                    .any(|(i, l)| l.index.as_usize() != i)
                {
                    return Err(DataFusionError::Internal(
                        "scalar subqueries are not numbered 0..n".into(),
                    ));
                }
                self.subqueries.push((exec.results().clone(), links));
                // Its input, itself lifted (a lifted node's input is not visited again).
                let input = self.lift_subqueries(exec.input().clone())?;
                Ok(Transformed::new(input, true, TreeNodeRecursion::Jump))
            })?
            .data)
    }

    /// `input` under a `ScalarSubqueryExec` of the lifted subqueries its expressions
    /// use, if they use any ([`Self::lift_subqueries`]).
    fn provide_subqueries(
        &self,
        input: Arc<dyn ExecutionPlan>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if self.subqueries.is_empty() {
            return Ok(input);
        }
        let mut used: Vec<ScalarSubqueryResults> = Vec::new();
        input.apply(|node| {
            node.apply_expressions(&mut |expr| {
                expr.apply(|e| {
                    if let Some(sq) = e.downcast_ref::<ScalarSubqueryExpr>() {
                        if !used
                            .iter()
                            .any(|u| ScalarSubqueryResults::ptr_eq(u, sq.results()))
                        {
                            used.push(sq.results().clone());
                        }
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })?;
            Ok(TreeNodeRecursion::Continue)
        })?;
        match used.as_slice() {
            [] => Ok(input),
            [results] => {
                let (_, links) = self
                    .subqueries
                    .iter()
                    .find(|(r, _)| ScalarSubqueryResults::ptr_eq(r, results))
                    .ok_or_else(|| {
                        DataFusionError::Internal(
                            "a scalar subquery's value is used outside its query".into(),
                        )
                    })?;
                Ok(Arc::new(ScalarSubqueryExec::new(
                    input,
                    links.clone(),
                    results.clone(),
                )))
            }
            _ => Err(DataFusionError::NotImplemented(
                "scalar subqueries of two query levels in one stage".into(),
            )),
        }
    }

    fn cut(
        &mut self,
        node: Arc<dyn ExecutionPlan>,
    ) -> DfResult<Transformed<Arc<dyn ExecutionPlan>>> {
        if let Some(repartition) = node.downcast_ref::<RepartitionExec>() {
            return self.cut_repartition(repartition);
        }
        if let Some(coalesce) = node.downcast_ref::<CoalescePartitionsExec>() {
            let input = coalesce.input();
            if input.output_partitioning().partition_count() <= 1 {
                return Ok(Transformed::no(node));
            }
            let reader = self.gather(input)?;
            let merged = CoalescePartitionsExec::new(reader).with_fetch(coalesce.fetch());
            return Ok(Transformed::yes(Arc::new(merged)));
        }
        if let Some(merge) = node.downcast_ref::<SortPreservingMergeExec>() {
            let input = merge.input();
            if input.output_partitioning().partition_count() <= 1 {
                return Ok(Transformed::no(node));
            }
            let reader = self.gather(input)?;
            let merged = SortPreservingMergeExec::new(merge.expr().clone(), reader)
                .with_fetch(merge.fetch());
            return Ok(Transformed::yes(Arc::new(merged)));
        }
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            if super::marks::applies(join) {
                return self.split_marks(join);
            }
        }
        let build_side = if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            (*join.partition_mode() == PartitionMode::CollectLeft).then(|| join.left().clone())
        } else {
            node.downcast_ref::<NestedLoopJoinExec>()
                .map(|join| join.left().clone())
                .or_else(|| {
                    node.downcast_ref::<CrossJoinExec>()
                        .map(|join| join.left().clone())
                })
        };
        match build_side {
            Some(left) => self.broadcast_build_side(node, left),
            None => Ok(Transformed::no(node)),
        }
    }

    fn cut_repartition(
        &mut self,
        repartition: &RepartitionExec,
    ) -> DfResult<Transformed<Arc<dyn ExecutionPlan>>> {
        let input = repartition.input().clone();
        match repartition.partitioning() {
            Partitioning::Hash(..) => {
                let partitioning = repartition.partitioning().clone();
                let schema = input.schema();
                let producer_eq = input.equivalence_properties().clone();
                let (stage, producers) = self.add_stage(input, Some(partitioning.clone()))?;
                let width = partitioning.partition_count();
                let (stage, producers) =
                    if (producers as u64).saturating_mul(width as u64) > self.max_shuffle_reads {
                        self.add_combining_stage(stage, producers, &partitioning, &schema)?
                    } else {
                        (stage, producers)
                    };
                let reader: Arc<dyn ExecutionPlan> = Arc::new(ShuffleReaderExec::new(
                    stage,
                    producers,
                    ReadMode::Hash(partitioning),
                    schema,
                    Some(producer_eq),
                ));
                // An order-preserving repartition merges sorted inputs, and one of a
                // single input partition keeps its order (the plan above may rely on
                // it without asking for a sort); slices read one after another are not
                // merged, so sort each partition again.
                match repartition.properties().output_ordering() {
                    Some(ordering) if repartition.maintains_input_order()[0] => {
                        let sort = SortExec::new(ordering.clone(), reader)
                            .with_preserve_partitioning(true);
                        Ok(Transformed::yes(Arc::new(sort)))
                    }
                    _ => Ok(Transformed::yes(reader)),
                }
            }
            Partitioning::RoundRobinBatch(_) => Ok(Transformed::yes(input)),
            other => Err(DataFusionError::NotImplemented(format!(
                "lambdafusion cannot distribute a {other} repartition"
            ))),
        }
    }

    /// Makes `input` a stage and returns a gather reader over it.
    fn gather(&mut self, input: &Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
        let eq = input.equivalence_properties().clone();
        let schema = input.schema();
        let (stage, producers) = self.add_stage(input.clone(), None)?;
        Ok(Arc::new(ShuffleReaderExec::new(
            stage,
            producers,
            ReadMode::Gather,
            schema,
            Some(eq),
        )))
    }

    /// Gives a join's build side (`left`) to every consumer task whole, computed once.
    fn broadcast_build_side(
        &mut self,
        join: Arc<dyn ExecutionPlan>,
        left: Arc<dyn ExecutionPlan>,
    ) -> DfResult<Transformed<Arc<dyn ExecutionPlan>>> {
        if let Some(reader) = left.downcast_ref::<ShuffleReaderExec>() {
            if matches!(reader.mode(), ReadMode::All) {
                return Ok(Transformed::no(join));
            }
        }
        let single_task = join.output_partitioning().partition_count() <= 1;
        let new_left = match Self::gathered(&left) {
            Some(reader) => reader,
            // A single consumer task computes the build side once anyway.
            None if single_task => return Ok(Transformed::no(join)),
            // A tiny scan (a dimension table): each consuming task reads the few bytes
            // itself — the same reads a broadcast would make, without a stage and its
            // hand-off.
            None if !reads_a_stage(&left) && super::scan_bytes(&left) <= self.inline_scan_bytes => {
                return Ok(Transformed::no(join));
            }
            None => self.whole(left)?,
        };
        let mut children: Vec<Arc<dyn ExecutionPlan>> =
            join.children().into_iter().cloned().collect();
        children[0] = new_left;
        Ok(Transformed::yes(join.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )?))
    }

    /// A coalesce over a gather reader already moves every producer's output to one
    /// place: the same stage read whole in one partition.
    fn gathered(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
        if let Some(reader) = plan.downcast_ref::<ShuffleReaderExec>() {
            if matches!(reader.mode(), ReadMode::All) {
                return Some(plan.clone());
            }
        }
        plan.downcast_ref::<CoalescePartitionsExec>()
            .filter(|c| c.fetch().is_none())
            .and_then(|c| c.input().downcast_ref::<ShuffleReaderExec>())
            .filter(|r| matches!(r.mode(), ReadMode::Gather))
            .map(|r| {
                Arc::new(ShuffleReaderExec::new(
                    r.stage(),
                    r.producers(),
                    ReadMode::All,
                    plan.schema(),
                    None,
                )) as Arc<dyn ExecutionPlan>
            })
    }

    /// `plan` read whole, in one partition and one fixed order: a stage of its own
    /// unless it already is one.
    fn whole(&mut self, plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
        if let Some(reader) = Self::gathered(&plan) {
            return Ok(reader);
        }
        let schema = plan.schema();
        let (stage, producers) = self.add_stage(plan, None)?;
        Ok(Arc::new(ShuffleReaderExec::new(
            stage,
            producers,
            ReadMode::All,
            schema,
            None,
        )))
    }

    /// A semi, anti or mark join with a collected build side, distributed as
    /// [`super::marks`] describes: the build side broadcast, a stage of per-probe-task
    /// marks, and their combination in place of the join.
    fn split_marks(
        &mut self,
        join: &HashJoinExec,
    ) -> DfResult<Transformed<Arc<dyn ExecutionPlan>>> {
        let build = self.whole(join.left().clone())?;
        let (probe, combine) = super::marks::split(join, build)?;
        let marks = self.whole(probe)?;
        Ok(Transformed::yes(combine.combine(marks)?))
    }

    /// The second level of a two-level exchange over stage `input`'s hash shuffle of
    /// `producers` tasks: a stage that reads that shuffle and writes it again with the
    /// same partitioning. Its plan says what it computes; how it runs — each task one
    /// group of producers and one group of partitions, or no task at all — is decided at
    /// its claim ([`super::adaptive`]). Returns its id and plan partitions.
    fn add_combining_stage(
        &mut self,
        input: u32,
        producers: usize,
        partitioning: &Partitioning,
        schema: &datafusion::arrow::datatypes::SchemaRef,
    ) -> DfResult<(u32, usize)> {
        let reader: Arc<dyn ExecutionPlan> = Arc::new(ShuffleReaderExec::new(
            input,
            producers,
            ReadMode::Hash(partitioning.clone()),
            schema.clone(),
            None,
        ));
        let (stage, tasks) = self.add_stage(reader, Some(partitioning.clone()))?;
        let added = self.stages.last_mut().expect("the stage was just added");
        added.combines = Some(input);
        added.summary = format!("Combine <- hash shuffle of stage {input}");
        Ok((stage, tasks))
    }

    /// Wraps `input` in a writer as a new stage; returns its id and task count.
    fn add_stage(
        &mut self,
        input: Arc<dyn ExecutionPlan>,
        partitioning: Option<Partitioning>,
    ) -> DfResult<(u32, usize)> {
        refuse_nested_dictionaries(&input.schema())?;
        let input = self.provide_subqueries(input)?;
        let id = self.stages.len() as u32;
        let writer =
            ShuffleWriterExec::try_new(id, input, partitioning).map_err(DataFusionError::from)?;
        let tasks = writer.tasks();
        let output_partitions = writer.output_slices();
        let plan: Arc<dyn ExecutionPlan> = Arc::new(writer);
        let inputs = stage_inputs(&plan, tasks)?;
        let summary = summarize(&plan);
        let scan_bytes = if inputs.iter().all(|i| i.kind != EdgeKind::Hash) {
            partition_scan_bytes(&plan, tasks)
        } else {
            Vec::new()
        };
        self.stages.push(Stage {
            id,
            plan,
            inputs,
            tasks,
            output_partitions,
            summary,
            scan_bytes,
            switch: None,
            combines: None,
        });
        Ok((id, tasks))
    }
}

/// Whether `plan` reads another stage (holds a [`ShuffleReaderExec`]).
/// Refuses a stage output holding a dictionary whose values are dictionaries: Arrow IPC,
/// which every shuffle object and result is written in, cannot encode one ("Arrow IPC
/// field metadata cannot encode direct dictionary-of-dictionary"), so the task would
/// fail after doing its work.
fn refuse_nested_dictionaries(schema: &datafusion::arrow::datatypes::Schema) -> DfResult<()> {
    use datafusion::arrow::datatypes::DataType;
    fn nested(t: &DataType) -> bool {
        match t {
            DataType::Dictionary(_, v) => {
                matches!(v.as_ref(), DataType::Dictionary(..)) || nested(v)
            }
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::ListView(f)
            | DataType::LargeListView(f)
            | DataType::FixedSizeList(f, _)
            | DataType::Map(f, _) => nested(f.data_type()),
            DataType::Struct(fields) => fields.iter().any(|f| nested(f.data_type())),
            DataType::Union(fields, _) => fields.iter().any(|(_, f)| nested(f.data_type())),
            DataType::RunEndEncoded(_, v) => nested(v.data_type()),
            _ => false,
        }
    }
    match schema.fields().iter().find(|f| nested(f.data_type())) {
        Some(field) => Err(DataFusionError::Plan(format!(
            "column {} is a dictionary of dictionaries ({}), which cannot pass between \
             tasks (Arrow IPC cannot encode it): cast it to its value type",
            field.name(),
            field.data_type()
        ))),
        None => Ok(()),
    }
}

pub(super) fn reads_a_stage(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        found = node.downcast_ref::<ShuffleReaderExec>().is_some();
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// The readers of a stage plan as input edges. A whole-output read is a broadcast when
/// several tasks each read it, a gather when one does.
fn stage_inputs(plan: &Arc<dyn ExecutionPlan>, tasks: usize) -> DfResult<Vec<StageInput>> {
    let mut inputs = Vec::new();
    plan.apply(|node| {
        if let Some(reader) = node.downcast_ref::<ShuffleReaderExec>() {
            let kind = match reader.mode() {
                ReadMode::All if tasks > 1 => EdgeKind::Broadcast,
                mode => mode.edge(),
            };
            if !inputs
                .iter()
                .any(|i: &StageInput| i.stage == reader.stage())
            {
                let width = match reader.mode() {
                    ReadMode::Hash(p) => Some(p.partition_count() as u32),
                    _ => None,
                };
                inputs.push(StageInput {
                    stage: reader.stage(),
                    kind,
                    splittable: kind == EdgeKind::Hash && split_safe(plan, reader.stage()),
                    width,
                });
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    inputs.sort_by_key(|i| i.stage);
    Ok(inputs)
}

/// Bytes each of the `partitions` partitions of `plan` scans: the file groups of the
/// scans reached through operators that keep those partitions (a scan read whole by
/// every partition, below a coalesce, is not counted). Partitions that scan no files
/// (`UNION ALL` branches of values or of gathered stages) count 0 bytes, so that the
/// adaptive rule runs them together instead of one task each. Empty for stages too wide
/// to list (the records stay small).
fn partition_scan_bytes(plan: &Arc<dyn ExecutionPlan>, partitions: usize) -> Vec<u64> {
    const MOST: usize = 1024;
    if partitions <= 1 || partitions > MOST {
        return Vec::new();
    }
    let mut bytes = vec![0u64; partitions];
    let _ = plan.apply(|node| {
        if node.output_partitioning().partition_count() != partitions {
            return Ok(TreeNodeRecursion::Jump);
        }
        if let Some(config) = super::file_scan(node) {
            if config.file_groups.len() == partitions {
                for (group, total) in config.file_groups.iter().zip(bytes.iter_mut()) {
                    *total += super::group_bytes(group);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    bytes
}

/// Whether the rows `plan` reads from stage `stage` may be divided among tasks: on the
/// way from its reader up to the writer, every operator handles each of those rows on its
/// own — projections, filters, partial aggregates, and hash joins in which that side's
/// rows are emitted row by row (an inner join either side; the probe side of a right /
/// right semi / right anti join; the build side of a left / left semi / left anti /
/// left mark join) — and the reader appears once. Anything that must see all of a
/// partition's rows together (a final aggregate, a sort, a window, a limit) says no.
fn split_safe(plan: &Arc<dyn ExecutionPlan>, stage: u32) -> bool {
    fn reads(plan: &Arc<dyn ExecutionPlan>, stage: u32) -> usize {
        let mut n = 0;
        let _ = plan.apply(|node| {
            if node
                .downcast_ref::<ShuffleReaderExec>()
                .is_some_and(|r| r.stage() == stage)
            {
                n += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        });
        n
    }
    if reads(plan, stage) != 1 {
        return false;
    }
    let mut node = plan.clone();
    loop {
        if let Some(reader) = node.downcast_ref::<ShuffleReaderExec>() {
            return reader.stage() == stage;
        }
        if let Some(join) = node.downcast_ref::<HashJoinExec>() {
            let on_left = reads(join.left(), stage) == 1;
            let ok = if on_left {
                matches!(
                    join.join_type(),
                    JoinType::Inner
                        | JoinType::Left
                        | JoinType::LeftSemi
                        | JoinType::LeftAnti
                        | JoinType::LeftMark
                )
            } else {
                matches!(
                    join.join_type(),
                    JoinType::Inner | JoinType::Right | JoinType::RightSemi | JoinType::RightAnti
                )
            };
            if !ok {
                return false;
            }
            node = if on_left { join.left() } else { join.right() }.clone();
            continue;
        }
        let passes = row_local(&node);
        let child = match node.children().as_slice() {
            [only] => (*only).clone(),
            _ => return false,
        };
        if !passes {
            return false;
        }
        node = child;
    }
}

/// Whether `node` (an operator of one child) handles each row of a partition on its own:
/// the writer, projections, filters, batch coalescing and partial aggregates.
pub(super) fn row_local(node: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
    node.downcast_ref::<ShuffleWriterExec>().is_some()
        || matches!(
            node.name(),
            "ProjectionExec" | "FilterExec" | "CoalesceBatchesExec" | "CooperativeExec"
        )
        || node
            .downcast_ref::<AggregateExec>()
            .is_some_and(|a| *a.mode() == AggregateMode::Partial)
}

/// "HashJoinExec <- AggregateExec <- DataSourceExec(parquet)" — the notable operators,
/// top-down, without the plumbing.
fn summarize(plan: &Arc<dyn ExecutionPlan>) -> String {
    const PLUMBING: &[&str] = &[
        "ShuffleWriterExec",
        "ProjectionExec",
        "CoalesceBatchesExec",
        "CooperativeExec",
        "ShuffleReaderExec",
    ];
    let mut names: Vec<String> = Vec::new();
    let _ = plan.apply(|node| {
        let name = node.name();
        if !PLUMBING.contains(&name) && names.last().map(String::as_str) != Some(name) {
            names.push(name.trim_end_matches("Exec").to_string());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if names.is_empty() {
        "read".to_string()
    } else {
        names.join(" <- ")
    }
}
