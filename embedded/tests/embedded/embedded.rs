//! The embedded engine end to end: SQL through stages, shuffle, and results, checked
//! against single-process DataFusion on the same files.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::common;

use common::{reference, write_tables};
use lambdafusion::EngineConfig;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};

async fn engine(config: EngineConfig, dir: &Path) -> Arc<Embedded> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    Embedded::start(EmbeddedOptions {
        data_dir: None,
        config: common::allow(config, dir),
        slots: 4,
        ..EmbeddedOptions::default()
    })
    .await
    .unwrap()
}

async fn register(engine: &Embedded, dir: &Path) {
    for sql in common::create_statements(dir) {
        engine.sql(&sql).await.unwrap();
    }
}

const QUERIES: &[(&str, bool)] = &[
    ("SELECT count(*) AS n, sum(v) AS total FROM facts", false),
    ("SELECT k, count(*) AS n, sum(v) AS total, min(s) AS first FROM facts GROUP BY k ORDER BY k", true),
    (
        "SELECT d.label, count(*) AS n, avg(f.v) AS mean FROM facts f JOIN dims d ON f.k = d.k \
         WHERE f.id % 3 = 0 GROUP BY d.label ORDER BY n DESC, d.label",
        true,
    ),
    ("SELECT id, s FROM facts WHERE id % 1000 = 7", false),
    ("SELECT id, v FROM facts ORDER BY v DESC LIMIT 5", true),
    ("SELECT DISTINCT k FROM facts WHERE k < 10", false),
    (
        "SELECT f.k, count(*) FROM facts f WHERE f.k IN (SELECT k FROM dims WHERE label LIKE 'group-1%') GROUP BY f.k",
        false,
    ),
    // Semi and anti joins of a small build side: marks per probe task, combined once.
    (
        "SELECT d.k, d.label FROM dims d WHERE NOT EXISTS \
         (SELECT 1 FROM facts f WHERE f.k = d.k AND f.k > 90) ORDER BY d.k",
        true,
    ),
    (
        "SELECT d.label FROM dims d WHERE EXISTS \
         (SELECT 1 FROM facts f WHERE f.k = d.k AND f.s <> d.label AND f.id % 100 = 3)",
        false,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queries_match_datafusion_across_many_tasks() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    // One byte per task: every stage fans out as wide as allowed (and stays so: one
    // shuffle byte per task leaves no partition small enough to coalesce).
    let engine = engine(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_shuffle_bytes_per_task(1)
            .with_max_tasks_per_stage(6),
        dir.path(),
    )
    .await;
    register(&engine, dir.path()).await;
    for (sql, ordered) in QUERIES {
        let out = engine
            .sql(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let expected = reference(dir.path(), sql).await;
        if let Err(diff) = lambdafusion_embedded::verify::compare(&expected, &out.batches, *ordered)
        {
            panic!("{sql}\n{diff}");
        }
        assert!(!out.status.stages.is_empty());
    }
    // The aggregation really ran as several stages of several tasks.
    let out = engine.sql(QUERIES[1].0).await.unwrap();
    assert!(out.status.stages.len() >= 2, "{:?}", out.status.stages);
    assert!(out.status.stages.iter().any(|s| s.tasks > 1));
    // The semi and anti joins: six probe tasks each read the broadcast build side, and
    // the decision says so with the build side's committed size.
    for (sql, _) in &QUERIES[7..9] {
        let out = engine.sql(sql).await.unwrap();
        let probe = out
            .status
            .stages
            .iter()
            .find(|s| s.summary.starts_with("TaskJoin"))
            .unwrap_or_else(|| panic!("{:#?}", out.status.stages));
        assert_eq!(probe.tasks, 6, "{probe:?}");
        let note = probe.decision_note.as_deref().unwrap();
        assert!(note.contains("broadcast: stage"), "{note}");
        assert!(note.contains("read whole by each task"), "{note}");
    }
}

/// The adaptive planner's coalesce rule, forced three ways on the same over-partitioned
/// plans (6 tasks per stage): a generous shuffle target merges every consumer stage into
/// one task, a 1-byte target keeps every partition its own task, and a target of half a
/// stage's shuffle input gives a few tasks of several partitions — each decision
/// recorded on the stage, every result equal to DataFusion's (ordered ones through the
/// sort-preserving merge of a coalesced task).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adaptive_stages_coalesce_by_committed_shuffle_bytes() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    let wide = || {
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_max_tasks_per_stage(6)
    };
    let run = |engine: Arc<Embedded>| {
        let dir = dir.path().to_path_buf();
        async move {
            register(&engine, &dir).await;
            let mut statuses = Vec::new();
            for (sql, ordered) in QUERIES {
                let out = engine
                    .sql(sql)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
                let expected = reference(&dir, sql).await;
                if let Err(diff) =
                    lambdafusion_embedded::verify::compare(&expected, &out.batches, *ordered)
                {
                    panic!("{sql}\n{diff}");
                }
                statuses.push(out.status);
            }
            statuses
        }
    };
    let hashed = |s: &lambdafusion::status::StageStatus| {
        s.inputs.iter().any(|i| i.starts_with("hash shuffle"))
    };

    // Each stage reading a hash shuffle becomes one task — or none, fused into its
    // single-task consumer (the ORDER BY's merge), which then runs it inside its task.
    let merged = run(engine(wide(), dir.path()).await).await;
    let (mut coalesced, mut fused) = (0, 0);
    for status in &merged {
        for stage in status.stages.iter().filter(|s| hashed(s)) {
            let note = stage.decision_note.as_deref().unwrap();
            match stage.decision.as_deref() {
                Some("coalesced") => {
                    assert_eq!(
                        (stage.tasks, stage.planned_tasks),
                        (1, Some(6)),
                        "{stage:?}"
                    );
                    assert!(note.contains("into 1 task"), "{note}");
                    coalesced += 1;
                }
                Some("fused") => {
                    assert_eq!((stage.tasks, stage.state.as_str()), (0, "complete"));
                    let into = &status.stages[stage.stage as usize + 1];
                    assert!(note.contains(&format!("fused into stage {}", into.stage)));
                    assert_eq!(into.tasks, 1, "{into:?}");
                    let inside = into.decision_note.as_deref().unwrap();
                    assert!(
                        inside.contains(&format!("runs stage {}", stage.stage)),
                        "{inside}"
                    );
                    fused += 1;
                }
                other => panic!("{other:?}: {stage:?}"),
            }
        }
    }
    assert!(
        coalesced >= 2 && fused >= 1,
        "{coalesced} coalesced, {fused} fused"
    );

    // A 1-byte target: every non-empty partition is a task of its own (an empty one
    // rides along with its neighbour).
    let kept = run(engine(wide().with_shuffle_bytes_per_task(1), dir.path()).await).await;
    let mut planned = 0;
    for stage in kept.iter().flat_map(|s| &s.stages).filter(|s| hashed(s)) {
        match stage.decision.as_deref() {
            Some("planned") => {
                assert_eq!(stage.tasks, 6, "{stage:?}");
                planned += 1;
            }
            Some("coalesced") => assert!(stage.tasks > 1, "{stage:?}"),
            other => panic!("no decision {other:?} on {stage:?}"),
        }
    }
    assert!(planned >= 2, "most stages keep their six partitions");

    // The GROUP BY k ORDER BY k query: its aggregation stage read this much shuffle data.
    let grouped = kept[1].stages.iter().find(|s| hashed(s)).unwrap();
    let input: u64 = kept[1].stages[..grouped.stage as usize]
        .iter()
        .map(|s| s.bytes)
        .sum();
    let half = run(engine(wide().with_shuffle_bytes_per_task(input / 2), dir.path()).await).await;
    let split = half[1].stages.iter().find(|s| hashed(s)).unwrap();
    assert_eq!(split.decision.as_deref(), Some("coalesced"), "{split:?}");
    assert!((2..6).contains(&split.tasks), "{split:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_input_runs_as_one_task() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    let engine = engine(EngineConfig::default(), dir.path()).await;
    register(&engine, dir.path()).await;
    let out = engine.sql(QUERIES[1].0).await.unwrap();
    assert_eq!(out.status.tasks, 1, "{:?}", out.status.stages);
    let expected = reference(dir.path(), QUERIES[1].0).await;
    lambdafusion_embedded::verify::compare(&expected, &out.batches, true).unwrap();
    let status = engine.wait(&out.status.id, Duration::ZERO).await.unwrap();
    assert_eq!(status.state, "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_plans_too_large_for_an_item_go_to_object_storage() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    let engine = engine(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_max_tasks_per_stage(3)
            .with_inline_plan_limit(0),
        dir.path(),
    )
    .await;
    register(&engine, dir.path()).await;
    let out = engine.sql(QUERIES[2].0).await.unwrap();
    let expected = reference(dir.path(), QUERIES[2].0).await;
    lambdafusion_embedded::verify::compare(&expected, &out.batches, true).unwrap();
    let store = &engine.services().store;
    for stage in 0..out.status.stages.len() as u32 {
        let plan = store
            .get_plan(&out.status.id, stage)
            .await
            .unwrap()
            .unwrap();
        assert!(plan.plan.is_none() && plan.object.is_some(), "{plan:?}");
    }
}

/// EXPLAIN ANALYZE runs the query distributed and answers with every stage's plan, each
/// operator with its figures summed over the stage's tasks, and the adaptive decision the
/// stage ran with.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn explain_analyze_shows_each_stage_with_metrics_and_decisions() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    let engine = engine(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_max_tasks_per_stage(6),
        dir.path(),
    )
    .await;
    register(&engine, dir.path()).await;
    let sql = "SELECT k, count(*) AS n FROM facts WHERE id > 100 GROUP BY k ORDER BY k";
    let out = engine.sql(&format!("EXPLAIN ANALYZE {sql}")).await.unwrap();
    assert_eq!(out.status.kind, "analyze");
    let rows = lambdafusion_embedded::verify::rows(&out.batches);
    let text = |i: usize, c: usize| match &rows[i][c] {
        lambdafusion_embedded::verify::Cell::Text(t) => t.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(rows.len(), 1 + out.status.stages.len(), "{rows:?}");
    assert_eq!(text(0, 0), "query");
    assert!(text(0, 1).contains("stages"), "{}", text(0, 1));
    let stages: Vec<String> = (1..rows.len()).map(|i| text(i, 1)).collect();
    let all = stages.join("\n---\n");
    // The scan stage: 6 tasks, its filter kept 29,900 of 30,000 rows.
    assert!(stages[0].starts_with("6 tasks"), "{all}");
    assert!(stages[0].contains("FilterExec"), "{all}");
    assert!(stages[0].contains("rows=29900"), "{all}");
    // The writer reports through DataFusion's metrics like the operators below it: the
    // rows it wrote and its partitioning and encoding time.
    let writer = stages[0]
        .lines()
        .find(|l| l.contains("ShuffleWriterExec"))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(
        writer.contains("rows=388") && writer.contains("compute="),
        "{writer}"
    );
    // The aggregation (one task's worth of shuffle) ran fused inside the final merge's
    // one task: its operators and figures are shown there.
    assert!(
        stages[1].starts_with("0 tasks (fused into stage 2"),
        "{all}"
    );
    assert!(stages[2].starts_with("1 task"), "{all}");
    assert!(
        stages[2].contains("runs stage 1 inside its task (fused)"),
        "{all}"
    );
    assert!(
        stages[2].contains("AggregateExec: mode=FinalPartitioned"),
        "{all}"
    );
    assert!(stages[2].contains("ShuffleReaderExec: stage=0"), "{all}");
    // The last stage writes the 97 groups.
    assert!(
        stages.last().unwrap().contains("ShuffleWriterExec: stage="),
        "{all}"
    );
    assert!(stages.last().unwrap().contains("rows=97"), "{all}");
    assert!(!all.contains("metrics unavailable"), "{all}");
    // Its result is the annotated plan: the query's own rows are not offered for download.
    let e = lambdafusion::results::objects(
        engine.services(),
        &out.status.id,
        &lambdafusion::access::Caller::local(),
        Duration::from_secs(60),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("is an EXPLAIN ANALYZE"), "{e}");
    // The plain query is unaffected and records no metrics.
    let plain = engine.sql(sql).await.unwrap();
    assert_eq!(plain.status.kind, "query");
    lambdafusion_embedded::verify::compare(&reference(dir.path(), sql).await, &plain.batches, true)
        .unwrap();
}

