//! Functions, their invocation queue, and the two invocation types.
//!
//! Every invocation — from the Invoke API, a function URL or a stream trigger — becomes
//! an [`Invocation`] in its function's FIFO queue. Each execution environment
//! ([`crate::instance`]) takes one invocation at a time once its runtime asks for the
//! next event, and answers through the invocation's [`Outcome`] channel.
//!
//! Asynchronous (`Event`) invocations are driven by a task per event that plays Lambda's
//! internal event queue: run, retry after `retry_delays_ms` up to `max_retry_attempts`,
//! then send an on-failure destination record, or give up when the event is older than
//! `max_event_age_secs`. No de-duplication: the same event sent twice runs twice.

use bytes::Bytes;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{oneshot, Notify};
use tracing::{info, warn};

use crate::config::{Config, FunctionConfig};
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
    /// The function failed: handler error, crash, timeout, oversized response.
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
    /// Where the outcome goes.
    pub reply: oneshot::Sender<Outcome>,
}

/// A function's queue of invocations was full (`max_queue`).
#[derive(Debug)]
pub struct Throttled;

/// A configured function with its queue of pending invocations.
#[derive(Debug)]
pub struct Function {
    /// Its configuration.
    pub config: FunctionConfig,
    /// `arn:aws:lambda:<region>:<account>:function:<name>`.
    pub arn: String,
    /// Region, for the function environment.
    pub region: String,
    queue: Mutex<VecDeque<Invocation>>,
    notify: Notify,
    /// Instances whose runtime has asked for an event at least once.
    pub(crate) warm_instances: AtomicUsize,
}

impl Function {
    fn new(config: FunctionConfig, region: &str, account: &str) -> Function {
        let arn = format!("arn:aws:lambda:{region}:{account}:function:{}", config.name);
        Function {
            config,
            arn,
            region: region.to_string(),
            queue: Mutex::new(VecDeque::new()),
            notify: Notify::new(),
            warm_instances: AtomicUsize::new(0),
        }
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Invocations waiting for a free instance.
    pub fn queued(&self) -> usize {
        self.lock_queue().len()
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Invocation>> {
        // A panic while holding this lock leaves a consistent VecDeque; keep going.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends an invocation, refusing it when `max_queue` is reached (unless `force`).
    pub fn enqueue(&self, inv: Invocation, force: bool) -> Result<(), Throttled> {
        {
            let mut q = self.lock_queue();
            if let (false, Some(max)) = (force, self.config.max_queue) {
                if q.len() >= max {
                    return Err(Throttled);
                }
            }
            q.push_back(inv);
        }
        self.notify.notify_waiters();
        Ok(())
    }

    /// Puts an invocation back at the head (its environment could not take it).
    pub(crate) fn requeue_front(&self, inv: Invocation) {
        self.lock_queue().push_front(inv);
        self.notify.notify_waiters();
    }

    /// Drops every queued invocation (at shutdown); their callers see no outcome.
    pub(crate) fn drain(&self) {
        self.lock_queue().clear();
    }

    /// Takes the oldest invocation without waiting.
    pub(crate) fn try_take(&self) -> Option<Invocation> {
        self.lock_queue().pop_front()
    }

    /// Waits for the oldest invocation. Cancel-safe: an invocation is only removed from
    /// the queue in the same poll that returns it.
    pub(crate) async fn take(&self) -> Invocation {
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
}

impl Registry {
    /// Builds the functions of a config (no process is started here).
    pub fn new(config: &Config) -> Registry {
        let functions = config
            .functions
            .iter()
            .map(|f| {
                (
                    f.name.clone(),
                    Arc::new(Function::new(f.clone(), &config.region, &config.account)),
                )
            })
            .collect();
        Registry {
            region: config.region.clone(),
            account: config.account.clone(),
            functions,
        }
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
    /// Returns `Err(Throttled)` when the queue is full; `Ok(None)` if the emulator shut
    /// down before the invocation finished.
    pub fn invoke_sync(
        &self,
        target: &Target,
        payload: Bytes,
        client_context: Option<String>,
    ) -> Result<impl Future<Output = Option<Outcome>> + Send + 'static, Throttled> {
        let (tx, rx) = oneshot::channel();
        let inv = Invocation {
            request_id: uuid::Uuid::new_v4().to_string(),
            payload,
            invoked_arn: target.invoked_arn.clone(),
            client_context,
            trace_id: trace_id(),
            expires_at: None,
            reply: tx,
        };
        target.function.enqueue(inv, false)?;
        Ok(async move { rx.await.ok() })
    }

    /// Queues an asynchronous (`Event`) invocation and returns its request id at once.
    /// `force` bypasses `max_queue` (used for destination records).
    pub fn invoke_async(
        self: &Arc<Self>,
        target: &Target,
        payload: Bytes,
        force: bool,
    ) -> Result<String, Throttled> {
        let function = &target.function;
        if !force {
            if let Some(max) = function.config.max_queue {
                if function.queued() >= max {
                    return Err(Throttled);
                }
            }
        }
        let request_id = uuid::Uuid::new_v4().to_string();
        let event = AsyncEvent {
            registry: self.clone(),
            target: target.clone(),
            request_id: request_id.clone(),
            payload,
            received: Instant::now(),
        };
        tokio::spawn(event.run());
        Ok(request_id)
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
}

impl AsyncEvent {
    async fn run(self) {
        let function = &self.target.function;
        let config = &function.config;
        let expires_at = self.received + std::time::Duration::from_secs(config.max_event_age_secs);
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
                reply: tx,
            };
            if function.enqueue(inv, true).is_err() {
                return; // unreachable: forced enqueues are never refused
            }
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
        let _ = self
            .registry
            .invoke_async(&dest, Bytes::from(record.to_string()), true);
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
    async fn queue_is_fifo_and_bounded() {
        let c = Config::from_json(
            r#"{"functions":[{"name":"f","command":["x"],"max_queue":2}]}"#,
            Path::new("/"),
        )
        .unwrap();
        let r = Registry::new(&c);
        let t = r.resolve("f", None).unwrap();
        let _a = r.invoke_sync(&t, Bytes::from_static(b"1"), None).unwrap();
        let _b = r.invoke_sync(&t, Bytes::from_static(b"2"), None).unwrap();
        assert!(r.invoke_sync(&t, Bytes::from_static(b"3"), None).is_err());
        assert_eq!(t.function.take().await.payload, Bytes::from_static(b"1"));
        assert_eq!(t.function.take().await.payload, Bytes::from_static(b"2"));
    }
}
