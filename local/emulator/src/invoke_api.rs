//! The Lambda Invoke API, as `aws-sdk-lambda`'s `invoke()` calls it:
//! `POST /2015-03-31/functions/{FunctionName}/invocations`; and the three reads
//! `lambdafusion doctor` makes: `GetAccountSettings` (the config's `account_concurrency`),
//! `GetFunctionConfiguration` and `GetFunctionConcurrency`.
//!
//! * `X-Amz-Invocation-Type: RequestResponse` (default): waits; 200 with the response, or
//!   200 with `X-Amz-Function-Error: Unhandled` and the error document.
//! * `Event`: 202 at once; the event runs later with retries (see [`crate::function`]).
//! * `DryRun`: 204.
//!
//! Errors use the REST-JSON shape the SDK parses: status, `x-amzn-ErrorType` header and
//! `{"Type": "User", "message": ...}` — 404 `ResourceNotFoundException`, 413
//! `RequestTooLargeException`, 429 `TooManyRequestsException` (synchronous invocation
//! with `max_queue` invocations waiting, or refused by the `lambda.concurrency_limit`
//! fault; any invocation hit by the `lambda.throttle_invoke` fault), 400
//! `InvalidRequestContentException` (payload is not JSON), 403 `AccessDeniedException`
//! (the caller's execution role may not `lambda:InvokeFunction` it, see
//! [`crate::iam`]). `Event` invocations are never
//! refused for lack of concurrency: AWS queues them. The SigV4 signature is not checked;
//! only the access key it names is read.
//! Every answer comes after the `lambda` latency of the front's table (20 ms by default,
//! none with `"latency": "off"`).

use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use bytes::Bytes;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

use crate::function::{Outcome, Registry, MAX_ASYNC_PAYLOAD, MAX_SYNC_PAYLOAD};
use lambdafusion_faults::FaultKind;

/// The Invoke API router.
pub fn router(registry: Arc<Registry>) -> Router {
    Router::new()
        .route(
            "/2015-03-31/functions/{function_name}/invocations",
            post(invoke),
        )
        .route("/2016-08-19/account-settings", get(account_settings))
        .route("/2016-08-19/account-settings/", get(account_settings))
        .route(
            "/2015-03-31/functions/{function_name}/configuration",
            get(function_configuration),
        )
        .route(
            "/2019-09-30/functions/{function_name}/concurrency",
            get(function_concurrency),
        )
        .fallback(unknown_operation)
        .with_state(registry)
}

/// An AWS REST-JSON error response.
pub fn aws_error(status: StatusCode, error_type: &str, message: &str) -> Response {
    let mut response = (
        status,
        axum::Json(json!({"Type": "User", "message": message})),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(error_type) {
        response.headers_mut().insert("x-amzn-errortype", v);
    }
    response
}

/// 403 `AccessDeniedException`: the caller's role may not invoke the function.
fn access_denied(denied: &crate::iam::Denied) -> Response {
    tracing::warn!("{}", denied.message());
    aws_error(
        StatusCode::FORBIDDEN,
        "AccessDeniedException",
        &denied.message(),
    )
}

fn throttled() -> Response {
    let mut response = (
        StatusCode::TOO_MANY_REQUESTS,
        axum::Json(json!({
            "Type": "User",
            "message": "Rate Exceeded.",
            "Reason": "ReservedFunctionConcurrentInvocationLimitExceeded",
        })),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        "x-amzn-errortype",
        HeaderValue::from_static("TooManyRequestsException"),
    );
    headers.insert("retry-after", HeaderValue::from_static("1"));
    response
}

async fn unknown_operation() -> Response {
    aws_error(
        StatusCode::NOT_FOUND,
        "UnknownOperationException",
        "lambdafusion-local emulates only Invoke, GetAccountSettings, \
         GetFunctionConfiguration and GetFunctionConcurrency",
    )
}

/// `GetAccountSettings`: the account's concurrency quota (`account_concurrency`) and
/// what the functions' reserved concurrency leaves unreserved.
async fn account_settings(State(registry): State<Arc<Registry>>) -> Response {
    let (limit, unreserved) = registry.account_limit();
    axum::Json(json!({
        "AccountLimit": {
            "TotalCodeSize": 80_530_636_800u64,
            "CodeSizeUnzipped": 262_144_000u64,
            "CodeSizeZipped": 52_428_800u64,
            "ConcurrentExecutions": limit,
            "UnreservedConcurrentExecutions": unreserved,
        },
        "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": registry.functions().count()},
    }))
    .into_response()
}

fn not_found(registry: &Registry, name: &str) -> Response {
    aws_error(
        StatusCode::NOT_FOUND,
        "ResourceNotFoundException",
        &format!(
            "Function not found: arn:aws:lambda:{}:{}:function:{name}",
            registry.region, registry.account
        ),
    )
}

/// `GetFunctionConfiguration`: the function's sizes, environment and role.
async fn function_configuration(
    State(registry): State<Arc<Registry>>,
    UrlPath(function_name): UrlPath<String>,
) -> Response {
    let Some(target) = registry.resolve(&function_name, None) else {
        return not_found(&registry, &function_name);
    };
    let f = &target.function;
    let c = &f.config;
    // The stack runs binaries built for this machine.
    let architecture = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "x86_64",
    };
    axum::Json(json!({
        "FunctionName": c.name,
        "FunctionArn": f.arn,
        "Runtime": "provided.al2023",
        "Handler": "bootstrap",
        "Role": c.role.as_ref().map(|r| r.arn.clone()),
        "MemorySize": c.memory_mb,
        "Timeout": c.timeout_secs,
        "EphemeralStorage": {"Size": c.ephemeral_storage_mb},
        "Architectures": [architecture],
        "Environment": {"Variables": c.env},
        "State": "Active",
        "LastUpdateStatus": "Successful",
        "PackageType": "Zip",
        "Version": "$LATEST",
    }))
    .into_response()
}

