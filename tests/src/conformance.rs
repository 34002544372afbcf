//! The one specification of the job store's transition rules, as executable checks.
//!
//! The rules are implemented twice — Rust predicates in `lambdafusion_embedded::EmbeddedStore`,
//! condition expressions in the DynamoDB store of `lambdafusion-aws` — and this suite holds
//! both to the same answers: claims, confirmations, commits and their counters, duplicate
//! and racing commits, failed, retried, throttled and re-sent attempts, job completion,
//! the active index and sweep cursor, missing items, and the catalog.
//!
//! [`run_all`] runs every case against one store and returns the names of the cases it
//! ran; a broken rule panics with a message naming the case and the rule. Every case
//! uses its own job ids and table names, so one store (even a shared table) serves all.
//! `tests/tests/end_to_end/store_conformance.rs` runs it on the embedded store,
//! `tests/tests/store_on_the_stack.rs` on DynamoDB (moto, through the local stack's front).

use futures::future::join_all;

use lambdafusion::state::*;
use lambdafusion::Error;

fn new_id(case: &str) -> String {
    format!(
        "{case}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

const TTL: u64 = 4_000_000_000;

fn job(job_id: &str, stages: u32) -> JobRecord {
    JobRecord {
        task_limit: None,
        job_id: job_id.to_string(),
        sql: "SELECT 1".into(),
        kind: JobKind::Query,
        state: JobState::Running,
        stage_count: stages,
        result_schema: vec![1, 2, 3],
        owner: "arn:aws:iam::000000000000:user/conformance".into(),
        created_ms: 1_000,
        deadline_ms: Some(9_000_000),
        finished_ms: None,
        error: None,
        requests: Default::default(),
        write: None,
        expires_at: TTL,
    }
}

fn stage(job_id: &str, id: u32, tasks: u32) -> StageRecord {
    StageRecord {
        job_id: job_id.to_string(),
        stage: id,
        state: StageState::Pending,
        tasks,
        output_partitions: 4,
        inputs: if id == 0 {
            vec![]
        } else {
            vec![StageInput {
                stage: id - 1,
                kind: EdgeKind::Hash,
                splittable: false,
                width: None,
            }]
        },
        summary: format!("stage {id}"),
        scan_bytes: Vec::new(),
        switch: None,
        combines: None,
        dispatched_ms: None,
        confirmed_ms: None,
        decision: None,
        expires_at: TTL,
    }
}

fn plan(job_id: &str, id: u32) -> PlanRecord {
    PlanRecord {
        job_id: job_id.to_string(),
        stage: id,
        plan: id.is_multiple_of(2).then(|| vec![id as u8; 100]),
        object: (!id.is_multiple_of(2)).then(|| format!("p/jobs/{job_id}/stage-{id}.plan")),
        expires_at: TTL,
    }
}

/// Creates a running job whose stages have the given task counts.
async fn create(store: &dyn JobStore, case: &str, tasks: &[u32]) -> String {
    let id = new_id(case);
    let new = NewJob {
        job: job(&id, tasks.len() as u32),
        stages: tasks
            .iter()
            .enumerate()
            .map(|(i, t)| stage(&id, i as u32, *t))
            .collect(),
        plans: (0..tasks.len() as u32).map(|i| plan(&id, i)).collect(),
        tasks: vec![],
    };
    store.create_job(&new).await.expect("create_job");
    id
}

fn commit(job_id: &str, stage: u32, partition: u32, stage_tasks: u32, tag: &str) -> TaskCommit {
    TaskCommit {
        job_id: job_id.to_string(),
        stage,
        partition,
        stage_tasks,
        output: TaskOutput {
            attempt: 1,
            object: format!("p/jobs/{job_id}/stage-{stage}/task-{partition}/{tag}.arrows"),
            ends: vec![0, 10, 10, 25],
            rows: 3,
            bytes: 25,
            started_ms: 10,
            finished_ms: 20,
            metrics: Vec::new(),
            requests: Default::default(),
            handoff: None,
            cpu: None,
            written: None,
        },
        now_ms: 30,
        expires_at: TTL,
    }
}

fn failure(job_id: &str, partition: u32, attempt: u32, retryable: bool) -> TaskFailure {
    TaskFailure {
        job_id: job_id.to_string(),
        stage: 0,
        partition,
        attempt,
        error: format!("attempt {attempt} failed"),
        retryable,
        expires_at: TTL,
    }
}

fn resend(job_id: &str, partition: u32, attempt: u32, stale_before: u64, now: u64) -> TaskResend {
    TaskResend {
        job_id: job_id.to_string(),
        stage: 0,
        partition,
        attempt,
        stale_before_ms: stale_before,
        now_ms: now,
        expires_at: TTL,
    }
}

async fn task(store: &dyn JobStore, job_id: &str, partition: u32) -> TaskRecord {
    store
        .get_task(job_id, 0, partition)
        .await
        .expect("get_task")
        .unwrap_or_else(|| panic!("task {partition} of {job_id} has no item"))
}

/// Runs every case against `store`; returns the names of the cases run.
pub async fn run_all(store: &dyn JobStore) -> Vec<&'static str> {
    let mut ran = Vec::with_capacity(CASES.len());
    for (name, case) in CASES {
        case(store).await;
        ran.push(*name);
    }
    ran
}

/// One case of the specification.
pub type Case = for<'a> fn(&'a dyn JobStore) -> futures::future::BoxFuture<'a, ()>;

