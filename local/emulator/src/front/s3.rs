//! S3 through the front: every request that is not DynamoDB goes to moto_server as it
//! came (path-style, SigV4-signed by the client; moto does not check signatures), its
//! body streaming both ways, after the first-byte latency and the planned faults:
//!
//! * `s3.slow_down`: 503 `SlowDown`, "Please reduce your request rate.";
//! * `s3.internal_error`: 500 `InternalError`, "We encountered an internal error. Please
//!   try again." (both as S3's error responses,
//!   <https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html>: an XML
//!   `<Error>` with `Code`, `Message`, `RequestId`, `HostId`; no body for `HEAD`);
//! * `s3.slow_first_byte`: the response starts `ms` (up to `max_ms`) later;
//! * `s3.bandwidth`: a `GET`'s body streams at no more than `mb_per_s` (10^6 bytes/s) on
//!   its connection.
//!
//! A request signed with a function's credentials that its role does not allow is
//! answered 403 `AccessDenied` with IAM's message, before anything else
//! ([`crate::iam`]).
//!
//! Decision keys are `<METHOD> <path>[?<query>] #<n>`, the query without per-attempt
//! parameters (`uploadId`, presigned `X-Amz-*`) and sorted, `n` counting the earlier
//! requests with the same method, path and query.

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use lambdafusion_faults::FaultKind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::Shared;

/// The largest multi-object delete body read (1,000 keys of 1,024 bytes, with markup).
const MAX_DELETE_BODY: usize = 2 * 1024 * 1024;

/// Pieces a bandwidth-capped body is sent in.
const PACE_CHUNK: usize = 16 * 1024;

/// Per-request counts for the decision keys.
#[derive(Debug, Default)]
pub struct S3Front {
    seen: Mutex<HashMap<String, u64>>,
}

impl S3Front {
    fn decision_key(&self, base: String) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let n = seen.entry(base.clone()).or_insert(0);
        let key = format!("{base} #{n}");
        *n += 1;
        key
    }
}

/// `<METHOD> <path>[?<stable query>]`.
fn decision_base(method: &Method, path: &str, query: Option<&str>) -> String {
    let mut params: Vec<&str> = query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| {
            let name = p.split('=').next().unwrap_or_default();
            name != "uploadId" && !name.to_ascii_lowercase().starts_with("x-amz-")
        })
        .collect();
    params.sort_unstable();
    if params.is_empty() {
        format!("{method} {path}")
    } else {
        format!("{method} {path}?{}", params.join("&"))
    }
}

/// An S3 error response (no body for `HEAD`).
fn s3_error(status: StatusCode, code: &str, message: &str, method: &Method) -> Response {
    let request_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_uppercase();
    let host_id = base64_of(uuid::Uuid::new_v4().as_bytes());
    let body = if method == Method::HEAD {
        String::new()
    } else {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{}</Message><RequestId>{request_id}</RequestId><HostId>{host_id}</HostId></Error>",
            xml_escape(message)
        )
    };
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/xml"));
    for (name, value) in [("x-amz-request-id", request_id), ("x-amz-id-2", host_id)] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    response
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Reads and drops a request body (so the client can finish sending before the error).
async fn drain(mut body: Body) {
    while let Some(Ok(_)) = body.frame().await {}
}

/// `body`, paced to `bytes_per_s` from its first byte on.
fn paced(body: hyper::body::Incoming, bytes_per_s: f64) -> Body {
    struct Pace {
        inner: http_body_util::BodyDataStream<hyper::body::Incoming>,
        pending: Bytes,
        sent: u64,
        start: Option<Instant>,
        done: bool,
    }
    let state = Pace {
        inner: body.into_data_stream(),
        pending: Bytes::new(),
        sent: 0,
        start: None,
        done: false,
    };
    let stream = futures::stream::unfold(state, move |mut st| async move {
        if st.done {
            return None;
        }
        while st.pending.is_empty() {
            match st.inner.next().await {
                None => return None,
                Some(Err(e)) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                Some(Ok(b)) => st.pending = b,
            }
        }
        let start = *st.start.get_or_insert_with(Instant::now);
        let piece = st.pending.split_to(st.pending.len().min(PACE_CHUNK));
        st.sent += piece.len() as u64;
        tokio::time::sleep_until(start + Duration::from_secs_f64(st.sent as f64 / bytes_per_s))
            .await;
        Some((Ok(piece), st))
    });
    Body::from_stream(stream)
}

