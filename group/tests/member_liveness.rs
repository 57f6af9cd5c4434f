//! Liveness of the membership under transient failures and slow
//! applications (review 00c3a60: M6, M7, M8, m5, m7), on the testkit with
//! tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use tokio::time::Instant;
use weir_group::assignor::Assignor;
use weir_group::member::{AssignmentEvent, GroupMember};
use weir_protocol::ApiKey;
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

const LIMIT: Duration = Duration::from_secs(120);

fn fatal(entries: &[Entry]) -> Vec<Entry> {
    entries
        .iter()
        .filter(|e| matches!(e, Entry::Fatal { .. }))
        .cloned()
        .collect()
}

/// Polls `member` until it is assigned something.
async fn until_assigned(member: &mut GroupMember) -> Vec<weir_group::assignor::TopicPartition> {
    tokio::time::timeout(LIMIT, async {
        loop {
            if let AssignmentEvent::Assigned { partitions: p, .. } =
                member.next_event().await.unwrap()
                && !p.is_empty()
            {
                return p;
            }
        }
    })
    .await
    .expect("assigned in time")
}

/// M6: the leader's Metadata request is lost once during the join. The
/// member must retry the join (as Java does), not stop for good.
#[tokio::test(start_paused = true)]
async fn a_lost_metadata_request_in_the_leaders_assignment_is_retried() {
    let tk = testkit(2).await;
    let journal = Journal::default();
    // Connected first, so the next Metadata requests of "a" are the
    // leader's for its assignment. The client tries each broker it knows
    // (broker 0, then the bootstrap address): both tries are lost, so the
    // leader's refresh fails.
    let cluster = client(&tk.bootstrap(), "a").await;
    let metadata_before = requests_of(&tk, ApiKey::Metadata, "a").await.len();
    tk.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::Metadata).client("a"),
            InterceptAction::Drop,
        )
        .times(2),
    )
    .await
    .unwrap();
    let member = GroupMember::start(cluster, config("g")).unwrap();
    let a = App::run(member, "a", &journal);
    // Each lost try takes the request timeout (30 s).
    journal
        .wait_for(LIMIT, "a owns both partitions, no fatal error", |e| {
            balanced(e, &["a"], 2) || !fatal(e).is_empty()
        })
        .await;
    assert!(
        fatal(&journal.entries()).is_empty(),
        "{:?}",
        journal.non_writes()
    );
    assert!(
        requests_of(&tk, ApiKey::Metadata, "a").await.len() >= metadata_before + 2,
        "the Metadata request was sent again"
    );
    assert!(
        join_member_ids(&tk, "a").await.len() >= 2,
        "the member joined again"
    );
    drop(a.stop().await);
}

/// M8: a static member whose application stops polling gives up its
/// generation and stops heartbeating after `max.poll.interval.ms` (Java's
/// resetGenerationOnLeaveGroup), without a LeaveGroup; the coordinator
/// expires it after the session timeout and another member gets its
/// partitions.
#[tokio::test(start_paused = true)]
async fn a_static_member_not_polled_within_max_poll_interval_is_expired() {
    let tk = testkit(2).await;
    let journal = Journal::default();
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    journal.wait_balanced(&["b"], 2).await;
    let cluster = client(&tk.bootstrap(), "a").await;
    let mut idle = GroupMember::start(
        cluster,
        config("g")
            .with_instance_id("a-1")
            .with_max_poll_interval(Duration::from_secs(5)),
    )
    .unwrap();
    until_assigned(&mut idle).await;
    journal
        .wait_for(LIMIT, "b owns one partition", |e| {
            owners(e).get("b").is_some_and(|s| s.len() == 1)
        })
        .await;
    let stopped_polling = Instant::now();
    let lease = idle.lease();
    // a never polls again: b must end up with both partitions.
    journal.wait_balanced(&["b"], 2).await;
    let took = stopped_polling.elapsed();
    assert!(
        took <= Duration::from_secs(5) + SESSION + Duration::from_secs(4),
        "b took over after {took:?}"
    );
    assert!(!lease.is_valid());
    assert!(idle.metadata().is_err(), "the generation was reset");
    // Static: no LeaveGroup, and no heartbeat after the poll timeout.
    assert!(requests_of(&tk, ApiKey::LeaveGroup, "a").await.is_empty());
    let late_heartbeats = requests_of(&tk, ApiKey::Heartbeat, "a")
        .await
        .into_iter()
        .filter(|(at, _)| *at > stopped_polling + Duration::from_secs(7))
        .count();
    assert_eq!(late_heartbeats, 0);
    // The same event a dynamic member gets: its partitions are lost.
    let event = tokio::time::timeout(Duration::from_secs(1), idle.next_event())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(event, AssignmentEvent::Lost(ref p) if p.len() == 1),
        "{event:?}"
    );
    drop(b.stop().await);
}

