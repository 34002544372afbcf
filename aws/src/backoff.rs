//! Exponential backoff with full jitter (`random(0, min(cap, base * 2^attempt))`, as AWS's
//! "Exponential Backoff And Jitter" recommends), shared by every retry loop of this crate:
//! throttled Lambda invocations and throttled, conflicting or failing DynamoDB requests.

use std::time::Duration;

/// A backoff sequence. See the [module docs](self).
#[derive(Debug)]
pub struct Backoff {
    /// Pauses handed out so far.
    pub attempt: u32,
    base: Duration,
    cap: Duration,
    seed: u64,
}

impl Backoff {
    /// A sequence starting at `base`, never above `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15)
            ^ (std::process::id() as u64).rotate_left(32)
            | 1;
        Self {
            attempt: 0,
            base,
            cap,
            seed,
        }
    }

    /// The next pause.
    pub fn next_pause(&mut self) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1 << self.attempt.min(16))
            .min(self.cap);
        self.attempt += 1;
        // xorshift64: plenty for spreading retries apart.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        ceiling.mul_f64((self.seed % 10_000) as f64 / 10_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_are_jittered_below_an_exponential_ceiling() {
        let (base, cap) = (Duration::from_millis(50), Duration::from_secs(5));
        let mut b = Backoff::new(base, cap);
        for attempt in 0..12 {
            let ceiling = base.saturating_mul(1 << attempt).min(cap);
            let pause = b.next_pause();
            assert!(
                pause <= ceiling,
                "attempt {attempt}: {pause:?} > {ceiling:?}"
            );
        }
        let pauses: Vec<_> = (0..20)
            .map(|_| {
                let mut b = Backoff::new(base, cap);
                b.attempt = 10;
                b.next_pause()
            })
            .collect();
        assert!(pauses.windows(2).any(|w| w[0] != w[1]), "jitter varies");
    }
}
