//! The CLI's errors, typed by where they come from, each worded with what failed.
//! `main` prints one as `error: <message>` and exits 1.

use crate::client::ClientError;

/// An error of a `lambdafusion` command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The embedded engine refused or failed a statement.
    #[error("{0}")]
    Engine(#[from] lambdafusion::Error),
    /// An endpoint (`--endpoint`) refused, failed or could not be reached.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// Single-process DataFusion (the baseline `demo` and `bench` check against).
    #[error("{0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// Arrow, reading or writing rows.
    #[error("{0}")]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// Parquet, writing rows or generated data.
    #[error("{0}")]
    Parquet(#[from] datafusion::parquet::errors::ParquetError),
    /// A file, directory or terminal.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// JSON that could not be read or written.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// Anything else, worded where it happened (a bad argument, a failed check).
    #[error("{0}")]
    Message(String),
}

impl From<String> for CliError {
    fn from(message: String) -> Self {
        Self::Message(message)
    }
}

impl From<&str> for CliError {
    fn from(message: &str) -> Self {
        Self::Message(message.to_string())
    }
}

/// A result of the CLI.
pub type Result<T, E = CliError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_keeps_its_type_and_its_words() {
        let engine = lambdafusion::Error::InvalidInput("no such table: t".into());
        let words = engine.to_string();
        let e = CliError::from(engine);
        assert!(matches!(e, CliError::Engine(_)), "{e:?}");
        assert_eq!(e.to_string(), words);
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "q.sql: gone");
        assert!(matches!(CliError::from(io), CliError::Io(_)));
        let api = ClientError::Api {
            status: 400,
            message: "bad SQL".into(),
        };
        assert_eq!(CliError::from(api).to_string(), "400: bad SQL");
        assert_eq!(CliError::from("plain").to_string(), "plain");
    }
}
