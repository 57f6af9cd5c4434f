//! The follow-up rebalance: when it is due, and the check a client runs with
//! fresh lags to trigger it early.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::TaskId;

/// A follow-up rebalance the group needs because some actives stay on a
/// caught-up client while warmups restore their state on the target client.
///
/// Kafka only rebalances again after `probing.rebalance.interval.ms`, so a
/// warmup that caught up after a minute idles for nine (issue #4's slow
/// promotions). Weir rebalances as soon as *any* listed warmup reports caught
/// up ([`FollowupRebalance::warmup_caught_up`]), and keeps the probing
/// interval only as the fallback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowupRebalance {
    /// Warmups by client: when one of them catches up, rebalance. Empty only
    /// if no warmup could be placed this round.
    pub warmups: BTreeMap<String, BTreeSet<TaskId>>,
    /// The lag at which a warmup counts as caught up.
    pub acceptable_recovery_lag: u64,
    /// Rebalance after this long in any case.
    pub probing_interval: Duration,
}

impl FollowupRebalance {
    /// Whether `client` should trigger the follow-up now, given the current
    /// lag of each of its tasks' local state: true as soon as one of its
    /// warmups is within `acceptable_recovery_lag`.
    ///
    /// A warmup with no lag reported is not caught up.
    pub fn warmup_caught_up(&self, client: &str, current_lags: &BTreeMap<TaskId, u64>) -> bool {
        self.warmups.get(client).is_some_and(|tasks| {
            tasks.iter().any(|t| {
                current_lags
                    .get(t)
                    .is_some_and(|&lag| lag <= self.acceptable_recovery_lag)
            })
        })
    }

    /// The warmups `client` has to watch (empty if none).
    pub fn warmups_of(&self, client: &str) -> impl Iterator<Item = &TaskId> {
        self.warmups.get(client).into_iter().flatten()
    }
}
