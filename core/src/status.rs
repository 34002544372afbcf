//! The status of a job as users see it: state, timings, per-stage progress and metrics,
//! and an estimate of what it would cost on Lambda; and waiting for a job to end
//! ([`wait_for_status`]), which the HTTP API and the embedded engine both do.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::Caller;
use crate::requests::{Request, RequestCounts};
use crate::scheduler::Scheduler;
use crate::state::{counters_of, JobKind, JobSnapshot, StageRecord, TaskState};
use crate::time::now_ms;
use crate::{Error, Services};

/// Lambda price assumptions for the cost estimate (us-east-1, arm64, 2026 list prices).
pub mod prices {
    /// USD per GB-second of arm64 Lambda compute.
    pub const LAMBDA_GB_SECOND: f64 = 0.000_013_333_4;
    /// USD per GB-second of x86_64 Lambda compute (25% more than arm64).
    pub const LAMBDA_GB_SECOND_X86: f64 = 0.000_016_666_7;
    /// USD per GB-second of ephemeral storage above the free 512 MB.
    pub const LAMBDA_STORAGE_GB_SECOND: f64 = 0.000_000_030_9;
    /// USD per GB of log data ingested by CloudWatch Logs.
    pub const LOGS_GB: f64 = 0.50;

    /// The compute price of the architecture this build runs on: what ships is built for
    /// the deploying machine's (`scripts/package --arch`, which the module deploys).
    pub fn lambda_gb_second() -> f64 {
        if std::env::consts::ARCH == "aarch64" {
            LAMBDA_GB_SECOND
        } else {
            LAMBDA_GB_SECOND_X86
        }
    }
    /// USD per Lambda request.
    pub const LAMBDA_REQUEST: f64 = 0.000_000_2;
    /// USD per DynamoDB on-demand write request unit.
    pub const DYNAMODB_WRITE: f64 = 0.000_000_625;
    /// USD per DynamoDB on-demand read request unit.
    pub const DYNAMODB_READ: f64 = 0.000_000_125;
    /// USD per S3 PUT request.
    pub const S3_PUT: f64 = 0.000_005;
    /// USD per S3 GET request.
    pub const S3_GET: f64 = 0.000_000_4;
}

/// Log bytes one task writes to CloudWatch Logs: its own JSON lines and Lambda's START,
/// END and REPORT lines. Measured on the local stack: 0.90 and 0.96 KB per executor
/// invocation (the aws_local and chaos suites), with the emulator's plain-text END and
/// REPORT lines; Lambda's JSON platform lines are longer, hence 2 KB.
pub const LOG_BYTES_PER_TASK: f64 = 2048.0;

