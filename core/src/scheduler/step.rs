//! The one decision step ([`Scheduler::advance`]): enforce the deadline, retry or give
//! up on failed tasks, send throttled and unconfirmed dispatches again, finish the job
//! when every stage is complete, claim and dispatch the stages whose inputs are. Every
//! write is conditional, so racing or repeated steps change nothing twice.

use std::collections::BTreeSet;

use tracing::{debug, info, warn};

use crate::dispatch::{Handoff, TaskSpec};
use crate::faults::{job_key, FaultKind};
use crate::plan;
use crate::state::{
    JobSnapshot, JobState, PlanRecord, StageDecision, StageRecord, StageState, TaskResend,
    TaskState,
};
use crate::time::now_ms;
use crate::Result;

use super::*;

/// What claiming a ready stage came to.
enum Claim {
    /// Another scheduler step claimed it first.
    Lost,
    /// Fused into its consumer: complete at its claim, nothing sent.
    Fused,
    /// Claimed and its tasks sent.
    Dispatched,
}

impl Scheduler {
    /// The one decision step, idempotent: enforce the deadline, retry or give up on
    /// failed tasks, send throttled and unconfirmed dispatches again, finish the job when
    /// every stage is complete, claim and dispatch the stages whose inputs are.
    pub async fn advance(&self, job_id: &str) -> Result<()> {
        self.advance_with(job_id, None).await
    }

    /// [`Scheduler::advance`] at the end of a hand-off path that started with a commit:
    /// `origin` counts the sequential requests made on it so far (see [`Handoff`]); the
    /// stages this step dispatches hand it on to their tasks, with this step's own.
    pub async fn advance_with(&self, job_id: &str, origin: Option<Handoff>) -> Result<()> {
        let Some(snapshot) = self.services.store.load_job(job_id).await? else {
            warn!(job_id = %job_id, "woken for a job that does not exist");
            return Ok(());
        };
        let job = &snapshot.job;
        if job.state.is_terminal() {
            return Ok(());
        }
        let now = now_ms();
        if job.is_overdue(now) {
            return self.fail_job(&snapshot, job.deadline_message(), now).await;
        }
        if let Some(error) = self.over_budget(&snapshot) {
            return self.fail_job(&snapshot, error, now).await;
        }
        if let Some(error) = self.retry_tasks(&snapshot, now).await? {
            return self.fail_job(&snapshot, error, now).await;
        }
        if snapshot.stages.iter().all(|s| snapshot.stage_complete(s)) {
            return self.succeed_job(&snapshot, now).await;
        }
        self.speculate(&snapshot, now).await?;
        self.advance_stages(snapshot, origin, now).await
    }

