//! A second, independent engine as oracle: the 22 TPC-H queries and edge cases of our
//! own (NULL semantics, empty inputs, grouping sets, windows, set operations, recursive
//! and scalar subqueries) run through the embedded engine with every stage split into
//! tasks, and their answers are compared with DuckDB's on the same Parquet files
//! (`tests/oracle/duckdb_compare.py`; DuckDB pinned in `local/requirements.txt`).
//! DataFusion is not involved in the check: a bug the engine shares with DataFusion
//! shows here. Known disagreements are listed, with their reason, in the script.

use std::path::{Path, PathBuf};
use std::time::Duration;

use datafusion::parquet::arrow::ArrowWriter;
use lambdafusion::EngineConfig;
use lambdafusion_cli::tpch;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};

/// Edge cases, each with whether its row order is part of its answer. Written in the
/// SQL both engines read alike (no integer division, no dialect functions). A case
/// named `empty_*` is meant to answer no rows; any other must answer some.
const EDGE_CASES: &[(&str, &str, bool)] = &[
    (
        "rollup_nulls",
        "SELECT n_regionkey, count(*) AS n, \
         sum(CASE WHEN n_nationkey % 3 = 0 THEN NULL ELSE n_nationkey END) AS s \
         FROM nation GROUP BY ROLLUP (n_regionkey)",
        false,
    ),
    (
        "grouping_sets",
        "SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS q \
         FROM lineitem GROUP BY GROUPING SETS ((l_returnflag), (l_linestatus), ())",
        false,
    ),
    (
        "not_in_with_null",
        "SELECT count(*) AS n FROM nation WHERE n_nationkey NOT IN \
         (SELECT CASE WHEN r_regionkey = 0 THEN NULL ELSE r_regionkey END FROM region)",
        false,
    ),
    (
        "not_in_without_null",
        "SELECT count(*) AS n FROM nation WHERE n_nationkey NOT IN \
         (SELECT r_regionkey FROM region)",
        false,
    ),
    (
        "not_exists",
        "SELECT count(*) AS n FROM customer c \
         WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.o_custkey = c.c_custkey)",
        false,
    ),
    (
        "exists_with_filter",
        "SELECT c_mktsegment, count(*) AS n FROM customer c WHERE EXISTS \
         (SELECT 1 FROM orders o WHERE o.o_custkey = c.c_custkey AND o.o_totalprice > 400000) \
         GROUP BY c_mktsegment",
        false,
    ),
    (
        "empty_aggregates",
        "SELECT count(*) AS n, sum(l_quantity) AS s, avg(l_quantity) AS a, \
         min(l_shipdate) AS d FROM lineitem WHERE l_quantity < 0",
        false,
    ),
    (
        "empty_group_by",
        "SELECT l_returnflag, count(*) AS n FROM lineitem WHERE l_quantity < 0 \
         GROUP BY l_returnflag",
        false,
    ),
    (
        "count_distinct",
        "SELECT count(DISTINCT l_suppkey) AS s, count(DISTINCT l_partkey) AS p, \
         count(DISTINCT l_shipmode) AS m FROM lineitem",
        false,
    ),
    (
        "window_frames",
        "SELECT o_custkey, o_orderkey, \
         row_number() OVER (PARTITION BY o_custkey ORDER BY o_orderdate, o_orderkey) AS r, \
         sum(o_totalprice) OVER (PARTITION BY o_custkey ORDER BY o_orderdate, o_orderkey \
           ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s, \
         lag(o_orderkey) OVER (PARTITION BY o_custkey ORDER BY o_orderdate, o_orderkey) AS p \
         FROM orders WHERE o_custkey < 200",
        false,
    ),
    (
        "rank_ties",
        "SELECT n_regionkey, n_name, rank() OVER (ORDER BY n_regionkey) AS r, \
         dense_rank() OVER (ORDER BY n_regionkey) AS d FROM nation",
        false,
    ),
    (
        "intersect",
        "SELECT c_nationkey FROM customer INTERSECT SELECT s_nationkey FROM supplier",
        false,
    ),
    (
        "except",
        "SELECT o_custkey FROM orders EXCEPT \
         SELECT c_custkey FROM customer WHERE c_mktsegment = 'BUILDING'",
        false,
    ),
    (
        "union_distinct",
        "SELECT n_regionkey AS k FROM nation UNION SELECT r_regionkey FROM region",
        false,
    ),
    (
        "full_join_nulls",
        "SELECT count(*) AS n, count(n.n_nationkey) AS a, count(s.s_suppkey) AS b \
         FROM nation n FULL JOIN (SELECT * FROM supplier WHERE s_nationkey < 5) s \
         ON n.n_nationkey = s.s_nationkey",
        false,
    ),
    (
        "left_join_filter_in_on",
        "SELECT c.c_custkey, count(o.o_orderkey) AS n FROM customer c LEFT JOIN orders o \
         ON o.o_custkey = c.c_custkey AND o.o_orderstatus = 'F' \
         WHERE c.c_custkey < 300 GROUP BY c.c_custkey",
        false,
    ),
    (
        "nulls_ordered",
        "SELECT CASE WHEN n_nationkey % 4 = 0 THEN NULL ELSE n_nationkey END AS k \
         FROM nation ORDER BY k DESC NULLS FIRST",
        true,
    ),
    (
        "nulls_default_order",
        "SELECT CASE WHEN n_nationkey % 4 = 0 THEN NULL ELSE n_nationkey END AS k \
         FROM nation ORDER BY k DESC",
        true,
    ),
    (
        "scalar_subquery_in_order_by",
        "SELECT n_name FROM nation \
         ORDER BY n_nationkey % (SELECT count(*) FROM region), n_name",
        true,
    ),
    (
        "scalar_subquery_in_aggregate",
        "SELECT l_returnflag, sum(l_quantity - (SELECT min(l_quantity) FROM lineitem)) AS s \
         FROM lineitem GROUP BY l_returnflag",
        false,
    ),
    (
        "recursive_cte",
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 100) \
         SELECT sum(n) AS s, count(*) AS c FROM t",
        false,
    ),
    (
        "strings",
        "SELECT upper(substr(c_name, 1, 8)) AS u, length(c_address) AS l, \
         c_phone LIKE '1%' AS p FROM customer WHERE c_custkey < 40",
        false,
    ),
    (
        "decimal_sum",
        "SELECT l_linestatus, sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS v \
         FROM lineitem GROUP BY l_linestatus",
        false,
    ),
    (
        "having_subquery",
        "SELECT o_orderpriority, count(*) AS n FROM orders GROUP BY o_orderpriority \
         HAVING count(*) > (SELECT count(*) / 10 FROM orders)",
        false,
    ),
];

