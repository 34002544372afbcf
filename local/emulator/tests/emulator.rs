//! End-to-end tests of the emulator with a real `lambda_runtime` / `lambda_http`
//! function (`src/bin/testfn.rs`), called through the real `aws-sdk-lambda` client.
//! Every stack runs with `"timing": "fast"` (async retries after 200 / 400 ms).

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

    async fn start_with(functions: Value, stream_mappings: Value) -> Stack {
        Stack::start_full(functions, stream_mappings, json!({})).await
    }

    /// `extra`: more top-level config (`fault_plan`, `credentials`, `timing`, ...).
    async fn start_full(mut functions: Value, stream_mappings: Value, extra: Value) -> Stack {
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
        let mut config = json!({
            "invoke_listen": "127.0.0.1:0",
            "state_dir": dir.path().join("state"),
            "timing": "fast",
            "functions": functions,
            "stream_mappings": stream_mappings,
        });
        for (k, v) in extra.as_object().unwrap() {
            config[k] = v.clone();
        }
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

    /// Faults the emulator injected so far, by name.
    fn injected(&self) -> std::collections::BTreeMap<String, u64> {
        self.emulator().registry().counters().snapshot()
    }

    fn injected_count(&self, kind: &str) -> u64 {
        self.injected().get(kind).copied().unwrap_or(0)
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
        {"name": "failing", "max_retry_attempts": 2, "on_failure": "dest"},
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
        t[1] - t[0] >= 200 && t[2] - t[1] >= 400 && t[2] - t[0] < 3000,
        "fast timing retries after 200 and 400 ms: {t:?}"
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

    // Busy instance: events are all accepted (AWS queues them whatever the
    // concurrency), a second synchronous invocation waits (max_queue 1), a third is
    // refused.
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
        for i in 0..5 {
            assert_eq!(stack.invoke_event("f", json!({"queued": i})).await, 202);
        }
        let waiting = stack.invoke("f", json!({"waits": true}));
        let refused = async {
            wait_until("the second call to queue", Duration::from_secs(5), || {
                stack.emulator().registry().get("f").unwrap().queued() == 6
            })
            .await;
            let url = format!(
                "http://{}/2015-03-31/functions/f/invocations",
                stack.emulator().invoke_addr
            );
            let raw = stack.http.post(&url).body("{}").send().await.unwrap();
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
        let (waited, ()) = tokio::join!(waiting, refused);
        assert_eq!(payload_json(&waited)["echo"], json!({"waits": true}));
    };
    let (out, ()) = tokio::join!(busy, refuse);
    assert_eq!(out.function_error(), None);
    wait_until("the 5 events to run", Duration::from_secs(10), || {
        stack
            .records("f")
            .iter()
            .filter(|r| r["t"] == "end" && r["event"].get("queued").is_some())
            .count()
            == 5
    })
    .await;
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
    let (_moto, endpoint, _moto_log) = start_moto("stream_mapping_end_to_end_with_moto").await;

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

// ---- Limits: memory, /tmp, the HTTP API integration timeout ----

#[tokio::test]
async fn memory_limit_kills_the_process_with_out_of_memory() {
    let stack = Stack::start(json!([{"name": "f", "memory_mb": 128, "timeout_secs": 10}])).await;
    // Within the limit: fine, and the REPORT line says how much was used.
    let small = stack
        .invoke("f", json!({"action": "alloc", "mb": 16, "hold_ms": 150}))
        .await;
    assert_eq!(small.function_error(), None);
    let pid_before = payload_json(&small)["pid"].clone();
    let log = stack.log("f-0.log");
    let used: u64 = log
        .lines()
        .filter_map(|l| l.split("Max Memory Used: ").nth(1))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .max()
        .expect("REPORT has Max Memory Used");
    assert!((16..128).contains(&used), "{log}");

    let started = Instant::now();
    let out = stack
        .invoke("f", json!({"action": "alloc", "mb": 300, "hold_ms": 3000}))
        .await;
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "killed while it holds the memory, not after"
    );
    assert_eq!(out.function_error(), Some("Unhandled"));
    let err = payload_json(&out);
    assert_eq!(err["errorType"], "Runtime.OutOfMemory", "{err}");
    assert!(
        err["errorMessage"]
            .as_str()
            .unwrap()
            .ends_with("Error: Runtime exited with error: signal: killed"),
        "{err}"
    );
    assert!(
        !Path::new(&format!("/proc/{pid_before}")).exists(),
        "the process is gone"
    );
    let after = stack.invoke("f", json!({})).await;
    assert_eq!(after.function_error(), None);
    assert_ne!(payload_json(&after)["pid"], pid_before, "a new environment");
    stack.stop().await;
}

#[tokio::test]
async fn each_environment_has_its_own_limited_tmp() {
    let stack = Stack::start(json!([{"name": "f", "instances": 2, "timeout_secs": 10}])).await;
    let state = stack.dir.path().join("state");
    // Two concurrent invocations land on the two environments.
    let (a, b) = tokio::join!(
        stack.invoke("f", json!({"action": "sleep", "ms": 300})),
        stack.invoke("f", json!({"action": "sleep", "ms": 300}))
    );
    let dirs: std::collections::BTreeSet<String> = [a, b]
        .iter()
        .map(|o| payload_json(o)["tmpdir"].as_str().unwrap().to_string())
        .collect();
    let expected: std::collections::BTreeSet<String> = ["f-0", "f-1"]
        .iter()
        .map(|d| state.join("tmp").join(d).to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs, expected);

    // Files stay between invocations of a warm environment.
    let stack1 = Stack::start(json!([{"name": "g", "ephemeral_storage_mb": 512}])).await;
    let out = stack1
        .invoke(
            "g",
            json!({"action": "fill_tmp", "mb": 100, "name": "keep"}),
        )
        .await;
    assert_eq!(out.function_error(), None);
    let pid = payload_json(&out)["pid"].clone();
    let ls = payload_json(&stack1.invoke("g", json!({"action": "ls_tmp"})).await);
    assert_eq!(ls["files"], json!(["keep"]));
    assert_eq!(ls["pid"], pid);

    // Past ephemeral_storage_mb: the invocation fails, the environment is replaced and
    // its /tmp is empty again.
    let out = stack1
        .invoke("g", json!({"action": "fill_tmp", "mb": 450, "name": "big"}))
        .await;
    assert_eq!(out.function_error(), Some("Unhandled"));
    let err = payload_json(&out);
    assert_eq!(
        err["errorType"], "Sandbox.EphemeralStorageExceeded",
        "{err}"
    );
    assert!(
        err["errorMessage"].as_str().unwrap().contains("550 MB"),
        "{err}"
    );
    let ls = payload_json(&stack1.invoke("g", json!({"action": "ls_tmp"})).await);
    assert_ne!(ls["pid"], pid, "a new environment");
    assert_eq!(ls["files"], json!([]));
    stack1.stop().await;
    stack.stop().await;
}

#[tokio::test]
async fn integration_timeout_answers_503_while_the_function_runs_on() {
    let stack = Stack::start(json!([
        {"name": "web", "env": {"TESTFN_MODE": "http"}, "timeout_secs": 10,
         "url": {"listen": "127.0.0.1:0", "integration_timeout_secs": 1}}
    ]))
    .await;
    let url = stack.emulator().function_urls["web"];
    let fast = stack
        .http
        .get(format!("http://{url}/sleep?ms=100"))
        .send()
        .await
        .unwrap();
    assert_eq!(fast.status(), 201);

    let started = Instant::now();
    let slow = stack
        .http
        .get(format!("http://{url}/sleep?ms=2500"))
        .send()
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(slow.status(), 503);
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_millis(2000),
        "{took:?}"
    );
    assert_eq!(
        slow.json::<Value>().await.unwrap(),
        json!({"message": "Service Unavailable"})
    );
    // The invocation was not cut short: it finishes (REPORT without an error).
    wait_until("the slow invocation to end", Duration::from_secs(5), || {
        stack.log("web-0.log").matches("REPORT RequestId").count() == 2
    })
    .await;
    assert!(!stack.log("web-0.log").contains("Status: error"));
    stack.stop().await;
}

