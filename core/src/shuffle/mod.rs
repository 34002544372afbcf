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
    /// The reads the task's partitions share: the slices a task reads of one producer
    /// lie back to back and are fetched together ([`SharedFetches`]).
    pub shared: Option<Arc<SharedFetches>>,
}

pub use reader::SharedFetches;

/// Tasks of a stage whose objects share one key prefix (a *shard*): a wider stage spreads
/// its objects over several, so that no prefix is asked for more than S3's per-prefix
/// request rates (3,500 PUT and 5,500 GET per second, per partitioned prefix).
pub const TASKS_PER_SHARD: u32 = 64;

/// Shards: the two hex digits after `jobs/` in every object key.
pub const SHARDS: u32 = 256;

/// The shard of a job's first objects (its plans, its one-task stages): a hash of its id,
/// so that jobs spread over the shards too.
fn job_shard(job_id: &str) -> u32 {
    // FNV-1a: stable across processes and versions, unlike std's hasher.
    let hash = job_id.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash % SHARDS
}

/// Shards a stage of `tasks` tasks spreads its objects over.
pub fn shards_for(tasks: u32) -> u32 {
    tasks.div_ceil(TASKS_PER_SHARD).clamp(1, SHARDS)
}

/// The shard of task `partition` of a stage of `stage_tasks` tasks: consecutive tasks
/// rotate over [`shards_for`] shards from the job's own.
pub fn shard_of(job_id: &str, stage_tasks: u32, partition: u32) -> u32 {
    (job_shard(job_id) + partition % shards_for(stage_tasks)) % SHARDS
}

/// Object path of one task attempt's output: `<prefix>/jobs/<shard>/<job>/stage-<s>/
/// task-<p>/attempt-<a>-<execution>.arrows`, `<shard>` two hex digits ([`shard_of`]). The
/// execution id makes even two deliveries of the same attempt write different objects, so
/// a loser can never overwrite the winner's data.
pub fn task_output_path(
    prefix: &Path,
    job_id: &str,
    (stage, stage_tasks): (u32, u32),
    partition: u32,
    attempt: u32,
    execution: &str,
) -> Path {
    job_prefix(prefix, job_id, shard_of(job_id, stage_tasks, partition))
        .join(format!("stage-{stage}").as_str())
        .join(format!("task-{partition}").as_str())
        .join(format!("attempt-{attempt}-{execution}.arrows").as_str())
}

/// Object path of a stage plan too large for its store item.
pub fn stage_plan_path(prefix: &Path, job_id: &str, stage: u32) -> Path {
    job_prefix(prefix, job_id, job_shard(job_id))
        .join("plans")
        .join(format!("stage-{stage}.plan").as_str())
}

/// Deletes the objects job `job_id` wrote, except the objects in `keep` (a succeeded
/// job's result: its final stage's committed outputs — losing attempts of that stage go
/// too); `widest` is the most tasks any of its stages ran (it says which shards to list).
/// Best effort: returns how many were deleted; lifecycle rules catch the rest.
pub async fn delete_job_objects(
    store: &dyn ObjectStore,
    prefix: &Path,
    job_id: &str,
    widest: u32,
    keep: &[String],
) -> usize {
    use futures::StreamExt;
    let keep: std::collections::HashSet<String> = keep.iter().cloned().collect();
    let base = job_shard(job_id);
    let mut deleted = 0;
    for shard in (0..shards_for(widest)).map(|i| (base + i) % SHARDS) {
        let keep = keep.clone();
        let objects = store
            .list(Some(&job_prefix(prefix, job_id, shard)))
            .filter_map(|m| async move { m.ok().map(|m| m.location) })
            .filter(move |path| {
                let doomed = !keep.contains(path.as_ref());
                async move { doomed }
            })
            .map(Ok)
            .boxed();
        deleted += store
            .delete_stream(objects)
            .filter(|r| futures::future::ready(r.is_ok()))
            .count()
            .await;
    }
    deleted
}

