//! Join, leave, crash, static restart, planned shutdown and cooperative and
//! eager revocation against weir-testkit, on paused time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use tokio::time::Instant;
use weir_client::cluster::CoordinatorKind;
use weir_group::assignor::Assignor;
use weir_group::member::ShutdownMode;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;
use weir_testkit::{ClientSelector, PartitionTarget};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn two_members_join_and_split_the_partitions() {
    let tk = testkit(6).await;
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", config("g"), &journal).await;
    journal.wait_balanced(&["a"], 6).await;
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    journal.wait_balanced(&["a", "b"], 6).await;
    let entries = journal.entries();
    assert_never_two_owners(&entries);
    // Cooperative: a gave back only what moved, and nothing was lost.
    assert!(!entries.iter().any(|e| matches!(e, Entry::Lost { .. })));
    let revoked: Vec<_> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Revoked {
                who, partitions, ..
            } if who == "a" => Some(partitions.len()),
            _ => None,
        })
        .collect();
    assert_eq!(revoked, vec![3], "a revokes exactly the three that move");
    // KIP-394: the first JoinGroup has no member id, the second the given one.
    let joins = requests_of(&tk, ApiKey::JoinGroup, "b").await;
    let ids: Vec<String> = joins
        .iter()
        .filter_map(|(_, body)| match body {
            RequestKind::JoinGroup(j) => Some(j.member_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(ids[0], "");
    assert!(!ids[1].is_empty(), "{ids:?}");
    // max.poll.interval.ms is the rebalance timeout.
    assert!(joins.iter().all(
        |(_, body)| matches!(body, RequestKind::JoinGroup(j) if j.rebalance_timeout_ms == 20_000)
    ));
    drop((a.stop().await, b.stop().await));
}

#[tokio::test(start_paused = true)]
async fn eager_members_revoke_everything_before_rejoining() {
    let tk = testkit(4).await;
    let journal = Journal::default();
    let range = || config("g").with_assignors([Assignor::Range]);
    let a = App::start(&tk.bootstrap(), "a", range(), &journal).await;
    journal.wait_balanced(&["a"], 4).await;
    let b = App::start(&tk.bootstrap(), "b", range(), &journal).await;
    journal.wait_balanced(&["a", "b"], 4).await;
    let entries = journal.entries();
    assert_never_two_owners(&entries);
    assert!(entries.iter().any(|e| matches!(e, Entry::Revoked { who, partitions, .. } if who == "a" && partitions.len() == 4)));
    drop((a.stop().await, b.stop().await));
}

#[tokio::test(start_paused = true)]
async fn a_leaving_member_hands_over_at_once() {
    let tk = testkit(4).await;
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", config("g"), &journal).await;
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    journal.wait_balanced(&["a", "b"], 4).await;
    let left_at = Instant::now();
    a.stop().await.close(ShutdownMode::Default).await;
    assert_eq!(requests_of(&tk, ApiKey::LeaveGroup, "a").await.len(), 1);
    journal.wait_balanced(&["b"], 4).await;
    assert!(
        left_at.elapsed() < SESSION / 2,
        "no session timeout was waited for"
    );
    drop(b.stop().await);
}

#[tokio::test(start_paused = true)]
async fn a_crashed_member_is_replaced_after_the_session_timeout() {
    let tk = testkit(4).await;
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", config("g"), &journal).await;
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    journal.wait_balanced(&["a", "b"], 4).await;
    // A crash: a's process is gone, so nothing more from it reaches the broker.
    tk.partition_client(
        ClientSelector::ClientId("a".into()),
        PartitionTarget::Broker(0),
    )
    .await
    .unwrap();
    let crashed_at = Instant::now();
    let member = a.stop().await;
    journal.wait_balanced(&["b"], 4).await;
    let took = crashed_at.elapsed();
    assert!(
        took >= SESSION - Duration::from_secs(1),
        "b took over after {took:?}"
    );
    assert!(
        took <= SESSION + Duration::from_secs(3),
        "b took over after {took:?}"
    );
    drop(member);
    drop(b.stop().await);
}

#[tokio::test(start_paused = true)]
async fn a_static_member_restarts_without_a_rebalance() {
    let tk = testkit(4).await;
    let journal = Journal::default();
    let a = App::start(
        &tk.bootstrap(),
        "a",
        config("g").with_instance_id("a-1"),
        &journal,
    )
    .await;
    let b = App::start(
        &tk.bootstrap(),
        "b",
        config("g").with_instance_id("b-1"),
        &journal,
    )
    .await;
    journal.wait_balanced(&["a", "b"], 4).await;
    let generation = journal.last_generation("b");
    let before = journal.owners()["a"].clone();
    a.stop().await.close(ShutdownMode::Default).await;
    assert!(
        requests_of(&tk, ApiKey::LeaveGroup, "a").await.is_empty(),
        "a static member does not leave"
    );
    tokio::time::sleep(SESSION / 3).await;
    let seen = journal.entries().len();
    let a2 = App::start(
        &tk.bootstrap(),
        "a2",
        config("g").with_instance_id("a-1"),
        &journal,
    )
    .await;
    journal
        .wait_for(LIMIT, "a2 assigned", |e| {
            e.iter()
                .any(|x| matches!(x, Entry::Assigned { who, .. } if who == "a2"))
        })
        .await;
    let after: Vec<Entry> = journal
        .non_writes()
        .into_iter()
        .filter(|e| e.who() != "a")
        .collect();
    let a2_assigned = after.iter().find_map(|e| match e {
        Entry::Assigned {
            who,
            partitions,
            generation,
            ..
        } if who == "a2" => Some((partitions.clone(), *generation)),
        _ => None,
    });
    let (partitions, a2_generation) = a2_assigned.unwrap();
    assert_eq!(
        partitions
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>(),
        before,
        "same partitions back"
    );
    assert_eq!(
        a2_generation, generation,
        "no rebalance: the generation did not change"
    );
    // b saw nothing at all.
    assert!(
        journal.entries()[seen..]
            .iter()
            .all(|e| e.who() != "b" || matches!(e, Entry::Write { .. }))
    );
    drop((a2.stop().await, b.stop().await));
}

#[tokio::test(start_paused = true)]
async fn a_planned_shutdown_of_a_static_member_leaves_at_once() {
    let tk = testkit(4).await;
    let journal = Journal::default();
    let a = App::start(
        &tk.bootstrap(),
        "a",
        config("g").with_instance_id("a-1"),
        &journal,
    )
    .await;
    let b = App::start(
        &tk.bootstrap(),
        "b",
        config("g").with_instance_id("b-1"),
        &journal,
    )
    .await;
    journal.wait_balanced(&["a", "b"], 4).await;
    let started = Instant::now();
    a.stop().await.close(ShutdownMode::Planned).await;
    assert_eq!(requests_of(&tk, ApiKey::LeaveGroup, "a").await.len(), 1);
    journal.wait_balanced(&["b"], 4).await;
    assert!(started.elapsed() < SESSION / 2);
    drop(b.stop().await);
}

#[tokio::test(start_paused = true)]
async fn a_member_not_polled_within_max_poll_interval_leaves() {
    let tk = testkit(2).await;
    let journal = Journal::default();
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    journal.wait_balanced(&["b"], 2).await;
    let cluster = client(&tk.bootstrap(), "a").await;
    let mut idle = weir_group::member::GroupMember::start(
        cluster.clone(),
        config("g").with_max_poll_interval(Duration::from_secs(5)),
    )
    .unwrap();
    // Poll until a has its partition, then stop polling.
    loop {
        if let weir_group::member::AssignmentEvent::Assigned { partitions: p, .. } =
            idle.next_event().await.unwrap()
            && !p.is_empty()
        {
            break;
        }
    }
    let stopped_polling = Instant::now();
    journal.wait_balanced(&["b"], 2).await;
    let leaves = requests_of(&tk, ApiKey::LeaveGroup, "a").await;
    assert_eq!(leaves.len(), 1);
    let waited = leaves[0].0 - stopped_polling;
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(7),
        "{waited:?}"
    );
    assert!(idle.lease().valid_generation().is_none());
    // The coordinator of the group was found through the client.
    assert!(
        cluster
            .find_coordinator(CoordinatorKind::Group, "g")
            .await
            .is_ok()
    );
    drop(b.stop().await);
}
