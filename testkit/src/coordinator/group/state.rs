//! One classic group: its state, members and generation (Kafka's
//! `GroupMetadata` and `MemberMetadata`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use indexmap::IndexMap;
use tokio::time::Instant;
use weir_protocol::kafka_protocol::ResponseError;

use super::offsets::GroupOffsets;
use crate::coordinator::RequestId;

/// The states of a classic group, named as DescribeGroups and ListGroups
/// report them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members; committed offsets may remain.
    Empty,
    /// Waiting for every member to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment in SyncGroup.
    CompletingRebalance,
    /// Assigned; members heartbeat.
    Stable,
    /// Deleted, or being unloaded.
    Dead,
}

impl GroupState {
    /// The name Kafka reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::PreparingRebalance => "PreparingRebalance",
            Self::CompletingRebalance => "CompletingRebalance",
            Self::Stable => "Stable",
            Self::Dead => "Dead",
        }
    }

    /// A rebalance can start from these states (Kafka's `canRebalance`).
    pub fn can_rebalance(self) -> bool {
        matches!(self, Self::Stable | Self::CompletingRebalance | Self::Empty)
    }
}

/// A request parked until the group answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parked {
    /// The request to answer.
    pub request: RequestId,
    /// The version it was sent at (the answer's content depends on it).
    pub version: i16,
}

/// One member.
#[derive(Debug, Clone)]
pub struct Member {
    /// The id the coordinator gave it.
    pub id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// The client id of its last JoinGroup.
    pub client_id: String,
    /// The client host reported by DescribeGroups.
    pub client_host: String,
    /// Its `session.timeout.ms`.
    pub session_timeout: Duration,
    /// Its rebalance timeout (`max.poll.interval.ms`).
    pub rebalance_timeout: Duration,
    /// The protocol type it joined with ("consumer").
    pub protocol_type: String,
    /// Its protocols (assignor name, subscription), in preference order.
    pub protocols: Vec<(String, Bytes)>,
    /// Its assignment of the current generation.
    pub assignment: Bytes,
    /// Its JoinGroup waiting for the rebalance to complete.
    pub awaiting_join: Option<Parked>,
    /// Its SyncGroup waiting for the leader's assignment.
    pub awaiting_sync: Option<Parked>,
    /// Joined during this rebalance and never completed a join: Kafka gives
    /// such members `NewMemberJoinTimeoutMs` (5 minutes) to stay in a
    /// rebalance without heartbeats, instead of keeping them forever.
    pub is_new: bool,
    /// When it last heartbeat (or joined, synced, committed).
    pub last_heartbeat: Instant,
}

impl Member {
    /// The metadata of one of its protocols.
    pub fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m)
    }

    /// Whether it joins with the same protocols as before (Kafka's `matches`).
    pub fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

/// One group.
#[derive(Debug, Clone)]
pub struct Group {
    /// The group id.
    pub id: String,
    /// The current state.
    pub state: GroupState,
    /// The generation: bumped each time a rebalance completes.
    pub generation: i32,
    /// The members' protocol type, once a member joined.
    pub protocol_type: Option<String>,
    /// The protocol chosen for the current generation.
    pub protocol_name: Option<String>,
    /// The leader's member id.
    pub leader: Option<String>,
    /// Members by id, in join order.
    pub members: IndexMap<String, Member>,
    /// `group.instance.id` → member id of every static member.
    pub static_members: HashMap<String, String>,
    /// KIP-394: member ids handed out with `MEMBER_ID_REQUIRED`, and when
    /// they expire if the member never joins with them.
    pub pending_members: HashMap<String, Instant>,
    /// When the current PreparingRebalance gives up on members that have not
    /// rejoined.
    pub join_deadline: Option<Instant>,
    /// The initial rebalance delay still left to extend by, while the first
    /// rebalance of an empty group waits for more members.
    pub initial_delay_left: Option<Duration>,
    /// A member joined since the initial delay last started or extended.
    pub new_member_added: bool,
    /// Members that must send SyncGroup before `sync_deadline`, after a join
    /// completed (Kafka 3.2's pending-sync timeout).
    pub pending_sync: BTreeSet<String>,
    /// Deadline for `pending_sync`.
    pub sync_deadline: Option<Instant>,
    /// Committed and pending (transactional) offsets.
    pub offsets: GroupOffsets,
}

