//! DataFusion's own SQL test suite — the `.slt` files of the `datafusion-sqllogictest`
//! crate of our exact DataFusion version — run *through lambdafusion*: every query goes
//! to the embedded engine with tasks so small that every stage of every query has
//! several tasks, and its rows are formatted by DataFusion's own sqllogictest code
//! ([`datafusion_sqllogictest::convert_batches`]), so an answer that differs from the
//! file's is a difference of the distribution, not of the formatting.
//!
//! Set-up statements the engine does not run itself (`CREATE TABLE ... AS VALUES`,
//! `INSERT` into memory tables) are run by the harness in a
//! single-process DataFusion and their tables written as Arrow IPC files that the engine
//! reads as external tables: that is the harness's job, not a feature. `CREATE VIEW`
//! and `DROP VIEW` go to the engine's catalog (and to the single-process side, for
//! later set-up over the view). Records the
//! engine cannot take are counted as skipped with the reason: `EXPLAIN` (the engine
//! shows its distributed plan), queries run under a `SET` the engine does not take per
//! query, and tables whose data files are not in the crate (set `SLT_DATA_DIR` to a
//! directory holding `testing/`, `parquet-testing/` and `datafusion/` test data to run
//! them too). Every other record counts: passed, failed (a wrong answer) or errored
//! (with the error's class).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{ObjectName, Statement as SqlStatement};
use datafusion_sqllogictest::{convert_batches, convert_schema_to_types, DFColumnType, DFOutput};
use lambdafusion::EngineConfig;
use lambdafusion_embedded::{Embedded, EmbeddedOptions};
use sqllogictest::{DBOutput, QueryExpect, Record, StatementExpect, TestErrorKind};

/// Where the `.slt` files of `datafusion-sqllogictest` are (its `test_files`), found with
/// `cargo metadata`.
pub fn test_files_dir() -> Result<PathBuf, String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata output: {e}"))?;
    let manifest = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "datafusion-sqllogictest")
        .and_then(|p| p["manifest_path"].as_str())
        .ok_or("datafusion-sqllogictest is not among the dependencies")?;
    Ok(Path::new(manifest)
        .parent()
        .ok_or("a manifest has a directory")?
        .join("test_files"))
}

/// What one record came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The answer (or the expected error) was the file's.
    Passed,
    /// An error was expected and came, with another message.
    PassedOtherError,
    /// A wrong answer.
    Failed(String),
    /// The engine failed where the file expects an answer: the class and the message.
    Errored(String, String),
    /// Not run, and why.
    Skipped(String),
}

/// One file's tally.
#[derive(Debug, Clone, Default)]
pub struct FileReport {
    /// The file's name.
    pub file: String,
    /// Statements and queries in it.
    pub records: usize,
    /// Answers (or expected errors) as the file has them.
    pub passed: usize,
    /// Of `passed`: expected errors that came with another message.
    pub other_error: usize,
    /// Wrong answers.
    pub failed: usize,
    /// Errors where an answer was expected, by class.
    pub errored: BTreeMap<String, usize>,
    /// Records not run, by reason.
    pub skipped: BTreeMap<String, usize>,
    /// The first wrong answers and errors, for reading.
    pub details: Vec<String>,
    /// Records checked against a corrected answer ([`DISPUTED`]), and why.
    pub disputed: Vec<String>,
}

impl FileReport {
    fn add(&mut self, line: u32, sql: &str, outcome: Outcome) {
        self.records += 1;
        let shown: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let shown: String = shown.chars().take(160).collect();
        match outcome {
            Outcome::Passed => self.passed += 1,
            Outcome::PassedOtherError => {
                self.passed += 1;
                self.other_error += 1;
            }
            Outcome::Failed(diff) => {
                self.failed += 1;
                self.details
                    .push(format!("{}:{line} WRONG {shown}\n    {diff}", self.file));
            }
            Outcome::Errored(class, message) => {
                *self.errored.entry(class.clone()).or_default() += 1;
                let first: String = message
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(200)
                    .collect();
                self.details.push(format!(
                    "{}:{line} ERROR[{class}] {shown}\n    {first}",
                    self.file
                ));
            }
            Outcome::Skipped(reason) => *self.skipped.entry(reason).or_default() += 1,
        }
    }

    /// Errored records in all.
    pub fn errored_total(&self) -> usize {
        self.errored.values().sum()
    }

    /// Skipped records in all.
    pub fn skipped_total(&self) -> usize {
        self.skipped.values().sum()
    }
}

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Longest one record may take.
    pub record_timeout: Duration,
    /// Where the data files outside the crate are (`testing/`, `parquet-testing/`,
    /// `datafusion/`), if anywhere.
    pub data_dir: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            record_timeout: Duration::from_secs(60),
            data_dir: std::env::var_os("SLT_DATA_DIR").map(PathBuf::from),
        }
    }
}

