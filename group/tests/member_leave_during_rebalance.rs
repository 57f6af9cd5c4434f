//! A member that leaves while the coordinator holds its JoinGroup (the
//! rebalance waits for a slow member) leaves at once: its LeaveGroup does
//! not queue behind the held JoinGroup, which a broker answers first on a
//! shared connection.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use tokio::time::Instant;
use weir_group::member::ShutdownMode;
use weir_protocol::ApiKey;

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(start_paused = true)]
async fn a_planned_shutdown_during_a_rebalance_leaves_at_once() {
    let tk = testkit(4).await;
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", config("g"), &journal).await;
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    journal.wait_balanced(&["a", "b"], 4).await;
    // b's JoinGroup takes 6 s to arrive (within b's session, so the
    // coordinator waits for it): the coordinator holds a's meanwhile.
    let slow = Duration::from_secs(6);
    delay_next(&tk, "b", ApiKey::JoinGroup, slow).await;
    let joins_before = requests_of(&tk, ApiKey::JoinGroup, "a").await.len();
    let c = App::start(&tk.bootstrap(), "c", config("g"), &journal).await;
    let deadline = Instant::now() + LIMIT;
    while requests_of(&tk, ApiKey::JoinGroup, "a").await.len() == joins_before {
        assert!(Instant::now() < deadline, "a never rejoined");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rejoined_at = Instant::now();

    a.shut_down(ShutdownMode::Planned).await;
    let closed_in = rejoined_at.elapsed();
    let leaves = requests_of(&tk, ApiKey::LeaveGroup, "a").await;
    assert_eq!(leaves.len(), 1);
    let left_in = leaves[0].0 - rejoined_at;
    assert!(
        left_in < Duration::from_secs(1),
        "the LeaveGroup reached the coordinator {left_in:?} after the held JoinGroup"
    );
    assert!(
        closed_in < Duration::from_secs(1),
        "close took {closed_in:?}"
    );
    journal.wait_balanced(&["b", "c"], 4).await;
    assert_never_two_owners(&journal.entries());
    drop((b.stop().await, c.stop().await));
}
