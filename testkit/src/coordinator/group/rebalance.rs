//! The rebalance itself (Kafka's `prepareRebalance`, `onCompleteJoin`,
//! `removeMemberAndUpdateGroup`) and the group's deadlines: session expiry,
//! KIP-394 pending members, the rebalance and initial-delay timeouts and the
//! pending-sync timeout.

use bytes::Bytes;
use tokio::time::Instant;
use tracing::debug;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::ResponseKind;

use super::join::{join_error, join_result, sync_error};
use super::state::{Group, GroupState, Member};
use super::{GroupCoordinator, NEW_MEMBER_JOIN_TIMEOUT};

impl GroupCoordinator {
    pub(super) fn maybe_prepare_rebalance(&mut self, group: &mut Group, now: Instant) {
        if group.state.can_rebalance() {
            self.prepare_rebalance(group, now);
        }
    }

    /// Enters PreparingRebalance. Parked SyncGroups of an interrupted
    /// CompletingRebalance get `REBALANCE_IN_PROGRESS`.
    pub(super) fn prepare_rebalance(&mut self, group: &mut Group, now: Instant) {
        if group.state == GroupState::CompletingRebalance {
            for m in group.members.values_mut() {
                m.assignment = Bytes::new();
                if let Some(p) = m.awaiting_sync.take() {
                    self.complete(
                        p.request,
                        ResponseKind::SyncGroup(sync_error(
                            ResponseError::RebalanceInProgress.code(),
                        )),
                    );
                }
            }
        }
        group.pending_sync.clear();
        group.sync_deadline = None;
        let deadline = if group.state == GroupState::Empty {
            // The first rebalance waits for more members (Kafka's
            // `InitialDelayedJoin`), at most the rebalance timeout in all.
            let delay = self.config.initial_rebalance_delay;
            group.initial_delay_left = Some(group.rebalance_timeout().saturating_sub(delay));
            group.new_member_added = false;
            now + delay
        } else {
            group.initial_delay_left = None;
            now + group.rebalance_timeout()
        };
        debug!(group = %group.id, from = group.state.name(), generation = group.generation, "preparing rebalance");
        group.state = GroupState::PreparingRebalance;
        group.join_deadline = Some(deadline);
        self.wake(deadline, &group.id);
    }

    /// Completes the rebalance if everyone has rejoined (not during the
    /// initial delay, which only its timer ends).
    pub(super) fn try_complete_join(&mut self, group: &mut Group, now: Instant) {
        if group.state == GroupState::PreparingRebalance
            && group.initial_delay_left.is_none()
            && group.all_members_joined()
        {
            self.complete_join(group, now);
        }
    }

    /// Kafka's `onCompleteJoin`: drops dynamic members that did not rejoin,
    /// starts the next generation and answers every parked JoinGroup.
    pub(super) fn complete_join(&mut self, group: &mut Group, now: Instant) {
        let missing: Vec<String> = group
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in missing {
            debug!(group = %group.id, member = %id, "member did not rejoin in time; removed");
            if let Some(m) = group.remove(&id) {
                self.answer_removed(&m);
            }
        }
        group.join_deadline = None;
        group.initial_delay_left = None;
        if !group.members.is_empty() && !elect_joined_leader(group) {
            // Only static members that have not rejoined are left: wait for
            // them to rejoin or for their sessions to expire.
            let deadline = now + group.rebalance_timeout();
            group.join_deadline = Some(deadline);
            self.wake(deadline, &group.id);
            return;
        }
        group.generation += 1;
        if group.members.is_empty() {
            group.protocol_name = None;
            group.leader = None;
            group.state = GroupState::Empty;
            debug!(group = %group.id, generation = group.generation, "rebalance completed with no members");
            return;
        }
        group.protocol_name = group.select_protocol();
        group.state = GroupState::CompletingRebalance;
        let leader = group.leader.clone().unwrap_or_default();
        debug!(group = %group.id, generation = group.generation, %leader, members = group.members.len(), "rebalance completed");
        let ids: Vec<String> = group.members.keys().cloned().collect();
        for id in &ids {
            let parked = group.members.get_mut(id).and_then(|m| {
                m.is_new = false;
                m.last_heartbeat = now;
                m.awaiting_join.take()
            });
            if let Some(p) = parked {
                let body = join_result(group, p.version, id, &leader, *id == leader, false);
                self.complete(p.request, ResponseKind::JoinGroup(body));
            }
            if let Some(m) = group.members.get(id) {
                self.wake(now + m.session_timeout, &group.id);
            }
        }
        // Kafka 3.2+: members that do not sync within the rebalance timeout
        // are removed, so one silent member cannot stall the group forever.
        group.pending_sync = ids.into_iter().collect();
        let deadline = now + group.rebalance_timeout();
        group.sync_deadline = Some(deadline);
        self.wake(deadline, &group.id);
    }

