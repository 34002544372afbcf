//! The DynamoDB stream trigger (Lambda event-source mapping), polling DynamoDB Streams
//! (moto_server locally) with `aws-sdk-dynamodbstreams`.
//!
//! At start-up the poller finds the table's latest stream (`ListStreams`), its shards
//! and key schema (`DescribeStream`) and takes a `LATEST` iterator for each shard (or
//! `TRIM_HORIZON`, see `starting_position`); streams and shards that appear later (a
//! re-created table, a split) are read from their start. Every `poll_interval_ms` it
//! calls `GetRecords` for each shard whose records are all delivered, following
//! `NextShardIterator`.
//!
//! Records are delivered as real Lambda delivers them: DynamoDB JSON (`{"S": ..}`,
//! `{"N": ".."}`, …) plus `eventSource`, `eventSourceARN`, `awsRegion`,
//! `eventVersion`, in `{"Records": [...]}` of at most `batch_size` records, invoked
//! synchronously. Records that match none of the filters are skipped.
//!
//! **Parallelization factor**
//! (<https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html#services-ddb-windows>,
//! "concurrent batches per shard"): each shard's records are spread over
//! `parallelization_factor` lanes by a hash of their partition key (the table's hash
//! key in `dynamodb.Keys`); the lanes deliver concurrently, each in order, so records
//! with the same partition key keep their order and never are in two concurrent
//! batches, while different keys run side by side.
//!
//! **Errors.** The response is read as a partial batch response, as with
//! `FunctionResponseTypes: ReportBatchItemFailures`
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>):
//! an empty or `null` response, `{}`, or a `null` or empty `batchItemFailures` list is
//! complete success; `{"batchItemFailures": [{"itemIdentifier": "<SequenceNumber>"}]}`
//! re-delivers from the lowest failed record; anything else — a body that is not JSON,
//! JSON that is not such an object, an item without a string `itemIdentifier`, an empty
//! identifier, or one that is not a sequence number of the batch — fails the whole
//! batch. A function error re-delivers the whole batch, or its first half with
//! `bisect_batch_on_function_error` (halving until one record fails alone; bisections
//! are not counted as retries). After `maximum_retry_attempts` failed deliveries the
//! batch is written to `<state_dir>/logs/stream-failures.log` and skipped.
//!
//! **Faults** (the shared plan; keys in [`crate::injection`]):
//! `streams.delay_record` holds a batch back `ms..max_ms` before its first delivery;
//! `streams.split_batch` delivers a batch of two or more records as two batches (its
//! first half, then the rest); `streams.duplicate_record` delivers a record that was
//! processed successfully once more, in a later batch of its lane.

use aws_sdk_dynamodbstreams::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodbstreams::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_dynamodbstreams::types::{AttributeValue, KeyType, Record, ShardIteratorType};
use aws_sdk_dynamodbstreams::Client;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use base64::Engine;
use bytes::Bytes;
use lambdafusion_faults::FaultKind;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::config::StreamMappingConfig;
use crate::filter;
use crate::function::{Outcome, Registry, Target, MAX_SYNC_PAYLOAD};
use crate::injection::{self, Injector};
use crate::time;
use crate::Error;

/// How often the poller looks for new streams and shards.
const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// One running stream trigger.
pub struct StreamPoller {
    config: StreamMappingConfig,
    registry: Arc<Registry>,
    target: Target,
    filters: Vec<Value>,
    client: Client,
    failures_log: PathBuf,
    injector: Injector,
    stream_arn: Option<String>,
    /// The table's hash key attribute, from `DescribeStream` (records are spread over
    /// lanes by its value; by all their keys when it is unknown).
    hash_key: Option<String>,
    shards: Vec<ShardState>,
    /// Shards discovered so far (the next shard's ordinal, used in fault keys).
    shards_seen: usize,
    /// Whether a `ListStreams` call has succeeded yet (the first one uses
    /// `starting_position`; everything found later is read from its start).
    discovered: bool,
    last_refresh: Option<Instant>,
    last_error: Option<String>,
}

