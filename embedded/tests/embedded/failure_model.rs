//! The holes of the failure model, each injected and its outcome asserted: a cancel
//! racing a success, commits meeting a busy store, small stage items, store error
//! classes, sweep isolation and its time budget, a scheduler dying between claim and
//! dispatch, throttled dispatch, the job deadline, and the embedded engine's bounds.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::harness::{Harness, JOIN};
use lambdafusion::access::Caller;
use lambdafusion::dispatch::InvocationState;
use lambdafusion::error::StoreErrorKind;
use lambdafusion::executor::TaskReport;
use lambdafusion::faults::{FaultPlan, Faults};
use lambdafusion::state::intercept::{Action, Call};
use lambdafusion::state::{ChangeRecord, JobState, JobStore, TaskState};
use lambdafusion::{EngineConfig, Error};

/// A grouping over `facts`: its first stage scans with several tasks.
const AGG: &str = "SELECT k, count(*) AS n, sum(v) AS total FROM facts GROUP BY k";

async fn check_agg(h: &Harness, job: &str) {
    let (_, batches) = lambdafusion::results::collect(&h.services, job)
        .await
        .unwrap();
    let expected = common::reference(h.dir.path(), AGG).await;
    lambdafusion_embedded::verify::compare(&expected, &batches, false).unwrap();
}

fn many_tasks() -> EngineConfig {
    EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_max_tasks_per_stage(4)
}

fn store_error(kind: StoreErrorKind) -> Error {
    Error::store(kind, format!("injected {kind:?}"))
}

/// Fails `op` calls with `error` while `armed` holds (shared with the test).
fn failing(
    op: &'static str,
    kind: StoreErrorKind,
    armed: Arc<AtomicUsize>,
) -> lambdafusion::state::intercept::Hook {
    Arc::new(move |call: Call<'_>| {
        if call.op == op && armed.load(Ordering::SeqCst) > 0 {
            armed.fetch_sub(1, Ordering::SeqCst);
            return Action::Fail(store_error(kind));
        }
        Action::Proceed
    })
}

/// A cancel that read the job as running just before it succeeded must not delete the
/// result (before: `cancel` ignored `finish_job` losing and cleaned up anyway).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_a_success_leaves_the_job_and_its_result() {
    let armed = Arc::new(AtomicUsize::new(0));
    let delay = armed.clone();
    let hook: lambdafusion::state::intercept::Hook = Arc::new(move |call: Call<'_>| {
        if call.op == "finish_job" && delay.load(Ordering::SeqCst) > 0 {
            return Action::Delay(Duration::from_millis(400));
        }
        Action::Proceed
    });
    let mut h = Harness::with(many_tasks(), Some(hook), Faults::default()).await;
    let job = h.submit(JOIN).await;
    // Run every task, but keep the last wake-up: all stages complete, the job running.
    loop {
        let tasks = h.invoker.take();
        if tasks.is_empty() {
            break;
        }
        for task in tasks {
            h.executor().handle(&task).await.unwrap();
        }
        while let Ok(batch) = h.stream.try_recv() {
            let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
            let all_done = snapshot.stages.iter().all(|s| snapshot.stage_complete(s));
            if !all_done {
                h.scheduler().on_records(&batch).await.unwrap();
            }
        }
    }
    assert_eq!(h.state(&job).await, JobState::Running);
    // The cancel reads RUNNING, then its finish is slow; the success lands meanwhile.
    armed.store(1, Ordering::SeqCst);
    let cancel = {
        let scheduler = h.scheduler();
        let job = job.clone();
        tokio::spawn(async move { scheduler.cancel(&job, &Caller::local()).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut direct = h.services.clone();
    direct.store = Arc::new(h.store.clone());
    lambdafusion::scheduler::Scheduler::new(direct)
        .advance(&job)
        .await
        .unwrap();
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let state = cancel.await.unwrap().unwrap();
    assert_eq!(
        state,
        JobState::Succeeded,
        "the cancel lost the race and says so"
    );
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    armed.store(0, Ordering::SeqCst);
    h.check_result(&job).await;
}

/// A commit that meets a throttled, conflicting or unavailable store is tried again —
/// even when a try was applied and only its answer lost — and the task is never run
/// twice (before: the first transient error failed the attempt and re-ran the task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_meeting_a_busy_store_is_retried_and_the_task_runs_once() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let hook: lambdafusion::state::intercept::Hook = Arc::new(move |call: Call<'_>| {
        if call.op != "commit_task" {
            return Action::Proceed;
        }
        // Per task (tasks run one after another): throttled, then applied with the answer
        // lost, then the retry that finds its own commit.
        match seen.fetch_add(1, Ordering::SeqCst) % 3 {
            0 => Action::Fail(store_error(StoreErrorKind::Throttled)),
            1 => Action::ApplyThenFail(store_error(StoreErrorKind::Unavailable)),
            _ => Action::Proceed,
        }
    });
    let config = EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_max_tasks_per_stage(2);
    let mut h = Harness::with(config, Some(hook), Faults::default()).await;
    let job = h.submit(JOIN).await;
    let runs = Arc::new(Mutex::new(Vec::new()));
    let log = runs.clone();
    h.drive(&job, move |executor, task| {
        let log = log.clone();
        async move {
            let report = executor.handle(&task).await.unwrap();
            log.lock().unwrap().push((task, report));
        }
    })
    .await;
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let runs = runs.lock().unwrap().clone();
    for (task, report) in runs.iter() {
        assert!(
            matches!(report, TaskReport::Committed { .. }),
            "{task}: {report:?}"
        );
        assert_eq!(task.attempt, 1, "{task} ran again");
    }
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    let tasks: u32 = snapshot.stages.iter().map(|s| s.tasks).sum();
    assert_eq!(runs.len(), tasks as usize, "every task ran exactly once");
    assert!(snapshot.tasks.iter().all(|t| t.failures == 0));
    assert_eq!(calls.load(Ordering::SeqCst), 3 * tasks as usize);
    h.check_result(&job).await;
}

