//! The records of the job store: one job item, one item per stage, one per task (written
//! only when a task has something to say: a retry, a failure or its completion), commit
//! counters, stage plans, and one item per catalog table. Field names are the attribute
//! names of the DynamoDB items.

use serde::{Deserialize, Serialize};

use crate::dispatch::ExecutorSize;
use crate::requests::RequestCounts;

/// Lifecycle of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Stages are being dispatched and run.
    Running,
    /// Every stage completed; the result is readable.
    Succeeded,
    /// A task failed for good, or planning the job failed after it was recorded.
    Failed,
    /// Cancelled by a user; running tasks stop at their next batch.
    Cancelled,
}

impl JobState {
    /// True for the states a job never leaves.
    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::Running)
    }

    /// Lower-case name used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

/// What a job is: a distributed query, or a statement the scheduler answers itself
/// (DDL, `SHOW TABLES`, `EXPLAIN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobKind {
    /// A query cut into stages and run by executors.
    Query,
    /// A statement answered inline by the scheduler; its result is one object.
    Statement,
    /// `EXPLAIN ANALYZE`: a query run like any other, whose tasks record their operators'
    /// metrics; its result is the stage plans annotated with them.
    Analyze,
    /// `COPY ... TO`: a query whose final stage writes files ([`crate::write`]), made
    /// visible by the commit that ends the job; its result is one row saying what it
    /// wrote.
    Write,
}

/// The job item (`sk = META`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Job id.
    pub job_id: String,
    /// The SQL text as submitted.
    pub sql: String,
    /// Query or statement.
    pub kind: JobKind,
    /// Current state.
    pub state: JobState,
    /// Number of stages; the last one (`stage_count - 1`) produces the result.
    pub stage_count: u32,
    /// Schema of the result (see [`crate::plan::encode_schema`]).
    #[serde(with = "b64")]
    pub result_schema: Vec<u8>,
    /// Who submitted it (an IAM principal ARN, a JWT subject, or `local`): only they (and
    /// the deployment's admins) may read it, its result, or cancel it.
    #[serde(default)]
    pub owner: String,
    /// Submission time (ms since epoch).
    pub created_ms: u64,
    /// The job fails if it has not finished by then (ms since epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// When the job reached a terminal state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    /// Why the job failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The requests its submission made before the job was recorded: reading the
    /// catalog, listing and reading table files while planning, writing large stage
    /// plans ([`crate::requests`]).
    #[serde(default, skip_serializing_if = "RequestCounts::is_zero")]
    pub requests: RequestCounts,
    /// The tasks the job may have in flight at once, reserved out of its caller's
    /// `max_tasks_per_caller` (its widest stage, at most the cap); `None` without a cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_limit: Option<u32>,
    /// What a write job writes, where ([`JobKind::Write`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<crate::write::WriteTarget>,
    /// Expiry (seconds since epoch) for the store's TTL.
    pub expires_at: u64,
}

impl JobRecord {
    /// Id of the stage whose output is the job's result.
    pub fn final_stage(&self) -> u32 {
        self.stage_count.saturating_sub(1)
    }

    /// Whether the job is still running at `now_ms` past its deadline.
    pub fn is_overdue(&self, now_ms: u64) -> bool {
        self.state == JobState::Running && self.deadline_ms.is_some_and(|d| now_ms > d)
    }

    /// The message a job failed for its deadline carries.
    pub fn deadline_message(&self) -> String {
        let limit = self
            .deadline_ms
            .map_or(0, |d| d.saturating_sub(self.created_ms).div_ceil(1000));
        format!(
            "the query did not finish within its time limit of {limit} s \
             (`max_seconds` in the request, at most the deployment's max_query_seconds); \
             its running tasks stop at their next batch"
        )
    }
}

/// Whether a stage's tasks have been dispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StageState {
    /// Waiting for its inputs.
    Pending,
    /// Claimed by a scheduler invocation, which dispatches its tasks.
    Dispatched,
}