/// Every case, by name, in the order [`run_all`] runs them. A `pub async fn` of this
/// module missing here is caught by `tests/tests/end_to_end/store_conformance.rs`.
pub const CASES: &[(&str, Case)] = &[
    ("jobs_are_created_once", |s| {
        Box::pin(jobs_are_created_once(s))
    }),
    ("claims_and_confirmations_have_one_winner", |s| {
        Box::pin(claims_and_confirmations_have_one_winner(s))
    }),
    ("commits_count_each_task_once", |s| {
        Box::pin(commits_count_each_task_once(s))
    }),
    ("dispatch_confirmations_leave_counts_alone", |s| {
        Box::pin(dispatch_confirmations_leave_counts_alone(s))
    }),
    ("racing_attempts_commit_exactly_one", |s| {
        Box::pin(racing_attempts_commit_exactly_one(s))
    }),
    ("failures_and_retries_follow_the_attempt_chain", |s| {
        Box::pin(failures_and_retries_follow_the_attempt_chain(s))
    }),
    (
        "a_straggler_gets_one_speculative_attempt_and_either_may_win",
        |s| {
            Box::pin(a_straggler_gets_one_speculative_attempt_and_either_may_win(
                s,
            ))
        },
    ),
    ("throttled_and_unconfirmed_attempts_are_resent", |s| {
        Box::pin(throttled_and_unconfirmed_attempts_are_resent(s))
    }),
    ("finishing_is_final", |s| Box::pin(finishing_is_final(s))),
    ("the_active_index_pages_in_id_order", |s| {
        Box::pin(the_active_index_pages_in_id_order(s))
    }),
    ("the_catalog_keeps_one_table_per_name", |s| {
        Box::pin(the_catalog_keeps_one_table_per_name(s))
    }),
    ("each_owner_sees_its_own_history_newest_first", |s| {
        Box::pin(each_owner_sees_its_own_history_newest_first(s))
    }),
];

/// A job is written whole, once; loading it returns its stages (not its plans); plans are
/// read apart; missing items read as `None`.
pub async fn jobs_are_created_once(store: &dyn JobStore) {
    let id = create(store, "create", &[3, 2]).await;
    let snapshot = store.load_job(&id).await.unwrap().expect("job exists");
    assert_eq!(snapshot.job, job(&id, 2), "job item round-trips");
    assert_eq!(snapshot.stages, vec![stage(&id, 0, 3), stage(&id, 1, 2)]);
    assert!(snapshot.tasks.is_empty() && snapshot.counters.is_empty());
    assert_eq!(store.get_plan(&id, 0).await.unwrap(), Some(plan(&id, 0)));
    assert_eq!(store.get_plan(&id, 1).await.unwrap(), Some(plan(&id, 1)));
    let view = store.task_view(&id, 1, 0, true).await.unwrap();
    assert_eq!(view.job, Some(job(&id, 2)));
    assert_eq!(view.stage, Some(stage(&id, 1, 2)));
    assert_eq!((view.task, view.plan), (None, Some(plan(&id, 1))));
    let view = store.task_view(&id, 7, 0, false).await.unwrap();
    assert!(view.job.is_some() && view.stage.is_none() && view.plan.is_none());
    let again = NewJob {
        job: job(&id, 2),
        stages: vec![],
        plans: vec![],
        tasks: vec![],
    };
    assert!(
        matches!(store.create_job(&again).await, Err(Error::Conflict(_))),
        "creating an existing job is a conflict"
    );
    assert_eq!(
        store.get_job(&id).await.unwrap().map(|j| j.state),
        Some(JobState::Running)
    );
    let missing = new_id("missing");
    assert!(store.get_job(&missing).await.unwrap().is_none());
    assert!(store.load_job(&missing).await.unwrap().is_none());
    assert!(store.get_stage(&id, 7).await.unwrap().is_none());
    assert!(store.get_plan(&id, 7).await.unwrap().is_none());
    assert!(store.get_task(&id, 0, 0).await.unwrap().is_none());
    assert!(store.list_tasks(&id, 0).await.unwrap().is_empty());
    assert!(store.list_counters(&id, 0).await.unwrap().is_empty());
}

