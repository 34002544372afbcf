//! Execution environments: each is one OS process of a function plus the Lambda Runtime
//! API that process talks to.
//!
//! Like a real execution environment, a process handles one invocation at a time: the
//! supervisor hands out an invocation only when the runtime is waiting in
//! `GET /2018-06-01/runtime/invocation/next`, and the next one only after the runtime
//! posted `.../response` or `.../error`. A process that exits mid-invocation fails that
//! invocation with `Runtime.ExitError`; one that runs past `timeout_secs` is killed and
//! the invocation fails with `Sandbox.Timedout`. Either way a fresh process replaces it.
//!
//! Limits, as Lambda enforces them
//! (<https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html>):
//!
//! * **Memory.** During an invocation the resident memory of the process and its
//!   descendants is sampled every 50 ms (and once more when the response arrives);
//!   past `memory_mb` the processes are killed and the invocation fails with
//!   `Runtime.OutOfMemory`, "Runtime exited with error: signal: killed", as AWS reports
//!   an out-of-memory kill. The REPORT line gives the peak as `Max Memory Used`.
//! * **`/tmp`.** Each environment has its own directory, `<state_dir>/tmp/<function>-<n>`,
//!   passed as `TMPDIR`, emptied whenever a new process starts there (a replaced
//!   environment starts with an empty `/tmp`, a warm one keeps its files between
//!   invocations). Its size is sampled like memory; past `ephemeral_storage_mb` the
//!   invocation fails (`Sandbox.EphemeralStorageExceeded`) and the environment is
//!   replaced. (AWS instead fails the write with `ENOSPC` and lets the function decide.)
//!
//! `lambda.cold_start` (fault plan): an invocation marked for a cold start makes its
//! environment kill the warm process, wait the fault's `ms`, and start a new one, which
//! then runs the invocation (REPORT shows `Init Duration`).
//!
//! Every process gets its own Runtime API listener on an ephemeral 127.0.0.1 port
//! (`AWS_LAMBDA_RUNTIME_API`), so requests can never be mistaken for another process's,
//! not even those of a process that just died.

use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use lambdafusion_faults::FaultKind;
use serde_json::json;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use crate::function::{Function, Invocation, Outcome, Slot, MAX_SYNC_PAYLOAD};
use crate::{limits, time};

/// How often memory and `/tmp` are measured during an invocation.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);
const MIB: u64 = 1024 * 1024;

/// Starts execution environment number `index` (0-based) of `function`. Its process
/// output is appended to `<logs_dir>/<function>-<index>.log`. The task ends, killing the
/// process, when `shutdown` becomes true.
pub fn spawn(
    function: Arc<Function>,
    index: usize,
    logs_dir: &Path,
    shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let log_path = logs_dir.join(format!("{}-{index}.log", function.name()));
    let tmp_dir = function.tmp_dir(index);
    let env = Environment {
        function,
        index,
        log_path,
        tmp_dir,
        shutdown,
        warm: false,
        ship: None,
    };
    tokio::spawn(env.run())
}

/// What the Runtime API handlers tell the supervisor.
enum RuntimeMsg {
    /// `GET /invocation/next`: hand the next event to this sender.
    Next(oneshot::Sender<NextEvent>),
    /// `POST /invocation/{id}/response`.
    Response {
        request_id: String,
        body: Option<Bytes>,
        streaming: bool,
        ack: oneshot::Sender<Ack>,
    },
    /// `POST /invocation/{id}/error`.
    Error {
        request_id: String,
        error_type: Option<String>,
        body: Bytes,
        ack: oneshot::Sender<Ack>,
    },
    /// `POST /init/error`.
    InitError {
        error_type: Option<String>,
        body: Bytes,
    },
}

/// An event as the runtime receives it.
struct NextEvent {
    request_id: String,
    payload: Bytes,
    deadline_ms: u64,
    invoked_arn: String,
    trace_id: String,
    client_context: Option<String>,
}