/// How a stage reads one of its input stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// Hash shuffle: task `p` reads slice `p` of every producer.
    Hash,
    /// Gather: the stage reads every producer's whole output as one partition each
    /// (coalesce, sort-preserving merge).
    Gather,
    /// Broadcast: every task reads all of every producer (build side of a join).
    Broadcast,
}

/// One input edge of a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageInput {
    /// Producing stage.
    pub stage: u32,
    /// How it is read.
    pub kind: EdgeKind,
    /// A hash shuffle whose rows may be split across tasks: every operator between its
    /// reader and the stage's writer handles each row on its own (the other inputs read
    /// in full), so a skewed partition can run as several tasks, each over some of its
    /// producers' slices ([`crate::plan::adaptive`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub splittable: bool,
    /// For a hash shuffle: the partitions its reader was planned for, which its
    /// producers' slices must match. Under a `UNION ALL` of shuffles of other widths it
    /// differs from the stage's partitions (the union's partitions are its inputs' one
    /// after another). `None` in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
}

/// A stage item (`sk = STAGE#<n>`): small and written only at creation, claim and
/// dispatch confirmation — commits never touch it (they write their task item and a
/// [`CommitCounter`]); the plan lives apart ([`PlanRecord`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    /// Job id.
    pub job_id: String,
    /// Stage id, `0..stage_count`, in topological order.
    pub stage: u32,
    /// Pending or dispatched.
    pub state: StageState,
    /// Number of tasks (= partitions the stage runs).
    pub tasks: u32,
    /// Output slices each task writes (hash shuffle width, or 1).
    pub output_partitions: u32,
    /// Stages this one reads.
    pub inputs: Vec<StageInput>,
    /// One line saying what the stage does, for progress displays.
    pub summary: String,
    /// Bytes each plan partition of a leaf stage scans (from the plan's file groups);
    /// empty for other stages. The adaptive planner merges partitions too small to be
    /// worth a task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scan_bytes: Vec<u64>,
    /// Set on the large side of a partitioned semi / anti / mark join whose other side
    /// may turn out small ([`crate::plan::switch`]): the stage then waits for that side
    /// too, and at its claim the join's strategy is chosen from its real size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<JoinSwitch>,
    /// Set on a combining stage: the second level of a two-level exchange, between stage
    /// `n`'s hash shuffle and its consumer. At its claim it regroups each group of
    /// producers' slices per group of partitions — or, when few reads would be saved,
    /// runs no tasks and lets the consumer read stage `n` directly
    /// ([`crate::plan::adaptive`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combines: Option<u32>,
    /// When the stage was claimed for dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched_ms: Option<u64>,
    /// When every task invocation of the claim was accepted (or deferred). A claimed stage
    /// without it past the dispatch deadline lost its dispatcher: its tasks are re-sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed_ms: Option<u64>,
    /// What the claiming scheduler decided from the stage's committed inputs (written
    /// with the claim, which also sets `tasks` to the decided count); `None` while pending,
    /// and for stages planned before adaptive stages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<StageDecision>,
    /// Expiry (seconds since epoch) for the store's TTL.
    pub expires_at: u64,
}

impl StageRecord {
    /// The executor function its tasks run on: its claim's choice (the executor before
    /// it is claimed).
    pub fn size(&self) -> ExecutorSize {
        self.decision.as_ref().map(|d| d.size).unwrap_or_default()
    }

    /// The stages that must be complete before this one is claimed: its inputs and,
    /// while adaptive stages are on, the small side of a join it may switch.
    pub fn waits_for(&self, adaptive: bool) -> impl Iterator<Item = u32> + '_ {
        self.inputs
            .iter()
            .map(|i| i.stage)
            .chain(self.switch.filter(|_| adaptive).map(|s| s.small))
    }

    /// The plan partitions task `task` runs: one partition per task as planned, or a
    /// contiguous range of them when the stage was coalesced.
    pub fn partitions_of(&self, task: u32) -> std::ops::Range<u32> {
        match &self.decision {
            Some(d) => d.partitions_of(task),
            None => task..task + 1,
        }
    }
}