/// The decision of a claim that coalesces 4 partitions into 2 tasks.
fn coalesced(at: u64) -> StageDecision {
    StageDecision {
        switched: None,
        read_from: vec![],
        rule: AdaptiveRule::Coalesced,
        partitions: 4,
        tasks: 2,
        starts: vec![0, 3],
        input_tasks: vec![],
        fused: vec![],
        skew: vec![],
        input_rows: at,
        input_bytes: 10,
        note: format!("claimed at {at}"),
        // Kept by the store like the rest: retries go to the function the claim chose.
        size: lambdafusion::dispatch::ExecutorSize::Large,
    }
}

/// A pending stage is claimed by exactly one of many racing callers, and the winner's
/// decision (with its task count) is the one recorded; a claimed stage is confirmed once;
/// missing stages are neither claimed nor confirmed.
pub async fn claims_and_confirmations_have_one_winner(store: &dyn JobStore) {
    let id = create(store, "claim", &[4, 1]).await;
    assert!(
        !store.confirm_stage(&id, 0, 5).await.unwrap(),
        "pending: not confirmable"
    );
    let decisions: Vec<StageDecision> = (0..8).map(|i| coalesced(100 + i)).collect();
    let wins = join_all(
        decisions
            .iter()
            .enumerate()
            .map(|(i, d)| store.claim_stage(&id, 0, 100 + i as u64, d)),
    )
    .await
    .into_iter()
    .map(|r| r.expect("claim_stage"))
    .filter(|w| *w)
    .count();
    assert_eq!(wins, 1, "exactly one racing claim wins");
    let s = store.get_stage(&id, 0).await.unwrap().unwrap();
    assert_eq!(s.state, StageState::Dispatched);
    assert!(s.dispatched_ms.is_some_and(|d| (100..108).contains(&d)));
    let won = s.dispatched_ms.unwrap();
    assert_eq!(
        s.decision,
        Some(coalesced(won)),
        "the winner's decision, whole"
    );
    assert_eq!(s.tasks, 2, "the claim sets the decided task count");
    assert_eq!(s.partitions_of(0), 0..3);
    assert_eq!(s.partitions_of(1), 3..4);
    assert!(
        !store
            .claim_stage(&id, 0, 200, &coalesced(200))
            .await
            .unwrap(),
        "claimed once"
    );
    assert!(store.confirm_stage(&id, 0, 300).await.unwrap());
    assert!(
        !store.confirm_stage(&id, 0, 301).await.unwrap(),
        "confirmed once"
    );
    let s = store.get_stage(&id, 0).await.unwrap().unwrap();
    assert_eq!(s.confirmed_ms, Some(300));
    assert!(
        !store.claim_stage(&id, 9, 1, &coalesced(1)).await.unwrap(),
        "missing stage"
    );
    assert!(
        !store.confirm_stage(&id, 9, 1).await.unwrap(),
        "missing stage"
    );
    assert!(
        !store
            .claim_stage(&new_id("none"), 0, 1, &coalesced(1))
            .await
            .unwrap(),
        "missing job"
    );
}

