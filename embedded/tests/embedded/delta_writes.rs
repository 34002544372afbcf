//! Writes to Delta tables: `CREATE TABLE ... WITH (format = 'DELTA') AS` and `INSERT
//! INTO` — every task writes its own Parquet files, one Delta commit lists them all —
//! read back and checked against DataFusion's answer over the same rows; a commit run
//! again, concurrent appends, duplicate deliveries, and what may not be appended to.
//! (The `deltalake` package reads the same tables in tests/tests/end_to_end.)

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use lambdafusion::executor::TaskReport;
use lambdafusion::state::JobState;
use lambdafusion::EngineConfig;

use crate::common;
use crate::writes::{compare, config, count_and_sum, split_harness, summary};

/// The `add` actions of every commit of the table at `dir`, by version: their paths.
fn log_adds(dir: &Path) -> Vec<Vec<String>> {
    let log = dir.join("_delta_log");
    let mut versions: Vec<_> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    versions.sort();
    versions
        .iter()
        .enumerate()
        .map(|(i, name)| {
            assert_eq!(name, &format!("{i:020}.json"), "versions follow each other");
            std::fs::read_to_string(log.join(name))
                .unwrap()
                .lines()
                .filter_map(|line| {
                    let action: serde_json::Value = serde_json::from_str(line).unwrap();
                    action["add"]["path"].as_str().map(str::to_string)
                })
                .collect()
        })
        .collect()
}

