//! `EXPLAIN ANALYZE` for distributed queries.
//!
//! The query runs as a job like any other (kind [`JobKind::Analyze`]); each of its tasks
//! records its operators' metrics in its completion record ([`task_metrics`]: the shuffle
//! writer first, then the stage plan in pre-order). Its result is not the query's rows but
//! every stage plan with those metrics summed over the stage's tasks, and the adaptive
//! decision each stage was run with ([`render`]).

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::ExecutionPlan;

use crate::plan::human_bytes;
use crate::shuffle::{ShuffleWriterExec, WriteSummary};
use crate::state::{JobKind, JobSnapshot, OperatorMetrics, TaskState};
use crate::status::job_status;
use crate::Result;

/// Operators the executor wraps around a stage plan's nodes for its own bookkeeping; they
/// are not part of the plan users see.
const WRAPPERS: &[&str] = &["StopExec", "SpreadExec"];

/// The figures of one task: the writer's (rows and bytes written, partitioning and
/// encoding time, from its DataFusion metrics), then each operator of the stage plan
/// below it in pre-order, wrappers skipped. `written` backs the writer's figures if it
/// recorded none.
pub fn task_metrics(writer: &ShuffleWriterExec, written: &WriteSummary) -> Vec<OperatorMetrics> {
    let mut own = operator_metrics(writer);
    let bytes = writer
        .metrics()
        .and_then(|m| m.sum_by_name(crate::shuffle::BYTES_WRITTEN))
        .map_or(0, |v| v.as_usize() as u64);
    own.rows = if own.rows == 0 {
        written.rows
    } else {
        own.rows
    };
    own.bytes = if bytes == 0 { written.bytes } else { bytes };
    let mut out = vec![own];
    let _ = writer.input().apply(|node| {
        if !WRAPPERS.contains(&node.name()) {
            out.push(operator_metrics(node.as_ref()));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

fn operator_metrics(node: &dyn ExecutionPlan) -> OperatorMetrics {
    let m = node.metrics().map(|m| m.aggregate_by_name());
    let get = |f: fn(&datafusion::physical_plan::metrics::MetricsSet) -> Option<usize>| {
        m.as_ref().and_then(f).unwrap_or(0) as u64
    };
    OperatorMetrics {
        name: node.name().to_string(),
        rows: get(|m| m.output_rows()),
        compute_ns: get(|m| m.elapsed_compute()),
        spills: get(|m| m.spill_count()),
        spilled_bytes: get(|m| m.spilled_bytes()),
        bytes: m
            .as_ref()
            .and_then(|m| m.sum_by_name(crate::shuffle::BYTES_READ))
            .map_or(0, |v| v.as_usize() as u64),
    }
}

/// Sums the figures of several tasks of one stage, operator by operator; `None` when the
/// tasks disagree on the operators (they ran different plans: nothing to add up).
pub fn sum_tasks<'a>(
    tasks: impl IntoIterator<Item = &'a [OperatorMetrics]>,
) -> Option<Vec<OperatorMetrics>> {
    let mut total: Option<Vec<OperatorMetrics>> = None;
    for task in tasks {
        match &mut total {
            None => total = Some(task.to_vec()),
            Some(total) => {
                if total.len() != task.len()
                    || total.iter().zip(task).any(|(a, b)| a.name != b.name)
                {
                    return None;
                }
                for (a, b) in total.iter_mut().zip(task) {
                    a.rows += b.rows;
                    a.compute_ns += b.compute_ns;
                    a.spills += b.spills;
                    a.spilled_bytes += b.spilled_bytes;
                    a.bytes += b.bytes;
                }
            }
        }
    }
    total
}

fn figures(m: &OperatorMetrics) -> String {
    let mut parts = vec![format!("rows={}", m.rows)];
    if m.bytes > 0 {
        parts.push(format!("bytes={}", human_bytes(m.bytes)));
    }
    if m.compute_ns > 0 {
        parts.push(format!("compute={:.3}ms", m.compute_ns as f64 / 1e6));
    }
    if m.spills > 0 || m.spilled_bytes > 0 {
        parts.push(format!(
            "spills={}, spilled={}",
            m.spills,
            human_bytes(m.spilled_bytes)
        ));
    }
    parts.join(", ")
}

/// The result of a finished `EXPLAIN ANALYZE` job: a row for the whole query, then one per
/// stage — its tasks, timings, adaptive decision and plan, each operator with its figures
/// summed over the stage's tasks. `plans[s]` is stage `s`'s decoded plan; `config` is
/// the deployment's (see [`job_status`]).
pub fn render(
    snapshot: &JobSnapshot,
    plans: &[Arc<dyn ExecutionPlan>],
    schema: SchemaRef,
    config: &crate::EngineConfig,
) -> Result<RecordBatch> {
    debug_assert_eq!(snapshot.job.kind, JobKind::Analyze);
    let status = job_status(snapshot, config);
    let mut kinds = vec!["query".to_string()];
    let mut texts = vec![format!(
        "{} stages, {} tasks, {} ms from submission to the last commit; estimated cost {}",
        status.stages.len(),
        status.tasks,
        status.elapsed_ms,
        crate::status::dollars(status.estimated_cost_usd)
    )];
    for ((stage, record), plan) in status.stages.iter().zip(&snapshot.stages).zip(plans) {
        // Fused into its consumer, or a switched join's stage run by its large side.
        let fused = record.decision.as_ref().is_some_and(|d| d.tasks == 0);
        if fused {
            kinds.push(format!("stage {}", stage.stage));
            texts.push(format!(
                "0 tasks ({}); its operators and their figures are shown in that stage",
                stage.decision_note.as_deref().unwrap_or("fused")
            ));
            continue;
        }
        let outputs = snapshot
            .tasks_of(stage.stage)
            .filter(|t| t.state == TaskState::Succeeded)
            .filter_map(|t| t.output.as_ref().map(|o| o.metrics.as_slice()));
        let summed = sum_tasks(outputs).unwrap_or_default();
        let mut text = format!(
            "{} task{} ({}), wall {} ms, task time {} ms{}{}{}\n",
            stage.tasks,
            if stage.tasks == 1 { "" } else { "s" },
            stage.decision_note.as_deref().unwrap_or("as planned"),
            stage.elapsed_ms.unwrap_or(0),
            stage.task_ms,
            cpu_use(stage),
            stage
                .handoff_ms
                .map_or(String::new(), |h| format!(", hand-off {h} ms")),
            if stage.inputs.is_empty() {
                String::new()
            } else {
                format!("; reads {}", stage.inputs.join(", "))
            },
        );
        let mut index = 0;
        let mut lines = Vec::new();
        walk(plan, 0, &mut |node, depth| {
            let shown = DisplayableExecutionPlan::new(node).one_line().to_string();
            let figures = summed
                .get(index)
                .filter(|m| m.name == node.name())
                .map_or("metrics unavailable".to_string(), figures);
            lines.push(format!(
                "{}{}, metrics=[{figures}]",
                "  ".repeat(depth),
                shown.trim_end()
            ));
            index += 1;
        });
        text.push_str(&lines.join("\n"));
        kinds.push(format!("stage {}", stage.stage));
        texts.push(text);
    }
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(kinds)),
            Arc::new(StringArray::from(texts)),
        ],
    )?)
}

