//! [`DynamoDbJobStore`]: the job store on one DynamoDB table, as DESIGN.md models it.
//!
//! | item | pk | sk |
//! |---|---|---|
//! | job | `JOB#<id>` | `META` |
//! | stage | `JOB#<id>` | `STAGE#<n>` |
//! | task | `JOB#<id>` | `TASK#<stage>#<partition>` |
//! | active-job index | `ACTIVE` | `<id>` |
//! | catalog table | `CATALOG` | `TABLE#<name>` |
//!
//! Every transition is a conditional write; the task commit is one `TransactWriteItems`
//! (task succeeded + stage `remaining` decremented); the only queries are by partition
//! key (one job, the active index, the catalog) — no scans. Items carry `expires_at` for
//! the table's TTL. Attribute names are the record fields (see `lambdafusion::state`).

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, PutRequest, ReturnValue, TransactWriteItem, Update, WriteRequest,
};
use aws_sdk_dynamodb::Client;
use lambdafusion::state::*;
use lambdafusion::{Error, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::metrics::{count, Request};

type Item = HashMap<String, AttributeValue>;

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn store_err<E: std::error::Error + 'static, R: std::fmt::Debug>(
    op: &str,
    e: SdkError<E, R>,
) -> Error {
    Error::Store(format!("DynamoDB {op}: {}", DisplayErrorContext(e)))
}

fn to_item<T: Serialize>(pk: &str, sk: &str, record: &T) -> Result<Item> {
    let mut item: Item = serde_dynamo::to_item(record)
        .map_err(|e| Error::Store(format!("cannot encode {sk} item: {e}")))?;
    item.insert("pk".into(), s(pk));
    item.insert("sk".into(), s(sk));
    Ok(item)
}

fn from_item<T: DeserializeOwned>(item: Item) -> Result<T> {
    let sk = match item.get("sk") {
        Some(AttributeValue::S(sk)) => sk.clone(),
        _ => "?".into(),
    };
    serde_dynamo::from_item(item).map_err(|e| Error::Store(format!("corrupt {sk} item: {e}")))
}

fn key(pk: &str, sk: &str) -> Item {
    HashMap::from([("pk".to_string(), s(pk)), ("sk".to_string(), s(sk))])
}

/// Builds update and condition expressions with every attribute name and value bound
/// to a placeholder (so reserved words such as `state` or `partition` are never a problem).
#[derive(Default)]
struct Expr {
    set: Vec<String>,
    add: Vec<String>,
    remove: Vec<String>,
    names: HashMap<String, String>,
    values: Item,
}

impl Expr {
    fn name(&mut self, field: &str) -> String {
        let placeholder = format!("#{field}");
        self.names.insert(placeholder.clone(), field.to_string());
        placeholder
    }

    fn value(&mut self, v: AttributeValue) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), v);
        placeholder
    }

    fn set(mut self, field: &str, v: AttributeValue) -> Self {
        let (f, v) = (self.name(field), self.value(v));
        self.set.push(format!("{f} = {v}"));
        self
    }

    fn set_if_absent(mut self, field: &str, v: AttributeValue) -> Self {
        let (f, v) = (self.name(field), self.value(v));
        self.set.push(format!("{f} = if_not_exists({f}, {v})"));
        self
    }

    fn add(mut self, field: &str, v: AttributeValue) -> Self {
        let (f, v) = (self.name(field), self.value(v));
        self.add.push(format!("{f} {v}"));
        self
    }

    fn remove(mut self, field: &str) -> Self {
        let f = self.name(field);
        self.remove.push(f);
        self
    }

    /// `field = value` for conditions.
    fn eq(&mut self, field: &str, v: AttributeValue) -> String {
        let (f, v) = (self.name(field), self.value(v));
        format!("{f} = {v}")
    }

    /// `field <> value` for conditions.
    fn ne(&mut self, field: &str, v: AttributeValue) -> String {
        let (f, v) = (self.name(field), self.value(v));
        format!("{f} <> {v}")
    }

    fn update_expression(&self) -> String {
        let mut parts = Vec::new();
        if !self.set.is_empty() {
            parts.push(format!("SET {}", self.set.join(", ")));
        }
        if !self.add.is_empty() {
            parts.push(format!("ADD {}", self.add.join(", ")));
        }
        if !self.remove.is_empty() {
            parts.push(format!("REMOVE {}", self.remove.join(", ")));
        }
        parts.join(" ")
    }

    fn into_update(self, table: &str, key: Item, condition: String) -> Result<Update> {
        Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression(self.update_expression())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(self.names))
            .set_expression_attribute_values(Some(self.values))
            .build()
            .map_err(|e| Error::Internal(format!("DynamoDB update: {e}")))
    }
}

