//! Unit tests of the group coordinator, without sockets: a small harness
//! plays the state task (answers parked requests, fires wakeups in time
//! order) with a clock it advances by hand.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use weir_protocol::kafka_protocol::messages::leave_group_request::MemberIdentity;
use weir_protocol::kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use weir_protocol::kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    ResponseKind, SyncGroupRequest, SyncGroupResponse,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::state::GroupState;
use super::{Caller, CommitMember, GroupConfig, GroupCoordinator, OffsetToCommit};
use crate::coordinator::RequestId;

mod random;

const SESSION: Duration = Duration::from_secs(10);
const REBALANCE: Duration = Duration::from_secs(30);
const G: &str = "g";

fn code(e: ResponseError) -> i16 {
    e.code()
}

struct Harness {
    c: GroupCoordinator,
    now: Instant,
    wakeups: Vec<(Instant, String)>,
    answers: HashMap<RequestId, ResponseKind>,
    next_request: RequestId,
}

impl Harness {
    fn new() -> Self {
        Self::with_config(GroupConfig::default())
    }

    fn with_config(config: GroupConfig) -> Self {
        Self {
            c: GroupCoordinator::with_config(config),
            now: Instant::now(),
            wakeups: Vec::new(),
            answers: HashMap::new(),
            next_request: 0,
        }
    }

    fn collect(&mut self) {
        for (id, body) in self.c.take_completed() {
            assert!(
                self.answers.insert(id, body).is_none(),
                "request {id} answered twice"
            );
        }
        self.wakeups.extend(self.c.take_wakeups());
    }

    /// Advances the clock, firing every wakeup due on the way in time order,
    /// as the state task's timer wheel does.
    fn advance(&mut self, by: Duration) {
        let until = self.now + by;
        loop {
            self.wakeups.sort_by_key(|(at, _)| *at);
            let Some(pos) = self.wakeups.iter().position(|(at, _)| *at <= until) else {
                break;
            };
            let (at, group) = self.wakeups.remove(pos);
            self.now = self.now.max(at);
            self.c.on_timer(&group, self.now);
            self.collect();
        }
        self.now = until;
    }

    fn caller(&mut self) -> Caller {
        self.next_request += 1;
        Caller::new(self.next_request, "client")
    }