/// The supervisor's answer to a posted result.
enum Ack {
    Accepted,
    UnknownRequest,
    TooLarge,
}

/// The invocation a process is working on.
struct Running {
    request_id: String,
    reply: oneshot::Sender<Outcome>,
    started: Instant,
    deadline: Instant,
    /// Peak resident memory of the process tree seen so far.
    max_rss: u64,
    /// The process's start-up time, reported on its first invocation.
    init: Option<Duration>,
    /// The function's concurrency place, held until the invocation ends.
    _slot: Option<Slot>,
}

/// How a process's life ended.
enum End {
    Exited,
    Shutdown,
    /// `lambda.cold_start`: the warm process was stopped so that this invocation runs
    /// on a new one, started after the delay.
    ColdStart(Box<Invocation>, Duration),
}

struct Environment {
    function: Arc<Function>,
    index: usize,
    log_path: PathBuf,
    /// This environment's `/tmp` (`TMPDIR`).
    tmp_dir: PathBuf,
    shutdown: watch::Receiver<bool>,
    /// Whether this environment already counted itself in `Function::warm_instances`.
    warm: bool,
    /// The current process's CloudWatch Logs stream, when the function ships its logs.
    ship: Option<tokio::sync::mpsc::UnboundedSender<String>>,
}

impl Environment {
    async fn run(mut self) {
        let mut quick_exits: u32 = 0;
        let mut first: Option<Invocation> = None;
        loop {
            if *self.shutdown.borrow() {
                break;
            }
            let started = Instant::now();
            match self.run_process(first.take()).await {
                End::Shutdown => break,
                End::ColdStart(inv, delay) => {
                    let mut shutdown = self.shutdown.clone();
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = stopped(&mut shutdown) => break,
                    }
                    first = Some(*inv);
                    continue;
                }
                End::Exited => {}
            }
            // Restart at once after a process that ran a while; back off on crash loops.
            quick_exits = if started.elapsed() < Duration::from_secs(1) {
                quick_exits + 1
            } else {
                0
            };
            if quick_exits > 0 {
                let delay = Duration::from_millis(100 * 2u64.pow(quick_exits.min(6) - 1))
                    .min(Duration::from_secs(5));
                let mut shutdown = self.shutdown.clone();
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stopped(&mut shutdown) => break,
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.tmp_dir);
    }

    /// Gives the next process an empty `/tmp`.
    fn fresh_tmp(&self) {
        let _ = std::fs::remove_dir_all(&self.tmp_dir);
        if let Err(e) = std::fs::create_dir_all(&self.tmp_dir) {
            warn!(function = %self.function.name(), "cannot create {}: {e}", self.tmp_dir.display());
        }
    }

