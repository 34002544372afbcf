//! The in-process job store: the DynamoDB item model on `redb`, persisted to a file
//! (or kept in memory), emitting its change records in commit order like a stream.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, Table, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use lambdafusion::error::StoreErrorKind;
use lambdafusion::state::*;
use lambdafusion::{Error, Result};

const ITEMS: TableDefinition<&str, &[u8]> = TableDefinition::new("items");
/// Separates partition key and sort key in a redb key; below every character keys use.
const SEP: char = '\u{1f}';

fn key(pk: &str, sk: &str) -> String {
    format!("{pk}{SEP}{sk}")
}

/// Key range of every item under `pk` whose sort key starts with `sk_prefix`.
fn prefix_range(pk: &str, sk_prefix: &str) -> (String, String) {
    let start = key(pk, sk_prefix);
    let mut end = start.clone();
    end.push('\u{10ffff}');
    (start, end)
}

fn store_err(e: impl Into<lambdafusion::error::Source> + std::fmt::Display) -> Error {
    let message = format!("embedded store: {e}");
    Error::Store(lambdafusion::error::StoreError::with_source(
        lambdafusion::error::StoreErrorKind::Unavailable,
        message,
        e,
    ))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    Ok(serde_json::from_slice(bytes)?)
}

fn get<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    k: &str,
) -> Result<Option<T>> {
    match table.get(k).map_err(store_err)? {
        Some(v) => Ok(Some(decode(v.value())?)),
        None => Ok(None),
    }
}

fn scan<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    pk: &str,
    sk_prefix: &str,
) -> Result<Vec<T>> {
    let (start, end) = prefix_range(pk, sk_prefix);
    let mut out = Vec::new();
    for entry in table
        .range(start.as_str()..end.as_str())
        .map_err(store_err)?
    {
        let (_, v) = entry.map_err(store_err)?;
        out.push(decode(v.value())?);
    }
    Ok(out)
}