/// Registers each table of `tables` (written by [`write_table`] under `dir`) with
/// `engine`, and returns a DataFusion session with the same tables, for the reference.
async fn register_tables(
    engine: &Embedded,
    dir: &Path,
    tables: &[&str],
) -> datafusion::prelude::SessionContext {
    let ctx = datafusion::prelude::SessionContext::new();
    for t in tables {
        let location = dir.join(t);
        engine
            .sql(&format!(
                "CREATE EXTERNAL TABLE {t} STORED AS PARQUET LOCATION '{}/'",
                location.display()
            ))
            .await
            .unwrap();
        ctx.register_parquet(*t, location.to_str().unwrap(), Default::default())
            .await
            .unwrap();
    }
    ctx
}

/// Writes `sql`'s result under `dir/name` as four Parquet files.
async fn write_table(dir: &Path, name: &str, sql: &str) {
    use datafusion::dataframe::DataFrameWriteOptions;
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.sql(sql)
        .await
        .unwrap()
        .repartition(datafusion::logical_expr::Partitioning::RoundRobinBatch(4))
        .unwrap()
        .write_parquet(
            dir.join(name).to_str().unwrap(),
            DataFrameWriteOptions::new(),
            None,
        )
        .await
        .unwrap();
}

/// Writes `sql`'s result under `dir/name` as `files` Parquet files of about equal rows
/// (batches of 1,024 rows dealt round-robin).
async fn write_files(dir: &Path, name: &str, sql: &str, files: usize) {
    use datafusion::dataframe::DataFrameWriteOptions;
    let mut config = datafusion::prelude::SessionConfig::new().with_batch_size(1024);
    config = config.set_usize("datafusion.execution.minimum_parallel_output_files", files);
    let ctx = datafusion::prelude::SessionContext::new_with_config(config);
    ctx.sql(sql)
        .await
        .unwrap()
        .repartition(datafusion::logical_expr::Partitioning::RoundRobinBatch(
            files,
        ))
        .unwrap()
        .write_parquet(
            dir.join(name).to_str().unwrap(),
            DataFrameWriteOptions::new(),
            None,
        )
        .await
        .unwrap();
}