    /// Answers the parked requests of a member that was removed.
    pub(super) fn answer_removed(&mut self, m: &Member) {
        if let Some(p) = m.awaiting_join {
            self.complete(
                p.request,
                ResponseKind::JoinGroup(join_error(
                    p.version,
                    ResponseError::UnknownMemberId.code(),
                    &m.id,
                )),
            );
        }
        if let Some(p) = m.awaiting_sync {
            self.complete(
                p.request,
                ResponseKind::SyncGroup(sync_error(ResponseError::UnknownMemberId.code())),
            );
        }
    }

    /// Removes a member and moves the group on (Kafka's
    /// `removeMemberAndUpdateGroup`).
    pub(super) fn remove_member_and_update(
        &mut self,
        group: &mut Group,
        member_id: &str,
        now: Instant,
    ) {
        let Some(m) = group.remove(member_id) else {
            return;
        };
        self.answer_removed(&m);
        match group.state {
            GroupState::Dead | GroupState::Empty => {}
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance(group, now);
                self.try_complete_join(group, now);
            }
            GroupState::PreparingRebalance => self.try_complete_join(group, now),
        }
    }

    /// Everything due at `now`.
    pub(super) fn expire(&mut self, group: &mut Group, now: Instant) {
        let expired: Vec<String> = group
            .members
            .values()
            .filter(|m| {
                if m.awaiting_join.is_some() {
                    m.is_new && m.last_heartbeat + NEW_MEMBER_JOIN_TIMEOUT <= now
                } else if m.awaiting_sync.is_some() {
                    false
                } else {
                    m.last_heartbeat + m.session_timeout <= now
                }
            })
            .map(|m| m.id.clone())
            .collect();
        for id in expired {
            debug!(group = %group.id, member = %id, "session expired");
            self.remove_member_and_update(group, &id, now);
        }
        let before = group.pending_members.len();
        group.pending_members.retain(|_, deadline| *deadline > now);
        if group.pending_members.len() != before {
            self.try_complete_join(group, now);
        }
        if group.state == GroupState::PreparingRebalance
            && group.join_deadline.is_some_and(|d| d <= now)
        {
            match group.initial_delay_left {
                Some(left)
                    if group.new_member_added
                        && !left.is_zero()
                        && !self.config.initial_rebalance_delay.is_zero() =>
                {
                    // A member arrived during the delay: wait once more.
                    let delay = self.config.initial_rebalance_delay.min(left);
                    group.initial_delay_left = Some(left.saturating_sub(delay));
                    group.new_member_added = false;
                    let deadline = now + delay;
                    group.join_deadline = Some(deadline);
                    self.wake(deadline, &group.id);
                }
                _ => self.complete_join(group, now),
            }
        }
        if group.sync_deadline.is_some_and(|d| d <= now) {
            group.sync_deadline = None;
            let late: Vec<String> = std::mem::take(&mut group.pending_sync)
                .into_iter()
                .collect();
            if matches!(
                group.state,
                GroupState::CompletingRebalance | GroupState::Stable
            ) && !late.is_empty()
            {
                for id in &late {
                    debug!(group = %group.id, member = %id, "no SyncGroup within the rebalance timeout; removed");
                    if let Some(m) = group.remove(id) {
                        self.answer_removed(&m);
                    }
                }
                self.prepare_rebalance(group, now);
                self.try_complete_join(group, now);
            }
        }
    }
}

/// Kafka's `maybeElectNewJoinedLeader`: keep a leader that rejoined,
/// otherwise pick the first member that did.
fn elect_joined_leader(group: &mut Group) -> bool {
    if let Some(leader) = &group.leader
        && group
            .members
            .get(leader)
            .is_some_and(|m| m.awaiting_join.is_some())
    {
        return true;
    }
    match group.members.values().find(|m| m.awaiting_join.is_some()) {
        Some(m) => {
            group.leader = Some(m.id.clone());
            true
        }
        None => false,
    }
}
