//! The reaction to each group error code on each request where it can come
//! back (NOTES.md §3), beyond the heartbeat cases of `member_errors.rs`:
//! JoinGroup and SyncGroup during a rebalance, and OffsetCommit. Injected
//! with the testkit's intercepts, on paused time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use weir_group::GroupError;
use weir_group::assignor::TopicPartition;
use weir_group::member::{AssignmentEvent, GroupMember};
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;

const LIMIT: Duration = Duration::from_secs(60);

const UNKNOWN_MEMBER_ID: i16 = 25;
const ILLEGAL_GENERATION: i16 = 22;
const REBALANCE_IN_PROGRESS: i16 = 27;
const FENCED_INSTANCE_ID: i16 = 82;
const NOT_COORDINATOR: i16 = 16;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;

/// What the member must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reaction {
    /// Lose the partitions, forget member id and generation, rejoin.
    LoseAndForgetId,
    /// Lose the partitions, keep the member id, rejoin.
    LoseAndKeepId,
    /// Rejoin (or find the coordinator again) and keep everything.
    Keep,
    /// Lose the partitions and stop.
    Fatal,
}

const TABLE: [(i16, Reaction); 6] = [
    (UNKNOWN_MEMBER_ID, Reaction::LoseAndForgetId),
    (ILLEGAL_GENERATION, Reaction::LoseAndKeepId),
    (REBALANCE_IN_PROGRESS, Reaction::Keep),
    (FENCED_INSTANCE_ID, Reaction::Fatal),
    (NOT_COORDINATOR, Reaction::Keep),
    (COORDINATOR_NOT_AVAILABLE, Reaction::Keep),
];

fn static_config() -> weir_group::member::MemberConfig {
    config("g").with_instance_id("a-1")
}

fn is_lost(e: &Entry) -> bool {
    matches!(e, Entry::Lost { .. })
}

