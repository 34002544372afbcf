//! Glue (`X-Amz-Target: AWSGlue.<Op>`): passed through to moto, after the caller's role
//! is checked as Glue checks it ([`crate::iam::Iam::glue`]: the catalog, the database and
//! the table a request names). A role without the grant gets Glue's
//! `AccessDeniedException`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tracing::warn;

use super::Shared;

/// The target prefix of Glue's JSON 1.1 protocol.
pub const GLUE_TARGET: &str = "AWSGlue.";

/// Largest Glue request read (Glue's own limits are far below it).
const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Checks and forwards one Glue request (`op`: `GetTable`, `GetPartitions`, ...).
pub async fn handle(front: Arc<Shared>, op: String, headers: HeaderMap, body: Body) -> Response {
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return glue_error(
                StatusCode::BAD_REQUEST,
                "InvalidInputException",
                &e.to_string(),
            )
        }
    };
    let caller = crate::sigv4::access_key(&headers, None);
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Err(denied) = front
        .iam
        .check(caller.as_deref(), &front.iam.glue(&op, &request))
    {
        warn!("front: {}", denied.message());
        return glue_error(
            StatusCode::BAD_REQUEST,
            "AccessDeniedException",
            &denied.message(),
        );
    }
    let mut headers = headers;
    headers.insert("content-length", HeaderValue::from(body.len()));
    match front
        .upstream
        .send(Method::POST, "/", &headers, Body::from(body))
        .await
    {
        Ok(response) => {
            let (mut head, incoming) = response.into_parts();
            super::upstream::strip_hop_by_hop(&mut head.headers);
            Response::from_parts(head, Body::new(incoming))
        }
        Err(e) => glue_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServiceException",
            &e.to_string(),
        ),
    }
}

/// An error as Glue answers it (JSON 1.1: `__type` and `Message`).
fn glue_error(status: StatusCode, name: &str, message: &str) -> Response {
    let body = json!({"__type": name, "Message": message});
    (
        status,
        [("content-type", "application/x-amz-json-1.1")],
        body.to_string(),
    )
        .into_response()
}
