//! Exponential backoff with jitter, as Kafka's clients do it
//! (`retry.backoff.ms` doubling up to `retry.backoff.max.ms`, ±20 %).
//!
//! The jitter keeps many clients that failed together from retrying together.
//! [`Cluster::retry`] runs an operation under this policy.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::Cluster;
use crate::{ClientError, Result};

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

impl Cluster {
    /// Runs `op` until it succeeds, fails with a non-retriable error, or
    /// `default.api.timeout.ms` has passed. Between attempts it waits with
    /// exponential backoff and jitter, and marks the metadata stale when the
    /// error suggests it (the next lookup in `op` then refreshes it).
    ///
    /// # Errors
    /// The first non-retriable error, or [`ClientError::RetriesExhausted`].
    pub async fn retry<T, F, Fut>(&self, what: &str, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let config = &self.inner.config;
        let backoff = Backoff::new(config.retry_backoff, config.retry_backoff_max);
        self.retry_with(what, backoff, config.default_api_timeout, op)
            .await
    }

    /// [`retry`](Self::retry) with an explicit backoff and time budget.
    ///
    /// # Errors
    /// As [`retry`](Self::retry).
    pub async fn retry_with<T, F, Fut>(
        &self,
        what: &str,
        backoff: Backoff,
        budget: std::time::Duration,
        mut op: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + budget;
        let mut failures = 0u32;
        loop {
            let err = match op().await {
                Ok(v) => return Ok(v),
                Err(e) if !e.is_retriable() => return Err(e),
                Err(e) => e,
            };
            failures += 1;
            if err.needs_metadata_refresh() {
                match &err {
                    ClientError::Server { topic: Some(t), .. }
                    | ClientError::NoLeader { topic: t, .. } => {
                        self.invalidate_topic(t);
                    }
                    _ => self.invalidate(),
                }
            }
            let delay = backoff.delay(failures);
            if Instant::now() + delay >= deadline {
                return Err(ClientError::RetriesExhausted {
                    what: what.to_owned(),
                    attempts: failures,
                    last: Box::new(err),
                });
            }
            tracing::debug!(what, attempt = failures, error = %err, ?delay, "retrying");
            tokio::time::sleep(delay).await;
        }
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
