//! Apache Iceberg tables written by PyIceberg (`tests/iceberg/fixtures.py`: a SQL catalog
//! on sqlite, a local warehouse; a table partitioned by identity and day transforms with
//! appends, a copy-on-write delete and an added column; an unpartitioned one; one with
//! merge-on-read position delete files; columns renamed, reused and promoted; a struct's
//! field renamed; equality delete files), read through the embedded engine with every scan
//! split into tasks and compared with DuckDB's answer over PyIceberg's own reading of each
//! snapshot (for equality deletes, which PyIceberg does not read, over the rows written). The errors a user
//! meets — and metadata that points outside its table — are checked here too.

use std::path::Path;
use std::sync::Arc;

use lambdafusion::EngineConfig;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};
use lambdafusion_tests::delta::Fixtures;

fn fixtures(dir: &Path) -> Fixtures {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("iceberg/fixtures.py");
    Fixtures::written_by(&script, dir)
}

async fn engine(dir: &Path) -> Arc<Embedded> {
    engine_with(dir, Default::default()).await
}

async fn engine_with(dir: &Path, faults: lambdafusion::faults::Faults) -> Arc<Embedded> {
    let mut config = EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_shuffle_bytes_per_task(1)
        .with_max_tasks_per_stage(6)
        .with_data_location(dir.display().to_string());
    config.speculation = false;
    Embedded::start(EmbeddedOptions {
        data_dir: None,
        config,
        slots: 8,
        faults,
        ..EmbeddedOptions::default()
    })
    .await
    .unwrap()
}

fn location(fixtures: &Fixtures, name: &str) -> String {
    fixtures
        .tables
        .iter()
        .find(|(n, _)| n == name)
        .unwrap()
        .1
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn iceberg_tables_answer_as_pyiceberg_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let fixtures = fixtures(&root);
    let engine = engine(&root).await;
    for name in [
        "events",
        "plain",
        "mor",
        "evolved",
        "equality",
        "transforms",
    ] {
        engine
            .sql(&format!(
                "CREATE EXTERNAL TABLE {name} STORED AS ICEBERG LOCATION '{}'",
                location(&fixtures, name)
            ))
            .await
            .unwrap_or_else(|e| panic!("registering {name}: {e}"));
    }
    let failures = fixtures.failures(&engine).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The scan was split: the partitioned table's files over several tasks.
    let out = engine.sql("SELECT count(*) FROM events").await.unwrap();
    assert!(out.status.stages[0].tasks > 1, "{:?}", out.status.stages[0]);
    // The table's directory works as well as its metadata file: the newest metadata.
    let table_dir = root.join("warehouse/lake/events");
    engine
        .sql(&format!(
            "CREATE EXTERNAL TABLE events_dir STORED AS ICEBERG LOCATION '{}'",
            table_dir.display()
        ))
        .await
        .unwrap();
    let a = engine
        .sql("SELECT count(*), sum(amount) FROM events")
        .await
        .unwrap();
    let b = engine
        .sql("SELECT count(*), sum(amount) FROM events_dir")
        .await
        .unwrap();
    lambdafusion_embedded::verify::compare(&a.batches, &b.batches, true).unwrap();
    // The manifests' column bounds skip files before any task starts: ids of 800 and more
    // were written in the last append only, so its files alone are planned.
    let planned = |sql: &'static str| {
        let engine = engine.clone();
        async move {
            let explained = engine.sql(&format!("EXPLAIN {sql}")).await.unwrap();
            let text = format!(
                "{:?}",
                lambdafusion_embedded::verify::rows(&explained.batches)
            );
            let mut files: Vec<&str> = text
                .split(|c: char| c.is_whitespace() || "[],\\\"".contains(c))
                .filter_map(|w| w.split(':').next())
                .filter(|w| w.ends_with(".parquet"))
                .collect();
            files.sort_unstable();
            files.dedup();
            (files.len(), text)
        }
    };
    let (all, _) = planned("SELECT count(*) FROM events").await;
    let (late, text) = planned("SELECT count(*) FROM events WHERE id >= 800").await;
    assert!(
        all > late && late > 0,
        "{all} files, {late} after pruning: {text}"
    );
    let (none, text) = planned("SELECT count(*) FROM events WHERE id > 100000").await;
    assert_eq!(none, 0, "{text}");
    // Position deletes are applied in the tasks that read the files they name.
    let explained = engine
        .sql("EXPLAIN SELECT count(*) FROM mor WHERE id > 0")
        .await
        .unwrap();
    let text = format!(
        "{:?}",
        lambdafusion_embedded::verify::rows(&explained.batches)
    );
    assert!(
        text.contains("FormatScanExec: files_with_deletions=2"),
        "{text}"
    );
    // Equality deletes too, the key column read though not selected.
    let explained = engine.sql("EXPLAIN SELECT id FROM equality").await.unwrap();
    let text = format!(
        "{:?}",
        lambdafusion_embedded::verify::rows(&explained.batches)
    );
    assert!(text.contains("equality_delete_files=2"), "{text}");
    // The columns are the snapshot's schema's, the added one included.
    let described = engine.sql("DESCRIBE events").await.unwrap();
    assert_eq!(
        lambdafusion_embedded::verify::rows(&described.batches).len(),
        6
    );
}

