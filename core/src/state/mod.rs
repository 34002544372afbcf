//! The job store: jobs, stages, tasks and the table catalog, modelled on one DynamoDB
//! table (`pk = JOB#<id>`, `sk = META | STAGE#<n> | TASK#<stage>#<partition>`, catalog
//! items under `pk = CATALOG`).
//!
//! Every state transition is a conditional write that reports whether it won, so two
//! scheduler invocations, or two attempts of one task, can race without harm. The store
//! also emits its changes, in order, like a DynamoDB stream: the scheduler is woken by
//! them (see [`ChangeRecord::wakes_scheduler`]).

mod embedded;
mod records;

use async_trait::async_trait;

pub use embedded::EmbeddedStore;
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
}

impl JobSnapshot {
    /// Task items of one stage.
    pub fn tasks_of(&self, stage: u32) -> impl Iterator<Item = &TaskRecord> {
        self.tasks.iter().filter(move |t| t.stage == stage)
    }
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
    /// This attempt won; the stage has `remaining` tasks left.
    Committed {
        /// Tasks of the stage still to commit after this one.
        remaining: u32,
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

/// The job store. One in-process implementation ([`EmbeddedStore`]), one on DynamoDB
/// (`lambdafusion-aws`).
#[async_trait]
pub trait JobStore: Send + Sync + std::fmt::Debug {
    /// Writes a new job with its stages and any initial task items, in one go, and adds
    /// it to the active-job index when it is running. Fails with `Conflict` if it exists.
    async fn create_job(
        &self,
        job: &JobRecord,
        stages: &[StageRecord],
        tasks: &[TaskRecord],
    ) -> Result<()>;

    /// Reads the job item.
    async fn get_job(&self, job_id: &str) -> Result<Option<JobRecord>>;

    /// Reads the job with all its stages and task items (one query).
    async fn load_job(&self, job_id: &str) -> Result<Option<JobSnapshot>>;

    /// Reads one stage item.
    async fn get_stage(&self, job_id: &str, stage: u32) -> Result<Option<StageRecord>>;

    /// Reads one task item.
    async fn get_task(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
    ) -> Result<Option<TaskRecord>>;

    /// Reads the task items of one stage, ordered by partition.
    async fn list_tasks(&self, job_id: &str, stage: u32) -> Result<Vec<TaskRecord>>;

    /// Claims a pending stage for dispatch: `PENDING -> DISPATCHED`. Only one caller wins.
    async fn claim_stage(&self, job_id: &str, stage: u32, now_ms: u64) -> Result<bool>;

    /// Records that `attempt` (> 1) of a task is being dispatched, conditioned on the task
    /// not having succeeded and its latest attempt being `attempt - 1`. Only one caller wins.
    async fn start_attempt(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        attempt: u32,
        now_ms: u64,
        expires_at: u64,
    ) -> Result<bool>;

    /// Commits a task attempt: task -> succeeded with its output, and the stage's
    /// `remaining` counter decremented, atomically, conditioned on the task not having
    /// succeeded yet.
    async fn commit_task(&self, commit: &TaskCommit) -> Result<CommitOutcome>;

    /// Records a failed attempt, conditioned on it being the task's latest attempt and the
    /// task not having succeeded or failed already. Returns whether it was recorded.
    async fn fail_attempt(&self, failure: &TaskFailure) -> Result<bool>;

    /// Moves a running job to a terminal state and drops it from the active index.
    /// Returns false when the job was not running any more.
    async fn finish_job(
        &self,
        job_id: &str,
        state: JobState,
        error: Option<String>,
        now_ms: u64,
    ) -> Result<bool>;

    /// Ids of the jobs in the active index (running jobs), for the sweep.
    async fn active_jobs(&self) -> Result<Vec<String>>;

    /// Removes a job from the active index (repair of an index entry left behind).
    async fn remove_active(&self, job_id: &str) -> Result<()>;

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

/// Partition key of the catalog.
pub const CATALOG_PK: &str = "CATALOG";

/// Sort key of a catalog table.
pub fn table_sk(name: &str) -> String {
    format!("TABLE#{name}")
}

/// Partition key of the active-job index.
pub const ACTIVE_PK: &str = "ACTIVE";
