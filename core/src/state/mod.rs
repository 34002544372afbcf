//! The job store: jobs, stages, tasks, commit counters, stage plans and the table
//! catalog, modelled on one DynamoDB table (`pk = JOB#<id>`, `sk = META | STAGE#<n> |
//! TASK#<stage>#<partition> | COUNT#<stage>#<n>`; plans under `pk = PLAN#<id>`; the
//! catalog under `pk = CATALOG`).
//!
//! Every state transition is a conditional write that reports whether it won, so two
//! scheduler invocations, or two attempts of one task, can race without harm. The store
//! also emits its changes, in order, like a DynamoDB stream: the scheduler is woken by
//! them (see [`ChangeRecord::wakes_scheduler`]).
//!
//! Both implementations — the in-process one in `lambdafusion-embedded`, DynamoDB in
//! `lambdafusion-aws` — follow one specification, written once as the conformance suite
//! (`tests/src/conformance.rs`) that the tests run against each.

pub mod intercept;
mod records;

use async_trait::async_trait;

pub use intercept::Intercepted;
pub use records::*;

use crate::Result;

/// Everything the store holds about one job, read in one query.
#[derive(Debug, Clone)]
pub struct JobSnapshot {
    /// The job item.
    pub job: JobRecord,
    /// Its stages, ordered by id.
    pub stages: Vec<StageRecord>,
    /// Its task items (only those written so far), ordered by stage and partition.
    pub tasks: Vec<TaskRecord>,
    /// Its commit counters (only those written so far), ordered by stage and index.
    pub counters: Vec<CommitCounter>,
}

impl JobSnapshot {
    /// Task items of one stage.
    pub fn tasks_of(&self, stage: u32) -> impl Iterator<Item = &TaskRecord> {
        self.tasks.iter().filter(move |t| t.stage == stage)
    }

    /// Committed tasks of one stage.
    pub fn succeeded(&self, stage: u32) -> u32 {
        self.tasks_of(stage)
            .filter(|t| t.state == TaskState::Succeeded)
            .count() as u32
    }

    /// Whether every task of `stage` committed — decided from the task items, the one
    /// source of truth (commit counters only wake the scheduler).
    pub fn stage_complete(&self, stage: &StageRecord) -> bool {
        self.succeeded(stage.stage) >= stage.tasks
    }

    /// When the last task of `stage` finished writing, once the stage is complete.
    pub fn last_commit_ms(&self, stage: &StageRecord) -> Option<u64> {
        if !self.stage_complete(stage) {
            return None;
        }
        self.tasks_of(stage.stage)
            .filter_map(|t| t.output.as_ref().map(|o| o.finished_ms))
            .max()
    }
}

/// What an executor reads before it runs a task, read in one request.
#[derive(Debug, Clone, Default)]
pub struct TaskView {
    /// The job item.
    pub job: Option<JobRecord>,
    /// The task's stage.
    pub stage: Option<StageRecord>,
    /// The task's item, if it has one.
    pub task: Option<TaskRecord>,
    /// The stage's plan, when asked for.
    pub plan: Option<PlanRecord>,
}

/// A new job: its item, its stages, their plans, and any initial task items.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// The job item.
    pub job: JobRecord,
    /// Its stages.
    pub stages: Vec<StageRecord>,
    /// One plan per stage of a query (none for a statement).
    pub plans: Vec<PlanRecord>,
    /// Task items written up front (a statement's one committed task).
    pub tasks: Vec<TaskRecord>,
}

/// A task attempt's completion record.
#[derive(Debug, Clone)]
pub struct TaskCommit {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// Partition.
    pub partition: u32,
    /// Number of tasks of the stage (sizes the commit counter).
    pub stage_tasks: u32,
    /// What the attempt wrote.
    pub output: TaskOutput,
    /// Commit time (ms since epoch).
    pub now_ms: u64,
    /// TTL of the task item (seconds since epoch).
    pub expires_at: u64,
}

/// How a commit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// This attempt's output is the task's output (also when an earlier try of this very
    /// commit had already succeeded: the check compares the committed object).
    Committed {
        /// Whether this commit brought its commit counter to 0.
        counter_done: bool,
    },
    /// Another attempt (or a duplicate delivery) had already committed: nothing changed.
    AlreadySucceeded,
}

