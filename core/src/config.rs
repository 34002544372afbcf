//! Engine settings shared by scheduler and executor, with defaults fit for both the
//! embedded engine and Lambda.
//!
//! Every setting is declared once, in the [`settings!`] table below: its name, type,
//! default, unit, bounds, builder, environment variable and Terraform variable, and its
//! doc. From that one declaration come the [`EngineConfig`] struct and its `Default`, the
//! `with_*` builders, [`EngineConfig::set`] (what the functions' environment parsing
//! calls), and [`SETTINGS`] (what the code/deployment contract, the Terraform variables
//! check and the settings table in `docs/settings.md` are held to). The model is
//! DataFusion's `config_namespace!`.

use std::time::Duration;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// How a setting's value is written in an environment variable, a Terraform variable and
/// the docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A whole number of bytes.
    Bytes,
    /// A whole number of things (tasks, attempts, reads, levels).
    Count,
    /// Whole seconds (a `Duration`).
    Seconds,
    /// Whole days (a `Duration`).
    Days,
    /// Milliseconds (a `Duration`); not settable from the environment.
    Millis,
    /// `true` / `false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
    Flag,
    /// An amount of US dollars, decimals allowed (`0.25`).
    Dollars,
}

/// One setting as the tables below declare it.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The field of [`EngineConfig`].
    pub name: &'static str,
    /// How its value is written.
    pub unit: Unit,
    /// The smallest and largest value accepted (in [`Setting::unit`]); values outside are
    /// refused from the environment and clamped by the builders.
    pub bounds: (u64, u64),
    /// The environment variable the functions read it from; `None`: fixed on AWS (the
    /// embedded engine may set it through the CLI or the builder).
    pub env: Option<&'static str>,
    /// The Terraform module's variable that sets `env`, if the module exposes it.
    pub terraform: Option<&'static str>,
    /// What it does (the field's doc comment).
    pub doc: &'static str,
}

/// The bounds of the setting `name` (every builder's name is a declared setting).
fn bounds_of(name: &str) -> (u64, u64) {
    SETTINGS
        .iter()
        .find(|s| s.name == name)
        .map_or((0, u64::MAX), |s| s.bounds)
}

impl Setting {
    /// The default, written as [`EngineConfig::set`] reads it.
    pub fn default_value(&self) -> String {
        EngineConfig::default()
            .get(self.name)
            .expect("every declared setting has a value")
    }
}

/// A value type a setting may have: read from text in its [`Unit`], clamped to bounds,
/// and written back.
pub trait SettingValue: Sized {
    /// Parses `raw` (already trimmed) as `unit`, refusing values outside `bounds`.
    fn parse(raw: &str, unit: Unit, bounds: (u64, u64)) -> Result<Self, String>;
    /// The value within `bounds` (what a builder stores).
    fn within(self, unit: Unit, bounds: (u64, u64)) -> Self;
    /// The value as [`SettingValue::parse`] reads it.
    fn render(&self, unit: Unit) -> String;
}

fn parse_number(raw: &str, bounds: (u64, u64)) -> Result<u64, String> {
    let n: u64 = raw
        .parse()
        .map_err(|e| format!("expected a whole number: {e}"))?;
    if n < bounds.0 || n > bounds.1 {
        return Err(format!("must be {} to {}", bounds.0, bounds.1));
    }
    Ok(n)
}

macro_rules! number_setting {
    ($($ty:ty),*) => {$(
        impl SettingValue for $ty {
            fn parse(raw: &str, _: Unit, bounds: (u64, u64)) -> Result<Self, String> {
                let n = parse_number(raw, bounds)?;
                <$ty>::try_from(n).map_err(|_| format!("{n} is too large"))
            }
            fn within(self, _: Unit, (lo, hi): (u64, u64)) -> Self {
                let n = (self as u64).clamp(lo, hi);
                <$ty>::try_from(n).unwrap_or(<$ty>::MAX)
            }
            fn render(&self, _: Unit) -> String {
                self.to_string()
            }
        }
    )*};
}
number_setting!(u64, usize, u32);

