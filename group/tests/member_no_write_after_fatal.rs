//! T9 (review 00c3a60), M3: once the member has *received* an answer that
//! says it is out of the group (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
//! FENCED_INSTANCE_ID), the application writes nothing more until it is
//! assigned again, whatever the membership task is busy with; and it
//! reports Lost (then Fatal for a fenced instance).
//!
//! The application here writes for every owned partition every 100 ms
//! while its lease holds, and can hold a revocation's ack (a slow commit or
//! flush in the revocation callback) and commit the revoked partitions
//! before acking, as a Kafka application does in `onPartitionsRevoked`.
//! Paused clock, testkit intercepts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::time::Duration;

use member_support::*;
use tokio::time::{Instant, sleep};
use weir_group::GroupError;
use weir_group::assignor::Assignor;
use weir_group::member::MemberConfig;
use weir_protocol::ApiKey;

const LIMIT: Duration = Duration::from_secs(60);
const UNKNOWN_MEMBER_ID: i16 = 25;
const ILLEGAL_GENERATION: i16 = 22;
const FENCED_INSTANCE_ID: i16 = 82;
const OUT: [i16; 3] = [UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID];

/// `who`'s writes after `from` and before its next assignment after it.
fn writes_until_reassigned(entries: &[Entry], who: &str, from: Instant) -> Vec<Entry> {
    let reassigned = entries.iter().find_map(|e| match e {
        Entry::Assigned { at, who: w, .. } if w == who && *at > from => Some(*at),
        _ => None,
    });
    entries
        .iter()
        .filter(|e| {
            matches!(e, Entry::Write { at, who: w, .. }
                if w == who && *at > from && reassigned.is_none_or(|r| *at < r))
        })
        .cloned()
        .collect()
}

/// Waits until `who` reported what `code` calls for after `from`: Lost,
/// then (for a fenced instance) Fatal, or Lost and a new assignment.
async fn wait_reaction(journal: &Journal, who: &str, code: i16, from: Instant) {
    let what = format!("{who}'s reaction to code {code}");
    journal
        .wait_for(LIMIT, &what, |e| {
            let after: Vec<&Entry> = e
                .iter()
                .filter(|x| x.who() == who && entry_at(x) >= from)
                .collect();
            let Some(lost) = after.iter().position(|x| matches!(x, Entry::Lost { .. })) else {
                return false;
            };
            after[lost..].iter().any(|x| match x {
                Entry::Fatal { error, .. } => {
                    assert_eq!(code, FENCED_INSTANCE_ID, "{what}: fatal {error:?}");
                    assert!(
                        matches!(error, GroupError::FencedInstance { .. }),
                        "{error:?}"
                    );
                    true
                }
                Entry::Assigned { .. } => {
                    assert_ne!(
                        code, FENCED_INSTANCE_ID,
                        "{what}: a fenced instance rejoined"
                    );
                    true
                }
                _ => false,
            })
        })
        .await;
}

fn entry_at(e: &Entry) -> Instant {
    match e {
        Entry::Assigned { at, .. }
        | Entry::Revoked { at, .. }
        | Entry::Lost { at, .. }
        | Entry::Fatal { at, .. }
        | Entry::Write { at, .. }
        | Entry::Released { at, .. } => *at,
    }
}

/// When the first `api` request of `client` at or after `from` arrived.
async fn first_request_since(
    tk: &weir_testkit::Cluster,
    client: &str,
    api: ApiKey,
    from: Instant,
) -> Instant {
    requests_of(tk, api, client)
        .await
        .into_iter()
        .map(|(at, _)| at)
        .find(|at| *at >= from)
        .unwrap_or_else(|| panic!("no {api:?} from {client} since {from:?}"))
}

fn cooperative(instance: &str) -> MemberConfig {
    config("g")
        .with_assignors([Assignor::CooperativeSticky])
        .with_instance_id(instance)
}

