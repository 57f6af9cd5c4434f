//! Consumer groups over the wire: rebalances, exact session expiry, static
//! membership, coordinator routing, and every advertised version of the
//! group APIs.

// Helpers outside `#[test]` functions unwrap too: a failure is the test failing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod group_client;

use std::time::Duration;

use group_client::*;
use weir_protocol::kafka_protocol::messages::leave_group_request::MemberIdentity;
use weir_protocol::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use weir_protocol::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use weir_protocol::kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest,
    OffsetFetchRequest, SyncGroupRequest,
};
use weir_testkit::{ClientSelector, Cluster, DataOnRestart, PartitionTarget};

use common::{TestClient, topic};

async fn cluster(brokers: i32) -> Cluster {
    let cluster = Cluster::builder().brokers(brokers).build().await.unwrap();
    cluster
        .create_topic("t", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    cluster
}

async fn client(cluster: &Cluster, broker: i32, name: &str) -> Client {
    TestClient::new(cluster.connect_duplex(broker).await.unwrap(), name)
}

#[tokio::test(start_paused = true)]
async fn a_group_rebalances_when_a_member_joins_and_a_silent_member_expires_exactly_on_time() {
    let cluster = cluster(1).await;
    let mut a = client(&cluster, 0, "a").await;
    let mut b = client(&cluster, 0, "b").await;
    let (ma, generation) = join_alone(&mut a, "g", 5).await;
    assert_eq!(generation, 1);
    let synced = a
        .call(5, &sync_request("g", &ma, 1, None, &[(&ma, b"all")], 5))
        .await;
    assert_eq!(
        (synced.error_code, synced.assignment.as_ref()),
        (0, &b"all"[..])
    );

    // b joins: its JoinGroup waits until a has rejoined.
    let mb = start_join(&mut b, "g", 5).await;
    assert_eq!(
        heartbeat(&mut a, "g", &ma, 1).await,
        27,
        "REBALANCE_IN_PROGRESS"
    );
    a.send_only(5, &join_request("g", &ma, None, 5)).await;
    let (ja, jb) = (finish_join(&mut a, 5).await, finish_join(&mut b, 5).await);
    assert_eq!((ja.generation_id, jb.generation_id), (2, 2));
    assert_eq!(ja.leader.as_str(), ma);
    assert_eq!(ja.members.len(), 2);
    assert!(jb.members.is_empty());
    b.send_only(5, &sync_request("g", &mb, 2, None, &[], 5))
        .await;
    let sa = a
        .call(
            5,
            &sync_request("g", &ma, 2, None, &[(&ma, b"A"), (&mb, b"B")], 5),
        )
        .await;
    let sb = b.recv::<SyncGroupRequest>(5).await;
    assert_eq!(
        (sa.assignment.as_ref(), sb.assignment.as_ref()),
        (&b"A"[..], &b"B"[..])
    );

    // a goes silent; b heartbeats. a's session ends exactly 10 s after its
    // last contact (its SyncGroup).
    let last_contact = tokio::time::Instant::now();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(heartbeat(&mut b, "g", &mb, 2).await, 0);
    }
    tokio::time::sleep_until(last_contact + Duration::from_millis(9_999)).await;
    assert_eq!(
        heartbeat(&mut b, "g", &mb, 2).await,
        0,
        "a is still a member 1 ms before"
    );
    tokio::time::sleep_until(last_contact + Duration::from_millis(10_001)).await;
    assert_eq!(
        heartbeat(&mut b, "g", &mb, 2).await,
        27,
        "a expired: b must rejoin"
    );
    assert_eq!(
        heartbeat(&mut a, "g", &ma, 2).await,
        25,
        "UNKNOWN_MEMBER_ID for a"
    );
    b.send_only(5, &join_request("g", &mb, None, 5)).await;
    let jb = finish_join(&mut b, 5).await;
    assert_eq!((jb.generation_id, jb.leader.as_str()), (3, mb.as_str()));
}

