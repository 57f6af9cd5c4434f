//! A member that reaches no broker for longer than `default.api.timeout.ms`
//! (every connection closes: a network outage) loses its partitions, and
//! after the outage rejoins: a transient outage is not fatal, as Java's
//! consumer, which looks for the coordinator again forever, shows.
//! Found by the group exactly-once checker (`integration/src/eos_group.rs`,
//! seed 6: a `Flap` with `reset: true`, `cut_ms: 8975`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use weir_group::member::{AssignmentEvent, GroupMember};
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn a_member_cut_off_past_the_api_timeout_rejoins_after_the_outage() {
    let tk = testkit(2).await;
    let config = weir_integration::testkit_dial::client_config(&tk, "a")
        .default_api_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let cluster = weir_client::Cluster::connect(config).await.unwrap();
    let mut member = GroupMember::start(cluster, config_for_outage()).unwrap();
    loop {
        match tokio::time::timeout(LIMIT, member.next_event()).await {
            Ok(Ok(AssignmentEvent::Assigned { partitions: p, .. })) if !p.is_empty() => break,
            Ok(Ok(_)) => {}
            other => panic!("before the outage: {other:?}"),
        }
    }
    let outage = tk
        .intercept(Intercept::new(
            RequestMatcher::any().client("a"),
            InterceptAction::CloseConnection,
        ))
        .await
        .unwrap();
    match tokio::time::timeout(LIMIT, member.next_event()).await {
        Ok(Ok(AssignmentEvent::Lost(p))) => assert_eq!(p.len(), 2),
        other => panic!("during the outage: {other:?}"),
    }
    // The outage lasts well past the 5 s API timeout (the modelled fault's
    // length, on the paused clock; nothing waits on it).
    tokio::time::sleep(Duration::from_secs(12)).await;
    tk.remove_fault(outage).await.unwrap();
    loop {
        match tokio::time::timeout(LIMIT, member.next_event()).await {
            Ok(Ok(AssignmentEvent::Assigned { partitions: p, .. })) if !p.is_empty() => break,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("the membership did not survive the outage: {e}"),
            Err(_) => panic!("no assignment within {LIMIT:?} after the outage"),
        }
    }
    assert!(member.metadata().unwrap().generation > 0);
}

/// The shared member settings, with max.poll.interval above the outage.
fn config_for_outage() -> weir_group::member::MemberConfig {
    config("g").with_max_poll_interval(Duration::from_secs(60))
}