/// The sort keys of the items under `pk` after `after` (exclusive), in order, at most
/// `limit` — a DynamoDB Query page with `ExclusiveStartKey` and `Limit`, for the
/// partitions whose items hold their own sort key (the active index, the histories).
fn page_of_sort_keys(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    pk: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<String>> {
    use std::ops::Bound;
    let (start, end) = prefix_range(pk, "");
    let from = after.map(|a| key(pk, a));
    let lower = match &from {
        Some(k) => Bound::Excluded(k.as_str()),
        None => Bound::Included(start.as_str()),
    };
    let mut out = Vec::new();
    for entry in table
        .range::<&str>((lower, Bound::Excluded(end.as_str())))
        .map_err(store_err)?
        .take(limit)
    {
        let (_, v) = entry.map_err(store_err)?;
        out.push(decode(v.value())?);
    }
    Ok(out)
}

fn put<T: Serialize>(
    table: &mut Table<&'static str, &'static [u8]>,
    k: &str,
    value: &T,
) -> Result<()> {
    let bytes = serde_json::to_vec(value)?;
    table.insert(k, bytes.as_slice()).map_err(store_err)?;
    Ok(())
}

/// In-process [`JobStore`] on `redb`: [`EmbeddedStore::open`] persists to a file so the
/// catalog and finished jobs survive a restart; [`EmbeddedStore::in_memory`] keeps nothing.
///
/// Per-task writes (claims, commits, failures) are not flushed to disk one by one: the
/// jobs they belong to run in this process and cannot outlive it. Job creation, job
/// completion and catalog changes are durable when their call returns.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    /// Serializes writers so change batches leave in commit order.
    write_lock: Mutex<()>,
    stream_tx: mpsc::UnboundedSender<Vec<ChangeRecord>>,
    stream_rx: Mutex<Option<mpsc::UnboundedReceiver<Vec<ChangeRecord>>>>,
    /// Counts writes of job items (a job starting or ending), for waiters.
    job_changes: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// Opens (or creates) a store persisted in the file at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::store(
                    StoreErrorKind::Invalid,
                    format!("cannot create {}: {e}", dir.display()),
                )
            })?;
        }
        let db = Database::create(path).map_err(|e| {
            Error::store(
                StoreErrorKind::Unavailable,
                format!("cannot open job store {}: {e}", path.display()),
            )
        })?;
        Self::with_db(db)
    }

    /// A store that lives in memory only.
    pub fn in_memory() -> Result<Self> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(store_err)?;
        Self::with_db(db)
    }

    fn with_db(db: Database) -> Result<Self> {
        let txn = db.begin_write().map_err(store_err)?;
        txn.open_table(ITEMS).map_err(store_err)?;
        txn.commit().map_err(store_err)?;
        let (stream_tx, stream_rx) = mpsc::unbounded_channel();
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                write_lock: Mutex::new(()),
                stream_tx,
                stream_rx: Mutex::new(Some(stream_rx)),
                job_changes: tokio::sync::watch::Sender::new(0),
            }),
        })
    }

    /// Takes the change stream: batches of change records, one batch per committed write,
    /// in commit order. There is one stream; the second call returns `None`.
    pub fn take_stream(&self) -> Option<mpsc::UnboundedReceiver<Vec<ChangeRecord>>> {
        self.inner.stream_rx.lock().ok()?.take()
    }

    /// Deletes every item of the jobs whose `expires_at` (seconds since epoch) is before
    /// `now_secs` — what DynamoDB's TTL does for the deployed store — and returns their ids.
    pub async fn expire_jobs(&self, now_secs: u64) -> Result<Vec<String>> {
        let expired: Vec<JobRecord> = self
            .read(move |t| {
                let mut ids = Vec::new();
                for entry in t.iter().map_err(store_err)? {
                    let (k, v) = entry.map_err(store_err)?;
                    if k.value().starts_with("JOB#")
                        && k.value().ends_with(&format!("{SEP}{SK_META}"))
                    {
                        let job: JobRecord = decode(v.value())?;
                        if job.expires_at < now_secs && job.state.is_terminal() {
                            ids.push(job);
                        }
                    }
                }
                Ok(ids)
            })
            .await?;
        let ids: Vec<String> = expired.iter().map(|j| j.job_id.clone()).collect();
        self.write(false, move |t| {
            for job in &expired {
                let id = &job.job_id;
                let history = key(&history_pk(&job.owner), &history_sk(job.created_ms, id));
                t.remove(history.as_str()).map_err(store_err)?;
                for pk in [job_pk(id), plan_pk(id)] {
                    let (start, end) = prefix_range(&pk, "");
                    let keys: Vec<String> = t
                        .range(start.as_str()..end.as_str())
                        .map_err(store_err)?
                        .map(|e| e.map(|(k, _)| k.value().to_string()).map_err(store_err))
                        .collect::<Result<_>>()?;
                    for k in keys {
                        t.remove(k.as_str()).map_err(store_err)?;
                    }
                }
            }
            Ok(((), vec![]))
        })
        .await?;
        Ok(ids)
    }

    /// Reads a task item, lets `f` decide its new value (`None`: the condition failed,
    /// nothing changes) and writes it, in one transaction.
    async fn update_task<F>(&self, job_id: &str, stage: u32, partition: u32, f: F) -> Result<bool>
    where
        F: FnOnce(Option<&TaskRecord>) -> Option<TaskRecord> + Send + 'static,
    {
        let k = key(&job_pk(job_id), &task_sk(stage, partition));
        self.write(false, move |t| {
            let current = get::<TaskRecord>(t, &k)?;
            match f(current.as_ref()) {
                Some(task) => {
                    put(t, &k, &task)?;
                    Ok((true, vec![ChangeRecord::Task(task)]))
                }
                None => Ok((false, vec![])),
            }
        })
        .await
    }

    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::ReadOnlyTable<&'static str, &'static [u8]>) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let txn = inner.db.begin_read().map_err(store_err)?;
            let table = txn.open_table(ITEMS).map_err(store_err)?;
            f(&table)
        })
        .await
        .map_err(|e| Error::Internal(format!("store reader panicked: {e}")))?
    }

    /// Runs `f` in one write transaction; commits and emits the changes it returns.
    async fn write<T, F>(&self, durable: bool, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Table<&'static str, &'static [u8]>) -> Result<(T, Vec<ChangeRecord>)>
            + Send
            + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let _order = inner
                .write_lock
                .lock()
                .map_err(|_| Error::Internal("job store lock poisoned".into()))?;
            let mut txn = inner.db.begin_write().map_err(store_err)?;
            if !durable {
                txn.set_durability(Durability::None).map_err(store_err)?;
            }
            let (value, changes) = {
                let mut table = txn.open_table(ITEMS).map_err(store_err)?;
                f(&mut table)?
            };
            txn.commit().map_err(store_err)?;
            if changes.iter().any(|c| matches!(c, ChangeRecord::Job(_))) {
                inner.job_changes.send_modify(|n| *n += 1);
            }
            if !changes.is_empty() {
                // Nobody listening (tests that drive the scheduler by hand) is fine.
                let _ = inner.stream_tx.send(changes);
            }
            Ok(value)
        })
        .await
        .map_err(|e| Error::Internal(format!("store writer panicked: {e}")))?
    }
}