#[tokio::test(start_paused = true)]
async fn a_static_member_restarts_without_a_rebalance_and_its_old_id_is_fenced() {
    let cluster = cluster(1).await;
    let mut old = client(&cluster, 0, "app").await;
    old.send_only(5, &join_request("g", "", Some("instance-1"), 5))
        .await;
    let joined = finish_join(&mut old, 5).await;
    let old_id = joined.member_id.to_string();
    let synced = old
        .call(
            5,
            &sync_request("g", &old_id, 1, Some("instance-1"), &[(&old_id, b"p0")], 5),
        )
        .await;
    assert_eq!(synced.assignment.as_ref(), b"p0");

    // The process restarts: a new connection, the same instance id.
    let mut new = client(&cluster, 0, "app").await;
    let rejoined = new
        .call(5, &join_request("g", "", Some("instance-1"), 5))
        .await;
    assert_eq!(
        (rejoined.error_code, rejoined.generation_id),
        (0, 1),
        "no rebalance"
    );
    let new_id = rejoined.member_id.to_string();
    assert_ne!(new_id, old_id);
    let synced = new
        .call(
            5,
            &sync_request("g", &new_id, 1, Some("instance-1"), &[], 5),
        )
        .await;
    assert_eq!(
        synced.assignment.as_ref(),
        b"p0",
        "the assignment survives the restart"
    );
    let fenced = old
        .call(
            4,
            &heartbeat_request("g", &old_id, 1, Some("instance-1"), 4),
        )
        .await;
    assert_eq!(fenced.error_code, 82, "FENCED_INSTANCE_ID");

    let described = new
        .call(
            5,
            &DescribeGroupsRequest::default().with_groups(vec![gid("g")]),
        )
        .await;
    let g = &described.groups[0];
    assert_eq!(g.group_state.as_str(), "Stable");
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.members[0].member_id.as_str(), new_id);
    assert_eq!(
        g.members[0].group_instance_id.as_deref(),
        Some("instance-1")
    );
}

#[tokio::test]
async fn requests_go_to_the_coordinator_which_fails_over_when_its_broker_dies() {
    let cluster = cluster(3).await;
    let mut c = client(&cluster, 0, "c").await;
    let found = c
        .call(
            3,
            &FindCoordinatorRequest::default()
                .with_key(s("g"))
                .with_key_type(0),
        )
        .await;
    assert_eq!(found.error_code, 0);
    let home = found.node_id.0;
    let port = cluster.broker_addr(home).unwrap().port();
    assert_eq!(found.port, i32::from(port));
    // Batched lookup (v4) of a group and a transactional id.
    let batched = c
        .call(
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(vec![s("tx-a"), s("tx-b")]),
        )
        .await;
    assert_eq!(batched.coordinators.len(), 2);
    assert!(
        batched
            .coordinators
            .iter()
            .all(|k| k.error_code == 0 && k.node_id.0 >= 0)
    );
    // v5 and v6 keep v4's layout; v6's share-group key type is refused, as
    // Kafka refuses a share key it cannot parse (INVALID_REQUEST).
    for version in [5, 6] {
        let found = c
            .call(
                version,
                &FindCoordinatorRequest::default()
                    .with_key_type(0)
                    .with_coordinator_keys(vec![s("g")]),
            )
            .await;
        assert_eq!(
            (
                found.coordinators[0].error_code,
                found.coordinators[0].node_id.0
            ),
            (0, home),
            "FindCoordinator v{version}"
        );
    }
    let share = c
        .call(
            6,
            &FindCoordinatorRequest::default()
                .with_key_type(2)
                .with_coordinator_keys(vec![s("g:nope:0")]),
        )
        .await;
    assert_eq!(share.coordinators[0].error_code, 42, "INVALID_REQUEST");

    let other = (home + 1) % 3;
    let mut wrong = client(&cluster, other, "c").await;
    let resp = wrong.call(5, &join_request("g", "", None, 5)).await;
    assert_eq!(resp.error_code, 16, "NOT_COORDINATOR");
    let mut right = client(&cluster, home, "c").await;
    assert_eq!(
        right
            .call(5, &join_request("g", "", None, 5))
            .await
            .error_code,
        79
    );

    cluster
        .kill_broker(home, DataOnRestart::Keep)
        .await
        .unwrap();
    let mut c = client(&cluster, other, "c").await;
    let moved = c
        .call(
            3,
            &FindCoordinatorRequest::default()
                .with_key(s("g"))
                .with_key_type(0),
        )
        .await;
    assert_eq!(moved.error_code, 0);
    assert_ne!(moved.node_id.0, home);
    let mut new_home = client(&cluster, moved.node_id.0, "c").await;
    assert_eq!(
        new_home
            .call(5, &join_request("g", "", None, 5))
            .await
            .error_code,
        79
    );
}

