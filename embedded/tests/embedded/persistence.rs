//! The embedded engine on a data directory: the catalog and finished results survive a
//! restart; a job interrupted by the restart is failed with a clear message.

use crate::common;

use std::time::Duration;

use lambdafusion::state::{JobKind, JobRecord, JobState, JobStore, NewJob};
use lambdafusion::EngineConfig;
use lambdafusion_embedded::EmbeddedStore;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};

fn options(dir: &std::path::Path, data: &std::path::Path) -> EmbeddedOptions {
    EmbeddedOptions {
        data_dir: Some(dir.to_path_buf()),
        config: common::allow(
            EngineConfig::default()
                .with_bytes_per_task(1)
                .with_min_scan_bytes_per_task(1)
                .with_max_tasks_per_stage(3)
                .with_write_location(data.join("out").display().to_string()),
            data,
        ),
        slots: 4,
        ..EmbeddedOptions::default()
    }
}

/// Starts an engine on `dir`, waiting for the previous one to let go of the store.
async fn start(dir: &std::path::Path, data: &std::path::Path) -> std::sync::Arc<Embedded> {
    for _ in 0..100 {
        match Embedded::start(options(dir, data)).await {
            Ok(engine) => return engine,
            Err(e) if e.to_string().contains("already open") => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("store still locked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_and_results_survive_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    common::write_tables(data.path()).await;
    let sql = "SELECT k, sum(v) AS total FROM facts GROUP BY k";

    let engine = start(state.path(), data.path()).await;
    for create in common::create_statements(data.path()) {
        engine.sql(&create).await.unwrap();
    }
    let first = engine.sql(sql).await.unwrap();
    let job = first.status.id.clone();
    // A view over them, kept with the tables.
    engine
        .sql(&format!("CREATE VIEW totals AS {sql}"))
        .await
        .unwrap();
    // A write left running, as if the process died in the middle of it, with a file
    // one of its tasks had written.
    let out = data.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let half_written = out.join("orphan-00000-deadbeef-000.parquet");
    std::fs::write(&half_written, b"part of a file").unwrap();
    let target = lambdafusion::write::WriteTarget {
        job_id: "orphan".into(),
        location: format!("file://{}/", out.display()),
        format: lambdafusion::write::WriteFormat::Parquet,
        partition_by: vec![],
        options: Default::default(),
        table: None,
        append: false,
        table_schema: vec![],
        schema: vec![],
    };
    let orphan = JobRecord {
        task_limit: None,
        job_id: "orphan".into(),
        sql: "COPY (SELECT 1 AS a) TO '...' STORED AS PARQUET".into(),
        kind: JobKind::Write,
        state: JobState::Running,
        stage_count: 1,
        result_schema: vec![],
        owner: "local".into(),
        created_ms: 0,
        deadline_ms: None,
        finished_ms: None,
        error: None,
        requests: Default::default(),
        write: Some(target),
        expires_at: u64::MAX,
    };
    drop(engine);
    // Written while no engine runs, so that no scheduler sees it before the restart.
    // (The dropped engine's background tasks let go of the file a moment later.)
    let mut tries = 0;
    let store = loop {
        match EmbeddedStore::open(&state.path().join("state.redb")) {
            Ok(store) => break store,
            Err(_) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    store
        .create_job(&NewJob {
            job: orphan,
            stages: vec![],
            plans: vec![],
            tasks: vec![],
        })
        .await
        .unwrap();
    drop(store);

    let engine = start(state.path(), data.path()).await;
    let out = engine.sql("SHOW TABLES").await.unwrap();
    let listed = lambdafusion_embedded::verify::rows(&out.batches);
    for t in ["facts", "dims"] {
        assert!(
            listed.iter().any(|r| r
                .iter()
                .any(|c| *c == lambdafusion_embedded::verify::Cell::Text(t.into()))),
            "{t} missing: {listed:?}"
        );
    }
    // Queries plan against the stored schema and run; so does the view.
    let again = engine.sql(sql).await.unwrap();
    lambdafusion_embedded::verify::compare(&first.batches, &again.batches, false).unwrap();
    let view = engine.sql("SELECT * FROM totals").await.unwrap();
    lambdafusion_embedded::verify::compare(&first.batches, &view.batches, false).unwrap();
    // The earlier result is still readable.
    let (_, batches) = lambdafusion::results::collect(engine.services(), &job)
        .await
        .unwrap();
    lambdafusion_embedded::verify::compare(&first.batches, &batches, false).unwrap();
    // The interrupted job was failed, and left the active index.
    let orphan = engine
        .services()
        .store
        .get_job("orphan")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(orphan.state, JobState::Failed);
    assert!(orphan.error.unwrap().contains("restarted"));
    assert!(
        !half_written.exists(),
        "the interrupted write's file was deleted"
    );
    assert!(engine
        .services()
        .store
        .active_jobs(None, 100)
        .await
        .unwrap()
        .is_empty());
    // Dropping a table or a view is durable too.
    engine.sql("DROP TABLE dims").await.unwrap();
    engine.sql("DROP VIEW totals").await.unwrap();
    drop(engine);
    let engine = start(state.path(), data.path()).await;
    let tables = engine.services().store.list_tables().await.unwrap();
    assert_eq!(
        tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        vec!["facts"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_expire_with_their_objects() {
    let data = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    common::write_tables(data.path()).await;
    let mut options = options(state.path(), data.path());
    options.config = options.config.with_job_ttl(Duration::ZERO);
    let engine = Embedded::start(options).await.unwrap();
    for create in common::create_statements(data.path()) {
        engine.sql(&create).await.unwrap();
    }
    let out = engine
        .sql("SELECT k, count(*) FROM facts GROUP BY k")
        .await
        .unwrap();
    // Objects live under `jobs/<shard>/<job>/`.
    let job_objects = || -> Vec<std::path::PathBuf> {
        walk(&state.path().join("shuffle/jobs"))
            .into_iter()
            .filter(|p| {
                p.components()
                    .any(|c| c.as_os_str() == out.status.id.as_str())
            })
            .collect()
    };
    assert!(!job_objects().is_empty(), "the result is on disk");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(engine.expire().await.unwrap() >= 1);
    assert!(engine
        .services()
        .store
        .get_job(&out.status.id)
        .await
        .unwrap()
        .is_none());
    let left = job_objects();
    assert!(left.is_empty(), "objects left: {left:?}");
    // The catalog does not expire.
    assert_eq!(
        engine.services().store.list_tables().await.unwrap().len(),
        2
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                files.extend(walk(&e.path()));
            } else {
                files.push(e.path());
            }
        }
    }
    files
}