/// Commits never rewrite the stage item, and stage items carry no plan: a stage writes
/// its item when created, claimed and confirmed, however many tasks it has (before:
/// every commit rewrote the stage item, plan included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_leave_the_small_stage_items_alone() {
    let mut h = Harness::new(many_tasks()).await;
    let job = h.submit(JOIN).await;
    let mut stage_writes = std::collections::HashMap::<u32, usize>::new();
    let mut largest = 0;
    for _ in 0..200 {
        for task in h.invoker.take() {
            h.executor().handle(&task).await.unwrap();
        }
        let mut batches = Vec::new();
        while let Ok(batch) = h.stream.try_recv() {
            batches.push(batch);
        }
        for batch in &batches {
            for change in batch {
                if let ChangeRecord::Stage(s) = change.clone() {
                    if s.job_id != job {
                        continue;
                    }
                    *stage_writes.entry(s.stage).or_default() += 1;
                    largest = largest.max(serde_json::to_vec(&s).unwrap().len());
                }
            }
            h.scheduler().on_records(batch).await.unwrap();
        }
        if h.state(&job).await.is_terminal() {
            break;
        }
    }
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    assert!(snapshot.stages.iter().any(|s| s.tasks >= 4));
    for stage in &snapshot.stages {
        let writes = stage_writes.get(&stage.stage).copied().unwrap_or(0);
        assert!(writes <= 3, "stage {} written {writes} times", stage.stage);
    }
    assert!(largest < 1024, "a stage item is {largest} bytes");
    for stage in &snapshot.stages {
        let plan = h.store.get_plan(&job, stage.stage).await.unwrap().unwrap();
        assert!(plan.plan.is_some(), "plans live in their own items");
    }
}

/// Store errors that retrying cannot fix fail the job at once with their message; a
/// throttled store costs one attempt, which is retried (before: every store error was
/// retryable, so access denied was tried three times).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_transient_store_errors_are_retried() {
    let armed = Arc::new(AtomicUsize::new(0));
    let hook = failing("task_view", StoreErrorKind::AccessDenied, armed.clone());
    let mut h = Harness::with(many_tasks(), Some(hook), Faults::default()).await;
    let job = h.submit(JOIN).await;
    armed.store(1, Ordering::SeqCst);
    h.run_to_end(&job).await;
    let record = h.store.get_job(&job).await.unwrap().unwrap();
    assert_eq!(record.state, JobState::Failed);
    let error = record.error.unwrap();
    assert!(error.contains("failed after 1 attempt"), "{error}");
    assert!(error.contains("AccessDenied"), "{error}");

    let armed = Arc::new(AtomicUsize::new(0));
    let hook = failing("task_view", StoreErrorKind::Throttled, armed.clone());
    let mut h = Harness::with(many_tasks(), Some(hook), Faults::default()).await;
    let job = h.submit(JOIN).await;
    armed.store(1, Ordering::SeqCst);
    h.run_to_end(&job).await;
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    let retried: Vec<_> = snapshot.tasks.iter().filter(|t| t.failures > 0).collect();
    assert_eq!(retried.len(), 1, "one attempt failed and was retried");
    assert_eq!(retried[0].output.as_ref().unwrap().attempt, 2);
    h.check_result(&job).await;
}

