//! The HTTP API as an axum [`Router`], served by `lambdafusion serve` and by the
//! scheduler function (through `lambda_http`) alike.
//!
//! | method | path | what |
//! |---|---|---|
//! | `POST` | `/v1/queries` `{"sql": "...", "max_seconds": N}` | submit; `202` with the id |
//! | `GET` | `/v1/queries?limit=N&next=T` | the caller's queries, newest first, a page at a time |
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
//! are 404), unless it is an admin. [`with_bearer_token`] guards a router with a token,
//! [`loopback_only`] a tokenless one against other hosts' names and pages.

pub mod console;
mod encode;
mod guard;

use std::time::Duration;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tracing::error;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use encode::ResultFormat;
pub use guard::{
    bearer_token_is, check_token_strength, loopback_only, with_bearer_token, MIN_TOKEN_CHARS,
};

use lambdafusion::access::Caller;
use lambdafusion::scheduler::{Scheduler, SubmitOptions};
use lambdafusion::status::{job_status, wait_for_status_as, JobStatus};
use lambdafusion::{Error, Services};

/// Longest `?wait=` accepted, in seconds (API Gateway cuts requests at 30 s).
pub const MAX_WAIT_SECS: u64 = 20;

/// The API's OpenAPI description: title, version, the bearer scheme of `serve --token`.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "lambdafusion",
        description = "Serverless distributed SQL: submit a statement, follow its stages, \
                       read its result. On AWS requests are signed with SigV4 (IAM auth of \
                       the function URL or API Gateway); `lambdafusion serve --token` asks \
                       for a bearer token; on loopback without a token, nothing."
    ),
    tags((name = "queries", description = "Submit, follow, read and cancel queries"),
         (name = "catalog", description = "Tables queries may read"),
         (name = "service", description = "Liveness, this document and the web console"))
)]
struct ApiDoc;

/// Adds the bearer scheme (`serve --token`) to the document's components, and to every
/// operation but the console's page and assets: the scheme as an optional requirement
/// (no token on loopback), a 401 for a missing or wrong token and a 500 for a failed
/// store, both with the error body. Applied by [`openapi`] once every route is in the
/// document (a `modifiers(...)` of the derive would run before the routes are added).
struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
        };
        use utoipa::openapi::{Content, Ref, RefOr, ResponseBuilder};
        let error = |description: &str| -> RefOr<utoipa::openapi::Response> {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        Content::new(Some(Ref::from_schema_name("ErrorBody"))),
                    )
                    .build(),
            )
        };
        for (path, item) in openapi.paths.paths.iter_mut() {
            if console::PATHS.contains(&path.as_str()) {
                continue;
            }
            for operation in [&mut item.get, &mut item.post, &mut item.delete]
                .into_iter()
                .flatten()
            {
                operation.security = Some(vec![
                    SecurityRequirement::default(),
                    SecurityRequirement::new("bearer", Vec::<String>::new()),
                ]);
                let responses = &mut operation.responses.responses;
                responses.insert(
                    "401".into(),
                    error("Missing or wrong bearer token (a `serve --token` server only)"),
                );
                responses
                    .entry("500".into())
                    .or_insert_with(|| error("The engine's store or object store failed; retry"));
            }
        }
        openapi
            .components
            .get_or_insert_default()
            .add_security_scheme(
                "bearer",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some(
                            "The token `lambdafusion serve --token` was started with",
                        ))
                        .build(),
                ),
            );
    }
}

/// Every route, each with its part of the OpenAPI document: the router and the document
/// come from the same list, so neither can have a route the other lacks.
fn api_routes() -> OpenApiRouter<Services> {
    OpenApiRouter::with_openapi(<ApiDoc as utoipa::OpenApi>::openapi())
        .routes(routes!(list, submit))
        .routes(routes!(status, cancel))
        .routes(routes!(result))
        .routes(routes!(result_objects))
        .routes(routes!(tables))
        .routes(routes!(openapi_json))
        .routes(routes!(health))
        .routes(routes!(console::index))
        .routes(routes!(console::script))
        .routes(routes!(console::style))
}

/// The OpenAPI 3.1 document of the API (served at `GET /v1/openapi.json`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut document = api_routes().split_for_parts().1;
    utoipa::Modify::modify(&Security, &mut document);
    document
}

