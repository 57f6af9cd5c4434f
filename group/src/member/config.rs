//! The member's settings, named after the Java consumer's properties.

use std::time::Duration;

use crate::assignor::custom::{CustomAssignor, GroupAssignor};
use crate::assignor::{Assignor, RebalanceProtocol};

/// How a [`GroupMember`](super::GroupMember) joins and stays in its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberConfig {
    /// `group.id`.
    pub group_id: String,
    /// The topics to subscribe to.
    pub topics: Vec<String>,
    /// `partition.assignment.strategy`, in order of preference.
    pub assignors: Vec<Assignor>,
    /// An assignor of the application's: when set, it is the only one
    /// offered and `assignors` is ignored.
    pub custom_assignor: Option<CustomAssignor>,
    /// `group.instance.id`: makes the member static (KIP-345).
    pub instance_id: Option<String>,
    /// `session.timeout.ms` (default 45 s): how long the coordinator waits
    /// for a heartbeat before it removes the member.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (default 3 s).
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms` (default 5 min): sent as the rebalance timeout
    /// and enforced locally; a member not polled for this long loses its
    /// partitions and its generation, and rejoins on the next poll. A
    /// dynamic member sends LeaveGroup; a static one stops heartbeating and
    /// is expired by the coordinator after the session timeout. Below the
    /// session timeout it also shortens the [`Lease`](super::Lease): the
    /// coordinator waits no longer than this for a rejoin, so the lease
    /// lasts min(session, max.poll.interval) minus the margin.
    pub max_poll_interval: Duration,
    /// How long before the coordinator could expire the session the member
    /// declares its partitions lost (Weir's `weir.self.fence.margin.ms`,
    /// default 2 s, at most half the session timeout).
    pub self_fence_margin: Duration,
    /// `client.rack`, sent in the subscription (v3).
    pub rack: Option<String>,
}

impl MemberConfig {
    /// A dynamic member of `group_id` subscribed to `topics`, with Kafka's
    /// default timeouts and the cooperative-sticky assignor.
    pub fn new<I, S>(group_id: impl Into<String>, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            group_id: group_id.into(),
            topics: topics.into_iter().map(Into::into).collect(),
            assignors: vec![Assignor::CooperativeSticky],
            custom_assignor: None,
            instance_id: None,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
            max_poll_interval: Duration::from_secs(300),
            self_fence_margin: Duration::from_secs(2),
            rack: None,
        }
    }

    /// Sets `partition.assignment.strategy`.
    pub fn with_assignors(mut self, assignors: impl IntoIterator<Item = Assignor>) -> Self {
        self.assignors = assignors.into_iter().collect();
        self
    }

    /// Offers only `assignor`, the application's own (see
    /// [`GroupAssignor`]).
    pub fn with_custom_assignor(mut self, assignor: std::sync::Arc<dyn GroupAssignor>) -> Self {
        self.custom_assignor = Some(CustomAssignor(assignor));
        self
    }

    /// Sets `group.instance.id` (static membership).
    pub fn with_instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Sets `session.timeout.ms`.
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Sets `heartbeat.interval.ms`.
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// Sets `max.poll.interval.ms`.
    pub fn with_max_poll_interval(mut self, interval: Duration) -> Self {
        self.max_poll_interval = interval;
        self
    }

    /// Sets the self-fencing margin.
    pub fn with_self_fence_margin(mut self, margin: Duration) -> Self {
        self.self_fence_margin = margin;
        self
    }

    /// Sets `client.rack`.
    pub fn with_rack(mut self, rack: impl Into<String>) -> Self {
        self.rack = Some(rack.into());
        self
    }

    /// Cooperative only when every offered assignor is (as in Java: the
    /// group may pick any of them, and an eager one needs eager revocation).
    pub fn protocol(&self) -> RebalanceProtocol {
        if let Some(custom) = &self.custom_assignor {
            return custom.0.protocol();
        }
        if !self.assignors.is_empty()
            && self
                .assignors
                .iter()
                .all(|a| a.protocol() == RebalanceProtocol::Cooperative)
        {
            RebalanceProtocol::Cooperative
        } else {
            RebalanceProtocol::Eager
        }
    }

    /// The shorter of the two deadlines the coordinator keeps for a member
    /// it last heard from: the session timeout, and the rebalance timeout
    /// (`max.poll.interval.ms`), which bounds how long it waits for the
    /// JoinGroup once a rebalance starts (possibly right after the last
    /// heartbeat) and for the SyncGroup after the join.
    fn expiry(&self) -> Duration {
        self.session_timeout.min(self.max_poll_interval)
    }

    /// The margin actually used: never more than half of
    /// min(session, rebalance timeout), so a short timeout still leaves
    /// time to heartbeat.
    pub(crate) fn effective_margin(&self) -> Duration {
        self.self_fence_margin.min(self.expiry() / 2)
    }

    /// How long past a moment the coordinator knew the member alive (a
    /// heartbeat, JoinGroup or SyncGroup sent then, and answered) its
    /// partitions stay safe: min(session, rebalance timeout) - margin.
    pub(crate) fn lease_span(&self) -> Duration {
        self.expiry().saturating_sub(self.effective_margin())
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`GroupError::InvalidConfig`](crate::GroupError::InvalidConfig).
    pub fn validate(&self) -> crate::Result<()> {
        let invalid = |m: &str| Err(crate::GroupError::InvalidConfig(m.to_owned()));
        if self.group_id.is_empty() {
            return invalid("group.id must not be empty");
        }
        if self.assignors.is_empty() && self.custom_assignor.is_none() {
            return invalid("partition.assignment.strategy must name at least one assignor");
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.session_timeout {
            return invalid("heartbeat.interval.ms must be above 0 and below session.timeout.ms");
        }
        if self.session_timeout > std::time::Duration::from_millis(i32::MAX as u64)
            || self.max_poll_interval > std::time::Duration::from_millis(i32::MAX as u64)
        {
            return invalid("session.timeout.ms and max.poll.interval.ms must fit in an int32");
        }
        if self.instance_id.as_deref() == Some("") {
            return invalid("group.instance.id must not be empty");
        }
        Ok(())
    }
}
