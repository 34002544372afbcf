//! Crash points: the places in the scheduler and the executor where a seeded fault plan
//! (see `lambdafusion-faults`) may kill the process on purpose, to prove that the failure
//! model holds when a function dies at that line.
//!
//! In a function (`scheduler-fn`, `executor-fn`) a crash is real: the process logs the
//! fault to `LAMBDAFUSION_FAULT_LOG` and exits, and Lambda reports the invocation as
//! failed. Embedded, an executor crash is a panic (the in-process invoker reports the task
//! lost, as Lambda's on-failure destination does) and a scheduler crash abandons the
//! current step with an error (the scheduler keeps nothing in memory, so that is what a
//! dead scheduler leaves behind too).

pub use lambdafusion_faults::{FaultKind, FaultPlan, LivePlan};

use crate::{Error, Result};

/// How an injected crash ends the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Exit the process (functions).
    Exit,
    /// Panic (executor) or abandon the step (scheduler): the embedded engine and tests.
    InProcess,
}

/// The fault plan of a process and how its crashes end.
#[derive(Debug, Clone)]
pub struct Faults {
    /// The plan (it may change while the process runs: see [`LivePlan`]).
    pub plan: LivePlan,
    /// How a crash ends.
    pub mode: CrashMode,
}

impl Default for Faults {
    fn default() -> Self {
        Self::in_process(FaultPlan::none())
    }
}

impl Faults {
    /// A plan whose crashes end the process.
    pub fn exiting(plan: LivePlan) -> Self {
        Self {
            plan,
            mode: CrashMode::Exit,
        }
    }

    /// A plan whose crashes stay in the process (panics, abandoned steps).
    pub fn in_process(plan: FaultPlan) -> Self {
        Self {
            plan: LivePlan::fixed(plan),
            mode: CrashMode::InProcess,
        }
    }

    /// Whether the plan hits the event `key` with `kind` (no crash: for deciding before
    /// a crash point what to do first, as a scheduler crashing mid-dispatch does).
    pub fn fires(&self, kind: FaultKind, key: &str) -> bool {
        self.plan.current().fires(kind, key)
    }

    /// The crash point `kind` for the event `key`: returns `Ok` when the plan does not
    /// fire; otherwise records the fault and crashes (see the [module docs](self)).
    pub fn crash_point(&self, kind: FaultKind, key: &str) -> Result<()> {
        if !self.fires(kind, key) {
            return Ok(());
        }
        lambdafusion_faults::log_injected(kind, key);
        tracing::warn!(fault = %kind, key, "injected crash");
        match (self.mode, kind.class()) {
            (CrashMode::Exit, _) => {
                eprintln!("lambdafusion-fault: {kind} {key}: exiting");
                std::process::exit(70)
            }
            (CrashMode::InProcess, "executor") => panic!("injected crash {kind} at {key}"),
            (CrashMode::InProcess, _) => Err(Error::Internal(format!(
                "injected crash {kind} at {key}: the step was abandoned"
            ))),
        }
    }
}

impl Faults {
    /// How much longer than the `worked_ms` it took task `partition`'s attempt `attempt`
    /// waits before its commit, when the `executor.slow_task` fault hits it: `factor - 1`
    /// times its work, at least `ms`. First attempts only (a straggler is one slow
    /// invocation); the fault's `partition`, when given, picks the task.
    pub fn slow_task_delay(
        &self,
        key: &str,
        partition: u32,
        attempt: u32,
        worked_ms: u64,
    ) -> Option<std::time::Duration> {
        let plan = self.plan.current();
        let fault = plan.get(FaultKind::ExecutorSlowTask)?;
        if attempt != 1 || fault.partition.is_some_and(|p| p != partition) {
            return None;
        }
        if !plan.fires(FaultKind::ExecutorSlowTask, key) {
            return None;
        }
        lambdafusion_faults::log_injected(FaultKind::ExecutorSlowTask, key);
        tracing::warn!(key, "injected slow task");
        let factor = fault.factor.unwrap_or(10.0).max(1.0);
        let extra = ((factor - 1.0) * worked_ms as f64) as u64;
        Some(std::time::Duration::from_millis(
            extra.max(fault.ms.unwrap_or(0)),
        ))
    }
}

/// The stable part of a fault key for a job: a hash of its SQL text (job ids are random,
/// so they cannot key reproducible faults).
pub fn job_key(sql: &str) -> String {
    format!("{:016x}", lambdafusion_faults::stable_hash(sql))
}
