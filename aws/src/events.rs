//! What the scheduler function receives, told apart by shape: HTTP requests (API
//! Gateway HTTP API or function URL, payload 2.0), DynamoDB stream batches, the scheduled
//! sweep (EventBridge), executor invocations that failed for good (the on-failure
//! destination record), fast-path wake-ups and the nodes of invocation trees.

use aws_lambda_events::event::dynamodb::Event as StreamEvent;
use lambda_http::request::RequestContext;
use lambdafusion::access::Caller;
use lambdafusion::dispatch::{DispatchEvent, DispatchRange, TaskSpec};
use serde_json::Value;

use crate::invoker::WakeEvent;

/// A classified scheduler event.
#[derive(Debug)]
pub enum SchedulerEvent {
    /// An HTTP request for the API (handed to `lambda_http` as is).
    Http(Value),
    /// A DynamoDB stream batch.
    Stream(Box<StreamEvent>),
    /// The scheduled sweep.
    Sweep,
    /// An executor finished a stage: advance this job now.
    Wake {
        /// The job.
        job: String,
        /// Not before this time (ms since epoch), if given.
        at_ms: Option<u64>,
    },
    /// A node of an invocation tree: dispatch this range of a stage's tasks.
    Dispatch(DispatchRange),
    /// An executor invocation failed without recording it (crash, timeout, dropped).
    TaskLost {
        /// The task that was invoked.
        task: TaskSpec,
        /// What Lambda reported.
        error: String,
    },
}

/// An event of no known shape.
#[derive(Debug, thiserror::Error)]
#[error("unrecognized scheduler event ({0}); expected an HTTP request, DynamoDB stream records, a scheduled event, a wake-up or a Lambda destination record")]
pub struct UnknownEvent(String);

impl SchedulerEvent {
    /// Tells what `event` is.
    pub fn classify(event: Value) -> Result<Self, UnknownEvent> {
        let describe = |v: &Value| match v.as_object() {
            Some(o) => format!("keys: {}", o.keys().cloned().collect::<Vec<_>>().join(", ")),
            None => format!("a JSON {}", type_name(v)),
        };
        let Some(object) = event.as_object() else {
            return Err(UnknownEvent(describe(&event)));
        };
        if object.contains_key("dispatch") {
            let event: DispatchEvent = serde_json::from_value(event.clone())
                .map_err(|e| UnknownEvent(format!("bad dispatch range: {e}")))?;
            return Ok(Self::Dispatch(event.dispatch));
        }
        if object.contains_key("wake") {
            let wake: WakeEvent = serde_json::from_value(event.clone())
                .map_err(|e| UnknownEvent(format!("bad wake-up: {e}")))?;
            return Ok(Self::Wake {
                job: wake.wake,
                at_ms: wake.at_ms,
            });
        }
        if let Some(records) = object.get("Records").and_then(Value::as_array) {
            let from_dynamodb = records
                .first()
                .and_then(|r| r.get("eventSource"))
                .and_then(Value::as_str)
                == Some("aws:dynamodb");
            if from_dynamodb || records.is_empty() {
                let stream = serde_json::from_value(event.clone())
                    .map_err(|e| UnknownEvent(format!("bad DynamoDB stream batch: {e}")))?;
                return Ok(Self::Stream(Box::new(stream)));
            }
        }
        if object.get("source").and_then(Value::as_str) == Some("aws.events")
            || object.get("detail-type").and_then(Value::as_str) == Some("Scheduled Event")
            || object.contains_key("sweep")
        {
            return Ok(Self::Sweep);
        }
        if let (Some(context), Some(payload)) =
            (object.get("requestContext"), object.get("requestPayload"))
        {
            if context.get("condition").is_some() {
                let task: TaskSpec = serde_json::from_value(payload.clone())
                    .map_err(|e| UnknownEvent(format!("destination record without a task: {e}")))?;
                let condition = context
                    .get("condition")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                let message = object
                    .get("responsePayload")
                    .and_then(|p| p.get("errorMessage").or_else(|| p.get("errorType")))
                    .and_then(Value::as_str)
                    .unwrap_or("no response");
                return Ok(Self::TaskLost {
                    task,
                    error: format!("executor invocation failed ({condition}): {message}"),
                });
            }
        }
        if object
            .get("requestContext")
            .and_then(|c| c.get("http"))
            .is_some()
            || object.contains_key("rawPath")
        {
            return Ok(Self::Http(event));
        }
        Err(UnknownEvent(describe(&event)))
    }
}

/// Principal of callers no authorizer identified (an API without authorization): they
/// share one identity, so they see one another's queries — deploy with IAM or JWT auth.
pub const ANONYMOUS: &str = "anonymous";

