//! Which executor function runs a stage's tasks, where the deployment has two sizes
//! (`large_executor_memory_mb`).
//!
//! Lambda bills memory × time and gives CPU in proportion to memory: one vCPU per
//! 1,769 MB, at most 6. A task that spends its time on CPU, spread over threads, finishes
//! proportionally sooner on a larger function for about the same GB-seconds; one that
//! waits on S3 takes as long there and costs the memory ratio more. At a stage's claim:
//!
//! - **s**, the CPU share: the CPU time of the job's committed attempts over the thread
//!   time they had (run time × threads), measured on the platform the job runs on by the
//!   stages that ran before this one. With nothing measured yet (a query's first stages),
//!   the stage runs on the executor.
//! - **p**, the threads a task can keep busy: every thread for a one-task stage reading at
//!   least two pieces' worth (`min_spread_bytes`), which [`crate::plan::spread`] plans
//!   again at its threads; otherwise the pieces its input holds.
//! - With `e = min(p, vCPUs)` of each size, a task's time on the large executor relative
//!   to the executor's is `(1 − s) + s × e_executor / e_large` ([`compare`]), and its cost
//!   that times the memory ratio.
//! - The large executor when its time is at most nine tenths of the executor's and its
//!   cost at most `size_cost_percent` of it.
//!
//! The AWS model (`bench --model aws`) prices every stage with the same comparison, from
//! each stage's own measured CPU.

use super::human_bytes;
use crate::dispatch::ExecutorSize;
use crate::state::{JobSnapshot, StageDecision, StageRecord, TaskState};
use crate::EngineConfig;

/// Memory (MB) Lambda gives a full vCPU's worth of CPU time at.
pub const MB_PER_VCPU: f64 = 1769.0;

/// The large executor must finish a task in at most this share of the executor's time.
const FASTER: f64 = 0.9;

/// vCPUs Lambda gives a function of `memory_mb`: one per 1,769 MB, at most 6 (Lambda
/// docs, "Configuring function memory").
pub fn vcpus(memory_mb: usize) -> f64 {
    (memory_mb as f64 / MB_PER_VCPU).min(6.0)
}

/// Memory (MB) of the function `size` names in `config`: the large executor's where the
/// deployment has one, else the executor's.
pub fn memory_mb(size: ExecutorSize, config: &EngineConfig) -> usize {
    match (size, config.large_executor_memory_mb) {
        (ExecutorSize::Large, Some(large)) => large,
        _ => config.executor_memory_mb,
    }
}

/// A task on the large executor against the same task on the executor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Its run time there, as a share of the executor's.
    pub time: f64,
    /// Its GB-seconds there, as a share of the executor's.
    pub cost: f64,
}

/// A task that spends `share` of its time on CPU and can keep `pieces` threads busy, on a
/// `large_mb` function against a `standard_mb` one ([module docs](self)).
pub fn compare(standard_mb: usize, large_mb: usize, share: f64, pieces: f64) -> Comparison {
    let share = share.clamp(0.0, 1.0);
    let usable = |mb: usize| pieces.max(1.0).min(vcpus(mb)).max(f64::MIN_POSITIVE);
    let time = (1.0 - share) + share * usable(standard_mb) / usable(large_mb);
    Comparison {
        time,
        cost: time * large_mb as f64 / standard_mb.max(1) as f64,
    }
}

/// Whether `c` is worth the large executor at `cost_percent` (see the [module docs](self)).
pub fn takes_large(c: Comparison, cost_percent: u32) -> bool {
    c.time <= FASTER && c.cost <= f64::from(cost_percent) / 100.0
}

/// The CPU share the job's committed attempts measured: their CPU time over the thread
/// time they had; `None` before any measured attempt.
pub fn measured_share(snapshot: &JobSnapshot) -> Option<f64> {
    let (cpu, capacity) = snapshot
        .tasks
        .iter()
        .filter(|t| t.state == TaskState::Succeeded)
        .filter_map(|t| t.output.as_ref())
        .filter_map(|o| {
            let cpu = o.cpu.as_ref()?;
            let run = o.finished_ms.saturating_sub(o.started_ms);
            Some((cpu.cpu_ms, cpu.capacity_ms(run)))
        })
        .fold((0u64, 0u64), |(a, b), (c, d)| (a + c, b + d));
    (capacity > 0).then(|| (cpu as f64 / capacity as f64).min(1.0))
}

