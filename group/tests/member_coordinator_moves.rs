//! The group's coordinator moves to another broker (as when leadership of
//! its `__consumer_offsets` partition moves), on a 3-broker testkit and
//! paused time: members find it again and carry on without a rebalance, a
//! rebalance caught by the move completes, and offsets survive it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use tokio::time::Instant;
use weir_client::cluster::CoordinatorKind;
use weir_group::assignor::TopicPartition;
use weir_group::member::{AssignmentEvent, GroupMember};
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

const LIMIT: Duration = Duration::from_secs(60);

async fn three_brokers(partitions: i32) -> std::sync::Arc<weir_testkit::Cluster> {
    testkit_with(weir_testkit::Cluster::builder().brokers(3), partitions).await
}

/// Moves the coordinator of `group` to the next broker; returns (from, to).
async fn move_coordinator(tk: &weir_testkit::Cluster, group: &str) -> (i32, i32) {
    let probe = client(&tk.bootstrap(), "probe").await;
    let from = probe
        .find_coordinator(CoordinatorKind::Group, group)
        .await
        .unwrap();
    let to = (from + 1) % 3;
    assert_eq!(tk.move_coordinator(group, to).await.unwrap(), from);
    (from, to)
}

/// (when, to which broker, member id, generation) of every Heartbeat
/// `client` sent.
async fn heartbeats(tk: &weir_testkit::Cluster, client: &str) -> Vec<(Instant, i32, String, i32)> {
    tk.requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.client_id.as_deref() == Some(client))
        .filter_map(|r| match r.body {
            RequestKind::Heartbeat(h) => {
                Some((r.at, r.broker_id, h.member_id.to_string(), h.generation_id))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_stable_group_follows_its_coordinator_without_a_rebalance() {
    let tk = three_brokers(4).await;
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", config("g"), &journal).await;
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    journal.wait_balanced(&["a", "b"], 4).await;
    let owners_before = journal.owners();
    let events_before = journal.non_writes().len();
    let joins_before = requests_of(&tk, ApiKey::JoinGroup, "a").await.len()
        + requests_of(&tk, ApiKey::JoinGroup, "b").await.len();

    let (from, to) = move_coordinator(&tk, "g").await;
    let moved_at = Instant::now();
    // Three sessions: long enough for the coordinator to have expired both
    // members had their heartbeats stopped at the old broker.
    tokio::time::sleep(SESSION * 3).await;

    for who in ["a", "b"] {
        let beats = heartbeats(&tk, who).await;
        let after: Vec<_> = beats.iter().filter(|(at, ..)| *at > moved_at).collect();
        let generation = journal.last_generation(who);
        let member_id = after[0].2.clone();
        // At most one heartbeat went to the old broker (NOT_COORDINATOR),
        // then every one to the new coordinator, as the same member of the
        // same generation.
        let brokers: Vec<i32> = after.iter().map(|(_, b, ..)| *b).collect();
        assert!(
            brokers.iter().filter(|b| **b == from).count() <= 1,
            "{who}: {brokers:?}"
        );
        assert!(
            brokers.iter().filter(|b| **b == to).count() >= 25,
            "{who}: {brokers:?}"
        );
        assert!(
            after
                .iter()
                .all(|(_, _, m, g)| *m == member_id && *g == generation),
            "{who}: {after:?}"
        );
    }
    // No JoinGroup, no event: same member ids, generation and partitions.
    let joins_after = requests_of(&tk, ApiKey::JoinGroup, "a").await.len()
        + requests_of(&tk, ApiKey::JoinGroup, "b").await.len();
    assert_eq!(joins_after, joins_before, "no rejoin");
    assert_eq!(
        journal.non_writes().len(),
        events_before,
        "no assignment event: {:#?}",
        journal.non_writes()
    );
    assert_eq!(journal.owners(), owners_before);
    // Both went on writing throughout: their leases never lapsed.
    for who in ["a", "b"] {
        let last_write = journal
            .entries()
            .iter()
            .rev()
            .find_map(|e| match e {
                Entry::Write { at, who: w, .. } if w == who => Some(*at),
                _ => None,
            })
            .unwrap();
        assert!(Instant::now() - last_write <= Duration::from_millis(200));
    }
    drop((a.stop().await, b.stop().await));
}

#[tokio::test(start_paused = true)]
async fn a_rebalance_caught_by_a_coordinator_move_completes() {
    let tk = three_brokers(4).await;
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", config("g"), &journal).await;
    journal.wait_balanced(&["a"], 4).await;
    // The next SyncGroups are held for a second: the coordinator moves
    // after the JoinGroups were answered and before the SyncGroups are.
    tk.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::SyncGroup),
            InterceptAction::Delay(Duration::from_secs(1)),
        )
        .times(2),
    )
    .await
    .unwrap();
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    let deadline = Instant::now() + LIMIT;
    while requests_of(&tk, ApiKey::SyncGroup, "b").await.is_empty() {
        assert!(Instant::now() < deadline, "b never sent SyncGroup");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_, to) = move_coordinator(&tk, "g").await;
    journal.wait_balanced(&["a", "b"], 4).await;
    assert_never_two_owners(&journal.entries());
    // The rebalance finished at the new coordinator.
    let last_sync = tk
        .requests()
        .await
        .unwrap()
        .into_iter()
        .rev()
        .find(|r| r.api_key == ApiKey::SyncGroup)
        .unwrap();
    assert_eq!(last_sync.broker_id, to);
    drop((a.stop().await, b.stop().await));
}

#[tokio::test(start_paused = true)]
async fn offsets_committed_before_a_move_are_fetched_after_it() {
    let tk = three_brokers(2).await;
    let cluster = client(&tk.bootstrap(), "a").await;
    let mut member = GroupMember::start(cluster.clone(), config("g")).unwrap();
    match member.next_event().await.unwrap() {
        AssignmentEvent::Assigned { partitions: p, .. } => assert_eq!(p.len(), 2),
        other => panic!("unexpected {other:?}"),
    }
    let offsets = [
        (TopicPartition::new(TOPIC, 0), 11),
        (TopicPartition::new(TOPIC, 1), 22),
    ];
    member.commit(&offsets).await.unwrap();
    let generation = member.generation();

    let (from, to) = move_coordinator(&tk, "g").await;
    let partitions: Vec<TopicPartition> = offsets.iter().map(|(tp, _)| tp.clone()).collect();
    // The client still has the old coordinator cached: its first try gets
    // NOT_COORDINATOR, and the fetch finds the new one.
    let fetched = weir_group::offsets::fetch_committed(&cluster, "g", &partitions, false)
        .await
        .unwrap();
    assert_eq!(fetched, offsets.iter().cloned().collect());
    let fetches: Vec<i32> = tk
        .requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| matches!(r.body, RequestKind::OffsetFetch(_)))
        .map(|r| r.broker_id)
        .collect();
    assert_eq!(fetches.last(), Some(&to), "{fetches:?} (moved from {from})");
    // A commit after the move goes to the new coordinator, in the same
    // generation.
    member
        .commit(&[(TopicPartition::new(TOPIC, 0), 12)])
        .await
        .unwrap();
    assert_eq!(member.generation(), generation);
    let fetched = weir_group::offsets::fetch_committed(&cluster, "g", &partitions, false)
        .await
        .unwrap();
    assert_eq!(fetched[&TopicPartition::new(TOPIC, 0)], 12);
}
