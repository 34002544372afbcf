//! Views: `CREATE [OR REPLACE] VIEW`, `DROP VIEW`, kept in the catalog and planned again
//! at every query that reads them, checked against DataFusion's own views over the same
//! files; and what a view may not be.

use std::path::Path;
use std::sync::Arc;

use datafusion::prelude::SessionContext;
use lambdafusion::EngineConfig;
use lambdafusion_embedded::Embedded;

use crate::common;

/// Views over views, a join and an aggregate, in the order they are created.
const VIEWS: &[&str] = &[
    "CREATE VIEW big AS SELECT id, k, v FROM facts WHERE v > 100",
    "CREATE VIEW labelled AS SELECT b.id, b.v, d.label FROM big b JOIN dims d ON b.k = d.k",
    "CREATE VIEW per_label AS SELECT label, count(*) AS n, sum(v) AS total FROM labelled \
     GROUP BY label",
];

async fn engine(dir: &Path) -> Arc<Embedded> {
    // Small tasks: the queries under the views run as several stages.
    let config = EngineConfig::default()
        .with_bytes_per_task(common::dir_bytes(&dir.join("facts")).div_ceil(3))
        .with_min_scan_bytes_per_task(1)
        .with_max_tasks_per_stage(4);
    common::engine_with_tables(config, dir).await
}

/// DataFusion with the same tables and `views`.
async fn reference(dir: &Path, views: &[&str]) -> SessionContext {
    let ctx = SessionContext::new_with_config(
        datafusion::prelude::SessionConfig::new().with_information_schema(true),
    );
    common::register_parquet(&ctx, dir).await;
    for view in views {
        ctx.sql(view).await.unwrap().collect().await.unwrap();
    }
    ctx
}

async fn check(engine: &Embedded, ctx: &SessionContext, sql: &str, ordered: bool) {
    let out = engine
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let expected = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    if let Err(diff) = lambdafusion_embedded::verify::compare(&expected, &out.batches, ordered) {
        panic!("{sql}\n{diff}");
    }
}

async fn refused(engine: &Embedded, sql: &str, says: &str) {
    let e = engine
        .sql(sql)
        .await
        .err()
        .unwrap_or_else(|| panic!("{sql} was accepted"));
    assert!(e.to_string().contains(says), "{sql}: {e}");
}