/// A failed attempt, reported by the executor or by the invoker when the function died.
#[derive(Debug, Clone)]
pub struct TaskFailure {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// Partition.
    pub partition: u32,
    /// The attempt that failed.
    pub attempt: u32,
    /// What went wrong.
    pub error: String,
    /// Whether a new attempt may succeed.
    pub retryable: bool,
    /// TTL of the task item (seconds since epoch).
    pub expires_at: u64,
}

/// An invocation of a task attempt that was throttled: the attempt is kept and sent
/// again at `retry_at_ms`.
#[derive(Debug, Clone)]
pub struct TaskDeferral {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// Partition.
    pub partition: u32,
    /// The attempt whose invocation was refused.
    pub attempt: u32,
    /// When to send it again (ms since epoch).
    pub retry_at_ms: u64,
    /// Why it was refused.
    pub error: String,
    /// TTL of the task item (seconds since epoch).
    pub expires_at: u64,
}

/// A leaf dispatcher of an invocation tree has invoked every task of one commit
/// counter's range (see [`JobStore::confirm_dispatch`]).
#[derive(Debug, Clone)]
pub struct DispatchConfirmation {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// The counter whose range was invoked.
    pub counter: u32,
    /// Number of tasks of the stage (sizes the counter if it does not exist yet).
    pub stage_tasks: u32,
    /// Now (ms since epoch).
    pub now_ms: u64,
    /// TTL of the counter item (seconds since epoch).
    pub expires_at: u64,
}

/// A task attempt to send again (see [`JobStore::resend_task`]).
#[derive(Debug, Clone)]
pub struct TaskResend {
    /// Job id.
    pub job_id: String,
    /// Stage id.
    pub stage: u32,
    /// Partition.
    pub partition: u32,
    /// The attempt to send again.
    pub attempt: u32,
    /// An unconfirmed running attempt dispatched before this time is re-sent.
    pub stale_before_ms: u64,
    /// Now (ms since epoch): the new dispatch time, and the bar for `retry_at_ms`.
    pub now_ms: u64,
    /// TTL of the task item (seconds since epoch).
    pub expires_at: u64,
}

/// How often a waiter reads a job item on a store without change notifications.
pub const JOB_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// The job store. One in-process implementation (`lambdafusion-embedded`), one on DynamoDB
/// (`lambdafusion-aws`); the conformance suite holds both to the same rules.
///
/// Transitions on missing items: a claim, confirmation, deferral, resumption or finish of
/// an item that does not exist is `Ok(false)` — it did not happen — in both stores.
#[async_trait]
pub trait JobStore: Send + Sync + std::fmt::Debug {
    /// A receiver that changes whenever a job item is written (a job starts or ends), for
    /// waiters to wake on; `None` for a store without change notifications to its callers
    /// (DynamoDB: its stream goes to the scheduler function), whose waiters read the job
    /// item at [`JOB_POLL_INTERVAL`]. Subscribe before reading the job: a change after the
    /// subscription is never missed.
    fn job_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// Writes a new job with its stages, plans and any initial task items, and adds it
    /// to the active-job index when it is running. Fails with `Conflict` if it exists.
    async fn create_job(&self, new: &NewJob) -> Result<()>;

    /// Reads the job item.
    async fn get_job(&self, job_id: &str) -> Result<Option<JobRecord>>;

    /// The job's state alone, read cheaply: what every running task polls while it
    /// works, so on a shared store it must not be the job item, which holds the SQL (on
    /// DynamoDB a small item of its own, [`SK_STATE`], read eventually consistent). May
    /// lag a transition by about a second. `None`: no such job.
    async fn job_state(&self, job_id: &str) -> Result<Option<JobState>> {
        Ok(self.get_job(job_id).await?.map(|job| job.state))
    }

    /// Reads the job with its stages, task items and commit counters (one query).
    async fn load_job(&self, job_id: &str) -> Result<Option<JobSnapshot>>;

    /// Reads one stage item.
    async fn get_stage(&self, job_id: &str, stage: u32) -> Result<Option<StageRecord>>;

    /// Reads one stage's plan.
    async fn get_plan(&self, job_id: &str, stage: u32) -> Result<Option<PlanRecord>>;

    /// Reads the job, a stage, one of its task items and (when `with_plan`) the stage's
    /// plan in one request — what an executor needs before it runs a task.
    async fn task_view(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        with_plan: bool,
    ) -> Result<TaskView>;

