//! Functions, their invocation queue, and the two invocation types.
//!
//! Every invocation — from the Invoke API, a function URL or a stream trigger — becomes
//! an [`Invocation`] in its function's FIFO queue. Each execution environment
//! ([`crate::instance`]) takes one invocation at a time once its runtime asks for the
//! next event, and answers through the invocation's [`Outcome`] channel.
//!
//! Synchronous invocations wait in the queue for a free environment; `max_queue` bounds
//! how many may wait (beyond it: 429). Asynchronous (`Event`) invocations are always
//! accepted, as AWS's internal event queue accepts them whatever the function's
//! concurrency
//! (<https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html>),
//! and are driven by a task per event that plays that queue: run, retry after
//! `retry_delays_ms` (about 1 and 2 minutes with AWS timing) up to
//! `max_retry_attempts`, then send an on-failure destination record, or give up when
//! the event is older than `max_event_age_secs`. No de-duplication: the same event sent
//! twice runs twice.
//!
//! The Lambda faults of the fault plan are injected here (see [`crate::injection`] for
//! the keys): `lambda.drop_event`, `lambda.drop_to_destination`, `lambda.delay_event`
//! and `lambda.duplicate_event` on accepted events; `lambda.concurrency_limit` (a limit
//! on running invocations: synchronous ones beyond it get 429, events wait);
//! `lambda.cold_start` decided per invocation and carried out by the environment.

use bytes::Bytes;
use lambdafusion_faults::{Counters, FaultKind, FaultPlan};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};
use tracing::{info, warn};

use crate::config::{Config, Credential, FunctionConfig};
use crate::injection::{self, Injector};
use crate::time;

/// The largest synchronous payload (request or response) Lambda accepts: 6 MB.
pub const MAX_SYNC_PAYLOAD: usize = 6 * 1024 * 1024;
/// The largest asynchronous (`Event`) payload this emulator accepts: 1 MB, Lambda's limit
/// since 2025 (it was 256 KB before).
pub const MAX_ASYNC_PAYLOAD: usize = 1024 * 1024;

/// How one invocation ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The runtime posted a response.
    Success {
        /// Response payload as posted by the runtime.
        body: Bytes,
        /// The runtime used `Lambda-Runtime-Function-Response-Mode: streaming` (the body
        /// then starts with a JSON prelude and 8 NUL bytes, as for function URLs).
        streaming: bool,
    },
    /// The function failed: handler error, crash, timeout, out of memory, oversized
    /// response.
    Error {
        /// `errorType`, e.g. `Runtime.ExitError`, `Sandbox.Timedout` or the handler's.
        error_type: String,
        /// Error document (JSON with `errorType` and `errorMessage`).
        body: Bytes,
    },
    /// An asynchronous event grew older than `max_event_age_secs` while it waited.
    Expired,
}

impl Outcome {
    /// Builds an [`Outcome::Error`] with a standard error document.
    pub fn error(error_type: &str, message: &str) -> Outcome {
        let body = json!({"errorType": error_type, "errorMessage": message}).to_string();
        Outcome::Error {
            error_type: error_type.to_string(),
            body: Bytes::from(body),
        }
    }
}

/// Whether the caller waits for an invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationKind {
    /// `RequestResponse`, function URL, stream batch: the caller waits.
    Sync,
    /// `Event` (or a destination record): Lambda's queue waits.
    Async,
}

/// One invocation waiting for, or running in, an execution environment.
#[derive(Debug)]
pub struct Invocation {
    /// `Lambda-Runtime-Aws-Request-Id`; kept across retries of an asynchronous event.
    pub request_id: String,
    /// The event.
    pub payload: Bytes,
    /// `Lambda-Runtime-Invoked-Function-Arn`.
    pub invoked_arn: String,
    /// `Lambda-Runtime-Client-Context` (decoded JSON), when the caller sent one.
    pub client_context: Option<String>,
    /// `Lambda-Runtime-Trace-Id`.
    pub trace_id: String,
    /// Asynchronous events expire here instead of running.
    pub expires_at: Option<Instant>,
    /// Synchronous or asynchronous.
    pub kind: InvocationKind,
    /// `lambda.cold_start`: run on a new execution environment, started after this
    /// extra delay.
    pub cold_start: Option<Duration>,
    /// Where the outcome goes.
    pub reply: oneshot::Sender<Outcome>,
    /// The function's running-invocation count this invocation holds once taken from
    /// the queue; released when it is dropped.
    pub(crate) slot: Option<Slot>,
}

