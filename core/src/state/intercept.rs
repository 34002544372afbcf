//! [`Intercepted`]: a job store that shows every call to a hook before (or instead of)
//! passing it on — to record which operations a function performs (the IAM contract
//! test), or to make a store slow, throttled, conflicting or failing at chosen calls
//! (the failure-model tests), including the ambiguous case of a write that is applied
//! but whose answer is lost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::Error;

/// One store call, as the hook sees it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The [`JobStore`] method name (`"commit_task"`, `"load_job"`, ...).
    pub op: &'static str,
    /// The job it concerns, if any.
    pub job_id: Option<&'a str>,
    /// Calls through this store begun and not yet answered when this one began: 0 for
    /// a call made after every earlier one returned (one more sequential request), more
    /// for one made alongside others (the same round trip).
    pub in_flight: usize,
}

/// What the hook decides for a call.
#[derive(Debug)]
pub enum Action {
    /// Pass it on.
    Proceed,
    /// Fail it with this error without passing it on.
    Fail(Error),
    /// Wait, then pass it on.
    Delay(Duration),
    /// Pass it on, then fail with this error anyway (a write applied whose answer was
    /// lost).
    ApplyThenFail(Error),
}

/// The hook: called before every store call.
pub type Hook = Arc<dyn Fn(Call<'_>) -> Action + Send + Sync>;

/// A [`JobStore`] whose calls go through a [`Hook`] first. See the [module docs](self).
#[derive(Clone)]
pub struct Intercepted {
    inner: Arc<dyn JobStore>,
    hook: Hook,
    in_flight: Arc<AtomicUsize>,
}

/// Counts a call as in flight until it is answered (or dropped unanswered).
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Intercepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intercepted")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Intercepted {
    /// `inner`, with every call shown to `hook` first.
    pub fn new(inner: Arc<dyn JobStore>, hook: Hook) -> Self {
        Self {
            inner,
            hook,
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }

    async fn around<T, F>(&self, op: &'static str, job_id: Option<&str>, call: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>> + Send,
        T: Send,
    {
        let in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _answered = InFlight(self.in_flight.clone());
        match (self.hook)(Call {
            op,
            job_id,
            in_flight,
        }) {
            Action::Proceed => call.await,
            Action::Fail(e) => Err(e),
            Action::Delay(pause) => {
                tokio::time::sleep(pause).await;
                call.await
            }
            Action::ApplyThenFail(e) => {
                call.await?;
                Err(e)
            }
        }
    }
}

#[async_trait]
impl JobStore for Intercepted {
    fn job_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.job_changes()
    }

    async fn create_job(&self, new: &NewJob) -> Result<()> {
        self.around(
            "create_job",
            Some(&new.job.job_id),
            self.inner.create_job(new),
        )
        .await
    }

    async fn get_job(&self, job_id: &str) -> Result<Option<JobRecord>> {
        self.around("get_job", Some(job_id), self.inner.get_job(job_id))
            .await
    }

    async fn load_job(&self, job_id: &str) -> Result<Option<JobSnapshot>> {
        self.around("load_job", Some(job_id), self.inner.load_job(job_id))
            .await
    }

    async fn get_stage(&self, job_id: &str, stage: u32) -> Result<Option<StageRecord>> {
        self.around(
            "get_stage",
            Some(job_id),
            self.inner.get_stage(job_id, stage),
        )
        .await
    }

    async fn get_plan(&self, job_id: &str, stage: u32) -> Result<Option<PlanRecord>> {
        self.around("get_plan", Some(job_id), self.inner.get_plan(job_id, stage))
            .await
    }

    async fn task_view(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        with_plan: bool,
    ) -> Result<TaskView> {
        self.around(
            "task_view",
            Some(job_id),
            self.inner.task_view(job_id, stage, partition, with_plan),
        )
        .await
    }

    async fn get_task(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
    ) -> Result<Option<TaskRecord>> {
        self.around(
            "get_task",
            Some(job_id),
            self.inner.get_task(job_id, stage, partition),
        )
        .await
    }

    async fn list_tasks(&self, job_id: &str, stage: u32) -> Result<Vec<TaskRecord>> {
        self.around(
            "list_tasks",
            Some(job_id),
            self.inner.list_tasks(job_id, stage),
        )
        .await
    }

    async fn list_task_range(
        &self,
        job_id: &str,
        stage: u32,
        from: u32,
        to: u32,
    ) -> Result<Vec<TaskRecord>> {
        self.around(
            "list_task_range",
            Some(job_id),
            self.inner.list_task_range(job_id, stage, from, to),
        )
        .await
    }

    async fn list_counters(&self, job_id: &str, stage: u32) -> Result<Vec<CommitCounter>> {
        self.around(
            "list_counters",
            Some(job_id),
            self.inner.list_counters(job_id, stage),
        )
        .await
    }

    async fn claim_stage(
        &self,
        job_id: &str,
        stage: u32,
        now_ms: u64,
        decision: &StageDecision,
    ) -> Result<bool> {
        self.around(
            "claim_stage",
            Some(job_id),
            self.inner.claim_stage(job_id, stage, now_ms, decision),
        )
        .await
    }

    async fn confirm_stage(&self, job_id: &str, stage: u32, now_ms: u64) -> Result<bool> {
        self.around(
            "confirm_stage",
            Some(job_id),
            self.inner.confirm_stage(job_id, stage, now_ms),
        )
        .await
    }

    async fn start_attempt(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        attempt: u32,
        now_ms: u64,
        expires_at: u64,
    ) -> Result<bool> {
        self.around(
            "start_attempt",
            Some(job_id),
            self.inner
                .start_attempt(job_id, stage, partition, attempt, now_ms, expires_at),
        )
        .await
    }

    async fn confirm_attempt(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        attempt: u32,
        now_ms: u64,
    ) -> Result<bool> {
        self.around(
            "confirm_attempt",
            Some(job_id),
            self.inner
                .confirm_attempt(job_id, stage, partition, attempt, now_ms),
        )
        .await
    }

    async fn defer_task(&self, deferral: &TaskDeferral) -> Result<bool> {
        self.around(
            "defer_task",
            Some(&deferral.job_id),
            self.inner.defer_task(deferral),
        )
        .await
    }

    async fn confirm_dispatch(&self, confirmation: &DispatchConfirmation) -> Result<bool> {
        self.around(
            "confirm_dispatch",
            Some(&confirmation.job_id),
            self.inner.confirm_dispatch(confirmation),
        )
        .await
    }

    async fn resend_task(&self, resend: &TaskResend) -> Result<bool> {
        self.around(
            "resend_task",
            Some(&resend.job_id),
            self.inner.resend_task(resend),
        )
        .await
    }

    async fn commit_task(&self, commit: &TaskCommit) -> Result<CommitOutcome> {
        self.around(
            "commit_task",
            Some(&commit.job_id),
            self.inner.commit_task(commit),
        )
        .await
    }

    async fn fail_attempt(&self, failure: &TaskFailure) -> Result<bool> {
        self.around(
            "fail_attempt",
            Some(&failure.job_id),
            self.inner.fail_attempt(failure),
        )
        .await
    }

    async fn finish_job(
        &self,
        job_id: &str,
        state: JobState,
        error: Option<String>,
        now_ms: u64,
    ) -> Result<bool> {
        self.around(
            "finish_job",
            Some(job_id),
            self.inner.finish_job(job_id, state, error, now_ms),
        )
        .await
    }

    async fn active_jobs(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        self.around("active_jobs", None, self.inner.active_jobs(after, limit))
            .await
    }

    async fn job_history(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        self.around(
            "job_history",
            None,
            self.inner.job_history(owner, after, limit),
        )
        .await
    }

    async fn remove_active(&self, job_id: &str) -> Result<()> {
        self.around(
            "remove_active",
            Some(job_id),
            self.inner.remove_active(job_id),
        )
        .await
    }

    async fn sweep_cursor(&self) -> Result<Option<String>> {
        self.around("sweep_cursor", None, self.inner.sweep_cursor())
            .await
    }

    async fn set_sweep_cursor(&self, cursor: Option<&str>) -> Result<()> {
        self.around(
            "set_sweep_cursor",
            None,
            self.inner.set_sweep_cursor(cursor),
        )
        .await
    }

    async fn put_table(&self, table: &TableRecord, replace: bool) -> Result<bool> {
        self.around("put_table", None, self.inner.put_table(table, replace))
            .await
    }

    async fn get_table(&self, name: &str) -> Result<Option<TableRecord>> {
        self.around("get_table", None, self.inner.get_table(name))
            .await
    }

    async fn list_tables(&self) -> Result<Vec<TableRecord>> {
        self.around("list_tables", None, self.inner.list_tables())
            .await
    }

    async fn delete_table(&self, name: &str) -> Result<bool> {
        self.around("delete_table", None, self.inner.delete_table(name))
            .await
    }
}