// ---- Function URL with AWS_IAM auth ----

/// Headers that sign a request as the AWS SDKs do (aws-sigv4, service `lambda`).
fn sign(
    method: &str,
    url: &str,
    body: &[u8],
    access_key: &str,
    secret_key: &str,
) -> Vec<(String, String)> {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    use aws_sigv4::sign::v4;
    let identity: aws_smithy_runtime_api::client::identity::Identity =
        aws_credential_types::Credentials::new(access_key, secret_key, None, None, "test").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("lambda")
        .time(std::time::SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let headers = [("content-type", "application/json")];
    let request = SignableRequest::new(
        method,
        url,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .unwrap();
    let (instructions, _) = sign(request, &params).unwrap().into_parts();
    let mut out: Vec<(String, String)> = instructions
        .headers()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.push(("content-type".into(), "application/json".into()));
    out
}

#[tokio::test]
async fn aws_iam_function_url_checks_signatures_and_names_the_caller() {
    let stack = Stack::start_full(
        json!([{"name": "web", "env": {"TESTFN_MODE": "http"},
                "url": {"listen": "127.0.0.1:0", "auth": "AWS_IAM"}}]),
        json!([]),
        json!({"credentials": [
            {"access_key": "test", "secret_key": "test", "arn": "arn:aws:iam::000000000000:user/test"},
            {"access_key": "AKIDOTHER", "secret_key": "other-secret", "arn": "arn:aws:iam::111122223333:user/other"}
        ]}),
    )
    .await;
    let url = format!(
        "http://{}/v1/query?b=2&a=x%20y",
        stack.emulator().function_urls["web"]
    );
    let body = br#"{"sql":"SELECT 1"}"#;
    let post = |headers: Vec<(String, String)>, body: &'static [u8]| {
        let mut req = stack.http.post(&url).body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.send()
    };

    // Two callers, each named in the event.
    for (key, secret, arn) in [
        ("test", "test", "arn:aws:iam::000000000000:user/test"),
        (
            "AKIDOTHER",
            "other-secret",
            "arn:aws:iam::111122223333:user/other",
        ),
    ] {
        let resp = post(sign("POST", &url, body, key, secret), body)
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "signed by {key}");
        let doc: Value = resp.json().await.unwrap();
        assert_eq!(doc["caller_arn"], arn);
        assert_eq!(doc["query"], json!({"a": "x y", "b": "2"}));
        // What lambda_http parsed out of requestContext.authorizer.iam.
        let iam = &doc["iam"];
        assert_eq!(iam["accessKey"], key);
        assert_eq!(iam["accountId"], arn.split(':').nth(4).unwrap());
        assert!(iam["userId"].as_str().unwrap().starts_with("AIDA"), "{iam}");
        assert_eq!(iam["callerId"], iam["userId"]);
        assert_eq!(doc["account_id"], "000000000000", "the function owner's");
    }

    // Refusals never reach the function.
    let runs = stack.log("web-0.log").matches("START RequestId").count();
    assert_eq!(runs, 2);
    let unsigned = post(vec![], body).await.unwrap();
    assert_eq!(unsigned.status(), 403);
    assert_eq!(
        unsigned.headers()["x-amzn-errortype"],
        "AccessDeniedException"
    );
    let doc: Value = unsigned.json().await.unwrap();
    assert!(
        doc["Message"].as_str().unwrap().starts_with("Forbidden"),
        "{doc}"
    );

    let wrong_secret = post(sign("POST", &url, body, "test", "nope"), body)
        .await
        .unwrap();
    assert_eq!(wrong_secret.status(), 403);
    assert_eq!(
        wrong_secret.headers()["x-amzn-errortype"],
        "InvalidSignatureException"
    );
    let doc: Value = wrong_secret.json().await.unwrap();
    assert!(
        doc["message"]
            .as_str()
            .unwrap()
            .contains("signature we calculated does not match"),
        "{doc}"
    );

    // A body other than the one signed.
    let tampered = post(sign("POST", &url, body, "test", "test"), b"{}")
        .await
        .unwrap();
    assert_eq!(tampered.status(), 403);

    let unknown = post(sign("POST", &url, body, "AKIDNOBODY", "x"), body)
        .await
        .unwrap();
    assert_eq!(unknown.status(), 403);
    assert_eq!(
        unknown.headers()["x-amzn-errortype"],
        "UnrecognizedClientException"
    );
    assert_eq!(
        stack.log("web-0.log").matches("START RequestId").count(),
        runs,
        "no refused request ran"
    );
    stack.stop().await;
}