/// Builds the API router over `services`.
pub fn router(services: Services) -> Router {
    let limit = services.config.max_request_bytes;
    let (routes, _) = api_routes().split_for_parts();
    routes
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no such endpoint; see /v1/openapi.json",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "this endpoint does not take that method; see /v1/openapi.json",
            )
        })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(services)
}

/// The OpenAPI document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "service",
    responses((status = 200, description = "This API's OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi_json() -> Response {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let body = DOCUMENT.get_or_init(|| {
        openapi()
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    });
    ([(header::CONTENT_TYPE, "application/json")], body.clone()).into_response()
}

/// Liveness.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
}

/// Answers while the service runs.
#[utoipa::path(get, path = "/health", tag = "service",
    responses((status = 200, body = Health)))]
async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// An error response: one status code, one message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    retry_after: Option<Duration>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
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
            e if e.is_forbidden() => StatusCode::FORBIDDEN,
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

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, r.body_text())
    }
}

/// A query id from the path: ids are 32 hexadecimal digits, and anything else names no
/// query (404, without repeating what was sent).
fn query_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(id) = path?;
    if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(id);
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        "query not found: query ids are 32 hexadecimal digits",
    ))
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::new(StatusCode::BAD_REQUEST, r.body_text())
    }
}

/// Every error's body: `{"error": {"status", "message"}}`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error of an [`ErrorBody`].
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// The HTTP status again.
    pub status: u16,
    /// What went wrong, in words (for SQL errors DataFusion's own message).
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                status: self.status.as_u16(),
                message: self.message,
            },
        };
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
#[derive(Debug, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
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

/// Submits one SQL statement. A query runs in the background (follow `status_url`); a
/// statement such as CREATE EXTERNAL TABLE is done when this answers.
#[utoipa::path(post, path = "/v1/queries", tag = "queries", request_body = QueryRequest,
    responses((status = 202, description = "Accepted", body = Submission),
              (status = 400, description = "SQL error, unknown table, bad request body", body = ErrorBody),
              (status = 403, description = "A table location or statement this caller may not use", body = ErrorBody),
              (status = 413, description = "Request or SQL too large", body = ErrorBody),
              (status = 503, description = "Saturated; retry after the `Retry-After` seconds", body = ErrorBody)))]
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

/// Most queries one page of `GET /v1/queries` lists.
pub const MAX_PAGE: usize = 100;

/// Query string of `GET /v1/queries`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Queries per page, 1 to 100 (default 20).
    #[serde(default)]
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub limit: Option<String>,
    /// The `next` token of the previous page.
    #[serde(default)]
    pub next: Option<String>,
}

/// One query in the history: its status without the per-stage detail.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct QuerySummary {
    /// Query id.
    pub id: String,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// `query` (distributed) or `statement` (DDL, answered at once).
    pub kind: String,
    /// The statement as submitted.
    pub sql: String,
    /// Why it failed or was cancelled.
    pub error: Option<String>,
    /// Submission time, ms since the epoch.
    pub created_ms: u64,
    /// When it ended, ms since the epoch.
    pub finished_ms: Option<u64>,
    /// From submission to its end (or now).
    pub elapsed_ms: u64,
    /// Rows of the result, once it succeeded.
    pub result_rows: Option<u64>,
    /// Tasks done and in all.
    pub tasks_done: u32,
    /// Tasks in all.
    pub tasks: u32,
    /// What it would cost on Lambda (see the status).
    pub estimated_cost_usd: f64,
}

impl From<JobStatus> for QuerySummary {
    fn from(s: JobStatus) -> Self {
        Self {
            id: s.id,
            state: s.state,
            kind: s.kind,
            sql: s.sql,
            error: s.error,
            created_ms: s.created_ms,
            finished_ms: s.finished_ms,
            elapsed_ms: s.elapsed_ms,
            result_rows: s.result_rows,
            tasks_done: s.tasks_done,
            tasks: s.tasks,
            estimated_cost_usd: s.estimated_cost_usd,
        }
    }
}

/// Answer of `GET /v1/queries`: the caller's queries, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct QueryPage {
    /// This page's queries.
    pub queries: Vec<QuerySummary>,
    /// Pass as `?next=` for the following page; absent on the last page.
    pub next: Option<String>,
}

/// The history key a `next` token stands for (tokens are opaque and URL-safe), if it
/// is one.
fn history_key(token: &str) -> Option<String> {
    let key = String::from_utf8(URL_SAFE_NO_PAD.decode(token).ok()?).ok()?;
    let well_formed = key.len() > 14
        && key.as_bytes()[..13].iter().all(u8::is_ascii_digit)
        && lambdafusion::state::job_of_history_sk(&key).is_some();
    well_formed.then_some(key)
}

