//! [`DynamoDbJobStore`]: the job store on one DynamoDB table, as docs/design.md models it.
//!
//! | item | pk | sk |
//! |---|---|---|
//! | job | `JOB#<id>` | `META` |
//! | stage | `JOB#<id>` | `STAGE#<n>` |
//! | task | `JOB#<id>` | `TASK#<stage>#<partition>` |
//! | commit counter | `JOB#<id>` | `COUNT#<stage>#<n>` |
//! | stage plan | `PLAN#<id>` | `STAGE#<n>` |
//! | active-job index | `ACTIVE` | `<id>` |
//! | sweep bookmark | `SWEEP` | `CURSOR` |
//! | catalog table | `CATALOG` | `TABLE#<name>` |
//!
//! Every transition is a conditional write. A task commit is two single-item updates —
//! the task item (conditioned on the task not having succeeded: exactly one attempt wins)
//! and its commit counter (`remaining - 1`, conditioned on the partition not being counted
//! yet) — and no transaction, so commits never meet `TransactionConflict` and a wide
//! stage spreads its writes over one counter per 32 tasks. Transactions remain only where
//! two items must change together (job creation with its index entry, job completion).
//!
//! Failures are classified ([`StoreErrorKind`]): throttling, transaction conflicts and
//! transient service or network failures are retried here with jittered exponential
//! backoff; validation, serialization and access errors are not. A write retried after
//! an ambiguous failure may find its own earlier success: commits compare the committed
//! object, so a retried commit still reports `Committed`, and a transaction keeps one
//! `ClientRequestToken` across its tries, so DynamoDB answers a retry of an applied one
//! with its success. The only queries are by
//! partition key (one job, the active index, the catalog) — no scans. Items carry
//! `expires_at` for the table's TTL. Attribute names are the record fields (see
//! `lambdafusion::state`).
//!
//! Beside this file: `item.rs` (records to items and back), `expr.rs` (expressions with
//! bound names and values), `errors.rs` (error kinds and the retry of transient ones),
//! `actions.rs` (the IAM actions of each operation, checked against the source).

mod actions;
mod errors;
mod expr;
mod item;

pub use actions::actions_of;
pub use errors::kind_of_code;

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, PutRequest, ReturnValue, TransactWriteItem, WriteRequest,
};
use aws_sdk_dynamodb::Client;
use lambdafusion::error::{StoreError, StoreErrorKind};
use lambdafusion::state::*;
use lambdafusion::{Error, Result};
use serde::de::DeserializeOwned;
use tracing::warn;

use crate::backoff::Backoff;
use crate::metrics::{count, Request};

use errors::{
    condition_failed, retrying, store_err, STORE_BACKOFF_BASE, STORE_BACKOFF_CAP, STORE_TRIES,
};
use expr::{or_no_item, running_attempt, task_identity, Expr};
use item::{encode_err, from_item, key, n, s, state_value, to_item, Item};

/// [`JobStore`] on DynamoDB. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct DynamoDbJobStore {
    client: Client,
    table: String,
}

impl DynamoDbJobStore {
    /// A store on `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    /// One item, read strongly consistent.
    async fn get<T: DeserializeOwned>(&self, pk: &str, sk: &str) -> Result<Option<T>> {
        self.get_read(pk, sk, true).await
    }

    /// One item, read strongly consistent or (half a read unit, may lag about a second)
    /// eventually consistent.
    async fn get_read<T: DeserializeOwned>(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> Result<Option<T>> {
        let item = retrying("GetItem", || async {
            count(Request::DynamoDbRead);
            self.client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(key(pk, sk)))
                .consistent_read(consistent)
                .send()
                .await
                .map_err(|e| store_err("GetItem", e))
        })
        .await?
        .item;
        item.map(from_item).transpose()
    }

    /// The sort keys under `pk` after `after`, in order, at most `limit`: a page of the
    /// partitions whose items are only keys (the active index, the histories).
    async fn sort_keys(&self, pk: &str, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        Ok(self
            .query(pk, "", after, Some(limit))
            .await?
            .into_iter()
            .filter_map(|item| match item.get("sk") {
                Some(AttributeValue::S(sk)) => Some(sk.clone()),
                _ => None,
            })
            .take(limit)
            .collect())
    }

