//! A priced model of lambdafusion on AWS (`lambdafusion bench tpch --model aws`): each
//! query's latency and cost at scale factors this machine cannot run, from a run it can.
//! **A model, not a measurement**: it multiplies what a real run counted by AWS's list
//! prices and published (or, where AWS publishes none, assumed) latencies.
//!
//! - **Inputs** ([`QueryProfile`]), read from the records of a real run: per stage its
//!   tasks, the bytes its tasks read from tables and from other stages and wrote, their
//!   CPU time (the process's CPU time during the query, shared out by task time), the
//!   requests they made and the scheduler made for them ([`crate::model`] reads the
//!   status's [`RequestCounts`]), and which stages it reads; the hand-off paths'
//!   sequential requests.
//! - **Scaling** to scale factor `s` from the run's `s0` (`f = s / s0`): bytes and CPU
//!   grow by `f`; a stage planned for one task stays one task; any other gets
//!   `ceil(bytes / target)` tasks (scans: `bytes_per_task` of table bytes; shuffle
//!   readers: `shuffle_bytes_per_task`), at most `max_tasks_per_stage`; a hash shuffle
//!   of P producers and C consumer tasks reads P × C ranged GETs, or through a combining
//!   stage P·Gc + C·Gp when P × C passes `max_shuffle_reads`
//!   ([`lambdafusion::plan::adaptive::combine_groups`]); table GETs grow by `f`.
//! - **Latency**: the longest path through the stage graph; a stage takes its hand-off
//!   (the four sequential requests and the async delivery), its dispatch (directly, or
//!   through an invocation tree), and its tasks' time — CPU plus reading and writing S3
//!   at one function's bandwidth and first-byte latency; a stage that needs more
//!   execution environments than the query's stages before it used starts the extra
//!   ones cold (their INIT on its path). Stragglers and throttling are not modelled.
//! - **Cost**: Lambda GB-seconds at the deployment's architecture's price (arm64 or
//!   x86_64; INIT billed, as it is for a custom runtime) and requests, the scheduler's
//!   steps (one per committed share of a stage: its job-state read, claim and invoke),
//!   S3 requests, DynamoDB request units (a task item's size grows with its shuffle's
//!   partitions: every consumer's slice end is in it; every snapshot read reads them
//!   again), against Athena's $5 per TB scanned.

use lambdafusion::plan::adaptive::{combine_groups, executor_size, human_bytes};
use lambdafusion::requests::RequestCounts;
use lambdafusion::state::{EdgeKind, JobSnapshot, StageRecord, TaskState};
use lambdafusion::status::JobStatus;
use lambdafusion::EngineConfig;

use serde::{Deserialize, Serialize};

use crate::display::text_table;
use crate::error::CliError;

/// What a saved profiles file says it is (`bench tpch --save-profiles`).
const PROFILES_FORMAT: &str = "lambdafusion-model-profiles/1";

#[derive(Serialize, Deserialize)]
struct ProfilesFile {
    format: String,
    profiles: Vec<QueryProfile>,
}

/// Writes `profiles` to `path` as JSON, to be priced again by [`load_profiles`].
pub fn save_profiles(path: &std::path::Path, profiles: &[QueryProfile]) -> Result<(), CliError> {
    let file = ProfilesFile {
        format: PROFILES_FORMAT.to_string(),
        profiles: profiles.to_vec(),
    };
    let json = serde_json::to_vec_pretty(&file)?;
    Ok(std::fs::write(path, json).map_err(|e| format!("cannot write {}: {e}", path.display()))?)
}

/// Reads profiles written by [`save_profiles`].
pub fn load_profiles(path: &std::path::Path) -> Result<Vec<QueryProfile>, CliError> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file: ProfilesFile = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "{} is not a profiles file of `bench tpch --model aws --save-profiles`: {e}",
            path.display()
        )
    })?;
    if file.format != PROFILES_FORMAT {
        return Err(format!(
            "{} holds profiles in format {:?}; this version reads {PROFILES_FORMAT:?}",
            path.display(),
            file.format
        )
        .into());
    }
    if file.profiles.is_empty() {
        return Err(format!("{} holds no profiles", path.display()).into());
    }
    Ok(file.profiles)
}

/// The instruction set a deployment's functions run on (`scripts/package --arch`), which
/// sets Lambda's price per GB-second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// Graviton: 20% below x86_64 per GB-second; what `scripts/package` builds by default.
    Arm64,
    /// x86_64.
    #[value(name = "x86_64")]
    X86_64,
}

impl Arch {
    /// USD per GB-second of Lambda on this architecture (us-east-1, the first tier).
    pub fn gb_second(self) -> f64 {
        match self {
            Arch::Arm64 => 0.000_013_333_4,
            Arch::X86_64 => 0.000_016_666_7,
        }
    }

    /// Its name as Lambda spells it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Arm64 => "arm64",
            Arch::X86_64 => "x86_64",
        }
    }
}

/// AWS constants (us-east-1), each with its source in [`AwsConstants::sources`].
#[derive(Debug, Clone, PartialEq)]
pub struct AwsConstants {
    /// The functions' architecture, which [`AwsConstants::lambda_gb_second`] is the
    /// price of.
    pub arch: Arch,
    /// USD per GB-second of Lambda on `arch`.
    pub lambda_gb_second: f64,
    /// A new execution environment's INIT phase (billed for a custom runtime, and on
    /// the path of the task that waits for it), ms.
    pub init_ms: f64,
    /// USD per Lambda request.
    pub lambda_request: f64,
    /// Memory of the executor function, GB.
    pub executor_gb: f64,
    /// Memory of the scheduler function (dispatchers), GB.
    pub scheduler_gb: f64,
    /// USD per S3 GET.
    pub s3_get: f64,
    /// USD per S3 PUT (and LIST).
    pub s3_put: f64,
    /// Median first-byte latency of an S3 GET, ms.
    pub s3_get_ms: f64,
    /// Median latency of a small S3 PUT, ms.
    pub s3_put_ms: f64,
    /// Sustained network bandwidth of one function, MB/s.
    pub function_mb_per_s: f64,
    /// Concurrent ranged GETs one task keeps in flight (the shuffle reader's).
    pub fetch_concurrency: f64,
    /// USD per DynamoDB on-demand write request unit (1 KB).
    pub dynamodb_wru: f64,
    /// USD per DynamoDB on-demand read request unit (4 KB, strongly consistent).
    pub dynamodb_rru: f64,
    /// Median DynamoDB read, ms.
    pub dynamodb_read_ms: f64,
    /// Median DynamoDB write, ms.
    pub dynamodb_write_ms: f64,
    /// A Lambda `Invoke` call with `InvocationType=Event`, ms.
    pub invoke_ms: f64,
    /// From an accepted async invocation to the handler running in a warm
    /// environment, ms (assumed: AWS publishes no figure).
    pub async_start_ms: f64,
    /// Mean wait of a DynamoDB stream record for Lambda's poll (4 polls a second), ms.
    pub stream_poll_ms: f64,
    /// Lambda's vCPU time for a task against this machine's core (1 = as fast).
    pub cpu_factor: f64,
    /// USD per TB Athena scans.
    pub athena_per_tb: f64,
    /// The least Athena bills a query, bytes.
    pub athena_min_bytes: f64,
}

impl AwsConstants {
    /// The constants of us-east-1 (2026 list prices; latencies as sourced), for arm64.
    pub fn us_east_1() -> Self {
        Self::us_east_1_on(Arch::Arm64)
    }

