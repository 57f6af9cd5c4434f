//! Exponential backoff with jitter, as Kafka's clients do it
//! (`retry.backoff.ms` doubling up to `retry.backoff.max.ms`, ±20 %).
//!
//! The jitter keeps many clients that failed together from retrying together.

use std::time::Duration;

use rand::Rng;

/// The jitter as a fraction of the backoff, both ways.
const JITTER: f64 = 0.2;

/// The delays between attempts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub initial: Duration,
    /// The largest delay.
    pub max: Duration,
}

impl Backoff {
    /// A backoff from `initial` doubling up to `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
        }
    }

    /// The delay before attempt `failures + 1`, without jitter: `initial ·
    /// 2^(failures-1)`, capped at `max`.
    pub fn base_delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(30);
        self.initial.saturating_mul(1u32 << exp).min(self.max)
    }

    /// [`base_delay`](Self::base_delay) with ±20 % random jitter (never above `max`).
    pub fn delay(&self, failures: u32) -> Duration {
        let base = self.base_delay(failures);
        let factor = rand::rng().random_range(1.0 - JITTER..=1.0 + JITTER);
        base.mul_f64(factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_with_bounded_jitter() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_millis(1000));
        let bases: Vec<u128> = (1..=6).map(|n| b.base_delay(n).as_millis()).collect();
        assert_eq!(bases, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.base_delay(u32::MAX), Duration::from_millis(1000));
        for n in 1..=6 {
            for _ in 0..50 {
                let d = b.delay(n);
                let base = b.base_delay(n);
                assert!(
                    d >= base.mul_f64(0.8) && d <= base.mul_f64(1.2).min(b.max),
                    "{d:?} for {n}"
                );
            }
        }
    }
}