// ---- Seeded faults (lambdafusion-faults) ----

fn plan(faults: Value) -> Value {
    json!({"fault_plan": {"seed": 7, "faults": faults}})
}

#[tokio::test]
async fn fault_throttle_invoke_answers_429_to_both_invocation_types() {
    let stack = Stack::start_full(
        json!([{"name": "f"}]),
        json!([]),
        plan(json!({"lambda.throttle_invoke": 1})),
    )
    .await;
    let err = stack
        .lambda
        .invoke()
        .function_name("f")
        .payload(Blob::new("{}"))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(err.is_too_many_requests_exception(), "{err:?}");
    let err = stack
        .lambda
        .invoke()
        .function_name("f")
        .invocation_type(InvocationType::Event)
        .payload(Blob::new("{}"))
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert!(err.is_too_many_requests_exception(), "{err:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(stack.starts("f").is_empty(), "nothing ran");
    assert_eq!(stack.injected_count("lambda.throttle_invoke"), 2);
    // The report route adds it up too.
    let report: Value = stack
        .http
        .get(format!(
            "http://{}/_lambdafusion/faults",
            stack.emulator().invoke_addr
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["injected"]["lambda.throttle_invoke"], 2, "{report}");
    stack.stop().await;
}

#[tokio::test]
async fn fault_drop_event_accepts_and_never_runs() {
    let stack = Stack::start_full(
        json!([{"name": "f", "on_failure": "dest"}, {"name": "dest"}]),
        json!([]),
        plan(json!({"lambda.drop_event": 1})),
    )
    .await;
    assert_eq!(stack.invoke_event("f", json!({"n": 1})).await, 202);
    // Synchronous invocations are not events: they run.
    assert_eq!(
        stack.invoke("f", json!({"sync": 1})).await.function_error(),
        None
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let starts = stack.starts("f");
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["event"], json!({"sync": 1}));
    assert!(stack.starts("dest").is_empty(), "no destination record");
    assert_eq!(stack.injected_count("lambda.drop_event"), 1);
    stack.stop().await;
}

#[tokio::test]
async fn fault_drop_to_destination_sends_the_event_unrun() {
    let stack = Stack::start_full(
        json!([{"name": "f", "on_failure": "dest"}, {"name": "dest"}]),
        json!([]),
        // Only events of `f`: the destination's own records have another key prefix,
        // but with rate 1 they would be hit too; the plan's rate is per key.
        plan(json!({"lambda.drop_to_destination": 1})),
    )
    .await;
    assert_eq!(stack.invoke_event("f", json!({"n": 2})).await, 202);
    // The record to `dest` is itself an event hit by the same fault; `dest` has no
    // on_failure, so it is dropped there, after being counted.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(stack.starts("f").is_empty(), "never ran");
    assert_eq!(stack.injected_count("lambda.drop_to_destination"), 2);
    stack.stop().await;

    // At a rate that spares the destination record (decided by key: seed 7 hits
    // `f`'s first event and not the record), the record arrives.
    let (stack, seed) = stack_sparing_destination().await;
    assert_eq!(stack.invoke_event("f", json!({"n": 2})).await, 202);
    wait_until("the destination record", Duration::from_secs(5), || {
        !stack.starts("dest").is_empty()
    })
    .await;
    let record = &stack.starts("dest")[0]["event"];
    assert_eq!(
        record["requestContext"]["condition"], "EventAgeExceeded",
        "seed {seed}"
    );
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 0);
    assert_eq!(record["requestPayload"], json!({"n": 2}));
    assert!(stack.starts("f").is_empty(), "never ran");
    assert_eq!(stack.injected_count("lambda.drop_to_destination"), 1);
    stack.stop().await;
}

/// A stack whose plan (`lambda.drop_to_destination` at 0.5) hits the first event
/// `{"n": 2}` of `f` but not the destination record it produces: the seed is searched
/// with the same decision function the emulator uses, so the test does not depend on
/// one lucky constant.
async fn stack_sparing_destination() -> (Stack, u64) {
    use lambdafusion_faults::{FaultKind, FaultPlan};
    let hash = |payload: &[u8]| lambdafusion_local::injection::payload_hash(payload);
    let f_key = format!("f#0#{:016x}", hash(br#"{"n":2}"#));
    for seed in 0..1000u64 {
        let p = FaultPlan::parse(&format!(
            r#"{{"seed": {seed}, "faults": {{"lambda.drop_to_destination": 0.5}}}}"#
        ))
        .unwrap();
        if !p.fires(FaultKind::LambdaDropToDestination, &f_key) {
            continue;
        }
        // The record's key depends on its content (request id and time are normalized).
        let record = json!({
            "version": "1.0", "timestamp": "2024-01-01T00:00:00.000Z",
            "requestContext": {"requestId": "00000000-0000-0000-0000-000000000000",
                "functionArn": format!("{ARN_PREFIX}f:$LATEST"), "condition": "EventAgeExceeded",
                "approximateInvokeCount": 0},
            "requestPayload": {"n": 2}});
        let dest_key = format!("dest#0#{:016x}", hash(record.to_string().as_bytes()));
        if p.fires(FaultKind::LambdaDropToDestination, &dest_key) {
            continue;
        }
        let stack = Stack::start_full(
            json!([{"name": "f", "on_failure": "dest"}, {"name": "dest"}]),
            json!([]),
            json!({"fault_plan": {"seed": seed, "faults": {"lambda.drop_to_destination": 0.5}}}),
        )
        .await;
        return (stack, seed);
    }
    panic!("no seed in 0..1000 hits the event and spares the record");
}

#[tokio::test]
async fn fault_duplicate_event_runs_it_twice() {
    let stack = Stack::start_full(
        json!([{"name": "f", "instances": 2}]),
        json!([]),
        plan(json!({"lambda.duplicate_event": 1})),
    )
    .await;
    assert_eq!(stack.invoke_event("f", json!({"n": 3})).await, 202);
    wait_until("two runs", Duration::from_secs(5), || {
        stack
            .records("f")
            .iter()
            .filter(|r| r["t"] == "end")
            .count()
            == 2
    })
    .await;
    let starts = stack.starts("f");
    assert!(starts.iter().all(|s| s["event"] == json!({"n": 3})));
    assert_eq!(
        starts[0]["request_id"], starts[1]["request_id"],
        "the same event, delivered twice"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stack.starts("f").len(), 2, "not three times");
    assert_eq!(stack.injected_count("lambda.duplicate_event"), 1);
    stack.stop().await;
}

#[tokio::test]
async fn fault_delay_event_holds_it_back() {
    let stack = Stack::start_full(
        json!([{"name": "f"}]),
        json!([]),
        plan(json!({"lambda.delay_event": {"ms": 700, "max_ms": 900}})),
    )
    .await;
    let sent = lambdafusion_local::time::now_ms();
    assert_eq!(stack.invoke_event("f", json!({"n": 4})).await, 202);
    wait_until("the delayed run", Duration::from_secs(5), || {
        !stack.starts("f").is_empty()
    })
    .await;
    let started = stack.starts("f")[0]["ms"].as_u64().unwrap();
    assert!(
        (700..2000).contains(&(started - sent)),
        "ran {} ms after it was sent",
        started - sent
    );
    assert_eq!(stack.injected_count("lambda.delay_event"), 1);
    stack.stop().await;
}

#[tokio::test]
async fn fault_cold_start_replaces_the_environment_and_pays_its_delay() {
    let stack = Stack::start_full(
        json!([{"name": "f", "timeout_secs": 10}]),
        json!([]),
        plan(json!({"lambda.cold_start": {"ms": 400}})),
    )
    .await;
    // One process started at start-up: the warm one.
    let log = stack.log("f-0.log");
    assert_eq!(log.matches("starting f instance 0").count(), 1, "{log}");
    let mut pids = Vec::new();
    for i in 0..2 {
        let started = Instant::now();
        let out = stack.invoke("f", json!({"i": i})).await;
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "paid the cold start"
        );
        assert_eq!(out.function_error(), None);
        pids.push(payload_json(&out)["pid"].clone());
    }
    assert_ne!(pids[0], pids[1], "every invocation on a fresh process");
    let log = stack.log("f-0.log");
    assert_eq!(log.matches("starting f instance 0").count(), 3, "{log}");
    assert_eq!(log.matches("Init Duration:").count(), 2, "{log}");
    assert_eq!(stack.injected_count("lambda.cold_start"), 2);
    stack.stop().await;
}

#[tokio::test]
async fn fault_concurrency_limit_throttles_sync_and_holds_events() {
    let stack = Stack::start_full(
        json!([{"name": "f", "instances": 3, "timeout_secs": 10}]),
        json!([]),
        plan(json!({"lambda.concurrency_limit": {"limit": 1}})),
    )
    .await;
    let busy = stack.invoke("f", json!({"action": "sleep", "ms": 800}));
    let others = async {
        wait_until("the first to run", Duration::from_secs(5), || {
            !stack.starts("f").is_empty()
        })
        .await;
        let err = stack
            .lambda
            .invoke()
            .function_name("f")
            .payload(Blob::new("{}"))
            .send()
            .await
            .unwrap_err()
            .into_service_error();
        assert!(err.is_too_many_requests_exception(), "{err:?}");
        assert_eq!(stack.invoke_event("f", json!({"event": 1})).await, 202);
    };
    let (out, ()) = tokio::join!(busy, others);
    assert_eq!(out.function_error(), None);
    wait_until("the held event", Duration::from_secs(5), || {
        stack.starts("f").len() == 2
    })
    .await;
    let records = stack.records("f");
    let end_first = records
        .iter()
        .find(|r| r["t"] == "end" && r["event"]["action"] == "sleep")
        .unwrap()["ms"]
        .as_u64()
        .unwrap();
    let start_event = records
        .iter()
        .find(|r| r["t"] == "start" && r["event"] == json!({"event": 1}))
        .unwrap()["ms"]
        .as_u64()
        .unwrap();
    assert!(start_event >= end_first, "the event waited for the limit");
    assert_eq!(stack.injected_count("lambda.concurrency_limit"), 2);
    stack.stop().await;
}

/// Same seed, same events: same faults, even though the events carry fresh ids (they
/// are normalized out of the keys) and arrive in another order.
#[tokio::test]
async fn faults_are_the_same_on_every_run() {
    async fn run(order: &[usize]) -> Vec<usize> {
        let stack = Stack::start_full(
            json!([{"name": "f", "instances": 2}]),
            json!([]),
            json!({"fault_plan": {"seed": 11, "faults": {"lambda.drop_event": 0.5}}}),
        )
        .await;
        for &i in order {
            let id = uuid::Uuid::new_v4().simple().to_string();
            assert_eq!(
                stack.invoke_event("f", json!({"task": i, "job": id})).await,
                202
            );
        }
        let dropped = stack.injected_count("lambda.drop_event") as usize;
        wait_until("the kept events", Duration::from_secs(10), || {
            stack
                .records("f")
                .iter()
                .filter(|r| r["t"] == "end")
                .count()
                == order.len() - dropped
        })
        .await;
        let mut ran: Vec<usize> = stack
            .starts("f")
            .iter()
            .map(|s| s["event"]["task"].as_u64().unwrap() as usize)
            .collect();
        ran.sort();
        stack.stop().await;
        ran
    }
    let forward: Vec<usize> = (0..16).collect();
    let backward: Vec<usize> = (0..16).rev().collect();
    let first = run(&forward).await;
    let second = run(&backward).await;
    assert_eq!(first, second);
    assert!(
        !first.is_empty() && first.len() < 16,
        "rate 0.5 drops some: {first:?}"
    );
}

// ---- Schedules (EventBridge scheduled rules) ----

/// A schedule of `function` every `every_secs`, with this retry policy.
fn schedules(function: &str, every_secs: u64, max_retry_attempts: u32) -> Value {
    json!({"schedules": [{"name": "test-sweep", "function": function,
        "expression": "rate(1 minute)", "every_secs": every_secs,
        "max_event_age_secs": 60, "max_retry_attempts": max_retry_attempts}]})
}

const RULE_ARN: &str = "arn:aws:events:us-east-1:000000000000:rule/test-sweep";

#[tokio::test]
async fn schedule_sends_the_scheduled_event_every_period_until_shutdown() {
    let stack = Stack::start_full(
        json!([{"name": "sweeper"}]),
        json!([]),
        schedules("sweeper", 1, 0),
    )
    .await;
    let ready: Value =
        serde_json::from_str(&std::fs::read_to_string(&stack.emulator().ready_file).unwrap())
            .unwrap();
    assert_eq!(
        ready["schedules"],
        json!([{"name": "test-sweep", "function": "sweeper", "expression": "rate(1 minute)", "every_secs": 1}])
    );
    wait_until("three scheduled events", Duration::from_secs(10), || {
        stack.starts("sweeper").len() >= 3
    })
    .await;
    let starts = stack.starts("sweeper");
    let mut ids = std::collections::BTreeSet::new();
    let mut request_ids = std::collections::BTreeSet::new();
    for start in &starts {
        let event = &start["event"];
        // EventBridge's scheduled event, exactly these fields.
        let keys: Vec<&str> = event
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "account",
                "detail",
                "detail-type",
                "id",
                "region",
                "resources",
                "source",
                "time",
                "version"
            ],
            "{event}"
        );
        assert_eq!(event["version"], "0");
        assert_eq!(event["detail-type"], "Scheduled Event");
        assert_eq!(event["source"], "aws.events");
        assert_eq!(event["account"], "000000000000");
        assert_eq!(event["region"], "us-east-1");
        assert_eq!(event["resources"], json!([RULE_ARN]));
        assert_eq!(event["detail"], json!({}));
        let id = event["id"].as_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
        ids.insert(id.to_string());
        request_ids.insert(start["request_id"].as_str().unwrap().to_string());
        // The time is RFC 3339 in whole seconds, when it was sent.
        let time = event["time"].as_str().unwrap();
        assert!(time.len() == 20 && time.ends_with('Z'), "{time}");
        let parsed: aws_lambda_events::event::eventbridge::EventBridgeEvent =
            serde_json::from_value(event.clone()).unwrap();
        let sent_ms = parsed.time.unwrap().timestamp_millis() as u64;
        let ran_ms = start["ms"].as_u64().unwrap();
        assert!(
            sent_ms <= ran_ms && ran_ms - sent_ms < 3_000,
            "sent {sent_ms}, ran {ran_ms}"
        );
    }
    assert_eq!(ids.len(), starts.len(), "a new event each period");
    assert_eq!(
        request_ids.len(),
        starts.len(),
        "a new invocation each period"
    );
    let t: Vec<u64> = starts.iter().map(|s| s["ms"].as_u64().unwrap()).collect();
    for pair in t.windows(2) {
        let gap = pair[1] - pair[0];
        assert!((600..=1_800).contains(&gap), "one event per second: {t:?}");
    }

    // Shutdown stops the schedule (and does not wait for a period to end).
    // (The stack, with its directory, outlives the emulator here.)
    let mut stack = stack;
    let stopping = Instant::now();
    stack.emulator.take().unwrap().shutdown().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        stopping.elapsed()
    );
    let after = stack.records("sweeper").len();
    assert!(after >= 3, "the records are still there: {after}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        stack.records("sweeper").len(),
        after,
        "no event after shutdown"
    );
}