    /// The constants of us-east-1 for functions on `arch`.
    pub fn us_east_1_on(arch: Arch) -> Self {
        Self {
            arch,
            lambda_gb_second: arch.gb_second(),
            init_ms: 50.0,
            lambda_request: 0.20 / 1e6,
            executor_gb: 3008.0 / 1024.0,
            scheduler_gb: 1.0,
            s3_get: 0.0004 / 1000.0,
            s3_put: 0.005 / 1000.0,
            s3_get_ms: 20.0,
            s3_put_ms: 40.0,
            function_mb_per_s: 80.0,
            fetch_concurrency: 8.0,
            dynamodb_wru: 0.625 / 1e6,
            dynamodb_rru: 0.125 / 1e6,
            dynamodb_read_ms: 4.0,
            dynamodb_write_ms: 6.0,
            invoke_ms: 20.0,
            async_start_ms: 25.0,
            stream_poll_ms: 125.0,
            cpu_factor: 1.0,
            athena_per_tb: 5.0,
            athena_min_bytes: 10.0 * 1024.0 * 1024.0,
        }
    }

    /// vCPUs of the executor function: Lambda allots CPU in proportion to memory, one
    /// vCPU's worth per 1,769 MB (5.8 at 10,240 MB, shown as 6 cores), at most 6.
    pub fn executor_vcpus(&self) -> f64 {
        (self.executor_gb * 1024.0 / executor_size::MB_PER_VCPU).min(6.0)
    }

    /// Each constant, its value and where it comes from (for the README and `--model`).
    pub fn sources(&self) -> Vec<(&'static str, String, &'static str)> {
        vec![
            (match self.arch { Arch::Arm64 => "Lambda arm64 GB-second", Arch::X86_64 => "Lambda x86_64 GB-second" }, format!("${:.10}", self.lambda_gb_second), "aws.amazon.com/lambda/pricing (x86_64 $0.0000166667, arm64 $0.0000133334; `--arch`)"),
            ("INIT of a new environment", format!("{} ms", self.init_ms), "ASSUMED, rounded up: the packaged executor polls the Runtime API 19 ms after it starts here (docs/deploy.md, package sizes); a hello-world Rust function's Init Duration is 18-22 ms on Lambda (fulgurion.com); billed for a custom runtime"),
            ("Lambda request", format!("${:.2} per million", self.lambda_request * 1e6), "aws.amazon.com/lambda/pricing"),
            ("executor / scheduler memory", format!("{:.2} / {:.2} GB", self.executor_gb, self.scheduler_gb), "the Terraform module's defaults (3008 MB, 1024 MB)"),
            ("executor vCPUs", format!("{:.2}", self.executor_vcpus()), "one per 1,769 MB (Lambda docs, configuration-memory); a task's CPU runs on as many as it read pieces at once"),
            ("S3 GET", format!("${:.4} per 1,000", self.s3_get * 1000.0), "aws.amazon.com/s3/pricing (S3 Standard)"),
            ("S3 PUT, LIST", format!("${:.3} per 1,000", self.s3_put * 1000.0), "aws.amazon.com/s3/pricing (S3 Standard)"),
            ("S3 GET first byte", format!("{} ms", self.s3_get_ms), "median of small GETs from Lambda, 18-41 ms (hpides/skyrise measurements); AWS: \"tens of milliseconds\" (S3 performance whitepaper)"),
            ("S3 PUT", format!("{} ms", self.s3_put_ms), "median of small PUTs from Lambda, 36-44 ms (hpides/skyrise)"),
            ("bandwidth of one function", format!("{} MB/s", self.function_mb_per_s), "71-82 MB/s sustained (hpides/skyrise iperf); AWS: 85-90 MB/s per connection (S3 performance guidelines)"),
            ("DynamoDB write / read unit", format!("${:.3} / ${:.3} per million", self.dynamodb_wru * 1e6, self.dynamodb_rru * 1e6), "aws.amazon.com/dynamodb/pricing/on-demand (after the November 2024 cut)"),
            ("DynamoDB read / write", format!("{} / {} ms", self.dynamodb_read_ms, self.dynamodb_write_ms), "\"single-digit millisecond\" (DynamoDB docs); medians 3.8-4.0 / 5.5-5.7 ms from Lambda (hpides/skyrise)"),
            ("Lambda Invoke (Event)", format!("{} ms", self.invoke_ms), "assumed, as the local stack's Invoke API answers"),
            ("async invocation to handler", format!("{} ms", self.async_start_ms), "ASSUMED: AWS publishes no figure; measure on a deployment"),
            ("stream poll wait", format!("{} ms mean", self.stream_poll_ms), "Lambda polls a DynamoDB stream shard 4 times a second (Lambda docs, with-ddb)"),
            ("Lambda CPU vs this machine", format!("{}x", self.cpu_factor), "ASSUMED equal per core"),
            ("Athena", format!("${} per TB, {} MB minimum", self.athena_per_tb, self.athena_min_bytes / 1048576.0), "aws.amazon.com/athena/pricing"),
        ]
    }
}

/// One stage as a real run measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageProfile {
    /// Stage id.
    pub stage: u32,
    /// Stages it reads, and how.
    pub inputs: Vec<(u32, EdgeKind)>,
    /// Tasks it ran.
    pub tasks: u32,
    /// Plan partitions it was cut with (1: it always runs one task).
    pub planned: u32,
    /// Bytes its tasks read from tables.
    pub table_bytes: u64,
    /// Bytes of the table files its plan partitions cover (what `bytes_per_task` cuts);
    /// 0 when unknown (then `table_bytes` stands in).
    pub file_bytes: u64,
    /// Bytes its tasks read from other stages.
    pub shuffle_bytes: u64,
    /// Bytes its tasks wrote.
    pub out_bytes: u64,
    /// CPU time of its tasks, ms.
    pub cpu_ms: f64,
    /// The most pieces one of its tasks read at once (its scan spread over its threads,
    /// or a coalesced task's partitions); 0 or 1: one. A task's CPU time runs on as many
    /// vCPUs as this, at most its function's.
    #[serde(default)]
    pub pieces: u32,
    /// GETs of table data.
    pub table_gets: u64,
    /// Its requests (its tasks' and the scheduler's for it).
    pub requests: RequestCounts,
}

/// CPU time of a stage's committed tasks as their threads measured it, ms; `None` unless
/// every one of them did.
fn measured_cpu(snapshot: &JobSnapshot, stage: u32) -> Option<f64> {
    snapshot
        .tasks_of(stage)
        .filter(|t| t.state == TaskState::Succeeded)
        .map(|t| t.output.as_ref()?.cpu.map(|c| c.cpu_ms as f64))
        .sum()
}

/// One query as a real run measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryProfile {
    /// Its name (`q1`).
    pub name: String,
    /// The scale factor it ran at.
    pub sf: f64,
    /// Its stages, in topological order.
    pub stages: Vec<StageProfile>,
    /// Planning and recording the job, ms.
    pub submit_ms: f64,
    /// Sequential requests of its hand-offs (the median over its stages).
    pub handoff_calls: u32,
}