#[async_trait]
impl JobStore for EmbeddedStore {
    fn job_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.inner.job_changes.subscribe())
    }

    async fn create_job(&self, new: &NewJob) -> Result<()> {
        let new = new.clone();
        self.write(true, move |t| {
            let job = &new.job;
            let pk = job_pk(&job.job_id);
            if t.get(key(&pk, SK_META).as_str())
                .map_err(store_err)?
                .is_some()
            {
                return Err(Error::Conflict(format!(
                    "job {} already exists",
                    job.job_id
                )));
            }
            let mut changes = vec![ChangeRecord::Job(job.clone())];
            put(t, &key(&pk, SK_META), job)?;
            for s in &new.stages {
                put(t, &key(&pk, &stage_sk(s.stage)), s)?;
                changes.push(ChangeRecord::Stage(s.clone()));
            }
            for p in &new.plans {
                put(t, &key(&plan_pk(&job.job_id), &stage_sk(p.stage)), p)?;
            }
            for task in &new.tasks {
                put(t, &key(&pk, &task_sk(task.stage, task.partition)), task)?;
                changes.push(ChangeRecord::Task(task.clone()));
            }
            if job.state == JobState::Running {
                put(t, &key(ACTIVE_PK, &job.job_id), &job.job_id)?;
            }
            let history = history_sk(job.created_ms, &job.job_id);
            put(t, &key(&history_pk(&job.owner), &history), &history)?;
            Ok(((), changes))
        })
        .await
    }

    async fn get_job(&self, job_id: &str) -> Result<Option<JobRecord>> {
        let k = key(&job_pk(job_id), SK_META);
        self.read(move |t| get(t, &k)).await
    }

    async fn load_job(&self, job_id: &str) -> Result<Option<JobSnapshot>> {
        let pk = job_pk(job_id);
        self.read(move |t| {
            let Some(job) = get::<JobRecord>(t, &key(&pk, SK_META))? else {
                return Ok(None);
            };
            let stages = scan(t, &pk, "STAGE#")?;
            let tasks = scan(t, &pk, "TASK#")?;
            let counters = scan(t, &pk, "COUNT#")?;
            Ok(Some(JobSnapshot {
                job,
                stages,
                tasks,
                counters,
            }))
        })
        .await
    }

    async fn get_stage(&self, job_id: &str, stage: u32) -> Result<Option<StageRecord>> {
        let k = key(&job_pk(job_id), &stage_sk(stage));
        self.read(move |t| get(t, &k)).await
    }

    async fn get_plan(&self, job_id: &str, stage: u32) -> Result<Option<PlanRecord>> {
        let k = key(&plan_pk(job_id), &stage_sk(stage));
        self.read(move |t| get(t, &k)).await
    }

    async fn get_task(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
    ) -> Result<Option<TaskRecord>> {
        let k = key(&job_pk(job_id), &task_sk(stage, partition));
        self.read(move |t| get(t, &k)).await
    }

    async fn task_view(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        with_plan: bool,
    ) -> Result<TaskView> {
        let (pk, plans) = (job_pk(job_id), plan_pk(job_id));
        self.read(move |t| {
            Ok(TaskView {
                job: get(t, &key(&pk, SK_META))?,
                stage: get(t, &key(&pk, &stage_sk(stage)))?,
                task: get(t, &key(&pk, &task_sk(stage, partition)))?,
                plan: if with_plan {
                    get(t, &key(&plans, &stage_sk(stage)))?
                } else {
                    None
                },
            })
        })
        .await
    }

    async fn list_tasks(&self, job_id: &str, stage: u32) -> Result<Vec<TaskRecord>> {
        let pk = job_pk(job_id);
        self.read(move |t| scan(t, &pk, &task_sk_prefix(stage)))
            .await
    }

    async fn list_task_range(
        &self,
        job_id: &str,
        stage: u32,
        from: u32,
        to: u32,
    ) -> Result<Vec<TaskRecord>> {
        let pk = job_pk(job_id);
        let tasks: Vec<TaskRecord> = self
            .read(move |t| scan(t, &pk, &task_sk_prefix(stage)))
            .await?;
        Ok(tasks
            .into_iter()
            .filter(|t| (from..to).contains(&t.partition))
            .collect())
    }

    async fn list_counters(&self, job_id: &str, stage: u32) -> Result<Vec<CommitCounter>> {
        let pk = job_pk(job_id);
        self.read(move |t| scan(t, &pk, &counter_sk_prefix(stage)))
            .await
    }

    async fn claim_stage(
        &self,
        job_id: &str,
        stage: u32,
        now_ms: u64,
        decision: &StageDecision,
    ) -> Result<bool> {
        let k = key(&job_pk(job_id), &stage_sk(stage));
        let decision = decision.clone();
        self.write(false, move |t| {
            let Some(mut s) = get::<StageRecord>(t, &k)? else {
                return Ok((false, vec![]));
            };
            if s.state != StageState::Pending {
                return Ok((false, vec![]));
            }
            s.state = StageState::Dispatched;
            s.dispatched_ms = Some(now_ms);
            s.tasks = decision.tasks;
            s.decision = Some(decision);
            put(t, &k, &s)?;
            Ok((true, vec![ChangeRecord::Stage(s)]))
        })
        .await
    }

    async fn confirm_stage(&self, job_id: &str, stage: u32, now_ms: u64) -> Result<bool> {
        let k = key(&job_pk(job_id), &stage_sk(stage));
        self.write(false, move |t| {
            let Some(mut s) = get::<StageRecord>(t, &k)? else {
                return Ok((false, vec![]));
            };
            if s.state != StageState::Dispatched || s.confirmed_ms.is_some() {
                return Ok((false, vec![]));
            }
            s.confirmed_ms = Some(now_ms);
            put(t, &k, &s)?;
            Ok((true, vec![ChangeRecord::Stage(s)]))
        })
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
        let owned = job_id.to_string();
        self.update_task(job_id, stage, partition, move |current| {
            let allowed = match current {
                None => attempt == 2,
                Some(task) => task.state == TaskState::Failed && task.attempt + 1 == attempt,
            };
            if !allowed {
                return None;
            }
            Some(running_attempt(
                current,
                (&owned, stage, partition),
                attempt,
                now_ms,
                expires_at,
            ))
        })
        .await
    }

    async fn speculate_task(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        attempt: u32,
        now_ms: u64,
        expires_at: u64,
    ) -> Result<bool> {
        let owned = job_id.to_string();
        self.update_task(job_id, stage, partition, move |current| {
            let allowed = match current {
                None => attempt == 2,
                Some(task) => {
                    task.state == TaskState::Running
                        && task.attempt + 1 == attempt
                        && task.speculative.is_none()
                }
            };
            if !allowed {
                return None;
            }
            let mut task = running_attempt(
                current,
                (&owned, stage, partition),
                attempt,
                now_ms,
                expires_at,
            );
            task.speculative = Some(attempt);
            Some(task)
        })
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
        self.update_task(job_id, stage, partition, move |current| {
            let task = current?;
            if task.state != TaskState::Running || task.attempt != attempt {
                return None;
            }
            let mut task = task.clone();
            task.confirmed_ms = Some(now_ms);
            Some(task)
        })
        .await
    }

    async fn defer_task(&self, deferral: &TaskDeferral) -> Result<bool> {
        let d = deferral.clone();
        self.update_task(&deferral.job_id, d.stage, d.partition, move |current| {
            let mut task = match current {
                None if d.attempt == 1 => TaskRecord::new(
                    &d.job_id,
                    d.stage,
                    d.partition,
                    TaskState::Throttled,
                    1,
                    d.expires_at,
                ),
                Some(t)
                    if matches!(t.state, TaskState::Running | TaskState::Throttled)
                        && t.attempt == d.attempt =>
                {
                    t.clone()
                }
                _ => return None,
            };
            task.state = TaskState::Throttled;
            task.retry_at_ms = Some(d.retry_at_ms);
            task.confirmed_ms = None;
            task.throttles += 1;
            task.error = Some(d.error.clone());
            task.expires_at = d.expires_at;
            Some(task)
        })
        .await
    }

    async fn resend_task(&self, resend: &TaskResend) -> Result<bool> {
        let r = resend.clone();
        self.update_task(&resend.job_id, r.stage, r.partition, move |current| {
            let mut task = match current {
                None if r.attempt == 1 => TaskRecord::new(
                    &r.job_id,
                    r.stage,
                    r.partition,
                    TaskState::Running,
                    1,
                    r.expires_at,
                ),
                Some(t) if t.attempt == r.attempt && resendable(t, &r) => t.clone(),
                _ => return None,
            };
            task.state = TaskState::Running;
            task.dispatched_ms = Some(r.now_ms);
            task.confirmed_ms = None;
            task.retry_at_ms = None;
            task.expires_at = r.expires_at;
            Some(task)
        })
        .await
    }

    async fn confirm_dispatch(&self, confirmation: &DispatchConfirmation) -> Result<bool> {
        let c = confirmation.clone();
        let pk = job_pk(&c.job_id);
        self.write(false, move |t| {
            let counter_key = key(&pk, &counter_sk(c.stage, c.counter));
            let mut counter = get::<CommitCounter>(t, &counter_key)?.unwrap_or(CommitCounter {
                job_id: c.job_id.clone(),
                stage: c.stage,
                counter: c.counter,
                remaining: counter_size(c.stage_tasks, c.counter),
                done: vec![],
                last_commit_ms: 0,
                dispatched_ms: None,
                expires_at: c.expires_at,
            });
            if counter.dispatched_ms.is_some() {
                return Ok((false, vec![]));
            }
            counter.dispatched_ms = Some(c.now_ms);
            put(t, &counter_key, &counter)?;
            Ok((true, vec![ChangeRecord::Counter(counter)]))
        })
        .await
    }

    async fn commit_task(&self, commit: &TaskCommit) -> Result<CommitOutcome> {
        let c = commit.clone();
        let pk = job_pk(&c.job_id);
        self.write(false, move |t| {
            let task_key = key(&pk, &task_sk(c.stage, c.partition));
            let current = get::<TaskRecord>(t, &task_key)?;
            if let Some(done) = current.as_ref().filter(|t| t.state == TaskState::Succeeded) {
                // The same commit tried again counts as committed; another attempt's lost.
                return Ok(
                    if done.output.as_ref().map(|o| &o.object) == Some(&c.output.object) {
                        let counter = get::<CommitCounter>(
                            t,
                            &key(&pk, &counter_sk(c.stage, counter_of(c.partition))),
                        )?;
                        (
                            CommitOutcome::Committed {
                                counter_done: counter.is_some_and(|k| k.remaining == 0),
                            },
                            vec![],
                        )
                    } else {
                        (CommitOutcome::AlreadySucceeded, vec![])
                    },
                );
            }
            let mut task = current.unwrap_or_else(|| {
                TaskRecord::new(
                    &c.job_id,
                    c.stage,
                    c.partition,
                    TaskState::Succeeded,
                    c.output.attempt,
                    c.expires_at,
                )
            });
            task.state = TaskState::Succeeded;
            task.output = Some(c.output.clone());
            task.expires_at = c.expires_at;
            put(t, &task_key, &task)?;
            let mut changes = vec![ChangeRecord::Task(task)];

            let index = counter_of(c.partition);
            let counter_key = key(&pk, &counter_sk(c.stage, index));
            let mut counter = get::<CommitCounter>(t, &counter_key)?.unwrap_or(CommitCounter {
                job_id: c.job_id.clone(),
                stage: c.stage,
                counter: index,
                remaining: counter_size(c.stage_tasks, index),
                done: vec![],
                last_commit_ms: 0,
                dispatched_ms: None,
                expires_at: c.expires_at,
            });
            if !counter.done.contains(&c.partition) {
                counter.done.push(c.partition);
                counter.remaining = counter.remaining.saturating_sub(1);
                counter.last_commit_ms = c.now_ms;
                put(t, &counter_key, &counter)?;
                changes.push(ChangeRecord::Counter(counter.clone()));
            }
            Ok((
                CommitOutcome::Committed {
                    counter_done: counter.remaining == 0,
                },
                changes,
            ))
        })
        .await
    }

    async fn fail_attempt(&self, failure: &TaskFailure) -> Result<bool> {
        let f = failure.clone();
        self.update_task(&failure.job_id, f.stage, f.partition, move |current| {
            let applies = match current {
                None => f.attempt == 1,
                Some(task) => {
                    matches!(task.state, TaskState::Running | TaskState::Throttled)
                        && task.attempt == f.attempt
                }
            };
            if !applies {
                return None;
            }
            let mut task = current.cloned().unwrap_or_else(|| {
                TaskRecord::new(
                    &f.job_id,
                    f.stage,
                    f.partition,
                    TaskState::Failed,
                    f.attempt,
                    f.expires_at,
                )
            });
            task.state = TaskState::Failed;
            task.error = Some(f.error.clone());
            task.retryable = f.retryable;
            task.failures += 1;
            task.retry_at_ms = None;
            task.expires_at = f.expires_at;
            Some(task)
        })
        .await
    }

    async fn finish_job(
        &self,
        job_id: &str,
        state: JobState,
        error: Option<String>,
        now_ms: u64,
    ) -> Result<bool> {
        let job_id = job_id.to_string();
        self.write(true, move |t| {
            let k = key(&job_pk(&job_id), SK_META);
            let Some(mut job) = get::<JobRecord>(t, &k)? else {
                return Ok((false, vec![]));
            };
            if job.state != JobState::Running {
                return Ok((false, vec![]));
            }
            job.state = state;
            job.error = error;
            job.finished_ms = Some(now_ms);
            put(t, &k, &job)?;
            t.remove(key(ACTIVE_PK, &job_id).as_str())
                .map_err(store_err)?;
            Ok((true, vec![ChangeRecord::Job(job)]))
        })
        .await
    }

    async fn active_jobs(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        let after = after.map(str::to_string);
        self.read(move |t| page_of_sort_keys(t, ACTIVE_PK, after.as_deref(), limit))
            .await
    }

    async fn job_history(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        let pk = history_pk(owner);
        let after = after.map(str::to_string);
        self.read(move |t| page_of_sort_keys(t, &pk, after.as_deref(), limit))
            .await
    }

    async fn remove_active(&self, job_id: &str) -> Result<()> {
        let k = key(ACTIVE_PK, job_id);
        self.write(true, move |t| {
            t.remove(k.as_str()).map_err(store_err)?;
            Ok(((), vec![]))
        })
        .await
    }

    async fn keep_active(&self, job_id: &str, _expires_at: u64) -> Result<()> {
        let k = key(ACTIVE_PK, job_id);
        let id = job_id.to_string();
        self.write(true, move |t| {
            put(t, k.as_str(), &id)?;
            Ok(((), vec![]))
        })
        .await
    }

    async fn sweep_cursor(&self) -> Result<Option<String>> {
        self.read(|t| get(t, &key(SWEEP_PK, SWEEP_SK))).await
    }

    async fn set_sweep_cursor(&self, cursor: Option<&str>) -> Result<()> {
        let cursor = cursor.map(str::to_string);
        self.write(false, move |t| {
            let k = key(SWEEP_PK, SWEEP_SK);
            match &cursor {
                Some(c) => put(t, &k, c)?,
                None => {
                    t.remove(k.as_str()).map_err(store_err)?;
                }
            }
            Ok(((), vec![]))
        })
        .await
    }

    async fn put_table(&self, table: &TableRecord, replace: bool) -> Result<bool> {
        let record = table.clone();
        self.write(true, move |t| {
            let k = key(CATALOG_PK, &table_sk(&record.name));
            if !replace && t.get(k.as_str()).map_err(store_err)?.is_some() {
                return Ok((false, vec![]));
            }
            put(t, &k, &record)?;
            Ok((true, vec![]))
        })
        .await
    }

    async fn get_table(&self, name: &str) -> Result<Option<TableRecord>> {
        let k = key(CATALOG_PK, &table_sk(name));
        self.read(move |t| get(t, &k)).await
    }

    async fn list_tables(&self) -> Result<Vec<TableRecord>> {
        self.read(|t| scan(t, CATALOG_PK, "TABLE#")).await
    }

    async fn delete_table(&self, name: &str) -> Result<bool> {
        let k = key(CATALOG_PK, &table_sk(name));
        self.write(true, move |t| {
            let existed = t.remove(k.as_str()).map_err(store_err)?.is_some();
            Ok((existed, vec![]))
        })
        .await
    }
}