/// The skew split, forced by data built for it: 95 rows in 100 of `skewed` share one
/// join key, so after the hash shuffle one partition of the join stage holds most of
/// its input. That partition runs as several tasks, each joining some of the skewed
/// side's producers against all of the other side's rows; the rest are coalesced. The
/// decision is recorded on the stage and the result equals DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_skewed_partition_is_split_across_tasks() {
    let dir = tempfile::tempdir().unwrap();
    write_table(
        dir.path(),
        "skewed",
        "SELECT value AS n, CASE WHEN value % 100 < 95 THEN 1 ELSE value END AS k \
         FROM generate_series(1, 200000)",
    )
    .await;
    write_table(
        dir.path(),
        "big",
        "SELECT value AS id, CAST(value AS DOUBLE) AS w FROM generate_series(1, 200000)",
    )
    .await;
    let engine = engine(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_max_tasks_per_stage(16)
            .with_shuffle_bytes_per_task(256 << 10)
            // Both sides are small enough to broadcast: keep the join partitioned.
            .with_max_broadcast_bytes(0),
        dir.path(),
    )
    .await;
    let ctx = register_tables(&engine, dir.path(), &["skewed", "big"]).await;
    let sql = "SELECT s.n % 10 AS g, count(*) AS n, sum(b.w) AS total \
               FROM skewed s JOIN big b ON s.k = b.id GROUP BY g ORDER BY g";
    let out = engine.sql(sql).await.unwrap_or_else(|e| panic!("{e}"));
    let expected = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    lambdafusion_embedded::verify::compare(&expected, &out.batches, true).unwrap();
    let split = out
        .status
        .stages
        .iter()
        .find(|s| s.decision.as_deref() == Some("split"))
        .unwrap_or_else(|| panic!("no stage was split: {:#?}", out.status.stages));
    let note = split.decision_note.as_deref().unwrap();
    assert!(note.contains("split skewed partition"), "{note}");
    assert!(note.contains("tasks by stage"), "{note}");
    assert!(
        note.contains("partitioned: hash shuffles of stage"),
        "{note}"
    );
    assert!(split.tasks >= 3, "{split:?}");
}

/// Over-partitioned input: with one byte per task every scan is planned as six tiny
/// partitions; at its claim each leaf stage merges them into one task (at most
/// `min_scan_bytes_per_task`, 16 MiB, of scan each), or — one task feeding a one-task
/// consumer — runs inside that consumer. The results are DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_over_partitioned_scan_is_coalesced_at_its_claim() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    let engine = engine(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_max_tasks_per_stage(6),
        dir.path(),
    )
    .await;
    register(&engine, dir.path()).await;
    let mut coalesced = 0;
    for (sql, ordered) in QUERIES {
        let out = engine
            .sql(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let expected = reference(dir.path(), sql).await;
        if let Err(diff) = lambdafusion_embedded::verify::compare(&expected, &out.batches, *ordered)
        {
            panic!("{sql}\n{diff}");
        }
        let wide_leaves = out
            .status
            .stages
            .iter()
            .filter(|s| s.inputs.is_empty() && s.planned_tasks == Some(6));
        for stage in wide_leaves {
            let note = stage.decision_note.as_deref().unwrap_or_default();
            match stage.decision.as_deref() {
                Some("coalesced") => {
                    assert_eq!(
                        (stage.tasks, stage.planned_tasks),
                        (1, Some(6)),
                        "{stage:?}"
                    );
                    assert!(note.contains("coalesced 6 scan partitions"), "{note}");
                    coalesced += 1;
                }
                Some("fused") => assert_eq!(stage.tasks, 0, "{stage:?}"),
                other => panic!("{sql}: leaf stage decided {other:?}: {stage:?}"),
            }
        }
    }
    assert!(coalesced >= 3, "{coalesced} leaf stages coalesced");
}