    /// Items under `pk` whose sort key starts with `prefix`, in sort-key order, starting
    /// after sort key `after`, at most `limit` (all when `None`).
    async fn query(
        &self,
        pk: &str,
        prefix: &str,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<Item>> {
        let mut items = Vec::new();
        let mut start = after.map(|a| key(pk, a));
        loop {
            let page = retrying("Query", || async {
                let mut q = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .consistent_read(true)
                    .expression_attribute_values(":pk", s(pk))
                    .set_exclusive_start_key(start.clone());
                if let Some(limit) = limit {
                    q = q.limit((limit - items.len()).min(1000) as i32);
                }
                q = if prefix.is_empty() {
                    q.key_condition_expression("pk = :pk")
                } else {
                    q.key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                        .expression_attribute_values(":prefix", s(prefix))
                };
                count(Request::DynamoDbRead);
                q.send().await.map_err(|e| store_err("Query", e))
            })
            .await?;
            items.extend(page.items.unwrap_or_default());
            start = page.last_evaluated_key;
            if start.is_none() || limit.is_some_and(|l| items.len() >= l) {
                return Ok(items);
            }
        }
    }

    /// Runs a conditional update; `Ok(false)` when the condition failed.
    async fn update(&self, op: &str, key: Item, expr: Expr, condition: String) -> Result<bool> {
        retrying(op, || async {
            count(Request::DynamoDbWrite);
            let result = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(key.clone()))
                .update_expression(expr.update_expression())
                .condition_expression(condition.clone())
                .set_expression_attribute_names(Some(expr.names.clone()))
                .set_expression_attribute_values(Some(expr.values.clone()))
                .send()
                .await;
            match result {
                Ok(_) => Ok(true),
                Err(e) if condition_failed(&e) => Ok(false),
                Err(e) => Err(store_err(op, e)),
            }
        })
        .await
    }

