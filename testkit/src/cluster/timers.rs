//! The state task's timer wheel.
//!
//! Every timeout of the cluster (fetch max wait, delayed requests, session
//! expiry, rebalance and transaction timeouts) is an entry here. The state
//! task sleeps until the earliest one with `tokio::time::sleep_until`, so a
//! test that pauses tokio's clock gets every timeout exactly, and fast.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::handlers::RequestId;

/// What happens when a timer fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerEvent {
    /// A Fetch waiting for min bytes reached its max wait.
    FetchWait(RequestId),
    /// A request held back by a delay fault is handled now.
    DelayedRequest(RequestId),
    /// A deadline of the group coordinator for this group id; the
    /// coordinator re-checks the group's deadlines when it fires.
    Group(String),
    /// A deadline of the transaction coordinator for this transactional id.
    Txn(String),
    /// The markers of this transactional id's oldest ended transaction are
    /// written now.
    TxnMarkers(String),
}

/// Timer entries ordered by deadline, then by insertion.
#[derive(Debug, Default)]
pub struct Timers {
    entries: BTreeMap<(Instant, u64), TimerEvent>,
    seq: u64,
}

impl Timers {
    /// Adds an event at `at`. Events at the same instant fire in the order
    /// they were scheduled.
    pub fn schedule(&mut self, at: Instant, event: TimerEvent) {
        self.seq += 1;
        self.entries.insert((at, self.seq), event);
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries.keys().next().map(|(at, _)| *at)
    }

    /// Removes and returns every event due at or before `now`, in order.
    pub fn take_due(&mut self, now: Instant) -> Vec<TimerEvent> {
        let mut due = Vec::new();
        while let Some(entry) = self.entries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    /// Drops every pending event for which `keep` is false.
    pub fn retain(&mut self, mut keep: impl FnMut(&TimerEvent) -> bool) {
        self.entries.retain(|_, e| keep(e));
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
