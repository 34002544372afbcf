//! `lambdafusion-local`: a small, Docker-free emulation of AWS Lambda for the local AWS
//! stack (moto_server provides S3, DynamoDB and DynamoDB Streams; this provides Lambda).
//!
//! What it serves, all on 127.0.0.1:
//!
//! * the **Lambda Runtime API** for each execution environment: every function runs
//!   `instances` OS processes of its `command` — the real release binaries with the
//!   real `lambda_runtime` loop — each handling one invocation at a time
//!   ([`instance`]);
//!   with Lambda's limits: memory (`Runtime.OutOfMemory`), a `/tmp` of its own with
//!   `ephemeral_storage_mb`, the timeout ([`instance`], [`limits`]);
//! * the **Invoke API** that `aws-sdk-lambda` calls, with `RequestResponse`, `Event`
//!   (202, always queued, retried, on-failure destination) and `DryRun`
//!   ([`invoke_api`], [`function`]);
//! * **function URLs** (payload format 2.0) for functions with `url` / `url_listen`,
//!   optionally with `AWS_IAM` auth (SigV4 verified, [`sigv4`]) and an API Gateway
//!   style integration timeout ([`function_url`]);
//! * **DynamoDB stream triggers** with Lambda event filtering, partial batch
//!   responses and a parallelization factor ([`streams`], [`filter`]);
//! * **schedules**: scheduled EventBridge rules that send their function the scheduled
//!   event asynchronously every period, with the target's retry policy ([`schedule`]);
//! * the **Lambda and stream faults** of the fault plan, with stable decision keys
//!   ([`injection`]);
//! * the **DynamoDB / S3 front** (`front`): a proxy before moto_server that adds AWS's
//!   latencies, transaction conflicts, per-item throughput limits and the planned
//!   DynamoDB and S3 faults ([`front`]);
//! * `GET /_lambdafusion/faults` on the Invoke API listener: the fault plan and every
//!   fault injected so far ([`faults`]).
//!
//! # Configuration
//!
//! `lambdafusion-local serve --config emulator.json`, where the file holds (defaults
//! shown for optional fields in comments):
//!
//! ```json
//! {
//!   "region": "us-east-1",                       // default us-east-1
//!   "account": "000000000000",                   // default 000000000000
//!   "invoke_listen": "127.0.0.1:9001",           // Invoke API; port 0 = any free port
//!   "state_dir": "local/localstack/.state",      // emulator.ready, logs/, tmp/; default .state
//!   "timing": "aws",                             // or "fast" (tests): retry delays, see below
//!   "credentials": [{"access_key": "test", "secret_key": "test",   // for AWS_IAM URLs;
//!                    "arn": "arn:aws:iam::000000000000:user/test"}], // this is the default
//!   "functions": [
//!     {"name": "lambdafusion-scheduler",
//!      "command": ["target/debug/scheduler-fn"], // relative paths: against the current dir
//!      "env": {"K": "V"},                        // the only inherited host variable is PATH
//!      "instances": 2,                           // processes = concurrency; default 1
//!      "timeout_secs": 60,                       // default 3, as in AWS
//!      "memory_mb": 1024,                        // enforced (Runtime.OutOfMemory); default 128
//!      "ephemeral_storage_mb": 512,              // size of its /tmp (TMPDIR); default 512
//!      "max_retry_attempts": 2,                  // async retries 0..=2; default 2
//!      "max_event_age_secs": 21600,              // default 21600
//!      "retry_delays_ms": [60000, 120000],       // default by timing: aws [60000, 120000],
//!                                                //   fast [200, 400]
//!      "timing": null,                           // overrides the top-level timing
//!      "on_failure": null,                       // function receiving failed async events
//!      "url": {"listen": "127.0.0.1:9002",       // function URL; default none
//!              "auth": "NONE",                   //   or AWS_IAM (SigV4, `credentials`)
//!              "integration_timeout_secs": 30},  //   503 after it, as an HTTP API; default none
//!                                                // ("url_listen": "host:port" = {"listen": ..})
//!      "max_queue": null}                        // waiting sync calls; beyond: 429; default none
//!   ],
//!   "stream_mappings": [
//!     {"table": "lambdafusion", "function": "lambdafusion-scheduler",
//!      "dynamodb_endpoint": "http://127.0.0.1:5050",
//!      "batch_size": 100,                        // default 100
//!      "poll_interval_ms": 250,                  // default 250
//!      "maximum_retry_attempts": 3,              // default 3; -1 = forever (the AWS default)
//!      "bisect_batch_on_function_error": false,  // default false
//!      "starting_position": "LATEST",            // or TRIM_HORIZON; default LATEST
//!      "parallelization_factor": 1,              // concurrent batches per shard, 1..=10
//!      "filters": [{"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "STAGE#"}]}}}}]}
//!   ],
//!   "schedules": [
//!     {"name": "lambdafusion-sweep",             // the rule: its ARN is in the event
//!      "function": "lambdafusion-scheduler",     // the target, invoked as an Event
//!      "expression": "rate(1 minute)",           // rate(N minute[s]|hour[s]|day[s])
//!      "every_secs": null,                       // the local period instead; default none
//!      "max_event_age_secs": 86400,              // retry policy: 60..=86400, default 86400
//!      "max_retry_attempts": 185}                // 0..=185, default 185
//!   ],
//!   "front": {"listen": "127.0.0.1:4566",        // default 127.0.0.1:4566
//!             "upstream": "http://127.0.0.1:5050",  // moto_server; required
//!             "latency": "aws",                  // or "off", or per service/operation
//!             "throughput": "aws",               // or "off", or {"write_units_per_s": ..}
//!             "transaction_conflicts": true},    // see front::config for all of it
//!   "fault_plan": {"seed": 7, "faults": {"s3.slow_down": 0.1}}
//!                                                // default: $LAMBDAFUSION_FAULTS, or none
//! }
//! ```
//!
//! (The file itself is plain JSON: no comments.) When everything listens, the emulator
//! writes `<state_dir>/emulator.ready` (JSON with its pid and addresses); function
//! output goes to `<state_dir>/logs/<function>-<n>.log`, batches a stream trigger gave
//! up on to `<state_dir>/logs/stream-failures.log`.