    /// Starts a speculative attempt of each straggler of the running stages and asks for
    /// the next check ([`super::speculation`]).
    async fn speculate(&self, snapshot: &JobSnapshot, now: u64) -> Result<()> {
        let config = self.config();
        if !config.speculation {
            return Ok(());
        }
        let job_id = &snapshot.job.job_id;
        let invoker = self.services.invoker.clone();
        let mut pending = Vec::new();
        let mut next: Option<u64> = None;
        for stage in snapshot
            .stages
            .iter()
            .filter(|s| s.state == StageState::Dispatched)
        {
            let check =
                super::speculation::check(snapshot, stage, now, config, |partition, attempt| {
                    invoker.state(&TaskSpec {
                        job_id: job_id.clone(),
                        stage: stage.stage,
                        partition,
                        attempt,
                    })
                });
            for (partition, attempt) in check.due {
                let expires_at = self.services.expires_at();
                if self
                    .services
                    .store
                    .speculate_task(job_id, stage.stage, partition, attempt, now, expires_at)
                    .await?
                {
                    info!(job_id = %job_id, stage = stage.stage, task = partition, attempt,
                        "speculative attempt for a straggler");
                    let spec = TaskSpec {
                        job_id: job_id.clone(),
                        stage: stage.stage,
                        partition,
                        attempt,
                    };
                    pending.push(PendingInvocation::again(spec, 0, snapshot));
                }
            }
            next = match (next, check.next_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.dispatch(pending).await;
        if let Some(at) = next {
            if let Err(e) = invoker.wake_scheduler_at(job_id, at).await {
                warn!(job_id = %job_id, error = %e, "could not ask for the next straggler check");
            }
        }
        Ok(())
    }

    /// Why the job must stop for its budget, from its committed figures: its estimated
    /// cost past `max_query_cost_usd`, or the table bytes its tasks fetched past
    /// `max_scan_bytes_per_query` (the planning check uses file sizes; this one catches
    /// what they did not foresee, such as files that grew).
    fn over_budget(&self, snapshot: &JobSnapshot) -> Option<String> {
        let config = self.config();
        if let Some(limit) = config.max_query_cost_usd {
            let status = crate::status::job_status(snapshot, config);
            if status.estimated_cost_usd > limit {
                return Some(format!(
                    "the query's estimated cost reached ${:.6}, more than this deployment \
                     allows one query (max_query_cost_usd: ${limit}); it was stopped",
                    status.estimated_cost_usd
                ));
            }
        }
        if let Some(limit) = config.max_scan_bytes_per_query {
            let scanned: u64 = snapshot
                .stages
                .iter()
                .filter(|s| !s.scan_bytes.is_empty())
                .flat_map(|s| snapshot.tasks_of(s.stage))
                .filter_map(|t| t.output.as_ref())
                .map(|o| o.requests.object_get_bytes)
                .sum();
            if scanned > limit as u64 {
                return Some(format!(
                    "the query has read {} of table files, more than this deployment allows \
                     one query (max_scan_bytes_per_query: {}); it was stopped",
                    crate::plan::adaptive::human_bytes(scanned),
                    crate::plan::adaptive::human_bytes(limit as u64)
                ));
            }
        }
        None
    }

    /// Tells [`Services::on_job_end`](crate::Services) of a job this step just ended, from
    /// the snapshot it ended it on (no read more).
    pub(super) fn job_ended(
        &self,
        snapshot: &JobSnapshot,
        state: JobState,
        error: Option<String>,
        now: u64,
    ) {
        if let Some(hook) = &self.services.on_job_end {
            let mut ended = snapshot.clone();
            ended.job.state = state;
            ended.job.finished_ms = Some(now);
            ended.job.error = error;
            hook(
                &crate::status::job_status(&ended, self.config()),
                &ended.job.owner,
            );
        }
    }

    /// Fails the job with `error` and cleans up after it (once: whichever step wins).
    async fn fail_job(&self, snapshot: &JobSnapshot, error: String, now: u64) -> Result<()> {
        let job_id = &snapshot.job.job_id;
        if self
            .services
            .store
            .finish_job(job_id, JobState::Failed, Some(error.clone()), now)
            .await?
        {
            info!(job_id = %job_id, %error, "job failed");
            self.job_ended(snapshot, JobState::Failed, Some(error), now);
            self.discard_write(&snapshot.job).await;
            self.keep_write_active(&snapshot.job).await;
            self.cleanup(job_id, job_shards(snapshot), &[]).await;
        }
        Ok(())
    }

    /// Finishes a job whose every stage is complete, keeping its result's objects; a
    /// write is committed first ([`crate::write::commit`]), and a write that cannot be
    /// fails the job.
    async fn succeed_job(&self, snapshot: &JobSnapshot, now: u64) -> Result<()> {
        let job = &snapshot.job;
        if let Some(target) = &job.write {
            let outputs = crate::write::final_outputs(snapshot);
            let committed = async {
                // Unlike `committed_files`, an error reading them fails (or retries) the step.
                let files =
                    crate::write::written_files(&self.services, job.final_stage(), outputs).await?;
                crate::write::commit(&self.services, target, &files).await
            }
            .await;
            match committed {
                Ok(manifest) => info!(
                    job_id = %job.job_id,
                    files = manifest.files.len(),
                    rows = manifest.rows,
                    location = %target.location,
                    "write committed"
                ),
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) => {
                    let error = format!("the write to {} was not committed: {e}", target.location);
                    return self.fail_job(snapshot, error, now).await;
                }
            }
        }
        let finished = self
            .services
            .store
            .finish_job(&job.job_id, JobState::Succeeded, None, now)
            .await?;
        if !finished && job.write.is_some() {
            // Cancelled (or failed) while the commit ran: its clean-up may have run before
            // the manifest was written.
            if let Some(now) = self.services.store.get_job(&job.job_id).await? {
                if now.state != JobState::Succeeded {
                    self.discard_write(&now).await;
                }
            }
        }
        if finished {
            self.keep_write_active(job).await;
            info!(job_id = %job.job_id, ms = now.saturating_sub(job.created_ms), "job succeeded");
            self.job_ended(snapshot, JobState::Succeeded, None, now);
            self.cleanup(&job.job_id, job_shards(snapshot), &result_objects(snapshot))
                .await;
        }
        Ok(())
    }

    /// Starts a new attempt of every retryable failed task and sends again every
    /// throttled or unconfirmed one whose time has come. A task failed for good is the
    /// job's failure: its message is returned, and nothing is sent.
    async fn retry_tasks(&self, snapshot: &JobSnapshot, now: u64) -> Result<Option<String>> {
        let store = &self.services.store;
        let config = self.config();
        let job_id = &snapshot.job.job_id;
        let stale_before = now.saturating_sub(config.dispatch_deadline.as_millis() as u64);
        let mut pending = Vec::new();
        for task in &snapshot.tasks {
            let spec = |attempt| TaskSpec {
                job_id: job_id.clone(),
                stage: task.stage,
                partition: task.partition,
                attempt,
            };
            match task.state {
                TaskState::Failed if task.retryable && task.attempt < config.max_attempts => {
                    let next = task.attempt + 1;
                    let expires_at = self.services.expires_at();
                    if store
                        .start_attempt(job_id, task.stage, task.partition, next, now, expires_at)
                        .await?
                    {
                        pending.push(PendingInvocation::again(
                            spec(next),
                            task.throttles,
                            snapshot,
                        ));
                    }
                }
                TaskState::Failed => {
                    return Ok(Some(format!(
                        "stage {} task {} failed after {} attempt{}: {}",
                        task.stage,
                        task.partition,
                        task.attempt,
                        if task.attempt == 1 { "" } else { "s" },
                        task.error.as_deref().unwrap_or("unknown error")
                    )));
                }
                // A throttled invocation whose back-off passed, or one its dispatcher
                // never confirmed (it died): the same attempt again, none used up.
                TaskState::Throttled | TaskState::Running
                    if resend_due(task, now, stale_before)
                        && self
                            .resend(task.stage, task.partition, task.attempt, job_id, now)
                            .await? =>
                {
                    debug!(job_id = %job_id, stage = task.stage, task = task.partition,
                        state = ?task.state, "sending an attempt again");
                    pending.push(PendingInvocation::again(
                        spec(task.attempt),
                        task.throttles,
                        snapshot,
                    ));
                }
                _ => {}
            }
        }
        self.dispatch(pending).await;
        Ok(None)
    }

    /// Visits the stages in topological order: claims and dispatches each whose inputs
    /// are complete, and re-sends what a dead dispatcher left unconfirmed. A stage fused
    /// into its consumer is complete at its claim, which may make that consumer ready in
    /// this same pass.
    async fn advance_stages(
        &self,
        mut snapshot: JobSnapshot,
        origin: Option<Handoff>,
        now: u64,
    ) -> Result<()> {
        let config = self.config();
        let stale_before = now.saturating_sub(config.dispatch_deadline.as_millis() as u64);
        let mut complete: BTreeSet<u32> = snapshot
            .stages
            .iter()
            .filter(|s| snapshot.stage_complete(s))
            .map(|s| s.stage)
            .collect();
        for index in 0..snapshot.stages.len() {
            let stage = snapshot.stages[index].clone();
            if complete.contains(&stage.stage) {
                continue;
            }
            let ready = stage
                .waits_for(config.adaptive)
                .all(|s| complete.contains(&s));
            let unconfirmed = stage.dispatched_ms.is_some_and(|d| d < stale_before);
            match stage.state {
                StageState::Pending if ready => {
                    let decision = match plan::adaptive::decide(&stage, &snapshot, config) {
                        Ok(decision) => decision,
                        Err(e) => {
                            let error = format!("stage {} cannot be planned: {e}", stage.stage);
                            return self.fail_job(&snapshot, error, now).await;
                        }
                    };
                    // Within the job's reserved tasks (max_tasks_per_caller): the stage
                    // waits for a running one to finish, whose completion wakes this step.
                    if let Some(limit) = snapshot.job.task_limit {
                        let in_flight = tasks_in_flight(&snapshot);
                        if in_flight > 0 && in_flight + decision.tasks > limit {
                            debug!(job_id = %snapshot.job.job_id, stage = stage.stage,
                                in_flight, tasks = decision.tasks, limit,
                                "stage waits for the job's tasks in flight");
                            continue;
                        }
                    }
                    let tasks = decision.tasks;
                    let claim = self
                        .claim_and_dispatch(&mut snapshot, index, decision, origin, now)
                        .await?;
                    match claim {
                        Claim::Fused => {
                            complete.insert(stage.stage);
                        }
                        // Another step claimed it first: its tasks are in flight too, which
                        // the reservation check of the stages after it must count.
                        Claim::Lost => {
                            let claimed = &mut snapshot.stages[index];
                            claimed.state = StageState::Dispatched;
                            claimed.tasks = tasks;
                        }
                        Claim::Dispatched => {}
                    }
                }
                StageState::Dispatched if stage.confirmed_ms.is_none() && unconfirmed => {
                    self.resend_unconfirmed_stage(&snapshot, &stage, now)
                        .await?;
                }
                StageState::Dispatched
                    if stage.confirmed_ms.is_some()
                        && self.is_tree(stage.tasks)
                        && unconfirmed
                        && !snapshot.stage_complete(&stage) =>
                {
                    // Sent through an invocation tree: a range whose dispatcher never
                    // confirmed it (lost, crashed) has its tasks without items sent again.
                    self.resend_unconfirmed_ranges(&snapshot, &stage, now)
                        .await?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Claims the ready stage at `index` with `decision` (a conditional write; its plans
    /// read beside it, for the tasks' payload), marks it claimed in `snapshot`, sends its
    /// tasks and confirms the dispatch.
    async fn claim_and_dispatch(
        &self,
        snapshot: &mut JobSnapshot,
        index: usize,
        decision: StageDecision,
        origin: Option<Handoff>,
        now: u64,
    ) -> Result<Claim> {
        let store = &self.services.store;
        let job_id = snapshot.job.job_id.clone();
        let stage = snapshot.stages[index].stage;
        // The claim and the reads of the stage's plans both only need the snapshot: one
        // round trip for the two.
        let (claimed, plans) = if decision.tasks > 0 {
            let (claimed, plans) = tokio::join!(
                store.claim_stage(&job_id, stage, now, &decision),
                self.read_plans(&job_id, stage, &decision)
            );
            (claimed?, plans.unwrap_or_default())
        } else {
            (
                store.claim_stage(&job_id, stage, now, &decision).await?,
                Vec::new(),
            )
        };
        if !claimed {
            return Ok(Claim::Lost);
        }
        let stage_key = format!("{}/{stage}", job_key(&snapshot.job.sql));
        self.services
            .faults
            .crash_point(FaultKind::SchedulerCrashAfterClaim, &stage_key)?;
        debug!(job_id = %job_id, stage, tasks = decision.tasks,
            decision = %decision.note, "stage dispatched");
        let tasks = decision.tasks;
        {
            let claimed = &mut snapshot.stages[index];
            claimed.state = StageState::Dispatched;
            claimed.tasks = tasks;
            claimed.dispatched_ms = Some(now);
            claimed.decision = Some(decision);
        }
        if tasks == 0 {
            // Fused: it runs inside its consumer's task; nothing to send.
            store.confirm_stage(&job_id, stage, now_ms()).await?;
            return Ok(Claim::Fused);
        }
        let handoff = origin.map(|h| h.plus(2));
        let context = context_for(snapshot, &snapshot.stages[index], plans, handoff);
        let size = snapshot.stages[index].size();
        self.dispatch_stage(&job_id, stage, tasks, context, size, &stage_key)
            .await?;
        store.confirm_stage(&job_id, stage, now_ms()).await?;
        // The first look for stragglers ([`super::speculation`]).
        let config = self.config();
        if config.speculation && tasks > 1 {
            let at = now + config.speculation_floor.as_millis() as u64;
            if let Err(e) = self.services.invoker.wake_scheduler_at(&job_id, at).await {
                warn!(job_id = %job_id, error = %e, "could not ask for a straggler check");
            }
        }
        Ok(Claim::Dispatched)
    }

    /// A claimed stage whose dispatcher died before confirming it: every task that has
    /// no item of its own is sent again, and the stage confirmed.
    async fn resend_unconfirmed_stage(
        &self,
        snapshot: &JobSnapshot,
        stage: &StageRecord,
        now: u64,
    ) -> Result<()> {
        let pending = self
            .resend_missing(snapshot, stage, 0..stage.tasks, now)
            .await?;
        warn!(job_id = %stage.job_id, stage = stage.stage, tasks = pending.len(),
            "stage dispatch was never confirmed; re-sending its tasks");
        self.dispatch(pending).await;
        self.services
            .store
            .confirm_stage(&stage.job_id, stage.stage, now_ms())
            .await?;
        Ok(())
    }

    /// First attempts of the tasks of `stage` among `partitions` that have no item yet,
    /// each marked re-sent (a conditional write: of racing steps, one sends each).
    pub(super) async fn resend_missing(
        &self,
        snapshot: &JobSnapshot,
        stage: &StageRecord,
        partitions: std::ops::Range<u32>,
        now: u64,
    ) -> Result<Vec<PendingInvocation>> {
        let items: BTreeSet<u32> = snapshot
            .tasks_of(stage.stage)
            .map(|t| t.partition)
            .collect();
        let mut pending = Vec::new();
        for partition in partitions.filter(|p| !items.contains(p)) {
            if self
                .resend(stage.stage, partition, 1, &stage.job_id, now)
                .await?
            {
                let task = TaskSpec {
                    job_id: stage.job_id.clone(),
                    stage: stage.stage,
                    partition,
                    attempt: 1,
                };
                pending.push(PendingInvocation::again(task, 0, snapshot));
            }
        }
        Ok(pending)
    }

    /// Reads the stored plans the tasks of `stage` will run (its own and those
    /// [`plan::adaptive::plans_needed`] names under `decision`), for their payload.
    async fn read_plans(
        &self,
        job_id: &str,
        stage: u32,
        decision: &StageDecision,
    ) -> Result<Vec<PlanRecord>> {
        let mut wanted = vec![stage];
        wanted.extend(decision.fused.iter().copied());
        if let Some(switch) = decision.switched.filter(|s| s.large == stage) {
            wanted.push(switch.join);
        }
        let store = &self.services.store;
        let plans =
            futures::future::try_join_all(wanted.iter().map(|&s| store.get_plan(job_id, s)))
                .await?;
        Ok(plans.into_iter().flatten().collect())
    }

    pub(super) async fn resend(
        &self,
        stage: u32,
        partition: u32,
        attempt: u32,
        job_id: &str,
        now: u64,
    ) -> Result<bool> {
        let resend = TaskResend {
            job_id: job_id.to_string(),
            stage,
            partition,
            attempt,
            stale_before_ms: now.saturating_sub(self.config().dispatch_deadline.as_millis() as u64),
            now_ms: now,
            expires_at: self.services.expires_at(),
        };
        self.services.store.resend_task(&resend).await
    }

    /// Deletes every file a write job that ended without success wrote (nothing for any
    /// other job).
    pub(super) async fn discard_write(&self, job: &crate::state::JobRecord) {
        if let Some(target) = &job.write {
            let deleted = crate::write::discard(&self.services, target).await;
            info!(job_id = %job.job_id, files = deleted, location = %target.location,
                "deleted the files of a write that was not committed");
        }
    }

    /// Keeps a write job that just ended on the active index, so that the sweep runs the
    /// last clean-up of its files once no attempt of it can still be running.
    pub(super) async fn keep_write_active(&self, job: &crate::state::JobRecord) {
        if job.write.is_some() {
            if let Err(e) = self
                .services
                .store
                .keep_active(&job.job_id, self.services.expires_at())
                .await
            {
                warn!(job_id = %job.job_id, error = %e, "could not keep the write for the sweep");
            }
        }
    }

    /// Deletes a finished job's objects except `keep` (its result's committed objects);
    /// `shards` is the most shards any of its stages wrote to ([`job_shards`]). Best
    /// effort: object storage lifecycle rules catch whatever is left.
    pub(super) async fn cleanup(&self, job_id: &str, shards: u32, keep: &[String]) {
        let Ok(store) = self.services.shuffle_store() else {
            return;
        };
        let deleted = crate::shuffle::delete_job_objects(
            store.as_ref(),
            &self.services.shuffle.prefix,
            job_id,
            shards,
            keep,
        )
        .await;
        debug!(job_id = %job_id, objects = deleted, "cleaned up shuffle data");
    }
}

/// Tasks of the job's dispatched stages that are not complete yet.
fn tasks_in_flight(snapshot: &JobSnapshot) -> u32 {
    snapshot
        .stages
        .iter()
        .filter(|s| s.state == StageState::Dispatched && !snapshot.stage_complete(s))
        .map(|s| s.tasks)
        .sum()
}

/// The objects of the job's result: its final stage's committed outputs (what its
/// clean-up keeps once it succeeded).
pub(super) fn result_objects(snapshot: &JobSnapshot) -> Vec<String> {
    snapshot
        .tasks_of(snapshot.job.final_stage())
        .filter_map(|t| t.output.as_ref().map(|o| o.object.clone()))
        .collect()
}

/// The most object shards any stage of the job wrote to (says which to list).
pub(super) fn job_shards(snapshot: &JobSnapshot) -> u32 {
    snapshot
        .stages
        .iter()
        .map(|s| crate::shuffle::shards_for(s.tasks, s.output_partitions))
        .max()
        .unwrap_or(1)
}

/// Whether a throttled or running task should be sent again now (see
/// [`JobStore::resend_task`](crate::state::JobStore::resend_task)).
fn resend_due(task: &crate::state::TaskRecord, now: u64, stale_before: u64) -> bool {
    match task.state {
        TaskState::Throttled => task.retry_at_ms.is_none_or(|at| at <= now),
        TaskState::Running => {
            task.confirmed_ms.is_none() && task.dispatched_ms.is_some_and(|d| d < stale_before)
        }
        TaskState::Succeeded | TaskState::Failed => false,
    }
}