    /// Runs one process from spawn to exit, serving its Runtime API. `first`, if given,
    /// is the invocation the process runs before any other (a cold start's).
    ///
    /// It is long because it is one `select!` loop over the process's life: one arm per
    /// event (exit, Runtime API message, next invocation, limit sample, deadline), all
    /// sharing the loop's state; the work of each arm is in the methods it calls.
    async fn run_process(&mut self, mut first: Option<Invocation>) -> End {
        let name = self.function.name().to_string();
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => {
                error!(function = %name, "cannot bind a Runtime API listener: {e}");
                if let Some(inv) = first.take() {
                    self.function.requeue_front(inv);
                }
                return End::Exited;
            }
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => {
                error!(function = %name, "Runtime API listener has no address: {e}");
                if let Some(inv) = first.take() {
                    self.function.requeue_front(inv);
                }
                return End::Exited;
            }
        };
        let (tx, mut rx) = mpsc::channel::<RuntimeMsg>(16);
        let _server = AbortOnDrop(tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, runtime_router(tx)).await {
                error!("Runtime API server failed: {e}");
            }
        }));
        self.fresh_tmp();
        let spawned_at = Instant::now();
        let mut child = match self.spawn_process(addr) {
            Ok(c) => c,
            Err(e) => {
                error!(function = %name, instance = self.index, "cannot start {:?}: {e}", self.function.config.command);
                // Like Lambda, fail an invocation rather than leave callers waiting forever.
                if let Some(inv) = first.take().or_else(|| self.function.try_take()) {
                    let msg = format!(
                        "RequestId: {} Error: cannot start the function: {e}",
                        inv.request_id
                    );
                    let _ = inv
                        .reply
                        .send(Outcome::error("Runtime.InvalidEntrypoint", &msg));
                }
                return End::Exited;
            }
        };
        let pid = child.id().unwrap_or(0);
        debug!(function = %name, instance = self.index, pid, runtime_api = %addr, "process started");

        let mut shutdown = self.shutdown.clone();
        let mut polled = false;
        let mut init: Option<Duration> = None;
        let mut init_error: Option<Outcome> = None;
        let mut waiting: Option<oneshot::Sender<NextEvent>> = None;
        let mut current: Option<Running> = None;
        let timeout = Duration::from_secs(self.function.config.timeout_secs);
        let mut sampler = tokio::time::interval(SAMPLE_EVERY);
        sampler.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        loop {
            let deadline = current.as_ref().map(|c| c.deadline);
            tokio::select! {
                _ = stopped(&mut shutdown) => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    return End::Shutdown;
                }
                status = child.wait() => {
                    let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                    if let Some(run) = current.take() {
                        warn!(function = %name, instance = self.index, pid, request_id = %run.request_id,
                            "process exited during an invocation ({status})");
                        let msg = format!("RequestId: {} Error: Runtime exited with error: {status}", run.request_id);
                        self.finish(run, Outcome::error("Runtime.ExitError", &msg));
                    } else if !polled {
                        warn!(function = %name, instance = self.index, pid, "process exited during init ({status})");
                        if let Some(inv) = first.take().or_else(|| self.function.try_take()) {
                            let outcome = init_error.take().unwrap_or_else(|| {
                                let msg = format!("RequestId: {} Error: Runtime exited without providing a reason: {status}", inv.request_id);
                                Outcome::error("Runtime.ExitError", &msg)
                            });
                            let _ = inv.reply.send(outcome);
                        }
                    } else {
                        info!(function = %name, instance = self.index, pid, "process exited ({status}); restarting");
                    }
                    return End::Exited;
                }
                msg = rx.recv() => match msg {
                    Some(RuntimeMsg::Next(reply_to)) => {
                        if !polled {
                            polled = true;
                            init = Some(spawned_at.elapsed());
                        }
                        if !self.warm {
                            self.warm = true;
                            self.function.warm_instances.fetch_add(1, Ordering::SeqCst);
                        }
                        if let Some(run) = current.take() {
                            let msg = format!("RequestId: {} Error: the runtime asked for the next event without answering this one", run.request_id);
                            self.finish(run, Outcome::error("Runtime.InvalidState", &msg));
                        }
                        match first.take() {
                            Some(inv) => current = self.dispatch(inv, reply_to, timeout, init.take()),
                            None => waiting = Some(reply_to),
                        }
                    }
                    Some(RuntimeMsg::Response { request_id, body, streaming, ack }) => {
                        let Some(mut run) = current.take_if(|run| run.request_id == request_id) else {
                            let _ = ack.send(Ack::UnknownRequest);
                            continue;
                        };
                        let Some(body) = body else {
                            let msg = format!("Response payload size exceeded maximum allowed payload size ({MAX_SYNC_PAYLOAD} bytes).");
                            self.finish(run, Outcome::error("Function.ResponseSizeTooLarge", &msg));
                            let _ = ack.send(Ack::TooLarge);
                            continue;
                        };
                        // What the last samples may have missed: the limits hold at the end too.
                        if let Some(outcome) = self.over_limits(pid, &mut run) {
                            let _ = ack.send(Ack::Accepted);
                            let _ = child.start_kill();
                            let _ = child.wait().await;
                            self.finish(run, outcome);
                            return End::Exited;
                        }
                        self.finish(run, Outcome::Success { body, streaming });
                        let _ = ack.send(Ack::Accepted);
                    }
                    Some(RuntimeMsg::Error { request_id, error_type, body, ack }) => {
                        let answer = match current.take() {
                            Some(mut run) if run.request_id == request_id => {
                                if let Some(rss) = limits::tree_rss_bytes(pid) {
                                    run.max_rss = run.max_rss.max(rss);
                                }
                                self.finish(run, error_outcome(error_type, body));
                                Ack::Accepted
                            }
                            other => {
                                current = other;
                                Ack::UnknownRequest
                            }
                        };
                        let _ = ack.send(answer);
                    }
                    Some(RuntimeMsg::InitError { error_type, body }) => {
                        warn!(function = %name, instance = self.index, pid, "init error: {}", String::from_utf8_lossy(&body));
                        init_error = Some(error_outcome(error_type.or_else(|| Some("Runtime.InitError".into())), body));
                    }
                    None => {
                        error!(function = %name, "Runtime API server stopped; restarting the process");
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                        if let Some(inv) = first.take() {
                            self.function.requeue_front(inv);
                        }
                        return End::Exited;
                    }
                },
                inv = self.function.take(), if waiting.is_some() && current.is_none() && first.is_none() => {
                    let mut inv = inv;
                    if let Some(delay) = inv.cold_start.take() {
                        self.function.injector.record(FaultKind::LambdaColdStart);
                        info!(function = %name, instance = self.index, pid, request_id = %inv.request_id,
                            "fault lambda.cold_start: replacing the process, {delay:?} of start-up");
                        drop(waiting.take());
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                        return End::ColdStart(Box::new(inv), delay);
                    }
                    if let Some(reply_to) = waiting.take() {
                        current = self.dispatch(inv, reply_to, timeout, init.take());
                    }
                }
                _ = sampler.tick(), if current.is_some() => {
                    let over = current.as_mut().and_then(|run| self.over_limits(pid, run));
                    if let Some(outcome) = over {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                        if let Some(run) = current.take() {
                            self.finish(run, outcome);
                        }
                        return End::Exited;
                    }
                }
                _ = sleep_until_opt(deadline), if deadline.is_some() => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    if let Some(run) = current.take() {
                        warn!(function = %name, instance = self.index, pid, request_id = %run.request_id,
                            "invocation timed out after {}s; process killed", timeout.as_secs());
                        let msg = format!("RequestId: {} Error: Task timed out after {}.00 seconds", run.request_id, timeout.as_secs());
                        self.finish(run, Outcome::error("Sandbox.Timedout", &msg));
                    }
                    return End::Exited;
                }
            }
        }
    }

    /// Measures memory and `/tmp`; the failure to report when one is over its limit.
    fn over_limits(&self, pid: u32, run: &mut Running) -> Option<Outcome> {
        let config = &self.function.config;
        let name = self.function.name();
        if let Some(rss) = limits::tree_rss_bytes(pid) {
            run.max_rss = run.max_rss.max(rss);
            if rss > config.memory_mb * MIB {
                warn!(function = %name, instance = self.index, pid, request_id = %run.request_id,
                    "out of memory: {} MB resident, limit {} MB; killing the process", rss / MIB, config.memory_mb);
                let msg = format!(
                    "RequestId: {} Error: Runtime exited with error: signal: killed",
                    run.request_id
                );
                return Some(Outcome::error("Runtime.OutOfMemory", &msg));
            }
        }
        let used = limits::dir_bytes(&self.tmp_dir);
        if used > config.ephemeral_storage_mb * MIB {
            warn!(function = %name, instance = self.index, pid, request_id = %run.request_id,
                "/tmp ({}) holds {} MB, limit {} MB; replacing the environment",
                self.tmp_dir.display(), used / MIB, config.ephemeral_storage_mb);
            let msg = format!(
                "RequestId: {} Error: /tmp holds {} MB, more than the function's ephemeral storage of {} MB \
                 (lambdafusion-local fails the invocation and replaces the environment; AWS fails the write with ENOSPC)",
                run.request_id,
                used.div_ceil(MIB),
                config.ephemeral_storage_mb
            );
            return Some(Outcome::error("Sandbox.EphemeralStorageExceeded", &msg));
        }
        None
    }

    /// Hands an invocation to the waiting runtime; returns it as running, or puts it
    /// back in the queue if the runtime's request is gone.
    fn dispatch(
        &self,
        inv: Invocation,
        reply_to: oneshot::Sender<NextEvent>,
        timeout: Duration,
        init: Option<Duration>,
    ) -> Option<Running> {
        if inv.expires_at.is_some_and(|at| Instant::now() >= at) {
            let _ = inv.reply.send(Outcome::Expired);
            return None;
        }
        let event = NextEvent {
            request_id: inv.request_id.clone(),
            payload: inv.payload.clone(),
            deadline_ms: time::now_ms() + timeout.as_millis() as u64,
            invoked_arn: inv.invoked_arn.clone(),
            trace_id: inv.trace_id.clone(),
            client_context: inv.client_context.clone(),
        };
        if reply_to.send(event).is_err() {
            self.function.requeue_front(inv);
            return None;
        }
        self.log_line(&format!(
            "START RequestId: {} Version: $LATEST",
            inv.request_id
        ));
        let now = Instant::now();
        Some(Running {
            request_id: inv.request_id,
            reply: inv.reply,
            started: now,
            deadline: now + timeout,
            max_rss: 0,
            init,
            _slot: inv.slot,
        })
    }

    /// Delivers an outcome and writes the END / REPORT lines Lambda writes.
    fn finish(&self, run: Running, outcome: Outcome) {
        let ms = run.started.elapsed().as_secs_f64() * 1000.0;
        let status = match &outcome {
            Outcome::Error { error_type, .. } => {
                format!("\tStatus: error\tError Type: {error_type}")
            }
            _ => String::new(),
        };
        let init = run
            .init
            .map(|d| format!("\tInit Duration: {:.2} ms", d.as_secs_f64() * 1000.0))
            .unwrap_or_default();
        self.log_line(&format!(
            "END RequestId: {id}\nREPORT RequestId: {id}\tDuration: {ms:.2} ms\tBilled Duration: {billed} ms\tMemory Size: {mem} MB\tMax Memory Used: {used} MB{init}{status}",
            id = run.request_id,
            billed = ms.ceil() as u64,
            mem = self.function.config.memory_mb,
            used = run.max_rss.div_ceil(MIB),
        ));
        let _ = run.reply.send(outcome);
    }

    fn log_line(&self, line: &str) {
        append_line(&self.log_path, line);
        if let Some(ship) = &self.ship {
            for l in line.lines() {
                let _ = ship.send(l.to_string());
            }
        }
    }

    fn spawn_process(&mut self, runtime_api: SocketAddr) -> std::io::Result<Child> {
        let config = &self.function.config;
        let stream = format!(
            "{}/[$LATEST]{}",
            time::ymd_slashes(time::now_ms()),
            uuid::Uuid::new_v4().simple()
        );
        self.ship = self
            .function
            .logs
            .as_ref()
            .map(|logs| logs.stream(format!("/aws/lambda/{}", config.name), stream.clone()));
        let config = &self.function.config;
        self.log_line(&format!(
            "--- {} lambdafusion-local: starting {} instance {} ({:?})",
            time::rfc3339_ms(time::now_ms()),
            config.name,
            self.index,
            config.command
        ));
        let program = &config.command[0];
        let mut cmd = Command::new(program);
        cmd.args(&config.command[1..]).env_clear();
        cmd.env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
        );
        for (k, v) in lambda_environment(&self.function, Path::new(program), &stream) {
            cmd.env(k, v);
        }
        cmd.envs(&config.env);
        // Lambda's credentials for the execution role (reserved variables: they replace
        // any the configuration sets).
        if let Some(role) = &config.role {
            let c = role.credentials(&config.name);
            cmd.env("AWS_ACCESS_KEY_ID", c.access_key)
                .env("AWS_SECRET_ACCESS_KEY", c.secret_key)
                .env("AWS_SESSION_TOKEN", c.session_token);
        }
        cmd.env("AWS_LAMBDA_RUNTIME_API", runtime_api.to_string());
        // The environment's own /tmp (Rust's std::env::temp_dir and most tools honour it).
        cmd.env("TMPDIR", &self.tmp_dir);
        cmd.stdin(Stdio::null()).kill_on_drop(true);
        let Some(ship) = self.ship.clone() else {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log_path)?;
            cmd.stdout(Stdio::from(log.try_clone()?))
                .stderr(Stdio::from(log));
            return cmd.spawn();
        };
        // Shipped too: each line of either stream to the file and to the log stream.
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let path = self.log_path.clone();
        let out = child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn AsyncRead + Send + Unpin>);
        let err = child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn AsyncRead + Send + Unpin>);
        for pipe in [out, err].into_iter().flatten() {
            let (path, ship) = (path.clone(), ship.clone());
            tokio::spawn(async move {
                let mut lines = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    append_line(&path, &line);
                    let _ = ship.send(line);
                }
            });
        }
        Ok(child)
    }
}

