//! `lambdafusion`: serverless distributed SQL, run embedded on this machine or against
//! a deployed endpoint. `lambdafusion --help` lists the commands.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use lambdafusion::EngineConfig;
use lambdafusion_cli::error::CliError;
use lambdafusion_cli::session::{split_statements, write_rows, OutputFormat, Session};
use lambdafusion_cli::{bench, client, display, shell, tpch};
use lambdafusion_embedded::{Embedded, EmbeddedOptions};

#[derive(Parser)]
#[command(
    name = "lambdafusion",
    version,
    about = "Serverless distributed SQL on DataFusion"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generates TPC-H data if needed and runs TPC-H Q3 through the whole distributed path.
    Demo(DemoArgs),
    /// Serves the HTTP API with the embedded engine.
    Serve(ServeArgs),
    /// Runs SQL (an argument, a file or standard input), embedded or against --endpoint.
    Query(QueryArgs),
    /// An interactive SQL shell, embedded or against --endpoint.
    Shell(ShellArgs),
    /// The web console for a deployment (or any endpoint): served here on 127.0.0.1,
    /// every API call forwarded signed with your AWS credentials.
    Console(ConsoleArgs),
    /// One query's log lines from a deployment's two functions (CloudWatch Logs), in
    /// time order; needs logs:FilterLogEvents on their log groups.
    Logs(LogsArgs),
    /// A deployment's preflight: reads the account's Lambda concurrency and the two
    /// functions' settings, and says what will and will not work. Exits 1 on a problem.
    Doctor(DoctorArgs),
    /// TPC-H data generation.
    Tpch {
        #[command(subcommand)]
        command: TpchCommand,
    },
    /// Benchmarks against single-process DataFusion.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Args, Clone)]
struct EngineArgs {
    /// Directory for the catalog, job records and shuffle data.
    #[arg(
        long,
        env = "LAMBDAFUSION_DATA_DIR",
        default_value = "lambdafusion-data"
    )]
    data_dir: PathBuf,
    /// Concurrent tasks (the embedded "function slots"); default: 2 per CPU.
    #[arg(long)]
    slots: Option<usize>,
    /// Target input bytes per leaf task.
    #[arg(long, default_value_t = 128 * 1024 * 1024)]
    bytes_per_task: u64,
    /// Most tasks in one stage.
    #[arg(long, default_value_t = 64)]
    max_tasks_per_stage: usize,
    /// A directory tables may be read from, besides the data directory's generated TPC-H
    /// (repeatable; `..` and symlinks are resolved first). The current directory is not
    /// readable unless named (`--allow-path .`).
    #[arg(
        long = "allow-path",
        value_name = "DIR",
        env = "LAMBDAFUSION_ALLOW_PATHS",
        value_delimiter = ','
    )]
    allow_paths: Vec<PathBuf>,
    /// A directory `COPY (...) TO` may write into (repeatable; created if missing; also
    /// readable). Nothing is written anywhere unless named here.
    #[arg(
        long = "allow-write",
        value_name = "DIR",
        env = "LAMBDAFUSION_ALLOW_WRITE",
        value_delimiter = ','
    )]
    allow_write: Vec<PathBuf>,
    /// Task invocations that may wait for a slot (one query at most a quarter of them);
    /// past three quarters of it new queries get 503.
    #[arg(long)]
    max_queued_tasks: Option<usize>,
    /// Memory all slots may use together, in MiB (each task gets an equal share and
    /// spills to the data directory past it); default: half of this machine's memory.
    #[arg(long)]
    memory_limit_mb: Option<usize>,
    /// Longest a query may run, in seconds.
    #[arg(long, default_value_t = 3600)]
    max_query_seconds: u64,
    /// A Glue Data Catalog database whose tables queries may read as
    /// `glue.<database>.<table>` (repeatable). Glue is reached with the AWS SDK's usual
    /// settings (region, credentials; `AWS_ENDPOINT_URL_GLUE` for an emulated Glue); its
    /// tables' locations must still be allowed (`--allow-path`).
    #[arg(
        long = "glue-database",
        value_name = "DB",
        env = "LAMBDAFUSION_GLUE_DATABASES",
        value_delimiter = ','
    )]
    glue_databases: Vec<String>,
    /// The attached Glue database whose tables are also found unqualified (after the
    /// tables created with SQL).
    #[arg(long, value_name = "DB", env = "LAMBDAFUSION_GLUE_DEFAULT_DATABASE")]
    glue_default_database: Option<String>,
    /// Any other engine setting, NAME=VALUE as in docs/settings.md (e.g. `--set
    /// max_broadcast_bytes=64MiB`); repeatable, applied after the options above.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,
}

