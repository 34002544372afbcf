//! The fault plan: one seeded description of which faults the local AWS stack and the
//! functions inject, and how often — shared by the Lambda emulator (`local/emulator`), its
//! DynamoDB / S3 front, and the crash points of `scheduler-fn` / `executor-fn`.
//!
//! A plan is JSON, given inline or as a path in `LAMBDAFUSION_FAULTS`:
//!
//! ```json
//! {"seed": 7,
//!  "faults": {
//!    "executor.crash_after_put": 0.05,
//!    "s3.slow_first_byte": {"rate": 0.1, "ms": 200},
//!    "s3.bandwidth": {"mb_per_s": 40}
//!  }}
//! ```
//!
//! A bare number is a rate; an object carries a `rate` (default 1 when only parameters
//! are given) and the fault's parameters (`ms`, `max_ms`, `mb_per_s`, `limit`, `factor`,
//! `partition`). Unknown
//! fault names are errors that list the known ones.
//!
//! **Decisions are a pure function of the seed, the fault and a key** the injection site
//! chooses from what identifies the event (for a task: a hash of its SQL, stage,
//! partition and attempt — never a random id), so the same seed injects the same faults
//! into the same events on every run. See [`FaultPlan::fires`].
//!
//! **Every injected fault is recorded**: in memory ([`Counters`]) where the injector is a
//! long-lived process (the emulator), and as a line in the file named by
//! `LAMBDAFUSION_FAULT_LOG` where the injector is a function process about to crash
//! ([`log_injected`]). The emulator serves the sum of both, so a test can assert that what
//! it planned really happened.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Environment variable holding the plan (JSON text, or a path to a JSON file).
pub const ENV_PLAN: &str = "LAMBDAFUSION_FAULTS";
/// Environment variable naming the file function processes append injected faults to.
pub const ENV_LOG: &str = "LAMBDAFUSION_FAULT_LOG";

macro_rules! kinds {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, )*) => {
        /// Every fault the stack and the functions can inject.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum FaultKind {
            $( $(#[$doc])* $variant, )*
        }

        impl FaultKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [FaultKind] = &[$(FaultKind::$variant,)*];

            /// The name used in plans and reports.
            pub fn as_str(self) -> &'static str {
                match self { $(FaultKind::$variant => $name,)* }
            }
        }
    };
}

kinds! {
    /// Lambda delivers an `Event` invocation twice.
    LambdaDuplicateEvent = "lambda.duplicate_event",
    /// Lambda accepts an `Event` invocation (202) and never runs it, telling no one.
    LambdaDropEvent = "lambda.drop_event",
    /// Lambda accepts an `Event` invocation and sends it unrun to the on-failure destination.
    LambdaDropToDestination = "lambda.drop_to_destination",
    /// An `Event` invocation waits `ms` (up to `max_ms`) before it runs.
    LambdaDelayEvent = "lambda.delay_event",
    /// `Invoke` is answered 429 `TooManyRequestsException`.
    LambdaThrottleInvoke = "lambda.throttle_invoke",
    /// An invocation lands on a new execution environment and pays `ms` of start-up.
    LambdaColdStart = "lambda.cold_start",
    /// At most `limit` concurrent invocations per function; beyond it synchronous
    /// invokes get 429 and asynchronous events wait in the queue.
    LambdaConcurrencyLimit = "lambda.concurrency_limit",
    /// The executor process dies before it does any work.
    ExecutorCrashBeforeWork = "executor.crash_before_work",
    /// The executor process dies while the task runs (after its first batch).
    ExecutorCrashMidWork = "executor.crash_mid_work",
    /// The executor process dies after its S3 PUT, before the commit.
    ExecutorCrashAfterPut = "executor.crash_after_put",
    /// The executor process dies after its commit, before the fast-path wake-up.
    ExecutorCrashAfterCommit = "executor.crash_after_commit",
    /// A task's first attempt takes `factor` times as long as its work, and at least `ms`
    /// more (it waits before its commit): a straggler. `partition` picks one task of each
    /// stage.
    ExecutorSlowTask = "executor.slow_task",
    /// The scheduler process dies after claiming a stage, before dispatching it.
    SchedulerCrashAfterClaim = "scheduler.crash_after_claim",
    /// The scheduler process dies after part of a stage's invocations.
    SchedulerCrashMidDispatch = "scheduler.crash_mid_dispatch",
    /// The scheduler process dies while recording a new job.
    SchedulerCrashMidSubmit = "scheduler.crash_mid_submit",
    /// DynamoDB answers 400 `ProvisionedThroughputExceededException`.
    DynamoDbThroughputExceeded = "dynamodb.throughput_exceeded",
    /// DynamoDB answers 400 `ThrottlingException`.
    DynamoDbThrottling = "dynamodb.throttling",
    /// DynamoDB answers 500 `InternalServerError`.
    DynamoDbInternalError = "dynamodb.internal_error",
    /// S3 answers 503 `SlowDown`.
    S3SlowDown = "s3.slow_down",
    /// S3 answers 500 `InternalError`.
    S3InternalError = "s3.internal_error",
    /// An S3 response's first byte is late by `ms` (up to `max_ms`).
    S3SlowFirstByte = "s3.slow_first_byte",
    /// S3 response bodies stream at no more than `mb_per_s` per connection.
    S3Bandwidth = "s3.bandwidth",
    /// A stream record is delivered twice.
    StreamsDuplicateRecord = "streams.duplicate_record",
    /// A stream batch is held back `ms` (up to `max_ms`).
    StreamsDelayRecord = "streams.delay_record",
    /// A stream batch is delivered as two smaller batches.
    StreamsSplitBatch = "streams.split_batch",
}

