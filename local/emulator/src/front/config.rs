//! The `front` section of the emulator config: where the front listens, where moto_server
//! is, the latencies it adds and the throughput limits it enforces.
//!
//! ```json
//! "front": {
//!   "listen": "127.0.0.1:4566",              // default 127.0.0.1:4566
//!   "upstream": "http://127.0.0.1:5050",     // moto_server; required
//!   "latency": {                             // or "off", or "aws" (the default)
//!     "dynamodb": {"default_ms": 5, "TransactWriteItems": 10},
//!     "dynamodb_streams": {"default_ms": 5, "GetRecords": 5},
//!     "s3": {"first_byte_ms": 25, "PUT": 30},
//!     "lambda": {"default_ms": 20, "Event": 20}  // the Invoke API (served by the emulator)
//!   },
//!   "throughput": {                          // or "off", or "aws" (the default)
//!     "write_units_per_s": 1000, "read_units_per_s": 3000, "burst_secs": 1
//!   },
//!   "transaction_conflicts": true            // default true
//! }
//! ```
//!
//! Every latency key is optional; a service left out keeps its AWS-like defaults (see
//! [`Latency::aws`] for the numbers and their sources), a service set to `"off"` gets
//! none. Transactions default to twice the DynamoDB `default_ms`, since DynamoDB runs
//! every transaction as two underlying writes or reads per item, prepare and commit
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-capacity-handling>).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The front's configuration. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrontConfig {
    /// `host:port` clients connect to (`AWS_ENDPOINT_URL_DYNAMODB` / `_S3`); port 0 picks
    /// a free port (see `emulator.ready`).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// moto_server's URL, `http://host:port`.
    pub upstream: String,
    /// Latency added to every response.
    #[serde(default)]
    pub latency: Latency,
    /// DynamoDB's per-partition throughput limits, enforced per item.
    #[serde(default)]
    pub throughput: Throughput,
    /// Whether transactions conflict with concurrent requests on their items as in
    /// DynamoDB (`TransactionCanceledException` / `TransactionConflictException`).
    #[serde(default = "yes")]
    pub transaction_conflicts: bool,
}

fn default_listen() -> String {
    "127.0.0.1:4566".into()
}
fn yes() -> bool {
    true
}

impl FrontConfig {
    /// A front on `listen` for `upstream` with the AWS-like defaults.
    pub fn new(listen: impl Into<String>, upstream: impl Into<String>) -> FrontConfig {
        FrontConfig {
            listen: listen.into(),
            upstream: upstream.into(),
            latency: Latency::aws(),
            throughput: Throughput::aws(),
            transaction_conflicts: true,
        }
    }

    /// Checks the addresses; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.listen.trim().is_empty() {
            return Err("`listen` must be host:port".into());
        }
        let uri: hyper::Uri = self
            .upstream
            .parse()
            .map_err(|e| format!("`upstream` {:?} is not a URL: {e}", self.upstream))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(format!(
                "`upstream` {:?} must be http://host:port (moto_server)",
                self.upstream
            ));
        }
        Ok(())
    }
}

/// Latencies of the three services, by operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Latency {
    /// DynamoDB, by `X-Amz-Target` operation (`GetItem`, `TransactWriteItems`, ...).
    pub dynamodb: ServiceLatency,
    /// DynamoDB Streams, by operation (`GetRecords`, ...).
    pub dynamodb_streams: ServiceLatency,
    /// S3 time to first byte, by HTTP method.
    pub s3: ServiceLatency,
    /// The Lambda Invoke API's answer, by invocation type (`Event`, `RequestResponse`,
    /// `DryRun`); for `RequestResponse` it comes on top of the function's run.
    pub lambda: ServiceLatency,
}

/// One service's latency: a default and per-operation values.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServiceLatency {
    /// For operations without their own value.
    pub default_ms: u64,
    /// Per operation (DynamoDB) or HTTP method (S3).
    pub operations: BTreeMap<String, u64>,
}

impl ServiceLatency {
    /// The latency of `operation`.
    pub fn get(&self, operation: &str) -> Duration {
        Duration::from_millis(
            self.operations
                .get(operation)
                .copied()
                .unwrap_or(self.default_ms),
        )
    }
}