/// Join strategy from real sizes, forced by data built for it: a `NOT EXISTS` whose
/// kept side is filtered by a predicate DataFusion cannot estimate (it guesses a fifth of
/// 400,000 orders; 400 pass) is planned as a partitioned anti join, both sides
/// hash-shuffled. At its claim the scan of `events` (the other side) sees that the kept
/// side committed a few KiB and switches the join to a broadcast of it: its tasks mark
/// the orders their events match, and the join's stage combines the marks in one task.
/// With a broadcast limit of one byte the same query runs partitioned. An inner join
/// planned partitioned switches too: the scan of `events` then runs the join's whole
/// stage over its own rows, and the join's stage runs no tasks. All results equal
/// DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_anti_join_switches_to_broadcast_when_its_side_is_small() {
    let dir = tempfile::tempdir().unwrap();
    write_table(
        dir.path(),
        "orders",
        "SELECT value AS id, value % 4999 AS k, CAST(value AS DOUBLE) AS w \
         FROM generate_series(1, 400000)",
    )
    .await;
    write_table(
        dir.path(),
        "events",
        "SELECT value AS e, value % 4000 AS k, value % 7 AS kind \
         FROM generate_series(1, 360000)",
    )
    .await;
    // The kept side on the left (a left anti join) and, with a filter on `events` that
    // makes DataFusion guess it the smaller (a fifth of 360,000 rows: 72,000 against
    // 80,000, and still over its 1 MB collect-left threshold), on the right (a right anti
    // join: q21's shape).
    let queries = [
        (
            "SELECT (o.id / 1000) % 10 AS g, count(*) AS n, sum(o.w) AS total FROM orders o \
             WHERE o.id % 1000 = 3 AND NOT EXISTS \
             (SELECT 1 FROM events e WHERE e.k = o.k AND e.kind <> o.id % 7) \
             GROUP BY g ORDER BY g",
            "join_type=LeftAnti",
        ),
        (
            "SELECT (o.id / 1000) % 10 AS g, count(*) AS n, sum(o.w) AS total FROM orders o \
             WHERE o.id % 1000 = 3 AND NOT EXISTS \
             (SELECT 1 FROM events e WHERE e.k = o.k AND e.kind <> o.id % 7 AND e.e % 3 = 0) \
             GROUP BY g ORDER BY g",
            "join_type=RightAnti",
        ),
        // An inner join: switched, the scan of `events` runs the join's whole stage.
        (
            "SELECT (o.id / 1000) % 10 AS g, count(*) AS n, sum(e.kind) AS kinds \
             FROM orders o JOIN events e ON e.k = o.k \
             WHERE o.id % 1000 = 3 GROUP BY g ORDER BY g",
            "join_type=Inner",
        ),
        // An inner join under an aggregate grouping by its key (q3's shape: DataFusion
        // runs that aggregate in one step over the join's hash partitions): switched,
        // the scan of `events` runs the join and the aggregate's partial form, and the
        // join's stage finishes the aggregate over the states.
        (
            "SELECT e.k, o.id % 7 AS m, count(*) AS n, sum(e.kind) AS kinds, \
             avg(o.w) AS w FROM orders o JOIN events e ON e.k = o.k \
             WHERE o.id % 1000 = 3 GROUP BY e.k, m ORDER BY kinds DESC, e.k, m LIMIT 20",
            "join_type=Inner",
        ),
    ];
    for (limit, switched) in [(16 << 20, true), (1, false)] {
        let engine = engine(
            EngineConfig::default()
                .with_bytes_per_task(1)
                .with_min_scan_bytes_per_task(1)
                .with_max_tasks_per_stage(4)
                .with_max_broadcast_bytes(limit),
            dir.path(),
        )
        .await;
        let ctx = register_tables(&engine, dir.path(), &["orders", "events"]).await;
        for (sql, join_type) in queries {
            let explain = engine.sql(&format!("EXPLAIN {sql}")).await.unwrap();
            let plan = datafusion::arrow::util::pretty::pretty_format_batches(&explain.batches)
                .unwrap()
                .to_string();
            assert!(
                plan.contains(&format!("mode=Partitioned, {join_type}")),
                "{plan}"
            );
            assert!(plan.contains("if it turns out small"), "{plan}");
            let out = engine.sql(sql).await.unwrap_or_else(|e| panic!("{e}"));
            let expected = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            lambdafusion_embedded::verify::compare(&expected, &out.batches, true).unwrap();
            let stages = &out.status.stages;
            let join = stages
                .iter()
                .find(|s| s.summary.contains("HashJoin"))
                .unwrap_or_else(|| panic!("no join stage: {stages:#?}"));
            // The scan of `events`: the leaf stage deciding the join's strategy.
            let said = format!("stage {}'s join", join.stage);
            let events = stages
                .iter()
                .find(|s| {
                    s.summary.ends_with("DataSource")
                        && s.decision_note.as_deref().unwrap_or("").contains(&said)
                })
                .unwrap_or_else(|| panic!("no scan decided the join: {stages:#?}"));
            let events_note = events.decision_note.as_deref().unwrap();
            let join_note = join.decision_note.as_deref().unwrap();
            let inner = join_type == "join_type=Inner";
            let aggregated = sql.contains("GROUP BY e.k");
            if aggregated {
                assert!(plan.contains("mode=SinglePartitioned"), "{plan}");
                assert!(plan.contains("aggregates them partially"), "{plan}");
            }
            if switched {
                assert_eq!(events.decision.as_deref(), Some("broadcast"), "{events:?}");
                assert!(
                    events_note.contains("join switched from partitioned"),
                    "{events_note}"
                );
                assert!(events
                    .inputs
                    .iter()
                    .any(|i| i.starts_with("broadcast from stage")));
                assert!(events.bytes < 64 << 10, "not its rows: {events:?}");
                assert_eq!(join.decision.as_deref(), Some("broadcast"), "{join:?}");
                if aggregated {
                    assert!(join.tasks >= 1, "{join:?}");
                    assert_eq!(
                        join.inputs,
                        [format!(
                            "partial aggregates hash-shuffled from stage {}",
                            events.stage
                        )],
                        "{join:?}"
                    );
                    assert!(
                        join_note.contains("finishes the aggregate over their states"),
                        "{join_note}"
                    );
                } else if inner {
                    assert_eq!(join.tasks, 0, "{join:?}");
                    assert!(join_note.contains("ran inside the"), "{join_note}");
                } else {
                    assert_eq!(join.tasks, 1, "{join:?}");
                    assert!(
                        join_note.contains("combined with the marks of stage"),
                        "{join_note}"
                    );
                }
            } else {
                assert_ne!(events.decision.as_deref(), Some("broadcast"), "{events:?}");
                assert!(
                    events_note.contains("over the broadcast limit"),
                    "{events_note}"
                );
                assert!(events.bytes > 256 << 10, "hash-shuffled rows: {events:?}");
                // Sized from both hash shuffles — or, one task feeding one task (the
                // aggregate's stage, not the last), run inside its consumer.
                assert!(
                    join_note.contains("partitioned: hash shuffles of stage")
                        || (aggregated && join_note.starts_with("fused into stage")),
                    "{join_note}"
                );
            }
            // EXPLAIN ANALYZE shows the plans the tasks ran, with their figures.
            let analyzed = engine.sql(&format!("EXPLAIN ANALYZE {sql}")).await.unwrap();
            let text = datafusion::arrow::util::pretty::pretty_format_batches(&analyzed.batches)
                .unwrap()
                .to_string();
            assert_eq!(
                text.contains("MarkCombineExec"),
                switched && !inner,
                "{text}"
            );
            assert_eq!(text.contains("TaskJoinExec"), switched && !inner, "{text}");
            assert_eq!(
                text.contains("mode=CollectLeft, join_type=Inner"),
                switched && inner,
                "{text}"
            );
            if aggregated {
                assert_eq!(text.contains("mode=Partial"), switched, "{text}");
                assert_eq!(text.contains("mode=FinalPartitioned"), switched, "{text}");
            }
            assert!(!text.contains("metrics unavailable"), "{text}");
        }
    }
}

/// The hand-off from a stage's last commit to its consumer's first task is four
/// sequential requests — the commit (task item and counter at once), the scheduler's
/// snapshot read, the claim (with the stage's plans read beside it), the invocation — and
/// the task starts without reading the store: its invocation carries the stage, its
/// inputs' committed outputs and its plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hand_off_is_four_sequential_requests() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    let engine = engine(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_shuffle_bytes_per_task(1)
            .with_max_tasks_per_stage(6),
        dir.path(),
    )
    .await;
    register(&engine, dir.path()).await;
    let sql = QUERIES[2].0;
    let out = engine.sql(sql).await.unwrap();
    let expected = reference(dir.path(), sql).await;
    lambdafusion_embedded::verify::compare(&expected, &out.batches, true).unwrap();
    let handed: Vec<_> = out
        .status
        .stages
        .iter()
        .filter(|s| !s.inputs.is_empty() && s.tasks > 0)
        .collect();
    assert!(handed.len() >= 2, "{:#?}", out.status.stages);
    // Four requests before the invocation's task started means it read nothing itself.
    for s in handed {
        assert_eq!(s.handoff_calls, Some(4), "stage {}: {s:?}", s.stage);
        assert!(s.handoff_path.is_some());
    }
}

