//! DynamoDB (and DynamoDB Streams) through the front: moto_server sees one request at a
//! time, while the front reproduces what DynamoDB does to concurrent requests on the
//! same items — transaction conflicts, per-item throughput limits, idempotent
//! transactions — plus latency and the planned faults.
//!
//! # Items in flight
//!
//! A request occupies the items it writes (and a `TransactGetItems` the items it reads)
//! from its arrival until its response is ready: its latency, its wait for the upstream
//! lock, moto's work. Keys come from `Key`, or from the key attributes of `Item`; each
//! table's key schema is read once with `DescribeTable` and cached. Conflicts follow
//! "Transaction conflict handling in DynamoDB"
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling>):
//!
//! | arriving request | rejected when one of its items is held by | answer |
//! |---|---|---|
//! | `PutItem`, `UpdateItem`, `DeleteItem` | a `TransactWriteItems` | 400 `TransactionConflictException` |
//! | `TransactWriteItems` | another `TransactWriteItems` | 400 `TransactionCanceledException`, reason `TransactionConflict` |
//! | `TransactGetItems` | a `TransactWriteItems`, `BatchWriteItem`, `PutItem`, `UpdateItem` or `DeleteItem` | 400 `TransactionCanceledException`, reason `TransactionConflict` |
//! | an item of a `BatchWriteItem` | a `TransactWriteItems` | the item comes back in `UnprocessedItems` |
//!
//! and a `TransactGetItems` in flight fails (`TransactionCanceledException`) when a write
//! to one of its items arrives meanwhile (the API reference of
//! `TransactionCanceledException`). `GetItem`, `BatchGetItem`, `Query` and `Scan` never
//! conflict. `BatchWriteItem` reports conflicts as unprocessed items because its API has
//! no `TransactionConflictException`: each of its writes is serializable with
//! transactions, the batch as a whole is not.
//!
//! # Throughput
//!
//! Each item has a write and a read bucket (see [`super::capacity`]): a write that finds
//! too little capacity gets 400 `ProvisionedThroughputExceededException` with the
//! throttling reason `TableWriteKeyRangeThroughputExceeded` (a read:
//! `TableReadKeyRangeThroughputExceeded`); a transaction is cancelled with the reason
//! `ThrottlingError` on the items short of capacity; batch items come back unprocessed,
//! and a batch none of whose items could be processed gets the exception
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html>).
//! Write sizes are estimated from the request: `PutItem` and `Put` from the item,
//! `UpdateItem` and `Update` from the size of the request (DynamoDB charges the larger
//! of the item before and after, which the front does not know), `DeleteItem`,
//! `Delete` and `ConditionCheck` one unit (DynamoDB charges the deleted item's size).
//! Reads pay for what they returned.
//!
//! # Idempotent transactions
//!
//! moto ignores `ClientRequestToken`; the front honours it as DynamoDB does
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-apis-txwriteitems-idempotency>):
//! a successful `TransactWriteItems` repeated with the same token within 10 minutes
//! answers the same success without running again, the same token with another payload
//! gets `IdempotentParameterMismatchException`, and while the first is still running
//! `TransactionInProgressException`. (The AWS SDKs fill the token in and keep it across
//! their retries, which matters after an `InternalServerError` that was applied.)
//!
//! # Faults and decision keys
//!
//! `dynamodb.throughput_exceeded`, `dynamodb.throttling` and `dynamodb.internal_error`
//! are decided with the key `<Op> <table> <pk> [<sk>] #<n>` (the request's first item;
//! `<Op> <TableName> #<n>` without items), where `n` counts the earlier requests with the
//! same operation and item: the same seed and the same sequence of requests give the
//! same faults. An injected `InternalServerError` on a write is, for half of the keys
//! (a second draw on `<key>#applied`), returned *after* moto applied the write: "When you
//! receive a status code 500 on a write operation, the operation may have succeeded or
//! failed" (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html>).
//! Injected and reproduced errors never reach moto (except that applied write).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt;
use lambdafusion_faults::FaultKind;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

use super::capacity::{item_size, read_units, write_units, Capacity};
use super::Shared;
use crate::faults::Behaviour;

/// `X-Amz-Target` prefix of DynamoDB operations.
pub const DYNAMODB_TARGET: &str = "DynamoDB_20120810.";
/// `X-Amz-Target` prefix of DynamoDB Streams operations.
pub const STREAMS_TARGET: &str = "DynamoDBStreams_20120810.";
/// `__type` prefix of DynamoDB errors.
const ERROR_TYPE: &str = "com.amazonaws.dynamodb.v20120810#";
/// Largest request body read (DynamoDB's HTTP request limit is 16 MB).
const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024 + 64 * 1024;
/// How long a `ClientRequestToken` stays valid after its transaction finished.
const TOKEN_TTL: Duration = Duration::from_secs(600);
/// The message DynamoDB sends with key-range throttling on on-demand tables (API
/// reference of `TransactionCanceledException`, reason `ThrottlingError`).
const HOT_KEY_MESSAGE: &str = "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table or index so please try again shortly. If exceptions persist, check if you have a hot key: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html.";

/// One item: its table and the string forms of its key values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ItemRef {
    /// Table name.
    pub table: String,
    /// Partition key value.
    pub pk: String,
    /// Sort key value, for tables with one.
    pub sk: Option<String>,
}

impl fmt::Display for ItemRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.table, self.pk)?;
        if let Some(sk) = &self.sk {
            write!(f, " {sk}")?;
        }
        Ok(())
    }
}

/// A table's key attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySchema {
    /// The partition (HASH) key attribute.
    pub hash: String,
    /// The sort (RANGE) key attribute, if any.
    pub range: Option<String>,
}

impl KeySchema {
    /// The item whose key attributes `attrs` holds (a `Key`, or a whole `Item`).
    pub fn item(&self, table: &str, attrs: &Value) -> Option<ItemRef> {
        let attrs = attrs.as_object()?;
        let pk = scalar(attrs.get(&self.hash)?)?;
        let sk = match &self.range {
            Some(range) => Some(scalar(attrs.get(range)?)?),
            None => None,
        };
        Some(ItemRef {
            table: table.to_string(),
            pk,
            sk,
        })
    }
}

/// The text of a key value (`{"S": "a"}` → `a`, `{"N": "1"}` → `1`, `{"B": ".."}`).
fn scalar(value: &Value) -> Option<String> {
    let (kind, v) = value.as_object()?.iter().next()?;
    match kind.as_str() {
        "S" | "N" | "B" => v.as_str().map(str::to_string),
        _ => None,
    }
}

