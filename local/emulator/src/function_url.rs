//! Function URLs: every HTTP request becomes a payload format 2.0 event (the shape
//! API Gateway HTTP APIs and Lambda function URLs send, which `lambda_http` parses as
//! an `ApiGatewayV2` request), invoked synchronously; the function's answer becomes
//! the HTTP response.
//!
//! The answer may be a `{statusCode, headers, multiValueHeaders, cookies, body,
//! isBase64Encoded}` object, any other JSON (sent as a 200 `application/json` body, as
//! function URLs do), or a streamed response (JSON prelude, 8 NUL bytes, body). A
//! function error gives 502 with the error document as a JSON body.
//!
//! With `"auth": "AWS_IAM"` every request must carry a SigV4 signature (service
//! `lambda`) made with one of the configured credentials ([`crate::sigv4`]); refused
//! requests get 403 with AWS's body and never reach the function, accepted ones carry
//! the caller in `requestContext.authorizer.iam` (`accessKey`, `accountId`, `callerId`,
//! `userArn`, `userId`), as Lambda fills it for function URLs with IAM auth
//! (<https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-payloads>).
//!
//! With `integration_timeout_secs` the URL behaves like an API Gateway HTTP API in front
//! of the function: a function that has not answered in time gets the client a 503
//! `{"message":"Service Unavailable"}` (what HTTP APIs answer on an integration timeout;
//! their limit is 30 s: <https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html>),
//! while the invocation runs on to its own end.

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::UrlAuth;
use crate::function::{Outcome, Registry, Target, MAX_SYNC_PAYLOAD};
use crate::{sigv4, time};

struct UrlState {
    registry: Arc<Registry>,
    target: Target,
}

/// The function URL service of one function.
pub fn router(registry: Arc<Registry>, target: Target) -> Router {
    Router::new()
        .fallback(handle)
        .with_state(Arc::new(UrlState { registry, target }))
}

fn json_error(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

async fn handle(
    State(state): State<Arc<UrlState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Ok(body) = axum::body::to_bytes(body, MAX_SYNC_PAYLOAD).await else {
        return json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"Message": "Request Entity Too Large"}),
        );
    };
    let function = &state.target.function;
    let url = function
        .config
        .url
        .clone()
        .unwrap_or_else(|| crate::config::UrlConfig {
            listen: String::new(),
            auth: UrlAuth::None,
            integration_timeout_secs: None,
        });
    let (authorizer_iam, account_id) = match url.auth {
        UrlAuth::None => (None, None),
        UrlAuth::AwsIam => {
            let verified = sigv4::verify(
                &method,
                &uri,
                &headers,
                &body,
                state.registry.credentials(),
                &state.registry.region,
                std::time::SystemTime::now(),
            );
            match verified {
                Ok(credential) => (
                    Some(sigv4::iam_authorizer(credential)),
                    Some(state.registry.account.clone()),
                ),
                Err(e) => {
                    tracing::info!(function = %function.name(), error = ?e, "function URL request refused (AWS_IAM)");
                    let mut response = json_error(StatusCode::FORBIDDEN, e.body());
                    response
                        .headers_mut()
                        .insert("x-amzn-errortype", HeaderValue::from_static(e.error_type()));
                    return response;
                }
            }
        }
    };
    let request = HttpRequest {
        method: &method,
        uri: &uri,
        headers: &headers,
        body: &body,
        source_ip: peer.ip().to_string(),
        authorizer_iam,
        account_id,
    };
    let event = url_event(&request, &function.config.name);
    // Keyed by the request itself, not by the event (which has a request id and the time).
    let mut key_material = format!("{method} {uri}\n").into_bytes();
    key_material.extend_from_slice(&body);
    let key = function.event_key(&key_material);
    let Ok(pending) =
        state
            .registry
            .invoke_sync(&state.target, Bytes::from(event.to_string()), None, &key)
    else {
        return json_error(
            StatusCode::TOO_MANY_REQUESTS,
            json!({"Message": "Rate Exceeded."}),
        );
    };
    let outcome = match url.integration_timeout_secs {
        None => pending.await,
        Some(secs) => {
            match tokio::time::timeout(std::time::Duration::from_secs(secs), pending).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    tracing::info!(function = %function.name(), "integration timeout after {secs}s: 503 (the invocation goes on)");
                    return json_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        json!({"message": "Service Unavailable"}),
                    );
                }
            }
        }
    };
    match outcome {
        Some(outcome) => http_response(outcome),
        None => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"Message": "the emulator is shutting down"}),
        ),
    }
}

