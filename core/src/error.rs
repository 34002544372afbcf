//! The crate's error type: each variant says whose fault it is, so the API can map it to
//! one status code and the executor can tell a retryable failure from a final one.

use std::time::Duration;

use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error kept as the source of ours.
pub type Source = Box<dyn std::error::Error + Send + Sync>;

/// Everything that can go wrong in lambdafusion.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request itself is wrong: bad SQL, an unknown table, a malformed body or event.
    #[error("{0}")]
    InvalidInput(String),
    /// The request is larger than a limit allows (413).
    #[error("{0}")]
    TooLarge(String),
    /// The caller may not do this (403); the message names the setting that would allow it.
    #[error("{0}")]
    Forbidden(String),
    /// The service is saturated; try again after the given time (503 with `Retry-After`).
    #[error("{message}")]
    Overloaded {
        /// What is full.
        message: String,
        /// When to try again.
        retry_after: Duration,
    },
    /// Planning or executing the query failed in DataFusion.
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    /// A job, table or record that does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A conditional write lost: someone else already made this transition.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The job store failed; [`StoreError::kind`] says whether trying again may help.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Object storage failed.
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    /// Invoking a function (task dispatch or scheduler wake-up) failed.
    #[error("invoke: {message}")]
    Invoke {
        /// What failed.
        message: String,
        /// Throttled (429) or a transient service failure: the invocation may be sent
        /// again later without anything having run.
        retryable: bool,
    },
    /// A task reached a limit of the function running it (its time limit, its local
    /// disk) and stopped; the message names the setting to raise. The same task on the
    /// same function would reach it again, so it is not retried.
    #[error("{0}")]
    FunctionLimit(String),
    /// The job was cancelled while this work ran.
    #[error("job {0} was cancelled")]
    Cancelled(String),
    /// A query waited for to its end failed or was cancelled: its id, state and message.
    #[error("{0}")]
    QueryFailed(String),
    /// Broken invariant inside lambdafusion: a bug, please report it.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What kind of job store failure happened: decides whether it is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// The store throttled the request (DynamoDB `ProvisionedThroughputExceeded`,
    /// `ThrottlingException`, `RequestLimitExceeded`): retry with backoff.
    Throttled,
    /// The request collided with a concurrent one on the same item (DynamoDB
    /// `TransactionConflict`): retry with backoff.
    Conflict,
    /// The store or the network failed transiently (5xx, timeouts, connection errors):
    /// retry with backoff.
    Unavailable,
    /// The request is invalid (validation, serialization, item too large, missing
    /// table): retrying cannot help.
    Invalid,
    /// The caller is not allowed (access denied, bad credentials): retrying cannot help.
    AccessDenied,
    /// A stored record does not decode: retrying cannot help.
    Corrupt,
}

impl StoreErrorKind {
    /// Whether the same request may succeed if sent again.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            StoreErrorKind::Throttled | StoreErrorKind::Conflict | StoreErrorKind::Unavailable
        )
    }
}

/// A job store failure: what was being done, its kind, and the underlying error.
#[derive(Debug, thiserror::Error)]
#[error("job store: {message}")]
pub struct StoreError {
    /// Whether it is worth retrying.
    pub kind: StoreErrorKind,
    /// The operation and what went wrong, for people.
    pub message: String,
    /// The error of the backing database, if any.
    #[source]
    pub source: Option<Source>,
}

impl StoreError {
    /// A store error without an underlying error.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A store error caused by `source`.
    pub fn with_source(
        kind: StoreErrorKind,
        message: impl Into<String>,
        source: impl Into<Source>,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// Whether a local file system error is about the path a statement named (missing, not
/// a directory, a directory where a file should be), not the machine.
fn local_path_error(source: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    use std::io::ErrorKind::*;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                NotFound | NotADirectory | IsADirectory | InvalidInput
            );
        }
        cause = e.source();
    }
    let text = source.to_string();
    text.contains("Not a directory") || text.contains("Is a directory")
}

impl Error {
    /// A job store error of `kind` (see [`StoreError`]).
    pub fn store(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Error::Store(StoreError::new(kind, message))
    }

    /// An invocation that was refused for good (bad payload, unknown function).
    pub fn invoke(message: impl Into<String>) -> Self {
        Error::Invoke {
            message: message.into(),
            retryable: false,
        }
    }