/// A stage's CPU time and how busy it kept its tasks' threads, e.g. `, CPU 812 ms (93% of
/// 2 threads per task)`; empty when not measured.
pub fn cpu_use(stage: &crate::status::StageStatus) -> String {
    match stage.cpu_use {
        Some(share) => format!(
            ", CPU {} ms ({:.0}% of {} thread{} per task)",
            stage.cpu_ms,
            share * 100.0,
            stage.threads,
            if stage.threads == 1 { "" } else { "s" }
        ),
        None => String::new(),
    }
}

/// Pre-order over `plan` with each node's depth.
fn walk(plan: &Arc<dyn ExecutionPlan>, depth: usize, f: &mut dyn FnMut(&dyn ExecutionPlan, usize)) {
    f(plan.as_ref(), depth);
    for child in plan.children() {
        walk(child, depth + 1, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, rows: u64) -> OperatorMetrics {
        OperatorMetrics {
            name: name.into(),
            rows,
            compute_ns: rows * 10,
            ..OperatorMetrics::default()
        }
    }

    /// Figures add up operator by operator; tasks that ran different plans are not added.
    #[test]
    fn tasks_are_summed_operator_by_operator() {
        let a = vec![op("ShuffleWriterExec", 3), op("FilterExec", 3)];
        let b = vec![op("ShuffleWriterExec", 4), op("FilterExec", 4)];
        let total = sum_tasks([a.as_slice(), b.as_slice()]).unwrap();
        assert_eq!(total[0].rows, 7);
        assert_eq!(total[1].compute_ns, 70);
        let other = vec![op("ShuffleWriterExec", 1), op("SortExec", 1)];
        assert!(sum_tasks([a.as_slice(), other.as_slice()]).is_none());
        assert!(sum_tasks(std::iter::empty()).is_none());
    }

    #[test]
    fn figures_leave_out_what_did_not_happen() {
        assert_eq!(figures(&op("X", 2)), "rows=2, compute=0.000ms");
        let spilled = OperatorMetrics {
            spills: 2,
            spilled_bytes: 2048,
            ..op("SortExec", 5)
        };
        assert!(figures(&spilled).contains("spills=2, spilled=2.0 KiB"));
    }
}
