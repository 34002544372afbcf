//! End-to-end tests of the emulator with a real `lambda_runtime` / `lambda_http`
//! function (`src/bin/testfn.rs`), called through the real `aws-sdk-lambda` client.

use aws_sdk_lambda::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use lambdafusion_local::{Config, Emulator};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TESTFN: &str = env!("CARGO_BIN_EXE_lambdafusion-local-testfn");
const ARN_PREFIX: &str = "arn:aws:lambda:us-east-1:000000000000:function:";

struct Stack {
    emulator: Option<Emulator>,
    dir: tempfile::TempDir,
    lambda: aws_sdk_lambda::Client,
    http: reqwest::Client,
}

impl Stack {
    /// Starts an emulator with these functions (`command` defaults to the test function,
    /// `TESTFN_RECORD_FILE` to `<dir>/<name>.jsonl`).
    async fn start(functions: Value) -> Stack {
        Stack::start_with(functions, json!([])).await
    }

    async fn start_with(mut functions: Value, stream_mappings: Value) -> Stack {
        let dir = tempfile::tempdir().unwrap();
        for f in functions.as_array_mut().unwrap() {
            let name = f["name"].as_str().unwrap().to_string();
            let record = dir.path().join(format!("{name}.jsonl"));
            f.as_object_mut()
                .unwrap()
                .entry("command")
                .or_insert(json!([TESTFN]));
            let env = f.as_object_mut().unwrap().entry("env").or_insert(json!({}));
            env["TESTFN_RECORD_FILE"] = json!(record.to_str().unwrap());
        }
        let config = json!({
            "invoke_listen": "127.0.0.1:0",
            "state_dir": dir.path().join("state"),
            "functions": functions,
            "stream_mappings": stream_mappings,
        });
        let config = Config::from_json(&config.to_string(), dir.path()).unwrap();
        let emulator = Emulator::start(config).await.unwrap();
        let lambda = lambda_client(&format!("http://{}", emulator.invoke_addr));
        Stack {
            emulator: Some(emulator),
            dir,
            lambda,
            http: http_client(),
        }
    }

    fn emulator(&self) -> &Emulator {
        self.emulator.as_ref().unwrap()
    }

    fn records(&self, function: &str) -> Vec<Value> {
        read_lines(&self.dir.path().join(format!("{function}.jsonl")))
    }

    fn starts(&self, function: &str) -> Vec<Value> {
        self.records(function)
            .into_iter()
            .filter(|r| r["t"] == "start")
            .collect()
    }

    fn log(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.path().join("state/logs").join(file)).unwrap_or_default()
    }

    async fn invoke(
        &self,
        function: &str,
        payload: Value,
    ) -> aws_sdk_lambda::operation::invoke::InvokeOutput {
        self.lambda
            .invoke()
            .function_name(function)
            .payload(Blob::new(payload.to_string()))
            .send()
            .await
            .unwrap()
    }

    async fn invoke_event(&self, function: &str, payload: Value) -> i32 {
        let out = self
            .lambda
            .invoke()
            .function_name(function)
            .invocation_type(InvocationType::Event)
            .payload(Blob::new(payload.to_string()))
            .send()
            .await
            .unwrap();
        out.status_code()
    }

    async fn stop(mut self) {
        if let Some(e) = self.emulator.take() {
            e.shutdown().await;
        }
    }
}

fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn lambda_client(endpoint: &str) -> aws_sdk_lambda::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let config = aws_sdk_lambda::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled())
        .http_client(http)
        .build();
    aws_sdk_lambda::Client::from_conf(config)
}

/// The JSON lines of a file. Only complete lines count: a writer may be mid-line.
fn read_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    complete
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn payload_json(out: &aws_sdk_lambda::operation::invoke::InvokeOutput) -> Value {
    serde_json::from_slice(out.payload().unwrap().as_ref()).unwrap()
}

