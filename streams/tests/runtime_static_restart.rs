//! A static member killed while it revokes a task and restarted within the
//! session timeout, on the in-process cluster under tokio's paused clock.
//!
//! The coordinator hands the restarted member its cached assignment with no
//! rebalance (KIP-345), and that assignment no longer holds the task being
//! moved, so the member has nothing to revoke and never rejoins: the
//! follow-up rebalance that gives the task's partition to its new owner is
//! lost. The new owner, told to run a task whose partition was withheld,
//! asks for the follow-up itself (found by the streams checker, seed 8784).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;
use weir_protocol::ApiKey;
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

#[tokio::test(start_paused = true)]
async fn a_task_withheld_from_its_new_owner_moves_after_its_old_owner_restarts_mid_revoke() {
    init_tracing();
    let kit = testkit(1, 2).await;
    let (input, mut expected) = lines(100, 41);
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [
        ("processing.guarantee", "exactly_once_v2"),
        ("commit.interval.ms", "5000"),
    ];
    let config = |id: &str, dir: &std::path::Path| {
        let mut c = streams_config(&kit, "wc", id, dir, &props);
        c.instance_id = Some(id.to_owned());
        c
    };
    let a = start(count_keys(), config("a", dirs[0].path())).await;
    eventually("a counted everything", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    // An open transaction on a (the commit interval is long), whose commit
    // on revoke hangs: a is still revoking when it is killed.
    let (more, counts) = lines(20, 43);
    produce_words(&kit, &more).await;
    for (w, n) in counts {
        *expected.entry(w).or_default() += n;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    kit.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::EndTxn).client("a"),
            InterceptAction::Delay(Duration::from_secs(300)),
        )
        .times(1),
    )
    .await
    .unwrap();

    let b = start(count_keys(), config("b", dirs[1].path())).await;
    // b's join moves one task from a to b; a revokes it, stuck in the
    // commit. Then a crashes and comes back on its state directory, within
    // the session timeout.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        b.metrics().tasks.is_empty(),
        "the moved task waits for a's revoke: {:?}",
        b.metrics()
    );
    crash(&kit, 1, "a", a).await;
    kit.clear_faults().await.unwrap();
    let a = start(count_keys(), config("a", dirs[0].path())).await;

    eventually("one task each", Duration::from_secs(60), || async {
        a.metrics().tasks.len() == 1 && b.metrics().tasks.len() == 1
    })
    .await;
    let total: u64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total
    })
    .await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len() as u64, total, "exactly once across the restart");
    assert_eq!(last_counts(&out), expected);
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}