impl FaultKind {
    /// The class of a fault: the part of its name before the dot (`lambda`, `executor`,
    /// `scheduler`, `dynamodb`, `s3`, `streams`).
    pub fn class(self) -> &'static str {
        let name = self.as_str();
        &name[..name.find('.').unwrap_or(name.len())]
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FaultKind {
    type Err = PlanError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FaultKind::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| PlanError::UnknownFault(s.to_string()))
    }
}

impl Serialize for FaultKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FaultKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// What is wrong with a plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A fault name that does not exist.
    #[error("unknown fault {0:?}; known faults: {known}", known = known_names())]
    UnknownFault(String),
    /// The plan is not valid JSON of the expected shape.
    #[error("invalid fault plan: {0}")]
    Invalid(String),
    /// The plan file could not be read.
    #[error("cannot read fault plan {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn known_names() -> String {
    FaultKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One fault's rate and parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Probability, 0 to 1, that an event is hit.
    #[serde(default = "one")]
    pub rate: f64,
    /// Delay in milliseconds (delays, slow first byte, cold starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
    /// Upper bound of a delay: the delay is drawn between `ms` and `max_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<u64>,
    /// Bandwidth cap in MB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mb_per_s: Option<f64>,
    /// A count limit (concurrency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// How many times longer (a slow task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
    /// Only this task (partition) of a stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
}

fn one() -> f64 {
    1.0
}

impl Fault {
    /// A fault hitting events with probability `rate`, without parameters.
    pub fn rate(rate: f64) -> Self {
        Fault {
            rate,
            ms: None,
            max_ms: None,
            mb_per_s: None,
            limit: None,
            factor: None,
            partition: None,
        }
    }
}

/// A rate (`0.05`) or a full [`Fault`] object.
#[derive(Deserialize)]
#[serde(untagged)]
enum FaultOrRate {
    Rate(f64),
    Fault(Fault),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    faults: BTreeMap<String, FaultOrRate>,
}

/// A seeded fault plan. See the [crate docs](crate).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FaultPlan {
    /// The seed every decision derives from.
    pub seed: u64,
    /// The faults to inject.
    pub faults: BTreeMap<FaultKind, Fault>,
}

impl FaultPlan {
    /// The empty plan: nothing is ever injected.
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses a plan from JSON text.
    pub fn parse(text: &str) -> Result<Self, PlanError> {
        let raw: RawPlan =
            serde_json::from_str(text).map_err(|e| PlanError::Invalid(e.to_string()))?;
        let mut faults = BTreeMap::new();
        for (name, f) in raw.faults {
            let kind: FaultKind = name.parse()?;
            let fault = match f {
                FaultOrRate::Rate(rate) => Fault::rate(rate),
                FaultOrRate::Fault(f) => f,
            };
            if !(0.0..=1.0).contains(&fault.rate) {
                return Err(PlanError::Invalid(format!(
                    "{name}: rate {} is not between 0 and 1",
                    fault.rate
                )));
            }
            if let (Some(lo), Some(hi)) = (fault.ms, fault.max_ms) {
                if hi < lo {
                    return Err(PlanError::Invalid(format!(
                        "{name}: max_ms {hi} is below ms {lo}"
                    )));
                }
            }
            faults.insert(kind, fault);
        }
        Ok(Self {
            seed: raw.seed,
            faults,
        })
    }