impl SettingValue for Option<usize> {
    fn parse(raw: &str, unit: Unit, bounds: (u64, u64)) -> Result<Self, String> {
        usize::parse(raw, unit, bounds).map(Some)
    }
    fn within(self, unit: Unit, bounds: (u64, u64)) -> Self {
        self.map(|v| v.within(unit, bounds))
    }
    fn render(&self, unit: Unit) -> String {
        self.map_or_else(|| "none".into(), |v| v.render(unit))
    }
}

impl SettingValue for Option<f64> {
    fn parse(raw: &str, _: Unit, (lo, hi): (u64, u64)) -> Result<Self, String> {
        let v: f64 = raw
            .parse()
            .map_err(|e| format!("expected a decimal number: {e}"))?;
        if !v.is_finite() || v <= 0.0 || v < lo as f64 || v > hi as f64 {
            return Err(format!("must be a number above 0 (and from {lo} to {hi})"));
        }
        Ok(Some(v))
    }
    fn within(self, _: Unit, (lo, hi): (u64, u64)) -> Self {
        self.filter(|v| v.is_finite() && *v > 0.0)
            .map(|v| v.clamp(lo as f64, hi as f64))
    }
    fn render(&self, _: Unit) -> String {
        self.map_or_else(|| "none".into(), |v| v.to_string())
    }
}

impl SettingValue for bool {
    fn parse(raw: &str, _: Unit, _: (u64, u64)) -> Result<Self, String> {
        match raw.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err("expected true or false".into()),
        }
    }
    fn within(self, _: Unit, _: (u64, u64)) -> Self {
        self
    }
    fn render(&self, _: Unit) -> String {
        self.to_string()
    }
}

fn duration_unit(unit: Unit) -> u64 {
    match unit {
        Unit::Days => 24 * 3600 * 1000,
        Unit::Millis => 1,
        _ => 1000,
    }
}

impl SettingValue for Duration {
    fn parse(raw: &str, unit: Unit, bounds: (u64, u64)) -> Result<Self, String> {
        let n = parse_number(raw, bounds)?;
        Ok(Duration::from_millis(n.saturating_mul(duration_unit(unit))))
    }
    /// Durations are taken as given: bounds hold what a deployment may set, while tests
    /// and the CLI use sub-second limits.
    fn within(self, _: Unit, _: (u64, u64)) -> Self {
        self
    }
    fn render(&self, unit: Unit) -> String {
        (self.as_millis() as u64 / duration_unit(unit)).to_string()
    }
}