/// Every data file under `dir` (relative, URL-encoded as the log writes them) is listed
/// by exactly one commit, and every file the log lists is there.
fn check_log_is_the_files(dir: &Path) {
    let listed: Vec<String> = log_adds(dir).into_iter().flatten().collect();
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a file listed twice: {listed:?}"
    );
    let mut present = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap() == "_delta_log" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path
                    .strip_prefix(dir)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                present.insert(relative);
            }
        }
    }
    // The log's paths are URL-encoded object keys, decoded once by readers.
    let decoded: BTreeSet<String> = unique
        .iter()
        .map(|p| {
            object_store::path::Path::from_url_path(p)
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(decoded, present, "the log lists exactly the files there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_tables_are_created_then_appended_to_one_commit_each() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = common::engine_with_tables(config(tables.path(), out.path()), tables.path()).await;
    let created = engine
        .sql(
            "CREATE TABLE d WITH (format = 'DELTA', partitioned_by = ARRAY['k']) AS \
             SELECT id, v, s, k FROM facts WHERE id % 4 <> 0",
        )
        .await
        .unwrap();
    let writers = created.status.stages.last().map_or(0, |s| s.tasks);
    assert!(writers > 1, "written by {writers} task(s)");
    assert_eq!(summary(&created.batches).0, 22_500);
    let dir = out.path().join("d");
    assert!(
        !dir.join("_SUCCESS").exists(),
        "a Delta table has no manifest"
    );
    assert_eq!(log_adds(&dir).len(), 1);
    check_log_is_the_files(&dir);

    let appended = engine
        .sql("INSERT INTO d SELECT id, v, s, k FROM facts WHERE id % 4 = 0")
        .await
        .unwrap();
    assert_eq!(summary(&appended.batches).0, 7_500);
    // A row whose partition value is NULL, one with a value that is not a plain name,
    // and VALUES cast to the table's types.
    engine
        .sql("INSERT INTO d VALUES (40001, 1.5, 'x', NULL), (40002, 2.5, 'a/b c%', 5)")
        .await
        .unwrap();
    let adds = log_adds(&dir);
    assert_eq!(adds.len(), 3, "one commit per statement");
    check_log_is_the_files(&dir);

    let expected = common::reference(
        tables.path(),
        "SELECT k, count(*) AS n, sum(id) AS ids, sum(v) AS vs, max(s) AS s FROM \
         (SELECT id, v, s, k FROM facts UNION ALL \
          SELECT 40001, 1.5, 'x', NULL UNION ALL SELECT 40002, 2.5, 'a/b c%', 5) \
         GROUP BY k ORDER BY k",
    )
    .await;
    let actual = engine
        .sql(
            "SELECT k, count(*) AS n, sum(id) AS ids, sum(v) AS vs, max(s) AS s FROM d \
             GROUP BY k ORDER BY k",
        )
        .await
        .unwrap();
    compare(&expected, &actual.batches, "the table holds every row once");
    crate::writes::check_filters(&engine, tables.path(), "d").await;
    let log = std::fs::read_to_string(dir.join("_delta_log/00000000000000000000.json")).unwrap();
    assert!(log.contains(r#"\"minValues\":{\"id\":"#), "{log}");

    // Each version is what its commit made it.
    let first = count_and_sum(&engine, "d VERSION AS OF 0").await;
    assert_eq!(first.0, 22_500);
    assert_eq!(count_and_sum(&engine, "d VERSION AS OF 1").await.0, 30_000);
    assert_eq!(count_and_sum(&engine, "d").await.0, 30_002);
    let nulls = engine
        .sql("SELECT count(*) FROM d WHERE k IS NULL")
        .await
        .unwrap();
    assert_eq!(
        nulls.batches[0]
            .column(0)
            .as_primitive::<Int64Type>()
            .value(0),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_run_again_adds_nothing_and_concurrent_appends_both_land() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = common::engine_with_tables(config(tables.path(), out.path()), tables.path()).await;
    let dir = out.path().join("d");
    let created = engine
        .sql("CREATE TABLE d WITH (format = 'DELTA') AS SELECT id, k FROM facts WHERE id <= 1000")
        .await
        .unwrap();
    let appended = engine
        .sql("INSERT INTO d SELECT id + 100000, k FROM facts WHERE id <= 500")
        .await
        .unwrap();
    assert_eq!(log_adds(&dir).len(), 2);
    // The commit's request failed after it applied, or the scheduler crashed after it:
    // both commits run again, and find themselves done.
    let services = engine.services();
    for job in [&created.status.id, &appended.status.id] {
        let snapshot = services.store.load_job(job).await.unwrap().unwrap();
        let target = snapshot.job.write.clone().unwrap();
        let files = lambdafusion::write::committed_files(services, &snapshot)
            .await
            .unwrap();
        assert!(!files.is_empty());
        let again = lambdafusion::write::commit(services, &target, &files)
            .await
            .unwrap();
        assert_eq!(again.files.len(), files.len());
    }
    assert_eq!(log_adds(&dir).len(), 2, "no commit was made twice");
    assert_eq!(count_and_sum(&engine, "d").await.0, 1_500);
    // An append planned against other columns (the table changed while it ran) is a
    // conflict, not a commit.
    let snapshot = services
        .store
        .load_job(&appended.status.id)
        .await
        .unwrap()
        .unwrap();
    let mut stale = snapshot.job.write.clone().unwrap();
    stale.job_id = "stale".into();
    let schema = lambdafusion::plan::decode_schema(&stale.table_schema).unwrap();
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(datafusion::arrow::datatypes::Field::new(
        "added",
        datafusion::arrow::datatypes::DataType::Int64,
        true,
    )));
    stale.table_schema = lambdafusion::plan::encode_schema(&Arc::new(
        datafusion::arrow::datatypes::Schema::new(fields),
    ))
    .unwrap();
    let e = lambdafusion::write::commit(services, &stale, &[])
        .await
        .unwrap_err();
    assert!(matches!(e, lambdafusion::Error::Conflict(_)), "{e}");
    assert!(
        e.to_string().contains("columns or partitioning changed"),
        "{e}"
    );
    assert_eq!(log_adds(&dir).len(), 2);

    // Two appends at once: one finds its version taken and commits after the other.
    let (a, b) = tokio::join!(
        engine.sql("INSERT INTO d SELECT id + 200000, k FROM facts WHERE id <= 300"),
        engine.sql("INSERT INTO d SELECT id + 300000, k FROM facts WHERE id <= 200"),
    );
    assert_eq!(summary(&a.unwrap().batches).0, 300);
    assert_eq!(summary(&b.unwrap().batches).0, 200);
    assert_eq!(log_adds(&dir).len(), 4);
    check_log_is_the_files(&dir);
    let (n, ids) = count_and_sum(&engine, "d").await;
    assert_eq!(n, 2_000);
    let expected: i64 = (1..=1000).sum::<i64>()
        + (1..=500).map(|i| i + 100_000).sum::<i64>()
        + (1..=300).map(|i| i + 200_000).sum::<i64>()
        + (1..=200).map(|i| i + 300_000).sum::<i64>();
    assert_eq!(ids, expected);
    // Every tenth version gets a checkpoint: readers replay at most ten commits.
    for i in 0..8 {
        engine
            .sql(&format!("INSERT INTO d VALUES ({}, 1)", 900_000 + i))
            .await
            .unwrap();
    }
    // Written by the step that committed version 10, which may end after a second step
    // of the job found the commit made and finished the job.
    let log = dir.join("_delta_log");
    for _ in 0..100 {
        if log.join("_last_checkpoint").exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(log.join("00000000000000000010.checkpoint.parquet").exists());
    assert!(log.join("_last_checkpoint").exists());
    assert_eq!(count_and_sum(&engine, "d").await.0, 2_000 + 8);
    assert_eq!(
        count_and_sum(&engine, "d VERSION AS OF 9").await.0,
        2_000 + 6
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_appended_to_is_refused_by_name() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = common::engine_with_tables(config(tables.path(), out.path()), tables.path()).await;
    engine
        .sql("CREATE VIEW big AS SELECT id, k FROM facts WHERE id > 100")
        .await
        .unwrap();
    engine
        .sql("CREATE TABLE d WITH (format = 'DELTA') AS SELECT id, k FROM facts WHERE id < 10")
        .await
        .unwrap();
    let d = out.path().join("d");
    for (sql, expected) in [
        (
            "INSERT INTO facts SELECT * FROM facts",
            "INSERT INTO facts is not supported: facts is a PARQUET table",
        ),
        ("INSERT INTO big SELECT id, k FROM facts", "big is a view"),
        (
            "EXPLAIN ANALYZE INSERT INTO d SELECT id, k FROM facts",
            "cannot be nested or analyzed",
        ),
        (
            "INSERT OVERWRITE d SELECT id, k FROM facts",
            "INSERT OVERWRITE",
        ),
        (
            "DELETE FROM d WHERE id = 1",
            "UPDATE and DELETE are not supported",
        ),
        (
            "CREATE TABLE f WITH (format = 'DELTA', partitioned_by = ARRAY['v']) AS \
             SELECT id, v FROM facts",
            "partition column v is Float64",
        ),
        (
            "CREATE TABLE i WITH (format = 'DELTA') AS SELECT INTERVAL '1 day' AS gap",
            "a Delta table cannot hold these columns",
        ),
    ] {
        let e = engine.sql(sql).await.unwrap_err().to_string();
        assert!(e.contains(expected), "{sql}: {e}");
    }
    // EXPLAIN shows the writing stage of an append, and appends nothing.
    let explained = engine
        .sql("EXPLAIN INSERT INTO d SELECT id, k FROM facts")
        .await
        .unwrap();
    let text = format!(
        "{}",
        datafusion::arrow::util::pretty::pretty_format_batches(&explained.batches).unwrap()
    );
    assert!(text.contains("TableWriterExec: format=DELTA"), "{text}");
    assert_eq!(log_adds(&d).len(), 1);
    // A new table over a directory that holds a Delta table already (not registered).
    engine.sql("DROP TABLE d").await.unwrap();
    let sql = format!(
        "CREATE TABLE e WITH (format = 'DELTA', external_location = '{}/') AS SELECT 1 AS a",
        d.display()
    );
    let e = engine.sql(&sql).await.unwrap_err().to_string();
    assert!(e.contains("holds a Delta table"), "{e}");
    assert_eq!(log_adds(&d).len(), 1, "nothing was committed to it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_deliveries_append_every_row_once() {
    let out = tempfile::tempdir().unwrap();
    let mut h = split_harness(out.path(), EngineConfig::default()).await;
    let create = h
        .submit("CREATE TABLE d WITH (format = 'DELTA', partitioned_by = ARRAY['k']) AS SELECT id, k FROM facts WHERE id <= 100")
        .await;
    h.run_to_end(&create).await;
    assert_eq!(h.state(&create).await, JobState::Succeeded);
    let job = h
        .submit("INSERT INTO d SELECT id + 1000, k FROM facts WHERE id % 3 = 0")
        .await;
    let reports = crate::writes::drive_with_twins(&mut h, &job).await;
    let duplicates = reports
        .iter()
        .filter(|r| matches!(r, TaskReport::Duplicate))
        .count();
    assert!(duplicates > 0, "some twin lost its commit");
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let dir = out.path().join("d");
    // Twins that lost delete their own files as they stop, a moment later.
    for _ in 0..100 {
        if std::panic::catch_unwind(|| check_log_is_the_files(&dir)).is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    check_log_is_the_files(&dir);
    let check = h.submit("SELECT count(*), sum(id) FROM d").await;
    h.run_to_end(&check).await;
    let (_, rows) = lambdafusion::results::collect(&h.services, &check)
        .await
        .unwrap();
    let b = rows.iter().find(|b| b.num_rows() == 1).unwrap();
    assert_eq!(
        b.column(0).as_primitive::<Int64Type>().value(0),
        100 + 10_000
    );
    let expected: i64 = (1..=100).sum::<i64>() + (1..=10_000).map(|i| i * 3 + 1000).sum::<i64>();
    assert_eq!(b.column(1).as_primitive::<Int64Type>().value(0), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_asks_the_log_before_it_deletes_a_delta_write_s_files() {
    let out = tempfile::tempdir().unwrap();
    let mut h = split_harness(
        out.path(),
        EngineConfig::default().with_task_timeout(std::time::Duration::from_secs(1)),
    )
    .await;
    let create = h
        .submit("CREATE TABLE d WITH (format = 'DELTA') AS SELECT id, k FROM facts WHERE id <= 100")
        .await;
    h.run_to_end(&create).await;
    let appended = h
        .submit("INSERT INTO d SELECT id + 1000, k FROM facts WHERE id <= 50")
        .await;
    h.run_to_end(&appended).await;
    assert_eq!(h.state(&appended).await, JobState::Succeeded);
    // An append that is cancelled after its tasks wrote: its files stay (invisible) until
    // the sweep, which may not delete them before it knows the commit cannot land.
    let cancelled = h
        .submit("INSERT INTO d SELECT id + 5000, k FROM facts WHERE id <= 50")
        .await;
    let dir = out.path().join("d");
    let unlisted = dir.join(format!("{cancelled}-00000-1a7e0000-000.parquet"));
    std::fs::write(&unlisted, b"written by an attempt of the cancelled append").unwrap();
    h.scheduler()
        .cancel(&cancelled, &lambdafusion::access::Caller::local())
        .await
        .unwrap();
    assert!(
        unlisted.exists(),
        "a cancel deletes no file of a Delta write"
    );
    // What an attempt that died after the append's commit left.
    let late = dir.join(format!("{appended}-00003-1a7e0000-000.parquet"));
    std::fs::write(&late, b"written by an attempt that then died").unwrap();
    h.scheduler().sweep().await.unwrap();
    assert!(late.exists() && unlisted.exists(), "too early to tell");
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    h.scheduler().sweep().await.unwrap();
    assert!(!late.exists() && !unlisted.exists());
    check_log_is_the_files(&dir);
    // Whatever the job's state says, the log decides: a commit that landed is kept.
    let mut snapshot = h.services.store.load_job(&appended).await.unwrap().unwrap();
    snapshot.job.state = JobState::Failed;
    let deleted = lambdafusion::write::last_clean_up(&h.services, &snapshot).await;
    assert_eq!(deleted, 0);
    // A committed write whose tasks' file lists cannot be read (their objects gone)
    // keeps every file: an empty list must not mean "keep nothing".
    for task in &mut snapshot.tasks {
        if let Some(output) = &mut task.output {
            output.object = format!("{}-gone", output.object);
        }
    }
    assert_eq!(
        lambdafusion::write::last_clean_up(&h.services, &snapshot).await,
        0
    );
    check_log_is_the_files(&dir);
    assert_eq!(log_adds(&dir).len(), 2);
}