/// M7: under an eager rebalance the old generation keeps heartbeating while
/// the application handles `Revoked`, so a revocation handler longer than
/// the session timeout (but within max.poll.interval) keeps the membership
/// and its commit succeeds.
#[tokio::test(start_paused = true)]
async fn eager_revocation_longer_than_the_session_keeps_heartbeating() {
    let tk = testkit(2).await;
    let session = Duration::from_secs(45);
    let eager = || {
        config("g")
            .with_assignors([Assignor::Range])
            .with_session_timeout(session)
            .with_heartbeat_interval(Duration::from_secs(3))
            .with_max_poll_interval(Duration::from_secs(120))
    };
    let cluster = client(&tk.bootstrap(), "a").await;
    let mut a = GroupMember::start(cluster, eager()).unwrap();
    until_assigned(&mut a).await;
    // b joins: a's heartbeat is answered REBALANCE_IN_PROGRESS.
    let journal = Journal::default();
    let b = App::start(&tk.bootstrap(), "b", eager(), &journal).await;
    let revocation = tokio::time::timeout(LIMIT, async {
        loop {
            if let AssignmentEvent::Revoked(r) = a.next_event().await.unwrap() {
                return r;
            }
        }
    })
    .await
    .unwrap();
    let revoked_at = Instant::now();
    // The handler takes 50 s, longer than the 45 s session.
    tokio::time::sleep(Duration::from_secs(50)).await;
    let offsets: Vec<_> = revocation
        .partitions
        .iter()
        .cloned()
        .map(|tp| (tp, 1))
        .collect();
    a.commit(&offsets).await.unwrap();
    revocation.ack();
    let heartbeats = requests_of(&tk, ApiKey::Heartbeat, "a")
        .await
        .into_iter()
        .filter(|(at, _)| *at > revoked_at && *at < revoked_at + Duration::from_secs(50))
        .count();
    assert!(
        heartbeats >= 10,
        "{heartbeats} heartbeats during the handler"
    );
    // a rejoins and is assigned: nothing is lost.
    let event = tokio::time::timeout(LIMIT, a.next_event())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(event, AssignmentEvent::Assigned { partitions: ref p, .. } if p.len() == 1),
        "{event:?}"
    );
    journal
        .wait_for(LIMIT, "b owns one partition", |e| {
            owners(e).get("b").is_some_and(|s| s.len() == 1)
        })
        .await;
    drop(b.stop().await);
}

