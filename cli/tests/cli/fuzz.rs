//! A seeded, grammar-based SQL fuzzer against `lambdafusion serve`: queries of every
//! shape (expressions nested and chained past the limits, subqueries, CTEs, joins, set
//! operations, windows, aggregates), every statement kind (DDL with hostile locations,
//! COPY, INSERT, SET, EXPLAIN [ANALYZE] of each), huge literals and odd Unicode. Each
//! statement is submitted and followed to its end; the report counts statements,
//! answers by class, crashes and the server's peak memory.
//!
//! The default test runs `FUZZ_SECONDS` (45) seconds from seed `FUZZ_SEED` (1) and
//! asserts no crash, no 5xx, no hang and memory within `--memory-limit-mb` plus a
//! margin; `fuzz_long` (ignored) is the same for `FUZZ_SECONDS` (default 600):
//!
//! ```sh
//! FUZZ_SECONDS=1800 FUZZ_SEED=7 cargo test --workspace --test cli fuzz:: -- --ignored --nocapture
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The server's memory limit, and what the process may hold beyond it (its own code,
/// the job store, DataFusion's planning, in-flight results).
const MEMORY_LIMIT_MB: u64 = 512;
const MEMORY_MARGIN_MB: u64 = 768;

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len())]
    }
}

/// The grammar. `depth` bounds the generator's own recursion; chains past the engine's
/// limits are built by repetition, not recursion.
struct Grammar<'a> {
    rng: &'a mut Rng,
    data: String,
}

const TABLES: &[&str] = &["t", "u"];
const COLUMNS: &[&str] = &["a", "b", "s", "d"];
const FUNCTIONS: &[&str] = &[
    "abs",
    "upper",
    "lower",
    "length",
    "coalesce",
    "concat",
    "substr",
    "round",
    "sqrt",
    "date_trunc",
    "to_timestamp",
    "md5",
    "sha256",
    "regexp_replace",
    "replace",
    "repeat",
    "lpad",
    "rpad",
    "array_repeat",
    "range",
    "generate_series",
    "make_array",
    "nullif",
    "greatest",
    "least",
    "strpos",
    "split_part",
    "to_hex",
    "arrow_typeof",
    "now",
    "current_date",
    "random",
    "btrim",
    "reverse",
    "left",
    "right",
    "initcap",
    "chr",
    "ascii",
    "array_length",
    "cardinality",
    "struct",
    "named_struct",
    "map",
];
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "array_agg",
    "string_agg",
    "stddev",
    "approx_distinct",
    "median",
    "bool_and",
    "first_value",
];
const WINDOWS: &[&str] = &[
    "row_number()",
    "rank()",
    "dense_rank()",
    "lag(a)",
    "lead(a, 2)",
    "first_value(b)",
    "last_value(s)",
    "nth_value(a, 2)",
    "ntile(3)",
    "sum(a)",
    "count(*)",
];
const OPERATORS: &[&str] = &[
    "+",
    "-",
    "*",
    "/",
    "%",
    "||",
    "=",
    "<>",
    "<",
    ">=",
    "AND",
    "OR",
    "LIKE",
    "IS DISTINCT FROM",
];
const ODD: &[&str] = &[
    "'\u{0}'",
    "'\u{202e}evil'",
    "'😀😀😀'",
    "'\\'",
    "''''",
    "'%2F..%2F'",
    "'\u{feff}'",
    "\"😀\"",
    "\"a\"\"b\"",
    "'\u{10ffff}'",
    "E'\\x00'",
    "X'DEADBEEF'",
    "'ﬃ'",
];
const TYPES: &[&str] = &[
    "INT",
    "BIGINT",
    "DOUBLE",
    "VARCHAR",
    "DATE",
    "TIMESTAMP",
    "DECIMAL(38, 10)",
    "BOOLEAN",
    "BYTEA",
    "INTERVAL",
    "SMALLINT",
    "FLOAT",
];