/// The caller of an HTTP request, from its request context: the IAM principal ARN
/// (`authorizer.iam.userArn`: API Gateway with IAM auth, or a function URL with
/// `AWS_IAM`), else the JWT subject (`authorizer.jwt.claims.sub`), else
/// [`ANONYMOUS`].
pub fn caller_of(context: Option<&RequestContext>) -> Caller {
    #[allow(irrefutable_let_patterns)]
    let Some(RequestContext::ApiGatewayV2(context)) = context
    else {
        return Caller(ANONYMOUS.into());
    };
    let authorizer = context.authorizer.as_ref();
    let iam = authorizer
        .and_then(|a| a.iam.as_ref())
        .and_then(|iam| iam.user_arn.clone().or_else(|| iam.caller_id.clone()));
    let jwt = authorizer
        .and_then(|a| a.jwt.as_ref())
        .and_then(|jwt| jwt.claims.get("sub").cloned());
    Caller(
        iam.or(jwt)
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| ANONYMOUS.into()),
    )
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_shape_is_recognized() {
        assert!(
            matches!(SchedulerEvent::classify(json!({"wake": "j1"})), Ok(SchedulerEvent::Wake { job, at_ms: None }) if job == "j1")
        );
        let scheduled = json!({"version": "0", "id": "x", "detail-type": "Scheduled Event", "source": "aws.events",
                               "account": "1", "time": "2026-01-01T00:00:00Z", "region": "us-east-1", "resources": [], "detail": {}});
        assert!(matches!(
            SchedulerEvent::classify(scheduled),
            Ok(SchedulerEvent::Sweep)
        ));
        let stream = json!({"Records": [{"eventID": "1", "eventName": "MODIFY", "eventSource": "aws:dynamodb",
                            "eventVersion": "1.1", "awsRegion": "us-east-1",
                            "eventSourceARN": "arn:aws:dynamodb:us-east-1:0:table/t/stream/s",
                            "dynamodb": {"SequenceNumber": "1", "Keys": {}, "NewImage": {},
                                         "StreamViewType": "NEW_IMAGE", "SizeBytes": 1}}]});
        let classified = SchedulerEvent::classify(stream);
        assert!(
            matches!(classified, Ok(SchedulerEvent::Stream(_))),
            "{classified:?}"
        );
        let lost = json!({"version": "1.0", "timestamp": "t",
            "requestContext": {"requestId": "r", "functionArn": "arn", "condition": "RetriesExhausted", "approximateInvokeCount": 1},
            "requestPayload": {"job_id": "j", "stage": 1, "partition": 2, "attempt": 1},
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "responsePayload": {"errorType": "Runtime.ExitError", "errorMessage": "exit status 1"}});
        match SchedulerEvent::classify(lost) {
            Ok(SchedulerEvent::TaskLost { task, error }) => {
                assert_eq!((task.stage, task.partition, task.attempt), (1, 2, 1));
                assert!(
                    error.contains("RetriesExhausted") && error.contains("exit status 1"),
                    "{error}"
                );
            }
            other => panic!("{other:?}"),
        }
        let http = json!({"version": "2.0", "routeKey": "$default", "rawPath": "/v1/queries", "rawQueryString": "",
                          "headers": {}, "requestContext": {"http": {"method": "GET", "path": "/v1/queries"}}, "isBase64Encoded": false});
        assert!(matches!(
            SchedulerEvent::classify(http),
            Ok(SchedulerEvent::Http(_))
        ));
    }

    fn context(authorizer: Value) -> RequestContext {
        let event = json!({"version": "2.0", "routeKey": "$default", "rawPath": "/v1/queries",
            "rawQueryString": "", "headers": {}, "isBase64Encoded": false,
            "requestContext": {"accountId": "1", "apiId": "a", "domainName": "d", "domainPrefix": "d",
                "http": {"method": "GET", "path": "/v1/queries", "protocol": "HTTP/1.1",
                         "sourceIp": "127.0.0.1", "userAgent": "t"},
                "requestId": "r", "routeKey": "$default", "stage": "$default", "time": "t",
                "timeEpoch": 0, "authorizer": authorizer}});
        let request: lambda_http::request::LambdaRequest = serde_json::from_value(event).unwrap();
        let request: lambda_http::Request = request.into();
        use lambda_http::RequestExt;
        request.request_context()
    }

    #[test]
    fn the_caller_is_the_authorizers_principal() {
        let iam = context(
            json!({"iam": {"accessKey": "AK", "accountId": "1", "callerId": "AID",
            "userArn": "arn:aws:iam::1:user/alice", "userId": "AID"}}),
        );
        assert_eq!(caller_of(Some(&iam)).0, "arn:aws:iam::1:user/alice");
        let jwt = context(json!({"jwt": {"claims": {"sub": "user-42"}, "scopes": []}}));
        assert_eq!(caller_of(Some(&jwt)).0, "user-42");
        assert_eq!(caller_of(Some(&context(json!(null)))).0, ANONYMOUS);
        assert_eq!(caller_of(None).0, ANONYMOUS);
    }

    #[test]
    fn unknown_shapes_are_rejected_with_a_description() {
        let err = SchedulerEvent::classify(json!({"hello": 1})).unwrap_err();
        assert!(err.to_string().contains("hello"), "{err}");
        assert!(SchedulerEvent::classify(json!([1, 2])).is_err());
        assert!(SchedulerEvent::classify(json!({"wake": 5})).is_err());
        assert!(
            SchedulerEvent::classify(json!({"Records": [{"eventSource": "aws:sqs"}]})).is_err()
        );
    }
}
