//! DynamoDB capacity accounting for the front: item sizes, capacity units, and a token
//! bucket per item for reads and for writes.
//!
//! * **Item size** follows "DynamoDB item sizes and formats"
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>):
//!   attribute names plus values; a string is its UTF-8 bytes, a number about one byte
//!   per two significant digits plus one, a binary its raw bytes, a null or Boolean one
//!   byte, a list or map 3 bytes plus its elements with 1 byte each.
//! * **Capacity units** (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/provisioned-capacity-mode.html>):
//!   a write costs one WCU per started 1 KB; a strongly consistent read one RCU per
//!   started 4 KB, an eventually consistent read half of that; a read of an item that does
//!   not exist still costs one RCU (half if eventually consistent). In a transaction every
//!   item costs twice, for the prepare and the commit
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-capacity-handling>).
//! * **Buckets**: each item refills at `write_units_per_s` / `read_units_per_s` up to
//!   `burst_secs` worth (see [`Throughput`]); a write must find its whole cost in the
//!   bucket, a read needs only its minimum up front and pays the rest once its size is
//!   known (so a large read can drive the bucket below zero, delaying the next ones).

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Instant;

use super::config::Throughput;

/// Size in bytes of an item (`{"name": {"S": "..."}, ...}`) as DynamoDB counts it.
pub fn item_size(item: &Map<String, Value>) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

/// Size in bytes of one attribute value (`{"S": "..."}`, `{"M": {...}}`, ...), without
/// its name.
pub fn value_size(value: &Value) -> usize {
    let Some((kind, v)) = value.as_object().and_then(|m| m.iter().next()) else {
        return 0;
    };
    match (kind.as_str(), v) {
        ("S", Value::String(s)) => s.len(),
        ("N", Value::String(n)) => number_size(n),
        ("B", Value::String(b)) => base64_len(b),
        ("BOOL" | "NULL", _) => 1,
        ("SS", Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::len).sum(),
        ("NS", Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(number_size)
            .sum(),
        ("BS", Value::Array(items)) => items.iter().filter_map(Value::as_str).map(base64_len).sum(),
        ("L", Value::Array(items)) => 3 + items.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        ("M", Value::Object(map)) => {
            3 + map
                .iter()
                .map(|(k, v)| 1 + k.len() + value_size(v))
                .sum::<usize>()
        }
        _ => 0,
    }
}

/// About one byte per two significant digits, plus one.
fn number_size(n: &str) -> usize {
    let mantissa = n.split(['e', 'E']).next().unwrap_or("");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.div_ceil(2) + 1
}

/// Raw length of a base64 text.
fn base64_len(b: &str) -> usize {
    let padding = b.bytes().rev().take_while(|c| *c == b'=').count();
    (b.len() * 3 / 4).saturating_sub(padding)
}

/// Write capacity units of writing an item of `bytes` (at least 1).
pub fn write_units(bytes: usize) -> f64 {
    bytes.div_ceil(1024).max(1) as f64
}

/// Read capacity units of reading an item of `bytes` (0 = not found).
pub fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(4096).max(1) as f64;
    if consistent {
        units
    } else {
        units / 2.0
    }
}

/// A token bucket of capacity units.
#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant, rate: f64, cap: f64) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(cap);
        self.at = now;
    }
}

/// The read and write buckets of every item seen, for one set of limits.
#[derive(Debug)]
pub struct Capacity<K> {
    limits: Throughput,
    buckets: HashMap<K, [Bucket; 2]>,
}

const WRITE: usize = 0;
const READ: usize = 1;

impl<K: Hash + Eq + Clone> Capacity<K> {
    /// Buckets for `limits` (none is ever empty when the limits are off).
    pub fn new(limits: Throughput) -> Capacity<K> {
        Capacity {
            limits,
            buckets: HashMap::new(),
        }
    }

    fn rate_cap(&self, which: usize) -> (f64, f64) {
        let rate = if which == WRITE {
            self.limits.write_units_per_s
        } else {
            self.limits.read_units_per_s
        };
        (rate, rate * self.limits.burst_secs)
    }

    fn bucket(&mut self, key: &K, which: usize, now: Instant) -> &mut Bucket {
        let (rate, cap) = self.rate_cap(which);
        if self.buckets.len() > 100_000 {
            self.prune(now);
        }
        let (_, write_cap) = self.rate_cap(WRITE);
        let (_, read_cap) = self.rate_cap(READ);
        let bucket = &mut self.buckets.entry(key.clone()).or_insert_with(|| {
            // A new item starts with full buckets.
            [
                Bucket {
                    tokens: write_cap,
                    at: now,
                },
                Bucket {
                    tokens: read_cap,
                    at: now,
                },
            ]
        })[which];
        bucket.refill(now, rate, cap);
        bucket
    }