    /// Reads one task item.
    async fn get_task(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
    ) -> Result<Option<TaskRecord>>;

    /// Reads the task items of one stage, ordered by partition.
    async fn list_tasks(&self, job_id: &str, stage: u32) -> Result<Vec<TaskRecord>>;

    /// Reads the task items of partitions `from..to` of one stage, ordered by partition
    /// (a task reading only some producers of a wide stage).
    async fn list_task_range(
        &self,
        job_id: &str,
        stage: u32,
        from: u32,
        to: u32,
    ) -> Result<Vec<TaskRecord>>;

    /// Reads the commit counters of one stage, ordered by index.
    async fn list_counters(&self, job_id: &str, stage: u32) -> Result<Vec<CommitCounter>>;

    /// Claims a pending stage for dispatch: `PENDING -> DISPATCHED`, recording `decision`
    /// on it and setting its task count to `decision.tasks`. Only one caller wins.
    async fn claim_stage(
        &self,
        job_id: &str,
        stage: u32,
        now_ms: u64,
        decision: &StageDecision,
    ) -> Result<bool>;

    /// Records that every task invocation of a claimed stage was accepted or deferred:
    /// sets `confirmed_ms` on a dispatched, unconfirmed stage.
    async fn confirm_stage(&self, job_id: &str, stage: u32, now_ms: u64) -> Result<bool>;

    /// Records that `attempt` (> 1) of a task is being dispatched, conditioned on the task
    /// not having succeeded and its latest attempt being `attempt - 1` and failed (or, for
    /// attempt 2, no item yet). Only one caller wins.
    async fn start_attempt(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        attempt: u32,
        now_ms: u64,
        expires_at: u64,
    ) -> Result<bool>;

    /// Starts a speculative `attempt` (> 1) beside a straggling `attempt - 1`: conditioned
    /// on the task running that attempt (or, for attempt 2, having no item yet) and no
    /// speculative attempt started before. The task becomes `RUNNING(attempt)` dispatched
    /// at `now_ms`, `speculative = attempt`. Either attempt may then commit (the first
    /// wins); only the latest may fail the task. Only one caller wins.
    async fn speculate_task(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        attempt: u32,
        now_ms: u64,
        expires_at: u64,
    ) -> Result<bool>;

    /// Records that the invocation of a running `attempt` was accepted (`confirmed_ms`).
    async fn confirm_attempt(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        attempt: u32,
        now_ms: u64,
    ) -> Result<bool>;

    /// Records a throttled invocation: the task turns `THROTTLED` at the same attempt
    /// (attempt 1 without an item, or a running or throttled item of that attempt).
    async fn defer_task(&self, deferral: &TaskDeferral) -> Result<bool>;

    /// Sends an attempt again without using up an attempt: a `THROTTLED(attempt)` task
    /// whose `retry_at_ms` has passed, a `RUNNING(attempt)` task whose invocation was
    /// never confirmed and was dispatched before `stale_before_ms` (its dispatcher died),
    /// or, for attempt 1, a task with no item yet (its stage was never confirmed) becomes
    /// `RUNNING(attempt)` dispatched at `now_ms`, unconfirmed. Only one caller wins.
    async fn resend_task(&self, resend: &TaskResend) -> Result<bool>;

    /// Records that the tasks a commit counter counts were all invoked: sets the counter's
    /// `dispatched_ms` if unset, creating the counter (with all its commits to count) if
    /// absent; never changes its count. Returns whether it set it.
    async fn confirm_dispatch(&self, confirmation: &DispatchConfirmation) -> Result<bool>;

    /// Commits a task attempt: task -> succeeded with its output, conditioned on the task
    /// not having succeeded yet, then counts it on its commit counter (once).
    async fn commit_task(&self, commit: &TaskCommit) -> Result<CommitOutcome>;

    /// Records a failed attempt, conditioned on it being the task's latest attempt and the
    /// task running (attempt 1: no item yet). Returns whether it was recorded.
    async fn fail_attempt(&self, failure: &TaskFailure) -> Result<bool>;

    /// Moves a running job to a terminal state and drops it from the active index.
    /// Returns false when the job was not running any more (or does not exist).
    async fn finish_job(
        &self,
        job_id: &str,
        state: JobState,
        error: Option<String>,
        now_ms: u64,
    ) -> Result<bool>;