/// Which adaptive rule shaped a stage when it became ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdaptiveRule {
    /// Run as planned: one task per plan partition.
    Planned,
    /// Small shuffle partitions merged: each task runs a contiguous range of partitions.
    Coalesced,
    /// Runs inside its one consumer's single task (no tasks, no shuffle of its own): a
    /// single-task stage feeding a single-task stage gains nothing from the boundary.
    Fused,
    /// A skewed partition split: it runs as several tasks, each reading some of one
    /// input's producers (the other inputs in full); small partitions may be coalesced.
    Split,
    /// A partitioned join switched to a broadcast of its side that turned out small: the
    /// large side's stage reads it whole and marks its rows instead of hash-shuffling,
    /// and the join's stage combines the marks in one task ([`crate::plan::switch`]).
    Broadcast,
    /// A combining stage ([`StageRecord::combines`]): each task reads one group of
    /// producers' slices of one group of partitions (one ranged GET per producer) and
    /// writes them as one object, so that consumers read one object per producer group.
    Combined,
}

/// A partitioned semi / anti / mark join of stage `join` over hash shuffles of stages
/// `small` and `large` that may run as a broadcast of `small` instead, when `small`
/// turns out to be small ([`crate::plan::switch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinSwitch {
    /// The stage holding the join.
    pub join: u32,
    /// The side that may be broadcast (the rows the join emits or drops).
    pub small: u32,
    /// The other side: a stage reading no hash shuffle, read only by `join`.
    pub large: u32,
    /// How the switched join runs.
    #[serde(default)]
    pub mode: SwitchMode,
}

/// How a switched join runs ([`crate::plan::switch`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchMode {
    /// A semi / anti / mark join: the large side's tasks write one mark per small-side
    /// row, and the join's stage combines them in one task.
    #[default]
    Marks,
    /// An inner join: the large side's tasks run the join's whole stage over their own
    /// rows (the small side read whole), writing its output; the join's stage runs no
    /// tasks, and its consumers read what the large side wrote.
    Join,
    /// An inner join under an aggregate of its stage that needs its input
    /// hash-partitioned (DataFusion's `SinglePartitioned`, grouping by the join key):
    /// the large side's tasks run the join over their own rows (the small side read
    /// whole) and the aggregate's partial form, writing partial states hash-shuffled on
    /// the group keys; the join's stage runs the aggregate's final form over them and
    /// the rest of its plan.
    Aggregate,
}

impl AdaptiveRule {
    /// Name shown in the status and EXPLAIN.
    pub fn as_str(self) -> &'static str {
        match self {
            AdaptiveRule::Planned => "planned",
            AdaptiveRule::Coalesced => "coalesced",
            AdaptiveRule::Fused => "fused",
            AdaptiveRule::Split => "split",
            AdaptiveRule::Broadcast => "broadcast",
            AdaptiveRule::Combined => "combined",
        }
    }
}