impl Group {
    /// A new group in `Empty`.
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            join_deadline: None,
            initial_delay_left: None,
            new_member_added: false,
            pending_sync: BTreeSet::new(),
            sync_deadline: None,
            offsets: GroupOffsets::default(),
        }
    }

    /// Whether `id` is a member.
    pub fn has(&self, id: &str) -> bool {
        self.members.contains_key(id)
    }

    /// The member id a static instance currently maps to.
    pub fn static_member(&self, instance_id: &str) -> Option<&str> {
        self.static_members.get(instance_id).map(String::as_str)
    }

    /// Kafka's `validateCurrentMember`: an instance id must map to exactly
    /// this member (`FENCED_INSTANCE_ID` if it maps to another,
    /// `UNKNOWN_MEMBER_ID` if to none), and the member must exist.
    pub fn validate_member(
        &self,
        instance_id: Option<&str>,
        member_id: &str,
    ) -> Option<ResponseError> {
        if let Some(instance) = instance_id {
            return match self.static_member(instance) {
                Some(current) if current != member_id => Some(ResponseError::FencedInstanceId),
                Some(_) => None,
                None => Some(ResponseError::UnknownMemberId),
            };
        }
        (!self.has(member_id)).then_some(ResponseError::UnknownMemberId)
    }

    /// The largest rebalance timeout of the members: how long a rebalance
    /// waits for everyone to rejoin.
    pub fn rebalance_timeout(&self) -> Duration {
        self.members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default()
    }

    /// Whether every member has rejoined and no KIP-394 pending member is
    /// still expected (Kafka's `hasAllMembersJoined`).
    pub fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    /// Whether a new member's protocols fit the group (Kafka's
    /// `supportsProtocols`): same protocol type, and one protocol every
    /// member supports.
    pub fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|(name, _)| self.members.values().all(|m| m.metadata(name).is_some()))
    }

    /// The protocol for the next generation: among the protocols every member
    /// supports, the one most members prefer (Kafka's `selectProtocol`); ties
    /// go to the earlier member's preference, so the choice is deterministic.
    pub fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| self.members.values().all(|m| m.metadata(n).is_some()))
            .collect();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((vote, _)) = m
                .protocols
                .iter()
                .find(|(n, _)| candidates.contains(&n.as_str()))
            {
                *votes.entry(vote.as_str()).or_default() += 1;
            }
        }
        let best = votes.values().copied().max()?;
        candidates
            .into_iter()
            .find(|c| votes.get(c) == Some(&best))
            .map(str::to_owned)
    }

    /// Adds a member; the first member fixes the protocol type and becomes
    /// leader.
    pub fn add(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member.id.clone());
        }
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), member.id.clone());
        }
        self.pending_members.remove(&member.id);
        self.members.insert(member.id.clone(), member);
    }

    /// Removes a member; if it led, the next member in join order leads.
    /// Returns it so the caller can answer its parked requests.
    pub fn remove(&mut self, id: &str) -> Option<Member> {
        let member = self.members.shift_remove(id)?;
        if let Some(instance) = &member.instance_id
            && self.static_members.get(instance).is_some_and(|m| m == id)
        {
            self.static_members.remove(instance);
        }
        self.pending_sync.remove(id);
        if self.leader.as_deref() == Some(id) {
            self.leader = self.members.keys().next().cloned();
        }
        if self.members.is_empty() {
            self.protocol_type = None;
        }
        Some(member)
    }

    /// Gives a static member's slot a new member id (KIP-345): the new id
    /// inherits everything, the old one is fenced. Returns the old member
    /// (with its parked requests) so the caller can fence them.
    pub fn replace_static(&mut self, instance_id: &str, new_id: &str) -> Option<Member> {
        let old_id = self.static_members.get(instance_id)?.clone();
        let index = self.members.get_index_of(&old_id)?;
        let old = self.members.get_index(index).map(|(_, m)| m.clone())?;
        let mut renewed = old.clone();
        renewed.id = new_id.to_owned();
        renewed.awaiting_join = None;
        renewed.awaiting_sync = None;
        self.members.shift_remove_index(index);
        self.members.shift_insert(index, new_id.to_owned(), renewed);
        self.static_members
            .insert(instance_id.to_owned(), new_id.to_owned());
        if self.leader.as_deref() == Some(old_id.as_str()) {
            self.leader = Some(new_id.to_owned());
        }
        if self.pending_sync.remove(&old_id) {
            self.pending_sync.insert(new_id.to_owned());
        }
        Some(old)
    }

    /// Members as the leader's JoinGroup response lists them: id, instance id
    /// and their metadata for the chosen protocol.
    pub fn member_metadata(&self) -> Vec<(String, Option<String>, Bytes)> {
        let protocol = self.protocol_name.as_deref().unwrap_or_default();
        self.members
            .values()
            .map(|m| {
                (
                    m.id.clone(),
                    m.instance_id.clone(),
                    m.metadata(protocol).cloned().unwrap_or_default(),
                )
            })
            .collect()
    }
}
