//! The executor function: a task event (`{"job_id", "stage", "partition", "attempt"}`,
//! perhaps with what its dispatcher read for it) in, `lambdafusion`'s executor runs that
//! one partition and commits it, a report out. Failures are recorded in the job store by
//! the executor itself; an error returned here means even that failed, and Lambda's
//! on-failure destination tells the scheduler.
//!
//! Test hook: when `LAMBDAFUSION_TEST_CRASH_FILE` names an existing file holding
//! `<stage>/<partition>/<attempt>`, the matching task deletes the file and exits the
//! process mid-invocation, as a crashed function would (used by the end-to-end tests).

use std::sync::Arc;

use lambda_runtime::{service_fn, Error, LambdaEvent};
use lambdafusion::dispatch::{TaskInvocation, TaskSpec};
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
                let invocation = event.payload;
                crash_if_asked(&invocation.task);
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

/// The test hook described in the module docs.
fn crash_if_asked(task: &TaskSpec) {
    let Ok(path) = std::env::var("LAMBDAFUSION_TEST_CRASH_FILE") else {
        return;
    };
    let wanted = format!("{}/{}/{}", task.stage, task.partition, task.attempt);
    if std::fs::read_to_string(&path).is_ok_and(|s| s.trim() == wanted)
        && std::fs::remove_file(&path).is_ok()
    {
        eprintln!("LAMBDAFUSION_TEST_CRASH_FILE: crashing on {task}");
        std::process::exit(70);
    }
}
