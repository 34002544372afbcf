//! The local AWS stack (`local/localstack/up` / `down`): moto_server for S3 and DynamoDB
//! with Streams, and the project's Lambda emulator running the real function binaries.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// One stack at a time in a test binary: its stacks share the state directory.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A running local stack; stopped when dropped.
///
/// Each test binary has its own state directory (`local/localstack/.state/test-<binary>`)
/// and takes free ports, so that binaries can run side by side (scripts/test.sh runs the
/// long stack suites beside the others) and never meet the default stack of `up`.
pub struct Stack {
    /// Variables the `up` script exported (`<state>/env`).
    pub env: HashMap<String, String>,
    state: PathBuf,
    _turn: MutexGuard<'static, ()>,
}

/// This test binary's stack state directory: `local/localstack/.state/test-<binary>`, the
/// binary's name without cargo's hash.
fn test_state_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let stem = exe
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "stack".to_string());
    let name = match stem.rsplit_once('-') {
        Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
        _ => stem,
    };
    repo_root().join(format!("local/localstack/.state/test-{name}"))
}

/// Four ports free on 127.0.0.1 now (held together while chosen, so they differ).
fn free_ports() -> [u16; 4] {
    let listeners: Vec<std::net::TcpListener> = (0..4)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    let port = |i: usize| listeners[i].local_addr().expect("local address").port();
    [port(0), port(1), port(2), port(3)]
}

/// Runs `local/localstack/down` on the state directory `state`.
fn down(state: &Path) {
    let root = repo_root();
    let _ = Command::new(root.join("local/localstack/down"))
        .current_dir(&root)
        .env("STATE_DIR", state)
        .output();
}

