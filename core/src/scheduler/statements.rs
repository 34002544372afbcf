//! Statements the scheduler answers itself, with no executor: catalog DDL, `SHOW TABLES`
//! and other `information_schema` queries, `DESCRIBE`, and `EXPLAIN` (which also shows the
//! stage graph). Their result is written like a one-task final stage, so the result API
//! serves them like any query.

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::physical_plan::displayable;
use datafusion::prelude::SessionContext;

use super::{SubmitOptions, Submitted};
use crate::access::Caller;
use crate::plan::{self, StageSplitter};
use crate::shuffle::format::ObjectBuilder;
use crate::shuffle::task_output_path;
use crate::state::{
    JobKind, JobRecord, JobState, NewJob, StageRecord, StageState, TaskOutput, TaskRecord,
    TaskState,
};
use crate::time::now_ms;
use crate::{Error, Result, Services};

/// Most bytes a statement the scheduler answers itself (a catalog read, `DESCRIBE`)
/// may return: its rows are computed in the scheduler's own process.
pub const METADATA_RESULT_LIMIT: usize = 16 * 1024 * 1024;

/// Runs catalog DDL (`CREATE EXTERNAL TABLE`, `DROP TABLE`, `CREATE [OR REPLACE] VIEW`,
/// `DROP VIEW`) and records it as a finished job owned by the caller.
pub(super) async fn catalog(
    services: &Services,
    state: &SessionState,
    job_id: &str,
    sql: &str,
    logical: &LogicalPlan,
    options: &SubmitOptions,
) -> Result<Submitted> {
    let access = &services.config.access;
    let batches = match logical {
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(cmd)) => {
            access.check_catalog_writer(&options.caller)?;
            let record =
                crate::catalog::create_table(state, services.store.as_ref(), access, cmd, sql)
                    .await?;
            let message = match record {
                Some(r) => format!(
                    "table {} created: {} columns, {} at {}",
                    r.name,
                    plan::decode_schema(&r.schema)?.fields().len(),
                    r.format,
                    r.locations.join(", ")
                ),
                None => format!("table {} already exists; nothing changed", cmd.name),
            };
            message_batch(&message)?
        }
        LogicalPlan::Ddl(DdlStatement::DropTable(drop)) => {
            access.check_catalog_writer(&options.caller)?;
            drop_entry(services, &drop.name, drop.if_exists, false).await?
        }
        LogicalPlan::Ddl(DdlStatement::CreateView(cmd)) => {
            access.check_catalog_writer(&options.caller)?;
            let record = crate::catalog::create_view(services.store.as_ref(), cmd, sql).await?;
            message_batch(&format!(
                "view {} created: {} columns",
                record.name,
                plan::decode_schema(&record.schema)?.fields().len()
            ))?
        }
        LogicalPlan::Ddl(DdlStatement::DropView(drop)) => {
            access.check_catalog_writer(&options.caller)?;
            drop_entry(services, &drop.name, drop.if_exists, true).await?
        }
        other => {
            return Err(Error::Internal(format!(
                "{} is not catalog DDL",
                other.display()
            )))
        }
    };
    let schema = batches[0].schema();
    record_result(services, job_id, sql, &options.caller, schema, &batches).await
}

/// Drops the catalog's table (`view: false`) or view `name`, and says what happened.
async fn drop_entry(
    services: &Services,
    name: &datafusion::common::TableReference,
    if_exists: bool,
    view: bool,
) -> Result<Vec<RecordBatch>> {
    let existed =
        crate::catalog::drop_table(services.store.as_ref(), name, if_exists, view).await?;
    let kind = if view { "view" } else { "table" };
    message_batch(&if existed {
        format!("{kind} {name} dropped")
    } else {
        format!("{kind} {name} does not exist; nothing changed")
    })
}

/// The rows of `EXPLAIN`: DataFusion's logical and physical plans and the stage graph.
pub(super) async fn explain(
    services: &Services,
    state: &SessionState,
    query: &LogicalPlan,
    write: Option<crate::write::WriteTarget>,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let mut rows = Vec::new();
    let logical = plan::optimized(state, query, &services.config).await?;
    rows.push((
        "logical_plan".to_string(),
        logical.display_indent().to_string(),
    ));
    let mut physical = plan::physical_plan(state, query, &services.config).await?;
    if let Some(target) = write {
        // `EXPLAIN COPY`: the plan the write would run, its last stage writing.
        physical = crate::write::sink::writer_over(physical, Arc::new(target))?;
    }
    rows.push((
        "physical_plan".to_string(),
        displayable(physical.as_ref()).indent(false).to_string(),
    ));
    let graph = StageSplitter::split(physical, &services.config)?;
    rows.push(("distributed_plan".to_string(), graph.display()));
    let batches = explain_batch(rows)?;
    Ok((batches[0].schema(), batches))
}