/// What a request does to an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// `GetItem`, `BatchGetItem`: never conflicts.
    Read,
    /// `PutItem`, `UpdateItem`, `DeleteItem`, an item of `BatchWriteItem`.
    Write,
    /// An item of `TransactWriteItems`.
    TxWrite,
    /// An item of `TransactGetItems`.
    TxGet,
}

/// Where an item sits in its request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    /// The one item of a single-item request.
    Single,
    /// Position in `TransactItems`.
    Transact(usize),
    /// Table and position in `RequestItems` of a batch.
    Batch(String, usize),
}

/// One item of a request, with the capacity it needs up front.
#[derive(Debug, Clone)]
struct ItemOp {
    item: ItemRef,
    access: Access,
    /// Write units, or the minimum read units.
    units: f64,
    consistent: bool,
    slot: Slot,
}

/// What the front understood of a request.
#[derive(Debug, Default)]
struct Parsed {
    items: Vec<ItemOp>,
    /// `TableName`, for requests without items.
    table: Option<String>,
    /// Length of `TransactItems`, for the cancellation reasons.
    transact_len: usize,
}

/// Tables a request names (whose key schemas are needed).
fn tables_of(op: &str, req: &Value) -> Vec<String> {
    let mut tables = Vec::new();
    match op {
        "GetItem" | "PutItem" | "UpdateItem" | "DeleteItem" => {
            tables.extend(req["TableName"].as_str().map(str::to_string))
        }
        "TransactWriteItems" | "TransactGetItems" => {
            for entry in req["TransactItems"].as_array().into_iter().flatten() {
                if let Some((_, action)) = entry.as_object().and_then(|m| m.iter().next()) {
                    tables.extend(action["TableName"].as_str().map(str::to_string));
                }
            }
        }
        "BatchWriteItem" | "BatchGetItem" => {
            if let Some(m) = req["RequestItems"].as_object() {
                tables.extend(m.keys().cloned());
            }
        }
        _ => {}
    }
    tables.sort();
    tables.dedup();
    tables
}

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0)
}

/// The items of a request, with their access and capacity.
fn parse(op: &str, req: &Value, schemas: &HashMap<String, KeySchema>, body_len: usize) -> Parsed {
    let mut parsed = Parsed {
        table: req["TableName"].as_str().map(str::to_string),
        ..Parsed::default()
    };
    let item_of = |table: &str, attrs: &Value| schemas.get(table)?.item(table, attrs);
    let consistent = req["ConsistentRead"].as_bool() == Some(true);
    let mut push = |item: Option<ItemRef>, access, units, consistent, slot| {
        if let Some(item) = item {
            parsed.items.push(ItemOp {
                item,
                access,
                units,
                consistent,
                slot,
            });
        }
    };
    let table = req["TableName"].as_str().unwrap_or_default();
    match op {
        "GetItem" => push(
            item_of(table, &req["Key"]),
            Access::Read,
            read_units(0, consistent),
            consistent,
            Slot::Single,
        ),
        "PutItem" => {
            let size = req["Item"].as_object().map_or(0, item_size);
            push(
                item_of(table, &req["Item"]),
                Access::Write,
                write_units(size),
                true,
                Slot::Single,
            )
        }
        "UpdateItem" => push(
            item_of(table, &req["Key"]),
            Access::Write,
            write_units(body_len),
            true,
            Slot::Single,
        ),
        "DeleteItem" => push(
            item_of(table, &req["Key"]),
            Access::Write,
            write_units(0),
            true,
            Slot::Single,
        ),
        "TransactWriteItems" | "TransactGetItems" => {
            let entries = req["TransactItems"].as_array().cloned().unwrap_or_default();
            for (i, entry) in entries.iter().enumerate() {
                let Some((action, body)) = entry.as_object().and_then(|m| m.iter().next()) else {
                    continue;
                };
                let t = body["TableName"].as_str().unwrap_or_default();
                let (item, units, access) = match action.as_str() {
                    "Put" => (
                        item_of(t, &body["Item"]),
                        2.0 * write_units(body["Item"].as_object().map_or(0, item_size)),
                        Access::TxWrite,
                    ),
                    "Update" => (
                        item_of(t, &body["Key"]),
                        2.0 * write_units(json_len(body)),
                        Access::TxWrite,
                    ),
                    "Delete" | "ConditionCheck" => (
                        item_of(t, &body["Key"]),
                        2.0 * write_units(0),
                        Access::TxWrite,
                    ),
                    "Get" => (
                        item_of(t, &body["Key"]),
                        2.0 * read_units(0, true),
                        Access::TxGet,
                    ),
                    _ => continue,
                };
                push(item, access, units, true, Slot::Transact(i));
            }
            parsed.transact_len = entries.len();
        }
        "BatchWriteItem" => {
            if let Some(tables) = req["RequestItems"].as_object() {
                for (t, requests) in tables {
                    for (i, r) in requests.as_array().into_iter().flatten().enumerate() {
                        let (item, units) = if r["PutRequest"].is_object() {
                            let it = &r["PutRequest"]["Item"];
                            (
                                item_of(t, it),
                                write_units(it.as_object().map_or(0, item_size)),
                            )
                        } else {
                            (item_of(t, &r["DeleteRequest"]["Key"]), write_units(0))
                        };
                        push(item, Access::Write, units, true, Slot::Batch(t.clone(), i));
                    }
                }
            }
        }
        "BatchGetItem" => {
            if let Some(tables) = req["RequestItems"].as_object() {
                for (t, spec) in tables {
                    let consistent = spec["ConsistentRead"].as_bool() == Some(true);
                    for (i, key) in spec["Keys"].as_array().into_iter().flatten().enumerate() {
                        push(
                            item_of(t, key),
                            Access::Read,
                            read_units(0, consistent),
                            consistent,
                            Slot::Batch(t.clone(), i),
                        );
                    }
                }
            }
        }
        _ => {}
    }
    parsed
}

/// The stable part of a request's decision key: `<Op> <item>` or `<Op> <TableName>`.
fn decision_base(op: &str, parsed: &Parsed) -> String {
    match (parsed.items.first(), &parsed.table) {
        (Some(first), _) => format!("{op} {}", first.item),
        (None, Some(table)) => format!("{op} {table}"),
        (None, None) => op.to_string(),
    }
}

fn is_write(op: &str) -> bool {
    matches!(
        op,
        "PutItem" | "UpdateItem" | "DeleteItem" | "TransactWriteItems" | "BatchWriteItem"
    )
}

/// Why an item of a transaction or batch was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Conflict,
    Throttled,
}