/// The variables Lambda sets in every execution environment (those `lambda_runtime`
/// 1.x requires included), except `AWS_LAMBDA_RUNTIME_API`.
fn lambda_environment(
    function: &Function,
    program: &Path,
    stream: &str,
) -> Vec<(&'static str, String)> {
    let config = &function.config;
    let task_root = program
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let handler = program
        .file_name()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    vec![
        ("AWS_LAMBDA_FUNCTION_NAME", config.name.clone()),
        (
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
            config.memory_mb.to_string(),
        ),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
        (
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/{}", config.name),
        ),
        ("AWS_LAMBDA_LOG_STREAM_NAME", stream.to_string()),
        ("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand".into()),
        ("AWS_REGION", function.region.clone()),
        ("AWS_DEFAULT_REGION", function.region.clone()),
        ("LAMBDA_TASK_ROOT", task_root.clone()),
        ("LAMBDA_RUNTIME_DIR", task_root),
        ("_HANDLER", handler),
        ("TZ", ":UTC".into()),
        ("LANG", "en_US.UTF-8".into()),
    ]
}

/// Appends `line` to the log file at `path` in one write (lines never interleave).
fn append_line(path: &Path, line: &str) {
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        debug!("cannot write {}: {e}", path.display());
    }
}

/// Error outcome from what the runtime posted: the body is the error document; its
/// `errorType` wins over the `Lambda-Runtime-Function-Error-Type` header.
fn error_outcome(header_type: Option<String>, body: Bytes) -> Outcome {
    let parsed = serde_json::from_slice::<serde_json::Value>(&body).ok();
    let body_type = parsed
        .as_ref()
        .and_then(|v| v.get("errorType"))
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let error_type = body_type
        .or(header_type)
        .unwrap_or_else(|| "Unhandled".into());
    match parsed {
        Some(v) if v.is_object() => Outcome::Error { error_type, body },
        _ => Outcome::error(&error_type, &String::from_utf8_lossy(&body)),
    }
}