/// Each advertised version of every group API, in one flow per version: the
/// responses must encode at that version and carry what the version has.
#[tokio::test]
async fn every_advertised_version_of_the_group_apis_works() {
    // Ten new groups in real time: Kafka's 3 s initial delay would only add
    // 30 s to a test about request versions.
    let cluster = Cluster::builder().instant_timing().build().await.unwrap();
    cluster
        .create_topic("t", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let mut c = client(&cluster, 0, "v").await;
    for version in 0..=9i16 {
        let group = format!("g{version}");
        let (member, generation) = join_alone(&mut c, &group, version).await;
        let sync_v = version.min(5);
        let synced = c
            .call(
                sync_v,
                &sync_request(
                    &group,
                    &member,
                    generation,
                    None,
                    &[(&member, b"x")],
                    sync_v,
                ),
            )
            .await;
        assert_eq!(
            (synced.error_code, synced.assignment.as_ref()),
            (0, &b"x"[..]),
            "SyncGroup v{sync_v}"
        );
        let hb_v = version.min(4);
        let hb = c
            .call(
                hb_v,
                &heartbeat_request(&group, &member, generation, None, hb_v),
            )
            .await;
        assert_eq!(hb.error_code, 0, "Heartbeat v{hb_v}");

        let commit_v = version.clamp(2, 9);
        let commit = OffsetCommitRequest::default()
            .with_group_id(gid(&group))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(&member))
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(topic("t"))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(40 + i64::from(version))
                            .with_committed_metadata(Some(s("meta"))),
                    ]),
            ]);
        let committed = c.call(commit_v, &commit).await;
        assert_eq!(
            committed.topics[0].partitions[0].error_code, 0,
            "OffsetCommit v{commit_v}"
        );

        let fetch_v = version.clamp(1, 8);
        let expected = 40 + i64::from(version);
        if fetch_v >= 8 {
            let req = OffsetFetchRequest::default().with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(gid(&group))
                    .with_topics(None),
            ]);
            let resp = c.call(fetch_v, &req).await;
            assert_eq!(
                resp.groups[0].topics[0].partitions[0].committed_offset,
                expected
            );
        } else {
            let resp = c.call(fetch_v, &OffsetFetchRequest::default().with_group_id(gid(&group)).with_topics(Some(vec![
                weir_protocol::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(topic("t"))
                    .with_partition_indexes(vec![0]),
            ])))
            .await;
            let p = &resp.topics[0].partitions[0];
            assert_eq!(
                (p.committed_offset, p.metadata.as_deref()),
                (expected, Some("meta")),
                "OffsetFetch v{fetch_v}"
            );
        }

        let describe_v = version.min(6);
        let described = c
            .call(
                describe_v,
                &DescribeGroupsRequest::default().with_groups(vec![gid(&group)]),
            )
            .await;
        assert_eq!(
            described.groups[0].group_state.as_str(),
            "Stable",
            "DescribeGroups v{describe_v}"
        );
        let list_v = version.min(5);
        let listed = c.call(list_v, &ListGroupsRequest::default()).await;
        assert!(
            listed.groups.iter().any(|g| g.group_id.0.as_str() == group),
            "ListGroups v{list_v}"
        );

        let leave_v = version.min(5);
        let leave = if leave_v >= 3 {
            LeaveGroupRequest::default()
                .with_group_id(gid(&group))
                .with_members(vec![MemberIdentity::default().with_member_id(s(&member))])
        } else {
            LeaveGroupRequest::default()
                .with_group_id(gid(&group))
                .with_member_id(s(&member))
        };
        let left = c.call(leave_v, &leave).await;
        assert_eq!(left.error_code, 0, "LeaveGroup v{leave_v}");
        if leave_v >= 3 {
            assert_eq!(left.members[0].error_code, 0);
        }
        let delete_v = version.min(2);
        let deleted = c
            .call(
                delete_v,
                &DeleteGroupsRequest::default().with_groups_names(vec![gid(&group)]),
            )
            .await;
        assert_eq!(deleted.results[0].error_code, 0, "DeleteGroups v{delete_v}");
    }
    // An unknown group is Dead at every version, and from v6 on also
    // GROUP_ID_NOT_FOUND with Kafka's message.
    for version in 0..=6i16 {
        let described = c
            .call(
                version,
                &DescribeGroupsRequest::default().with_groups(vec![gid("never")]),
            )
            .await;
        let g = &described.groups[0];
        assert_eq!(g.group_state.as_str(), "Dead", "DescribeGroups v{version}");
        let expected = if version >= 6 { 69 } else { 0 };
        assert_eq!(g.error_code, expected, "DescribeGroups v{version}");
    }
    // A group's protocol cannot change under its members.
    let mut d = client(&cluster, 0, "d").await;
    let (member, generation) = join_alone(&mut d, "fixed", 5).await;
    d.call(5, &sync_request("fixed", &member, generation, None, &[], 5))
        .await;
    let other = JoinGroupRequest::default()
        .with_group_id(gid("fixed"))
        .with_session_timeout_ms(SESSION_MS)
        .with_protocol_type(s("connect"));
    assert_eq!(
        d.call(5, &other).await.error_code,
        23,
        "INCONSISTENT_GROUP_PROTOCOL"
    );
    let stale = d
        .call(
            4,
            &HeartbeatRequest::default()
                .with_group_id(gid("fixed"))
                .with_member_id(s(&member))
                .with_generation_id(0),
        )
        .await;
    assert_eq!(stale.error_code, 22, "ILLEGAL_GENERATION");
}