/// Per-stage progress and metrics.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StageStatus {
    /// Stage id.
    pub stage: u32,
    /// `pending`, `running` or `complete`.
    pub state: String,
    /// What the stage does.
    pub summary: String,
    /// Input stages and edge kinds, e.g. `"hash shuffle from stage 0"`.
    pub inputs: Vec<String>,
    /// Tasks in the stage.
    pub tasks: u32,
    /// Tasks committed.
    pub tasks_done: u32,
    /// Failed attempts so far.
    pub failed_attempts: u32,
    /// Speculative attempts started beside stragglers.
    #[serde(default)]
    pub speculative_attempts: u32,
    /// Of those, the ones whose commit won.
    #[serde(default)]
    pub speculative_wins: u32,
    /// Run time of the attempts that lost to another (ms, up to the winner's commit):
    /// what speculation cost.
    #[serde(default)]
    pub wasted_ms: u64,
    /// Rows written by committed tasks.
    pub rows: u64,
    /// Bytes written by committed tasks.
    pub bytes: u64,
    /// Shuffle objects written by committed tasks.
    pub objects: u64,
    /// Sum of the committed tasks' run times (ms).
    pub task_ms: u64,
    /// Most threads a committed task of the stage ran its plan on (0: not measured).
    #[serde(default)]
    pub threads: u32,
    /// CPU time the committed tasks' threads used (ms), where measured.
    #[serde(default)]
    pub cpu_ms: u64,
    /// How busy the committed tasks kept the threads they had: their CPU time over their
    /// run time × threads (1.0: every thread busy from start to commit; a task waiting on
    /// reads or using one thread of two shows less). `None` when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_use: Option<f64>,
    /// Memory (MB) of the executor function the stage's tasks run on: the executor's,
    /// or the large executor's for a stage claimed for it (embedded: what it would be on
    /// Lambda, as the cost estimate prices it).
    #[serde(default)]
    pub memory_mb: usize,
    /// Wall time from dispatch to the last commit (ms), once complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// Hand-off time (ms): from the last commit of its input stages to the start of
    /// its first task — the scheduler's wake-up, claim and dispatch, and the invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_ms: Option<u64>,
    /// Sequential requests on the hand-off path of its first task: from the commit that
    /// made it ready to the start of that task's work (the commit, counter reads, the
    /// scheduler's snapshot read and claim, the invocations, the task's reads before
    /// work), when its dispatcher knew them ([`crate::dispatch::Handoff`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_calls: Option<u32>,
    /// How the scheduler was woken for it: `fast` (by the committing task itself) or
    /// `stream` (by the change stream), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_path: Option<String>,
    /// The adaptive decision taken when the stage became ready (`planned`, `coalesced`),
    /// once it was claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Why: what the decision saw and did, e.g. `coalesced 64 shuffle partitions (3.1 MiB)
    /// into 1 task of about 64.0 MiB each`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_note: Option<String>,
    /// Plan partitions of the stage as cut at submit (its tasks, unless coalesced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_tasks: Option<u32>,
    /// Requests made for the stage so far: those its committed tasks counted, and the
    /// scheduler's for its claim, dispatch, retries and wake-ups (see
    /// [`scheduler_requests`]).
    #[serde(default)]
    pub requests: RequestCounts,
}

/// A job's status. `GET /v1/queries/{id}` returns it as JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobStatus {
    /// Job id.
    pub id: String,
    /// `running`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// `query`, `statement` or `analyze` (`EXPLAIN ANALYZE`).
    pub kind: String,
    /// The SQL.
    pub sql: String,
    /// The error, for failed or cancelled jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Submission time (ms since epoch).
    pub created_ms: u64,
    /// End time (ms since epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    /// Time from submission to the end (or to now while running), ms.
    pub elapsed_ms: u64,
    /// Rows in the result (final stage), once succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_rows: Option<u64>,
    /// Tasks committed / total, over all stages.
    pub tasks_done: u32,
    /// Total tasks.
    pub tasks: u32,
    /// Per-stage progress.
    pub stages: Vec<StageStatus>,
    /// Requests made for the query so far: every stage's, and the job's own (creating,
    /// planning, finishing and cleaning up): store reads and writes (DynamoDB), object
    /// GETs / PUTs / LISTs / DELETEs (S3) and function invocations (Lambda).
    #[serde(default)]
    pub requests: RequestCounts,
    /// Estimated cost of the work done so far, in USD, at us-east-1 list prices: the
    /// executors' GB-seconds at the configured memory and this build's architecture, their
    /// ephemeral storage above 512 MB, their log lines, and every request (Lambda,
    /// DynamoDB — one unit per request —, S3); see [`prices`].
    pub estimated_cost_usd: f64,
    /// What a write (`COPY`, kind `write`) wrote: the files its committed writing tasks
    /// made so far, and where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<WriteStatus>,
}

/// The files a write made ([`JobStatus::written`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WriteStatus {
    /// The directory written.
    pub location: String,
    /// Rows in the committed files.
    pub rows: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Committed files.
    pub files: u64,
}

impl JobStatus {
    /// True once the job will not change any more.
    pub fn is_terminal(&self) -> bool {
        self.state != "running"
    }
}

