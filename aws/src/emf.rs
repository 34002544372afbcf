//! Per-query metrics in CloudWatch's Embedded Metric Format: when a function ends a query,
//! it writes one JSON line whose `_aws` member tells CloudWatch Logs to extract metrics
//! from it (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>).
//! Namespace `lambdafusion`; dimensions: the deployment (its job table's name), with the
//! query's end state, and with its caller. Every metric-and-dimension combination is a
//! custom metric ($0.30 a month each): the caller dimension costs that per caller.

use lambdafusion::status::JobStatus;
use serde_json::{json, Value};

/// The metrics of one query, in order: name, unit.
pub const METRICS: [(&str, &str); 6] = [
    ("Queries", "Count"),
    ("QueryDuration", "Milliseconds"),
    ("Tasks", "Count"),
    ("FailedAttempts", "Count"),
    ("BytesRead", "Bytes"),
    ("EstimatedCostUSD", "None"),
];

/// The EMF line of a query that ended: `deployment` names the deployment, `owner` its
/// caller, `now_ms` the time.
pub fn query_line(status: &JobStatus, owner: &str, deployment: &str, now_ms: u64) -> Value {
    let failed: u32 = status.stages.iter().map(|s| s.failed_attempts).sum();
    let values = [
        json!(1),
        json!(status.elapsed_ms),
        json!(status.tasks),
        json!(failed),
        json!(status.requests.object_get_bytes),
        json!(status.estimated_cost_usd),
    ];
    let mut line = json!({
        "_aws": {
            "Timestamp": now_ms,
            "CloudWatchMetrics": [{
                "Namespace": "lambdafusion",
                "Dimensions": [["Deployment", "State"], ["Deployment", "Caller"]],
                "Metrics": METRICS
                    .iter()
                    .map(|(name, unit)| json!({"Name": name, "Unit": unit}))
                    .collect::<Vec<_>>(),
            }],
        },
        "Deployment": deployment,
        "State": status.state,
        "Caller": owner,
        "job_id": status.id,
        "message": "query ended",
    });
    for ((name, _), value) in METRICS.iter().zip(values) {
        line[*name] = value;
    }
    line
}

/// A hook for [`lambdafusion::Services::on_job_end`] that prints each query's EMF line
/// to standard output (the function's log stream). Statements (DDL) are not counted.
pub fn hook(deployment: String) -> lambdafusion::services::JobEndHook {
    std::sync::Arc::new(move |status: &JobStatus, owner: &str| {
        if status.kind != "statement" {
            let line = query_line(status, owner, &deployment, lambdafusion::time::now_ms());
            println!("{line}");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_line_is_emf_with_each_metric_and_its_dimensions() {
        let status = JobStatus {
            id: "0123456789abcdef0123456789abcdef".into(),
            state: "failed".into(),
            kind: "query".into(),
            sql: "SELECT 1".into(),
            error: Some("boom".into()),
            created_ms: 1,
            finished_ms: Some(1501),
            elapsed_ms: 1500,
            result_rows: None,
            written: None,
            tasks_done: 3,
            tasks: 4,
            stages: vec![],
            requests: lambdafusion::requests::RequestCounts {
                object_get_bytes: 4096,
                ..Default::default()
            },
            estimated_cost_usd: 0.0012,
        };
        let line = query_line(&status, "arn:aws:iam::1:user/alice", "lf-jobs", 99);
        let aws = &line["_aws"];
        assert_eq!(aws["Timestamp"], 99);
        let directive = &aws["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "lambdafusion");
        // Every dimension and metric a directive names must be a member of the line.
        for set in directive["Dimensions"].as_array().unwrap() {
            for name in set.as_array().unwrap() {
                assert!(line[name.as_str().unwrap()].is_string(), "{name}");
            }
        }
        for metric in directive["Metrics"].as_array().unwrap() {
            let name = metric["Name"].as_str().unwrap();
            assert!(line[name].is_number(), "{name}");
        }
        assert_eq!(line["QueryDuration"], 1500);
        assert_eq!(line["Tasks"], 4);
        assert_eq!(line["BytesRead"], 4096);
        assert_eq!(line["State"], "failed");
        assert_eq!(line["Caller"], "arn:aws:iam::1:user/alice");
        assert_eq!(line["Deployment"], "lf-jobs");
    }
}
