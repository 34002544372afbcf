//! The HTTP API as an axum [`Router`], served by `lambdafusion serve` and by the
//! scheduler function (through `lambda_http`) alike.
//!
//! | method | path | what |
//! |---|---|---|
//! | `POST` | `/v1/queries` `{"sql": "...", "max_seconds": N}` | submit; `202` with the id |
//! | `GET` | `/v1/queries/{id}[?wait=S]` | state, per-stage progress, error, timings (waits up to `S` s for the end) |
//! | `GET` | `/v1/queries/{id}/result?format=json\|ndjson\|csv\|arrow\|parquet` | the rows |
//! | `GET` | `/v1/queries/{id}/result/objects` | presigned downloads of a large result |
//! | `DELETE` | `/v1/queries/{id}` | cancel |
//! | `GET` | `/v1/tables` | the catalog |
//! | `GET` | `/health` | liveness |
//!
//! Errors are JSON `{"error": {"status", "message"}}`; user errors are 4xx with
//! DataFusion's message, never a 500. A saturated engine answers 503 with `Retry-After`.
//!
//! Every request acts as a [`Caller`], taken from the request's extensions (the scheduler
//! function puts the API Gateway / function URL identity there; the embedded engine has
//! one caller, `local`): a caller sees, reads and cancels only its own queries (others'
//! are 404), unless it is an admin. [`with_bearer_token`] guards a router with a token.

mod encode;

use std::time::Duration;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Extension;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tracing::error;

pub use encode::ResultFormat;

use crate::access::Caller;
use crate::scheduler::{Scheduler, SubmitOptions};
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

/// Guards `router` with a bearer token: every request without `Authorization: Bearer
/// <token>` is answered 401 (the comparison takes the same time whatever the guess).
pub fn with_bearer_token(router: Router, token: String) -> Router {
    let expected = std::sync::Arc::new(token.into_bytes());
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let expected = expected.clone();
            async move {
                let given = request
                    .headers()
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or_default()
                    .as_bytes();
                if tokens_match(given, &expected) {
                    next.run(request).await
                } else {
                    let mut response = ApiError::new(
                        StatusCode::UNAUTHORIZED,
                        "missing or wrong bearer token (send Authorization: Bearer <token>, \
                         the token `lambdafusion serve` was started with)",
                    )
                    .into_response();
                    response.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        header::HeaderValue::from_static("Bearer"),
                    );
                    response
                }
            }
        },
    ))
}

/// Constant-time token comparison (only the length can be learnt from timing).
fn tokens_match(given: &[u8], expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    given.len() == expected.len() && bool::from(given.ct_eq(expected))
}

/// An error response: one status code, one message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    retry_after: Option<Duration>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = match &e {
            Error::InvalidInput(_) => StatusCode::BAD_REQUEST,
            Error::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            e if e.is_user_error() => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let retry_after = match &e {
            Error::Overloaded { retry_after, .. } => Some(*retry_after),
            _ => None,
        };
        let message = match e {
            Error::DataFusion(df) => df.strip_backtrace().to_string(),
            other => other.to_string(),
        };
        if status.is_server_error() && retry_after.is_none() {
            error!(%message, "request failed");
        }
        Self {
            status,
            message,
            retry_after,
        }
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
        let mut response = (self.status, Json(body)).into_response();
        if let Some(after) = self.retry_after {
            let secs = after.as_secs().max(1).to_string();
            if let Ok(value) = header::HeaderValue::from_str(&secs) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}

/// The caller of a request: what the host put in its extensions, or the embedded
/// engine's one caller.
fn caller_of(caller: Option<Extension<Caller>>) -> Caller {
    caller.map(|Extension(c)| c).unwrap_or_default()
}