/// Reads a query's profile from a finished run: its records (`snapshot`), its status
/// (requests, hand-offs), how long its submission took, and the process's CPU time while
/// it ran. A stage's CPU time is what its tasks' threads measured where every committed
/// task measured it; else its share of the process's (by task time), or without that,
/// its tasks' run times.
pub fn profile(
    name: &str,
    sf: f64,
    snapshot: &JobSnapshot,
    status: &JobStatus,
    submit_ms: f64,
    cpu_ms: Option<f64>,
) -> QueryProfile {
    let task_ms: Vec<f64> = snapshot
        .stages
        .iter()
        .map(|s| {
            snapshot
                .tasks_of(s.stage)
                .filter(|t| t.state == TaskState::Succeeded)
                .filter_map(|t| t.output.as_ref())
                .map(|o| o.finished_ms.saturating_sub(o.started_ms) as f64)
                .sum()
        })
        .collect();
    let total_task_ms: f64 = task_ms.iter().sum();
    let stages = snapshot
        .stages
        .iter()
        .zip(&task_ms)
        .map(|(s, &ms)| {
            let measured = status.stages.iter().find(|x| x.stage == s.stage);
            let requests = measured.map(|x| x.requests).unwrap_or_default();
            let task_gets: u64 = snapshot
                .tasks_of(s.stage)
                .filter_map(|t| t.output.as_ref())
                .map(|o| o.requests.object_gets)
                .sum();
            let inputs = read_stages(snapshot, s);
            let written = |stage: u32| -> u64 {
                snapshot
                    .tasks_of(stage)
                    .filter_map(|t| t.output.as_ref())
                    .map(|o| o.bytes)
                    .sum()
            };
            // What its tasks read of other stages: all they wrote, a broadcast once per
            // task.
            let shuffle_bytes: u64 = inputs
                .iter()
                .map(|&(i, kind)| match kind {
                    EdgeKind::Broadcast => written(i) * u64::from(s.tasks.max(1)),
                    _ => written(i),
                })
                .sum();
            let get_bytes: u64 = snapshot
                .tasks_of(s.stage)
                .filter_map(|t| t.output.as_ref())
                .map(|o| o.requests.object_get_bytes)
                .sum();
            let producers: u64 = inputs
                .iter()
                .map(|&(i, _)| u64::from(snapshot.succeeded(i)))
                .sum();
            StageProfile {
                stage: s.stage,
                inputs,
                tasks: s.tasks,
                planned: s.decision.as_ref().map_or(s.tasks, |d| d.partitions),
                table_bytes: get_bytes.saturating_sub(shuffle_bytes),
                file_bytes: s.scan_bytes.iter().sum(),
                shuffle_bytes,
                out_bytes: measured.map_or(0, |x| x.bytes),
                cpu_ms: match (measured_cpu(snapshot, s.stage), cpu_ms) {
                    (Some(own), _) => own,
                    (None, Some(cpu)) if total_task_ms > 0.0 => cpu * ms / total_task_ms,
                    _ => ms,
                },
                pieces: snapshot
                    .tasks_of(s.stage)
                    .filter_map(|t| t.output.as_ref()?.cpu)
                    .map(|c| c.pieces)
                    .max()
                    .unwrap_or(1),
                // What its tasks read beyond one GET per producer read is table data.
                table_gets: task_gets.saturating_sub(producers * u64::from(s.tasks.max(1))),
                requests,
            }
        })
        .collect();
    QueryProfile {
        name: name.to_string(),
        sf,
        stages,
        submit_ms,
        handoff_calls: {
            let mut calls: Vec<u32> = status
                .stages
                .iter()
                .filter_map(|s| s.handoff_calls)
                .collect();
            calls.sort_unstable();
            calls.get(calls.len() / 2).copied().unwrap_or(4)
        },
    }
}

/// The stages whose outputs `stage`'s tasks read, and how: its inputs, those of the
/// stages fused into it, each as the stage that wrote it (a switched join's large side).
fn read_stages(snapshot: &JobSnapshot, stage: &StageRecord) -> Vec<(u32, EdgeKind)> {
    let kind_of = |input: u32| {
        std::iter::once(stage)
            .chain(snapshot.stages.iter())
            .flat_map(|s| s.inputs.iter())
            .find(|i| i.stage == input)
            .map_or(EdgeKind::Gather, |i| i.kind)
    };
    match &stage.decision {
        Some(d) => d
            .input_tasks
            .iter()
            .map(|&(input, _)| {
                let source = d
                    .read_from
                    .iter()
                    .find(|(i, _)| *i == input)
                    .map_or(input, |&(_, s)| s);
                (source, kind_of(input))
            })
            .collect(),
        None => stage.inputs.iter().map(|i| (i.stage, i.kind)).collect(),
    }
}

/// One stage at a scale factor.
#[derive(Debug, Clone, PartialEq)]
pub struct StageEstimate {
    /// Stage id.
    pub stage: u32,
    /// Tasks.
    pub tasks: u32,
    /// One task's time, ms.
    pub task_ms: f64,
    /// Dispatching its tasks, ms.
    pub dispatch_ms: f64,
    /// When it ends, from the query's submission, ms.
    pub end_ms: f64,
    /// S3 GETs.
    pub gets: f64,
    /// S3 PUTs.
    pub puts: f64,
    /// Lambda invocations.
    pub invocations: f64,
    /// DynamoDB write and read request units.
    pub wru: f64,
    /// DynamoDB read request units.
    pub rru: f64,
    /// GB-seconds: its tasks', their new environments' INIT, and the scheduler's for
    /// its dispatch and the steps its commits wake.
    pub gb_seconds: f64,
    /// Memory of the executor function its tasks run on, MB (the large executor's where
    /// the scheduler would choose it).
    pub memory_mb: usize,
    /// Execution environments it starts cold (beyond those the query's stages before
    /// it used).
    pub cold: u32,
    /// Where the model departs from the measured stage's shape, and why.
    pub note: String,
}

/// One query at a scale factor.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryEstimate {
    /// Its name.
    pub name: String,
    /// Scale factor.
    pub sf: f64,
    /// Submission to the last task's end, ms.
    pub latency_ms: f64,
    /// Dollars.
    pub cost: f64,
    /// Table bytes scanned.
    pub scanned_bytes: f64,
    /// What Athena would bill for the same scan.
    pub athena_cost: f64,
    /// Tasks in all.
    pub tasks: u64,
    /// Per stage.
    pub stages: Vec<StageEstimate>,
}

impl QueryEstimate {
    /// Dollars per TB scanned.
    pub fn per_tb(&self) -> f64 {
        self.cost / (self.scanned_bytes / 1e12).max(1e-12)
    }
}

/// The hand-off's sequential requests priced (ms): the commit (task item and counter
/// written at once), the scheduler's snapshot read, the claim (its plans read beside it),
/// the invocation and its delivery; `stream` adds the stream's polling wait.
pub fn handoff_ms(c: &AwsConstants, stream: bool) -> f64 {
    c.dynamodb_write_ms
        + c.dynamodb_read_ms
        + c.dynamodb_write_ms.max(c.dynamodb_read_ms)
        + c.invoke_ms
        + c.async_start_ms
        + if stream { c.stream_poll_ms } else { 0.0 }
}

/// The hand-off path, call by call, with each call's modelled time.
pub fn handoff_path(c: &AwsConstants) -> Vec<(&'static str, f64)> {
    vec![
        (
            "commit: task item and counter (two writes at once)",
            c.dynamodb_write_ms,
        ),
        (
            "snapshot read by the scheduler's step (one Query)",
            c.dynamodb_read_ms,
        ),
        (
            "claim, with the stage's plans read beside it",
            c.dynamodb_write_ms.max(c.dynamodb_read_ms),
        ),
        ("invoke (Event) of the tasks", c.invoke_ms),
        (
            "async delivery to a warm executor (not a request)",
            c.async_start_ms,
        ),
        ("executor's reads before work (payload carries them)", 0.0),
    ]
}

/// Dispatching `tasks` invocations, ms: directly at `dispatch_concurrency`, or through an
/// invocation tree of `fanout` per dispatcher (each level one invoke round and one async
/// delivery).
pub fn dispatch_ms(c: &AwsConstants, config: &EngineConfig, tasks: u32) -> f64 {
    let concurrency = config.dispatch_concurrency.max(1) as f64;
    let fanout = config.dispatch_fanout.max(2) as u32;
    if !lambdafusion::scheduler::is_tree(tasks, fanout) {
        return (f64::from(tasks) / concurrency).ceil() * c.invoke_ms;
    }
    let mut levels = 1;
    let mut span = 32u32; // a leaf dispatcher sends one commit counter's tasks
    while span < tasks {
        span = span.saturating_mul(fanout);
        levels += 1;
    }
    let round = (f64::from(fanout) / concurrency).ceil() * c.invoke_ms;
    f64::from(levels) * round + f64::from(levels - 1) * c.async_start_ms
}

