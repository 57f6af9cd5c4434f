//! Self-fencing (the fix for members that went on processing after the
//! coordinator dropped them): a member cut off from its coordinator stops
//! writing strictly before the new owner of its partitions starts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::collections::BTreeSet;
use std::time::Duration;

use member_support::*;
use tokio::time::Instant;
use weir_testkit::{ClientSelector, PartitionTarget};

#[tokio::test(start_paused = true)]
async fn a_cut_off_member_stops_writing_before_the_new_owner_starts() {
    let tk = testkit(4).await;
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", config("g"), &journal).await;
    let b = App::start(&tk.bootstrap(), "b", config("g"), &journal).await;
    journal
        .wait_for(Duration::from_secs(60), "split", |e| {
            balanced(e, &["a", "b"], 4)
        })
        .await;
    let a_owned: BTreeSet<_> = journal.owners()["a"].clone();
    assert_eq!(a_owned.len(), 2);

    // The network outage: a's group traffic is lost from now on.
    tk.partition_client(
        ClientSelector::ClientId("a".into()),
        PartitionTarget::GroupCoordinator("g".into()),
    )
    .await
    .unwrap();
    let cut_at = Instant::now();
    journal
        .wait_for(Duration::from_secs(60), "b owns all 4", |e| {
            balanced(e, &["b"], 4)
        })
        .await;
    // Let both run on for a while after the handover.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let entries = journal.entries();

    // a noticed on its own: Lost, without any answer from the coordinator.
    assert!(
        entries
            .iter()
            .any(|e| matches!(e, Entry::Lost { who, partitions, .. }
        if who == "a" && partitions.iter().cloned().collect::<BTreeSet<_>>() == a_owned))
    );
    for tp in &a_owned {
        let writes = |who: &str| -> Vec<Instant> {
            entries
                .iter()
                .filter_map(|e| match e {
                    Entry::Write { at, who: w, tp: t } if w == who && t == tp && *at >= cut_at => {
                        Some(*at)
                    }
                    _ => None,
                })
                .collect()
        };
        let a_last = *writes("a").last().expect("a wrote during the outage");
        let b_first = *writes("b").first().expect("b took over");
        assert!(
            a_last < b_first,
            "{tp:?}: a's last write at +{:?} must come before b's first at +{:?}",
            a_last - cut_at,
            b_first - cut_at
        );
        // a went on writing until close to the fence, not just stopped at once.
        assert!(
            a_last - cut_at >= SESSION - Duration::from_secs(4),
            "{:?}",
            a_last - cut_at
        );
    }
    drop((a.stop().await, b.stop().await));
}