/// Reading position and undelivered records of one shard.
struct ShardState {
    id: String,
    /// Index of the shard in discovery order.
    ordinal: usize,
    /// `None` once the shard is closed (no `NextShardIterator`).
    iterator: Option<String>,
    /// Sequence number of the last record read (delivered or filtered out).
    last_seq: Option<String>,
    /// Records read so far (the next record's position).
    read: u64,
    /// `parallelization_factor` lanes of records that passed the filters.
    lanes: Vec<Lane>,
}

/// A record waiting for delivery.
#[derive(Debug, Clone)]
struct Pending {
    record: Value,
    /// Position in the shard (0-based, in read order).
    pos: u64,
    /// A copy `streams.duplicate_record` added (not duplicated again).
    duplicate: bool,
}

/// One ordered sequence of a shard's records; lanes deliver concurrently.
#[derive(Debug, Default)]
struct Lane {
    pending: VecDeque<Pending>,
    /// Failed deliveries of the batch at the head of `pending`.
    attempts: u32,
    /// Batch size while bisecting a failing batch, or delivering the first half of a
    /// split one.
    batch_limit: Option<usize>,
    /// `streams.split_batch`: size of the split batch's second half, delivered whole
    /// once the first half succeeded.
    split_rest: Option<usize>,
    /// The next batch is that second half: exactly this many records, no new faults.
    forced: Option<usize>,
}

impl Lane {
    fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }
}

/// A DynamoDB Streams client for moto_server (or any endpoint): the given region, rustls
/// with ring, and the credentials of `role` for `function` (Lambda reads a stream with
/// the execution role of the function it invokes), or the static `test` ones.
pub fn streams_client(
    endpoint: &str,
    region: &str,
    role: Option<(&crate::iam::RoleConfig, &str)>,
) -> Client {
    let credentials = match role {
        Some((role, function)) => {
            let c = role.credentials(function);
            Credentials::new(
                c.access_key,
                c.secret_key,
                Some(c.session_token),
                None,
                "lambdafusion-local",
            )
        }
        None => Credentials::new("test", "test", None, None, "lambdafusion-local"),
    };
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let timeouts = aws_sdk_dynamodbstreams::config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(2))
        .operation_timeout(Duration::from_secs(15))
        .build();
    let config = aws_sdk_dynamodbstreams::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .endpoint_url(endpoint)
        .credentials_provider(credentials)
        .http_client(http)
        .timeout_config(timeouts)
        .build();
    Client::from_conf(config)
}

impl StreamPoller {
    /// Prepares a poller (no network yet). `failures_log` is where exhausted batches go.
    pub fn new(
        config: StreamMappingConfig,
        registry: Arc<Registry>,
        failures_log: PathBuf,
    ) -> Result<StreamPoller, Error> {
        let target = registry
            .resolve(&config.function, None)
            .ok_or_else(|| format!("stream mapping: unknown function {:?}", config.function))?;
        let filters = filter::parse_filters(&config.filters)?;
        let role = registry
            .function_config(&config.function)
            .and_then(|f| f.role.as_ref());
        let client = streams_client(
            &config.dynamodb_endpoint,
            &registry.region,
            role.map(|r| (r, config.function.as_str())),
        );
        let injector = registry.injector().clone();
        Ok(StreamPoller {
            config,
            registry,
            target,
            filters,
            client,
            failures_log,
            injector,
            stream_arn: None,
            hash_key: None,
            shards: Vec::new(),
            shards_seen: 0,
            discovered: false,
            last_refresh: None,
            last_error: None,
        })
    }

    /// Finds the stream and takes the start-up iterators. The emulator calls this before
    /// it reports ready, so that writes made after that are seen.
    pub async fn init(&mut self) -> Result<(), Error> {
        self.refresh().await
    }