/// A request holding an item.
#[derive(Debug)]
struct Hold {
    id: u64,
    access: Access,
    /// For a `TransactGetItems`: its per-item "a write came in" flags, and this item's
    /// position.
    doom: Option<(Arc<[AtomicBool]>, usize)>,
}

/// Items in flight, throughput buckets, decision-key counts.
struct State {
    inflight: HashMap<ItemRef, Vec<Hold>>,
    capacity: Capacity<ItemRef>,
    seen: HashMap<String, u64>,
}

/// Releases a request's items when its response is ready (or the request is dropped).
struct HoldGuard {
    state: Arc<Mutex<State>>,
    id: u64,
    items: Vec<ItemRef>,
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for item in &self.items {
            if let Some(holds) = st.inflight.get_mut(item) {
                holds.retain(|h| h.id != self.id);
                if holds.is_empty() {
                    st.inflight.remove(item);
                }
            }
        }
    }
}

/// The outcome of admitting a request.
enum Admission {
    /// Go ahead; `refused` items of a batch stay out of the forwarded request.
    Go {
        _holds: HoldGuard,
        refused: Vec<(usize, Refusal)>,
        doom: Option<Arc<[AtomicBool]>>,
    },
    /// Reject the whole request.
    Reject(Vec<(usize, Refusal)>),
}

/// `ClientRequestToken`s of `TransactWriteItems`.
#[derive(Default)]
struct Tokens {
    entries: HashMap<String, TokenEntry>,
}

struct TokenEntry {
    payload: u64,
    /// The successful response and when it was sent; `None` while running.
    done: Option<(Bytes, Instant)>,
}

enum TokenCheck {
    New(TokenGuard),
    Replay(Bytes),
    Mismatch,
    InProgress,
}

/// Forgets a token whose transaction did not succeed.
struct TokenGuard {
    tokens: Arc<Mutex<Tokens>>,
    token: String,
    completed: bool,
}

impl TokenGuard {
    fn succeeded(mut self, response: Bytes) {
        let mut t = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = t.entries.get_mut(&self.token) {
            e.done = Some((response, Instant::now()));
        }
        self.completed = true;
    }
}

impl Drop for TokenGuard {
    fn drop(&mut self) {
        if !self.completed {
            let mut t = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
            t.entries.remove(&self.token);
        }
    }
}

/// The DynamoDB side of the front.
pub struct DynamoFront {
    /// moto_server sees one DynamoDB request at a time.
    upstream_lock: tokio::sync::Mutex<()>,
    schemas: Mutex<HashMap<String, KeySchema>>,
    state: Arc<Mutex<State>>,
    tokens: Arc<Mutex<Tokens>>,
    next_id: AtomicU64,
    conflicts: bool,
}

impl DynamoFront {
    /// The DynamoDB front for `config`.
    pub fn new(config: &super::FrontConfig) -> DynamoFront {
        DynamoFront {
            upstream_lock: tokio::sync::Mutex::new(()),
            schemas: Mutex::new(HashMap::new()),
            state: Arc::new(Mutex::new(State {
                inflight: HashMap::new(),
                capacity: Capacity::new(config.throughput.clone()),
                seen: HashMap::new(),
            })),
            tokens: Arc::new(Mutex::new(Tokens::default())),
            next_id: AtomicU64::new(1),
            conflicts: config.transaction_conflicts,
        }
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `base #n`, counting the requests with the same base.
    fn decision_key(&self, base: String) -> String {
        let mut st = self.lock_state();
        let n = st.seen.entry(base.clone()).or_insert(0);
        let key = format!("{base} #{n}");
        *n += 1;
        key
    }

    /// Conflicts, throughput and holds, decided atomically for one request.
    fn admit(&self, op: &str, parsed: &Parsed) -> Admission {
        let now = Instant::now();
        let mut st = self.lock_state();
        let n = parsed.items.len();
        let mut refused: Vec<Option<Refusal>> = vec![None; n];
        if self.conflicts {
            for (i, it) in parsed.items.iter().enumerate() {
                let holds = st.inflight.get(&it.item);
                let held_by = |what: &[Access]| {
                    holds.is_some_and(|hs| hs.iter().any(|h| what.contains(&h.access)))
                };
                let conflict = match it.access {
                    Access::Read => false,
                    Access::Write | Access::TxWrite => held_by(&[Access::TxWrite]),
                    Access::TxGet => held_by(&[Access::TxWrite, Access::Write]),
                };
                if conflict {
                    refused[i] = Some(Refusal::Conflict);
                }
            }
        }
        let whole = matches!(
            op,
            "TransactWriteItems"
                | "TransactGetItems"
                | "PutItem"
                | "UpdateItem"
                | "DeleteItem"
                | "GetItem"
        );
        if whole && refused.iter().any(Option::is_some) {
            return Admission::Reject(collect_refused(&refused));
        }
        for (i, it) in parsed.items.iter().enumerate() {
            if refused[i].is_some() {
                continue;
            }
            let enough = match it.access {
                Access::Write | Access::TxWrite => st.capacity.can_write(&it.item, it.units, now),
                Access::Read | Access::TxGet => st.capacity.can_read(&it.item, it.units, now),
            };
            if !enough {
                refused[i] = Some(Refusal::Throttled);
            }
        }
        if whole && refused.iter().any(Option::is_some) {
            return Admission::Reject(collect_refused(&refused));
        }
        // A batch none of whose items could be processed for lack of capacity fails.
        if n > 0 && refused.iter().all(|r| *r == Some(Refusal::Throttled)) {
            return Admission::Reject(collect_refused(&refused));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let doom: Option<Arc<[AtomicBool]>> = (op == "TransactGetItems").then(|| {
            (0..parsed.transact_len)
                .map(|_| AtomicBool::new(false))
                .collect()
        });
        let mut held = Vec::new();
        for (i, it) in parsed.items.iter().enumerate() {
            if refused[i].is_some() {
                continue;
            }
            if matches!(it.access, Access::Write | Access::TxWrite) {
                st.capacity.take_write(&it.item, it.units, now);
            }
            if it.access == Access::Read {
                continue;
            }
            let holds = st.inflight.entry(it.item.clone()).or_default();
            if it.access != Access::TxGet {
                // A write arriving dooms the read transactions holding the item.
                for h in holds.iter() {
                    if let Some((flags, pos)) = &h.doom {
                        flags[*pos].store(true, Ordering::SeqCst);
                    }
                }
            }
            let doom_slot = match (&doom, &it.slot) {
                (Some(flags), Slot::Transact(pos)) => Some((flags.clone(), *pos)),
                _ => None,
            };
            holds.push(Hold {
                id,
                access: it.access,
                doom: doom_slot,
            });
            held.push(it.item.clone());
        }
        Admission::Go {
            _holds: HoldGuard {
                state: self.state.clone(),
                id,
                items: held,
            },
            refused: collect_refused(&refused),
            doom,
        }
    }

    /// Charges what reads returned, once their sizes are known.
    fn charge_reads(
        &self,
        op: &str,
        parsed: &Parsed,
        response: &Value,
        refused: &[(usize, Refusal)],
    ) {
        let schemas = self
            .schemas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let now = Instant::now();
        let mut st = self.lock_state();
        let refused: HashSet<usize> = refused.iter().map(|(i, _)| *i).collect();
        match op {
            "GetItem" => {
                if let Some(it) = parsed.items.first() {
                    let size = response["Item"].as_object().map_or(0, item_size);
                    st.capacity
                        .charge_read(&it.item, read_units(size, it.consistent), now);
                }
            }
            "TransactGetItems" => {
                let responses = response["Responses"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for it in &parsed.items {
                    if let Slot::Transact(pos) = it.slot {
                        let size = responses
                            .get(pos)
                            .and_then(|r| r["Item"].as_object())
                            .map_or(0, item_size);
                        st.capacity
                            .charge_read(&it.item, 2.0 * read_units(size, true), now);
                    }
                }
            }
            "BatchGetItem" => {
                let mut sizes: HashMap<ItemRef, usize> = HashMap::new();
                if let Some(tables) = response["Responses"].as_object() {
                    for (t, items) in tables {
                        let Some(schema) = schemas.get(t) else {
                            continue;
                        };
                        for item in items.as_array().into_iter().flatten() {
                            if let Some(r) = schema.item(t, item) {
                                sizes.insert(r, item.as_object().map_or(0, item_size));
                            }
                        }
                    }
                }
                for (i, it) in parsed.items.iter().enumerate() {
                    if refused.contains(&i) {
                        continue;
                    }
                    let size = sizes.get(&it.item).copied().unwrap_or(0);
                    st.capacity
                        .charge_read(&it.item, read_units(size, it.consistent), now);
                }
            }
            _ => {}
        }
    }

    /// Checks a transaction's `ClientRequestToken`.
    fn check_token(&self, token: &str, payload: u64) -> TokenCheck {
        let now = Instant::now();
        let mut t = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        t.entries.retain(|_, e| {
            e.done
                .as_ref()
                .is_none_or(|(_, at)| now.duration_since(*at) < TOKEN_TTL)
        });
        match t.entries.get(token) {
            Some(e) if e.payload != payload => TokenCheck::Mismatch,
            Some(TokenEntry {
                done: Some((body, _)),
                ..
            }) => TokenCheck::Replay(body.clone()),
            Some(_) => TokenCheck::InProgress,
            None => {
                t.entries.insert(
                    token.to_string(),
                    TokenEntry {
                        payload,
                        done: None,
                    },
                );
                TokenCheck::New(TokenGuard {
                    tokens: self.tokens.clone(),
                    token: token.to_string(),
                    completed: false,
                })
            }
        }
    }
}

fn collect_refused(refused: &[Option<Refusal>]) -> Vec<(usize, Refusal)> {
    refused
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.map(|r| (i, r)))
        .collect()
}

/// A DynamoDB JSON response.
fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    if let Ok(v) = HeaderValue::from_str(&request_id()) {
        h.insert("x-amzn-requestid", v);
    }
    response
}

/// A request id shaped like DynamoDB's (52 upper-case letters and digits).
fn request_id() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("{a}{b}")[..52].to_uppercase()
}

