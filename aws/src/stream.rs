//! DynamoDB stream batches -> the scheduler's change records, and the partial batch
//! failure response (`batchItemFailures`) that makes Lambda re-deliver only from the
//! first record whose job could not be advanced.

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use lambdafusion::scheduler::Scheduler;
use lambdafusion::state::{ChangeRecord, SK_META};
use tracing::warn;

/// A decoded stream record.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The record's sequence number (the `itemIdentifier` of a failure).
    pub sequence: String,
    /// The change.
    pub change: ChangeRecord,
}

/// Decodes the new images of a batch. Records that are not job, stage or task items
/// (catalog, index, TTL removals) are skipped; so are records that do not decode — they
/// are logged, never retried: a malformed record must not poison the stream.
pub fn decode(event: &Event) -> Vec<Decoded> {
    let mut out = Vec::with_capacity(event.records.len());
    for record in &event.records {
        let image = &record.change.new_image;
        let sk = match image.get("sk") {
            Some(serde_dynamo::AttributeValue::S(sk)) => sk.clone(),
            _ => continue,
        };
        let decoded = if sk == SK_META {
            serde_dynamo::from_item(image.clone()).map(ChangeRecord::Job)
        } else if sk.starts_with("STAGE#") {
            serde_dynamo::from_item(image.clone()).map(ChangeRecord::Stage)
        } else if sk.starts_with("TASK#") {
            serde_dynamo::from_item(image.clone()).map(ChangeRecord::Task)
        } else if sk.starts_with("COUNT#") {
            serde_dynamo::from_item(image.clone()).map(ChangeRecord::Counter)
        } else {
            continue;
        };
        match decoded {
            Ok(change) => out.push(Decoded {
                sequence: record.change.sequence_number.clone().unwrap_or_default(),
                change,
            }),
            Err(e) => warn!(sk, error = %e, "skipping a stream record that does not decode"),
        }
    }
    out
}

/// Handles one stream batch: advances every job it wakes; the records of jobs that
/// could not be advanced are reported as batch item failures.
pub async fn handle(scheduler: &Scheduler, event: &Event) -> DynamoDbEventResponse {
    let decoded = decode(event);
    let changes: Vec<ChangeRecord> = decoded.iter().map(|d| d.change.clone()).collect();
    let failed = scheduler.advance_records(&changes).await;
    let mut response = DynamoDbEventResponse::default();
    for d in &decoded {
        if failed.iter().any(|(job, _)| job == d.change.job_id()) {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(d.sequence.clone());
            response.batch_item_failures.push(failure);
        }
    }
    for (job, error) in failed {
        warn!(job_id = %job, %error, "stream records will be re-delivered");
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(images: serde_json::Value) -> Event {
        let records: Vec<serde_json::Value> = images
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, image)| {
                serde_json::json!({
                    "eventID": format!("e{i}"), "eventName": "MODIFY", "eventVersion": "1.1",
                    "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
                    "eventSourceARN": "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/x",
                    "dynamodb": {"SequenceNumber": format!("{}", 100 + i), "NewImage": image,
                                  "Keys": {"pk": image["pk"], "sk": image["sk"]},
                                  "StreamViewType": "NEW_IMAGE", "SizeBytes": 10}
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
    }

    #[test]
    fn counter_stage_and_task_images_decode_and_others_are_skipped() {
        let e = event(serde_json::json!([
            {"pk": {"S": "JOB#j"}, "sk": {"S": "COUNT#00001#00000"}, "job_id": {"S": "j"}, "stage": {"N": "1"},
             "counter": {"N": "0"}, "remaining": {"N": "0"}, "done": {"NS": ["0", "1", "2", "3"]},
             "last_commit_ms": {"N": "5"}, "expires_at": {"N": "9"}},
            {"pk": {"S": "JOB#j"}, "sk": {"S": "TASK#00001#000002"}, "job_id": {"S": "j"}, "stage": {"N": "1"},
             "partition": {"N": "2"}, "state": {"S": "FAILED"}, "attempt": {"N": "1"}, "error": {"S": "boom"},
             "retryable": {"BOOL": true}, "failures": {"N": "1"}, "expires_at": {"N": "9"}},
            {"pk": {"S": "CATALOG"}, "sk": {"S": "TABLE#t"}},
            {"pk": {"S": "JOB#j"}, "sk": {"S": "STAGE#00001"}, "job_id": {"S": "j"}, "stage": {"N": "1"},
             "state": {"S": "DISPATCHED"}, "tasks": {"N": "4"},
             "output_partitions": {"N": "1"}, "inputs": {"L": []}, "summary": {"S": "x"},
             "expires_at": {"N": "9"}},
            {"pk": {"S": "JOB#j"}, "sk": {"S": "STAGE#00002"}, "garbage": {"S": "x"}}
        ]));
        let decoded = decode(&e);
        assert_eq!(decoded.len(), 3, "{decoded:?}");
        let wakes: Vec<bool> = decoded.iter().map(|d| d.change.wakes_scheduler()).collect();
        assert_eq!(
            wakes,
            vec![true, true, false],
            "counter at 0 and failed task wake; a stage does not"
        );
        assert_eq!(decoded[0].sequence, "100");
        assert!(matches!(&decoded[0].change, ChangeRecord::Counter(c) if c.done.len() == 4));
        assert!(
            matches!(&decoded[1].change, ChangeRecord::Task(t) if t.error.as_deref() == Some("boom"))
        );
    }
}