impl EngineArgs {
    async fn options(&self) -> Result<EmbeddedOptions, CliError> {
        let defaults = EmbeddedOptions::default();
        let mut config = EngineConfig::default()
            .with_bytes_per_task(self.bytes_per_task)
            .with_max_tasks_per_stage(self.max_tasks_per_stage)
            .with_max_query_time(Duration::from_secs(self.max_query_seconds.max(1)));
        config.access.location_setting = "--allow-path DIR (or LAMBDAFUSION_ALLOW_PATHS)".into();
        config =
            config.with_data_location(absolute(&self.data_dir.join("tpch"))?.display().to_string());
        for dir in &self.allow_paths {
            let resolved = std::fs::canonicalize(dir)
                .map_err(|e| format!("--allow-path {}: {e}", dir.display()))?;
            config = config.with_data_location(resolved.display().to_string());
        }
        for dir in &self.allow_write {
            let resolved = std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::canonicalize(dir))
                .map_err(|e| format!("--allow-write {}: {e}", dir.display()))?;
            config = config.with_write_location(resolved.display().to_string());
        }
        let config = with_settings(config, &self.settings)?;
        let slots = self.slots.unwrap_or(defaults.slots);
        let glue = if self.glue_databases.is_empty() {
            None
        } else {
            let sdk = lambdafusion_aws::clients::sdk_config().await;
            Some(lambdafusion::glue::Glue::new(
                std::sync::Arc::new(lambdafusion_aws::glue::SdkGlue::new(&sdk)),
                self.glue_databases.clone(),
                self.glue_default_database.clone(),
            )?)
        };
        Ok(EmbeddedOptions {
            data_dir: Some(self.data_dir.clone()),
            config,
            glue,
            slots,
            max_queued_tasks: self.max_queued_tasks.unwrap_or(slots * 256),
            memory_limit: self.memory_limit_mb.map(|mb| mb * 1024 * 1024),
            ..defaults
        })
    }
}

/// `path` made absolute against the current directory (without requiring it to exist).
fn absolute(path: &std::path::Path) -> Result<PathBuf, CliError> {
    Ok(std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?)
}

#[derive(Args)]
struct DemoArgs {
    /// TPC-H scale factor of the demo data.
    #[arg(long, default_value_t = 0.1)]
    sf: f64,
    /// Where the demo keeps its data and state.
    #[arg(
        long,
        env = "LAMBDAFUSION_DATA_DIR",
        default_value = "lambdafusion-data"
    )]
    data_dir: PathBuf,
    /// Target input bytes per task; small, so that even the demo fans out.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    bytes_per_task: u64,
    /// TPC-H query to run (1-22).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=22))]
    query: u8,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on. Anything but a loopback address needs a token.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// Bearer token every request must carry (`Authorization: Bearer <token>`), at least
    /// 16 characters; required to listen beyond loopback. Prefer LAMBDAFUSION_TOKEN or
    /// --token-file: a command line is visible to every user of the machine (`ps`).
    #[arg(long, env = "LAMBDAFUSION_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the bearer token from FILE (its first line).
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Args)]
struct QueryArgs {
    /// The SQL: one statement, or several separated by `;` (it may start with a `--`
    /// comment).
    #[arg(
        allow_hyphen_values = true,
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    sql: Option<String>,
    /// Read the SQL from FILE (`-`: standard input).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: Option<PathBuf>,
    /// Output format of the rows.
    #[arg(long, value_enum, default_value = "table")]
    format: OutputFormat,
    /// Write the rows to FILE instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// A time limit for each statement, in seconds (at most the engine's).
    #[arg(long)]
    max_seconds: Option<f64>,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(Args)]
