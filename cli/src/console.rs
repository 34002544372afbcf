//! `lambdafusion console --endpoint URL`: the web console for a deployment whose API a
//! browser cannot call itself (IAM auth wants SigV4 signatures). It serves the page from
//! this binary on 127.0.0.1 and forwards each API call to the endpoint, signed with the
//! user's AWS credentials (or with the endpoint's bearer token). The page must present a
//! random token minted at start, so other local users and web pages cannot borrow those
//! credentials through it.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::client::Client;

struct Proxy {
    client: Client,
    token: Vec<u8>,
}

/// The console's router: the page and assets, and `/v1/*` and `/health` forwarded to
/// `client`'s endpoint for requests that carry `Authorization: Bearer <token>`.
pub fn router(client: Client, token: String) -> Router {
    let proxy = Arc::new(Proxy {
        client,
        token: token.into_bytes(),
    });
    lambdafusion_api::console::router()
        .fallback(forward)
        .with_state(proxy)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({"error": {"status": status.as_u16(), "message": message.into()}});
    (status, axum::Json(body)).into_response()
}

async fn forward(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let path_and_query = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let path = request.uri().path();
    if !(path.starts_with("/v1/") || path == "/health") {
        return error(
            StatusCode::NOT_FOUND,
            "no such endpoint; see /v1/openapi.json",
        );
    }
    let authorized = lambdafusion_api::bearer_token_is(request.headers(), &proxy.token);
    if !authorized {
        return error(
            StatusCode::UNAUTHORIZED,
            "open the console with the address `lambdafusion console` printed (it carries \
             the session's token), or enter that token",
        );
    }
    let method = request.method().clone();
    let body: Bytes = match axum::body::to_bytes(request.into_body(), 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => return error(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
    };
    let body = (!body.is_empty()).then(|| body.to_vec());
    match proxy.client.send(method, &path_and_query, body).await {
        Ok(answer) => {
            let status =
                StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut response = Response::builder().status(status);
            for name in [header::CONTENT_TYPE, header::RETRY_AFTER] {
                if let Some(v) = answer
                    .headers()
                    .get(name.as_str())
                    .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
                {
                    response = response.header(name, v);
                }
            }
            match answer.bytes().await {
                Ok(bytes) => response
                    .body(Body::from(bytes))
                    .unwrap_or_else(|e| error(StatusCode::BAD_GATEWAY, e.to_string())),
                Err(e) => error(StatusCode::BAD_GATEWAY, e.to_string()),
            }
        }
        Err(e) => error(StatusCode::BAD_GATEWAY, e.to_string()),
    }
}

/// A random token for one console session (hex, 128 bits).
pub fn session_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