/// Whether a task item may be sent again at the same attempt (see
/// [`JobStore::resend_task`]): a throttled task whose back-off has passed, or a running one
/// whose invocation was never confirmed and whose dispatch is stale.
fn resendable(task: &TaskRecord, r: &TaskResend) -> bool {
    match task.state {
        TaskState::Throttled => task.retry_at_ms.is_none_or(|at| at <= r.now_ms),
        TaskState::Running => {
            task.confirmed_ms.is_none() && task.dispatched_ms.is_none_or(|d| d < r.stale_before_ms)
        }
        TaskState::Succeeded | TaskState::Failed => false,
    }
}

/// A task (from its item, or a new one) running `attempt`, dispatched at `now_ms` and not
/// confirmed yet: what starting a retry and starting a speculative attempt both write.
fn running_attempt(
    current: Option<&TaskRecord>,
    (job_id, stage, partition): (&str, u32, u32),
    attempt: u32,
    now_ms: u64,
    expires_at: u64,
) -> TaskRecord {
    let mut task = current.cloned().unwrap_or_else(|| {
        TaskRecord::new(job_id, stage, partition, TaskState::Running, attempt, 0)
    });
    task.state = TaskState::Running;
    task.attempt = attempt;
    task.dispatched_ms = Some(now_ms);
    task.confirmed_ms = None;
    task.retry_at_ms = None;
    task.expires_at = expires_at;
    task
}
