//! The emulator's JSON configuration: functions, their limits, stream triggers and
//! schedules.
//!
//! See the crate documentation for an annotated example. Every field except
//! `functions[].name` / `functions[].command`, the stream mapping's `table`,
//! `function` and `dynamodb_endpoint`, and the schedule's `name`, `function` and
//! `expression` has a default.

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// Scheduled EventBridge rules, each invoking one function (see [`crate::schedule`]).
    #[serde(default)]
    pub schedules: Vec<ScheduleConfig>,
    /// Lambda's own waits: `aws` (default; async retries after about 1 and 2 minutes) or
    /// `fast` (200 / 400 ms, for tests). A function's `timing` overrides it.
    #[serde(default)]
    pub timing: Timing,
    /// Who may call function URLs with `"auth": "AWS_IAM"`: access key, secret key and
    /// the principal the key belongs to. Default: one credential `test` / `test` for
    /// `arn:aws:iam::<account>:user/test` (the local stack's dummy credentials).
    #[serde(default)]
    pub credentials: Option<Vec<Credential>>,
    /// The DynamoDB / S3 front between clients and moto_server (see [`crate::front`]);
    /// not started when absent.
    #[serde(default)]
    pub front: Option<crate::front::FrontConfig>,
    /// A CloudWatch Logs endpoint (`http://host:port`, the local stack's moto_server) the
    /// functions' output is shipped to as well, as Lambda does
    /// ([`crate::cloudwatch_logs`]); absent: only `<state_dir>/logs/`.
    #[serde(default)]
    pub logs_endpoint: Option<String>,
    /// The fault plan: a plan object (`{"seed": 7, "faults": {...}}`), or a string with
    /// the plan's JSON text or a path to it. When absent, `LAMBDAFUSION_FAULTS` is read
    /// at start-up (no faults if it is unset). See [`crate::faults`].
    #[serde(default)]
    pub fault_plan: Option<Value>,
    /// `enforce` (default): a function with a `role` may do only what the role's
    /// statements allow, checked by the front, the Invoke API and the stream trigger
    /// ([`crate::iam`]); `off`: nothing is checked.
    #[serde(default)]
    pub iam: crate::iam::IamMode,
    /// The account's concurrency quota that `GetAccountSettings` reports (AWS's default
    /// 1,000; new accounts may get 10). Only reported: `instances` bound each function.
    #[serde(default = "default_account_concurrency")]
    pub account_concurrency: u64,
}

fn default_account_concurrency() -> u64 {
    1_000
}

/// How long Lambda's own waits are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// As AWS: a failed asynchronous invocation is retried after about 1 minute, then
    /// after 2 more (<https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html>).
    #[default]
    Aws,
    /// For tests: retries after 200 ms, then 400 ms.
    Fast,
}

impl Timing {
    /// The default `retry_delays_ms` under this timing.
    pub fn retry_delays_ms(self) -> Vec<u64> {
        match self {
            Timing::Aws => vec![60_000, 120_000],
            Timing::Fast => vec![200, 400],
        }
    }
}

/// Credentials a SigV4-signed function URL request may use, and whose they are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// Access key id (`AWS_ACCESS_KEY_ID` of the caller).
    pub access_key: String,
    /// Secret access key the signature is checked with.
    pub secret_key: String,
    /// The principal, e.g. `arn:aws:iam::000000000000:user/test`: the event's
    /// `requestContext.authorizer.iam.userArn`.
    pub arn: String,
    /// `userId` / `callerId` in the event; derived from `arn` when absent
    /// (`AIDA…` for users, `AROA…:<session>` for assumed roles).
    #[serde(default)]
    pub user_id: Option<String>,
}

impl Credential {
    /// The unique id IAM would report for this principal.
    pub fn user_id(&self) -> String {
        if let Some(id) = &self.user_id {
            return id.clone();
        }
        // A stable, IAM-looking id: 17 characters from a hash of the ARN.
        let mut h = crate::injection::fnv1a(self.arn.as_bytes());
        let mut id = String::new();
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
        for _ in 0..17 {
            id.push(ALPHABET[(h % 32) as usize] as char);
            h /= 32;
            if h == 0 {
                h = crate::injection::fnv1a(id.as_bytes());
            }
        }
        match self.arn.split_once(":assumed-role/") {
            Some((_, role_session)) => {
                let session = role_session.rsplit('/').next().unwrap_or_default();
                format!("AROA{id}:{session}")
            }
            None => format!("AIDA{id}"),
        }
    }
}