/// A DynamoDB error: `{"__type": "com.amazonaws.dynamodb.v20120810#<name>", "message": ..}`
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html#Programming.Errors.Components>).
pub fn error(status: StatusCode, name: &str, message: &str) -> Response {
    let body = json!({"__type": format!("{ERROR_TYPE}{name}"), "message": message});
    json_response(status, body.to_string().into_bytes())
}

/// 400 `AccessDeniedException`, as DynamoDB answers a role that may not do the request.
fn access_denied(denied: &crate::iam::Denied) -> Response {
    warn!("front: {}", denied.message());
    let body = json!({
        "__type": "com.amazon.coral.service#AccessDeniedException",
        "Message": denied.message(),
    });
    json_response(StatusCode::BAD_REQUEST, body.to_string().into_bytes())
}

/// 400 `ProvisionedThroughputExceededException` for a hot item, with its throttling
/// reason (`Table{Read,Write}KeyRangeThroughputExceeded`, see the API reference of
/// `ThrottlingReason`).
fn hot_key(region: &str, account: &str, table: &str, write: bool) -> Response {
    let reason = if write {
        "TableWriteKeyRangeThroughputExceeded"
    } else {
        "TableReadKeyRangeThroughputExceeded"
    };
    let body = json!({
        "__type": format!("{ERROR_TYPE}ProvisionedThroughputExceededException"),
        "message": HOT_KEY_MESSAGE,
        "ThrottlingReasons": [{
            "reason": reason,
            "resource": format!("arn:aws:dynamodb:{region}:{account}:table/{table}"),
        }],
    });
    json_response(StatusCode::BAD_REQUEST, body.to_string().into_bytes())
}

/// 400 `TransactionCanceledException` with one reason per `TransactItems` entry, as the
/// API reference of `TransactionCanceledException` describes them (`"Code": "None"` and
/// no message for the others) and the SDKs parse them (`Message`, `CancellationReasons`).
fn cancelled(len: usize, refused: &[(usize, Refusal)]) -> Response {
    let mut codes = vec!["None"; len];
    let mut reasons: Vec<Value> = vec![json!({"Code": "None"}); len];
    for (pos, why) in refused {
        if *pos >= len {
            continue;
        }
        let (code, message) = match why {
            Refusal::Conflict => ("TransactionConflict", "Transaction is ongoing for the item"),
            Refusal::Throttled => ("ThrottlingError", HOT_KEY_MESSAGE),
        };
        codes[*pos] = code;
        reasons[*pos] = json!({"Code": code, "Message": message});
    }
    let body = json!({
        "__type": format!("{ERROR_TYPE}TransactionCanceledException"),
        "Message": format!(
            "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
            codes.join(", ")
        ),
        "CancellationReasons": reasons,
    });
    json_response(StatusCode::BAD_REQUEST, body.to_string().into_bytes())
}

/// The error an injected DynamoDB fault answers with.
fn fault_response(kind: FaultKind) -> Response {
    match kind {
        FaultKind::DynamoDbThroughputExceeded => error(
            StatusCode::BAD_REQUEST,
            "ProvisionedThroughputExceededException",
            "You exceeded your maximum allowed provisioned throughput for a table or for one or more global secondary indexes.",
        ),
        FaultKind::DynamoDbThrottling => error(
            StatusCode::BAD_REQUEST,
            "ThrottlingException",
            "Rate of requests exceeds the allowed throughput.",
        ),
        _ => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            "Internal server error",
        ),
    }
}