    /// An invocation that was throttled or hit a transient failure; nothing ran.
    pub fn invoke_throttled(message: impl Into<String>) -> Self {
        Error::Invoke {
            message: message.into(),
            retryable: true,
        }
    }

    /// True when the caller (not the system) is at fault: maps to a 4xx response.
    pub fn is_user_error(&self) -> bool {
        match self {
            Error::InvalidInput(_)
            | Error::NotFound(_)
            | Error::TooLarge(_)
            | Error::Forbidden(_) => true,
            Error::DataFusion(e) => is_user_datafusion_error(e),
            Error::ObjectStore(object_store::Error::NotFound { .. }) => true,
            _ => false,
        }
    }

    /// An error found while planning a statement, classified by whose fault it is.
    /// Planning is a function of the statement and the catalog: whatever DataFusion
    /// reports there — including its "internal" errors, which it raises for some type
    /// mismatches — is the statement's fault (400), except failures to reach storage (the
    /// engine's, kept as they are) and places the caller may not read (403).
    pub fn planning(self) -> Error {
        let Error::DataFusion(e) = self else {
            return self;
        };
        match e.find_root() {
            DataFusionError::ObjectStore(o) => match **o {
                object_store::Error::NotFound { .. } => {
                    Error::InvalidInput(e.strip_backtrace().to_string())
                }
                object_store::Error::PermissionDenied { .. } => {
                    Error::Forbidden(e.strip_backtrace().to_string())
                }
                // A local path that is not what the statement says (a file where a
                // table's directory should be): the statement's fault. Object stores
                // over the network keep their failures (a 5xx, retried).
                object_store::Error::Generic {
                    store: "LocalFileSystem",
                    ref source,
                } if local_path_error(source.as_ref()) => {
                    Error::InvalidInput(e.strip_backtrace().to_string())
                }
                _ => Error::DataFusion(e),
            },
            DataFusionError::IoError(_) | DataFusionError::ResourcesExhausted(_) => {
                Error::DataFusion(e)
            }
            DataFusionError::External(inner) if inner.downcast_ref::<Error>().is_some() => {
                match inner.downcast_ref::<Error>() {
                    Some(ours) if ours.is_user_error() => {
                        Error::InvalidInput(e.strip_backtrace().to_string())
                    }
                    _ => Error::DataFusion(e),
                }
            }
            _ => Error::InvalidInput(e.strip_backtrace().to_string()),
        }
    }

    /// True when the request touched a place it may not (an object store's
    /// `PermissionDenied`: outside the allowed directories, or a write to a read-only
    /// one): a 403, not a failure of the engine.
    pub fn is_forbidden(&self) -> bool {
        let denied =
            |e: &object_store::Error| matches!(e, object_store::Error::PermissionDenied { .. });
        match self {
            Error::Forbidden(_) => true,
            Error::ObjectStore(e) => denied(e),
            Error::DataFusion(e) => match e.find_root() {
                DataFusionError::ObjectStore(e) => denied(e),
                _ => false,
            },
            _ => false,
        }
    }

    /// True when running the same task again may succeed (I/O, throttling, lost workers);
    /// false for deterministic failures such as a division by zero in the query, an
    /// invalid store request or denied access.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Store(e) => e.kind.is_transient(),
            Error::ObjectStore(e) => is_retryable_object_store_error(e),
            Error::Invoke { retryable, .. } => *retryable,
            Error::DataFusion(e) => is_retryable_datafusion_error(e),
            _ => false,
        }
    }
}

fn is_user_datafusion_error(e: &DataFusionError) -> bool {
    match e.find_root() {
        DataFusionError::SQL(..)
        | DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::NotImplemented(_) => true,
        // A table location that does not exist is the request's fault.
        DataFusionError::ObjectStore(e) => matches!(**e, object_store::Error::NotFound { .. }),
        // What the query's own expressions do to its values (`CAST('x' AS INT)`, 1/0),
        // found while planning (constant folding) or running.
        DataFusionError::ArrowError(e, _) => matches!(
            **e,
            ArrowError::CastError(_)
                | ArrowError::ParseError(_)
                | ArrowError::DivideByZero
                | ArrowError::ArithmeticOverflow(_)
        ),
        _ => false,
    }
}