/// What the scheduler that claimed a stage decided from the rows and bytes its input
/// stages committed (see [`crate::plan::adaptive`]). A pure function of the job's records,
/// so two racing schedulers decide the same; only the claim's winner writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageDecision {
    /// The rule applied.
    pub rule: AdaptiveRule,
    /// Partitions of the stage plan (its planned task count).
    pub partitions: u32,
    /// Tasks the stage runs.
    pub tasks: u32,
    /// First plan partition of each task when tasks run several partitions; empty: task
    /// `t` runs partition `t`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub starts: Vec<u32>,
    /// `(stage, committed tasks)` of every stage the tasks read, at the claim — the
    /// stage's inputs and those of the stages fused into it (a task checks it is handed
    /// exactly these outputs).
    #[serde(default)]
    pub input_tasks: Vec<(u32, u32)>,
    /// Stages whose plans run inside this stage's tasks, in place of their readers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fused: Vec<u32>,
    /// Tasks of a split partition that read only some producers of one input.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skew: Vec<SkewRead>,
    /// The join switched to a broadcast, on its large side's and its own stage's
    /// decisions: their tasks run the rewritten plans of [`crate::plan::switch`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switched: Option<JoinSwitch>,
    /// `(input, stage)`: inputs whose output another stage wrote — a join's stage whose
    /// switched join ran inside its large side's tasks ([`SwitchMode::Join`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_from: Vec<(u32, u32)>,
    /// Rows the input stages committed.
    #[serde(default)]
    pub input_rows: u64,
    /// Bytes the stage's tasks read in all (a broadcast counts once per task).
    #[serde(default)]
    pub input_bytes: u64,
    /// One line saying what was decided and why, for the status and EXPLAIN.
    pub note: String,
    /// The executor function its tasks run on
    /// ([`crate::plan::adaptive::executor_size`]).
    #[serde(default, skip_serializing_if = "ExecutorSize::is_standard")]
    pub size: ExecutorSize,
}

/// One task of a split partition: it reads producers `producers.0..producers.1` of input
/// stage `stage` (and every producer of the other inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkewRead {
    /// The task.
    pub task: u32,
    /// The input stage whose producers are divided.
    pub stage: u32,
    /// The producers it reads: first, and one past the last.
    pub producers: (u32, u32),
}

impl StageDecision {
    /// The plan partitions task `task` runs. The tasks of a split partition repeat its
    /// start, and each runs that one partition.
    pub fn partitions_of(&self, task: u32) -> std::ops::Range<u32> {
        if self.starts.is_empty() {
            return task..task + 1;
        }
        let i = task as usize;
        let start = self.starts.get(i).copied().unwrap_or(self.partitions);
        let end = self.starts[(i + 1).min(self.starts.len())..]
            .iter()
            .copied()
            .find(|&s| s > start)
            .unwrap_or(self.partitions);
        start..end.max(start)
    }

    /// The producers of input `stage` that task `task` reads, when it reads only some.
    pub fn producers_of(&self, task: u32, stage: u32) -> Option<std::ops::Range<usize>> {
        self.skew
            .iter()
            .find(|s| s.task == task && s.stage == stage)
            .map(|s| s.producers.0 as usize..s.producers.1 as usize)
    }
}

/// The encoded plan of one stage (`pk = PLAN#<job>`, `sk = STAGE#<n>`), written once with
/// the job, read by executors (and cached per warm container). It lives outside the job's
/// partition so that loading a job never reads plans.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// The encoded plan, when small enough to live in the item.
    #[serde(default, with = "b64_opt", skip_serializing_if = "Option::is_none")]
    pub plan: Option<Vec<u8>>,
    /// Object path of the encoded plan, when too large for the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// Expiry (seconds since epoch) for the store's TTL.
    pub expires_at: u64,
}

/// Tasks one [`CommitCounter`] counts: wide stages spread their commits over several
/// counter items so that no single item is written faster than DynamoDB allows
/// (1,000 writes/s per item).
pub const COUNTER_TASKS: u32 = 32;

/// Number of commit counters of a stage of `tasks` tasks.
pub fn counters_of(tasks: u32) -> u32 {
    tasks.div_ceil(COUNTER_TASKS).max(1)
}

/// The counter that counts `partition`'s commit.
pub fn counter_of(partition: u32) -> u32 {
    partition / COUNTER_TASKS
}

/// How many tasks counter `counter` of a stage of `tasks` tasks counts.
pub fn counter_size(tasks: u32, counter: u32) -> u32 {
    tasks
        .saturating_sub(counter * COUNTER_TASKS)
        .min(COUNTER_TASKS)
}

