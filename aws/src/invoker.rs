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
use lambdafusion::dispatch::{Invoker, TaskSpec};
use lambdafusion::{Error, Result};
use serde::Serialize;
use tokio::sync::Semaphore;
use tracing::debug;

/// Largest payload of an asynchronous invocation.
pub const MAX_ASYNC_PAYLOAD: usize = 1024 * 1024;
/// Invocation attempts when Lambda throttles.
const THROTTLE_ATTEMPTS: u32 = 8;

/// The scheduler function's fast-path wake-up event.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct WakeEvent {
    /// Job to advance.
    pub wake: String,
}

/// [`Invoker`] over the Lambda `Invoke` API. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct LambdaInvoker {
    client: Client,
    executor: String,
    scheduler: Option<String>,
    permits: Arc<Semaphore>,
}

impl LambdaInvoker {
    /// Invokes `executor` for tasks and `scheduler` (if any) for wake-ups, at most
    /// `concurrency` invocations in flight.
    pub fn new(
        client: Client,
        executor: String,
        scheduler: Option<String>,
        concurrency: usize,
    ) -> Self {
        Self {
            client,
            executor,
            scheduler,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
        }
    }

    async fn invoke_event(&self, function: &str, payload: &impl Serialize) -> Result<()> {
        let body = serde_json::to_vec(payload).map_err(|e| Error::Internal(e.to_string()))?;
        if body.len() > MAX_ASYNC_PAYLOAD {
            return Err(Error::Invoke(format!(
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
        let mut backoff = Backoff::new();
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
                    return Err(Error::Invoke(format!(
                        "{function} refused the event: {}",
                        out.function_error().unwrap_or_default()
                    )))
                }
                Err(e) if is_throttle(&e) && backoff.attempt < THROTTLE_ATTEMPTS => {
                    let pause = backoff.next();
                    debug!(function, ?pause, "throttled; backing off");
                    tokio::time::sleep(pause).await;
                }
                Err(e) => {
                    return Err(Error::Invoke(format!(
                        "{function}: {}",
                        DisplayErrorContext(e)
                    )))
                }
            }
        }
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

/// Exponential backoff with full jitter: `random(0, min(cap, base * 2^attempt))`.
struct Backoff {
    attempt: u32,
    seed: u64,
}

impl Backoff {
    const BASE: Duration = Duration::from_millis(50);
    const CAP: Duration = Duration::from_secs(5);

    fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15)
            | 1;
        Self { attempt: 0, seed }
    }

    fn next(&mut self) -> Duration {
        let ceiling = Self::BASE
            .saturating_mul(1 << self.attempt.min(16))
            .min(Self::CAP);
        self.attempt += 1;
        // xorshift64: plenty for spreading retries apart.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        ceiling.mul_f64((self.seed % 10_000) as f64 / 10_000.0)
    }
}

#[async_trait]
impl Invoker for LambdaInvoker {
    async fn run_task(&self, task: &TaskSpec) -> Result<()> {
        self.invoke_event(&self.executor, task).await
    }

    async fn wake_scheduler(&self, job_id: &str) -> Result<()> {
        let scheduler = self
            .scheduler
            .as_deref()
            .ok_or_else(|| Error::Invoke("no scheduler function configured for wake-ups".into()))?;
        self.invoke_event(
            scheduler,
            &WakeEvent {
                wake: job_id.to_string(),
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_below_an_exponential_ceiling() {
        let mut b = Backoff::new();
        for attempt in 0..12 {
            let ceiling = Backoff::BASE.saturating_mul(1 << attempt).min(Backoff::CAP);
            let pause = b.next();
            assert!(
                pause <= ceiling,
                "attempt {attempt}: {pause:?} > {ceiling:?}"
            );
        }
        let pauses: Vec<_> = (0..20)
            .map(|_| {
                Backoff {
                    attempt: 10,
                    ..Backoff::new()
                }
                .next()
            })
            .collect();
        assert!(pauses.windows(2).any(|w| w[0] != w[1]), "jitter varies");
    }
}