/// A function URL: where it listens and how it authorizes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UrlConfig {
    /// `host:port` to serve the URL on (port 0: any free port).
    pub listen: String,
    /// `NONE` (default) or `AWS_IAM`: requests must then be SigV4-signed (service
    /// `lambda`) with one of the top-level `credentials`.
    #[serde(default)]
    pub auth: UrlAuth,
    /// Answer 503 `{"message":"Service Unavailable"}` when the function has not answered
    /// within this many seconds, as an API Gateway HTTP API in front of the function
    /// does (its integration timeout is at most 30 s); the invocation keeps running.
    /// Default: wait as long as the function runs (a plain function URL).
    #[serde(default)]
    pub integration_timeout_secs: Option<u64>,
}

/// A function URL's `AuthType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum UrlAuth {
    /// No authentication.
    #[default]
    #[serde(rename = "NONE")]
    None,
    /// SigV4 signatures checked against the configured credentials.
    #[serde(rename = "AWS_IAM")]
    AwsIam,
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
    /// Memory in MB (128..=10240), reported in `AWS_LAMBDA_FUNCTION_MEMORY_SIZE` and
    /// enforced: past it, the process tree is killed and the invocation fails with
    /// `Runtime.OutOfMemory`.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
    /// Size in MB (512..=10240) of the environment's `/tmp` (`TMPDIR`, a directory of
    /// its own under `<state_dir>/tmp`); past it the invocation fails and the
    /// environment is replaced.
    #[serde(default = "default_ephemeral_storage_mb")]
    pub ephemeral_storage_mb: u64,
    /// Retries of a failed asynchronous (`Event`) invocation, 0 to 2 as in AWS.
    #[serde(default = "default_max_retry_attempts")]
    pub max_retry_attempts: u32,
    /// Asynchronous events older than this are not run but sent to `on_failure`
    /// with condition `EventAgeExceeded`.
    #[serde(default = "default_max_event_age_secs")]
    pub max_event_age_secs: u64,
    /// Delay before each retry of an asynchronous event; the last value repeats if
    /// there are more retries than values. Default: from `timing`.
    #[serde(default)]
    pub retry_delays_ms: Option<Vec<u64>>,
    /// Overrides the top-level `timing` for this function (filled in at load).
    #[serde(default)]
    pub timing: Option<Timing>,
    /// Name of the function that receives the on-failure destination record.
    #[serde(default)]
    pub on_failure: Option<String>,
    /// Where to serve this function's URL (`host:port`), if it has one: short for
    /// `"url": {"listen": ...}`. After loading it always equals `url.listen`.
    #[serde(default)]
    pub url_listen: Option<String>,
    /// The function URL, with its auth type and integration timeout.
    #[serde(default)]
    pub url: Option<UrlConfig>,
    /// At most this many *synchronous* invocations may wait for a free instance; more
    /// are refused with 429 `TooManyRequestsException`. Unlimited when absent.
    /// Asynchronous events are always accepted, as by AWS's event queue.
    #[serde(default)]
    pub max_queue: Option<usize>,
    /// The execution role: the function gets its own credentials for it (as Lambda sets
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, replacing
    /// any in `env`) and may do only what its statements allow ([`crate::iam`]). Without
    /// one the function's requests are not checked.
    #[serde(default)]
    pub role: Option<crate::iam::RoleConfig>,
    /// Reserved concurrency, as `GetFunctionConcurrency` reports it; it also caps
    /// `instances` when the configuration comes from Terraform. None: unreserved.
    #[serde(default)]
    pub reserved_concurrency: Option<u64>,
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
    /// Batches delivered concurrently per shard, 1..=10 (AWS's `ParallelizationFactor`).
    /// Records with the same partition key (the table's hash key) stay in order and
    /// never are in two concurrent batches.
    #[serde(default = "default_parallelization_factor")]
    pub parallelization_factor: usize,
}