#[tokio::test]
async fn scheduled_events_get_the_functions_async_retries_and_destination() {
    let stack = Stack::start_full(
        json!([
            {"name": "sweeper", "max_retry_attempts": 1, "on_failure": "dest",
             "env": {"TESTFN_FAIL_SCHEDULED": "1"}},
            {"name": "dest"}
        ]),
        json!([]),
        schedules("sweeper", 2, 0),
    )
    .await;
    wait_until("the destination record", Duration::from_secs(10), || {
        !stack.starts("dest").is_empty()
    })
    .await;
    let record = stack.starts("dest")[0]["event"].clone();
    let event = &record["requestPayload"];
    assert_eq!(event["detail-type"], "Scheduled Event");
    assert_eq!(event["resources"], json!([RULE_ARN]));
    assert_eq!(record["requestContext"]["condition"], "RetriesExhausted");
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 2);
    assert_eq!(record["responsePayload"]["errorType"], "TestError");
    // The function ran that event twice (the try and its one retry), as one request.
    let attempts: Vec<Value> = stack
        .starts("sweeper")
        .into_iter()
        .filter(|s| s["event"]["id"] == event["id"])
        .collect();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(
        attempts[0]["request_id"],
        record["requestContext"]["requestId"]
    );
    assert_eq!(attempts[1]["request_id"], attempts[0]["request_id"]);
    let gap = attempts[1]["ms"].as_u64().unwrap() - attempts[0]["ms"].as_u64().unwrap();
    assert!(gap >= 200, "fast timing retries after 200 ms: {gap}");
    stack.stop().await;
}