/// One scheduler step woken by a stage's commits, ms: its job-state read (a snapshot
/// Query), the next stage's claim and its invocations.
pub fn scheduler_step_ms(c: &AwsConstants) -> f64 {
    c.dynamodb_read_ms + c.dynamodb_write_ms.max(c.dynamodb_read_ms) + c.invoke_ms
}

/// Tree dispatchers for `tasks` tasks (see [`lambdafusion::scheduler::tree_dispatchers`]).
fn dispatchers(config: &EngineConfig, tasks: u32) -> u32 {
    lambdafusion::scheduler::tree_dispatchers(tasks, config.dispatch_fanout.max(2) as u32)
}

/// Ranged GETs for reading a hash shuffle of `producers` producers in `consumers` tasks.
pub fn shuffle_gets(config: &EngineConfig, producers: u32, consumers: u32, bytes: f64) -> f64 {
    let (p, c) = (u64::from(producers), u64::from(consumers));
    if p * c <= config.max_shuffle_reads || p <= 1 {
        return (p * c) as f64;
    }
    let combine = config.shuffle_bytes_per_task.saturating_mul(4).max(1);
    let (gp, gc) = combine_groups(producers, c, consumers, bytes as u64, combine);
    (p * u64::from(gc) + c * u64::from(gp)) as f64
}

/// A stage whose output is less than this share of its input reduces its rows (an
/// aggregation, a selective filter): its output grows with its tasks, not with the data.
const REDUCING: f64 = 0.01;

/// The estimate of `query` at scale factor `sf` on AWS.
///
/// Stage by stage, in topological order: its table bytes grow by `f`; what it reads of
/// other stages grows as they write; its CPU time grows as its input; what it writes grows
/// as its input too — unless it reduces (writes under 1% of what it reads), when each of
/// its tasks is taken to write what it wrote (an aggregate's groups). See the
/// [module docs](self).
///
/// Long because it is the model's arithmetic, stage by stage, kept as one derivation
/// so it reads like the module docs' formulas.
pub fn estimate(
    query: &QueryProfile,
    sf: f64,
    c: &AwsConstants,
    config: &EngineConfig,
) -> QueryEstimate {
    let f = sf / query.sf.max(1e-9);
    let mut stages: Vec<StageEstimate> = Vec::new();
    // (stage, tasks, bytes written) at `sf`.
    let mut scaled: Vec<(u32, u32, f64)> = Vec::new();
    let mut cost = 0.0;
    let mut scanned = 0.0;
    // Execution environments the query has used so far, per function size: a stage
    // needing more starts the rest cold (the query's first stage: all of them).
    let mut warm: std::collections::BTreeMap<usize, u32> = Default::default();
    for s in &query.stages {
        let table = s.table_bytes as f64 * f;
        let written_by = |input: u32| {
            let before = query
                .stages
                .iter()
                .find(|p| p.stage == input)
                .map_or(0.0, |p| p.out_bytes as f64);
            let after = scaled
                .iter()
                .find(|(st, _, _)| *st == input)
                .map_or(before, |&(_, _, b)| b);
            (before, after)
        };
        // What its tasks read of other stages: a hash-shuffled or gathered input once in
        // all (it divides among the tasks), a broadcast whole by every task.
        let sum = |broadcast: bool| {
            s.inputs
                .iter()
                .filter(|(_, kind)| (*kind == EdgeKind::Broadcast) == broadcast)
                .map(|&(i, _)| written_by(i))
                .fold((0.0, 0.0), |(b, a), (x, y)| (b + x, a + y))
        };
        let (divided_before, divided) = sum(false);
        let (_, broadcast_each) = sum(true);
        let input_before = (s.table_bytes + s.shuffle_bytes) as f64;
        let per_task =
            |bytes: f64, target: u64| -> u64 { (bytes / target.max(1) as f64).ceil() as u64 };
        // A stage that scans a table is cut by its files' bytes, whatever else it reads.
        let files = if s.file_bytes > 0 {
            s.file_bytes as f64
        } else if s.inputs.is_empty() {
            s.table_bytes as f64
        } else {
            0.0
        } * f;
        let mut notes = Vec::new();
        // A one-task stage reading a hash shuffle runs the partitions of a stage fused
        // into it (the engine fuses a producer sized to one task): at a scale where
        // that producer needs several tasks it runs as a stage of its own, modelled
        // here as this stage cut by its shuffle input.
        let fused = s.planned <= 1 && s.inputs.iter().any(|(_, k)| *k == EdgeKind::Hash);
        let tasks = if s.tasks == 0 {
            0
        } else if s.planned <= 1 && !fused {
            1
        } else {
            per_task(files, config.bytes_per_task)
                .max(per_task(divided, config.shuffle_bytes_per_task))
                .clamp(1, config.max_tasks_per_stage as u64) as u32
        };
        if fused && tasks > 1 {
            notes.push(format!(
                "ran one task with a stage fused into it; at this size that stage runs \
                 its own {tasks} tasks (the final step's task after them not modelled)"
            ));
        }
        if broadcast_each > config.max_broadcast_bytes as f64 && tasks > 1 {
            notes.push(format!(
                "each task reads a {} broadcast, over the {} a switch allows: the planner \
                 would partition this join (an upper bound)",
                human_bytes(broadcast_each as u64),
                human_bytes(config.max_broadcast_bytes)
            ));
        }
        let shuffle = divided + broadcast_each * f64::from(tasks);
        if s.planned <= 1
            && tasks == 1
            && table + shuffle > 4.0 * config.shuffle_bytes_per_task as f64
        {
            notes.push(format!(
                "planned for one task, which reads {} (an upper bound)",
                human_bytes((table + shuffle) as u64)
            ));
        }
        let growth = if input_before > 0.0 {
            (table + shuffle) / input_before
        } else {
            f
        };
        let reduces = (s.out_bytes as f64) < input_before * REDUCING;
        let out = if reduces && s.tasks > 0 {
            s.out_bytes as f64 * f64::from(tasks) / f64::from(s.tasks)
        } else {
            // Its rows come from what it scans and what is shuffled to it; a broadcast
            // read by each task adds none.
            let before = s.table_bytes as f64 + divided_before;
            s.out_bytes as f64
                * if before > 0.0 {
                    (table + divided) / before
                } else {
                    growth
                }
        };
        scaled.push((s.stage, tasks, out));
        scanned += table;
        if tasks == 0 {
            stages.push(StageEstimate {
                stage: s.stage,
                tasks: 0,
                task_ms: 0.0,
                dispatch_ms: 0.0,
                end_ms: 0.0,
                gets: 0.0,
                puts: 0.0,
                invocations: 0.0,
                wru: 2.0,
                rru: 0.0,
                gb_seconds: 0.0,
                memory_mb: 0,
                cold: 0,
                note: notes.join("; "),
            });
            cost += 2.0 * c.dynamodb_wru;
            continue;
        }
        let n = f64::from(tasks);
        // Reads of other stages: per edge, by how it is read.
        let mut gets = s.table_gets as f64 * f;
        for (input, kind) in &s.inputs {
            let producers = scaled
                .iter()
                .find(|(st, _, _)| st == input)
                .map_or(1, |&(_, t, _)| t.max(1));
            gets += match kind {
                EdgeKind::Hash => shuffle_gets(config, producers, tasks, shuffle),
                EdgeKind::Broadcast => f64::from(producers) * n,
                EdgeKind::Gather => f64::from(producers),
            };
        }
        let read_bytes = table + shuffle;
        let io_ms = read_bytes / n / (c.function_mb_per_s * 1e6) * 1e3
            + (gets / n / c.fetch_concurrency).ceil() * c.s3_get_ms
            + out / n / (c.function_mb_per_s * 1e6) * 1e3
            + c.s3_put_ms;
        // Its CPU time on as many vCPUs as it ran pieces at once, at most its function's —
        // every vCPU for a one-task stage the engine plans again at its threads.
        let piece = config.min_spread_bytes.max(1) as f64;
        let pieces = if tasks == 1 && read_bytes / n >= 2.0 * piece {
            f64::INFINITY
        } else {
            f64::from(s.pieces.max(1))
        };
        let cpu_ms = s.cpu_ms * growth * c.cpu_factor / n;
        let on = |vcpus: f64| cpu_ms / pieces.min(vcpus).max(1.0) + io_ms;
        let standard_ms = on(c.executor_vcpus());
        // The function the scheduler would choose, by the same comparison
        // ([`executor_size`]) from this stage's own CPU share.
        let standard_mb = (c.executor_gb * 1024.0).round() as usize;
        let large = config.large_executor_memory_mb.filter(|&large| {
            let share = (standard_ms - io_ms) / standard_ms.max(1e-9);
            let compared = executor_size::compare(standard_mb, large, share, pieces);
            executor_size::takes_large(compared, config.size_cost_percent)
        });
        let (task_ms, memory_mb) = match large {
            Some(mb) => (on(executor_size::vcpus(mb)), mb),
            None => (standard_ms, standard_mb),
        };
        let executor_gb = memory_mb as f64 / 1024.0;
        // An output held in memory is one PUT; past an eighth of a task's memory the
        // writer spills and uploads it in 8 MiB parts (start, parts, completion).
        let per_task_out = out / n;
        let spills = per_task_out > executor_gb * 1e9 / 8.0;
        let puts = n * if spills {
            (per_task_out / (8.0 * 1048576.0)).ceil() + 2.0
        } else {
            1.0
        };
        let tree = dispatchers(config, tasks);
        // New environments this stage starts, each billed its INIT and waited for.
        let cold = {
            let used = warm.entry(memory_mb).or_insert(0);
            let cold = tasks.saturating_sub(*used);
            *used = (*used).max(tasks);
            cold
        };
        // The scheduler's steps it wakes: one per commit counter's share of its tasks
        // (the stream's filter passes a counter reaching 0), each a job-state read, a
        // claim and the next stage's invocations.
        let steps = f64::from(tasks.div_ceil(config.dispatch_fanout.max(1) as u32));
        let step_ms = scheduler_step_ms(c);
        let invocations = n + f64::from(tree) + steps;
        // A task item holds one slice end per partition it wrote (8 bytes, about 1 KB of
        // the rest): its commit writes that many 1 KB units, and every scheduler
        // snapshot read after it reads them again.
        let out_slices = query
            .stages
            .iter()
            .filter(|c| {
                c.inputs
                    .iter()
                    .any(|(i, k)| *i == s.stage && *k == EdgeKind::Hash)
            })
            .map(|consumer| {
                let shuffle = consumer.shuffle_bytes as f64 * f;
                let wanted = (shuffle / config.shuffle_bytes_per_task.max(1) as f64).ceil();
                (wanted as u64).clamp(1, config.max_tasks_per_stage as u64) as u32
            })
            .max()
            .unwrap_or(1);
        let item_kb = 1.0 + f64::from(out_slices) * 8.0 / 1024.0;
        let wru = n * (item_kb.ceil() + 1.0) + 4.0 + f64::from(tree);
        let snapshot_reads = (s.requests.store_reads as f64).max(1.0);
        let rru = n * item_kb / 4.0 * snapshot_reads.min(4.0) + n;
        let gb_seconds = n * task_ms / 1e3 * executor_gb
            + f64::from(cold) * c.init_ms / 1e3 * executor_gb
            + (f64::from(tree) * 50.0 + steps * step_ms) / 1e3 * c.scheduler_gb;
        let start = s
            .inputs
            .iter()
            .filter_map(|(i, _)| stages.iter().find(|e| e.stage == *i).map(|e| e.end_ms))
            .fold(query.submit_ms, f64::max);
        let handoff = if s.inputs.is_empty() {
            0.0
        } else {
            handoff_ms(c, false)
        };
        let dispatch = dispatch_ms(c, config, tasks);
        let init = if cold > 0 { c.init_ms } else { 0.0 };
        let end_ms = start + handoff + dispatch + init + task_ms;
        cost += gb_seconds * c.lambda_gb_second
            + invocations * c.lambda_request
            + gets * c.s3_get
            + puts * c.s3_put
            + wru * c.dynamodb_wru
            + rru * c.dynamodb_rru;
        stages.push(StageEstimate {
            stage: s.stage,
            tasks,
            task_ms,
            dispatch_ms: dispatch,
            end_ms,
            gets,
            puts,
            invocations,
            wru,
            rru,
            gb_seconds,
            memory_mb,
            cold,
            note: notes.join("; "),
        });
    }
    let latency_ms = stages
        .iter()
        .map(|s| s.end_ms)
        .fold(query.submit_ms, f64::max);
    QueryEstimate {
        name: query.name.clone(),
        sf,
        latency_ms,
        cost,
        scanned_bytes: scanned,
        athena_cost: scanned.max(c.athena_min_bytes) / 1e12 * c.athena_per_tb,
        tasks: stages.iter().map(|s| u64::from(s.tasks)).sum(),
        stages,
    }
}