/// The engine settings the suite runs with: every scan split into byte ranges of at
/// most 4 tasks, no coalescing of small inputs, no tiny build side read in place —
/// so every stage that can have several tasks has them.
pub fn engine_config() -> EngineConfig {
    EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_shuffle_bytes_per_task(1)
        .with_max_tasks_per_stage(4)
        .with_max_query_time(Duration::from_secs(120))
}

/// What the harness knows across the records of one file.
#[derive(Default)]
struct FileState {
    /// Tables whose data is not available: records that read them are skipped.
    unavailable: HashSet<String>,
    /// Settings changed from their defaults (`SET`), which the engine does not take.
    settings: BTreeSet<String>,
    /// How many times each materialized table has been written.
    versions: BTreeMap<String, usize>,
    /// Tables the file created (as files, materialized or external).
    created: HashSet<String>,
}

/// The sqllogictest database: lambdafusion for queries, a single-process DataFusion for
/// set-up statements the engine does not run (their tables materialized as files).
struct Engine {
    engine: Arc<Embedded>,
    scratch: SessionContext,
    tables_dir: PathBuf,
    /// Where `test_files/scratch/` of the file's own COPY set-ups lands.
    scratch_dir: PathBuf,
    base: PathBuf,
    data_dir: Option<PathBuf>,
    state: Arc<Mutex<FileState>>,
    timeout: Duration,
}

/// An error of a record, as the runner reports it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SltError(String);

/// The statement `sql` parses to, if it does.
fn parse(sql: &str) -> Option<DfStatement> {
    DFParser::parse_sql(sql)
        .ok()
        .and_then(|mut s| s.pop_front())
}

/// Table names `statement` reads (lower-cased, unqualified).
fn tables_read(statement: &DfStatement) -> Vec<String> {
    let ctx = SessionContext::new();
    ctx.state()
        .resolve_table_references(statement)
        .map(|refs| {
            refs.iter()
                .map(|r| r.table().to_ascii_lowercase())
                .collect()
        })
        .unwrap_or_default()
}

fn object_name(name: &ObjectName) -> String {
    name.0
        .last()
        .map(|part| part.to_string().trim_matches('"').to_ascii_lowercase())
        .unwrap_or_default()
}

/// What the harness does with a statement.
enum Route {
    /// Run in single-process DataFusion, then write table `name` for the engine.
    Materialize(String),
    /// Drop in both.
    Drop(String),
    /// A view: created in both (the engine keeps it in its catalog and plans it at every
    /// query that reads it; single-process DataFusion, for later set-up over it).
    View(String),
    /// Drop a view in both.
    DropView(String),
    /// A table of files: created in both, its location resolved.
    External(String),
    /// A setting: applied in single-process DataFusion only (see [`FileState`]).
    Setting,
    /// Everything else: the engine.
    Engine,
}

fn route(statement: &DfStatement) -> Route {
    match statement {
        DfStatement::CreateExternalTable(c) => External(object_name(&c.name)),
        DfStatement::Reset(_) => Route::Setting,
        DfStatement::Statement(s) => match s.as_ref() {
            SqlStatement::CreateTable(c) => Materialize(object_name(&c.name)),
            SqlStatement::CreateView(v) => Route::View(object_name(&v.name)),
            SqlStatement::Drop {
                object_type: datafusion::sql::sqlparser::ast::ObjectType::View,
                names,
                ..
            } => Route::DropView(names.first().map(object_name).unwrap_or_default()),
            SqlStatement::Insert(i) => Materialize(
                i.table
                    .to_string()
                    .rsplit('.')
                    .next()
                    .unwrap_or_default()
                    .trim_matches('"')
                    .to_ascii_lowercase(),
            ),
            SqlStatement::Update(_) | SqlStatement::Delete(_) | SqlStatement::Truncate(_) => {
                match tables_read(statement).into_iter().next() {
                    Some(table) => Materialize(table),
                    None => Route::Engine,
                }
            }
            SqlStatement::Drop { names, .. } => {
                Route::Drop(names.first().map(object_name).unwrap_or_default())
            }
            SqlStatement::Set(_) => Route::Setting,
            _ => Route::Engine,
        },
        _ => Route::Engine,
    }
}

use Route::{External, Materialize};

