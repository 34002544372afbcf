//! Reading a finished job's result: the committed outputs of its final stage, in
//! partition order, as one stream of record batches.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::{StreamExt, TryStreamExt};

use crate::access::Caller;
use crate::plan::decode_schema;
use crate::shuffle::{ReadMode, ShuffleInputs, ShuffleReaderExec};
use crate::state::{JobKind, JobState, TaskOutput, TaskState};
use crate::{Error, Result, Services};

/// The finished job's record and its final stage's committed outputs, in partition order,
/// for a caller who may see the job. A result whose outputs are not all committed is
/// refused rather than served short.
async fn final_outputs(
    services: &Services,
    job_id: &str,
    caller: &Caller,
) -> Result<(crate::state::JobRecord, Vec<TaskOutput>)> {
    let store = &services.store;
    let job = store
        .get_job(job_id)
        .await?
        .filter(|j| services.config.access.can_read(caller, &j.owner))
        .ok_or_else(|| Error::NotFound(format!("query {job_id}")))?;
    match job.state {
        JobState::Succeeded => {}
        JobState::Running => {
            return Err(Error::Conflict(format!(
                "query {job_id} is still running; its result is not ready"
            )))
        }
        state => {
            return Err(Error::Conflict(format!(
                "query {job_id} {}: {}",
                state.as_str(),
                job.error.as_deref().unwrap_or("no result")
            )))
        }
    }
    let stage = job.final_stage();
    let expected = store
        .get_stage(job_id, stage)
        .await?
        .map_or(0, |s| s.tasks as usize);
    let tasks = store.list_tasks(job_id, stage).await?;
    let outputs: Vec<TaskOutput> = tasks
        .iter()
        .filter(|t| t.state == TaskState::Succeeded)
        .filter_map(|t| t.output.clone())
        .collect();
    let partitions: Vec<u32> = tasks
        .iter()
        .filter(|t| t.state == TaskState::Succeeded && t.output.is_some())
        .map(|t| t.partition)
        .collect();
    if outputs.len() != expected || partitions.iter().enumerate().any(|(i, p)| *p != i as u32) {
        return Err(Error::Internal(format!(
            "the result of query {job_id} is incomplete: {} of {expected} task outputs of \
             its final stage are committed",
            outputs.len()
        )));
    }
    Ok((job, outputs))
}

/// Opens the result of job `job_id` for `caller`: its schema and a stream of its batches.
pub async fn open(
    services: &Services,
    job_id: &str,
    caller: &Caller,
) -> Result<(SchemaRef, SendableRecordBatchStream)> {
    let (job, outputs) = final_outputs(services, job_id, caller).await?;
    let schema = decode_schema(&job.result_schema)?;
    if job.kind == JobKind::Analyze {
        let batch = analyzed(services, job_id, schema.clone()).await?;
        let stream = futures::stream::iter([Ok(batch)]);
        return Ok((
            schema.clone(),
            Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
        ));
    }
    if job.kind == JobKind::Write {
        let target = job
            .write
            .as_ref()
            .ok_or_else(|| Error::Internal(format!("write job {job_id} has no write target")))?;
        let files = crate::write::written_files(services, job.final_stage(), outputs).await?;
        let batch = crate::write::summary(target, &files)?;
        let schema = batch.schema();
        let stream = futures::stream::iter([Ok(batch)]);
        return Ok((
            schema.clone(),
            Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
        ));
    }
    let stream = read_outputs(services, job.final_stage(), outputs, schema.clone())?;
    Ok((schema, stream))
}

/// The rows of committed `outputs` of `stage` (whose rows have `schema`), in order.
pub fn read_outputs(
    services: &Services,
    stage: u32,
    outputs: Vec<TaskOutput>,
    schema: SchemaRef,
) -> Result<SendableRecordBatchStream> {
    let producers = outputs.len();
    let reader = Arc::new(ShuffleReaderExec::new(
        stage,
        producers,
        ReadMode::Gather,
        schema.clone(),
        None,
    ));
    let inputs = ShuffleInputs {
        store: services.shuffle_store()?,
        stages: HashMap::from([(stage, outputs)]),
        fetch_concurrency: 4,
        shared: None,
    };
    // A context of its own, without a session state's functions: reading shuffle
    // objects needs none, and building a state costs half a millisecond per result.
    let config = crate::plan::session_config(&services.config, 1).with_extension(Arc::new(inputs));
    let ctx = Arc::new(TaskContext::new(
        None,
        "result".into(),
        config,
        Default::default(),
        Default::default(),
        Default::default(),
        Default::default(),
        services.runtime.clone(),
    ));
    let streams = (0..producers)
        .map(|p| reader.execute(p, ctx.clone()))
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    let stream = futures::stream::iter(streams).flatten();
    Ok(Box::pin(RecordBatchStreamAdapter::new(
        schema,
        stream.map_err(Into::into),
    )))
}

