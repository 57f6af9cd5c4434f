//! The client side of a fetch session (KIP-227), with no I/O.
//!
//! A full fetch (epoch 0) lists every partition and asks the broker to open
//! a session. While the session lives, each request carries the next epoch
//! and only the partitions whose fetch state changed since the last request,
//! plus a forgotten list of partitions that left; the broker remembers the
//! rest. Any session error, or any failed request (whose epoch the broker
//! may or may not have seen), sends the client back to a full fetch.

use std::hash::Hash;

use indexmap::IndexMap;

/// Top-level error: the broker no longer knows the session id.
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
/// Top-level error: the epoch is not the one the broker expects.
pub const INVALID_FETCH_SESSION_EPOCH: i16 = 71;

/// What the broker needs to know to fetch one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionFetch {
    /// The offset to fetch from.
    pub fetch_offset: i64,
    /// The leader epoch the client last saw (-1 if unknown).
    pub current_leader_epoch: i32,
    /// The most bytes to return for this partition.
    pub max_bytes: i32,
}

/// One request's worth of session bookkeeping: what [`FetchSession::plan`]
/// decided to send.
#[derive(Debug, Clone)]
pub struct FetchPlan<K> {
    /// `session_id` for the request (0 asks for a new session).
    pub session_id: i32,
    /// `session_epoch` for the request (0 is a full fetch).
    pub epoch: i32,
    /// The partitions to list in the request, in order.
    pub partitions: Vec<(K, PartitionFetch)>,
    /// Partitions the broker should drop from the session.
    pub forgotten: Vec<K>,
    /// The complete wanted set, which becomes the session's state once the
    /// broker accepts the request.
    wanted: IndexMap<K, PartitionFetch>,
}

impl<K> FetchPlan<K> {
    /// Whether this is a full fetch (every partition listed).
    pub fn is_full(&self) -> bool {
        self.epoch == 0
    }

    /// What the broker fetches for `key` with this request, listed or not.
    pub fn fetch_state(&self, key: &K) -> Option<&PartitionFetch>
    where
        K: Hash + Eq,
    {
        self.wanted.get(key)
    }
}

/// The client's view of one broker's fetch session.
#[derive(Debug, Clone)]
pub struct FetchSession<K> {
    /// 0 while no session is open.
    id: i32,
    /// The epoch of the next request; 0 means the next one is a full fetch.
    next_epoch: i32,
    /// What the broker holds for this session after the last accepted request.
    sent: IndexMap<K, PartitionFetch>,
}

