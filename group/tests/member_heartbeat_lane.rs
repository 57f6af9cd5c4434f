//! Heartbeats travel on a connection of their own. A broker answers one
//! connection's requests in order (the testkit too), so if heartbeats
//! shared the coordinator connection, a slow OffsetCommit would hold them
//! back until the session expired, and the member would lose its partitions
//! for nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use tokio::time::Instant;
use weir_group::assignor::TopicPartition;
use weir_group::member::{AssignmentEvent, GroupMember};
use weir_protocol::ApiKey;

#[tokio::test(start_paused = true)]
async fn a_commit_slower_than_the_session_does_not_hold_back_heartbeats() {
    let tk = testkit(2).await;
    let cluster = client(&tk.bootstrap(), "a").await;
    // Polling is not what this test is about: the member is not polled
    // while it waits for the commit.
    let config = config("g").with_max_poll_interval(Duration::from_secs(120));
    let mut member = GroupMember::start(cluster, config).unwrap();
    match member.next_event().await.unwrap() {
        AssignmentEvent::Assigned { partitions: p, .. } => assert_eq!(p.len(), 2),
        other => panic!("unexpected {other:?}"),
    }
    let generation = member.generation();
    let member_id = member.metadata().unwrap().member_id;

    // The coordinator takes 2.5 sessions to answer the commit.
    let slow = SESSION * 5 / 2;
    delay_next(&tk, "a", ApiKey::OffsetCommit, slow).await;
    let sent = Instant::now();
    member
        .commit(&[(TopicPartition::new(TOPIC, 0), 7)])
        .await
        .unwrap();
    assert!(sent.elapsed() >= slow, "the commit was held back");

    // Heartbeats went on meanwhile, each one heartbeat interval (1 s) after
    // the one before: none waited behind the commit (on a shared connection
    // the next one would have waited until its request timed out).
    let beats: Vec<Instant> = requests_of(&tk, ApiKey::Heartbeat, "a")
        .await
        .into_iter()
        .map(|(at, _)| at)
        .filter(|at| *at > sent && *at < sent + slow)
        .collect();
    assert!(
        beats.len() >= 20,
        "{} heartbeats during the commit",
        beats.len()
    );
    let longest_gap = std::iter::once(sent)
        .chain(beats.iter().copied())
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap();
    assert!(
        longest_gap <= Duration::from_millis(1500),
        "a heartbeat waited {longest_gap:?}"
    );
    // Still the same member of the same generation, owning the same
    // partitions, with a lease that holds: nothing was lost or rebalanced.
    assert_eq!(member.generation(), generation);
    assert_eq!(member.metadata().unwrap().member_id, member_id);
    assert_eq!(member.assignment().len(), 2);
    assert!(member.lease().is_valid());
    let event = tokio::time::timeout(Duration::from_millis(1), member.next_event()).await;
    assert!(event.is_err(), "no event expected, got {event:?}");
    assert_eq!(
        requests_of(&tk, ApiKey::JoinGroup, "a").await.len(),
        2,
        "only the first join (with MEMBER_ID_REQUIRED) and its retry"
    );
}