/// Resolves once `shutdown` is true (or its sender is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

// ---- Runtime API (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html) ----

type RuntimeState = mpsc::Sender<RuntimeMsg>;

fn runtime_router(tx: RuntimeState) -> Router {
    Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
        .route(
            "/2018-06-01/runtime/invocation/{id}/response",
            post(invocation_response),
        )
        .route(
            "/2018-06-01/runtime/invocation/{id}/error",
            post(invocation_error),
        )
        .route("/2018-06-01/runtime/init/error", post(init_error))
        .with_state(tx)
}

fn runtime_api_error(status: StatusCode, error_type: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"errorType": error_type, "errorMessage": message})),
    )
        .into_response()
}

fn ack_response(ack: Result<Ack, oneshot::error::RecvError>) -> Response {
    match ack {
        Ok(Ack::Accepted) => {
            (StatusCode::ACCEPTED, axum::Json(json!({"status": "OK"}))).into_response()
        }
        Ok(Ack::UnknownRequest) => runtime_api_error(
            StatusCode::BAD_REQUEST,
            "InvalidRequestID",
            "no such invocation in progress",
        ),
        Ok(Ack::TooLarge) => runtime_api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            "response payload exceeds the 6 MB limit",
        ),
        Err(_) => runtime_api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ServiceException",
            "environment shut down",
        ),
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn next_invocation(State(tx): State<RuntimeState>) -> Response {
    let (reply_to, event) = oneshot::channel();
    if tx.send(RuntimeMsg::Next(reply_to)).await.is_err() {
        return runtime_api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ServiceException",
            "environment shut down",
        );
    }
    let Ok(event) = event.await else {
        return runtime_api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ServiceException",
            "environment shut down",
        );
    };
    let mut response = (StatusCode::OK, event.payload).into_response();
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    };
    set("content-type", "application/json");
    set("lambda-runtime-aws-request-id", &event.request_id);
    set("lambda-runtime-deadline-ms", &event.deadline_ms.to_string());
    set("lambda-runtime-invoked-function-arn", &event.invoked_arn);
    set("lambda-runtime-trace-id", &event.trace_id);
    if let Some(cc) = &event.client_context {
        set("lambda-runtime-client-context", cc);
    }
    response
}