impl Grammar<'_> {
    fn literal(&mut self) -> String {
        match self.rng.below(12) {
            0 => self.rng.below(1000).to_string(),
            1 => format!("-{}", self.rng.next()),
            2 => "99999999999999999999999999999999999999".into(),
            3 => format!("1e{}", self.rng.below(400)),
            4 => format!("'{}'", "x".repeat(self.rng.below(5) * 10_000)),
            5 => self.rng.pick(ODD).to_string(),
            6 => "NULL".into(),
            7 => "DATE '2024-02-29'".into(),
            8 => "TIMESTAMP '1970-01-01 00:00:00'".into(),
            9 => "INTERVAL '1 day'".into(),
            10 => format!("{}.{}", self.rng.below(100), self.rng.below(100)),
            _ => "true".into(),
        }
    }

    fn column(&mut self) -> String {
        self.rng.pick(COLUMNS).to_string()
    }

    fn expr(&mut self, depth: usize) -> String {
        if depth == 0 {
            return if self.rng.chance(50) {
                self.column()
            } else {
                self.literal()
            };
        }
        match self.rng.below(14) {
            0 | 1 => format!(
                "({} {} {})",
                self.expr(depth - 1),
                self.rng.pick(OPERATORS),
                self.expr(depth - 1)
            ),
            2 => {
                let f = self.rng.pick(FUNCTIONS);
                let args: Vec<String> = (0..self.rng.below(4))
                    .map(|_| self.expr(depth - 1))
                    .collect();
                format!("{f}({})", args.join(", "))
            }
            3 => format!(
                "CASE WHEN {} THEN {} ELSE {} END",
                self.expr(depth - 1),
                self.expr(depth - 1),
                self.expr(depth - 1)
            ),
            4 => format!("CAST({} AS {})", self.expr(depth - 1), self.rng.pick(TYPES)),
            5 => format!(
                "(SELECT {} FROM {})",
                self.expr(depth - 1),
                self.rng.pick(TABLES)
            ),
            6 => format!(
                "{} IN (SELECT {} FROM {})",
                self.expr(depth - 1),
                self.column(),
                self.rng.pick(TABLES)
            ),
            7 => format!("EXISTS ({})", self.query(depth - 1)),
            8 => self.chain(),
            9 => format!("NOT {}", self.expr(depth - 1)),
            10 => format!(
                "{} BETWEEN {} AND {}",
                self.expr(depth - 1),
                self.literal(),
                self.literal()
            ),
            11 => format!("{}[{}]", self.expr(depth - 1), self.literal()),
            12 => format!("{} IS NULL", self.expr(depth - 1)),
            _ => self.literal(),
        }
    }

    /// A long chain or deep nesting: sometimes within the depth limit, sometimes past.
    fn chain(&mut self) -> String {
        let n = [10, 100, 900, 1100, 3000, 20_000][self.rng.below(6)];
        let term = self.column();
        match self.rng.below(5) {
            0 => vec![term.as_str(); n].join(" + "),
            1 => vec!["'x'"; n].join(" || "),
            2 => vec![format!("{term} = 1"); n.min(5000)].join(" AND "),
            3 => format!(
                "{}{term}{}",
                "(".repeat(n.min(5000)),
                ")".repeat(n.min(5000))
            ),
            _ => format!(
                "{}{term}{}",
                "abs(".repeat(n.min(2000)),
                ")".repeat(n.min(2000))
            ),
        }
    }

    fn query(&mut self, depth: usize) -> String {
        let table = self.rng.pick(TABLES);
        let mut q = String::from("SELECT ");
        if self.rng.chance(10) {
            q.push_str("DISTINCT ");
        }
        let items: Vec<String> = (0..1 + self.rng.below(3))
            .map(|_| match self.rng.below(5) {
                0 => format!("{}({})", self.rng.pick(AGGREGATES), self.column()),
                1 => format!(
                    "{} OVER (PARTITION BY {} ORDER BY {})",
                    self.rng.pick(WINDOWS),
                    self.column(),
                    self.column()
                ),
                _ => self.expr(depth.min(3)),
            })
            .collect();
        q.push_str(&items.join(", "));
        q.push_str(&format!(" FROM {table}"));
        match self.rng.below(6) {
            0 => q.push_str(&format!(" JOIN u ON {table}.a = u.a")),
            1 => q.push_str(", u"),
            2 => q.push_str(&format!(
                " LEFT JOIN ({}) x ON true",
                self.query(depth.saturating_sub(1))
            )),
            _ => {}
        }
        if self.rng.chance(40) {
            q.push_str(&format!(" WHERE {}", self.expr(depth.min(3))));
        }
        if self.rng.chance(30) {
            q.push_str(&format!(" GROUP BY {}", self.column()));
        }
        if self.rng.chance(30) {
            q.push_str(&format!(" ORDER BY {} DESC NULLS FIRST", self.column()));
        }
        if self.rng.chance(30) {
            q.push_str(&format!(" LIMIT {}", self.rng.below(100)));
        }
        if depth > 0 && self.rng.chance(15) {
            let op = self
                .rng
                .pick(&["UNION ALL", "UNION", "EXCEPT", "INTERSECT"]);
            q = format!("{q} {op} {}", self.query(depth - 1));
        }
        if depth > 0 && self.rng.chance(10) {
            q = format!("WITH w AS ({}) {q}", self.query(depth - 1));
        }
        q
    }

    fn location(&mut self) -> String {
        let data = self.data.clone();
        self.rng
            .pick(&[
                format!("{data}/t.csv").as_str(),
                "/etc/passwd",
                "/etc/",
                "/proc/self/environ",
                "~/.aws/credentials",
                format!("{data}/../secret.csv").as_str(),
                format!("{data}/%2e%2e/secret.csv").as_str(),
                format!("file://{data}/t.csv").as_str(),
                format!("{data}/*.csv").as_str(),
                "s3://bucket/lambdafusion%2Fjobs/",
                "http://169.254.169.254/latest/meta-data/",
                "",
                "\u{0}",
            ])
            .to_string()
    }

    fn statement(&mut self) -> String {
        let depth = 1 + self.rng.below(4);
        match self.rng.below(20) {
            0..=7 => self.query(depth),
            8 => format!("EXPLAIN {}", self.query(depth)),
            9 => format!("EXPLAIN ANALYZE {}", self.query(depth)),
            10 => format!(
                "CREATE EXTERNAL TABLE f{} STORED AS {} LOCATION '{}'",
                self.rng.below(5),
                self.rng
                    .pick(&["CSV", "PARQUET", "JSON", "ARROW", "AVRO", "ICEBERG"]),
                self.location()
            ),
            11 => format!("DROP TABLE IF EXISTS f{}", self.rng.below(5)),
            12 => {
                let target = self.location();
                let wrapper = self.rng.pick(&["", "EXPLAIN ", "EXPLAIN ANALYZE "]);
                format!(
                    "{wrapper}COPY ({}) TO '{target}' STORED AS CSV",
                    self.query(1)
                )
            }
            13 => format!(
                "{}INSERT INTO t VALUES ({})",
                self.rng.pick(&["", "EXPLAIN ANALYZE "]),
                self.literal()
            ),
            14 => self
                .rng
                .pick(&[
                    "SET datafusion.execution.target_partitions = 1000000",
                    "SET TIME ZONE 'Mars/Olympus'",
                    "SHOW ALL",
                    "SHOW TABLES",
                    "DESCRIBE t",
                    "SELECT * FROM information_schema.df_settings",
                    "SELECT * FROM information_schema.columns, range(1, 1000000)",
                    "CREATE VIEW v AS SELECT 1",
                    "CREATE TABLE x AS SELECT 1",
                    "DELETE FROM t",
                    "UPDATE t SET a = 1",
                    "PREPARE p AS SELECT $1",
                    "EXECUTE p(1)",
                    "BEGIN",
                    "SELECT 1; SELECT 2",
                    "",
                    ";;;",
                ])
                .to_string(),
            15 => {
                // Garbage: random tokens of the language.
                let tokens = [
                    "SELECT", "FROM", "(", ")", ",", "WHERE", "a", "1", "'", "\"", "*", "OVER",
                    "JOIN", "ON", "::", "[", "]", "$1", "--", "/*", "\\", "😀",
                ];
                (0..self.rng.below(40))
                    .map(|_| self.rng.pick(&tokens))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            16 => format!("SELECT {}", self.chain()),
            17 => format!(
                "SELECT {}",
                self.rng.pick(&[
                    "length(repeat('x', 2147483647))",
                    "lpad('x', 1000000000)",
                    "cardinality(range(1, 9223372036854775807))",
                    "array_repeat(repeat('ab', 1000), 100000)",
                    "replace(repeat('a', 100000), '', repeat('b', 100000))",
                    "count(*) FROM range(1, 100000000)",
                    "1/0",
                    "CAST('x' AS INT)",
                    "sqrt(-1)",
                    "9223372036854775807 + 1",
                ])
            ),
            _ => format!("SELECT {} FROM t", self.expr(depth)),
        }
    }
}