/// Operations the `dynamodb` latency table may name.
const DYNAMODB_OPERATIONS: &[&str] = &[
    "BatchExecuteStatement",
    "BatchGetItem",
    "BatchWriteItem",
    "CreateBackup",
    "CreateGlobalTable",
    "CreateTable",
    "DeleteBackup",
    "DeleteItem",
    "DeleteTable",
    "DescribeBackup",
    "DescribeContinuousBackups",
    "DescribeEndpoints",
    "DescribeLimits",
    "DescribeTable",
    "DescribeTimeToLive",
    "ExecuteStatement",
    "ExecuteTransaction",
    "GetItem",
    "ListBackups",
    "ListTables",
    "ListTagsOfResource",
    "PutItem",
    "Query",
    "Scan",
    "TagResource",
    "TransactGetItems",
    "TransactWriteItems",
    "UntagResource",
    "UpdateContinuousBackups",
    "UpdateItem",
    "UpdateTable",
    "UpdateTimeToLive",
];
/// Operations the `dynamodb_streams` latency table may name.
const STREAMS_OPERATIONS: &[&str] = &[
    "DescribeStream",
    "GetRecords",
    "GetShardIterator",
    "ListStreams",
];
/// Invocation types the `lambda` latency table may name.
const LAMBDA_INVOCATION_TYPES: &[&str] = &["Event", "RequestResponse", "DryRun"];
/// HTTP methods the `s3` latency table may name.
const S3_METHODS: &[&str] = &["GET", "HEAD", "PUT", "POST", "DELETE"];

/// DynamoDB operations that run as two underlying requests per item.
const TRANSACTIONS: &[&str] = &["TransactWriteItems", "TransactGetItems"];

impl Latency {
    /// AWS-like latencies, measured from inside the Region (a Lambda function):
    ///
    /// * **DynamoDB 5 ms** per request: DynamoDB "delivers single-digit millisecond
    ///   performance at any scale"
    ///   (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Introduction.html>).
    /// * **Transactions 10 ms**: twice that, as each item is prepared and then committed,
    ///   two underlying writes or reads
    ///   (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-capacity-handling>).
    /// * **DynamoDB Streams 5 ms** per call (`GetRecords`, ...): AWS publishes no
    ///   number; a stream read is a small request to the same service.
    /// * **S3 25 ms** to the first byte: for small requests "median latencies are often
    ///   in the tens of milliseconds range"
    ///   (<https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/timeouts-and-retries-for-latency-sensitive-applications.html>).
    /// * **Lambda Invoke 20 ms** until the answer (202 for an `Event`): AWS publishes no
    ///   figure; an asynchronous invoke is an authenticated request that Lambda's
    ///   front end writes to its internal queue before it answers
    ///   (<https://docs.aws.amazon.com/lambda/latest/dg/invocation-async.html>), measured
    ///   from within a Region in the tens of milliseconds. `lambda.cold_start` and the
    ///   function's own queue come on top, as on AWS.
    pub fn aws() -> Latency {
        Latency {
            dynamodb: with_transactions(5, BTreeMap::new()),
            dynamodb_streams: ServiceLatency {
                default_ms: 5,
                operations: BTreeMap::new(),
            },
            s3: ServiceLatency {
                default_ms: 25,
                operations: BTreeMap::new(),
            },
            lambda: ServiceLatency {
                default_ms: 20,
                operations: BTreeMap::new(),
            },
        }
    }

    /// No latency at all (fast tests).
    pub fn off() -> Latency {
        Latency {
            dynamodb: ServiceLatency::default(),
            dynamodb_streams: ServiceLatency::default(),
            s3: ServiceLatency::default(),
            lambda: ServiceLatency::default(),
        }
    }

    fn from_value(value: &Value) -> Result<Latency, String> {
        match value {
            Value::String(s) if s == "off" => Ok(Latency::off()),
            Value::String(s) if s == "aws" || s == "on" => Ok(Latency::aws()),
            Value::Object(map) => {
                let aws = Latency::aws();
                let mut latency = aws.clone();
                for (service, v) in map {
                    match service.as_str() {
                        "dynamodb" => {
                            latency.dynamodb =
                                service_latency(service, v, "default_ms", DYNAMODB_OPERATIONS, 5)?;
                            if !v.is_string() {
                                let default = latency.dynamodb.default_ms;
                                for t in TRANSACTIONS {
                                    latency
                                        .dynamodb
                                        .operations
                                        .entry(t.to_string())
                                        .or_insert(2 * default);
                                }
                            }
                        }
                        "dynamodb_streams" => {
                            latency.dynamodb_streams =
                                service_latency(service, v, "default_ms", STREAMS_OPERATIONS, 5)?
                        }
                        "s3" => {
                            latency.s3 =
                                service_latency(service, v, "first_byte_ms", S3_METHODS, 25)?
                        }
                        "lambda" => {
                            latency.lambda = service_latency(
                                service,
                                v,
                                "default_ms",
                                LAMBDA_INVOCATION_TYPES,
                                20,
                            )?
                        }
                        other => {
                            return Err(format!(
                                "unknown service {other:?} (use dynamodb, dynamodb_streams, s3, lambda)"
                            ))
                        }
                    }
                }
                Ok(latency)
            }
            other => Err(format!(
                "expected \"off\", \"aws\" or an object of services, not {other}"
            )),
        }
    }
}

