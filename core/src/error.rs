//! The crate's error type: each variant says whose fault it is, so the API can map it to
//! one status code and the executor can tell a retryable failure from a final one.

use datafusion::error::DataFusionError;

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in lambdafusion.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request itself is wrong: bad SQL, an unknown table, a malformed body or event.
    #[error("{0}")]
    InvalidInput(String),
    /// Planning or executing the query failed in DataFusion.
    #[error(transparent)]
    DataFusion(#[from] DataFusionError),
    /// A job, table or record that does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A conditional write lost: someone else already made this transition.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The job store failed (I/O, serialization, the backing database).
    #[error("job store: {0}")]
    Store(String),
    /// Object storage failed.
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    /// Invoking a function (task dispatch or scheduler wake-up) failed.
    #[error("invoke: {0}")]
    Invoke(String),
    /// The job was cancelled while this work ran.
    #[error("job {0} was cancelled")]
    Cancelled(String),
    /// Broken invariant inside lambdafusion: a bug, please report it.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// True when the caller (not the system) is at fault: maps to a 4xx response.
    pub fn is_user_error(&self) -> bool {
        match self {
            Error::InvalidInput(_) | Error::NotFound(_) => true,
            Error::DataFusion(e) => is_user_datafusion_error(e),
            Error::ObjectStore(object_store::Error::NotFound { .. }) => true,
            _ => false,
        }
    }

    /// True when running the same task again may succeed (I/O, throttling, lost workers);
    /// false for deterministic failures such as a division by zero in the query.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Store(_) | Error::ObjectStore(_) | Error::Invoke(_) => true,
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
        _ => false,
    }
}

fn is_retryable_datafusion_error(e: &DataFusionError) -> bool {
    matches!(
        e.find_root(),
        DataFusionError::ObjectStore(_)
            | DataFusionError::IoError(_)
            | DataFusionError::ResourcesExhausted(_)
    ) || matches!(e.find_root(), DataFusionError::External(inner)
        if inner.downcast_ref::<Error>().is_some_and(Error::is_retryable))
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
        Error::Store(format!("record encoding: {e}"))
    }
}

impl From<datafusion::arrow::error::ArrowError> for Error {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        Error::DataFusion(DataFusionError::ArrowError(Box::new(e), None))
    }
}