/// Views over views, joins and aggregates answer as DataFusion's, through the stages of
/// the tables under them; they are listed as views; replacing one changes what its
/// readers see; and each kind of entry is dropped and replaced only by its own statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_answer_as_datafusion_and_live_in_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    common::write_tables(dir.path()).await;
    let engine = engine(dir.path()).await;
    for view in VIEWS {
        let out = engine.sql(view).await.unwrap();
        let text = format!("{:?}", out.batches);
        assert!(text.contains("created"), "{view}: {text}");
    }
    let ctx = reference(dir.path(), VIEWS).await;
    for (sql, ordered) in [
        ("SELECT * FROM per_label ORDER BY label", true),
        ("SELECT count(*), sum(v) FROM big", false),
        (
            "SELECT label, n FROM per_label WHERE n > 100 ORDER BY n DESC, label LIMIT 5",
            true,
        ),
        (
            "SELECT f.k, count(*) AS n FROM facts f JOIN big b ON f.id = b.id GROUP BY f.k \
             ORDER BY f.k",
            true,
        ),
        (
            "SELECT label FROM labelled WHERE id IN (SELECT id FROM big WHERE k = 3) \
             ORDER BY label LIMIT 10",
            true,
        ),
    ] {
        check(&engine, &ctx, sql, ordered).await;
    }
    // A query over a view runs the stages of the tables under it.
    let out = engine.sql("SELECT * FROM per_label").await.unwrap();
    assert!(out.status.stages.len() >= 2, "{:?}", out.status.stages);

    // Listed, as views.
    check(
        &engine,
        &ctx,
        "SELECT table_name, table_type FROM information_schema.tables \
         WHERE table_schema = 'public' ORDER BY table_name",
        true,
    )
    .await;

    // Replaced: its readers see the new definition, as in Athena (a view is its SQL) and
    // PostgreSQL. DataFusion's own views keep the plan of the views under them as they
    // were, so the reference creates the chain again over the new one.
    let replace = "CREATE OR REPLACE VIEW big AS SELECT id, k, v FROM facts WHERE v > 40000";
    engine.sql(replace).await.unwrap();
    let ctx = reference(dir.path(), &[replace, VIEWS[1], VIEWS[2]]).await;
    check(
        &engine,
        &ctx,
        "SELECT * FROM per_label ORDER BY label",
        true,
    )
    .await;

    // Each statement for its own kind of entry.
    refused(&engine, VIEWS[0], "already exists").await;
    refused(
        &engine,
        "DROP TABLE big",
        "is a view, not a table: DROP VIEW big",
    )
    .await;
    refused(&engine, "DROP VIEW facts", "is a table, not a view").await;
    refused(&engine, "CREATE VIEW facts AS SELECT 1", "is a table").await;
    refused(
        &engine,
        &format!(
            "CREATE OR REPLACE EXTERNAL TABLE labelled STORED AS PARQUET LOCATION '{}'",
            dir.path().join("dims").display()
        ),
        "labelled is a view: a table cannot replace it (DROP VIEW labelled first)",
    )
    .await;
    refused(
        &engine,
        "CREATE TEMPORARY VIEW t AS SELECT 1",
        "temporary views",
    )
    .await;
    refused(
        &engine,
        "CREATE VIEW tables AS SELECT * FROM information_schema.tables",
        "information_schema",
    )
    .await;
    refused(
        &engine,
        "CREATE VIEW q AS SELECT * FROM datafusion.public.facts",
        "unqualified name",
    )
    .await;
    refused(
        &engine,
        "EXPLAIN CREATE VIEW e AS SELECT 1",
        "statements of their own",
    )
    .await;
    refused(
        &engine,
        "SELECT * FROM big@v1",
        "is a view: VERSION AS OF and TIMESTAMP AS OF read Delta and Iceberg tables only",
    )
    .await;

    // Dropped: gone from the catalog, and its readers say what they miss.
    engine.sql("DROP VIEW per_label").await.unwrap();
    refused(&engine, "SELECT * FROM per_label", "per_label").await;
    let out = engine.sql("DROP VIEW IF EXISTS per_label").await.unwrap();
    assert!(format!("{:?}", out.batches).contains("does not exist"));
    refused(
        &engine,
        "DROP VIEW per_label",
        "view per_label does not exist",
    )
    .await;
}

/// A view made to read itself (`CREATE OR REPLACE VIEW` over its own old definition) is
/// refused by name when read, not followed until the stack overflows; and a view whose
/// tables changed under it says so instead of answering with other columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_that_reads_itself_or_whose_tables_changed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    common::write_tables(dir.path()).await;
    let engine = engine(dir.path()).await;
    engine
        .sql("CREATE VIEW a AS SELECT id, k FROM facts")
        .await
        .unwrap();
    engine
        .sql("CREATE VIEW b AS SELECT id, k FROM a")
        .await
        .unwrap();
    // Planned over a's old definition, so it is accepted; read, it never ends.
    engine
        .sql("CREATE OR REPLACE VIEW a AS SELECT id, k FROM b")
        .await
        .unwrap();
    refused(
        &engine,
        "SELECT count(*) FROM b",
        "read through more than 16 views",
    )
    .await;
    refused(&engine, "SELECT count(*) FROM a", "does a view read itself").await;

    // The table under a view is replaced with other columns.
    engine
        .sql("CREATE VIEW d AS SELECT k, label FROM dims")
        .await
        .unwrap();
    engine
        .sql(&format!(
            "CREATE OR REPLACE EXTERNAL TABLE dims STORED AS PARQUET LOCATION '{}'",
            dir.path().join("facts").display()
        ))
        .await
        .unwrap();
    refused(&engine, "SELECT * FROM d", "label").await;
}
