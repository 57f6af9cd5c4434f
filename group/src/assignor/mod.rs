//! Partition assignors as pure functions: a [`GroupSubscription`] in, a
//! [`GroupAssignment`] out, no I/O and no clock, so the group leader's
//! decision can be tested, simulated and benchmarked on its own.
//!
//! - [`range`]: Java's `RangeAssignor`, per topic;
//! - [`round_robin`]: Java's `RoundRobinAssignor`;
//! - [`cooperative_sticky`]: KIP-429 incremental cooperative rebalancing with
//!   the stickiness and balance of Java's `AbstractStickyAssignor`;
//! - [`custom`]: the trait for an application's own assignor, which may
//!   query the cluster and exchange user data (the streams task assignor).

mod claims;
pub mod cooperative_sticky;
pub mod custom;
pub mod range;
pub mod round_robin;

use std::collections::{BTreeMap, BTreeSet};

use crate::consumer_protocol::{Assignment, NO_GENERATION, Subscription, TopicPartitions};

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// A topic partition.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

/// What the leader knows about one member when it assigns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberSubscription {
    /// `group.instance.id` of a static member. Range and round-robin order
    /// members by it, as Java does, so a restarted static member gets the
    /// same partitions back.
    pub instance_id: Option<String>,
    /// Subscribed topics.
    pub topics: BTreeSet<String>,
    /// Partitions the member says it owns (consumer protocol v1+).
    pub owned: Vec<TopicPartition>,
    /// Generation of `owned` (v2+), or [`NO_GENERATION`].
    pub generation: i32,
    /// The member's `client.rack` (v3+).
    pub rack: Option<String>,
}

impl MemberSubscription {
    /// A member subscribed to `topics` that owns nothing.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            instance_id: None,
            topics: topics.into_iter().map(Into::into).collect(),
            owned: Vec::new(),
            generation: NO_GENERATION,
            rack: None,
        }
    }

    /// The member's view as decoded from its JoinGroup metadata.
    ///
    /// Java consumers before 3.4 carry the generation only in the
    /// cooperative-sticky user data (one int32); it is used when the
    /// subscription has no generation field, so their stale claims are still
    /// told apart from fresh ones.
    pub fn from_wire(instance_id: Option<String>, subscription: &Subscription) -> Self {
        let generation = if subscription.generation_id == NO_GENERATION {
            subscription
                .user_data
                .as_deref()
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map_or(NO_GENERATION, i32::from_be_bytes)
        } else {
            subscription.generation_id
        };
        Self {
            instance_id,
            topics: subscription.topics.iter().cloned().collect(),
            owned: subscription
                .owned_partitions
                .iter()
                .flat_map(|tp| {
                    tp.partitions
                        .iter()
                        .map(|p| TopicPartition::new(tp.topic.clone(), *p))
                })
                .collect(),
            generation,
            rack: subscription.rack_id.clone(),
        }
    }
}

/// The user data Java's `CooperativeStickyAssignor` puts in a subscription:
/// the generation as one int32. Weir members send it too, so a leader
/// running a Java consumer older than 3.4 (which ignores the v2 generation
/// field) can still resolve conflicting claims.
pub fn cooperative_sticky_user_data(generation: i32) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(&generation.to_be_bytes())
}

/// The assignor's input: every member by member id, and the partition count
/// of every topic that exists. Subscribed topics missing from
/// `partitions_per_topic` get nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupSubscription {
    /// Members by member id.
    pub members: BTreeMap<String, MemberSubscription>,
    /// Partition count per topic.
    pub partitions_per_topic: BTreeMap<String, i32>,
}

/// The assignor's output: the partitions of every member (members that get
/// nothing are present with an empty set).
pub type GroupAssignment = BTreeMap<String, BTreeSet<TopicPartition>>;

/// Converts one member's partitions to the consumer-protocol wire shape.
pub fn to_wire_assignment(partitions: &BTreeSet<TopicPartition>) -> Assignment {
    let mut by_topic: Vec<TopicPartitions> = Vec::new();
    // The set is sorted by topic, so partitions of one topic are adjacent.
    for tp in partitions {
        match by_topic.last_mut() {
            Some(last) if last.topic == tp.topic => last.partitions.push(tp.partition),
            _ => by_topic.push(TopicPartitions {
                topic: tp.topic.clone(),
                partitions: vec![tp.partition],
            }),
        }
    }
    Assignment {
        assigned_partitions: by_topic,
        user_data: None,
    }
}

/// How members hand partitions over when the assignment changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceProtocol {
    /// Every member revokes everything before each rebalance.
    Eager,
    /// Members revoke only partitions that move (KIP-429); a moving partition
    /// is assigned to its new owner one rebalance later.
    Cooperative,
}

/// The assignors Weir ships, by the protocol name Java and librdkafka use in
/// JoinGroup, so Weir members can share a group with theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Assignor {
    /// `range`
    Range,
    /// `roundrobin`
    RoundRobin,
    /// `cooperative-sticky`
    CooperativeSticky,
}

impl Assignor {
    /// The protocol name sent in JoinGroup.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// The assignor with this protocol name, if Weir has it.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            "cooperative-sticky" => Some(Assignor::CooperativeSticky),
            _ => None,
        }
    }

    /// How members must hand partitions over under this assignor.
    pub fn protocol(self) -> RebalanceProtocol {
        match self {
            Assignor::Range | Assignor::RoundRobin => RebalanceProtocol::Eager,
            Assignor::CooperativeSticky => RebalanceProtocol::Cooperative,
        }
    }

    /// Runs the assignor.
    pub fn assign(self, group: &GroupSubscription) -> GroupAssignment {
        match self {
            Assignor::Range => range::assign(group),
            Assignor::RoundRobin => round_robin::assign(group),
            Assignor::CooperativeSticky => cooperative_sticky::assign(group),
        }
    }
}

/// Members in Java's `MemberInfo` order: static members first, by instance
/// id, then dynamic members by member id.
fn java_member_order(group: &GroupSubscription) -> Vec<&str> {
    let mut members: Vec<(&str, &MemberSubscription)> = group
        .members
        .iter()
        .map(|(id, m)| (id.as_str(), m))
        .collect();
    members.sort_by(
        |(a_id, a), (b_id, b)| match (&a.instance_id, &b.instance_id) {
            (Some(x), Some(y)) => x.cmp(y).then_with(|| a_id.cmp(b_id)),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a_id.cmp(b_id),
        },
    );
    members.into_iter().map(|(id, _)| id).collect()
}

fn empty_assignment(group: &GroupSubscription) -> GroupAssignment {
    group
        .members
        .keys()
        .map(|id| (id.clone(), BTreeSet::new()))
        .collect()
}