/// The caller's queries, newest first, a page at a time (each caller sees only its own).
#[utoipa::path(get, path = "/v1/queries", tag = "queries", params(ListParams),
    responses((status = 200, body = QueryPage),
              (status = 400, description = "A bad `limit` or `next`", body = ErrorBody)))]
async fn list(
    State(services): State<Services>,
    caller: Option<Extension<Caller>>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Json<QueryPage>, ApiError> {
    let Query(params) = params?;
    let limit = match params.limit.as_deref().map(|l| l.trim().parse::<usize>()) {
        None => 20,
        Some(Ok(n)) if (1..=MAX_PAGE).contains(&n) => n,
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "limit must be a whole number from 1 to {MAX_PAGE}, not {:?}",
                    params.limit.unwrap_or_default()
                ),
            ))
        }
    };
    let after = match params.next.as_deref() {
        None => None,
        Some(token) => Some(history_key(token).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("next must be the `next` token of an earlier page, not {token:?}"),
            )
        })?),
    };
    let after = after.as_deref();
    let caller = caller_of(caller);
    let store = &services.store;
    let keys = store.job_history(caller.principal(), after, limit).await?;
    let next = (keys.len() == limit)
        .then(|| keys.last().map(|k| URL_SAFE_NO_PAD.encode(k)))
        .flatten();
    // One read per listed job, a few at a time; an entry whose job has just expired is
    // left out.
    let ids: Vec<String> = keys
        .iter()
        .filter_map(|sk| lambdafusion::state::job_of_history_sk(sk).map(str::to_string))
        .collect();
    let loaded: Vec<_> = futures::stream::iter(ids)
        .map(|id| {
            let store = store.clone();
            async move { store.load_job(&id).await }
        })
        .buffered(8)
        .collect()
        .await;
    let mut queries = Vec::with_capacity(loaded.len());
    for snapshot in loaded {
        if let Some(snapshot) = snapshot? {
            queries.push(job_status(&snapshot, &services.config).into());
        }
    }
    Ok(Json(QueryPage { queries, next }))
}

/// Query string of `GET /v1/queries/{id}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatusParams {
    /// Seconds to wait for the job to end before answering (0 to 20).
    #[serde(default)]
    #[param(value_type = Option<f64>, minimum = 0, maximum = 20)]
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

/// A query's state, per-stage progress, error and timings; with `wait`, answers as soon
/// as the query ends or after `wait` seconds.
#[utoipa::path(get, path = "/v1/queries/{id}", tag = "queries",
    params(("id" = String, Path, description = "Query id"), StatusParams),
    responses((status = 200, body = JobStatus),
              (status = 400, description = "A bad `wait`", body = ErrorBody),
              (status = 404, description = "No such query of this caller's", body = ErrorBody)))]
async fn status(
    State(services): State<Services>,
    caller: Option<Extension<Caller>>,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<StatusParams>, QueryRejection>,
) -> Result<Json<JobStatus>, ApiError> {
    let Query(params) = params?;
    let wait = parse_wait(params.wait.as_deref())?;
    let id = query_id(id)?;
    let caller = caller_of(caller);
    Ok(Json(
        wait_for_status_as(&services, &id, wait, &caller).await?,
    ))
}

/// What `DELETE /v1/queries/{id}` answers.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Cancelled {
    /// Query id.
    pub id: String,
    /// Its state afterwards: `cancelled`, or how it had already ended.
    pub state: String,
}

/// Cancels a query: dispatch stops at once and running tasks at their next batch. A query
/// that already ended keeps its state and result.
#[utoipa::path(delete, path = "/v1/queries/{id}", tag = "queries",
    params(("id" = String, Path, description = "Query id")),
    responses((status = 200, body = Cancelled),
              (status = 404, description = "No such query of this caller's", body = ErrorBody)))]
async fn cancel(
    State(services): State<Services>,
    caller: Option<Extension<Caller>>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Cancelled>, ApiError> {
    let id = query_id(id)?;
    let state = Scheduler::new(services)
        .cancel(&id, &caller_of(caller))
        .await?;
    Ok(Json(Cancelled {
        id,
        state: state.as_str().to_string(),
    }))
}

/// Query string of the result endpoint.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ResultParams {
    /// Output format (default `json`).
    #[serde(default)]
    #[param(value_type = Option<FormatName>)]
    pub format: Option<String>,
}

