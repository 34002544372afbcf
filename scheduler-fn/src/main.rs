//! The scheduler function: one Lambda binary for every event the scheduler receives —
//! the HTTP API (API Gateway HTTP API or function URL, through `lambda_http`), DynamoDB
//! stream batches, the scheduled sweep, fast-path wake-ups, the nodes of invocation trees
//! and executor invocations that failed for good (on-failure destination). It decodes,
//! calls `lambdafusion`'s
//! scheduler, and encodes; unknown event shapes are logged and rejected. HTTP requests
//! act as the caller API Gateway or the function URL authenticated
//! ([`lambdafusion_aws::events::caller_of`]).

use lambda_http::request::LambdaRequest;
use lambda_http::RequestExt;
use lambda_runtime::{service_fn, Error, LambdaEvent};
use lambdafusion::scheduler::Scheduler;
use lambdafusion::Services;
use lambdafusion_aws::events::SchedulerEvent;
use lambdafusion_aws::metrics::Counts;
use lambdafusion_aws::Role;
use serde_json::{json, Value};
use tower::ServiceExt;
use tracing::{error, info};

fn main() -> Result<(), Error> {
    lambdafusion_aws::function::init_logging();
    lambdafusion::runtime()?.block_on(async {
        let services = lambdafusion_aws::services(Role::Scheduler).await?;
        let router = lambdafusion_api::router(services.clone()).layer(axum::middleware::from_fn(
            |mut request: axum::extract::Request, next: axum::middleware::Next| async move {
                let caller = lambdafusion_aws::events::caller_of(request.request_context_ref());
                request.extensions_mut().insert(caller);
                next.run(request).await
            },
        ));
        lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
            let (services, router) = (services.clone(), router.clone());
            async move { handle(services, router, event).await }
        }))
        .await
    })
}

async fn handle(
    services: Services,
    router: axum::Router,
    event: LambdaEvent<Value>,
) -> Result<Value, Error> {
    let LambdaEvent { payload, context } = event;
    let scheduler = Scheduler::new(services);
    let before = Counts::now();
    let result = route(scheduler, router, payload, context).await;
    info!(requests = %Counts::now().since(before), ok = result.is_ok(), "event handled");
    result
}

async fn route(
    scheduler: Scheduler,
    router: axum::Router,
    payload: Value,
    context: lambda_runtime::Context,
) -> Result<Value, Error> {
    match SchedulerEvent::classify(payload) {
        Ok(SchedulerEvent::Http(request)) => {
            let request: LambdaRequest = serde_json::from_value(request)?;
            let adapter = lambda_http::Adapter::from(router);
            let response = adapter.oneshot(LambdaEvent::new(request, context)).await?;
            Ok(serde_json::to_value(response)?)
        }
        Ok(SchedulerEvent::Stream(batch)) => {
            let response = lambdafusion_aws::stream::handle(&scheduler, &batch).await;
            Ok(serde_json::to_value(response)?)
        }
        Ok(SchedulerEvent::Sweep) => {
            let report = scheduler.sweep().await?;
            info!(jobs = report.jobs, lost = report.lost_attempts, "sweep");
            Ok(json!({"jobs": report.jobs, "lost_attempts": report.lost_attempts}))
        }
        Ok(SchedulerEvent::Wake { job, at_ms }) => {
            // A later check (stragglers): wait for it, but stop 5 s before this
            // invocation's own deadline.
            if let Some(at) = at_ms {
                let deadline = context.deadline.saturating_sub(5_000);
                let until = at.min(deadline);
                let now = lambdafusion::time::now_ms();
                if until > now {
                    tokio::time::sleep(std::time::Duration::from_millis(until - now)).await;
                }
            }
            scheduler.wake(&job).await?;
            Ok(json!({"woken": job}))
        }
        Ok(SchedulerEvent::Dispatch(range)) => {
            scheduler.dispatch_range(&range).await?;
            Ok(json!({"dispatched": range.to_string()}))
        }
        Ok(SchedulerEvent::TaskLost { task, error }) => {
            info!(%task, %error, "executor invocation lost");
            scheduler.on_task_lost(&task, &error).await?;
            Ok(json!({"recorded": task.to_string()}))
        }
        Err(unknown) => {
            error!(%unknown, "rejecting event");
            Err(unknown.into())
        }
    }
}