struct ConsoleArgs {
    /// The endpoint: a deployment's function URL or API, the local stack, a `serve`.
    #[arg(long, env = "LAMBDAFUSION_ENDPOINT")]
    endpoint: String,
    /// Bearer token for an endpoint served with `lambdafusion serve --token`.
    #[arg(long, env = "LAMBDAFUSION_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Loopback address to serve the console on.
    #[arg(long, default_value = "127.0.0.1:8081")]
    bind: SocketAddr,
}

#[derive(Args)]
struct LogsArgs {
    /// The query's id (as `query` and the API print it).
    query_id: String,
    /// The deployment's `name_prefix` (Terraform): the log groups are
    /// /aws/lambda/<prefix>-scheduler and -executor.
    #[arg(long, default_value = "lambdafusion")]
    name_prefix: String,
    /// How far back to look, in minutes.
    #[arg(long, default_value_t = 24 * 60)]
    since_minutes: u64,
    /// Most lines to print.
    #[arg(long, default_value_t = 10_000)]
    limit: usize,
}

#[derive(Args)]
struct DoctorArgs {
    /// The deployment's `name_prefix` (Terraform): the functions are <prefix>-scheduler
    /// and <prefix>-executor.
    #[arg(long, default_value = "lambdafusion")]
    name_prefix: String,
}

#[derive(Args)]
struct ShellArgs {
    /// A time limit for each statement, in seconds (at most the engine's).
    #[arg(long)]
    max_seconds: Option<f64>,
    #[command(flatten)]
    target: TargetArgs,
}

/// Where statements run: an endpoint, or the engine embedded in this process.
#[derive(Args)]
struct TargetArgs {
    /// Send statements to this endpoint (`lambdafusion serve`, the local stack, a
    /// deployment) instead of running them here.
    #[arg(long, env = "LAMBDAFUSION_ENDPOINT")]
    endpoint: Option<String>,
    /// Bearer token for an endpoint served with `lambdafusion serve --token`.
    #[arg(long, env = "LAMBDAFUSION_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    engine: EngineArgs,
}

impl TargetArgs {
    async fn session(&self, max_seconds: Option<f64>) -> Result<Session, CliError> {
        Ok(match &self.endpoint {
            Some(_) if !self.engine.settings.is_empty() => {
                return Err(
                    "--set changes the embedded engine; an endpoint runs with the \
                            settings it was started or deployed with"
                        .to_string()
                        .into(),
                )
            }
            Some(endpoint) => {
                Session::Remote(client::Client::new(endpoint).with_token(self.token.clone()))
            }
            None => {
                let mut options = self.engine.options().await?;
                if let Some(limit) = max_seconds {
                    options.config = options
                        .config
                        .with_max_query_time(Duration::from_secs_f64(limit.max(0.001)));
                }
                Session::Embedded(Embedded::start(options).await?)
            }
        })
    }
}