    /// Polls until `shutdown` becomes true.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let interval = Duration::from_millis(self.config.poll_interval_ms.max(10));
        loop {
            let due = self.stream_arn.is_none()
                || self
                    .last_refresh
                    .is_none_or(|t| t.elapsed() >= REFRESH_EVERY);
            if due {
                match self.refresh().await {
                    Ok(()) => self.last_error = None,
                    Err(e) => self.report_error(format!(
                        "looking for the stream of table {:?}: {e}",
                        self.config.table
                    )),
                }
            }
            tokio::select! {
                _ = self.poll_shards() => {}
                _ = crate::instance::stopped(&mut shutdown) => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = crate::instance::stopped(&mut shutdown) => return,
            }
        }
    }

    /// Logs an error once, not at every poll.
    fn report_error(&mut self, message: String) {
        if self.last_error.as_deref() != Some(message.as_str()) {
            warn!(table = %self.config.table, "{message}");
            self.last_error = Some(message);
        }
    }

    /// Follows the table's latest stream and picks up new shards.
    async fn refresh(&mut self) -> Result<(), Error> {
        self.last_refresh = Some(Instant::now());
        let listed = self
            .client
            .list_streams()
            .table_name(&self.config.table)
            .send()
            .await
            .map_err(|e| DisplayErrorContext(e).to_string())?;
        let first = !self.discovered;
        self.discovered = true;
        let latest = listed
            .streams()
            .iter()
            .filter(|s| s.table_name().is_none_or(|t| t == self.config.table))
            .max_by(|a, b| a.stream_label().cmp(&b.stream_label()))
            .and_then(|s| s.stream_arn())
            .map(str::to_string);
        let Some(arn) = latest else {
            if self.stream_arn.take().is_some() {
                info!(table = %self.config.table, "the table's stream is gone");
                self.shards.clear();
            } else if first {
                info!(table = %self.config.table, "no stream yet; waiting for the table and its stream");
            }
            return Ok(());
        };
        let position = if first && self.config.starting_position == "LATEST" {
            ShardIteratorType::Latest
        } else {
            ShardIteratorType::TrimHorizon
        };
        if self.stream_arn.as_deref() != Some(arn.as_str()) {
            info!(table = %self.config.table, function = %self.config.function, stream = %arn, "reading stream");
            self.stream_arn = Some(arn.clone());
            self.shards.clear();
        }
        let mut shard_ids = Vec::new();
        let mut start_after: Option<String> = None;
        loop {
            let described = self
                .client
                .describe_stream()
                .stream_arn(&arn)
                .set_exclusive_start_shard_id(start_after.clone())
                .send()
                .await
                .map_err(|e| DisplayErrorContext(e).to_string())?;
            let Some(desc) = described.stream_description() else {
                break;
            };
            if let Some(hash) = desc
                .key_schema()
                .iter()
                .find(|k| k.key_type() == &KeyType::Hash)
            {
                self.hash_key = Some(hash.attribute_name().to_string());
            }
            shard_ids.extend(
                desc.shards()
                    .iter()
                    .filter_map(|s| s.shard_id())
                    .map(str::to_string),
            );
            start_after = desc.last_evaluated_shard_id().map(str::to_string);
            if start_after.is_none() {
                break;
            }
        }
        for id in shard_ids {
            if self.shards.iter().any(|s| s.id == id) {
                continue;
            }
            let iterator = self
                .client
                .get_shard_iterator()
                .stream_arn(&arn)
                .shard_id(&id)
                .shard_iterator_type(position.clone())
                .send()
                .await
                .map_err(|e| DisplayErrorContext(e).to_string())?
                .shard_iterator()
                .map(str::to_string);
            debug!(table = %self.config.table, shard = %id, ?position, "shard iterator taken");
            let ordinal = self.shards_seen;
            self.shards_seen += 1;
            self.shards.push(ShardState {
                id,
                ordinal,
                iterator,
                last_seq: None,
                read: 0,
                lanes: (0..self.config.parallelization_factor)
                    .map(|_| Lane::default())
                    .collect(),
            });
        }
        Ok(())
    }

    /// One round: read each shard whose records are all delivered, then deliver its
    /// lanes concurrently.
    async fn poll_shards(&mut self) {
        let Some(arn) = self.stream_arn.clone() else {
            return;
        };
        for idx in 0..self.shards.len() {
            if self.shards[idx].lanes.iter().all(Lane::is_idle) {
                if let Err(e) = self.read_shard(idx, &arn).await {
                    let id = self.shards[idx].id.clone();
                    self.report_error(format!("GetRecords on shard {id}: {e}"));
                    continue;
                }
            }
            let mut lanes = std::mem::take(&mut self.shards[idx].lanes);
            let ctx = Delivery {
                poller: self,
                arn: &arn,
                shard_id: &self.shards[idx].id,
                shard_ordinal: self.shards[idx].ordinal,
            };
            futures::future::join_all(lanes.iter_mut().map(|lane| ctx.drain(lane))).await;
            self.shards[idx].lanes = lanes;
        }
        self.shards
            .retain(|s| s.iterator.is_some() || !s.lanes.iter().all(Lane::is_idle));
    }

    async fn read_shard(&mut self, idx: usize, arn: &str) -> Result<(), Error> {
        let Some(iterator) = self.shards[idx].iterator.clone() else {
            return Ok(());
        };
        let limit = self.config.batch_size.clamp(100, 1000) as i32;
        let result = self
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(limit)
            .send()
            .await;
        let output = match result {
            Ok(o) => o,
            Err(e) => {
                let code = e.code().unwrap_or_default().to_string();
                if code == "ExpiredIteratorException" || code == "TrimmedDataAccessException" {
                    self.renew_iterator(idx, arn).await?;
                    return Ok(());
                }
                return Err(DisplayErrorContext(e).to_string().into());
            }
        };
        let factor = self.config.parallelization_factor.max(1);
        let shard = &mut self.shards[idx];
        shard.iterator = output.next_shard_iterator().map(str::to_string);
        for record in output.records() {
            let json = record_json(record, arn, &self.registry.region);
            shard.last_seq = record
                .dynamodb()
                .and_then(|d| d.sequence_number())
                .map(str::to_string);
            let pos = shard.read;
            shard.read += 1;
            if filter::matches_any(&self.filters, &json) {
                let lane = lane_of(&json, self.hash_key.as_deref(), factor);
                shard.lanes[lane].pending.push_back(Pending {
                    record: json,
                    pos,
                    duplicate: false,
                });
            }
        }
        Ok(())
    }

    /// Takes a fresh iterator after the last record read (or at the shard's start).
    async fn renew_iterator(&mut self, idx: usize, arn: &str) -> Result<(), Error> {
        let shard = &self.shards[idx];
        let mut request = self
            .client
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(&shard.id);
        request = match &shard.last_seq {
            Some(seq) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(seq),
            None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
        };
        let output = request
            .send()
            .await
            .map_err(|e| DisplayErrorContext(e).to_string())?;
        self.shards[idx].iterator = output.shard_iterator().map(str::to_string);
        Ok(())
    }
}