/// The parts of an HTTP request an event is made of.
pub struct HttpRequest<'a> {
    /// Method.
    pub method: &'a Method,
    /// Path and query as received.
    pub uri: &'a Uri,
    /// Headers.
    pub headers: &'a HeaderMap,
    /// Body bytes.
    pub body: &'a [u8],
    /// Client address.
    pub source_ip: String,
    /// `requestContext.authorizer.iam` (the verified caller), with IAM auth.
    pub authorizer_iam: Option<Value>,
    /// `requestContext.accountId`: the function owner's account with IAM auth
    /// (`anonymous` without).
    pub account_id: Option<String>,
}

/// Content types whose bodies function URLs pass as plain text; others are base64.
fn is_text(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type else { return true };
    let ct = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    ct.starts_with("text/")
        || [
            "application/json",
            "application/javascript",
            "application/xml",
            "application/yaml",
            "application/x-www-form-urlencoded",
            "application/graphql",
        ]
        .contains(&ct.as_str())
        || ct.ends_with("+json")
        || ct.ends_with("+xml")
        || ct.ends_with("+yaml")
}

/// Decodes `%XX` escapes (invalid escapes are kept as they are).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Builds the payload format 2.0 event of a function URL request.
pub fn url_event(req: &HttpRequest<'_>, function_name: &str) -> Value {
    let now = time::now_ms();
    let mut headers = Map::new();
    let mut cookies = Vec::new();
    for name in req.headers.keys() {
        let values: Vec<String> = req
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        if name.as_str() == "cookie" {
            cookies.extend(
                values
                    .iter()
                    .flat_map(|v| v.split(';').map(|c| c.trim().to_string()))
                    .filter(|c| !c.is_empty()),
            );
        } else {
            headers.insert(name.as_str().to_string(), Value::String(values.join(",")));
        }
    }
    let raw_query = req.uri.query().unwrap_or("");
    let mut params = Map::new();
    for pair in raw_query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k), percent_decode(v));
        match params.get_mut(&k) {
            Some(Value::String(existing)) => {
                existing.push(',');
                existing.push_str(&v);
            }
            _ => {
                params.insert(k, Value::String(v));
            }
        }
    }
    let header = |n: &str| {
        req.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let api_id = function_name.to_ascii_lowercase();
    let domain = header("host").unwrap_or_else(|| format!("{api_id}.lambda-url.local"));
    let mut event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": req.uri.path(),
        "rawQueryString": raw_query,
        "headers": headers,
        "requestContext": {
            "accountId": req.account_id.as_deref().unwrap_or("anonymous"),
            "apiId": api_id,
            "domainName": domain,
            "domainPrefix": api_id,
            "http": {
                "method": req.method.as_str(),
                "path": req.uri.path(),
                "protocol": "HTTP/1.1",
                "sourceIp": req.source_ip,
                "userAgent": header("user-agent").unwrap_or_default(),
            },
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": "$default",
            "stage": "$default",
            "time": time::clf(now),
            "timeEpoch": now,
        },
        "isBase64Encoded": false,
    });
    if let (Some(iam), Some(Value::Object(ctx))) =
        (&req.authorizer_iam, event.get_mut("requestContext"))
    {
        ctx.insert("authorizer".into(), json!({ "iam": iam }));
    }
    if let Value::Object(map) = &mut event {
        if !cookies.is_empty() {
            map.insert("cookies".into(), json!(cookies));
        }
        if !params.is_empty() {
            map.insert("queryStringParameters".into(), Value::Object(params));
        }
        if !req.body.is_empty() {
            let text = is_text(header("content-type").as_deref())
                .then(|| std::str::from_utf8(req.body).ok())
                .flatten();
            match text {
                Some(text) => {
                    map.insert("body".into(), Value::String(text.to_string()));
                }
                None => {
                    let encoded = base64::engine::general_purpose::STANDARD.encode(req.body);
                    map.insert("body".into(), Value::String(encoded));
                    map.insert("isBase64Encoded".into(), Value::Bool(true));
                }
            }
        }
    }
    event
}

