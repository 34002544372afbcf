//! The emulator's JSON configuration: functions, their limits, and stream triggers.
//!
//! See the crate documentation for an annotated example. Every field except
//! `functions[].name` / `functions[].command` and the stream mapping's `table`,
//! `function` and `dynamodb_endpoint` has a default.

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::Error;

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// AWS region reported in ARNs, function environments and stream records.
    #[serde(default = "default_region")]
    pub region: String,
    /// Account id used in ARNs.
    #[serde(default = "default_account")]
    pub account: String,
    /// Address of the Lambda Invoke API (`AWS_ENDPOINT_URL_LAMBDA` points here).
    /// Port 0 picks a free port (the ready file tells which).
    #[serde(default = "default_invoke_listen")]
    pub invoke_listen: String,
    /// Directory for `emulator.ready` and `logs/`. Relative paths resolve against the
    /// current directory.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// The emulated functions.
    #[serde(default)]
    pub functions: Vec<FunctionConfig>,
    /// DynamoDB stream triggers (event-source mappings).
    #[serde(default)]
    pub stream_mappings: Vec<StreamMappingConfig>,
}

/// One Lambda function: a command that runs the real `lambda_runtime` loop.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionConfig {
    /// Function name (what `Invoke` takes, alone or inside an ARN).
    pub name: String,
    /// Program and arguments. A relative program path containing `/` resolves against
    /// the current directory.
    pub command: Vec<String>,
    /// Environment of the function (on top of the variables Lambda itself sets). The
    /// emulator's own environment is *not* inherited, except `PATH`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Number of execution environments (OS processes); also the concurrency limit.
    #[serde(default = "default_instances")]
    pub instances: usize,
    /// Invocation timeout; past it the process is killed (`Sandbox.Timedout`).
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Reported in `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`; not enforced.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
    /// Retries of a failed asynchronous (`Event`) invocation, 0 to 2 as in AWS.
    #[serde(default = "default_max_retry_attempts")]
    pub max_retry_attempts: u32,
    /// Asynchronous events older than this are not run but sent to `on_failure`
    /// with condition `EventAgeExceeded`.
    #[serde(default = "default_max_event_age_secs")]
    pub max_event_age_secs: u64,
    /// Delay before each retry of an asynchronous event (AWS waits about 1 and 2
    /// minutes); the last value repeats if there are more retries than values.
    #[serde(default = "default_retry_delays_ms")]
    pub retry_delays_ms: Vec<u64>,
    /// Name of the function that receives the on-failure destination record.
    #[serde(default)]
    pub on_failure: Option<String>,
    /// Where to serve this function's URL (`host:port`), if it has one.
    #[serde(default)]
    pub url_listen: Option<String>,
    /// At most this many invocations may wait for a free instance; more are refused
    /// with 429 `TooManyRequestsException`. Unlimited when absent.
    #[serde(default)]
    pub max_queue: Option<usize>,
}

/// A DynamoDB stream trigger (Lambda event-source mapping).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamMappingConfig {
    /// Table whose stream is read.
    pub table: String,
    /// Function invoked (synchronously, like the real poller) with each batch.
    pub function: String,
    /// DynamoDB Streams endpoint, e.g. `http://127.0.0.1:5050` for moto_server.
    pub dynamodb_endpoint: String,
    /// Most records per invocation.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Pause between two `GetRecords` rounds.
    #[serde(default = "default_poll_interval_ms")]
    pub poll_interval_ms: u64,
    /// Retries of a failing batch before its records are logged to
    /// `logs/stream-failures.log` and skipped; -1 retries forever (the AWS default).
    #[serde(default = "default_stream_retries")]
    pub maximum_retry_attempts: i64,
    /// On a function error, split the batch in two and retry the halves (as AWS's
    /// `BisectBatchOnFunctionError`) instead of retrying it whole.
    #[serde(default)]
    pub bisect_batch_on_function_error: bool,
    /// Lambda event-filtering patterns (ORed). Each entry is a pattern object, or
    /// `{"Pattern": "<pattern as a JSON string>"}` as in the AWS API.
    #[serde(default)]
    pub filters: Vec<Value>,
    /// `LATEST` (default) or `TRIM_HORIZON`, for the shards that exist at start-up.
    #[serde(default = "default_starting_position")]
    pub starting_position: String,
}

fn default_region() -> String {
    "us-east-1".into()
}
fn default_account() -> String {
    "000000000000".into()
}
fn default_invoke_listen() -> String {
    "127.0.0.1:9001".into()
}
fn default_state_dir() -> PathBuf {
    PathBuf::from(".state")
}
fn default_instances() -> usize {
    1
}
fn default_timeout_secs() -> u64 {
    3
}
fn default_memory_mb() -> u64 {
    128
}
fn default_max_retry_attempts() -> u32 {
    2
}
fn default_max_event_age_secs() -> u64 {
    21_600
}
fn default_retry_delays_ms() -> Vec<u64> {
    vec![200, 400]
}
fn default_batch_size() -> usize {
    100
}
fn default_poll_interval_ms() -> u64 {
    250
}
fn default_stream_retries() -> i64 {
    3
}
fn default_starting_position() -> String {
    "LATEST".into()
}