/// The snapshot is resolved once, when the query is planned: a commit while its tasks run
/// (PyIceberg deleting every row of a table read through its directory, so the next query
/// finds the new metadata) changes nothing they read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_iceberg_query_keeps_its_snapshot_while_the_table_is_committed_to() {
    use lambdafusion::faults::{FaultPlan, Faults};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let _fixtures = fixtures(&root);
    // Every task of the scan waits 2 s more than it takes: the commit lands meanwhile.
    let slow = r#"{"faults": {"executor.slow_task": {"factor": 1, "ms": 2000}}}"#;
    let engine = engine_with(&root, Faults::in_process(FaultPlan::parse(slow).unwrap())).await;
    let table = root.join("warehouse/lake/plain");
    engine
        .sql(&format!(
            "CREATE EXTERNAL TABLE plain STORED AS ICEBERG LOCATION '{}'",
            table.display()
        ))
        .await
        .unwrap();
    let sql = "SELECT count(*) AS n, sum(k) AS s FROM plain";
    let id = engine.submit(sql).await.unwrap();
    let commit = "import sys; from pyiceberg.catalog.sql import SqlCatalog; \
        c = SqlCatalog('fixtures', uri=f'sqlite:///{sys.argv[1]}/catalog.db', \
        warehouse=f'file://{sys.argv[1]}/warehouse'); \
        c.load_table('lake.plain').delete('k >= 0')";
    lambdafusion_tests::delta::python(&["-c".as_ref(), commit.as_ref(), root.as_os_str()]);
    let out = engine
        .finish(&id, std::time::Duration::from_secs(120), |_| {})
        .await
        .unwrap();
    let text = |cells: &Vec<lambdafusion_embedded::verify::Cell>| format!("{cells:?}");
    assert_eq!(
        text(&lambdafusion_embedded::verify::rows(&out.batches)[0]),
        r#"[Text("50"), Text("1225")]"#
    );
    // The next query plans the new snapshot: nothing is left.
    let after = engine.sql(sql).await.unwrap();
    assert_eq!(
        text(&lambdafusion_embedded::verify::rows(&after.batches)[0]),
        r#"[Text("0"), Text("NULL")]"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn iceberg_tables_lambdafusion_cannot_read_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let fixtures = fixtures(&root);
    let engine = engine(&root).await;
    let create = |name: &str, location: &str| {
        format!("CREATE EXTERNAL TABLE {name} STORED AS ICEBERG LOCATION '{location}'")
    };
    let refused = |sql: String, why: &'static str| {
        let engine = engine.clone();
        async move {
            let err = engine.sql(&sql).await.map(|_| ()).expect_err(&sql);
            assert!(err.is_user_error(), "{sql}: {err}");
            assert!(err.to_string().contains(why), "{sql}: {err}");
        }
    };
    // A field inside a struct renamed: not read yet, refused.
    refused(
        create("nested_renamed", &location(&fixtures, "nested_renamed")),
        "field x of the struct column with id 1 was renamed to y",
    )
    .await;
    // Format version 3, and metadata that is not Iceberg's.
    let events = location(&fixtures, "events");
    let text = std::fs::read_to_string(events.trim_start_matches("file://")).unwrap();
    let v3_dir = root.join("v3/metadata");
    std::fs::create_dir_all(&v3_dir).unwrap();
    let v3 = v3_dir.join("00001-a.metadata.json");
    let mut metadata: serde_json::Value = serde_json::from_str(&text).unwrap();
    metadata["format-version"] = 3.into();
    std::fs::write(&v3, metadata.to_string()).unwrap();
    refused(
        create("v3", &v3.display().to_string()),
        "format version 3 is not supported",
    )
    .await;
    let junk = v3_dir.join("00002-b.metadata.json");
    std::fs::write(&junk, "{\"hello\": 1}").unwrap();
    refused(
        create("junk", &junk.display().to_string()),
        "is not Iceberg table metadata",
    )
    .await;
    // Metadata that names files outside its own table directory (here: another table's
    // manifest list, by absolute path) is refused before anything is read.
    let evil_dir = root.join("evil/metadata");
    std::fs::create_dir_all(&evil_dir).unwrap();
    let evil = evil_dir.join("00001-c.metadata.json");
    std::fs::write(&evil, &text).unwrap();
    refused(
        create("evil", &evil.display().to_string()),
        "lies outside the table's directory",
    )
    .await;
    // Outside the allowed locations, and no table at all.
    refused(create("etc", "/etc"), "outside the locations").await;
    refused(
        create("nothing", &root.join("nothing").display().to_string()),
        "no Iceberg table at",
    )
    .await;
    // Columns are the metadata's to declare.
    refused(
        format!(
            "CREATE EXTERNAL TABLE t (a INT) STORED AS ICEBERG LOCATION '{}'",
            location(&fixtures, "plain")
        ),
        "come from its metadata",
    )
    .await;
    // A snapshot the table does not have.
    engine
        .sql(&create("plain", &location(&fixtures, "plain")))
        .await
        .unwrap();
    refused(
        "SELECT * FROM plain VERSION AS OF 42".into(),
        "it has no snapshot 42",
    )
    .await;
}