#[derive(Subcommand)]
enum TpchCommand {
    /// Writes the eight TPC-H tables as Parquet under OUT/<table>/.
    Gen {
        /// Scale factor (1 = about 1 GB of CSV, 6 million lineitem rows).
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Clouds the model prices.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Model {
    /// AWS us-east-1: Lambda (on `--arch`), S3 Standard, DynamoDB on demand, against
    /// Athena.
    Aws,
}

/// What `bench tpch` and `bench plan` run over: the TPC-H data, the queries, and the
/// engine's settings.
#[derive(Args)]
struct TpchBench {
    /// Scale factor.
    #[arg(long, default_value_t = 1.0)]
    sf: f64,
    /// Where generated data is kept (`<dir>/sf<sf>`).
    #[arg(long, default_value = "lambdafusion-data/tpch")]
    data: PathBuf,
    /// Comma-separated query numbers (default: all 22).
    #[arg(long, value_delimiter = ',')]
    queries: Vec<usize>,
    /// Target input bytes per leaf task (default: the engine's, what `query`, `serve`
    /// and a deployment use).
    #[arg(long, default_value_t = EngineConfig::default().bytes_per_task)]
    bytes_per_task: u64,
    /// Most tasks in one stage (the width every query is planned at first).
    #[arg(long, default_value_t = 64)]
    max_tasks_per_stage: usize,
    /// What lambdafusion reads: the Parquet files, or their Delta Lake or Iceberg copy
    /// under DATA/sf<SF>/delta/ or iceberg/ (written by scripts/tpch-as-delta and
    /// scripts/tpch-as-iceberg); DataFusion reads Parquet.
    #[arg(long, value_enum, default_value_t = bench::TableFormat::Parquet)]
    table_format: bench::TableFormat,
    /// Any other engine setting for lambdafusion, NAME=VALUE as in docs/settings.md
    /// (e.g. `--set broadcast_scan_percent=50`); repeatable. Printed with the figures.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    settings: Vec<String>,
}

impl TpchBench {
    /// The benchmark's options: the queries checked (all 22 when none given), `base`
    /// with the task sizes and then the `--set` settings applied; the engine's default
    /// function slots, no memory limit, no model, adaptive stages only.
    fn options(
        self,
        iterations: usize,
        base: EngineConfig,
    ) -> Result<bench::BenchOptions, CliError> {
        if let Some(q) = self.queries.iter().find(|q| !(1..=22).contains(*q)) {
            return Err(format!("there is no TPC-H query {q} (1-22)").into());
        }
        let config = with_settings(
            base.with_bytes_per_task(self.bytes_per_task)
                .with_max_tasks_per_stage(self.max_tasks_per_stage),
            &self.settings,
        )?;
        Ok(bench::BenchOptions {
            sf: self.sf,
            data: self.data,
            queries: if self.queries.is_empty() {
                (1..=22).collect()
            } else {
                self.queries
            },
            iterations,
            settings: self.settings,
            config,
            slots: EmbeddedOptions::default().slots,
            compare_planned: false,
            memory_limit: None,
            model: false,
            table_format: self.table_format,
        })
    }
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The 22 TPC-H queries, lambdafusion embedded vs single-process DataFusion.
    Tpch {
        #[command(flatten)]
        over: TpchBench,
        /// Measured runs per query and engine, after one warm-up run each; their order
        /// alternates; min and median are reported.
        #[arg(long, default_value_t = 3)]
        iterations: usize,
        /// Concurrent tasks; default: 2 per CPU.
        #[arg(long)]
        slots: Option<usize>,
        /// Target shuffle input bytes per task of an adaptive (coalesced) stage.
        #[arg(long, default_value_t = 64 * 1024 * 1024)]
        shuffle_bytes_per_task: u64,
        /// Also run every query with adaptive stages off (each stage exactly as planned
        /// at submit) and print those times beside the adaptive ones.
        #[arg(long)]
        compare_planned: bool,
        /// Memory the engine's slots share, in MiB: each task gets an equal part as its
        /// own memory pool and spills past it (default: half the machine's memory).
        #[arg(long)]
        memory_limit_mb: Option<usize>,
        /// Also print a priced model of each query on AWS at SF 1, 10, 100 and 1,000,
        /// built from this run's tasks, bytes, requests and CPU time (a model, not a
        /// measurement; the constants and their sources are printed with it).
        #[arg(long, value_enum)]
        model: Option<Model>,
        /// With --model: also write the measured profiles the model starts from to this
        /// JSON file, to price them again later (`lambdafusion bench model --profiles`).
        #[arg(long, requires = "model")]
        save_profiles: Option<PathBuf>,
        /// With --model: the functions' architecture the model prices (the other's
        /// totals are printed beside).
        #[arg(long, value_enum, default_value = "arm64", requires = "model")]
        arch: lambdafusion_cli::model::Arch,
    },
    /// How long the scheduler takes to plan the 22 TPC-H queries: planned once and
    /// resized to their input, against planned twice (the former way, still the
    /// fallback), in the same run; with each plan's stages and tasks.
    Plan {
        #[command(flatten)]
        over: TpchBench,
        /// Measured plannings per query and way, after one warm-up each.
        #[arg(long, default_value_t = 5)]
        iterations: usize,
    },
    /// How fast a result is written: TPC-H lineitem copied to Parquet, whole and
    /// partitioned by ship month, lambdafusion embedded against single-process
    /// DataFusion's COPY, in the same run.
    Write {
        #[command(flatten)]
        over: TpchBench,
        /// Measured runs per write and engine, after one warm-up each; their order
        /// alternates.
        #[arg(long, default_value_t = 3)]
        iterations: usize,
    },
    /// Prices query profiles saved by `bench tpch --model aws --save-profiles` on AWS at
    /// the given scale factors (a model, not a measurement), without running anything.
    Model {
        /// The profiles' JSON file.
        #[arg(long)]
        profiles: PathBuf,
        /// Comma-separated scale factors to price.
        #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000")]
        sf: Vec<f64>,
        /// Comma-separated queries (e.g. q9) whose stages to show one by one at each
        /// scale factor.
        #[arg(long, value_delimiter = ',')]
        detail: Vec<String>,
        /// A deployment setting to price with, NAME=VALUE as in docs/settings.md (e.g.
        /// `--set large_executor_memory_mb=10240` for a second executor size);
        /// repeatable.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        settings: Vec<String>,
        /// The functions' architecture to price (the other's totals are printed beside).
        #[arg(long, value_enum, default_value = "arm64")]
        arch: lambdafusion_cli::model::Arch,
    },
    /// How fast a wide stage starts: the time from its claim to its last task start,
    /// through the invocation tree and sent directly (embedded; the local AWS stack's run
    /// is `cargo test --workspace --test end_to_end aws_local::measure_fanout -- --ignored`).
    Fanout {
        /// Comma-separated task counts of the wide stage.
        #[arg(long, value_delimiter = ',', default_value = "100,1000,5000")]
        tasks: Vec<u32>,
        /// Invocations per dispatcher of the invocation tree.
        #[arg(long, default_value_t = 32)]
        fanout: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Serve(_)) {
        "info"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = lambdafusion::runtime().expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one command: one arm per subcommand (long for that reason).
async fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Demo(args) => demo(args).await,
        Command::Serve(args) => serve(args).await,
        Command::Query(args) => query(args).await,
        Command::Console(args) => console(args).await,
        Command::Logs(args) => logs(args).await,
        Command::Doctor(args) => doctor(args).await,
        Command::Shell(args) => {
            let session = args.target.session(args.max_seconds).await?;
            shell::run(&session, args.max_seconds).await
        }
        Command::Tpch {
            command: TpchCommand::Gen { sf, out },
        } => generate(&out, sf).map(|_| ()),
        Command::Bench {
            command:
                BenchCommand::Tpch {
                    over,
                    iterations,
                    slots,
                    shuffle_bytes_per_task,
                    compare_planned,
                    memory_limit_mb,
                    model,
                    save_profiles,
                    arch,
                },
        } => {
            let defaults = over.options(
                iterations,
                EngineConfig::default().with_shuffle_bytes_per_task(shuffle_bytes_per_task),
            )?;
            let options = bench::BenchOptions {
                slots: slots.unwrap_or(defaults.slots),
                compare_planned,
                memory_limit: memory_limit_mb.map(|mb| mb << 20),
                model: model.is_some(),
                ..defaults
            };
            let rows = bench::run(&options).await?;
            println!("{}", bench::report(&options, &rows));
            if model.is_some() {
                let profiles: Vec<_> = rows.iter().filter_map(|r| r.profile.clone()).collect();
                if let Some(path) = &save_profiles {
                    lambdafusion_cli::model::save_profiles(path, &profiles)?;
                    eprintln!("profiles saved to {}", path.display());
                }
                println!(
                    "\n{}",
                    model_report(&profiles, &[1.0, 10.0, 100.0, 1000.0], &[], &[], arch)?
                );
            }
            if rows.iter().any(|r| r.mismatch.is_some()) {
                return Err("some results differ from DataFusion's".into());
            }
            Ok(())
        }
        Command::Bench {
            command: BenchCommand::Write { over, iterations },
        } => {
            let options = over.options(iterations, EngineConfig::default())?;
            println!("{}", lambdafusion_cli::writebench::run(&options).await?);
            Ok(())
        }
        Command::Bench {
            command: BenchCommand::Plan { over, iterations },
        } => {
            let options = over.options(iterations, EngineConfig::default())?;
            println!("{}", lambdafusion_cli::planning::run(&options).await?);
            Ok(())
        }
        Command::Bench {
            command:
                BenchCommand::Model {
                    profiles,
                    sf,
                    detail,
                    settings,
                    arch,
                },
        } => {
            if let Some(bad) = sf.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
                return Err(format!("--sf {bad}: a scale factor is a positive number").into());
            }
            let profiles = lambdafusion_cli::model::load_profiles(&profiles)?;
            println!(
                "{}",
                model_report(&profiles, &sf, &detail, &settings, arch)?
            );
            Ok(())
        }
        Command::Bench {
            command: BenchCommand::Fanout { tasks, fanout },
        } => {
            if let Some(n) = tasks
                .iter()
                .find(|&&n| n == 0 || n as usize > lambdafusion::config::MAX_TASKS_PER_STAGE)
            {
                return Err(format!(
                    "--tasks {n}: a stage has 1 to {} tasks",
                    lambdafusion::config::MAX_TASKS_PER_STAGE
                )
                .into());
            }
            if fanout < 2 {
                return Err("--fanout must be at least 2".into());
            }
            let runs = lambdafusion_cli::fanout::embedded(&tasks, fanout).await?;
            println!(
                "Wide stages starting, embedded (a slot per task, up to {} at once; \
                 invocations in process). Times from the stage's claim.\n\n{}",
                lambdafusion_cli::fanout::MAX_SLOTS,
                lambdafusion_cli::fanout::report(&runs)
            );
            Ok(())
        }
    }
}

/// `config` with each `NAME=VALUE` of `--set` applied.
fn with_settings(mut config: EngineConfig, settings: &[String]) -> Result<EngineConfig, CliError> {
    for setting in settings {
        let (name, value) = setting
            .split_once('=')
            .ok_or_else(|| format!("--set {setting}: expected NAME=VALUE"))?;
        config
            .set(name.trim(), value.trim())
            .map_err(|e| format!("--set {setting}: {e}"))?;
    }
    Ok(config)
}

/// The AWS model's tables for `profiles` at each scale factor of `scales`, priced with
/// the deployment's defaults and `settings` (`--set`) for functions on `arch`, and the
/// stages of the queries named in `detail`.
fn model_report(
    profiles: &[lambdafusion_cli::model::QueryProfile],
    scales: &[f64],
    detail: &[String],
    settings: &[String],
    arch: lambdafusion_cli::model::Arch,
) -> Result<String, CliError> {
    use lambdafusion_cli::model;
    let config = with_settings(EngineConfig::default(), settings)?;
    // The executor's memory is the deployment's (`--set executor_memory_mb=1769`).
    let constants = model::AwsConstants {
        executor_gb: config.executor_memory_mb as f64 / 1024.0,
        ..model::AwsConstants::us_east_1_on(arch)
    };
    let mut out = format!(
        "AWS model (the deployment's defaults: {} bytes per scan task, {} per shuffle task, \
         at most {} tasks per stage)\n\n{}",
        config.bytes_per_task,
        config.shuffle_bytes_per_task,
        config.max_tasks_per_stage,
        model::report(profiles, scales, &constants, &config)
    );
    for name in detail {
        let query = profiles
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
                format!(
                    "--detail {name}: no such query among the profiles ({})",
                    names.join(", ")
                )
            })?;
        for &sf in scales {
            out.push_str(&format!("\n{} at SF {sf}, stage by stage:\n", query.name));
            out.push_str(&model::stage_report(&model::estimate(
                query, sf, &constants, &config,
            )));
        }
    }
    Ok(out)
}

