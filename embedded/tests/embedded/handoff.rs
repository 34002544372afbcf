//! The hand-off path's request count, checked at the boundary: the figure a task records
//! (`handoff_calls`, summed along the path as it goes) equals the requests the store and
//! the invoker really saw, one after another, from the commit that completed the input
//! stage to the moment the next stage's task starts its work. Requests made together
//! (the claim and the plan read) are one step on that path.

use crate::common;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use lambdafusion::dispatch::{DispatchRange, Invoker, TaskInvocation};
use lambdafusion::executor::Executor;
use lambdafusion::scheduler::{Scheduler, SubmitOptions};
use lambdafusion::state::intercept::{Action, Hook, Intercepted};
use lambdafusion::state::JobStore;
use lambdafusion::EngineConfig;
use lambdafusion_embedded::in_memory_services;

/// One request, as the boundary saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// A store call, and whether it was made alongside another (the same round trip).
    Store(&'static str, bool),
    Invoke(u32),
    /// A task of this stage begins to run (the harness's mark, not a request).
    Runs(u32),
}

/// An invoker that records each invocation in the shared log and keeps it to run.
#[derive(Debug, Default)]
struct Logging {
    log: Arc<Mutex<Vec<Seen>>>,
    invocations: Mutex<Vec<TaskInvocation>>,
}

#[async_trait]
impl Invoker for Logging {
    async fn run_task(&self, invocation: &TaskInvocation) -> lambdafusion::Result<()> {
        self.log
            .lock()
            .unwrap()
            .push(Seen::Invoke(invocation.task.stage));
        self.invocations.lock().unwrap().push(invocation.clone());
        Ok(())
    }
    async fn dispatch(&self, _range: &DispatchRange) -> lambdafusion::Result<()> {
        Ok(())
    }
    async fn wake_scheduler(&self, _job_id: &str) -> lambdafusion::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_handoff_is_the_requests_the_boundary_saw() {
    let dir = tempfile::tempdir().unwrap();
    common::write_tables(dir.path()).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let invoker = Arc::new(Logging {
        log: log.clone(),
        ..Logging::default()
    });
    // Two stages of one task each, as planned (adaptive stages off: nothing fused).
    let config = common::allow(
        EngineConfig::default()
            .with_adaptive(false)
            .with_bytes_per_task(64 * 1024)
            .with_max_tasks_per_stage(2)
            .with_fast_path(true),
        dir.path(),
    );
    let (mut services, store) = in_memory_services(invoker.clone(), config).unwrap();
    for sql in common::create_statements(dir.path()) {
        Scheduler::new(services.clone())
            .submit(&sql, &SubmitOptions::default())
            .await
            .unwrap();
    }
    let recording = log.clone();
    // Every store call takes a little while, so calls made together overlap visibly.
    let hook: Hook = Arc::new(move |call| {
        recording
            .lock()
            .unwrap()
            .push(Seen::Store(call.op, call.in_flight > 0));
        Action::Delay(std::time::Duration::from_millis(5))
    });
    services.store = Arc::new(Intercepted::new(Arc::new(store.clone()), hook));
    let job = Scheduler::new(services.clone())
        .submit(
            "SELECT k, count(*) AS n FROM facts GROUP BY k",
            &SubmitOptions::default(),
        )
        .await
        .unwrap()
        .job_id;
    let executor = Executor::new(services.clone());
    // Stage by stage: each task's run commits and (fast path) starts the next stage.
    let mut ran = 0;
    loop {
        let next = invoker.invocations.lock().unwrap().pop();
        let Some(invocation) = next else { break };
        log.lock().unwrap().push(Seen::Runs(invocation.task.stage));
        executor.handle_invocation(&invocation).await.unwrap();
        ran += 1;
    }
    assert!(ran >= 2, "the query ran {ran} tasks");
    let snapshot = store.load_job(&job).await.unwrap().unwrap();
    let status =
        lambdafusion::status::job_status(&snapshot, &lambdafusion::EngineConfig::default());
    assert_eq!(status.state, "succeeded", "{status:?}");
    let log = log.lock().unwrap().clone();
    let handed: Vec<_> = status
        .stages
        .iter()
        .filter(|s| s.handoff_calls.is_some())
        .collect();
    assert!(!handed.is_empty(), "{status:?}");
    for stage in handed {
        // From the commit of the input's task to the invocation of this stage's task...
        let invoked = log
            .iter()
            .position(|s| *s == Seen::Invoke(stage.stage))
            .expect("the stage was invoked");
        let committed = log[..invoked]
            .iter()
            .rposition(|s| matches!(s, Seen::Store("commit_task", _)))
            .expect("an input committed before");
        let sequential = |seen: &[Seen]| {
            seen.iter()
                .filter(|s| !matches!(s, Seen::Store(_, true) | Seen::Runs(_)))
                .count()
        };
        let until_invocation = sequential(&log[committed..=invoked]);
        // ...then the task's own requests before its work: the first task of the stage
        // to run, from its start to its commit (its inputs' objects are not in this log).
        let runs = log
            .iter()
            .position(|s| *s == Seen::Runs(stage.stage))
            .expect("a task of the stage ran");
        let own = log[runs + 1..]
            .iter()
            .take_while(|s| !matches!(s, Seen::Store("commit_task", _)))
            .count();
        assert_eq!(
            stage.handoff_calls,
            Some((until_invocation + sequential(&log[runs + 1..=runs + own])) as u32),
            "stage {}: the boundary saw {:?} and then {:?}",
            stage.stage,
            &log[committed..=invoked],
            &log[runs..=runs + own]
        );
    }
}