impl Config {
    /// Reads, parses, validates a config file and resolves its relative paths against
    /// the current directory.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        let config: Config = serde_json::from_str(&text)
            .map_err(|e| format!("invalid config {}: {e}", path.display()))?;
        let cwd = std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
        let config = config.resolve_paths(&cwd);
        config.validate()?;
        Ok(config)
    }

    /// Parses a config from a JSON string (used by tests), resolving paths against `base`.
    pub fn from_json(text: &str, base: &Path) -> Result<Config, Error> {
        let config: Config =
            serde_json::from_str(text).map_err(|e| format!("invalid config: {e}"))?;
        let config = config.resolve_paths(base);
        config.validate()?;
        Ok(config)
    }

    /// Makes `state_dir` and relative program paths absolute.
    pub fn resolve_paths(mut self, base: &Path) -> Config {
        if self.state_dir.is_relative() {
            self.state_dir = base.join(&self.state_dir);
        }
        for f in &mut self.functions {
            if let Some(program) = f.command.first_mut() {
                let p = Path::new(program.as_str());
                if p.is_relative() && program.contains('/') {
                    *program = base.join(p).to_string_lossy().into_owned();
                }
            }
        }
        self
    }

    /// Checks names, references and ranges; the error says what is wrong and where.
    pub fn validate(&self) -> Result<(), Error> {
        let mut names = BTreeSet::new();
        for f in &self.functions {
            let at = format!("function {:?}", f.name);
            if f.name.is_empty() || f.name.contains(':') || f.name.contains('/') {
                return Err(
                    format!("{at}: a function name must be non-empty, without ':' or '/'").into(),
                );
            }
            if !names.insert(f.name.as_str()) {
                return Err(format!("{at}: defined twice").into());
            }
            if f.command.is_empty() || f.command[0].is_empty() {
                return Err(format!("{at}: `command` must name a program").into());
            }
            if f.instances == 0 {
                return Err(format!("{at}: `instances` must be at least 1").into());
            }
            if f.timeout_secs == 0 || f.timeout_secs > 900 {
                return Err(format!("{at}: `timeout_secs` must be 1..=900").into());
            }
            if f.max_retry_attempts > 2 {
                return Err(format!("{at}: `max_retry_attempts` must be 0..=2 (as in AWS)").into());
            }
            if f.max_event_age_secs == 0 || f.max_event_age_secs > 21_600 {
                return Err(format!("{at}: `max_event_age_secs` must be 1..=21600").into());
            }
        }
        for f in &self.functions {
            if let Some(dest) = &f.on_failure {
                if !names.contains(dest.as_str()) {
                    return Err(format!(
                        "function {:?}: `on_failure` names unknown function {dest:?}",
                        f.name
                    )
                    .into());
                }
            }
        }
        for m in &self.stream_mappings {
            let at = format!("stream mapping for table {:?}", m.table);
            if !names.contains(m.function.as_str()) {
                return Err(format!("{at}: unknown function {:?}", m.function).into());
            }
            if m.batch_size == 0 || m.batch_size > 10_000 {
                return Err(format!("{at}: `batch_size` must be 1..=10000").into());
            }
            if m.maximum_retry_attempts < -1 {
                return Err(format!("{at}: `maximum_retry_attempts` must be -1 or more").into());
            }
            if m.starting_position != "LATEST" && m.starting_position != "TRIM_HORIZON" {
                return Err(
                    format!("{at}: `starting_position` must be LATEST or TRIM_HORIZON").into(),
                );
            }
            crate::filter::parse_filters(&m.filters).map_err(|e| format!("{at}: {e}"))?;
        }
        Ok(())
    }
}

impl FunctionConfig {
    /// Delay before retry number `retry` (1-based).
    pub fn retry_delay(&self, retry: u32) -> std::time::Duration {
        let idx = (retry.max(1) - 1) as usize;
        let ms = self
            .retry_delays_ms
            .get(idx)
            .or(self.retry_delays_ms.last())
            .copied()
            .unwrap_or(0);
        std::time::Duration::from_millis(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_relative_paths() {
        let c = Config::from_json(
            r#"{"functions":[{"name":"f","command":["target/debug/x","--flag"]}]}"#,
            Path::new("/repo"),
        )
        .unwrap();
        assert_eq!(c.region, "us-east-1");
        assert_eq!(c.state_dir, PathBuf::from("/repo/.state"));
        assert_eq!(
            c.functions[0].command,
            vec!["/repo/target/debug/x", "--flag"]
        );
        assert_eq!(c.functions[0].retry_delay(1).as_millis(), 200);
        assert_eq!(c.functions[0].retry_delay(5).as_millis(), 400);
    }

    #[test]
    fn rejects_bad_references() {
        let e = Config::from_json(
            r#"{"functions":[{"name":"f","command":["x"],"on_failure":"nope"}]}"#,
            Path::new("/"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown function"), "{e}");
        let e = Config::from_json(
            r#"{"functions":[{"name":"f","command":["x"],"colour":1}]}"#,
            Path::new("/"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
}