/// The rows of a catalog read (`SHOW TABLES`, `information_schema`, `DESCRIBE`), run
/// here rather than distributed: under a memory pool of one task's size, until
/// `deadline`, and at most [`METADATA_RESULT_LIMIT`] bytes of rows.
pub(super) async fn metadata(
    services: &Services,
    state: &SessionState,
    logical: &LogicalPlan,
    deadline: tokio::time::Instant,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    use futures::StreamExt;
    let memory = services
        .config
        .task_memory_limit
        .unwrap_or(METADATA_RESULT_LIMIT * 8);
    let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::from_runtime_env(
        state.runtime_env(),
    )
    .with_memory_pool(Arc::new(
        datafusion::execution::memory_pool::GreedyMemoryPool::new(memory),
    ))
    .build_arc()?;
    let bounded = SessionStateBuilder::new_from_existing(state.clone())
        .with_runtime_env(runtime)
        .build();
    let ctx = SessionContext::new_with_state(bounded);
    let schema = Arc::new(logical.schema().as_arrow().clone());
    let too_long = || {
        Error::InvalidInput(
            "this catalog query ran past its time limit (max_planning_seconds, or the \
             query's max_seconds): statements about the catalog run in the scheduler and \
             must be quick"
                .into(),
        )
    };
    let run = async {
        let df = ctx.execute_logical_plan(logical.clone()).await?;
        let mut stream = df.execute_stream().await?;
        let (mut batches, mut bytes) = (Vec::new(), 0usize);
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            bytes += batch.get_array_memory_size();
            if bytes > METADATA_RESULT_LIMIT {
                return Err(Error::InvalidInput(format!(
                    "this catalog query returns more than {} MiB: statements about the \
                     catalog (information_schema, SHOW, DESCRIBE) run in the scheduler \
                     and must return little; filter it, or query tables instead",
                    METADATA_RESULT_LIMIT >> 20
                )));
            }
            batches.push(batch);
        }
        Ok::<_, Error>(batches)
    };
    let batches = tokio::time::timeout_at(deadline, run)
        .await
        .map_err(|_| too_long())??;
    Ok((schema, batches))
}

pub(super) fn message_batch(message: &str) -> Result<Vec<RecordBatch>> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "result",
        DataType::Utf8,
        false,
    )]));
    let column = StringArray::from(vec![message]);
    Ok(vec![RecordBatch::try_new(schema, vec![Arc::new(column)])?])
}

fn explain_batch(rows: Vec<(String, String)>) -> Result<Vec<RecordBatch>> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("plan_type", DataType::Utf8, false),
        Field::new("plan", DataType::Utf8, false),
    ]));
    let types = StringArray::from_iter_values(rows.iter().map(|r| r.0.as_str()));
    let plans = StringArray::from_iter_values(rows.iter().map(|r| r.1.as_str()));
    Ok(vec![RecordBatch::try_new(
        schema,
        vec![Arc::new(types), Arc::new(plans)],
    )?])
}

/// Records `batches` as the result of a finished job owned by `caller`: written like
/// the one-task final stage of a query, so the result API serves it like any other.
pub(super) async fn record_result(
    services: &Services,
    job_id: &str,
    sql: &str,
    caller: &Caller,
    schema: SchemaRef,
    batches: &[RecordBatch],
) -> Result<Submitted> {
    let started = now_ms();
    let mut builder = ObjectBuilder::new(schema.clone(), 1)?;
    for b in batches {
        builder.append(0, b)?;
    }
    let rows = builder.rows()[0];
    let object = builder.finish()?;
    let (bytes, ends) = (object.bytes(), object.ends.clone());
    let path = task_output_path(
        &services.shuffle.prefix,
        job_id,
        (0, 1, 1),
        0,
        1,
        "statement",
    );
    object.upload(&services.shuffle_store()?, &path).await?;
    let now = now_ms();
    let expires_at = services.expires_at();
    let job = JobRecord {
        task_limit: None,
        job_id: job_id.to_string(),
        sql: sql.to_string(),
        kind: JobKind::Statement,
        state: JobState::Succeeded,
        stage_count: 1,
        result_schema: plan::encode_schema(&schema)?,
        owner: caller.principal().to_string(),
        created_ms: started,
        deadline_ms: None,
        finished_ms: Some(now),
        error: None,
        requests: Default::default(),
        write: None,
        expires_at,
    };
    let stage = StageRecord {
        job_id: job_id.to_string(),
        stage: 0,
        state: StageState::Dispatched,
        tasks: 1,
        output_partitions: 1,
        inputs: vec![],
        summary: "statement (answered by the scheduler)".into(),
        scan_bytes: Vec::new(),
        switch: None,
        combines: None,
        dispatched_ms: Some(started),
        confirmed_ms: Some(started),
        decision: None,
        expires_at,
    };
    let mut task = TaskRecord::new(job_id, 0, 0, TaskState::Succeeded, 1, expires_at);
    task.dispatched_ms = Some(started);
    task.output = Some(TaskOutput {
        attempt: 1,
        object: path.to_string(),
        ends,
        rows,
        bytes,
        started_ms: started,
        finished_ms: now,
        metrics: Vec::new(),
        requests: Default::default(),
        handoff: None,
        cpu: None,
        written: None,
    });
    services
        .store
        .create_job(&NewJob {
            job,
            stages: vec![stage],
            plans: vec![],
            tasks: vec![task],
        })
        .await?;
    Ok(Submitted {
        job_id: job_id.to_string(),
        state: JobState::Succeeded,
    })
}