/// One job whose records cannot be read does not stop the sweep for the others (before:
/// the first error ended the sweep).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_job_does_not_stop_the_sweep() {
    let broken = Arc::new(Mutex::new(String::new()));
    let which = broken.clone();
    let hook: lambdafusion::state::intercept::Hook = Arc::new(move |call: Call<'_>| {
        if call.op == "load_job" && call.job_id == Some(which.lock().unwrap().as_str()) {
            return Action::Fail(store_error(StoreErrorKind::Corrupt));
        }
        Action::Proceed
    });
    let h = Harness::with(
        many_tasks().with_task_timeout(Duration::ZERO),
        Some(hook),
        Faults::default(),
    )
    .await;
    let mut jobs = [h.submit(JOIN).await, h.submit(JOIN).await];
    jobs.sort();
    *broken.lock().unwrap() = jobs[0].clone();
    h.invoker.take(); // Lambda lost every one of them.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let report = h.scheduler().sweep().await.unwrap();
    assert_eq!(report.jobs, 2);
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert_eq!(report.errors[0].0, jobs[0]);
    assert!(
        report.lost_attempts > 0,
        "the other job was swept: {report:?}"
    );
    let retried = h.invoker.take();
    assert!(
        !retried.is_empty()
            && retried
                .iter()
                .all(|t| t.job_id == jobs[1] && t.attempt == 2)
    );
}

/// A sweep stops at its time budget and the next one continues after the last job it
/// finished (before: it ran over every job, however long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_is_bounded_in_time_and_resumes_where_it_stopped() {
    let slow = Arc::new(AtomicUsize::new(0));
    let armed = slow.clone();
    let hook: lambdafusion::state::intercept::Hook = Arc::new(move |call: Call<'_>| {
        if call.op == "load_job" && armed.load(Ordering::SeqCst) > 0 {
            return Action::Delay(Duration::from_millis(150));
        }
        Action::Proceed
    });
    let mut config = many_tasks();
    // Each job costs two slow loads (the sweep's and the advance's): 300 ms.
    config.sweep_budget = Duration::from_millis(400);
    let h = Harness::with(config, Some(hook), Faults::default()).await;
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(h.submit(JOIN).await);
    }
    jobs.sort();
    slow.store(1, Ordering::SeqCst);
    let first = h.scheduler().sweep().await.unwrap();
    assert!(first.incomplete, "{first:?}");
    assert_eq!(first.jobs, 2, "{first:?}");
    assert_eq!(h.store.sweep_cursor().await.unwrap(), Some(jobs[1].clone()));
    let second = h.scheduler().sweep().await.unwrap();
    assert!(!second.incomplete, "{second:?}");
    assert_eq!(
        second.jobs, 1,
        "only the job after the bookmark: {second:?}"
    );
    assert_eq!(
        h.store.sweep_cursor().await.unwrap(),
        None,
        "a full pass clears it"
    );
}