impl Stack {
    /// The last `lines` lines of each of the stack's logs whose name starts with
    /// `prefix` (`stream-failures`, `lambdafusion-scheduler`, `emulator`), for a failing
    /// test to show what the stack saw.
    pub fn log_tails(&self, prefix: &str, lines: usize) -> String {
        let mut out = String::new();
        let Ok(entries) = std::fs::read_dir(self.state.join("logs")) else {
            return out;
        };
        let mut names: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .collect();
        names.sort();
        for path in names {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            out.push_str(&format!(
                "--- {} ({} lines)\n{}\n",
                path.display(),
                all.len(),
                tail.join("\n")
            ));
        }
        out
    }
    /// Starts the stack with extra variables for the functions (`LAMBDAFUSION_*` pass
    /// through to them). Panics with the script's output when it fails.
    pub fn up(extra: &[(&str, &str)]) -> Stack {
        let turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let root = repo_root();
        let state = test_state_dir();
        // A stack left over by an interrupted run of this binary would still be running.
        down(&state);
        // Logs of an earlier stack would mix into this one's.
        let _ = std::fs::remove_dir_all(state.join("logs"));
        for binary in ["scheduler-fn", "executor-fn", "lambdafusion-local"] {
            assert!(
                root.join("target/debug").join(binary).exists(),
                "target/debug/{binary} is missing: build the functions and the emulator first with \
                 `cargo build -p scheduler-fn -p executor-fn -p lambdafusion-local` (scripts/test.sh does)"
            );
        }
        let mut command = Command::new(root.join("local/localstack/up"));
        // Never a cargo build inside a running cargo test: it would wait on cargo's lock.
        command.current_dir(&root).env("SKIP_BUILD", "1");
        // Lambda's async retries after 200 / 400 ms instead of AWS's minutes, so that a
        // test sees a crashed invocation retried in seconds (a test may ask for "aws").
        command.env("LAMBDA_TIMING", "fast");
        let [moto, invoke, url, front] = free_ports();
        command
            .env("STATE_DIR", &state)
            .env("MOTO_PORT", moto.to_string())
            .env("INVOKE_PORT", invoke.to_string())
            .env("URL_PORT", url.to_string())
            .env("FRONT_PORT", front.to_string());
        for (k, v) in extra {
            command.env(k, v);
        }
        let out = command.output().expect("run local/localstack/up");
        assert!(
            out.status.success(),
            "local/localstack/up failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let env_file = state.join("env");
        let text = std::fs::read_to_string(&env_file)
            .unwrap_or_else(|e| panic!("{}: {e}", env_file.display()));
        let env = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.trim_matches(|c| c == '"' || c == '\'').to_string(),
                )
            })
            .collect();
        Stack {
            env,
            state,
            _turn: turn,
        }
    }

    /// A variable of the stack's environment.
    pub fn var(&self, name: &str) -> String {
        self.env
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing from {}/env", self.state.display()))
    }

    /// The HTTP endpoint of the API (the emulated function URL).
    pub fn endpoint(&self) -> String {
        self.var("LAMBDAFUSION_ENDPOINT")
    }

    /// The state directory (logs, emulator config).
    pub fn state_dir(&self) -> PathBuf {
        self.state.clone()
    }

    /// The emulator's fault-plan endpoint: GET reports the faults injected so far, PUT
    /// swaps the plan while the stack runs (see [`set_fault_plan`], [`fault_report`]).
    pub fn faults_url(&self) -> String {
        format!(
            "{}/_lambdafusion/faults",
            self.var("AWS_ENDPOINT_URL_LAMBDA")
        )
    }

    /// moto_server's resident memory now, in MiB (from /proc).
    pub fn moto_rss_mb(&self) -> f64 {
        let pid =
            std::fs::read_to_string(self.state_dir().join("moto.pid")).expect("<state>/moto.pid");
        let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim()))
            .expect("moto_server is running");
        let kb: f64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .expect("VmRSS in /proc/<pid>/status");
        kb / 1024.0
    }

    /// SDK configuration for a service whose endpoint is in `var`.
    pub async fn sdk(&self, var: &str) -> SdkConfig {
        let credentials =
            aws_sdk_dynamodb::config::Credentials::new("test", "test", None, None, "local");
        aws_config::defaults(BehaviorVersion::latest())
            .http_client(lambdafusion_aws::clients::http_client())
            .region(Region::new("us-east-1"))
            .endpoint_url(self.var(var))
            .credentials_provider(credentials)
            .load()
            .await
    }

    /// The bucket as an object store.
    pub fn s3(&self) -> Arc<dyn ObjectStore> {
        Arc::new(
            AmazonS3Builder::new()
                .with_bucket_name(self.var("LAMBDAFUSION_BUCKET"))
                .with_endpoint(self.var("AWS_ENDPOINT_URL_S3"))
                .with_allow_http(true)
                .with_virtual_hosted_style_request(false)
                .with_region("us-east-1")
                .with_access_key_id("test")
                .with_secret_access_key("test")
                .build()
                .expect("S3 client"),
        )
    }

    /// The requests of the functions that their roles' IAM refused so far (the
    /// emulator's log lines saying "is not authorized to perform").
    pub fn access_denied(&self) -> Vec<String> {
        std::fs::read_to_string(self.state_dir().join("logs/emulator.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("is not authorized to perform"))
            .map(str::to_string)
            .collect()
    }

    /// Lines of the executor functions' logs.
    pub fn executor_log_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Ok(entries) = std::fs::read_dir(self.state_dir().join("logs")) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if name.contains("executor") {
                    if let Ok(text) = std::fs::read_to_string(e.path()) {
                        lines.extend(text.lines().map(str::to_string));
                    }
                }
            }
        }
        lines
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        down(&self.state);
    }
}

/// Swaps the running stack's fault plan (`{"seed": .., "faults": {..}}`) at `faults_url`
/// ([`Stack::faults_url`]).
pub async fn set_fault_plan(faults_url: &str, plan: &serde_json::Value) {
    let response = reqwest::Client::new()
        .put(faults_url)
        .body(plan.to_string())
        .send()
        .await
        .expect("the emulator's fault endpoint answers");
    assert!(
        response.status().is_success(),
        "{:?}",
        response.text().await
    );
}

/// The emulator's report of the faults injected so far (`{"injected": {kind: n}, ..}`).
pub async fn fault_report(faults_url: &str) -> serde_json::Value {
    reqwest::get(faults_url)
        .await
        .expect("the emulator's fault endpoint answers")
        .json()
        .await
        .expect("a JSON fault report")
}