/// A scheduled EventBridge rule with one Lambda target (see [`crate::schedule`]): the
/// function gets EventBridge's scheduled event, asynchronously, every period.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// The rule's name (1 to 64 of `A-Z a-z 0-9 . - _`, as EventBridge's): the event's
    /// `resources` hold its ARN, `arn:aws:events:<region>:<account>:rule/<name>`.
    pub name: String,
    /// The function invoked (the rule's target).
    pub function: String,
    /// `rate(value unit)` (`rate(1 minute)`, `rate(5 minutes)`, ... `days`); a
    /// `cron(...)` expression only with `every_secs`.
    pub expression: String,
    /// The period in seconds locally, instead of the expression's (tests and the local
    /// stack need seconds, EventBridge's shortest is a minute).
    #[serde(default)]
    pub every_secs: Option<u64>,
    /// The target's retry policy: an event whose invocation was refused is retried until
    /// it is this old (60..=86400; default 86400, as EventBridge's).
    #[serde(default = "default_schedule_max_event_age_secs")]
    pub max_event_age_secs: u64,
    /// The target's retry policy: at most this many retries of a refused invocation
    /// (0..=185; default 185, as EventBridge's).
    #[serde(default = "default_schedule_max_retry_attempts")]
    pub max_retry_attempts: u32,
}

fn default_schedule_max_event_age_secs() -> u64 {
    86_400
}
fn default_schedule_max_retry_attempts() -> u32 {
    185
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
fn default_ephemeral_storage_mb() -> u64 {
    512
}
fn default_parallelization_factor() -> usize {
    1
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
        let config = config
            .apply_defaults()
            .map_err(|e| format!("invalid config {}: {e}", path.display()))?
            .resolve_paths(&cwd);
        config.validate()?;
        Ok(config)
    }

    /// Parses a config from a JSON string (used by tests), resolving paths against `base`.
    pub fn from_json(text: &str, base: &Path) -> Result<Config, Error> {
        let config: Config =
            serde_json::from_str(text).map_err(|e| format!("invalid config: {e}"))?;
        let config = config
            .apply_defaults()
            .map_err(|e| format!("invalid config: {e}"))?
            .resolve_paths(base);
        config.validate()?;
        Ok(config)
    }

    /// Fills in what depends on other fields: each function's `timing` (the top-level
    /// one unless set), `url` from `url_listen` and back, the default credential.
    pub fn apply_defaults(mut self) -> Result<Config, Error> {
        for f in &mut self.functions {
            f.timing.get_or_insert(self.timing);
            match (&f.url_listen, &f.url) {
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "function {:?}: give `url_listen` or `url`, not both",
                        f.name
                    )
                    .into())
                }
                (Some(listen), None) => {
                    f.url = Some(UrlConfig {
                        listen: listen.clone(),
                        auth: UrlAuth::None,
                        integration_timeout_secs: None,
                    })
                }
                (None, Some(url)) => f.url_listen = Some(url.listen.clone()),
                (None, None) => {}
            }
        }
        if self.credentials.is_none() {
            self.credentials = Some(vec![Credential {
                access_key: "test".into(),
                secret_key: "test".into(),
                arn: format!("arn:aws:iam::{}:user/test", self.account),
                user_id: None,
            }]);
        }
        Ok(self)
    }

    /// The credentials function URLs with `AWS_IAM` auth accept.
    pub fn credentials(&self) -> &[Credential] {
        self.credentials.as_deref().unwrap_or_default()
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
            // Ranges of MemorySize and EphemeralStorage in the Lambda API
            // (https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html).
            if !(128..=10_240).contains(&f.memory_mb) {
                return Err(format!("{at}: `memory_mb` must be 128..=10240 (as in AWS)").into());
            }
            if !(512..=10_240).contains(&f.ephemeral_storage_mb) {
                return Err(format!(
                    "{at}: `ephemeral_storage_mb` must be 512..=10240 (as in AWS)"
                )
                .into());
            }
            if let Some(url) = &f.url {
                if url.auth == UrlAuth::AwsIam && self.credentials().is_empty() {
                    return Err(format!(
                        "{at}: the URL's auth is AWS_IAM but `credentials` is empty"
                    )
                    .into());
                }
                if url
                    .integration_timeout_secs
                    .is_some_and(|t| t == 0 || t > 30)
                {
                    return Err(format!(
                        "{at}: `url.integration_timeout_secs` must be 1..=30 (an HTTP API's limit)"
                    )
                    .into());
                }
            }
        }
        let mut keys = BTreeSet::new();
        for c in self.credentials() {
            if c.access_key.is_empty() || c.secret_key.is_empty() {
                return Err("credentials: `access_key` and `secret_key` must not be empty".into());
            }
            if !c.arn.starts_with("arn:") || c.arn.split(':').count() < 6 {
                return Err(format!("credentials: {:?} is not an ARN", c.arn).into());
            }
            if !keys.insert(c.access_key.as_str()) {
                return Err(
                    format!("credentials: access key {:?} given twice", c.access_key).into(),
                );
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
            if !(1..=10).contains(&m.parallelization_factor) {
                return Err(format!("{at}: `parallelization_factor` must be 1..=10").into());
            }
            crate::filter::parse_filters(&m.filters).map_err(|e| format!("{at}: {e}"))?;
        }
        let mut rules = BTreeSet::new();
        for s in &self.schedules {
            let at = format!("schedule {:?}", s.name);
            // Rule names as PutRule takes them
            // (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutRule.html).
            if s.name.is_empty()
                || s.name.len() > 64
                || !s
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            {
                return Err(format!(
                    "{at}: a rule name must be 1 to 64 letters, digits, '.', '-' or '_'"
                )
                .into());
            }
            if !rules.insert(s.name.as_str()) {
                return Err(format!("{at}: defined twice").into());
            }
            if !names.contains(s.function.as_str()) {
                return Err(format!("{at}: unknown function {:?}", s.function).into());
            }
            crate::schedule::period(s).map_err(|e| format!("{at}: {e}"))?;
            // The target's RetryPolicy ranges
            // (https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_RetryPolicy.html).
            if !(60..=86_400).contains(&s.max_event_age_secs) {
                return Err(format!(
                    "{at}: `max_event_age_secs` must be 60..=86400 (as in EventBridge)"
                )
                .into());
            }
            if s.max_retry_attempts > 185 {
                return Err(format!(
                    "{at}: `max_retry_attempts` must be 0..=185 (as in EventBridge)"
                )
                .into());
            }
        }
        if let Some(front) = &self.front {
            front.validate().map_err(|e| format!("front: {e}"))?;
        }
        if let Some(plan) = &self.fault_plan {
            crate::faults::plan_from_value(plan).map_err(|e| format!("fault_plan: {e}"))?;
        }
        Ok(())
    }
}