/// Every task of a wide stage commits once and is counted once on its counter, even when
/// the commits race and repeat; the counter reaching 0 is reported by exactly one commit.
pub async fn commits_count_each_task_once(store: &dyn JobStore) {
    let tasks = COUNTER_TASKS + 8;
    let id = create(store, "commit", &[tasks]).await;
    let outcomes = join_all((0..tasks).map(|p| {
        let c = commit(&id, 0, p, tasks, "a");
        async move { store.commit_task(&c).await }
    }))
    .await;
    let mut done = 0;
    for (p, outcome) in outcomes.into_iter().enumerate() {
        match outcome.unwrap_or_else(|e| panic!("commit of task {p}: {e}")) {
            CommitOutcome::Committed { counter_done } => done += usize::from(counter_done),
            other => panic!("task {p}: {other:?}"),
        }
    }
    assert_eq!(done, 2, "each of the 2 counters reports reaching 0 once");
    let counters = store.list_counters(&id, 0).await.unwrap();
    assert_eq!(counters.len(), 2);
    for c in &counters {
        assert_eq!(c.remaining, 0, "counter {} at 0", c.counter);
        assert_eq!(c.done.len() as u32, counter_size(tasks, c.counter));
    }
    // The same commit again (a retry after a timeout) is still this attempt's commit;
    // another attempt's commit loses; neither counts twice.
    let again = store
        .commit_task(&commit(&id, 0, 3, tasks, "a"))
        .await
        .unwrap();
    assert_eq!(again, CommitOutcome::Committed { counter_done: true });
    let other = store
        .commit_task(&commit(&id, 0, 3, tasks, "b"))
        .await
        .unwrap();
    assert_eq!(other, CommitOutcome::AlreadySucceeded);
    let t = task(store, &id, 3).await;
    assert_eq!(t.state, TaskState::Succeeded);
    assert!(
        t.output.unwrap().object.ends_with("/a.arrows"),
        "the first object stays"
    );
    let counters = store.list_counters(&id, 0).await.unwrap();
    assert!(counters.iter().all(|c| c.remaining == 0));
    let snapshot = store.load_job(&id).await.unwrap().unwrap();
    assert_eq!(snapshot.succeeded(0), tasks);
    assert!(snapshot.stage_complete(&snapshot.stages[0]));
    assert_eq!(snapshot.counters.len(), 2);
}

/// A leaf dispatcher's confirmation marks its commit counter once — creating it with every
/// commit still to count when no commit came first — and never changes the count:
/// commits before and after it count as they would without it.
pub async fn dispatch_confirmations_leave_counts_alone(store: &dyn JobStore) {
    let tasks = COUNTER_TASKS + 8;
    let id = create(store, "dispatch", &[tasks]).await;
    let confirmation = |counter: u32| DispatchConfirmation {
        job_id: id.clone(),
        stage: 0,
        counter,
        stage_tasks: tasks,
        now_ms: 40 + u64::from(counter),
        expires_at: TTL,
    };
    // Counter 1 sees a commit before its confirmation; counter 0 none.
    let first = store
        .commit_task(&commit(&id, 0, COUNTER_TASKS, tasks, "a"))
        .await
        .unwrap();
    assert_eq!(
        first,
        CommitOutcome::Committed {
            counter_done: false
        }
    );
    assert!(store.confirm_dispatch(&confirmation(0)).await.unwrap());
    assert!(
        !store.confirm_dispatch(&confirmation(0)).await.unwrap(),
        "once"
    );
    assert!(store.confirm_dispatch(&confirmation(1)).await.unwrap());
    let counters = store.list_counters(&id, 0).await.unwrap();
    let remaining: Vec<(u32, Option<u64>)> = counters
        .iter()
        .map(|c| (c.remaining, c.dispatched_ms))
        .collect();
    assert_eq!(remaining, vec![(COUNTER_TASKS, Some(40)), (7, Some(41))]);
    let outcomes = join_all((0..tasks).filter(|&p| p != COUNTER_TASKS).map(|p| {
        let c = commit(&id, 0, p, tasks, "a");
        async move { store.commit_task(&c).await.unwrap() }
    }))
    .await;
    let done = outcomes
        .iter()
        .filter(|o| **o == CommitOutcome::Committed { counter_done: true })
        .count();
    assert_eq!(done, 2, "each counter reaches 0 once");
    for c in store.list_counters(&id, 0).await.unwrap() {
        assert_eq!(c.remaining, 0);
        assert_eq!(c.dispatched_ms, Some(40 + u64::from(c.counter)), "kept");
    }
}

/// Attempts of one task racing to commit: exactly one wins and its object is recorded.
pub async fn racing_attempts_commit_exactly_one(store: &dyn JobStore) {
    let id = create(store, "race", &[2]).await;
    let tags: Vec<String> = (0..6).map(|i| format!("attempt-{i}")).collect();
    let outcomes: Vec<CommitOutcome> = join_all(tags.iter().map(|tag| {
        let c = commit(&id, 0, 1, 2, tag);
        async move { store.commit_task(&c).await.expect("commit_task") }
    }))
    .await;
    let winners: Vec<&String> = tags
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| matches!(o, CommitOutcome::Committed { .. }))
        .map(|(t, _)| t)
        .collect();
    assert_eq!(winners.len(), 1, "one winner among {outcomes:?}");
    let stored = task(store, &id, 1).await.output.unwrap().object;
    assert!(
        stored.ends_with(&format!("/{}.arrows", winners[0])),
        "{stored}"
    );
    let counters = store.list_counters(&id, 0).await.unwrap();
    assert_eq!(counters[0].remaining, 1, "one of two tasks counted, once");
}

