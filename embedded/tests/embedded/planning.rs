//! Stage cutting (which exchanges become which edges) and the stage-plan codec.

use crate::common;

use std::sync::Arc;

use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_plan::{displayable, ExecutionPlan};
use datafusion::prelude::SessionContext;
use lambdafusion::plan::{self, StageGraph, StageSplitter};
use lambdafusion::shuffle::ShuffleWriterExec;
use lambdafusion::state::{EdgeKind, StageInput};
use lambdafusion::EngineConfig;

async fn graph(sql: &str, partitions: usize) -> StageGraph {
    // No build side is inlined: every exchange is cut, as these tests expect.
    let config = EngineConfig {
        inline_scan_bytes: 0,
        ..EngineConfig::default()
    };
    graph_with(sql, partitions, config).await
}

async fn graph_with(sql: &str, partitions: usize, config: EngineConfig) -> StageGraph {
    let dir = tempfile::tempdir().unwrap();
    common::write_tables(dir.path()).await;
    let config = config
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_max_tasks_per_stage(partitions);
    graph_over(dir.path(), sql, config, plan::Sizing::Resize).await
}

/// The stage graph of `sql` over the tables under `dir`, planned at `config`'s width and
/// sized by `sizing`.
async fn graph_over(
    dir: &std::path::Path,
    sql: &str,
    config: EngineConfig,
    sizing: plan::Sizing,
) -> StageGraph {
    let partitions = config.stage_width();
    let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
    let state = plan::session_state(runtime, &config, partitions);
    let ctx = SessionContext::new_with_state(state);
    common::register_parquet(&ctx, dir).await;
    let logical = ctx.state().create_logical_plan(sql).await.unwrap();
    let physical = plan::physical_plan_sized(&ctx.state(), &logical, &config, sizing)
        .await
        .unwrap();
    let graph = StageSplitter::split(physical, &config).unwrap();
    round_trip(&ctx, &graph);
    graph
}

/// Every stage plan survives encode -> decode unchanged.
fn round_trip(ctx: &SessionContext, graph: &StageGraph) {
    let task_ctx = ctx.task_ctx();
    for stage in &graph.stages {
        let bytes = plan::encode_plan(stage.plan.clone()).unwrap();
        let decoded = plan::decode_plan(&bytes, &task_ctx).unwrap();
        assert_eq!(show(&stage.plan), show(&decoded), "stage {}", stage.id);
        assert_eq!(
            bytes,
            plan::encode_plan(decoded).unwrap(),
            "stage {} re-encodes identically",
            stage.id
        );
    }
}

fn show(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).indent(true).to_string()
}

fn inputs(graph: &StageGraph, stage: usize) -> Vec<StageInput> {
    graph.stages[stage].inputs.clone()
}

#[tokio::test]
async fn an_aggregation_becomes_a_hash_shuffle() {
    let g = graph("SELECT k, count(*) FROM facts GROUP BY k", 4).await;
    assert_eq!(g.stages.len(), 2, "{}", g.display());
    assert_eq!(g.stages[0].tasks, 4);
    assert_eq!(g.stages[0].output_partitions, 4);
    let writer = g.stages[0]
        .plan
        .downcast_ref::<ShuffleWriterExec>()
        .unwrap();
    assert!(writer.partitioning().is_some());
    assert_eq!(
        inputs(&g, 1),
        vec![StageInput {
            stage: 0,
            kind: EdgeKind::Hash,
            splittable: false,
            width: Some(4),
        }]
    );
    // No ORDER BY: the result is the union of the final stage's four tasks.
    assert_eq!(g.final_stage().tasks, 4);
}

#[tokio::test]
async fn order_by_gathers_into_one_task() {
    let g = graph(
        "SELECT k, count(*) AS n FROM facts GROUP BY k ORDER BY n DESC",
        4,
    )
    .await;
    let last = g.final_stage();
    assert_eq!(last.tasks, 1, "{}", g.display());
    assert_eq!(last.inputs.len(), 1);
    assert_eq!(last.inputs[0].kind, EdgeKind::Gather);
    assert!(show(&last.plan).contains("SortPreservingMergeExec"));
}

/// A build side that is a tiny scan (`dims`, a few KiB) is read by each consuming task
/// itself: no broadcast stage, no hand-off. Past `inline_scan_bytes` it is broadcast
/// (the test above).
#[tokio::test]
async fn a_tiny_scan_build_side_is_read_in_each_task() {
    let sql = "SELECT d.label, f.v FROM facts f JOIN dims d ON f.k = d.k";
    let g = graph_with(sql, 4, EngineConfig::default()).await;
    let text = g.display();
    assert_eq!(g.stages.len(), 1, "{text}");
    assert_eq!(g.stages[0].tasks, 4, "{text}");
    assert!(
        show(&g.stages[0].plan).contains("HashJoinExec: mode=CollectLeft"),
        "{text}"
    );
    assert!(g.stages[0].inputs.is_empty(), "{text}");
}