/// A job whose store calls hang (a DynamoDB request that never answers) gets what is
/// left of the sweep's budget, not the whole run: the sweep gives up on it, saves its
/// bookmark past it, and the next run handles the jobs after it (before: the run hung
/// on that job until the function's timeout, without saving the bookmark, and every
/// later run stopped at the same job).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_calls_hang_does_not_hold_up_the_sweep() {
    let hung = Arc::new(std::sync::Mutex::new(None::<String>));
    let armed = hung.clone();
    let hook: lambdafusion::state::intercept::Hook = Arc::new(move |call: Call<'_>| {
        let target = armed.lock().unwrap().clone();
        if call.op == "load_job" && target.is_some() && call.job_id == target.as_deref() {
            return Action::Delay(Duration::from_secs(3600));
        }
        Action::Proceed
    });
    let mut config = many_tasks();
    config.sweep_budget = Duration::from_millis(500);
    let h = Harness::with(config, Some(hook), Faults::default()).await;
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(h.submit(JOIN).await);
    }
    jobs.sort();
    *hung.lock().unwrap() = Some(jobs[0].clone());
    let started = std::time::Instant::now();
    let first = tokio::time::timeout(Duration::from_secs(10), h.scheduler().sweep())
        .await
        .expect("the sweep ends within its budget, whatever one job does")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(first.incomplete, "{first:?}");
    assert_eq!(first.errors.len(), 1, "{first:?}");
    assert_eq!(first.errors[0].0, jobs[0]);
    assert!(first.errors[0].1.contains("budget"), "{first:?}");
    assert_eq!(
        h.store.sweep_cursor().await.unwrap(),
        Some(jobs[0].clone()),
        "the bookmark is past the hung job"
    );
    let second = h.scheduler().sweep().await.unwrap();
    assert!(second.errors.is_empty(), "{second:?}");
    assert_eq!(second.jobs, 2, "the jobs after the hung one: {second:?}");
}

/// Queued invocations are not running: the sweep does not count their wait against
/// `task_timeout` (before: every task past its dispatch time was presumed lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_waiting_for_a_slot_does_not_count_toward_the_task_timeout() {
    let h = Harness::new(many_tasks().with_task_timeout(Duration::from_secs(1))).await;
    h.submit(JOIN).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    *h.invoker.state.lock().unwrap() = Some(InvocationState::Queued);
    let report = h.scheduler().sweep().await.unwrap();
    assert_eq!(report.lost_attempts, 0, "{report:?}");
    *h.invoker.state.lock().unwrap() = Some(InvocationState::Running {
        since_ms: lambdafusion::time::now_ms(),
    });
    let report = h.scheduler().sweep().await.unwrap();
    assert_eq!(report.lost_attempts, 0, "just started: {report:?}");
    *h.invoker.state.lock().unwrap() = None;
    let report = h.scheduler().sweep().await.unwrap();
    assert!(report.lost_attempts > 0, "{report:?}");
}

