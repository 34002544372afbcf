//! The HTTP API as an axum [`Router`], served by `lambdafusion serve` and by the
//! scheduler function (through `lambda_http`) alike.
//!
//! | method | path | what |
//! |---|---|---|
//! | `POST` | `/v1/queries` `{"sql": "..."}` | submit; `202` with the id |
//! | `GET` | `/v1/queries/{id}[?wait=S]` | state, per-stage progress, error, timings (waits up to `S` s for the end) |
//! | `GET` | `/v1/queries/{id}/result?format=json\|ndjson\|csv\|arrow\|parquet` | the rows |
//! | `GET` | `/v1/queries/{id}/result/objects` | presigned downloads of a large result |
//! | `DELETE` | `/v1/queries/{id}` | cancel |
//! | `GET` | `/v1/tables` | the catalog |
//! | `GET` | `/health` | liveness |
//!
//! Errors are JSON `{"error": {"status", "message"}}`; user errors are 4xx with
//! DataFusion's message, never a 500.

mod encode;

use std::time::Duration;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tracing::error;

pub use encode::ResultFormat;

use crate::scheduler::Scheduler;
use crate::status::{job_status, JobStatus};
use crate::{Error, Services};

/// Longest `?wait=` accepted, in seconds (API Gateway cuts requests at 30 s).
pub const MAX_WAIT_SECS: u64 = 20;

/// Builds the API router over `services`.
pub fn router(services: Services) -> Router {
    let limit = services.config.max_request_bytes;
    Router::new()
        .route("/v1/queries", axum::routing::post(submit))
        .route("/v1/queries/{id}", get(status).delete(cancel))
        .route("/v1/queries/{id}/result", get(result))
        .route("/v1/queries/{id}/result/objects", get(result_objects))
        .route("/v1/tables", get(tables))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .fallback(|| async {
            ApiError::new(StatusCode::NOT_FOUND, "no such endpoint; see /v1/queries")
        })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(services)
}

/// An error response: one status code, one message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = match &e {
            Error::InvalidInput(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Conflict(_) => StatusCode::CONFLICT,
            e if e.is_user_error() => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match e {
            Error::DataFusion(df) => df.strip_backtrace().to_string(),
            other => other.to_string(),
        };
        if status.is_server_error() {
            error!(%message, "request failed");
        }
        Self { status, message }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let status = if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            StatusCode::PAYLOAD_TOO_LARGE
        } else {
            StatusCode::BAD_REQUEST
        };
        Self::new(status, format!("invalid request body: {}", r.body_text()))
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, r.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"status": self.status.as_u16(), "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

/// Body of `POST /v1/queries`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    /// One SQL statement.
    pub sql: String,
}

/// Answer of `POST /v1/queries`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Submission {
    /// Query id.
    pub id: String,
    /// State right after submission.
    pub state: String,
    /// Where to poll.
    pub status_url: String,
    /// Where the rows will be.
    pub result_url: String,
}

async fn submit(
    State(services): State<Services>,
    body: Result<Json<QueryRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Submission>), ApiError> {
    let Json(request) = body?;
    let submitted = Scheduler::new(services).submit(&request.sql).await?;
    let id = submitted.job_id;
    Ok((
        StatusCode::ACCEPTED,
        Json(Submission {
            status_url: format!("/v1/queries/{id}"),
            result_url: format!("/v1/queries/{id}/result"),
            state: submitted.state.as_str().to_string(),
            id,
        }),
    ))
}

/// Query string of `GET /v1/queries/{id}`.
#[derive(Debug, Deserialize)]
pub struct StatusParams {
    /// Seconds to wait for the job to end before answering.
    #[serde(default)]
    pub wait: Option<f64>,
}

async fn status(
    State(services): State<Services>,
    Path(id): Path<String>,
    params: Result<Query<StatusParams>, QueryRejection>,
) -> Result<Json<JobStatus>, ApiError> {
    let Query(params) = params?;
    let wait = params.wait.unwrap_or(0.0).clamp(0.0, MAX_WAIT_SECS as f64);
    Ok(Json(
        wait_for_status(&services, &id, Duration::from_secs_f64(wait)).await?,
    ))
}

/// The job's status, waiting up to `wait` for it to end.
pub async fn wait_for_status(
    services: &Services,
    id: &str,
    wait: Duration,
) -> Result<JobStatus, Error> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(5);
    loop {
        let snapshot = services
            .store
            .load_job(id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("query {id}")))?;
        let status = job_status(&snapshot);
        if status.is_terminal() || tokio::time::Instant::now() >= deadline {
            return Ok(status);
        }
        tokio::time::sleep(pause.min(deadline - tokio::time::Instant::now())).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

async fn cancel(
    State(services): State<Services>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let state = Scheduler::new(services).cancel(&id).await?;
    Ok(Json(json!({"id": id, "state": state.as_str()})))
}

/// Query string of the result endpoint.
#[derive(Debug, Deserialize)]
pub struct ResultParams {
    /// Output format (default `json`).
    #[serde(default)]
    pub format: Option<String>,
}

async fn result(
    State(services): State<Services>,
    Path(id): Path<String>,
    params: Result<Query<ResultParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params?;
    let format = ResultFormat::parse(params.format.as_deref().unwrap_or("json"))?;
    let (schema, stream) = crate::results::open(&services, &id).await?;
    let body = encode::encode(format, schema, stream).await?;
    let body = match services.config.max_response_bytes {
        None => body,
        // Where responses are buffered and capped (Lambda), build it whole and refuse
        // cleanly past the cap rather than fail mid-response.
        Some(cap) => match http_body_util::BodyExt::collect(http_body_util::Limited::new(body, cap)).await {
            Ok(collected) => axum::body::Body::from(collected.to_bytes()),
            Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "the result of query {id} is larger than the {cap} bytes one response can carry here; \
                         download it from GET /v1/queries/{id}/result/objects (presigned URLs; \
                         `lambdafusion query` does this by itself), or add a LIMIT"
                    ),
                ))
            }
            Err(e) => return Err(Error::Internal(format!("encoding the result: {e}")).into()),
        },
    };
    Ok(([(header::CONTENT_TYPE, format.content_type())], body).into_response())
}

/// Query string of the result objects endpoint.
#[derive(Debug, Deserialize)]
pub struct ObjectsParams {
    /// Seconds the URLs stay valid (default 900, at most 43200).
    #[serde(default)]
    pub expires: Option<u64>,
}

async fn result_objects(
    State(services): State<Services>,
    Path(id): Path<String>,
    params: Result<Query<ObjectsParams>, QueryRejection>,
) -> Result<Json<crate::results::ResultObjects>, ApiError> {
    let Query(params) = params?;
    let expires = Duration::from_secs(params.expires.unwrap_or(900).clamp(1, 43_200));
    Ok(Json(
        crate::results::objects(&services, &id, expires).await?,
    ))
}

async fn tables(State(services): State<Services>) -> Result<Json<serde_json::Value>, ApiError> {
    let tables = services.store.list_tables().await?;
    let rows: Vec<_> = tables
        .iter()
        .map(|t| {
            let columns: Vec<_> = crate::plan::decode_schema(&t.schema)
                .map(|s| {
                    s.fields()
                        .iter()
                        .map(|f| json!({"name": f.name(), "type": f.data_type().to_string()}))
                        .collect()
                })
                .unwrap_or_default();
            json!({"name": t.name, "format": t.format, "locations": t.locations, "columns": columns})
        })
        .collect();
    Ok(Json(json!({"tables": rows})))
}