/// A hash shuffle planned for more reads than `max_shuffle_reads` (producers × consumer
/// tasks) goes through a combining stage: its tasks each read one group of producers'
/// slices of one group of partitions and write them as one object, so the query makes
/// far fewer GETs than reading directly — with the same result as DataFusion. A shuffle
/// that turns out to need few reads passes through: no combining tasks, the consumer
/// reads the producers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wide_shuffles_go_through_a_two_level_exchange() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    // Sixteen files, every one holding rows of every group: 16 producers, each writing
    // to every partition.
    write_files(
        dir.path(),
        "wide",
        "SELECT value AS id, value % 97 AS k, concat('name-', CAST(value AS VARCHAR)) AS s \
         FROM generate_series(1, 48000)",
        16,
    )
    .await;
    let config = EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_shuffle_bytes_per_task(32 * 1024)
        .with_max_tasks_per_stage(16);
    let combined = engine(config.clone().with_max_shuffle_reads(16), dir.path()).await;
    let direct = engine(config.with_max_shuffle_reads(1_000_000), dir.path()).await;
    register(&combined, dir.path()).await;
    register(&direct, dir.path()).await;
    let ctx = register_tables(&combined, dir.path(), &["wide"]).await;
    register_tables(&direct, dir.path(), &["wide"]).await;

    // 48,000 distinct groups: the partial aggregate keeps every row, the shuffle is wide.
    let sql = "SELECT s, count(*) AS n, sum(id) AS total FROM wide GROUP BY s";
    let expected = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let out = combined.sql(sql).await.unwrap();
    lambdafusion_embedded::verify::compare(&expected, &out.batches, false).unwrap();
    let decisions: Vec<_> = out
        .status
        .stages
        .iter()
        .map(|s| {
            (
                s.stage,
                s.decision.clone(),
                s.tasks,
                s.decision_note.clone(),
            )
        })
        .collect();
    let combining = out
        .status
        .stages
        .iter()
        .find(|s| s.decision.as_deref() == Some("combined") && s.tasks > 0)
        .unwrap_or_else(|| panic!("no combining tasks: {decisions:#?}"));
    assert!(
        combining
            .decision_note
            .as_deref()
            .unwrap()
            .contains("reads instead of"),
        "{decisions:#?}"
    );
    let plain = direct.sql(sql).await.unwrap();
    lambdafusion_embedded::verify::compare(&expected, &plain.batches, false).unwrap();
    assert!(
        !plain
            .status
            .stages
            .iter()
            .any(|s| s.summary.starts_with("Combine")),
        "no combining stage below the threshold"
    );
    let (with, without) = (
        out.status.requests.object_gets,
        plain.status.requests.object_gets,
    );
    assert!(
        with * 2 < without,
        "two-level exchange: {with} GETs, direct: {without} GETs; {decisions:#?}"
    );

    // Five groups: the shuffle is small, its consumer one task — 16 producers × 1 task
    // is within the 16 reads allowed, nothing to combine.
    let sql = "SELECT k % 5 AS g, count(*) AS n FROM facts GROUP BY g";
    let out = combined.sql(sql).await.unwrap();
    lambdafusion_embedded::verify::compare(&reference(dir.path(), sql).await, &out.batches, false)
        .unwrap();
    let passed = out
        .status
        .stages
        .iter()
        .find(|s| s.summary.starts_with("Combine"))
        .expect("a combining stage was planned");
    assert_eq!(passed.tasks, 0, "{passed:?}");
    assert!(
        passed
            .decision_note
            .as_deref()
            .unwrap()
            .starts_with("passed through"),
        "{passed:?}"
    );
}

/// A query that fails is an error carrying its id, state and message, whether run with
/// `sql` or waited for with `finish` (which hands every status it sees to `progress`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_query_is_an_error_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(EngineConfig::default(), dir.path()).await;
    let sql = "SELECT CAST(1 AS INT) / CAST(0 AS INT) AS x";
    let Err(lambdafusion::Error::QueryFailed(message)) = engine.sql(sql).await else {
        panic!("a division by zero is a failed query");
    };
    assert!(message.contains(" failed: "), "{message}");
    assert!(
        message.to_lowercase().contains("divide by zero"),
        "{message}"
    );

    let id = engine.submit("SELECT 41 + 1 AS answer").await.unwrap();
    let mut seen = Vec::new();
    let out = engine
        .finish(&id, Duration::from_millis(50), |s| {
            seen.push(s.state.clone())
        })
        .await
        .unwrap();
    assert_eq!(out.status.state, "succeeded");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("succeeded"),
        "{seen:?}"
    );
    assert_eq!(out.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}

/// A task that spills more to local disk than `max_spill_bytes` allows fails its query
/// with a message naming the function's ephemeral storage (not DataFusion's
/// `max_temp_directory_size`), once: the same task would fill the same disk again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_spilling_past_the_disk_limit_fails_by_name_without_retries() {
    let mut config = EngineConfig::default();
    config.set("task_memory_limit", "4194304").unwrap();
    config.set("max_spill_bytes", "2097152").unwrap();
    let engine = two_slots(config).await;
    // About 60 MB of distinct groups from one task, with 4 MiB of memory: it spills.
    let sql = "SELECT count(*) FROM (SELECT s FROM \
               (SELECT repeat('x', 200) || value AS s FROM generate_series(1, 300000)) \
               GROUP BY s)";
    let job = engine.submit(sql).await.unwrap();
    let error = engine
        .finish(&job, Duration::from_secs(3600), |_| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("task spilled more to local disk than it may (2 MiB")
            && error.contains("executor_ephemeral_storage_mb"),
        "{error}"
    );
    let status = engine.wait(&job, Duration::from_secs(10)).await.unwrap();
    let failed: u32 = status.stages.iter().map(|s| s.failed_attempts).sum();
    assert_eq!(failed, 1, "not retried: {status:?}");

    // The same query within the limit runs.
    let mut config = EngineConfig::default();
    config.set("task_memory_limit", "4194304").unwrap();
    let engine = two_slots(config).await;
    let out = engine.sql(sql).await.unwrap();
    assert_eq!(out.status.result_rows, Some(1));
    let rows = lambdafusion_embedded::verify::rows(&out.batches);
    assert!(format!("{rows:?}").contains("300000"), "{rows:?}");
}