impl Engine {
    /// Resolves a location of a `.slt` file: relative to the suite's directory, the
    /// data outside the crate under `data_dir`. `None`: not available here.
    fn resolve(&self, location: &str) -> Option<PathBuf> {
        if location.contains("://") {
            return None;
        }
        let path = Path::new(location);
        if path.is_absolute() {
            return path.exists().then(|| path.to_path_buf());
        }
        if let Some(rest) = location.strip_prefix("test_files/scratch/") {
            // What a file's COPY set-up wrote (see `run_file`).
            let written = self.scratch_dir.join(rest);
            return written.exists().then_some(written);
        }
        let direct = self.base.join(path);
        if direct.exists() {
            return Some(direct);
        }
        let data = self.data_dir.as_ref()?;
        let mapped = if let Some(rest) = location.strip_prefix("../../testing/") {
            data.join("testing").join(rest)
        } else if let Some(rest) = location.strip_prefix("../../parquet-testing/") {
            data.join("parquet-testing").join(rest)
        } else if let Some(rest) = location.strip_prefix("../") {
            data.join("datafusion").join(rest)
        } else {
            return None;
        };
        mapped.exists().then_some(mapped)
    }

    /// Paths in answers (`input_file_name()`) written as DataFusion's runner writes
    /// them: under `WORKSPACE_ROOT`, the checkout the files were written in.
    fn normalize_paths(&self, mut rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
        // Object-store form: no leading slash.
        let form = |p: &Path| p.display().to_string().trim_start_matches('/').to_string();
        let mut roots = vec![
            (
                form(&self.scratch_dir),
                "WORKSPACE_ROOT/datafusion/sqllogictest/test_files/scratch".to_string(),
            ),
            (
                form(&self.base),
                "WORKSPACE_ROOT/datafusion/sqllogictest".to_string(),
            ),
        ];
        if let Some(data) = &self.data_dir {
            roots.push((form(data), "WORKSPACE_ROOT".to_string()));
        }
        for value in rows.iter_mut().flatten() {
            for (root, shown) in &roots {
                if value.contains(root.as_str()) {
                    *value = value.replace(root.as_str(), shown);
                }
            }
        }
        rows
    }

    async fn engine_sql(
        &self,
        sql: &str,
    ) -> Result<(Vec<RecordBatch>, datafusion::arrow::datatypes::SchemaRef), SltError> {
        match tokio::time::timeout(self.timeout, self.engine.sql(sql)).await {
            Err(_) => Err(SltError(format!(
                "timeout: no answer within {} s",
                self.timeout.as_secs()
            ))),
            Ok(Err(e)) => Err(SltError(e.to_string())),
            Ok(Ok(out)) => Ok((out.batches, out.schema)),
        }
    }

    async fn scratch_sql(&self, sql: &str) -> Result<Vec<RecordBatch>, SltError> {
        let df = self
            .scratch
            .sql(sql)
            .await
            .map_err(|e| SltError(e.strip_backtrace().to_string()))?;
        df.collect()
            .await
            .map_err(|e| SltError(e.strip_backtrace().to_string()))
    }

    /// Writes table `name` of the scratch context as an Arrow IPC file and (re)creates
    /// it in the engine as an external table over that file.
    async fn materialize(&self, name: &str) -> Result<(), SltError> {
        let df = self
            .scratch
            .table(name)
            .await
            .map_err(|e| SltError(format!("materializing {name}: {e}")))?;
        let schema = Arc::new(df.schema().as_arrow().clone());
        let batches = df
            .collect()
            .await
            .map_err(|e| SltError(format!("materializing {name}: {e}")))?;
        let version = {
            let mut state = self.state.lock().unwrap();
            let v = state.versions.entry(name.to_string()).or_default();
            *v += 1;
            *v
        };
        // Arrow IPC keeps every type as it is; a table whose dictionaries change from
        // batch to batch (which the IPC file format cannot hold) goes to Parquet.
        let arrow = self.tables_dir.join(format!("{name}.{version}.arrow"));
        let (file, format) = match write_ipc(&arrow, &schema, &batches) {
            Ok(()) => (arrow, "ARROW"),
            Err(_) => {
                let parquet = self.tables_dir.join(format!("{name}.{version}.parquet"));
                let out = std::fs::File::create(&parquet).map_err(|e| SltError(e.to_string()))?;
                let mut writer =
                    datafusion::parquet::arrow::ArrowWriter::try_new(out, schema.clone(), None)
                        .map_err(|e| SltError(e.to_string()))?;
                for b in &batches {
                    writer.write(b).map_err(|e| SltError(e.to_string()))?;
                }
                writer.close().map_err(|e| SltError(e.to_string()))?;
                (parquet, "PARQUET")
            }
        };
        if schema.fields().is_empty() {
            return Err(SltError(format!(
                "materializing {name}: a table of no columns cannot be a file"
            )));
        }
        self.engine_sql(&format!("DROP TABLE IF EXISTS \"{name}\""))
            .await?;
        self.engine_sql(&format!(
            "CREATE EXTERNAL TABLE \"{name}\" STORED AS {format} LOCATION '{}'",
            file.display()
        ))
        .await?;
        Ok(())
    }
}

#[async_trait]
impl sqllogictest::AsyncDB for Engine {
    type Error = SltError;
    type ColumnType = DFColumnType;

