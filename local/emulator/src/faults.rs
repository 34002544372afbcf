//! The emulator's one fault state: the seeded plan (`lambdafusion-faults`), the one
//! [`Counters`] every injection site of this process records into, the counts of the
//! AWS behaviours the DynamoDB / S3 front reproduces on its own (transaction conflicts,
//! throttling), and `GET /_lambdafusion/faults`, which reports all of it.
//!
//! [`Emulator::start`](crate::Emulator::start) builds one [`Faults`] and hands the same
//! `Arc`s to the [`Registry`](crate::Registry) (for the Lambda and stream-trigger
//! faults) and to the [front](crate::front).
//!
//! # Where the plan comes from
//!
//! The config's `fault_plan` (a plan object, or a string with the plan's JSON or a path
//! to it); when absent, `LAMBDAFUSION_FAULTS` (JSON text or a path), which
//! `local/localstack/up` passes through. No plan: nothing is injected.
//!
//! # The report
//!
//! `GET /_lambdafusion/faults` on the Invoke API listener answers
//!
//! ```json
//! {"seed": 7,
//!  "plan": {"seed": 7, "faults": {"s3.slow_down": {"rate": 0.1}}},
//!  "injected": {"s3.slow_down": 3, "executor.crash_after_put": 1,
//!               "dynamodb.transaction_conflict": 2, "dynamodb.throttled": 5}}
//! ```
//!
//! where `injected` adds up the in-memory [`Counters`] (faults this process injected),
//! the lines of `<state_dir>/logs/faults.log` (crash points the function processes
//! logged through `LAMBDAFUSION_FAULT_LOG` before dying), and the behaviour counts
//! (names outside [`FaultKind`], see [`Behaviour`]).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use lambdafusion_faults::{read_log, Counters, FaultKind, FaultPlan, LivePlan, PlanError};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Path of the route serving the report.
pub const REPORT_PATH: &str = "/_lambdafusion/faults";

/// AWS behaviours the front reproduces by itself (not planned faults), counted under
/// their own names in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Behaviour {
    /// An item-level request rejected because a transaction held its item
    /// (`TransactionConflictException`, a `TransactionConflict` cancellation reason, or
    /// a `BatchWriteItem` item returned unprocessed). AWS counts the same thing in the
    /// `TransactionConflict` CloudWatch metric.
    DynamoDbTransactionConflict,
    /// A request refused by the per-partition throughput limits
    /// (`ProvisionedThroughputExceededException`, a `ThrottlingError` cancellation
    /// reason, or batch items returned unprocessed), counted once per request as AWS's
    /// `ThrottledRequests` metric does.
    DynamoDbThrottled,
}

impl Behaviour {
    /// The name in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Behaviour::DynamoDbTransactionConflict => "dynamodb.transaction_conflict",
            Behaviour::DynamoDbThrottled => "dynamodb.throttled",
        }
    }
}

/// The plan, the counters and the crash-point log of one emulator.
#[derive(Debug)]
pub struct Faults {
    /// The plan every decision of this process derives from; `PUT /_lambdafusion/faults`
    /// swaps it (and its file, which the function processes watch).
    pub plan: LivePlan,
    /// Faults injected by this process (the front, the Lambda emulation, the stream
    /// trigger).
    pub counters: Arc<Counters>,
    /// The file function processes append their injected crash points to
    /// (`LAMBDAFUSION_FAULT_LOG`), if any.
    pub log: Option<PathBuf>,
    behaviours: Mutex<BTreeMap<Behaviour, u64>>,
}

impl Faults {
    /// Fault state for `plan`, with fresh counters.
    pub fn new(plan: LivePlan, log: Option<PathBuf>) -> Faults {
        Faults {
            plan,
            counters: Arc::new(Counters::new()),
            log,
            behaviours: Mutex::new(BTreeMap::new()),
        }
    }

    /// No plan: nothing is ever injected.
    pub fn none() -> Faults {
        Faults::new(LivePlan::fixed(FaultPlan::none()), None)
    }

    /// Whether `kind` hits the event `key`; a hit is counted.
    pub fn fire(&self, kind: FaultKind, key: &str) -> bool {
        let hit = self.plan.current().fires(kind, key);
        if hit {
            self.counters.record(kind);
        }
        hit
    }

    /// The delay `kind` puts on the event `key`, if it hits; a hit is counted.
    pub fn delay_ms(&self, kind: FaultKind, key: &str) -> Option<u64> {
        let ms = self.plan.current().delay_ms(kind, key)?;
        self.counters.record(kind);
        Some(ms)
    }

