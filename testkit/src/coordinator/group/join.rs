//! JoinGroup and the rebalance it drives (Kafka's `handleJoinGroup`,
//! `prepareRebalance`, `onCompleteJoin`), plus the group's timers.

use bytes::Bytes;
use tokio::time::Instant;
use tracing::debug;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use weir_protocol::kafka_protocol::messages::{
    JoinGroupRequest, JoinGroupResponse, ResponseKind, SyncGroupResponse,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::state::{Group, GroupState, Member, Parked};
use super::{Caller, GroupCoordinator, NEW_MEMBER_JOIN_TIMEOUT, millis};

/// What a JoinGroup carries, decoded once.
struct JoinArgs {
    member_id: String,
    instance_id: Option<String>,
    session_timeout: std::time::Duration,
    rebalance_timeout: std::time::Duration,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    parked: Parked,
    client_id: String,
    client_host: String,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// A JoinGroup error response, with the protocol name that version expects.
pub fn join_error(version: i16, code: i16, member_id: &str) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(code)
        .with_generation_id(-1)
        .with_member_id(s(member_id))
        .with_protocol_name(if version >= 7 {
            None
        } else {
            Some(StrBytes::default())
        })
}

/// The JoinGroup response of the current generation for `member_id`:
/// the leader gets every member's metadata (if `with_members`).
pub(super) fn join_result(
    group: &Group,
    version: i16,
    member_id: &str,
    leader: &str,
    with_members: bool,
    skip: bool,
) -> JoinGroupResponse {
    let members = if with_members {
        group
            .member_metadata()
            .into_iter()
            .map(|(id, instance, metadata)| {
                JoinGroupResponseMember::default()
                    .with_member_id(s(&id))
                    .with_group_instance_id(if version >= 5 {
                        instance.as_deref().map(s)
                    } else {
                        None
                    })
                    .with_metadata(metadata)
            })
            .collect()
    } else {
        Vec::new()
    };
    JoinGroupResponse::default()
        .with_generation_id(group.generation)
        .with_protocol_type(if version >= 7 {
            group.protocol_type.as_deref().map(s)
        } else {
            None
        })
        .with_protocol_name(Some(s(group.protocol_name.as_deref().unwrap_or_default())))
        .with_leader(s(leader))
        .with_member_id(s(member_id))
        .with_skip_assignment(skip && version >= 9)
        .with_members(members)
}

impl GroupCoordinator {
    /// Handles a JoinGroup. Returns the response, or `None` if the request is
    /// parked until the rebalance completes (its answer then comes through
    /// [`take_completed`](Self::take_completed)).
    pub fn join(
        &mut self,
        caller: &Caller,
        req: JoinGroupRequest,
        version: i16,
        now: Instant,
    ) -> Option<JoinGroupResponse> {
        let group_id = req.group_id.0.to_string();
        let session_timeout = millis(req.session_timeout_ms);
        let args = JoinArgs {
            member_id: req.member_id.to_string(),
            instance_id: if version >= 5 {
                req.group_instance_id.map(|i| i.to_string())
            } else {
                None
            },
            session_timeout,
            // v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout: if version == 0 {
                session_timeout
            } else {
                millis(req.rebalance_timeout_ms)
            },
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
            parked: Parked {
                request: caller.request,
                version,
            },
            client_id: caller.client_id.clone(),
            client_host: caller.client_host.clone(),
        };
        let member_id = args.member_id.clone();
        let fail = |code: ResponseError| Some(join_error(version, code.code(), &member_id));
        if group_id.is_empty() {
            return fail(ResponseError::InvalidGroupId);
        }
        if req.session_timeout_ms < 0
            || session_timeout < self.config.min_session_timeout
            || session_timeout > self.config.max_session_timeout
        {
            return fail(ResponseError::InvalidSessionTimeout);
        }
        if !self.groups.contains_key(&group_id) {
            // A known member id for a group that does not exist: the group
            // was deleted or moved, so the member must start over.
            if !args.member_id.is_empty() {
                return fail(ResponseError::UnknownMemberId);
            }
            self.groups.insert(group_id.clone(), Group::new(&group_id));
        }
        self.with_group(&group_id, |c, group| {
            if group.state == GroupState::Dead {
                return fail(ResponseError::CoordinatorNotAvailable);
            }
            if !group.supports(&args.protocol_type, &args.protocols) {
                return fail(ResponseError::InconsistentGroupProtocol);
            }
            let out = if args.member_id.is_empty() {
                c.join_new_member(group, args, version, now)
            } else {
                c.join_known_member(group, args, version, now)
            };
            if group.state == GroupState::PreparingRebalance {
                c.try_complete_join(group, now);
            }
            out
        })
        .flatten()
    }

    fn join_new_member(
        &mut self,
        group: &mut Group,
        args: JoinArgs,
        version: i16,
        now: Instant,
    ) -> Option<JoinGroupResponse> {
        let prefix = args
            .instance_id
            .clone()
            .unwrap_or_else(|| args.client_id.clone());
        let new_id = self.new_member_id(&prefix);
        if let Some(instance) = args.instance_id.clone() {
            if group.static_member(&instance).is_some() {
                return self.replace_static_member(group, &instance, &new_id, args, version, now);
            }
            self.add_member_and_rebalance(group, &new_id, args, now);
            return None;
        }
        if version >= 4 {
            // KIP-394: hand out the id first; the member joins again with it.
            // Until then it counts as pending: a rebalance waits for it, and
            // it expires after one session timeout.
            let deadline = now + args.session_timeout;
            group.pending_members.insert(new_id.clone(), deadline);
            self.wake(deadline, &group.id);
            debug!(group = %group.id, member = %new_id, "join: member id required");
            return Some(join_error(
                version,
                ResponseError::MemberIdRequired.code(),
                &new_id,
            ));
        }
        self.add_member_and_rebalance(group, &new_id, args, now);
        None
    }

    fn join_known_member(
        &mut self,
        group: &mut Group,
        args: JoinArgs,
        version: i16,
        now: Instant,
    ) -> Option<JoinGroupResponse> {
        let member_id = args.member_id.clone();
        let fail = |code: ResponseError| Some(join_error(version, code.code(), &member_id));
        if group.pending_members.contains_key(&member_id) {
            if args.instance_id.is_some() {
                // Static members never go through MEMBER_ID_REQUIRED.
                return fail(ResponseError::UnknownMemberId);
            }
            self.add_member_and_rebalance(group, &member_id, args, now);
            return None;
        }
        if let Some(e) = group.validate_member(args.instance_id.as_deref(), &member_id) {
            return fail(e);
        }
        match group.state {
            GroupState::PreparingRebalance => {
                self.update_member_and_rebalance(group, args, now);
                None
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                let is_leader = group.leader.as_deref() == Some(member_id.as_str());
                let same = group
                    .members
                    .get(&member_id)
                    .is_some_and(|m| m.same_protocols(&args.protocols));
                let rejoin = if group.state == GroupState::Stable {
                    is_leader || !same
                } else {
                    !same
                };
                if rejoin {
                    // The leader's JoinGroup in Stable forces a rebalance: it is
                    // how a consumer reacts to metadata changes that do not
                    // change its subscription.
                    self.update_member_and_rebalance(group, args, now);
                    return None;
                }
                if let Some(m) = group.members.get_mut(&member_id) {
                    m.last_heartbeat = now;
                }
                // Same metadata: the member probably lost the JoinGroup
                // response, so it gets the current generation again.
                let leader = group.leader.clone().unwrap_or_default();
                let with_members = group.state == GroupState::CompletingRebalance && is_leader;
                Some(join_result(
                    group,
                    version,
                    &member_id,
                    &leader,
                    with_members,
                    false,
                ))
            }
            GroupState::Empty | GroupState::Dead => fail(ResponseError::UnknownMemberId),
        }
    }

    /// KIP-345: a static member rejoins with an empty member id. It gets a
    /// new id, its old id is fenced, and a Stable group whose protocol choice
    /// does not change does not rebalance.
    fn replace_static_member(
        &mut self,
        group: &mut Group,
        instance: &str,
        new_id: &str,
        args: JoinArgs,
        version: i16,
        now: Instant,
    ) -> Option<JoinGroupResponse> {
        let old_leader = group.leader.clone().unwrap_or_default();
        let old = group.replace_static(instance, new_id)?;
        debug!(group = %group.id, instance, old = %old.id, new = new_id, state = group.state.name(), "static member replaced");
        if let Some(p) = old.awaiting_join {
            self.complete(
                p.request,
                ResponseKind::JoinGroup(join_error(
                    p.version,
                    ResponseError::FencedInstanceId.code(),
                    &old.id,
                )),
            );
        }
        if let Some(p) = old.awaiting_sync {
            self.complete(
                p.request,
                ResponseKind::SyncGroup(sync_error(ResponseError::FencedInstanceId.code())),
            );
        }
        let parked = args.parked;
        if let Some(m) = group.members.get_mut(new_id) {
            m.protocols = args.protocols;
            m.session_timeout = args.session_timeout;
            m.rebalance_timeout = args.rebalance_timeout;
            m.client_id = args.client_id;
            m.client_host = args.client_host;
            m.last_heartbeat = now;
        }
        match group.state {
            GroupState::Stable if group.select_protocol() == group.protocol_name => {
                let was_leader = old.id == old_leader;
                if version >= 9 && was_leader {
                    // KIP-814: the new leader learns it leads but must not
                    // compute a new assignment.
                    return Some(join_result(group, version, new_id, new_id, true, true));
                }
                // Older versions are told the old leader id, so the new member
                // does not believe it leads and assign a Stable group.
                Some(join_result(
                    group,
                    version,
                    new_id,
                    &old_leader,
                    false,
                    false,
                ))
            }
            GroupState::Stable
            | GroupState::CompletingRebalance
            | GroupState::PreparingRebalance => {
                // In CompletingRebalance the leader may already be assigning
                // the old id, so the group must rebalance again.
                if let Some(m) = group.members.get_mut(new_id) {
                    m.awaiting_join = Some(parked);
                }
                self.maybe_prepare_rebalance(group, now);
                None
            }
            GroupState::Empty | GroupState::Dead => Some(join_error(
                version,
                ResponseError::UnknownMemberId.code(),
                new_id,
            )),
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        group: &mut Group,
        member_id: &str,
        args: JoinArgs,
        now: Instant,
    ) {
        let member = Member {
            id: member_id.to_owned(),
            instance_id: args.instance_id,
            client_id: args.client_id,
            client_host: args.client_host,
            session_timeout: args.session_timeout,
            rebalance_timeout: args.rebalance_timeout,
            protocol_type: args.protocol_type,
            protocols: args.protocols,
            assignment: Bytes::new(),
            awaiting_join: Some(args.parked),
            awaiting_sync: None,
            is_new: true,
            last_heartbeat: now,
        };
        debug!(group = %group.id, member = member_id, "member added");
        group.add(member);
        group.new_member_added = true;
        self.wake(now + NEW_MEMBER_JOIN_TIMEOUT, &group.id);
        self.maybe_prepare_rebalance(group, now);
    }

    fn update_member_and_rebalance(&mut self, group: &mut Group, args: JoinArgs, now: Instant) {
        if let Some(m) = group.members.get_mut(&args.member_id) {
            m.protocols = args.protocols;
            m.session_timeout = args.session_timeout;
            m.rebalance_timeout = args.rebalance_timeout;
            m.client_id = args.client_id;
            m.awaiting_join = Some(args.parked);
            m.last_heartbeat = now;
        }
        self.maybe_prepare_rebalance(group, now);
    }
}

/// A SyncGroup error response.
pub fn sync_error(code: i16) -> SyncGroupResponse {
    SyncGroupResponse::default().with_error_code(code)
}