/// One query's estimate stage by stage: tasks, dispatch, one task's time, when the stage
/// ends, its requests and its cost's parts.
pub fn stage_report(e: &QueryEstimate) -> String {
    let rows: Vec<Vec<String>> = e
        .stages
        .iter()
        .map(|s| {
            vec![
                s.stage.to_string(),
                s.tasks.to_string(),
                format!("{:.0}", s.dispatch_ms),
                format!("{:.0}", s.task_ms),
                format!("{:.0}", s.end_ms),
                format!("{:.0}", s.gets),
                format!("{:.0}", s.puts),
                format!("{:.1}", s.gb_seconds),
                s.memory_mb.to_string(),
                s.cold.to_string(),
                s.note.clone(),
            ]
        })
        .collect();
    text_table(
        &[
            "stage",
            "tasks",
            "dispatch ms",
            "task ms",
            "ends at ms",
            "GETs",
            "PUTs",
            "GB-s",
            "MB",
            "cold",
            "note",
        ],
        &rows,
    )
}

pub use lambdafusion::status::dollars;

/// The model's tables: per query and scale factor the tasks, latency, cost and its ratio
/// to Athena; the totals; the hand-off path; the constants with their sources.
pub fn report(
    profiles: &[QueryProfile],
    scales: &[f64],
    c: &AwsConstants,
    config: &EngineConfig,
) -> String {
    let mut out = String::new();
    let measured = profiles.first().map_or(0.0, |p| p.sf);
    out.push_str(&format!(
        "A MODEL, NOT A MEASUREMENT: the queries' tasks, bytes, requests and CPU time as \
         measured at SF {measured} on this machine, scaled to each scale factor and priced \
         with the AWS constants below. Dollars to two significant digits.\n\
         Assumptions: bytes, requests and CPU time grow linearly with the scale factor \
         from that one run; tasks follow the engine's sizing rules at each scale; a Lambda \
         vCPU is as fast as one core here ({}x); S3 and DynamoDB answer within the \
         latencies below, without throttling; nothing fails and is retried; each query \
         runs alone on an idle deployment (every environment its widest stage needs starts \
         cold once, INIT {} ms); functions on {} (${:.2} per million GB-seconds). Not \
         modelled: skew, spills, memory pressure, environments kept warm by other \
         queries.\n\n",
        c.cpu_factor,
        c.init_ms,
        c.arch.name(),
        c.lambda_gb_second * 1e6
    ));
    let mut rows = Vec::new();
    let mut totals: Vec<(f64, f64, f64, f64)> = vec![(0.0, 0.0, 0.0, 0.0); scales.len()];
    for p in profiles {
        let mut row = vec![p.name.clone()];
        for (i, &sf) in scales.iter().enumerate() {
            let e = estimate(p, sf, c, config);
            row.push(format!(
                "{} / {:.2} s / {} ({:.2}x)",
                e.tasks,
                e.latency_ms / 1e3,
                dollars(e.cost),
                e.cost / e.athena_cost.max(1e-12)
            ));
            totals[i].0 += e.latency_ms;
            totals[i].1 += e.cost;
            totals[i].2 += e.scanned_bytes;
            totals[i].3 += e.athena_cost;
        }
        rows.push(row);
    }
    let mut total = vec!["total".to_string()];
    for t in &totals {
        total.push(format!(
            "{:.1} s / {} ({}/TB; Athena {})",
            t.0 / 1e3,
            dollars(t.1),
            dollars(t.1 / (t.2 / 1e12).max(1e-12)),
            dollars(t.3)
        ));
    }
    rows.push(total);
    // The same totals on the other architecture, for the comparison the price makes.
    let other = match c.arch {
        Arch::Arm64 => Arch::X86_64,
        Arch::X86_64 => Arch::Arm64,
    };
    let on_other = AwsConstants {
        arch: other,
        lambda_gb_second: other.gb_second(),
        ..c.clone()
    };
    let other_totals: Vec<String> = scales
        .iter()
        .map(|&sf| {
            let (cost, scanned) = profiles
                .iter()
                .map(|p| estimate(p, sf, &on_other, config))
                .fold((0.0, 0.0), |(c, b), e| (c + e.cost, b + e.scanned_bytes));
            format!(
                "SF {sf}: {} ({}/TB)",
                dollars(cost),
                dollars(cost / (scanned / 1e12).max(1e-12))
            )
        })
        .collect();
    let headers: Vec<String> = std::iter::once("query".to_string())
        .chain(
            scales
                .iter()
                .map(|s| format!("SF {s}: tasks / latency / cost (vs Athena)")),
        )
        .collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    out.push_str(&text_table(&headers, &rows));
    out.push_str(&format!(
        "\nThe same on {} (--arch): {}\n",
        other.name(),
        other_totals.join("; ")
    ));
    if let (Some(large), Some(&sf)) = (config.large_executor_memory_mb, scales.last()) {
        let chosen: Vec<String> = profiles
            .iter()
            .filter_map(|p| {
                let e = estimate(p, sf, c, config);
                let up: Vec<String> = e
                    .stages
                    .iter()
                    .filter(|s| s.memory_mb == large)
                    .map(|s| s.stage.to_string())
                    .collect();
                (!up.is_empty()).then(|| format!("{} (stage {})", p.name, up.join(", ")))
            })
            .collect();
        out.push_str(&format!(
            "\nFunction size per stage at SF {sf}: the executor ({:.0} MB) unless the large \
             executor ({large} MB) finishes it sooner within size_cost_percent ({}%) of its \
             cost, by the scheduler's comparison from each stage's measured CPU share \
             (the per-stage table has each stage's MB). On the large executor: {}.\n",
            c.executor_gb * 1024.0,
            config.size_cost_percent,
            if chosen.is_empty() {
                "no stage".to_string()
            } else {
                chosen.join("; ")
            }
        ));
    }
    let mut calls: Vec<u32> = profiles.iter().map(|p| p.handoff_calls).collect();
    calls.sort_unstable();
    let calls = calls.get(calls.len() / 2).copied().unwrap_or(4);
    out.push_str(&format!(
        "\nHand-off critical path (last commit of a stage's inputs to its first task at \
         work): {calls} sequential requests measured (median), modelled {:.0} ms (via the \
         stream: {:.0} ms)\n",
        handoff_ms(c, false),
        handoff_ms(c, true)
    ));
    let path: Vec<Vec<String>> = handoff_path(c)
        .into_iter()
        .map(|(what, ms)| vec![what.to_string(), format!("{ms:.0}")])
        .collect();
    out.push_str(&text_table(&["step", "ms"], &path));
    out.push_str("\nConstants (us-east-1):\n");
    let constants: Vec<Vec<String>> = c
        .sources()
        .into_iter()
        .map(|(what, value, source)| vec![what.to_string(), value, source.to_string()])
        .collect();
    out.push_str(&text_table(&["constant", "value", "source"], &constants));
    out
}

