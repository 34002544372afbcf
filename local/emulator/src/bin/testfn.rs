//! A Lambda function for the emulator's tests, built on the real `lambda_runtime` and
//! `lambda_http` crates (so the tests exercise the same client code as the project's
//! functions).
//!
//! With `TESTFN_MODE=http` it is a `lambda_http` function that echoes the request as
//! JSON (status 201, header `x-testfn: yes`, the caller's ARN from
//! `requestContext.authorizer.iam` as `caller_arn`); `GET /binary` answers 4 binary
//! bytes, `/error` fails, `/sleep?ms=N` sleeps first.
//! Otherwise it handles plain JSON events by their `action`:
//!
//! * `echo` (default): returns `{"echo": <event>, "pid", "request_id", "function", "arn",
//!   "tmpdir"}`;
//! * `error`: fails with errorType `TestError` and the event's `message`;
//! * `exit`: exits the process with `code` (default 3) mid-invocation;
//! * `sleep`: sleeps `ms` milliseconds, then echoes;
//! * `alloc`: allocates and touches `mb` MB, holds them `hold_ms`, then echoes (a memory
//!   hog);
//! * `fill_tmp`: creates the file `name` of `mb` MB (sparse) in its temp directory
//!   (`TMPDIR`), then echoes;
//! * `ls_tmp`: echoes with `files`, the names in its temp directory;
//! * an event with `Records` (a stream batch): sleeps the largest `NewImage.sleep_ms.N`
//!   of the batch, fails as a whole if a record's `NewImage.pk.S` starts with `error`,
//!   answers a JSON string (not a batch response) if one starts with `badresp`, else
//!   reports the records whose `pk` starts with `fail` in `batchItemFailures`.
//!
//! With `TESTFN_FAIL_SCHEDULED` set, an EventBridge scheduled event (`detail-type`
//! `Scheduled Event`) fails with errorType `TestError` instead of being echoed.
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
        let sleep_ms = records
            .iter()
            .filter_map(|r| r["dynamodb"]["NewImage"]["sleep_ms"]["N"].as_str())
            .filter_map(|n| n.parse::<u64>().ok())
            .max();
        if let Some(ms) = sleep_ms {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        if records.iter().any(|r| pk(r).starts_with("error")) {
            return Err(Diagnostic {
                error_type: "BatchError".into(),
                error_message: "a record of this batch is poison".into(),
            });
        }
        if records.iter().any(|r| pk(r).starts_with("badresp")) {
            return Ok(json!("this is not a batch response"));
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
    if std::env::var_os("TESTFN_FAIL_SCHEDULED").is_some()
        && payload.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event")
    {
        return Err(Diagnostic {
            error_type: "TestError".into(),
            error_message: "scheduled events fail (TESTFN_FAIL_SCHEDULED)".into(),
        });
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
        "alloc" => {
            let mb = payload["mb"].as_u64().unwrap_or(1) as usize;
            let mut hog = vec![0u8; mb * 1024 * 1024];
            for page in hog.chunks_mut(4096) {
                page[0] = 1; // touch every page so it is resident
            }
            let ms = payload["hold_ms"].as_u64().unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            std::hint::black_box(&hog);
            Ok(echo(payload, ctx))
        }
        "fill_tmp" => {
            let mb = payload["mb"].as_u64().unwrap_or(1);
            let name = payload["name"].as_str().unwrap_or("fill");
            let file = std::fs::File::create(std::env::temp_dir().join(name))
                .and_then(|f| f.set_len(mb * 1024 * 1024));
            if let Err(e) = file {
                return Err(Diagnostic {
                    error_type: "TmpError".into(),
                    error_message: e.to_string(),
                });
            }
            Ok(echo(payload, ctx))
        }
        "ls_tmp" => {
            let mut files: Vec<String> = std::fs::read_dir(std::env::temp_dir())
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            let mut doc = echo(payload, ctx);
            doc["files"] = json!(files);
            Ok(doc)
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
        "tmpdir": std::env::temp_dir(),
    })
}

async fn handle_http(
    req: lambda_http::Request,
) -> Result<lambda_http::Response<lambda_http::Body>, lambda_http::Error> {
    use lambda_http::RequestExt;
    if req.uri().path() == "/error" {
        return Err("the handler failed on purpose".into());
    }
    if req.uri().path() == "/sleep" {
        let ms = req
            .query_string_parameters_ref()
            .and_then(|q| q.first("ms"))
            .and_then(|ms| ms.parse::<u64>().ok())
            .unwrap_or(100);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
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
        "caller_arn": iam(&req).and_then(|i| i.user_arn.clone()),
        "iam": iam(&req),
        "account_id": account_id(&req),
    });
    Ok(lambda_http::Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .header("x-testfn", "yes")
        .body(lambda_http::Body::Text(doc.to_string()))?)
}

/// `requestContext.authorizer.iam`, set by function URLs with IAM auth.
fn iam(
    req: &lambda_http::Request,
) -> Option<&lambda_http::aws_lambda_events::apigw::ApiGatewayRequestAuthorizerIamDescription> {
    use lambda_http::request::RequestContext;
    use lambda_http::RequestExt;
    match req.request_context_ref()? {
        RequestContext::ApiGatewayV2(ctx) => ctx.authorizer.as_ref()?.iam.as_ref(),
        _ => None,
    }
}

/// `requestContext.accountId`.
fn account_id(req: &lambda_http::Request) -> Option<String> {
    use lambda_http::request::RequestContext;
    use lambda_http::RequestExt;
    match req.request_context_ref()? {
        RequestContext::ApiGatewayV2(ctx) => ctx.account_id.clone(),
        _ => None,
    }
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    if std::env::var("TESTFN_MODE").as_deref() == Ok("http") {
        return lambda_http::run(lambda_http::service_fn(handle_http)).await;
    }
    lambda_runtime::run(service_fn(handle)).await
}