/// A stable static member `a` is made to rejoin (a heartbeat answered
/// REBALANCE_IN_PROGRESS); its next `api` request in that rebalance gets
/// `code`. Checks `expected`.
async fn fail_during_rebalance(api: ApiKey, code: i16, expected: Reaction) {
    let what = format!("{api:?} answered {code}");
    let tk = testkit(2).await;
    let journal = Journal::default();
    let a = App::start(&tk.bootstrap(), "a", static_config(), &journal).await;
    journal.wait_balanced(&["a"], 2).await;
    let seen = journal.entries().len();
    let joins_before = join_member_ids(&tk, "a").await;
    let finds_before = requests_of(&tk, ApiKey::FindCoordinator, "a").await.len();
    // A static member gets its id in its first JoinGroup's answer; its
    // heartbeats, one interval (1 s) on, carry it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let member_id = match &requests_of(&tk, ApiKey::Heartbeat, "a").await[0].1 {
        RequestKind::Heartbeat(h) => h.member_id.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(!member_id.is_empty());
    fail_next(&tk, "a", api, code).await;
    fail_next(&tk, "a", ApiKey::Heartbeat, REBALANCE_IN_PROGRESS).await;

    if expected == Reaction::Fatal {
        journal
            .wait_for(LIMIT, &what, |e| {
                e[seen..].iter().any(|x| {
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
        let after = &journal.entries()[seen..];
        let lost = after.iter().position(is_lost).expect("lost before fatal");
        let fatal = after
            .iter()
            .position(|x| matches!(x, Entry::Fatal { .. }))
            .unwrap();
        assert!(lost < fatal, "{what}");
        let joins = join_member_ids(&tk, "a").await.len();
        tokio::time::sleep(SESSION * 2).await;
        assert_eq!(
            join_member_ids(&tk, "a").await.len(),
            joins,
            "{what}: no rejoin"
        );
        drop(a.stop().await);
        return;
    }
    // The rebalance completes: `a` is assigned its 2 partitions again.
    journal
        .wait_for(LIMIT, &what, |e| {
            let after = &e[seen..];
            let from = after.iter().position(is_lost).map_or(0, |i| i + 1);
            after[from..]
                .iter()
                .any(|x| matches!(x, Entry::Assigned { .. }))
                && balanced(e, &["a"], 2)
        })
        .await;
    let after: Vec<Entry> = journal.entries()[seen..].to_vec();
    let lost = after.iter().any(is_lost);
    let revoked = after.iter().any(|x| matches!(x, Entry::Revoked { .. }));
    assert!(!revoked, "{what}: nothing is revoked");
    let joins = join_member_ids(&tk, "a").await;
    // joins[n] is the rejoin the heartbeat asked for, sent with the member
    // id; joins[n + 1] the one after the error.
    let n = joins_before.len();
    assert_eq!(joins[n], member_id, "{what}");
    let next_id = &joins[n + 1];
    match expected {
        Reaction::LoseAndForgetId => {
            assert!(lost, "{what}: partitions lost");
            assert_eq!(next_id, "", "{what}: member id forgotten");
        }
        Reaction::LoseAndKeepId => {
            assert!(lost, "{what}: partitions lost");
            assert_eq!(next_id, &member_id, "{what}: member id kept");
        }
        Reaction::Keep => {
            assert!(!lost, "{what}: nothing lost");
            assert_eq!(next_id, &member_id, "{what}: member id kept");
        }
        Reaction::Fatal => unreachable!(),
    }
    if code == NOT_COORDINATOR || code == COORDINATOR_NOT_AVAILABLE {
        assert!(
            requests_of(&tk, ApiKey::FindCoordinator, "a").await.len() > finds_before,
            "{what}: the coordinator was looked up again"
        );
    }
    drop(a.stop().await);
}

#[tokio::test(start_paused = true)]
async fn join_group_errors() {
    for (code, reaction) in TABLE {
        // Kafka's JoinGroup never answers ILLEGAL_GENERATION.
        if code != ILLEGAL_GENERATION {
            fail_during_rebalance(ApiKey::JoinGroup, code, reaction).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn sync_group_errors() {
    for (code, reaction) in TABLE {
        fail_during_rebalance(ApiKey::SyncGroup, code, reaction).await;
    }
}

/// A stable static member's commit gets `code`.
async fn fail_commit(code: i16, expected: Reaction) {
    let what = format!("OffsetCommit answered {code}");
    let tk = testkit(2).await;
    let cluster = client(&tk.bootstrap(), "a").await;
    let mut member = GroupMember::start(cluster, static_config()).unwrap();
    match member.next_event().await.unwrap() {
        AssignmentEvent::Assigned { partitions: p, .. } => assert_eq!(p.len(), 2),
        other => panic!("unexpected {other:?}"),
    }
    let member_id = member.metadata().unwrap().member_id;
    let joins_before = join_member_ids(&tk, "a").await.len();
    let finds_before = requests_of(&tk, ApiKey::FindCoordinator, "a").await.len();
    fail_next(&tk, "a", ApiKey::OffsetCommit, code).await;
    let result = member.commit(&[(TopicPartition::new(TOPIC, 0), 3)]).await;
    if expected == Reaction::Keep {
        // Retried at the coordinator found again; the membership is
        // untouched.
        result.unwrap();
        assert!(
            requests_of(&tk, ApiKey::FindCoordinator, "a").await.len() > finds_before,
            "{what}"
        );
        let event = tokio::time::timeout(SESSION * 2, member.next_event()).await;
        assert!(event.is_err(), "{what}: no event, got {event:?}");
        assert_eq!(
            join_member_ids(&tk, "a").await.len(),
            joins_before,
            "{what}"
        );
        return;
    }
    let err = result.unwrap_err();
    assert!(
        matches!(err, GroupError::Coordinator { code: c, .. } if c == code),
        "{what}: {err}"
    );
    // The answer is the member's news that it is out: no write may follow
    // the commit's return (M3), before the membership task has run.
    assert!(
        !member.lease().is_valid(),
        "{what}: the lease outlived the answer"
    );
    assert!(
        member.metadata().is_err(),
        "{what}: no generation to commit with"
    );
    // The commit's generation was still current: the member reacts.
    match member.next_event().await {
        Ok(AssignmentEvent::Lost(p)) => assert_eq!(p.len(), 2, "{what}"),
        other => panic!("{what}: expected Lost, got {other:?}"),
    }
    if expected == Reaction::Fatal {
        let next = member.next_event().await;
        assert!(
            matches!(next, Err(GroupError::FencedInstance { .. })),
            "{what}: {next:?}"
        );
        return;
    }
    let assigned = tokio::time::timeout(LIMIT, member.next_event())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&assigned, AssignmentEvent::Assigned { partitions: p, .. } if p.len() == 2),
        "{what}: {assigned:?}"
    );
    let joins = join_member_ids(&tk, "a").await;
    let rejoined_with = &joins[joins_before];
    match expected {
        Reaction::LoseAndForgetId => assert_eq!(rejoined_with, "", "{what}"),
        Reaction::LoseAndKeepId => assert_eq!(rejoined_with, &member_id, "{what}"),
        _ => unreachable!(),
    }
}

#[tokio::test(start_paused = true)]
async fn offset_commit_errors() {
    for (code, reaction) in TABLE {
        // REBALANCE_IN_PROGRESS on a commit: member_errors.rs.
        if code != REBALANCE_IN_PROGRESS {
            fail_commit(code, reaction).await;
        }
    }
}