/// m5: with max.poll.interval (the rebalance timeout) below the session
/// timeout, the lease given during the join lasts no longer than the
/// coordinator waits for the SyncGroup: min(session, rebalance) - margin.
#[tokio::test(start_paused = true)]
async fn the_join_lease_is_bounded_by_the_rebalance_timeout() {
    // Measures the lease from a JoinGroup answered at once: no 3 s initial
    // rebalance delay in between.
    let tk = testkit_with(weir_testkit::Cluster::builder().instant_timing(), 2).await;
    let cluster = client(&tk.bootstrap(), "a").await;
    tk.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::SyncGroup).client("a"),
            InterceptAction::Delay(Duration::from_secs(6)),
        )
        .times(1),
    )
    .await
    .unwrap();
    // Session 10 s, margin 2 s, rebalance timeout 4 s: the lease is 2 s.
    let member = GroupMember::start(
        cluster,
        config("g").with_max_poll_interval(Duration::from_secs(4)),
    )
    .unwrap();
    let lease = member.lease();
    let joined_at = loop {
        if let Some((at, _)) = requests_of(&tk, ApiKey::SyncGroup, "a").await.first() {
            break *at;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(lease.is_valid(), "valid right after the join");
    let join_sent = requests_of(&tk, ApiKey::JoinGroup, "a")
        .await
        .last()
        .unwrap()
        .0;
    assert!(joined_at - join_sent < Duration::from_secs(1));
    tokio::time::sleep_until(join_sent + Duration::from_millis(2500)).await;
    assert!(
        !lease.is_valid(),
        "the lease outlives the rebalance timeout"
    );
    drop(member);
}

/// m5, stable phase: a rebalance may start right after any heartbeat, and
/// then the coordinator waits only the rebalance timeout for the rejoin, so
/// a heartbeat's lease is min(session, rebalance) - margin too.
#[tokio::test(start_paused = true)]
async fn the_heartbeat_lease_is_bounded_by_the_rebalance_timeout() {
    let tk = testkit(2).await;
    let journal = Journal::default();
    let a = App::start(
        &tk.bootstrap(),
        "a",
        config("g").with_max_poll_interval(Duration::from_secs(4)),
        &journal,
    )
    .await;
    journal.wait_balanced(&["a"], 2).await;
    tk.intercept(Intercept::new(
        RequestMatcher::api(ApiKey::Heartbeat).client("a"),
        InterceptAction::Drop,
    ))
    .await
    .unwrap();
    let cut = Instant::now();
    journal
        .wait_for(LIMIT, "lost", |e| {
            e.iter().any(|x| matches!(x, Entry::Lost { .. }))
        })
        .await;
    let last_write = journal
        .entries()
        .iter()
        .filter_map(|e| match e {
            Entry::Write { at, .. } => Some(*at),
            _ => None,
        })
        .max()
        .unwrap();
    assert!(
        last_write < cut + Duration::from_secs(2),
        "wrote {:?} after the last answered heartbeat",
        last_write - cut
    );
    drop(a.stop().await);
}

/// M6: a member whose subscription does not decode is assigned nothing;
/// the leader goes on (it used to stop, and so would every leader after it).
#[tokio::test(start_paused = true)]
async fn a_subscription_that_does_not_decode_is_assigned_nothing() {
    use weir_client::cluster::{CoordinatorKind, Lane};
    use weir_protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use weir_protocol::kafka_protocol::messages::{GroupId, JoinGroupRequest};
    use weir_protocol::kafka_protocol::protocol::StrBytes;

    let tk = testkit(2).await;
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", config("g"), &journal).await;
    journal.wait_balanced(&["a"], 2).await;
    let generation = journal.last_generation("a");
    // A foreign static member joins with a subscription that is garbage.
    let x = client(&tk.bootstrap(), "x").await;
    let coordinator = x
        .find_coordinator(CoordinatorKind::Group, "g")
        .await
        .unwrap();
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(20_000)
        .with_member_id(StrBytes::from_static_str(""))
        .with_group_instance_id(Some(StrBytes::from_static_str("x-1")))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("cooperative-sticky"))
                .with_metadata(bytes::Bytes::from_static(b"\x00\x01\xff\xff\xff")),
        ]);
    let joining = tokio::spawn(async move {
        x.request_with_timeout(coordinator, Lane::Coordinator, &join, LIMIT)
            .await
    });
    let joined = tokio::time::timeout(LIMIT, joining)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(joined.error_code, 0);
    assert!(joined.generation_id > generation, "a rebalance happened");
    // a led the round and kept both partitions.
    journal
        .wait_for(LIMIT, "a assigned in the new generation", |e| {
            e.iter().any(|x| {
                matches!(x, Entry::Assigned { who, generation: g, .. } if who == "a" && *g == joined.generation_id)
            }) || !fatal(e).is_empty()
        })
        .await;
    assert!(
        fatal(&journal.entries()).is_empty(),
        "{:?}",
        journal.non_writes()
    );
    assert_eq!(journal.owners().get("a").map(|s| s.len()), Some(2));
    drop(a.stop().await);
}