fn plan(kind: &str) -> Faults {
    Faults::in_process(FaultPlan::parse(&format!(r#"{{"faults": {{"{kind}": 1}}}}"#)).unwrap())
}

/// A scheduler that dies right after claiming a stage leaves it claimed and unconfirmed;
/// past the dispatch deadline the next scheduler step sends its tasks (before: they
/// waited for task_timeout, 46 minutes with the Terraform defaults, and burnt an attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_claimed_but_never_dispatched_are_sent_after_the_dispatch_deadline() {
    let mut config = many_tasks();
    config.dispatch_deadline = Duration::from_millis(300);
    let mut h = Harness::with(config, None, plan("scheduler.crash_after_claim")).await;
    let crashed = h
        .scheduler()
        .submit(JOIN, &Default::default())
        .await
        .unwrap_err();
    assert!(crashed.to_string().contains("injected crash"), "{crashed}");
    let job = h.store.active_jobs(None, 10).await.unwrap().remove(0);
    assert!(h.invoker.take().is_empty(), "nothing was dispatched");
    h.services.faults = Faults::default();
    h.scheduler().advance(&job).await.unwrap();
    assert!(h.invoker.take().is_empty(), "not before the deadline");
    tokio::time::sleep(Duration::from_millis(350)).await;
    h.scheduler().advance(&job).await.unwrap();
    let sent = h.invoker.take();
    assert!(
        !sent.is_empty() && sent.iter().all(|t| t.attempt == 1),
        "{sent:?}"
    );
    for task in sent {
        h.executor().handle(&task).await.unwrap();
    }
    h.run_to_end(&job).await;
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    assert!(
        snapshot.tasks.iter().all(|t| t.failures == 0),
        "no attempt burnt"
    );
    h.check_result(&job).await;
}

/// A scheduler that dies after part of a stage's invocations: the tasks it sent run, and
/// past the deadline exactly the others are sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_dispatched_stage_gets_its_other_half_after_the_deadline() {
    let mut config = many_tasks();
    config.dispatch_deadline = Duration::from_millis(300);
    let mut h = Harness::with(config, None, plan("scheduler.crash_mid_dispatch")).await;
    assert!(h
        .scheduler()
        .submit(AGG, &Default::default())
        .await
        .is_err());
    let job = h.store.active_jobs(None, 10).await.unwrap().remove(0);
    h.services.faults = Faults::default();
    let first = h.invoker.take();
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    let claimed: u32 = snapshot
        .stages
        .iter()
        .filter(|s| s.dispatched_ms.is_some())
        .map(|s| s.tasks)
        .sum();
    assert!(
        !first.is_empty() && (first.len() as u32) < claimed,
        "{} of {claimed}",
        first.len()
    );
    for task in &first {
        h.executor().handle(task).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(350)).await;
    h.scheduler().advance(&job).await.unwrap();
    let second = h.invoker.take();
    assert_eq!(
        first.len() + second.len(),
        claimed as usize,
        "{first:?} / {second:?}"
    );
    assert!(
        second.iter().all(|t| !first.contains(t)),
        "only the ones never sent"
    );
    for task in second {
        h.executor().handle(&task).await.unwrap();
    }
    h.run_to_end(&job).await;
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    check_agg(&h, &job).await;
}

/// A retry whose scheduler died between recording the attempt and invoking it is sent
/// again past the deadline, as the same attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_recorded_but_never_invoked_is_sent_again() {
    let mut config = many_tasks();
    config.dispatch_deadline = Duration::from_millis(300);
    let h = Harness::new(config).await;
    let job = h.submit(JOIN).await;
    let task = h.invoker.take().remove(0);
    let failure = task.failure("lost".into(), true, u64::MAX);
    assert!(h.store.fail_attempt(&failure).await.unwrap());
    // What a scheduler records before it dies.
    let now = lambdafusion::time::now_ms();
    assert!(h
        .store
        .start_attempt(&job, task.stage, task.partition, 2, now, u64::MAX)
        .await
        .unwrap());
    h.scheduler().advance(&job).await.unwrap();
    assert!(h.invoker.take().is_empty(), "not before the deadline");
    tokio::time::sleep(Duration::from_millis(350)).await;
    h.scheduler().advance(&job).await.unwrap();
    let sent = h.invoker.take();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!((sent[0].partition, sent[0].attempt), (task.partition, 2));
    let item = h
        .store
        .get_task(&job, task.stage, task.partition)
        .await
        .unwrap()
        .unwrap();
    assert!(item.confirmed_ms.is_some(), "the re-send was confirmed");
}

/// A throttled invocation uses up no attempt and is sent again after its back-off, not
/// at once (before: it became a failed attempt, retried immediately).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_dispatch_is_deferred_without_using_an_attempt() {
    let mut h = Harness::new(many_tasks()).await;
    for _ in 0..3 {
        h.invoker
            .refusals
            .lock()
            .unwrap()
            .push_back(Error::invoke_throttled("TooManyRequestsException"));
    }
    let job = h.submit(AGG).await;
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    let throttled: Vec<_> = snapshot
        .tasks
        .iter()
        .filter(|t| t.state == TaskState::Throttled)
        .collect();
    assert_eq!(throttled.len(), 3, "{:?}", snapshot.tasks);
    assert!(throttled
        .iter()
        .all(|t| t.failures == 0 && t.attempt == 1 && t.throttles == 1));
    assert!(throttled.iter().all(|t| t.retry_at_ms.is_some()));
    let accepted = h.invoker.take();
    h.scheduler().advance(&job).await.unwrap();
    assert!(h.invoker.take().is_empty(), "not before the back-off");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    h.scheduler().sweep().await.unwrap();
    let resent = h.invoker.take();
    assert_eq!(resent.len(), 3, "{resent:?}");
    assert!(resent.iter().all(|t| t.attempt == 1));
    for task in accepted.iter().chain(&resent) {
        h.executor().handle(task).await.unwrap();
    }
    h.run_to_end(&job).await;
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    assert!(snapshot.tasks.iter().all(|t| t.failures == 0));
    check_agg(&h, &job).await;
}