/// A `serve` under test.
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    fn start(root: &Path, data: &Path) -> Server {
        let port = free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_lambdafusion"))
            .args([
                "serve",
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(root.join("state"))
            .arg("--allow-path")
            .arg(data)
            .args(["--memory-limit-mb", &MEMORY_LIMIT_MB.to_string()])
            .current_dir(root)
            .env_remove("LAMBDAFUSION_TOKEN")
            .env("RUST_LOG", "error")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("lambdafusion serving on") {
                    let _ = ready_tx.send(());
                } else if line.contains("panicked") || line.contains("overflow") {
                    eprintln!("server: {line}");
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

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn peak_rss_mb(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .unwrap_or(0)
            / 1024
    }
}

/// How one statement ended.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Succeeded,
    Failed,
    Refused(u16),
    ServerError(u16),
    Hang,
    Crash,
}

async fn follow(http: &reqwest::Client, server: &Server, sql: &str) -> (Outcome, String) {
    let sent = http
        .post(format!("{}/v1/queries", server.url))
        .json(&json!({"sql": sql, "max_seconds": 20}))
        .timeout(Duration::from_secs(60))
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return (Outcome::Hang, e.to_string()),
        Err(e) => return (Outcome::Crash, e.to_string()),
    };
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match status {
        202 => {}
        400..=499 => return (Outcome::Refused(status), message),
        _ => return (Outcome::ServerError(status), message),
    }
    let id = body["id"].as_str().unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = http
            .get(format!("{}/v1/queries/{id}?wait=20", server.url))
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        let state: Value = match state {
            Ok(r) if r.status().is_server_error() => {
                return (Outcome::ServerError(r.status().as_u16()), "status".into())
            }
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(e) => return (Outcome::Crash, e.to_string()),
        };
        match state["state"].as_str() {
            Some("succeeded") => return (Outcome::Succeeded, String::new()),
            Some("failed") | Some("cancelled") => {
                return (
                    Outcome::Failed,
                    state["error"].as_str().unwrap_or("").into(),
                )
            }
            _ if Instant::now() > deadline => return (Outcome::Hang, sql.into()),
            _ => {}
        }
    }
}