/// What `stage` reads, e.g. `"hash shuffle from stage 0"`: as planned, or as a switched
/// join made it read ([`crate::plan::switch`]).
fn reads(stage: &crate::state::StageRecord) -> Vec<String> {
    use crate::plan::edge_name;
    use crate::state::{EdgeKind, SwitchMode};
    let switched = stage.decision.as_ref().and_then(|d| d.switched);
    let mut reads: Vec<String> = stage
        .inputs
        .iter()
        .filter_map(|i| {
            let kind = match switched {
                // The large side's tasks read the small side; this stage, their states.
                Some(sw) if sw.join == stage.stage && sw.mode == SwitchMode::Aggregate => {
                    if sw.small == i.stage {
                        return None;
                    }
                    "partial aggregates hash-shuffled"
                }
                Some(sw) if sw.join == stage.stage && sw.large == i.stage => "marks",
                Some(sw) if sw.join == stage.stage => edge_name(EdgeKind::Gather),
                _ => edge_name(i.kind),
            };
            Some(format!("{kind} from stage {}", i.stage))
        })
        .collect();
    if let Some(sw) = switched.filter(|sw| sw.large == stage.stage) {
        reads.push(format!(
            "{} from stage {}",
            edge_name(EdgeKind::Broadcast),
            sw.small
        ));
    }
    reads
}

/// From the last commit of the stages `stage` waited for to its first task start.
fn handoff(
    snapshot: &JobSnapshot,
    stage: &crate::state::StageRecord,
    first_start: Option<u64>,
) -> Option<u64> {
    let start = first_start?;
    Some(start.saturating_sub(inputs_done(snapshot, stage, 0)?))
}

/// When the last of the stages `stage` waited for committed: a stage fused into its
/// consumer (no tasks of its own) was done when its own inputs were.
fn inputs_done(
    snapshot: &JobSnapshot,
    stage: &crate::state::StageRecord,
    depth: usize,
) -> Option<u64> {
    if depth > snapshot.stages.len() {
        return None;
    }
    stage
        .waits_for(stage.switch.is_some())
        .map(|input| {
            let s = snapshot.stages.iter().find(|s| s.stage == input)?;
            if s.dispatched_ms.is_some() && s.tasks == 0 {
                inputs_done(snapshot, s, depth + 1)
            } else {
                snapshot.last_commit_ms(s)
            }
        })
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .max()
}

/// The requests the scheduler makes for `stage`, derived from its records (the scheduler
/// does not count as it goes; these follow from what it does):
/// - its claim and the confirmation of its dispatch: two writes; the read of its plans
///   for the tasks' payload (one per plan); one invocation per task;
/// - through an invocation tree: one invocation and one confirmation write per leaf (one
///   per commit counter), one invocation per inner dispatcher (one per
///   [`TREE_FANOUT`] leaves past the first level);
/// - each retry: the failure, the new attempt and its confirmation (three writes), one
///   invocation;
/// - each commit counter that reached 0 wakes the scheduler through the stream: one
///   snapshot read; with the fast path, the task that brought it to 0 reads the stage's
///   counters (when it has several) and the last one runs the scheduler's step itself
///   (one snapshot read).
pub fn scheduler_requests(
    snapshot: &JobSnapshot,
    stage: &StageRecord,
    fast_path: bool,
) -> RequestCounts {
    let mut r = RequestCounts::default();
    if stage.dispatched_ms.is_none() {
        return r;
    }
    r.add(Request::StoreWrite, 2);
    if stage.tasks > 0 {
        let plans = 1 + stage.decision.as_ref().map_or(0, |d| {
            d.fused.len() as u64 + u64::from(d.switched.is_some_and(|s| s.large == stage.stage))
        });
        r.add(Request::StoreRead, plans);
    }
    r.add(Request::Invocation, u64::from(stage.tasks));
    let leaves = snapshot
        .counters
        .iter()
        .filter(|c| c.stage == stage.stage && c.dispatched_ms.is_some())
        .count() as u64;
    if leaves > 0 {
        let inner = if leaves > TREE_FANOUT {
            leaves.div_ceil(TREE_FANOUT)
        } else {
            0
        };
        r.add(Request::Invocation, leaves + inner);
        r.add(Request::StoreWrite, leaves);
    }
    let retries: u64 = snapshot
        .tasks_of(stage.stage)
        .map(|t| u64::from(t.failures))
        .sum();
    r.add(Request::StoreWrite, 3 * retries);
    r.add(Request::Invocation, retries);
    if stage.tasks > 0 {
        let counters = snapshot
            .counters
            .iter()
            .filter(|c| c.stage == stage.stage && c.remaining == 0)
            .count() as u64;
        r.add(Request::StoreRead, counters);
        if fast_path {
            if counters_of(stage.tasks) > 1 {
                r.add(Request::StoreRead, counters);
            }
            if snapshot.stage_complete(stage) {
                r.add(Request::StoreRead, 1);
            }
        }
    }
    r
}