/// A stable member gets `code` on a heartbeat: it writes nothing after the
/// answer (the testkit answers an injected error at once, so the request's
/// arrival is the answer's).
#[tokio::test(start_paused = true)]
async fn no_write_after_a_heartbeat_says_the_member_is_out() {
    for code in OUT {
        let tk = testkit(2).await;
        let journal = Journal::default();
        let a = App::start(&tk.bootstrap(), "a", cooperative("a-1"), &journal).await;
        journal.wait_balanced(&["a"], 2).await;
        let armed = Instant::now();
        fail_next(&tk, "a", ApiKey::Heartbeat, code).await;
        wait_reaction(&journal, "a", code, armed).await;
        let answered = first_request_since(&tk, "a", ApiKey::Heartbeat, armed).await;
        let entries = journal.entries();
        assert!(
            entries
                .iter()
                .any(|e| matches!(e, Entry::Write { at, .. } if *at > armed && *at <= answered)),
            "code {code}: a wrote until the answer"
        );
        let late = writes_until_reassigned(&entries, "a", answered);
        assert!(
            late.is_empty(),
            "code {code}: writes after the answer: {late:?}"
        );
        drop(a.stop().await);
    }
}

/// b joins, so a's cooperative rebalance revokes one of its two
/// partitions, and a's application holds the ack 5 s; meanwhile the first
/// heartbeat of the new generation says a is out. The retained partition
/// is not written after that answer, although the membership task is still
/// waiting for the ack; once acked, a reports it lost.
#[tokio::test(start_paused = true)]
async fn no_write_after_a_heartbeat_says_the_member_is_out_while_a_revocation_is_held() {
    for code in OUT {
        let tk = testkit(2).await;
        let journal = Journal::default();
        let hold = OnRevoke {
            commit: false,
            hold: Duration::from_secs(5),
        };
        let a = App::start_with(&tk.bootstrap(), "a", cooperative("a-1"), &journal, hold).await;
        journal.wait_balanced(&["a"], 2).await;
        let b = App::start(&tk.bootstrap(), "b", cooperative("b-1"), &journal).await;
        // a's revocation has arrived; its ack is held.
        let started = Instant::now();
        while a.revoked_at.lock().unwrap().is_none() {
            assert!(started.elapsed() < LIMIT, "code {code}: nothing revoked");
            sleep(Duration::from_millis(10)).await;
        }
        let armed = Instant::now();
        fail_next(&tk, "a", ApiKey::Heartbeat, code).await;
        wait_reaction(&journal, "a", code, armed).await;
        let answered = first_request_since(&tk, "a", ApiKey::Heartbeat, armed).await;
        let entries = journal.entries();
        let acked = entries
            .iter()
            .find_map(|e| match e {
                Entry::Revoked { at, who, .. } if who == "a" => Some(*at),
                _ => None,
            })
            .expect("a acked its revocation");
        assert!(
            answered < acked,
            "code {code}: the answer came while the ack was held"
        );
        let late = writes_until_reassigned(&entries, "a", answered);
        assert!(
            late.is_empty(),
            "code {code}: writes after the answer: {late:?}"
        );
        drop(b.stop().await);
        drop(a.stop().await);
    }
}