    fn join_req(
        member: &str,
        instance: Option<&str>,
        protocols: &[(&str, &[u8])],
    ) -> JoinGroupRequest {
        JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str(G)))
            .with_session_timeout_ms(i32::try_from(SESSION.as_millis()).unwrap())
            .with_rebalance_timeout_ms(i32::try_from(REBALANCE.as_millis()).unwrap())
            .with_member_id(StrBytes::from_string(member.to_owned()))
            .with_group_instance_id(instance.map(|i| StrBytes::from_string(i.to_owned())))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(
                protocols
                    .iter()
                    .map(|(n, m)| {
                        JoinGroupRequestProtocol::default()
                            .with_name(StrBytes::from_string((*n).to_owned()))
                            .with_metadata(Bytes::copy_from_slice(m))
                    })
                    .collect(),
            )
    }

    /// Sends a JoinGroup; returns the immediate answer or the parked request id.
    fn join(
        &mut self,
        member: &str,
        instance: Option<&str>,
        version: i16,
    ) -> Result<JoinGroupResponse, RequestId> {
        self.join_with(member, instance, &[("range", b"sub")], version)
    }

    fn join_with(
        &mut self,
        member: &str,
        instance: Option<&str>,
        protocols: &[(&str, &[u8])],
        version: i16,
    ) -> Result<JoinGroupResponse, RequestId> {
        let caller = self.caller();
        let out = self.c.join(
            &caller,
            Self::join_req(member, instance, protocols),
            version,
            self.now,
        );
        self.collect();
        out.ok_or(caller.request)
    }

    fn answer(&mut self, request: RequestId) -> Option<ResponseKind> {
        self.answers.remove(&request)
    }

    fn join_answer(&mut self, request: RequestId) -> JoinGroupResponse {
        match self.answer(request) {
            Some(ResponseKind::JoinGroup(r)) => r,
            other => panic!("no JoinGroup answer for {request}: {other:?}"),
        }
    }

    fn sync_answer(&mut self, request: RequestId) -> SyncGroupResponse {
        match self.answer(request) {
            Some(ResponseKind::SyncGroup(r)) => r,
            other => panic!("no SyncGroup answer for {request}: {other:?}"),
        }
    }

    /// A dynamic member's whole KIP-394 join; returns its id and parked join.
    fn join_new(&mut self) -> (String, RequestId) {
        let first = self
            .join("", None, 5)
            .expect("MEMBER_ID_REQUIRED is immediate");
        assert_eq!(first.error_code, code(ResponseError::MemberIdRequired));
        let id = first.member_id.to_string();
        let parked = self
            .join(&id, None, 5)
            .expect_err("a join with the given id is parked");
        (id, parked)
    }

    fn sync(
        &mut self,
        member: &str,
        generation: i32,
        instance: Option<&str>,
        assignments: &[(&str, &[u8])],
    ) -> Result<SyncGroupResponse, RequestId> {
        let caller = self.caller();
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str(G)))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member.to_owned()))
            .with_group_instance_id(instance.map(|i| StrBytes::from_string(i.to_owned())))
            .with_assignments(
                assignments
                    .iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(StrBytes::from_string((*m).to_owned()))
                            .with_assignment(Bytes::copy_from_slice(a))
                    })
                    .collect(),
            );
        let out = self.c.sync(&caller, req, 5, self.now);
        self.collect();
        out.ok_or(caller.request)
    }

    fn heartbeat(&mut self, member: &str, generation: i32, instance: Option<&str>) -> i16 {
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str(G)))
            .with_generation_id(generation)
            .with_member_id(StrBytes::from_string(member.to_owned()))
            .with_group_instance_id(instance.map(|i| StrBytes::from_string(i.to_owned())));
        let out = self.c.heartbeat(req, 4, self.now).error_code;
        self.collect();
        out
    }

    fn state(&self) -> GroupState {
        self.c.group(G).map_or(GroupState::Dead, |g| g.state)
    }

    fn generation(&self) -> i32 {
        self.c.group(G).map_or(-1, |g| g.generation)
    }

    /// One member, joined and synced: generation 1, Stable.
    fn stable_single(&mut self) -> String {
        let (id, parked) = self.join_new();
        self.advance(Duration::ZERO);
        let joined = self.join_answer(parked);
        assert_eq!((joined.error_code, joined.generation_id), (0, 1));
        let synced = self
            .sync(&id, 1, None, &[(&id, b"a1")])
            .expect("the leader's sync completes at once");
        assert_eq!(synced.assignment.as_ref(), b"a1");
        id
    }
}

#[test]
fn kip394_join_elects_the_first_member_leader_and_the_leader_assigns() {
    let mut h = Harness::new();
    let (id, parked) = h.join_new();
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    // The initial delay is 0: the join completes when its timer fires.
    h.advance(Duration::ZERO);
    let joined = h.join_answer(parked);
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(joined.members.len(), 1);
    assert_eq!(joined.members[0].metadata.as_ref(), b"sub");
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    let synced = h
        .sync(&id, 1, None, &[(&id, b"p0")])
        .expect("leader sync is immediate");
    assert_eq!(
        (synced.error_code, synced.assignment.as_ref()),
        (0, &b"p0"[..])
    );
    assert_eq!(h.state(), GroupState::Stable);
}

#[test]
fn a_join_with_an_unknown_member_id_before_v4_semantics_and_errors() {
    let mut h = Harness::new();
    // v3 has no MEMBER_ID_REQUIRED: the member is added at once.
    let parked = h.join("", None, 3).expect_err("parked");
    h.advance(Duration::ZERO);
    assert_eq!(h.join_answer(parked).generation_id, 1);
    // Unknown member id in an existing group.
    let bad = h.join("nobody", None, 5).expect("immediate error");
    assert_eq!(bad.error_code, code(ResponseError::UnknownMemberId));
    // A protocol nobody else supports.
    let inconsistent = h
        .join_with("", None, &[("other", b"")], 5)
        .expect("immediate error");
    assert_eq!(
        inconsistent.error_code,
        code(ResponseError::InconsistentGroupProtocol)
    );
    // Session timeout below the minimum.
    let mut caller = h.caller();
    caller.client_id = "c".into();
    let req = Harness::join_req("", None, &[("range", b"")]).with_session_timeout_ms(1000);
    let r = h.c.join(&caller, req, 5, h.now).expect("immediate error");
    assert_eq!(r.error_code, code(ResponseError::InvalidSessionTimeout));
}