impl<K> Default for FetchSession<K> {
    fn default() -> Self {
        Self {
            id: 0,
            next_epoch: 0,
            sent: IndexMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> FetchSession<K> {
    /// No session yet: the first request is a full fetch.
    pub fn new() -> Self {
        Self::default()
    }

    /// The open session's id, or 0.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The epoch the next request will carry.
    pub fn next_epoch(&self) -> i32 {
        self.next_epoch
    }

    /// Decides what the next request carries, given every partition the
    /// client wants to fetch from this broker now.
    pub fn plan(&self, wanted: IndexMap<K, PartitionFetch>) -> FetchPlan<K> {
        if self.id == 0 || self.next_epoch == 0 {
            let partitions = wanted.iter().map(|(k, v)| (k.clone(), *v)).collect();
            // KIP-227: the old session's id with epoch 0 closes it and opens
            // a new one (Java's `nextCloseExisting`), so the broker's cache
            // slot is freed at once rather than when it is evicted.
            return FetchPlan {
                session_id: self.id,
                epoch: 0,
                partitions,
                forgotten: Vec::new(),
                wanted,
            };
        }
        let partitions = wanted
            .iter()
            .filter(|(k, v)| self.sent.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let forgotten = self
            .sent
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        FetchPlan {
            session_id: self.id,
            epoch: self.next_epoch,
            partitions,
            forgotten,
            wanted,
        }
    }

    /// Records the broker's answer to `plan`: its top-level error code and
    /// the session id it returned.
    pub fn on_response(&mut self, plan: FetchPlan<K>, error_code: i16, session_id: i32) {
        if error_code != 0 {
            // FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH or any
            // other top-level error: the broker's state is unknown, so
            // start over with a full fetch that opens a new session, and
            // closes the old one unless the broker no longer has it.
            self.reset();
            if error_code == FETCH_SESSION_ID_NOT_FOUND {
                self.id = 0;
            }
            return;
        }
        if plan.is_full() {
            // Session id 0 means the broker chose not to open a session:
            // keep sending full fetches.
            self.id = session_id;
            self.next_epoch = if session_id == 0 { 0 } else { 1 };
        } else {
            // Epochs wrap to 1, never to 0 (which would mean a full fetch).
            self.next_epoch = if self.next_epoch == i32::MAX {
                1
            } else {
                self.next_epoch + 1
            };
        }
        self.sent = plan.wanted;
    }

    /// The request failed without a response (or with one that can't be
    /// trusted): the next request is a full fetch, which names the old
    /// session (if any) with epoch 0 so that the broker closes it.
    pub fn reset(&mut self) {
        self.next_epoch = 0;
        self.sent.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: i64) -> PartitionFetch {
        PartitionFetch {
            fetch_offset: offset,
            current_leader_epoch: -1,
            max_bytes: 1 << 20,
        }
    }

    fn wanted(parts: &[(&'static str, i64)]) -> IndexMap<&'static str, PartitionFetch> {
        parts.iter().map(|&(k, o)| (k, at(o))).collect()
    }

    #[test]
    fn full_fetch_opens_a_session_then_increments_carry_only_changes() {
        let mut s = FetchSession::new();
        let plan = s.plan(wanted(&[("a", 0), ("b", 0)]));
        assert!(plan.is_full());
        assert_eq!((plan.session_id, plan.epoch), (0, 0));
        assert_eq!(plan.partitions.len(), 2);
        s.on_response(plan, 0, 77);
        assert_eq!((s.id(), s.next_epoch()), (77, 1));

        // Only "a" advanced: "b" stays in the session unlisted.
        let plan = s.plan(wanted(&[("a", 10), ("b", 0)]));
        assert_eq!((plan.session_id, plan.epoch), (77, 1));
        assert_eq!(plan.partitions, vec![("a", at(10))]);
        assert!(plan.forgotten.is_empty());
        s.on_response(plan, 0, 77);
        assert_eq!(s.next_epoch(), 2);

        // Nothing changed: an empty incremental fetch, still at the next epoch.
        let plan = s.plan(wanted(&[("a", 10), ("b", 0)]));
        assert!(plan.partitions.is_empty() && plan.forgotten.is_empty());
        assert_eq!(plan.epoch, 2);
        s.on_response(plan, 0, 77);

        // "b" is unassigned, "c" added.
        let plan = s.plan(wanted(&[("a", 10), ("c", 5)]));
        assert_eq!(plan.partitions, vec![("c", at(5))]);
        assert_eq!(plan.forgotten, vec!["b"]);
        assert_eq!(plan.epoch, 3);
    }

    #[test]
    fn session_errors_start_a_new_full_fetch() {
        for code in [FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH] {
            let mut s = FetchSession::new();
            let plan = s.plan(wanted(&[("a", 0)]));
            s.on_response(plan, 0, 5);
            let plan = s.plan(wanted(&[("a", 3)]));
            assert!(!plan.is_full());
            s.on_response(plan, code, 0);
            let plan = s.plan(wanted(&[("a", 3), ("b", 1)]));
            assert!(plan.is_full(), "after error {code}");
            // An unknown session is not named again; one with a wrong
            // epoch is closed by naming it with epoch 0.
            let closes = if code == FETCH_SESSION_ID_NOT_FOUND {
                0
            } else {
                5
            };
            assert_eq!((plan.session_id, plan.epoch), (closes, 0));
            assert_eq!(plan.partitions.len(), 2, "a full fetch lists everything");
        }
    }

    #[test]
    fn a_failed_request_resets_and_a_sessionless_broker_gets_full_fetches() {
        let mut s = FetchSession::new();
        let plan = s.plan(wanted(&[("a", 0)]));
        s.on_response(plan, 0, 9);
        s.reset();
        let plan = s.plan(wanted(&[("a", 0)]));
        assert!(plan.is_full());
        assert_eq!(
            (plan.session_id, plan.epoch),
            (9, 0),
            "the full fetch closes the old session"
        );
        s.on_response(plan, 0, 10);
        assert_eq!((s.id(), s.next_epoch()), (10, 1));

        // The broker answers a full fetch with session id 0: no session.
        let mut s = FetchSession::new();
        let plan = s.plan(wanted(&[("a", 0)]));
        s.on_response(plan, 0, 0);
        let plan = s.plan(wanted(&[("a", 4)]));
        assert!(plan.is_full());
        assert_eq!(plan.partitions, vec![("a", at(4))]);
    }

    #[test]
    fn epochs_wrap_to_one_never_zero() {
        let mut s: FetchSession<&str> = FetchSession {
            id: 3,
            next_epoch: i32::MAX,
            sent: IndexMap::new(),
        };
        let plan = s.plan(wanted(&[("a", 0)]));
        assert_eq!(plan.epoch, i32::MAX);
        s.on_response(plan, 0, 3);
        assert_eq!(s.next_epoch(), 1);
    }
}
