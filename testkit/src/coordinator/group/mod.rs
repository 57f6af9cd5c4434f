//! The classic consumer group coordinator (Kafka's `GroupCoordinator`).
//!
//! The rules follow Kafka's `GroupCoordinator.scala` and KIP-345 (static
//! membership) and KIP-394 (`MEMBER_ID_REQUIRED`):
//!
//! - [`join`](GroupCoordinator::join) parks JoinGroups until every member
//!   has rejoined or the rebalance timeout (the largest of the members')
//!   expires; members that did not rejoin are dropped, except static ones.
//! - [`sync`](GroupCoordinator::sync) parks SyncGroups until the leader
//!   sends the assignment.
//! - Heartbeats, leaves, session expiry and the pending-sync timeout follow
//!   Kafka's error codes and state transitions.
//! - Offsets: see [`offsets`].
//!
//! Every method takes the time from the caller and does no I/O. Parked
//! requests are answered later through [`GroupCoordinator::take_completed`],
//! and the deadlines the coordinator needs are announced through
//! [`GroupCoordinator::take_wakeups`]; the caller calls
//! [`GroupCoordinator::on_timer`] at (or after) each.

mod admin;
mod commits;
mod join;
mod membership;
pub mod offsets;
mod rebalance;
pub mod state;

#[cfg(test)]
mod tests;

use std::time::Duration;

use indexmap::IndexMap;
use tokio::time::Instant;
use weir_protocol::kafka_protocol::messages::ResponseKind;

use crate::coordinator::RequestId;
pub use commits::{CommitMember, FetchedOffset, OffsetToCommit};
pub use join::{join_error, sync_error};
use state::Group;

/// Kafka's `NewMemberJoinTimeoutMs`: how long a member that joined during a
/// rebalance may wait in it without ever completing a join.
pub const NEW_MEMBER_JOIN_TIMEOUT: Duration = Duration::from_secs(300);

/// The coordinator's settings (Kafka's `group.*` broker configs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms` (Kafka: 6 s).
    pub min_session_timeout: Duration,
    /// `group.max.session.timeout.ms` (Kafka: 30 min).
    pub max_session_timeout: Duration,
    /// `group.initial.rebalance.delay.ms`: the first rebalance of an empty
    /// group waits this long for more members (Kafka: 3 s; the testkit: 0).
    pub initial_rebalance_delay: Duration,
    /// `offset.metadata.max.bytes` (Kafka: 4096).
    pub offset_metadata_max_bytes: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            min_session_timeout: Duration::from_secs(6),
            max_session_timeout: Duration::from_secs(1800),
            initial_rebalance_delay: Duration::ZERO,
            offset_metadata_max_bytes: 4096,
        }
    }
}

/// Who sent a request: what the coordinator needs besides the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The request, to answer it later if it is parked.
    pub request: RequestId,
    /// The header's client id.
    pub client_id: String,
    /// The client's host, as DescribeGroups reports it.
    pub client_host: String,
}

impl Caller {
    /// A caller with the loopback host.
    pub fn new(request: RequestId, client_id: impl Into<String>) -> Self {
        Self {
            request,
            client_id: client_id.into(),
            client_host: "/127.0.0.1".to_owned(),
        }
    }
}

/// All consumer groups of the cluster, with their members and committed
/// offsets.
#[derive(Debug, Default)]
pub struct GroupCoordinator {
    /// Settings; may be changed between requests.
    pub config: GroupConfig,
    groups: IndexMap<String, Group>,
    completed: Vec<(RequestId, ResponseKind)>,
    wakeups: Vec<(Instant, String)>,
    next_member: u64,
}

impl GroupCoordinator {
    /// An empty coordinator with no groups.
    pub fn new() -> Self {
        Self::default()
    }

    /// A coordinator with these settings.
    pub fn with_config(config: GroupConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// A group, if it exists.
    pub fn group(&self, id: &str) -> Option<&Group> {
        self.groups.get(id)
    }

    /// Every group, in creation order.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }

    /// Responses to parked requests that are now complete. The caller sends
    /// each one; a request whose connection is gone is simply skipped.
    pub fn take_completed(&mut self) -> Vec<(RequestId, ResponseKind)> {
        std::mem::take(&mut self.completed)
    }

    /// Deadlines requested since the last call: at each, call
    /// [`on_timer`](Self::on_timer) with the group id. Spurious or repeated
    /// calls are harmless; the coordinator re-checks the group's deadlines.
    pub fn take_wakeups(&mut self) -> Vec<(Instant, String)> {
        std::mem::take(&mut self.wakeups)
    }

    /// Handles the deadlines of `group_id` that are due at `now`: session
    /// expiry, KIP-394 pending members, the rebalance (join) timeout, the
    /// initial rebalance delay and the pending-sync timeout.
    pub fn on_timer(&mut self, group_id: &str, now: Instant) {
        self.with_group(group_id, |c, g| c.expire(g, now));
    }

    /// Forgets the committed offsets of a deleted topic in every group.
    pub fn forget_topic(&mut self, topic: &str) {
        for g in self.groups.values_mut() {
            g.offsets.forget_topic(topic);
        }
    }

    fn wake(&mut self, at: Instant, group: &str) {
        self.wakeups.push((at, group.to_owned()));
    }

    fn complete(&mut self, request: RequestId, response: ResponseKind) {
        self.completed.push((request, response));
    }

    /// A fresh member id, `prefix-<unique suffix>` like Kafka's
    /// `clientId-UUID`. The suffix is a counter, so runs are reproducible.
    fn new_member_id(&mut self, prefix: &str) -> String {
        self.next_member += 1;
        format!(
            "{prefix}-{:08x}-0000-4000-8000-{:012x}",
            self.next_member, self.next_member
        )
    }

    /// Runs `f` on a group taken out of the map, so that `f` can also use
    /// `self` (to answer parked requests and request wakeups); puts it back
    /// at the same position.
    fn with_group<T>(&mut self, id: &str, f: impl FnOnce(&mut Self, &mut Group) -> T) -> Option<T> {
        let (index, key, mut group) = self.groups.shift_remove_full(id)?;
        let out = f(self, &mut group);
        self.groups.shift_insert(index, key, group);
        Some(out)
    }
}

/// Converts a timeout in milliseconds from the wire; negative means zero.
fn millis(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