/// Generates TPC-H data with a progress bar; returns the data directory.
fn generate(dir: &std::path::Path, sf: f64) -> Result<PathBuf, CliError> {
    if tpch::is_generated(dir) {
        eprintln!("TPC-H SF {sf} data already in {}", dir.display());
        return Ok(dir.to_path_buf());
    }
    let jobs = tpch::file_jobs(sf);
    let bar = indicatif::ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} generating TPC-H SF {msg} [{bar:30}] {pos}/{len} files ({elapsed})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(format!("{sf}"));
    let started = Instant::now();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let rows = tpch::generate(dir, sf, threads, &|_, _| bar.inc(1))?;
    bar.finish_and_clear();
    eprintln!(
        "generated TPC-H SF {sf} ({rows} rows) into {} in {:.1} s",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(dir.to_path_buf())
}

async fn demo(args: DemoArgs) -> Result<(), CliError> {
    let data = generate(
        &tpch::data_dir(&args.data_dir.join("tpch"), args.sf),
        args.sf,
    )?;
    let data = std::fs::canonicalize(&data)?;
    // The same state directory `serve`, `query` and `shell` use, so the eight tables are
    // there for them after the demo.
    let engine = Embedded::start(EmbeddedOptions {
        data_dir: Some(args.data_dir.clone()),
        config: EngineConfig::default()
            .with_bytes_per_task(args.bytes_per_task)
            .with_data_location(data.display().to_string()),
        ..EmbeddedOptions::default()
    })
    .await?;
    for sql in tpch::create_statements(&data.display().to_string()) {
        engine.sql(&sql).await?;
    }
    let q = args.query as usize;
    let sql = tpch::query(q);
    println!(
        "TPC-H Q{q} over SF {} — planned by DataFusion, cut into stages, every task pushed",
        args.sf
    );
    println!("to an in-process function slot, shuffled through files, results read back:\n");
    let outcome = Session::Embedded(engine.clone()).run(sql, None).await?;
    let (status, schema, batches) = (outcome.status, outcome.schema, outcome.batches);
    println!("{}", display::rows_table(&schema, &batches));
    println!("{}\n", display::status_line(&status));
    println!("{}", display::stage_summary(&status));

    let baseline = datafusion::prelude::SessionContext::new();
    tpch::register_baseline(&baseline, &data).await?;
    let expected = baseline.sql(sql).await?.collect().await?;
    match lambdafusion_embedded::verify::compare(&expected, &batches, tpch::is_ordered(q)) {
        Ok(()) => {
            println!("result checked: identical to single-process DataFusion on the same files")
        }
        Err(diff) => {
            return Err(format!("result differs from single-process DataFusion: {diff}").into())
        }
    }
    println!(
        "\nnext: `lambdafusion serve` for the HTTP API, `lambdafusion query \"SHOW TABLES\"`,"
    );
    println!("      `lambdafusion bench tpch --sf 1` for the benchmark");
    Ok(())
}