const DYNAMODB_FAULTS: [FaultKind; 3] = [
    FaultKind::DynamoDbThroughputExceeded,
    FaultKind::DynamoDbThrottling,
    FaultKind::DynamoDbInternalError,
];

/// The response moto gave, as it came (hop-by-hop headers dropped).
struct Upstream {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Upstream {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.body).into_response();
        let mut headers = self.headers;
        super::upstream::strip_hop_by_hop(&mut headers);
        headers.remove("content-length");
        response.headers_mut().extend(headers);
        response
    }

    /// The same response with a rewritten JSON body (its checksum no longer applies).
    fn with_json(mut self, body: &Value) -> Response {
        self.body = Bytes::from(body.to_string());
        self.headers.remove("x-amz-crc32");
        self.into_response()
    }
}

impl Shared {
    /// Sends a DynamoDB request to moto (holding the upstream lock) and reads the answer.
    async fn dynamodb_upstream(
        &self,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Upstream, Response> {
        let _one_at_a_time = self.dynamodb.upstream_lock.lock().await;
        self.dynamodb_upstream_locked(headers, body).await
    }

    /// [`Shared::dynamodb_upstream`] for a caller that holds the upstream lock.
    async fn dynamodb_upstream_locked(
        &self,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Upstream, Response> {
        let mut headers = headers.clone();
        headers.insert("content-length", HeaderValue::from(body.len()));
        let sent = self
            .upstream
            .send(Method::POST, "/", &headers, Body::from(body))
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => return Err(upstream_failed(&e.to_string())),
        };
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| upstream_failed(&format!("reading moto_server's answer: {e}")))?
            .to_bytes();
        Ok(Upstream {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    /// The key schema of `table` (cached; read with `DescribeTable` the first time).
    async fn key_schema(&self, table: &str, client_headers: &HeaderMap) -> Option<KeySchema> {
        let cached = || {
            self.dynamodb
                .schemas
                .lock()
                .ok()
                .and_then(|s| s.get(table).cloned())
        };
        if let Some(s) = cached() {
            return Some(s);
        }
        let _one_at_a_time = self.dynamodb.upstream_lock.lock().await;
        // Concurrent first requests on a table: the first one reads the schema.
        if let Some(s) = cached() {
            return Some(s);
        }
        // The client's own headers carry the credential scope moto routes by.
        let mut headers = client_headers.clone();
        headers.insert(
            "x-amz-target",
            HeaderValue::from_static("DynamoDB_20120810.DescribeTable"),
        );
        let body = Bytes::from(json!({"TableName": table}).to_string());
        let answer = self.dynamodb_upstream_locked(&headers, body).await.ok()?;
        if !answer.status.is_success() {
            debug!(table, status = %answer.status, "front: DescribeTable failed; the table's items are not tracked");
            return None;
        }
        let desc: Value = serde_json::from_slice(&answer.body).ok()?;
        let mut schema = KeySchema {
            hash: String::new(),
            range: None,
        };
        for k in desc["Table"]["KeySchema"].as_array()? {
            let name = k["AttributeName"].as_str()?.to_string();
            match k["KeyType"].as_str()? {
                "HASH" => schema.hash = name,
                "RANGE" => schema.range = Some(name),
                _ => {}
            }
        }
        if schema.hash.is_empty() {
            return None;
        }
        self.dynamodb
            .schemas
            .lock()
            .ok()?
            .insert(table.to_string(), schema.clone());
        Some(schema)
    }
}

fn upstream_failed(why: &str) -> Response {
    warn!("front: {why}");
    error(
        StatusCode::BAD_GATEWAY,
        "InternalServerError",
        &format!("lambdafusion-local front: {why}"),
    )
}

/// A `TransactWriteItems` with a `ClientRequestToken`: the guard that records its answer
/// when it is new, or the answer DynamoDB gives at once (the first answer replayed, or a
/// mismatch or in-progress error).
fn idempotency(
    front: &Shared,
    op: &str,
    request: &Value,
    body: &Bytes,
) -> Result<Option<TokenGuard>, Box<Response>> {
    if op != "TransactWriteItems" {
        return Ok(None);
    }
    let Some(token) = request["ClientRequestToken"].as_str() else {
        return Ok(None);
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    match front.dynamodb.check_token(token, h.finish()) {
        TokenCheck::New(guard) => Ok(Some(guard)),
        TokenCheck::Replay(answer) => Err(Box::new(json_response(StatusCode::OK, answer.to_vec()))),
        TokenCheck::Mismatch => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "IdempotentParameterMismatchException",
            "DynamoDB rejected the request because you retried a request with a different payload but with an idempotent token that was already used.",
        ))),
        TokenCheck::InProgress => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "TransactionInProgressException",
            "The transaction with the given request token is already in progress.",
        ))),
    }
}