/// Planning over an Iceberg table of 10,000 data files in 100 manifests
/// (`tests/iceberg/many_files.py`, PyIceberg's `add_files`): each query's planning time is
/// printed (the figure docs/tables.md quotes). `EXPLAIN` plans without reading a data file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn measure_planning_a_snapshot_of_10000_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("iceberg/many_files.py");
    let out = std::process::Command::new(lambdafusion_tests::test_python("the Iceberg tests"))
        .arg(&script)
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let engine = engine(&root).await;
    engine
        .sql(&format!(
            "CREATE EXTERNAL TABLE big STORED AS ICEBERG LOCATION '{metadata}'"
        ))
        .await
        .unwrap();
    for sql in [
        "EXPLAIN SELECT count(*) FROM big",
        "EXPLAIN SELECT count(*) FROM big WHERE id < 500000",
    ] {
        for round in 0..3 {
            let started = std::time::Instant::now();
            engine.sql(sql).await.unwrap();
            println!("{sql}: round {round}: {:?}", started.elapsed());
        }
    }
}

/// An Iceberg table this engine writes (created partitioned by a date and a string, then
/// appended to by a query, by VALUES, and by a run of one-row appends), read by PyIceberg:
/// every snapshot equals lambdafusion's reading of it, and PyIceberg's scans that prune by
/// the written bounds and partition summaries lose no row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tables_lambdafusion_writes_are_read_by_pyiceberg() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let out = root.join("out");
    let config =
        crate::delta_tables::split_everything().with_write_location(out.display().to_string());
    let engine = crate::delta_tables::engine(config, &root, Default::default()).await;
    crate::delta_tables::register_source(&engine, &out).await;
    let created = engine
        .sql(
            "CREATE TABLE w WITH (format = 'ICEBERG', partitioned_by = ARRAY['day', 'kind']) AS \
             SELECT * FROM source WHERE id <= 4000",
        )
        .await
        .unwrap();
    let writers = created.status.stages.last().map_or(0, |s| s.tasks);
    assert!(writers > 1, "written by {writers} task(s)");
    engine
        .sql("INSERT INTO w SELECT * FROM source WHERE id > 4000")
        .await
        .unwrap();
    engine
        .sql(
            "INSERT INTO w VALUES (7000, 0.5, 'o''brien', 1.25, \
             TIMESTAMP '2026-02-03 04:05:06.789', DATE '2026-03-04', '%2F..'), \
             (7001, 0.25, '', 3.5, NULL, NULL, '')",
        )
        .await
        .unwrap();
    for i in 0..3 {
        engine
            .sql(&format!(
                "INSERT INTO w VALUES ({}, 1.0, 'n', 2.00, TIMESTAMP '2026-05-06 07:08:09', \
                 DATE '2026-01-02', 'k/1')",
                8000 + i
            ))
            .await
            .unwrap();
    }
    let columns = "id,x,name,amount,ts,day,kind";
    let answers = root.join("answers");
    std::fs::create_dir_all(&answers).unwrap();
    let report = std::process::Command::new(lambdafusion_tests::test_python("the Iceberg tests"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("iceberg/read_back.py"))
        .arg(out.join("w/metadata/v6.metadata.json"))
        .arg(&answers)
        .arg(columns)
        .output()
        .expect("python runs");
    assert!(
        report.status.success(),
        "PyIceberg could not read the table:\n{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["format_version"], 2, "{report}");
    assert_eq!(
        report["spec"],
        serde_json::json!([["day", "identity"], ["kind", "identity"]])
    );
    assert_eq!(
        report["field_ids"],
        serde_json::json!([1, 2, 3, 4, 5, 6, 7])
    );
    let snapshots = report["snapshots"].as_array().unwrap();
    assert_eq!(snapshots.len(), 6, "{report}");
    for (i, snapshot) in snapshots.iter().enumerate() {
        let theirs = crate::delta_tables::read_answer(&answers.join(format!("s{i}.parquet"))).await;
        let ours = engine
            .sql(&format!("SELECT {columns} FROM w VERSION AS OF {snapshot}"))
            .await
            .unwrap();
        let rows: usize = ours.batches.iter().map(|b| b.num_rows()).sum();
        let want = [4000, 6000, 6002][..].get(i).copied();
        assert_eq!(rows, want.unwrap_or(6002 + i - 2), "snapshot {i}");
        if let Err(diff) = lambdafusion_embedded::verify::compare(&theirs, &ours.batches, false) {
            panic!("snapshot {i}: PyIceberg reads otherwise:\n{diff}");
        }
    }
    // PyIceberg skips files by the bounds and partition values written: a wrong one would
    // lose rows. Both scans plan fewer files than the table has.
    let files = report["files"].as_u64().unwrap();
    for (answer, filter, planned) in [
        ("filtered", "id > 5000", "files_by_id"),
        ("partition", "kind = 'k/1'", "files_by_kind"),
    ] {
        let theirs =
            crate::delta_tables::read_answer(&answers.join(format!("{answer}.parquet"))).await;
        let ours = engine
            .sql(&format!("SELECT {columns} FROM w WHERE {filter}"))
            .await
            .unwrap();
        assert!(ours.batches.iter().map(|b| b.num_rows()).sum::<usize>() > 0);
        if let Err(diff) = lambdafusion_embedded::verify::compare(&theirs, &ours.batches, false) {
            panic!("{filter}: PyIceberg reads otherwise:\n{diff}");
        }
        let planned = report[planned].as_u64().unwrap();
        assert!(
            planned < files,
            "{filter}: {planned} of {files} files planned"
        );
    }
}
