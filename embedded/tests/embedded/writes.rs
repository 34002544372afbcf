//! Writes: `COPY (query) TO 'location'` — every task of the final stage writes its own
//! files, one manifest makes them visible — read back by DataFusion's own readers and
//! checked against DataFusion's answer to the query; what may not be written; and the
//! failure model of a write (duplicate deliveries, an attempt that crashed after writing,
//! cancel).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::datasource::file_format::options::{CsvReadOptions, JsonReadOptions};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use lambdafusion::access::Caller;
use lambdafusion::executor::{Executor, TaskReport};
use lambdafusion::state::{JobState, JobStore};
use lambdafusion::write::Manifest;
use lambdafusion::EngineConfig;
use lambdafusion_embedded::Embedded;

use crate::common;
use common::harness::Harness;

/// Small tasks: every write below runs several writing tasks.
pub(crate) fn config(tables: &Path, out: &Path) -> EngineConfig {
    EngineConfig::default()
        .with_bytes_per_task(common::dir_bytes(&tables.join("facts")).div_ceil(3))
        .with_min_scan_bytes_per_task(1)
        .with_max_tasks_per_stage(4)
        .with_write_location(out.display().to_string())
}

async fn engine(tables: &Path, out: &Path) -> Arc<Embedded> {
    common::engine_with_tables(config(tables, out), tables).await
}

/// Every file under `dir` (relative paths), recursively.
pub(crate) fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.insert(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    found
}

/// The manifest under `dir`, checked against what is there: it lists every data file
/// under `dir` (no stray, no missing one) with its true size.
fn manifest(dir: &Path) -> Manifest {
    let text = std::fs::read_to_string(dir.join("_SUCCESS")).expect("a manifest");
    let manifest: Manifest = serde_json::from_str(&text).unwrap();
    let listed: BTreeSet<String> = manifest
        .files
        .iter()
        .map(|f| {
            let path = std::path::PathBuf::from(f.path.strip_prefix("file://").unwrap());
            assert_eq!(
                std::fs::metadata(&path).unwrap().len(),
                f.bytes,
                "{}",
                f.path
            );
            path.strip_prefix(dir).unwrap().display().to_string()
        })
        .collect();
    let mut present = files_under(dir);
    present.remove("_SUCCESS");
    assert_eq!(
        listed, present,
        "the manifest lists exactly the files written"
    );
    assert_eq!(
        manifest.rows,
        manifest.files.iter().map(|f| f.rows).sum::<u64>()
    );
    manifest
}