fn state_value<T: Serialize>(state: T) -> AttributeValue {
    serde_dynamo::to_attribute_value(state).unwrap_or_else(|_| s("?"))
}

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

    async fn get<T: DeserializeOwned>(&self, pk: &str, sk: &str) -> Result<Option<T>> {
        count(Request::DynamoDbRead);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(pk, sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_err("GetItem", e))?;
        out.item.map(from_item).transpose()
    }

    /// Every item under `pk` whose sort key starts with `prefix`, in sort-key order.
    async fn query(&self, pk: &str, prefix: &str) -> Result<Vec<Item>> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let mut q = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .expression_attribute_values(":pk", s(pk))
                .set_exclusive_start_key(start);
            q = if prefix.is_empty() {
                q.key_condition_expression("pk = :pk")
            } else {
                q.key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
                    .expression_attribute_values(":prefix", s(prefix))
            };
            count(Request::DynamoDbRead);
            let out = q.send().await.map_err(|e| store_err("Query", e))?;
            items.extend(out.items.unwrap_or_default());
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(items);
            }
        }
    }

    /// Runs a conditional update; `Ok(false)` when the condition failed.
    async fn update(&self, op: &str, key: Item, expr: Expr, condition: String) -> Result<bool> {
        count(Request::DynamoDbWrite);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .update_expression(expr.update_expression())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(expr.names))
            .set_expression_attribute_values(Some(expr.values))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(store_err(op, e)),
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
            let mut pause = Duration::from_millis(20);
            for attempt in 0.. {
                count(Request::DynamoDbWrite);
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, requests)
                    .send()
                    .await
                    .map_err(|e| store_err("BatchWriteItem", e))?;
                requests = out
                    .unprocessed_items
                    .and_then(|mut u| u.remove(&self.table))
                    .unwrap_or_default();
                if requests.is_empty() {
                    break;
                }
                if attempt == 8 {
                    return Err(Error::Store(format!(
                        "DynamoDB BatchWriteItem: {} items still unprocessed after retries",
                        requests.len()
                    )));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
        Ok(())
    }

    /// Runs a transaction; `Ok(Some(reasons))` when a condition cancelled it, with the
    /// cancellation code per item.
    async fn transact(
        &self,
        op: &str,
        items: Vec<TransactWriteItem>,
    ) -> Result<Option<Vec<String>>> {
        count(Request::DynamoDbWrite);
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
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
                }
                Err(store_err(op, e))
            }
        }
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
}

