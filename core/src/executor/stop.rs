//! [`StopExec`]: stops a running task promptly when its job ends. DataFusion's operators
//! yield to the runtime only now and then (a join that multiplies rows, an aggregate over
//! it, a nested-loop join that finds no match may compute for minutes between yields), so
//! dropping the task's future is not enough. The executor wraps every leaf of the stage
//! plan (the scans and shuffle readers, where data enters) and every join (where one
//! input batch can become billions of rows) in a `StopExec`, which ends its stream with
//! an error on the first batch it hands up after the task was told to stop — so the
//! whole task stops within one batch of input or of join output. Each batch also spends
//! tokio's cooperative budget, so that the watcher raising the flag gets to run.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result as DfResult;
use datafusion::execution::{RecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    ReplaceChildrenOptions, SendableRecordBatchStream,
};
use futures::Stream;

use crate::Error;

/// Wraps a leaf; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct StopExec {
    input: Arc<dyn ExecutionPlan>,
    stop: Arc<AtomicBool>,
    job_id: String,
}

impl StopExec {
    /// Wraps every leaf and every join of `plan` (each node without exactly one child)
    /// so that the task stops once `stop` is raised.
    pub fn wrap_leaves_and_joins(
        plan: Arc<dyn ExecutionPlan>,
        stop: Arc<AtomicBool>,
        job_id: &str,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if node.children().len() != 1 {
                let wrapped: Arc<dyn ExecutionPlan> = Arc::new(StopExec {
                    input: node,
                    stop: stop.clone(),
                    job_id: job_id.to_string(),
                });
                Ok(Transformed::yes(wrapped))
            } else {
                Ok(Transformed::no(node))
            }
        })
        .map(|t| t.data)
    }
}

impl DisplayAs for StopExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "StopExec")
    }
}

impl ExecutionPlan for StopExec {
    fn name(&self) -> &'static str {
        "StopExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let child = crate::plan::only_child("StopExec", children)?;
        Ok(Arc::new(StopExec {
            input: child,
            ..(*self).clone()
        }))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        Ok(Box::pin(StopStream {
            input: self.input.execute(partition, context)?,
            stop: self.stop.clone(),
            job_id: self.job_id.clone(),
        }))
    }
}

/// The stream of a [`StopExec`].
struct StopStream {
    input: SendableRecordBatchStream,
    stop: Arc<AtomicBool>,
    job_id: String,
}

impl Stream for StopStream {
    type Item = DfResult<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.stop.load(Ordering::Relaxed) {
            let job = self.job_id.clone();
            return Poll::Ready(Some(Err(Error::Cancelled(job).into())));
        }
        // Each batch spends the task's cooperative budget, so that an operator looping
        // over a join's output hands the thread back now and then: the watcher that
        // raises `stop` runs on the same runtime and would otherwise never get to.
        let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
        let polled = self.input.as_mut().poll_next(cx);
        if polled.is_ready() {
            coop.made_progress();
        }
        polled
    }
}

impl RecordBatchStream for StopStream {
    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn plan(stop: &Arc<AtomicBool>) -> (Arc<dyn ExecutionPlan>, SessionContext) {
        let ctx = SessionContext::new();
        let plan = ctx
            .sql("SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 10) b")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        (
            StopExec::wrap_leaves_and_joins(plan, stop.clone(), "j").unwrap(),
            ctx,
        )
    }

    /// A cross join under an aggregate reads one batch of its right side and computes
    /// for many minutes (debug build) before it asks for the next: the stop must come
    /// from the join's own output.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_stops_inside_a_join_that_multiplies_rows() {
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = SessionContext::new();
        let plan = ctx
            .sql(
                "SELECT sum(a.value * b.value) FROM generate_series(1, 100000) a, \
                 generate_series(1, 100000) b",
            )
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let wrapped = StopExec::wrap_leaves_and_joins(plan, stop.clone(), "j").unwrap();
        let run = tokio::spawn(datafusion::physical_plan::collect(wrapped, ctx.task_ctx()));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        stop.store(true, Ordering::Relaxed);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(15), run)
            .await
            .expect(
                "the task stopped within 15 s of the flag (before: a starved watcher, ~1 min here)",
            )
            .unwrap();
        let err = ended.unwrap_err();
        assert!(err.to_string().contains("cancelled"), "{err}");
    }

    #[tokio::test]
    async fn a_raised_flag_ends_the_plan_with_cancelled() {
        let stop = Arc::new(AtomicBool::new(false));
        let (wrapped, ctx) = plan(&stop).await;
        let text = datafusion::physical_plan::displayable(wrapped.as_ref())
            .indent(false)
            .to_string();
        assert!(text.contains("StopExec"), "{text}");
        let done = datafusion::physical_plan::collect(wrapped, ctx.task_ctx())
            .await
            .unwrap();
        assert_eq!(done.len(), 1, "runs normally while the flag is down");
        stop.store(true, Ordering::Relaxed);
        let (wrapped, ctx) = plan(&stop).await;
        let err = datafusion::physical_plan::collect(wrapped, ctx.task_ctx())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cancelled"), "{err}");
    }
}