/// A synchronous invocation was refused: `max_queue` invocations already wait, or
/// `lambda.concurrency_limit` invocations already run.
#[derive(Debug)]
pub struct Throttled;

/// One running invocation counted against its function's concurrency (see
/// `lambda.concurrency_limit`); dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Function>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[derive(Debug, Default)]
struct QueueState {
    items: VecDeque<Invocation>,
    /// Invocations taken by an environment and not finished.
    running: usize,
}

impl QueueState {
    fn queued_sync(&self) -> usize {
        self.items
            .iter()
            .filter(|i| i.kind == InvocationKind::Sync)
            .count()
    }
}

/// A configured function with its queue of pending invocations.
#[derive(Debug)]
pub struct Function {
    /// Its configuration.
    pub config: FunctionConfig,
    /// `arn:aws:lambda:<region>:<account>:function:<name>`.
    pub arn: String,
    /// Region, for the function environment.
    pub region: String,
    state: Mutex<QueueState>,
    notify: Notify,
    /// Instances whose runtime has asked for an event at least once.
    pub(crate) warm_instances: AtomicUsize,
    /// Fault injection (shared by all functions of a registry).
    pub(crate) injector: Injector,
    /// Invocations seen so far per normalized-payload hash (the `<n>` of event keys).
    seen: Mutex<HashMap<u64, u64>>,
    /// `<state_dir>/tmp`: the parent of the environments' `/tmp` directories.
    tmp_root: PathBuf,
    /// Where its output is shipped besides the log files (CloudWatch Logs), if anywhere.
    pub(crate) logs: Option<Arc<crate::cloudwatch_logs::LogShipper>>,
}