/// Waits (at most 10 s) until `done` holds: files of tasks that were still running when
/// their query ended are deleted by those tasks as they stop, a moment later.
async fn settle(done: impl Fn() -> bool) {
    for _ in 0..100 {
        if done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(done(), "not settled after 10 s");
}

/// A harness of `config` whose every scan is split as finely as allowed, writing under
/// `out`.
pub(crate) async fn split_harness(out: &Path, config: EngineConfig) -> Harness {
    Harness::new(
        config
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_max_tasks_per_stage(4)
            .with_write_location(out.display().to_string()),
    )
    .await
}

/// `SELECT count(*), sum(id)` over `table` through `engine`.
pub(crate) async fn count_and_sum(engine: &Embedded, table: &str) -> (i64, i64) {
    use datafusion::arrow::datatypes::Int64Type;
    let out = engine
        .sql(&format!("SELECT count(*), sum(id) FROM {table}"))
        .await
        .unwrap();
    let b = &out.batches[0];
    (
        b.column(0).as_primitive::<Int64Type>().value(0),
        b.column(1).as_primitive::<Int64Type>().value(0),
    )
}

/// Filters the written files' statistics answer (readers skip files by them) over
/// `table` — `facts`' `id, v, s, k` and two rows more (a NULL `k`, and `'a/b c%'`) —
/// answer the same rows as DataFusion over the source: no bound is wrong.
pub(crate) async fn check_filters(engine: &Embedded, tables: &Path, table: &str) {
    let source = "(SELECT id, v, s, k FROM facts UNION ALL SELECT 40001, 1.5, 'x', NULL \
                  UNION ALL SELECT 40002, 2.5, 'a/b c%', 5) AS src";
    for filter in [
        "id > 29000",
        "id BETWEEN 100 AND 250",
        "id < 3 OR id > 40001",
        "s = 'name-77'",
        "s >= 'name-9' AND s < 'name-91'",
        "k = 5 AND id < 1000",
        "k IS NULL",
        "v > 44000.0",
    ] {
        let query = |from: &str| {
            format!("SELECT count(*) AS n, sum(id) AS ids, min(s) AS s FROM {from} WHERE {filter}")
        };
        let expected = common::reference(tables, &query(source)).await;
        let actual = engine.sql(&query(table)).await.unwrap();
        compare(&expected, &actual.batches, filter);
    }
}

/// The one row of a write's result: (rows, files).
pub(crate) fn summary(batches: &[RecordBatch]) -> (u64, u64) {
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let b = batches.iter().find(|b| b.num_rows() == 1).unwrap();
    assert_eq!(b.schema().field(0).name(), "count");
    (
        b.column(0).as_primitive::<UInt64Type>().value(0),
        b.column(1).as_primitive::<UInt64Type>().value(0),
    )
}

pub(crate) fn compare(expected: &[RecordBatch], actual: &[RecordBatch], what: &str) {
    if let Err(diff) = lambdafusion_embedded::verify::compare(expected, actual, false) {
        panic!("{what}\n{diff}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_writes_every_task_s_files_and_one_manifest() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = engine(tables.path(), out.path()).await;
    let reference = SessionContext::new();
    common::register_parquet(&reference, tables.path()).await;
    let o = out.path().display();

    // (query, format, partition column, what DataFusion reads the files back with)
    let cases = [
        (
            "SELECT id, k, v, s FROM facts WHERE v > 100",
            "PARQUET",
            None,
        ),
        (
            "SELECT k, count(*) AS n, sum(v) AS total FROM facts GROUP BY k",
            "PARQUET",
            None,
        ),
        (
            "SELECT f.id, d.label, f.v FROM facts f JOIN dims d ON f.k = d.k WHERE f.id % 7 = 0",
            "CSV",
            None,
        ),
        ("SELECT id, s, v FROM facts WHERE id % 5 = 0", "JSON", None),
        (
            "SELECT id, v, CAST(k % 3 AS BIGINT) AS g FROM facts",
            "PARQUET",
            Some("g"),
        ),
    ];
    for (i, (query, format, partition)) in cases.iter().enumerate() {
        let dir = out.path().join(format!("w{i}"));
        let partitioned = partition.map_or(String::new(), |c| format!(" PARTITIONED BY ({c})"));
        let sql = format!("COPY ({query}) TO '{o}/w{i}/' STORED AS {format}{partitioned}");
        let output = engine
            .sql(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let expected = reference.sql(query).await.unwrap().collect().await.unwrap();
        let expected_rows: usize = expected.iter().map(|b| b.num_rows()).sum();
        let (rows, files) = summary(&output.batches);
        assert_eq!(rows as usize, expected_rows, "{sql}");
        let manifest = manifest(&dir);
        assert_eq!(manifest.rows, rows, "{sql}");
        assert_eq!(manifest.files.len() as u64, files, "{sql}");
        let written = output.status.written.clone().expect("a write's status");
        assert_eq!(
            (written.rows, written.files, written.bytes),
            (rows, files, manifest.bytes),
            "{sql}"
        );
        assert_eq!(output.status.kind, "write");
        assert_eq!(output.status.result_rows, Some(1));
        let writers = output.status.stages.last().map_or(0, |s| s.tasks);
        assert!(writers > 1 || i == 1, "{sql}: written by {writers} task(s)");
        assert!(
            files >= writers as u64,
            "{sql}: {files} files by {writers} tasks"
        );

        // Read back by DataFusion's own readers, with the columns in the query's order.
        let ctx = SessionContext::new();
        let location = format!("{}/", dir.display());
        match *format {
            "PARQUET" => ctx
                .register_parquet("w", &location, ParquetReadOptions::default())
                .await
                .unwrap(),
            "CSV" => ctx
                .register_csv("w", &location, CsvReadOptions::new())
                .await
                .unwrap(),
            _ => ctx
                .register_json("w", &location, JsonReadOptions::default())
                .await
                .unwrap(),
        }
        let columns: Vec<String> = expected[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let read = match partition {
            // Hive directories: DataFusion reads `g` from the paths (as text).
            Some(c) => {
                let ctx = SessionContext::new();
                let options = ParquetReadOptions::default().table_partition_cols(vec![(
                    c.to_string(),
                    datafusion::arrow::datatypes::DataType::Int64,
                )]);
                ctx.register_parquet("w", &location, options).await.unwrap();
                ctx.sql(&format!("SELECT {} FROM w", columns.join(", ")))
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap()
            }
            None if *format == "JSON" || *format == "CSV" => {
                // Text formats infer their own types: compare as text.
                let cast = |t: &str| {
                    columns
                        .iter()
                        .map(|c| format!("CAST({c} AS VARCHAR) AS {c}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                        + &format!(" FROM {t}")
                };
                let got = ctx
                    .sql(&format!("SELECT {}", cast("w")))
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
                let table = datafusion::datasource::MemTable::try_new(
                    expected[0].schema(),
                    vec![expected.clone()],
                )
                .unwrap();
                reference
                    .register_table("expected_text", Arc::new(table))
                    .unwrap();
                let want = reference
                    .sql(&format!("SELECT {}", cast("expected_text")))
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
                reference.deregister_table("expected_text").unwrap();
                compare(&want, &got, &sql);
                continue;
            }
            None => ctx
                .sql(&format!("SELECT {} FROM w", columns.join(", ")))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap(),
        };
        compare(&expected, &read, &sql);
        if let Some(c) = partition {
            let dirs: BTreeSet<String> = std::fs::read_dir(&dir)
                .unwrap()
                .filter_map(|e| {
                    let e = e.unwrap();
                    e.path()
                        .is_dir()
                        .then(|| e.file_name().into_string().unwrap())
                })
                .collect();
            assert_eq!(
                dirs,
                BTreeSet::from([format!("{c}=0"), format!("{c}=1"), format!("{c}=2")])
            );
        }
    }

    // The engine reads what it wrote, as a table.
    engine
        .sql(&format!(
            "CREATE EXTERNAL TABLE written STORED AS PARQUET LOCATION '{o}/w0/'"
        ))
        .await
        .unwrap();
    let query = "SELECT count(*) AS n, sum(v) AS total FROM facts WHERE v > 100";
    let ours = engine
        .sql("SELECT count(*) AS n, sum(v) AS total FROM written")
        .await
        .unwrap();
    let expected = reference.sql(query).await.unwrap().collect().await.unwrap();
    compare(&expected, &ours.batches, "read back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_copy_may_not_write_is_refused_by_name() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = engine(tables.path(), out.path()).await;
    let o = out.path().display();
    std::fs::create_dir_all(out.path().join("full")).unwrap();
    std::fs::write(out.path().join("full/old.parquet"), b"x").unwrap();
    engine
        .sql(&format!(
            "COPY (SELECT id FROM facts) TO '{o}/table/' STORED AS PARQUET"
        ))
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{o}/table/'"
        ))
        .await
        .unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let refusals = [
        (
            format!("COPY (SELECT 1 AS a) TO '{}/x/' STORED AS PARQUET", elsewhere.path().display()),
            "outside the locations statements may write to",
        ),
        (
            format!("COPY (SELECT id FROM facts) TO '{}/x/' STORED AS PARQUET", tables.path().display()),
            "outside the locations statements may write to",
        ),
        (
            format!("COPY (SELECT 1 AS a) TO '{o}/full/' STORED AS PARQUET"),
            "is not empty",
        ),
        (
            format!("COPY (SELECT 1 AS a) TO '{o}/table/more/' STORED AS PARQUET"),
            "location of table t",
        ),
        (
            format!("COPY (SELECT 1 AS a) TO '{o}/' STORED AS PARQUET"),
            "location of table t",
        ),
        (
            format!("COPY (SELECT 1 AS a) TO '{o}/one.parquet'"),
            "names one file",
        ),
        (
            format!("COPY (SELECT 1 AS a) TO '{o}/y/' STORED AS ARROW"),
            "COPY writes PARQUET, CSV or JSON",
        ),
        (
            format!("COPY (SELECT 1 AS a) TO '{o}/y/' STORED AS CSV OPTIONS ('format.compression' 'zstd')"),
            "does not take the option",
        ),
        (
            format!("COPY (SELECT 1 AS a) TO '{o}/y/' STORED AS PARQUET OPTIONS (compression 'lz5')"),
            "compression 'lz5'",
        ),
        (
            format!("COPY (SELECT 1 AS a, 2 AS b) TO '{o}/y/' STORED AS PARQUET PARTITIONED BY (a, b)"),
            "PARTITIONED BY names every column",
        ),
        (
            format!("EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{o}/y/' STORED AS PARQUET"),
            "COPY is a statement of its own",
        ),
        (
            format!("COPY (SELECT * FROM information_schema.tables) TO '{o}/y/' STORED AS PARQUET"),
            "information_schema",
        ),
        (
            "INSERT INTO t VALUES (1)".to_string(),
            "t is a PARQUET table, and INSERT INTO appends to Delta and Iceberg tables only",
        ),
    ];
    for (sql, says) in refusals {
        let e = engine
            .sql(&sql)
            .await
            .err()
            .unwrap_or_else(|| panic!("{sql} was accepted"));
        assert!(e.to_string().contains(says), "{sql}: {e}");
    }
    // EXPLAIN shows the writing stage, and writes nothing.
    let explained = engine
        .sql(&format!(
            "EXPLAIN COPY (SELECT k, count(*) AS n FROM facts GROUP BY k) TO '{o}/y/' \
             STORED AS PARQUET PARTITIONED BY (k)"
        ))
        .await
        .unwrap();
    let text = format!(
        "{:?}",
        lambdafusion_embedded::verify::rows(&explained.batches)
    );
    assert!(
        text.contains("TableWriterExec: format=PARQUET") && text.contains("partition_by=[k]"),
        "{text}"
    );
    // Nothing was written by any of them.
    let left: BTreeSet<String> = files_under(out.path())
        .into_iter()
        .filter(|f| !f.starts_with("table/"))
        .collect();
    assert_eq!(left, BTreeSet::from(["full/old.parquet".to_string()]));
    assert!(files_under(elsewhere.path()).is_empty());

    // An engine with no write location writes nowhere.
    let reader = common::engine_with_tables(EngineConfig::default(), tables.path()).await;
    let e = reader
        .sql(&format!(
            "COPY (SELECT 1 AS a) TO '{o}/z/' STORED AS PARQUET"
        ))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("none are configured"), "{e}");
}

/// Counts the rows the written Parquet files hold, and compares them with the query's.
async fn check_written(dir: &Path, expected_rows: u64) {
    let manifest = manifest(dir);
    assert_eq!(manifest.rows, expected_rows);
    let ctx = SessionContext::new();
    ctx.register_parquet(
        "w",
        &format!("{}/", dir.display()),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let n = ctx
        .sql("SELECT count(*) AS n, count(DISTINCT id) AS ids FROM w")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let n0 = n[0]
        .column(0)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .value(0);
    let ids = n[0]
        .column(1)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .value(0);
    assert_eq!(n0 as u64, expected_rows, "every row exactly once");
    assert_eq!(ids, n0, "no row twice");
}

const WRITE: &str = "SELECT id, k, v FROM facts WHERE id % 3 = 0";

/// Runs `job` to its end with every task event delivered twice, concurrently, to two
/// containers; returns what each delivery reported.
pub(crate) async fn drive_with_twins(h: &mut Harness, job: &str) -> Vec<TaskReport> {
    let services = h.services.clone();
    let reports = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = reports.clone();
    h.drive(job, |executor, task| {
        let twin = Executor::new(services.clone());
        let seen = seen.clone();
        async move {
            let (a, b) = tokio::join!(executor.handle(&task), twin.handle(&task));
            seen.lock().unwrap().extend([a.unwrap(), b.unwrap()]);
        }
    })
    .await;
    let reports = reports.lock().unwrap().clone();
    reports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_and_a_crashed_attempt_leave_every_row_once() {
    let out = tempfile::tempdir().unwrap();
    let mut h = Harness::new(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_max_tasks_per_stage(4)
            .with_write_location(out.path().display().to_string()),
    )
    .await;
    let dir = out.path().join("w");
    let job = h
        .submit(&format!(
            "COPY ({WRITE}) TO '{}/' STORED AS PARQUET",
            dir.display()
        ))
        .await;
    // What an attempt that crashed after writing, before its commit, leaves behind.
    std::fs::create_dir_all(&dir).unwrap();
    let crashed = dir.join(format!("{job}-00001-deadbeef-000.parquet"));
    std::fs::write(&crashed, b"half a file").unwrap();
    let reports = drive_with_twins(&mut h, &job).await;
    let duplicates = reports
        .iter()
        .filter(|r| matches!(r, TaskReport::Duplicate))
        .count();
    let committed = reports
        .iter()
        .filter(|r| matches!(r, TaskReport::Committed { .. }))
        .count();
    assert_eq!(committed + duplicates, reports.len(), "{reports:?}");
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    assert!(duplicates > 0, "some twin lost its commit");
    assert!(
        !crashed.exists(),
        "the crashed attempt's file was deleted by the commit"
    );
    let expected = common::reference(h.dir.path(), WRITE).await;
    let rows: usize = expected.iter().map(|b| b.num_rows()).sum();
    check_written(&dir, rows as u64).await;
    let (_, result) = lambdafusion::results::collect(&h.services, &job)
        .await
        .unwrap();
    assert_eq!(summary(&result).0, rows as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_write_leaves_nothing() {
    let out = tempfile::tempdir().unwrap();
    let mut h = Harness::new(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_max_tasks_per_stage(4)
            .with_write_location(out.path().display().to_string()),
    )
    .await;
    let dir = out.path().join("w");
    let job = h
        .submit(&format!(
            "COPY ({WRITE}) TO '{}/' STORED AS PARQUET",
            dir.display()
        ))
        .await;
    // Half the writing tasks commit their files; then the query is cancelled.
    let mut ran = 0;
    let services = h.services.clone();
    let store = h.store.clone();
    h.drive(&job, |executor, task| {
        ran += 1;
        let run = ran;
        let scheduler = lambdafusion::scheduler::Scheduler::new(services.clone());
        let store = store.clone();
        async move {
            let running =
                store.get_job(&task.job_id).await.unwrap().unwrap().state == JobState::Running;
            if run > 2 && running {
                scheduler
                    .cancel(&task.job_id, &Caller::local())
                    .await
                    .unwrap();
            }
            let _ = executor.handle(&task).await;
        }
    })
    .await;
    assert_eq!(h.state(&job).await, JobState::Cancelled);
    assert!(ran > 2, "some tasks ran before the cancel");
    assert_eq!(
        files_under(&dir),
        BTreeSet::new(),
        "nothing of the write is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_stay_inside_the_location_and_two_writers_do_not_mix() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = engine(tables.path(), out.path()).await;
    let o = out.path().display();

    // Partition values and a column name that look like paths: each stays one directory
    // name under the location.
    let sql = format!(
        "COPY (SELECT id, CASE WHEN id % 3 = 0 THEN '../../escape' WHEN id % 3 = 1 THEN '/abs' \
         ELSE NULL END AS p FROM facts WHERE id < 100) TO '{o}/h/' STORED AS PARQUET \
         PARTITIONED BY (p)"
    );
    let written = engine
        .sql(&sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(summary(&written.batches).0, 99);
    let everything = files_under(out.path());
    assert!(
        everything.iter().all(|f| f.starts_with("h/")),
        "{everything:?}"
    );
    let dirs: BTreeSet<String> = std::fs::read_dir(out.path().join("h"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    assert!(
        dirs.iter()
            .any(|d| d.ends_with(lambdafusion::write::sink::DEFAULT_PARTITION)),
        "{dirs:?}"
    );
    manifest(&out.path().join("h"));
    // A partition column named like a path, by CREATE TABLE ... AS.
    engine
        .sql(&format!(
            "CREATE TABLE odd WITH (external_location = '{o}/h2/', \
             partitioned_by = ARRAY['a/../../b']) AS SELECT id, '..' AS \"a/../../b\" \
             FROM facts WHERE id < 10"
        ))
        .await
        .unwrap();
    let everything = files_under(out.path());
    assert!(
        everything
            .iter()
            .all(|f| f.starts_with("h/") || f.starts_with("h2/")),
        "{everything:?}"
    );
    let dirs: Vec<String> = std::fs::read_dir(out.path().join("h2"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");

    // More partition values than a task keeps files open (97 > 64): each task's rows are
    // sorted by them first, so a run writes each directory once — not a file per batch
    // and value.
    let sql = format!(
        "COPY (SELECT id, v, k FROM facts) TO '{o}/wide/' STORED AS PARQUET PARTITIONED BY (k)"
    );
    let wide = engine
        .sql(&sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(summary(&wide.batches).0, 30_000);
    let files = manifest(&out.path().join("wide")).files;
    let mut runs = BTreeSet::new();
    for f in &files {
        // .../k=<v>/<job>-<task>-<run>-<n>.parquet: one file per directory and run.
        let (dir, name) = f.path.rsplit_once('/').unwrap();
        let run = name.split('-').nth(2).unwrap().to_string();
        assert!(
            runs.insert((dir.to_string(), run)),
            "two files of one run in {dir}"
        );
    }
    assert!(files.len() >= 97);

    // Too many partition values for one task is refused by name, and leaves nothing.
    let sql = format!(
        "COPY (SELECT id, v FROM facts) TO '{o}/many/' STORED AS PARQUET PARTITIONED BY (id)"
    );
    let e = engine.sql(&sql).await.unwrap_err();
    assert!(e.to_string().contains("partition values"), "{e}");
    // Tasks still writing when the query failed delete their files as they stop.
    settle(|| files_under(&out.path().join("many")).is_empty()).await;

    // Two writes to one empty location at once: one commits, the other fails by name;
    // the location holds the winner's files alone.
    let a =
        format!("COPY (SELECT id FROM facts WHERE id % 2 = 0) TO '{o}/both/' STORED AS PARQUET");
    let b =
        format!("COPY (SELECT id FROM facts WHERE id % 2 = 1) TO '{o}/both/' STORED AS PARQUET");
    let (ra, rb) = tokio::join!(engine.sql(&a), engine.sql(&b));
    let wins = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
    assert_eq!(wins, 1, "{:?} / {:?}", ra.as_ref().err(), rb.as_ref().err());
    let loser = ra.err().or(rb.err()).unwrap().to_string();
    assert!(
        loser.contains("not empty") || loser.contains("written meanwhile"),
        "{loser}"
    );
    let both = out.path().join("both");
    settle(|| {
        files_under(&both)
            .iter()
            .filter(|f| f.ends_with(".parquet"))
            .count()
            == serde_json::from_str::<Manifest>(
                &std::fs::read_to_string(both.join("_SUCCESS")).unwrap(),
            )
            .unwrap()
            .files
            .len()
    })
    .await;
    let manifest = manifest(&both);
    assert_eq!(manifest.rows, 15_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_table_as_writes_the_files_and_then_the_table() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = engine(tables.path(), out.path()).await;
    let reference = SessionContext::new();
    common::register_parquet(&reference, tables.path()).await;
    let o = out.path().display();

    // Default location and format: <first write location>/<name>/, Parquet.
    let query = "SELECT f.id, d.label, f.v FROM facts f JOIN dims d ON f.k = d.k WHERE f.v > 200";
    let made = engine
        .sql(&format!("CREATE TABLE labelled AS {query}"))
        .await
        .unwrap();
    let expected = reference.sql(query).await.unwrap().collect().await.unwrap();
    let rows: usize = expected.iter().map(|b| b.num_rows()).sum();
    assert_eq!(summary(&made.batches).0 as usize, rows);
    assert_eq!(made.status.kind, "write");
    manifest(&out.path().join("labelled"));
    let read = engine
        .sql("SELECT id, label, v FROM labelled")
        .await
        .unwrap();
    compare(&expected, &read.batches, "CREATE TABLE ... AS, read back");
    let listed = engine.sql("SHOW TABLES").await.unwrap();
    assert!(
        format!("{:?}", lambdafusion_embedded::verify::rows(&listed.batches)).contains("labelled")
    );

    // Athena's options: a location, a format, partitions, a compression.
    let query = "SELECT id, v, CAST(k % 4 AS BIGINT) AS g FROM facts WHERE id % 2 = 0";
    engine
        .sql(&format!(
            "CREATE TABLE parts WITH (format = 'PARQUET', external_location = '{o}/p/', \
             partitioned_by = ARRAY['g'], write_compression = 'SNAPPY') AS {query}"
        ))
        .await
        .unwrap();
    let check = "SELECT CAST(g AS BIGINT) AS g, count(*) AS n, sum(v) AS total FROM {} GROUP BY 1";
    let ours = engine.sql(&check.replace("{}", "parts")).await.unwrap();
    let want = reference
        .sql(&check.replace("{}", &format!("({query})")))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    compare(&want, &ours.batches, "partitioned CREATE TABLE ... AS");
    assert!(out.path().join("p/g=3").is_dir());
    // The same in Hive's words: PARTITIONED BY, STORED AS, LOCATION.
    engine
        .sql(&format!(
            "CREATE TABLE hive_parts PARTITIONED BY (g) STORED AS PARQUET LOCATION '{o}/h/' \
             AS {query}"
        ))
        .await
        .unwrap();
    let ours = engine
        .sql(&check.replace("{}", "hive_parts"))
        .await
        .unwrap();
    compare(&want, &ours.batches, "CREATE TABLE ... AS in Hive's words");
    assert!(out.path().join("h/g=3").is_dir());

    // A query of no rows still makes a table with its columns.
    engine
        .sql("CREATE TABLE nothing WITH (format = 'CSV') AS SELECT id, s FROM facts WHERE id < 0")
        .await
        .unwrap();
    let none = engine
        .sql("SELECT count(*) AS n FROM nothing")
        .await
        .unwrap();
    assert_eq!(
        lambdafusion_embedded::verify::rows(&none.batches)[0][0],
        lambdafusion_embedded::verify::Cell::Text("0".into())
    );
    let described = engine.sql("DESCRIBE nothing").await.unwrap();
    assert_eq!(
        described
            .batches
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        2
    );

    // IF NOT EXISTS writes nothing; a second CREATE is refused, as are the rest.
    let again = engine
        .sql("CREATE TABLE IF NOT EXISTS labelled AS SELECT 1 AS a")
        .await
        .unwrap();
    assert!(
        format!("{:?}", lambdafusion_embedded::verify::rows(&again.batches))
            .contains("nothing written")
    );
    for (sql, says) in [
        ("CREATE TABLE labelled AS SELECT 1 AS a", "already exists"),
        ("CREATE TABLE facts AS SELECT 1 AS a", "already exists"),
        (
            "CREATE OR REPLACE TABLE x AS SELECT 1 AS a",
            "CREATE OR REPLACE TABLE",
        ),
        ("CREATE TABLE y (a INT)", "CREATE TABLE without AS"),
        (
            "CREATE TABLE y WITH (format = 'ORC') AS SELECT 1 AS a",
            "writes PARQUET, CSV, JSON, DELTA or ICEBERG tables, not ORC",
        ),
        (
            "CREATE TABLE y WITH (bucketed_by = ARRAY['a']) AS SELECT 1 AS a",
            "does not take the option bucketed_by",
        ),
        (
            "CREATE TABLE y WITH (partitioned_by = ARRAY['b']) AS SELECT 1 AS a",
            "partitioned_by names b",
        ),
        (
            "CREATE TABLE y WITH (external_location = '/etc/y/') AS SELECT 1 AS a",
            "outside the locations statements may write to",
        ),
        (
            "EXPLAIN CREATE TABLE y AS SELECT 1 AS a",
            "statement of its own",
        ),
        (
            "CREATE TABLE y STORED AS ORC AS SELECT 1 AS a",
            "does not take STORED AS ORC",
        ),
        (
            "CREATE TABLE y PARTITIONED BY (a INT) AS SELECT 1 AS a, 2 AS b",
            "a typed partition column (a INT)",
        ),
        (
            "CREATE TABLE y STORED AS PARQUET WITH (format = 'CSV') AS SELECT 1 AS a",
            "format is said twice",
        ),
        (
            "CREATE TABLE y STORED AS ICEBERG AS SELECT 1 AS a",
            "WITH (format = 'ICEBERG') AS SELECT",
        ),
    ] {
        let e = engine
            .sql(sql)
            .await
            .err()
            .unwrap_or_else(|| panic!("{sql} was accepted"));
        assert!(e.to_string().contains(says), "{sql}: {e}");
    }
    let names: BTreeSet<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["labelled".into(), "p".into(), "h".into(), "nothing".into()]),
        "nothing written by the refused statements"
    );

    // Without a write location there is nowhere to put the table.
    let reader = common::engine_with_tables(EngineConfig::default(), tables.path()).await;
    let e = reader
        .sql("CREATE TABLE z AS SELECT 1 AS a")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("no write location is configured"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_deletes_what_attempts_that_died_late_left() {
    let out = tempfile::tempdir().unwrap();
    let mut h = Harness::new(
        EngineConfig::default()
            .with_bytes_per_task(1)
            .with_min_scan_bytes_per_task(1)
            .with_max_tasks_per_stage(4)
            .with_task_timeout(std::time::Duration::from_secs(1))
            .with_write_location(out.path().display().to_string()),
    )
    .await;
    // A write that commits, and one that is cancelled.
    let done = out.path().join("done");
    let committed = h
        .submit(&format!(
            "COPY ({WRITE}) TO '{}/' STORED AS PARQUET",
            done.display()
        ))
        .await;
    h.run_to_end(&committed).await;
    assert_eq!(h.state(&committed).await, JobState::Succeeded);
    let gone = out.path().join("gone");
    let cancelled = h
        .submit(&format!(
            "COPY ({WRITE}) TO '{}/' STORED AS PARQUET",
            gone.display()
        ))
        .await;
    h.scheduler()
        .cancel(&cancelled, &Caller::local())
        .await
        .unwrap();
    // What attempts that died after the commit, or after the cancel's clean-up, left.
    std::fs::create_dir_all(&gone).unwrap();
    let late = [
        done.join(format!("{committed}-00003-1a7e0000-000.parquet")),
        gone.join(format!("{cancelled}-00000-1a7e0000-000.parquet")),
    ];
    for file in &late {
        std::fs::write(file, b"written by an attempt that then died").unwrap();
    }
    // And the task outputs such attempts put after the jobs' clean-ups (a late delivery
    // of the first stage's task 1, attempt 2) — but the committed write's result stays.
    use object_store::ObjectStoreExt;
    let shuffle = h.services.shuffle_store().unwrap();
    let prefix = h.services.shuffle.prefix.clone();
    let late_outputs: Vec<_> = [&committed, &cancelled]
        .iter()
        .map(|job| lambdafusion::shuffle::task_output_path(&prefix, job, (0, 4, 4), 1, 2, "late"))
        .collect();
    for path in &late_outputs {
        shuffle.put(path, b"late".to_vec().into()).await.unwrap();
    }
    let result = h.store.load_job(&committed).await.unwrap().unwrap();
    let result: Vec<_> = result
        .tasks_of(result.job.final_stage())
        .filter_map(|t| t.output.as_ref().map(|o| o.object.clone()))
        .collect();
    assert!(!result.is_empty());
    let exists = |path: String| {
        let shuffle = shuffle.clone();
        async move { shuffle.head(&path.as_str().into()).await.is_ok() }
    };
    // While an attempt may still run, the sweep leaves the files (and the jobs) be.
    h.scheduler().sweep().await.unwrap();
    assert!(late.iter().all(|f| f.exists()));
    for path in &late_outputs {
        assert!(exists(path.to_string()).await, "{path}");
    }
    assert_eq!(h.store.active_jobs(None, 10).await.unwrap().len(), 2);
    // Past the task timeout it deletes them, once, and lets the jobs go.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    h.scheduler().sweep().await.unwrap();
    assert!(late.iter().all(|f| !f.exists()), "{late:?}");
    for path in &late_outputs {
        assert!(!exists(path.to_string()).await, "{path} left");
    }
    for object in &result {
        assert!(
            exists(object.clone()).await,
            "the result's {object} deleted"
        );
    }
    assert!(h.store.active_jobs(None, 10).await.unwrap().is_empty());
    let expected = common::reference(h.dir.path(), WRITE).await;
    check_written(&done, expected.iter().map(|b| b.num_rows() as u64).sum()).await;
    assert!(files_under(&gone).is_empty());
}
