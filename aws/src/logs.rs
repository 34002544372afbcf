//! One query's log lines across both functions: CloudWatch Logs `FilterLogEvents` on the
//! scheduler's and the executor's log groups, matching the query's id (every line of a
//! task, and the scheduler's lines about the job, carry it; [`crate::function`]), merged
//! in time order. What `lambdafusion logs <query-id>` prints.

use aws_sdk_cloudwatchlogs::Client;
use lambdafusion::{Error, Result};

/// One log event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// When it was logged, ms since the epoch.
    pub timestamp_ms: i64,
    /// The log group it came from (which function).
    pub group: String,
    /// The execution environment's log stream.
    pub stream: String,
    /// The line as the function wrote it (JSON for lambdafusion's own lines).
    pub message: String,
}

/// The log groups of a deployment's functions: `/aws/lambda/<name_prefix>-scheduler` and
/// `-executor`, as the Terraform module names them.
pub fn groups(name_prefix: &str) -> [String; 2] {
    [
        format!("/aws/lambda/{name_prefix}-scheduler"),
        format!("/aws/lambda/{name_prefix}-executor"),
    ]
}

/// Whether `id` is a query id (32 hex digits): only such text goes into a filter pattern.
pub fn is_query_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Every line of `groups` since `start_ms` that names query `job_id`, oldest first, at
/// most `limit`. A missing log group (a function never invoked) has no lines.
pub async fn query_lines(
    client: &Client,
    groups: &[String],
    job_id: &str,
    start_ms: i64,
    limit: usize,
) -> Result<Vec<LogLine>> {
    if !is_query_id(job_id) {
        return Err(Error::InvalidInput(format!(
            "{job_id:?} is not a query id (32 hexadecimal digits)"
        )));
    }
    let mut lines = Vec::new();
    for group in groups {
        let mut token: Option<String> = None;
        loop {
            let page = client
                .filter_log_events()
                .log_group_name(group)
                .filter_pattern(format!("\"{job_id}\""))
                .start_time(start_ms)
                .set_next_token(token.take())
                .send()
                .await;
            let page = match page {
                Ok(p) => p,
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_resource_not_found_exception()) =>
                {
                    break
                }
                Err(e) => {
                    return Err(Error::InvalidInput(format!(
                        "CloudWatch Logs FilterLogEvents on {group}: {}",
                        aws_sdk_cloudwatchlogs::error::DisplayErrorContext(&e)
                    )))
                }
            };
            for event in page.events() {
                let message = event.message().unwrap_or_default();
                // The pattern is a quoted term; keep only what really names the query.
                if message.contains(job_id) {
                    lines.push(LogLine {
                        timestamp_ms: event.timestamp().unwrap_or_default(),
                        group: group.clone(),
                        stream: event.log_stream_name().unwrap_or_default().to_string(),
                        message: message.trim_end().to_string(),
                    });
                }
            }
            token = page.next_token().map(str::to_string);
            if token.is_none() || lines.len() >= limit {
                break;
            }
        }
    }
    lines.sort_by_key(|l| l.timestamp_ms);
    lines.truncate(limit);
    Ok(lines)
}

/// A CloudWatch Logs client from the environment (`AWS_ENDPOINT_URL_CLOUDWATCH_LOGS`
/// for the local stack).
pub async fn client() -> Client {
    Client::new(&crate::clients::sdk_config().await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_query_ids_reach_a_filter_pattern() {
        assert!(is_query_id("0123456789abcdef0123456789ABCDEF"));
        for bad in [
            "",
            "abc",
            "\" OR \"",
            "0123456789abcdef0123456789abcde\"",
            &"a".repeat(33),
        ] {
            assert!(!is_query_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn groups_are_the_modules_function_names() {
        assert_eq!(
            groups("lf"),
            [
                "/aws/lambda/lf-scheduler".to_string(),
                "/aws/lambda/lf-executor".to_string()
            ]
        );
    }
}
