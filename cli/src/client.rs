//! A client for a lambdafusion HTTP endpoint (`lambdafusion serve`, the local AWS stack,
//! or a deployment): submit, follow progress, fetch the result as Arrow.

use std::io::Cursor;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::reader::StreamReader;
use lambdafusion::results::ResultObjects;
use lambdafusion::status::JobStatus;
use lambdafusion_aws::signing::{self, RequestSigner};
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

/// A lambdafusion endpoint. Requests to an AWS endpoint (API Gateway or a Lambda
/// function URL) are signed with SigV4 using the standard AWS credential chain, as the
/// IAM authorization of a default deployment requires; so are requests to any endpoint
/// when `LAMBDAFUSION_SIGV4_SERVICE` names the service to sign for (`lambda` for the
/// local stack's IAM-authorized function URL). [`Client::with_token`] adds a bearer token
/// (`lambdafusion serve --token`).
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: String,
    http: reqwest::Client,
    signer: std::sync::Arc<tokio::sync::OnceCell<Option<RequestSigner>>>,
    token: Option<String>,
}

/// Environment variable naming the SigV4 service to sign every request for, whatever the
/// endpoint's host (`lambda`, `execute-api`).
pub const ENV_SIGV4_SERVICE: &str = "LAMBDAFUSION_SIGV4_SERVICE";

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
            signer: Default::default(),
            token: None,
        }
    }

    /// The same client signing every request with `signer` (SigV4), whatever the host.
    pub fn with_signer(self, signer: RequestSigner) -> Self {
        let cell = tokio::sync::OnceCell::new();
        let _ = cell.set(Some(signer));
        Self {
            signer: std::sync::Arc::new(cell),
            ..self
        }
    }

    /// The same client sending `Authorization: Bearer <token>` (when `Some`).
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// Sends a request to `path_and_query` of the endpoint, signed when the endpoint is
    /// an AWS one (or `LAMBDAFUSION_SIGV4_SERVICE` says so), with the bearer token when
    /// there is one; a body is sent as JSON.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<reqwest::Response, ClientError> {
        let url = format!("{}{path_and_query}", self.endpoint);
        let mut headers: Vec<(String, String)> = Vec::new();
        if body.is_some() {
            headers.push(("content-type".into(), "application/json".into()));
        }
        let parsed = reqwest::Url::parse(&url).ok();
        let host = parsed
            .as_ref()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        // What the Host header will say, and so what must be signed: the port too, unless
        // it is the scheme's default (reqwest leaves a default port out).
        let authority = match parsed.as_ref().and_then(|u| u.port()) {
            Some(port) => format!("{host}:{port}"),
            None => host.clone(),
        };
        let signer = self
            .signer
            .get_or_try_init(|| async {
                let forced = std::env::var(ENV_SIGV4_SERVICE)
                    .ok()
                    .filter(|s| !s.is_empty());
                match (forced.as_deref(), signing::service_for(&host)) {
                    (Some("lambda"), _) => RequestSigner::from_env("lambda", None).await.map(Some),
                    (Some("execute-api"), _) => {
                        RequestSigner::from_env("execute-api", None).await.map(Some)
                    }
                    (Some(other), _) => Err(signing::SigningError::new(format!(
                        "{ENV_SIGV4_SERVICE}={other}: expected lambda or execute-api"
                    ))),
                    (None, Some(service)) => {
                        RequestSigner::from_env(service, signing::region_of(&host))
                            .await
                            .map(Some)
                    }
                    (None, None) => Ok(None),
                }
            })
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        if let Some(signer) = signer {
            headers.push(("host".into(), authority));
            let signed = signer
                .headers(
                    method.as_str(),
                    &url,
                    &headers,
                    body.as_deref().unwrap_or_default(),
                )
                .await
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            headers.extend(signed);
            headers.retain(|(k, _)| k != "host");
        }
        if let Some(token) = &self.token {
            headers.push(("authorization".into(), format!("Bearer {token}")));
        }
        let mut request = self.http.request(method, &url);
        for (k, v) in headers {
            request = request.header(k, v);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        request.send().await.map_err(|e| self.transport(e))
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
        self.submit_with(sql, None).await
    }

    /// Submits `sql` with an optional time limit in seconds; returns the query id.
    pub async fn submit_with(
        &self,
        sql: &str,
        max_seconds: Option<f64>,
    ) -> Result<String, ClientError> {
        let mut request = serde_json::json!({ "sql": sql });
        if let Some(limit) = max_seconds {
            request["max_seconds"] = serde_json::json!(limit);
        }
        let body = serde_json::to_vec(&request).expect("JSON");
        let response = self
            .send(reqwest::Method::POST, "/v1/queries", Some(body))
            .await?;
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
        let path = format!("/v1/queries/{id}?wait={}", wait.as_secs_f64());
        let response = self.send(reqwest::Method::GET, &path, None).await?;
        self.check(response)
            .await?
            .json()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// The catalog: every table with its columns.
    pub async fn tables(&self) -> Result<lambdafusion_api::Tables, ClientError> {
        let response = self.send(reqwest::Method::GET, "/v1/tables", None).await?;
        self.check(response)
            .await?
            .json()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Cancels query `id`.
    pub async fn cancel(&self, id: &str) -> Result<(), ClientError> {
        let response = self
            .send(reqwest::Method::DELETE, &format!("/v1/queries/{id}"), None)
            .await?;
        self.check(response).await.map(|_| ())
    }

    /// The rows of a finished query. A result too large for one response (413 from a
    /// deployment) is downloaded from object storage through presigned URLs instead.
    pub async fn result(&self, id: &str) -> Result<(SchemaRef, Vec<RecordBatch>), ClientError> {
        let path = format!("/v1/queries/{id}/result?format=arrow");
        let response = self.send(reqwest::Method::GET, &path, None).await?;
        if response.status() == reqwest::StatusCode::PAYLOAD_TOO_LARGE {
            return self.download(id).await;
        }
        self.arrow(response).await
    }

    /// Reads an Arrow IPC stream answer.
    async fn arrow(
        &self,
        response: reqwest::Response,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), ClientError> {
        let bytes = self
            .check(response)
            .await?
            .bytes()
            .await
            .map_err(|e| self.transport(e))?;
        let reader = StreamReader::try_new(Cursor::new(bytes), None)
            .map_err(|e| ClientError::Protocol(format!("not an Arrow IPC stream: {e}")))?;
        let schema = reader.schema();
        let batches = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok((schema, batches))
    }

    /// Downloads a result piece by piece from its presigned URLs.
    async fn download(&self, id: &str) -> Result<(SchemaRef, Vec<RecordBatch>), ClientError> {
        let path = format!("/v1/queries/{id}/result/objects");
        let response = self.send(reqwest::Method::GET, &path, None).await?;
        let objects: ResultObjects = self
            .check(response)
            .await?
            .json()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let mut schema = None;
        let mut batches = Vec::new();
        for piece in &objects.pieces {
            let response = self
                .http
                .get(&piece.url)
                .header("range", format!("bytes={}-{}", piece.start, piece.end - 1))
                .send()
                .await
                .map_err(|e| self.transport(e))?;
            let (piece_schema, piece_batches) = self.arrow(response).await?;
            schema.get_or_insert(piece_schema);
            batches.extend(piece_batches);
        }
        // An empty result has no pieces: its schema comes from the (small) inline path.
        let schema = match schema {
            Some(schema) => schema,
            None => {
                return Err(ClientError::Protocol(format!(
                    "query {id}: no result pieces"
                )))
            }
        };
        Ok((schema, batches))
    }

    /// Submits `sql`, follows it to the end (calling `progress` on every status), and
    /// returns the final status and rows. A failed query is an error with its message.
    pub async fn run(
        &self,
        sql: &str,
        progress: &mut dyn FnMut(&JobStatus),
    ) -> Result<(JobStatus, SchemaRef, Vec<RecordBatch>), ClientError> {
        self.run_with(sql, None, progress).await
    }

    /// [`Client::run`] with an optional time limit in seconds.
    pub async fn run_with(
        &self,
        sql: &str,
        max_seconds: Option<f64>,
        progress: &mut dyn FnMut(&JobStatus),
    ) -> Result<(JobStatus, SchemaRef, Vec<RecordBatch>), ClientError> {
        let id = self.submit_with(sql, max_seconds).await?;
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
