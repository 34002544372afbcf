//! A client for a lambdafusion HTTP endpoint (`lambdafusion serve`, the local AWS stack,
//! or a deployment): submit, follow progress, fetch the result as Arrow.

use std::io::Cursor;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::reader::StreamReader;
use lambdafusion::status::JobStatus;
use serde::Deserialize;

/// Errors talking to an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error.
    #[error("{status}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The request did not get an answer.
    #[error("cannot reach {endpoint}: {source}")]
    Transport {
        /// Endpoint.
        endpoint: String,
        /// Cause.
        source: reqwest::Error,
    },
    /// The answer was not what the API promises.
    #[error("unexpected response: {0}")]
    Protocol(String),
}

/// A lambdafusion endpoint.
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: String,
    http: reqwest::Client,
}

#[derive(Debug, Deserialize)]
struct Submission {
    id: String,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Debug, Deserialize)]
struct ErrorDetail {
    message: String,
}

impl Client {
    /// A client for `endpoint` (e.g. `http://127.0.0.1:8080`).
    pub fn new(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .expect("HTTP client"),
        }
    }

    fn transport(&self, source: reqwest::Error) -> ClientError {
        ClientError::Transport {
            endpoint: self.endpoint.clone(),
            source,
        }
    }

    async fn check(&self, response: reqwest::Response) -> Result<reqwest::Response, ClientError> {
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<ErrorBody>(&text)
            .map(|b| b.error.message)
            .unwrap_or(text);
        Err(ClientError::Api { status, message })
    }

    /// Submits `sql`; returns the query id.
    pub async fn submit(&self, sql: &str) -> Result<String, ClientError> {
        let response = self
            .http
            .post(format!("{}/v1/queries", self.endpoint))
            .json(&serde_json::json!({ "sql": sql }))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let submission: Submission = self
            .check(response)
            .await?
            .json()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(submission.id)
    }

    /// The status of query `id`, waiting up to `wait` for it to end.
    pub async fn status(&self, id: &str, wait: Duration) -> Result<JobStatus, ClientError> {
        let response = self
            .http
            .get(format!("{}/v1/queries/{id}", self.endpoint))
            .query(&[("wait", wait.as_secs_f64())])
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.check(response)
            .await?
            .json()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Cancels query `id`.
    pub async fn cancel(&self, id: &str) -> Result<(), ClientError> {
        let response = self
            .http
            .delete(format!("{}/v1/queries/{id}", self.endpoint))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        self.check(response).await.map(|_| ())
    }

    /// The rows of a finished query.
    pub async fn result(&self, id: &str) -> Result<(SchemaRef, Vec<RecordBatch>), ClientError> {
        let response = self
            .http
            .get(format!("{}/v1/queries/{id}/result", self.endpoint))
            .query(&[("format", "arrow")])
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let bytes = self
            .check(response)
            .await?
            .bytes()
            .await
            .map_err(|e| self.transport(e))?;
        let reader = StreamReader::try_new(Cursor::new(bytes), None)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let schema = reader.schema();
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok((schema, batches))
    }

    /// Submits `sql`, follows it to the end (calling `progress` on every status), and
    /// returns the final status and rows. A failed query is an error with its message.
    pub async fn run(
        &self,
        sql: &str,
        progress: &mut dyn FnMut(&JobStatus),
    ) -> Result<(JobStatus, SchemaRef, Vec<RecordBatch>), ClientError> {
        let id = self.submit(sql).await?;
        let status = loop {
            let status = self.status(&id, Duration::from_secs(2)).await?;
            progress(&status);
            if status.state != "running" {
                break status;
            }
        };
        if status.state != "succeeded" {
            return Err(ClientError::Api {
                status: 200,
                message: format!(
                    "query {id} {}: {}",
                    status.state,
                    status.error.clone().unwrap_or_default()
                ),
            });
        }
        let (schema, batches) = self.result(&id).await?;
        Ok((status, schema, batches))
    }
}