    /// Reads items with one strongly consistent BatchGetItem (up to 100 keys), asking
    /// again for unprocessed keys.
    async fn batch_get(&self, keys: Vec<Item>) -> Result<Vec<Item>> {
        let mut items = Vec::with_capacity(keys.len());
        let mut pending = keys;
        let mut backoff = Backoff::new(STORE_BACKOFF_BASE, STORE_BACKOFF_CAP);
        loop {
            let ask = aws_sdk_dynamodb::types::KeysAndAttributes::builder()
                .set_keys(Some(pending.clone()))
                .consistent_read(true)
                .build()
                .map_err(|e| Error::Internal(format!("DynamoDB keys: {e}")))?;
            let out = retrying("BatchGetItem", || async {
                count(Request::DynamoDbRead);
                self.client
                    .batch_get_item()
                    .request_items(&self.table, ask.clone())
                    .send()
                    .await
                    .map_err(|e| store_err("BatchGetItem", e))
            })
            .await?;
            if let Some(mut found) = out.responses {
                items.extend(found.remove(&self.table).unwrap_or_default());
            }
            pending = out
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.table))
                .map(|k| k.keys)
                .unwrap_or_default();
            if pending.is_empty() {
                return Ok(items);
            }
            if backoff.attempt + 1 >= STORE_TRIES {
                return Err(Error::store(
                    StoreErrorKind::Throttled,
                    format!(
                        "DynamoDB BatchGetItem: {} keys still unprocessed after retries",
                        pending.len()
                    ),
                ));
            }
            tokio::time::sleep(backoff.next_pause()).await;
        }
    }

    /// Writes items with BatchWriteItem, 25 at a time, retrying unprocessed ones.
    async fn batch_put(&self, items: Vec<Item>) -> Result<()> {
        for chunk in items.chunks(25) {
            let mut requests: Vec<WriteRequest> = chunk
                .iter()
                .map(|item| {
                    PutRequest::builder()
                        .set_item(Some(item.clone()))
                        .build()
                        .map(|put| WriteRequest::builder().put_request(put).build())
                        .map_err(|e| Error::Internal(format!("DynamoDB put request: {e}")))
                })
                .collect::<Result<_>>()?;
            let mut backoff = Backoff::new(STORE_BACKOFF_BASE, STORE_BACKOFF_CAP);
            loop {
                let pending = requests.clone();
                let out = retrying("BatchWriteItem", || async {
                    count(Request::DynamoDbWrite);
                    self.client
                        .batch_write_item()
                        .request_items(&self.table, pending.clone())
                        .send()
                        .await
                        .map_err(|e| store_err("BatchWriteItem", e))
                })
                .await?;
                requests = out
                    .unprocessed_items
                    .and_then(|mut u| u.remove(&self.table))
                    .unwrap_or_default();
                if requests.is_empty() {
                    break;
                }
                if backoff.attempt + 1 >= STORE_TRIES {
                    return Err(Error::store(
                        StoreErrorKind::Throttled,
                        format!(
                            "DynamoDB BatchWriteItem: {} items still unprocessed after retries",
                            requests.len()
                        ),
                    ));
                }
                tokio::time::sleep(backoff.next_pause()).await;
            }
        }
        Ok(())
    }

    /// Runs a transaction; `Ok(Some(reasons))` when a condition cancelled it, with the
    /// cancellation code per item. Cancellations for conflicts or throttling are
    /// transient errors (retried).
    async fn transact(
        &self,
        op: &str,
        items: Vec<TransactWriteItem>,
    ) -> Result<Option<Vec<String>>> {
        // One token for every try: a try whose answer was lost (a 500 or a timeout after
        // DynamoDB applied it) is answered by the next try with its success, instead of
        // the try meeting its own write and failing its condition. (The SDK fills in a
        // token of its own per send, which covers only its own retries.)
        let token = uuid::Uuid::new_v4().to_string();
        retrying(op, || async {
            count(Request::DynamoDbWrite);
            match self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .client_request_token(&token)
                .send()
                .await
            {
                Ok(_) => Ok(None),
                Err(e) => {
                    if let Some(aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c)) =
                        e.as_service_error()
                    {
                        let reasons: Vec<String> = c
                            .cancellation_reasons()
                            .iter()
                            .map(|r| r.code().unwrap_or("None").to_string())
                            .collect();
                        if reasons.iter().any(|r| r == "ConditionalCheckFailed") {
                            return Ok(Some(reasons));
                        }
                        let kind = reasons
                            .iter()
                            .map(|r| kind_of_code(r))
                            .find(|k| k.is_transient())
                            .unwrap_or(StoreErrorKind::Invalid);
                        return Err(Error::Store(StoreError::with_source(
                            kind,
                            format!("DynamoDB {op}: transaction cancelled ({})", reasons.join(", ")),
                            e,
                        )));
                    }
                    Err(store_err(op, e))
                }
            }
        })
        .await
    }

    fn put(&self, item: Item, condition: Option<&str>) -> Result<TransactWriteItem> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .set_condition_expression(condition.map(str::to_string))
            .build()
            .map_err(|e| Error::Internal(format!("DynamoDB put: {e}")))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    async fn delete(&self, op: &str, key: Item) -> Result<bool> {
        let out = retrying(op, || async {
            count(Request::DynamoDbWrite);
            self.client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(key.clone()))
                .return_values(ReturnValue::AllOld)
                .send()
                .await
                .map_err(|e| store_err(op, e))
        })
        .await?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
    }

    /// Counts a committed task on its commit counter, once; returns whether the counter
    /// is at 0.
    async fn count_commit(&self, commit: &TaskCommit) -> Result<bool> {
        let pk = job_pk(&commit.job_id);
        let index = counter_of(commit.partition);
        let counter_key = key(&pk, &counter_sk(commit.stage, index));
        let mut expr = Expr::default()
            .count_down(
                "remaining",
                n(counter_size(commit.stage_tasks, index)),
                n(1),
            )
            .set("last_commit_ms", n(commit.now_ms))
            .set("job_id", s(&commit.job_id))
            .set("stage", n(commit.stage))
            .set("counter", n(index))
            .set("expires_at", n(commit.expires_at))
            .add(
                "done",
                AttributeValue::Ns(vec![commit.partition.to_string()]),
            );
        let done = expr.name("done");
        let partition = expr.value(n(commit.partition));
        let condition =
            format!("attribute_not_exists({done}) OR NOT contains({done}, {partition})");
        let out = retrying("UpdateItem (count commit)", || async {
            count(Request::DynamoDbWrite);
            let result = self
                .client
                .update_item()
                .table_name(&self.table)
                .set_key(Some(counter_key.clone()))
                .update_expression(expr.update_expression())
                .condition_expression(condition.clone())
                .set_expression_attribute_names(Some(expr.names.clone()))
                .set_expression_attribute_values(Some(expr.values.clone()))
                .return_values(ReturnValue::UpdatedNew)
                .send()
                .await;
            match result {
                Ok(out) => Ok(Some(out)),
                Err(e) if condition_failed(&e) => Ok(None),
                Err(e) => Err(store_err("UpdateItem (count commit)", e)),
            }
        })
        .await?;
        let remaining = match out.and_then(|o| o.attributes) {
            Some(attributes) => match attributes.get("remaining") {
                Some(AttributeValue::N(v)) => v.parse::<i64>().unwrap_or(1),
                _ => 1,
            },
            // Counted before (a retry of this commit): read where the counter stands.
            None => self
                .get::<CommitCounter>(&pk, &counter_sk(commit.stage, index))
                .await?
                .map_or(1, |c| i64::from(c.remaining)),
        };
        Ok(remaining <= 0)
    }
}

