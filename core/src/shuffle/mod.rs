//! Shuffle through object storage.
//!
//! A task attempt writes **one object** holding every output partition ("slice") back to
//! back, each slice a self-contained Arrow IPC stream, followed by an index of slice end
//! offsets ([`format`]). The slice ends also go into the task's completion record, so a
//! consumer fetches exactly its slice with one ranged GET per producer and skips empty
//! slices without any request. [`ShuffleWriterExec`] is the root of every stage plan;
//! [`ShuffleReaderExec`] is a leaf of every stage that reads another stage. [`codec`]
//! teaches datafusion-proto to encode both.

pub mod codec;
pub mod format;
mod range;
mod reader;
mod writer;

use std::collections::HashMap;
use std::sync::Arc;

use object_store::path::Path;
use object_store::ObjectStore;

pub use codec::LambdaFusionCodec;
pub use range::PartitionRangeExec;
pub use reader::{ReadMode, ShuffleReaderExec, BYTES_READ, FETCHES};
pub use writer::{ShuffleWriterExec, WriteSummary, BYTES_WRITTEN, UPLOAD_TIME};

use crate::state::TaskOutput;

/// Where a stage's readers find their input, handed to DataFusion as a session-config
/// extension of the task's [`TaskContext`](datafusion::execution::TaskContext).
#[derive(Debug, Clone)]
pub struct ShuffleInputs {
    /// The store holding shuffle objects.
    pub store: Arc<dyn ObjectStore>,
    /// Committed outputs of each input stage, indexed by producer partition.
    pub stages: HashMap<u32, Vec<TaskOutput>>,
    /// Concurrent slice fetches per reader partition.
    pub fetch_concurrency: usize,
}

/// Object path of one task attempt's output: `<prefix>/jobs/<job>/stage-<s>/task-<p>/
/// attempt-<a>-<execution>.arrows`. The execution id makes even two deliveries of the same
/// attempt write different objects, so a loser can never overwrite the winner's data.
pub fn task_output_path(
    prefix: &Path,
    job_id: &str,
    stage: u32,
    partition: u32,
    attempt: u32,
    execution: &str,
) -> Path {
    job_prefix(prefix, job_id)
        .join(format!("stage-{stage}").as_str())
        .join(format!("task-{partition}").as_str())
        .join(format!("attempt-{attempt}-{execution}.arrows").as_str())
}

/// Object path of a stage plan too large for its store item.
pub fn stage_plan_path(prefix: &Path, job_id: &str, stage: u32) -> Path {
    job_prefix(prefix, job_id)
        .join("plans")
        .join(format!("stage-{stage}.plan").as_str())
}

/// Deletes the objects job `job_id` wrote, except the objects in `keep` (a succeeded
/// job's result: its final stage's committed outputs — losing attempts of that stage go
/// too). Best effort: returns how many were deleted; lifecycle rules catch the rest.
pub async fn delete_job_objects(
    store: &dyn ObjectStore,
    prefix: &Path,
    job_id: &str,
    keep: &[String],
) -> usize {
    use futures::StreamExt;
    let prefix = job_prefix(prefix, job_id);
    let keep: std::collections::HashSet<String> = keep.iter().cloned().collect();
    let objects = store
        .list(Some(&prefix))
        .filter_map(|m| async move { m.ok().map(|m| m.location) })
        .filter(move |path| {
            let doomed = !keep.contains(path.as_ref());
            async move { doomed }
        })
        .map(Ok)
        .boxed();
    store
        .delete_stream(objects)
        .filter(|r| futures::future::ready(r.is_ok()))
        .count()
        .await
}

/// Prefix of every object a job wrote.
pub fn job_prefix(prefix: &Path, job_id: &str) -> Path {
    prefix.clone().join("jobs").join(job_id)
}