/// A commit counter (`sk = COUNT#<stage>#<n>`): counts down the commits of up to
/// [`COUNTER_TASKS`] tasks of a stage, once per task (the set of counted partitions makes
/// a repeated update harmless). It is a *wake-up hint*: the counter reaching 0 is the
/// change record that wakes the scheduler, but whether a stage is complete is decided from
/// its task items alone ([`JobSnapshot::stage_complete`]), so a lost counter update only
/// delays the job until the next sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitCounter {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// Counter index within the stage.
    pub counter: u32,
    /// Commits still to count; 0 wakes the scheduler.
    pub remaining: u32,
    /// Partitions counted so far.
    #[serde(default)]
    pub done: Vec<u32>,
    /// Time of the latest counted commit (ms since epoch).
    #[serde(default)]
    pub last_commit_ms: u64,
    /// When the dispatcher of an invocation tree confirmed it had invoked every task this
    /// counter counts ([`crate::scheduler::Scheduler::dispatch_range`]); stages sent
    /// without a tree never set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched_ms: Option<u64>,
    /// Expiry (seconds since epoch) for the store's TTL.
    pub expires_at: u64,
}

/// State of a task item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    /// An attempt was dispatched and has not reported.
    Running,
    /// One attempt committed; its output is the task's output.
    Succeeded,
    /// The current attempt failed; the scheduler retries it or fails the job.
    Failed,
    /// The invocation of the current attempt was throttled: nothing ran, no attempt was
    /// used up; the scheduler sends it again after `retry_at_ms`.
    Throttled,
}

/// What a committed attempt produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskOutput {
    /// The attempt that won the commit.
    pub attempt: u32,
    /// Object path of its shuffle (or result) object.
    pub object: String,
    /// End offset of each output slice in the object; slice `i` spans
    /// `ends[i-1]..ends[i]` (from `0` for the first). Equal ends mean an empty slice.
    pub ends: Vec<u64>,
    /// Rows written.
    pub rows: u64,
    /// Bytes written.
    pub bytes: u64,
    /// When the attempt started (ms since epoch).
    pub started_ms: u64,
    /// When the attempt finished writing (ms since epoch).
    pub finished_ms: u64,
    /// Each operator's figures, in the stage plan's pre-order (the writer first) — recorded
    /// for `EXPLAIN ANALYZE` jobs only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<OperatorMetrics>,
    /// The requests the attempt made, its commit's included ([`crate::requests`]).
    #[serde(default, skip_serializing_if = "RequestCounts::is_zero")]
    pub requests: RequestCounts,
    /// The hand-off path that led to the attempt, its own reads before work included:
    /// sequential requests from the commit that made the stage ready to the start of its
    /// work ([`crate::dispatch::Handoff`]); `None` when it was not sent by a claim (a
    /// retry, a sweep) or its dispatcher did not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<crate::dispatch::Handoff>,
    /// The threads the attempt ran on and the CPU time they used; `None` when not
    /// measured (a platform without thread clocks, a record written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<TaskCpu>,
    /// What the attempt wrote as table files (the writing stage of a `COPY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<Written>,
}

/// The table files a task attempt wrote ([`crate::write`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Written {
    /// Rows in them.
    pub rows: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Files.
    pub files: u64,
}

/// The threads a committed attempt ran its plan on and the CPU time they used
/// ([`crate::executor::threads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCpu {
    /// Worker threads the attempt's plan ran on.
    pub threads: u32,
    /// CPU time of those threads (ms): the task's own, whatever ran beside it.
    pub cpu_ms: u64,
    /// Pieces of its input the attempt read at once: the plan partitions of a coalesced
    /// task, or the pieces its scan was cut into ([`crate::plan::spread`]); 1 for one.
    #[serde(default)]
    pub pieces: u32,
}

impl TaskCpu {
    /// Thread time the attempt had (ms): its run time on every one of its threads.
    pub fn capacity_ms(&self, run_ms: u64) -> u64 {
        run_ms.saturating_mul(u64::from(self.threads.max(1)))
    }
}