pub mod cloudwatch_logs;
pub mod config;
pub mod faults;
pub mod filter;
pub mod front;
pub mod function;
pub mod function_url;
pub mod iam;
pub mod injection;
pub mod instance;
pub mod invoke_api;
pub mod limits;
pub mod schedule;
pub mod sigv4;
pub mod streams;
pub mod terraform;
pub mod time;

use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

pub use config::Config;
pub use faults::Faults;
pub use function::{Outcome, Registry};

/// Errors of this crate: a message saying what failed and where.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// How long start-up waits for the functions' runtimes to ask for their first event and
/// for the stream triggers to take their iterators, before reporting ready anyway.
const WARM_UP_LIMIT: Duration = Duration::from_secs(10);

/// A running emulator.
pub struct Emulator {
    /// Address of the Invoke API.
    pub invoke_addr: SocketAddr,
    /// Function URL addresses, by function name.
    pub function_urls: BTreeMap<String, SocketAddr>,
    /// Address of the DynamoDB / S3 front, when the config has one.
    pub front_addr: Option<SocketAddr>,
    /// The ready file written at start-up (removed at shutdown).
    pub ready_file: PathBuf,
    registry: Arc<Registry>,
    faults: Arc<Faults>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

async fn bind(addr: &str, what: &str) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} ({what}): {e}").into())
}

fn serve(
    listener: TcpListener,
    router: axum::Router,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        let stop = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, service)
            .with_graceful_shutdown(stop)
            .await
        {
            warn!("server stopped: {e}");
        }
    })
}

