//! Injection of the Lambda and stream-trigger faults of the shared fault plan
//! (`lambdafusion-faults`): the hook every injection site calls, which also counts what it
//! injected, and the stable decision keys.
//!
//! # Decision keys
//!
//! [`FaultPlan::fires`] is a pure function of the seed, the fault and a key, so the keys
//! must not contain anything that changes from run to run (random ids, timestamps):
//!
//! * **Invocations** (Invoke API, function URL, destination records) are keyed
//!   `<function>#<n>#<hash>`, where `<hash>` is a 64-bit FNV-1a hash (16 hex digits) of
//!   the payload after [`normalize`] (UUIDs, 32-hex-digit tokens and RFC 3339
//!   timestamps replaced by placeholders), and `<n>` counts the earlier invocations of
//!   the same function with the same normalized payload (0 for the first). Counting per
//!   payload rather than per function keeps the keys stable when independent
//!   invocations (an executor fan-out) arrive in a different order, and still gives a
//!   repeated payload (a retry, a duplicate) a fresh decision. A function URL request is
//!   keyed by `METHOD path?query`, a newline and its body, not by the event built from
//!   it (which carries a request id and the time). An asynchronous event's attempts
//!   append `#attempt<k>` (cold starts are decided per attempt); the second copy of a
//!   duplicated event appends `#dup`.
//! * **Stream batches** are keyed `<table>#<shard>#<position>`: the shard's index in
//!   discovery order and the position (0-based, in read order, counting records the
//!   filters dropped) of the batch's first record since the trigger started reading
//!   the shard (`#dup` appended when that record is a `streams.duplicate_record`
//!   copy); a record (`streams.duplicate_record`) by its own position. The invocation
//!   that delivers a batch is keyed by the batch key plus `#<records>#<attempt>`.
//!
//! Same seed and same sequence of events: same faults.

use lambdafusion_faults::{Counters, FaultKind, FaultPlan, LivePlan};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// The plan plus the counters every injected fault is recorded in.
#[derive(Debug, Clone)]
pub struct Injector {
    plan: LivePlan,
    counters: Arc<Counters>,
}

impl Default for Injector {
    fn default() -> Self {
        Injector::new(
            LivePlan::fixed(FaultPlan::none()),
            Arc::new(Counters::new()),
        )
    }
}

impl Injector {
    /// Injects what `plan` says, counting into `counters`.
    pub fn new(plan: LivePlan, counters: Arc<Counters>) -> Injector {
        Injector { plan, counters }
    }

    /// The plan now (a test may swap it while the emulator runs).
    pub fn plan(&self) -> Arc<FaultPlan> {
        self.plan.current()
    }

    /// The counters of injected faults.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// Whether the plan has any fault at all (keys need not be computed otherwise).
    pub fn is_active(&self) -> bool {
        !self.plan.current().is_empty()
    }

    /// Whether `kind` hits the event `key`; a hit is counted.
    pub fn fire(&self, kind: FaultKind, key: &str) -> bool {
        let hit = self.plan.current().fires(kind, key);
        if hit {
            self.counters.record(kind);
        }
        hit
    }

    /// The delay `kind` imposes on the event `key` (`ms`, or between `ms` and `max_ms`),
    /// if it hits; a hit is counted.
    pub fn delay(&self, kind: FaultKind, key: &str) -> Option<Duration> {
        let ms = self.plan.current().delay_ms(kind, key)?;
        self.counters.record(kind);
        Some(Duration::from_millis(ms))
    }

    /// Counts a fault whose effect the caller decided by other means (a limit).
    pub fn record(&self, kind: FaultKind) {
        self.counters.record(kind);
    }

    /// `limit` of `lambda.concurrency_limit`, when the plan has it (1 if the fault
    /// gives no `limit`).
    pub fn concurrency_limit(&self) -> Option<usize> {
        self.plan
            .current()
            .get(FaultKind::LambdaConcurrencyLimit)
            .map(|f| f.limit.unwrap_or(1).max(1) as usize)
    }
}

/// Replaces the tokens that differ between runs by placeholders: UUIDs (`8-4-4-4-12` hex
/// digits) by `<uuid>`, runs of exactly 32 hex digits by `<hex32>`, RFC 3339 timestamps
/// (`2024-05-01T12:00:00.123Z`, fraction and zone optional) by `<time>`. A token must not
/// touch a letter or digit on either side.
pub fn normalize(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let at_boundary = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if at_boundary && bytes[i].is_ascii_hexdigit() {
            let token = [
                (uuid_len(&bytes[i..]), "<uuid>"),
                (hex32_len(&bytes[i..]), "<hex32>"),
                (timestamp_len(&bytes[i..]), "<time>"),
            ]
            .into_iter()
            .find_map(|(len, placeholder)| len.map(|l| (l, placeholder)));
            if let Some((len, placeholder)) = token {
                let end = i + len;
                if end == bytes.len() || !bytes[end].is_ascii_alphanumeric() {
                    let s = out.get_or_insert_with(|| String::with_capacity(text.len()));
                    s.push_str(&text[copied..i]);
                    s.push_str(placeholder);
                    copied = end;
                    i = end;
                    continue;
                }
            }
        }
        i += 1;
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut s) => {
            s.push_str(&text[copied..]);
            Cow::Owned(s)
        }
    }
}

