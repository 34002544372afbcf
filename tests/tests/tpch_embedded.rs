//! The 22 TPC-H queries through the embedded engine — every query cut into stages,
//! every stage into several tasks, every exchange through shuffle objects — return
//! the same rows as single-process DataFusion on the same files.

use std::time::Duration;

use lambdafusion::embedded::{Embedded, EmbeddedOptions};
use lambdafusion::EngineConfig;
use lambdafusion_cli::tpch;

#[test]
fn tpch_queries_match_datafusion() {
    // Debug builds of DataFusion need deep stacks for the larger plans.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_stack_size(16 * 1024 * 1024)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let data = tempfile::tempdir().unwrap();
        let sf = 0.01;
        tpch::generate(data.path(), sf, 2, &|_, _| {}).unwrap();
        let baseline = datafusion::prelude::SessionContext::new();
        tpch::register_baseline(&baseline, data.path())
            .await
            .unwrap();
        let engine = Embedded::start(EmbeddedOptions {
            data_dir: None,
            config: EngineConfig::default()
                .with_bytes_per_task(64 * 1024)
                .with_min_scan_bytes_per_task(64 * 1024)
                // Small enough that adaptive stages keep some hash partitions apart and
                // merge others: coalesced tasks of several partitions are checked too.
                .with_shuffle_bytes_per_task(16 * 1024)
                .with_max_tasks_per_stage(4)
                .with_data_location(data.path().display().to_string()),
            slots: 8,
            ..EmbeddedOptions::default()
        })
        .await
        .unwrap();
        for sql in tpch::create_statements(&data.path().display().to_string()) {
            engine.sql(&sql).await.unwrap();
        }
        let mut failures = Vec::new();
        let mut multi_task_stages = 0;
        let (mut coalesced_stages, mut fused_stages) = (0, 0);
        for q in 1..=22 {
            let sql = tpch::query(q);
            let expected = baseline.sql(sql).await.unwrap().collect().await.unwrap();
            let out = match tokio::time::timeout(Duration::from_secs(120), engine.sql(sql)).await {
                Ok(Ok(out)) => out,
                Ok(Err(e)) => {
                    failures.push(format!("q{q}: {e}"));
                    continue;
                }
                Err(_) => {
                    failures.push(format!("q{q}: timed out"));
                    continue;
                }
            };
            multi_task_stages += out.status.stages.iter().filter(|s| s.tasks > 1).count();
            coalesced_stages += out
                .status
                .stages
                .iter()
                .filter(|s| s.decision.as_deref() == Some("coalesced"))
                .count();
            fused_stages += out
                .status
                .stages
                .iter()
                .filter(|s| s.decision.as_deref() == Some("fused"))
                .count();
            if let Err(diff) =
                lambdafusion::verify::compare(&expected, &out.batches, tpch::is_ordered(q))
            {
                failures.push(format!("q{q}: {diff}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert!(
            multi_task_stages >= 22,
            "queries really ran distributed ({multi_task_stages} multi-task stages)"
        );
        assert!(
            coalesced_stages >= 5 && fused_stages >= 5,
            "adaptive stages merged partitions and stages ({coalesced_stages} coalesced, \
             {fused_stages} fused)"
        );
    });
}