/// Prints one query's log lines: the function (scheduler or executor), then the line.
async fn logs(args: LogsArgs) -> Result<(), CliError> {
    use lambdafusion_aws::logs;
    let groups = logs::groups(&args.name_prefix);
    let since_ms = lambdafusion::time::now_ms()
        .saturating_sub(args.since_minutes.saturating_mul(60_000)) as i64;
    let client = logs::client().await;
    let lines = logs::query_lines(&client, &groups, &args.query_id, since_ms, args.limit).await?;
    if lines.is_empty() {
        return Err(format!(
            "no log line names query {} in {} and {} over the last {} minutes (a query's lines \
             arrive within seconds; check --name-prefix, the region and --since-minutes)",
            args.query_id, groups[0], groups[1], args.since_minutes
        )
        .into());
    }
    for line in lines {
        let function = line.group.rsplit('-').next().unwrap_or(line.group.as_str());
        println!("{function}\t{}", line.message);
    }
    Ok(())
}

/// Prints the preflight's findings, worst first; fails when one is a problem.
async fn doctor(args: DoctorArgs) -> Result<(), CliError> {
    use lambdafusion_aws::doctor::{assess, client, gather, Level};
    let client = client().await;
    let facts = gather(&client, &args.name_prefix).await?;
    let findings = assess(&facts, &args.name_prefix);
    for f in &findings {
        let label = match f.level {
            Level::Ok => "ok     ",
            Level::Warn => "warn   ",
            Level::Problem => "PROBLEM",
        };
        println!("{label} {}", f.text);
    }
    let problems = findings
        .iter()
        .filter(|f| f.level == Level::Problem)
        .count();
    if problems > 0 {
        return Err(format!(
            "{problems} problem(s): the deployment will not work as configured (see above)"
        )
        .into());
    }
    Ok(())
}