impl Function {
    fn new(config: FunctionConfig, top: &Config, injector: Injector) -> Function {
        let arn = format!(
            "arn:aws:lambda:{}:{}:function:{}",
            top.region, top.account, config.name
        );
        Function {
            config,
            arn,
            region: top.region.clone(),
            state: Mutex::new(QueueState::default()),
            notify: Notify::new(),
            warm_instances: AtomicUsize::new(0),
            injector,
            seen: Mutex::new(HashMap::new()),
            tmp_root: top.state_dir.join("tmp"),
            logs: None,
        }
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The `/tmp` (`TMPDIR`) of execution environment `index`:
    /// `<state_dir>/tmp/<function>-<index>`.
    pub fn tmp_dir(&self, index: usize) -> PathBuf {
        self.tmp_root.join(format!("{}-{index}", self.config.name))
    }

    /// Invocations waiting for a free instance.
    pub fn queued(&self) -> usize {
        self.lock().items.len()
    }

    /// Invocations running now.
    pub fn running(&self) -> usize {
        self.lock().running
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        // A panic while holding this lock leaves a consistent state; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fault-decision key of an invocation with this payload (see
    /// [`crate::injection`]); counts it. Empty when the plan injects nothing.
    pub fn event_key(&self, payload: &[u8]) -> String {
        if !self.injector.is_active() {
            return String::new();
        }
        let hash = injection::payload_hash(payload);
        let n = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            let n = seen.entry(hash).or_insert(0);
            *n += 1;
            *n - 1
        };
        format!("{}#{n}#{hash:016x}", self.config.name)
    }

    /// Whether `lambda.concurrency_limit` invocations run or wait already.
    fn at_limit(&self, q: &QueueState) -> bool {
        self.limit()
            .is_some_and(|limit| q.running + q.items.len() >= limit)
    }

    /// `lambda.concurrency_limit`'s limit in the plan as it is now (a test may swap the
    /// plan while the emulator runs).
    fn limit(&self) -> Option<usize> {
        self.injector.concurrency_limit()
    }

    /// Queues a synchronous invocation, unless `max_queue` synchronous invocations
    /// already wait or `lambda.concurrency_limit` refuses it.
    fn enqueue_sync(&self, inv: Invocation, key: &str) -> Result<(), Throttled> {
        {
            let mut q = self.lock();
            if let Some(max) = self.config.max_queue {
                if q.queued_sync() >= max {
                    return Err(Throttled);
                }
            }
            if self.at_limit(&q) && self.injector.fire(FaultKind::LambdaConcurrencyLimit, key) {
                return Err(Throttled);
            }
            q.items.push_back(inv);
        }
        self.notify.notify_waiters();
        Ok(())
    }

    /// Queues an asynchronous invocation (never refused).
    fn enqueue_async(&self, inv: Invocation) {
        self.lock().items.push_back(inv);
        self.notify.notify_waiters();
    }

    /// Puts an invocation back at the head (its environment could not take it).
    pub(crate) fn requeue_front(&self, mut inv: Invocation) {
        drop(inv.slot.take());
        self.lock().items.push_front(inv);
        self.notify.notify_waiters();
    }

    /// Drops every queued invocation (at shutdown); their callers see no outcome.
    pub(crate) fn drain(&self) {
        let items = std::mem::take(&mut self.lock().items);
        drop(items);
    }

    fn release(&self) {
        {
            let mut q = self.lock();
            q.running = q.running.saturating_sub(1);
        }
        self.notify.notify_waiters();
    }

    /// Takes the oldest invocation without waiting, if the concurrency limit allows.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<Invocation> {
        let mut q = self.lock();
        if self.limit().is_some_and(|limit| q.running >= limit) {
            return None;
        }
        let mut inv = q.items.pop_front()?;
        q.running += 1;
        drop(q);
        inv.slot = Some(Slot(self.clone()));
        Some(inv)
    }

    /// Waits for the oldest invocation. Cancel-safe: an invocation is only removed from
    /// the queue in the same poll that returns it.
    pub(crate) async fn take(self: &Arc<Self>) -> Invocation {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(inv) = self.try_take() {
                return inv;
            }
            notified.await;
        }
    }

    /// `lambda.cold_start` for the invocation `key` (counted when carried out).
    fn cold_start(&self, key: &str) -> Option<Duration> {
        if !self.injector.is_active() {
            return None;
        }
        self.injector
            .plan()
            .delay_ms(FaultKind::LambdaColdStart, key)
            .map(Duration::from_millis)
    }
}

/// The named invocation target: function plus the ARN the caller used.
#[derive(Debug, Clone)]
pub struct Target {
    /// The function.
    pub function: Arc<Function>,
    /// ARN reported to the runtime (qualified when the caller gave a qualifier).
    pub invoked_arn: String,
}

/// All functions of one emulator, by name.
#[derive(Debug)]
pub struct Registry {
    /// Region of ARNs and records.
    pub region: String,
    /// Account of ARNs.
    pub account: String,
    functions: BTreeMap<String, Arc<Function>>,
    injector: Injector,
    credentials: Vec<Credential>,
    invoke_latency: crate::front::config::ServiceLatency,
    iam: Arc<crate::iam::Iam>,
    account_concurrency: u64,
}

impl Registry {
    /// Builds the functions of a config (no process is started here), without faults.
    pub fn new(config: &Config) -> Registry {
        Registry::with_faults(
            config,
            lambdafusion_faults::LivePlan::fixed(FaultPlan::none()),
            Arc::new(Counters::new()),
        )
    }