/// An invocation refused for good (no such function) fails the job with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_refused_for_good_fails_the_job() {
    let mut h = Harness::new(many_tasks()).await;
    h.invoker
        .refusals
        .lock()
        .unwrap()
        .push_back(Error::invoke("ResourceNotFoundException: no function"));
    let job = h.submit(JOIN).await;
    h.run_to_end(&job).await;
    let record = h.store.get_job(&job).await.unwrap().unwrap();
    assert_eq!(record.state, JobState::Failed);
    let error = record.error.unwrap();
    assert!(
        error.contains("dispatch failed") && error.contains("ResourceNotFound"),
        "{error}"
    );
}

/// A stage wider than the dispatch fan-out goes out through an invocation tree whose
/// leaves confirm their ranges on the commit counters. A leaf dispatcher Lambda loses is
/// found unconfirmed past the dispatch deadline and its range sent again; a dispatcher
/// delivered twice only invokes its tasks twice (their commits are conditional); the
/// result equals DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_stages_go_out_through_an_invocation_tree_that_survives_lost_and_repeated_dispatchers()
{
    let mut config = EngineConfig::default()
        .with_bytes_per_task(1)
        .with_min_scan_bytes_per_task(1)
        .with_shuffle_bytes_per_task(1)
        .with_max_tasks_per_stage(80)
        .with_dispatch_fanout(2);
    config.dispatch_deadline = Duration::from_millis(400);
    let mut h = Harness::new(config).await;
    let job = h.submit(AGG).await;
    let (mut nodes, mut leaves, mut lost, mut repeated) = (0, 0, None, 0);
    for _ in 0..300 {
        // Every dispatcher invoked so far runs (the tree unfolds), but one leaf is lost
        // and one is delivered twice.
        loop {
            let ranges = h.invoker.take_ranges();
            if ranges.is_empty() {
                break;
            }
            for range in ranges {
                nodes += 1;
                let leaf = range.to - range.from <= 32;
                leaves += usize::from(leaf);
                if leaf && lost.is_none() {
                    lost = Some(range);
                    continue;
                }
                h.scheduler().dispatch_range(&range).await.unwrap();
                if leaf && repeated == 0 {
                    repeated += 1;
                    h.scheduler().dispatch_range(&range).await.unwrap();
                }
            }
        }
        let tasks = h.invoker.take();
        let idle = tasks.is_empty();
        for task in tasks {
            h.executor().handle(&task).await.unwrap();
        }
        let batches = h.deliver_stream().await;
        if h.state(&job).await.is_terminal() {
            break;
        }
        if idle && batches == 0 {
            // Nothing moves until the lost range is found: past the deadline, a sweep.
            tokio::time::sleep(Duration::from_millis(450)).await;
            h.scheduler().sweep().await.unwrap();
        }
    }
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let lost = lost.expect("a leaf dispatcher was lost");
    assert!(
        leaves >= 3 && nodes > leaves,
        "{nodes} nodes, {leaves} leaves"
    );
    assert_eq!(repeated, 1);
    check_agg(&h, &job).await;
    // The lost range was confirmed by the step that sent it again; every stage's tasks
    // committed exactly once.
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    assert!(snapshot.counters.iter().any(|c| c.stage == lost.stage
        && c.counter * 32 == lost.from
        && c.dispatched_ms.is_some()));
    for stage in &snapshot.stages {
        assert_eq!(snapshot.succeeded(stage.stage), stage.tasks);
    }
    assert!(
        snapshot.stages.iter().any(|s| s.tasks > 64),
        "a stage wide enough for a tree of several levels: {:?}",
        snapshot.stages.iter().map(|s| s.tasks).collect::<Vec<_>>()
    );
}