async fn invocation_response(
    State(tx): State<RuntimeState>,
    UrlPath(request_id): UrlPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let streaming =
        header(&headers, "lambda-runtime-function-response-mode").is_some_and(|m| m == "streaming");
    // Over the limit (or unreadable): the invocation fails with ResponseSizeTooLarge.
    let body = axum::body::to_bytes(body, MAX_SYNC_PAYLOAD).await.ok();
    let (ack, acked) = oneshot::channel();
    let msg = RuntimeMsg::Response {
        request_id,
        body,
        streaming,
        ack,
    };
    if tx.send(msg).await.is_err() {
        return runtime_api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ServiceException",
            "environment shut down",
        );
    }
    ack_response(acked.await)
}

async fn invocation_error(
    State(tx): State<RuntimeState>,
    UrlPath(request_id): UrlPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let error_type = header(&headers, "lambda-runtime-function-error-type");
    let body = axum::body::to_bytes(body, MAX_SYNC_PAYLOAD)
        .await
        .unwrap_or_default();
    let (ack, acked) = oneshot::channel();
    let msg = RuntimeMsg::Error {
        request_id,
        error_type,
        body,
        ack,
    };
    if tx.send(msg).await.is_err() {
        return runtime_api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ServiceException",
            "environment shut down",
        );
    }
    ack_response(acked.await)
}

async fn init_error(State(tx): State<RuntimeState>, headers: HeaderMap, body: Body) -> Response {
    let error_type = header(&headers, "lambda-runtime-function-error-type");
    let body = axum::body::to_bytes(body, MAX_SYNC_PAYLOAD)
        .await
        .unwrap_or_default();
    if tx
        .send(RuntimeMsg::InitError { error_type, body })
        .await
        .is_err()
    {
        return runtime_api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ServiceException",
            "environment shut down",
        );
    }
    (StatusCode::ACCEPTED, axum::Json(json!({"status": "OK"}))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_type_from_body_then_header() {
        match error_outcome(
            Some("unhandled".into()),
            Bytes::from_static(br#"{"errorType":"E","errorMessage":"m"}"#),
        ) {
            Outcome::Error { error_type, .. } => assert_eq!(error_type, "E"),
            other => panic!("{other:?}"),
        }
        match error_outcome(Some("unhandled".into()), Bytes::from_static(b"plain text")) {
            Outcome::Error { error_type, body } => {
                assert_eq!(error_type, "unhandled");
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(v["errorMessage"], "plain text");
            }
            other => panic!("{other:?}"),
        }
    }
}
