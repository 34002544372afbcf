//! Ships function output to CloudWatch Logs as Lambda does — a log group per function
//! (`/aws/lambda/<name>`), a log stream per execution environment's process, one event per
//! line — when the config names a `logs_endpoint` (the local stack: moto_server's `logs`).
//! The lines still go to `<state_dir>/logs/` as well. What `lambdafusion logs` reads back.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tracing::debug;

use crate::front::upstream::Upstream;
use crate::{time, Error};

/// Events one `PutLogEvents` carries at most (CloudWatch Logs takes 10,000).
const BATCH: usize = 1_000;

/// A client of one CloudWatch Logs endpoint.
#[derive(Debug)]
pub struct LogShipper {
    upstream: Upstream,
    headers: HeaderMap,
}

impl LogShipper {
    /// A shipper to `endpoint` (`http://host:port`) in `region`.
    pub fn new(endpoint: &str, region: &str) -> Result<Arc<LogShipper>, Error> {
        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            HeaderValue::from_static("application/x-amz-json-1.1"),
        );
        // The region an AWS endpoint reads from the signature's scope (moto does too).
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential=test/20250101/{region}/logs/aws4_request, \
             SignedHeaders=host, Signature=0"
        );
        headers.insert(
            "authorization",
            HeaderValue::from_str(&authorization).map_err(|e| format!("region {region:?}: {e}"))?,
        );
        Ok(Arc::new(LogShipper {
            upstream: Upstream::new(endpoint)?,
            headers,
        }))
    }

    /// Starts log stream `stream` of group `group` (creating both when missing) and
    /// returns where to send its lines; they are shipped in order, in batches of what
    /// has queued up. Dropping the sender ends the stream's task.
    pub fn stream(
        self: &Arc<Self>,
        group: String,
        stream: String,
    ) -> mpsc::UnboundedSender<String> {
        let (lines, mut queued) = mpsc::unbounded_channel::<String>();
        let shipper = self.clone();
        tokio::spawn(async move {
            // Already there (another environment of the function made it): fine.
            let _ = shipper
                .call("CreateLogGroup", json!({ "logGroupName": group }))
                .await;
            let _ = shipper
                .call(
                    "CreateLogStream",
                    json!({ "logGroupName": group, "logStreamName": stream }),
                )
                .await;
            while let Some(first) = queued.recv().await {
                let now = time::now_ms();
                let mut events = vec![json!({ "timestamp": now, "message": first })];
                while events.len() < BATCH {
                    match queued.try_recv() {
                        Ok(line) => events.push(json!({ "timestamp": now, "message": line })),
                        Err(_) => break,
                    }
                }
                let body = json!({
                    "logGroupName": group,
                    "logStreamName": stream,
                    "logEvents": events,
                });
                if let Err(e) = shipper.call("PutLogEvents", body).await {
                    debug!(%group, %stream, "cannot ship log lines: {e}");
                }
            }
        });
        lines
    }

    /// One CloudWatch Logs call (JSON 1.1 protocol); an error answer is an error.
    async fn call(&self, operation: &str, body: Value) -> Result<(), Error> {
        let mut headers = self.headers.clone();
        headers.insert(
            "x-amz-target",
            HeaderValue::from_str(&format!("Logs_20140328.{operation}"))
                .map_err(|e| format!("{operation}: {e}"))?,
        );
        let response = self
            .upstream
            .send(Method::POST, "/", &headers, Body::from(body.to_string()))
            .await?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("{operation} answered {}", response.status()).into())
        }
    }
}