/// The requests of the job itself: those its submission counted while planning
/// ([`JobRecord::requests`](crate::state::JobRecord::requests)), and, derived from its
/// records, creating it (one write per item: job, state item, active entry, history
/// entry, stages and plans), the first scheduler step
/// (a snapshot read) and the state the submission answers with (a read), finishing it
/// (the job item, its state item and its active entry) and deleting its intermediate
/// objects (one LIST, one DELETE per object). The running tasks' polls of the state item
/// are in their own counts.
pub fn job_requests(snapshot: &JobSnapshot) -> RequestCounts {
    let mut r = snapshot.job.requests;
    r.add(Request::StoreWrite, 4 + 2 * snapshot.stages.len() as u64);
    r.add(Request::StoreRead, 2);
    if snapshot.job.state.is_terminal() && snapshot.job.kind != JobKind::Statement {
        r.add(Request::StoreWrite, 3);
        r.add(Request::ObjectList, 1);
        let final_stage = snapshot.job.final_stage();
        let intermediate = snapshot
            .tasks
            .iter()
            .filter(|t| t.stage != final_stage && t.output.is_some())
            .count() as u64;
        r.add(Request::ObjectDelete, intermediate);
    }
    r
}

/// The dispatch fan-out the derived counts of invocation trees assume (the default of
/// [`crate::EngineConfig::dispatch_fanout`]).
pub const TREE_FANOUT: u64 = 32;