/// The result formats, as `?format=` names them.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FormatName {
    /// A JSON array of row objects.
    Json,
    /// One JSON object per line.
    Ndjson,
    /// CSV with a header line.
    Csv,
    /// An Arrow IPC stream.
    Arrow,
    /// A Parquet file.
    Parquet,
}

/// The rows of a query that succeeded, in the format asked for.
#[utoipa::path(get, path = "/v1/queries/{id}/result", tag = "queries",
    params(("id" = String, Path, description = "Query id"), ResultParams),
    responses((status = 200, description = "The rows",
               content(("application/json"), ("application/x-ndjson"), ("text/csv"),
                       ("application/vnd.apache.arrow.stream"), ("application/vnd.apache.parquet"))),
              (status = 400, description = "An unknown format", body = ErrorBody),
              (status = 404, description = "No such query of this caller's", body = ErrorBody),
              (status = 409, description = "The query has not succeeded (running, failed or cancelled)", body = ErrorBody),
              (status = 413, description = "Larger than one response may carry here: use the result objects", body = ErrorBody)))]
async fn result(
    State(services): State<Services>,
    caller: Option<Extension<Caller>>,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<ResultParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params?;
    let format = ResultFormat::parse(params.format.as_deref().unwrap_or("json"))?;
    let id = query_id(id)?;
    let (schema, stream) = lambdafusion::results::open(&services, &id, &caller_of(caller)).await?;
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
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ObjectsParams {
    /// Seconds the URLs stay valid (default 900, at most the deployment's
    /// `max_presign_seconds`, itself 900 by default).
    #[serde(default)]
    pub expires: Option<u64>,
}

/// A large result as presigned downloads (Arrow IPC pieces, in order).
#[utoipa::path(get, path = "/v1/queries/{id}/result/objects", tag = "queries",
    params(("id" = String, Path, description = "Query id"), ObjectsParams),
    responses((status = 200, body = lambdafusion::results::ResultObjects),
              (status = 400, description = "This server cannot presign (embedded: read /result)", body = ErrorBody),
              (status = 404, description = "No such query of this caller's", body = ErrorBody),
              (status = 409, description = "The query has not succeeded", body = ErrorBody)))]
async fn result_objects(
    State(services): State<Services>,
    caller: Option<Extension<Caller>>,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<ObjectsParams>, QueryRejection>,
) -> Result<Json<lambdafusion::results::ResultObjects>, ApiError> {
    let Query(params) = params?;
    let id = query_id(id)?;
    let expires = services.config.access.presign_lifetime(params.expires);
    Ok(Json(
        lambdafusion::results::objects(&services, &id, &caller_of(caller), expires).await?,
    ))
}

/// The catalog: `GET /v1/tables`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Tables {
    /// Every table, by name.
    pub tables: Vec<TableInfo>,
}

/// A table of the catalog.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TableInfo {
    /// Its name in SQL.
    pub name: String,
    /// `PARQUET`, `CSV`, `JSON` ...
    pub format: String,
    /// Where its files are.
    pub locations: Vec<String>,
    /// Its columns, in order.
    pub columns: Vec<ColumnInfo>,
}

/// A column of a [`TableInfo`].
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ColumnInfo {
    /// Column name.
    pub name: String,
    /// Arrow data type, as DataFusion prints it.
    #[serde(rename = "type")]
    pub data_type: String,
}

/// The tables queries may read, with their columns.
#[utoipa::path(get, path = "/v1/tables", tag = "catalog", responses((status = 200, body = Tables)))]
async fn tables(State(services): State<Services>) -> Result<Json<Tables>, ApiError> {
    Ok(Json(catalog(&services).await?))
}

/// The catalog as `GET /v1/tables` shows it.
pub async fn catalog(services: &Services) -> Result<Tables, Error> {
    let tables = services.store.list_tables().await?;
    let tables = tables
        .into_iter()
        .map(|t| {
            let columns = lambdafusion::plan::decode_schema(&t.schema)
                .map(|s| {
                    s.fields()
                        .iter()
                        .map(|f| ColumnInfo {
                            name: f.name().clone(),
                            data_type: f.data_type().to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            TableInfo {
                name: t.name,
                format: t.format,
                locations: t.locations,
                columns,
            }
        })
        .collect();
    Ok(Tables { tables })
}
