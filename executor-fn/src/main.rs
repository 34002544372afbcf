//! The executor function: a task event (`{"job_id", "stage", "partition", "attempt"}`,
//! perhaps with what its dispatcher read for it) in, `lambdafusion`'s executor runs that
//! one partition and commits it, a report out. Failures are recorded in the job store by
//! the executor itself; an error returned here means even that failed, and Lambda's
//! on-failure destination tells the scheduler.
//!
//! Builds for the local AWS stack carry test hooks (`lambdafusion_aws::test_hooks`);
//! deployable builds do not.

use std::sync::Arc;

use lambda_runtime::{service_fn, Error, LambdaEvent};
use lambdafusion::dispatch::TaskInvocation;
use lambdafusion::executor::Executor;
use lambdafusion_aws::metrics::Counts;
use lambdafusion_aws::Role;
use serde_json::Value;

fn main() -> Result<(), Error> {
    lambdafusion_aws::function::init_logging();
    lambdafusion::runtime()?.block_on(async {
        let services = lambdafusion_aws::services(Role::Executor).await?;
        let executor = Arc::new(Executor::new(services));
        lambda_runtime::run(service_fn(move |event: LambdaEvent<TaskInvocation>| {
            let executor = executor.clone();
            async move {
                let mut invocation = event.payload;
                // The task stops in time to record that it ran out of time.
                invocation.deadline_ms = Some(event.context.deadline);
                lambdafusion_aws::test_hooks::before_task(&invocation.task);
                let before = Counts::now();
                let report = executor.handle_invocation(&invocation).await?;
                tracing::info!(task = %invocation.task, report = ?report,
                    requests = %Counts::now().since(before), "task done");
                Ok::<Value, Error>(serde_json::to_value(report)?)
            }
        }))
        .await
    })
}