fn with_transactions(default_ms: u64, mut operations: BTreeMap<String, u64>) -> ServiceLatency {
    for t in TRANSACTIONS {
        operations.entry(t.to_string()).or_insert(2 * default_ms);
    }
    ServiceLatency {
        default_ms,
        operations,
    }
}

fn service_latency(
    service: &str,
    value: &Value,
    default_key: &str,
    known: &[&str],
    aws_default: u64,
) -> Result<ServiceLatency, String> {
    let map = match value {
        Value::String(s) if s == "off" => return Ok(ServiceLatency::default()),
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "{service}: expected \"off\" or {{\"{default_key}\": ms, \"<operation>\": ms}}, not {other}"
            ))
        }
    };
    let mut latency = ServiceLatency {
        default_ms: aws_default,
        operations: BTreeMap::new(),
    };
    for (key, v) in map {
        let ms = v.as_u64().ok_or_else(|| {
            format!("{service}.{key}: expected milliseconds (an integer), not {v}")
        })?;
        if key == default_key {
            latency.default_ms = ms;
        } else if known.contains(&key.as_str()) {
            latency.operations.insert(key.clone(), ms);
        } else {
            return Err(format!(
                "{service}: unknown key {key:?}; use {default_key:?} or one of {}",
                known.join(", ")
            ));
        }
    }
    Ok(latency)
}

impl Default for Latency {
    fn default() -> Self {
        Latency::aws()
    }
}

impl<'de> Deserialize<'de> for Latency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Latency::from_value(&value).map_err(|e| D::Error::custom(format!("latency: {e}")))
    }
}

/// DynamoDB's per-partition throughput limits, applied to each item as if it had a
/// partition of its own (what adaptive capacity does to a hot item: it is isolated, but
/// one partition's limits still apply).
#[derive(Debug, Clone, PartialEq)]
pub struct Throughput {
    /// Whether the limits are enforced at all.
    pub enabled: bool,
    /// Write capacity units per second per item (AWS: 1,000 per partition).
    pub write_units_per_s: f64,
    /// Read capacity units per second per item (AWS: 3,000 per partition).
    pub read_units_per_s: f64,
    /// Seconds of unused capacity an item can save up and spend in a burst.
    pub burst_secs: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThroughput {
    #[serde(default = "default_wcu")]
    write_units_per_s: f64,
    #[serde(default = "default_rcu")]
    read_units_per_s: f64,
    #[serde(default = "default_burst")]
    burst_secs: f64,
}

fn default_wcu() -> f64 {
    1000.0
}
fn default_rcu() -> f64 {
    3000.0
}
fn default_burst() -> f64 {
    1.0
}

impl Throughput {
    /// DynamoDB's limits: "each individual partition is limited to 1000 write units per
    /// second and 3000 read units per second"
    /// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html>),
    /// also after adaptive capacity has isolated a hot item on a partition of its own
    /// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/burst-adaptive-capacity.html#isolate-frequent-access-items>).
    /// Burst: one second's worth. (DynamoDB keeps up to 300 s of unused *table*
    /// capacity for bursts, but that never lifts a partition above its limits.)
    pub fn aws() -> Throughput {
        Throughput {
            enabled: true,
            write_units_per_s: default_wcu(),
            read_units_per_s: default_rcu(),
            burst_secs: default_burst(),
        }
    }

    /// No limits.
    pub fn off() -> Throughput {
        Throughput {
            enabled: false,
            ..Throughput::aws()
        }
    }