#[test]
fn a_second_member_triggers_a_rebalance_that_completes_when_everyone_rejoined() {
    let mut h = Harness::new();
    let a = h.stable_single();
    let (b, b_join) = h.join_new();
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    // a learns of the rebalance through its heartbeat, and b waits for a.
    assert_eq!(
        h.heartbeat(&a, 1, None),
        code(ResponseError::RebalanceInProgress)
    );
    assert!(h.answer(b_join).is_none());
    let a_join = h.join(&a, None, 5).expect_err("parked");
    let (ja, jb) = (h.join_answer(a_join), h.join_answer(b_join));
    assert_eq!((ja.generation_id, jb.generation_id), (2, 2));
    assert_eq!(ja.leader.as_str(), a);
    assert_eq!(jb.leader.as_str(), a);
    assert_eq!(
        ja.members.len(),
        2,
        "the leader gets every member's metadata"
    );
    assert!(jb.members.is_empty(), "followers get none");
    // b's sync waits for the leader's.
    let b_sync = h
        .sync(&b, 2, None, &[])
        .expect_err("parked until the leader syncs");
    let a_sync = h
        .sync(&a, 2, None, &[(&a, b"A"), (&b, b"B")])
        .expect("leader");
    assert_eq!(a_sync.assignment.as_ref(), b"A");
    assert_eq!(h.sync_answer(b_sync).assignment.as_ref(), b"B");
    assert_eq!(h.state(), GroupState::Stable);
    // The old generation is refused.
    assert_eq!(
        h.heartbeat(&a, 1, None),
        code(ResponseError::IllegalGeneration)
    );
    assert_eq!(h.heartbeat(&a, 2, None), 0);
}

