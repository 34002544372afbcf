//! A Lambda function for the emulator's tests, built on the real `lambda_runtime` and
//! `lambda_http` crates (so the tests exercise the same client code as the project's
//! functions).
//!
//! With `TESTFN_MODE=http` it is a `lambda_http` function that echoes the request as
//! JSON (status 201, header `x-testfn: yes`); `GET /binary` answers 4 binary bytes and
//! `/error` fails.
//! Otherwise it handles plain JSON events by their `action`:
//!
//! * `echo` (default): returns `{"echo": <event>, "pid", "request_id", "function", "arn"}`;
//! * `error`: fails with errorType `TestError` and the event's `message`;
//! * `exit`: exits the process with `code` (default 3) mid-invocation;
//! * `sleep`: sleeps `ms` milliseconds, then echoes;
//! * an event with `Records` (a stream batch): fails as a whole if a record's
//!   `NewImage.pk.S` starts with `error`, else reports the records whose `pk` starts
//!   with `fail` in `batchItemFailures`.
//!
//! When `TESTFN_RECORD_FILE` is set, every invocation appends a JSON line
//! `{"t": "start"|"end", "ms", "pid", "request_id", "event"}` to it.

use lambda_runtime::{service_fn, Diagnostic, LambdaEvent};
use serde_json::{json, Value};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn record(kind: &str, request_id: &str, event: &Value) {
    let Ok(path) = std::env::var("TESTFN_RECORD_FILE") else {
        return;
    };
    let line = json!({"t": kind, "ms": now_ms() as u64, "pid": std::process::id(), "request_id": request_id, "event": event});
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(format!("{line}\n").as_bytes()); // one write: lines never interleave
    }
}

async fn handle(event: LambdaEvent<Value>) -> Result<Value, Diagnostic> {
    let (payload, ctx) = event.into_parts();
    record("start", &ctx.request_id, &payload);
    let result = act(&payload, &ctx).await;
    record("end", &ctx.request_id, &payload);
    result
}

async fn act(payload: &Value, ctx: &lambda_runtime::Context) -> Result<Value, Diagnostic> {
    if let Some(records) = payload.get("Records").and_then(Value::as_array) {
        let pk = |r: &Value| {
            r["dynamodb"]["NewImage"]["pk"]["S"]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        if records.iter().any(|r| pk(r).starts_with("error")) {
            return Err(Diagnostic {
                error_type: "BatchError".into(),
                error_message: "a record of this batch is poison".into(),
            });
        }
        let failures: Vec<Value> = records
            .iter()
            .filter(|r| {
                r["dynamodb"]["NewImage"]["pk"]["S"]
                    .as_str()
                    .is_some_and(|pk| pk.starts_with("fail"))
            })
            .map(|r| json!({"itemIdentifier": r["dynamodb"]["SequenceNumber"]}))
            .collect();
        return Ok(json!({ "batchItemFailures": failures }));
    }
    match payload
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or("echo")
    {
        "error" => Err(Diagnostic {
            error_type: "TestError".into(),
            error_message: payload["message"].as_str().unwrap_or("test error").into(),
        }),
        "exit" => std::process::exit(payload["code"].as_i64().unwrap_or(3) as i32),
        "sleep" => {
            let ms = payload["ms"].as_u64().unwrap_or(100);
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            Ok(echo(payload, ctx))
        }
        _ => Ok(echo(payload, ctx)),
    }
}

fn echo(payload: &Value, ctx: &lambda_runtime::Context) -> Value {
    json!({
        "echo": payload,
        "pid": std::process::id(),
        "request_id": ctx.request_id,
        "function": ctx.env_config.function_name,
        "arn": ctx.invoked_function_arn,
        "deadline": ctx.deadline,
        "client_context": ctx.client_context.as_ref().map(|c| c.custom.clone()),
    })
}

async fn handle_http(
    req: lambda_http::Request,
) -> Result<lambda_http::Response<lambda_http::Body>, lambda_http::Error> {
    use lambda_http::RequestExt;
    if req.uri().path() == "/error" {
        return Err("the handler failed on purpose".into());
    }
    if req.uri().path() == "/binary" {
        return Ok(lambda_http::Response::builder()
            .status(200)
            .header("content-type", "application/octet-stream")
            .body(lambda_http::Body::Binary(vec![0, 1, 254, 255]))?);
    }
    let body = match req.body() {
        lambda_http::Body::Text(t) => json!(t),
        lambda_http::Body::Binary(b) => json!(b),
        _ => Value::Null,
    };
    let query: Value = req
        .query_string_parameters()
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let doc = json!({
        "method": req.method().as_str(),
        "path": req.uri().path(),
        "query": query,
        "body": body,
        "x_test": req.headers().get("x-test").and_then(|v| v.to_str().ok()),
        "request_id": req.lambda_context_ref().map(|c| c.request_id.clone()),
    });
    Ok(lambda_http::Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .header("x-testfn", "yes")
        .body(lambda_http::Body::Text(doc.to_string()))?)
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    if std::env::var("TESTFN_MODE").as_deref() == Ok("http") {
        return lambda_http::run(lambda_http::service_fn(handle_http)).await;
    }
    lambda_runtime::run(service_fn(handle)).await
}