/// The per-query budget: a query planned to read more table bytes than
/// `max_scan_bytes_per_query` is refused before anything runs, naming both figures; a
/// query whose estimated cost passes `max_query_cost_usd` is stopped by the scheduler with
/// the figure and the limit. Within both, the same queries run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_over_their_budget_are_refused_or_stopped_by_name() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    let sql = "SELECT k, count(*) AS n FROM facts GROUP BY k ORDER BY k";

    let mut config = EngineConfig::default().with_bytes_per_task(1);
    config.set("max_scan_bytes_per_query", "1000").unwrap();
    let refusing = engine(config, dir.path()).await;
    register(&refusing, dir.path()).await;
    let jobs_before = refusing
        .services()
        .store
        .active_jobs(None, 100)
        .await
        .unwrap();
    match refusing.submit(sql).await {
        Err(lambdafusion::Error::InvalidInput(message)) => assert!(
            message.contains("the query would read")
                && message.contains("max_scan_bytes_per_query: 1000 B"),
            "{message}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let jobs_after = refusing
        .services()
        .store
        .active_jobs(None, 100)
        .await
        .unwrap();
    assert_eq!(jobs_before, jobs_after, "nothing was started");

    let mut config = EngineConfig::default().with_bytes_per_task(1);
    config.set("max_query_cost_usd", "0.0000001").unwrap();
    let stopping = engine(config, dir.path()).await;
    register(&stopping, dir.path()).await;
    let job = stopping.submit(sql).await.unwrap();
    let error = stopping
        .finish(&job, Duration::from_secs(3600), |_| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("the query's estimated cost reached $")
            && error.contains("max_query_cost_usd: $0.0000001"),
        "{error}"
    );

    let mut config = EngineConfig::default().with_bytes_per_task(1);
    config
        .set("max_scan_bytes_per_query", "1000000000")
        .unwrap();
    config.set("max_query_cost_usd", "5").unwrap();
    let within = engine(config, dir.path()).await;
    register(&within, dir.path()).await;
    let out = within.sql(sql).await.unwrap();
    assert_eq!(out.status.state, "succeeded");
}

/// `max_queries_per_caller`: a caller with that many queries running is refused (429,
/// naming them) while another caller is not; once one ends, the next is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_past_its_running_queries_cap_waits_its_turn() {
    use lambdafusion::access::Caller;
    let mut config = EngineConfig::default();
    config.set("max_queries_per_caller", "1").unwrap();
    let engine = two_slots(config).await;
    let scheduler = engine.scheduler();
    let first = scheduler
        .submit(LONG, &as_caller("alice"))
        .await
        .unwrap()
        .job_id;
    match scheduler.submit("SELECT 1", &as_caller("alice")).await {
        Err(lambdafusion::Error::Overloaded { message, .. }) => assert!(
            message.contains(&first) && message.contains("max_queries_per_caller"),
            "{message}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Someone else is not held up by alice.
    let bobs = scheduler
        .submit("SELECT 1", &as_caller("bob"))
        .await
        .unwrap();
    assert_eq!(
        wait_as(&engine, bobs.job_id, "bob").await.state,
        "succeeded"
    );
    // Once alice's query ends, she may run another.
    scheduler
        .cancel(&first, &Caller("alice".into()))
        .await
        .unwrap();
    let next = scheduler
        .submit("SELECT 1", &as_caller("alice"))
        .await
        .unwrap();
    assert_eq!(
        wait_as(&engine, next.job_id, "alice").await.state,
        "succeeded"
    );
}

/// `max_tasks_per_caller`: a query is planned no wider than the cap and never has more
/// tasks running at once than it reserved; a caller whose running queries hold the cap is
/// refused (429) a query that does not fit beside them, and one that fits is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_tasks_in_flight_stay_within_its_cap() {
    use lambdafusion::access::Caller;
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    // Two aggregations joined: both scans are ready at once.
    let wide = "SELECT a.k, a.n, b.total FROM (SELECT k, count(*) AS n FROM facts GROUP BY k) a \
                JOIN (SELECT k, sum(v) AS total FROM facts GROUP BY k) b ON a.k = b.k \
                ORDER BY a.k";
    // Without the cap, one byte per task makes the scan as wide as it can be.
    let fan_out = || {
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
    };
    let uncapped = engine(fan_out().with_max_tasks_per_stage(8), dir.path()).await;
    register(&uncapped, dir.path()).await;
    let out = uncapped.sql(wide).await.unwrap();
    let widest = out.status.stages.iter().map(|s| s.tasks).max().unwrap();
    assert!(widest > 3, "{widest}");

    let mut config = fan_out();
    config.set("max_tasks_per_caller", "3").unwrap();
    let engine = engine(config, dir.path()).await;
    register(&engine, dir.path()).await;
    let capped = engine.sql(wide).await.unwrap();
    assert_eq!(capped.status.state, "succeeded");
    let expected = reference(dir.path(), wide).await;
    lambdafusion_embedded::verify::compare(&expected, &capped.batches, true).unwrap();
    let planned = capped.status.stages.iter().map(|s| s.tasks).max().unwrap();
    assert!(planned <= 3, "{planned}");
    // Every attempt's run, from the records: never more than 3 at once.
    let snapshot = engine
        .services()
        .store
        .load_job(&capped.status.id)
        .await
        .unwrap()
        .unwrap();
    // It reserved its widest planned stage (adaptive stages may run narrower).
    let limit = snapshot.job.task_limit.unwrap();
    assert!((planned..=3).contains(&limit), "{limit}");
    let mut edges: Vec<(u64, i32)> = snapshot
        .tasks
        .iter()
        .filter_map(|t| t.output.as_ref())
        .flat_map(|o| [(o.started_ms, 1), (o.finished_ms, -1)])
        .collect();
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let most = edges
        .iter()
        .scan(0, |running, &(_, delta)| {
            *running += delta;
            Some(*running)
        })
        .max()
        .unwrap();
    assert!(
        (1..=limit as i32).contains(&most),
        "{most} tasks ran at once"
    );

    // alice holds one task with a long query; a query of 3 does not fit, one of 1 does.
    let scheduler = engine.scheduler();
    let first = scheduler
        .submit(LONG, &as_caller("alice"))
        .await
        .unwrap()
        .job_id;
    match scheduler.submit(wide, &as_caller("alice")).await {
        Err(lambdafusion::Error::Overloaded { message, .. }) => assert!(
            message.contains(&first)
                && message.contains("hold 1 of the 3 tasks")
                && message.contains("max_tasks_per_caller"),
            "{message}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let narrow = scheduler
        .submit(
            "SELECT count(*) FROM generate_series(1, 10)",
            &as_caller("alice"),
        )
        .await;
    // Bob's tasks are his own.
    let bobs = scheduler.submit(wide, &as_caller("bob")).await.unwrap();
    scheduler
        .cancel(&first, &Caller("alice".into()))
        .await
        .unwrap();
    assert_eq!(
        wait_as(&engine, bobs.job_id, "bob").await.state,
        "succeeded"
    );
    let narrow = narrow.expect("a query reserving what is left fits");
    assert_eq!(
        wait_as(&engine, narrow.job_id, "alice").await.state,
        "succeeded"
    );
}

/// Minutes of work: still running when a test's next queries come.
const LONG: &str = "SELECT count(*) FROM generate_series(1, 100000000000) WHERE value % 7 = 100";

/// Submission options of caller `who`.
fn as_caller(who: &str) -> lambdafusion::scheduler::SubmitOptions {
    lambdafusion::scheduler::SubmitOptions {
        caller: lambdafusion::access::Caller(who.to_string()),
        max_seconds: None,
    }
}

/// The status of query `id` once it ends, as `who` sees it (a minute at most).
async fn wait_as(engine: &Embedded, id: String, who: &str) -> lambdafusion::status::JobStatus {
    lambdafusion::status::wait_for_status_as(
        engine.services(),
        &id,
        Duration::from_secs(60),
        &lambdafusion::access::Caller(who.to_string()),
    )
    .await
    .unwrap()
}

/// An in-memory engine with two slots and `config`.
async fn two_slots(config: EngineConfig) -> Arc<Embedded> {
    Embedded::start(EmbeddedOptions {
        data_dir: None,
        config,
        slots: 2,
        ..EmbeddedOptions::default()
    })
    .await
    .unwrap()
}

/// Speculative attempts: task 7 of a 50-task stage, slowed by the fault plan's
/// `executor.slow_task` (10× its work, at least 60 s more), gets a second attempt once
/// half the stage has committed and it has run 1.5× their median; the second attempt
/// commits first, the straggler stops, and the results are those of a run without the
/// fault. Without speculation (the straggler held 3 s) nothing is started beside it. The
/// three runs' times are printed (the figure, not a check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_straggler_is_overtaken_by_a_speculative_attempt() {
    use lambdafusion::faults::{FaultPlan, Faults};
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    // Some CPU per row, so that a task takes a while.
    let sql = "SELECT k, count(*) AS n, max(md5(repeat(s, 400))) AS h FROM facts \
               GROUP BY k ORDER BY k";
    // 10 times its work, and at least 3 s more: tasks of this stage take milliseconds.
    let slow = r#"{"faults": {"executor.slow_task": {"factor": 10, "ms": 3000, "partition": 7}}}"#;
    // Which attempt commits first is a race the speculative one wins by seconds on an
    // idle machine; on a loaded one (CI runs tests beside each other and clippy) every
    // task may take seconds, the stage's median with them, and the speculative attempt
    // starts late. Held at least 60 s, the straggler cannot win that race however slow
    // the machine: the run still ends when the speculative attempt commits.
    let held = r#"{"faults": {"executor.slow_task": {"factor": 10, "ms": 60000, "partition": 7}}}"#;
    let run = |speculation: bool, plan: Option<&'static str>| {
        let dir = dir.path().to_path_buf();
        async move {
            let mut config = EngineConfig::default()
                .with_bytes_per_task(1)
                .with_min_scan_bytes_per_task(1)
                .with_max_tasks_per_stage(50);
            config.speculation = speculation;
            config.speculation_floor = Duration::from_millis(300);
            let engine = Embedded::start(EmbeddedOptions {
                data_dir: None,
                config: common::allow(config, &dir),
                // Every task of the stage at once, as on Lambda.
                slots: 64,
                faults: plan.map_or_else(Faults::default, |p| {
                    Faults::in_process(FaultPlan::parse(p).unwrap())
                }),
                ..EmbeddedOptions::default()
            })
            .await
            .unwrap();
            register(&engine, &dir).await;
            let started = std::time::Instant::now();
            let out = engine.sql(sql).await.unwrap();
            let elapsed = started.elapsed();
            // Task 7 of the scan: which attempt committed, and whether one was speculative.
            let snapshot = engine
                .services()
                .store
                .load_job(&out.status.id)
                .await
                .unwrap()
                .unwrap();
            let seventh = snapshot
                .tasks_of(0)
                .find(|t| t.partition == 7)
                .map(|t| (t.speculative, t.output.as_ref().map(|o| o.attempt)));
            (elapsed, out, seventh)
        }
    };
    let (plain, baseline, _) = run(true, None).await;
    let (speculated, out, seventh) = run(true, Some(held)).await;
    let (waited, unspeculated, unsped) = run(false, Some(slow)).await;
    eprintln!(
        "50-task stage: no fault {plain:?}; task 7 held at least 60 s, with speculation \
         {speculated:?}; task 7 held at least 3 s, without speculation {waited:?}"
    );
    // The straggler was overtaken: its second, speculative attempt committed.
    assert_eq!(seventh, Some((Some(2), Some(2))));
    assert_eq!(unsped.and_then(|(s, _)| s), None);
    let expected = reference(dir.path(), sql).await;
    for run in [&baseline, &out, &unspeculated] {
        lambdafusion_embedded::verify::compare(&expected, &run.batches, true).unwrap();
    }
    let scan = &out.status.stages[0];
    assert_eq!(scan.tasks, 50, "{scan:?}");
    assert!(
        scan.speculative_attempts >= 1 && scan.speculative_wins >= 1 && scan.wasted_ms > 0,
        "{scan:?}"
    );
    let plain_scan = &baseline.status.stages[0];
    assert_eq!(plain_scan.failed_attempts, 0, "{plain_scan:?}");
    assert!(
        unspeculated
            .status
            .stages
            .iter()
            .all(|s| s.speculative_attempts == 0),
        "{:?}",
        unspeculated.status.stages
    );
}

/// A table declared sorted (`WITH ORDER`), four files of contiguous id ranges, planned at
/// width 8 and resized to one partition and to three, each task on one thread and on
/// three (its scan cut into sorted pieces): queries that may use its order answer as
/// DataFusion over the same files declared unsorted.
#[tokio::test]
async fn a_sorted_table_answers_the_same_at_every_size() {
    use datafusion::prelude::{ParquetReadOptions, SessionContext};
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("sorted");
    std::fs::create_dir_all(&table).unwrap();
    let writer = SessionContext::new();
    for i in 0..4 {
        let sql = format!(
            "COPY (SELECT value AS id, value % 7 AS k FROM generate_series({}, {}) \
             ORDER BY value) TO '{}/part-{i}.parquet'",
            i * 5000 + 1,
            (i + 1) * 5000,
            table.display()
        );
        writer.sql(&sql).await.unwrap().collect().await.unwrap();
    }
    let unsorted = SessionContext::new();
    unsorted
        .register_parquet(
            "sorted",
            table.to_str().unwrap(),
            ParquetReadOptions::default(),
        )
        .await
        .unwrap();
    let bytes = common::dir_bytes(&table);
    // Each size on one thread per task, then with every task's scan cut into three
    // contiguous pieces merged in order again.
    let sizes = [1 << 30, bytes.div_ceil(3)];
    for (bytes_per_task, threads) in sizes
        .map(|b| (b, 1))
        .into_iter()
        .chain(sizes.map(|b| (b, 3)))
    {
        let config = EngineConfig::default()
            .with_bytes_per_task(bytes_per_task)
            .with_min_scan_bytes_per_task(1)
            .with_max_tasks_per_stage(8)
            .with_task_threads(Some(threads))
            .with_min_spread_bytes(1);
        let engine = engine(config, dir.path()).await;
        engine
            .sql(&format!(
                "CREATE EXTERNAL TABLE sorted (id BIGINT NOT NULL, k BIGINT NOT NULL) \
                 STORED AS PARQUET WITH ORDER (id ASC) LOCATION '{}/'",
                table.display()
            ))
            .await
            .unwrap();
        for sql in [
            "SELECT id, k FROM sorted ORDER BY id LIMIT 7",
            "SELECT id, k FROM sorted ORDER BY id DESC LIMIT 7",
            "SELECT k, min(id), max(id), count(*) FROM sorted GROUP BY k ORDER BY k",
            "SELECT id, row_number() OVER (ORDER BY id) AS r FROM sorted WHERE id % 997 = 0 \
             ORDER BY id",
        ] {
            let got = engine.sql(sql).await.unwrap();
            let expected = unsorted.sql(sql).await.unwrap().collect().await.unwrap();
            lambdafusion_embedded::verify::compare(&expected, &got.batches, true).unwrap_or_else(
                |e| panic!("{sql} at {bytes_per_task} bytes per task, {threads} threads: {e}"),
            );
        }
    }
}

/// With a large executor (`large_executor_memory_mb`), a stage whose measured CPU says it
/// finishes sooner there runs on it: its decision and status say so and price its tasks
/// at the large size, embedded its tasks get the threads of as many slots as the sizes'
/// ratio, and every answer is DataFusion's. Without one, or with no CPU measured yet (a
/// query's first stages), stages stay on the executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_that_would_finish_sooner_on_the_large_executor_runs_there() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    // 128 MB (a fourteenth of a vCPU) against 10,240 MB: any CPU spread over threads is
    // sooner there, and any cost is allowed.
    let bytes = common::dir_bytes(&dir.path().join("facts"));
    let mut sized = EngineConfig::default()
        .with_bytes_per_task(bytes.div_ceil(2))
        .with_min_scan_bytes_per_task(1)
        .with_min_spread_bytes(1);
    for (k, v) in [
        ("executor_memory_mb", "128"),
        ("large_executor_memory_mb", "10240"),
        ("size_cost_percent", "100000"),
    ] {
        sized.set(k, v).unwrap();
    }
    let mut one_size = sized.clone();
    one_size.large_executor_memory_mb = None;
    for (config, large) in [(sized, true), (one_size, false)] {
        let engine = engine(config, dir.path()).await;
        register(&engine, dir.path()).await;
        let mut sized_up = 0;
        for (sql, ordered) in QUERIES.iter() {
            let out = engine
                .sql(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let expected = reference(dir.path(), sql).await;
            if let Some(diff) =
                lambdafusion_embedded::verify::compare(&expected, &out.batches, *ordered).err()
            {
                panic!("{sql} (large executor: {large})\n{diff}");
            }
            let stages = &out.status.stages;
            // The first stage to run has nothing measured before it.
            let first = stages.iter().find(|s| s.tasks > 0).unwrap();
            assert_eq!(first.memory_mb, 128, "{sql}: {first:?}");
            for s in stages.iter().filter(|s| s.memory_mb == 10240) {
                assert!(large, "{sql}: sized up without a large executor: {s:?}");
                let note = s.decision_note.as_deref().unwrap_or_default();
                assert!(
                    note.contains("on the large executor (10240 MB"),
                    "{sql}: {note}"
                );
                sized_up += 1;
            }
            if large {
                let notes: Vec<_> = stages
                    .iter()
                    .filter_map(|s| s.decision_note.as_deref())
                    .collect();
                assert!(
                    notes.iter().any(|n| n.contains("executor")),
                    "{sql}: no stage says which executor it ran on: {notes:?}"
                );
            }
        }
        assert_eq!(sized_up > 0, large, "stages sized up: {sized_up}");
    }
}

/// A task runs its input on every thread it has (`task_threads`, here 3 whatever the
/// machine): every query answers as DataFusion when its whole plan is one task (the
/// chains from its scans spread and merged again below the operators that need them
/// whole: final aggregates, sorts, joins' build sides) and when its leaf stages have two
/// tasks (each task's scan cut into 3 pieces, partial aggregates and join probes run on
/// each); the tasks record the pieces they read at once and the CPU their threads used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_its_input_on_every_thread_it_has() {
    let dir = tempfile::tempdir().unwrap();
    write_tables(dir.path()).await;
    let bytes = common::dir_bytes(&dir.path().join("facts"));
    let one = dir.path().join("one.parquet");
    datafusion::prelude::SessionContext::new()
        .sql(&format!(
            "COPY (SELECT value AS id FROM generate_series(1, 30000)) TO '{}' \
             OPTIONS (MAX_ROW_GROUP_SIZE 5000)",
            one.display()
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    // A left join keeps the build side's unmatched rows once, whichever probe piece ends
    // last; a limit is never spread (its scan may carry the limit the planner removed).
    let extra: &[(&str, bool)] = &[
        (
            "SELECT d.k, count(f.id) AS n FROM dims d LEFT JOIN facts f \
             ON d.k = f.k AND f.id < 500 GROUP BY d.k ORDER BY d.k",
            true,
        ),
        ("SELECT id FROM facts LIMIT 3", false),
        (
            "SELECT count(*) FROM (SELECT id FROM facts WHERE id % 7 = 0 LIMIT 3)",
            false,
        ),
        (
            "SELECT count(*) FROM (SELECT k FROM facts ORDER BY k LIMIT 3)",
            false,
        ),
    ];
    for bytes_per_task in [1 << 30, bytes.div_ceil(2)] {
        let config = EngineConfig::default()
            .with_bytes_per_task(bytes_per_task)
            .with_min_scan_bytes_per_task(1)
            .with_task_threads(Some(3))
            .with_min_spread_bytes(1);
        let engine = engine(config, dir.path()).await;
        register(&engine, dir.path()).await;
        // One file of six row groups: its byte ranges are cut between row groups, and a
        // limit folded into the filter of a one-partition plan must stay one limit.
        engine
            .sql(&format!(
                "CREATE EXTERNAL TABLE one STORED AS PARQUET LOCATION '{}'",
                one.display()
            ))
            .await
            .unwrap();
        for (sql, expected) in [
            ("SELECT count(*), sum(id) FROM one", "30000,450015000"),
            (
                "SELECT count(*), 0 FROM (SELECT id FROM one WHERE id % 7 = 0 LIMIT 3)",
                "3,0",
            ),
        ] {
            let out = engine.sql(sql).await.unwrap();
            let batch = out.batches.iter().find(|b| b.num_rows() > 0).unwrap();
            let row = (0..batch.num_columns())
                .map(|c| {
                    datafusion::arrow::util::display::array_value_to_string(batch.column(c), 0)
                        .unwrap()
                })
                .collect::<Vec<_>>()
                .join(",");
            assert_eq!(row, expected, "{sql} at {bytes_per_task} bytes per task");
        }
        for (sql, ordered) in QUERIES.iter().chain(extra) {
            let out = engine
                .sql(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let expected = reference(dir.path(), sql).await;
            if let Some(diff) =
                lambdafusion_embedded::verify::compare(&expected, &out.batches, *ordered).err()
            {
                panic!("{sql} at {bytes_per_task} bytes per task\n{diff}");
            }
            if sql.contains("LIMIT 3") {
                continue;
            }
            let job = engine
                .services()
                .store
                .load_job(&out.status.id)
                .await
                .unwrap()
                .unwrap();
            let cpu: Vec<_> = job
                .tasks
                .iter()
                .filter_map(|t| t.output.as_ref().and_then(|o| o.cpu))
                .collect();
            assert!(!cpu.is_empty(), "{sql}: no task measured its CPU");
            assert!(cpu.iter().all(|c| c.threads == 3), "{sql}: {cpu:?}");
            assert_eq!(
                cpu.iter().map(|c| c.pieces).max(),
                Some(3),
                "{sql} at {bytes_per_task} bytes per task: no task read 3 pieces at once: {cpu:?}\n{:#?}",
                out.status.stages
            );
            let scan = &out.status.stages[0];
            assert_eq!(scan.threads, 3, "{scan:?}");
            assert!(scan.cpu_use.is_some_and(|u| u > 0.0), "{scan:?}");
        }
    }
}

/// A file added to a table's directory is read by the next query. DataFusion 55 keeps
/// each table's listing without expiry, and one cache was shared by every query of an
/// engine: a `serve`, a `shell` or a warm scheduler answered from the files of the
/// table's first query for as long as it ran (2 rows here, where the table has 3).
#[tokio::test]
async fn files_added_to_a_table_are_read_by_the_next_query() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("grows");
    std::fs::create_dir_all(&table).unwrap();
    std::fs::write(table.join("a.csv"), "x\n1\n2\n").unwrap();
    let engine = engine(EngineConfig::default(), dir.path()).await;
    engine
        .sql(&format!(
            "CREATE EXTERNAL TABLE grows STORED AS CSV LOCATION '{}/' \
             OPTIONS ('format.has_header' 'true')",
            table.display()
        ))
        .await
        .unwrap();
    let count = || async {
        let out = engine
            .sql("SELECT count(*) AS n, sum(x) AS total FROM grows")
            .await
            .unwrap();
        let batch = out.batches.iter().find(|b| b.num_rows() > 0).unwrap();
        (0..2)
            .map(|c| {
                datafusion::arrow::util::display::array_value_to_string(batch.column(c), 0).unwrap()
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(count().await, "2,3");
    std::fs::write(table.join("b.csv"), "x\n10\n").unwrap();
    assert_eq!(count().await, "3,13", "the added file is read");
    std::fs::remove_file(table.join("a.csv")).unwrap();
    assert_eq!(count().await, "1,10", "the removed file is not");
}
