//! Hostile input against `lambdafusion serve`, as an attacker would send it: statements
//! that would write files, statements deep or large enough to exhaust a stack, memory
//! or time, foreign Host headers and pages, widened globs, the serve directory, guessed
//! tokens. Each is refused with a 4xx naming the rule, nothing is written or read that
//! should not be, and the server answers `SELECT 1` afterwards.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `serve` in `cwd` with `args`; waits until it serves.
    fn start(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_lambdafusion"));
        command
            .arg("serve")
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args(args)
            .current_dir(cwd)
            .env_remove("LAMBDAFUSION_TOKEN")
            .env_remove("LAMBDAFUSION_ALLOW_PATHS")
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("lambdafusion serving on") {
                    let _ = ready_tx.send(());
                }
            }
        });
        ready
            .recv_timeout(Duration::from_secs(60))
            .expect("serve started");
        Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The most memory the server has held (VmHWM), in MiB.
    fn peak_rss_mb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server is running");
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .expect("VmHWM")
            / 1024
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

/// Posts `sql` (with a time limit) and returns the status and body.
async fn submit(server: &Server, sql: &str, max_seconds: Option<f64>) -> (u16, Value) {
    let mut body = json!({ "sql": sql });
    if let Some(s) = max_seconds {
        body["max_seconds"] = json!(s);
    }
    let response = reqwest::Client::new()
        .post(format!("{}/v1/queries", server.url))
        .json(&body)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Runs `sql` to its end: Ok(result JSON rows) or Err((status, message)) — a refusal at
/// submission, or the message of a query that failed.
async fn run(server: &Server, sql: &str) -> Result<Value, (u16, String)> {
    let (status, body) = submit(server, sql, None).await;
    if status != 202 {
        return Err((
            status,
            body["error"]["message"].as_str().unwrap_or("").into(),
        ));
    }
    let id = body["id"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    let state: Value = http
        .get(format!("{}/v1/queries/{id}?wait=20", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    if state["state"] != "succeeded" {
        return Err((200, state["error"].as_str().unwrap_or("").to_string()));
    }
    Ok(http
        .get(format!("{}/v1/queries/{id}/result", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap())
}

async fn still_answers(server: &mut Server) {
    assert!(server.alive(), "the server died");
    let rows = run(server, "SELECT 1 AS one").await.expect("SELECT 1 runs");
    assert_eq!(rows, json!([{"one": 1}]));
}

/// A directory to serve from, with tables under `data/` and a secret beside it.
struct Scene {
    _dir: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
    state: PathBuf,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let data = root.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("public_1.csv"), "who,n\npublic,1\n").unwrap();
    std::fs::write(data.join("public_2.csv"), "who,n\npublic,2\n").unwrap();
    std::fs::write(data.join("private.csv"), "who,n\nprivate,3\n").unwrap();
    std::fs::write(root.join("secret.csv"), "who,n\nsecret,4\n").unwrap();
    let state = root.join("state");
    Scene {
        _dir: dir,
        root,
        data,
        state,
    }
}

fn start(scene: &Scene, extra: &[&str]) -> Server {
    let mut args = vec![
        "--data-dir",
        scene.state.to_str().unwrap(),
        "--allow-path",
        scene.data.to_str().unwrap(),
        "--memory-limit-mb",
        "512",
    ];
    args.extend_from_slice(extra);
    Server::start(&scene.root, &args, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_that_write_are_refused_wherever_they_stand() {
    let scene = scene();
    let mut server = start(&scene, &[]);
    let table = format!(
        "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '{}/public_1.csv' \
         OPTIONS ('format.has_header' 'true')",
        scene.data.display()
    );
    run(&server, &table).await.unwrap();
    let before = std::fs::read(scene.data.join("public_1.csv")).unwrap();
    let targets = [
        scene.root.join(".bashrc"),
        scene.data.join("public_1.csv"),
        scene.state.join("state.redb"),
        scene.state.join("shuffle/pwned.csv"),
        scene.data.join("new.csv"),
    ];
    for target in &targets {
        let target = target.display();
        for sql in [
            format!(
                "EXPLAIN ANALYZE COPY (SELECT 'echo PWNED' AS \"#!/bin/sh\") TO '{target}' \
                 STORED AS CSV"
            ),
            format!("EXPLAIN COPY (SELECT 1 AS x) TO '{target}' STORED AS CSV"),
            format!("EXPLAIN VERBOSE COPY (SELECT 1 AS x) TO '{target}' STORED AS CSV"),
            format!("COPY (SELECT 1 AS x) TO '{target}' STORED AS CSV"),
            format!("COPY (WITH w AS (SELECT 1 AS x) SELECT * FROM w) TO '{target}' STORED AS CSV"),
        ] {
            let (status, body) = submit(&server, &sql, None).await;
            assert_eq!(status, 400, "{sql}: {body}");
            let message = body["error"]["message"].as_str().unwrap();
            // Refused as a nested COPY, as a one-file target, or as outside the write
            // locations (this server has none).
            assert!(
                message.contains("COPY") || message.contains("write"),
                "{sql}: {message}"
            );
        }
    }
    for sql in [
        "EXPLAIN ANALYZE INSERT INTO t VALUES ('x', 9)",
        "INSERT INTO t SELECT * FROM t",
        "EXPLAIN ANALYZE CREATE TABLE u AS SELECT 1",
        "EXPLAIN ANALYZE CREATE VIEW v AS SELECT 1",
        "EXPLAIN CREATE EXTERNAL TABLE w STORED AS CSV LOCATION '/etc/hostname'",
        "EXPLAIN ANALYZE SET datafusion.execution.batch_size = 1",
    ] {
        let (status, body) = submit(&server, sql, None).await;
        assert_eq!(status, 400, "{sql}: {body}");
    }
    assert!(!scene.root.join(".bashrc").exists());
    assert!(!scene.data.join("new.csv").exists());
    assert!(!scene.state.join("shuffle/pwned.csv").exists());
    assert_eq!(
        std::fs::read(scene.data.join("public_1.csv")).unwrap(),
        before
    );
    still_answers(&mut server).await;
    // The job store is intact: the server starts again on it, and the table is there.
    drop(server);
    let mut again = start(&scene, &[]);
    let rows = run(&again, "SELECT count(*) AS n FROM t").await.unwrap();
    assert_eq!(rows, json!([{"n": 1}]));
    still_answers(&mut again).await;

    // With a write location: `..` and a symlink out of it are refused, and nothing is
    // written outside it; inside it, COPY writes.
    drop(again);
    let out = scene.root.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::os::unix::fs::symlink(&scene.data, out.join("link")).unwrap();
    let mut writer = start(&scene, &["--allow-write", out.to_str().unwrap()]);
    for target in [
        format!("{}/../escape/", out.display()),
        format!("{}/link/x/", out.display()),
        format!("{}/", scene.state.join("shuffle").display()),
    ] {
        let sql = format!("COPY (SELECT 1 AS x) TO '{target}' STORED AS CSV");
        let (status, body) = submit(&writer, &sql, None).await;
        assert_eq!(status, 400, "{sql}: {body}");
    }
    assert!(!scene.root.join("escape").exists());
    assert!(!scene.data.join("x").exists());
    let sql = format!(
        "COPY (SELECT 1 AS x) TO '{}/fine/' STORED AS CSV",
        out.display()
    );
    run(&writer, &sql).await.unwrap();
    assert!(out.join("fine/_SUCCESS").exists());
    still_answers(&mut writer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_large_and_costly_statements_are_refused_within_their_limits() {
    let scene = scene();
    let mut server = start(&scene, &[]);
    let table = format!(
        "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '{}/public_1.csv' \
         OPTIONS ('format.has_header' 'true')",
        scene.data.display()
    );
    run(&server, &table).await.unwrap();
    let chain = |n: usize, term: &str, op: &str| vec![term; n].join(op);
    let deep = [
        format!("SELECT {} FROM t", chain(3000, "n", "+")),
        format!("SELECT {}", chain(3000, "'x'", " || ")),
        format!("SELECT * FROM t WHERE {}", chain(3000, "n = 1", " AND ")),
        format!(
            "SELECT * FROM t WHERE {}",
            (0..3000)
                .map(|i| format!("n <> {i}"))
                .collect::<Vec<_>>()
                .join(" AND ")
        ),
        chain(3000, "SELECT 1", " UNION ALL "),
        format!("SELECT {}", chain(5000, "1", "+")),
        format!("SELECT {}", chain(100_000, "1", "+")),
        format!("SELECT {}1{}", "(".repeat(5000), ")".repeat(5000)),
        format!("SELECT 1 FROM t {}", "JOIN t t2 USING (n) ".repeat(1200)),
    ];
    for sql in &deep {
        let started = Instant::now();
        let (status, body) = submit(&server, sql, None).await;
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            matches!(status, 400 | 413),
            "{} bytes: {status} {body}",
            sql.len()
        );
        assert!(
            message.contains("max_sql_depth")
                || message.contains("recursion limit")
                || message.contains("at most"),
            "{message}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(server.alive(), "{} bytes killed the server", sql.len());
    }
    // Within the limit a long chain runs, and gives DataFusion's answer.
    let rows = run(&server, &format!("SELECT {} AS s", chain(500, "1", "+")))
        .await
        .unwrap();
    assert_eq!(rows, json!([{"s": 500}]));

    // A huge value from a 40-byte statement: refused by the function's bound, at once.
    let started = Instant::now();
    let refusal = match submit(&server, "SELECT length(repeat('x', 2147483647))", Some(2.0)).await {
        (202, body) => {
            let id = body["id"].as_str().unwrap();
            let state: Value = reqwest::get(format!("{}/v1/queries/{id}?wait=10", server.url))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(state["state"], "failed", "{state}");
            state["error"].as_str().unwrap().to_string()
        }
        (status, body) => {
            assert_eq!(status, 400, "{body}");
            body["error"]["message"].as_str().unwrap().to_string()
        }
    };
    assert!(refusal.contains("max_value_bytes"), "{refusal}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // A catalog query the scheduler answers itself is bounded in size and time.
    let started = Instant::now();
    let (status, body) = submit(
        &server,
        "SELECT count(*) FROM information_schema.columns, range(1, 2000000000)",
        Some(2.0),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("time limit"),
        "{body}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (status, body) = submit(
        &server,
        "SELECT * FROM information_schema.columns, range(1, 8000000)",
        None,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("MiB"),
        "{body}"
    );
    // Memory stayed within the engine's limit and a margin for the process itself.
    let peak = server.peak_rss_mb();
    assert!(peak < 512 + 768, "peak RSS {peak} MiB");
    still_answers(&mut server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenless_server_answers_its_loopback_names_and_pages_only() {
    let scene = scene();
    let mut server = start(&scene, &[]);
    let http = reqwest::Client::new();
    let port = server.url.rsplit(':').next().unwrap().to_string();
    let same = format!("http://127.0.0.1:{port}");
    for (host, origin, expected) in [
        ("attacker.example".to_string(), None, 403),
        (format!("attacker.example:{port}"), None, 403),
        (
            format!("127.0.0.1:{port}"),
            Some("http://attacker.example"),
            403,
        ),
        (format!("localhost:{port}"), None, 200),
        (format!("127.0.0.1:{port}"), Some(same.as_str()), 200),
    ] {
        let mut request = http
            .get(format!("{}/v1/tables", server.url))
            .header("host", &host);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await.unwrap();
        assert_eq!(
            response.status().as_u16(),
            expected,
            "Host {host}, Origin {origin:?}"
        );
    }
    // A cross-site POST (a form on another page) is refused before it runs.
    let response = http
        .post(format!("{}/v1/queries", server.url))
        .header("origin", "https://attacker.example")
        .header("sec-fetch-site", "cross-site")
        .json(&json!({"sql": "SELECT 1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    still_answers(&mut server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_reads_what_was_named_and_nothing_beside_it() {
    let scene = scene();
    let mut server = start(&scene, &[]);
    let glob = format!(
        "CREATE EXTERNAL TABLE pub STORED AS CSV LOCATION '{}/public_*.csv' \
         OPTIONS ('format.has_header' 'true')",
        scene.data.display()
    );
    run(&server, &glob).await.unwrap();
    let rows = run(&server, "SELECT who, n FROM pub ORDER BY n")
        .await
        .unwrap();
    assert_eq!(
        rows,
        json!([{"who": "public", "n": 1}, {"who": "public", "n": 2}])
    );
    // The serve directory itself is not readable unless asked for (--allow-path .).
    let secret = format!(
        "CREATE EXTERNAL TABLE s STORED AS CSV LOCATION '{}/secret.csv'",
        scene.root.display()
    );
    let (status, message) = run(&server, &secret).await.unwrap_err();
    assert_eq!(status, 400, "{message}");
    assert!(message.contains("--allow-path"), "{message}");
    // Percent-encoded and dotted spellings of a path outside are refused too.
    for location in [
        format!("{}/../secret.csv", scene.data.display()),
        format!("file://{}/%2E%2E/secret.csv", scene.data.display()),
        format!("{}/%2e%2e/secret.csv", scene.data.display()),
    ] {
        let sql = format!("CREATE EXTERNAL TABLE s STORED AS CSV LOCATION '{location}'");
        let (status, message) = run(&server, &sql).await.unwrap_err();
        assert!(
            matches!(status, 400 | 403 | 404),
            "{location}: {status} {message}"
        );
    }
    let tables: Value = reqwest::get(format!("{}/v1/tables", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tables["tables"].as_array().unwrap().len(), 1, "{tables}");
    still_answers(&mut server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_long_off_the_command_line_and_not_guessable() {
    let scene = scene();
    let short = Command::new(env!("CARGO_BIN_EXE_lambdafusion"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&scene.state)
        .env("LAMBDAFUSION_TOKEN", "short")
        .output()
        .unwrap();
    assert!(!short.status.success());
    assert!(
        String::from_utf8_lossy(&short.stderr).contains("at least 16"),
        "{}",
        String::from_utf8_lossy(&short.stderr)
    );
    let token = "a-token-of-thirty-two-characters";
    let file = scene.root.join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let mut server = Server::start(
        &scene.root,
        &[
            "--data-dir",
            scene.state.to_str().unwrap(),
            "--token-file",
            file.to_str().unwrap(),
        ],
        &[],
    );
    let http = reqwest::Client::new();
    let tables = format!("{}/v1/tables", server.url);
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(
        status(http.get(&tables).bearer_auth(token).send().await.unwrap()),
        200
    );
    for guess in 0..10 {
        let r = http
            .get(&tables)
            .bearer_auth(format!("guess-{guess}"))
            .send()
            .await;
        assert_eq!(status(r.unwrap()), 401);
    }
    let blocked = http
        .get(&tables)
        .bearer_auth("guess-11")
        .send()
        .await
        .unwrap();
    assert_eq!(blocked.status().as_u16(), 429);
    assert!(blocked.headers().contains_key("retry-after"));
    // Even the right token waits out the window from that address.
    assert_eq!(
        status(http.get(&tables).bearer_auth(token).send().await.unwrap()),
        429
    );
    assert!(server.alive());
}