/// Body of `POST /v1/queries`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    /// One SQL statement.
    pub sql: String,
    /// A time limit for this query in seconds, at most the deployment's
    /// `max_query_seconds`; past it the query fails and its tasks stop.
    #[serde(default)]
    pub max_seconds: Option<f64>,
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
    caller: Option<Extension<Caller>>,
    body: Result<Json<QueryRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Submission>), ApiError> {
    let Json(request) = body?;
    let options = SubmitOptions {
        caller: caller_of(caller),
        max_seconds: request.max_seconds,
    };
    let submitted = Scheduler::new(services)
        .submit(&request.sql, &options)
        .await?;
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
    /// Seconds to wait for the job to end before answering (0 to 20).
    #[serde(default)]
    pub wait: Option<String>,
}

/// `?wait=`: a finite number of seconds from 0 to [`MAX_WAIT_SECS`].
fn parse_wait(wait: Option<&str>) -> Result<Duration, ApiError> {
    let Some(text) = wait else {
        return Ok(Duration::ZERO);
    };
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=MAX_WAIT_SECS as f64).contains(&s) => {
            Ok(Duration::from_secs_f64(s))
        }
        _ => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("wait must be a number of seconds from 0 to {MAX_WAIT_SECS}, not {text:?}"),
        )),
    }
}

async fn status(
    State(services): State<Services>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    params: Result<Query<StatusParams>, QueryRejection>,
) -> Result<Json<JobStatus>, ApiError> {
    let Query(params) = params?;
    let wait = parse_wait(params.wait.as_deref())?;
    let caller = caller_of(caller);
    Ok(Json(
        wait_for_status_as(&services, &id, wait, &caller).await?,
    ))
}

/// The job's status, waiting up to `wait` for it to end (as the embedded engine's caller).
pub async fn wait_for_status(
    services: &Services,
    id: &str,
    wait: Duration,
) -> Result<JobStatus, Error> {
    wait_for_status_as(services, id, wait, &Caller::local()).await
}

/// The status of a job `caller` may see, waiting up to `wait` for it to end. While it
/// waits it reads only the small job item (one read every 5 to 250 ms), and the whole
/// job once, at the end. A job found running past its deadline is failed here (whoever
/// looks first records it).
pub async fn wait_for_status_as(
    services: &Services,
    id: &str,
    wait: Duration,
    caller: &Caller,
) -> Result<JobStatus, Error> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(5);
    loop {
        let job = services
            .store
            .get_job(id)
            .await?
            .filter(|j| services.config.access.can_read(caller, &j.owner))
            .ok_or_else(|| Error::NotFound(format!("query {id}")))?;
        if job.is_overdue(crate::time::now_ms()) {
            // The scheduler step fails it and cleans up; then report what it left.
            Scheduler::new(services.clone()).advance(id).await?;
            continue;
        }
        if job.state.is_terminal() || tokio::time::Instant::now() >= deadline {
            let snapshot = services
                .store
                .load_job(id)
                .await?
                .ok_or_else(|| Error::NotFound(format!("query {id}")))?;
            return Ok(job_status(&snapshot));
        }
        tokio::time::sleep(pause.min(deadline - tokio::time::Instant::now())).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

async fn cancel(
    State(services): State<Services>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let state = Scheduler::new(services)
        .cancel(&id, &caller_of(caller))
        .await?;
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
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    params: Result<Query<ResultParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params?;
    let format = ResultFormat::parse(params.format.as_deref().unwrap_or("json"))?;
    let (schema, stream) = crate::results::open(&services, &id, &caller_of(caller)).await?;
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
    /// Seconds the URLs stay valid (default 900, at most the deployment's
    /// `max_presign_seconds`, itself 900 by default).
    #[serde(default)]
    pub expires: Option<u64>,
}

async fn result_objects(
    State(services): State<Services>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
    params: Result<Query<ObjectsParams>, QueryRejection>,
) -> Result<Json<crate::results::ResultObjects>, ApiError> {
    let Query(params) = params?;
    let expires = services.config.access.presign_lifetime(params.expires);
    Ok(Json(
        crate::results::objects(&services, &id, &caller_of(caller), expires).await?,
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