    async fn run(&mut self, sql: &str) -> Result<DFOutput, SltError> {
        let statement = parse(sql);
        let route = statement.as_ref().map_or(Route::Engine, route);
        match route {
            Materialize(name) => {
                let batches = self.scratch_sql(sql).await?;
                self.materialize(&name).await?;
                self.state.lock().unwrap().created.insert(name);
                Ok(scratch_output(batches))
            }
            Route::Drop(name) => {
                let batches = self.scratch_sql(sql).await?;
                self.engine_sql(&format!("DROP TABLE IF EXISTS \"{name}\""))
                    .await?;
                let mut state = self.state.lock().unwrap();
                state.unavailable.remove(&name);
                state.created.remove(&name);
                Ok(scratch_output(batches))
            }
            Route::View(name) => {
                self.scratch_sql(sql).await?;
                self.engine_sql(sql).await?;
                self.state.lock().unwrap().created.insert(name);
                Ok(DBOutput::StatementComplete(0))
            }
            Route::DropView(name) => {
                let batches = self.scratch_sql(sql).await?;
                self.engine_sql(&format!("DROP VIEW IF EXISTS \"{name}\""))
                    .await?;
                self.state.lock().unwrap().created.remove(&name);
                Ok(scratch_output(batches))
            }
            External(name) => {
                let Some(DfStatement::CreateExternalTable(create)) = statement else {
                    unreachable!("routed by its statement");
                };
                let mut rewritten = sql.to_string();
                for location in &create.locations {
                    let resolved = self
                        .resolve(location.trim())
                        .ok_or_else(|| SltError(format!("unavailable data: {location}")))?;
                    rewritten =
                        rewritten.replacen(location.as_str(), &resolved.display().to_string(), 1);
                }
                // The single-process side reads the same files, for later set-up.
                let _ = self.scratch_sql(&rewritten).await;
                self.engine_sql(&rewritten).await?;
                let mut state = self.state.lock().unwrap();
                state.unavailable.remove(&name);
                state.created.insert(name);
                Ok(DBOutput::StatementComplete(0))
            }
            Route::Setting => {
                self.scratch_sql(sql).await?;
                Ok(DBOutput::StatementComplete(0))
            }
            Route::Engine => {
                let (batches, schema) = self.engine_sql(sql).await?;
                let types = convert_schema_to_types(schema.fields());
                let rows = convert_batches(&schema, batches, false)
                    .map_err(|e| SltError(e.to_string()))?;
                let rows = self.normalize_paths(rows);
                if rows.is_empty() && types.is_empty() {
                    Ok(DBOutput::StatementComplete(0))
                } else {
                    Ok(DBOutput::Rows { types, rows })
                }
            }
        }
    }

    fn engine_name(&self) -> &str {
        "lambdafusion"
    }

    async fn sleep(dur: Duration) {
        tokio::time::sleep(dur).await;
    }

    async fn shutdown(&mut self) {}
}

fn write_ipc(
    file: &Path,
    schema: &datafusion::arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
) -> Result<(), String> {
    let out = std::fs::File::create(file).map_err(|e| e.to_string())?;
    let mut writer = datafusion::arrow::ipc::writer::FileWriter::try_new(out, schema)
        .map_err(|e| e.to_string())?;
    for b in batches {
        writer.write(b).map_err(|e| e.to_string())?;
    }
    writer.finish().map_err(|e| e.to_string())
}

/// What a set-up statement answers, as DataFusion's runner would.
fn scratch_output(batches: Vec<RecordBatch>) -> DFOutput {
    let Some(first) = batches.first() else {
        return DBOutput::StatementComplete(0);
    };
    let schema = first.schema();
    let types = convert_schema_to_types(schema.fields());
    match convert_batches(&schema, batches, false) {
        Ok(rows) if !rows.is_empty() => DBOutput::Rows { types, rows },
        _ => DBOutput::StatementComplete(0),
    }
}

/// Why a record is not run, if it is not.
/// The skip reason of a record run under the file's `SET`s, naming them.
fn under_settings(state: &FileState) -> String {
    let settings: Vec<String> = state.settings.iter().cloned().collect();
    format!(
        "runs under SET {} (settings are not taken per query)",
        settings.join(", ")
    )
}