async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn request_response_round_trip() {
    let stack = Stack::start(json!([{"name": "echo", "timeout_secs": 10}])).await;
    let out = stack.invoke("echo", json!({"hello": "world"})).await;
    assert_eq!(out.status_code(), 200);
    assert_eq!(out.function_error(), None);
    assert_eq!(out.executed_version(), Some("$LATEST"));
    let body = payload_json(&out);
    assert_eq!(body["echo"], json!({"hello": "world"}));
    assert_eq!(body["function"], "echo");
    assert_eq!(body["arn"], format!("{ARN_PREFIX}echo"));
    let deadline = body["deadline"].as_u64().unwrap();
    let now = lambdafusion_local::time::now_ms();
    assert!(
        deadline > now + 8_000 && deadline <= now + 10_000,
        "deadline {deadline} vs now {now}"
    );

    // By ARN, with a qualifier, and with a client context.
    let arn = format!("{ARN_PREFIX}echo:$LATEST");
    let cc = base64_encode(br#"{"custom":{"k":"v"}}"#);
    let out = stack
        .lambda
        .invoke()
        .function_name(&arn)
        .client_context(cc)
        .payload(Blob::new("{}"))
        .send()
        .await
        .unwrap();
    let body = payload_json(&out);
    assert_eq!(body["arn"], arn);
    assert_eq!(body["client_context"], json!({"k": "v"}));

    // DryRun, unknown function, payload that is not JSON.
    let dry = stack
        .lambda
        .invoke()
        .function_name("echo")
        .invocation_type(InvocationType::DryRun)
        .send()
        .await
        .unwrap();
    assert_eq!(dry.status_code(), 204);
    let err = stack
        .lambda
        .invoke()
        .function_name("nope")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(err.is_resource_not_found_exception(), "{err:?}");
    assert!(err.to_string().contains("Function not found"), "{err}");
    let err = stack
        .lambda
        .invoke()
        .function_name("echo")
        .payload(Blob::new("not json"))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(err.is_invalid_request_content_exception(), "{err:?}");

    // The instance log has Lambda's START / END / REPORT lines.
    let log = stack.log("echo-0.log");
    assert!(
        log.contains("START RequestId: ") && log.contains("REPORT RequestId: "),
        "{log}"
    );
    stack.stop().await;
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn function_error_is_unhandled() {
    let stack = Stack::start(json!([{"name": "f"}])).await;
    let out = stack
        .invoke("f", json!({"action": "error", "message": "boom"}))
        .await;
    assert_eq!(out.status_code(), 200);
    assert_eq!(out.function_error(), Some("Unhandled"));
    let body = payload_json(&out);
    assert_eq!(body["errorType"], "TestError");
    assert_eq!(body["errorMessage"], "boom");
    stack.stop().await;
}

#[tokio::test]
async fn event_returns_202_and_runs_later_and_twice_when_sent_twice() {
    let stack = Stack::start(json!([{"name": "f", "timeout_secs": 10}])).await;
    let started = Instant::now();
    let event = json!({"action": "sleep", "ms": 1000, "tag": "dup"});
    assert_eq!(stack.invoke_event("f", event.clone()).await, 202);
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "Event must not wait for the function"
    );
    assert!(
        stack.records("f").iter().all(|r| r["t"] != "end"),
        "cannot have finished yet"
    );
    assert_eq!(stack.invoke_event("f", event.clone()).await, 202);
    wait_until("both events to run", Duration::from_secs(10), || {
        stack
            .records("f")
            .iter()
            .filter(|r| r["t"] == "end")
            .count()
            == 2
    })
    .await;
    let starts = stack.starts("f");
    assert_eq!(starts.len(), 2);
    assert!(starts.iter().all(|r| r["event"] == event));
    assert_ne!(starts[0]["request_id"], starts[1]["request_id"]);
    stack.stop().await;
}

#[tokio::test]
async fn event_retries_then_on_failure_destination() {
    let stack = Stack::start(json!([
        {"name": "failing", "max_retry_attempts": 2, "retry_delays_ms": [100, 200], "on_failure": "dest"},
        {"name": "dest"}
    ]))
    .await;
    let event = json!({"action": "error", "message": "nope", "n": 7});
    assert_eq!(stack.invoke_event("failing", event.clone()).await, 202);
    wait_until("the destination record", Duration::from_secs(10), || {
        !stack.starts("dest").is_empty()
    })
    .await;

    let attempts = stack.starts("failing");
    assert_eq!(attempts.len(), 3, "1 attempt + 2 retries");
    let request_id = attempts[0]["request_id"].clone();
    assert!(
        attempts.iter().all(|a| a["request_id"] == request_id),
        "retries keep the request id"
    );
    let t: Vec<u64> = attempts.iter().map(|a| a["ms"].as_u64().unwrap()).collect();
    assert!(
        t[1] - t[0] >= 100 && t[2] - t[1] >= 200,
        "retry delays: {t:?}"
    );

    let dest = stack.starts("dest");
    assert_eq!(dest.len(), 1);
    let record = &dest[0]["event"];
    assert_eq!(record["version"], "1.0");
    assert!(record["timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(record["requestContext"]["requestId"], request_id);
    assert_eq!(
        record["requestContext"]["functionArn"],
        format!("{ARN_PREFIX}failing:$LATEST")
    );
    assert_eq!(record["requestContext"]["condition"], "RetriesExhausted");
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 3);
    assert_eq!(record["requestPayload"], event);
    assert_eq!(
        record["responseContext"],
        json!({"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"})
    );
    assert_eq!(record["responsePayload"]["errorType"], "TestError");
    assert_eq!(record["responsePayload"]["errorMessage"], "nope");
    stack.stop().await;
}

#[tokio::test]
async fn old_events_go_to_the_destination_unrun() {
    let stack = Stack::start(json!([
        {"name": "slow", "timeout_secs": 10, "max_event_age_secs": 1, "on_failure": "dest"},
        {"name": "dest"}
    ]))
    .await;
    // The only instance is busy for 1.8 s; the next event waits longer than its max age.
    assert_eq!(
        stack
            .invoke_event("slow", json!({"action": "sleep", "ms": 1800}))
            .await,
        202
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(stack.invoke_event("slow", json!({"late": true})).await, 202);
    wait_until("the destination record", Duration::from_secs(10), || {
        !stack.starts("dest").is_empty()
    })
    .await;
    let record = &stack.starts("dest")[0]["event"];
    assert_eq!(record["requestContext"]["condition"], "EventAgeExceeded");
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 0);
    assert_eq!(record["requestPayload"], json!({"late": true}));
    assert!(
        stack
            .starts("slow")
            .iter()
            .all(|r| r["event"] != json!({"late": true})),
        "must not run"
    );
    stack.stop().await;
}

#[tokio::test]
async fn crash_fails_with_exit_error_and_the_instance_restarts() {
    let stack = Stack::start(json!([{"name": "f", "max_retry_attempts": 0}])).await;
    let pid_before = payload_json(&stack.invoke("f", json!({})).await)["pid"].clone();
    let out = stack
        .invoke("f", json!({"action": "exit", "code": 3}))
        .await;
    assert_eq!(out.function_error(), Some("Unhandled"));
    let err = payload_json(&out);
    assert_eq!(err["errorType"], "Runtime.ExitError");
    assert!(
        err["errorMessage"]
            .as_str()
            .unwrap()
            .contains("exit status: 3"),
        "{err}"
    );
    // The next event is served by a fresh process (the instance count is 1).
    let out = stack.invoke("f", json!({"after": "crash"})).await;
    assert_eq!(out.function_error(), None);
    let body = payload_json(&out);
    assert_eq!(body["echo"], json!({"after": "crash"}));
    assert_ne!(body["pid"], pid_before);
    // Also for asynchronous events.
    assert_eq!(
        stack.invoke_event("f", json!({"action": "exit"})).await,
        202
    );
    assert_eq!(
        stack
            .invoke_event("f", json!({"after": "async crash"}))
            .await,
        202
    );
    wait_until("the event after the crash", Duration::from_secs(10), || {
        stack
            .records("f")
            .iter()
            .any(|r| r["t"] == "end" && r["event"] == json!({"after": "async crash"}))
    })
    .await;
    stack.stop().await;
}

#[tokio::test]
async fn timeout_kills_the_process() {
    let stack = Stack::start(json!([{"name": "f", "timeout_secs": 1}])).await;
    let started = Instant::now();
    let out = stack
        .invoke("f", json!({"action": "sleep", "ms": 5000}))
        .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_millis(3000),
        "took {took:?}"
    );
    assert_eq!(out.function_error(), Some("Unhandled"));
    let err = payload_json(&out);
    assert_eq!(err["errorType"], "Sandbox.Timedout");
    assert!(
        err["errorMessage"]
            .as_str()
            .unwrap()
            .contains("Task timed out after 1.00 seconds"),
        "{err}"
    );
    let slept = stack.starts("f")[0]["pid"].clone();
    let out = stack.invoke("f", json!({})).await;
    assert_eq!(out.function_error(), None);
    assert_ne!(
        payload_json(&out)["pid"],
        slept,
        "a new process serves the next event"
    );
    assert!(
        !Path::new(&format!("/proc/{slept}")).exists(),
        "the timed-out process is gone"
    );
    stack.stop().await;
}

#[tokio::test]
async fn concurrency_is_limited_to_instances() {
    let stack = Stack::start(json!([{"name": "f", "instances": 2, "timeout_secs": 10}])).await;
    let started = Instant::now();
    let calls = (0..6).map(|i| stack.invoke("f", json!({"action": "sleep", "ms": 300, "i": i})));
    let outs = futures::future::join_all(calls).await;
    assert!(outs.iter().all(|o| o.function_error().is_none()));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "6 x 300 ms on 2 instances"
    );
    let records = stack.records("f");
    let mut events: Vec<(u64, i32)> = records
        .iter()
        .map(|r| {
            (
                r["ms"].as_u64().unwrap(),
                if r["t"] == "start" { 1 } else { -1 },
            )
        })
        .collect();
    events.sort_by_key(|&(t, d)| (t, d)); // an end before a start at the same ms
    let (mut running, mut peak) = (0, 0);
    for (_, d) in events {
        running += d;
        peak = peak.max(running);
    }
    assert_eq!(peak, 2, "at most `instances` invocations at once");
    let pids: std::collections::BTreeSet<String> =
        records.iter().map(|r| r["pid"].to_string()).collect();
    assert_eq!(pids.len(), 2);
    stack.stop().await;
}

