//! Reading a finished job's result: the committed outputs of its final stage, in
//! partition order, as one stream of record batches.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::{StreamExt, TryStreamExt};

use crate::plan::decode_schema;
use crate::shuffle::{ReadMode, ShuffleInputs, ShuffleReaderExec};
use crate::state::{JobState, TaskOutput, TaskState};
use crate::{Error, Result, Services};

/// Opens the result of job `job_id`: its schema and a stream of its batches.
pub async fn open(
    services: &Services,
    job_id: &str,
) -> Result<(SchemaRef, SendableRecordBatchStream)> {
    let store = &services.store;
    let job = store
        .get_job(job_id)
        .await?
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
    let schema = decode_schema(&job.result_schema)?;
    let stage = job.final_stage();
    let outputs: Vec<TaskOutput> = store
        .list_tasks(job_id, stage)
        .await?
        .into_iter()
        .filter(|t| t.state == TaskState::Succeeded)
        .filter_map(|t| t.output)
        .collect();
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
    };
    let state = services.session_state(1);
    let config = state.config().clone().with_extension(Arc::new(inputs));
    let ctx = Arc::new(TaskContext::from(&state).with_session_config(config));
    let streams = (0..producers)
        .map(|p| reader.execute(p, ctx.clone()))
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    let stream = futures::stream::iter(streams).flatten();
    Ok((
        schema.clone(),
        Box::pin(RecordBatchStreamAdapter::new(
            schema,
            stream.map_err(Into::into),
        )),
    ))
}

/// Collects the whole result of a finished job.
pub async fn collect(
    services: &Services,
    job_id: &str,
) -> Result<(SchemaRef, Vec<datafusion::arrow::array::RecordBatch>)> {
    let (schema, stream) = open(services, job_id).await?;
    let batches = stream.try_collect().await?;
    Ok((schema, batches))
}