/// One operator's figures in one task, as DataFusion's metrics reported them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperatorMetrics {
    /// Operator name (`HashJoinExec`), to check the figures belong to the plan shown.
    pub name: String,
    /// Rows it produced.
    #[serde(default)]
    pub rows: u64,
    /// CPU time it spent (ns).
    #[serde(default)]
    pub compute_ns: u64,
    /// Times it spilled to disk.
    #[serde(default)]
    pub spills: u64,
    /// Bytes it spilled.
    #[serde(default)]
    pub spilled_bytes: u64,
    /// Bytes it wrote (the shuffle writer).
    #[serde(default)]
    pub bytes: u64,
}

impl TaskOutput {
    /// Byte range of output slice `slice` in the object; an error naming the slice when
    /// the output has no such slice (a corrupt or mismatched completion record).
    pub fn slice(&self, slice: usize) -> crate::Result<std::ops::Range<u64>> {
        let end = *self.ends.get(slice).ok_or_else(|| {
            crate::Error::Internal(format!(
                "output slice {slice} requested from {}, which has {} slices",
                self.object,
                self.ends.len()
            ))
        })?;
        let start = if slice == 0 { 0 } else { self.ends[slice - 1] };
        if start > end {
            return Err(crate::Error::Internal(format!(
                "output slice {slice} of {} ends before it starts ({start}..{end})",
                self.object
            )));
        }
        Ok(start..end)
    }

    /// Byte range covering every slice.
    pub fn all(&self) -> std::ops::Range<u64> {
        0..self.ends.last().copied().unwrap_or(0)
    }
}

/// A task item (`sk = TASK#<stage>#<partition>`). Absent until the task has something
/// to record: attempt 1 of every task is implied by its stage's dispatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// Partition (task index within the stage).
    pub partition: u32,
    /// Current state.
    pub state: TaskState,
    /// Latest attempt dispatched (1-based).
    pub attempt: u32,
    /// When the latest attempt was (re-)dispatched (retries and re-sends only; attempt 1
    /// uses its stage's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched_ms: Option<u64>,
    /// When the invocation of a retried or re-sent attempt was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed_ms: Option<u64>,
    /// A throttled task is sent again at this time (ms since epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at_ms: Option<u64>,
    /// Throttled invocations so far (the back-off grows with it).
    #[serde(default)]
    pub throttles: u32,
    /// The winning attempt's output, once succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<TaskOutput>,
    /// Last failure message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether the last failure may succeed on a new attempt.
    #[serde(default)]
    pub retryable: bool,
    /// Failed attempts so far.
    #[serde(default)]
    pub failures: u32,
    /// The attempt started speculatively beside a straggling one, if any (at most one
    /// per task; [`crate::scheduler`]'s speculation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<u32>,
    /// Expiry (seconds since epoch) for the store's TTL.
    pub expires_at: u64,
}

impl TaskRecord {
    /// A fresh item for `attempt` of a task, in `state`, with nothing else recorded.
    pub fn new(
        job_id: &str,
        stage: u32,
        partition: u32,
        state: TaskState,
        attempt: u32,
        expires_at: u64,
    ) -> Self {
        Self {
            job_id: job_id.to_string(),
            stage,
            partition,
            state,
            attempt,
            dispatched_ms: None,
            confirmed_ms: None,
            retry_at_ms: None,
            throttles: 0,
            output: None,
            error: None,
            retryable: false,
            failures: 0,
            speculative: None,
            expires_at,
        }
    }
}