#[async_trait]
impl JobStore for DynamoDbJobStore {
    async fn create_job(
        &self,
        job: &JobRecord,
        stages: &[StageRecord],
        tasks: &[TaskRecord],
    ) -> Result<()> {
        let pk = job_pk(&job.job_id);
        let mut items = Vec::with_capacity(stages.len() + tasks.len());
        for stage in stages {
            items.push(to_item(&pk, &stage_sk(stage.stage), stage)?);
        }
        for task in tasks {
            items.push(to_item(&pk, &task_sk(task.stage, task.partition), task)?);
        }
        // Stages and tasks first: the job item, written last and only if absent, makes
        // the job exist; a crash before it leaves items that only the TTL will notice.
        self.batch_put(items).await?;
        let mut writes = vec![self.put(
            to_item(&pk, SK_META, job)?,
            Some("attribute_not_exists(pk)"),
        )?];
        if job.state == JobState::Running {
            let active = HashMap::from([
                ("pk".to_string(), s(ACTIVE_PK)),
                ("sk".to_string(), s(&job.job_id)),
                ("expires_at".to_string(), n(job.expires_at)),
            ]);
            writes.push(self.put(active, None)?);
        }
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

    async fn load_job(&self, job_id: &str) -> Result<Option<JobSnapshot>> {
        let mut job = None;
        let mut stages = Vec::new();
        let mut tasks = Vec::new();
        for item in self.query(&job_pk(job_id), "").await? {
            match item.get("sk") {
                Some(AttributeValue::S(sk)) if sk == SK_META => job = Some(from_item(item)?),
                Some(AttributeValue::S(sk)) if sk.starts_with("STAGE#") => {
                    stages.push(from_item(item)?)
                }
                Some(AttributeValue::S(sk)) if sk.starts_with("TASK#") => {
                    tasks.push(from_item(item)?)
                }
                _ => {}
            }
        }
        Ok(job.map(|job| JobSnapshot { job, stages, tasks }))
    }

    async fn get_stage(&self, job_id: &str, stage: u32) -> Result<Option<StageRecord>> {
        self.get(&job_pk(job_id), &stage_sk(stage)).await
    }

    async fn get_task(
        &self,
        job_id: &str,
        stage: u32,
        partition: u32,
    ) -> Result<Option<TaskRecord>> {
        self.get(&job_pk(job_id), &task_sk(stage, partition)).await
    }

    async fn list_tasks(&self, job_id: &str, stage: u32) -> Result<Vec<TaskRecord>> {
        self.query(&job_pk(job_id), &task_sk_prefix(stage))
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    async fn claim_stage(&self, job_id: &str, stage: u32, now_ms: u64) -> Result<bool> {
        let mut expr = Expr::default()
            .set("state", state_value(StageState::Dispatched))
            .set("dispatched_ms", n(now_ms));
        let condition = expr.eq("state", state_value(StageState::Pending));
        self.update(
            "UpdateItem (claim stage)",
            key(&job_pk(job_id), &stage_sk(stage)),
            expr,
            condition,
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
        let mut expr = Expr::default()
            .set("state", state_value(TaskState::Running))
            .set("attempt", n(attempt))
            .set("dispatched_ms", n(now_ms))
            .set("job_id", s(job_id))
            .set("stage", n(stage))
            .set("partition", n(partition))
            .set("expires_at", n(expires_at))
            .set_if_absent("failures", n(0))
            .set_if_absent("retryable", AttributeValue::Bool(false));
        let not_succeeded = expr.ne("state", state_value(TaskState::Succeeded));
        let previous = expr.eq("attempt", n(attempt.saturating_sub(1)));
        let condition = if attempt == 2 {
            // Attempt 1 left no item unless it failed.
            format!("attribute_not_exists(pk) OR ({not_succeeded} AND {previous})")
        } else {
            format!("{not_succeeded} AND {previous}")
        };
        self.update(
            "UpdateItem (start attempt)",
            key(&job_pk(job_id), &task_sk(stage, partition)),
            expr,
            condition,
        )
        .await
    }

    async fn commit_task(&self, commit: &TaskCommit) -> Result<CommitOutcome> {
        let pk = job_pk(&commit.job_id);
        let output = serde_dynamo::to_attribute_value(&commit.output)
            .map_err(|e| Error::Store(format!("cannot encode task output: {e}")))?;
        let mut task = Expr::default()
            .set("state", state_value(TaskState::Succeeded))
            .set("output", output)
            .set("job_id", s(&commit.job_id))
            .set("stage", n(commit.stage))
            .set("partition", n(commit.partition))
            .set("expires_at", n(commit.expires_at))
            .set_if_absent("attempt", n(commit.output.attempt))
            .set_if_absent("failures", n(0))
            .set_if_absent("retryable", AttributeValue::Bool(false));
        let not_succeeded = task.ne("state", state_value(TaskState::Succeeded));
        let task = task.into_update(
            &self.table,
            key(&pk, &task_sk(commit.stage, commit.partition)),
            format!("attribute_not_exists(pk) OR {not_succeeded}"),
        )?;
        let stage = Expr::default()
            .add("remaining", n(-1))
            .set("last_commit_ms", n(commit.now_ms))
            .into_update(
                &self.table,
                key(&pk, &stage_sk(commit.stage)),
                "attribute_exists(pk)".into(),
            )?;
        let writes = vec![
            TransactWriteItem::builder().update(task).build(),
            TransactWriteItem::builder().update(stage).build(),
        ];
        match self
            .transact("TransactWriteItems (commit task)", writes)
            .await?
        {
            None => {}
            Some(reasons)
                if reasons.first().map(String::as_str) == Some("ConditionalCheckFailed") =>
            {
                return Ok(CommitOutcome::AlreadySucceeded)
            }
            Some(_) => {
                return Err(Error::NotFound(format!(
                    "stage {} of job {}",
                    commit.stage, commit.job_id
                )))
            }
        }
        // Transactions return no values: read the counter back, strongly consistent.
        let stage: StageRecord =
            self.get(&pk, &stage_sk(commit.stage))
                .await?
                .ok_or_else(|| {
                    Error::NotFound(format!("stage {} of job {}", commit.stage, commit.job_id))
                })?;
        Ok(CommitOutcome::Committed {
            remaining: stage.remaining,
        })
    }

    async fn fail_attempt(&self, failure: &TaskFailure) -> Result<bool> {
        let mut expr = Expr::default()
            .set("state", state_value(TaskState::Failed))
            .set("attempt", n(failure.attempt))
            .set("error", s(&failure.error))
            .set("retryable", AttributeValue::Bool(failure.retryable))
            .set("job_id", s(&failure.job_id))
            .set("stage", n(failure.stage))
            .set("partition", n(failure.partition))
            .set("expires_at", n(failure.expires_at))
            .add("failures", n(1));
        let running = expr.eq("state", state_value(TaskState::Running));
        let this_attempt = expr.eq("attempt", n(failure.attempt));
        let condition = if failure.attempt == 1 {
            format!("attribute_not_exists(pk) OR ({running} AND {this_attempt})")
        } else {
            format!("{running} AND {this_attempt}")
        };
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
        expr = match error {
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
        let writes = vec![
            TransactWriteItem::builder().update(update).build(),
            TransactWriteItem::builder().delete(delete).build(),
        ];
        Ok(self
            .transact("TransactWriteItems (finish job)", writes)
            .await?
            .is_none())
    }

    async fn active_jobs(&self) -> Result<Vec<String>> {
        Ok(self
            .query(ACTIVE_PK, "")
            .await?
            .into_iter()
            .filter_map(|item| match item.get("sk") {
                Some(AttributeValue::S(id)) => Some(id.clone()),
                _ => None,
            })
            .collect())
    }

    async fn remove_active(&self, job_id: &str) -> Result<()> {
        count(Request::DynamoDbWrite);
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(ACTIVE_PK, job_id)))
            .send()
            .await
            .map_err(|e| store_err("DeleteItem", e))?;
        Ok(())
    }

    async fn put_table(&self, table: &TableRecord, replace: bool) -> Result<bool> {
        count(Request::DynamoDbWrite);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(to_item(CATALOG_PK, &table_sk(&table.name), table)?))
            .set_condition_expression((!replace).then(|| "attribute_not_exists(pk)".to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(store_err("PutItem", e)),
        }
    }

    async fn get_table(&self, name: &str) -> Result<Option<TableRecord>> {
        self.get(CATALOG_PK, &table_sk(name)).await
    }

    async fn list_tables(&self) -> Result<Vec<TableRecord>> {
        self.query(CATALOG_PK, "TABLE#")
            .await?
            .into_iter()
            .map(from_item)
            .collect()
    }

    async fn delete_table(&self, name: &str) -> Result<bool> {
        count(Request::DynamoDbWrite);
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key(CATALOG_PK, &table_sk(name))))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| store_err("DeleteItem", e))?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
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
            output: Some(TaskOutput {
                attempt: 2,
                object: "p/jobs/j/stage-3/task-7/attempt-2-x.arrows".into(),
                ends: vec![0, 10, 10, 42],
                rows: 9,
                bytes: 60,
                started_ms: 1,
                finished_ms: 2,
            }),
            error: None,
            retryable: false,
            failures: 1,
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
    }

    #[test]
    fn expressions_bind_every_name_and_value() {
        let mut e = Expr::default()
            .set("state", s("X"))
            .add("remaining", n(-1))
            .remove("error");
        let cond = e.eq("state", s("Y"));
        assert_eq!(
            e.update_expression(),
            "SET #state = :v0 ADD #remaining :v1 REMOVE #error"
        );
        assert_eq!(cond, "#state = :v2");
        assert_eq!(e.values.len(), 3);
        assert_eq!(e.names.len(), 3);
    }
}