#[async_trait]
impl JobStore for DynamoDbJobStore {
    async fn create_job(&self, new: &NewJob) -> Result<()> {
        let job = &new.job;
        let pk = job_pk(&job.job_id);
        let mut items = Vec::with_capacity(new.stages.len() + new.plans.len() + new.tasks.len());
        for stage in &new.stages {
            items.push(to_item(&pk, &stage_sk(stage.stage), stage)?);
        }
        for plan in &new.plans {
            items.push(to_item(&plan_pk(&job.job_id), &stage_sk(plan.stage), plan)?);
        }
        for task in &new.tasks {
            items.push(to_item(&pk, &task_sk(task.stage, task.partition), task)?);
        }
        // Stages, plans and tasks first: the job item, written last and only if absent,
        // makes the job exist; a crash before it leaves items that only the TTL notices.
        self.batch_put(items).await?;
        let state = HashMap::from([
            ("pk".to_string(), s(&pk)),
            ("sk".to_string(), s(SK_STATE)),
            ("state".to_string(), state_value(job.state)),
            ("expires_at".to_string(), n(job.expires_at)),
        ]);
        let mut writes = vec![
            self.put(
                to_item(&pk, SK_META, job)?,
                Some("attribute_not_exists(pk)"),
            )?,
            self.put(state, None)?,
        ];
        if job.state == JobState::Running {
            let active = HashMap::from([
                ("pk".to_string(), s(ACTIVE_PK)),
                ("sk".to_string(), s(&job.job_id)),
                ("expires_at".to_string(), n(job.expires_at)),
            ]);
            writes.push(self.put(active, None)?);
        }
        // The owner's history entry expires (TTL) with the job.
        let history = HashMap::from([
            ("pk".to_string(), s(history_pk(&job.owner))),
            ("sk".to_string(), s(history_sk(job.created_ms, &job.job_id))),
            ("expires_at".to_string(), n(job.expires_at)),
        ]);
        writes.push(self.put(history, None)?);
        match self
            .transact("TransactWriteItems (create job)", writes)
            .await?
        {
            None => Ok(()),
            Some(_) => Err(Error::Conflict(format!(
                "job {} already exists",
                job.job_id
            ))),
        }
    }

    async fn get_job(&self, job_id: &str) -> Result<Option<JobRecord>> {
        self.get(&job_pk(job_id), SK_META).await
    }

    /// The state item, read eventually consistent (half a read unit): a transition
    /// shows within about a second. A job without one (written before state items
    /// existed) answers from its job item.
    async fn job_state(&self, job_id: &str) -> Result<Option<JobState>> {
        /// What of the state item a task needs.
        #[derive(serde::Deserialize)]
        struct StateItem {
            state: JobState,
        }
        match self
            .get_read::<StateItem>(&job_pk(job_id), SK_STATE, false)
            .await?
        {
            Some(item) => Ok(Some(item.state)),
            None => Ok(self.get_job(job_id).await?.map(|job| job.state)),
        }
    }

    async fn load_job(&self, job_id: &str) -> Result<Option<JobSnapshot>> {
        let mut job = None;
        let mut stages = Vec::new();
        let mut tasks = Vec::new();
        let mut counters = Vec::new();
        for item in self.query(&job_pk(job_id), "", None, None).await? {
            match item.get("sk") {
                Some(AttributeValue::S(sk)) if sk == SK_META => job = Some(from_item(item)?),
                Some(AttributeValue::S(sk)) if sk.starts_with("STAGE#") => {
                    stages.push(from_item(item)?)
                }
                Some(AttributeValue::S(sk)) if sk.starts_with("TASK#") => {
                    tasks.push(from_item(item)?)
                }
                Some(AttributeValue::S(sk)) if sk.starts_with("COUNT#") => {
                    counters.push(from_item(item)?)
                }
                _ => {}
            }
        }
        Ok(job.map(|job| JobSnapshot {
            job,
            stages,
            tasks,
            counters,
        }))
    }

    async fn get_stage(&self, job_id: &str, stage: u32) -> Result<Option<StageRecord>> {
        self.get(&job_pk(job_id), &stage_sk(stage)).await
    }

    async fn get_plan(&self, job_id: &str, stage: u32) -> Result<Option<PlanRecord>> {
        self.get(&plan_pk(job_id), &stage_sk(stage)).await
    }

    async fn get_task(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
    ) -> Result<Option<TaskRecord>> {
        self.get(&job_pk(job_id), &task_sk(stage, partition)).await
    }

    async fn task_view(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
        with_plan: bool,
    ) -> Result<TaskView> {
        let pk = job_pk(job_id);
        let mut keys = vec![
            key(&pk, SK_META),
            key(&pk, &stage_sk(stage)),
            key(&pk, &task_sk(stage, partition)),
        ];
        if with_plan {
            keys.push(key(&plan_pk(job_id), &stage_sk(stage)));
        }
        let mut view = TaskView::default();
        for item in self.batch_get(keys).await? {
            let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
                (item.get("pk"), item.get("sk"))
            else {
                continue;
            };
            if pk.starts_with("PLAN#") {
                view.plan = Some(from_item(item)?);
            } else if sk == SK_META {
                view.job = Some(from_item(item)?);
            } else if sk.starts_with("STAGE#") {
                view.stage = Some(from_item(item)?);
            } else if sk.starts_with("TASK#") {
                view.task = Some(from_item(item)?);
            }
        }
        Ok(view)
    }