impl Emulator {
    /// Binds every listener, starts every execution environment, stream trigger and schedule,
    /// waits (up to 10 s) for the runtimes to be ready, then writes the ready file.
    pub async fn start(mut config: Config) -> Result<Emulator, Error> {
        let logs = config.state_dir.join("logs");
        std::fs::create_dir_all(&logs)
            .map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
        let ready_file = config.state_dir.join("emulator.ready");
        let _ = std::fs::remove_file(&ready_file);

        // The one fault plan and the one set of counters of this emulator.
        let plan = faults::load_plan(config.fault_plan.as_ref())
            .map_err(|e| format!("fault plan: {e}"))?;
        let fault_log = logs.join("faults.log");
        // The plan lives in a file the functions watch (so a test can swap it while the
        // stack runs), and they log their crash points where the report
        // (GET /_lambdafusion/faults) finds them.
        let plan_file = config.state_dir.join("faults.json");
        let plan = lambdafusion_faults::LivePlan::in_file(plan, &plan_file)
            .map_err(|e| format!("fault plan: {e}"))?;
        for f in &mut config.functions {
            f.env
                .entry(lambdafusion_faults::ENV_PLAN.to_string())
                .or_insert_with(|| plan_file.to_string_lossy().into_owned());
            f.env
                .entry(lambdafusion_faults::ENV_LOG.to_string())
                .or_insert_with(|| fault_log.to_string_lossy().into_owned());
        }
        let faults = Arc::new(Faults::new(plan, Some(fault_log)));

        let registry = Arc::new(Registry::with_faults(
            &config,
            faults.plan.clone(),
            faults.counters.clone(),
        ));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();

        let invoke_listener = bind(&config.invoke_listen, "invoke_listen").await?;
        let invoke_addr = invoke_listener.local_addr()?;
        let front = match &config.front {
            Some(front) => Some((front.clone(), bind(&front.listen, "front.listen").await?)),
            None => None,
        };
        let mut url_listeners = Vec::new();
        for f in &config.functions {
            if let Some(addr) = &f.url_listen {
                url_listeners.push((
                    f.name.clone(),
                    bind(addr, &format!("url_listen of {}", f.name)).await?,
                ));
            }
        }

        tasks.push(serve(
            invoke_listener,
            invoke_api::router(registry.clone()).merge(faults::router(faults.clone())),
            shutdown_rx.clone(),
        ));
        // The front first: stream triggers may read DynamoDB Streams through it.
        let mut front_addr = None;
        if let Some((front_config, listener)) = front {
            front_addr = Some(listener.local_addr()?);
            let shared = front::Shared::new(
                front_config,
                &config.region,
                &config.account,
                faults.clone(),
                registry.iam(),
            )?;
            tasks.push(serve(
                listener,
                front::router(Arc::new(shared)),
                shutdown_rx.clone(),
            ));
        }
        let mut function_urls = BTreeMap::new();
        for (name, listener) in url_listeners {
            let target = registry
                .resolve(&name, None)
                .ok_or_else(|| format!("unknown function {name}"))?;
            function_urls.insert(name, listener.local_addr()?);
            tasks.push(serve(
                listener,
                function_url::router(registry.clone(), target),
                shutdown_rx.clone(),
            ));
        }
        for function in registry.functions() {
            for index in 0..function.config.instances {
                tasks.push(instance::spawn(
                    function.clone(),
                    index,
                    &logs,
                    shutdown_rx.clone(),
                ));
            }
        }

        let deadline = tokio::time::Instant::now() + WARM_UP_LIMIT;
        let failures_log = logs.join("stream-failures.log");
        for mapping in &config.stream_mappings {
            let mut poller = streams::StreamPoller::new(
                mapping.clone(),
                registry.clone(),
                failures_log.clone(),
            )?;
            match tokio::time::timeout_at(deadline, poller.init()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    warn!(table = %mapping.table, "stream trigger not ready yet (will keep trying): {e}")
                }
                Err(_) => {
                    warn!(table = %mapping.table, "stream trigger not ready yet (will keep trying): timed out")
                }
            }
            tasks.push(tokio::spawn(poller.run(shutdown_rx.clone())));
        }
        for s in &config.schedules {
            tasks.push(schedule::spawn(
                s.clone(),
                registry.clone(),
                config.timing,
                shutdown_rx.clone(),
            )?);
        }

