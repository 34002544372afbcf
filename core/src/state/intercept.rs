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

/// `impl JobStore for Intercepted`: each listed method shown to the hook under its own
/// name, with the job it concerns, then passed on to the inner store unchanged.
macro_rules! intercept {
    ($(fn $op:ident($($arg:ident: $ty:ty),*) -> $ret:ty, job: $job:expr;)*) => {
        #[async_trait]
        impl JobStore for Intercepted {
            fn job_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
                self.inner.job_changes()
            }

            $(async fn $op(&self, $($arg: $ty),*) -> Result<$ret> {
                self.around(stringify!($op), $job, self.inner.$op($($arg),*))
                    .await
            })*
        }
    };
}

intercept! {
    fn create_job(new: &NewJob) -> (), job: Some(&new.job.job_id);
    fn get_job(job_id: &str) -> Option<JobRecord>, job: Some(job_id);
    fn job_state(job_id: &str) -> Option<JobState>, job: Some(job_id);
    fn load_job(job_id: &str) -> Option<JobSnapshot>, job: Some(job_id);
    fn get_stage(job_id: &str, stage: u32) -> Option<StageRecord>, job: Some(job_id);
    fn get_plan(job_id: &str, stage: u32) -> Option<PlanRecord>, job: Some(job_id);
    fn task_view(job_id: &str, stage: u32, partition: u32, with_plan: bool) -> TaskView,
        job: Some(job_id);
    fn get_task(job_id: &str, stage: u32, partition: u32) -> Option<TaskRecord>,
        job: Some(job_id);
    fn list_tasks(job_id: &str, stage: u32) -> Vec<TaskRecord>, job: Some(job_id);
    fn list_task_range(job_id: &str, stage: u32, from: u32, to: u32) -> Vec<TaskRecord>,
        job: Some(job_id);
    fn list_counters(job_id: &str, stage: u32) -> Vec<CommitCounter>, job: Some(job_id);
    fn claim_stage(job_id: &str, stage: u32, now_ms: u64, decision: &StageDecision) -> bool,
        job: Some(job_id);
    fn confirm_stage(job_id: &str, stage: u32, now_ms: u64) -> bool, job: Some(job_id);
    fn start_attempt(
        job_id: &str,
        stage: u32,
        partition: u32,
        attempt: u32,
        now_ms: u64,
        expires_at: u64
    ) -> bool, job: Some(job_id);
    fn speculate_task(
        job_id: &str,
        stage: u32,
        partition: u32,
        attempt: u32,
        now_ms: u64,
        expires_at: u64
    ) -> bool, job: Some(job_id);
    fn confirm_attempt(job_id: &str, stage: u32, partition: u32, attempt: u32, now_ms: u64)
        -> bool, job: Some(job_id);
    fn defer_task(deferral: &TaskDeferral) -> bool, job: Some(&deferral.job_id);
    fn confirm_dispatch(confirmation: &DispatchConfirmation) -> bool,
        job: Some(&confirmation.job_id);
    fn resend_task(resend: &TaskResend) -> bool, job: Some(&resend.job_id);
    fn commit_task(commit: &TaskCommit) -> CommitOutcome, job: Some(&commit.job_id);
    fn fail_attempt(failure: &TaskFailure) -> bool, job: Some(&failure.job_id);
    fn finish_job(job_id: &str, state: JobState, error: Option<String>, now_ms: u64) -> bool,
        job: Some(job_id);
    fn active_jobs(after: Option<&str>, limit: usize) -> Vec<String>, job: None;
    fn job_history(owner: &str, after: Option<&str>, limit: usize) -> Vec<String>, job: None;
    fn remove_active(job_id: &str) -> (), job: Some(job_id);
    fn keep_active(job_id: &str, expires_at: u64) -> (), job: Some(job_id);
    fn sweep_cursor() -> Option<String>, job: None;
    fn set_sweep_cursor(cursor: Option<&str>) -> (), job: None;
    fn put_table(table: &TableRecord, replace: bool) -> bool, job: None;
    fn get_table(name: &str) -> Option<TableRecord>, job: None;
    fn list_tables() -> Vec<TableRecord>, job: None;
    fn delete_table(name: &str) -> bool, job: None;
}