/// Turns an invocation outcome into the function URL's HTTP response.
pub fn http_response(outcome: Outcome) -> Response {
    match outcome {
        Outcome::Success {
            body,
            streaming: true,
        } => streamed_response(&body),
        Outcome::Success {
            body,
            streaming: false,
        } => buffered_response(&body),
        Outcome::Error { error_type, body } => {
            let mut doc = serde_json::from_slice::<Value>(&body).unwrap_or_else(|_| json!({}));
            if let Value::Object(map) = &mut doc {
                map.insert("Message".into(), json!("Internal Server Error"));
                map.entry("errorType").or_insert(json!(error_type));
            }
            json_error(StatusCode::BAD_GATEWAY, doc)
        }
        Outcome::Expired => json_error(
            StatusCode::BAD_GATEWAY,
            json!({"Message": "Internal Server Error"}),
        ),
    }
}

fn buffered_response(body: &[u8]) -> Response {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let Some(Value::Object(doc)) = parsed.filter(|v| v.get("statusCode").is_some()) else {
        // Not an HTTP-shaped answer: the whole payload is a JSON body.
        let mut response = (StatusCode::OK, Bytes::copy_from_slice(body)).into_response();
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        return response;
    };
    let status = doc
        .get("statusCode")
        .and_then(Value::as_u64)
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
        .unwrap_or(StatusCode::OK);
    let body_bytes = match doc.get("body") {
        Some(Value::String(s))
            if doc.get("isBase64Encoded").and_then(Value::as_bool) == Some(true) =>
        {
            match base64::engine::general_purpose::STANDARD.decode(s) {
                Ok(b) => b,
                Err(_) => {
                    return json_error(
                        StatusCode::BAD_GATEWAY,
                        json!({"Message": "Internal Server Error", "errorMessage": "invalid base64 body"}),
                    )
                }
            }
        }
        Some(Value::String(s)) => s.clone().into_bytes(),
        Some(Value::Null) | None => Vec::new(),
        Some(other) => other.to_string().into_bytes(),
    };
    let mut response = (status, body_bytes).into_response();
    let headers = response.headers_mut();
    if let Some(Value::Object(h)) = doc.get("headers") {
        for (k, v) in h {
            let value = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            insert_header(headers, k, &value, false);
        }
    }
    if let Some(Value::Object(h)) = doc.get("multiValueHeaders") {
        for (k, vs) in h {
            if let Value::Array(vs) = vs {
                for v in vs.iter().filter_map(Value::as_str) {
                    insert_header(headers, k, v, true);
                }
            }
        }
    }
    if let Some(Value::Array(cookies)) = doc.get("cookies") {
        for c in cookies.iter().filter_map(Value::as_str) {
            insert_header(headers, "set-cookie", c, true);
        }
    }
    if !headers.contains_key("content-type") {
        headers.insert("content-type", HeaderValue::from_static("application/json"));
    }
    response
}

fn insert_header(headers: &mut HeaderMap, name: &str, value: &str, append: bool) {
    if let (Ok(n), Ok(v)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        if append {
            if !headers.get_all(&n).iter().any(|existing| existing == v) {
                headers.append(n, v);
            }
        } else {
            headers.insert(n, v);
        }
    }
}