/// Builds the status of a job from its snapshot, with the deployment's `config` (its
/// `fast_path` decides the scheduler's derived reads, its executor size the cost).
pub fn job_status(snapshot: &JobSnapshot, config: &crate::EngineConfig) -> JobStatus {
    let fast_path = config.fast_path;
    let job = &snapshot.job;
    let mut stages = Vec::with_capacity(snapshot.stages.len());
    let mut task_cost_usd = 0.0;
    let mut requests = job_requests(snapshot);
    for s in &snapshot.stages {
        let (mut rows, mut bytes, mut objects, mut task_ms, mut failed) = (0, 0, 0, 0, 0);
        let (mut threads, mut cpu_ms, mut capacity_ms) = (0u32, 0u64, 0u64);
        let (mut speculative, mut wins, mut wasted_ms) = (0, 0, 0u64);
        let mut first_start: Option<u64> = None;
        let mut first_handoff = None;
        let mut stage_requests = scheduler_requests(snapshot, s, fast_path);
        for t in snapshot.tasks_of(s.stage) {
            failed += t.failures;
            if let Some(attempt) = t.speculative {
                speculative += 1;
                if let Some(o) = &t.output {
                    // The loser ran until the winner committed (then stopped at its
                    // next batch): the straggler since the stage's dispatch, or the
                    // speculative attempt since its own.
                    let loser_from = if o.attempt == attempt {
                        wins += 1;
                        s.dispatched_ms.unwrap_or(o.started_ms)
                    } else {
                        t.dispatched_ms.unwrap_or(o.finished_ms)
                    };
                    wasted_ms += o.finished_ms.saturating_sub(loser_from);
                }
            }
            if let (TaskState::Succeeded, Some(o)) = (t.state, &t.output) {
                if first_start.is_none_or(|f| o.started_ms < f) {
                    first_handoff = o.handoff;
                }
                first_start = Some(first_start.map_or(o.started_ms, |f| f.min(o.started_ms)));
                rows += o.rows;
                bytes += o.bytes;
                objects += 1;
                let run_ms = o.finished_ms.saturating_sub(o.started_ms);
                task_ms += run_ms;
                if let Some(cpu) = o.cpu {
                    threads = threads.max(cpu.threads);
                    cpu_ms += cpu.cpu_ms;
                    capacity_ms += cpu.capacity_ms(run_ms);
                }
                stage_requests += o.requests;
            }
        }
        let memory_mb = crate::plan::adaptive::executor_size::memory_mb(s.size(), config);
        let runs = objects + u64::from(failed) + u64::from(speculative);
        task_cost_usd += task_cost_at(
            config,
            memory_mb,
            (task_ms + wasted_ms) as f64 / 1000.0,
            runs,
        );
        requests += stage_requests;
        let complete = snapshot.stage_complete(s);
        let state = if complete {
            "complete"
        } else if s.dispatched_ms.is_some() {
            "running"
        } else {
            "pending"
        };
        stages.push(StageStatus {
            stage: s.stage,
            state: state.to_string(),
            summary: s.summary.clone(),
            inputs: reads(s),
            tasks: s.tasks,
            tasks_done: snapshot.succeeded(s.stage).min(s.tasks),
            failed_attempts: failed,
            speculative_attempts: speculative,
            speculative_wins: wins,
            wasted_ms,
            rows,
            bytes,
            objects,
            task_ms,
            threads,
            cpu_ms,
            cpu_use: (capacity_ms > 0).then(|| cpu_ms as f64 / capacity_ms as f64),
            memory_mb,
            elapsed_ms: match (s.dispatched_ms, snapshot.last_commit_ms(s)) {
                (Some(d), Some(c)) => Some(c.saturating_sub(d)),
                _ => None,
            },
            handoff_ms: handoff(snapshot, s, first_start),
            handoff_calls: first_handoff.map(|h| h.calls),
            handoff_path: first_handoff
                .map(|h| if h.stream { "stream" } else { "fast" }.to_string()),
            decision: s.decision.as_ref().map(|d| d.rule.as_str().to_string()),
            decision_note: s.decision.as_ref().map(|d| d.note.clone()),
            planned_tasks: s.decision.as_ref().map(|d| d.partitions),
            requests: stage_requests,
        });
    }
    let written = job.write.as_ref().map(|target| {
        let mut status = WriteStatus {
            location: target.location.clone(),
            rows: 0,
            bytes: 0,
            files: 0,
        };
        for w in snapshot
            .tasks_of(job.final_stage())
            .filter(|t| t.state == crate::state::TaskState::Succeeded)
            .filter_map(|t| t.output.as_ref().and_then(|o| o.written))
        {
            status.rows += w.rows;
            status.bytes += w.bytes;
            status.files += w.files;
        }
        status
    });
    // A write's result is one row saying what it wrote.
    let result_rows = (job.state == crate::state::JobState::Succeeded).then(|| match &written {
        Some(_) => 1,
        None => stages.last().map_or(0, |s| s.rows),
    });
    let end = job.finished_ms.unwrap_or_else(now_ms);
    let cost = task_cost_usd + request_cost(&requests);
    JobStatus {
        id: job.job_id.clone(),
        state: job.state.as_str().to_string(),
        kind: match job.kind {
            JobKind::Query => "query",
            JobKind::Statement => "statement",
            JobKind::Analyze => "analyze",
            JobKind::Write => "write",
        }
        .to_string(),
        sql: job.sql.clone(),
        // A query that failed always says why: a failure recorded without a reason (a
        // store that lost the message) names the failed task instead, or says so.
        error: job.error.clone().or_else(|| {
            (job.state == crate::state::JobState::Failed).then(|| {
                snapshot
                    .tasks
                    .iter()
                    .find_map(|t| t.error.clone())
                    .unwrap_or_else(|| "the query failed without a recorded reason".into())
            })
        }),
        created_ms: job.created_ms,
        finished_ms: job.finished_ms,
        elapsed_ms: end.saturating_sub(job.created_ms),
        result_rows,
        tasks_done: stages.iter().map(|s| s.tasks_done).sum(),
        tasks: stages.iter().map(|s| s.tasks).sum(),
        stages,
        requests,
        estimated_cost_usd: cost,
        written,
    }
}