/// A running attempt gets at most one speculative attempt beside it (racing starts: one
/// wins); the straggler's failure then changes nothing, the speculative one's fails the
/// task; either may commit, the first wins; nothing is speculated once succeeded.
pub async fn a_straggler_gets_one_speculative_attempt_and_either_may_win(store: &dyn JobStore) {
    let id = create(store, "speculate", &[3]).await;
    // Attempt 1 runs without an item: speculating means attempt 2.
    assert!(
        !store.speculate_task(&id, 0, 0, 3, 10, TTL).await.unwrap(),
        "skips 2"
    );
    let starts = join_all((0..4).map(|_| store.speculate_task(&id, 0, 0, 2, 10, TTL))).await;
    assert_eq!(
        starts.into_iter().filter(|r| *r.as_ref().unwrap()).count(),
        1,
        "one racing speculation wins"
    );
    let t = task(store, &id, 0).await;
    assert_eq!(
        (t.state, t.attempt, t.speculative, t.dispatched_ms),
        (TaskState::Running, 2, Some(2), Some(10))
    );
    assert!(
        !store.speculate_task(&id, 0, 0, 3, 20, TTL).await.unwrap(),
        "only one"
    );
    // The straggler failing does not fail the task; its commit would still win.
    assert!(!store.fail_attempt(&failure(&id, 0, 1, true)).await.unwrap());
    let won = store
        .commit_task(&commit(&id, 0, 0, 3, "straggler"))
        .await
        .unwrap();
    assert!(matches!(won, CommitOutcome::Committed { .. }), "{won:?}");
    let late = store
        .commit_task(&commit(&id, 0, 0, 3, "speculative"))
        .await
        .unwrap();
    assert_eq!(late, CommitOutcome::AlreadySucceeded);
    assert!(
        !store.speculate_task(&id, 0, 0, 2, 30, TTL).await.unwrap(),
        "succeeded"
    );
    // On another task the speculative attempt wins, and its failure is the task's.
    assert!(store.speculate_task(&id, 0, 1, 2, 40, TTL).await.unwrap());
    assert!(store.fail_attempt(&failure(&id, 1, 2, true)).await.unwrap());
    assert_eq!(task(store, &id, 1).await.state, TaskState::Failed);
    // A failed task is retried, not speculated.
    assert!(!store.speculate_task(&id, 0, 1, 3, 50, TTL).await.unwrap());
    assert!(store.start_attempt(&id, 0, 1, 3, 50, TTL).await.unwrap());
}

/// Failures apply to the latest running attempt only; a retry starts only after the
/// attempt before it failed; nothing moves a succeeded task.
pub async fn failures_and_retries_follow_the_attempt_chain(store: &dyn JobStore) {
    let id = create(store, "retry", &[3]).await;
    assert!(
        !store.fail_attempt(&failure(&id, 0, 2, true)).await.unwrap(),
        "no attempt 2"
    );
    assert!(store.fail_attempt(&failure(&id, 0, 1, true)).await.unwrap());
    assert!(
        !store.fail_attempt(&failure(&id, 0, 1, true)).await.unwrap(),
        "recorded once"
    );
    let t = task(store, &id, 0).await;
    assert_eq!(
        (t.state, t.attempt, t.failures, t.retryable),
        (TaskState::Failed, 1, 1, true)
    );
    assert_eq!(t.error.as_deref(), Some("attempt 1 failed"));
    assert!(
        !store.start_attempt(&id, 0, 0, 3, 50, TTL).await.unwrap(),
        "skips attempt 2"
    );
    let starts = join_all((0..4).map(|_| store.start_attempt(&id, 0, 0, 2, 50, TTL))).await;
    assert_eq!(
        starts.into_iter().filter(|r| *r.as_ref().unwrap()).count(),
        1,
        "one racing start wins"
    );
    let t = task(store, &id, 0).await;
    assert_eq!((t.state, t.attempt), (TaskState::Running, 2));
    assert_eq!((t.dispatched_ms, t.confirmed_ms), (Some(50), None));
    assert!(
        !store.confirm_attempt(&id, 0, 0, 1, 60).await.unwrap(),
        "old attempt"
    );
    assert!(store.confirm_attempt(&id, 0, 0, 2, 60).await.unwrap());
    assert_eq!(task(store, &id, 0).await.confirmed_ms, Some(60));
    assert!(
        !store.fail_attempt(&failure(&id, 0, 1, true)).await.unwrap(),
        "stale attempt"
    );
    assert!(store
        .fail_attempt(&failure(&id, 0, 2, false))
        .await
        .unwrap());
    let t = task(store, &id, 0).await;
    assert_eq!(
        (t.state, t.attempt, t.failures, t.retryable),
        (TaskState::Failed, 2, 2, false)
    );
    // Attempt 2 without an item: the first failure left none only if it never happened.
    assert!(
        store.start_attempt(&id, 0, 1, 2, 70, TTL).await.unwrap(),
        "attempt 1 implied"
    );
    // A succeeded task does not move.
    store
        .commit_task(&commit(&id, 0, 2, 3, "ok"))
        .await
        .unwrap();
    assert!(!store.fail_attempt(&failure(&id, 0, 2, true)).await.unwrap());
    assert!(!store.fail_attempt(&failure(&id, 0, 1, true)).await.unwrap());
    assert!(!store.start_attempt(&id, 0, 2, 2, 80, TTL).await.unwrap());
    assert!(!store.confirm_attempt(&id, 0, 2, 1, 80).await.unwrap());
    let throttled = TaskDeferral {
        job_id: id.clone(),
        stage: 0,
        partition: 2,
        attempt: 1,
        retry_at_ms: 90,
        error: "429".into(),
        expires_at: TTL,
    };
    assert!(!store.defer_task(&throttled).await.unwrap());
    assert!(!store
        .resend_task(&resend(&id, 2, 1, u64::MAX, 100))
        .await
        .unwrap());
    assert_eq!(task(store, &id, 2).await.state, TaskState::Succeeded);
}

