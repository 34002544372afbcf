//! The web console: one page and its script and style, compiled into the binary (no
//! CDN, works offline) and served on the API's own router, so it reaches exactly what
//! the API reaches with the caller's own credentials.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The paths the console is served at (open without a token: no data in them).
pub const PATHS: [&str; 3] = ["/", "/console.js", "/console.css"];

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The console page.
#[utoipa::path(get, path = "/", tag = "service",
    responses((status = 200, description = "The web console", content_type = "text/html")))]
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// The console's script.
#[utoipa::path(get, path = "/console.js", tag = "service",
    responses((status = 200, description = "The console's script", content_type = "text/javascript")))]
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// The console's style sheet.
#[utoipa::path(get, path = "/console.css", tag = "service",
    responses((status = 200, description = "The console's style sheet", content_type = "text/css")))]
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// A router serving only the console (for `lambdafusion console`, which forwards the API
/// calls to a remote endpoint itself).
pub fn router<S: Clone + Send + Sync + 'static>() -> axum::Router<S> {
    axum::Router::new()
        .route(PATHS[0], axum::routing::get(index))
        .route(PATHS[1], axum::routing::get(script))
        .route(PATHS[2], axum::routing::get(style))
}