/// `GetFunctionConcurrency`: the reserved concurrency, absent when unreserved.
async fn function_concurrency(
    State(registry): State<Arc<Registry>>,
    UrlPath(function_name): UrlPath<String>,
) -> Response {
    let Some(target) = registry.resolve(&function_name, None) else {
        return not_found(&registry, &function_name);
    };
    match target.function.config.reserved_concurrency {
        Some(n) => axum::Json(json!({"ReservedConcurrentExecutions": n})),
        None => axum::Json(json!({})),
    }
    .into_response()
}

async fn invoke(
    State(registry): State<Arc<Registry>>,
    UrlPath(function_name): UrlPath<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let request_id = uuid::Uuid::new_v4().to_string();
    let started = tokio::time::Instant::now();
    let invocation_type = headers
        .get("x-amz-invocation-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("RequestResponse")
        .to_string();
    let mut response = invoke_inner(
        &registry,
        &function_name,
        &query,
        &headers,
        &invocation_type,
        body,
    )
    .await;
    // Lambda's own time to answer (front.latency.lambda), counted from the request.
    tokio::time::sleep_until(started + registry.invoke_latency(&invocation_type)).await;
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-amzn-requestid", v);
    }
    response
}

async fn invoke_inner(
    registry: &Arc<Registry>,
    function_name: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    invocation_type: &str,
    body: Body,
) -> Response {
    let caller = crate::sigv4::access_key(headers, None);
    let Some(target) = registry.resolve(function_name, query.get("Qualifier").map(String::as_str))
    else {
        let arn = format!(
            "arn:aws:lambda:{}:{}:function:{function_name}",
            registry.region, registry.account
        );
        // As Lambda: authorization comes before whether the function exists.
        if let Err(denied) = registry
            .iam()
            .check(caller.as_deref(), &crate::iam::Iam::lambda_invoke(&arn))
        {
            return access_denied(&denied);
        }
        return aws_error(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            &format!("Function not found: {arn}"),
        );
    };
    if let Err(denied) = registry.iam().check(
        caller.as_deref(),
        &crate::iam::Iam::lambda_invoke(&target.invoked_arn),
    ) {
        return access_denied(&denied);
    }
    let limit = match invocation_type {
        "RequestResponse" | "DryRun" => MAX_SYNC_PAYLOAD,
        "Event" => MAX_ASYNC_PAYLOAD,
        other => {
            return aws_error(
                StatusCode::BAD_REQUEST,
                "InvalidParameterValueException",
                &format!("unknown InvocationType {other:?}: use RequestResponse, Event or DryRun"),
            )
        }
    };
    let Ok(payload) = axum::body::to_bytes(body, limit).await else {
        let op = if invocation_type == "Event" {
            "InvokeAsync"
        } else {
            "Invoke"
        };
        return aws_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestTooLargeException",
            &format!("Request must be smaller than {limit} bytes for the {op} operation"),
        );
    };
    let payload = if payload.is_empty() {
        Bytes::from_static(b"{}")
    } else {
        payload
    };
    if serde_json::from_slice::<serde::de::IgnoredAny>(&payload).is_err() {
        return aws_error(
            StatusCode::BAD_REQUEST,
            "InvalidRequestContentException",
            "Could not parse request body into json: the payload must be a JSON document",
        );
    }
    if invocation_type == "DryRun" {
        return StatusCode::NO_CONTENT.into_response();
    }
    let key = target.function.event_key(&payload);
    if registry
        .injector()
        .fire(FaultKind::LambdaThrottleInvoke, &key)
    {
        tracing::info!(function = %target.function.name(), %key, "fault lambda.throttle_invoke: 429");
        return throttled();
    }
    match invocation_type {
        "Event" => {
            registry.invoke_async(&target, payload, key);
            StatusCode::ACCEPTED.into_response()
        }
        _ => {
            let client_context = headers
                .get("x-amz-client-context")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
                .and_then(|v| String::from_utf8(v).ok());
            let Ok(pending) = registry.invoke_sync(&target, payload, client_context, &key) else {
                return throttled();
            };
            match pending.await {
                Some(outcome) => sync_response(outcome),
                None => aws_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "ServiceException",
                    "the emulator is shutting down",
                ),
            }
        }
    }
}

/// The HTTP answer to a finished `RequestResponse` invocation.
fn sync_response(outcome: Outcome) -> Response {
    let (body, function_error) = match outcome {
        Outcome::Success {
            body,
            streaming: false,
        } => (body, false),
        // Invoke (unlike InvokeWithResponseStream) returns the streamed bytes as they came.
        Outcome::Success {
            body,
            streaming: true,
        } => (body, false),
        Outcome::Error { body, .. } => (body, true),
        Outcome::Expired => (Bytes::from_static(b"{}"), true),
    };
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert(
        "x-amz-executed-version",
        HeaderValue::from_static("$LATEST"),
    );
    if function_error {
        headers.insert(
            "x-amz-function-error",
            HeaderValue::from_static("Unhandled"),
        );
    }
    response
}