/// A throttled invocation keeps its attempt and is sent again once its back-off passed; an
/// unconfirmed invocation is sent again once it is stale; one re-sender wins.
pub async fn throttled_and_unconfirmed_attempts_are_resent(store: &dyn JobStore) {
    let id = create(store, "throttle", &[4]).await;
    let deferral = |attempt: u32, retry_at_ms: u64| TaskDeferral {
        job_id: id.clone(),
        stage: 0,
        partition: 0,
        attempt,
        retry_at_ms,
        error: "TooManyRequestsException".into(),
        expires_at: TTL,
    };
    assert!(
        !store.defer_task(&deferral(2, 100)).await.unwrap(),
        "no attempt 2 to defer"
    );
    assert!(store.defer_task(&deferral(1, 100)).await.unwrap());
    assert!(
        store.defer_task(&deferral(1, 200)).await.unwrap(),
        "throttled again"
    );
    let t = task(store, &id, 0).await;
    assert_eq!(
        (t.state, t.attempt, t.throttles),
        (TaskState::Throttled, 1, 2)
    );
    assert_eq!(
        (t.retry_at_ms, t.failures),
        (Some(200), 0),
        "no attempt used up"
    );
    assert!(
        !store.resend_task(&resend(&id, 0, 1, 0, 150)).await.unwrap(),
        "too early"
    );
    assert!(
        !store.resend_task(&resend(&id, 0, 2, 0, 250)).await.unwrap(),
        "other attempt"
    );
    let wins = join_all((0..4).map(|_| async {
        store
            .resend_task(&resend(&id, 0, 1, 0, 250))
            .await
            .expect("resend_task")
    }))
    .await;
    assert_eq!(wins.iter().filter(|w| **w).count(), 1, "one re-sender wins");
    let t = task(store, &id, 0).await;
    assert_eq!((t.state, t.attempt), (TaskState::Running, 1));
    assert_eq!(
        (t.dispatched_ms, t.confirmed_ms, t.retry_at_ms),
        (Some(250), None, None)
    );
    assert!(
        !store
            .resend_task(&resend(&id, 0, 1, 250, 260))
            .await
            .unwrap(),
        "not stale"
    );
    assert!(
        store
            .resend_task(&resend(&id, 0, 1, 251, 400))
            .await
            .unwrap(),
        "stale"
    );
    assert!(store.confirm_attempt(&id, 0, 0, 1, 410).await.unwrap());
    assert!(
        !store
            .resend_task(&resend(&id, 0, 1, u64::MAX, 500))
            .await
            .unwrap(),
        "confirmed"
    );
    // Attempt 1 of a task without an item (its stage was never confirmed).
    assert!(store.resend_task(&resend(&id, 1, 1, 0, 600)).await.unwrap());
    assert!(
        !store.resend_task(&resend(&id, 2, 2, 0, 600)).await.unwrap(),
        "attempt 2 needs an item"
    );
    assert_eq!(task(store, &id, 1).await.dispatched_ms, Some(600));
    // A running attempt whose re-send is throttled turns throttled again.
    assert!(store.defer_task(&deferral(1, 700)).await.unwrap());
    assert_eq!(task(store, &id, 0).await.state, TaskState::Throttled);
    // A throttled task's failure (reported by an earlier delivery) is recorded.
    let mut d = deferral(1, 700);
    d.partition = 3;
    assert!(store.defer_task(&d).await.unwrap());
    assert!(store.fail_attempt(&failure(&id, 3, 1, true)).await.unwrap());
    assert_eq!(task(store, &id, 3).await.state, TaskState::Failed);
}