fn skip_reason(sql: &str, state: &FileState) -> Option<String> {
    let statement = parse(sql);
    if let Some(DfStatement::Explain(_)) = &statement {
        return Some("EXPLAIN (the engine shows its distributed plan)".into());
    }
    if let Some(DfStatement::Statement(s)) = &statement {
        if matches!(
            s.as_ref(),
            SqlStatement::Explain { .. } | SqlStatement::ExplainTable { .. }
        ) {
            return Some("EXPLAIN (the engine shows its distributed plan)".into());
        }
    }
    let trimmed = sql.trim_start().to_ascii_uppercase();
    if trimmed.starts_with("EXPLAIN") {
        return Some("EXPLAIN (the engine shows its distributed plan)".into());
    }
    let lowered = sql.to_ascii_lowercase();
    if lowered.contains("df_settings") || trimmed.starts_with("SHOW ") {
        return Some("reads the session's settings, which the engine sets itself".into());
    }
    if lowered.contains("information_schema") {
        return Some(
            "reads information_schema, which lists the engine's own catalog (external \
             tables only, information_schema always on)"
                .into(),
        );
    }
    if statement.is_none() && !state.settings.is_empty() {
        // It parses only under the file's SET (another SQL dialect, say).
        return Some(under_settings(state));
    }
    if let Some(statement) = &statement {
        if let Route::Drop(name) | Route::DropView(name) = route(statement) {
            if !state.created.contains(&name) {
                return Some("drops a table the harness could not create".into());
            }
        }
        if let Route::Engine = route(statement) {
            if !state.settings.is_empty() {
                return Some(under_settings(state));
            }
        }
        if tables_read(statement)
            .iter()
            .any(|t| state.unavailable.contains(t))
        {
            return Some(
                "reads a table whose data is not in the crate, or that the harness could \
                 not write"
                    .into(),
            );
        }
    }
    None
}

/// Tracks `SET` and `RESET` of the single-process side, so that queries under a
/// changed setting are skipped.
fn track_setting(
    sql: &str,
    scratch: &SessionContext,
    defaults: &BTreeMap<String, Option<String>>,
    state: &mut FileState,
) {
    let _ = sql;
    state.settings = scratch
        .state()
        .config()
        .options()
        .entries()
        .into_iter()
        .filter(|e| ANSWER_SETTINGS.iter().any(|p| e.key.starts_with(p)))
        .filter(|e| defaults.get(&e.key).is_some_and(|d| d != &e.value))
        .map(|e| format!("{}={}", e.key, e.value.unwrap_or_default()))
        .collect();
}

/// How a query orders its rows, read off its top level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Order {
    /// It has an `ORDER BY`: its row order is part of the answer.
    ordered: bool,
    /// It picks rows with `LIMIT` / `OFFSET` / `FETCH`.
    limited: bool,
}

fn order_of(sql: &str) -> Order {
    let unordered = Order {
        ordered: false,
        limited: false,
    };
    let Some(DfStatement::Statement(statement)) = parse(sql) else {
        return unordered;
    };
    let SqlStatement::Query(query) = statement.as_ref() else {
        return unordered;
    };
    Order {
        ordered: query.order_by.is_some(),
        limited: query.limit_clause.is_some() || query.fetch.is_some(),
    }
}

/// Whether two rendered values are equal, or both numbers within a relative 1e-12 of
/// each other: a float aggregate merged from several tasks' partial states sums in
/// another order than one process does (`var_pop` of large values differs in its 16th
/// digit), which DataFusion's own runner would see too with other partitions.
fn same_value(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) if x.is_finite() && y.is_finite() => {
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        _ => false,
    }
}

/// DataFusion's validator, then the same comparison value by value with [`same_value`].
fn validator(
    normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    if datafusion_sqllogictest::df_value_validator(normalizer, actual, expected) {
        return true;
    }
    let actual: Vec<String> = actual.iter().map(|row| row.join(" ")).collect();
    actual.len() == expected.len()
        && actual.iter().zip(expected).all(|(a, e)| {
            let e = normalizer(e);
            let (a, e): (Vec<&str>, Vec<&str>) = (
                a.split_whitespace().collect(),
                e.split_whitespace().collect(),
            );
            a.len() == e.len() && a.iter().zip(&e).all(|(x, y)| same_value(x, y))
        })
}

/// [`validator`] on the rows sorted: for a query whose row order is undefined.
fn unordered_validator(
    normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    if validator(normalizer, actual, expected) {
        return true;
    }
    let mut actual: Vec<Vec<String>> = actual.to_vec();
    actual.sort_by_key(|row| row.join(" "));
    let mut expected: Vec<String> = expected.iter().map(normalizer).collect();
    expected.sort();
    validator(normalizer, &actual, &expected)
}

/// The table an error says is missing, if it says so.
fn missing_table(message: &str) -> Option<String> {
    let start = message.find("table '")? + "table '".len();
    let rest = &message[start..];
    let name = &rest[..rest.find('\'')?];
    message[start + name.len()..]
        .starts_with("' not found")
        .then(|| name.rsplit('.').next().unwrap_or(name).to_ascii_lowercase())
}