#[tokio::test]
async fn a_small_build_side_is_broadcast() {
    let g = graph(
        "SELECT d.label, f.v FROM facts f JOIN dims d ON f.k = d.k",
        4,
    )
    .await;
    let text = g.display();
    let join_stage = g
        .stages
        .iter()
        .find(|s| show(&s.plan).contains("HashJoinExec: mode=CollectLeft"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(join_stage.tasks > 1, "{text}");
    assert!(
        join_stage
            .inputs
            .iter()
            .any(|i| i.kind == EdgeKind::Broadcast),
        "{text}"
    );
}

/// A left join emits its unmatched build rows after the whole probe side: it is
/// rewritten as a partitioned join, never a broadcast one.
#[tokio::test]
async fn outer_joins_are_partitioned_not_broadcast() {
    let sql = "SELECT d.label, f.id FROM dims d LEFT JOIN facts f ON f.k = d.k";
    let g = graph(sql, 4).await;
    let text = g.display();
    assert!(!text.contains("mode=CollectLeft"), "{sql}\n{text}");
    assert!(
        !g.stages
            .iter()
            .any(|s| s.inputs.iter().any(|i| i.kind == EdgeKind::Broadcast)),
        "{sql}\n{text}"
    );
}

/// EXISTS / NOT EXISTS over a small build side: the build side is broadcast to one task
/// per probe partition, each marking the build rows it matched, and one task combines
/// the marks — the large probe side is scanned where it lies, never shuffled.
#[tokio::test]
async fn semi_and_anti_joins_mark_their_build_rows_per_probe_task() {
    for sql in [
        "SELECT d.label FROM dims d WHERE EXISTS (SELECT 1 FROM facts f WHERE f.k = d.k)",
        "SELECT d.label FROM dims d WHERE NOT EXISTS (SELECT 1 FROM facts f WHERE f.k = d.k AND f.v > 100)",
    ] {
        let g = graph(sql, 4).await;
        let text = g.display();
        let probe = g
            .stages
            .iter()
            .find(|s| show(&s.plan).contains("TaskJoinExec"))
            .unwrap_or_else(|| panic!("{sql}\n{text}"));
        assert_eq!(probe.tasks, 4, "{sql}\n{text}");
        assert!(show(&probe.plan).contains("join_type=LeftMark"), "{sql}\n{text}");
        assert!(
            probe.inputs.iter().any(|i| i.kind == EdgeKind::Broadcast),
            "{sql}\n{text}"
        );
        let combine = g
            .stages
            .iter()
            .find(|s| show(&s.plan).contains("MarkCombineExec"))
            .unwrap_or_else(|| panic!("{sql}\n{text}"));
        assert!(
            combine.inputs.iter().any(|i| i.stage == probe.id),
            "{sql}\n{text}"
        );
        assert!(
            !g.stages.iter().any(|s| s.output_partitions > 1 && s.id == probe.id),
            "the probe side is not shuffled\n{text}"
        );
    }
}

#[tokio::test]
async fn one_partition_is_one_stage() {
    let g = graph("SELECT k, count(*) FROM facts GROUP BY k ORDER BY k", 1).await;
    assert_eq!(g.stages.len(), 1, "{}", g.display());
    assert!(g.stages[0].inputs.is_empty());
    assert_eq!(g.stages[0].tasks, 1);
}

/// Planned at width 8 over input worth 3 tasks, a query is resized to 3 partitions: its
/// scan reads every byte once in 3 groups, its exchange is 3 wide; no second planning.
#[tokio::test]
async fn a_plan_is_resized_to_its_input() {
    let dir = tempfile::tempdir().unwrap();
    common::write_tables(dir.path()).await;
    let bytes = common::dir_bytes(&dir.path().join("facts"));
    let config = EngineConfig::default()
        .with_bytes_per_task(bytes.div_ceil(3))
        .with_min_scan_bytes_per_task(1)
        .with_max_tasks_per_stage(8);
    let sql = "SELECT k, count(*), sum(v) FROM facts GROUP BY k";
    let resized = graph_over(dir.path(), sql, config.clone(), plan::Sizing::Resize).await;
    let text = resized.display();
    assert_eq!(resized.stages.len(), 2, "{text}");
    assert_eq!(resized.stages[0].tasks, 3, "{text}");
    assert_eq!(
        resized.stages[0].scan_bytes.iter().sum::<u64>(),
        bytes,
        "{text}"
    );
    assert_eq!(resized.stages[0].output_partitions, 3, "{text}");
    // Planned again at width 3, the same shape.
    let replanned = graph_over(dir.path(), sql, config, plan::Sizing::Replan).await;
    assert_eq!(
        replanned
            .stages
            .iter()
            .map(|s| (s.tasks, s.output_partitions))
            .collect::<Vec<_>>(),
        resized
            .stages
            .iter()
            .map(|s| (s.tasks, s.output_partitions))
            .collect::<Vec<_>>(),
        "{text}\n{}",
        replanned.display()
    );
}

/// Input worth one task is one stage whatever the width it was planned at: the join's and
/// the aggregation's exchanges are gone, not one-wide shuffles.
#[tokio::test]
async fn a_small_query_resized_to_one_partition_is_one_stage() {
    let dir = tempfile::tempdir().unwrap();
    common::write_tables(dir.path()).await;
    let config = EngineConfig {
        inline_scan_bytes: 0,
        ..EngineConfig::default()
    }
    .with_bytes_per_task(1 << 30)
    .with_max_tasks_per_stage(8);
    let g = graph_over(
        dir.path(),
        "SELECT d.label, count(*) FROM facts f JOIN dims d ON f.k = d.k \
         GROUP BY d.label ORDER BY 2 DESC, 1 LIMIT 5",
        config,
        plan::Sizing::Resize,
    )
    .await;
    assert_eq!(g.stages.len(), 1, "{}", g.display());
    assert_eq!(g.stages[0].tasks, 1, "{}", g.display());
    // Resized, not planned again: planned at one partition, the aggregation would be a
    // single-mode one rather than partial and final.
    assert!(
        g.display().contains("mode=FinalPartitioned"),
        "{}",
        g.display()
    );
}

#[tokio::test]
async fn stages_are_in_topological_order() {
    let g = graph(
        "SELECT d.label, count(*) FROM facts f JOIN dims d ON f.k = d.k \
         WHERE f.id IN (SELECT id FROM facts WHERE v > 10) GROUP BY d.label ORDER BY 2",
        4,
    )
    .await;
    for (i, s) in g.stages.iter().enumerate() {
        assert_eq!(s.id as usize, i);
        assert!(
            s.inputs.iter().all(|input| (input.stage as usize) < i),
            "{}",
            g.display()
        );
    }
    // Every stage but the last feeds another.
    for s in &g.stages[..g.stages.len() - 1] {
        assert!(g
            .stages
            .iter()
            .any(|c| c.inputs.iter().any(|i| i.stage == s.id)));
    }
}

/// An anti join stacked on a semi join on the same key (TPC-H q21's `NOT EXISTS` over
/// its `EXISTS`): DataFusion hash-shuffles nothing between them, so they shared a stage,
/// whose kept side was no stage of its own — and neither join could switch to a
/// broadcast of it. Each is now cut into a stage reading two hash shuffles, and both are
/// offered the switch (its notes in the graph). The answer is checked against DataFusion
/// in the TPC-H tests.
#[tokio::test]
async fn stacked_semi_and_anti_joins_are_each_offered_the_switch() {
    let sql = "SELECT f1.s FROM facts f1 JOIN dims d ON f1.k = d.k \
               WHERE d.label <> 'group-3' \
               AND EXISTS (SELECT 1 FROM facts f3 WHERE f3.id = f1.id AND f3.k <> f1.k) \
               AND NOT EXISTS (SELECT 1 FROM facts f4 WHERE f4.id = f1.id AND f4.v > 10)";
    // Every join partitioned, as at a scale where no side is small enough to collect.
    let dir = tempfile::tempdir().unwrap();
    common::write_tables(dir.path()).await;
    let config = EngineConfig {
        inline_scan_bytes: 0,
        ..EngineConfig::default()
    }
    .with_bytes_per_task(1)
    .with_min_scan_bytes_per_task(1)
    .with_max_tasks_per_stage(4);
    let runtime = RuntimeEnvBuilder::new().build_arc().unwrap();
    let mut state = plan::session_state(runtime, &config, config.stage_width());
    let options = state.config_mut().options_mut();
    options.optimizer.hash_join_single_partition_threshold = 0;
    options.optimizer.hash_join_single_partition_threshold_rows = 0;
    let ctx = SessionContext::new_with_state(state);
    common::register_parquet(&ctx, dir.path()).await;
    let logical = ctx.state().create_logical_plan(sql).await.unwrap();
    let physical = plan::physical_plan(&ctx.state(), &logical, &config)
        .await
        .unwrap();
    let g = StageSplitter::split(physical, &config).unwrap();
    round_trip(&ctx, &g);
    let text = g.display();
    let joins: Vec<_> = g
        .stages
        .iter()
        .filter(|s| {
            let plan = show(&s.plan);
            plan.contains("mode=Partitioned") && (plan.contains("Semi") || plan.contains("Anti"))
        })
        .collect();
    assert_eq!(
        joins.len(),
        2,
        "a semi and an anti join, a stage each\n{text}"
    );
    for stage in joins {
        let hash = stage
            .inputs
            .iter()
            .filter(|i| matches!(i.kind, EdgeKind::Hash))
            .count();
        assert_eq!(
            hash, 2,
            "stage {} reads two hash shuffles\n{text}",
            stage.id
        );
        let offered = format!("stage {}'s join reads it whole", stage.id);
        assert!(text.contains(&offered), "{offered}\n{text}");
    }
}
