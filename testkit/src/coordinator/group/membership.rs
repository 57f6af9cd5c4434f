//! SyncGroup, Heartbeat and LeaveGroup (Kafka's `handleSyncGroup`,
//! `handleHeartbeat`, `handleLeaveGroup`).

use std::collections::HashMap;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::debug;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::leave_group_response::MemberResponse;
use weir_protocol::kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, LeaveGroupRequest, LeaveGroupResponse, ResponseKind,
    SyncGroupRequest, SyncGroupResponse,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::join::sync_error;
use super::state::{Group, GroupState, Parked};
use super::{Caller, GroupCoordinator};

fn sync_ok(group: &Group, assignment: Bytes) -> SyncGroupResponse {
    SyncGroupResponse::default()
        .with_protocol_type(
            group
                .protocol_type
                .as_deref()
                .map(|s| StrBytes::from_string(s.to_owned())),
        )
        .with_protocol_name(
            group
                .protocol_name
                .as_deref()
                .map(|s| StrBytes::from_string(s.to_owned())),
        )
        .with_assignment(assignment)
}

impl GroupCoordinator {
    /// Handles a SyncGroup. Returns the response, or `None` if it is parked
    /// until the leader's SyncGroup brings the assignment.
    pub fn sync(
        &mut self,
        caller: &Caller,
        req: SyncGroupRequest,
        version: i16,
        now: Instant,
    ) -> Option<SyncGroupResponse> {
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        let instance_id = if version >= 3 {
            req.group_instance_id.as_ref().map(|i| i.to_string())
        } else {
            None
        };
        let fail = |code: ResponseError| Some(sync_error(code.code()));
        self.with_group(&group_id, |c, group| {
            if group.state == GroupState::Dead {
                return fail(ResponseError::CoordinatorNotAvailable);
            }
            if let Some(e) = group.validate_member(instance_id.as_deref(), &member_id) {
                return fail(e);
            }
            if req.generation_id != group.generation {
                return fail(ResponseError::IllegalGeneration);
            }
            let type_differs = req.protocol_type.as_ref().is_some_and(|t| group.protocol_type.as_deref() != Some(t.as_str()));
            let name_differs = req.protocol_name.as_ref().is_some_and(|n| group.protocol_name.as_deref() != Some(n.as_str()));
            if version >= 5 && (type_differs || name_differs) {
                return fail(ResponseError::InconsistentGroupProtocol);
            }
            match group.state {
                GroupState::Empty | GroupState::Dead => fail(ResponseError::UnknownMemberId),
                GroupState::PreparingRebalance => fail(ResponseError::RebalanceInProgress),
                GroupState::CompletingRebalance => {
                    group.pending_sync.remove(&member_id);
                    if group.pending_sync.is_empty() {
                        group.sync_deadline = None;
                    }
                    let is_leader = group.leader.as_deref() == Some(member_id.as_str());
                    if let Some(m) = group.members.get_mut(&member_id) {
                        // The leader is answered below, with everyone else.
                        m.awaiting_sync = (!is_leader).then_some(Parked { request: caller.request, version });
                        m.last_heartbeat = now;
                    }
                    if is_leader {
                        let mut given: HashMap<String, Bytes> = req
                            .assignments
                            .into_iter()
                            .map(|a| (a.member_id.to_string(), a.assignment))
                            .collect();
                        debug!(group = %group.id, generation = group.generation, "leader sent the assignment");
                        for m in group.members.values_mut() {
                            m.assignment = given.remove(&m.id).unwrap_or_default();
                        }
                        group.state = GroupState::Stable;
                        c.propagate_assignment(group, now);
                        let own = group.members.get(&member_id).map(|m| m.assignment.clone());
                        return Some(sync_ok(group, own.unwrap_or_default()));
                    }
                    None
                }
                GroupState::Stable => {
                    group.pending_sync.remove(&member_id);
                    let assignment = group.members.get_mut(&member_id).map(|m| {
                        m.last_heartbeat = now;
                        m.assignment.clone()
                    });
                    Some(sync_ok(group, assignment.unwrap_or_default()))
                }
            }
        })
        .unwrap_or_else(|| fail(ResponseError::UnknownMemberId))
    }