    /// Builds the functions of a config, injecting the Lambda and stream faults of
    /// `plan` and counting them in `counters`.
    pub fn with_faults(
        config: &Config,
        plan: lambdafusion_faults::LivePlan,
        counters: Arc<Counters>,
    ) -> Registry {
        let injector = Injector::new(plan, counters);
        let logs = config.logs_endpoint.as_deref().and_then(|endpoint| {
            crate::cloudwatch_logs::LogShipper::new(endpoint, &config.region)
                .map_err(|e| tracing::warn!("logs_endpoint {endpoint}: {e}; not shipping logs"))
                .ok()
        });
        let functions = config
            .functions
            .iter()
            .map(|f| {
                let mut function = Function::new(f.clone(), config, injector.clone());
                function.logs = logs.clone();
                (f.name.clone(), Arc::new(function))
            })
            .collect();
        Registry {
            region: config.region.clone(),
            account: config.account.clone(),
            functions,
            injector,
            credentials: config.credentials().to_vec(),
            iam: Arc::new(crate::iam::Iam::new(config)),
            account_concurrency: config.account_concurrency,
            // The front's latency table holds Lambda's too; without a front, none.
            invoke_latency: config
                .front
                .as_ref()
                .map(|f| f.latency.lambda.clone())
                .unwrap_or_default(),
        }
    }

    /// What the functions' roles allow (shared with the front).
    pub fn iam(&self) -> Arc<crate::iam::Iam> {
        self.iam.clone()
    }

    /// `GetAccountSettings`' `AccountLimit`: the account's concurrency quota and what the
    /// functions' reservations leave unreserved.
    pub fn account_limit(&self) -> (u64, u64) {
        let reserved: u64 = self
            .functions
            .values()
            .filter_map(|f| f.config.reserved_concurrency)
            .sum();
        (
            self.account_concurrency,
            self.account_concurrency.saturating_sub(reserved),
        )
    }

    /// The configuration of function `name`.
    pub fn function_config(&self, name: &str) -> Option<&FunctionConfig> {
        self.functions.get(name).map(|f| &f.config)
    }

    /// How long the Invoke API takes to answer an invocation of `invocation_type`.
    pub fn invoke_latency(&self, invocation_type: &str) -> std::time::Duration {
        self.invoke_latency.get(invocation_type)
    }

    /// The fault plan and the counters of injected faults.
    pub fn injector(&self) -> &Injector {
        &self.injector
    }

    /// The fault plan now.
    pub fn faults(&self) -> Arc<FaultPlan> {
        self.injector.plan()
    }

    /// Injected faults so far (the emulator's own; function processes log theirs).
    pub fn counters(&self) -> &Arc<Counters> {
        self.injector.counters()
    }

    /// The credentials function URLs with `AWS_IAM` auth accept.
    pub fn credentials(&self) -> &[Credential] {
        &self.credentials
    }

    /// A function by plain name.
    pub fn get(&self, name: &str) -> Option<&Arc<Function>> {
        self.functions.get(name)
    }

    /// All functions.
    pub fn functions(&self) -> impl Iterator<Item = &Arc<Function>> {
        self.functions.values()
    }

    /// Resolves what the Invoke API accepts as `FunctionName`: `name`, `name:qualifier`,
    /// `account:function:name[:qualifier]` or the full ARN. The qualifier (version or
    /// alias) is accepted and reported back, but every qualifier runs `$LATEST`.
    pub fn resolve(&self, function_name: &str, qualifier: Option<&str>) -> Option<Target> {
        let parts: Vec<&str> = function_name.split(':').collect();
        let (name, qual) = match parts.as_slice() {
            [name] => (*name, None),
            [name, q] => (*name, Some(*q)),
            [_, "function", name] => (*name, None),
            [_, "function", name, q] => (*name, Some(*q)),
            ["arn", _, "lambda", _, _, "function", name] => (*name, None),
            ["arn", _, "lambda", _, _, "function", name, q] => (*name, Some(*q)),
            _ => return None,
        };
        let function = self.functions.get(name)?.clone();
        let invoked_arn = match qual.or(qualifier) {
            Some(q) if !q.is_empty() => format!("{}:{q}", function.arn),
            _ => function.arn.clone(),
        };
        Some(Target {
            function,
            invoked_arn,
        })
    }