/// Handles one request whose `X-Amz-Target` is a DynamoDB or DynamoDB Streams operation.
///
/// One request's path in the order DynamoDB decides it: latency, planned faults,
/// idempotency, conflicts and throughput, moto, read-transaction conflicts, unprocessed
/// items. It is long because each step may answer early; each step's logic is in the
/// functions it calls.
pub async fn handle(
    front: Arc<Shared>,
    target: String,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = tokio::time::Instant::now();
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "ValidationException",
                &format!("cannot read the request body: {e}"),
            )
        }
    };
    let caller = crate::sigv4::access_key(&headers, None);
    if let Some(op) = target.strip_prefix(STREAMS_TARGET) {
        let latency = front.config.latency.dynamodb_streams.get(op);
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if let Err(denied) = front
            .iam
            .check(caller.as_deref(), &front.iam.dynamodb_streams(op, &request))
        {
            tokio::time::sleep_until(started + latency).await;
            return access_denied(&denied);
        }
        tokio::time::sleep_until(started + latency).await;
        return match front.dynamodb_upstream(&headers, body).await {
            Ok(answer) => answer.into_response(),
            Err(response) => response,
        };
    }
    let op = target
        .strip_prefix(DYNAMODB_TARGET)
        .unwrap_or(&target)
        .to_string();
    let latency = front.config.latency.dynamodb.get(&op);
    let respond_at = started + latency;
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Err(denied) = front
        .iam
        .check(caller.as_deref(), &front.iam.dynamodb(&op, &request))
    {
        tokio::time::sleep_until(respond_at).await;
        return access_denied(&denied);
    }

    // Which items (key schemas first, outside any item hold).
    let mut schemas = HashMap::new();
    for table in tables_of(&op, &request) {
        if let Some(s) = front.key_schema(&table, &headers).await {
            schemas.insert(table, s);
        }
    }
    let parsed = parse(&op, &request, &schemas, body.len());
    let key = front.dynamodb.decision_key(decision_base(&op, &parsed));

    // Planned faults: answered without moto, except an InternalServerError on a write
    // that half of the time comes after moto applied it.
    let mut fail_after_apply = false;
    for kind in DYNAMODB_FAULTS {
        if front.faults.fire(kind, &key) {
            debug!(%key, fault = %kind, "front: injecting");
            if kind == FaultKind::DynamoDbInternalError
                && is_write(&op)
                && front
                    .faults
                    .plan
                    .current()
                    .unit(kind, &format!("{key}#applied"))
                    < 0.5
            {
                fail_after_apply = true;
                break;
            }
            tokio::time::sleep_until(respond_at).await;
            return fault_response(kind);
        }
    }

    // Idempotent transactions.
    let token_guard = match idempotency(&front, &op, &request, &body) {
        Ok(guard) => guard,
        Err(response) => {
            tokio::time::sleep_until(respond_at).await;
            return *response;
        }
    };

    // Conflicts and throughput.
    let (holds, refused, doom) = match front.dynamodb.admit(&op, &parsed) {
        Admission::Go {
            _holds,
            refused,
            doom,
        } => (_holds, refused, doom),
        Admission::Reject(refused) => {
            tokio::time::sleep_until(respond_at).await;
            return reject(&front, &op, &parsed, &refused);
        }
    };
    count(&front, &refused);

    // Batches go on without their refused items.
    let mut forward = body.clone();
    let mut left_out = Map::new();
    if !refused.is_empty() {
        let (rest, out) = split_batch(&op, &request, &parsed, &refused);
        left_out = out;
        match rest {
            Some(rest) => forward = Bytes::from(rest.to_string()),
            None => {
                // Nothing left for moto (every item conflicted).
                tokio::time::sleep_until(respond_at).await;
                drop(holds);
                let field = unprocessed_field(&op);
                return json_response(
                    StatusCode::OK,
                    json!({ field: Value::Object(left_out) })
                        .to_string()
                        .into_bytes(),
                );
            }
        }
    }

    tokio::time::sleep_until(respond_at).await;
    let answer = match front.dynamodb_upstream(&headers, forward).await {
        Ok(a) => a,
        Err(response) => return response,
    };
    let answer_json: Option<Value> = answer
        .status
        .is_success()
        .then(|| serde_json::from_slice(&answer.body).ok())
        .flatten();

    if let Some(json) = &answer_json {
        front.dynamodb.charge_reads(&op, &parsed, json, &refused);
    }
    if matches!(op.as_str(), "CreateTable" | "DeleteTable" | "UpdateTable") {
        if let Some(table) = &parsed.table {
            if let Ok(mut s) = front.dynamodb.schemas.lock() {
                s.remove(table);
            }
        }
    }
    // A write arrived while this read transaction was in flight: it fails.
    if let (Some(flags), true) = (&doom, answer.status.is_success()) {
        let doomed: Vec<(usize, Refusal)> = flags
            .iter()
            .enumerate()
            .filter(|(_, f)| f.load(Ordering::SeqCst))
            .map(|(i, _)| (i, Refusal::Conflict))
            .collect();
        if !doomed.is_empty() {
            front
                .faults
                .record_behaviour(Behaviour::DynamoDbTransactionConflict, doomed.len() as u64);
            drop(holds);
            return cancelled(parsed.transact_len, &doomed);
        }
    }
    if let Some(guard) = token_guard {
        if answer.status.is_success() {
            guard.succeeded(answer.body.clone());
        }
    }
    drop(holds);
    if fail_after_apply {
        return fault_response(FaultKind::DynamoDbInternalError);
    }
    if !left_out.is_empty() {
        if let Some(mut json) = answer_json {
            let field = unprocessed_field(&op);
            let merged = json[field]
                .as_object_mut()
                .map(std::mem::take)
                .unwrap_or_default();
            let mut all = left_out;
            for (table, v) in merged {
                merge_unprocessed(&mut all, &table, v);
            }
            json[field] = Value::Object(all);
            return answer.with_json(&json);
        }
    }
    answer.into_response()
}

/// Counts the behaviours behind refused batch items.
fn count(front: &Shared, refused: &[(usize, Refusal)]) {
    let conflicts = refused
        .iter()
        .filter(|(_, r)| *r == Refusal::Conflict)
        .count();
    front
        .faults
        .record_behaviour(Behaviour::DynamoDbTransactionConflict, conflicts as u64);
    if refused.iter().any(|(_, r)| *r == Refusal::Throttled) {
        front
            .faults
            .record_behaviour(Behaviour::DynamoDbThrottled, 1);
    }
}

/// The answer to a request rejected as a whole.
fn reject(front: &Shared, op: &str, parsed: &Parsed, refused: &[(usize, Refusal)]) -> Response {
    count(front, refused);
    let by_slot: Vec<(usize, Refusal)> = refused
        .iter()
        .filter_map(|(i, r)| match parsed.items[*i].slot {
            Slot::Transact(pos) => Some((pos, *r)),
            _ => None,
        })
        .collect();
    if op.starts_with("Transact") {
        return cancelled(parsed.transact_len, &by_slot);
    }
    let (i, why) = refused[0];
    let item = &parsed.items[i];
    match why {
        Refusal::Conflict => error(
            StatusCode::BAD_REQUEST,
            "TransactionConflictException",
            "Transaction is ongoing for the item",
        ),
        Refusal::Throttled => hot_key(
            &front.region,
            &front.account,
            &item.item.table,
            matches!(item.access, Access::Write | Access::TxWrite),
        ),
    }
}

fn unprocessed_field(op: &str) -> &'static str {
    if op == "BatchGetItem" {
        "UnprocessedKeys"
    } else {
        "UnprocessedItems"
    }
}

/// Adds `entries` (a list of write requests, or a keys-and-attributes object) for
/// `table` to an `UnprocessedItems` / `UnprocessedKeys` map.
fn merge_unprocessed(all: &mut Map<String, Value>, table: &str, entries: Value) {
    match (all.get_mut(table), entries) {
        (None, v) => {
            all.insert(table.to_string(), v);
        }
        (Some(Value::Array(mine)), Value::Array(more)) => mine.extend(more),
        (Some(mine @ Value::Object(_)), Value::Object(more)) => {
            if let (Some(keys), Some(Value::Array(more_keys))) =
                (mine["Keys"].as_array_mut(), more.get("Keys").cloned())
            {
                keys.extend(more_keys);
            }
        }
        (Some(_), _) => {}
    }
}