/// The user report behind the testkit: a member cut off from its
/// coordinator keeps running as a zombie. It is expelled exactly one session
/// timeout after its last heartbeat, and once healed, it is refused.
#[tokio::test(start_paused = true)]
async fn a_member_partitioned_from_its_coordinator_is_expelled_on_time_and_refused_after_healing() {
    let cluster = cluster(1).await;
    let mut a = client(&cluster, 0, "a").await;
    let mut b = client(&cluster, 0, "b").await;
    let (ma, _) = join_alone(&mut a, "g", 5).await;
    a.call(5, &sync_request("g", &ma, 1, None, &[(&ma, b"all")], 5))
        .await;
    let mb = start_join(&mut b, "g", 5).await;
    a.send_only(5, &join_request("g", &ma, None, 5)).await;
    let (_, _) = (finish_join(&mut a, 5).await, finish_join(&mut b, 5).await);
    b.send_only(5, &sync_request("g", &mb, 2, None, &[], 5))
        .await;
    a.call(
        5,
        &sync_request("g", &ma, 2, None, &[(&ma, b"A"), (&mb, b"B")], 5),
    )
    .await;
    b.recv::<SyncGroupRequest>(5).await;
    let last_contact = tokio::time::Instant::now();

    let cut = cluster
        .partition_client(
            ClientSelector::ClientId("a".into()),
            PartitionTarget::GroupCoordinator("g".into()),
        )
        .await
        .unwrap();
    // a keeps heartbeating into the void.
    a.send_only(4, &heartbeat_request("g", &ma, 2, None, 4))
        .await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(heartbeat(&mut b, "g", &mb, 2).await, 0);
    }
    tokio::time::sleep_until(last_contact + Duration::from_millis(10_001)).await;
    assert_eq!(heartbeat(&mut b, "g", &mb, 2).await, 27, "a was expelled");
    b.send_only(5, &join_request("g", &mb, None, 5)).await;
    let jb = finish_join(&mut b, 5).await;
    assert_eq!((jb.generation_id, jb.members.len()), (3, 1));

    assert!(cluster.remove_fault(cut).await.unwrap());
    let mut healed = client(&cluster, 0, "a").await;
    assert_eq!(
        heartbeat(&mut healed, "g", &ma, 2).await,
        25,
        "UNKNOWN_MEMBER_ID"
    );
    let commit = OffsetCommitRequest::default()
        .with_group_id(gid("g"))
        .with_generation_id_or_member_epoch(2)
        .with_member_id(s(&ma))
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(topic("t"))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(99),
                ]),
        ]);
    let refused = healed.call(8, &commit).await;
    assert_eq!(
        refused.topics[0].partitions[0].error_code, 25,
        "the zombie cannot commit"
    );
}