/// The DynamoDB actions each [`JobStore`] operation of [`DynamoDbJobStore`] performs —
/// what the IAM policy of a function calling it must allow. (Transactions count as the
/// actions of their parts.) `tests/tests/iam_contract.rs` records which operations each
/// function performs and holds the result against [`crate::contract`].
pub fn actions_of(operation: &str) -> &'static [&'static str] {
    match operation {
        "create_job" => &["dynamodb:BatchWriteItem", "dynamodb:PutItem"],
        "get_job" | "get_stage" | "get_task" | "get_table" => &["dynamodb:GetItem"],
        "load_job" | "list_tasks" | "active_jobs" | "list_tables" => &["dynamodb:Query"],
        "claim_stage" | "start_attempt" | "fail_attempt" => &["dynamodb:UpdateItem"],
        "commit_task" => &["dynamodb:UpdateItem", "dynamodb:GetItem"],
        "finish_job" => &["dynamodb:UpdateItem", "dynamodb:DeleteItem"],
        "remove_active" | "delete_table" => &["dynamodb:DeleteItem"],
        "put_table" => &["dynamodb:PutItem"],
        other => panic!("unknown job store operation {other}"),
    }
}

#[cfg(test)]
mod contract_tests {
    use std::collections::BTreeSet;

    use super::actions_of;
    use crate::contract::{EXECUTOR_TABLE_ACTIONS, SCHEDULER_TABLE_ACTIONS};