    async fn list_tasks(&self, job_id: &str, stage: u32) -> Result<Vec<TaskRecord>> {
        self.query(&job_pk(job_id), &task_sk_prefix(stage), None, None)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    async fn list_task_range(
        &self,
        job_id: &str,
        stage: u32,
        from: u32,
        to: u32,
    ) -> Result<Vec<TaskRecord>> {
        if from >= to {
            return Ok(Vec::new());
        }
        // From just after partition `from - 1`'s key, at most `to - from` items.
        let after = from.checked_sub(1).map(|p| task_sk(stage, p));
        self.query(
            &job_pk(job_id),
            &task_sk_prefix(stage),
            after.as_deref(),
            Some((to - from) as usize),
        )
        .await?
        .into_iter()
        .map(from_item::<TaskRecord>)
        .filter(|t| t.as_ref().map_or(true, |t| t.partition < to))
        .collect()
    }

    async fn list_counters(&self, job_id: &str, stage: u32) -> Result<Vec<CommitCounter>> {
        self.query(&job_pk(job_id), &counter_sk_prefix(stage), None, None)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    async fn claim_stage(
        &self,
        job_id: &str,
        stage: u32,
        now_ms: u64,
        decision: &StageDecision,
    ) -> Result<bool> {
        let recorded = serde_dynamo::to_attribute_value(decision)
            .map_err(|e| encode_err(&stage_sk(stage), e))?;
        let mut expr = Expr::default()
            .set("state", state_value(StageState::Dispatched))
            .set("dispatched_ms", n(now_ms))
            .set("tasks", n(decision.tasks))
            .set("decision", recorded);
        let condition = expr.eq("state", state_value(StageState::Pending));
        self.update(
            "UpdateItem (claim stage)",
            key(&job_pk(job_id), &stage_sk(stage)),
            expr,
            condition,
        )
        .await
    }

    async fn confirm_stage(&self, job_id: &str, stage: u32, now_ms: u64) -> Result<bool> {
        let mut expr = Expr::default().set("confirmed_ms", n(now_ms));
        let dispatched = expr.eq("state", state_value(StageState::Dispatched));
        let unconfirmed = expr.absent("confirmed_ms");
        self.update(
            "UpdateItem (confirm stage)",
            key(&job_pk(job_id), &stage_sk(stage)),
            expr,
            format!("{dispatched} AND {unconfirmed}"),
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
        let mut expr = running_attempt(job_id, stage, partition, attempt, now_ms, expires_at);
        let failed = expr.eq("state", state_value(TaskState::Failed));
        let previous = expr.eq("attempt", n(attempt.saturating_sub(1)));
        // Attempt 1 left no item unless it failed.
        let condition = or_no_item(attempt == 2, format!("{failed} AND {previous}"));
        self.update(
            "UpdateItem (start attempt)",
            key(&job_pk(job_id), &task_sk(stage, partition)),
            expr,
            condition,
        )
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
        let mut expr = running_attempt(job_id, stage, partition, attempt, now_ms, expires_at)
            .set("speculative", n(attempt));
        let running = expr.eq("state", state_value(TaskState::Running));
        let previous = expr.eq("attempt", n(attempt.saturating_sub(1)));
        let first = expr.absent("speculative");
        // Attempt 1 runs without an item.
        let condition = or_no_item(
            attempt == 2,
            format!("{running} AND {previous} AND {first}"),
        );
        self.update(
            "UpdateItem (speculate)",
            key(&job_pk(job_id), &task_sk(stage, partition)),
            expr,
            condition,
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
        let mut expr = Expr::default().set("confirmed_ms", n(now_ms));
        let running = expr.eq("state", state_value(TaskState::Running));
        let this_attempt = expr.eq("attempt", n(attempt));
        self.update(
            "UpdateItem (confirm attempt)",
            key(&job_pk(job_id), &task_sk(stage, partition)),
            expr,
            format!("{running} AND {this_attempt}"),
        )
        .await
    }

    async fn defer_task(&self, d: &TaskDeferral) -> Result<bool> {
        let mut expr = task_identity(
            Expr::default(),
            &d.job_id,
            d.stage,
            d.partition,
            d.expires_at,
            &["throttles"],
        )
        .set("state", state_value(TaskState::Throttled))
        .set("attempt", n(d.attempt))
        .set("retry_at_ms", n(d.retry_at_ms))
        .set("error", s(&d.error))
        .add("throttles", n(1))
        .remove("confirmed_ms");
        let running = expr.eq("state", state_value(TaskState::Running));
        let throttled = expr.eq("state", state_value(TaskState::Throttled));
        let this_attempt = expr.eq("attempt", n(d.attempt));
        let live = format!("({running} OR {throttled}) AND {this_attempt}");
        let condition = or_no_item(d.attempt == 1, live);
        self.update(
            "UpdateItem (defer task)",
            key(&job_pk(&d.job_id), &task_sk(d.stage, d.partition)),
            expr,
            condition,
        )
        .await
    }

    async fn resend_task(&self, r: &TaskResend) -> Result<bool> {
        let mut expr = task_identity(
            Expr::default(),
            &r.job_id,
            r.stage,
            r.partition,
            r.expires_at,
            &[],
        )
        .set("state", state_value(TaskState::Running))
        .set("attempt", n(r.attempt))
        .set("dispatched_ms", n(r.now_ms))
        .remove("confirmed_ms")
        .remove("retry_at_ms");
        let this_attempt = expr.eq("attempt", n(r.attempt));
        let throttled = expr.eq("state", state_value(TaskState::Throttled));
        let no_retry_at = expr.absent("retry_at_ms");
        let due = expr.cmp("retry_at_ms", "<=", n(r.now_ms));
        let running = expr.eq("state", state_value(TaskState::Running));
        let unconfirmed = expr.absent("confirmed_ms");
        let no_dispatch = expr.absent("dispatched_ms");
        let stale = expr.cmp("dispatched_ms", "<", n(r.stale_before_ms));
        let resendable = format!(
            "{this_attempt} AND (({throttled} AND ({no_retry_at} OR {due})) OR \
             ({running} AND {unconfirmed} AND ({no_dispatch} OR {stale})))"
        );
        let condition = or_no_item(r.attempt == 1, resendable);
        self.update(
            "UpdateItem (resend task)",
            key(&job_pk(&r.job_id), &task_sk(r.stage, r.partition)),
            expr,
            condition,
        )
        .await
    }

    async fn commit_task(&self, commit: &TaskCommit) -> Result<CommitOutcome> {
        let pk = job_pk(&commit.job_id);
        let output = serde_dynamo::to_attribute_value(&commit.output)
            .map_err(|e| encode_err("task output", e))?;
        let mut task = task_identity(
            Expr::default(),
            &commit.job_id,
            commit.stage,
            commit.partition,
            commit.expires_at,
            &[],
        )
        .set("state", state_value(TaskState::Succeeded))
        .set("output", output)
        .set_if_absent("attempt", n(commit.output.attempt))
        .remove("retry_at_ms");
        let not_succeeded = task.ne("state", state_value(TaskState::Succeeded));
        // The task item and its counter are written at once — one round trip on the
        // hand-off path. Each is conditional on its own: the task item takes one winning
        // attempt, the counter counts its partition once, whichever attempt gets there.
        // A counter counted by an attempt that then loses the task item is still right
        // (the partition did commit); one counted before its task item was written only
        // wakes the scheduler early, which finds the stage incomplete from the items and
        // waits for the next wake-up (this attempt's own, after its write).
        let (won, counted) = tokio::join!(
            self.update(
                "UpdateItem (commit task)",
                key(&pk, &task_sk(commit.stage, commit.partition)),
                task,
                format!("attribute_not_exists(pk) OR {not_succeeded}"),
            ),
            self.count_commit(commit)
        );
        if !won? {
            // Either another attempt won, or an earlier try of this very commit did (its
            // answer was lost): the committed object tells which.
            let current: Option<TaskRecord> = self
                .get(&pk, &task_sk(commit.stage, commit.partition))
                .await?;
            let ours = current
                .and_then(|t| t.output)
                .is_some_and(|o| o.object == commit.output.object);
            if !ours {
                return Ok(CommitOutcome::AlreadySucceeded);
            }
        }
        let counter_done = match counted {
            Ok(done) => done,
            Err(e) => {
                // The commit stands; the counter only wakes the scheduler, and the sweep
                // finds the stage complete from its task items.
                warn!(error = %e, job_id = %commit.job_id, stage = commit.stage,
                    "commit counted late: its counter update failed");
                false
            }
        };
        Ok(CommitOutcome::Committed { counter_done })
    }

    async fn confirm_dispatch(&self, c: &DispatchConfirmation) -> Result<bool> {
        let pk = job_pk(&c.job_id);
        let mut expr = Expr::default()
            .set_if_absent("remaining", n(counter_size(c.stage_tasks, c.counter)))
            .set("dispatched_ms", n(c.now_ms))
            .set("job_id", s(&c.job_id))
            .set("stage", n(c.stage))
            .set("counter", n(c.counter))
            .set("expires_at", n(c.expires_at));
        let dispatched = expr.name("dispatched_ms");
        self.update(
            "UpdateItem (confirm dispatch)",
            key(&pk, &counter_sk(c.stage, c.counter)),
            expr,
            format!("attribute_not_exists({dispatched})"),
        )
        .await
    }

    async fn fail_attempt(&self, failure: &TaskFailure) -> Result<bool> {
        let mut expr = task_identity(
            Expr::default(),
            &failure.job_id,
            failure.stage,
            failure.partition,
            failure.expires_at,
            &["failures", "retryable"],
        )
        .set("state", state_value(TaskState::Failed))
        .set("attempt", n(failure.attempt))
        .set("error", s(&failure.error))
        .set("retryable", AttributeValue::Bool(failure.retryable))
        .add("failures", n(1))
        .remove("retry_at_ms");
        let running = expr.eq("state", state_value(TaskState::Running));
        let throttled = expr.eq("state", state_value(TaskState::Throttled));
        let this_attempt = expr.eq("attempt", n(failure.attempt));
        let live = format!("({running} OR {throttled}) AND {this_attempt}");
        let condition = or_no_item(failure.attempt == 1, live);
        self.update(
            "UpdateItem (fail attempt)",
            key(
                &job_pk(&failure.job_id),
                &task_sk(failure.stage, failure.partition),
            ),
            expr,
            condition,
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
        let mut expr = Expr::default()
            .set("state", state_value(state))
            .set("finished_ms", n(now_ms));
        expr = match &error {
            Some(e) => expr.set("error", s(e)),
            None => expr.remove("error"),
        };
        let running = expr.eq("state", state_value(JobState::Running));
        let update = expr.into_update(&self.table, key(&job_pk(job_id), SK_META), running)?;
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(key(ACTIVE_PK, job_id)))
            .build()
            .map_err(|e| Error::Internal(format!("DynamoDB delete: {e}")))?;
        let state_update = Expr::default()
            .set("state", state_value(state))
            .into_update(
                &self.table,
                key(&job_pk(job_id), SK_STATE),
                "attribute_exists(pk)".into(),
            )?;
        let writes = vec![
            TransactWriteItem::builder().update(update).build(),
            TransactWriteItem::builder().update(state_update).build(),
            TransactWriteItem::builder().delete(delete).build(),
        ];
        if self
            .transact("TransactWriteItems (finish job)", writes)
            .await?
            .is_none()
        {
            return Ok(true);
        }
        // An earlier try of this very transaction may have succeeded (its answer lost).
        Ok(self
            .get_job(job_id)
            .await?
            .is_some_and(|j| j.state == state && j.finished_ms == Some(now_ms) && j.error == error))
    }

    async fn active_jobs(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        self.sort_keys(ACTIVE_PK, after, limit).await
    }

    async fn job_history(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        self.sort_keys(&history_pk(owner), after, limit).await
    }

    async fn remove_active(&self, job_id: &str) -> Result<()> {
        self.delete("DeleteItem (active index)", key(ACTIVE_PK, job_id))
            .await?;
        Ok(())
    }

    async fn keep_active(&self, job_id: &str, expires_at: u64) -> Result<()> {
        // An update creates the item when it is absent: UpdateItem, which the executor
        // (ending a job on the fast path) may already call, not PutItem.
        let expr = Expr::default().set("expires_at", n(expires_at));
        self.update(
            "UpdateItem (active index)",
            key(ACTIVE_PK, job_id),
            expr,
            "attribute_not_exists(pk) OR attribute_exists(pk)".into(),
        )
        .await?;
        Ok(())
    }

    async fn sweep_cursor(&self) -> Result<Option<String>> {
        #[derive(serde::Deserialize)]
        struct Cursor {
            cursor: String,
        }
        Ok(self
            .get::<Cursor>(SWEEP_PK, SWEEP_SK)
            .await?
            .map(|c| c.cursor))
    }

    async fn set_sweep_cursor(&self, cursor: Option<&str>) -> Result<()> {
        let Some(cursor) = cursor else {
            self.delete("DeleteItem (sweep cursor)", key(SWEEP_PK, SWEEP_SK))
                .await?;
            return Ok(());
        };
        let mut item = key(SWEEP_PK, SWEEP_SK);
        item.insert("cursor".into(), s(cursor));
        retrying("PutItem (sweep cursor)", || async {
            count(Request::DynamoDbWrite);
            self.client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item.clone()))
                .send()
                .await
                .map_err(|e| store_err("PutItem (sweep cursor)", e))
        })
        .await?;
        Ok(())
    }

    async fn put_table(&self, table: &TableRecord, replace: bool) -> Result<bool> {
        let item = to_item(CATALOG_PK, &table_sk(&table.name), table)?;
        if !replace {
            // A new entry is an update of an absent item: UpdateItem, which the executor
            // (committing a CREATE TABLE ... AS on the fast path) may call, not PutItem.
            let mut expr = Expr::default();
            for (name, value) in &item {
                if name != "pk" && name != "sk" {
                    expr = expr.set(name, value.clone());
                }
            }
            return self
                .update(
                    "UpdateItem (new table)",
                    key(CATALOG_PK, &table_sk(&table.name)),
                    expr,
                    "attribute_not_exists(pk)".into(),
                )
                .await;
        }
        retrying("PutItem (table)", || async {
            count(Request::DynamoDbWrite);
            let result = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item.clone()))
                .set_condition_expression(
                    (!replace).then(|| "attribute_not_exists(pk)".to_string()),
                )
                .send()
                .await;
            match result {
                Ok(_) => Ok(true),
                Err(e) if condition_failed(&e) => Ok(false),
                Err(e) => Err(store_err("PutItem (table)", e)),
            }
        })
        .await
    }

