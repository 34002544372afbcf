//! The in-process job store: the DynamoDB item model on `redb`, persisted to a file
//! (or kept in memory), emitting its change records in commit order like a stream.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, Table, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use super::*;
use crate::{Error, Result};

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

fn store_err(e: impl std::fmt::Display) -> Error {
    Error::Store(e.to_string())
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
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::Store(format!("cannot create {}: {e}", dir.display())))?;
        }
        let db = Database::create(path)
            .map_err(|e| Error::Store(format!("cannot open job store {}: {e}", path.display())))?;
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
        let expired: Vec<String> = self
            .read(move |t| {
                let mut ids = Vec::new();
                for entry in t.iter().map_err(store_err)? {
                    let (k, v) = entry.map_err(store_err)?;
                    if k.value().starts_with("JOB#")
                        && k.value().ends_with(&format!("{SEP}{SK_META}"))
                    {
                        let job: JobRecord = decode(v.value())?;
                        if job.expires_at < now_secs && job.state.is_terminal() {
                            ids.push(job.job_id);
                        }
                    }
                }
                Ok(ids)
            })
            .await?;
        let ids = expired.clone();
        self.write(false, move |t| {
            for id in &ids {
                let (start, end) = prefix_range(&job_pk(id), "");
                let keys: Vec<String> = t
                    .range(start.as_str()..end.as_str())
                    .map_err(store_err)?
                    .map(|e| e.map(|(k, _)| k.value().to_string()).map_err(store_err))
                    .collect::<Result<_>>()?;
                for k in keys {
                    t.remove(k.as_str()).map_err(store_err)?;
                }
            }
            Ok(((), vec![]))
        })
        .await?;
        Ok(expired)
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
    async fn create_job(
        &self,
        job: &JobRecord,
        stages: &[StageRecord],
        tasks: &[TaskRecord],
    ) -> Result<()> {
        let (job, stages, tasks) = (job.clone(), stages.to_vec(), tasks.to_vec());
        self.write(true, move |t| {
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
            put(t, &key(&pk, SK_META), &job)?;
            for s in &stages {
                put(t, &key(&pk, &stage_sk(s.stage)), s)?;
                changes.push(ChangeRecord::Stage(s.clone()));
            }
            for task in &tasks {
                put(t, &key(&pk, &task_sk(task.stage, task.partition)), task)?;
                changes.push(ChangeRecord::Task(task.clone()));
            }
            if job.state == JobState::Running {
                put(t, &key(ACTIVE_PK, &job.job_id), &job.job_id)?;
            }
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
            Ok(Some(JobSnapshot { job, stages, tasks }))
        })
        .await
    }

    async fn get_stage(&self, job_id: &str, stage: u32) -> Result<Option<StageRecord>> {
        let k = key(&job_pk(job_id), &stage_sk(stage));
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

    async fn list_tasks(&self, job_id: &str, stage: u32) -> Result<Vec<TaskRecord>> {
        let pk = job_pk(job_id);
        self.read(move |t| scan(t, &pk, &task_sk_prefix(stage)))
            .await
    }

    async fn claim_stage(&self, job_id: &str, stage: u32, now_ms: u64) -> Result<bool> {
        let k = key(&job_pk(job_id), &stage_sk(stage));
        self.write(false, move |t| {
            let Some(mut s) = get::<StageRecord>(t, &k)? else {
                return Err(Error::NotFound(format!("stage {stage} of job")));
            };
            if s.state != StageState::Pending {
                return Ok((false, vec![]));
            }
            s.state = StageState::Dispatched;
            s.dispatched_ms = Some(now_ms);
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
        let job_id = job_id.to_string();
        let k = key(&job_pk(&job_id), &task_sk(stage, partition));
        self.write(false, move |t| {
            let current = get::<TaskRecord>(t, &k)?;
            let allowed = match &current {
                None => attempt == 2,
                Some(task) => task.state != TaskState::Succeeded && task.attempt + 1 == attempt,
            };
            if !allowed {
                return Ok((false, vec![]));
            }
            let task = TaskRecord {
                state: TaskState::Running,
                attempt,
                dispatched_ms: Some(now_ms),
                ..current.unwrap_or(TaskRecord {
                    job_id,
                    stage,
                    partition,
                    state: TaskState::Running,
                    attempt,
                    dispatched_ms: None,
                    output: None,
                    error: None,
                    retryable: false,
                    failures: 0,
                    expires_at,
                })
            };
            put(t, &k, &task)?;
            Ok((true, vec![ChangeRecord::Task(task)]))
        })
        .await
    }

    async fn commit_task(&self, commit: &TaskCommit) -> Result<CommitOutcome> {
        let c = commit.clone();
        let pk = job_pk(&c.job_id);
        self.write(false, move |t| {
            let task_key = key(&pk, &task_sk(c.stage, c.partition));
            let stage_key = key(&pk, &stage_sk(c.stage));
            let current = get::<TaskRecord>(t, &task_key)?;
            if current
                .as_ref()
                .is_some_and(|t| t.state == TaskState::Succeeded)
            {
                return Ok((CommitOutcome::AlreadySucceeded, vec![]));
            }
            let Some(mut stage) = get::<StageRecord>(t, &stage_key)? else {
                return Err(Error::NotFound(format!(
                    "stage {} of job {}",
                    c.stage, c.job_id
                )));
            };
            let task = match current {
                Some(mut task) => {
                    task.state = TaskState::Succeeded;
                    task.output = Some(c.output.clone());
                    task
                }
                None => TaskRecord {
                    job_id: c.job_id.clone(),
                    stage: c.stage,
                    partition: c.partition,
                    state: TaskState::Succeeded,
                    attempt: c.output.attempt,
                    dispatched_ms: None,
                    output: Some(c.output.clone()),
                    error: None,
                    retryable: false,
                    failures: 0,
                    expires_at: c.expires_at,
                },
            };
            stage.remaining = stage.remaining.saturating_sub(1);
            stage.last_commit_ms = Some(c.now_ms);
            put(t, &task_key, &task)?;
            put(t, &stage_key, &stage)?;
            let remaining = stage.remaining;
            Ok((
                CommitOutcome::Committed { remaining },
                vec![ChangeRecord::Task(task), ChangeRecord::Stage(stage)],
            ))
        })
        .await
    }

    async fn fail_attempt(&self, failure: &TaskFailure) -> Result<bool> {
        let f = failure.clone();
        let k = key(&job_pk(&f.job_id), &task_sk(f.stage, f.partition));
        self.write(false, move |t| {
            let current = get::<TaskRecord>(t, &k)?;
            let applies = match &current {
                None => f.attempt == 1,
                Some(task) => task.state == TaskState::Running && task.attempt == f.attempt,
            };
            if !applies {
                return Ok((false, vec![]));
            }
            let failures = current.as_ref().map_or(0, |t| t.failures) + 1;
            let task = TaskRecord {
                job_id: f.job_id.clone(),
                stage: f.stage,
                partition: f.partition,
                state: TaskState::Failed,
                attempt: f.attempt,
                dispatched_ms: current.as_ref().and_then(|t| t.dispatched_ms),
                output: None,
                error: Some(f.error.clone()),
                retryable: f.retryable,
                failures,
                expires_at: f.expires_at,
            };
            put(t, &k, &task)?;
            Ok((true, vec![ChangeRecord::Task(task)]))
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
                return Err(Error::NotFound(format!("job {job_id}")));
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

    async fn active_jobs(&self) -> Result<Vec<String>> {
        self.read(|t| scan(t, ACTIVE_PK, "")).await
    }

    async fn remove_active(&self, job_id: &str) -> Result<()> {
        let k = key(ACTIVE_PK, job_id);
        self.write(true, move |t| {
            t.remove(k.as_str()).map_err(store_err)?;
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