    /// Runs a synchronous (`RequestResponse`) invocation and waits for its outcome.
    /// `key` is its fault-decision key ([`Function::event_key`] or the caller's own).
    /// Returns `Err(Throttled)` when `max_queue` or `lambda.concurrency_limit` refuses
    /// it; `Ok(None)` if the emulator shut down before the invocation finished.
    pub fn invoke_sync(
        &self,
        target: &Target,
        payload: Bytes,
        client_context: Option<String>,
        key: &str,
    ) -> Result<impl Future<Output = Option<Outcome>> + Send + 'static, Throttled> {
        let (tx, rx) = oneshot::channel();
        let inv = Invocation {
            request_id: uuid::Uuid::new_v4().to_string(),
            payload,
            invoked_arn: target.invoked_arn.clone(),
            client_context,
            trace_id: trace_id(),
            expires_at: None,
            kind: InvocationKind::Sync,
            cold_start: target.function.cold_start(key),
            reply: tx,
            slot: None,
        };
        target.function.enqueue_sync(inv, key)?;
        Ok(async move { rx.await.ok() })
    }

    /// Accepts an asynchronous (`Event`) invocation and returns its request id at once;
    /// the event runs later. `key` is its fault-decision key ([`Function::event_key`]).
    /// Never refused: AWS queues events whatever the function's concurrency.
    pub fn invoke_async(self: &Arc<Self>, target: &Target, payload: Bytes, key: String) -> String {
        let request_id = uuid::Uuid::new_v4().to_string();
        let function = &target.function;
        let event = AsyncEvent {
            registry: self.clone(),
            target: target.clone(),
            request_id: request_id.clone(),
            payload,
            received: Instant::now(),
            key,
        };
        let inj = &self.injector;
        if !inj.is_active() {
            tokio::spawn(event.run(None));
            return request_id;
        }
        if function.at_limit(&function.lock()) {
            // The event waits for the limit (AWS: throttled, retried from its queue).
            inj.record(FaultKind::LambdaConcurrencyLimit);
        }
        if inj.fire(FaultKind::LambdaDropEvent, &event.key) {
            info!(function = %function.name(), request_id = %request_id, key = %event.key,
                "fault lambda.drop_event: accepted event dropped");
            return request_id;
        }
        if inj.fire(FaultKind::LambdaDropToDestination, &event.key) {
            info!(function = %function.name(), request_id = %request_id, key = %event.key,
                "fault lambda.drop_to_destination: event sent unrun to the on-failure destination");
            event.send_to_destination(FailureCondition::EventAgeExceeded, 0, None);
            return request_id;
        }
        let delay = inj.delay(FaultKind::LambdaDelayEvent, &event.key);
        if inj.fire(FaultKind::LambdaDuplicateEvent, &event.key) {
            info!(function = %function.name(), request_id = %request_id, key = %event.key,
                "fault lambda.duplicate_event: event will run twice");
            let twin = AsyncEvent {
                key: format!("{}#dup", event.key),
                payload: event.payload.clone(),
                request_id: event.request_id.clone(),
                registry: event.registry.clone(),
                target: event.target.clone(),
                received: event.received,
            };
            tokio::spawn(twin.run(delay));
        }
        if let Some(d) = delay {
            info!(function = %function.name(), request_id = %request_id, key = %event.key,
                "fault lambda.delay_event: event held back {d:?}");
        }
        tokio::spawn(event.run(delay));
        request_id
    }
}

/// Why an asynchronous event went to its on-failure destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FailureCondition {
    RetriesExhausted,
    EventAgeExceeded,
}

impl FailureCondition {
    fn as_str(self) -> &'static str {
        match self {
            FailureCondition::RetriesExhausted => "RetriesExhausted",
            FailureCondition::EventAgeExceeded => "EventAgeExceeded",
        }
    }
}

