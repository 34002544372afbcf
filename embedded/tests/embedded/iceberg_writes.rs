//! Writes to Iceberg tables: `CREATE TABLE ... WITH (format = 'ICEBERG') AS` and `INSERT
//! INTO` — every task writes its own Parquet files, one snapshot (the table's next
//! `v<N>.metadata.json`) lists them all — read back and checked against DataFusion's
//! answer over the same rows; a commit run again, concurrent appends, duplicate
//! deliveries, the sweep, and what may not be appended to. (PyIceberg reads the same
//! tables in tests/tests/end_to_end.)

use std::path::Path;

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::Int64Type;
use lambdafusion::executor::TaskReport;
use lambdafusion::state::JobState;
use lambdafusion::EngineConfig;

use crate::common;
use crate::writes::{compare, config, count_and_sum, split_harness, summary};

/// The table's metadata versions (`metadata/v<N>.metadata.json`), in order, parsed.
fn versions(dir: &Path) -> Vec<serde_json::Value> {
    let mut found = Vec::new();
    for n in 1.. {
        let file = dir.join(format!("metadata/v{n}.metadata.json"));
        if !file.exists() {
            break;
        }
        found.push(serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap());
    }
    found
}

/// The newest snapshot counts exactly the data files there, and no metadata file is
/// left of a commit try that lost; `Err` naming the difference otherwise.
fn snapshot_is_the_files(dir: &Path) -> Result<(), String> {
    let newest = versions(dir).pop().ok_or("no metadata")?;
    let current = newest["current-snapshot-id"]
        .as_i64()
        .ok_or("no snapshot")?;
    let snapshot = newest["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["snapshot-id"].as_i64() == Some(current))
        .ok_or("current snapshot not listed")?;
    let listed: usize = snapshot["summary"]["total-data-files"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let present = crate::writes::files_under(&dir.join("data")).len();
    if listed != present {
        return Err(format!("{listed} files listed, {present} there"));
    }
    let lists = std::fs::read_dir(dir.join("metadata"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name().into_string().unwrap();
            name.starts_with("snap-")
        })
        .count();
    let snapshots = newest["snapshots"].as_array().unwrap().len();
    if lists != snapshots {
        return Err(format!("{lists} manifest lists for {snapshots} snapshots"));
    }
    Ok(())
}

/// [`snapshot_is_the_files`], within a few seconds: a second step of a job may still be
/// in its commit, about to find the commit made and delete its own manifest list.
async fn eventually_the_files(dir: &Path) {
    for _ in 0..100 {
        if snapshot_is_the_files(dir).is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    snapshot_is_the_files(dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iceberg_tables_are_created_then_appended_to_one_snapshot_each() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = common::engine_with_tables(config(tables.path(), out.path()), tables.path()).await;
    let created = engine
        .sql(
            "CREATE TABLE t WITH (format = 'ICEBERG', partitioned_by = ARRAY['k']) AS \
             SELECT id, v, s, k FROM facts WHERE id % 4 <> 0",
        )
        .await
        .unwrap();
    let writers = created.status.stages.last().map_or(0, |s| s.tasks);
    assert!(writers > 1, "written by {writers} task(s)");
    assert_eq!(summary(&created.batches).0, 22_500);
    let dir = out.path().join("t");
    assert!(
        !dir.join("_SUCCESS").exists(),
        "an Iceberg table has no manifest"
    );
    assert_eq!(versions(&dir).len(), 1);
    eventually_the_files(&dir).await;

    let appended = engine
        .sql("INSERT INTO t SELECT id, v, s, k FROM facts WHERE id % 4 = 0")
        .await
        .unwrap();
    assert_eq!(summary(&appended.batches).0, 7_500);
    // A row whose partition value is NULL, one with a value that is not a plain name,
    // and VALUES cast to the table's types.
    engine
        .sql("INSERT INTO t VALUES (40001, 1.5, 'x', NULL), (40002, 2.5, 'a/b c%', 5)")
        .await
        .unwrap();
    let all = versions(&dir);
    assert_eq!(all.len(), 3, "one snapshot per statement");
    eventually_the_files(&dir).await;
    let newest = &all[2];
    assert_eq!(newest["snapshots"].as_array().unwrap().len(), 3);
    assert_eq!(newest["last-sequence-number"], 3);
    assert_eq!(newest["metadata-log"].as_array().unwrap().len(), 2);
    assert_eq!(
        newest["refs"]["main"]["snapshot-id"],
        newest["current-snapshot-id"]
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("metadata/version-hint.text")).unwrap(),
        "3"
    );

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
            "SELECT k, count(*) AS n, sum(id) AS ids, sum(v) AS vs, max(s) AS s FROM t \
             GROUP BY k ORDER BY k",
        )
        .await
        .unwrap();
    compare(&expected, &actual.batches, "the table holds every row once");
    crate::writes::check_filters(&engine, tables.path(), "t").await;
    // Each snapshot is what its commit made it.
    let first = all[0]["current-snapshot-id"].as_i64().unwrap();
    let second = all[1]["current-snapshot-id"].as_i64().unwrap();
    assert_eq!(
        count_and_sum(&engine, &format!("t VERSION AS OF {first}"))
            .await
            .0,
        22_500
    );
    assert_eq!(
        count_and_sum(&engine, &format!("t VERSION AS OF {second}"))
            .await
            .0,
        30_000
    );
    assert_eq!(count_and_sum(&engine, "t").await.0, 30_002);
    let summary = &newest["snapshots"][2]["summary"];
    assert_eq!(summary["total-records"], "30002");
    assert_eq!(summary["added-records"], "2");
    assert_eq!(summary["operation"], "append");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_run_again_adds_nothing_and_concurrent_appends_both_land() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = common::engine_with_tables(config(tables.path(), out.path()), tables.path()).await;
    let dir = out.path().join("t");
    let created = engine
        .sql("CREATE TABLE t WITH (format = 'ICEBERG') AS SELECT id, k FROM facts WHERE id <= 1000")
        .await
        .unwrap();
    let appended = engine
        .sql("INSERT INTO t SELECT id + 100000, k FROM facts WHERE id <= 500")
        .await
        .unwrap();
    assert_eq!(versions(&dir).len(), 2);
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
    assert_eq!(versions(&dir).len(), 2, "no commit was made twice");
    eventually_the_files(&dir).await;
    assert_eq!(count_and_sum(&engine, "t").await.0, 1_500);
    // An append planned against other columns (the table changed while it ran) is a
    // conflict, not a commit, and leaves no metadata file behind.
    let snapshot = services
        .store
        .load_job(&appended.status.id)
        .await
        .unwrap()
        .unwrap();
    let mut stale = snapshot.job.write.clone().unwrap();
    stale.job_id = "stale".into();
    let schema = lambdafusion::plan::decode_schema(&stale.table_schema).unwrap();
    let renamed: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| {
            let name = if f.name() == "k" {
                "key"
            } else {
                f.name().as_str()
            };
            std::sync::Arc::new(f.as_ref().clone().with_name(name))
        })
        .collect();
    stale.table_schema = lambdafusion::plan::encode_schema(&std::sync::Arc::new(
        datafusion::arrow::datatypes::Schema::new(renamed),
    ))
    .unwrap();
    let before = std::fs::read_dir(dir.join("metadata")).unwrap().count();
    let e = lambdafusion::write::commit(services, &stale, &[])
        .await
        .unwrap_err();
    assert!(matches!(e, lambdafusion::Error::Conflict(_)), "{e}");
    assert!(
        e.to_string().contains("columns or partitioning changed"),
        "{e}"
    );
    assert_eq!(versions(&dir).len(), 2);
    assert_eq!(
        std::fs::read_dir(dir.join("metadata")).unwrap().count(),
        before
    );

    // Appends at once: each that finds its version taken commits after the others.
    let (a, b, c) = tokio::join!(
        engine.sql("INSERT INTO t SELECT id + 200000, k FROM facts WHERE id <= 300"),
        engine.sql("INSERT INTO t SELECT id + 300000, k FROM facts WHERE id <= 200"),
        engine.sql("INSERT INTO t VALUES (900000, 1)"),
    );
    assert_eq!(summary(&a.unwrap().batches).0, 300);
    assert_eq!(summary(&b.unwrap().batches).0, 200);
    assert_eq!(summary(&c.unwrap().batches).0, 1);
    assert_eq!(versions(&dir).len(), 5);
    eventually_the_files(&dir).await;
    let (n, ids) = count_and_sum(&engine, "t").await;
    assert_eq!(n, 2_001);
    let expected: i64 = (1..=1000).sum::<i64>()
        + (1..=500).map(|i| i + 100_000).sum::<i64>()
        + (1..=300).map(|i| i + 200_000).sum::<i64>()
        + (1..=200).map(|i| i + 300_000).sum::<i64>()
        + 900_000;
    assert_eq!(ids, expected);
    // Each version's snapshots are its parent's and one more.
    for (i, v) in versions(&dir).iter().enumerate() {
        assert_eq!(v["snapshots"].as_array().unwrap().len(), i + 1);
        assert_eq!(v["last-sequence-number"], i as i64 + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_written_to_iceberg_is_refused_by_name() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = common::engine_with_tables(config(tables.path(), out.path()), tables.path()).await;
    engine
        .sql("CREATE TABLE t WITH (format = 'ICEBERG') AS SELECT id, k FROM facts WHERE id < 10")
        .await
        .unwrap();
    let dir = out.path().join("t");
    // A table whose metadata is named as another catalog names it (PyIceberg's SQL
    // catalog, Glue): appending beside that catalog would fork the table.
    let other = out.path().join("other");
    engine
        .sql(&format!(
            "CREATE TABLE o WITH (format = 'ICEBERG', external_location = '{}/') AS \
             SELECT id, k FROM facts WHERE id < 10",
            other.display()
        ))
        .await
        .unwrap();
    std::fs::rename(
        other.join("metadata/v1.metadata.json"),
        other.join("metadata/00001-2b9c.metadata.json"),
    )
    .unwrap();
    std::fs::remove_file(other.join("metadata/version-hint.text")).unwrap();
    engine
        .sql(&format!(
            "CREATE EXTERNAL TABLE pinned STORED AS ICEBERG LOCATION '{}'",
            dir.join("metadata/v1.metadata.json").display()
        ))
        .await
        .unwrap();
    for (sql, expected) in [
        (
            "INSERT INTO o VALUES (1, 1)",
            "no metadata/v<N>.metadata.json",
        ),
        (
            "INSERT INTO pinned VALUES (1, 1)",
            "registered at one metadata file",
        ),
        (
            "CREATE TABLE f WITH (format = 'ICEBERG', partitioned_by = ARRAY['v']) AS \
             SELECT id, v FROM facts",
            "partition column v is Float64",
        ),
        (
            "CREATE TABLE i WITH (format = 'ICEBERG') AS SELECT INTERVAL '1 day' AS gap",
            "column gap is Interval",
        ),
        (
            "CREATE TABLE l WITH (format = 'ICEBERG') AS SELECT [1, 2] AS xs",
            "column xs is List",
        ),
    ] {
        let e = engine.sql(sql).await.unwrap_err().to_string();
        assert!(e.contains(expected), "{sql}: {e}");
    }
    // With v<N> files beside another catalog's newer one, still refused.
    std::fs::copy(
        other.join("metadata/00001-2b9c.metadata.json"),
        other.join("metadata/v1.metadata.json"),
    )
    .unwrap();
    let e = engine
        .sql("INSERT INTO o VALUES (1, 1)")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("another catalog's convention"), "{e}");
    // EXPLAIN shows the writing stage of an append, and appends nothing.
    let explained = engine
        .sql("EXPLAIN INSERT INTO t SELECT id, k FROM facts")
        .await
        .unwrap();
    let text = format!(
        "{}",
        datafusion::arrow::util::pretty::pretty_format_batches(&explained.batches).unwrap()
    );
    assert!(text.contains("TableWriterExec: format=ICEBERG"), "{text}");
    assert_eq!(versions(&dir).len(), 1);
    // A new table over a directory that holds an Iceberg table already (not registered).
    engine.sql("DROP TABLE t").await.unwrap();
    engine.sql("DROP TABLE pinned").await.unwrap();
    let sql = format!(
        "CREATE TABLE e WITH (format = 'ICEBERG', external_location = '{}/') AS SELECT 1 AS a",
        dir.display()
    );
    let e = engine.sql(&sql).await.unwrap_err().to_string();
    assert!(e.contains("is not empty"), "{e}");
    assert_eq!(versions(&dir).len(), 1, "nothing was committed to it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_deliveries_append_every_row_once_and_the_sweep_asks_the_metadata() {
    let out = tempfile::tempdir().unwrap();
    let mut h = split_harness(
        out.path(),
        EngineConfig::default().with_task_timeout(std::time::Duration::from_secs(1)),
    )
    .await;
    let create = h
        .submit("CREATE TABLE t WITH (format = 'ICEBERG', partitioned_by = ARRAY['k']) AS SELECT id, k FROM facts WHERE id <= 100")
        .await;
    h.run_to_end(&create).await;
    assert_eq!(h.state(&create).await, JobState::Succeeded);
    let job = h
        .submit("INSERT INTO t SELECT id + 1000, k FROM facts WHERE id % 3 = 0")
        .await;
    let reports = crate::writes::drive_with_twins(&mut h, &job).await;
    let duplicates = reports
        .iter()
        .filter(|r| matches!(r, TaskReport::Duplicate))
        .count();
    assert!(duplicates > 0, "some twin lost its commit");
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let dir = out.path().join("t");
    // Twins that lost delete their own files as they stop, a moment later.
    for _ in 0..100 {
        if snapshot_is_the_files(&dir).is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    eventually_the_files(&dir).await;
    let check = h.submit("SELECT count(*), sum(id) FROM t").await;
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

    // An append cancelled after its tasks wrote: its files stay (invisible) until the
    // sweep, which may not delete them before it knows the commit cannot land.
    let appended = h
        .submit("INSERT INTO t SELECT id + 7000, k FROM facts WHERE id <= 50")
        .await;
    h.run_to_end(&appended).await;
    let cancelled = h
        .submit("INSERT INTO t SELECT id + 5000, k FROM facts WHERE id <= 50")
        .await;
    let data = dir.join("data");
    let unlisted = data.join(format!("{cancelled}-00000-1a7e0000-000.parquet"));
    std::fs::write(&unlisted, b"written by an attempt of the cancelled append").unwrap();
    h.scheduler()
        .cancel(&cancelled, &lambdafusion::access::Caller::local())
        .await
        .unwrap();
    assert!(
        unlisted.exists(),
        "a cancel deletes no file of an Iceberg write"
    );
    // What an attempt that died after the append's commit left.
    let late = data.join(format!("{appended}-00003-1a7e0000-000.parquet"));
    std::fs::write(&late, b"written by an attempt that then died").unwrap();
    h.scheduler().sweep().await.unwrap();
    assert!(late.exists() && unlisted.exists(), "too early to tell");
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    h.scheduler().sweep().await.unwrap();
    assert!(!late.exists() && !unlisted.exists());
    eventually_the_files(&dir).await;
    // Whatever the job's state says, the metadata decides: a commit that landed is kept.
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
    eventually_the_files(&dir).await;
    assert_eq!(versions(&dir).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_whose_directory_name_needs_escaping_is_written_and_read() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = common::engine_with_tables(config(tables.path(), out.path()), tables.path()).await;
    // The metadata names every file by its key, literally: `a b%` in the key is `a b%`.
    let dir = out.path().join("a b%");
    engine
        .sql(&format!(
            "CREATE TABLE sp WITH (format = 'ICEBERG', partitioned_by = ARRAY['s'], \
             external_location = '{}/') AS SELECT id, 'x/y' AS s FROM facts WHERE id <= 5",
            dir.display()
        ))
        .await
        .unwrap();
    engine
        .sql("INSERT INTO sp VALUES (6, 'x/y')")
        .await
        .unwrap();
    assert_eq!(count_and_sum(&engine, "sp").await, (6, 21));
    let newest = versions(&dir).pop().unwrap();
    let location = newest["location"].as_str().unwrap();
    assert!(location.ends_with("/a b%"), "{location}");
    eventually_the_files(&dir).await;
}

/// A store whose first create of a `.metadata.json` applies and then answers otherwise:
/// an error (a request whose answer was lost), or "already exists" (what a request that
/// applied, lost its answer and was retried by the client is answered).
#[derive(Debug)]
struct LosesOneCommitAnswer {
    inner: std::sync::Arc<dyn object_store::ObjectStore>,
    lost: std::sync::atomic::AtomicBool,
    retried: bool,
}

#[async_trait::async_trait]
impl object_store::ObjectStore for LosesOneCommitAnswer {
    async fn put_opts(
        &self,
        location: &object_store::path::Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        let create = matches!(opts.mode, object_store::PutMode::Create);
        let put = self.inner.put_opts(location, payload, opts).await?;
        if create
            && location.as_ref().ends_with(".metadata.json")
            && !self.lost.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            if self.retried {
                return Err(object_store::Error::AlreadyExists {
                    path: location.to_string(),
                    source: "the retry found it".into(),
                });
            }
            return Err(object_store::Error::Generic {
                store: "test",
                source: "the answer was lost".into(),
            });
        }
        Ok(put)
    }

    async fn put_multipart_opts(
        &self,
        location: &object_store::path::Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &object_store::path::Path,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &object_store::path::Path,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<bytes::Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<
            'static,
            object_store::Result<object_store::path::Path>,
        >,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&object_store::path::Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &object_store::path::Path,
        to: &object_store::path::Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

impl std::fmt::Display for LosesOneCommitAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LosesOneCommitAnswer({})", self.inner)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_was_lost_keeps_what_it_committed() {
    let tables = tempfile::tempdir().unwrap();
    common::write_tables(tables.path()).await;
    let out = tempfile::tempdir().unwrap();
    let engine = common::engine_with_tables(config(tables.path(), out.path()), tables.path()).await;
    let runtime = &engine.services().runtime;
    let url = datafusion::execution::object_store::ObjectStoreUrl::local_filesystem();
    // From now on the first metadata file written applies, and is answered otherwise.
    let lose_one = |retried: bool| {
        let inner = runtime.object_store(&url).unwrap();
        runtime.register_object_store(
            url.as_ref(),
            std::sync::Arc::new(LosesOneCommitAnswer {
                inner,
                lost: Default::default(),
                retried,
            }),
        );
    };
    // A new table whose creation was answered "already exists" (the retry of its own
    // request found it): its manifest and list stay.
    lose_one(true);
    engine
        .sql("CREATE TABLE t WITH (format = 'ICEBERG') AS SELECT id, k FROM facts WHERE id <= 100")
        .await
        .unwrap();
    let dir = out.path().join("t");
    eventually_the_files(&dir).await;
    assert_eq!(count_and_sum(&engine, "t").await, (100, 5050));
    // An append answered with an error: the scheduler's step fails and runs the commit
    // again, which finds it made.
    lose_one(false);
    let appended = engine
        .sql("INSERT INTO t SELECT id + 1000, k FROM facts WHERE id <= 50")
        .await
        .unwrap();
    assert_eq!(summary(&appended.batches).0, 50);
    assert_eq!(versions(&dir).len(), 2, "committed once");
    eventually_the_files(&dir).await;
    // An append answered "already exists" by its own retried request.
    lose_one(true);
    engine
        .sql("INSERT INTO t SELECT id + 2000, k FROM facts WHERE id <= 10")
        .await
        .unwrap();
    assert_eq!(versions(&dir).len(), 3, "committed once");
    // The manifests and manifest lists the committed versions name are there.
    eventually_the_files(&dir).await;
    assert_eq!(
        count_and_sum(&engine, "t").await,
        (160, 5050 + 51_275 + 20_055)
    );
}