/// A catalog table (`pk = CATALOG`, `sk = TABLE#<name>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRecord {
    /// Table name as used in SQL (lower case unless quoted).
    pub name: String,
    /// The `CREATE EXTERNAL TABLE` statement it was created with.
    pub ddl: String,
    /// Absolute location URLs (`s3://...`, `file:///...`).
    pub locations: Vec<String>,
    /// File format (`PARQUET`, `CSV`, `JSON`, `ARROW`).
    pub format: String,
    /// Schema resolved at creation (see [`crate::plan::encode_schema`]), so queries need
    /// not infer it again.
    #[serde(with = "b64")]
    pub schema: Vec<u8>,
    /// Hive-style partition columns (`<dir>/part=1/...`): declared, or found in the
    /// directory names at creation; their values come from the paths, not the files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_columns: Vec<String>,
    /// Creation time (ms since epoch).
    pub created_ms: u64,
}

/// A change to one item, as the store's stream delivers it (the new image).
#[derive(Debug, Clone, PartialEq)]
pub enum ChangeRecord {
    /// A job item changed.
    Job(JobRecord),
    /// A stage item changed.
    Stage(StageRecord),
    /// A task item changed.
    Task(TaskRecord),
    /// A commit counter changed.
    Counter(CommitCounter),
}

impl ChangeRecord {
    /// Job the change belongs to.
    pub fn job_id(&self) -> &str {
        match self {
            ChangeRecord::Job(j) => &j.job_id,
            ChangeRecord::Stage(s) => &s.job_id,
            ChangeRecord::Task(t) => &t.job_id,
            ChangeRecord::Counter(c) => &c.job_id,
        }
    }

    /// Whether this change should wake the scheduler: a commit counter that reached 0
    /// (a share of a stage's tasks committed) or a task that failed. The DynamoDB
    /// event-source filter in `infra/terraform` says the same thing; everything else
    /// (other commits, dispatch writes) is noise.
    pub fn wakes_scheduler(&self) -> bool {
        match self {
            ChangeRecord::Job(_) | ChangeRecord::Stage(_) => false,
            ChangeRecord::Counter(c) => c.remaining == 0,
            ChangeRecord::Task(t) => t.state == TaskState::Failed,
        }
    }
}

/// Base64 (standard alphabet) for byte fields, so records stay readable JSON and
/// DynamoDB strings.
pub mod b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes bytes as a base64 string.
    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// Deserializes bytes from a base64 string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

/// [`b64`] for optional byte fields.
pub mod b64_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes optional bytes as an optional base64 string.
    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => super::b64::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    /// Deserializes optional bytes from an optional base64 string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "super::b64")] Vec<u8>);
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
    }
}

#[cfg(test)]
mod tests {
    use super::TaskOutput;

    fn output(ends: Vec<u64>) -> TaskOutput {
        TaskOutput {
            attempt: 1,
            object: "jobs/j/stage-0/task-0/attempt-1-x.arrows".into(),
            ends,
            rows: 0,
            bytes: 0,
            started_ms: 0,
            finished_ms: 0,
            metrics: Vec::new(),
            requests: Default::default(),
            handoff: None,
            cpu: None,
            written: None,
        }
    }

    /// A slice the completion record does not have is an error naming it, not a panic
    /// (a corrupt record, or a consumer planned for more partitions than were written).
    #[test]
    fn slices_out_of_range_or_reversed_are_errors() {
        let o = output(vec![10, 10, 25]);
        assert_eq!(o.slice(0).unwrap(), 0..10);
        assert_eq!(o.slice(1).unwrap(), 10..10, "an empty slice");
        assert_eq!(o.slice(2).unwrap(), 10..25);
        assert_eq!(o.all(), 0..25);
        let e = o.slice(3).unwrap_err().to_string();
        assert!(e.contains("slice 3") && e.contains("has 3 slices"), "{e}");
        assert!(o.slice(usize::MAX).is_err());
        let e = output(vec![30, 20]).slice(1).unwrap_err().to_string();
        assert!(e.contains("ends before it starts"), "{e}");
        assert!(output(vec![]).slice(0).is_err());
        assert_eq!(output(vec![]).all(), 0..0);
    }
}
