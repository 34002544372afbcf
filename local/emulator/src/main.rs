//! `lambdafusion-local serve --config <file.json>`: runs the Lambda emulator until
//! SIGTERM or SIGINT. See the library documentation for what it serves.

use clap::{Parser, Subcommand};
use lambdafusion_local::{Config, Emulator};
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
    match cli.command {
        Command::Serve { config } => match serve(config).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lambdafusion-local: {e}");
                ExitCode::FAILURE
            }
        },
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