#[tokio::test]
async fn a_throttled_scheduled_event_follows_the_targets_retry_policy() {
    // Every invocation is refused (429): the first event is tried 1 + 2 times (after
    // 100 and 200 ms), then dropped; the next comes a period later.
    let stack = Stack::start_full(
        json!([{"name": "sweeper"}]),
        json!([]),
        json!({"fault_plan": {"seed": 7, "faults": {"lambda.throttle_invoke": 1}},
               "schedules": schedules("sweeper", 2, 2)["schedules"]}),
    )
    .await;
    wait_until("three refused deliveries", Duration::from_secs(6), || {
        stack.injected_count("lambda.throttle_invoke") >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        stack.injected_count("lambda.throttle_invoke"),
        3,
        "two retries, then dropped"
    );
    assert!(stack.starts("sweeper").is_empty(), "nothing ran");
    stack.stop().await;

    // The deployment's policy: no retry.
    let stack = Stack::start_full(
        json!([{"name": "sweeper"}]),
        json!([]),
        json!({"fault_plan": {"seed": 7, "faults": {"lambda.throttle_invoke": 1}},
               "schedules": schedules("sweeper", 2, 0)["schedules"]}),
    )
    .await;
    wait_until("a refused delivery", Duration::from_secs(6), || {
        stack.injected_count("lambda.throttle_invoke") >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(stack.injected_count("lambda.throttle_invoke"), 1);
    assert!(stack.starts("sweeper").is_empty(), "nothing ran");
    stack.stop().await;
}

#[tokio::test]
async fn scheduled_events_meet_the_lambda_event_faults() {
    // An accepted scheduled event is an event like any other: duplicated here.
    let stack = Stack::start_full(
        json!([{"name": "sweeper", "instances": 2}]),
        json!([]),
        json!({"fault_plan": {"seed": 7, "faults": {"lambda.duplicate_event": 1}},
               "schedules": schedules("sweeper", 1, 0)["schedules"]}),
    )
    .await;
    wait_until(
        "a duplicated scheduled event",
        Duration::from_secs(6),
        || stack.starts("sweeper").len() >= 2,
    )
    .await;
    let starts = stack.starts("sweeper");
    assert_eq!(starts[0]["event"]["id"], starts[1]["event"]["id"]);
    assert_eq!(starts[0]["request_id"], starts[1]["request_id"]);
    assert!(stack.injected_count("lambda.duplicate_event") >= 1);
    stack.stop().await;
}

/// Starts moto_server on a free port; `None` (the caller skips) when it is not installed.
/// A test that needs moto_server and cannot find it fails (it must not pass untested).
fn no_moto(test: &str) -> ! {
    panic!(
        "{test} needs moto_server: set MOTO_SERVER or VENV, or run scripts/test.sh, which \
         installs it into .venv"
    )
}

async fn start_moto(test: &str) -> (KillOnDrop, String, tempfile::NamedTempFile) {
    let moto = find_moto_server().unwrap_or_else(|| no_moto(test));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = tempfile::NamedTempFile::new().unwrap();
    let child = KillOnDrop(
        std::process::Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
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
    (child, endpoint, log)
}

/// The batches a stream-triggered function received: (start ms, end ms, pks).
fn stream_batches(stack: &Stack, function: &str) -> Vec<(u64, u64, Vec<String>)> {
    let records = stack.records(function);
    records
        .iter()
        .filter(|r| r["t"] == "start")
        .map(|start| {
            let end = records
                .iter()
                .find(|r| r["t"] == "end" && r["request_id"] == start["request_id"])
                .map(|r| r["ms"].as_u64().unwrap())
                .unwrap_or(u64::MAX);
            let pks = start["event"]["Records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    r["dynamodb"]["Keys"]["pk"]["S"]
                        .as_str()
                        .unwrap()
                        .to_string()
                        + "/"
                        + r["dynamodb"]["Keys"]["sk"]["S"].as_str().unwrap()
                })
                .collect();
            (start["ms"].as_u64().unwrap(), end, pks)
        })
        .collect()
}

#[tokio::test]
async fn stream_parallelization_factor_and_bad_batch_responses_with_moto() {
    let (_moto, endpoint, _log) =
        start_moto("stream_parallelization_factor_and_bad_batch_responses_with_moto").await;
    let ddb = dynamodb_client(&endpoint);
    use aws_sdk_dynamodb::types::AttributeValue;
    create_table(&ddb, "p").await;
    create_table(&ddb, "r").await;
    let stack = Stack::start_with(
        json!([{"name": "par", "instances": 4, "timeout_secs": 10}, {"name": "bad", "timeout_secs": 10}]),
        json!([
            {"table": "p", "function": "par", "dynamodb_endpoint": endpoint, "batch_size": 2,
             "poll_interval_ms": 100, "parallelization_factor": 4},
            {"table": "r", "function": "bad", "dynamodb_endpoint": endpoint,
             "poll_interval_ms": 100, "maximum_retry_attempts": 1}
        ]),
    )
    .await;
    // 8 partition keys x 3 versions, interleaved; each batch takes 150 ms.
    for version in 0..3 {
        for key in 0..8 {
            ddb.put_item()
                .table_name("p")
                .item("pk", AttributeValue::S(format!("K{key}")))
                .item("sk", AttributeValue::S(format!("v{version}")))
                .item("sleep_ms", AttributeValue::N("150".into()))
                .send()
                .await
                .unwrap();
        }
    }
    ddb.put_item()
        .table_name("r")
        .item("pk", AttributeValue::S("badresp-1".into()))
        .item("sk", AttributeValue::S("x".into()))
        .send()
        .await
        .unwrap();

    wait_until("all 24 records", Duration::from_secs(30), || {
        stream_batches(&stack, "par")
            .iter()
            .filter(|b| b.1 != u64::MAX)
            .map(|b| b.2.len())
            .sum::<usize>()
            == 24
    })
    .await;
    let batches = stream_batches(&stack, "par");
    // Per partition key: every version once, in order.
    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut by_start = batches.clone();
    by_start.sort_by_key(|b| b.0);
    for (_, _, pks) in &by_start {
        for pk_sk in pks {
            let (pk, sk) = pk_sk.split_once('/').unwrap();
            seen.entry(pk.to_string()).or_default().push(sk.to_string());
        }
    }
    assert_eq!(seen.len(), 8);
    for (pk, versions) in &seen {
        assert_eq!(versions, &["v0", "v1", "v2"], "order of {pk}");
    }
    // No key in two batches that overlap in time; and batches did run side by side.
    let keys = |b: &(u64, u64, Vec<String>)| -> std::collections::BTreeSet<String> {
        b.2.iter()
            .map(|x| x.split_once('/').unwrap().0.to_string())
            .collect()
    };
    let mut concurrent_pairs = 0;
    for (i, a) in batches.iter().enumerate() {
        for b in &batches[i + 1..] {
            let overlap = a.0 < b.1 && b.0 < a.1;
            if overlap {
                concurrent_pairs += 1;
                assert!(
                    keys(a).is_disjoint(&keys(b)),
                    "a key in two concurrent batches: {a:?} {b:?}"
                );
            }
        }
    }
    assert!(
        concurrent_pairs > 0,
        "parallelization factor 4 ran batches concurrently"
    );

    // A JSON response that is not a batch response fails the whole batch: delivered,
    // retried once, then given up.
    wait_until(
        "the bad response to be given up",
        Duration::from_secs(20),
        || stack.log("stream-failures.log").contains("badresp-1"),
    )
    .await;
    assert_eq!(stream_batches(&stack, "bad").len(), 2);
    let failure: Value = serde_json::from_str(
        stack
            .log("stream-failures.log")
            .lines()
            .find(|l| l.contains("badresp-1"))
            .unwrap(),
    )
    .unwrap();
    assert!(
        failure["reason"]
            .as_str()
            .unwrap()
            .contains("not a batch response object"),
        "{failure}"
    );
    stack.stop().await;
}

#[tokio::test]
async fn stream_faults_split_delay_and_duplicate_with_moto() {
    let (_moto, endpoint, _log) =
        start_moto("stream_faults_split_delay_and_duplicate_with_moto").await;
    let ddb = dynamodb_client(&endpoint);
    use aws_sdk_dynamodb::types::AttributeValue;
    create_table(&ddb, "f").await;
    for i in 1..=4 {
        ddb.put_item()
            .table_name("f")
            .item("pk", AttributeValue::S(format!("r{i}")))
            .item("sk", AttributeValue::S("x".into()))
            .send()
            .await
            .unwrap();
    }
    let stack = Stack::start_full(
        json!([{"name": "sink", "timeout_secs": 10}]),
        json!([{"table": "f", "function": "sink", "dynamodb_endpoint": endpoint,
                "batch_size": 10, "poll_interval_ms": 100, "starting_position": "TRIM_HORIZON"}]),
        plan(json!({
            "streams.split_batch": 1,
            "streams.delay_record": {"ms": 300},
            "streams.duplicate_record": 1
        })),
    )
    .await;
    wait_until("the duplicates", Duration::from_secs(20), || {
        stream_batches(&stack, "sink")
            .iter()
            .filter(|b| b.1 != u64::MAX)
            .count()
            == 4
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let batches: Vec<Vec<String>> = stream_batches(&stack, "sink")
        .into_iter()
        .map(|b| b.2)
        .collect();
    // The batch of 4 is split in two; each record comes again, once, in a later batch
    // (the copies form a batch of their own, split again; copies are not copied).
    assert_eq!(
        batches,
        [
            vec!["r1/x", "r2/x"],
            vec!["r3/x", "r4/x"],
            vec!["r1/x", "r2/x"],
            vec!["r3/x", "r4/x"],
        ]
    );
    let injected = stack.injected();
    assert_eq!(injected["streams.split_batch"], 2, "{injected:?}");
    assert_eq!(injected["streams.delay_record"], 2, "{injected:?}");
    assert_eq!(injected["streams.duplicate_record"], 4, "{injected:?}");
    stack.stop().await;
}