    async fn get_table(&self, name: &str) -> Result<Option<TableRecord>> {
        self.get(CATALOG_PK, &table_sk(name)).await
    }

    async fn list_tables(&self) -> Result<Vec<TableRecord>> {
        self.query(CATALOG_PK, "TABLE#", None, None)
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    async fn delete_table(&self, name: &str) -> Result<bool> {
        self.delete("DeleteItem (table)", key(CATALOG_PK, &table_sk(name)))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_items() {
        let task = TaskRecord {
            job_id: "j".into(),
            stage: 3,
            partition: 7,
            state: TaskState::Succeeded,
            attempt: 2,
            dispatched_ms: Some(5),
            confirmed_ms: Some(6),
            retry_at_ms: None,
            throttles: 2,
            output: Some(TaskOutput {
                attempt: 2,
                object: "p/jobs/j/stage-3/task-7/attempt-2-x.arrows".into(),
                ends: vec![0, 10, 10, 42],
                rows: 9,
                bytes: 60,
                started_ms: 1,
                finished_ms: 2,
                metrics: Vec::new(),
                requests: Default::default(),
                handoff: None,
                cpu: None,
                written: None,
            }),
            error: None,
            retryable: false,
            failures: 1,
            speculative: Some(2),
            expires_at: 99,
        };
        let item = to_item(&job_pk("j"), &task_sk(3, 7), &task).unwrap();
        assert_eq!(
            item["state"],
            s("SUCCEEDED"),
            "the attribute the stream filter reads"
        );
        assert_eq!(item["sk"], s("TASK#00003#000007"));
        let back: TaskRecord = from_item(item).unwrap();
        assert_eq!(back, task);
        let stage_state = state_value(StageState::Pending);
        assert_eq!(stage_state, s("PENDING"));
        // A counter as the store writes it: `done` is a number set.
        let mut item = key(&job_pk("j"), &counter_sk(1, 0));
        item.insert("job_id".into(), s("j"));
        item.insert("stage".into(), n(1));
        item.insert("counter".into(), n(0));
        item.insert("remaining".into(), n(0));
        item.insert(
            "done".into(),
            AttributeValue::Ns(vec!["3".into(), "1".into()]),
        );
        item.insert("last_commit_ms".into(), n(5));
        item.insert("expires_at".into(), n(9));
        let counter: CommitCounter = from_item(item).unwrap();
        assert_eq!(counter.remaining, 0);
        let mut done = counter.done.clone();
        done.sort();
        assert_eq!(done, vec![1, 3]);
    }

    #[test]
    fn error_codes_are_classified() {
        for (code, kind) in [
            (
                "ProvisionedThroughputExceededException",
                StoreErrorKind::Throttled,
            ),
            ("ThrottlingException", StoreErrorKind::Throttled),
            ("RequestLimitExceeded", StoreErrorKind::Throttled),
            ("ThrottlingError", StoreErrorKind::Throttled),
            ("TransactionConflictException", StoreErrorKind::Conflict),
            ("TransactionConflict", StoreErrorKind::Conflict),
            ("InternalServerError", StoreErrorKind::Unavailable),
            ("ValidationException", StoreErrorKind::Invalid),
            ("SerializationException", StoreErrorKind::Invalid),
            ("ResourceNotFoundException", StoreErrorKind::Invalid),
            ("AccessDeniedException", StoreErrorKind::AccessDenied),
            ("UnrecognizedClientException", StoreErrorKind::AccessDenied),
        ] {
            assert_eq!(kind_of_code(code), kind, "{code}");
        }
    }

    #[tokio::test]
    async fn only_transient_failures_are_retried() {
        let tries = std::sync::atomic::AtomicU32::new(0);
        let result: Result<()> = retrying("x", || async {
            tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(Error::store(StoreErrorKind::AccessDenied, "no"))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(tries.load(std::sync::atomic::Ordering::SeqCst), 1);
        let tries = std::sync::atomic::AtomicU32::new(0);
        let result: Result<u32> = retrying("x", || async {
            match tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => Err(Error::store(StoreErrorKind::Conflict, "busy")),
                1 => Err(Error::store(StoreErrorKind::Throttled, "slow down")),
                2 => Err(Error::store(StoreErrorKind::Unavailable, "500")),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(result.unwrap(), 3, "three transient failures, then success");
        let tries = std::sync::atomic::AtomicU32::new(0);
        let result: Result<()> = retrying("x", || async {
            tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(Error::store(StoreErrorKind::Throttled, "always"))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(tries.load(std::sync::atomic::Ordering::SeqCst), STORE_TRIES);
    }
}