/// This process's CPU time (user + system) so far, ms, from `/proc/self/stat` (Linux;
/// `None` elsewhere).
pub fn process_cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) closed by ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after ')'.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Clock ticks of 1/100 s on Linux.
    Some((utime + stime) * 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constants() -> AwsConstants {
        AwsConstants {
            arch: Arch::Arm64,
            lambda_gb_second: 0.00001,
            init_ms: 100.0,
            lambda_request: 0.0000002,
            executor_gb: 2.0,
            scheduler_gb: 1.0,
            s3_get: 0.0000004,
            s3_put: 0.000005,
            s3_get_ms: 20.0,
            s3_put_ms: 40.0,
            function_mb_per_s: 100.0,
            fetch_concurrency: 10.0,
            dynamodb_wru: 0.000001,
            dynamodb_rru: 0.0000002,
            dynamodb_read_ms: 4.0,
            dynamodb_write_ms: 6.0,
            invoke_ms: 20.0,
            async_start_ms: 25.0,
            stream_poll_ms: 125.0,
            cpu_factor: 1.0,
            athena_per_tb: 5.0,
            athena_min_bytes: 10e6,
        }
    }

    /// A scan of 10 tasks feeding an aggregate of 2 tasks through a hash shuffle, at SF 1.
    fn profile() -> QueryProfile {
        QueryProfile {
            name: "q".into(),
            sf: 1.0,
            submit_ms: 100.0,
            handoff_calls: 4,
            stages: vec![
                StageProfile {
                    stage: 0,
                    inputs: vec![],
                    tasks: 10,
                    planned: 10,
                    table_bytes: 1_000_000_000,
                    file_bytes: 1_000_000_000,
                    shuffle_bytes: 0,
                    out_bytes: 100_000_000,
                    cpu_ms: 20_000.0,
                    pieces: 1,
                    table_gets: 100,
                    requests: RequestCounts {
                        store_reads: 2,
                        ..Default::default()
                    },
                },
                StageProfile {
                    stage: 1,
                    inputs: vec![(0, EdgeKind::Hash)],
                    tasks: 2,
                    planned: 10,
                    table_bytes: 0,
                    file_bytes: 0,
                    shuffle_bytes: 100_000_000,
                    out_bytes: 1_000,
                    cpu_ms: 1_000.0,
                    pieces: 1,
                    table_gets: 0,
                    requests: RequestCounts {
                        store_reads: 2,
                        ..Default::default()
                    },
                },
            ],
        }
    }

    fn config() -> EngineConfig {
        EngineConfig::default()
            .with_bytes_per_task(100_000_000)
            .with_shuffle_bytes_per_task(50_000_000)
            .with_max_tasks_per_stage(1_000)
    }

    /// A task that read its scan as two pieces at once runs its CPU time on two vCPUs of
    /// a function that has them, and on the 1.70 of a 3,008 MB one; one piece, on one.
    #[test]
    fn a_spread_task_runs_its_cpu_on_the_functions_vcpus() {
        let one = estimate(&profile(), 1.0, &constants(), &config());
        let mut spread = profile();
        spread.stages[0].pieces = 2;
        // The hand-checked constants have a 2 GB function: 2048 / 1769 = 1.158 vCPUs.
        let c = constants();
        assert!((c.executor_vcpus() - 2048.0 / 1769.0).abs() < 1e-9);
        let two = estimate(&spread, 1.0, &c, &config());
        // Scan: 2,000 ms of CPU per task (3,160 ms in all) on 1.158 vCPUs.
        let expected = 3_160.0 - 2_000.0 + 2_000.0 / (2048.0 / 1769.0);
        assert!(
            (two.stages[0].task_ms - expected).abs() < 1e-6,
            "{}",
            two.stages[0].task_ms
        );
        assert!(two.stages[0].task_ms < one.stages[0].task_ms);
        // The aggregate read one piece: unchanged.
        assert_eq!(two.stages[1].task_ms, one.stages[1].task_ms);
        // At 10,240 MB (5.8 vCPUs' worth on 6 cores), two pieces use two.
        let big = AwsConstants {
            executor_gb: 10.0,
            ..constants()
        };
        assert!((big.executor_vcpus() - 10240.0 / 1769.0).abs() < 1e-9);
        let wide = estimate(&spread, 1.0, &big, &config());
        assert!((wide.stages[0].task_ms - (3_160.0 - 1_000.0)).abs() < 1e-6);
        let us = AwsConstants::us_east_1();
        assert!((us.executor_vcpus() - 1.7004).abs() < 1e-3);
    }

    /// With a large executor, a CPU-bound one-task stage (planned again at its function's
    /// threads) runs there, sooner, at the GB-seconds of its memory; a scan of one piece
    /// per task, which no vCPU speeds, stays on the executor; a cost percent below what
    /// the large one costs keeps both there.
    #[test]
    fn a_cpu_bound_one_task_stage_is_priced_on_the_large_executor() {
        let mut q = profile();
        q.stages[1].inputs = vec![(0, EdgeKind::Gather)];
        q.stages[1].tasks = 1;
        q.stages[1].planned = 1;
        q.stages[1].cpu_ms = 50_000.0;
        let c = constants();
        let one_size = estimate(&q, 1.0, &c, &config());
        assert_eq!(one_size.stages[1].memory_mb, 2048);
        let mut sized = config();
        sized.set("large_executor_memory_mb", "10240").unwrap();
        let two = estimate(&q, 1.0, &c, &sized);
        assert_eq!(
            two.stages[0].memory_mb, 2048,
            "one piece per task: no sooner"
        );
        assert_eq!(two.stages[0], one_size.stages[0]);
        let (small, large) = (&one_size.stages[1], &two.stages[1]);
        assert_eq!(large.memory_mb, 10240);
        // 50 s of CPU on 1.16 vCPUs or on 5.79, beside the same reads.
        let io = small.task_ms - 50_000.0 / (2048.0 / 1769.0);
        assert!((large.task_ms - (io + 50_000.0 / (10240.0 / 1769.0))).abs() < 1e-6);
        // Its task, the large executor's first environment's INIT, one scheduler step.
        assert_eq!(large.cold, 1);
        let init = c.init_ms / 1e3 * 10.0;
        let step = scheduler_step_ms(&c) / 1e3 * c.scheduler_gb;
        assert!((large.gb_seconds - (large.task_ms / 1e3 * 10.0 + init + step)).abs() < 1e-9);
        assert!(large.gb_seconds > small.gb_seconds && large.gb_seconds < 1.5 * small.gb_seconds);
        assert!(two.latency_ms < one_size.latency_ms);
        sized.set("size_cost_percent", "100").unwrap();
        let thrifty = estimate(&q, 1.0, &c, &sized);
        assert_eq!(thrifty.stages[1].memory_mb, 2048);
    }

    /// The arithmetic, by hand, at the profile's own scale (SF 1).
    #[test]
    fn a_two_stage_query_by_hand() {
        let c = constants();
        let e = estimate(&profile(), 1.0, &c, &config());
        // Scan: 10 tasks (1 GB at 100 MB), each 2,000 ms of CPU, reading 100 MB at
        // 100 MB/s (1,000 ms), 10 GETs in one round (20 ms), writing 10 MB (100 ms), one
        // PUT (40 ms): 3,160 ms; dispatched in one invoke round (20 ms), from 100 ms, on
        // 10 new environments (INIT 100 ms).
        let scan = &e.stages[0];
        assert_eq!(scan.tasks, 10);
        assert_eq!(scan.cold, 10);
        assert!((scan.task_ms - 3_160.0).abs() < 1e-6, "{}", scan.task_ms);
        assert_eq!(scan.dispatch_ms, 20.0);
        assert!((scan.end_ms - 3_380.0).abs() < 1e-6);
        // Aggregate: 100 MB at 50 MB → 2 tasks, 10 × 2 = 20 GETs; 500 ms of CPU, 50 MB
        // read (500 ms), one GET round (20 ms), 500 bytes written (0.005 ms), one PUT
        // (40 ms); a hand-off of 6 + 4 + 6 + 20 + 25 = 61 ms, one dispatch round; its
        // 2 tasks run where the scan's 10 ran: no INIT.
        let agg = &e.stages[1];
        assert_eq!(agg.tasks, 2);
        assert_eq!(agg.cold, 0);
        assert_eq!(agg.gets, 20.0);
        assert!((agg.task_ms - 1_060.005).abs() < 1e-6, "{}", agg.task_ms);
        assert!((agg.end_ms - (3_380.0 + 61.0 + 20.0 + 1_060.005)).abs() < 1e-6);
        assert!((e.latency_ms - agg.end_ms).abs() < 1e-9);
        // Cost of the scan stage: 10 × 3.16 s × 2 GB × $0.00001 = $0.000632 of Lambda,
        // 10 INITs of 0.1 s at 2 GB, one scheduler step its commits wake (4 + 6 + 20 ms
        // at 1 GB); 11 requests; 100 GETs; 10 PUTs; 10 × (2 + 1) + 4 = 34 WRU (items of 2
        // slice ends, its consumer's 2 tasks: 1.02 KB → 2 units, plus the counter); RRU:
        // 10 × 1.016 / 4 × 2 + 10.
        let scan_cost = 10.0 * 3.16 * 2.0 * 0.00001
            + 10.0 * 0.1 * 2.0 * 0.00001
            + 0.03 * 1.0 * 0.00001
            + 11.0 * 0.0000002
            + 100.0 * 0.0000004
            + 10.0 * 0.000005
            + 34.0 * 0.000001
            + (10.0 * (1.0 + 16.0 / 1024.0) / 4.0 * 2.0 + 10.0) * 0.0000002;
        let agg_cost = 2.0 * 1.060005 * 2.0 * 0.00001
            + 0.03 * 1.0 * 0.00001
            + 3.0 * 0.0000002
            + 20.0 * 0.0000004
            + 2.0 * 0.000005
            + (2.0 * 3.0 + 4.0) * 0.000001
            + (2.0 * (1.0 + 8.0 / 1024.0) / 4.0 * 2.0 + 2.0) * 0.0000002;
        assert!(
            (e.cost - (scan_cost + agg_cost)).abs() < 1e-12,
            "{} vs {}",
            e.cost,
            scan_cost + agg_cost
        );
        assert!((e.athena_cost - 1e9 / 1e12 * 5.0).abs() < 1e-12);
    }

    /// A stage wider than those before it starts only the extra environments cold, with
    /// their INIT on its path; on x86_64 every GB-second costs a quarter more.
    #[test]
    fn new_environments_and_the_architecture_are_priced() {
        let c = constants();
        let narrow = estimate(&profile(), 1.0, &c, &config());
        // The aggregate's 100 MB at 5 MB a task: 20 tasks where the scan ran 10.
        let config = config().with_shuffle_bytes_per_task(5_000_000);
        let wide = estimate(&profile(), 1.0, &c, &config);
        assert_eq!((wide.stages[1].tasks, wide.stages[1].cold), (20, 10));
        let at = |e: &QueryEstimate| e.stages[1].end_ms - e.stages[1].task_ms;
        assert!((at(&wide) - at(&narrow) - c.init_ms).abs() < 1e-9);
        let arm = estimate(
            &profile(),
            1.0,
            &AwsConstants::us_east_1_on(Arch::Arm64),
            &config,
        );
        let x86 = estimate(
            &profile(),
            1.0,
            &AwsConstants::us_east_1_on(Arch::X86_64),
            &config,
        );
        let gb_seconds: f64 = arm.stages.iter().map(|s| s.gb_seconds).sum();
        let more = gb_seconds * (Arch::X86_64.gb_second() - Arch::Arm64.gb_second());
        assert!((x86.cost - arm.cost - more).abs() < 1e-12);
        assert!((Arch::X86_64.gb_second() / Arch::Arm64.gb_second() - 1.25).abs() < 1e-4);
    }

    /// Scaled a thousand times: tasks, bytes and CPU grow, the shuffle goes through a
    /// combining stage's reads once producers × consumers passes the limit, and the
    /// stage is sent through an invocation tree.
    #[test]
    fn scaling_grows_tasks_and_combines_wide_shuffles() {
        let c = constants();
        let e = estimate(&profile(), 1_000.0, &c, &config());
        assert_eq!(e.stages[0].tasks, 1_000, "capped at max_tasks_per_stage");
        // 100 GB of shuffle at 50 MB: 2,000 tasks wanted, 1,000 allowed.
        assert_eq!(e.stages[1].tasks, 1_000);
        // 1,000 × 1,000 = 1,000,000 direct reads, past 65,536: combined.
        let direct = 1_000.0 * 1_000.0;
        assert!(e.stages[1].gets < direct / 5.0, "{}", e.stages[1].gets);
        assert_eq!(
            e.stages[1].gets,
            shuffle_gets(&config(), 1_000, 1_000, 100e9)
        );
        assert!(
            e.stages[0].dispatch_ms > 20.0,
            "a tree: more than one round"
        );
        assert!(e.latency_ms > 3_000.0);
        assert!(e.cost > 1_000.0 * 0.000632);
    }

    /// Dispatch: one invoke round per `dispatch_concurrency` invocations up to the
    /// fan-out; past it, a round and an async delivery per tree level.
    #[test]
    fn dispatch_directly_or_through_the_tree() {
        let c = constants();
        let config = EngineConfig::default(); // 32 at once, 32 per dispatcher
        assert_eq!(dispatch_ms(&c, &config, 1), 20.0);
        assert_eq!(dispatch_ms(&c, &config, 32), 20.0);
        // 1,000 tasks: the scheduler to 32 leaves, each to its 32 tasks.
        assert_eq!(dispatch_ms(&c, &config, 1_000), 2.0 * 20.0 + 25.0);
        // 10,000: one more level.
        assert_eq!(dispatch_ms(&c, &config, 10_000), 3.0 * 20.0 + 2.0 * 25.0);
        assert_eq!(handoff_ms(&c, false), 61.0);
        assert_eq!(handoff_ms(&c, true), 186.0);
    }

    #[test]
    fn saved_profiles_price_the_same_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profiles.json");
        save_profiles(&path, &[profile()]).unwrap();
        let loaded = load_profiles(&path).unwrap();
        assert_eq!(loaded, vec![profile()]);
        assert_eq!(
            estimate(&loaded[0], 100.0, &constants(), &config()),
            estimate(&profile(), 100.0, &constants(), &config())
        );

        std::fs::write(&path, "{\"format\": \"something/9\", \"profiles\": []}").unwrap();
        let wrong = load_profiles(&path).unwrap_err().to_string();
        assert!(wrong.contains("something/9"), "{wrong}");
        std::fs::write(&path, "[1, 2]").unwrap();
        let garbage = load_profiles(&path).unwrap_err().to_string();
        assert!(garbage.contains("not a profiles file"), "{garbage}");
        let missing = load_profiles(&dir.path().join("none.json"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("none.json"), "{missing}");
    }

    /// A small table scanned in one task, broadcast to a scan of 10 tasks that joins its
    /// rows to it (as q9 or q19 run), and a final stage planned for one task.
    fn broadcast_join() -> QueryProfile {
        let stage =
            |stage, inputs, tasks, planned, file_bytes, shuffle_bytes, out_bytes| StageProfile {
                stage,
                inputs,
                tasks,
                planned,
                table_bytes: file_bytes / 2,
                file_bytes,
                shuffle_bytes,
                out_bytes,
                cpu_ms: 1_000.0,
                pieces: 1,
                table_gets: 10,
                requests: RequestCounts::default(),
            };
        QueryProfile {
            name: "join".into(),
            sf: 1.0,
            submit_ms: 100.0,
            handoff_calls: 4,
            stages: vec![
                stage(0, vec![], 1, 1, 10_000_000, 0, 100_000),
                // Ten tasks, each read the whole 100 kB: 1 MB of broadcast.
                stage(
                    1,
                    vec![(0, EdgeKind::Broadcast)],
                    10,
                    10,
                    1_000_000_000,
                    1_000_000,
                    1_000,
                ),
                stage(2, vec![(1, EdgeKind::Gather)], 1, 1, 0, 1_000, 100),
            ],
        }
    }

    #[test]
    fn a_scan_that_reads_a_broadcast_is_cut_by_its_scan() {
        let c = constants();
        let e = estimate(&broadcast_join(), 100.0, &c, &config());
        // 100 GB of files at 100 MB per task: 1,000 tasks, not the one task its 10 MB
        // of broadcast would ask for.
        assert_eq!(e.stages[1].tasks, 1_000);
        assert!(e.stages[1].note.is_empty(), "{}", e.stages[1].note);
        // The small side is planned for one task, and stays one.
        assert_eq!(e.stages[0].tasks, 1);
        assert_eq!(e.stages[2].tasks, 1);
        // Each of 1,000 tasks reads the 10 MB broadcast whole: 10 GB, one GET per
        // producer each; and 100 GB of table.
        assert_eq!(e.stages[1].gets, 10.0 * 100.0 + 1_000.0);
        let io_ms = (100e9 / 2.0 + 10e9) / 1_000.0 / 100e6 * 1e3;
        assert!(
            e.stages[1].task_ms > io_ms,
            "{} > {io_ms}",
            e.stages[1].task_ms
        );

        // At SF 1,000 the broadcast (100 MB) is over the switch's limit: said so.
        let e = estimate(&broadcast_join(), 1_000.0, &c, &config());
        assert!(
            e.stages[1]
                .note
                .contains("over the 16.0 MiB a switch allows"),
            "{}",
            e.stages[1].note
        );
        // The one-task stages' inputs stay small (the scan's output reduces).
        assert!(e.stages[2].note.is_empty(), "{}", e.stages[2].note);
    }

    #[test]
    fn a_one_task_stage_with_a_fused_partitioned_stage_is_cut_at_scale() {
        let mut query = broadcast_join();
        // The final stage reads the scan hash-shuffled: a partitioned aggregate fused
        // into one task, as adaptive stages run a small one.
        query.stages[2].inputs = vec![(1, EdgeKind::Hash)];
        query.stages[1].out_bytes = 10_000_000;
        query.stages[2].shuffle_bytes = 10_000_000;
        let c = constants();
        let small = estimate(&query, 1.0, &c, &config());
        assert_eq!(small.stages[2].tasks, 1, "10 MB: one task");
        assert!(small.stages[2].note.is_empty());
        // At SF 100 the scan writes 1 GB: 20 tasks of 50 MB.
        let large = estimate(&query, 100.0, &c, &config());
        assert_eq!(large.stages[2].tasks, 20);
        assert!(
            large.stages[2].note.contains("fused"),
            "{}",
            large.stages[2].note
        );
        // A one-task stage gathering its input stays one task.
        query.stages[2].inputs = vec![(1, EdgeKind::Gather)];
        let gathered = estimate(&query, 100.0, &c, &config());
        assert_eq!(gathered.stages[2].tasks, 1);
        assert!(gathered.stages[2].note.contains("planned for one task"));
    }
}