impl FunctionConfig {
    /// Delay before retry number `retry` (1-based).
    pub fn retry_delay(&self, retry: u32) -> Duration {
        let delays = self
            .retry_delays_ms
            .clone()
            .unwrap_or_else(|| self.timing.unwrap_or_default().retry_delays_ms());
        let idx = (retry.max(1) - 1) as usize;
        let ms = delays.get(idx).or(delays.last()).copied().unwrap_or(0);
        Duration::from_millis(ms)
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
        // AWS timing by default: about 1 and 2 minutes.
        assert_eq!(c.functions[0].retry_delay(1).as_millis(), 60_000);
        assert_eq!(c.functions[0].retry_delay(5).as_millis(), 120_000);
        assert_eq!(c.functions[0].memory_mb, 128);
        assert_eq!(c.functions[0].ephemeral_storage_mb, 512);
        assert_eq!(
            c.credentials()[0].arn,
            "arn:aws:iam::000000000000:user/test"
        );
    }

    #[test]
    fn timing_urls_and_credentials() {
        let c = Config::from_json(
            r#"{"timing": "fast", "functions": [
                {"name": "a", "command": ["x"], "url_listen": "127.0.0.1:0"},
                {"name": "b", "command": ["x"], "timing": "aws", "retry_delays_ms": [5],
                 "url": {"listen": "127.0.0.1:0", "auth": "AWS_IAM", "integration_timeout_secs": 30}}],
               "credentials": [{"access_key": "k", "secret_key": "s", "arn": "arn:aws:iam::1:user/u"}]}"#,
            Path::new("/"),
        )
        .unwrap();
        let (a, b) = (&c.functions[0], &c.functions[1]);
        assert_eq!(a.retry_delay(1).as_millis(), 200);
        assert_eq!(a.retry_delay(2).as_millis(), 400);
        assert_eq!(a.url.as_ref().unwrap().auth, UrlAuth::None);
        assert_eq!(b.timing, Some(Timing::Aws));
        assert_eq!(b.retry_delay(3).as_millis(), 5, "explicit delays win");
        assert_eq!(b.url_listen.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(b.url.as_ref().unwrap().auth, UrlAuth::AwsIam);
        assert_eq!(c.credentials().len(), 1);
        assert!(c.credentials()[0].user_id().starts_with("AIDA"));
        assert_eq!(c.credentials()[0].user_id(), c.credentials()[0].user_id());

        for (bad, why) in [
            (
                r#"{"functions":[{"name":"f","command":["x"],"memory_mb":64}]}"#,
                "memory_mb",
            ),
            (
                r#"{"functions":[{"name":"f","command":["x"],"ephemeral_storage_mb":100}]}"#,
                "ephemeral_storage_mb",
            ),
            (
                r#"{"functions":[{"name":"f","command":["x"],"url_listen":"a:1","url":{"listen":"a:1"}}]}"#,
                "not both",
            ),
            (
                r#"{"functions":[{"name":"f","command":["x"],"url":{"listen":"a:1","integration_timeout_secs":31}}]}"#,
                "1..=30",
            ),
            (
                r#"{"credentials":[],"functions":[{"name":"f","command":["x"],"url":{"listen":"a:1","auth":"AWS_IAM"}}]}"#,
                "credentials",
            ),
            (
                r#"{"functions":[{"name":"f","command":["x"]}],"stream_mappings":[{"table":"t","function":"f","dynamodb_endpoint":"e","parallelization_factor":11}]}"#,
                "parallelization_factor",
            ),
            (r#"{"timing":"slow"}"#, "unknown variant"),
        ] {
            let e = Config::from_json(bad, Path::new("/")).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn schedules_defaults_and_validation() {
        let c = Config::from_json(
            r#"{"functions":[{"name":"f","command":["x"]}],
                "schedules":[{"name":"sweep","function":"f","expression":"rate(1 minute)"},
                             {"name":"fast.sweep_2","function":"f","expression":"rate(2 hours)",
                              "every_secs":1,"max_event_age_secs":60,"max_retry_attempts":0}]}"#,
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(c.schedules.len(), 2);
        let s = &c.schedules[0];
        assert_eq!(
            (s.every_secs, s.max_event_age_secs, s.max_retry_attempts),
            (None, 86_400, 185),
            "EventBridge's default retry policy"
        );
        assert_eq!(c.schedules[1].every_secs, Some(1));

        let with = |schedule: &str| {
            format!(r#"{{"functions":[{{"name":"f","command":["x"]}}],"schedules":[{schedule}]}}"#)
        };
        for (bad, why) in [
            (
                r#"{"name":"s","function":"g","expression":"rate(1 minute)"}"#,
                "unknown function \"g\"",
            ),
            (
                r#"{"name":"s","function":"f","expression":"rate(1 minutes)"}"#,
                "singular",
            ),
            (
                r#"{"name":"s","function":"f","expression":"cron(0 * * * ? *)"}"#,
                "cron(...) schedules are not emulated",
            ),
            (
                r#"{"name":"s","function":"f","expression":"rate(1 minute)","every_secs":0}"#,
                "at least 1",
            ),
            (
                r#"{"name":"s","function":"f","expression":"rate(1 minute)","max_event_age_secs":59}"#,
                "60..=86400",
            ),
            (
                r#"{"name":"s","function":"f","expression":"rate(1 minute)","max_retry_attempts":186}"#,
                "0..=185",
            ),
            (
                r#"{"name":"a b","function":"f","expression":"rate(1 minute)"}"#,
                "rule name",
            ),
            (
                r#"{"name":"s","function":"f","expression":"rate(1 minute)"},{"name":"s","function":"f","expression":"rate(2 minutes)"}"#,
                "defined twice",
            ),
            (
                r#"{"name":"s","function":"f","expression":"rate(1 minute)","input":"{}"}"#,
                "unknown field",
            ),
            (
                r#"{"name":"s","function":"f"}"#,
                "missing field `expression`",
            ),
        ] {
            let e = Config::from_json(&with(bad), Path::new("/")).unwrap_err();
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        // A cron expression runs at the local period.
        let c = Config::from_json(
            &with(r#"{"name":"s","function":"f","expression":"cron(0 * * * ? *)","every_secs":5}"#),
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(c.schedules[0].expression, "cron(0 * * * ? *)");
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