async fn console(args: ConsoleArgs) -> Result<(), CliError> {
    if !args.bind.ip().is_loopback() {
        return Err(format!(
            "the console acts with your credentials: it listens on loopback only, not {}",
            args.bind
        )
        .into());
    }
    let client = client::Client::new(&args.endpoint).with_token(args.token.clone());
    let token = lambdafusion_cli::console::session_token();
    let router = lambdafusion_cli::console::router(client, token.clone());
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.bind))?;
    eprintln!(
        "console for {} (API calls signed with your AWS credentials when it is an AWS \
         endpoint); open:\n  http://{}/#token={token}",
        args.endpoint, args.bind
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// The token `serve` was given: from --token-file, LAMBDAFUSION_TOKEN or --token (with a
/// warning: others see command lines), at least [`lambdafusion_api::MIN_TOKEN_CHARS`]
/// characters.
fn serve_token(args: &ServeArgs) -> Result<Option<String>, CliError> {
    let token = match &args.token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
            Some(text.lines().next().unwrap_or_default().trim().to_string())
        }
        None => args.token.clone(),
    };
    let Some(token) = token.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    let on_command_line = std::env::args().any(|a| a == "--token" || a.starts_with("--token="));
    if on_command_line {
        eprintln!(
            "warning: a token on the command line is visible to every user of this machine \
             (ps); pass it in LAMBDAFUSION_TOKEN or with --token-file instead"
        );
    }
    lambdafusion_api::check_token_strength(&token)?;
    Ok(Some(token))
}

