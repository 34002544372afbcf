//! The failure model, driven by hand: a fresh scheduler and executor for every event
//! (proving the scheduler keeps nothing in memory), duplicate deliveries and racing
//! attempts (exactly one commit), lost invocations found by the sweep and retried,
//! the attempt limit, and cancellation.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::harness::{Harness, JOIN};
use lambdafusion::access::Caller;
use lambdafusion::dispatch::TaskSpec;
use lambdafusion::executor::{Executor, TaskReport};
use lambdafusion::state::{JobState, JobStore, TaskState};
use lambdafusion::EngineConfig;

/// Every stage as wide as allowed and kept so: no build side read in place, no shuffle
/// partition coalesced — the failure model is driven across many tasks and stages.
fn many_tasks() -> EngineConfig {
    EngineConfig {
        inline_scan_bytes: 0,
        ..EngineConfig::default()
    }
    .with_bytes_per_task(1)
    .with_min_scan_bytes_per_task(1)
    .with_shuffle_bytes_per_task(1)
    .with_max_tasks_per_stage(4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_scheduler_and_executor_per_event_complete_the_job() {
    let mut h = Harness::new(many_tasks()).await;
    let job = h.submit(JOIN).await;
    let mut executed = 0;
    h.drive(&job, |executor, task| {
        executed += 1;
        async move {
            let report = executor.handle(&task).await.unwrap();
            assert!(
                matches!(report, TaskReport::Committed { .. }),
                "{task}: {report:?}"
            );
        }
    })
    .await;
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    assert!(snapshot.stages.len() >= 3, "a multi-stage plan");
    let tasks: u32 = snapshot.stages.iter().map(|s| s.tasks).sum();
    assert_eq!(
        executed, tasks as usize,
        "every task dispatched exactly once"
    );
    h.check_result(&job).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_deliveries_commit_once() {
    let mut h = Harness::new(many_tasks()).await;
    let job = h.submit(JOIN).await;
    let reports = Arc::new(Mutex::new(Vec::new()));
    let seen = reports.clone();
    let services = h.services.clone();
    h.drive(&job, move |executor, task| {
        let twin = Executor::new(services.clone());
        let seen = seen.clone();
        async move {
            // The same event delivered twice, concurrently, to two containers.
            let (a, b) = tokio::join!(executor.handle(&task), twin.handle(&task));
            seen.lock().unwrap().push((task, a.unwrap(), b.unwrap()));
        }
    })
    .await;
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    for (task, a, b) in reports.lock().unwrap().iter() {
        let committed = [a, b]
            .iter()
            .filter(|r| matches!(r, TaskReport::Committed { .. }))
            .count();
        assert_eq!(committed, 1, "{task}: {a:?} / {b:?}");
    }
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    assert!(snapshot.stages.iter().all(|s| snapshot.stage_complete(s)));
    assert!(snapshot
        .tasks
        .iter()
        .all(|t| t.state == TaskState::Succeeded));
    h.check_result(&job).await;

    // A late third delivery after the job finished changes nothing.
    let late = TaskSpec {
        job_id: job.clone(),
        stage: 0,
        partition: 0,
        attempt: 1,
    };
    let report = h.executor().handle(&late).await.unwrap();
    assert!(matches!(report, TaskReport::Skipped(_)), "{report:?}");
    h.check_result(&job).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_attempts_leave_one_winner() {
    let mut h = Harness::new(many_tasks()).await;
    let job = h.submit(JOIN).await;
    let store = h.store.clone();
    let winners = Arc::new(Mutex::new(Vec::new()));
    let w = winners.clone();
    let services = h.services.clone();
    h.drive(&job, move |executor, task| {
        let store = store.clone();
        let retry = Executor::new(services.clone());
        let w = w.clone();
        async move {
            // The sweep gave up on attempt 1 and started attempt 2; both run.
            let second = TaskSpec {
                attempt: task.attempt + 1,
                ..task.clone()
            };
            assert!(store
                .start_attempt(
                    &task.job_id,
                    task.stage,
                    task.partition,
                    second.attempt,
                    0,
                    u64::MAX
                )
                .await
                .unwrap());
            let (a, b) = tokio::join!(executor.handle(&task), retry.handle(&second));
            let (a, b) = (a.unwrap(), b.unwrap());
            let committed: Vec<u32> = [(&a, task.attempt), (&b, second.attempt)]
                .iter()
                .filter(|(r, _)| matches!(r, TaskReport::Committed { .. }))
                .map(|(_, attempt)| *attempt)
                .collect();
            assert_eq!(committed.len(), 1, "{task}: {a:?} / {b:?}");
            w.lock().unwrap().push((task, committed[0]));
        }
    })
    .await;
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    // The recorded output is the winner's.
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    for (task, attempt) in winners.lock().unwrap().iter() {
        let item = snapshot
            .tasks
            .iter()
            .find(|t| t.stage == task.stage && t.partition == task.partition)
            .unwrap();
        assert_eq!(item.output.as_ref().unwrap().attempt, *attempt);
    }
    h.check_result(&job).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_invocation_is_found_by_the_sweep_and_retried() {
    let mut h = Harness::new(many_tasks().with_task_timeout(Duration::ZERO)).await;
    let job = h.submit(JOIN).await;
    let mut dropped = None;
    for _ in 0..200 {
        for task in h.invoker.take() {
            if dropped.is_none() && task.stage == 0 && task.partition == 0 {
                dropped = Some(task); // Lambda never ran it.
                continue;
            }
            h.executor().handle(&task).await.unwrap();
        }
        if h.deliver_stream().await == 0 && h.invoker.tasks.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let report = h.scheduler().sweep().await.unwrap();
            assert!(report.jobs >= 1);
        }
        if h.state(&job).await.is_terminal() {
            break;
        }
    }
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let item = h.store.get_task(&job, 0, 0).await.unwrap().unwrap();
    assert_eq!(item.failures, 1, "attempt 1 recorded as lost");
    assert_eq!(
        item.output.unwrap().attempt,
        2,
        "attempt 2 produced the output"
    );
    h.check_result(&job).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_keeps_getting_lost_fails_the_job_with_its_error() {
    let mut h = Harness::new(
        many_tasks()
            .with_task_timeout(Duration::ZERO)
            .with_max_attempts(2),
    )
    .await;
    let job = h.submit(JOIN).await;
    for _ in 0..20 {
        for task in h.invoker.take() {
            if task.stage == 0 && task.partition == 0 {
                continue; // every attempt of this task is lost
            }
            h.executor().handle(&task).await.unwrap();
        }
        h.deliver_stream().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
        h.scheduler().sweep().await.unwrap();
        h.deliver_stream().await;
        if h.state(&job).await.is_terminal() {
            break;
        }
    }
    let record = h.store.get_job(&job).await.unwrap().unwrap();
    assert_eq!(record.state, JobState::Failed);
    let error = record.error.unwrap();
    assert!(
        error.contains("stage 0 task 0 failed after 2 attempts"),
        "{error}"
    );
    assert!(error.contains("no completion record"), "{error}");
    assert!(h.store.active_jobs(None, 100).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_error_fails_the_job_at_once_with_datafusions_message() {
    let mut h = Harness::new(many_tasks()).await;
    let sql = "SELECT CAST(concat('x', s) AS INT) FROM facts";
    let job = h.submit(sql).await;
    h.drive(&job, |executor, task| async move {
        executor.handle(&task).await.unwrap();
    })
    .await;
    let record = h.store.get_job(&job).await.unwrap().unwrap();
    assert_eq!(record.state, JobState::Failed);
    let error = record.error.unwrap();
    assert!(
        error.contains("failed after 1 attempt"),
        "not retried: {error}"
    );
    assert!(error.to_lowercase().contains("cast"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_dispatch_and_running_tasks() {
    let mut h = Harness::new(many_tasks()).await;
    let job = h.submit(JOIN).await;
    let first = h.invoker.take();
    assert!(!first.is_empty());
    assert_eq!(
        h.scheduler().cancel(&job, &Caller::local()).await.unwrap(),
        JobState::Cancelled
    );
    for task in first {
        let report = h.executor().handle(&task).await.unwrap();
        assert!(matches!(report, TaskReport::Skipped(_)), "{report:?}");
    }
    h.deliver_stream().await;
    assert!(
        h.invoker.take().is_empty(),
        "nothing dispatched after cancel"
    );
    assert_eq!(h.state(&job).await, JobState::Cancelled);
    // Cancelling again is harmless.
    assert_eq!(
        h.scheduler().cancel(&job, &Caller::local()).await.unwrap(),
        JobState::Cancelled
    );
}