/// The same rebalance, but the application commits the revoked partition
/// before it acks, and the commit is refused with `code`; the ack follows
/// 5 s later. The commit's answer is the member's news that it is out: the
/// retained partition is not written once the commit has returned.
#[tokio::test(start_paused = true)]
async fn no_write_after_a_commit_says_the_member_is_out_while_a_revocation_is_held() {
    for code in OUT {
        let tk = testkit(2).await;
        let journal = Journal::default();
        let hold = OnRevoke {
            commit: true,
            hold: Duration::from_secs(5),
        };
        let a = App::start_with(&tk.bootstrap(), "a", cooperative("a-1"), &journal, hold).await;
        journal.wait_balanced(&["a"], 2).await;
        fail_next(&tk, "a", ApiKey::OffsetCommit, code).await;
        let b = App::start(&tk.bootstrap(), "b", cooperative("b-1"), &journal).await;
        let commits = a.commits.clone();
        let started = Instant::now();
        while commits.lock().unwrap().is_empty() {
            assert!(started.elapsed() < LIMIT, "code {code}: a never committed");
            sleep(Duration::from_millis(10)).await;
        }
        let (returned, result) = commits.lock().unwrap()[0].clone();
        assert!(
            matches!(result, Err(GroupError::Coordinator { code: c, .. }) if c == code),
            "code {code}: {result:?}"
        );
        wait_reaction(&journal, "a", code, returned).await;
        let entries = journal.entries();
        assert!(
            entries
                .iter()
                .any(|e| matches!(e, Entry::Revoked { at, who, .. } if who == "a" && *at >= returned + Duration::from_secs(4))),
            "code {code}: the ack was held after the commit"
        );
        let late = writes_until_reassigned(&entries, "a", returned);
        assert!(
            late.is_empty(),
            "code {code}: {} writes after the refused commit returned, the last at +{:?}",
            late.len(),
            late.last().map(|e| entry_at(e) - returned)
        );
        drop(b.stop().await);
        drop(a.stop().await);
    }
}

/// A slow heartbeat: a's heartbeat is held 4 s (under the heartbeat's own
/// timeout of session / 2) and meanwhile another process starts with a's
/// instance id, which fences a's member id at once (KIP-345: the new
/// instance gets the assignment without a rebalance). The held heartbeat is
/// then answered FENCED_INSTANCE_ID: a writes nothing after that answer,
/// reports Lost then Fatal, and never rejoins. (Until the answer the
/// two overlap: KIP-345 replaces the instance at once, and only the answer
/// tells a; the overlap is bounded by the heartbeat timeout.)
#[tokio::test(start_paused = true)]
async fn a_delayed_heartbeat_answered_fenced_ends_the_writes_at_the_answer() {
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
    let armed = Instant::now();
    let delay = Duration::from_secs(4);
    delay_next(&tk, "a", ApiKey::Heartbeat, delay).await;
    let held = loop {
        if let Some((at, _)) = requests_of(&tk, ApiKey::Heartbeat, "a")
            .await
            .into_iter()
            .find(|(at, _)| *at >= armed)
        {
            break at;
        }
        sleep(Duration::from_millis(10)).await;
    };
    // The replacement joins while a's heartbeat is held.
    let replacement = App::start(
        &tk.bootstrap(),
        "a-new",
        config("g").with_instance_id("a-1"),
        &journal,
    )
    .await;
    journal
        .wait_for(LIMIT, "the replacement is assigned", |e| {
            e.iter()
                .any(|x| matches!(x, Entry::Assigned { who, partitions, .. } if who == "a-new" && partitions.len() == 2))
        })
        .await;
    wait_reaction(&journal, "a", FENCED_INSTANCE_ID, armed).await;
    let answered = held + delay;
    let entries = journal.entries();
    let late = writes_until_reassigned(&entries, "a", answered);
    assert!(late.is_empty(), "writes after the fenced answer: {late:?}");
    assert!(
        entries
            .iter()
            .any(|e| matches!(e, Entry::Write { at, who, .. } if who == "a" && *at > held && *at <= answered)),
        "a went on writing while its heartbeat was held (its lease held)"
    );
    let lost = entries
        .iter()
        .find_map(|e| match e {
            Entry::Lost { at, who, .. } if who == "a" => Some(*at),
            _ => None,
        })
        .unwrap();
    assert!(lost >= answered, "a learnt it only from the answer");
    let joins = join_member_ids(&tk, "a").await.len();
    sleep(SESSION * 2).await;
    assert_eq!(join_member_ids(&tk, "a").await.len(), joins, "no rejoin");
    drop(replacement.stop().await);
    drop(a.stop().await);
}