/// The lane of a record: a hash of its partition key (the `hash_key` attribute of
/// `dynamodb.Keys`, or all of `Keys` when the key schema is unknown) modulo `factor`.
fn lane_of(record: &Value, hash_key: Option<&str>, factor: usize) -> usize {
    if factor <= 1 {
        return 0;
    }
    let keys = &record["dynamodb"]["Keys"];
    let key = match hash_key {
        Some(name) if !keys[name].is_null() => &keys[name],
        _ => keys,
    };
    (injection::fnv1a(key.to_string().as_bytes()) % factor as u64) as usize
}

/// What the lanes of one shard share while they deliver.
struct Delivery<'a> {
    poller: &'a StreamPoller,
    arn: &'a str,
    shard_id: &'a str,
    shard_ordinal: usize,
}

impl Delivery<'_> {
    /// Delivers a lane's batches until it is empty or a batch must wait for the next poll.
    async fn drain(&self, lane: &mut Lane) {
        while !lane.pending.is_empty() {
            if !self.deliver(lane).await {
                break;
            }
        }
    }

    /// Delivers the batch at the head of a lane. Returns whether delivery may go on with
    /// the next batch in this round.
    async fn deliver(&self, lane: &mut Lane) -> bool {
        let p = self.poller;
        let config = &p.config;
        let (first_pos, first_dup) = lane
            .pending
            .front()
            .map(|r| (r.pos, r.duplicate))
            .unwrap_or((0, false));
        let dup = if first_dup { "#dup" } else { "" };
        let batch_key = format!("{}#{}#{first_pos}{dup}", config.table, self.shard_ordinal);
        let fresh = lane.attempts == 0 && lane.batch_limit.is_none() && lane.forced.is_none();
        let limit = lane
            .batch_limit
            .or(lane.forced)
            .unwrap_or(config.batch_size);
        let mut batch = take_batch(&lane.pending, limit);
        if fresh && p.injector.is_active() {
            if batch.len() >= 2 && p.injector.fire(FaultKind::StreamsSplitBatch, &batch_key) {
                let half = batch.len().div_ceil(2);
                info!(table = %config.table, key = %batch_key,
                    "fault streams.split_batch: a batch of {} delivered as {half} + {}", batch.len(), batch.len() - half);
                lane.split_rest = Some(batch.len() - half);
                lane.batch_limit = Some(half);
                batch.truncate(half);
            }
            if let Some(d) = p.injector.delay(FaultKind::StreamsDelayRecord, &batch_key) {
                info!(table = %config.table, key = %batch_key, "fault streams.delay_record: batch held back {d:?}");
                tokio::time::sleep(d).await;
            }
        }
        let count = batch.len();
        let records: Vec<&Value> = batch.iter().map(|r| &r.record).collect();
        let payload = Bytes::from(json!({ "Records": records }).to_string());
        let invoke_key = format!("{batch_key}#{count}#{}", lane.attempts);
        let Ok(pending) = p
            .registry
            .invoke_sync(&p.target, payload, None, &invoke_key)
        else {
            debug!(function = %config.function, "stream batch throttled; retrying at the next poll");
            return false;
        };
        let (failed_from, reason, function_error) = match pending.await {
            None => return false, // shutting down
            Some(Outcome::Success { body, .. }) => match first_failed_item(&body, &records) {
                Ok(None) => {
                    self.succeeded(lane, count, true);
                    return true;
                }
                Ok(Some(i)) => {
                    let seq = sequence_number(records[i]).to_string();
                    (
                        i,
                        format!("batchItemFailures from sequence number {seq}"),
                        false,
                    )
                }
                Err(why) => (0, why, false),
            },
            Some(Outcome::Error { error_type, body }) => {
                let body = String::from_utf8_lossy(&body);
                (0, format!("function error {error_type}: {body}"), true)
            }
            Some(Outcome::Expired) => (0, "invocation expired".to_string(), true),
        };
        if function_error && config.bisect_batch_on_function_error && count > 1 {
            // Split the batch and retry its first half at once; a bisection is not a retry.
            let half = count.div_ceil(2);
            lane.batch_limit = Some(half);
            lane.split_rest = None;
            lane.forced = None;
            info!(table = %config.table, function = %config.function,
                "stream batch of {count} failed ({reason}); bisecting, retrying the first {half}");
            return true;
        }
        if failed_from > 0 {
            self.succeeded(lane, failed_from, false);
        }
        lane.attempts += 1;
        let max = config.maximum_retry_attempts;
        if max >= 0 && i64::from(lane.attempts) > max {
            let dropped: Vec<Value> = lane
                .pending
                .drain(..count - failed_from)
                .map(|r| r.record)
                .collect();
            let attempts = lane.attempts;
            lane.attempts = 0;
            lane.batch_limit = None;
            lane.split_rest = None;
            lane.forced = None;
            warn!(table = %config.table, function = %config.function, shard = %self.shard_id,
                records = dropped.len(),
                "stream batch failed {attempts} times ({reason}); skipped, see stream-failures.log");
            self.log_failure(attempts, &reason, dropped);
            true
        } else {
            info!(table = %config.table, function = %config.function, attempt = lane.attempts,
                "stream batch failed ({reason}); retrying");
            false
        }
    }

    /// The first `n` records of the lane were processed: drop them (duplicating those
    /// `streams.duplicate_record` hits). `whole`: the batch is done, move on to the next
    /// (the second half of a split one, if it was split); else the rest of the batch is
    /// retried.
    fn succeeded(&self, lane: &mut Lane, n: usize, whole: bool) {
        let p = self.poller;
        let done: Vec<Pending> = lane.pending.drain(..n).collect();
        if p.injector.is_active() {
            for record in done.into_iter().filter(|r| !r.duplicate) {
                let key = format!("{}#{}#{}", p.config.table, self.shard_ordinal, record.pos);
                if p.injector.fire(FaultKind::StreamsDuplicateRecord, &key) {
                    info!(table = %p.config.table, %key, "fault streams.duplicate_record: record will be delivered again");
                    lane.pending.push_back(Pending {
                        duplicate: true,
                        ..record
                    });
                }
            }
        }
        lane.attempts = 0;
        if whole {
            lane.forced = if lane.batch_limit.take().is_some() {
                lane.split_rest.take()
            } else {
                None
            };
        } else {
            lane.batch_limit = lane.batch_limit.map(|l| l.saturating_sub(n).max(1));
            lane.forced = lane.forced.map(|f| f.saturating_sub(n).max(1));
        }
    }

    fn log_failure(&self, attempts: u32, reason: &str, records: Vec<Value>) {
        let config = &self.poller.config;
        let line = json!({
            "timestamp": time::rfc3339_ms(time::now_ms()),
            "table": config.table,
            "function": config.function,
            "streamArn": self.arn,
            "shardId": self.shard_id,
            "attempts": attempts,
            "reason": reason,
            "records": records,
        });
        let path = &self.poller.failures_log;
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes())); // one write: lines never interleave
        if let Err(e) = written {
            warn!("cannot write {}: {e}", path.display());
        }
    }
}

