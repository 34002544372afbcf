//! `lambdafusion query` and `lambdafusion shell` as daily tools: SQL from an argument
//! that starts with a comment, from a file or standard input, several statements in a
//! script, every output format, and the shell's multi-line statements and `\d`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn lambdafusion(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lambdafusion"));
    command
        .current_dir(dir)
        .env("RUST_LOG", "off")
        .env("HOME", dir)
        // The working directory is readable only when named.
        .env("LAMBDAFUSION_ALLOW_PATHS", dir)
        .env_remove("LAMBDAFUSION_ENDPOINT")
        .env_remove("LAMBDAFUSION_DATA_DIR");
    command
}

fn run(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = lambdafusion(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const CREATE: &str = "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 't.csv' \
                      OPTIONS ('format.has_header' 'true')";

fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.csv"), "a,b\n1,x\n2,y\n3,z\n").unwrap();
    dir
}

/// A table defined in a script is the table written: its columns, options and `OR
/// REPLACE` reach the engine (the script's statements were printed again by DataFusion,
/// which drops them: the second run failed "already exists", and the header line was
/// read as a row).
#[test]
fn a_script_defines_its_tables_as_written() {
    let dir = workdir();
    std::fs::write(dir.path().join("s.csv"), "1;x\n2;y\n").unwrap();
    let script = "CREATE OR REPLACE EXTERNAL TABLE s (n BIGINT, name VARCHAR) STORED AS CSV \
                  LOCATION 's.csv' OPTIONS ('format.has_header' 'false', 'format.delimiter' ';');\n\
                  SELECT sum(n) AS total, max(name) AS last FROM s;";
    for _ in 0..2 {
        let out = run(dir.path(), &["query", "--format", "csv", script], "");
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "total,last\n3,y\n");
    }
}

#[test]
fn sql_starting_with_a_comment_is_sql_not_a_flag() {
    let dir = workdir();
    let out = run(
        dir.path(),
        &["query", "-- TPC-H style\nSELECT 41 + 1 AS answer"],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("| 42 "), "{}", text(&out.stdout));
}

#[test]
fn a_script_from_a_file_or_stdin_in_every_format() {
    let dir = workdir();
    let script = format!(
        "-- make the table, then read it\n{CREATE};\nSELECT a, b FROM t WHERE a > 1 ORDER BY a;\n"
    );
    std::fs::write(dir.path().join("q.sql"), &script).unwrap();
    let out = run(dir.path(), &["query", "-f", "q.sql", "--format", "csv"], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "a,b\n2,y\n3,z\n",
        "CSV of the last statement only"
    );

    let out = run(
        dir.path(),
        &["query", "-f", "-", "--format", "json"],
        "SELECT a FROM t ORDER BY a DESC LIMIT 2",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "{\"a\":3}\n{\"a\":2}\n");

    let out = run(
        dir.path(),
        &[
            "query",
            "--format",
            "parquet",
            "--output",
            "out.parquet",
            "SELECT sum(a) AS s FROM t",
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = std::fs::File::open(dir.path().join("out.parquet")).unwrap();
    let reader =
        datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
    let batches: Vec<_> = reader.map(Result::unwrap).collect();
    let s = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .unwrap()
        .value(0);
    assert_eq!(s, 6);

    let out = run(dir.path(), &["query", "-f", "missing.sql"], "");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("missing.sql"),
        "{}",
        text(&out.stderr)
    );
    let out = run(dir.path(), &["query", "-f", "-"], "-- only a comment\n");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no SQL statement"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_shell_runs_multi_line_statements_and_describes_tables() {
    let dir = workdir();
    let input = format!(
        "{CREATE};\nSELECT a,\n       b\n  FROM t\n  ORDER BY a DESC\n  LIMIT 1;\n\\d\n\\d t\n\\d nope\nSELEC 1;\nSELECT 'still here' AS s;\n\\q\nSELECT 'after quit';\n"
    );
    let out = run(dir.path(), &["shell"], &input);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("| 3 | z |"),
        "the multi-line query: {stdout}"
    );
    assert!(stdout.contains("t      CSV     2"), "\\d: {stdout}");
    assert!(
        stdout.contains("a       Int64") && stdout.contains("b       Utf8"),
        "\\d t: {stdout}"
    );
    assert!(stderr.contains("no table nope"), "{stderr}");
    assert!(stderr.contains("SELEC"), "the SQL error is shown: {stderr}");
    assert!(
        stdout.contains("still here"),
        "an error does not end the shell: {stdout}"
    );
    assert!(!stdout.contains("after quit"), "\\q quits: {stdout}");
    let history = std::fs::read_to_string(dir.path().join(".lambdafusion_history")).unwrap();
    assert!(history.contains("still here"), "{history}");
}