/// The function `stage`'s tasks run on under `decision`, and a note saying why (empty
/// where the deployment has one size or the stage runs no tasks).
pub fn choose(
    stage: &StageRecord,
    decision: &StageDecision,
    snapshot: &JobSnapshot,
    config: &EngineConfig,
) -> (ExecutorSize, String) {
    let Some(large_mb) = config.large_executor_memory_mb else {
        return (ExecutorSize::Standard, String::new());
    };
    if decision.tasks == 0 {
        return (ExecutorSize::Standard, String::new());
    }
    let standard_mb = config.executor_memory_mb;
    let Some(share) = measured_share(snapshot) else {
        return (
            ExecutorSize::Standard,
            "on the executor (no CPU measured yet)".into(),
        );
    };
    let bytes = decision.input_bytes + stage.scan_bytes.iter().sum::<u64>();
    let per_task = bytes / u64::from(decision.tasks.max(1));
    let piece = config.min_spread_bytes.max(1);
    let pieces = if decision.tasks == 1 && per_task >= 2 * piece {
        f64::INFINITY
    } else {
        (per_task / piece).max(1) as f64
    };
    let c = compare(standard_mb, large_mb, share, pieces);
    let why = format!(
        "CPU {:.0}% of the job's thread time, {} per task: {:.2}× the time at {:.2}× the cost",
        share * 100.0,
        human_bytes(per_task),
        c.time,
        c.cost
    );
    if takes_large(c, config.size_cost_percent) {
        (
            ExecutorSize::Large,
            format!("on the large executor ({large_mb} MB; {why})"),
        )
    } else {
        (
            ExecutorSize::Standard,
            format!("on the executor ({standard_mb} MB; the large one: {why})"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_bound_work_that_spreads_costs_about_the_same_and_finishes_sooner() {
        let c = compare(1769, 10240, 1.0, f64::INFINITY);
        assert!((c.time - 1769.0 / 10240.0).abs() < 1e-9, "{c:?}");
        assert!((c.cost - 1.0).abs() < 1e-9, "{c:?}");
        assert!(takes_large(c, 100));
    }

    #[test]
    fn waiting_work_costs_the_memory_ratio_and_is_not_sped_up() {
        let c = compare(1769, 10240, 0.0, f64::INFINITY);
        assert_eq!(c.time, 1.0);
        assert!((c.cost - 10240.0 / 1769.0).abs() < 1e-9);
        assert!(!takes_large(c, 100_000));
    }

    #[test]
    fn one_piece_of_work_gains_nothing_from_more_vcpus() {
        // Both sizes have at least one vCPU: a task of one piece runs on one either way.
        let c = compare(1769, 10240, 0.9, 1.0);
        assert!((c.time - 1.0).abs() < 1e-9, "{c:?}");
        assert!(!takes_large(c, 1000));
        // Below one vCPU a function is throttled: the larger one gives the piece a whole vCPU.
        let small = compare(885, 1769, 1.0, 1.0);
        assert!((small.time - 885.0 / 1769.0).abs() < 1e-9, "{small:?}");
    }

    #[test]
    fn the_cost_percent_decides_mostly_cpu_bound_work() {
        // 3,008 MB (1.7 vCPUs) against 10,240 MB (5.8): at 90% CPU, 0.36× the time at
        // 1.24× the cost.
        let c = compare(3008, 10240, 0.9, 6.0);
        assert!(
            (c.time - (0.1 + 0.9 * 3008.0 / 10240.0)).abs() < 1e-9,
            "{c:?}"
        );
        assert!(takes_large(c, 150));
        assert!(!takes_large(c, 120));
        // At half CPU: 0.65× the time at 2.2× the cost.
        let half = compare(3008, 10240, 0.5, 6.0);
        assert!(!takes_large(half, 150), "{half:?}");
        assert!(takes_large(half, 250), "{half:?}");
    }

    #[test]
    fn vcpus_follow_memory_up_to_six() {
        assert!((vcpus(1769) - 1.0).abs() < 1e-9);
        assert!((vcpus(10240) - 10240.0 / 1769.0).abs() < 1e-9);
        assert_eq!(vcpus(20000), 6.0);
    }
}
