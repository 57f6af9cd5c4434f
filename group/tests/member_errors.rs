//! The member's reaction to every group error code (NOTES.md §3), injected
//! with the testkit's intercepts, and a coordinator that moves.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use weir_group::GroupError;
use weir_group::member::GroupMember;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;
use weir_testkit::{Intercept, InterceptAction, RequestMatcher};

const LIMIT: Duration = Duration::from_secs(60);

/// Starts `a` alone, waits until it owns the 2 partitions, then makes its
/// next `api` request fail with `code`.
async fn stable_then_fail(
    api: ApiKey,
    code: i16,
) -> (std::sync::Arc<weir_testkit::Cluster>, Journal, App) {
    let tk = testkit(2).await;
    let journal = Journal::default();
    let a = App::start(
        &tk.bootstrap(),
        "a",
        config("g").with_instance_id("a-1"),
        &journal,
    )
    .await;
    journal.wait_balanced(&["a"], 2).await;
    fail_next(&tk, "a", api, code).await;
    (tk, journal, a)
}

fn count(entries: &[Entry], f: impl Fn(&Entry) -> bool) -> usize {
    entries.iter().filter(|e| f(e)).count()
}

#[tokio::test(start_paused = true)]
async fn unknown_member_id_loses_the_partitions_and_rejoins_as_new() {
    let (tk, journal, a) = stable_then_fail(ApiKey::Heartbeat, 25).await;
    let joins_before = join_member_ids(&tk, "a").await.len();
    journal
        .wait_for(LIMIT, "lost then assigned again", |e| {
            let lost = e.iter().position(|x| matches!(x, Entry::Lost { .. }));
            lost.is_some_and(|i| balanced(&e[i..], &["a"], 2))
        })
        .await;
    let ids = join_member_ids(&tk, "a").await;
    assert_eq!(ids[joins_before], "", "the member id was forgotten");
    drop(a.stop().await);
}

#[tokio::test(start_paused = true)]
async fn illegal_generation_loses_the_partitions_and_keeps_the_member_id() {
    let (tk, journal, a) = stable_then_fail(ApiKey::Heartbeat, 22).await;
    let joins_before = join_member_ids(&tk, "a").await.len();
    journal
        .wait_for(LIMIT, "lost then assigned again", |e| {
            let lost = e.iter().position(|x| matches!(x, Entry::Lost { .. }));
            lost.is_some_and(|i| balanced(&e[i..], &["a"], 2))
        })
        .await;
    // The id the member heartbeated with is the one it rejoins with.
    let heartbeats = requests_of(&tk, ApiKey::Heartbeat, "a").await;
    let member_id = match &heartbeats[0].1 {
        RequestKind::Heartbeat(h) => h.member_id.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(!member_id.is_empty());
    assert_eq!(
        join_member_ids(&tk, "a").await[joins_before],
        member_id,
        "the member id was kept"
    );
    drop(a.stop().await);
}

#[tokio::test(start_paused = true)]
async fn rebalance_in_progress_rejoins_without_losing_anything() {
    let (tk, journal, a) = stable_then_fail(ApiKey::Heartbeat, 27).await;
    let joins_before = join_member_ids(&tk, "a").await.len();
    journal
        .wait_for(LIMIT, "assigned again", |e| {
            count(e, |x| matches!(x, Entry::Assigned { .. })) >= 2
        })
        .await;
    assert!(
        join_member_ids(&tk, "a").await.len() > joins_before,
        "it rejoined"
    );
    let entries = journal.entries();
    assert_eq!(
        count(&entries, |x| matches!(
            x,
            Entry::Lost { .. } | Entry::Revoked { .. }
        )),
        0
    );
    assert!(balanced(&entries, &["a"], 2));
    drop(a.stop().await);
}

#[tokio::test(start_paused = true)]
async fn a_commit_that_gets_rebalance_in_progress_fails_and_the_member_rejoins() {
    let tk = testkit(2).await;
    let cluster = client(&tk.bootstrap(), "a").await;
    let mut member = GroupMember::start(cluster, config("g")).unwrap();
    loop {
        if let weir_group::member::AssignmentEvent::Assigned { partitions: p, .. } =
            member.next_event().await.unwrap()
            && !p.is_empty()
        {
            break;
        }
    }
    let offsets: Vec<_> = member.assignment().into_iter().map(|tp| (tp, 0)).collect();
    member.commit(&offsets).await.unwrap();
    tk.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::OffsetCommit),
            InterceptAction::Error(27),
        )
        .times(1),
    )
    .await
    .unwrap();
    let joins_before = join_member_ids(&tk, "a").await.len();
    let err = member.commit(&offsets).await.unwrap_err();
    assert!(
        matches!(err, GroupError::Coordinator { code: 27, .. }),
        "{err}"
    );
    // The rejoin follows: a new Assigned (nothing was lost).
    let event = tokio::time::timeout(LIMIT, member.next_event())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(event, weir_group::member::AssignmentEvent::Assigned { .. }),
        "{event:?}"
    );
    assert!(join_member_ids(&tk, "a").await.len() > joins_before);
    // Committed with the group metadata: generation and member id.
    let commits = requests_of(&tk, ApiKey::OffsetCommit, "a").await;
    assert!(commits.iter().all(|(_, b)| matches!(b, RequestKind::OffsetCommit(c) if c.generation_id_or_member_epoch > 0 && !c.member_id.is_empty())));
    let committed = weir_group::offsets::fetch_committed(
        member.cluster(),
        "g",
        &offsets.iter().map(|(tp, _)| tp.clone()).collect::<Vec<_>>(),
        true,
    )
    .await
    .unwrap();
    assert_eq!(committed.len(), offsets.len());
}