#[tokio::test]
async fn payload_limits_and_throttling() {
    let stack = Stack::start(json!([{"name": "f", "timeout_secs": 10, "max_queue": 1}])).await;
    let big = json!({"pad": "x".repeat(1100 * 1024)});
    let err = stack
        .lambda
        .invoke()
        .function_name("f")
        .invocation_type(InvocationType::Event)
        .payload(Blob::new(big.to_string()))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(err.is_request_too_large_exception(), "{err:?}");
    // 1.1 MB is fine synchronously.
    assert_eq!(stack.invoke("f", big).await.function_error(), None);

    // Busy instance, one queued event, the next is refused.
    let busy = stack.invoke("f", json!({"action": "sleep", "ms": 1000}));
    let refuse = async {
        wait_until(
            "the busy invocation to start",
            Duration::from_secs(10),
            || {
                stack
                    .starts("f")
                    .iter()
                    .any(|r| r["event"]["action"] == "sleep")
            },
        )
        .await;
        assert_eq!(stack.invoke_event("f", json!({"queued": 1})).await, 202);
        let url = format!(
            "http://{}/2015-03-31/functions/f/invocations",
            stack.emulator().invoke_addr
        );
        let raw = stack
            .http
            .post(&url)
            .header("x-amz-invocation-type", "Event")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(raw.status(), 429);
        assert_eq!(
            raw.headers()["x-amzn-errortype"],
            "TooManyRequestsException"
        );
        let err = stack
            .lambda
            .invoke()
            .function_name("f")
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert!(err.is_too_many_requests_exception(), "{err:?}");
    };
    let (out, ()) = tokio::join!(busy, refuse);
    assert_eq!(out.function_error(), None);
    stack.stop().await;
}