/// Settings that change answers (not only plans): a query run under one of them changed
/// is skipped, since the engine does not take settings per query. Optimizer and
/// execution-tuning settings change plans, never answers: their queries run.
const ANSWER_SETTINGS: &[&str] = &[
    "datafusion.sql_parser.",
    "datafusion.format.",
    "datafusion.execution.time_zone",
    "datafusion.execution.parquet.",
    "datafusion.execution.listing_table",
    "datafusion.execution.target_partitions",
    "datafusion.execution.enable_recursive_ctes",
    "datafusion.catalog.has_header",
    "datafusion.catalog.newlines_in_values",
    "datafusion.explain.",
];

/// Records whose expected answer in DataFusion's file is wrong, each with the answer
/// they should have and why: the record is checked against that answer instead (and
/// still fails if the engine's differs).
const DISPUTED: &[(&str, u32, &[&str], &str)] = &[
    (
        "pwmj.slt",
        141,
        &[
            "11 44", "11 55", "22 44", "22 55", "33 44", "33 55", "44 55",
        ],
        "ORDER BY 1,2: the file lists 11 55 before 11 44 (DataFusion's piecewise merge \
         join plan sorts by the first key only)",
    ),
    (
        "pwmj.slt",
        232,
        &["11 11", "11 44", "11 55", "44 44", "44 55"],
        "ORDER BY 1,2: the file lists 11 55, 11 44, 11 11 (DataFusion's piecewise merge \
         join plan sorts by the first key only)",
    ),
    (
        "timestamps.slt",
        4301,
        &[],
        "no row is equal: the view's 2024-02-01T00:00:01+01:00 is 23:00:01Z, the literal \
         2024-01-31T16:00:01-08:00 is 00:00:01Z (DuckDB agrees); DataFusion inlines the \
         view and unwraps its cast into the literal, which shifts the zone (the engine, which \
         inlines views as DataFusion does, too: KNOWN_WRONG in the curated test)",
    ),
];

/// Single records not run, and why: they depend on a statement before them that the
/// engine refuses by design, or DataFusion itself cannot run them as the engine plans.
const SKIPPED_RECORDS: &[(&str, u32, &str)] = &[
    (
        "create_function.slt",
        46,
        "follows DROP FUNCTION abs, which the engine refuses (its functions are fixed)",
    ),
    (
        "scalar.slt",
        2498,
        "DataFusion 55 itself fails it over several partitions (SanityCheckPlan on ORDER BY \
         acosh(sin(x)); reproduced in one process with three files)",
    ),
];

/// The class of an error message, for the report.
fn error_class(message: &str) -> String {
    let m = message.to_ascii_lowercase();
    let class = if m.starts_with("timeout") {
        "timeout"
    } else if m.contains("unavailable data") {
        "data"
    } else if m.contains("not supported")
        || m.contains("unsupported")
        || m.contains("not implemented")
        || m.contains("cannot distribute")
    {
        "unsupported"
    } else if m.contains("panicked") || m.contains("internal error") {
        "internal"
    } else if m.contains("materializing") {
        "harness"
    } else {
        "other"
    };
    class.to_string()
}