/// What a query's status reports as its requests — counted by its tasks, derived from
/// the records for the scheduler's share — is what the job store, the object store and
/// the invoker really served while the query ran: the inputs of the cost model
/// (`lambdafusion bench tpch --model aws`) are the counts of a real run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_querys_reported_requests_are_the_requests_it_made() {
    use lambdafusion::requests::{count_store_call, sink, CountingRegistry, Request, Tally};
    let tally = Tally::new();
    let counting = tally.clone();
    // Store calls as DynamoDB bills them: a new job writes one item per record (added
    // below, once its stages are known), a finished job its item and its active-index
    // entry (one transaction of two).
    let created = Arc::new(AtomicUsize::new(0));
    let creates = created.clone();
    let hook: lambdafusion::state::intercept::Hook = Arc::new(move |call: Call<'_>| {
        match call.op {
            "create_job" => {
                creates.fetch_add(1, Ordering::SeqCst);
            }
            "finish_job" => counting.count(Request::StoreWrite, 2),
            op => count_store_call(&counting, op),
        }
        Action::Proceed
    });
    let mut h = Harness::with(many_tasks(), Some(hook), Faults::default()).await;
    let runtime = &h.services.runtime;
    let registry = Arc::new(CountingRegistry::new(
        runtime.object_store_registry.clone(),
        sink(tally.clone()),
    ));
    h.services.runtime =
        datafusion::execution::runtime_env::RuntimeEnvBuilder::from_runtime_env(runtime)
            .with_object_store_registry(registry)
            .build_arc()
            .unwrap();
    let before = tally.counts();
    let job = h.submit(AGG).await;
    let mut invocations = 0u64;
    for _ in 0..200 {
        let tasks = h.invoker.take();
        invocations += tasks.len() as u64;
        for task in tasks {
            h.executor().handle(&task).await.unwrap();
            h.deliver_stream().await;
        }
        h.deliver_stream().await;
        if h.state(&job).await.is_terminal() {
            break;
        }
    }
    assert_eq!(h.state(&job).await, JobState::Succeeded);
    let snapshot = h.store.load_job(&job).await.unwrap().unwrap();
    assert_eq!(created.load(Ordering::SeqCst), 1);
    // One call each creates and finishes the job; on DynamoDB these write the job, its
    // state item, its active and history entries, a stage and a plan item per stage, then
    // the job, its state item and the active entry again: 5 + 2 per stage more writes.
    tally.count(Request::StoreWrite, 5 + 2 * snapshot.stages.len() as u64);
    tally.count(Request::Invocation, invocations);
    let made = {
        let now = tally.counts();
        let mut made = lambdafusion::requests::RequestCounts::default();
        for kind in [
            Request::StoreRead,
            Request::StoreWrite,
            Request::ObjectGet,
            Request::ObjectPut,
            Request::ObjectList,
            Request::ObjectDelete,
            Request::Invocation,
        ] {
            made.add(kind, now.get(kind) - before.get(kind));
        }
        made
    };
    let mut reported = lambdafusion::status::job_status(
        &snapshot,
        &lambdafusion::EngineConfig::default().with_fast_path(false),
    )
    .requests;
    reported.object_get_bytes = 0;
    assert_eq!(reported, made, "reported (left) vs made (right)");
    check_agg(&h, &job).await;
}

/// Each query the scheduler ends is told to `Services::on_job_end` once, with its final
/// status and owner (the AWS functions write it as CloudWatch metrics): a success with
/// its tasks, a failure with its error, a cancel.
#[tokio::test]
async fn each_ended_query_is_reported_once_with_its_final_status() {
    type Seen = Arc<std::sync::Mutex<Vec<(String, String, u32, Option<String>, String)>>>;
    let seen: Seen = Arc::default();
    let mut h = Harness::new(many_tasks()).await;
    let log = seen.clone();
    h.services.on_job_end = Some(Arc::new(move |status, owner| {
        log.lock().unwrap().push((
            status.id.clone(),
            status.state.clone(),
            status.tasks,
            status.error.clone(),
            owner.to_string(),
        ))
    }));
    let ok = h.submit(AGG).await;
    h.run_to_end(&ok).await;
    assert_eq!(h.state(&ok).await, JobState::Succeeded);
    let bad = h.submit("SELECT CAST(s AS INT) FROM facts").await;
    h.run_to_end(&bad).await;
    assert_eq!(h.state(&bad).await, JobState::Failed);
    let stopped = h.submit(AGG).await;
    h.scheduler()
        .cancel(&stopped, &Caller::local())
        .await
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let (id, state, tasks, error, owner) = &seen[0];
    assert_eq!(
        (id, state.as_str(), owner.as_str()),
        (&ok, "succeeded", "local")
    );
    assert!(*tasks > 1 && error.is_none(), "{seen:?}");
    assert_eq!((&seen[1].0, seen[1].1.as_str()), (&bad, "failed"));
    assert!(seen[1].3.is_some(), "a failure carries its error: {seen:?}");
    assert_eq!((&seen[2].0, seen[2].1.as_str()), (&stopped, "cancelled"));
}