/// Declares the engine's settings once: the struct, its `Default`, the builders, [`SETTINGS`]
/// and [`EngineConfig::set`]. Each entry is its doc comment, then
/// `name: Type = default; Unit [lo, hi], builder with_name, env "VAR", terraform "var";`
/// (bounds, builder, env and terraform optional); `@fixed { ... }` fields are part of the
/// struct but no setting (composite values).
macro_rules! settings {
    (
        $(
            $(#[doc = $doc:literal])*
            $field:ident : $ty:ty = $default:expr ; $unit:ident
            $( [$lo:expr, $hi:expr] )?
            $( , builder $with:ident )?
            $( , env $env:literal )?
            $( , terraform $tf:literal )? ;
        )*
        @fixed {
            $( $(#[doc = $fdoc:literal])* $ffield:ident : $fty:ty = $fdefault:expr ; )*
        }
    ) => {
        /// Settings the scheduler and executor read. Build with [`EngineConfig::default`]
        /// and the `with_*` methods; the AWS crate fills it from environment variables
        /// through [`EngineConfig::set`]. Every field is declared in `config.rs`'s table.
        #[derive(Debug, Clone)]
        pub struct EngineConfig {
            $( $(#[doc = $doc])* pub $field: $ty, )*
            $( $(#[doc = $fdoc])* pub $ffield: $fty, )*
        }

        impl Default for EngineConfig {
            fn default() -> Self {
                Self {
                    $( $field: $default, )*
                    $( $ffield: $fdefault, )*
                }
            }
        }

        /// Every setting of [`EngineConfig`], in declaration order.
        pub const SETTINGS: &[Setting] = &[
            $( Setting {
                name: stringify!($field),
                unit: Unit::$unit,
                bounds: settings!(@bounds $( $lo, $hi )?),
                env: settings!(@opt $( $env )?),
                terraform: settings!(@opt $( $tf )?),
                doc: concat!($( $doc, "\n" ),*),
            }, )*
        ];

        impl EngineConfig {

            $( $(
                #[doc = concat!("Sets [`EngineConfig::", stringify!($field), "`], within its bounds.")]
                pub fn $with(mut self, value: $ty) -> Self {
                    self.$field = SettingValue::within(value, Unit::$unit, bounds_of(stringify!($field)));
                    self
                }
            )? )*

            /// Sets the setting `name` (a field name) from text in its [`Unit`]; an unknown
            /// name or an unusable value is an error saying why.
            pub fn set(&mut self, name: &str, raw: &str) -> Result<(), String> {
                let raw = raw.trim();
                match name {
                    $( stringify!($field) => {
                        self.$field = SettingValue::parse(
                            raw,
                            Unit::$unit,
                            settings!(@bounds $( $lo, $hi )?),
                        )?;
                        Ok(())
                    } )*
                    _ => Err(format!("no setting is called {name}")),
                }
            }

            /// The current value of the setting `name`, written as [`EngineConfig::set`]
            /// reads it.
            pub fn get(&self, name: &str) -> Option<String> {
                match name {
                    $( stringify!($field) => Some(SettingValue::render(&self.$field, Unit::$unit)), )*
                    _ => None,
                }
            }
        }
    };
    (@opt) => { None };
    (@opt $v:literal) => { Some($v) };
    (@bounds) => { (0, u64::MAX) };
    (@bounds $lo:expr, $hi:expr) => { ($lo, $hi) };
}

/// How many of a caller's newest queries `max_queries_per_caller` looks at: a running
/// query older than that many later ones is not counted.
pub const HISTORY_SCAN: usize = 100;

/// The most tasks a stage may have (`max_tasks_per_stage`).
pub const MAX_TASKS_PER_STAGE: usize = 10_000;

/// Back-off of a throttled task invocation: `THROTTLE_BACKOFF_BASE * 2^throttles`, at most
/// [`THROTTLE_BACKOFF_CAP`].
pub const THROTTLE_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest back-off of a throttled task invocation.
pub const THROTTLE_BACKOFF_CAP: Duration = Duration::from_secs(60);

settings! {
    /// Target input bytes per task of a leaf stage: a scan of `n` bytes gets about
    /// `n / bytes_per_task` tasks (at least one, at most `max_tasks_per_stage`).
    bytes_per_task: u64 = 128 * MIB; Bytes [1, u64::MAX], builder with_bytes_per_task,
        env "LAMBDAFUSION_BYTES_PER_TASK", terraform "bytes_per_task";
    /// Target shuffle input bytes per task of a stage reading hash shuffles: when the
    /// stage becomes ready, its small partitions are merged into tasks of about this
    /// much ([`crate::plan::adaptive`]).
    shuffle_bytes_per_task: u64 = 64 * MIB; Bytes [1, u64::MAX],
        builder with_shuffle_bytes_per_task, env "LAMBDAFUSION_SHUFFLE_BYTES_PER_TASK",
        terraform "shuffle_bytes_per_task";
    /// Least scan bytes a task of a leaf stage should read: when the stage becomes ready,
    /// its plan partitions smaller than this (an input cut finer than its work is worth,
    /// such as many small files or a small `bytes_per_task`) are merged into tasks of
    /// about this much ([`crate::plan::adaptive`]).
    min_scan_bytes_per_task: u64 = 16 * MIB; Bytes [1, u64::MAX],
        builder with_min_scan_bytes_per_task, env "LAMBDAFUSION_MIN_SCAN_BYTES_PER_TASK",
        terraform "min_scan_bytes_per_task";
    /// A partitioned semi / anti / mark join whose emitted side commits at most this many
    /// bytes switches to a broadcast of that side: the other side's stage reads it whole
    /// and marks its rows instead of hash-shuffling them ([`crate::plan::switch`]); 0
    /// never switches.
    max_broadcast_bytes: u64 = 16 * MIB; Bytes, builder with_max_broadcast_bytes,
        env "LAMBDAFUSION_MAX_BROADCAST_BYTES", terraform "max_broadcast_bytes";
    /// The join switch's cost rule: a partitioned join switches to broadcasting its small
    /// side only while that side, read by every task of the large side, is at most this
    /// percentage of the bytes the large side scans (what shuffling the large side's rows
    /// would cost instead; 25: a quarter).
    broadcast_scan_percent: u32 = 25; Count [1, 100_000],
        env "LAMBDAFUSION_BROADCAST_SCAN_PERCENT", terraform "broadcast_scan_percent";
    /// Whether stages are shaped from their inputs' committed sizes when they become
    /// ready (`false`: every stage runs exactly as planned at submit).
    adaptive: bool = true; Flag, builder with_adaptive, env "LAMBDAFUSION_ADAPTIVE",
        terraform "adaptive_stages";
    /// Whether the inner join of a small filtered input (a dimension, at most
    /// `max_broadcast_bytes` of files) is moved down onto the input that holds its key,
    /// before the joins that would otherwise shuffle the rows it removes
    /// ([`crate::plan::dimension_joins`]).
    dimension_joins: bool = true; Flag;
    /// A join build side that only scans files and reads at most this many bytes (a
    /// dimension table) is read by every consuming task itself instead of becoming a
    /// broadcast stage.
    inline_scan_bytes: u64 = 4 * MIB; Bytes;
    /// Upper bound on the number of tasks of any stage (and on hash shuffle width), at
    /// most [`MAX_TASKS_PER_STAGE`].
    max_tasks_per_stage: usize = 1_000; Count [1, MAX_TASKS_PER_STAGE as u64],
        builder with_max_tasks_per_stage, env "LAMBDAFUSION_MAX_TASKS_PER_STAGE",
        terraform "max_tasks_per_stage";
    /// Most ranged GETs one hash shuffle may take read directly, producers × consumer
    /// tasks: a shuffle planned wider goes through a combining stage (a two-level
    /// exchange), which regroups it so that reads grow about as the square root of that
    /// product, and which passes through when the shuffle turns out small enough.
    max_shuffle_reads: u64 = 65_536; Count [1, u64::MAX], builder with_max_shuffle_reads,
        env "LAMBDAFUSION_MAX_SHUFFLE_READS", terraform "max_shuffle_reads";
    /// Invocations one dispatcher makes: a stage of more tasks is sent through an
    /// invocation tree of dispatchers, each sending at most this many (tasks or further
    /// dispatchers), its leaves one commit counter's range each.
    dispatch_fanout: usize = 32; Count [2, u64::MAX], builder with_dispatch_fanout,
        env "LAMBDAFUSION_DISPATCH_FANOUT", terraform "dispatch_fanout";
    /// Attempts a task gets (first run included) before its job fails.
    max_attempts: u32 = 3; Count [1, u32::MAX as u64], builder with_max_attempts,
        env "LAMBDAFUSION_MAX_ATTEMPTS", terraform "max_attempts";
    /// Speculative attempts for stragglers: once half of a stage's tasks have committed,
    /// a task not done `speculation_percent`% of their median time after the stage was
    /// dispatched (and at least `speculation_floor` after) gets a second attempt. The
    /// first commit wins; the other attempt stops at its next batch.
    speculation: bool = true; Flag, builder with_speculation, env "LAMBDAFUSION_SPECULATION",
        terraform "speculation";
    /// When a straggler is speculated: this percentage of the median time the stage's
    /// committed tasks took from its dispatch (150: half as long again).
    speculation_percent: u32 = 150; Count [100, 100_000], env "LAMBDAFUSION_SPECULATION_PERCENT",
        terraform "speculation_percent";
    /// No task is speculated sooner than this after its stage was dispatched.
    speculation_floor: Duration = Duration::from_secs(2); Seconds [1, 86_400],
        env "LAMBDAFUSION_SPECULATION_FLOOR_SECS", terraform "speculation_floor_seconds";
    /// A dispatched task with no completion record after this long is presumed lost
    /// and re-dispatched by the sweep.
    task_timeout: Duration = Duration::from_secs(15 * 60); Seconds [1, u64::MAX],
        builder with_task_timeout, env "LAMBDAFUSION_TASK_TIMEOUT_SECS",
        terraform "task_timeout_seconds";
    /// Concurrent dispatch calls one scheduler invocation makes.
    dispatch_concurrency: usize = 32; Count [1, u64::MAX],
        env "LAMBDAFUSION_DISPATCH_CONCURRENCY", terraform "dispatch_concurrency";
    /// Whether the executor that completes a stage wakes the scheduler at once
    /// instead of waiting for the change stream.
    fast_path: bool = true; Flag, builder with_fast_path, env "LAMBDAFUSION_FAST_PATH",
        terraform "fast_path";
    /// How long job records live before the store may expire them.
    job_ttl: Duration = Duration::from_secs(7 * 24 * 3600); Days [1, u64::MAX],
        builder with_job_ttl, env "LAMBDAFUSION_JOB_TTL_DAYS", terraform "job_ttl_days";
    /// Stage plans larger than this go to object storage by reference (on AWS at most
    /// 192 KiB: a DynamoDB item holds 400 KB and base64 makes a plan a third larger).
    inline_plan_limit: usize = (256 * KIB) as usize; Bytes, builder with_inline_plan_limit;
    /// Largest accepted HTTP request body.
    max_request_bytes: usize = MIB as usize; Bytes [1, u64::MAX];
    /// Rows per record batch inside executors.
    batch_size: usize = 8192; Count [1, u64::MAX];
    /// How often a running task checks whether its job was cancelled.
    cancel_check_interval: Duration = Duration::from_secs(1); Millis [1, u64::MAX];
    /// Largest result the API returns in one response body (a Lambda response carries at
    /// most 6 MB; on AWS the default is 4 MiB, base64 for binary formats); larger results
    /// answer 413 and are downloaded through presigned URLs
    /// (`GET /v1/queries/{id}/result/objects`). `none`: no limit (streamed).
    max_response_bytes: Option<usize> = None; Bytes [1, u64::MAX],
        env "LAMBDAFUSION_MAX_RESPONSE_BYTES", terraform "max_response_bytes";
    /// A claimed stage (or a retried attempt) whose invocations were not all confirmed
    /// within this time lost its dispatcher: its tasks are sent again.
    dispatch_deadline: Duration = Duration::from_secs(30); Seconds [1, u64::MAX],
        env "LAMBDAFUSION_DISPATCH_DEADLINE_SECS", terraform "dispatch_deadline_seconds";
    /// Longest a query may run; a request may ask for less (`max_seconds`), never more.
    max_query_time: Duration = Duration::from_secs(3600); Seconds [1, u64::MAX],
        builder with_max_query_time, env "LAMBDAFUSION_MAX_QUERY_SECONDS",
        terraform "max_query_seconds";
    /// Most bytes of table files one query may read, as Athena's per-query data usage
    /// limit: checked at planning against the sizes of the files left after pruning by
    /// partition and statistics (refused with a 400 naming both figures), and while it
    /// runs against the bytes its table-reading tasks have fetched (the job fails).
    /// `none`: no limit.
    max_scan_bytes_per_query: Option<usize> = None; Bytes [1, u64::MAX],
        env "LAMBDAFUSION_MAX_SCAN_BYTES_PER_QUERY", terraform "max_scan_bytes_per_query";
    /// Most a query may cost, in US dollars, by the engine's estimate (its status's
    /// `estimated_cost_usd`: the GB-seconds and requests of its committed tasks, at list
    /// prices): checked at every scheduler step, past it the job fails with the figure
    /// and the limit, and its running tasks stop. `none`: no limit.
    max_query_cost_usd: Option<f64> = None; Dollars,
        env "LAMBDAFUSION_MAX_QUERY_COST_USD", terraform "max_query_cost_usd";
    /// Most queries one caller may have running at once; a further one is refused with a
    /// 429 naming its running queries until one ends. Checked against the caller's newest
    /// [`HISTORY_SCAN`] queries. `none`: no limit.
    max_queries_per_caller: Option<usize> = None; Count [1, u64::MAX],
        env "LAMBDAFUSION_MAX_QUERIES_PER_CALLER", terraform "max_queries_per_caller";
    /// Most tasks one caller's running queries may have in flight together. Each query
    /// reserves its widest stage (planned no wider than this) and dispatches a stage only
    /// while its tasks in flight fit its reservation; a query whose reservation does not
    /// fit beside the caller's running ones (among their newest [`HISTORY_SCAN`]) is
    /// refused with a 429. `none`: no limit.
    max_tasks_per_caller: Option<usize> = None; Count [1, u64::MAX],
        env "LAMBDAFUSION_MAX_TASKS_PER_CALLER", terraform "max_tasks_per_caller";
    /// Longest SQL text accepted (the job record holds it; a DynamoDB item holds 400 KB).
    max_sql_bytes: usize = (256 * KIB) as usize; Bytes [1, u64::MAX];
    /// Time one sweep may spend; it continues where it stopped at the next run (the
    /// Terraform module sets it 10 s below the scheduler's timeout).
    sweep_budget: Duration = Duration::from_secs(20); Seconds [1, u64::MAX],
        env "LAMBDAFUSION_SWEEP_BUDGET_SECS";
    /// Memory of the executor function in MB: what the cost estimate prices a task's
    /// seconds at (Lambda bills memory × duration). On AWS the Terraform module passes its
    /// `executor_memory_mb`; embedded it says what the same query would cost on Lambda.
    executor_memory_mb: usize = 3008; Count [128, 10240],
        env "LAMBDAFUSION_EXECUTOR_MEMORY_MB", terraform "executor_memory_mb";
    /// Memory of the large executor function in MB, where the deployment has one (the
    /// Terraform module's `large_executor_memory_mb`): a stage whose tasks would finish
    /// sooner there, at a cost within `size_cost_percent` of the executor's, runs on it
    /// ([`crate::plan::adaptive::executor_size`]). Embedded, a task of such a stage gets
    /// the threads of as many function slots as the sizes' ratio. `none`: one size.
    large_executor_memory_mb: Option<usize> = None; Count [128, 10240],
        env "LAMBDAFUSION_LARGE_EXECUTOR_MEMORY_MB", terraform "large_executor_memory_mb";
    /// Most a stage may cost on the large executor, as a percentage of its predicted cost
    /// on the executor, for its tasks to run there (they must also finish sooner): 100
    /// takes the large executor only where it costs no more; 150 lets a stage pay half
    /// as much again to finish sooner.
    size_cost_percent: u32 = 150; Count [100, 100_000],
        env "LAMBDAFUSION_SIZE_COST_PERCENT", terraform "size_cost_percent";
    /// The executor's ephemeral storage (`/tmp`) in MB: the estimate prices what is above
    /// Lambda's free 512 MB for a task's seconds.
    executor_ephemeral_storage_mb: usize = 2048; Count [512, 10240],
        env "LAMBDAFUSION_EXECUTOR_EPHEMERAL_STORAGE_MB",
        terraform "executor_ephemeral_storage_mb";
    /// Memory each task may use before spilling (its own DataFusion memory pool);
    /// `none`: unbounded.
    task_memory_limit: Option<usize> = None; Bytes [1, u64::MAX];
    /// Threads one task runs its plan on; its scan is cut into as many pieces, run at
    /// once, where its plan allows ([`crate::plan::spread`]). `none`: the function's
    /// vCPUs on Lambda (one task per function), embedded the machine's cores shared by
    /// the tasks that run at once (every core for a stage of one task); `1`: one thread
    /// per task.
    task_threads: Option<usize> = None; Count [1, 256], builder with_task_threads;
    /// Least bytes of a task's scan one spread piece reads: a task reading less than
    /// twice this runs on one piece ([`crate::plan::spread`]).
    min_spread_bytes: u64 = 4 * MIB; Bytes [1, u64::MAX], builder with_min_spread_bytes;
    /// Most bytes the tasks of one process may spill to local disk together (DataFusion's
    /// spill files and spilled shuffle slices); past it a task fails with a message naming
    /// the function's ephemeral storage. `none`: DataFusion's own limit (100 GiB). The
    /// Terraform module sets it to each function's ephemeral storage (`/tmp`) minus a
    /// tenth, at least 64 MiB, kept for the runtime and other files.
    max_spill_bytes: Option<usize> = None; Bytes [1, u64::MAX],
        env "LAMBDAFUSION_MAX_SPILL_BYTES";
    /// Time a task keeps in hand before its function's deadline (on Lambda, the timeout):
    /// a task still running then stops and fails its attempt with "task exceeded the
    /// function timeout", while there is time left to record that, instead of being
    /// killed by the runtime.
    deadline_margin: Duration = Duration::from_secs(10); Millis [1, u64::MAX];
    /// Deepest nesting a statement may have: expressions within expressions, subqueries,
    /// set-operation chains and joined tables each add a level ([`crate::sql`]). Past it
    /// the statement is refused before planning (400).
    max_sql_depth: usize = 1_000; Count [1, u64::MAX];
    /// Longest planning may take (parsing, planning, cutting stages; and the statements
    /// the scheduler answers itself), within the query's own time limit.
    max_planning_time: Duration = Duration::from_secs(30); Seconds [1, u64::MAX];
    /// Most stages one query may have (400 past it).
    max_stages_per_query: usize = 200; Count [1, u64::MAX];
    /// Most tasks one query's stages may have together, as planned (400 past it).
    max_tasks_per_query: usize = 20_000; Count [1, u64::MAX];
    /// Largest value a size-making function (`repeat`, `lpad`, `rpad`, `replace`,
    /// `array_repeat`, `range`, ...) may produce in one call, while planning (constant
    /// folding) or in a task ([`crate::plan::functions`]).
    max_value_bytes: usize = (64 * MIB) as usize; Bytes [1, u64::MAX];
    @fixed {
        /// Where tables may live, and who may read what (see [`crate::access`]); on AWS
        /// from `LAMBDAFUSION_DATA_BUCKETS`, `…_ADMIN_PRINCIPALS`, `…_CATALOG_WRITERS` and
        /// `…_MAX_PRESIGN_SECS` (`lambdafusion-aws`'s contract).
        access: crate::access::AccessPolicy = crate::access::AccessPolicy::default();
    }
}

impl EngineConfig {
    /// The most tasks a stage is planned with: `max_tasks_per_stage`, or
    /// `max_tasks_per_caller` when that is lower (no query may need more than a caller
    /// is allowed).
    pub fn stage_width(&self) -> usize {
        self.max_tasks_per_caller
            .map_or(self.max_tasks_per_stage, |cap| {
                cap.min(self.max_tasks_per_stage)
            })
    }

    /// Adds a location tables may be read from (see [`crate::access::AccessPolicy`]).
    pub fn with_data_location(mut self, location: impl Into<String>) -> Self {
        self.access.data_locations.push(location.into());
        self
    }

    /// Adds a location `COPY` may write to (see [`crate::access::AccessPolicy`]).
    pub fn with_write_location(mut self, location: impl Into<String>) -> Self {
        self.access.write_locations.push(location.into());
        self
    }

    /// The back-off before a task throttled `throttles` times is sent again.
    pub fn throttle_backoff(throttles: u32) -> Duration {
        THROTTLE_BACKOFF_BASE
            .saturating_mul(1u32 << throttles.min(16))
            .min(THROTTLE_BACKOFF_CAP)
    }

    /// Number of tasks for `bytes` of input: `ceil(bytes / bytes_per_task)` within
    /// `1..=max_tasks_per_stage`.
    pub fn tasks_for_bytes(&self, bytes: u64) -> usize {
        let tasks = bytes.div_ceil(self.bytes_per_task.max(1));
        (tasks as usize).clamp(1, self.stage_width().max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_follow_input_size_within_bounds() {
        let c = EngineConfig::default()
            .with_bytes_per_task(100)
            .with_max_tasks_per_stage(8);
        assert_eq!(c.tasks_for_bytes(0), 1);
        assert_eq!(c.tasks_for_bytes(100), 1);
        assert_eq!(c.tasks_for_bytes(101), 2);
        assert_eq!(c.tasks_for_bytes(450), 5);
        assert_eq!(c.tasks_for_bytes(10_000), 8);
    }

    #[test]
    fn every_setting_reads_back_what_it_writes() {
        let mut config = EngineConfig::default();
        for setting in SETTINGS {
            let default = setting.default_value();
            if default != "none" {
                config.set(setting.name, &default).unwrap();
                assert_eq!(
                    config.get(setting.name).unwrap(),
                    default,
                    "{}",
                    setting.name
                );
            }
            assert!(
                !setting.doc.trim().is_empty(),
                "{} has no doc",
                setting.name
            );
        }
        let names: std::collections::BTreeSet<_> = SETTINGS.iter().map(|s| s.name).collect();
        assert_eq!(names.len(), SETTINGS.len(), "a setting is declared twice");
    }

    #[test]
    fn values_are_refused_outside_their_bounds_and_clamped_by_builders() {
        let mut config = EngineConfig::default();
        let err = config.set("max_tasks_per_stage", "0").unwrap_err();
        assert!(err.contains("1 to 10000"), "{err}");
        assert!(config.set("max_tasks_per_stage", "10001").is_err());
        assert!(config.set("dispatch_fanout", "1").is_err());
        assert!(config
            .set("fast_path", "maybe")
            .unwrap_err()
            .contains("true or false"));
        assert!(config
            .set("bytes_per_task", "-5")
            .unwrap_err()
            .contains("whole number"));
        assert!(config
            .set("no_such_thing", "1")
            .unwrap_err()
            .contains("no_such_thing"));
        config.set("job_ttl", "2").unwrap();
        assert_eq!(config.job_ttl, Duration::from_secs(2 * 24 * 3600));
        config.set("max_response_bytes", " 4096 ").unwrap();
        assert_eq!(config.max_response_bytes, Some(4096));
        let built = EngineConfig::default()
            .with_max_tasks_per_stage(0)
            .with_dispatch_fanout(1)
            .with_bytes_per_task(0);
        assert_eq!(built.max_tasks_per_stage, 1);
        assert_eq!(built.dispatch_fanout, 2);
        assert_eq!(built.bytes_per_task, 1);
    }

    #[test]
    fn dollar_amounts_are_positive_finite_decimals() {
        let mut config = EngineConfig::default();
        assert_eq!(config.get("max_query_cost_usd").as_deref(), Some("none"));
        config.set("max_query_cost_usd", " 0.25 ").unwrap();
        assert_eq!(config.max_query_cost_usd, Some(0.25));
        assert_eq!(config.get("max_query_cost_usd").as_deref(), Some("0.25"));
        for bad in ["0", "-1", "NaN", "inf", "a dollar", ""] {
            assert!(config.set("max_query_cost_usd", bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            config.max_query_cost_usd,
            Some(0.25),
            "a refused value changes nothing"
        );
    }

    #[test]
    fn throttle_backoff_doubles_up_to_a_cap() {
        assert_eq!(EngineConfig::throttle_backoff(0), Duration::from_secs(1));
        assert_eq!(EngineConfig::throttle_backoff(3), Duration::from_secs(8));
        assert_eq!(EngineConfig::throttle_backoff(40), THROTTLE_BACKOFF_CAP);
    }
}