/// Runs the records of `file` through a fresh engine; returns its tally.
pub async fn run_file(file: &Path, options: &Options) -> FileReport {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut report = FileReport {
        file: name.clone(),
        ..FileReport::default()
    };
    if file.components().any(|c| c.as_os_str() == "spark") {
        report.add(
            0,
            "",
            Outcome::Skipped(
                "Spark-compatible functions and dialect (datafusion-spark) are not in the engine"
                    .into(),
            ),
        );
        return report;
    }
    let records = match sqllogictest::parse_file::<DFColumnType>(file) {
        Ok(r) => r,
        Err(e) => {
            report.add(0, "", Outcome::Skipped(format!("does not parse: {e}")));
            return report;
        }
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tables_dir = dir.path().join("tables");
    std::fs::create_dir_all(&tables_dir).expect("tables directory");
    let base = file
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut config = engine_config()
        .with_data_location(tables_dir.display().to_string())
        .with_data_location(dir.path().join("scratch").display().to_string())
        .with_data_location(base.display().to_string());
    if let Some(data) = &options.data_dir {
        config = config.with_data_location(data.display().to_string());
    }
    let engine = match Embedded::start(EmbeddedOptions {
        data_dir: Some(dir.path().join("engine")),
        config,
        slots: 4,
        memory_limit: Some(2 << 30),
        ..EmbeddedOptions::default()
    })
    .await
    {
        Ok(e) => e,
        Err(e) => {
            report.add(0, "", Outcome::Errored("harness".into(), e.to_string()));
            return report;
        }
    };
    let scratch = SessionContext::new_with_config(
        SessionConfig::new()
            .with_target_partitions(4)
            .with_information_schema(true),
    );
    let defaults: BTreeMap<String, Option<String>> = scratch
        .state()
        .config()
        .options()
        .entries()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    let state = Arc::new(Mutex::new(FileState::default()));
    let scratch_dir = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch_dir).expect("scratch directory");
    let db = Engine {
        engine,
        scratch: scratch.clone(),
        tables_dir,
        scratch_dir: scratch_dir.clone(),
        base,
        data_dir: options.data_dir.clone(),
        state: state.clone(),
        timeout: options.record_timeout,
    };
    let db = Arc::new(tokio::sync::Mutex::new(Some(db)));
    let mut runner = sqllogictest::Runner::new(move || {
        let db = db.clone();
        async move {
            let taken = db.lock().await.take();
            taken.ok_or_else(|| SltError("one connection per file".into()))
        }
    });
    runner.with_column_validator(sqllogictest::strict_column_validator);
    runner.with_normalizer(datafusion_sqllogictest::value_normalizer);
    runner.with_validator(validator);
    runner.add_label("Datafusion");
    for mut record in records {
        let (line, sql, expects_error) = match &record {
            Record::Halt { .. } => break,
            Record::Statement {
                loc, sql, expected, ..
            } => (
                loc.line(),
                sql.clone(),
                matches!(expected, StatementExpect::Error(_)),
            ),
            Record::Query {
                loc, sql, expected, ..
            } => (
                loc.line(),
                sql.clone(),
                matches!(expected, QueryExpect::Error(_)),
            ),
            _ => {
                // Control records (labels, conditions, hash thresholds) go to the runner.
                let _ = runner.run_async(record).await;
                continue;
            }
        };
        let skipped = record_conditions_skip(&record)
            .or_else(|| {
                SKIPPED_RECORDS
                    .iter()
                    .find(|(f, l, _)| *f == name && *l == line)
                    .map(|(_, _, why)| why.to_string())
            })
            .or_else(|| skip_reason(&sql, &state.lock().unwrap()));
        if let Some(reason) = skipped {
            report.add(line, &sql, Outcome::Skipped(reason));
            continue;
        }
        if let Some(DfStatement::CopyTo(_)) = parse(&sql) {
            // A COPY that prepares files for later reads is set-up: run by the harness,
            // in single-process DataFusion, into the file's scratch directory (it writes
            // single files and appends to them, which the engine's COPY does not).
            let local = sql.replace(
                "test_files/scratch/",
                &format!("{}/", scratch_dir.display()),
            );
            if let Ok(df) = scratch.sql(&local).await {
                let _ = df.collect().await;
            }
            report.add(
                line,
                &sql,
                Outcome::Skipped(
                    "COPY (set-up, run by the harness in single-process DataFusion)".into(),
                ),
            );
            continue;
        }
        if let Some((_, _, answer, why)) =
            DISPUTED.iter().find(|(f, l, ..)| *f == name && *l == line)
        {
            if let Record::Query {
                expected: QueryExpect::Results { results, .. },
                ..
            } = &mut record
            {
                *results = answer.iter().map(|r| r.to_string()).collect();
                report.disputed.push(format!("{name}:{line} {why}"));
            }
        }
        // A query without ORDER BY answers a set: compare it as one. (DataFusion's files
        // often rely on its one-process row order there.)
        let order = order_of(&sql);
        if order.ordered {
            runner.with_validator(validator);
        } else {
            runner.with_validator(unordered_validator);
        }
        let outcome = match runner.run_async(record).await {
            Ok(_) => Outcome::Passed,
            Err(e) => match e.kind() {
                TestErrorKind::QueryResultMismatch { .. }
                | TestErrorKind::QueryResultColumnsMismatch { .. }
                | TestErrorKind::StatementResultMismatch { .. } => Outcome::Failed(
                    e.to_string()
                        .lines()
                        .skip(1)
                        .take(12)
                        .collect::<Vec<_>>()
                        .join("\n    "),
                ),
                TestErrorKind::ErrorMismatch { .. } => Outcome::PassedOtherError,
                TestErrorKind::Ok { .. } => {
                    Outcome::Failed("an error was expected, the engine answered".into())
                }
                TestErrorKind::Fail { err, .. } => {
                    let message = err.to_string();
                    if message.starts_with("unavailable data") {
                        if let Some(statement) = parse(&sql) {
                            if let Route::External(name) = route(&statement) {
                                state.lock().unwrap().unavailable.insert(name);
                            }
                        }
                        Outcome::Skipped("a table whose data is not in the crate".into())
                    } else if message.starts_with("materializing ") {
                        if let Some(Route::Materialize(name)) = parse(&sql).as_ref().map(route) {
                            state.lock().unwrap().unavailable.insert(name);
                        }
                        Outcome::Skipped(
                            "set-up the harness cannot write as a file (a table of no columns)"
                                .into(),
                        )
                    } else if message.contains("Invalid function 'async_abs'") {
                        Outcome::Skipped(
                            "calls a function DataFusion's own runner registers in code".into(),
                        )
                    } else if let Some(table) = missing_table(&message) {
                        if state.lock().unwrap().created.contains(&table) {
                            Outcome::Errored(error_class(&message), message)
                        } else {
                            Outcome::Skipped(
                                "reads a table DataFusion's own runner registers in code".into(),
                            )
                        }
                    } else {
                        Outcome::Errored(error_class(&message), message)
                    }
                }
                other => Outcome::Errored("other".into(), other.to_string()),
            },
        };
        // An expected error that came counts as passed above; a set-up statement that
        // failed where the file expects an error is fine too.
        let lowered = sql.to_ascii_lowercase();
        let outcome = match outcome {
            Outcome::Errored(..) if expects_error => Outcome::PassedOtherError,
            Outcome::Failed(_) if order.limited && !order.ordered => Outcome::Skipped(
                "picks rows by an order the query leaves undefined (LIMIT without ORDER BY)".into(),
            ),
            // A task's error on a row the query need not have read is the same.
            Outcome::Errored(_, ref message)
                if order.limited && !order.ordered && message.contains("task") =>
            {
                Outcome::Skipped(
                    "picks rows by an order the query leaves undefined (LIMIT without ORDER BY)"
                        .into(),
                )
            }
            Outcome::Failed(_) if lowered.contains("over ()") || lowered.contains("over()") => {
                Outcome::Skipped(
                    "a window over the input's own order, which the query leaves undefined".into(),
                )
            }
            Outcome::Failed(_) if lowered.contains("approx_") => Outcome::Skipped(
                "an approximate function: its answer depends on how partial states merge".into(),
            ),
            o => o,
        };
        if parse(&sql).is_some_and(|s| matches!(route(&s), Route::Setting)) {
            track_setting(&sql, &scratch, &defaults, &mut state.lock().unwrap());
        }
        report.add(line, &sql, outcome);
    }
    report
}