/// The Python with DuckDB.
fn python() -> PathBuf {
    lambdafusion_tests::test_python("the DuckDB oracle")
}

fn write_answer(path: &Path, out: &lambdafusion_embedded::QueryOutput) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, out.schema.clone(), None).unwrap();
    for batch in &out.batches {
        writer.write(batch).unwrap();
    }
    writer.close().unwrap();
}

#[test]
fn answers_agree_with_duckdb() {
    let python = python();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .thread_stack_size(16 * 1024 * 1024)
        .enable_all()
        .build()
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let answers = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        tpch::generate(data.path(), 0.1, 2, &|_, _| {}).unwrap();
        // Every stage that can be split into tasks is: the distribution is under test.
        let config = EngineConfig::default()
            .with_bytes_per_task(1 << 20)
            .with_min_scan_bytes_per_task(1)
            .with_shuffle_bytes_per_task(64 * 1024)
            .with_data_location(data.path().display().to_string());
        let engine = Embedded::start(EmbeddedOptions {
            data_dir: None,
            config,
            slots: 8,
            ..EmbeddedOptions::default()
        })
        .await
        .unwrap();
        for sql in tpch::create_statements(&data.path().display().to_string()) {
            engine.sql(&sql).await.unwrap();
        }
        let mut cases: Vec<(String, String, bool)> = (1..=22)
            .map(|q| {
                let sql = tpch::query(q).to_string();
                // At SF 0.1 no order holds more than 313 units: Q18 would be empty.
                let sql = if q == 18 {
                    sql.replace("> 313", "> 200")
                } else {
                    sql
                };
                (format!("tpch_q{q:02}"), sql, tpch::is_ordered(q))
            })
            .collect();
        cases.extend(
            EDGE_CASES
                .iter()
                .map(|(name, sql, ordered)| (name.to_string(), sql.to_string(), *ordered)),
        );
        for (name, sql, ordered) in cases {
            let out = tokio::time::timeout(Duration::from_secs(120), engine.sql(&sql))
                .await
                .unwrap_or_else(|_| panic!("{name}: timed out"))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let dir = answers.path();
            std::fs::write(dir.join(format!("{name}.sql")), &sql).unwrap();
            write_answer(&dir.join(format!("{name}.parquet")), &out);
            if ordered {
                std::fs::write(dir.join(format!("{name}.ordered")), "").unwrap();
            }
        }
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("oracle/duckdb_compare.py");
    let output = std::process::Command::new(&python)
        .arg(&script)
        .arg(data.path())
        .arg(answers.path())
        .output()
        .expect("python runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{report}");
    assert!(output.status.success(), "{report}");
}

/// What `COPY` writes — Parquet partitioned into directories, CSV, JSON, each by several
/// tasks — read back by DuckDB (`tests/oracle/duckdb_read_back.py`) and compared with
/// DuckDB's own answer on the source tables.
#[test]
fn written_files_read_back_by_duckdb() {
    let python = python();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        tpch::generate(data.path(), 0.01, 2, &|_, _| {}).unwrap();
        let config = EngineConfig::default()
            .with_bytes_per_task(16 * 1024)
            .with_min_scan_bytes_per_task(1)
            .with_data_location(data.path().display().to_string())
            .with_write_location(out.path().display().to_string());
        let engine = Embedded::start(EmbeddedOptions {
            data_dir: None,
            config,
            slots: 4,
            ..EmbeddedOptions::default()
        })
        .await
        .unwrap();
        for sql in tpch::create_statements(&data.path().display().to_string()) {
            engine.sql(&sql).await.unwrap();
        }
        let o = out.path().display();
        for sql in [
            format!(
                "COPY (SELECT l_orderkey, l_linenumber, l_quantity, l_extendedprice, l_shipmode \
                 FROM lineitem) TO '{o}/li/' STORED AS PARQUET PARTITIONED BY (l_shipmode)"
            ),
            format!(
                "COPY (SELECT o_orderkey, o_custkey, o_totalprice, o_orderdate FROM orders) \
                 TO '{o}/orders_csv/' STORED AS CSV"
            ),
            format!(
                "COPY (SELECT l_orderkey, l_comment, l_extendedprice FROM lineitem \
                 WHERE l_linenumber = 1) TO '{o}/li_json/' STORED AS JSON"
            ),
        ] {
            let written = engine
                .sql(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            let tasks = written.status.stages.last().map_or(0, |s| s.tasks);
            assert!(tasks > 1, "{sql}: written by {tasks} task(s)");
        }
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("oracle/duckdb_read_back.py");
    let output = std::process::Command::new(&python)
        .arg(&script)
        .arg(data.path())
        .arg(out.path())
        .output()
        .expect("python runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{report}");
    assert!(output.status.success(), "{report}");
    assert_eq!(report.matches("ok: ").count(), 3, "{report}");
}