#[tokio::test(start_paused = true)]
async fn the_initial_rebalance_delay_set_on_the_builder_gathers_the_first_members() {
    let cluster = Cluster::builder()
        .group_initial_rebalance_delay(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let mut a = client(&cluster, 0, "a").await;
    let mut b = client(&cluster, 0, "b").await;
    let started = tokio::time::Instant::now();
    start_join(&mut a, "g", 5).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    start_join(&mut b, "g", 5).await;
    let (ja, jb) = (finish_join(&mut a, 5).await, finish_join(&mut b, 5).await);
    // b arrived during the delay, which therefore ran once more: 3 s + 3 s.
    assert_eq!(started.elapsed(), Duration::from_secs(6));
    assert_eq!((ja.generation_id, jb.generation_id), (1, 1));
    assert_eq!(
        ja.members.len() + jb.members.len(),
        2,
        "one generation with both"
    );
}

#[tokio::test(start_paused = true)]
async fn a_moved_coordinator_keeps_the_group_and_the_old_broker_answers_not_coordinator() {
    let cluster = cluster(3).await;
    let mut c = client(&cluster, 0, "c").await;
    let find = FindCoordinatorRequest::default()
        .with_key(s("g"))
        .with_key_type(0);
    let home = c.call(3, &find).await.node_id.0;
    let mut old = client(&cluster, home, "m").await;
    let (member, generation) = join_alone(&mut old, "g", 5).await;
    let synced = old
        .call(
            5,
            &sync_request("g", &member, generation, None, &[(&member, b"p")], 5),
        )
        .await;
    assert_eq!(synced.error_code, 0);

    let to = (home + 1) % 3;
    assert_eq!(cluster.move_coordinator("g", to).await.unwrap(), home);
    assert_eq!(c.call(3, &find).await.node_id.0, to);
    assert_eq!(
        heartbeat(&mut old, "g", &member, generation).await,
        16,
        "NOT_COORDINATOR from the old broker"
    );
    // The member, its generation and its session moved with the group.
    let mut new = client(&cluster, to, "m").await;
    assert_eq!(heartbeat(&mut new, "g", &member, generation).await, 0);
    assert_eq!(
        cluster
            .move_coordinator("g", 7)
            .await
            .unwrap_err()
            .to_string(),
        weir_testkit::TestkitError::UnknownBroker(7).to_string()
    );
}