    /// The plan in `LAMBDAFUSION_FAULTS` (JSON text, or a path to a JSON file); the empty
    /// plan when it is unset or blank.
    pub fn from_env() -> Result<Self, PlanError> {
        match std::env::var(ENV_PLAN) {
            Ok(v) if !v.trim().is_empty() => Self::from_text_or_path(&v),
            _ => Ok(Self::none()),
        }
    }

    /// Parses `value` as JSON when it starts with `{`, else reads the file it names.
    pub fn from_text_or_path(value: &str) -> Result<Self, PlanError> {
        let value = value.trim();
        if value.starts_with('{') {
            return Self::parse(value);
        }
        let text = std::fs::read_to_string(value).map_err(|source| PlanError::Read {
            path: value.to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// The plan as JSON (what [`FaultPlan::parse`] reads back).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// Whether the plan injects anything at all.
    pub fn is_empty(&self) -> bool {
        self.faults.values().all(|f| f.rate <= 0.0)
    }

    /// The fault's settings, if the plan has it.
    pub fn get(&self, kind: FaultKind) -> Option<&Fault> {
        self.faults.get(&kind).filter(|f| f.rate > 0.0)
    }

    /// Whether `kind` hits the event identified by `key`: a pure function of the seed,
    /// the kind and the key (the same on every run and in every process).
    pub fn fires(&self, kind: FaultKind, key: &str) -> bool {
        match self.get(kind) {
            Some(f) if f.rate >= 1.0 => true,
            Some(f) => self.unit(kind, key) < f.rate,
            None => false,
        }
    }

    /// A number in `[0, 1)` derived from the seed, the kind and the key.
    pub fn unit(&self, kind: FaultKind, key: &str) -> f64 {
        let h = mix(self.seed, kind.as_str(), key);
        (h >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The delay `kind` imposes on the event `key` when it fires: `ms`, or a value drawn
    /// between `ms` and `max_ms`.
    pub fn delay_ms(&self, kind: FaultKind, key: &str) -> Option<u64> {
        if !self.fires(kind, key) {
            return None;
        }
        let f = self.get(kind)?;
        let lo = f.ms.unwrap_or(0);
        let hi = f.max_ms.unwrap_or(lo).max(lo);
        let span = (hi - lo) as f64;
        // A second, independent draw for the length of the delay.
        Some(lo + (self.unit(kind, &format!("{key}#delay")) * span) as u64)
    }
}

/// A stable 64-bit hash of `text` (the same on every platform, run and version), for
/// building fault keys from content such as a query's SQL.
pub fn stable_hash(text: &str) -> u64 {
    mix(0, "", text)
}

/// FNV-1a over the seed, kind and key, then the SplitMix64 finalizer: cheap, stable across
/// platforms and versions, and well spread even for keys that differ in one character.
fn mix(seed: u64, kind: &str, key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed
        .to_le_bytes()
        .iter()
        .chain(kind.as_bytes())
        .chain(&[0xff])
        .chain(key.as_bytes())
    {
        h ^= u64::from(*byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A plan that can change while processes run: the emulator swaps it when a test asks
/// (`PUT /_lambdafusion/faults`) and writes it to a file; function processes watching that
/// file (`LAMBDAFUSION_FAULTS` naming it) pick the new plan up at their next decision.
/// Cloning shares the plan.
#[derive(Debug, Clone)]
pub struct LivePlan {
    plan: Arc<RwLock<Arc<FaultPlan>>>,
    file: Option<PathBuf>,
    stamp: Arc<Mutex<Option<SystemTime>>>,
}

impl LivePlan {
    /// A plan that never changes (unless replaced in this process).
    pub fn fixed(plan: FaultPlan) -> Self {
        Self {
            plan: Arc::new(RwLock::new(Arc::new(plan))),
            file: None,
            stamp: Arc::new(Mutex::new(None)),
        }
    }

    /// A plan kept in `file` (written now with `plan`) and read again whenever the
    /// file changes.
    pub fn in_file(plan: FaultPlan, file: &Path) -> Result<Self, PlanError> {
        let live = Self {
            plan: Arc::new(RwLock::new(Arc::new(FaultPlan::none()))),
            file: Some(file.to_path_buf()),
            stamp: Arc::new(Mutex::new(None)),
        };
        live.replace(plan)?;
        Ok(live)
    }

    /// The plan of `LAMBDAFUSION_FAULTS`: JSON text (fixed), or a path whose file is
    /// watched; none when unset.
    pub fn from_env() -> Result<Self, PlanError> {
        match std::env::var(ENV_PLAN) {
            Ok(v) if !v.trim().is_empty() && !v.trim().starts_with('{') => {
                let file = PathBuf::from(v.trim());
                let live = Self {
                    plan: Arc::new(RwLock::new(Arc::new(FaultPlan::none()))),
                    file: Some(file),
                    stamp: Arc::new(Mutex::new(None)),
                };
                live.reload()?;
                Ok(live)
            }
            _ => Ok(Self::fixed(FaultPlan::from_env()?)),
        }
    }

    /// The file the plan lives in, if any.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The plan now (read again from its file if the file changed).
    pub fn current(&self) -> Arc<FaultPlan> {
        if self.file.is_some() {
            // A plan file being rewritten may be read half-written: keep the old plan
            // then; the next call reads it again.
            let _ = self.reload();
        }
        self.plan.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the plan (and rewrites its file, atomically, if it has one).
    pub fn replace(&self, plan: FaultPlan) -> Result<(), PlanError> {
        if let Some(file) = &self.file {
            let tmp = file.with_extension("json.tmp");
            std::fs::write(&tmp, plan.to_json())
                .and_then(|()| std::fs::rename(&tmp, file))
                .map_err(|source| PlanError::Read {
                    path: file.display().to_string(),
                    source,
                })?;
            *self.stamp.lock().unwrap_or_else(|p| p.into_inner()) =
                std::fs::metadata(file).and_then(|m| m.modified()).ok();
        }
        *self.plan.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(plan);
        Ok(())
    }

    fn reload(&self) -> Result<(), PlanError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let modified = std::fs::metadata(file).and_then(|m| m.modified()).ok();
        let mut stamp = self.stamp.lock().unwrap_or_else(|p| p.into_inner());
        if modified.is_none() || *stamp == modified {
            return Ok(());
        }
        let plan = FaultPlan::from_text_or_path(&file.display().to_string())?;
        *self.plan.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(plan);
        *stamp = modified;
        Ok(())
    }
}

/// Injected faults counted by kind, in memory (the emulator's own injections).
#[derive(Debug, Default)]
pub struct Counters {
    counts: Mutex<BTreeMap<FaultKind, u64>>,
}

impl Counters {
    /// Empty counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one injected fault.
    pub fn record(&self, kind: FaultKind) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry(kind).or_insert(0) += 1;
    }

    /// The counts so far, by fault name.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), *v))
            .collect()
    }
}

/// Appends `<kind> <key>` to the file in `LAMBDAFUSION_FAULT_LOG` (if set) and flushes it:
/// what a function process does right before it crashes on purpose.
pub fn log_injected(kind: FaultKind, key: &str) {
    let Ok(path) = std::env::var(ENV_LOG) else {
        return;
    };
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(file, "{} {}", kind.as_str(), key.replace('\n', " "));
        let _ = file.sync_data();
    }
}

/// Counts the lines of a fault log written by [`log_injected`], by fault name.
pub fn read_log(path: &std::path::Path) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(path) {
        for line in text.lines() {
            if let Some(name) = line.split_whitespace().next() {
                if name.parse::<FaultKind>().is_ok() {
                    *counts.entry(name.to_string()).or_insert(0) += 1;
                }
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates_objects_and_rejects_unknown_names() {
        let plan = FaultPlan::parse(
            r#"{"seed": 7, "faults": {"executor.crash_after_put": 0.5,
                "s3.slow_first_byte": {"rate": 0.1, "ms": 20, "max_ms": 40},
                "s3.bandwidth": {"mb_per_s": 40}}}"#,
        )
        .unwrap();
        assert_eq!(plan.seed, 7);
        assert_eq!(plan.faults[&FaultKind::ExecutorCrashAfterPut].rate, 0.5);
        assert_eq!(plan.faults[&FaultKind::S3Bandwidth].rate, 1.0);
        assert_eq!(plan.faults[&FaultKind::S3Bandwidth].mb_per_s, Some(40.0));
        let err = FaultPlan::parse(r#"{"faults": {"s3.gremlins": 1}}"#).unwrap_err();
        assert!(err.to_string().contains("s3.gremlins"), "{err}");
        assert!(
            err.to_string().contains("s3.slow_down"),
            "lists the known: {err}"
        );
        assert!(FaultPlan::parse(r#"{"faults": {"s3.slow_down": 2}}"#).is_err());
        assert!(FaultPlan::parse(r#"{"seeds": 1}"#).is_err());
        let back = FaultPlan::parse(&plan.to_json()).unwrap();
        assert_eq!(back, plan);
    }

    #[test]
    fn decisions_are_deterministic_and_follow_the_rate() {
        let plan =
            FaultPlan::parse(r#"{"seed": 42, "faults": {"lambda.drop_event": 0.2}}"#).unwrap();
        let hits: Vec<bool> = (0..10_000)
            .map(|i| plan.fires(FaultKind::LambdaDropEvent, &format!("event-{i}")))
            .collect();
        let again: Vec<bool> = (0..10_000)
            .map(|i| plan.fires(FaultKind::LambdaDropEvent, &format!("event-{i}")))
            .collect();
        assert_eq!(hits, again, "same seed, same keys: same decisions");
        let rate = hits.iter().filter(|h| **h).count() as f64 / hits.len() as f64;
        assert!((0.18..0.22).contains(&rate), "rate {rate}");
        assert!(
            !plan.fires(FaultKind::S3SlowDown, "event-1"),
            "not in the plan"
        );
        let other = FaultPlan {
            seed: 43,
            ..plan.clone()
        };
        let differ = (0..1000)
            .filter(|i| {
                plan.fires(FaultKind::LambdaDropEvent, &format!("event-{i}"))
                    != other.fires(FaultKind::LambdaDropEvent, &format!("event-{i}"))
            })
            .count();
        assert!(differ > 100, "another seed, other decisions ({differ})");
    }

    #[test]
    fn delays_stay_in_their_range() {
        let plan = FaultPlan::parse(
            r#"{"faults": {"lambda.delay_event": {"rate": 1, "ms": 100, "max_ms": 300}}}"#,
        )
        .unwrap();
        let delays: Vec<u64> = (0..200)
            .filter_map(|i| plan.delay_ms(FaultKind::LambdaDelayEvent, &i.to_string()))
            .collect();
        assert_eq!(delays.len(), 200);
        assert!(delays.iter().all(|d| (100..=300).contains(d)));
        assert!(delays.iter().any(|d| *d != delays[0]));
    }

    #[test]
    fn a_live_plan_follows_its_file() {
        let dir = std::env::temp_dir().join(format!("live-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("plan.json");
        let writer = LivePlan::in_file(FaultPlan::none(), &file).unwrap();
        let reader = LivePlan {
            plan: Arc::new(RwLock::new(Arc::new(FaultPlan::none()))),
            file: Some(file.clone()),
            stamp: Arc::new(Mutex::new(None)),
        };
        assert!(reader.current().is_empty());
        // Another process (the emulator) swaps the plan: the reader sees it.
        std::thread::sleep(std::time::Duration::from_millis(20));
        writer
            .replace(FaultPlan::parse(r#"{"seed": 3, "faults": {"s3.slow_down": 1}}"#).unwrap())
            .unwrap();
        let now = reader.current();
        assert_eq!(now.seed, 3);
        assert!(now.fires(FaultKind::S3SlowDown, "x"));
        assert_eq!(writer.current().seed, 3);
        let fixed = LivePlan::fixed(FaultPlan::none());
        fixed.replace(now.as_ref().clone()).unwrap();
        assert_eq!(fixed.current().seed, 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn counters_and_the_log_add_up() {
        let c = Counters::new();
        c.record(FaultKind::S3SlowDown);
        c.record(FaultKind::S3SlowDown);
        assert_eq!(c.snapshot()["s3.slow_down"], 2);
        let dir = std::env::temp_dir().join(format!("faults-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("faults.log");
        std::fs::write(
            &log,
            "executor.crash_after_put a/1/2\nexecutor.crash_after_put b\nnoise\n",
        )
        .unwrap();
        assert_eq!(read_log(&log)["executor.crash_after_put"], 2);
        assert_eq!(FaultKind::ExecutorCrashAfterPut.class(), "executor");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