#[test]
fn members_that_do_not_rejoin_are_dropped_at_the_rebalance_timeout_but_static_ones_stay() {
    let mut h = Harness::new();
    // Static member s and dynamic member d, both Stable in generation 2.
    let s_join = h
        .join("", Some("s-1"), 5)
        .expect_err("static members skip MEMBER_ID_REQUIRED");
    h.advance(Duration::ZERO);
    let s = h.join_answer(s_join).member_id.to_string();
    h.sync(&s, 1, Some("s-1"), &[]).expect("leader");
    let (d, d_join) = h.join_new();
    let s_rejoin = h.join(&s, Some("s-1"), 5).expect_err("parked");
    let _ = (h.join_answer(s_rejoin), h.join_answer(d_join));
    h.sync(&s, 2, Some("s-1"), &[]).expect("leader");
    h.sync(&d, 2, None, &[]).expect("stable");
    // A third member starts a rebalance; nobody else rejoins.
    let (_, e_join) = h.join_new();
    let start = h.now;
    // Keep both alive by heartbeats, so only the rebalance timeout applies.
    for _ in 0..5 {
        h.advance(Duration::from_secs(5));
        assert_eq!(
            h.heartbeat(&s, 2, Some("s-1")),
            code(ResponseError::RebalanceInProgress)
        );
        assert_eq!(
            h.heartbeat(&d, 2, None),
            code(ResponseError::RebalanceInProgress)
        );
    }
    h.advance(REBALANCE - Duration::from_secs(25) - Duration::from_millis(1));
    assert!(
        h.answer(e_join).is_none(),
        "still waiting just before the rebalance timeout"
    );
    h.advance(Duration::from_millis(1));
    assert_eq!(h.now - start, REBALANCE);
    let je = h.join_answer(e_join);
    assert_eq!(je.generation_id, 3);
    let group = h.c.group(G).unwrap();
    assert!(group.has(&s), "the static member is kept");
    assert!(!group.has(&d), "the dynamic member is dropped");
    assert_eq!(
        group.leader.as_deref(),
        Some(je.member_id.as_str()),
        "a member that rejoined leads"
    );
    assert_eq!(
        h.heartbeat(&d, 2, None),
        code(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_silent_member_expires_exactly_at_its_session_timeout() {
    let mut h = Harness::new();
    let a = h.stable_single();
    h.advance(SESSION - Duration::from_millis(1));
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(h.heartbeat(&a, 1, None), 0);
    // The heartbeat restarted the session.
    h.advance(SESSION - Duration::from_millis(1));
    assert!(h.c.group(G).unwrap().has(&a));
    h.advance(Duration::from_millis(1));
    assert!(!h.c.group(G).unwrap().has(&a));
    assert_eq!(h.state(), GroupState::Empty);
    assert_eq!(
        h.generation(),
        2,
        "becoming empty is a generation of its own"
    );
    assert_eq!(
        h.heartbeat(&a, 1, None),
        code(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_pending_member_that_never_joins_expires_and_unblocks_the_rebalance() {
    let mut h = Harness::new();
    let a = h.stable_single();
    let pending = h.join("", None, 5).expect("MEMBER_ID_REQUIRED");
    assert_eq!(pending.error_code, code(ResponseError::MemberIdRequired));
    // a rejoins (leader rejoin forces a rebalance), but the pending member
    // is still expected.
    let a_join = h.join(&a, None, 5).expect_err("parked");
    assert!(h.answer(a_join).is_none());
    h.advance(SESSION);
    let ja = h.join_answer(a_join);
    assert_eq!((ja.error_code, ja.generation_id), (0, 2));
}

#[test]
fn a_static_rejoin_in_stable_replaces_the_member_without_a_rebalance_and_fences_the_old_id() {
    let mut h = Harness::new();
    let j = h.join("", Some("app-1"), 5).expect_err("parked");
    h.advance(Duration::ZERO);
    let old = h.join_answer(j).member_id.to_string();
    h.sync(&old, 1, Some("app-1"), &[(&old, b"mine")])
        .expect("leader");
    // The process restarts and rejoins with no member id.
    let again = h
        .join("", Some("app-1"), 5)
        .expect("answered at once, without a rebalance");
    assert_eq!((again.error_code, again.generation_id), (0, 1));
    let new = again.member_id.to_string();
    assert_ne!(new, old);
    assert_eq!(
        again.leader.as_str(),
        old,
        "v5 is told the old leader id, so it does not reassign"
    );
    assert_eq!(h.state(), GroupState::Stable);
    let synced = h.sync(&new, 1, Some("app-1"), &[]).expect("stable");
    assert_eq!(
        synced.assignment.as_ref(),
        b"mine",
        "the assignment is kept"
    );
    // The old id is fenced everywhere.
    assert_eq!(
        h.heartbeat(&old, 1, Some("app-1")),
        code(ResponseError::FencedInstanceId)
    );
    let err = h.sync(&old, 1, Some("app-1"), &[]).expect("immediate");
    assert_eq!(err.error_code, code(ResponseError::FencedInstanceId));
    let who = CommitMember {
        generation: 1,
        member_id: old.clone(),
        instance_id: Some("app-1".into()),
    };
    let codes =
        h.c.commit_offsets(G, &who, &[offset("t", 0, 5)], &|_, _| true, h.now);
    assert_eq!(codes, vec![code(ResponseError::FencedInstanceId)]);
    // v9 (KIP-814): the replaced leader learns it leads, with skip_assignment.
    let v9 = h.join("", Some("app-1"), 9).expect("immediate");
    assert!(v9.skip_assignment);
    assert_eq!(v9.leader, v9.member_id);
    assert_eq!(h.generation(), 1);
}

#[test]
fn a_static_rejoin_during_completing_rebalance_fences_the_parked_sync_and_rebalances() {
    let mut h = Harness::new();
    let j = h.join("", Some("app-1"), 5).expect_err("parked");
    h.advance(Duration::ZERO);
    let old = h.join_answer(j).member_id.to_string();
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    let parked_sync = h.sync(&old, 1, Some("app-1"), &[]);
    // The leader's own sync completes at once; make a follower case instead.
    assert!(parked_sync.is_ok());
    let (b, b_join) = h.join_new();
    let old_rejoin = h.join(&old, Some("app-1"), 5).expect_err("parked");
    let _ = (h.join_answer(old_rejoin), h.join_answer(b_join));
    let b_sync = h.sync(&b, 2, None, &[]).expect_err("waits for the leader");
    let replaced = h
        .join("", Some("app-1"), 5)
        .expect_err("rebalances: parked");
    assert_eq!(
        h.sync_answer(b_sync).error_code,
        code(ResponseError::RebalanceInProgress)
    );
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    let b_join = h.join(&b, None, 5).expect_err("parked");
    let (jr, jb) = (h.join_answer(replaced), h.join_answer(b_join));
    assert_eq!((jr.generation_id, jb.generation_id), (3, 3));
    assert_eq!(
        h.heartbeat(&old, 3, Some("app-1")),
        code(ResponseError::FencedInstanceId)
    );
}

#[test]
fn leave_group_in_a_batch_by_instance_id() {
    let mut h = Harness::new();
    let j1 = h.join("", Some("i-1"), 5).expect_err("parked");
    let j2 = h.join("", Some("i-2"), 5).expect_err("parked");
    h.advance(Duration::ZERO);
    let (m1, m2) = (
        h.join_answer(j1).member_id.to_string(),
        h.join_answer(j2).member_id.to_string(),
    );
    let members = vec![
        MemberIdentity::default().with_group_instance_id(Some(StrBytes::from_static_str("i-1"))),
        MemberIdentity::default()
            .with_member_id(StrBytes::from_static_str("not-m2"))
            .with_group_instance_id(Some(StrBytes::from_static_str("i-2"))),
        MemberIdentity::default().with_group_instance_id(Some(StrBytes::from_static_str("i-9"))),
    ];
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(G)))
        .with_members(members);
    let resp = h.c.leave(req, 3, h.now);
    h.collect();
    let codes: Vec<i16> = resp.members.iter().map(|m| m.error_code).collect();
    assert_eq!(
        codes,
        vec![
            0,
            code(ResponseError::FencedInstanceId),
            code(ResponseError::UnknownMemberId)
        ]
    );
    let g = h.c.group(G).unwrap();
    assert!(!g.has(&m1) && g.has(&m2));
    assert_eq!(g.state, GroupState::PreparingRebalance);
    // v0–2: one member id, error at the top level.
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(G)))
        .with_member_id(StrBytes::from_string(m2.clone()));
    assert_eq!(h.c.leave(req, 1, h.now).error_code, 0);
    h.collect();
    assert_eq!(h.state(), GroupState::Empty);
}

#[test]
fn members_that_never_sync_are_removed_after_the_rebalance_timeout() {
    let mut h = Harness::new();
    let a = h.stable_single();
    let (b, b_join) = h.join_new();
    let a_join = h.join(&a, None, 5).expect_err("parked");
    let _ = (h.join_answer(a_join), h.join_answer(b_join));
    h.sync(&a, 2, None, &[(&a, b"A")]).expect("leader");
    // b heartbeats, so its session stays alive, but never syncs.
    for _ in 0..5 {
        h.advance(Duration::from_secs(5));
        assert_eq!(h.heartbeat(&a, 2, None), 0);
        assert_eq!(h.heartbeat(&b, 2, None), 0);
    }
    assert!(h.c.group(G).unwrap().has(&b));
    h.advance(Duration::from_secs(5));
    assert!(!h.c.group(G).unwrap().has(&b));
    assert_eq!(
        h.state(),
        GroupState::PreparingRebalance,
        "a must rejoin without b"
    );
}

#[test]
fn the_initial_rebalance_delay_gathers_members_into_one_generation() {
    let config = GroupConfig {
        initial_rebalance_delay: Duration::from_secs(3),
        ..GroupConfig::default()
    };
    let mut h = Harness::with_config(config);
    let (_, a_join) = h.join_new();
    h.advance(Duration::from_secs(2));
    let (_, b_join) = h.join_new();
    // The delay ends at 3 s, sees b's arrival and waits another 3 s.
    h.advance(Duration::from_millis(3999));
    assert!(h.answer(a_join).is_none(), "b's arrival extended the delay");
    h.advance(Duration::from_millis(1));
    let (ja, jb) = (h.join_answer(a_join), h.join_answer(b_join));
    assert_eq!((ja.generation_id, jb.generation_id), (1, 1));
    assert_eq!(ja.members.len(), 2);
}

fn offset(topic: &str, partition: i32, offset: i64) -> OffsetToCommit {
    OffsetToCommit {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch: -1,
        metadata: Some("m".into()),
    }
}

#[test]
fn offset_commits_are_checked_against_generation_and_member() {
    let mut h = Harness::new();
    // The admin client may commit to a group that does not exist yet.
    let admin = CommitMember {
        generation: -1,
        member_id: String::new(),
        instance_id: None,
    };
    assert_eq!(
        h.c.commit_offsets(G, &admin, &[offset("t", 0, 1)], &|_, _| true, h.now),
        vec![0]
    );
    let a = h.stable_single();
    // ...but not to a group with members.
    assert_eq!(
        h.c.commit_offsets(G, &admin, &[offset("t", 0, 2)], &|_, _| true, h.now),
        vec![code(ResponseError::UnknownMemberId)]
    );
    let stale = CommitMember {
        generation: 0,
        member_id: a.clone(),
        instance_id: None,
    };
    assert_eq!(
        h.c.commit_offsets(G, &stale, &[offset("t", 0, 2)], &|_, _| true, h.now),
        vec![code(ResponseError::IllegalGeneration)]
    );
    let good = CommitMember {
        generation: 1,
        member_id: a.clone(),
        instance_id: None,
    };
    let codes = h.c.commit_offsets(
        G,
        &good,
        &[offset("t", 0, 7), offset("gone", 0, 1)],
        &|t, _| t == "t",
        h.now,
    );
    assert_eq!(codes, vec![0, code(ResponseError::UnknownTopicOrPartition)]);
    let fetched = h.c.fetch_offsets(G, None, false).unwrap();
    assert_eq!(fetched.len(), 1);
    assert_eq!(
        (fetched[0].1[0].offset, fetched[0].1[0].metadata.as_str()),
        (7, "m")
    );
    // A commit during CompletingRebalance must wait for the sync.
    let (_, b_join) = h.join_new();
    let a_join = h.join(&a, None, 5).expect_err("parked");
    let _ = (h.join_answer(a_join), h.join_answer(b_join));
    let now_gen = CommitMember {
        generation: 2,
        member_id: a,
        instance_id: None,
    };
    assert_eq!(
        h.c.commit_offsets(G, &now_gen, &[offset("t", 0, 8)], &|_, _| true, h.now),
        vec![code(ResponseError::RebalanceInProgress)]
    );
    // An unknown group with a generation: the member's group is gone.
    assert_eq!(
        h.c.commit_offsets("other", &good, &[offset("t", 0, 1)], &|_, _| true, h.now),
        vec![code(ResponseError::IllegalGeneration)]
    );
}

#[test]
fn transactional_offsets_stay_pending_until_the_marker_and_require_stable_sees_them() {
    let mut h = Harness::new();
    let a = h.stable_single();
    let who = CommitMember {
        generation: 1,
        member_id: a.clone(),
        instance_id: None,
    };
    assert_eq!(
        h.c.txn_commit_offsets(G, 42, &who, &[offset("t", 0, 10)], &|_, _| true),
        vec![0]
    );
    let topics = Some(vec![("t".to_owned(), vec![0])]);
    let plain = h.c.fetch_offsets(G, topics.clone(), false).unwrap();
    assert_eq!((plain[0].1[0].offset, plain[0].1[0].error_code), (-1, 0));
    let stable = h.c.fetch_offsets(G, topics.clone(), true).unwrap();
    assert_eq!(
        stable[0].1[0].error_code,
        code(ResponseError::UnstableOffsetCommit)
    );
    h.c.complete_txn(G, 42, true);
    let after = h.c.fetch_offsets(G, topics.clone(), true).unwrap();
    assert_eq!((after[0].1[0].offset, after[0].1[0].error_code), (10, 0));
    // An aborted transaction's offsets vanish.
    assert_eq!(
        h.c.txn_commit_offsets(G, 42, &who, &[offset("t", 0, 20)], &|_, _| true),
        vec![0]
    );
    h.c.complete_txn(G, 42, false);
    assert_eq!(
        h.c.fetch_offsets(G, topics, true).unwrap()[0].1[0].offset,
        10
    );
    // A zombie of an older generation is refused (KIP-447).
    let (_, b_join) = h.join_new();
    let a_join = h.join(&a, None, 5).expect_err("parked");
    let _ = (h.join_answer(a_join), h.join_answer(b_join));
    assert_eq!(
        h.c.txn_commit_offsets(G, 42, &who, &[offset("t", 0, 30)], &|_, _| true),
        vec![code(ResponseError::IllegalGeneration)]
    );
    let unknown = CommitMember {
        generation: 2,
        member_id: "zombie".into(),
        instance_id: None,
    };
    assert_eq!(
        h.c.txn_commit_offsets(G, 42, &unknown, &[offset("t", 0, 30)], &|_, _| true),
        vec![code(ResponseError::UnknownMemberId)]
    );
}

#[test]
fn describe_list_and_delete_follow_the_group_state() {
    let mut h = Harness::new();
    let a = h.stable_single();
    let d = h.c.describe(G, 5);
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.protocol_data.as_str(), "range");
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_assignment.as_ref(), b"a1");
    assert_eq!(h.c.describe("nope", 5).group_state.as_str(), "Dead");
    assert_eq!(h.c.describe("nope", 5).error_code, 0);
    let unknown = h.c.describe("nope", 6);
    assert_eq!(unknown.group_state.as_str(), "Dead");
    assert_eq!(unknown.error_code, code(ResponseError::GroupIdNotFound));
    assert_eq!(
        unknown.error_message.as_deref(),
        Some("Group nope not found.")
    );
    assert_eq!(h.c.describe(G, 6).error_code, 0);
    assert_eq!(h.c.list(&[]).len(), 1);
    assert_eq!(h.c.list(&["Empty".to_owned()]).len(), 0);
    assert_eq!(h.c.delete(G), code(ResponseError::NonEmptyGroup));
    assert_eq!(h.c.delete("nope"), code(ResponseError::GroupIdNotFound));
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(G)))
        .with_members(vec![
            MemberIdentity::default().with_member_id(StrBytes::from_string(a)),
        ]);
    let _ = h.c.leave(req, 3, h.now);
    assert_eq!(h.state(), GroupState::Empty);
    assert_eq!(h.c.list(&["empty".to_owned()]).len(), 1);
    assert_eq!(h.c.delete(G), 0);
    assert!(h.c.group(G).is_none());
}