#[tokio::test]
async fn function_url_round_trip() {
    let stack = Stack::start(json!([
        {"name": "web", "env": {"TESTFN_MODE": "http"}, "url_listen": "127.0.0.1:0"},
        {"name": "plain", "url_listen": "127.0.0.1:0"}
    ]))
    .await;
    let web = stack.emulator().function_urls["web"];
    let resp = stack
        .http
        .post(format!("http://{web}/v1/query?q=1&r=x%20y"))
        .header("content-type", "text/plain")
        .header("x-test", "42")
        .body("SELECT 1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["x-testfn"], "yes");
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["method"], "POST");
    assert_eq!(doc["path"], "/v1/query");
    assert_eq!(doc["query"], json!({"q": "1", "r": "x y"}));
    assert_eq!(doc["body"], "SELECT 1");
    assert_eq!(doc["x_test"], "42");

    let bin = stack
        .http
        .get(format!("http://{web}/binary"))
        .send()
        .await
        .unwrap();
    assert_eq!(bin.status(), 200);
    assert_eq!(bin.headers()["content-type"], "application/octet-stream");
    assert_eq!(&bin.bytes().await.unwrap()[..], &[0, 1, 254, 255]);

    let failed = stack
        .http
        .get(format!("http://{web}/error"))
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 502);
    let doc: Value = failed.json().await.unwrap();
    assert_eq!(doc["Message"], "Internal Server Error");
    assert!(
        doc["errorMessage"].as_str().unwrap().contains("on purpose"),
        "{doc}"
    );

    // A function answering plain JSON: 200 application/json with that JSON as body.
    let plain = stack.emulator().function_urls["plain"];
    let resp = stack
        .http
        .get(format!("http://{plain}/x?a=b"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let doc: Value = resp.json().await.unwrap();
    assert_eq!(doc["echo"]["version"], "2.0");
    assert_eq!(doc["echo"]["rawPath"], "/x");
    assert_eq!(doc["echo"]["requestContext"]["http"]["method"], "GET");
    assert_eq!(
        doc["echo"]["requestContext"]["http"]["sourceIp"],
        "127.0.0.1"
    );
    stack.stop().await;
}

/// Runs the binary as `up` does: ready file, invocation, SIGTERM kills the children.
#[tokio::test]
async fn binary_serves_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "invoke_listen": "127.0.0.1:0",
        "state_dir": "state",
        "functions": [{"name": "echo", "command": [TESTFN], "instances": 2}],
    });
    std::fs::write(dir.path().join("emulator.json"), config.to_string()).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lambdafusion-local"))
        .args(["serve", "--config", "emulator.json"])
        .current_dir(dir.path())
        .stderr(std::fs::File::create(dir.path().join("emulator.log")).unwrap())
        .spawn()
        .unwrap();
    let ready = dir.path().join("state/emulator.ready");
    wait_until("emulator.ready", Duration::from_secs(30), || ready.exists()).await;
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&ready).unwrap()).unwrap();
    assert_eq!(doc["pid"], child.id());
    let client = lambda_client(doc["invoke_endpoint"].as_str().unwrap());
    let out = client
        .invoke()
        .function_name("echo")
        .payload(Blob::new("{}"))
        .send()
        .await
        .unwrap();
    let pid = payload_json(&out)["pid"].as_u64().unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());

    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let started = Instant::now();
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "emulator did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        exit.success(),
        "{exit:?}: {}",
        std::fs::read_to_string(dir.path().join("emulator.log")).unwrap()
    );
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "function processes are killed"
    );
    assert!(!ready.exists(), "ready file removed");
    assert!(dir.path().join("state/logs/echo-1.log").exists());
}