    const OPERATIONS: &[&str] = &[
        "create_job",
        "get_job",
        "load_job",
        "get_stage",
        "get_task",
        "list_tasks",
        "claim_stage",
        "start_attempt",
        "commit_task",
        "fail_attempt",
        "finish_job",
        "active_jobs",
        "remove_active",
        "put_table",
        "get_table",
        "list_tables",
        "delete_table",
    ];

    /// The SDK calls in this file, as IAM actions.
    fn actions_in_source() -> BTreeSet<&'static str> {
        let source = include_str!("store.rs");
        let source = &source[..source.find("pub fn actions_of").expect("marker")];
        [
            (".get_item()", "dynamodb:GetItem"),
            (".query()", "dynamodb:Query"),
            (".update_item()", "dynamodb:UpdateItem"),
            (".put_item()", "dynamodb:PutItem"),
            (".delete_item()", "dynamodb:DeleteItem"),
            (".batch_write_item()", "dynamodb:BatchWriteItem"),
            ("Put::builder()", "dynamodb:PutItem"),
            ("Update::builder()", "dynamodb:UpdateItem"),
            ("Delete::builder()", "dynamodb:DeleteItem"),
        ]
        .into_iter()
        .filter(|(call, _)| source.contains(call))
        .map(|(_, action)| action)
        .collect()
    }

    #[test]
    fn every_operation_is_mapped_and_every_call_is_in_the_contract() {
        let mapped: BTreeSet<&str> = OPERATIONS
            .iter()
            .flat_map(|op| actions_of(op).iter().copied())
            .collect();
        assert_eq!(
            mapped,
            actions_in_source(),
            "actions_of() and the SDK calls in store.rs disagree"
        );
        let granted: BTreeSet<&str> = SCHEDULER_TABLE_ACTIONS
            .iter()
            .chain(EXECUTOR_TABLE_ACTIONS)
            .copied()
            .collect();
        assert_eq!(
            mapped, granted,
            "the contract grants exactly what the store calls"
        );
        assert!(
            !include_str!("store.rs").contains(&format!(".{}()", "scan")),
            "no scans on any path"
        );
    }
}