/// A running job ends once: later finishes (a cancel racing a success) change nothing;
/// the active index and the state tasks poll ([`JobStore::job_state`]) follow; a missing
/// job is not finished.
pub async fn finishing_is_final(store: &dyn JobStore) {
    let id = create(store, "finish", &[1]).await;
    assert_eq!(store.job_state(&id).await.unwrap(), Some(JobState::Running));
    assert_eq!(store.job_state(&new_id("none")).await.unwrap(), None);
    let listed = |ids: Vec<String>| ids.contains(&id);
    assert!(
        listed(all_active(store).await),
        "running jobs are in the active index"
    );
    assert!(store
        .finish_job(&id, JobState::Succeeded, None, 500)
        .await
        .unwrap());
    assert!(!store
        .finish_job(
            &id,
            JobState::Cancelled,
            Some("cancelled by request".into()),
            600
        )
        .await
        .unwrap());
    let j = store.get_job(&id).await.unwrap().unwrap();
    assert_eq!(
        (j.state, j.finished_ms, j.error),
        (JobState::Succeeded, Some(500), None)
    );
    assert!(
        !listed(all_active(store).await),
        "finished jobs leave the index"
    );
    assert_eq!(polled_state(store, &id).await, JobState::Succeeded);
    let failed = create(store, "finish", &[1]).await;
    let racing = join_all((0..4).map(|i| {
        store.finish_job(
            &failed,
            JobState::Failed,
            Some(format!("reason {i}")),
            700 + i,
        )
    }))
    .await;
    assert_eq!(
        racing.into_iter().filter(|r| *r.as_ref().unwrap()).count(),
        1
    );
    let j = store.get_job(&failed).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Failed);
    assert_eq!(polled_state(store, &failed).await, JobState::Failed);
    assert!(j.error.is_some_and(|e| e.starts_with("reason ")));
    assert!(!store
        .finish_job(&new_id("none"), JobState::Failed, None, 1)
        .await
        .unwrap());
}

/// The state a running task would poll, once it has left `Running` (it may lag the
/// transition by about a second: eventually consistent).
async fn polled_state(store: &dyn JobStore, id: &str) -> JobState {
    for _ in 0..50 {
        match store.job_state(id).await.unwrap() {
            Some(JobState::Running) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await
            }
            Some(state) => return state,
            None => panic!("job {id} has no state"),
        }
    }
    panic!("job {id} still polls as running 2.5 s after it finished")
}

async fn all_active(store: &dyn JobStore) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .active_jobs(after.as_deref(), 3)
            .await
            .expect("active_jobs");
        if page.is_empty() {
            return out;
        }
        after = page.last().cloned();
        out.extend(page);
    }
}

/// The active index pages in job-id order from a cursor; the sweep cursor round-trips.
pub async fn the_active_index_pages_in_id_order(store: &dyn JobStore) {
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(create(store, "active", &[1]).await);
    }
    ids.sort();
    let all = all_active(store).await;
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "pages come in id order");
    let ours: Vec<&String> = all.iter().filter(|i| ids.contains(i)).collect();
    assert_eq!(ours, ids.iter().collect::<Vec<_>>(), "each once");
    let after_second = store.active_jobs(Some(&ids[1]), 1000).await.unwrap();
    assert!(!after_second.contains(&ids[0]) && !after_second.contains(&ids[1]));
    assert!(after_second.contains(&ids[2]) && after_second.contains(&ids[4]));
    store.set_sweep_cursor(Some(&ids[2])).await.unwrap();
    assert_eq!(store.sweep_cursor().await.unwrap(), Some(ids[2].clone()));
    store.set_sweep_cursor(None).await.unwrap();
    assert_eq!(store.sweep_cursor().await.unwrap(), None);
    for id in &ids {
        store
            .finish_job(id, JobState::Cancelled, None, 1)
            .await
            .unwrap();
    }
    // Finishing a job takes it off the index; an ended write is put back for the sweep,
    // which takes it off again.
    let now = all_active(store).await;
    assert!(
        ids.iter().all(|i| !now.contains(i)),
        "finished jobs are not active"
    );
    store.keep_active(&ids[0], u64::MAX / 2).await.unwrap();
    store.keep_active(&ids[0], u64::MAX / 2).await.unwrap();
    let kept = all_active(store).await;
    assert_eq!(
        kept.iter().filter(|i| *i == &ids[0]).count(),
        1,
        "once, however often kept"
    );
    store.remove_active(&ids[0]).await.unwrap();
    assert!(!all_active(store).await.contains(&ids[0]));
}