/// Fuzzes for `seconds` from `seed`; returns the report and whether it met the goals.
async fn fuzz(seconds: u64, seed: u64) -> (String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let data: PathBuf = root.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("t.csv"),
        "a,b,s,d\n1,2.5,x,2024-01-01\n2,,y,2024-02-29\n,3.5,,\n",
    )
    .unwrap();
    std::fs::write(root.join("secret.csv"), "secret\n").unwrap();
    let mut server = Server::start(&root, &data);
    let http = reqwest::Client::new();
    for name in TABLES {
        let ddl = format!(
            "CREATE EXTERNAL TABLE {name} STORED AS CSV LOCATION '{}/t.csv' \
             OPTIONS ('format.has_header' 'true')",
            data.display()
        );
        let (outcome, message) = follow(&http, &server, &ddl).await;
        assert_eq!(outcome, Outcome::Succeeded, "{message}");
    }
    let mut rng = Rng::new(seed);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut bad: Vec<String> = Vec::new();
    // Queries that ran and failed with an internal error (not a crash, not a 5xx):
    // listed, for the record.
    let mut notes: Vec<String> = Vec::new();
    let (mut statements, mut crashes, mut peak) = (0usize, 0usize, 0u64);
    let stop = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < stop {
        let sql = Grammar {
            rng: &mut rng,
            data: data.display().to_string(),
        }
        .statement();
        statements += 1;
        let (outcome, message) = follow(&http, &server, &sql).await;
        peak = peak.max(server.peak_rss_mb());
        let internal = message.contains("Internal error") || message.contains("panicked");
        let class = match &outcome {
            Outcome::Refused(s) => format!("refused {s}"),
            Outcome::ServerError(s) => format!("server error {s}"),
            Outcome::Failed if internal => "failed (internal)".to_string(),
            other => format!("{other:?}").to_lowercase(),
        };
        *counts.entry(class).or_default() += 1;
        let shown: String = sql.chars().take(200).collect();
        match outcome {
            Outcome::Crash => {
                crashes += 1;
                bad.push(format!("crash: {shown} ({message})"));
                if !server.alive() {
                    server = Server::start(&root, &data);
                }
            }
            Outcome::ServerError(_) | Outcome::Hang => {
                bad.push(format!("{outcome:?}: {shown}: {message}"))
            }
            Outcome::Failed if internal => {
                let first = message.lines().next().unwrap_or_default().to_string();
                notes.push(format!("{shown}: {first}"))
            }
            _ => {}
        }
        if !server.alive() {
            crashes += 1;
            bad.push(format!("the server died after: {shown}"));
            server = Server::start(&root, &data);
        }
    }
    let within = peak <= MEMORY_LIMIT_MB + MEMORY_MARGIN_MB;
    let ok = bad.is_empty() && crashes == 0 && within;
    let mut report = format!(
        "fuzz: seed {seed}, {seconds} s, {statements} statements, {crashes} crashes, peak RSS \
         {peak} MiB (limit {MEMORY_LIMIT_MB} + margin {MEMORY_MARGIN_MB})\n"
    );
    for (class, n) in &counts {
        report.push_str(&format!("  {class:<18} {n}\n"));
    }
    for b in bad.iter().take(20) {
        report.push_str(&format!("  ! {b}\n"));
    }
    notes.sort();
    notes.dedup();
    for n in notes.iter().take(10) {
        report.push_str(&format!("  internal: {n}\n"));
    }
    (report, ok)
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzed_sql_never_crashes_the_server_nor_answers_5xx() {
    let (report, ok) = fuzz(setting("FUZZ_SECONDS", 45), setting("FUZZ_SEED", 1)).await;
    println!("{report}");
    assert!(ok, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: FUZZ_SECONDS (600) of fuzzing"]
async fn fuzz_long() {
    let (report, ok) = fuzz(setting("FUZZ_SECONDS", 600), setting("FUZZ_SEED", 2)).await;
    println!("{report}");
    assert!(ok, "{report}");
}