#[test]
fn a_rebalance_waits_for_the_largest_rebalance_timeout_of_the_members() {
    let mut h = Harness::new();
    let a = h.stable_single();
    // b joins with a rebalance timeout twice a's.
    let first = h.join("", None, 5).expect("MEMBER_ID_REQUIRED");
    let b = first.member_id.to_string();
    let caller = h.caller();
    let req = Harness::join_req(&b, None, &[("range", b"sub")])
        .with_rebalance_timeout_ms(i32::try_from(REBALANCE.as_millis() * 2).unwrap());
    assert!(h.c.join(&caller, req, 5, h.now).is_none());
    h.collect();
    // a stays alive by heartbeats but never rejoins.
    let start = h.now;
    while h.now - start < REBALANCE * 2 - Duration::from_secs(5) {
        h.advance(Duration::from_secs(5));
        assert_eq!(
            h.heartbeat(&a, 1, None),
            code(ResponseError::RebalanceInProgress)
        );
    }
    assert!(
        h.answer(caller.request).is_none(),
        "still waiting after a's own timeout"
    );
    h.advance(Duration::from_secs(5));
    let joined = h.join_answer(caller.request);
    assert_eq!(
        (joined.generation_id, joined.leader.as_str()),
        (2, b.as_str())
    );
    assert!(!h.c.group(G).unwrap().has(&a));
}