#[test]
fn help_explains_the_config() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lambdafusion-local"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "stream_mappings",
        "url_listen",
        "max_retry_attempts",
        "emulator.ready",
    ] {
        assert!(text.contains(needle), "--help lacks {needle}: {text}");
    }
}

// ---- DynamoDB stream trigger against moto_server ----

/// `moto_server` from `$MOTO_SERVER`, `$VENV/bin` or the repository's `.venv/bin`.
fn find_moto_server() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidates = [
        std::env::var_os("MOTO_SERVER").map(PathBuf::from),
        std::env::var_os("VENV").map(|v| PathBuf::from(v).join("bin/moto_server")),
        Some(repo.join(".venv/bin/moto_server")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn stream_mapping_end_to_end_with_moto() {
    let Some(moto) = find_moto_server() else {
        eprintln!(
            "SKIPPED stream_mapping_end_to_end_with_moto: no moto_server (set MOTO_SERVER or VENV, \
             or run scripts/test.sh, which installs it into .venv)"
        );
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let moto_log = tempfile::NamedTempFile::new().unwrap();
    let _moto = KillOnDrop(
        std::process::Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(moto_log.reopen().unwrap())
            .stderr(moto_log.reopen().unwrap())
            .spawn()
            .unwrap(),
    );
    let endpoint = format!("http://127.0.0.1:{port}");
    let http = http_client();
    let start = Instant::now();
    while http
        .get(format!("{endpoint}/moto-api/"))
        .send()
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "moto_server did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let ddb = dynamodb_client(&endpoint);
    use aws_sdk_dynamodb::types::AttributeValue;
    create_table(&ddb, "t").await;
    create_table(&ddb, "b").await;
    let put_in =
        |table: &'static str, pk: &str, sk: &str, extra: Option<(&str, AttributeValue)>| {
            let mut req = ddb
                .put_item()
                .table_name(table)
                .item("pk", AttributeValue::S(pk.into()))
                .item("sk", AttributeValue::S(sk.into()));
            if let Some((k, v)) = extra {
                req = req.item(k, v);
            }
            req.send()
        };
    let put =
        |pk: &str, sk: &str, extra: Option<(&str, AttributeValue)>| put_in("t", pk, sk, extra);
    // Table b, read from TRIM_HORIZON with bisection: one batch of 4 with a poison record.
    for pk in ["ok-1", "ok-2", "error-1", "ok-3"] {
        put_in("b", pk, "STAGE#0", None).await.unwrap();
    }
    // Written before the trigger starts: LATEST must not deliver it.
    put(
        "Q#0",
        "STAGE#0",
        Some(("remaining", AttributeValue::N("0".into()))),
    )
    .await
    .unwrap();

    let filters = json!([
        {"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "STAGE#"}]}, "remaining": {"N": ["0"]}}}},
        {"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "TASK#"}]}, "state": {"S": ["FAILED"]}}}}
    ]);
    let stack = Stack::start_with(
        json!([{"name": "sched", "timeout_secs": 10}, {"name": "sched2", "timeout_secs": 10}]),
        json!([
            {"table": "t", "function": "sched", "dynamodb_endpoint": endpoint, "batch_size": 10,
             "poll_interval_ms": 100, "maximum_retry_attempts": 1, "filters": filters},
            {"table": "b", "function": "sched2", "dynamodb_endpoint": endpoint, "batch_size": 10,
             "poll_interval_ms": 100, "maximum_retry_attempts": 1, "starting_position": "TRIM_HORIZON",
             "bisect_batch_on_function_error": true}
        ]),
    )
    .await;

    put(
        "Q#1",
        "STAGE#1",
        Some(("remaining", AttributeValue::N("0".into()))),
    )
    .await
    .unwrap();
    put(
        "Q#1",
        "STAGE#2",
        Some(("remaining", AttributeValue::N("3".into()))),
    )
    .await
    .unwrap();
    put(
        "Q#1",
        "TASK#1#0",
        Some(("state", AttributeValue::S("FAILED".into()))),
    )
    .await
    .unwrap();
    put(
        "Q#1",
        "TASK#1#1",
        Some(("state", AttributeValue::S("DONE".into()))),
    )
    .await
    .unwrap();
    put(
        "fail-1",
        "STAGE#3",
        Some(("remaining", AttributeValue::N("0".into()))),
    )
    .await
    .unwrap();

    wait_until(
        "the failing record to be given up",
        Duration::from_secs(20),
        || stack.log("stream-failures.log").contains("fail-1"),
    )
    .await;
    put(
        "Q#9",
        "STAGE#9",
        Some(("remaining", AttributeValue::N("0".into()))),
    )
    .await
    .unwrap();
    let delivered = |stack: &Stack| -> Vec<Value> {
        stack
            .starts("sched")
            .iter()
            .flat_map(|s| {
                s["event"]["Records"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    };
    wait_until(
        "the record after the failure",
        Duration::from_secs(20),
        || {
            delivered(&stack)
                .iter()
                .any(|r| r["dynamodb"]["NewImage"]["sk"]["S"] == "STAGE#9")
        },
    )
    .await;

    let records = delivered(&stack);
    let keys: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                "{}/{}",
                r["dynamodb"]["Keys"]["pk"]["S"].as_str().unwrap(),
                r["dynamodb"]["Keys"]["sk"]["S"].as_str().unwrap()
            )
        })
        .collect();
    let count = |k: &str| keys.iter().filter(|x| *x == k).count();
    assert_eq!(count("Q#1/STAGE#1"), 1, "{keys:?}");
    assert_eq!(count("Q#1/TASK#1#0"), 1, "{keys:?}");
    assert_eq!(count("Q#9/STAGE#9"), 1, "{keys:?}");
    assert_eq!(
        count("fail-1/STAGE#3"),
        2,
        "first delivery + 1 retry: {keys:?}"
    );
    assert_eq!(
        count("Q#0/STAGE#0"),
        0,
        "written before start-up (LATEST): {keys:?}"
    );
    assert_eq!(
        count("Q#1/STAGE#2") + count("Q#1/TASK#1#1"),
        0,
        "filtered out: {keys:?}"
    );
    // Order per shard is kept.
    let first_seen: Vec<&String> = keys.iter().fold(Vec::new(), |mut v, k| {
        if !v.contains(&k) {
            v.push(k);
        }
        v
    });
    assert_eq!(
        first_seen,
        [
            "Q#1/STAGE#1",
            "Q#1/TASK#1#0",
            "fail-1/STAGE#3",
            "Q#9/STAGE#9"
        ]
    );

    let rec = &records[0];
    assert_eq!(rec["eventSource"], "aws:dynamodb");
    assert_eq!(rec["awsRegion"], "us-east-1");
    assert_eq!(rec["eventName"], "INSERT");
    assert!(
        rec["eventSourceARN"]
            .as_str()
            .unwrap()
            .contains(":table/t/stream/"),
        "{rec}"
    );
    assert_eq!(rec["dynamodb"]["NewImage"]["remaining"], json!({"N": "0"}));
    let event: aws_lambda_events::event::dynamodb::Event =
        serde_json::from_value(json!({"Records": records})).unwrap();
    assert!(event
        .records
        .iter()
        .all(|r| r.change.sequence_number.is_some()));

    let failures: Vec<Value> = stack
        .log("stream-failures.log")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|f| f["table"] == "t")
        .collect();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0]["attempts"], 2);
    assert_eq!(
        failures[0]["records"][0]["dynamodb"]["Keys"]["pk"]["S"],
        "fail-1"
    );

    // Bisection on table b: [4] fails, [ok-1, ok-2] pass, [error-1, ok-3] fails, [error-1]
    // fails twice (1 retry) and is given up, [ok-3] passes.
    wait_until("table b to be drained", Duration::from_secs(20), || {
        stack
            .records("sched2")
            .iter()
            .filter(|r| r["t"] == "end")
            .count()
            == 6
    })
    .await;
    let batches: Vec<Vec<String>> = stack
        .starts("sched2")
        .iter()
        .map(|s| {
            let records = s["event"]["Records"].as_array().unwrap();
            records
                .iter()
                .map(|r| {
                    r["dynamodb"]["Keys"]["pk"]["S"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        })
        .collect();
    assert_eq!(
        batches,
        [
            vec!["ok-1", "ok-2", "error-1", "ok-3"],
            vec!["ok-1", "ok-2"],
            vec!["error-1", "ok-3"],
            vec!["error-1"],
            vec!["error-1"],
            vec!["ok-3"]
        ]
    );
    let failures = stack.log("stream-failures.log");
    let b_failure: Value =
        serde_json::from_str(failures.lines().find(|l| l.contains("error-1")).unwrap()).unwrap();
    assert_eq!(b_failure["table"], "b");
    assert_eq!(b_failure["records"].as_array().unwrap().len(), 1);
    stack.stop().await;
}

async fn create_table(ddb: &aws_sdk_dynamodb::Client, name: &str) {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        StreamSpecification, StreamViewType,
    };
    let attr = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    let key = |n: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .unwrap()
    };
    let stream = StreamSpecification::builder()
        .stream_enabled(true)
        .stream_view_type(StreamViewType::NewImage)
        .build()
        .unwrap();
    ddb.create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("pk"))
        .attribute_definitions(attr("sk"))
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .stream_specification(stream)
        .send()
        .await
        .unwrap();
}

fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .http_client(http)
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}
