//! Random member behaviour against the group coordinator: the state
//! invariants hold after every request, and no parked request is lost.

use std::time::Duration;

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::leave_group_request::MemberIdentity;
use weir_protocol::kafka_protocol::messages::{GroupId, LeaveGroupRequest};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::{G, Harness, REBALANCE, code};
use crate::coordinator::RequestId;
use crate::coordinator::group::NEW_MEMBER_JOIN_TIMEOUT;
use crate::coordinator::group::state::GroupState;

/// A tiny deterministic generator (no dependency needed for a few thousand
/// draws).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Invariants that must hold between any two requests.
fn check_invariants(h: &Harness, last_generation: &mut i32, sent: &[RequestId]) {
    let Some(g) = h.c.group(G) else { return };
    assert!(g.generation >= *last_generation, "generation went back");
    *last_generation = g.generation;
    if g.state == GroupState::Empty {
        assert!(g.members.is_empty(), "Empty with members");
    }
    if !g.members.is_empty() {
        let leader = g.leader.as_deref().expect("members but no leader");
        assert!(g.has(leader), "the leader is not a member");
    }
    for (instance, member) in &g.static_members {
        let m = g
            .members
            .get(member)
            .expect("static mapping to a non-member");
        assert_eq!(m.instance_id.as_deref(), Some(instance.as_str()));
    }
    assert!(g.pending_sync.iter().all(|m| g.has(m)));
    assert!(
        g.members
            .values()
            .all(|m| m.awaiting_sync.is_none() || g.state == GroupState::CompletingRebalance)
    );
    assert!(
        g.members
            .values()
            .all(|m| m.awaiting_join.is_none() || g.state == GroupState::PreparingRebalance)
    );
    // Nothing is lost: every request not answered yet is parked on a member.
    let parked: Vec<RequestId> = g
        .members
        .values()
        .flat_map(|m| [m.awaiting_join, m.awaiting_sync])
        .flatten()
        .map(|p| p.request)
        .collect();
    for id in sent {
        assert!(
            h.answers.contains_key(id) || parked.contains(id),
            "request {id} was neither answered nor parked"
        );
    }
}

#[test]
fn random_member_behaviour_never_breaks_the_group_invariants() {
    for seed in 1..=100u64 {
        let mut rng = Lcg(seed);
        let mut h = Harness::new();
        // Slot i: its member id (if it has one) and, for even slots, an instance id.
        let mut ids: Vec<String> = vec![String::new(); 5];
        let mut sent: Vec<RequestId> = Vec::new();
        let mut last_generation = 0;
        for _ in 0..200 {
            let slot = usize::try_from(rng.below(5)).unwrap();
            let instance = (slot % 2 == 0).then(|| format!("i-{slot}"));
            let generation = h.generation();
            let op = rng.below(6);
            // Like Kafka, a second JoinGroup or SyncGroup of a member whose
            // first one is still parked replaces it: the first is never
            // answered (its client's request timeout covers that).
            if op <= 2
                && let Some(m) = h.c.group(G).and_then(|g| g.members.get(&ids[slot]))
            {
                let superseded = if op == 2 {
                    m.awaiting_sync
                } else {
                    m.awaiting_join
                };
                sent.retain(|id| superseded.is_none_or(|p| p.request != *id));
            }
            match op {
                0 | 1 => {
                    let version = if rng.below(2) == 0 { 5 } else { 3 };
                    match h.join(&ids[slot].clone(), instance.as_deref(), version) {
                        Ok(r) if r.error_code == code(ResponseError::MemberIdRequired) => {
                            ids[slot] = r.member_id.to_string();
                        }
                        Ok(r) if r.error_code == 0 => ids[slot] = r.member_id.to_string(),
                        Ok(r) if r.error_code == code(ResponseError::UnknownMemberId) => {
                            ids[slot].clear()
                        }
                        Ok(_) => {}
                        Err(parked) => sent.push(parked),
                    }
                }
                2 => {
                    let all: Vec<String> =
                        h.c.group(G)
                            .map(|g| g.members.keys().cloned().collect())
                            .unwrap_or_default();
                    let assignments: Vec<(&str, &[u8])> =
                        all.iter().map(|m| (m.as_str(), &b"x"[..])).collect();
                    if let Err(parked) = h.sync(
                        &ids[slot].clone(),
                        generation,
                        instance.as_deref(),
                        &assignments,
                    ) {
                        sent.push(parked);
                    }
                }
                3 => {
                    let _ = h.heartbeat(&ids[slot].clone(), generation, instance.as_deref());
                }
                4 if rng.below(4) == 0 => {
                    let req = LeaveGroupRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str(G)))
                        .with_members(vec![
                            MemberIdentity::default()
                                .with_member_id(StrBytes::from_string(ids[slot].clone()))
                                .with_group_instance_id(
                                    instance
                                        .as_deref()
                                        .map(|i| StrBytes::from_string(i.to_owned())),
                                ),
                        ]);
                    let _ = h.c.leave(req, 3, h.now);
                    h.collect();
                    ids[slot].clear();
                }
                _ => h.advance(Duration::from_millis(rng.below(15_000))),
            }
            check_invariants(&h, &mut last_generation, &sent);
        }
        // Left alone, every member's session ends and the group empties.
        h.advance(NEW_MEMBER_JOIN_TIMEOUT + REBALANCE * 2);
        check_invariants(&h, &mut last_generation, &sent);
        let g = h.c.group(G).unwrap();
        assert!(
            g.members.is_empty(),
            "seed {seed}: {} members outlived their sessions",
            g.members.len()
        );
        assert!(
            sent.iter().all(|id| h.answers.contains_key(id)),
            "seed {seed}: a request was never answered"
        );
    }
}