/// m6: a cooperative member keeps heartbeating while its JoinGroup waits
/// for a slow member, so the lease of the partitions it keeps stays valid
/// and it goes on writing for them throughout the rebalance.
#[tokio::test(start_paused = true)]
async fn a_cooperative_member_keeps_its_lease_during_a_long_join() {
    let tk = testkit(4).await;
    let journal = Journal::default();
    let cfg = || config("g").with_max_poll_interval(Duration::from_secs(60));
    let a = App::start(&tk.bootstrap(), "a", cfg(), &journal).await;
    let b = App::start(&tk.bootstrap(), "b", cfg(), &journal).await;
    journal.wait_balanced(&["a", "b"], 4).await;
    // b's JoinGroup of the next rebalance reaches the coordinator 15 s
    // late (more than the 8 s lease): a's JoinGroup waits that long.
    delay_next(&tk, "b", ApiKey::JoinGroup, Duration::from_secs(15)).await;
    let started = Instant::now();
    let c = App::start(&tk.bootstrap(), "c", cfg(), &journal).await;
    journal.wait_balanced(&["a", "b", "c"], 4).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(15),
        "the rebalance took {took:?}"
    );
    let mut writes: Vec<Instant> = journal
        .entries()
        .iter()
        .filter_map(|e| match e {
            Entry::Write { at, who, .. } if who == "a" && *at >= started => Some(*at),
            _ => None,
        })
        .collect();
    writes.dedup();
    let gap = writes
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    assert!(
        gap < Duration::from_secs(1),
        "a stopped writing for {gap:?} during the rebalance"
    );
    assert!(fatal(&journal.entries()).is_empty());
    for app in [a, b, c] {
        drop(app.stop().await);
    }
}

/// A member that left on `max.poll.interval.ms` joins again only after the
/// application polls (and so sees that it lost its partitions): a rebalance
/// asked for meanwhile (`request_rejoin`) must not bring it back first, or
/// the application would go on with partitions it no longer owns.
#[tokio::test(start_paused = true)]
async fn a_rejoin_asked_for_after_a_poll_timeout_waits_for_the_poll() {
    let tk = testkit(2).await;
    let cluster = client(&tk.bootstrap(), "a").await;
    let mut idle = GroupMember::start(
        cluster,
        config("g").with_max_poll_interval(Duration::from_secs(5)),
    )
    .unwrap();
    until_assigned(&mut idle).await;
    // No poll from here on: after max.poll.interval the member leaves.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(!idle.lease().is_valid());
    assert_eq!(requests_of(&tk, ApiKey::LeaveGroup, "a").await.len(), 1);
    let joins = requests_of(&tk, ApiKey::JoinGroup, "a").await.len();
    idle.request_rejoin();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        requests_of(&tk, ApiKey::JoinGroup, "a").await.len(),
        joins,
        "no JoinGroup before the application polled"
    );
    assert!(!idle.lease().is_valid());
    // The poll: first the loss, then the member joins again.
    let event = tokio::time::timeout(Duration::from_secs(1), idle.next_event())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(event, AssignmentEvent::Lost(_)), "{event:?}");
    until_assigned(&mut idle).await;
    assert!(requests_of(&tk, ApiKey::JoinGroup, "a").await.len() > joins);
}