/// The same shell against a server (`--endpoint`): statements go over the API, `\d`
/// reads its catalog.
#[test]
fn the_shell_works_against_an_endpoint() {
    let dir = workdir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind = format!("127.0.0.1:{port}");
    let mut server = lambdafusion(dir.path())
        .args(["serve", "--bind", &bind])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = (0..300).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::net::TcpStream::connect(&bind).is_ok()
    });
    let endpoint = format!("http://{bind}");
    let out = up.then(|| {
        run(
            dir.path(),
            &["shell", "--endpoint", &endpoint],
            &format!("{CREATE};\nSELECT max(a) AS top\n  FROM t;\n\\d t\nSELEC 1;\n\\q\n"),
        )
    });
    let _ = server.kill();
    let _ = server.wait();
    let out = out.expect("serve started");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("| 3   |"),
        "the query over the API: {stdout}"
    );
    assert!(
        stdout.contains("a       Int64") && stdout.contains("b       Utf8"),
        "\\d t over the API: {stdout}"
    );
    assert!(
        stderr.contains("SELEC"),
        "the API's SQL error is shown: {stderr}"
    );
}

/// The README's tour: after `demo`, `query` on the same data directory sees its tables.
#[test]
fn the_demo_tables_are_there_for_query_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let demo = run(dir.path(), &["demo", "--sf", "0.01"], "");
    assert!(demo.status.success(), "{}", text(&demo.stderr));
    assert!(
        text(&demo.stdout).contains("identical to single-process DataFusion"),
        "{}",
        text(&demo.stdout)
    );
    let out = run(
        dir.path(),
        &[
            "query",
            "--format",
            "csv",
            "SELECT count(*) AS n FROM nation",
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "n\n25\n");
}

/// `--set` reaches the embedded engine: turning `dimension_joins` off keeps a filtered
/// dimension's join where DataFusion put it (last); a name that is no setting, and a
/// setting sent to an endpoint (whose settings are its own), are refused.
#[test]
fn settings_reach_the_embedded_engine() {
    let dir = workdir();
    std::fs::write(dir.path().join("f.csv"), "k,g,v\n1,10,5\n2,20,6\n").unwrap();
    std::fs::write(dir.path().join("g.csv"), "g,d\n10,1\n20,2\n").unwrap();
    std::fs::write(dir.path().join("d.csv"), "d,name\n1,x\n2,y\n").unwrap();
    let mut script = String::new();
    for table in ["f", "g", "d"] {
        script.push_str(&format!(
            "CREATE OR REPLACE EXTERNAL TABLE {table} STORED AS CSV LOCATION '{table}.csv' \
             OPTIONS ('format.has_header' 'true');\n"
        ));
    }
    script.push_str(
        "EXPLAIN SELECT f.v FROM f JOIN g ON f.g = g.g JOIN d ON g.d = d.d WHERE d.name = 'x'",
    );
    // The first join line of the logical plan: the outermost join.
    let outermost = |extra: &[&str]| {
        let mut args = vec!["query", "--format", "csv"];
        args.extend_from_slice(extra);
        args.push(&script);
        let out = run(dir.path(), &args, "");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        stdout
            .lines()
            .find(|l| l.contains("Inner Join"))
            .map(|l| l.trim().to_string())
            .unwrap_or_else(|| panic!("no join in {stdout}"))
    };
    let kept = outermost(&["--set", "dimension_joins=false"]);
    assert!(kept.contains("g.d = d.d"), "{kept}");
    let moved = outermost(&[]);
    assert!(moved.contains("f.g = g.g"), "{moved}");

    let out = run(dir.path(), &["query", "--set", "no_such=1", "SELECT 1"], "");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no setting is called no_such"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        dir.path(),
        &[
            "query",
            "--endpoint",
            "http://127.0.0.1:9",
            "--set",
            "adaptive=false",
            "SELECT 1",
        ],
        "",
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--set changes the embedded engine"),
        "{}",
        text(&out.stderr)
    );
}