    /// Counts `n` occurrences of a reproduced AWS behaviour.
    pub fn record_behaviour(&self, what: Behaviour, n: u64) {
        if n == 0 {
            return;
        }
        let mut counts = self.behaviours.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry(what).or_insert(0) += n;
    }

    /// Everything injected so far, by name: counters, crash-point log, behaviours.
    pub fn injected(&self) -> BTreeMap<String, u64> {
        let mut all = self.counters.snapshot();
        if let Some(log) = &self.log {
            for (name, n) in read_log(log) {
                *all.entry(name).or_insert(0) += n;
            }
        }
        let behaviours = self.behaviours.lock().unwrap_or_else(|p| p.into_inner());
        for (what, n) in behaviours.iter() {
            *all.entry(what.as_str().to_string()).or_insert(0) += n;
        }
        all
    }

    /// The document `GET /_lambdafusion/faults` answers.
    pub fn report(&self) -> Value {
        let plan = self.plan.current();
        json!({
            "seed": plan.seed,
            "plan": &*plan,
            "injected": self.injected(),
        })
    }
}

/// Parses the config's `fault_plan`: a plan object, or a string with JSON or a path.
pub fn plan_from_value(value: &Value) -> Result<FaultPlan, PlanError> {
    match value {
        Value::String(text) => FaultPlan::from_text_or_path(text),
        Value::Null => Ok(FaultPlan::none()),
        other => FaultPlan::parse(&other.to_string()),
    }
}

/// The plan the emulator runs with: the config's `fault_plan`, else
/// `LAMBDAFUSION_FAULTS`, else none.
pub fn load_plan(config_value: Option<&Value>) -> Result<FaultPlan, PlanError> {
    match config_value {
        Some(v) => plan_from_value(v),
        None => FaultPlan::from_env(),
    }
}

/// The `GET /_lambdafusion/faults` route (the report) and `PUT` (a new plan, taking
/// effect at once in the emulator and at their next decision in the function
/// processes; counts go on adding up), merged into the Invoke API listener.
pub fn router(faults: Arc<Faults>) -> Router {
    Router::new()
        .route(REPORT_PATH, get(report).put(replace))
        .with_state(faults)
}

async fn report(State(faults): State<Arc<Faults>>) -> Json<Value> {
    Json(faults.report())
}

async fn replace(
    State(faults): State<Arc<Faults>>,
    body: String,
) -> Result<Json<Value>, (axum::http::StatusCode, Json<Value>)> {
    let refuse = |message: String| {
        (
            axum::http::StatusCode::BAD_REQUEST,
            Json(json!({"message": message})),
        )
    };
    let plan = FaultPlan::parse(&body).map_err(|e| refuse(e.to_string()))?;
    faults
        .plan
        .replace(plan)
        .map_err(|e| refuse(e.to_string()))?;
    Ok(Json(faults.report()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_adds_counters_log_and_behaviours() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("faults.log");
        std::fs::write(&log, "executor.crash_after_put q1/s0/p0/a0\n").unwrap();
        let plan = plan_from_value(&json!({"seed": 9, "faults": {"s3.slow_down": 1}})).unwrap();
        let faults = Faults::new(LivePlan::fixed(plan), Some(log));
        assert!(faults.fire(FaultKind::S3SlowDown, "GET b/k #0"));
        assert!(!faults.fire(FaultKind::S3InternalError, "GET b/k #0"));
        faults.record_behaviour(Behaviour::DynamoDbThrottled, 2);
        faults.record_behaviour(Behaviour::DynamoDbTransactionConflict, 0);
        let report = faults.report();
        assert_eq!(report["seed"], 9);
        assert_eq!(report["plan"]["faults"]["s3.slow_down"]["rate"], 1.0);
        assert_eq!(
            report["injected"],
            json!({"s3.slow_down": 1, "executor.crash_after_put": 1, "dynamodb.throttled": 2})
        );
    }

    #[test]
    fn plans_come_from_objects_strings_or_nothing() {
        let p = plan_from_value(&json!(
            r#"{"seed": 3, "faults": {"dynamodb.throttling": 0.5}}"#
        ))
        .unwrap();
        assert_eq!(p.seed, 3);
        assert!(plan_from_value(&Value::Null).unwrap().is_empty());
        let e = plan_from_value(&json!({"faults": {"dynamodb.gremlins": 1}})).unwrap_err();
        assert!(e.to_string().contains("dynamodb.gremlins"), "{e}");
        let e = plan_from_value(&json!("/no/such/plan.json")).unwrap_err();
        assert!(e.to_string().contains("/no/such/plan.json"), "{e}");
    }
}