    /// Ids of running jobs in the active index, in id order, after `after`, at most `limit`.
    async fn active_jobs(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>>;

    /// The history of `owner`'s jobs, newest first: [`history_sk`] sort keys after
    /// `after` (a sort key from an earlier page), at most `limit`. An entry is written with
    /// its job and expires with it.
    async fn job_history(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>>;

    /// Removes a job from the active index (repair of an index entry left behind).
    /// Puts an ended job back on the active index (until `expires_at`): a write job stays
    /// there until the sweep's last clean-up of its files ([`crate::write::last_clean_up`]).
    async fn keep_active(&self, job_id: &str, expires_at: u64) -> Result<()>;

    async fn remove_active(&self, job_id: &str) -> Result<()>;

    /// Where the last sweep stopped (the last job id it finished), if it stopped early.
    async fn sweep_cursor(&self) -> Result<Option<String>>;

    /// Saves (or with `None` clears) the sweep cursor.
    async fn set_sweep_cursor(&self, cursor: Option<&str>) -> Result<()>;

    /// Stores a catalog table; with `replace` false it only succeeds if the name is free.
    async fn put_table(&self, table: &TableRecord, replace: bool) -> Result<bool>;

    /// Reads a catalog table.
    async fn get_table(&self, name: &str) -> Result<Option<TableRecord>>;

    /// Lists the catalog, ordered by name.
    async fn list_tables(&self) -> Result<Vec<TableRecord>>;

    /// Drops a catalog table; returns whether it existed.
    async fn delete_table(&self, name: &str) -> Result<bool>;
}

/// Sort key of the job item.
pub const SK_META: &str = "META";

/// Sort key of the job's state item: the state alone, a few dozen bytes, which running
/// tasks poll ([`JobStore::job_state`]) instead of the job item and its SQL.
pub const SK_STATE: &str = "STATE";

/// Partition key of a job's items.
pub fn job_pk(job_id: &str) -> String {
    format!("JOB#{job_id}")
}

/// Sort key of a stage item; zero-padded so items sort by stage id.
pub fn stage_sk(stage: u32) -> String {
    format!("STAGE#{stage:05}")
}

/// Sort key prefix of a stage's task items.
pub fn task_sk_prefix(stage: u32) -> String {
    format!("TASK#{stage:05}#")
}

/// Sort key of a task item; zero-padded so items sort by stage, then partition.
pub fn task_sk(stage: u32, partition: u32) -> String {
    format!("TASK#{stage:05}#{partition:06}")
}

/// Sort key prefix of a stage's commit counters.
pub fn counter_sk_prefix(stage: u32) -> String {
    format!("COUNT#{stage:05}#")
}

/// Sort key of a commit counter.
pub fn counter_sk(stage: u32, counter: u32) -> String {
    format!("COUNT#{stage:05}#{counter:05}")
}

/// Partition key of a job's stage plans (apart from the job's own partition, so that
/// loading a job never reads plans).
pub fn plan_pk(job_id: &str) -> String {
    format!("PLAN#{job_id}")
}

/// Partition key of the catalog.
pub const CATALOG_PK: &str = "CATALOG";

/// Sort key of a catalog table.
pub fn table_sk(name: &str) -> String {
    format!("TABLE#{name}")
}

/// Partition key of the active-job index.
pub const ACTIVE_PK: &str = "ACTIVE";

/// Partition key of a caller's job history.
pub fn history_pk(owner: &str) -> String {
    format!("HISTORY#{owner}")
}

/// Sort key of a job in its owner's history: the submission time counted down from
/// year 2286, zero-padded, so that ascending order (the only order a store scans in)
/// is newest first; then the job id.
pub fn history_sk(created_ms: u64, job_id: &str) -> String {
    const LATEST_MS: u64 = 9_999_999_999_999;
    format!("{:013}#{job_id}", LATEST_MS.saturating_sub(created_ms))
}

/// The job id in a [`history_sk`].
pub fn job_of_history_sk(sk: &str) -> Option<&str> {
    sk.split_once('#')
        .map(|(_, id)| id)
        .filter(|id| !id.is_empty())
}

/// Partition key of the sweep's bookmark.
pub const SWEEP_PK: &str = "SWEEP";

/// Sort key of the sweep's bookmark.
pub const SWEEP_SK: &str = "CURSOR";
