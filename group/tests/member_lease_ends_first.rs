//! M3: the lease ends *before* the events that let the coordinator hand the
//! member's partitions to someone else, not after the membership task gets
//! round to it: on a fatal heartbeat answer while the membership task waits
//! for a slow revocation ack, and before the LeaveGroup that follows a
//! max.poll.interval timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use tokio::time::{Instant, sleep};
use weir_group::GroupError;
use weir_group::assignor::Assignor;
use weir_group::member::{AssignmentEvent, GroupMember};
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;

/// Waits (on tokio's clock, 100 ms steps, at most `limit`) until the
/// testkit has received a request of `client` that `pred` accepts; returns
/// when it arrived.
async fn wait_request(
    tk: &weir_testkit::Cluster,
    client: &str,
    api: ApiKey,
    limit: Duration,
    pred: impl Fn(&RequestKind) -> bool,
) -> Instant {
    let start = Instant::now();
    loop {
        if let Some((at, _)) = requests_of(tk, api, client)
            .await
            .into_iter()
            .find(|(_, b)| pred(b))
        {
            return at;
        }
        assert!(start.elapsed() < limit, "no matching {api:?} from {client}");
        sleep(Duration::from_millis(100)).await;
    }
}

/// Case 1: a's rebalance revokes one partition and the application takes
/// 5 s to ack it; meanwhile the first heartbeat of the new generation is
/// answered FENCED_INSTANCE_ID (another instance took `a`'s id and gets the
/// assignment at once). The retained partition's lease must end when that
/// answer arrives, not when the ack finally lets the membership task run.
#[tokio::test(start_paused = true)]
async fn a_fatal_heartbeat_answer_ends_the_lease_while_a_revocation_waits_for_its_ack() {
    let tk = testkit(2).await;
    let journal = Journal::default();
    let cooperative = || config("g").with_assignors([Assignor::CooperativeSticky]);
    let mut a = GroupMember::start(
        client(&tk.bootstrap(), "a").await,
        cooperative().with_instance_id("a-1"),
    )
    .unwrap();
    match a.next_event().await.unwrap() {
        AssignmentEvent::Assigned { partitions: p, .. } => assert_eq!(p.len(), 2),
        other => panic!("a's first event: {other:?}"),
    }
    let first_generation = a.generation();

    // b joins: a keeps one partition and revokes the other.
    let b = App::start(
        &tk.bootstrap(),
        "b",
        cooperative().with_instance_id("b-1"),
        &journal,
    )
    .await;
    let revocation = match a.next_event().await.unwrap() {
        AssignmentEvent::Revoked(r) => r,
        other => panic!("a's second event: {other:?}"),
    };
    assert_eq!(revocation.partitions.len(), 1);
    let generation = a.generation();
    assert!(generation > first_generation);
    assert!(a.lease().is_valid());
    fail_next(&tk, "a", ApiKey::Heartbeat, 82).await; // FENCED_INSTANCE_ID

    // The ack is held; the fenced heartbeat goes out one interval later.
    let revoked_at = Instant::now();
    let fenced_at = wait_request(
        &tk,
        "a",
        ApiKey::Heartbeat,
        Duration::from_secs(5),
        |b| matches!(b, RequestKind::Heartbeat(h) if h.generation_id == generation),
    )
    .await;
    // The in-memory testkit answers at once: 10 ms later the answer has
    // long been handled.
    sleep(Duration::from_millis(10)).await;
    assert!(
        !a.lease().is_valid(),
        "the lease outlived FENCED_INSTANCE_ID (answered {:?} after the revocation started)",
        fenced_at - revoked_at
    );
    assert!(a.metadata().is_err(), "no generation to commit with");

    sleep(Duration::from_secs(5).saturating_sub(revoked_at.elapsed())).await;
    assert!(!a.lease().is_valid());
    revocation.ack();
    // The retained partition is lost, then the member stops for good.
    let mut lost = false;
    loop {
        match a.next_event().await {
            Ok(AssignmentEvent::Lost(p)) => {
                assert_eq!(p.len(), 1);
                lost = true;
            }
            Err(GroupError::FencedInstance { .. }) => break,
            other => panic!("a after the fence: {other:?}"),
        }
    }
    assert!(lost, "the retained partition was reported lost");
    drop(b.stop().await);
}

/// Case 2: a dynamic member not polled within max.poll.interval.ms leaves
/// the group. The coordinator may rebalance as soon as it reads the
/// LeaveGroup, so the lease must already be over when it is sent; here the
/// LeaveGroup is held 5 s before the coordinator handles it.
#[tokio::test(start_paused = true)]
async fn the_lease_has_ended_when_the_poll_timeout_leave_group_is_sent() {
    let tk = testkit(2).await;
    let mut a = GroupMember::start(
        client(&tk.bootstrap(), "a").await,
        config("g").with_max_poll_interval(Duration::from_secs(3)),
    )
    .unwrap();
    match a.next_event().await.unwrap() {
        AssignmentEvent::Assigned { partitions: p, .. } => assert_eq!(p.len(), 2),
        other => panic!("a's first event: {other:?}"),
    }
    assert!(a.lease().is_valid());
    delay_next(&tk, "a", ApiKey::LeaveGroup, Duration::from_secs(5)).await;
    // a stops polling.
    let left_at = wait_request(
        &tk,
        "a",
        ApiKey::LeaveGroup,
        Duration::from_secs(10),
        |_| true,
    )
    .await;
    sleep(Duration::from_millis(10)).await;
    assert!(
        !a.lease().is_valid(),
        "the lease was still valid {:?} after the LeaveGroup was sent",
        left_at.elapsed()
    );
    assert!(a.metadata().is_err());
    match a.next_event().await.unwrap() {
        AssignmentEvent::Lost(p) => assert_eq!(p.len(), 2),
        other => panic!("a after leaving: {other:?}"),
    }
    a.close(weir_group::member::ShutdownMode::Default).await;
}