/// The result of a finished `EXPLAIN ANALYZE` job: its stage plans with the metrics its
/// tasks recorded ([`crate::analyze::render`]).
async fn analyzed(
    services: &Services,
    job_id: &str,
    schema: SchemaRef,
) -> Result<datafusion::arrow::array::RecordBatch> {
    let snapshot = services
        .store
        .load_job(job_id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("query {job_id}")))?;
    let ctx = services.session_state(1).task_ctx();
    let mut plans = Vec::with_capacity(snapshot.stages.len());
    for stage in &snapshot.stages {
        plans.push(crate::plan::read_stage_plan(services, job_id, stage.stage, &ctx).await?);
    }
    // Show the plan each stage's tasks ran (stages fused into it, a switched join),
    // which their figures describe.
    let stored: std::collections::HashMap<u32, _> = snapshot
        .stages
        .iter()
        .zip(&plans)
        .map(|(stage, plan)| (stage.stage, plan.clone()))
        .collect();
    for (stage, plan) in snapshot.stages.iter().zip(plans.iter_mut()) {
        *plan = crate::plan::adaptive::task_plan(stage, plan.clone(), &stored)?;
    }
    crate::analyze::render(&snapshot, &plans, schema, &services.config)
}

/// Collects the whole result of a finished job (as the embedded engine's own caller).
pub async fn collect(
    services: &Services,
    job_id: &str,
) -> Result<(SchemaRef, Vec<datafusion::arrow::array::RecordBatch>)> {
    let (schema, stream) = open(services, job_id, &Caller::local()).await?;
    let batches = stream.try_collect().await?;
    Ok((schema, batches))
}

/// One downloadable piece of a result: an Arrow IPC stream at `url`, bytes
/// `start..end` (a ranged GET), holding `rows` rows. Pieces concatenate in order.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResultPiece {
    /// Presigned GET URL of the object holding the piece.
    pub url: String,
    /// First byte of the piece.
    pub start: u64,
    /// End (exclusive) of the piece.
    pub end: u64,
}

/// A result as presigned downloads, for results too large for one HTTP response.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResultObjects {
    /// Query id.
    pub id: String,
    /// `arrow-ipc-stream`: every piece is a complete Arrow IPC stream (LZ4-compressed).
    pub format: String,
    /// Seconds the URLs stay valid.
    pub expires_in_secs: u64,
    /// The pieces, in result order; empty pieces are left out.
    pub pieces: Vec<ResultPiece>,
}

/// Presigned URLs for every non-empty slice of the result of `job_id`, for `caller`,
/// valid for `expires` (already clamped by the access policy).
pub async fn objects(
    services: &Services,
    job_id: &str,
    caller: &Caller,
    expires: std::time::Duration,
) -> Result<ResultObjects> {
    let (job, outputs) = final_outputs(services, job_id, caller).await?;
    if job.kind == JobKind::Analyze {
        return Err(Error::InvalidInput(format!(
            "query {job_id} is an EXPLAIN ANALYZE: its result is the annotated plan, read it \
             from /v1/queries/{job_id}/result"
        )));
    }
    let presigner = services.presigner.as_ref().ok_or_else(|| {
        Error::InvalidInput(format!(
            "this server cannot presign downloads; read the rows from /v1/queries/{job_id}/result"
        ))
    })?;
    let mut pieces = Vec::new();
    for output in &outputs {
        let path = object_store::path::Path::from(output.object.as_str());
        let url = presigner
            .signed_url(http::Method::GET, &path, expires)
            .await?;
        for slice in 0..output.ends.len() {
            let range = output.slice(slice)?;
            if !range.is_empty() {
                pieces.push(ResultPiece {
                    url: url.to_string(),
                    start: range.start,
                    end: range.end,
                });
            }
        }
    }
    Ok(ResultObjects {
        id: job_id.to_string(),
        format: "arrow-ipc-stream".into(),
        expires_in_secs: expires.as_secs(),
        pieces,
    })
}
