//! `lambdafusion-local serve --config <file.json>`: runs the Lambda emulator until
//! SIGTERM or SIGINT. See the library documentation for what it serves.
//!
//! `lambdafusion-local config --terraform <module> --local <file.json> --out <file.json>`:
//! writes that config from the deployment's Terraform module and the local settings
//! (see `lambdafusion_local::terraform`).

use clap::{Parser, Subcommand};
use lambdafusion_local::terraform::{self, Address, Request};
use lambdafusion_local::{Config, Emulator};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

const CONFIG_HELP: &str = r#"CONFIG (JSON; optional fields show their defaults):
  {
    "region": "us-east-1", "account": "000000000000",
    "invoke_listen": "127.0.0.1:9001",        Invoke API (AWS_ENDPOINT_URL_LAMBDA); port 0 = free port
    "state_dir": ".state",                    emulator.ready, logs/, tmp/ (relative to the current dir)
    "timing": "aws",                          "aws": async retries after ~1 and 2 min; "fast" (tests): 200 / 400 ms
    "credentials": [{"access_key": "test", "secret_key": "test", "arn": "arn:aws:iam::000000000000:user/test"}],
                                              who may call AWS_IAM function URLs (this is the default)
    "functions": [{
      "name": "lambdafusion-scheduler",       required
      "command": ["target/debug/scheduler-fn"],  required; relative program paths: current dir
      "env": {"K": "V"},                      function environment (host env is not inherited, but PATH)
      "instances": 1,                         processes = concurrency limit
      "timeout_secs": 3,                      longer invocations: process killed, Sandbox.Timedout
      "memory_mb": 128,                       128..=10240; past it (RSS of the process tree): Runtime.OutOfMemory
      "ephemeral_storage_mb": 512,            512..=10240; the size of its own /tmp (TMPDIR = <state_dir>/tmp/<fn>-<n>)
      "max_retry_attempts": 2,                retries of failed Event invocations (0..=2)
      "max_event_age_secs": 21600,            older Event invocations: dropped to on_failure
      "retry_delays_ms": null,                delay before retry 1, 2; default from timing ([60000, 120000] or [200, 400])
      "timing": null,                         "aws" or "fast" for this function only
      "on_failure": null,                     function that receives the on-failure destination record
      "url": null,                            {"listen": "127.0.0.1:9002", "auth": "NONE" | "AWS_IAM",
                                                "integration_timeout_secs": 30}: a function URL (SigV4 checked
                                                with AWS_IAM; 503 after the timeout, as an API Gateway HTTP API)
      "url_listen": null,                     short for "url": {"listen": ...}
      "max_queue": null                       waiting synchronous calls beyond this: 429 (events are always queued)
    }],
    "stream_mappings": [{
      "table": "lambdafusion", "function": "lambdafusion-scheduler",   required
      "dynamodb_endpoint": "http://127.0.0.1:5050",                    required (moto_server)
      "batch_size": 100, "poll_interval_ms": 250,
      "maximum_retry_attempts": 3,            -1 = retry forever; exhausted batches: logs/stream-failures.log
      "bisect_batch_on_function_error": false,  true: a failing batch is halved until one record fails alone
      "starting_position": "LATEST",          or TRIM_HORIZON
      "parallelization_factor": 1,            1..=10 concurrent batches per shard (one partition key: one lane, in order)
      "filters": [ {"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "STAGE#"}]}}}} ]
    }],                                       responses {"batchItemFailures": [...]} are always honoured; a
                                              response that is not JSON or not such a document fails the batch
    "schedules": [{                           scheduled EventBridge rules (the sweep)
      "name": "lambdafusion-sweep",           required; the rule (its ARN is in the event's resources)
      "function": "lambdafusion-scheduler",   required; the target: gets the "Scheduled Event" as an Event
      "expression": "rate(1 minute)",         required; rate(N minute[s]|hour[s]|day[s]); cron(...) only with every_secs
      "every_secs": null,                     the local period instead of the expression's
      "max_event_age_secs": 86400,            retry policy of a refused (429) invocation: 60..=86400
      "max_retry_attempts": 185               0..=185; then the event is dropped (logged)
    }],
    "front": {                                DynamoDB / S3 proxy before moto_server (absent: none)
      "listen": "127.0.0.1:4566",             AWS_ENDPOINT_URL_DYNAMODB / _S3 point here
      "upstream": "http://127.0.0.1:5050",    required (moto_server)
      "latency": "aws",                       "off", or {"dynamodb": {"default_ms": 5, "TransactWriteItems": 10},
                                                "dynamodb_streams": {"default_ms": 5}, "s3": {"first_byte_ms": 25}}
      "throughput": "aws",                    "off", or {"write_units_per_s": 1000, "read_units_per_s": 3000,
                                                "burst_secs": 1}: per-item limits (ProvisionedThroughputExceeded)
      "transaction_conflicts": true           TransactionCanceledException / TransactionConflictException as AWS
    },
    "fault_plan": null                        {"seed": 7, "faults": {...}} or a path; null: $LAMBDAFUSION_FAULTS
  }

FILES:
  <state_dir>/emulator.ready            written when everything listens (JSON: pid, addresses)
  <state_dir>/logs/<function>-<n>.log   output of instance n of a function (appended)
  <state_dir>/logs/stream-failures.log  stream batches given up on (JSON lines)
  <state_dir>/logs/faults.log           crash points the functions injected (LAMBDAFUSION_FAULT_LOG)

FAULTS: GET http://<invoke_listen>/_lambdafusion/faults answers {"seed", "plan", "injected": {name: count}}.

LOGGING: RUST_LOG (default "info") filters the emulator's own log on stderr."#;

/// Docker-free AWS Lambda emulation for lambdafusion's local stack: Runtime API,
/// Invoke API (RequestResponse, Event with retries and on-failure destinations, DryRun),
/// function URLs, DynamoDB stream triggers with event filtering, and a DynamoDB / S3 front
/// before moto_server with AWS's latencies, conflicts, throttling and planned faults.
#[derive(Parser)]
#[command(name = "lambdafusion-local", version, after_long_help = CONFIG_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the emulator until SIGTERM or SIGINT (then kill every function process).
    #[command(after_long_help = CONFIG_HELP)]
    Serve {
        /// The JSON configuration file (see `--help` for its format).
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Write the emulator config from the deployment's Terraform module (each function's
    /// environment, memory, timeout, /tmp, reserved concurrency, async invoke config and
    /// HTTP entry; the DynamoDB stream trigger; the scheduled rules) and a local part (the
    /// config format, with only local settings: endpoints, commands, instances, listen
    /// addresses, front, a schedule's local period).
    #[command(after_long_help = TERRAFORM_HELP)]
    Config {
        /// The Terraform module's directory (every .tf file in it is read).
        #[arg(long)]
        terraform: PathBuf,
        /// The local part: a JSON file in the config format whose functions and stream
        /// mappings hold only local settings.
        #[arg(long)]
        local: PathBuf,
        /// Where to write the config (replaced atomically).
        #[arg(long)]
        out: PathBuf,
        /// A variable of the module, as `terraform plan -var NAME=VALUE` takes it.
        #[arg(long = "var", value_name = "NAME=VALUE")]
        vars: Vec<String>,
        /// The stack's name of a resource, e.g. aws_dynamodb_table.jobs=lambdafusion.
        #[arg(long = "name", value_name = "ADDRESS=NAME")]
        names: Vec<String>,
        /// An environment override: replaces the variable on the functions Terraform sets it
        /// on, or goes to every function when Terraform sets it on none.
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
    },
}

const TERRAFORM_HELP: &str = r#"WHAT COMES FROM WHERE:
  Terraform module   function env (environment.variables, evaluated), memory_size, timeout,
                     ephemeral_storage.size, reserved_concurrent_executions (caps instances),
                     event invoke config (retries, event age, on-failure function; Lambda's
                     defaults without one), function URL auth or HTTP API integration timeout,
                     the DynamoDB stream trigger (batch size, parallelization, bisection,
                     retries, starting position, filter patterns), scheduled EventBridge rules
                     with a Lambda target (schedule expression, retry policy)
  local part         region, account, invoke_listen, state_dir, timing, credentials, front,
                     fault_plan; per function: name, command, instances, local env (endpoints,
                     credentials, RUST_LOG), url.listen, timing, retry_delays_ms, max_queue;
                     per stream mapping: table, function, dynamodb_endpoint, poll_interval_ms;
                     per schedule (naming it by name and / or function): every_secs

A setting the local part gives that Terraform decides is an error, and so is a Terraform
setting the reader does not know, or an expression it cannot evaluate locally (the message
names the resource, the attribute and the reference)."#;

/// `K=V` pairs of repeated flags.
fn pairs(flag: &str, items: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for item in items {
        let Some((k, v)) = item.split_once('=') else {
            return Err(format!("{flag} {item:?}: expected NAME=VALUE"));
        };
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("{flag} {k} given twice"));
        }
    }
    Ok(out)
}

fn write_config(
    terraform_dir: PathBuf,
    local: PathBuf,
    out: PathBuf,
    vars: &[String],
    names: &[String],
    env: &[String],
) -> Result<(), lambdafusion_local::Error> {
    let mut resource_names = BTreeMap::new();
    for (address, name) in pairs("--name", names)? {
        resource_names.insert(address.parse::<Address>()?, name);
    }
    let request = Request {
        module_dir: terraform_dir,
        local,
        vars: pairs("--var", vars)?,
        names: resource_names,
        env: pairs("--env", env)?,
    };
    let (text, summary) = terraform::build(&request)?;
    let tmp = out.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &out).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    println!(
        "config: {} from {} and {}",
        out.display(),
        request.module_dir.display(),
        request.local.display()
    );
    for line in summary {
        println!("config:   {line}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = match cli.command {
        Command::Serve { config } => serve(config).await,
        Command::Config {
            terraform,
            local,
            out,
            vars,
            names,
            env,
        } => write_config(terraform, local, out, &vars, &names, &env),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lambdafusion-local: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config_path: PathBuf) -> Result<(), lambdafusion_local::Error> {
    let config = Config::load(&config_path)?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot install the SIGTERM handler: {e}"))?;
    let emulator = Emulator::start(config).await?;
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
    emulator.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}
