//! Graceful handover on close, on the in-process cluster under tokio's
//! paused clock: a closing instance rejoins as draining and keeps a task
//! nobody else is caught up on until a warmup elsewhere has copied its
//! state, so the task's next owner restores only the tail instead of the
//! whole changelog on the critical path.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;

#[tokio::test(start_paused = true)]
async fn a_closing_instance_keeps_its_task_until_a_warmup_has_caught_up() {
    let kit = testkit(1, 2).await;
    let (input, mut expected) = lines(300, 31);
    produce_words(&kit, &input).await;
    let words: u64 = expected.values().sum();
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [
        ("processing.guarantee", "exactly_once_v2"),
        ("acceptable.recovery.lag", "10"),
    ];
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dirs[0].path(), &props),
    )
    .await;
    eventually("a counted everything", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    // b joins; its warmup takes one task over, a keeps the other.
    let b = start(
        count_keys(),
        streams_config(&kit, "wc", "b", dirs[1].path(), &props),
    )
    .await;
    eventually("one task each", Duration::from_secs(120), || async {
        a.metrics().tasks.len() == 1 && b.metrics().tasks.len() == 1
    })
    .await;
    let before = b.metrics();
    let kept = a.metrics().tasks.keys().copied().collect::<Vec<_>>();
    assert!(
        !before.standby_tasks.contains(&kept[0]),
        "b holds no replica of a's task before the close: {before:?}"
    );

    // a closes gracefully. Nobody is caught up on its task, so it stays on
    // a while b warms up; then it moves, and b restores only the tail.
    a.close(Duration::from_secs(120)).await.unwrap();
    eventually("b runs both tasks", Duration::from_secs(120), || async {
        b.metrics().tasks.len() == 2 && b.metrics().restoring_tasks == 0
    })
    .await;
    let after = b.metrics();
    let restored = after.restored_records - before.restored_records;
    let copied = after.standby_records - before.standby_records;
    assert!(
        restored <= 10,
        "the task's next owner restored only the tail, not its whole changelog: \
         {restored} records restored ({copied} copied by the warmup)"
    );
    assert!(
        copied > words / 4,
        "the warmup copied the task's state while a still ran it: {after:?}"
    );

    let (more, counts) = lines(50, 37);
    produce_words(&kit, &more).await;
    for (w, n) in counts {
        *expected.entry(w).or_default() += n;
    }
    let total: u64 = expected.values().sum();
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total
    })
    .await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len() as u64, total, "exactly once across the handover");
    assert_eq!(last_counts(&out), expected);
    b.close(Duration::from_secs(30)).await.unwrap();
}