async fn serve(args: ServeArgs) -> Result<(), CliError> {
    let token = serve_token(&args)?;
    if !args.bind.ip().is_loopback() && token.is_none() {
        return Err(format!(
            "refusing to serve on {}, beyond this machine, without a token: anyone who can \
             reach it could read the allowed directories and every query. Start with \
             LAMBDAFUSION_TOKEN=<secret> (or --token-file FILE), or bind to 127.0.0.1",
            args.bind
        )
        .into());
    }
    let options = args.engine.options().await?;
    let allowed = options.config.access.data_locations.join(", ");
    let engine = Embedded::start(options).await?;
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.bind))?;
    let bound = listener.local_addr()?;
    eprintln!(
        "lambdafusion serving on http://{bound} (data in {}; tables readable from {allowed}{}); try:\n  lambdafusion query --endpoint http://{bound} \"SELECT 1\"",
        args.engine.data_dir.display(),
        if token.is_some() {
            "; bearer token required"
        } else {
            "; loopback names and same-origin pages only"
        },
    );
    // Without a token only this machine may call, by a loopback name: a web page that
    // points a name of its own at 127.0.0.1 cannot.
    let router = match token {
        Some(token) => lambdafusion_api::with_bearer_token(
            lambdafusion_api::router(engine.services().clone()),
            token,
        ),
        None => lambdafusion_api::loopback_only(
            lambdafusion_api::router(engine.services().clone()),
            bound.port(),
        ),
    };
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

async fn query(args: QueryArgs) -> Result<(), CliError> {
    let script = match (&args.sql, &args.file) {
        (Some(sql), _) => sql.clone(),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .map_err(|e| format!("reading SQL from standard input: {e}"))?;
            text
        }
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| format!("reading SQL from {}: {e}", path.display()))?,
        (None, None) => return Err("give the SQL as an argument or with -f FILE".into()),
    };
    let statements = split_statements(&script)?;
    let to_terminal = args.output.is_none() && std::io::IsTerminal::is_terminal(&std::io::stdout());
    if args.format == OutputFormat::Parquet && to_terminal {
        return Err(
            "Parquet is binary: write it with --output FILE or redirect standard output".into(),
        );
    }
    let mut out: Box<dyn std::io::Write + Send> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| format!("writing {}: {e}", path.display()))?,
        )),
        None => Box::new(std::io::stdout()),
    };
    let session = args.target.session(args.max_seconds).await?;
    let last = statements.len() - 1;
    for (i, sql) in statements.iter().enumerate() {
        let outcome = session.run(sql, args.max_seconds).await?;
        // A script's earlier statements show their rows as tables; the file formats
        // hold the last statement's rows alone.
        if i == last || args.format == OutputFormat::Table {
            let format = if i == last {
                args.format
            } else {
                OutputFormat::Table
            };
            write_rows(format, &outcome.schema, &outcome.batches, out.as_mut())?;
        }
        eprintln!("{}", display::status_line(&outcome.status));
    }
    out.flush()?;
    Ok(())
}
