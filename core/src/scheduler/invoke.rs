//! Invoking tasks: each [`PendingInvocation`] sent, `dispatch_concurrency` at a time,
//! and what happened recorded (confirmed, deferred after a throttle, or failed), and the
//! payload a claimed stage's tasks are handed ([`context_for`]).

use std::sync::Arc;

use futures::StreamExt;
use tracing::{debug, warn};

use crate::dispatch::{DispatchContext, Handoff, JobBrief, TaskInvocation};
use crate::state::{JobSnapshot, PlanRecord, StageRecord, TaskDeferral, TaskOutput, TaskState};
use crate::time::now_ms;
use crate::{EngineConfig, Result};

use super::*;

impl Scheduler {
    /// Invokes the executor for each task, `dispatch_concurrency` at a time, and records
    /// what happened: an accepted retry or re-send is confirmed on its task; a throttled
    /// invocation is deferred with back-off (no attempt used up); a refused one fails its
    /// attempt for good, which fails the job with the reason.
    pub(super) async fn dispatch(&self, sends: Vec<PendingInvocation>) {
        if sends.is_empty() {
            return;
        }
        let invoker = self.services.invoker.clone();
        let results: Vec<(PendingInvocation, Result<()>)> = futures::stream::iter(sends)
            .map(|send| {
                let invoker = invoker.clone();
                async move {
                    let invocation = TaskInvocation {
                        task: send.task.clone(),
                        context: send.context.clone(),
                        deadline_ms: None,
                        size: send.size,
                    };
                    let result = invoker.run_task(&invocation).await;
                    (send, result)
                }
            })
            .buffer_unordered(self.config().dispatch_concurrency.max(1))
            .collect()
            .await;
        let store = &self.services.store;
        for (send, result) in results {
            let task = &send.task;
            let recorded = match result {
                Ok(()) if send.confirm => store
                    .confirm_attempt(
                        &task.job_id,
                        task.stage,
                        task.partition,
                        task.attempt,
                        now_ms(),
                    )
                    .await
                    .map(|_| ()),
                Ok(()) => Ok(()),
                Err(error) if error.is_retryable() => {
                    let backoff = EngineConfig::throttle_backoff(send.throttles);
                    debug!(%task, %error, ?backoff, "dispatch throttled; deferring");
                    store
                        .defer_task(&TaskDeferral {
                            job_id: task.job_id.clone(),
                            stage: task.stage,
                            partition: task.partition,
                            attempt: task.attempt,
                            retry_at_ms: now_ms() + backoff.as_millis() as u64,
                            error: format!("dispatch throttled: {error}"),
                            expires_at: self.services.expires_at(),
                        })
                        .await
                        .map(|_| ())
                }
                Err(error) => {
                    warn!(%task, %error, "dispatch refused");
                    let failure = task.failure(
                        format!("dispatch failed: {error}"),
                        false,
                        self.services.expires_at(),
                    );
                    store.fail_attempt(&failure).await.map(|_| ())
                }
            };
            if let Err(e) = recorded {
                warn!(%task, error = %e, "could not record the dispatch; the deadline re-sends it");
            }
        }
    }
}

/// `context` with `n` more sequential requests on its hand-off path.
pub(super) fn with_handoff(context: &Arc<DispatchContext>, n: u32) -> Arc<DispatchContext> {
    match context.handoff {
        Some(h) => Arc::new(DispatchContext {
            handoff: Some(h.plus(n)),
            ..context.as_ref().clone()
        }),
        None => context.clone(),
    }
}

/// Most bytes of a task payload's [`DispatchContext`]: past it the largest committed
/// inputs, then the plans, are left for the executor to read (an async invocation
/// carries at most 1 MB; every task of the stage is sent a copy).
pub const MAX_CONTEXT_BYTES: usize = 256 * 1024;

/// What the tasks of `stage` (as claimed in `snapshot`) are handed: the job, the stage,
/// the committed outputs of every stage they read and `plans`, as far as they fit
/// [`MAX_CONTEXT_BYTES`].
pub(super) fn context_for(
    snapshot: &JobSnapshot,
    stage: &StageRecord,
    plans: Vec<PlanRecord>,
    handoff: Option<Handoff>,
) -> Option<Arc<DispatchContext>> {
    let decision = stage.decision.as_ref()?;
    let mut inputs = Vec::new();
    // An input some tasks read only a range of (a split partition, a combining stage):
    // each such task reads its own range, which a shared payload cannot carry.
    for &(input, _) in decision
        .input_tasks
        .iter()
        .filter(|(i, _)| !decision.skew.iter().any(|s| s.stage == *i))
    {
        let source = decision
            .read_from
            .iter()
            .find(|(i, _)| *i == input)
            .map_or(input, |&(_, s)| s);
        let outputs: Vec<TaskOutput> = snapshot
            .tasks_of(source)
            .filter(|t| t.state == TaskState::Succeeded)
            .filter_map(|t| t.output.clone())
            .map(|o| TaskOutput {
                metrics: Vec::new(),
                requests: Default::default(),
                handoff: None,
                cpu: None,
                ..o
            })
            .collect();
        inputs.push((input, outputs));
    }
    let mut context = DispatchContext {
        job: JobBrief::of(&snapshot.job),
        stage: stage.clone(),
        inputs,
        plans,
        handoff,
    };
    let size = |c: &DispatchContext| serde_json::to_vec(c).map_or(usize::MAX, |b| b.len());
    // The largest inputs go first: each one left out is one read for the task.
    while size(&context) > MAX_CONTEXT_BYTES && !context.inputs.is_empty() {
        let largest = context
            .inputs
            .iter()
            .enumerate()
            .max_by_key(|(_, (_, outputs))| outputs.iter().map(|o| o.ends.len() + 8).sum::<usize>())
            .map(|(i, _)| i)
            .unwrap_or(0);
        context.inputs.remove(largest);
    }
    if size(&context) > MAX_CONTEXT_BYTES {
        context.plans.clear();
    }
    (size(&context) <= MAX_CONTEXT_BYTES).then(|| Arc::new(context))
}