/// Up to `batch_size` records from the head, keeping the payload under 6 MB.
fn take_batch(pending: &VecDeque<Pending>, batch_size: usize) -> Vec<Pending> {
    let budget = MAX_SYNC_PAYLOAD - 1024;
    let mut size = 0;
    let mut batch = Vec::new();
    for record in pending.iter().take(batch_size) {
        let len = record.record.to_string().len() + 1;
        if !batch.is_empty() && size + len > budget {
            break;
        }
        size += len;
        batch.push(record.clone());
    }
    batch
}

fn sequence_number(record: &Value) -> &str {
    record["dynamodb"]["SequenceNumber"].as_str().unwrap_or("")
}

/// Reads a partial batch response by AWS's rules (see the module docs). `Ok(None)`: all
/// succeeded; `Ok(Some(i))`: re-deliver from record `i`; `Err`: the whole batch failed.
fn first_failed_item(response: &[u8], batch: &[&Value]) -> Result<Option<usize>, String> {
    if response.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let doc = serde_json::from_slice::<Value>(response).map_err(|e| {
        format!(
            "the response is not JSON ({e}): {}",
            String::from_utf8_lossy(&response[..response.len().min(200)])
        )
    })?;
    let map = match doc {
        Value::Null => return Ok(None),
        Value::Object(map) => map,
        other => {
            return Err(format!(
                "the response is not a batch response object: {}",
                truncate(&other.to_string())
            ))
        }
    };
    let failures = match map.get("batchItemFailures") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(f)) if f.is_empty() => return Ok(None),
        Some(Value::Array(f)) => f,
        Some(other) => {
            return Err(format!(
                "batchItemFailures is not a list: {}",
                truncate(&other.to_string())
            ))
        }
    };
    let mut first: Option<usize> = None;
    for failure in failures {
        let id = match failure.get("itemIdentifier") {
            Some(Value::String(id)) if !id.is_empty() => id,
            _ => {
                return Err(format!(
                    "batchItemFailures holds {}, not an item with a non-empty itemIdentifier",
                    truncate(&failure.to_string())
                ))
            }
        };
        let Some(pos) = batch.iter().position(|r| sequence_number(r) == id) else {
            return Err(format!(
                "batchItemFailures names {id:?}, not a sequence number of the batch"
            ));
        };
        first = Some(first.map_or(pos, |f| f.min(pos)));
    }
    Ok(first)
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// A stream record as Lambda delivers it.
pub fn record_json(record: &Record, stream_arn: &str, region: &str) -> Value {
    let mut out = Map::new();
    out.insert(
        "eventID".into(),
        json!(record.event_id().unwrap_or_default()),
    );
    out.insert(
        "eventName".into(),
        json!(record.event_name().map(|n| n.as_str()).unwrap_or_default()),
    );
    out.insert(
        "eventVersion".into(),
        json!(record.event_version().unwrap_or("1.1")),
    );
    out.insert("eventSource".into(), json!("aws:dynamodb"));
    out.insert("awsRegion".into(), json!(region));
    if let Some(d) = record.dynamodb() {
        let mut dynamodb = Map::new();
        if let Some(t) = d.approximate_creation_date_time() {
            let value = if t.subsec_nanos() == 0 {
                json!(t.secs())
            } else {
                json!(t.as_secs_f64())
            };
            dynamodb.insert("ApproximateCreationDateTime".into(), value);
        }
        let images = [
            ("Keys", d.keys()),
            ("NewImage", d.new_image()),
            ("OldImage", d.old_image()),
        ];
        for (name, image) in images {
            if let Some(image) = image {
                dynamodb.insert(name.into(), item_json(image));
            }
        }
        if let Some(seq) = d.sequence_number() {
            dynamodb.insert("SequenceNumber".into(), json!(seq));
        }
        dynamodb.insert("SizeBytes".into(), json!(d.size_bytes().unwrap_or(0)));
        if let Some(v) = d.stream_view_type() {
            dynamodb.insert("StreamViewType".into(), json!(v.as_str()));
        }
        out.insert("dynamodb".into(), Value::Object(dynamodb));
    }
    if let Some(identity) = record.user_identity() {
        out.insert(
            "userIdentity".into(),
            json!({"type": identity.r#type().unwrap_or_default(), "principalId": identity.principal_id().unwrap_or_default()}),
        );
    }
    out.insert("eventSourceARN".into(), json!(stream_arn));
    Value::Object(out)
}

/// A DynamoDB item in DynamoDB JSON.
pub fn item_json(item: &HashMap<String, AttributeValue>) -> Value {
    Value::Object(
        item.iter()
            .map(|(k, v)| (k.clone(), attribute_json(v)))
            .collect(),
    )
}

fn attribute_json(v: &AttributeValue) -> Value {
    let b64 = |b: &aws_sdk_dynamodbstreams::primitives::Blob| {
        base64::engine::general_purpose::STANDARD.encode(b.as_ref())
    };
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": b64(b) }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(n) => json!({ "NULL": n }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::Bs(v) => json!({ "BS": v.iter().map(b64).collect::<Vec<_>>() }),
        AttributeValue::L(v) => json!({ "L": v.iter().map(attribute_json).collect::<Vec<_>>() }),
        AttributeValue::M(m) => json!({ "M": item_json(m) }),
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodbstreams::primitives::{Blob, DateTime};
    use aws_sdk_dynamodbstreams::types::{OperationType, StreamRecord, StreamViewType};

    fn sdk_record(seq: &str) -> Record {
        let image: HashMap<String, AttributeValue> = [
            ("pk".to_string(), AttributeValue::S("Q#1".into())),
            ("sk".to_string(), AttributeValue::S("STAGE#0".into())),
            ("remaining".to_string(), AttributeValue::N("0".into())),
            (
                "flags".to_string(),
                AttributeValue::L(vec![AttributeValue::Bool(true), AttributeValue::Null(true)]),
            ),
            (
                "blob".to_string(),
                AttributeValue::B(Blob::new(vec![1, 2, 3])),
            ),
            (
                "m".to_string(),
                AttributeValue::M([("k".to_string(), AttributeValue::Ss(vec!["a".into()]))].into()),
            ),
        ]
        .into();
        let keys: HashMap<String, AttributeValue> = [
            ("pk".to_string(), AttributeValue::S("Q#1".into())),
            ("sk".to_string(), AttributeValue::S("STAGE#0".into())),
        ]
        .into();
        Record::builder()
            .event_id("e1")
            .event_name(OperationType::Modify)
            .event_version("1.1")
            .aws_region("us-east-1")
            .dynamodb(
                StreamRecord::builder()
                    .approximate_creation_date_time(DateTime::from_secs(1_700_000_000))
                    .set_keys(Some(keys))
                    .set_new_image(Some(image))
                    .sequence_number(seq)
                    .size_bytes(42)
                    .stream_view_type(StreamViewType::NewImage)
                    .build(),
            )
            .build()
    }

    #[test]
    fn records_are_lambda_shaped() {
        let arn = "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/2024-01-01T00:00:00.000";
        let json = record_json(&sdk_record("100"), arn, "us-east-1");
        assert_eq!(json["eventSource"], "aws:dynamodb");
        assert_eq!(json["eventSourceARN"], arn);
        assert_eq!(json["eventName"], "MODIFY");
        assert_eq!(json["dynamodb"]["NewImage"]["remaining"], json!({"N": "0"}));
        assert_eq!(json["dynamodb"]["NewImage"]["blob"], json!({"B": "AQID"}));
        assert_eq!(
            json["dynamodb"]["NewImage"]["flags"],
            json!({"L": [{"BOOL": true}, {"NULL": true}]})
        );
        assert_eq!(
            json["dynamodb"]["ApproximateCreationDateTime"],
            1_700_000_000
        );
        // What a function using aws_lambda_events receives.
        let event: aws_lambda_events::event::dynamodb::Event =
            serde_json::from_value(json!({ "Records": [json.clone()] })).unwrap();
        let rec = &event.records[0];
        assert_eq!(rec.event_source_arn.as_deref(), Some(arn));
        assert_eq!(rec.change.sequence_number.as_deref(), Some("100"));
        assert_eq!(rec.change.size_bytes, 42);
        // And the project's filter selects it.
        let filters = filter::parse_filters(&[json!({"dynamodb": {"NewImage": {"sk": {"S": [{"prefix": "STAGE#"}]}, "remaining": {"N": ["0"]}}}})]).unwrap();
        assert!(filter::matches_any(&filters, &json));
    }

    #[test]
    fn partial_batch_responses_follow_aws_rules() {
        let owned: Vec<Value> = ["1", "2", "3"]
            .iter()
            .map(|s| record_json(&sdk_record(s), "arn", "r"))
            .collect();
        let batch: Vec<&Value> = owned.iter().collect();
        // Complete success: empty / null response, empty object, null or empty list.
        for ok in [
            &b""[..],
            b" \n",
            b"null",
            b"{}",
            br#"{"batchItemFailures":null}"#,
            br#"{"batchItemFailures":[]}"#,
            br#"{"statusCode":200}"#,
        ] {
            assert_eq!(
                first_failed_item(ok, &batch),
                Ok(None),
                "{}",
                String::from_utf8_lossy(ok)
            );
        }
        let r = br#"{"batchItemFailures":[{"itemIdentifier":"3"},{"itemIdentifier":"2"}]}"#;
        assert_eq!(first_failed_item(r, &batch), Ok(Some(1)));
        // Complete failure: not JSON, JSON of another shape, bad items.
        for bad in [
            &b"not json"[..],
            b"{\"batchItemFailures\": [",
            b"\"ok\"",
            b"[]",
            b"42",
            br#"{"batchItemFailures":"2"}"#,
            br#"{"batchItemFailures":[{"itemIdentifier":"9"}]}"#,
            br#"{"batchItemFailures":[{"itemIdentifier":""}]}"#,
            br#"{"batchItemFailures":[{"itemIdentifier":null}]}"#,
            br#"{"batchItemFailures":[{"itemIdentifier":2}]}"#,
            br#"{"batchItemFailures":[{"itemId":"2"}]}"#,
            br#"{"batchItemFailures":["2"]}"#,
        ] {
            assert!(
                first_failed_item(bad, &batch).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    fn pending(values: impl IntoIterator<Item = Value>) -> VecDeque<Pending> {
        values
            .into_iter()
            .enumerate()
            .map(|(i, record)| Pending {
                record,
                pos: i as u64,
                duplicate: false,
            })
            .collect()
    }

    #[test]
    fn batches_respect_size_and_count() {
        let p = pending((0..10).map(|i| json!({"i": i})));
        assert_eq!(take_batch(&p, 3).len(), 3);
        assert_eq!(take_batch(&p, 100).len(), 10);
        let big = pending((0..3).map(|_| json!("x".repeat(4 * 1024 * 1024))));
        assert_eq!(take_batch(&big, 100).len(), 1);
    }

    #[test]
    fn lanes_follow_the_partition_key() {
        let rec =
            |pk: &str, sk: &str| json!({"dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": sk}}}});
        for factor in [2, 3, 10] {
            // Same partition key, any sort key: same lane.
            let lane = lane_of(&rec("Q#1", "STAGE#0"), Some("pk"), factor);
            for sk in ["STAGE#1", "TASK#0#1", "x"] {
                assert_eq!(lane_of(&rec("Q#1", sk), Some("pk"), factor), lane);
            }
            assert!(lane < factor);
        }
        // Different keys spread over the lanes.
        let lanes: std::collections::BTreeSet<usize> = (0..50)
            .map(|i| lane_of(&rec(&format!("Q#{i}"), "s"), Some("pk"), 4))
            .collect();
        assert_eq!(lanes.len(), 4);
        assert_eq!(lane_of(&rec("a", "b"), Some("pk"), 1), 0);
        // Unknown key schema: all the keys decide.
        assert!(lane_of(&rec("a", "b"), None, 4) < 4);
    }
}