    fn from_value(value: &Value) -> Result<Throughput, String> {
        match value {
            Value::String(s) if s == "off" => Ok(Throughput::off()),
            Value::String(s) if s == "aws" || s == "on" => Ok(Throughput::aws()),
            Value::Object(_) => {
                let raw: RawThroughput =
                    serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
                for (name, v) in [
                    ("write_units_per_s", raw.write_units_per_s),
                    ("read_units_per_s", raw.read_units_per_s),
                    ("burst_secs", raw.burst_secs),
                ] {
                    if !(v.is_finite() && v > 0.0) {
                        return Err(format!("{name} must be a positive number, not {v}"));
                    }
                }
                Ok(Throughput {
                    enabled: true,
                    write_units_per_s: raw.write_units_per_s,
                    read_units_per_s: raw.read_units_per_s,
                    burst_secs: raw.burst_secs,
                })
            }
            other => Err(format!(
                "expected \"off\", \"aws\" or an object, not {other}"
            )),
        }
    }
}

impl Default for Throughput {
    fn default() -> Self {
        Throughput::aws()
    }
}

impl<'de> Deserialize<'de> for Throughput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Throughput::from_value(&value).map_err(|e| D::Error::custom(format!("throughput: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<FrontConfig, String> {
        let c: FrontConfig = serde_json::from_value(v).map_err(|e| e.to_string())?;
        c.validate()?;
        Ok(c)
    }

    #[test]
    fn defaults_are_aws_like() {
        let c = parse(json!({"upstream": "http://127.0.0.1:5050"})).unwrap();
        assert_eq!(c.listen, "127.0.0.1:4566");
        assert_eq!(c.latency.dynamodb.get("GetItem").as_millis(), 5);
        assert_eq!(c.latency.dynamodb.get("TransactWriteItems").as_millis(), 10);
        assert_eq!(c.latency.dynamodb_streams.get("GetRecords").as_millis(), 5);
        assert_eq!(c.latency.s3.get("GET").as_millis(), 25);
        assert_eq!(c.latency.lambda.get("Event").as_millis(), 20);
        assert_eq!(c.throughput, Throughput::aws());
        assert!(c.transaction_conflicts);
    }

    #[test]
    fn latency_tables_and_switches() {
        let c = parse(
            json!({"upstream": "http://127.0.0.1:5050", "latency": "off", "throughput": "off"}),
        )
        .unwrap();
        assert_eq!(c.latency, Latency::off());
        assert!(!c.throughput.enabled);

        let c = parse(json!({"upstream": "http://127.0.0.1:5050",
            "latency": {"dynamodb": {"default_ms": 2, "GetItem": 7}, "s3": {"first_byte_ms": 40, "PUT": 60},
                        "dynamodb_streams": "off", "lambda": {"Event": 3}},
            "throughput": {"write_units_per_s": 10}}))
        .unwrap();
        let l = &c.latency;
        assert_eq!(l.dynamodb.get("PutItem").as_millis(), 2);
        assert_eq!(l.dynamodb.get("GetItem").as_millis(), 7);
        assert_eq!(
            l.dynamodb.get("TransactWriteItems").as_millis(),
            4,
            "2 x default"
        );
        assert_eq!(l.s3.get("GET").as_millis(), 40);
        assert_eq!(l.s3.get("PUT").as_millis(), 60);
        assert_eq!(l.dynamodb_streams.get("GetRecords").as_millis(), 0);
        assert_eq!(l.lambda.get("Event").as_millis(), 3);
        assert_eq!(
            l.lambda.get("RequestResponse").as_millis(),
            20,
            "the AWS default"
        );
        assert_eq!(c.throughput.write_units_per_s, 10.0);
        assert_eq!(c.throughput.read_units_per_s, 3000.0);

        for (bad, why) in [
            (
                json!({"upstream": "http://h:1", "latency": {"dynamodb": {"TransactWriteItem": 3}}}),
                "unknown key",
            ),
            (
                json!({"upstream": "http://h:1", "latency": {"sqs": {}}}),
                "unknown service",
            ),
            (
                json!({"upstream": "http://h:1", "latency": {"s3": {"first_byte_ms": -1}}}),
                "milliseconds",
            ),
            (
                json!({"upstream": "http://h:1", "latency": "fast"}),
                "expected",
            ),
            (
                json!({"upstream": "http://h:1", "throughput": {"burst_secs": 0}}),
                "positive",
            ),
            (
                json!({"upstream": "http://h:1", "throughput": {"wcu": 1}}),
                "unknown field",
            ),
            (json!({"upstream": "https://h:1"}), "http://host:port"),
            (
                json!({"upstream": "http://h:1", "colour": 1}),
                "unknown field",
            ),
        ] {
            let e = parse(bad.clone()).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
