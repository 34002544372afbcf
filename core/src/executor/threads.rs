//! The threads a task runs on, and the CPU time it used.
//!
//! A task's plan runs on a tokio runtime of its own with as many worker threads as the
//! task may use ([`TaskThreads::for_stage`]): on Lambda the function's vCPUs (one task
//! per process), embedded its share of the machine's cores among the tasks running
//! beside it. When every worker has stopped, the runtime's threads' CPU time is the
//! task's own, whatever else the process runs beside it ([`run_measured`]). HTTP
//! requests the task's scans make run on the process's runtime (the S3 stores spawn
//! their connections there), so a task's runtime can end without breaking pooled
//! connections.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::{Error, Result};

/// How many threads a task may use: the cores the process has, shared by the tasks it
/// runs at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskThreads {
    /// Cores (vCPUs) the process may use.
    pub cores: usize,
    /// Tasks the process runs at once (1 on Lambda; the function slots embedded).
    pub slots: usize,
}

impl TaskThreads {
    /// One task at a time on every core this process sees (a Lambda function: its
    /// vCPUs, by its memory size).
    pub fn process() -> Self {
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            slots: 1,
        }
    }

    /// `slots` tasks at once sharing this process's cores (the embedded engine).
    pub fn shared(slots: usize) -> Self {
        Self {
            slots: slots.max(1),
            ..Self::process()
        }
    }

    /// Threads for a task of a stage of `tasks` tasks: `set` (the `task_threads`
    /// setting) when given, else the cores shared by the tasks that run at once — every
    /// core for a stage of one task, an equal share when the stage fills every slot — at
    /// least one. Embedded, a task of a stage on the large executor counts as `weight`
    /// slots (the sizes' memory ratio): its share is that many slots' (at most every
    /// core). On Lambda the function's own vCPUs already say its size.
    pub fn for_stage(&self, tasks: u32, set: Option<usize>, weight: usize) -> usize {
        let running = self.slots.min(tasks.max(1) as usize).max(1);
        let share = (self.cores * weight.clamp(1, self.slots) / running).min(self.cores);
        set.unwrap_or(share).max(1)
    }
}

/// CPU time the calling thread has used so far (ns); `None` where the platform cannot
/// tell.
fn thread_cpu_ns() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// What [`run_measured`] reports beside the future's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    /// Worker threads the task ran on.
    pub threads: usize,
    /// CPU time of all its runtime's threads (ms); `None` where it cannot be measured (a
    /// thread that did not stop within the shutdown wait, a platform without thread
    /// clocks).
    pub cpu_ms: Option<u64>,
}

/// How long a finished task's runtime may take to stop its threads before its CPU time
/// is given up on (a blocking call still running in it).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Runs `work` on a runtime of its own with `threads` worker threads (blocking threads
/// as needed), then stops the runtime and adds up the CPU time all of its threads used.
/// The current tracing span follows the work.
pub async fn run_measured<F>(threads: usize, work: F) -> Result<(F::Output, Measured)>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let threads = threads.max(1);
    let cpu_ns = Arc::new(AtomicU64::new(0));
    let unknown = Arc::new(AtomicU64::new(0));
    let (on_stop_cpu, on_stop_unknown) = (cpu_ns.clone(), unknown.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("lambdafusion-task")
        .enable_all()
        .on_thread_stop(move || match thread_cpu_ns() {
            Some(ns) => {
                on_stop_cpu.fetch_add(ns, Ordering::Relaxed);
            }
            None => {
                on_stop_unknown.fetch_add(1, Ordering::Relaxed);
            }
        })
        .build()
        .map_err(|e| Error::Internal(format!("cannot start a task's threads: {e}")))?;
    let joined = runtime.spawn(work.in_current_span()).await;
    // Stopping waits for its threads (which record their CPU time as they stop): off the
    // caller's runtime, which must not block.
    let stopped = tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        runtime.shutdown_timeout(SHUTDOWN_WAIT);
        started.elapsed() < SHUTDOWN_WAIT
    })
    .await
    .unwrap_or(false);
    let output = joined.map_err(|e| {
        if e.is_panic() {
            Error::Internal(format!("a task's work panicked: {e}"))
        } else {
            Error::Cancelled("a task's work was stopped".into())
        }
    })?;
    let cpu_ms = (stopped && unknown.load(Ordering::Relaxed) == 0)
        .then(|| cpu_ns.load(Ordering::Relaxed) / 1_000_000);
    Ok((output, Measured { threads, cpu_ms }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_task_stage_gets_every_core_a_full_stage_a_share() {
        let t = TaskThreads { cores: 4, slots: 8 };
        assert_eq!(t.for_stage(1, None, 1), 4);
        assert_eq!(t.for_stage(2, None, 1), 2);
        assert_eq!(t.for_stage(3, None, 1), 1);
        assert_eq!(t.for_stage(100, None, 1), 1);
        assert_eq!(t.for_stage(0, None, 1), 4);
        assert_eq!(t.for_stage(1, Some(2), 1), 2);
        assert_eq!(t.for_stage(100, Some(3), 4), 3, "set, whatever the machine");
        assert_eq!(t.for_stage(1, Some(0), 1), 1);
        assert_eq!(
            t.for_stage(100, None, 4),
            2,
            "a large task: four slots' share"
        );
        assert_eq!(t.for_stage(2, None, 8), 4, "at most every core");
        let lambda = TaskThreads { cores: 2, slots: 1 };
        assert_eq!(lambda.for_stage(500, None, 3), 2);
    }

    /// Busy work on `threads` threads, `each` of CPU time apiece (a spinning task never
    /// yields, so it stays on its thread).
    async fn spin(threads: usize, each: Duration) {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                tokio::spawn(async move {
                    let start = thread_cpu_ns().unwrap();
                    let mut x = 0u64;
                    while thread_cpu_ns().unwrap() - start < each.as_nanos() as u64 {
                        x = x.wrapping_mul(31).wrapping_add(7);
                        std::hint::black_box(x);
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cpu_of_the_tasks_threads_is_counted_and_nothing_else() {
        // Busy work beside it on the caller's runtime is not the task's.
        let beside = tokio::spawn(spin(1, Duration::from_millis(300)));
        let (threads_seen, measured) = run_measured(2, async {
            spin(2, Duration::from_millis(150)).await;
            tokio::runtime::Handle::current().metrics().num_workers()
        })
        .await
        .unwrap();
        beside.await.unwrap();
        assert_eq!(threads_seen, 2);
        assert_eq!(measured.threads, 2);
        let cpu = measured.cpu_ms.expect("measured on unix");
        // Two threads spinning 150 ms of CPU each, plus the runtime's own little; never
        // the 300 ms of the work beside.
        assert!((300..550).contains(&cpu), "cpu {cpu} ms");
    }

    #[tokio::test]
    async fn a_panic_in_the_work_is_an_error_not_a_crash() {
        let err = run_measured(1, async { panic!("boom") }).await.unwrap_err();
        assert!(err.to_string().contains("panicked"), "{err}");
    }
}
