//! [`LambdaInvoker`]: push dispatch as asynchronous Lambda invocations
//! (`InvocationType=Event`): bounded concurrency, throttling retried with exponential
//! backoff and full jitter, payloads checked against the async limit up front.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_lambda::error::DisplayErrorContext;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use aws_sdk_lambda::Client;
use lambdafusion::dispatch::{DispatchEvent, DispatchRange, ExecutorSize, Invoker, TaskInvocation};
use lambdafusion::{Error, Result};
use serde::Serialize;
use tokio::sync::Semaphore;
use tracing::debug;

use crate::backoff::Backoff;

/// Largest payload of an asynchronous invocation.
pub const MAX_ASYNC_PAYLOAD: usize = 1024 * 1024;
/// Invocation attempts when Lambda throttles.
const THROTTLE_ATTEMPTS: u32 = 8;

/// The scheduler function's fast-path wake-up event.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct WakeEvent {
    /// Job to advance.
    pub wake: String,
    /// Not before this time (ms since epoch): the scheduler waits for it, within its own
    /// timeout (a check for stragglers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
}

/// [`Invoker`] over the Lambda `Invoke` API. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct LambdaInvoker {
    client: Client,
    executor: String,
    large_executor: Option<String>,
    scheduler: Option<String>,
    permits: Arc<Semaphore>,
}

impl LambdaInvoker {
    /// Invokes `executor` for tasks (`large_executor`, if any, for those of stages sized
    /// up) and `scheduler` (if any) for wake-ups, at most `concurrency` invocations in
    /// flight.
    pub fn new(
        client: Client,
        executor: String,
        large_executor: Option<String>,
        scheduler: Option<String>,
        concurrency: usize,
    ) -> Self {
        Self {
            client,
            executor,
            large_executor,
            scheduler,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
        }
    }

    async fn invoke_event(&self, function: &str, payload: &impl Serialize) -> Result<()> {
        let body = serde_json::to_vec(payload).map_err(|e| Error::Internal(e.to_string()))?;
        if body.len() > MAX_ASYNC_PAYLOAD {
            return Err(Error::invoke(format!(
                "payload of {} bytes for {function} exceeds the {MAX_ASYNC_PAYLOAD}-byte limit of asynchronous invocations",
                body.len()
            )));
        }
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::Internal("invoker closed".into()))?;
        let blob = Blob::new(body);
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        loop {
            crate::metrics::count(crate::metrics::Request::LambdaInvoke);
            let result = self
                .client
                .invoke()
                .function_name(function)
                .invocation_type(InvocationType::Event)
                .payload(blob.clone())
                .send()
                .await;
            match result {
                Ok(out) if out.function_error().is_none() => return Ok(()),
                Ok(out) => {
                    return Err(Error::invoke(format!(
                        "{function} refused the event: {}",
                        out.function_error().unwrap_or_default()
                    )))
                }
                Err(e) if is_throttle(&e) && backoff.attempt < THROTTLE_ATTEMPTS => {
                    let pause = backoff.next_pause();
                    debug!(function, ?pause, "throttled; backing off");
                    tokio::time::sleep(pause).await;
                }
                // Still throttled, or Lambda failing: nothing ran; send it again later.
                Err(e) if is_throttle(&e) || is_transient(&e) => {
                    return Err(Error::invoke_throttled(format!(
                        "{function}: {}",
                        DisplayErrorContext(e)
                    )))
                }
                Err(e) => {
                    return Err(Error::invoke(format!(
                        "{function}: {}",
                        DisplayErrorContext(e)
                    )))
                }
            }
        }
    }
}

/// Lambda's own transient failures (5xx, timeouts, connection errors): nothing ran.
fn is_transient<R>(
    e: &aws_sdk_lambda::error::SdkError<aws_sdk_lambda::operation::invoke::InvokeError, R>,
) -> bool {
    use aws_sdk_lambda::error::SdkError;
    use aws_sdk_lambda::operation::invoke::InvokeError;
    match e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => true,
        SdkError::ServiceError(s) => matches!(
            s.err(),
            InvokeError::ServiceException(_)
                | InvokeError::ResourceNotReadyException(_)
                | InvokeError::ResourceConflictException(_)
        ),
        _ => false,
    }
}

fn is_throttle<R>(
    e: &aws_sdk_lambda::error::SdkError<aws_sdk_lambda::operation::invoke::InvokeError, R>,
) -> bool {
    use aws_sdk_lambda::operation::invoke::InvokeError;
    match e.as_service_error() {
        Some(InvokeError::TooManyRequestsException(_))
        | Some(InvokeError::Ec2ThrottledException(_)) => true,
        Some(other) => other.meta().code() == Some("ThrottlingException"),
        None => false,
    }
}

#[async_trait]
impl Invoker for LambdaInvoker {
    async fn run_task(&self, invocation: &TaskInvocation) -> Result<()> {
        let function = match invocation.size {
            ExecutorSize::Standard => &self.executor,
            // The settings refuse a large size without its function; a stage claimed by a
            // deployment that had one, retried after it was removed, runs on the executor.
            ExecutorSize::Large => self.large_executor.as_ref().unwrap_or(&self.executor),
        };
        self.invoke_event(function, invocation).await
    }

    async fn dispatch(&self, range: &DispatchRange) -> Result<()> {
        let scheduler = self
            .scheduler
            .as_deref()
            .ok_or_else(|| Error::invoke("no scheduler function configured for dispatchers"))?;
        self.invoke_event(
            scheduler,
            &DispatchEvent {
                dispatch: range.clone(),
            },
        )
        .await
    }

    async fn wake_scheduler(&self, job_id: &str) -> Result<()> {
        self.wake(job_id, None).await
    }

    async fn wake_scheduler_at(&self, job_id: &str, at_ms: u64) -> Result<()> {
        self.wake(job_id, Some(at_ms)).await
    }
}

impl LambdaInvoker {
    /// Sends the scheduler a wake-up for `job_id`, to run at once or at `at_ms`.
    async fn wake(&self, job_id: &str, at_ms: Option<u64>) -> Result<()> {
        let scheduler = self
            .scheduler
            .as_deref()
            .ok_or_else(|| Error::invoke("no scheduler function configured for wake-ups"))?;
        let event = WakeEvent {
            wake: job_id.to_string(),
            at_ms,
        };
        self.invoke_event(scheduler, &event).await
    }
}