/// Each job enters its owner's history when it is created; an owner's history pages
/// newest first from a cursor and holds nobody else's jobs, finished or not.
pub async fn each_owner_sees_its_own_history_newest_first(store: &dyn JobStore) {
    let (alice, bob) = (new_id("alice"), new_id("bob"));
    let mut created = Vec::new();
    for (i, owner) in [&alice, &bob, &alice, &alice, &bob].into_iter().enumerate() {
        let id = new_id("history");
        let mut record = job(&id, 1);
        record.owner = owner.clone();
        record.created_ms = 1_700_000_000_000 + i as u64 * 1_000;
        let new = NewJob {
            job: record,
            stages: vec![stage(&id, 0, 1)],
            plans: vec![plan(&id, 0)],
            tasks: vec![],
        };
        store.create_job(&new).await.expect("create_job");
        created.push((owner.clone(), id));
    }
    let ids_of = |owner: &str| -> Vec<String> {
        created
            .iter()
            .rev()
            .filter(|(o, _)| o == owner)
            .map(|(_, id)| id.clone())
            .collect()
    };
    let history = |keys: Vec<String>| -> Vec<String> {
        keys.iter()
            .map(|k| {
                job_of_history_sk(k)
                    .expect("a history key names its job")
                    .to_string()
            })
            .collect()
    };
    let all = store.job_history(&alice, None, 100).await.unwrap();
    assert_eq!(
        history(all.clone()),
        ids_of(&alice),
        "alice's jobs, newest first"
    );
    assert_eq!(
        history(store.job_history(&bob, None, 100).await.unwrap()),
        ids_of(&bob),
        "bob's jobs only"
    );
    let first = store.job_history(&alice, None, 2).await.unwrap();
    assert_eq!(first, all[..2].to_vec(), "a page of two");
    let rest = store
        .job_history(&alice, first.last().map(String::as_str), 2)
        .await
        .unwrap();
    assert_eq!(
        rest,
        all[2..].to_vec(),
        "the next page starts after the cursor"
    );
    store
        .finish_job(&ids_of(&alice)[0], JobState::Succeeded, None, 1)
        .await
        .unwrap();
    assert_eq!(
        history(store.job_history(&alice, None, 100).await.unwrap()),
        ids_of(&alice),
        "finished jobs stay in the history"
    );
    assert!(store
        .job_history(&new_id("nobody"), None, 10)
        .await
        .unwrap()
        .is_empty());
    for (_, id) in &created {
        store
            .finish_job(id, JobState::Cancelled, None, 1)
            .await
            .unwrap();
    }
}

/// One table per name: create-if-absent loses to an existing table, replace wins, drop
/// reports whether it existed; the list is ordered by name.
pub async fn the_catalog_keeps_one_table_per_name(store: &dyn JobStore) {
    let base = new_id("t").replace('-', "_");
    let table = |name: &str, ddl: &str| TableRecord {
        name: name.to_string(),
        ddl: ddl.to_string(),
        locations: vec![format!("s3://lake/{name}/")],
        format: "PARQUET".into(),
        schema: vec![9, 9],
        partition_columns: Vec::new(),
        created_ms: 1,
    };
    let (a, b) = (format!("{base}_a"), format!("{base}_b"));
    assert!(store.put_table(&table(&b, "v1"), false).await.unwrap());
    assert!(store.put_table(&table(&a, "v1"), false).await.unwrap());
    assert!(
        !store.put_table(&table(&a, "v2"), false).await.unwrap(),
        "name taken"
    );
    assert_eq!(store.get_table(&a).await.unwrap().unwrap().ddl, "v1");
    assert!(
        store.put_table(&table(&a, "v3"), true).await.unwrap(),
        "replace"
    );
    assert_eq!(store.get_table(&a).await.unwrap().unwrap(), table(&a, "v3"));
    let names: Vec<String> = store
        .list_tables()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .filter(|n| n.starts_with(&base))
        .collect();
    assert_eq!(names, vec![a.clone(), b.clone()], "ordered by name");
    assert!(store.delete_table(&a).await.unwrap());
    assert!(!store.delete_table(&a).await.unwrap(), "already gone");
    assert!(store.get_table(&a).await.unwrap().is_none());
    assert!(store.delete_table(&b).await.unwrap());
}
