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

/// Tasks of a stage whose objects share one key prefix (a *shard*) at most: a wider stage
/// spreads its objects over several, so that no prefix is asked for more than S3's
/// per-prefix request rates (3,500 PUT and 5,500 GET per second, per partitioned prefix).
pub const TASKS_PER_SHARD: u32 = 64;

/// Ranged GETs one shard may be asked for by a stage's readers: each reader fetches one
/// range of every producer object, so a shard of `n` producers read by `r` readers gets
/// `n × r` GETs. A stage read by many tasks therefore puts fewer producers in a shard:
/// 64 read by 64, 4 read by 1,000, 1 from 4,096 readers on (then only the 256 shards
/// bound it).
pub const READS_PER_SHARD: u32 = 4_096;

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

/// Shards a stage of `tasks` tasks whose output is read by at most `readers` tasks (its
/// output slices) spreads its objects over: one per [`TASKS_PER_SHARD`] producers, or
/// fewer producers when [`READS_PER_SHARD`] says so.
pub fn shards_for(tasks: u32, readers: u32) -> u32 {
    let producers = (READS_PER_SHARD / readers.max(1)).clamp(1, TASKS_PER_SHARD);
    tasks.div_ceil(producers).clamp(1, SHARDS)
}

/// The shard of task `partition` of a stage of `tasks` tasks read by `readers`:
/// consecutive tasks rotate over [`shards_for`] shards from the job's own.
pub fn shard_of(job_id: &str, (tasks, readers): (u32, u32), partition: u32) -> u32 {
    (job_shard(job_id) + partition % shards_for(tasks, readers)) % SHARDS
}

/// Object path of one task attempt's output: `<prefix>/jobs/<shard>/<job>/stage-<s>/
/// task-<p>/attempt-<a>-<execution>.arrows`, `<shard>` two hex digits ([`shard_of`] of
/// the stage's tasks and output slices). The
/// execution id makes even two deliveries of the same attempt write different objects, so
/// a loser can never overwrite the winner's data.
pub fn task_output_path(
    prefix: &Path,
    job_id: &str,
    (stage, tasks, readers): (u32, u32, u32),
    partition: u32,
    attempt: u32,
    execution: &str,
) -> Path {
    job_prefix(
        prefix,
        job_id,
        shard_of(job_id, (tasks, readers), partition),
    )
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
/// too); `shards` is the most shards any of its stages wrote to ([`shards_for`]), which
/// says which to list.
/// Best effort: returns how many were deleted; lifecycle rules catch the rest.
pub async fn delete_job_objects(
    store: &dyn ObjectStore,
    prefix: &Path,
    job_id: &str,
    shards: u32,
    keep: &[String],
) -> usize {
    use futures::StreamExt;
    let keep: std::collections::HashSet<String> = keep.iter().cloned().collect();
    let base = job_shard(job_id);
    let mut deleted = 0;
    for shard in (0..shards.clamp(1, SHARDS)).map(|i| (base + i) % SHARDS) {
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

    /// A stage read by many tasks puts fewer producers in a shard, so that no shard is
    /// asked for more than [`READS_PER_SHARD`] GETs: 64 producers read by 1,000 consumers
    /// were 64,000 GETs on one prefix, they are 16 shards of 4,000 now.
    #[test]
    fn many_readers_spread_a_stage_further() {
        let job = "0123456789abcdef";
        for (tasks, readers) in [
            (64, 1_000),
            (64, 64),
            (1_000, 1_000),
            (10, 4_096),
            (500, 200),
        ] {
            let shards = shards_for(tasks, readers);
            let mut per_shard = std::collections::HashMap::new();
            for p in 0..tasks {
                *per_shard
                    .entry(shard_of(job, (tasks, readers), p))
                    .or_insert(0u32) += 1;
            }
            assert_eq!(
                per_shard.len() as u32,
                shards.min(tasks),
                "{tasks} x {readers}"
            );
            let most = per_shard.values().max().copied().unwrap_or(0);
            assert!(
                most * readers <= READS_PER_SHARD.max(readers),
                "{tasks} x {readers}: {most} producers in a shard"
            );
        }
        assert_eq!(shards_for(64, 1_000), 16);
        // Past 4,096 readers a shard holds one producer; 256 shards bound the spread.
        assert_eq!(shards_for(100, 10_000), 100);
        assert_eq!(shards_for(1_000, 10_000), SHARDS);
    }

    /// Stages spread their objects over one shard per 64 tasks, from the job's own shard,
    /// wrapping at 256; narrow stages and plans stay in the job's shard.
    #[test]
    fn objects_spread_over_shards_by_stage_width() {
        assert_eq!(shards_for(0, 1), 1);
        assert_eq!(shards_for(64, 1), 1);
        assert_eq!(shards_for(65, 1), 2);
        assert_eq!(shards_for(1_000, 64), 16);
        assert_eq!(shards_for(100_000, 1), SHARDS);
        let job = "0123456789abcdef";
        let base = job_shard(job);
        assert_eq!(shard_of(job, (10, 10), 9), base);
        let wide: std::collections::BTreeSet<u32> =
            (0..1_000).map(|p| shard_of(job, (1_000, 64), p)).collect();
        assert_eq!(wide.len(), 16);
        let per_shard = (0..1_000)
            .filter(|&p| shard_of(job, (1_000, 64), p) == base)
            .count();
        assert!(per_shard <= TASKS_PER_SHARD as usize, "{per_shard}");
        let path = task_output_path(&Path::from("p"), job, (3, 1_000, 64), 17, 2, "x");
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
                // 200 tasks read by 200: 20 producers a shard, 10 shards.
                let path = task_output_path(&prefix, job, (0, 200, 200), p, 1, "x");
                store.put(&path, vec![1u8].into()).await.unwrap();
                paths.push(path);
            }
        }
        let keep = vec![paths[5].to_string()];
        assert_eq!(shards_for(200, 200), 10);
        let deleted =
            delete_job_objects(&store, &prefix, "job-a", shards_for(200, 200), &keep).await;
        assert_eq!(deleted, 199);
        let left: Vec<_> = futures::StreamExt::collect::<Vec<_>>(store.list(Some(&prefix))).await;
        assert_eq!(left.len(), 201);
        let expired = std::collections::HashSet::from(["job-b".to_string()]);
        assert_eq!(delete_jobs_objects(&store, &prefix, &expired).await, 200);
        let left: Vec<_> = futures::StreamExt::collect::<Vec<_>>(store.list(Some(&prefix))).await;
        assert_eq!(left.len(), 1);
    }
}