#[tokio::test(start_paused = true)]
async fn fenced_instance_id_is_fatal() {
    let (tk, journal, a) = stable_then_fail(ApiKey::Heartbeat, 82).await;
    journal
        .wait_for(LIMIT, "fatal", |e| {
            e.iter().any(|x| {
                matches!(
                    x,
                    Entry::Fatal {
                        error: GroupError::FencedInstance { .. },
                        ..
                    }
                )
            })
        })
        .await;
    let entries = journal.entries();
    let lost = entries
        .iter()
        .position(|x| matches!(x, Entry::Lost { .. }))
        .expect("lost first");
    let fatal = entries
        .iter()
        .position(|x| matches!(x, Entry::Fatal { .. }))
        .unwrap();
    assert!(lost < fatal);
    let joins = join_member_ids(&tk, "a").await.len();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        join_member_ids(&tk, "a").await.len(),
        joins,
        "a fenced member never rejoins"
    );
    drop(a.stop().await);
}

#[tokio::test(start_paused = true)]
async fn a_moved_coordinator_is_found_again_without_a_rebalance() {
    for code in [16, 15] {
        let (tk, journal, a) = stable_then_fail(ApiKey::Heartbeat, code).await;
        let finds = requests_of(&tk, ApiKey::FindCoordinator, "a").await.len();
        let joins = join_member_ids(&tk, "a").await.len();
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(
            requests_of(&tk, ApiKey::FindCoordinator, "a").await.len() > finds,
            "code {code}: rediscovered"
        );
        assert_eq!(
            join_member_ids(&tk, "a").await.len(),
            joins,
            "code {code}: no rejoin"
        );
        let entries = journal.entries();
        assert_eq!(
            count(&entries, |x| !matches!(x, Entry::Write { .. })),
            1,
            "code {code}: {:?}",
            journal.non_writes()
        );
        drop(a.stop().await);
    }
}

#[tokio::test(start_paused = true)]
async fn join_errors_from_a_moving_coordinator_are_retried() {
    let tk = testkit(2).await;
    tk.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::JoinGroup).client("a"),
            InterceptAction::Error(16),
        )
        .times(1),
    )
    .await
    .unwrap();
    tk.intercept(
        Intercept::new(
            RequestMatcher::api(ApiKey::SyncGroup).client("a"),
            InterceptAction::Error(15),
        )
        .times(1),
    )
    .await
    .unwrap();
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", config("g"), &journal).await;
    journal.wait_balanced(&["a"], 2).await;
    assert!(requests_of(&tk, ApiKey::FindCoordinator, "a").await.len() >= 3);
    drop(a.stop().await);
}