/// Splits a batch: the request without its refused items (`None` if nothing is left)
/// and the refused items in `UnprocessedItems` / `UnprocessedKeys` form.
fn split_batch(
    op: &str,
    request: &Value,
    parsed: &Parsed,
    refused: &[(usize, Refusal)],
) -> (Option<Value>, Map<String, Value>) {
    let out_slots: HashSet<(String, usize)> = refused
        .iter()
        .filter_map(|(i, _)| match &parsed.items[*i].slot {
            Slot::Batch(t, pos) => Some((t.clone(), *pos)),
            _ => None,
        })
        .collect();
    let mut rest = request.clone();
    let mut out = Map::new();
    let Some(tables) = rest["RequestItems"].as_object_mut() else {
        return (Some(request.clone()), out);
    };
    for (table, spec) in tables.iter_mut() {
        let list = if op == "BatchGetItem" {
            spec.get_mut("Keys").and_then(Value::as_array_mut)
        } else {
            spec.as_array_mut()
        };
        let Some(list) = list else { continue };
        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for (pos, entry) in std::mem::take(list).into_iter().enumerate() {
            if out_slots.contains(&(table.clone(), pos)) {
                dropped.push(entry);
            } else {
                kept.push(entry);
            }
        }
        *list = kept;
        if !dropped.is_empty() {
            let entry = if op == "BatchGetItem" {
                let mut keys_and_attrs = spec.clone();
                keys_and_attrs["Keys"] = Value::Array(dropped);
                keys_and_attrs
            } else {
                Value::Array(dropped)
            };
            out.insert(table.clone(), entry);
        }
    }
    tables.retain(|_, spec| {
        let list = if op == "BatchGetItem" {
            spec["Keys"].as_array()
        } else {
            spec.as_array()
        };
        list.is_some_and(|l| !l.is_empty())
    });
    let empty = tables.is_empty();
    (if empty { None } else { Some(rest) }, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schemas() -> HashMap<String, KeySchema> {
        HashMap::from([
            (
                "t".to_string(),
                KeySchema {
                    hash: "pk".into(),
                    range: Some("sk".into()),
                },
            ),
            (
                "h".to_string(),
                KeySchema {
                    hash: "id".into(),
                    range: None,
                },
            ),
        ])
    }

    fn s(v: &str) -> Value {
        json!({ "S": v })
    }

    #[test]
    fn items_and_decision_keys_of_each_operation() {
        let put = json!({"TableName": "t", "Item": {"pk": s("J#1"), "sk": s("STAGE#0"), "x": {"N": "12"}}});
        let p = parse("PutItem", &put, &schemas(), 100);
        assert_eq!(p.items.len(), 1);
        assert_eq!(p.items[0].item.to_string(), "t J#1 STAGE#0");
        assert_eq!(p.items[0].access, Access::Write);
        assert_eq!(p.items[0].units, 1.0);
        assert_eq!(decision_base("PutItem", &p), "PutItem t J#1 STAGE#0");

        let get = json!({"TableName": "h", "Key": {"id": {"N": "7"}}, "ConsistentRead": true});
        let p = parse("GetItem", &get, &schemas(), 10);
        assert_eq!(p.items[0].item.to_string(), "h 7");
        assert!(p.items[0].consistent);

        let big = "x".repeat(3000);
        let tx = json!({"TransactItems": [
            {"Put": {"TableName": "t", "Item": {"pk": s("a"), "sk": s("b"), "v": s(&big)}}},
            {"ConditionCheck": {"TableName": "t", "Key": {"pk": s("a"), "sk": s("c")}, "ConditionExpression": "x"}},
            {"Update": {"TableName": "unknown", "Key": {"pk": s("a"), "sk": s("d")}}}
        ]});
        let p = parse("TransactWriteItems", &tx, &schemas(), 10);
        assert_eq!(p.transact_len, 3);
        assert_eq!(
            p.items.len(),
            2,
            "the table without a schema is not tracked"
        );
        assert_eq!(p.items[0].units, 6.0, "3 KB, x2 in a transaction");
        assert_eq!(p.items[1].units, 2.0);
        assert_eq!(p.items[1].slot, Slot::Transact(1));

        let batch = json!({"RequestItems": {"t": [
            {"PutRequest": {"Item": {"pk": s("a"), "sk": s("1")}}},
            {"DeleteRequest": {"Key": {"pk": s("a"), "sk": s("2")}}}
        ]}});
        let p = parse("BatchWriteItem", &batch, &schemas(), 10);
        assert_eq!(p.items.len(), 2);
        assert_eq!(p.items[1].slot, Slot::Batch("t".into(), 1));

        let q = json!({"TableName": "t", "KeyConditionExpression": "pk = :p"});
        let p = parse("Query", &q, &schemas(), 10);
        assert!(p.items.is_empty());
        assert_eq!(decision_base("Query", &p), "Query t");
        assert_eq!(tables_of("TransactWriteItems", &tx), ["t", "unknown"]);
    }

    fn front(conflicts: bool, limits: super::super::config::Throughput) -> DynamoFront {
        let mut c = super::super::FrontConfig::new("127.0.0.1:0", "http://127.0.0.1:1");
        c.throughput = limits;
        c.transaction_conflicts = conflicts;
        DynamoFront::new(&c)
    }

    fn tx(items: &[(&str, &str)]) -> Value {
        let list: Vec<Value> = items
            .iter()
            .map(
                |(pk, sk)| json!({"Update": {"TableName": "t", "Key": {"pk": s(pk), "sk": s(sk)}}}),
            )
            .collect();
        json!({ "TransactItems": list })
    }

    #[test]
    fn conflicts_follow_the_documented_table() {
        let f = front(true, super::super::config::Throughput::off());
        let schemas = schemas();
        let first = parse("TransactWriteItems", &tx(&[("a", "1")]), &schemas, 10);
        let Admission::Go { _holds: held, .. } = f.admit("TransactWriteItems", &first) else {
            panic!("the first transaction goes ahead")
        };
        // A second transaction on the same item is cancelled, item by item.
        let second = parse(
            "TransactWriteItems",
            &tx(&[("b", "1"), ("a", "1")]),
            &schemas,
            10,
        );
        match f.admit("TransactWriteItems", &second) {
            Admission::Reject(r) => assert_eq!(r, vec![(1, Refusal::Conflict)]),
            Admission::Go { .. } => panic!("must conflict"),
        }
        // A single write too; a read does not.
        let put = json!({"TableName": "t", "Item": {"pk": s("a"), "sk": s("1")}});
        assert!(matches!(
            f.admit("PutItem", &parse("PutItem", &put, &schemas, 10)),
            Admission::Reject(_)
        ));
        let get = json!({"TableName": "t", "Key": {"pk": s("a"), "sk": s("1")}});
        assert!(matches!(
            f.admit("GetItem", &parse("GetItem", &get, &schemas, 10)),
            Admission::Go { .. }
        ));
        // A batch loses only the conflicting item.
        let batch = json!({"RequestItems": {"t": [
            {"PutRequest": {"Item": {"pk": s("a"), "sk": s("1")}}},
            {"PutRequest": {"Item": {"pk": s("a"), "sk": s("2")}}}
        ]}});
        let pb = parse("BatchWriteItem", &batch, &schemas, 10);
        match f.admit("BatchWriteItem", &pb) {
            Admission::Go { refused, .. } => {
                assert_eq!(refused, vec![(0, Refusal::Conflict)]);
                let (rest, out) = split_batch("BatchWriteItem", &batch, &pb, &refused);
                assert_eq!(
                    rest.unwrap()["RequestItems"]["t"].as_array().unwrap().len(),
                    1
                );
                assert_eq!(out["t"][0]["PutRequest"]["Item"]["sk"], s("1"));
            }
            Admission::Reject(_) => panic!("a batch is not rejected for a conflict"),
        }
        drop(held);
        // Released: the same transaction goes through now.
        assert!(matches!(
            f.admit("TransactWriteItems", &second),
            Admission::Go { .. }
        ));
    }

    #[test]
    fn a_write_dooms_a_read_transaction_and_single_writes_do_not_block_transactions() {
        let f = front(true, super::super::config::Throughput::off());
        let schemas = schemas();
        let get = json!({"TransactItems": [{"Get": {"TableName": "t", "Key": {"pk": s("a"), "sk": s("1")}}}]});
        let pg = parse("TransactGetItems", &get, &schemas, 10);
        let Admission::Go {
            doom: Some(flags),
            _holds: _g,
            ..
        } = f.admit("TransactGetItems", &pg)
        else {
            panic!("goes ahead")
        };
        let put = json!({"TableName": "t", "Item": {"pk": s("a"), "sk": s("1")}});
        let Admission::Go { _holds: _p, .. } =
            f.admit("PutItem", &parse("PutItem", &put, &schemas, 10))
        else {
            panic!("a write is not blocked by a read transaction")
        };
        assert!(
            flags[0].load(Ordering::SeqCst),
            "the read transaction will fail"
        );
        // With the PutItem in flight: a transaction may write (docs list no conflict),
        // a read transaction may not.
        let t = parse("TransactWriteItems", &tx(&[("a", "1")]), &schemas, 10);
        assert!(matches!(
            f.admit("TransactWriteItems", &t),
            Admission::Go { .. }
        ));
        assert!(matches!(
            f.admit("TransactGetItems", &pg),
            Admission::Reject(_)
        ));
    }

    #[test]
    fn throttling_refuses_whole_transactions_and_batch_items() {
        let limits = super::super::config::Throughput {
            enabled: true,
            write_units_per_s: 4.0,
            read_units_per_s: 3000.0,
            burst_secs: 1.0,
        };
        let f = front(true, limits);
        let schemas = schemas();
        let put = json!({"TableName": "t", "Item": {"pk": s("a"), "sk": s("1")}});
        let p = parse("PutItem", &put, &schemas, 10);
        for _ in 0..4 {
            assert!(matches!(f.admit("PutItem", &p), Admission::Go { .. }));
        }
        assert!(
            matches!(f.admit("PutItem", &p), Admission::Reject(ref r) if r == &[(0, Refusal::Throttled)])
        );
        // A transaction (2 units per item) is refused on the hot item only.
        let t = parse(
            "TransactWriteItems",
            &tx(&[("b", "1"), ("a", "1")]),
            &schemas,
            10,
        );
        assert!(
            matches!(f.admit("TransactWriteItems", &t), Admission::Reject(ref r) if r == &[(1, Refusal::Throttled)])
        );
        // A batch entirely throttled is rejected; partly, it goes on.
        let batch = json!({"RequestItems": {"t": [{"PutRequest": {"Item": {"pk": s("a"), "sk": s("1")}}}]}});
        let pb = parse("BatchWriteItem", &batch, &schemas, 10);
        assert!(matches!(
            f.admit("BatchWriteItem", &pb),
            Admission::Reject(_)
        ));
        let batch2 = json!({"RequestItems": {"t": [
            {"PutRequest": {"Item": {"pk": s("a"), "sk": s("1")}}},
            {"PutRequest": {"Item": {"pk": s("c"), "sk": s("1")}}}]}});
        let pb2 = parse("BatchWriteItem", &batch2, &schemas, 10);
        assert!(
            matches!(f.admit("BatchWriteItem", &pb2), Admission::Go { ref refused, .. } if refused == &[(0, Refusal::Throttled)])
        );
    }

    #[test]
    fn tokens_replay_successes_only() {
        let f = front(true, super::super::config::Throughput::off());
        let TokenCheck::New(g) = f.check_token("tok", 1) else {
            panic!()
        };
        assert!(matches!(f.check_token("tok", 1), TokenCheck::InProgress));
        assert!(matches!(f.check_token("tok", 2), TokenCheck::Mismatch));
        g.succeeded(Bytes::from_static(b"{}"));
        assert!(matches!(f.check_token("tok", 1), TokenCheck::Replay(_)));
        let TokenCheck::New(g) = f.check_token("other", 1) else {
            panic!()
        };
        drop(g); // failed: forgotten
        assert!(matches!(f.check_token("other", 1), TokenCheck::New(_)));
    }

    #[test]
    fn cancellation_reasons_have_the_documented_shape() {
        let r = cancelled(3, &[(1, Refusal::Conflict), (2, Refusal::Throttled)]);
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let body =
            futures::executor::block_on(axum::body::to_bytes(r.into_body(), 1 << 20)).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v["__type"],
            "com.amazonaws.dynamodb.v20120810#TransactionCanceledException"
        );
        assert_eq!(
            v["Message"],
            "Transaction cancelled, please refer cancellation reasons for specific reasons [None, TransactionConflict, ThrottlingError]"
        );
        assert_eq!(v["CancellationReasons"][0], json!({"Code": "None"}));
        assert_eq!(
            v["CancellationReasons"][1],
            json!({"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"})
        );
        assert_eq!(v["CancellationReasons"][2]["Code"], "ThrottlingError");
    }
}