/// A dollar figure to two significant digits (`$0.0012`, `$1.5`, `$140`), as estimates
/// deserve.
pub fn dollars(usd: f64) -> String {
    if !usd.is_finite() || usd <= 0.0 {
        return "$0".into();
    }
    let mut exponent = usd.log10().floor() as i32;
    let unit = 10f64.powi(exponent - 1);
    let rounded = (usd / unit).round() * unit;
    // Rounding up may reach the next power of ten ($0.0999 -> $0.10).
    if rounded >= 10f64.powi(exponent + 1) {
        exponent += 1;
    }
    format!("${:.*}", (1 - exponent).max(0) as usize, rounded)
}

/// What `seconds` of executor time over `tasks` invocations cost with `config`'s executor:
/// compute, ephemeral storage above 512 MB, and log ingestion.
pub fn task_cost(config: &crate::EngineConfig, seconds: f64, tasks: u64) -> f64 {
    task_cost_at(config, config.executor_memory_mb, seconds, tasks)
}

/// [`task_cost`] on a function of `memory_mb` (the large executor's, for its stages).
pub fn task_cost_at(
    config: &crate::EngineConfig,
    memory_mb: usize,
    seconds: f64,
    tasks: u64,
) -> f64 {
    let gb = memory_mb as f64 / 1024.0;
    let extra_storage_gb = config.executor_ephemeral_storage_mb.saturating_sub(512) as f64 / 1024.0;
    seconds
        * (gb * prices::lambda_gb_second() + extra_storage_gb * prices::LAMBDA_STORAGE_GB_SECOND)
        + tasks as f64 * LOG_BYTES_PER_TASK / 1e9 * prices::LOGS_GB
}

/// What `requests` cost at the list prices of [`prices`] (one billed unit per store
/// request; LISTs at the PUT price, DELETEs free).
pub fn request_cost(requests: &RequestCounts) -> f64 {
    requests.invocations as f64 * prices::LAMBDA_REQUEST
        + requests.store_writes as f64 * prices::DYNAMODB_WRITE
        + requests.store_reads as f64 * prices::DYNAMODB_READ
        + (requests.object_puts + requests.object_lists) as f64 * prices::S3_PUT
        + requests.object_gets as f64 * prices::S3_GET
}

/// The job's status, waiting up to `wait` for it to end (as the embedded engine's caller).
pub async fn wait_for_status(
    services: &Services,
    id: &str,
    wait: Duration,
) -> Result<JobStatus, Error> {
    wait_for_status_as(services, id, wait, &Caller::local()).await
}

