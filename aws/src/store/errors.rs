//! DynamoDB errors classified into the job store's kinds, and the retry of transient ones.

use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use lambdafusion::error::{StoreError, StoreErrorKind};
use lambdafusion::{Error, Result};
use tracing::debug;

use crate::backoff::Backoff;

/// Tries of one request when it is throttled, conflicts or fails transiently (the SDK's
/// own retries come on top, inside each try).
pub(super) const STORE_TRIES: u32 = 10;
/// First pause of the retry backoff.
pub(super) const STORE_BACKOFF_BASE: Duration = Duration::from_millis(25);
/// Longest pause of the retry backoff.
pub(super) const STORE_BACKOFF_CAP: Duration = Duration::from_secs(2);

/// The kind of a DynamoDB error code (`__type` without its namespace).
pub fn kind_of_code(code: &str) -> StoreErrorKind {
    match code {
        "ProvisionedThroughputExceededException"
        | "ThrottlingException"
        | "RequestLimitExceeded"
        | "ThrottlingError" => StoreErrorKind::Throttled,
        "TransactionConflictException"
        | "TransactionInProgressException"
        | "TransactionConflict" => StoreErrorKind::Conflict,
        "InternalServerError" | "ServiceUnavailable" | "InternalFailure" => {
            StoreErrorKind::Unavailable
        }
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "MissingAuthenticationTokenException"
        | "InvalidSignatureException"
        | "ExpiredTokenException"
        | "IncompleteSignatureException" => StoreErrorKind::AccessDenied,
        _ => StoreErrorKind::Invalid,
    }
}

/// Classifies an SDK error into a store error that keeps it as its source.
pub(super) fn store_err<E>(op: &str, e: SdkError<E, HttpResponse>) -> Error
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    let kind = match &e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreErrorKind::Unavailable
        }
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            match service.err().code() {
                Some(code) => match kind_of_code(code) {
                    StoreErrorKind::Invalid if status >= 500 => StoreErrorKind::Unavailable,
                    kind => kind,
                },
                None if status >= 500 => StoreErrorKind::Unavailable,
                None => StoreErrorKind::Invalid,
            }
        }
        _ => StoreErrorKind::Invalid,
    };
    let message = format!("DynamoDB {op}: {}", DisplayErrorContext(&e));
    Error::Store(StoreError::with_source(kind, message, e))
}

/// Whether a conditional request failed its condition.
pub(super) fn condition_failed<E: ProvideErrorMetadata>(
    e: &SdkError<E, impl std::fmt::Debug>,
) -> bool {
    e.as_service_error()
        .and_then(|e| e.code())
        .is_some_and(|c| c == "ConditionalCheckFailedException")
}

/// Retries `f` while it fails transiently (throttling, conflicts, 5xx, network), with
/// jittered exponential backoff, at most [`STORE_TRIES`] times.
pub(super) async fn retrying<T, F, Fut>(op: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut backoff = Backoff::new(STORE_BACKOFF_BASE, STORE_BACKOFF_CAP);
    loop {
        match f().await {
            Err(Error::Store(e)) if e.kind.is_transient() && backoff.attempt + 1 < STORE_TRIES => {
                let pause = backoff.next_pause();
                debug!(op, kind = ?e.kind, ?pause, error = %e, "retrying a DynamoDB request");
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
    }
}