/// Deletes every object of the jobs in `jobs` (expired ones) in one listing of the
/// `jobs/` prefix. Best effort: returns how many were deleted.
pub async fn delete_jobs_objects(
    store: &dyn ObjectStore,
    prefix: &Path,
    jobs: &std::collections::HashSet<String>,
) -> usize {
    use futures::StreamExt;
    if jobs.is_empty() {
        return 0;
    }
    let root = prefix.clone().join("jobs");
    let depth = root.parts().count();
    let jobs = jobs.clone();
    let objects = store
        .list(Some(&root))
        .filter_map(move |m| {
            let path = m.ok().map(|m| m.location);
            // `jobs/<shard>/<job>/...`, or `jobs/<job>/...` as written before shards.
            let doomed = path.as_ref().is_some_and(|p| {
                p.parts()
                    .skip(depth)
                    .take(2)
                    .any(|part| jobs.contains(part.as_ref()))
            });
            async move { path.filter(|_| doomed) }
        })
        .map(Ok)
        .boxed();
    store
        .delete_stream(objects)
        .filter(|r| futures::future::ready(r.is_ok()))
        .count()
        .await
}

/// Prefix of the objects job `job_id` wrote under shard `shard`.
pub fn job_prefix(prefix: &Path, job_id: &str, shard: u32) -> Path {
    prefix
        .clone()
        .join("jobs")
        .join(format!("{shard:02x}").as_str())
        .join(job_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stages spread their objects over one shard per 64 tasks, from the job's own shard,
    /// wrapping at 256; narrow stages and plans stay in the job's shard.
    #[test]
    fn objects_spread_over_shards_by_stage_width() {
        assert_eq!(shards_for(0), 1);
        assert_eq!(shards_for(64), 1);
        assert_eq!(shards_for(65), 2);
        assert_eq!(shards_for(1_000), 16);
        assert_eq!(shards_for(100_000), SHARDS);
        let job = "0123456789abcdef";
        let base = job_shard(job);
        assert_eq!(shard_of(job, 10, 9), base);
        let wide: std::collections::BTreeSet<u32> =
            (0..1_000).map(|p| shard_of(job, 1_000, p)).collect();
        assert_eq!(wide.len(), 16);
        let per_shard = (0..1_000)
            .filter(|&p| shard_of(job, 1_000, p) == base)
            .count();
        assert!(per_shard <= TASKS_PER_SHARD as usize, "{per_shard}");
        let path = task_output_path(&Path::from("p"), job, (3, 1_000), 17, 2, "x");
        assert_eq!(
            path.as_ref(),
            format!(
                "p/jobs/{:02x}/{job}/stage-3/task-17/attempt-2-x.arrows",
                (base + 1) % SHARDS
            )
        );
        assert!(stage_plan_path(&Path::from("p"), job, 1)
            .as_ref()
            .starts_with(&format!("p/jobs/{base:02x}/{job}/plans/")));
    }

    /// Cleanup lists exactly the shards a job used and keeps what it is told to keep;
    /// expiry finds a job's objects in every shard in one listing.
    #[tokio::test]
    async fn cleanup_finds_a_jobs_objects_in_every_shard() {
        use object_store::memory::InMemory;
        use object_store::ObjectStoreExt;
        let store = InMemory::new();
        let prefix = Path::from("p");
        let mut paths = Vec::new();
        for job in ["job-a", "job-b"] {
            for p in 0..200 {
                let path = task_output_path(&prefix, job, (0, 200), p, 1, "x");
                store.put(&path, vec![1u8].into()).await.unwrap();
                paths.push(path);
            }
        }
        let keep = vec![paths[5].to_string()];
        let deleted = delete_job_objects(&store, &prefix, "job-a", 200, &keep).await;
        assert_eq!(deleted, 199);
        let left: Vec<_> = futures::StreamExt::collect::<Vec<_>>(store.list(Some(&prefix))).await;
        assert_eq!(left.len(), 201);
        let expired = std::collections::HashSet::from(["job-b".to_string()]);
        assert_eq!(delete_jobs_objects(&store, &prefix, &expired).await, 200);
        let left: Vec<_> = futures::StreamExt::collect::<Vec<_>>(store.list(Some(&prefix))).await;
        assert_eq!(left.len(), 1);
    }
}