/// Records whose conditions (`skipif` / `onlyif`) exclude DataFusion.
fn record_conditions_skip(record: &Record<DFColumnType>) -> Option<String> {
    let conditions = match record {
        Record::Statement { conditions, .. } | Record::Query { conditions, .. } => conditions,
        _ => return None,
    };
    // The labels DataFusion's own runner has, and this engine's name.
    let ours = |label: &str| label == "Datafusion" || label == "lambdafusion";
    conditions
        .iter()
        .any(|c| match c {
            sqllogictest::Condition::OnlyIf { label } => !ours(label),
            sqllogictest::Condition::SkipIf { label } => ours(label),
        })
        .then(|| "not for DataFusion (skipif / onlyif)".to_string())
}

/// The table of reports: file, records, passed, failed, errored (by class), skipped (by
/// reason), and a total line.
pub fn table(reports: &[FileReport]) -> String {
    let mut out = format!(
        "{:<34} {:>7} {:>7} {:>6} {:>7} {:>7}  errored by class / skipped by reason\n",
        "file", "records", "passed", "failed", "errored", "skipped"
    );
    let mut total = FileReport {
        file: "total".into(),
        ..FileReport::default()
    };
    for r in reports {
        let classes: Vec<String> = r.errored.iter().map(|(c, n)| format!("{c} {n}")).collect();
        out.push_str(&format!(
            "{:<34} {:>7} {:>7} {:>6} {:>7} {:>7}  {}\n",
            r.file,
            r.records,
            r.passed,
            r.failed,
            r.errored_total(),
            r.skipped_total(),
            classes.join(", ")
        ));
        total.records += r.records;
        total.passed += r.passed;
        total.other_error += r.other_error;
        total.failed += r.failed;
        for (c, n) in &r.errored {
            *total.errored.entry(c.clone()).or_default() += n;
        }
        for (s, n) in &r.skipped {
            *total.skipped.entry(s.clone()).or_default() += n;
        }
    }
    let classes: Vec<String> = total
        .errored
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    out.push_str(&format!(
        "{:<34} {:>7} {:>7} {:>6} {:>7} {:>7}  {}\n",
        "total",
        total.records,
        total.passed,
        total.failed,
        total.errored_total(),
        total.skipped_total(),
        classes.join(", ")
    ));
    let ran = total.passed + total.failed + total.errored_total();
    if ran > 0 {
        out.push_str(&format!(
            "\n{:.1}% of the records run passed ({} of {}; {} expected errors came with \
             another message); skipped:\n",
            100.0 * total.passed as f64 / ran as f64,
            total.passed,
            ran,
            total.other_error
        ));
    }
    for (reason, n) in &total.skipped {
        out.push_str(&format!("  {n:>6}  {reason}\n"));
    }
    let disputed: Vec<&String> = reports.iter().flat_map(|r| &r.disputed).collect();
    if !disputed.is_empty() {
        out.push_str("checked against a corrected answer (the file's is wrong):\n");
        for d in disputed {
            out.push_str(&format!("  {d}\n"));
        }
    }
    out
}
