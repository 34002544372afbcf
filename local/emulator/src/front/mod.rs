//! The DynamoDB / S3 front: an HTTP proxy between the clients (functions, tests, the
//! CLI) and moto_server that behaves like AWS where moto does not.
//!
//! moto must see one DynamoDB request at a time (its `TransactWriteItems` is unsafe under
//! concurrent writers), which on its own hides what real DynamoDB does under
//! concurrency: transactions cancelled by conflicts on a hot item, throttling past a
//! partition's throughput, and nothing is ever slow or failing. The front keeps moto
//! serialized and safe, and reproduces those behaviours on purpose and by seed:
//!
//! * **DynamoDB** (`X-Amz-Target: DynamoDB_20120810.<Op>`, see [`dynamodb`]): requests go
//!   to moto one at a time; the front tracks the items each request holds from arrival
//!   to response and answers transaction conflicts, per-item throughput limits and
//!   idempotent transaction retries as DynamoDB documents them. A cancelled or throttled
//!   request never reaches moto.
//! * **DynamoDB Streams** (`DynamoDBStreams_20120810.<Op>`): passed through (one at a
//!   time as well), with latency.
//! * **Glue** (`AWSGlue.<Op>`, see [`glue`]): passed through after the IAM check.
//! * **S3** (everything else, see [`s3`]): passed through with streamed bodies (large
//!   GETs are not buffered; ranged GETs work), with first-byte latency.
//! * **Latency** per service and operation, AWS-like by default (see
//!   [`Latency::aws`] for the numbers and sources), `"latency": "off"` for fast tests.
//! * **Faults** from the shared plan (`lambdafusion-faults`): `dynamodb.throughput_exceeded`,
//!   `dynamodb.throttling`, `dynamodb.internal_error`, `s3.slow_down`, `s3.internal_error`,
//!   `s3.slow_first_byte`, `s3.bandwidth`, decided by stable keys and counted, together
//!   with the conflicts and throttles the front produced on its own
//!   ([`crate::faults`]).
//!
//! * **IAM**: a request signed with a function's credentials is refused with
//!   `AccessDenied` unless its role allows it ([`crate::iam`]).
//!
//! Configuration: the config's `front` section ([`FrontConfig`]).

pub mod capacity;
pub mod config;
pub mod dynamodb;
pub mod glue;
pub mod s3;
pub mod upstream;

use axum::extract::State;
use axum::response::Response;
use axum::Router;
use lambdafusion_faults::FaultKind;
use std::sync::Arc;

pub use config::{FrontConfig, Latency, ServiceLatency, Throughput};

use crate::faults::Faults;
use crate::Error;

/// Everything a front's handlers share.
pub struct Shared {
    config: FrontConfig,
    region: String,
    account: String,
    upstream: upstream::Upstream,
    faults: Arc<Faults>,
    iam: Arc<crate::iam::Iam>,
    dynamodb: dynamodb::DynamoFront,
    s3: s3::S3Front,
}

impl Shared {
    /// A front for `config`, injecting the faults of `faults` and refusing what `iam`
    /// does not allow (ARNs in errors use `region` and `account`).
    pub fn new(
        config: FrontConfig,
        region: &str,
        account: &str,
        faults: Arc<Faults>,
        iam: Arc<crate::iam::Iam>,
    ) -> Result<Shared, Error> {
        config.validate().map_err(|e| format!("front: {e}"))?;
        if let Some(f) = faults.plan.current().get(FaultKind::S3Bandwidth) {
            if !f.mb_per_s.is_some_and(|m| m > 0.0) {
                return Err(
                    "fault plan: s3.bandwidth needs a positive mb_per_s (e.g. {\"mb_per_s\": 40})"
                        .into(),
                );
            }
        }
        Ok(Shared {
            upstream: upstream::Upstream::new(&config.upstream)?,
            dynamodb: dynamodb::DynamoFront::new(&config),
            s3: s3::S3Front::default(),
            region: region.to_string(),
            account: account.to_string(),
            faults,
            iam,
            config,
        })
    }
}

/// The front's router: every request, whatever its path, is DynamoDB, DynamoDB Streams
/// or S3.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

async fn handle(State(front): State<Arc<Shared>>, request: axum::extract::Request) -> Response {
    let target = request
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .filter(|t| {
            t.starts_with(dynamodb::DYNAMODB_TARGET) || t.starts_with(dynamodb::STREAMS_TARGET)
        })
        .map(str::to_string);
    let glue = request
        .headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.strip_prefix(glue::GLUE_TARGET))
        .map(str::to_string);
    match (target, glue) {
        (Some(target), _) => {
            let (parts, body) = request.into_parts();
            dynamodb::handle(front, target, parts.headers, body).await
        }
        (None, Some(op)) => {
            let (parts, body) = request.into_parts();
            glue::handle(front, op, parts.headers, body).await
        }
        (None, None) => s3::handle(front, request).await,
    }
}