        // Let each runtime reach its first `next` call, so the first invocations do not
        // pay for process start-up (and broken commands show up in the log right away).
        loop {
            let cold: Vec<&str> = registry
                .functions()
                .filter(|f| f.warm_instances.load(Ordering::SeqCst) < f.config.instances)
                .map(|f| f.name())
                .collect();
            if cold.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                warn!("not every instance of {cold:?} asked for an event within {WARM_UP_LIMIT:?}; see their logs");
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let emulator = Emulator {
            invoke_addr,
            function_urls,
            front_addr,
            ready_file,
            registry,
            faults,
            shutdown,
            tasks,
        };
        emulator.write_ready_file(&config)?;
        info!(invoke = %emulator.invoke_addr, urls = ?emulator.function_urls, front = ?emulator.front_addr, "lambdafusion-local ready");
        Ok(emulator)
    }

    fn write_ready_file(&self, config: &Config) -> Result<(), Error> {
        let functions: BTreeMap<&str, serde_json::Value> = self
            .registry
            .functions()
            .map(|f| {
                let url = self
                    .function_urls
                    .get(f.name())
                    .map(|a| format!("http://{a}"));
                (
                    f.name(),
                    json!({"arn": f.arn, "instances": f.config.instances, "url": url}),
                )
            })
            .collect();
        let doc = json!({
            "pid": std::process::id(),
            "invoke": self.invoke_addr.to_string(),
            "invoke_endpoint": format!("http://{}", self.invoke_addr),
            "function_urls": self.function_urls.iter().map(|(k, v)| (k.clone(), v.to_string())).collect::<BTreeMap<_, _>>(),
            "functions": functions,
            "front": self.front_addr.map(|a| a.to_string()),
            "front_endpoint": self.front_addr.map(|a| format!("http://{a}")),
            "faults": format!("http://{}{}", self.invoke_addr, faults::REPORT_PATH),
            "stream_mappings": config.stream_mappings.iter().map(|m| json!({"table": m.table, "function": m.function})).collect::<Vec<_>>(),
            "schedules": config.schedules.iter().map(|s| json!({"name": s.name, "function": s.function, "expression": s.expression, "every_secs": s.every_secs})).collect::<Vec<_>>(),
        });
        let tmp = self.ready_file.with_extension("ready.tmp");
        std::fs::write(&tmp, format!("{doc:#}\n"))
            .and_then(|()| std::fs::rename(&tmp, &self.ready_file))
            .map_err(|e| format!("cannot write {}: {e}", self.ready_file.display()).into())
    }

    /// The functions and their queues.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The fault plan, the counters of injected faults and the behaviours the front
    /// reproduced (what `GET /_lambdafusion/faults` reports).
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// Stops listening, kills every function process, waits for all of it (10 s at
    /// most) and removes the ready file.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        // Invocations still queued will not run: dropping them answers their callers
        // (a waiting Invoke request gets an error), which lets the servers finish.
        let registry = self.registry.clone();
        let drain = async move {
            loop {
                for f in registry.functions() {
                    f.drain();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let all = futures::future::join_all(self.tasks);
        let stopped = tokio::select! {
            _ = all => true,
            _ = drain => false,
            _ = tokio::time::sleep(Duration::from_secs(10)) => false,
        };
        if !stopped {
            warn!("some tasks did not stop within 10 s");
        }
        let _ = std::fs::remove_file(&self.ready_file);
    }
}