/// One asynchronous event in Lambda's internal queue.
struct AsyncEvent {
    registry: Arc<Registry>,
    target: Target,
    request_id: String,
    payload: Bytes,
    received: Instant,
    /// Fault-decision key.
    key: String,
}

impl AsyncEvent {
    async fn run(self, delay: Option<Duration>) {
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let function = &self.target.function;
        let config = &function.config;
        let expires_at = self.received + Duration::from_secs(config.max_event_age_secs);
        let mut attempts: u32 = 0;
        let mut last_error: Option<Bytes> = None;
        let condition = loop {
            if Instant::now() >= expires_at {
                break FailureCondition::EventAgeExceeded;
            }
            let (tx, rx) = oneshot::channel();
            let inv = Invocation {
                request_id: self.request_id.clone(),
                payload: self.payload.clone(),
                invoked_arn: self.target.invoked_arn.clone(),
                client_context: None,
                trace_id: trace_id(),
                expires_at: Some(expires_at),
                kind: InvocationKind::Async,
                cold_start: function.cold_start(&format!("{}#attempt{attempts}", self.key)),
                reply: tx,
                slot: None,
            };
            function.enqueue_async(inv);
            match rx.await {
                Ok(Outcome::Success { .. }) => return,
                Ok(Outcome::Expired) => break FailureCondition::EventAgeExceeded,
                Ok(Outcome::Error { error_type, body }) => {
                    attempts += 1;
                    last_error = Some(body);
                    if attempts > config.max_retry_attempts {
                        break FailureCondition::RetriesExhausted;
                    }
                    let delay = config.retry_delay(attempts);
                    info!(function = %config.name, request_id = %self.request_id, %error_type, attempt = attempts,
                        "async invocation failed; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                Err(_) => return, // the emulator is shutting down
            }
        };
        self.send_to_destination(condition, attempts, last_error);
    }

    fn send_to_destination(
        &self,
        condition: FailureCondition,
        attempts: u32,
        last_error: Option<Bytes>,
    ) {
        let config = &self.target.function.config;
        let Some(dest_name) = &config.on_failure else {
            warn!(function = %config.name, request_id = %self.request_id, condition = condition.as_str(),
                attempts, "async event dropped (no on_failure destination)");
            return;
        };
        let Some(dest) = self.registry.resolve(dest_name, None) else {
            warn!(function = %config.name, destination = %dest_name, "on_failure destination does not exist");
            return;
        };
        let record = destination_record(
            &self.request_id,
            &self.target.function.arn,
            condition,
            attempts,
            &self.payload,
            last_error.as_deref(),
        );
        info!(function = %config.name, request_id = %self.request_id, condition = condition.as_str(),
            attempts, destination = %dest_name, "async event sent to on-failure destination");
        let record = Bytes::from(record.to_string());
        let key = dest.function.event_key(&record);
        self.registry.invoke_async(&dest, record, key);
    }
}

/// The record Lambda sends to an on-failure destination of an asynchronous invocation.
fn destination_record(
    request_id: &str,
    function_arn: &str,
    condition: FailureCondition,
    attempts: u32,
    payload: &[u8],
    last_error: Option<&[u8]>,
) -> Value {
    let as_json = |b: &[u8]| {
        serde_json::from_slice::<Value>(b)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned()))
    };
    let mut record = json!({
        "version": "1.0",
        "timestamp": time::rfc3339_ms(time::now_ms()),
        "requestContext": {
            "requestId": request_id,
            "functionArn": format!("{function_arn}:$LATEST"),
            "condition": condition.as_str(),
            "approximateInvokeCount": attempts,
        },
        "requestPayload": as_json(payload),
    });
    if let (Some(err), Value::Object(map)) = (last_error, &mut record) {
        map.insert(
            "responseContext".into(),
            json!({"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"}),
        );
        map.insert("responsePayload".into(), as_json(err));
    }
    record
}