/// Object storage failures worth another attempt: everything but the request's own
/// mistakes (a missing object is a committed output gone: a new attempt of the producer
/// cannot bring it back either, but the job's retry of this task may see the TTL'd
/// state; it stays retryable so that a transiently listed-but-missing object is retried).
fn is_retryable_object_store_error(e: &object_store::Error) -> bool {
    !matches!(
        e,
        object_store::Error::InvalidPath { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::NotImplemented { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::UnknownConfigurationKey { .. }
    )
}

fn is_retryable_datafusion_error(e: &DataFusionError) -> bool {
    match e.find_root() {
        DataFusionError::ObjectStore(e) => is_retryable_object_store_error(e),
        DataFusionError::IoError(_) | DataFusionError::ResourcesExhausted(_) => true,
        DataFusionError::External(inner) => inner
            .downcast_ref::<Error>()
            .is_some_and(Error::is_retryable),
        _ => false,
    }
}

impl From<Error> for DataFusionError {
    fn from(e: Error) -> Self {
        match e {
            Error::DataFusion(e) => e,
            Error::ObjectStore(e) => DataFusionError::ObjectStore(Box::new(e)),
            other => DataFusionError::External(Box::new(other)),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Store(StoreError::with_source(
            StoreErrorKind::Corrupt,
            format!("record encoding: {e}"),
            e,
        ))
    }
}

impl From<datafusion::arrow::error::ArrowError> for Error {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        Error::DataFusion(DataFusionError::ArrowError(Box::new(e), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_path_that_is_not_a_table_is_the_statements_fault() {
        let store_error = |store: &'static str, kind: std::io::ErrorKind| {
            Error::DataFusion(DataFusionError::ObjectStore(Box::new(
                object_store::Error::Generic {
                    store,
                    source: Box::new(std::io::Error::new(kind, "Not a directory (os error 20)")),
                },
            )))
        };
        use std::io::ErrorKind::*;
        assert!(matches!(
            store_error("LocalFileSystem", NotADirectory).planning(),
            Error::InvalidInput(_)
        ));
        // The machine failing stays the engine's.
        assert!(matches!(
            store_error("LocalFileSystem", OutOfMemory).planning(),
            Error::DataFusion(_)
        ));
        // A network store's failure too: it is retried.
        assert!(matches!(
            store_error("S3", NotADirectory).planning(),
            Error::DataFusion(_)
        ));
    }

    #[test]
    fn store_errors_are_retried_only_when_transient() {
        for (kind, retry) in [
            (StoreErrorKind::Throttled, true),
            (StoreErrorKind::Conflict, true),
            (StoreErrorKind::Unavailable, true),
            (StoreErrorKind::Invalid, false),
            (StoreErrorKind::AccessDenied, false),
            (StoreErrorKind::Corrupt, false),
        ] {
            assert_eq!(Error::store(kind, "x").is_retryable(), retry, "{kind:?}");
        }
    }

    #[test]
    fn planning_errors_are_the_statements_fault_unless_storage_failed() {
        let internal = DataFusionError::Internal("Failed to coerce types".into());
        let planned = Error::DataFusion(DataFusionError::Context(
            "type_coercion".into(),
            Box::new(internal),
        ))
        .planning();
        assert!(matches!(planned, Error::InvalidInput(_)), "{planned}");
        let io = Error::DataFusion(DataFusionError::ObjectStore(Box::new(
            object_store::Error::Generic {
                store: "S3",
                source: "connection reset".into(),
            },
        )))
        .planning();
        assert!(matches!(io, Error::DataFusion(_)), "{io}");
        let denied = Error::DataFusion(DataFusionError::ObjectStore(Box::new(
            object_store::Error::PermissionDenied {
                path: "x".into(),
                source: "outside".into(),
            },
        )))
        .planning();
        assert!(denied.is_forbidden(), "{denied}");
        let store = Error::store(StoreErrorKind::Throttled, "slow").planning();
        assert!(matches!(store, Error::Store(_)));
    }

    #[test]
    fn classes_survive_a_trip_through_datafusion() {
        let throttled: DataFusionError =
            Error::store(StoreErrorKind::Throttled, "slow down").into();
        assert!(Error::DataFusion(throttled).is_retryable());
        let denied: DataFusionError = Error::store(StoreErrorKind::AccessDenied, "no").into();
        assert!(!Error::DataFusion(denied).is_retryable());
        assert!(Error::invoke_throttled("429").is_retryable());
        assert!(!Error::invoke("no such function").is_retryable());
        assert!(Error::TooLarge("big".into()).is_user_error());
    }
}