    fn propagate_assignment(&mut self, group: &mut Group, now: Instant) {
        let parked: Vec<(Parked, Bytes, std::time::Duration)> = group
            .members
            .values_mut()
            .filter_map(|m| {
                let p = m.awaiting_sync.take()?;
                m.last_heartbeat = now;
                Some((p, m.assignment.clone(), m.session_timeout))
            })
            .collect();
        for (p, assignment, session) in parked {
            self.complete(
                p.request,
                ResponseKind::SyncGroup(sync_ok(group, assignment)),
            );
            self.wake(now + session, &group.id);
        }
    }

    /// Handles a Heartbeat.
    pub fn heartbeat(
        &mut self,
        req: HeartbeatRequest,
        version: i16,
        now: Instant,
    ) -> HeartbeatResponse {
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        let instance_id = if version >= 3 {
            req.group_instance_id.as_ref().map(|i| i.to_string())
        } else {
            None
        };
        let code = self
            .with_group(&group_id, |c, group| {
                if group.state == GroupState::Dead {
                    return ResponseError::CoordinatorNotAvailable.code();
                }
                if let Some(e) = group.validate_member(instance_id.as_deref(), &member_id) {
                    return e.code();
                }
                if req.generation_id != group.generation {
                    return ResponseError::IllegalGeneration.code();
                }
                let code = match group.state {
                    GroupState::Empty | GroupState::Dead => {
                        return ResponseError::UnknownMemberId.code();
                    }
                    // A member may heartbeat between its JoinGroup and SyncGroup
                    // responses; that is a normal heartbeat.
                    GroupState::CompletingRebalance | GroupState::Stable => 0,
                    GroupState::PreparingRebalance => ResponseError::RebalanceInProgress.code(),
                };
                if let Some(m) = group.members.get_mut(&member_id) {
                    m.last_heartbeat = now;
                    let at = now + m.session_timeout;
                    c.wake(at, &group.id);
                }
                code
            })
            .unwrap_or(ResponseError::UnknownMemberId.code());
        HeartbeatResponse::default().with_error_code(code)
    }

    /// Handles a LeaveGroup: one member (v0–2) or a batch of members by
    /// member id or instance id (v3+, KIP-345).
    pub fn leave(
        &mut self,
        req: LeaveGroupRequest,
        version: i16,
        now: Instant,
    ) -> LeaveGroupResponse {
        let group_id = req.group_id.0.to_string();
        let leaving: Vec<(String, Option<String>)> = if version >= 3 {
            req.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|i| i.to_string()),
                    )
                })
                .collect()
        } else {
            vec![(req.member_id.to_string(), None)]
        };
        let results: Result<Vec<i16>, i16> = self
            .with_group(&group_id, |c, group| {
                if group.state == GroupState::Dead {
                    return Err(ResponseError::CoordinatorNotAvailable.code());
                }
                Ok(leaving
                    .iter()
                    .map(|(member_id, instance_id)| {
                        c.leave_one(group, member_id, instance_id.as_deref(), now)
                    })
                    .collect())
            })
            .unwrap_or_else(|| Ok(vec![ResponseError::UnknownMemberId.code(); leaving.len()]));
        match results {
            Err(code) => LeaveGroupResponse::default().with_error_code(code),
            Ok(codes) if version >= 3 => LeaveGroupResponse::default().with_members(
                leaving
                    .into_iter()
                    .zip(codes)
                    .map(|((member_id, instance_id), code)| {
                        MemberResponse::default()
                            .with_member_id(StrBytes::from_string(member_id))
                            .with_group_instance_id(instance_id.map(StrBytes::from_string))
                            .with_error_code(code)
                    })
                    .collect(),
            ),
            Ok(codes) => {
                LeaveGroupResponse::default().with_error_code(codes.first().copied().unwrap_or(0))
            }
        }
    }

    fn leave_one(
        &mut self,
        group: &mut Group,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
    ) -> i16 {
        let resolved = match instance_id {
            Some(instance) => match group.static_member(instance) {
                None => return ResponseError::UnknownMemberId.code(),
                // An instance id with a member id that is not its current
                // one is a fenced zombie; an empty member id means "whoever
                // holds this instance id" (the admin client's removal).
                Some(current) if !member_id.is_empty() && current != member_id => {
                    return ResponseError::FencedInstanceId.code();
                }
                Some(current) => current.to_owned(),
            },
            None => member_id.to_owned(),
        };
        if group.pending_members.remove(&resolved).is_some() {
            self.try_complete_join(group, now);
            return 0;
        }
        if !group.has(&resolved) {
            return ResponseError::UnknownMemberId.code();
        }
        debug!(group = %group.id, member = %resolved, "member left");
        self.remove_member_and_update(group, &resolved, now);
        0
    }
}