fn hex_run(bytes: &[u8]) -> usize {
    bytes.iter().take_while(|b| b.is_ascii_hexdigit()).count()
}

fn uuid_len(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    for (n, group) in [8usize, 4, 4, 4, 12].iter().enumerate() {
        if n > 0 {
            if bytes.get(at) != Some(&b'-') {
                return None;
            }
            at += 1;
        }
        if hex_run(&bytes[at.min(bytes.len())..]) < *group {
            return None;
        }
        at += group;
    }
    Some(at)
}

fn hex32_len(bytes: &[u8]) -> Option<usize> {
    (hex_run(bytes) == 32).then_some(32)
}

fn timestamp_len(bytes: &[u8]) -> Option<usize> {
    // YYYY-MM-DDTHH:MM:SS
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:dd";
    if bytes.len() < SHAPE.len() {
        return None;
    }
    for (b, s) in bytes.iter().zip(SHAPE) {
        let ok = match s {
            b'd' => b.is_ascii_digit(),
            other => b == other,
        };
        if !ok {
            return None;
        }
    }
    let mut at = SHAPE.len();
    if bytes.get(at) == Some(&b'.') {
        let digits = bytes[at + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits > 0 {
            at += 1 + digits;
        }
    }
    match bytes.get(at) {
        Some(b'Z') => at += 1,
        Some(b'+' | b'-')
            if bytes.len() >= at + 6
                && bytes[at + 1].is_ascii_digit()
                && bytes[at + 2].is_ascii_digit()
                && bytes[at + 3] == b':'
                && bytes[at + 4].is_ascii_digit()
                && bytes[at + 5].is_ascii_digit() =>
        {
            at += 6
        }
        _ => {}
    }
    Some(at)
}

/// 64-bit FNV-1a: stable across runs, platforms and Rust versions (unlike `std`'s hasher).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The hash of a payload after [`normalize`] (payloads that are not UTF-8 are hashed as
/// they are).
pub fn payload_hash(payload: &[u8]) -> u64 {
    match std::str::from_utf8(payload) {
        Ok(text) => fnv1a(normalize(text).as_bytes()),
        Err(_) => fnv1a(payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_ids_and_times_only_as_whole_tokens() {
        let text = r#"{"job":"0f9a4b2c7d1e4f3a8b6c5d4e3f2a1b0c","req":"123e4567-e89b-12d3-a456-426614174000","t":"2024-05-01T12:00:00.123Z","u":"2024-05-01T12:00:00+02:00"}"#;
        assert_eq!(
            normalize(text),
            r#"{"job":"<hex32>","req":"<uuid>","t":"<time>","u":"<time>"}"#
        );
        // Not tokens: 31 or 33 hex digits, hex glued to letters, plain numbers.
        let keep = r#"{"a":"0f9a4b2c7d1e4f3a8b6c5d4e3f2a1b0","b":"0f9a4b2c7d1e4f3a8b6c5d4e3f2a1b0c1","c":"x0f9a4b2c7d1e4f3a8b6c5d4e3f2a1b0c","n":12345,"d":"2024-05-01"}"#;
        assert_eq!(normalize(keep), keep);
        assert!(matches!(normalize("plain"), Cow::Borrowed(_)));
        // Keys that differ only in such tokens hash alike; others do not.
        assert_eq!(
            payload_hash(br#"{"job":"00000000000000000000000000000000","stage":1}"#),
            payload_hash(br#"{"job":"ffffffffffffffffffffffffffffffff","stage":1}"#)
        );
        assert_ne!(
            payload_hash(br#"{"job":"00000000000000000000000000000000","stage":1}"#),
            payload_hash(br#"{"job":"00000000000000000000000000000000","stage":2}"#)
        );
    }

    #[test]
    fn the_injector_counts_what_it_injects() {
        let plan = FaultPlan::parse(
            r#"{"seed": 1, "faults": {"lambda.drop_event": 1, "lambda.delay_event": {"ms": 5, "max_ms": 9},
                "lambda.concurrency_limit": {"limit": 3}}}"#,
        )
        .unwrap();
        let inj = Injector::new(LivePlan::fixed(plan), Arc::new(Counters::new()));
        assert!(inj.is_active());
        assert!(inj.fire(FaultKind::LambdaDropEvent, "f#0#1"));
        assert!(!inj.fire(FaultKind::LambdaDuplicateEvent, "f#0#1"));
        let d = inj.delay(FaultKind::LambdaDelayEvent, "f#0#1").unwrap();
        assert!((5..=9).contains(&(d.as_millis() as u64)));
        assert_eq!(inj.concurrency_limit(), Some(3));
        let counts = inj.counters().snapshot();
        assert_eq!(counts["lambda.drop_event"], 1);
        assert_eq!(counts["lambda.delay_event"], 1);
        assert!(!counts.contains_key("lambda.duplicate_event"));
        assert!(!Injector::default().is_active());
    }
}