/// A streamed response: JSON prelude `{statusCode, headers, cookies}`, 8 NUL bytes, body.
fn streamed_response(body: &[u8]) -> Response {
    let split = body.windows(8).position(|w| w == [0u8; 8]);
    let Some(at) = split else {
        return buffered_response(body);
    };
    let prelude: Value = serde_json::from_slice(&body[..at]).unwrap_or_else(|_| json!({}));
    let status = prelude
        .get("statusCode")
        .and_then(Value::as_u64)
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
        .unwrap_or(StatusCode::OK);
    let mut response = (status, Bytes::copy_from_slice(&body[at + 8..])).into_response();
    let headers = response.headers_mut();
    if let Some(Value::Object(h)) = prelude.get("headers") {
        for (k, v) in h {
            if let Some(v) = v.as_str() {
                insert_header(headers, k, v, false);
            }
        }
    }
    if let Some(Value::Array(cookies)) = prelude.get("cookies") {
        for c in cookies.iter().filter_map(Value::as_str) {
            insert_header(headers, "set-cookie", c, true);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::apigw::ApiGatewayV2httpRequest;

    fn event_for(method: Method, uri: &str, headers: &[(&str, &str)], body: &[u8]) -> Value {
        let uri: Uri = uri.parse().unwrap();
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        let req = HttpRequest {
            method: &method,
            uri: &uri,
            headers: &map,
            body,
            source_ip: "127.0.0.1".into(),
            authorizer_iam: None,
            account_id: None,
        };
        url_event(&req, "fn")
    }

    #[test]
    fn event_parses_as_api_gateway_v2() {
        let ev = event_for(
            Method::POST,
            "/v1/query?a=1&b=x%20y&a=2",
            &[
                ("host", "127.0.0.1:9002"),
                ("content-type", "application/json"),
                ("cookie", "s=1; t=2"),
                ("x-multi", "1"),
                ("x-multi", "2"),
                ("user-agent", "curl/8"),
            ],
            br#"{"sql":"SELECT 1"}"#,
        );
        assert_eq!(ev["queryStringParameters"], json!({"a": "1,2", "b": "x y"}));
        assert_eq!(ev["rawQueryString"], "a=1&b=x%20y&a=2");
        assert_eq!(ev["cookies"], json!(["s=1", "t=2"]));
        assert_eq!(ev["headers"]["x-multi"], "1,2");
        assert!(ev["headers"].get("cookie").is_none());
        assert_eq!(ev["body"], r#"{"sql":"SELECT 1"}"#);
        let parsed: ApiGatewayV2httpRequest = serde_json::from_value(ev).unwrap();
        assert_eq!(parsed.request_context.http.method, Method::POST);
        assert_eq!(parsed.raw_path.as_deref(), Some("/v1/query"));
        assert_eq!(
            parsed.request_context.http.user_agent.as_deref(),
            Some("curl/8")
        );
        assert!(!parsed.is_base64_encoded);
    }

    #[test]
    fn binary_bodies_are_base64() {
        let ev = event_for(
            Method::PUT,
            "/x",
            &[("content-type", "application/octet-stream")],
            &[0, 159, 146, 150],
        );
        assert_eq!(ev["isBase64Encoded"], true);
        assert_eq!(ev["body"], "AJ+Slg==");
        let get = event_for(Method::GET, "/", &[], b"");
        assert!(get.get("body").is_none());
        assert!(get.get("queryStringParameters").is_none());
    }

    #[tokio::test]
    async fn responses() {
        let r = http_response(Outcome::Success {
            body: Bytes::from(
                json!({"statusCode": 201, "headers": {"x-a": "1"}, "cookies": ["c=1"],
                "body": "aGk=", "isBase64Encoded": true})
                .to_string(),
            ),
            streaming: false,
        });
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(r.headers()["x-a"], "1");
        assert_eq!(r.headers()["set-cookie"], "c=1");
        let body = axum::body::to_bytes(r.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"hi");

        let plain = http_response(Outcome::Success {
            body: Bytes::from_static(b"[1,2]"),
            streaming: false,
        });
        assert_eq!(plain.status(), StatusCode::OK);
        assert_eq!(plain.headers()["content-type"], "application/json");

        let mut streamed =
            br#"{"statusCode":202,"headers":{"content-type":"text/plain"}}"#.to_vec();
        streamed.extend_from_slice(&[0; 8]);
        streamed.extend_from_slice(b"chunks");
        let s = http_response(Outcome::Success {
            body: Bytes::from(streamed),
            streaming: true,
        });
        assert_eq!(s.status(), StatusCode::ACCEPTED);
        assert_eq!(
            &axum::body::to_bytes(s.into_body(), 1024).await.unwrap()[..],
            b"chunks"
        );

        let e = http_response(Outcome::error("Boom", "bad"));
        assert_eq!(e.status(), StatusCode::BAD_GATEWAY);
    }
}