/// An X-Ray style trace header value (`Root=1-<time>-<id>;Parent=<id>;Sampled=0`).
pub fn trace_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    let p = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "Root=1-{:08x}-{};Parent={};Sampled=0",
        time::now_ms() / 1000,
        &u[..24],
        &p[..16]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn registry() -> Registry {
        let c = Config::from_json(
            r#"{"functions":[{"name":"f","command":["x"]}]}"#,
            Path::new("/"),
        )
        .unwrap();
        Registry::new(&c)
    }

    #[test]
    fn resolves_names_and_arns() {
        let r = registry();
        let arn = "arn:aws:lambda:us-east-1:000000000000:function:f";
        assert_eq!(r.resolve("f", None).unwrap().invoked_arn, arn);
        assert_eq!(
            r.resolve("f:$LATEST", None).unwrap().invoked_arn,
            format!("{arn}:$LATEST")
        );
        assert_eq!(r.resolve(arn, None).unwrap().invoked_arn, arn);
        assert_eq!(
            r.resolve(&format!("{arn}:live"), None).unwrap().invoked_arn,
            format!("{arn}:live")
        );
        assert_eq!(
            r.resolve("000000000000:function:f", Some("2"))
                .unwrap()
                .invoked_arn,
            format!("{arn}:2")
        );
        assert!(r.resolve("g", None).is_none());
        assert!(r.resolve("arn:aws:s3:::f", None).is_none());
    }

    #[test]
    fn destination_record_shape() {
        let rec = destination_record(
            "rid",
            "arn:aws:lambda:us-east-1:000000000000:function:f",
            FailureCondition::RetriesExhausted,
            3,
            br#"{"a":1}"#,
            Some(br#"{"errorType":"E","errorMessage":"m"}"#),
        );
        assert_eq!(rec["version"], "1.0");
        assert_eq!(
            rec["requestContext"]["functionArn"],
            "arn:aws:lambda:us-east-1:000000000000:function:f:$LATEST"
        );
        assert_eq!(rec["requestContext"]["approximateInvokeCount"], 3);
        assert_eq!(rec["requestPayload"], json!({"a": 1}));
        assert_eq!(rec["responseContext"]["functionError"], "Unhandled");
        assert_eq!(rec["responsePayload"]["errorType"], "E");
        let aged = destination_record(
            "rid",
            "arn",
            FailureCondition::EventAgeExceeded,
            0,
            b"{}",
            None,
        );
        assert_eq!(aged["requestContext"]["condition"], "EventAgeExceeded");
        assert!(aged.get("responsePayload").is_none());
    }

    #[tokio::test]
    async fn sync_queue_is_fifo_and_bounded_events_are_not() {
        let c = Config::from_json(
            r#"{"functions":[{"name":"f","command":["x"],"max_queue":2}]}"#,
            Path::new("/"),
        )
        .unwrap();
        let r = Arc::new(Registry::new(&c));
        let t = r.resolve("f", None).unwrap();
        let _a = r
            .invoke_sync(&t, Bytes::from_static(b"1"), None, "")
            .unwrap();
        let _b = r
            .invoke_sync(&t, Bytes::from_static(b"2"), None, "")
            .unwrap();
        assert!(r
            .invoke_sync(&t, Bytes::from_static(b"3"), None, "")
            .is_err());
        // Events are accepted whatever the queue holds.
        for _ in 0..5 {
            r.invoke_async(&t, Bytes::from_static(b"{}"), String::new());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(t.function.queued(), 7);
        assert_eq!(t.function.take().await.payload, Bytes::from_static(b"1"));
        assert_eq!(t.function.take().await.payload, Bytes::from_static(b"2"));
    }

    #[tokio::test]
    async fn the_concurrency_limit_fault_holds_invocations_back() {
        let c = Config::from_json(
            r#"{"functions":[{"name":"f","command":["x"]}]}"#,
            Path::new("/"),
        )
        .unwrap();
        let plan =
            FaultPlan::parse(r#"{"faults": {"lambda.concurrency_limit": {"limit": 1}}}"#).unwrap();
        let r = Arc::new(Registry::with_faults(
            &c,
            lambdafusion_faults::LivePlan::fixed(plan),
            Arc::new(Counters::new()),
        ));
        let t = r.resolve("f", None).unwrap();
        let _a = r
            .invoke_sync(&t, Bytes::from_static(b"1"), None, "k1")
            .unwrap();
        // One waits: the second synchronous invocation is refused.
        assert!(r
            .invoke_sync(&t, Bytes::from_static(b"2"), None, "k2")
            .is_err());
        let first = t.function.take().await;
        assert_eq!(t.function.running(), 1);
        // An event is accepted but cannot be taken while the first runs.
        r.invoke_async(&t, Bytes::from_static(b"{}"), "k3".into());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(t.function.try_take().is_none(), "held back by the limit");
        drop(first);
        assert_eq!(t.function.running(), 0);
        assert!(t.function.try_take().is_some());
        let counts = r.counters().snapshot();
        assert_eq!(
            counts["lambda.concurrency_limit"], 2,
            "one refusal, one held event"
        );
    }

    /// The limit follows the plan as it is swapped (PUT /_lambdafusion/faults): before,
    /// it was read once when the function was built, so a plan swapped in later never
    /// limited anything (the chaos soak's long run found it never injected).
    #[tokio::test]
    async fn the_concurrency_limit_follows_a_swapped_plan() {
        let c = Config::from_json(
            r#"{"functions":[{"name":"f","command":["x"]}]}"#,
            Path::new("/"),
        )
        .unwrap();
        let plan = lambdafusion_faults::LivePlan::fixed(FaultPlan::none());
        let r = Arc::new(Registry::with_faults(
            &c,
            plan.clone(),
            Arc::new(Counters::new()),
        ));
        let t = r.resolve("f", None).unwrap();
        let _a = r
            .invoke_sync(&t, Bytes::from_static(b"1"), None, "k1")
            .unwrap();
        let first = t.function.take().await;
        plan.replace(
            FaultPlan::parse(r#"{"faults": {"lambda.concurrency_limit": {"limit": 1}}}"#).unwrap(),
        )
        .unwrap();
        assert!(
            r.invoke_sync(&t, Bytes::from_static(b"2"), None, "k2")
                .is_err(),
            "the swapped-in limit refuses a second synchronous invocation"
        );
        r.invoke_async(&t, Bytes::from_static(b"{}"), "k3".into());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(t.function.try_take().is_none(), "held back by the limit");
        plan.replace(FaultPlan::none()).unwrap();
        assert!(t.function.try_take().is_some(), "no limit once it is gone");
        drop(first);
        assert_eq!(r.counters().snapshot()["lambda.concurrency_limit"], 2);
    }

    #[test]
    fn event_keys_count_per_normalized_payload() {
        let c = Config::from_json(
            r#"{"functions":[{"name":"f","command":["x"]}]}"#,
            Path::new("/"),
        )
        .unwrap();
        let plan = FaultPlan::parse(r#"{"faults": {"lambda.drop_event": 0.5}}"#).unwrap();
        let r = Registry::with_faults(
            &c,
            lambdafusion_faults::LivePlan::fixed(plan),
            Arc::new(Counters::new()),
        );
        let f = r.get("f").unwrap();
        let a = f.event_key(br#"{"job":"00000000000000000000000000000001"}"#);
        let b = f.event_key(br#"{"job":"00000000000000000000000000000002"}"#);
        let other = f.event_key(br#"{"stage":1}"#);
        assert!(a.starts_with("f#0#"), "{a}");
        assert!(b.starts_with("f#1#"), "{b}");
        assert_eq!(a[4..], b[4..], "same payload but for the id");
        assert!(other.starts_with("f#0#"), "{other}");
        assert!(Registry::new(&c)
            .get("f")
            .unwrap()
            .event_key(b"{}")
            .is_empty());
    }
}