    /// Forgets the items whose buckets are full again (a new bucket starts full).
    fn prune(&mut self, now: Instant) {
        let (wr, wc) = self.rate_cap(WRITE);
        let (rr, rc) = self.rate_cap(READ);
        self.buckets.retain(|_, b| {
            b[WRITE].refill(now, wr, wc);
            b[READ].refill(now, rr, rc);
            b[WRITE].tokens < wc || b[READ].tokens < rc
        });
    }

    /// Whether `key` has `units` of write capacity now.
    pub fn can_write(&mut self, key: &K, units: f64, now: Instant) -> bool {
        !self.limits.enabled || self.bucket(key, WRITE, now).tokens >= units
    }

    /// Takes `units` of write capacity (after [`Capacity::can_write`]).
    pub fn take_write(&mut self, key: &K, units: f64, now: Instant) {
        if self.limits.enabled {
            self.bucket(key, WRITE, now).tokens -= units;
        }
    }

    /// Whether `key` has `units` of read capacity now.
    pub fn can_read(&mut self, key: &K, units: f64, now: Instant) -> bool {
        !self.limits.enabled || self.bucket(key, READ, now).tokens >= units
    }

    /// Charges `units` of read capacity, once the size read is known; the bucket may go
    /// below zero (down to one burst's worth of debt).
    pub fn charge_read(&mut self, key: &K, units: f64, now: Instant) {
        if self.limits.enabled {
            let (_, cap) = self.rate_cap(READ);
            let bucket = self.bucket(key, READ, now);
            bucket.tokens = (bucket.tokens - units).max(-cap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn item_sizes_follow_the_documented_rules() {
        // Examples in the spirit of the docs: names count, numbers ~ digits / 2 + 1.
        let item = json!({
            "pk": {"S": "JOB#1"},          // 2 + 5
            "n": {"N": "-12345.6700"},     // 1 + (7 significant -> 4) + 1
            "z": {"N": "0"},               // 1 + 0 + 1
            "b": {"B": "AAECAw=="},        // 1 + 4 raw bytes
            "ok": {"BOOL": true},          // 2 + 1
            "l": {"L": [{"S": "ab"}, {"NULL": true}]},            // 1 + 3 + (1+2) + (1+1)
            "m": {"M": {"k": {"S": "v"}}},                         // 1 + 3 + (1 + 1 + 1)
            "ss": {"SS": ["a", "bc"]}                              // 2 + 3
        });
        let sizes = [7, 6, 2, 5, 3, 9, 7, 5];
        assert_eq!(
            item_size(item.as_object().unwrap()),
            sizes.iter().sum::<usize>()
        );
        assert_eq!(write_units(0), 1.0);
        assert_eq!(write_units(1024), 1.0);
        assert_eq!(write_units(1025), 2.0);
        assert_eq!(read_units(4097, true), 2.0);
        assert_eq!(read_units(10, false), 0.5);
        assert_eq!(
            read_units(0, true),
            1.0,
            "a missing item still costs one RCU"
        );
    }

    #[test]
    fn buckets_hold_a_burst_and_refill_at_the_rate() {
        let limits = Throughput {
            enabled: true,
            write_units_per_s: 1000.0,
            read_units_per_s: 3000.0,
            burst_secs: 1.0,
        };
        let mut c: Capacity<&str> = Capacity::new(limits);
        let t0 = Instant::now();
        // A full second's worth, then nothing.
        for _ in 0..100 {
            assert!(c.can_write(&"hot", 10.0, t0));
            c.take_write(&"hot", 10.0, t0);
        }
        assert!(!c.can_write(&"hot", 10.0, t0));
        assert!(
            c.can_write(&"cold", 10.0, t0),
            "other items are not affected"
        );
        // 10 ms later: 10 WCU are back.
        let t1 = t0 + Duration::from_millis(10);
        assert!(c.can_write(&"hot", 10.0, t1));
        assert!(!c.can_write(&"hot", 10.5, t1));
        // Reads are separate, and may go into debt.
        c.charge_read(&"hot", 5000.0, t1);
        assert!(!c.can_read(&"hot", 1.0, t1));
        assert!(c.can_read(&"hot", 1.0, t1 + Duration::from_millis(700)));
        // Off: never empty.
        let mut off: Capacity<&str> = Capacity::new(Throughput::off());
        off.take_write(&"x", 1e9, t0);
        assert!(off.can_write(&"x", 1e9, t0));
    }
}