/// Handles one S3 request.
pub async fn handle(front: Arc<Shared>, request: axum::extract::Request) -> Response {
    let started = Instant::now();
    let (parts, mut body) = request.into_parts();
    let method = parts.method.clone();
    let first_byte = front.config.latency.s3.get(method.as_str());

    // IAM, first: a multi-object delete needs DeleteObject on each key of its body.
    let caller = crate::sigv4::access_key(&parts.headers, parts.uri.query());
    let mut deleted = Vec::new();
    let multi_delete = method == Method::POST
        && parts.uri.query().is_some_and(|q| {
            q.split('&')
                .any(|p| p == "delete" || p.starts_with("delete="))
        });
    if multi_delete {
        match axum::body::to_bytes(body, MAX_DELETE_BODY).await {
            Ok(bytes) => {
                deleted = crate::iam::delete_keys(&bytes);
                body = Body::from(bytes);
            }
            Err(e) => {
                return s3_error(
                    StatusCode::BAD_REQUEST,
                    "MalformedXML",
                    &format!("cannot read the delete request: {e}"),
                    &method,
                )
            }
        }
    }
    let needed = front.iam.s3(
        &method,
        parts.uri.path(),
        parts.uri.query(),
        &parts.headers,
        &deleted,
    );
    if let Err(denied) = front.iam.check(caller.as_deref(), &needed) {
        warn!("front: {}", denied.message());
        drain(body).await;
        tokio::time::sleep_until(started + first_byte).await;
        return s3_error(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            &denied.message(),
            &method,
        );
    }

    let key = front
        .s3
        .decision_key(decision_base(&method, parts.uri.path(), parts.uri.query()));

    for (kind, status, code, message) in [
        (
            FaultKind::S3SlowDown,
            StatusCode::SERVICE_UNAVAILABLE,
            "SlowDown",
            "Please reduce your request rate.",
        ),
        (
            FaultKind::S3InternalError,
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "We encountered an internal error. Please try again.",
        ),
    ] {
        if front.faults.fire(kind, &key) {
            debug!(%key, fault = %kind, "front: injecting");
            drain(body).await;
            tokio::time::sleep_until(started + first_byte).await;
            return s3_error(status, code, message, &method);
        }
    }
    let mut respond_at = started + first_byte;
    if let Some(ms) = front.faults.delay_ms(FaultKind::S3SlowFirstByte, &key) {
        respond_at += Duration::from_millis(ms);
    }
    let cap = match front.faults.plan.current().get(FaultKind::S3Bandwidth) {
        Some(f) if method == Method::GET && f.mb_per_s.is_some_and(|m| m > 0.0) => front
            .faults
            .fire(FaultKind::S3Bandwidth, &key)
            .then(|| f.mb_per_s.unwrap_or(1.0) * 1e6),
        _ => None,
    };

    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let answer = front
        .upstream
        .send(method.clone(), &path_and_query, &parts.headers, body)
        .await;
    tokio::time::sleep_until(respond_at).await;
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            warn!("front: {e}");
            return s3_error(
                StatusCode::BAD_GATEWAY,
                "InternalError",
                &format!("lambdafusion-local front: {e}"),
                &method,
            );
        }
    };
    let (mut head, incoming) = answer.into_parts();
    super::upstream::strip_hop_by_hop(&mut head.headers);
    let body = match cap {
        Some(bytes_per_s) => paced(incoming, bytes_per_s),
        None => Body::new(incoming),
    };
    Response::from_parts(head, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_keys_drop_per_attempt_parameters() {
        assert_eq!(decision_base(&Method::GET, "/b/k", None), "GET /b/k");
        assert_eq!(
            decision_base(&Method::GET, "/b", Some("prefix=a%2F&list-type=2")),
            "GET /b?list-type=2&prefix=a%2F"
        );
        assert_eq!(
            decision_base(&Method::PUT, "/b/k", Some("uploadId=xyz&partNumber=3")),
            "PUT /b/k?partNumber=3"
        );
        assert_eq!(
            decision_base(&Method::GET, "/b/k", Some("X-Amz-Signature=1&X-Amz-Date=2")),
            "GET /b/k"
        );
        let s3 = S3Front::default();
        assert_eq!(s3.decision_key("GET /b/k".into()), "GET /b/k #0");
        assert_eq!(s3.decision_key("GET /b/k".into()), "GET /b/k #1");
        assert_eq!(s3.decision_key("PUT /b/k".into()), "PUT /b/k #0");
    }

    #[test]
    fn errors_are_s3_xml() {
        let r = s3_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "SlowDown",
            "Please reduce your request rate.",
            &Method::GET,
        );
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()["content-type"], "application/xml");
        let body =
            futures::executor::block_on(axum::body::to_bytes(r.into_body(), 1 << 16)).unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.contains("<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>"), "{text}");
        let head = s3_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "x",
            &Method::HEAD,
        );
        let body =
            futures::executor::block_on(axum::body::to_bytes(head.into_body(), 1 << 16)).unwrap();
        assert!(body.is_empty());
    }
}