/// The status of a job `caller` may see, waiting up to `wait` for it to end. While it
/// waits it reads only the small job item: each time the store says a job changed
/// (embedded: at once), or every [`JOB_POLL_INTERVAL`](crate::state::JOB_POLL_INTERVAL)
/// on a store that cannot say (DynamoDB); the whole job once, at the end. A job found
/// running past its deadline is failed here (whoever looks first records it).
pub async fn wait_for_status_as(
    services: &Services,
    id: &str,
    wait: Duration,
    caller: &Caller,
) -> Result<JobStatus, Error> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Subscribed before the read: a change after it wakes the wait below.
        let mut changes = services.store.job_changes();
        let job = services
            .store
            .get_job(id)
            .await?
            .filter(|j| services.config.access.can_read(caller, &j.owner))
            .ok_or_else(|| Error::NotFound(format!("query {id}")))?;
        if job.is_overdue(now_ms()) {
            // The scheduler step fails it and cleans up; then report what it left.
            Scheduler::new(services.clone()).advance(id).await?;
            continue;
        }
        let now = tokio::time::Instant::now();
        if job.state.is_terminal() || now >= deadline {
            let snapshot = services
                .store
                .load_job(id)
                .await?
                .ok_or_else(|| Error::NotFound(format!("query {id}")))?;
            return Ok(job_status(&snapshot, &services.config));
        }
        // Also wake for the job's own deadline.
        let until = job
            .deadline_ms
            .map(|d| {
                now + Duration::from_millis(d.saturating_sub(now_ms())) + Duration::from_millis(1)
            })
            .map_or(deadline, |d| d.min(deadline));
        match changes.as_mut() {
            Some(changes) => {
                let _ = tokio::time::timeout_at(until, changes.changed()).await;
            }
            None => {
                let pause = crate::state::JOB_POLL_INTERVAL.min(until - now);
                tokio::time::sleep(pause).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_are_shown_to_two_significant_digits() {
        assert_eq!(dollars(0.0023456), "$0.0023");
        assert_eq!(dollars(0.41234), "$0.41");
        assert_eq!(dollars(1.2345), "$1.2");
        assert_eq!(dollars(12.345), "$12");
        assert_eq!(dollars(1234.5), "$1200");
        assert_eq!(dollars(0.0999), "$0.10");
        assert_eq!(dollars(0.001234), "$0.0012");
        assert_eq!(dollars(0.0196), "$0.020");
        assert_eq!(dollars(1.46), "$1.5");
        assert_eq!(dollars(139.7), "$140");
        assert_eq!(dollars(0.0), "$0");
        assert_eq!(dollars(f64::NAN), "$0");
    }

    /// A task's seconds are priced at the executor's memory and this build's
    /// architecture, plus storage above the free 512 MB and its log lines.
    #[test]
    fn task_cost_follows_the_executors_size() {
        let mut config = crate::EngineConfig::default();
        config.set("executor_memory_mb", "1024").unwrap();
        config.set("executor_ephemeral_storage_mb", "512").unwrap();
        let one_gb_hour = task_cost(&config, 3600.0, 0);
        assert!((one_gb_hour - 3600.0 * prices::lambda_gb_second()).abs() < 1e-12);
        config.set("executor_memory_mb", "2048").unwrap();
        assert!((task_cost(&config, 3600.0, 0) - 2.0 * one_gb_hour).abs() < 1e-12);
        config.set("executor_ephemeral_storage_mb", "1536").unwrap();
        let storage = task_cost(&config, 3600.0, 0) - 2.0 * one_gb_hour;
        assert!((storage - 3600.0 * prices::LAMBDA_STORAGE_GB_SECOND).abs() < 1e-12);
        let logs = task_cost(&config, 0.0, 1_000_000);
        assert!((logs - 1e6 * LOG_BYTES_PER_TASK / 1e9 * prices::LOGS_GB).abs() < 1e-9);
    }
    use crate::state::{JobRecord, JobState};

    fn failed(error: Option<&str>) -> JobSnapshot {
        JobSnapshot {
            job: JobRecord {
                task_limit: None,
                job_id: "j".into(),
                sql: "SELECT 1".into(),
                kind: JobKind::Query,
                state: JobState::Failed,
                stage_count: 1,
                result_schema: Vec::new(),
                owner: "local".into(),
                created_ms: 1,
                deadline_ms: None,
                finished_ms: Some(2),
                error: error.map(str::to_string),
                requests: RequestCounts::default(),
                write: None,
                expires_at: 0,
            },
            stages: Vec::new(),
            tasks: Vec::new(),
            counters: Vec::new(),
        }
    }

    #[test]
    fn a_failed_query_always_says_why() {
        assert_eq!(
            job_status(&failed(Some("disk full")), &crate::EngineConfig::default())
                .error
                .as_deref(),
            Some("disk full")
        );
        assert_eq!(
            job_status(&failed(None), &crate::EngineConfig::default())
                .error
                .as_deref(),
            Some("the query failed without a recorded reason")
        );
        let mut running = failed(None);
        running.job.state = JobState::Running;
        assert_eq!(
            job_status(&running, &crate::EngineConfig::default()).error,
            None
        );
    }
}
