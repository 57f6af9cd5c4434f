//! The scenarios, each written once over a [`Wire`] and run on both sides.
//!
//! Every scenario creates its own topics, groups and transactional ids
//! under the prefix it is given, so offsets start at 0 on both sides and
//! scenarios can run concurrently.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use weir_group::assignor::{
    Assignor, GroupSubscription, MemberSubscription, cooperative_sticky_user_data,
    to_wire_assignment,
};
use weir_group::consumer_protocol::{Assignment, Subscription, TopicPartitions};

use super::wire::{Fetched, Joined, Rec, Wire, Writer, now_ms};
use super::{Fallible, Recorder};

/// `CONCURRENT_TRANSACTIONS`.
const CONCURRENT_TRANSACTIONS: i16 = 51;
/// `MEMBER_ID_REQUIRED`.
const MEMBER_ID_REQUIRED: i16 = 79;
/// `UNSTABLE_OFFSET_COMMIT`.
const UNSTABLE_OFFSET_COMMIT: i16 = 88;
/// A transaction timeout long enough never to fire during a scenario.
const LONG_TXN_TIMEOUT_MS: i32 = 60_000;
/// The short transaction timeout of [`Scenario::TransactionTimeout`].
const SHORT_TXN_TIMEOUT_MS: i32 = 1_000;
/// READ_COMMITTED in ListOffsets and Fetch.
const READ_COMMITTED: i8 = 1;
/// READ_UNCOMMITTED.
const READ_UNCOMMITTED: i8 = 0;

/// The scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The version of each API Weir's client negotiates, and the finalized
    /// transaction version.
    Versions,
    /// Produce and fetch around an open transaction, then commit.
    OpenTransactionCommit,
    /// Produce and fetch around an open transaction, then abort.
    OpenTransactionAbort,
    /// A zombie transactional producer, fenced by a new InitProducerId:
    /// every API it may call next.
    ZombieFenced,
    /// InitProducerId while the previous owner's transaction is open.
    InitProducerIdWhileOpen,
    /// A transaction as Kafka 4.4's own producer runs it at the newest
    /// versions (transaction version 2: no AddPartitionsToTxn, EndTxn
    /// returns a bumped epoch), sent at the versions Weir negotiates with
    /// each broker.
    TransactionVersion2,
    /// TxnOffsetCommit with a stale generation, an unknown member, the
    /// current member and a reset member, in a group with members.
    TxnOffsetCommitGenerations,
    /// A transaction left open past its timeout.
    TransactionTimeout,
    /// Transactional requests out of order or naming the wrong thing.
    TransactionEdges,
    /// Group requests with a stale generation, an unknown member or no
    /// protocol in common.
    GroupEdges,
    /// A static member restarts within its session.
    StaticMemberRestart,
    /// Cooperative-sticky rebalances as a member joins and leaves.
    CooperativeSticky,
    /// The first JoinGroup of an empty group.
    InitialRebalanceDelay,
    /// ListOffsets: earliest, latest, by timestamp, MAX_TIMESTAMP.
    ListOffsetsByTimestamp,
    /// The idempotent producer: duplicates, sequence gaps, epochs.
    IdempotentProduce,
    /// A compacted changelog: what every broker guarantees of it.
    CompactedChangelog,
    /// DeleteRecords and fetches below the new log start.
    DeleteRecords,
}

impl Scenario {
    /// Every scenario.
    pub const ALL: [Scenario; 17] = [
        Scenario::Versions,
        Scenario::TransactionVersion2,
        Scenario::OpenTransactionCommit,
        Scenario::OpenTransactionAbort,
        Scenario::ZombieFenced,
        Scenario::InitProducerIdWhileOpen,
        Scenario::TxnOffsetCommitGenerations,
        Scenario::TransactionTimeout,
        Scenario::TransactionEdges,
        Scenario::GroupEdges,
        Scenario::StaticMemberRestart,
        Scenario::CooperativeSticky,
        Scenario::InitialRebalanceDelay,
        Scenario::ListOffsetsByTimestamp,
        Scenario::IdempotentProduce,
        Scenario::CompactedChangelog,
        Scenario::DeleteRecords,
    ];

    /// The scenario's name, as the lists of known differences use it.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Versions => "versions",
            Scenario::OpenTransactionCommit => "open_txn_commit",
            Scenario::OpenTransactionAbort => "open_txn_abort",
            Scenario::ZombieFenced => "zombie_fenced",
            Scenario::InitProducerIdWhileOpen => "init_pid_while_open",
            Scenario::TransactionVersion2 => "tv2_end_txn",
            Scenario::TxnOffsetCommitGenerations => "txn_offset_commit_generations",
            Scenario::TransactionTimeout => "txn_timeout",
            Scenario::TransactionEdges => "txn_edges",
            Scenario::GroupEdges => "group_edges",
            Scenario::StaticMemberRestart => "static_member_restart",
            Scenario::CooperativeSticky => "cooperative_sticky",
            Scenario::InitialRebalanceDelay => "initial_rebalance_delay",
            Scenario::ListOffsetsByTimestamp => "list_offsets_by_timestamp",
            Scenario::IdempotentProduce => "idempotent_produce",
            Scenario::CompactedChangelog => "compacted_changelog",
            Scenario::DeleteRecords => "delete_records",
        }
    }

    /// Runs the scenario on `w` with names under `ns`, recording into `r`.
    /// A failure that is not an observation (a lost connection, a poll
    /// that ran out) is recorded as the last observation.
    pub async fn run(self, w: &Wire, ns: &str, r: &mut Recorder) {
        let result = match self {
            Scenario::Versions => versions(w, r).await,
            Scenario::OpenTransactionCommit => open_transaction(w, ns, r, true).await,
            Scenario::OpenTransactionAbort => open_transaction(w, ns, r, false).await,
            Scenario::ZombieFenced => zombie_fenced(w, ns, r).await,
            Scenario::InitProducerIdWhileOpen => init_pid_while_open(w, ns, r).await,
            Scenario::TransactionVersion2 => match w.negotiating().await {
                Ok(w) => transaction_version_2(&w, ns, r).await,
                Err(e) => Err(e),
            },
            Scenario::TxnOffsetCommitGenerations => txn_offset_commit_generations(w, ns, r).await,
            Scenario::TransactionTimeout => transaction_timeout(w, ns, r).await,
            Scenario::TransactionEdges => transaction_edges(w, ns, r).await,
            Scenario::GroupEdges => group_edges(w, ns, r).await,
            Scenario::StaticMemberRestart => static_member_restart(w, ns, r).await,
            Scenario::CooperativeSticky => cooperative_sticky(w, ns, r).await,
            Scenario::InitialRebalanceDelay => initial_rebalance_delay(w, ns, r).await,
            Scenario::ListOffsetsByTimestamp => list_offsets_by_timestamp(w, ns, r).await,
            Scenario::IdempotentProduce => idempotent_produce(w, ns, r).await,
            Scenario::CompactedChangelog => compacted_changelog(w, ns, r).await,
            Scenario::DeleteRecords => delete_records(w, ns, r).await,
        };
        if let Err(e) = result {
            r.put("scenario failed", e);
        }
    }
}

// ---- formatting ----

fn values(v: &[(i64, String)]) -> String {
    if v.is_empty() {
        return "(none)".to_owned();
    }
    v.iter()
        .map(|(o, s)| format!("{o}:{s}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn aborted(r: &mut Recorder, a: Option<&Vec<(i64, i64)>>) -> String {
    match a {
        None => "null".to_owned(),
        Some(v) => {
            let items: Vec<String> = v
                .iter()
                .map(|(pid, first)| format!("{}@{first}", r.name("producer", &pid.to_string())))
                .collect();
            format!("[{}]", items.join(", "))
        }
    }
}

/// Records what a fetch answered, under `what`.
fn put_fetch(r: &mut Recorder, what: &str, f: &Fetched, committed: bool) {
    r.code(format!("{what}: error"), f.code);
    r.put(format!("{what}: high watermark"), f.hwm);
    r.put(format!("{what}: last stable offset"), f.lso);
    r.put(format!("{what}: log start offset"), f.log_start);
    let a = aborted(r, f.aborted.as_ref());
    r.put(format!("{what}: aborted transactions"), a);
    let v = if committed {
        f.committed_values()
    } else {
        f.all_values()
    };
    r.put(format!("{what}: records delivered"), values(&v));
}

/// Records an InitProducerId's code and, when it succeeded, the producer
/// id by name (a failed one's id means nothing).
fn put_producer(r: &mut Recorder, what: &str, code: i16, pid: i64) {
    r.code(format!("{what}: error"), code);
    if code == 0 {
        let name = r.name("producer", &pid.to_string());
        r.put(format!("{what}: producer id"), name);
    }
}

/// InitProducerId until it stops answering CONCURRENT_TRANSACTIONS;
/// returns the answers (consecutive repeats collapsed) and the last
/// (code, producer id, epoch).
async fn init_until_settled(
    w: &Wire,
    tid: &str,
    timeout_ms: i32,
) -> Fallible<(String, (i16, i64, i16))> {
    let mut codes: Vec<String> = Vec::new();
    let deadline = Instant::now() + super::wire::POLL_BOUND;
    loop {
        let answer = w.init_producer_id(tid, timeout_ms, None).await?;
        let name = super::code_name(answer.0);
        if codes.last() != Some(&name) {
            codes.push(name);
        }
        if answer.0 != CONCURRENT_TRANSACTIONS || Instant::now() >= deadline {
            return Ok((codes.join(" then "), answer));
        }
        tokio::time::sleep(super::wire::POLL_EVERY).await;
    }
}

/// Runs `f` again while it answers CONCURRENT_TRANSACTIONS (the
/// coordinator still completing a transaction, on Kafka for a moment
/// after the markers are in the log), as a client does; returns the
/// settled answer. The retries go to a note: their number is a race.
async fn settle<T, F, Fut>(
    r: &mut Recorder,
    what: &str,
    code: impl Fn(&T) -> i16,
    mut f: F,
) -> Fallible<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Fallible<T>>,
{
    let deadline = Instant::now() + super::wire::POLL_BOUND;
    let mut retries = 0;
    loop {
        let answer = f().await?;
        if code(&answer) != CONCURRENT_TRANSACTIONS || Instant::now() >= deadline {
            if retries > 0 {
                r.note(format!(
                    "{what}: {retries} CONCURRENT_TRANSACTIONS answers first"
                ));
            }
            return Ok(answer);
        }
        retries += 1;
        tokio::time::sleep(super::wire::POLL_EVERY).await;
    }
}

/// InitProducerId for `tid`, recorded under `what`; returns the producer
/// id and epoch.
async fn init_txn(
    w: &Wire,
    r: &mut Recorder,
    what: &str,
    tid: &str,
    timeout_ms: i32,
) -> Fallible<(i64, i16)> {
    let (code, pid, epoch) = w.init_producer_id(tid, timeout_ms, None).await?;
    put_producer(r, what, code, pid);
    Ok((pid, epoch))
}

/// Produces one record `value` to partition 0 of `topic` in `tid`'s
/// transaction, as `producer` (id, epoch) at `sequence`: the code and base
/// offset.
async fn txn_produce(
    w: &Wire,
    topic: &str,
    tid: &str,
    producer: (i64, i16),
    sequence: i32,
    value: &str,
) -> Fallible<(i16, i64)> {
    let writer = Writer::txn(producer.0, producer.1, sequence);
    w.produce(topic, 0, Some(tid), writer, &[Rec::value(value)])
        .await
}

/// Creates `topic` (one partition), gets a producer for `tid` and adds
/// partition 0 to its transaction, recording each step under `prefix`
/// ("{prefix}InitProducerId", "{prefix}AddPartitionsToTxn"); returns the
/// producer id and epoch.
async fn begin_txn(
    w: &Wire,
    r: &mut Recorder,
    prefix: &str,
    topic: &str,
    tid: &str,
    timeout_ms: i32,
) -> Fallible<(i64, i16)> {
    w.create_topic(topic, 1, &[]).await?;
    let (pid, epoch) = init_txn(w, r, &format!("{prefix}InitProducerId"), tid, timeout_ms).await?;
    let code = w.add_partitions(tid, (pid, epoch), topic, &[0]).await?;
    r.code(format!("{prefix}AddPartitionsToTxn"), code);
    Ok((pid, epoch))
}

/// [`begin_txn`], then one transactional record `value` at sequence 0,
/// recorded as "{prefix}Produce"; returns the producer id and epoch.
async fn open_txn_with_one_record(
    w: &Wire,
    r: &mut Recorder,
    prefix: &str,
    topic: &str,
    tid: &str,
    value: &str,
) -> Fallible<(i64, i16)> {
    let (pid, epoch) = begin_txn(w, r, prefix, topic, tid, LONG_TXN_TIMEOUT_MS).await?;
    let (code, _) = txn_produce(w, topic, tid, (pid, epoch), 0, value).await?;
    r.code(format!("{prefix}Produce"), code);
    Ok((pid, epoch))
}

/// OffsetFetch (require_stable) of partition 0 until the offsets are no
/// longer pending: (code, committed offset).
async fn stable_offset(w: &Wire, group: &str, topic: &str) -> Fallible<(i16, i64)> {
    w.poll("a stable committed offset", || async move {
        let (code, offset) = w.offset_fetch(group, topic, 0, true).await.ok()?;
        (code != UNSTABLE_OFFSET_COMMIT).then_some((code, offset))
    })
    .await
}

// ---- versions ----

async fn versions(w: &Wire, r: &mut Recorder) -> Fallible<()> {
    let (negotiated, tv) = super::wire::negotiated_versions(w.bootstrap()).await?;
    for api in super::wire::APIS {
        r.put(
            format!("{api:?}: version Weir negotiates"),
            negotiated
                .get(&(api as i16))
                .map_or_else(|| "unsupported".to_owned(), ToString::to_string),
        );
    }
    r.put("finalized transaction.version", tv);
    Ok(())
}

// ---- transactions ----

async fn open_transaction(w: &Wire, ns: &str, r: &mut Recorder, commit: bool) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let tid = format!("{ns}-tx");
    w.create_topic(&topic, 1, &[]).await?;
    let (pid, epoch) = init_txn(w, r, "InitProducerId", &tid, LONG_TXN_TIMEOUT_MS).await?;
    let (code, offset) = w
        .produce(&topic, 0, None, Writer::PLAIN, &[Rec::value("a")])
        .await?;
    r.put(
        "plain produce",
        format!("{}@{offset}", super::code_name(code)),
    );
    let code = w.add_partitions(&tid, (pid, epoch), &topic, &[0]).await?;
    r.code("AddPartitionsToTxn", code);
    let (code, offset) = w
        .produce(
            &topic,
            0,
            Some(&tid),
            Writer::txn(pid, epoch, 0),
            &[Rec::value("t1"), Rec::value("t2")],
        )
        .await?;
    r.put(
        "transactional produce",
        format!("{}@{offset}", super::code_name(code)),
    );
    let (code, offset) = w
        .produce(&topic, 0, None, Writer::PLAIN, &[Rec::value("b")])
        .await?;
    r.put(
        "plain produce after",
        format!("{}@{offset}", super::code_name(code)),
    );

    // While the transaction is open.
    let (code, latest, _) = w.list_offsets(&topic, 0, -1, READ_UNCOMMITTED).await?;
    r.put(
        "open: ListOffsets latest read_uncommitted",
        format!("{}@{latest}", super::code_name(code)),
    );
    let (code, latest, _) = w.list_offsets(&topic, 0, -1, READ_COMMITTED).await?;
    r.put(
        "open: ListOffsets latest read_committed",
        format!("{}@{latest}", super::code_name(code)),
    );
    let f = w.fetch(&topic, 0, 0, false).await?;
    put_fetch(r, "open: fetch read_uncommitted", &f, false);
    let f = w.fetch(&topic, 0, 0, true).await?;
    put_fetch(r, "open: fetch read_committed", &f, true);

    // End it.
    let started = Instant::now();
    let code = w.end_txn(&tid, (pid, epoch), commit).await?;
    r.code("EndTxn", code);
    // Kafka answers EndTxn before it writes the markers, so right after it
    // the LSO has often not moved yet; the testkit writes them first. Racy
    // on Kafka (a few ms either way), so a note, not an observation.
    let (_, lso_now, _) = w.list_offsets(&topic, 0, -1, READ_COMMITTED).await?;
    r.note(format!(
        "LSO right after EndTxn returned: {lso_now} ({})",
        if lso_now >= 5 {
            "markers already written"
        } else {
            "markers not written yet"
        }
    ));
    let f = w.fetch_when_stable(&topic, 0, 0, true, 5).await?;
    r.note(format!("markers visible after {:?}", started.elapsed()));
    let word = if commit { "committed" } else { "aborted" };
    put_fetch(r, &format!("{word}: fetch read_committed"), &f, true);
    r.put(format!("{word}: markers"), f.markers().join(" "));
    let f = w.fetch(&topic, 0, 0, false).await?;
    put_fetch(r, &format!("{word}: fetch read_uncommitted"), &f, false);
    let f = w.fetch(&topic, 0, 2, true).await?;
    put_fetch(r, &format!("{word}: fetch read_committed from 2"), &f, true);
    Ok(())
}

async fn zombie_fenced(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let tid = format!("{ns}-tx");
    let group = format!("{ns}-g");
    let (pid, e0) = open_txn_with_one_record(w, r, "zombie ", &topic, &tid, "z1").await?;

    let (answers, (code, pid1, e1)) = init_until_settled(w, &tid, LONG_TXN_TIMEOUT_MS).await?;
    r.put("new owner InitProducerId answers", answers);
    put_producer(r, "new owner InitProducerId", code, pid1);
    r.put(
        "new owner epoch - zombie epoch",
        i32::from(e1) - i32::from(e0),
    );

    // Everything the zombie may send next, at its old epoch.
    let (code, _) = txn_produce(w, &topic, &tid, (pid, e0), 1, "z2").await?;
    r.code("fenced: Produce", code);
    r.code(
        "fenced: AddPartitionsToTxn",
        w.add_partitions(&tid, (pid, e0), &topic, &[0]).await?,
    );
    r.code(
        "fenced: AddOffsetsToTxn",
        w.add_offsets(&tid, (pid, e0), &group).await?,
    );
    r.code(
        "fenced: TxnOffsetCommit",
        w.txn_offset_commit(&tid, (pid, e0), &group, -1, "", None, &topic, 0, 1)
            .await?,
    );
    r.code(
        "fenced: EndTxn commit",
        w.end_txn(&tid, (pid, e0), true).await?,
    );
    r.code(
        "fenced: EndTxn abort",
        w.end_txn(&tid, (pid, e0), false).await?,
    );
    let (code, _, _) = w
        .init_producer_id(&tid, LONG_TXN_TIMEOUT_MS, Some((pid, e0)))
        .await?;
    r.code("fenced: InitProducerId naming its old epoch", code);

    let f = w.fetch_when_stable(&topic, 0, 0, true, 2).await?;
    put_fetch(r, "after the fence: fetch read_committed", &f, true);
    r.put("after the fence: markers", f.markers().join(" "));
    Ok(())
}

async fn init_pid_while_open(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let tid = format!("{ns}-tx");
    let (_, e0) = open_txn_with_one_record(w, r, "old owner ", &topic, &tid, "old").await?;

    let started = Instant::now();
    let (answers, (code, pid1, e1)) = init_until_settled(w, &tid, LONG_TXN_TIMEOUT_MS).await?;
    r.note(format!(
        "InitProducerId settled after {:?}",
        started.elapsed()
    ));
    r.put("new owner InitProducerId answers", answers);
    put_producer(r, "new owner InitProducerId", code, pid1);
    r.put("new owner epoch - old epoch", i32::from(e1) - i32::from(e0));

    let f = w.fetch_when_stable(&topic, 0, 0, true, 2).await?;
    put_fetch(r, "old transaction: fetch read_committed", &f, true);
    r.put("old transaction: markers", f.markers().join(" "));

    // The new owner's own transaction.
    r.code(
        "new owner AddPartitionsToTxn",
        w.add_partitions(&tid, (pid1, e1), &topic, &[0]).await?,
    );
    let (code, offset) = txn_produce(w, &topic, &tid, (pid1, e1), 0, "new").await?;
    r.put(
        "new owner Produce",
        format!("{}@{offset}", super::code_name(code)),
    );
    r.code(
        "new owner EndTxn commit",
        w.end_txn(&tid, (pid1, e1), true).await?,
    );
    let f = w.fetch_when_stable(&topic, 0, 0, true, 4).await?;
    put_fetch(r, "new transaction: fetch read_committed", &f, true);
    Ok(())
}

async fn transaction_version_2(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let tid = format!("{ns}-tx");
    w.create_topic(&topic, 1, &[]).await?;
    let (negotiated, _) = super::wire::negotiated_versions(w.bootstrap()).await?;
    for api in [
        weir_protocol::ApiKey::InitProducerId,
        weir_protocol::ApiKey::Produce,
        weir_protocol::ApiKey::EndTxn,
    ] {
        r.put(
            format!("{api:?} sent at"),
            negotiated.get(&(api as i16)).copied().unwrap_or(-1),
        );
    }
    let (pid, e0) = init_txn(w, r, "InitProducerId", &tid, LONG_TXN_TIMEOUT_MS).await?;
    // No AddPartitionsToTxn: at transaction version 2 the partition leader
    // adds the partition when the first transactional batch arrives.
    let (code, _) = txn_produce(w, &topic, &tid, (pid, e0), 0, "one").await?;
    r.code(
        "first transaction: Produce without AddPartitionsToTxn",
        code,
    );
    let (code, pid1, e1) = w.end_txn_epoch(&tid, (pid, e0), true).await?;
    r.code("first transaction: EndTxn commit", code);
    let returned = if e1 < 0 {
        "none".to_owned()
    } else {
        let name = r.name("producer", &pid1.to_string());
        format!("{name}, epoch {:+}", i32::from(e1) - i32::from(e0))
    };
    r.put("first transaction: EndTxn returned", returned);
    // The next transaction at the epoch EndTxn returned, or the old one.
    let e = if e1 < 0 { e0 } else { e1 };
    let p = if e1 < 0 { pid } else { pid1 };
    // Wait for the first transaction's marker (LSO 2): on Kafka the
    // partition learns of the bumped epoch only from it, and a Produce at
    // the old epoch sent before it lands was seen accepted (1 run in 10).
    w.wait_latest(&topic, 0, READ_COMMITTED, 2).await?;
    let (code, _) = txn_produce(w, &topic, &tid, (pid, e0), 1, "stale").await?;
    r.code("second transaction: Produce at the first epoch", code);
    let (code, _) = txn_produce(w, &topic, &tid, (p, e), if e1 < 0 { 1 } else { 0 }, "two").await?;
    r.code("second transaction: Produce at the returned epoch", code);
    let (code, _, e2) = w.end_txn_epoch(&tid, (p, e), true).await?;
    r.code("second transaction: EndTxn commit", code);
    r.put(
        "second transaction: EndTxn returned epoch",
        if e2 < 0 {
            "none".to_owned()
        } else {
            format!("{:+}", i32::from(e2) - i32::from(e0))
        },
    );
    let (_, end, _) = w.list_offsets(&topic, 0, -1, READ_UNCOMMITTED).await?;
    let f = w.fetch_when_stable(&topic, 0, 0, true, end).await?;
    put_fetch(r, "fetch read_committed", &f, true);
    r.put("markers", f.markers().join(" "));
    Ok(())
}

async fn transaction_timeout(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let tid = format!("{ns}-tx");
    let (pid, e0) = begin_txn(w, r, "", &topic, &tid, SHORT_TXN_TIMEOUT_MS).await?;
    let started = Instant::now();
    let (code, _) = txn_produce(w, &topic, &tid, (pid, e0), 0, "late").await?;
    r.code("Produce", code);

    // The coordinator aborts it: the abort marker makes the LSO pass it.
    w.wait_latest(&topic, 0, READ_COMMITTED, 2).await?;
    r.note(format!(
        "aborted {:?} after the first write (timeout {SHORT_TXN_TIMEOUT_MS} ms)",
        started.elapsed()
    ));
    let f = w.fetch(&topic, 0, 0, true).await?;
    put_fetch(r, "timed out: fetch read_committed", &f, true);
    r.put("timed out: markers", f.markers().join(" "));

    // What the producer sees next, at its epoch.
    let (code, _) = txn_produce(w, &topic, &tid, (pid, e0), 1, "later").await?;
    r.code("next: Produce", code);
    let code = settle(
        r,
        "next: AddPartitionsToTxn",
        |c| *c,
        || w.add_partitions(&tid, (pid, e0), &topic, &[0]),
    )
    .await?;
    r.code("next: AddPartitionsToTxn", code);
    let code = settle(
        r,
        "next: EndTxn",
        |c| *c,
        || w.end_txn(&tid, (pid, e0), true),
    )
    .await?;
    r.code("next: EndTxn commit", code);
    let (code, pid1, e1) = settle(
        r,
        "next: InitProducerId",
        |a: &(i16, i64, i16)| a.0,
        || w.init_producer_id(&tid, SHORT_TXN_TIMEOUT_MS, Some((pid, e0))),
    )
    .await?;
    put_producer(r, "next: InitProducerId naming its epoch", code, pid1);
    if code == 0 {
        r.put("next: epoch - first epoch", i32::from(e1) - i32::from(e0));
    }
    Ok(())
}

async fn transaction_edges(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let tid = format!("{ns}-tx");
    let group = format!("{ns}-g");
    w.create_topic(&topic, 1, &[]).await?;
    let (code, _, _) = w
        .init_producer_id(&format!("{ns}-long"), 900_001, None)
        .await?;
    r.code(
        "InitProducerId with a timeout above transaction.max.timeout.ms",
        code,
    );
    let (pid, e) = init_txn(w, r, "InitProducerId", &tid, LONG_TXN_TIMEOUT_MS).await?;
    let mut p = (pid, e);
    // At transaction version 2 (EndTxn v5) an EndTxn that succeeds bumps
    // the epoch and returns it; a client goes on with the one returned.
    for (what, commit) in [
        ("EndTxn commit with no transaction", true),
        ("EndTxn abort with no transaction", false),
    ] {
        let (code, new_pid, new_epoch) = w.end_txn_epoch(&tid, p, commit).await?;
        r.code(what, code);
        let returned = if code == 0 && new_epoch >= 0 {
            let delta = i32::from(new_epoch) - i32::from(p.1);
            p = (new_pid, new_epoch);
            format!("epoch {delta:+}")
        } else {
            "none".to_owned()
        };
        r.put(format!("{what}: returned"), returned);
    }
    let (pid, e) = p;
    // An EndTxn that succeeded (transaction version 2) may still be
    // completing on Kafka: what follows is asked again through
    // CONCURRENT_TRANSACTIONS, as a client does.
    let code = settle(
        r,
        "EndTxn with another producer id",
        |c| *c,
        || w.end_txn(&tid, (pid + 1, e), true),
    )
    .await?;
    r.code("EndTxn with another producer id", code);
    r.code(
        "AddPartitionsToTxn for an unknown transactional id",
        w.add_partitions(&format!("{ns}-unknown"), p, &topic, &[0])
            .await?,
    );
    let missing = format!("{ns}-missing");
    let code = settle(
        r,
        "AddPartitionsToTxn of an unknown topic",
        |c| *c,
        || w.add_partitions(&tid, p, &missing, &[0]),
    )
    .await?;
    r.code("AddPartitionsToTxn of an unknown topic", code);
    r.code(
        "AddPartitionsToTxn of an unknown partition",
        w.add_partitions(&tid, p, &topic, &[7]).await?,
    );
    let (code, _) = txn_produce(w, &topic, &tid, (pid, e), 0, "early").await?;
    r.code("transactional Produce before AddPartitionsToTxn", code);
    r.code(
        "TxnOffsetCommit before AddOffsetsToTxn",
        w.txn_offset_commit(&tid, p, &group, -1, "", None, &topic, 0, 5)
            .await?,
    );
    r.code("AddOffsetsToTxn", w.add_offsets(&tid, p, &group).await?);
    r.code(
        "TxnOffsetCommit",
        w.txn_offset_commit(&tid, p, &group, -1, "", None, &topic, 0, 6)
            .await?,
    );
    let (code, offset) = w.offset_fetch(&group, &topic, 0, true).await?;
    r.put(
        "OffsetFetch require_stable while the offsets are pending",
        format!("{} offset {offset}", super::code_name(code)),
    );
    let (code, offset) = w.offset_fetch(&group, &topic, 0, false).await?;
    r.put(
        "OffsetFetch while the offsets are pending",
        format!("{} offset {offset}", super::code_name(code)),
    );
    r.code(
        "AddPartitionsToTxn",
        w.add_partitions(&tid, p, &topic, &[0]).await?,
    );
    let (code, _) = txn_produce(w, &topic, &tid, (pid, e), 0, "x").await?;
    r.code("transactional Produce", code);
    let (code, _) = txn_produce(w, &topic, &tid, (pid, e), 5, "gap").await?;
    r.code("transactional Produce with a sequence gap", code);
    let (code, new_pid, new_epoch) = w.end_txn_epoch(&tid, p, false).await?;
    r.code("EndTxn abort", code);
    let (p, next_seq) = if code == 0 && new_epoch >= 0 {
        ((new_pid, new_epoch), 0)
    } else {
        (p, 1)
    };
    let (code, offset) = stable_offset(w, &group, &topic).await?;
    r.put(
        "OffsetFetch require_stable after the abort",
        format!("{} offset {offset}", super::code_name(code)),
    );
    let (_, end, _) = w.list_offsets(&topic, 0, -1, READ_UNCOMMITTED).await?;
    let f = w.fetch_when_stable(&topic, 0, 0, true, end).await?;
    put_fetch(r, "after the abort: fetch read_committed", &f, true);

    // An open transaction (a partition added and written), then offsets
    // for a group that AddOffsetsToTxn never added.
    let other = format!("{ns}-other");
    // Right after EndTxn, Kafka may still be writing the markers.
    let code = settle(
        r,
        "second transaction: AddPartitionsToTxn",
        |c| *c,
        || w.add_partitions(&tid, p, &topic, &[0]),
    )
    .await?;
    r.code("second transaction: AddPartitionsToTxn", code);
    let (code, _) = txn_produce(w, &topic, &tid, p, next_seq, "second").await?;
    r.code("second transaction: Produce", code);
    r.code(
        "second transaction: TxnOffsetCommit for a group never added",
        w.txn_offset_commit(&tid, p, &other, -1, "", None, &topic, 0, 7)
            .await?,
    );
    r.code(
        "second transaction: EndTxn commit",
        w.end_txn(&tid, p, true).await?,
    );
    let (code, offset) = stable_offset(w, &other, &topic).await?;
    r.put(
        "second transaction: the group's committed offset",
        format!("{} offset {offset}", super::code_name(code)),
    );
    Ok(())
}

// ---- groups ----

/// One scripted group member.
struct Member {
    w: Wire,
    name: String,
    id: String,
    instance: Option<String>,
    generation: i32,
    owned: BTreeSet<i32>,
}

impl Member {
    async fn new(w: &Wire, instance: Option<&str>) -> Fallible<Member> {
        Ok(Member {
            w: w.fork().await?,
            name: String::new(),
            id: String::new(),
            instance: instance.map(str::to_owned),
            generation: -1,
            owned: BTreeSet::new(),
        })
    }

    fn subscription(&self, topic: &str) -> Fallible<Bytes> {
        Subscription {
            topics: vec![topic.to_owned()],
            user_data: Some(cooperative_sticky_user_data(self.generation)),
            owned_partitions: if self.owned.is_empty() {
                vec![]
            } else {
                vec![TopicPartitions {
                    topic: topic.to_owned(),
                    partitions: self.owned.iter().copied().collect(),
                }]
            },
            generation_id: self.generation,
            rack_id: None,
        }
        .encode(3)
        .map_err(|e| e.to_string())
    }

    /// JoinGroup (twice for a new dynamic member: MEMBER_ID_REQUIRED
    /// first); returns the first code and the final answer.
    async fn join(&self, group: &str, topic: &str, protocols: &[&str]) -> Fallible<(i16, Joined)> {
        let meta = self.subscription(topic)?;
        let protocols: Vec<(&str, Bytes)> = protocols.iter().map(|p| (*p, meta.clone())).collect();
        let first = self
            .w
            .join_group(group, &self.id, self.instance.as_deref(), &protocols)
            .await?;
        if first.code != MEMBER_ID_REQUIRED {
            return Ok((first.code, first));
        }
        let second = self
            .w
            .join_group(
                group,
                &first.member_id,
                self.instance.as_deref(),
                &protocols,
            )
            .await?;
        Ok((first.code, second))
    }

    /// Takes the member id and generation of a successful join.
    fn joined(&mut self, r: &mut Recorder, j: &Joined) {
        if j.code == 0 {
            self.id.clone_from(&j.member_id);
            self.generation = j.generation;
            self.name = r.name("member", &j.member_id);
        }
    }

    /// SyncGroup; as the leader, assigns with `assignor` from the join's
    /// member list. Returns the code and the partitions it was given, and
    /// takes them as owned.
    async fn sync(
        &mut self,
        r: &mut Recorder,
        group: &str,
        topic: &str,
        partitions: i32,
        joined: &Joined,
        assignor: Assignor,
    ) -> Fallible<(i16, BTreeSet<i32>)> {
        let protocol = joined.protocol.clone().unwrap_or_default();
        let mut assignments = Vec::new();
        if joined.leader == self.id && !joined.skip_assignment {
            let mut by_name: BTreeMap<String, String> = BTreeMap::new();
            let mut group_sub = GroupSubscription {
                members: BTreeMap::new(),
                partitions_per_topic: BTreeMap::from([(topic.to_owned(), partitions)]),
            };
            for (id, instance, meta) in &joined.members {
                let (_, sub) = Subscription::decode(meta).map_err(|e| e.to_string())?;
                let name = r.name("member", id);
                group_sub.members.insert(
                    name.clone(),
                    MemberSubscription::from_wire(instance.clone(), &sub),
                );
                by_name.insert(name, id.clone());
            }
            for (name, parts) in assignor.assign(&group_sub) {
                let bytes = to_wire_assignment(&parts)
                    .encode(3)
                    .map_err(|e| e.to_string())?;
                if let Some(id) = by_name.get(&name) {
                    assignments.push((id.clone(), bytes));
                }
            }
        }
        let (code, bytes) = self
            .w
            .sync_group(
                group,
                self.generation,
                &self.id,
                self.instance.as_deref(),
                &protocol,
                &assignments,
            )
            .await?;
        let mine = if code == 0 && !bytes.is_empty() {
            let (_, a) = Assignment::decode(&bytes).map_err(|e| e.to_string())?;
            a.assigned_partitions
                .iter()
                .filter(|tp| tp.topic == topic)
                .flat_map(|tp| tp.partitions.iter().copied())
                .collect()
        } else {
            BTreeSet::new()
        };
        if code == 0 {
            self.owned.clone_from(&mine);
        }
        Ok((code, mine))
    }

    async fn heartbeat(&self, group: &str) -> Fallible<i16> {
        self.w
            .heartbeat(group, self.generation, &self.id, self.instance.as_deref())
            .await
    }

    /// Heartbeats until the coordinator answers REBALANCE_IN_PROGRESS.
    async fn until_rebalance(&self, group: &str) -> Fallible<i16> {
        self.w
            .poll("REBALANCE_IN_PROGRESS on heartbeat", || async move {
                let code = self.heartbeat(group).await.ok()?;
                (code != 0).then_some(code)
            })
            .await
    }
}

/// Records what DescribeGroups says of the group.
async fn put_group(w: &Wire, r: &mut Recorder, what: &str, group: &str) -> Fallible<()> {
    let (code, state, protocol, members) = w.describe_group(group).await?;
    r.put(
        format!("{what}: DescribeGroups"),
        format!(
            "{} state {state} protocol {protocol:?} members {members}",
            super::code_name(code)
        ),
    );
    Ok(())
}

fn parts(p: &BTreeSet<i32>) -> String {
    format!("{p:?}")
}

fn members_listed(r: &mut Recorder, j: &Joined) -> String {
    let mut names: Vec<String> = j
        .members
        .iter()
        .map(|(id, instance, _)| {
            let n = r.name("member", id);
            match instance {
                Some(i) => format!("{n}({i})"),
                None => n,
            }
        })
        .collect();
    names.sort();
    format!("[{}]", names.join(", "))
}

/// Records a join's outcome relative to the scenario's first generation.
fn put_join(r: &mut Recorder, what: &str, first_code: i16, j: &Joined, base_generation: i32) {
    r.code(format!("{what}: first JoinGroup"), first_code);
    r.code(format!("{what}: JoinGroup"), j.code);
    r.put(
        format!("{what}: generation - first generation"),
        j.generation - base_generation,
    );
    let leader = r.name("member", &j.leader);
    r.put(format!("{what}: leader"), leader);
    r.put(
        format!("{what}: protocol"),
        j.protocol.clone().unwrap_or_else(|| "null".to_owned()),
    );
    let listed = members_listed(r, j);
    r.put(format!("{what}: members listed"), listed);
    r.put(format!("{what}: skip_assignment"), j.skip_assignment);
}

/// Two dynamic or static members A and B on `topic` in `group`: A joins
/// alone, then B joins and A rejoins. Returns them in generation 2 of the
/// scenario (A the leader), and A's first generation.
async fn two_members(
    w: &Wire,
    r: &mut Recorder,
    group: &str,
    topic: &str,
    partitions: i32,
    instances: (Option<&str>, Option<&str>),
    assignor: Assignor,
) -> Fallible<(Member, Member, i32)> {
    let protocols = [assignor.name()];
    let mut a = Member::new(w, instances.0).await?;
    let mut b = Member::new(w, instances.1).await?;
    let (first, j) = a.join(group, topic, &protocols).await?;
    let base = j.generation;
    a.joined(r, &j);
    put_join(r, "A joins alone", first, &j, base);
    let (code, got) = a.sync(r, group, topic, partitions, &j, assignor).await?;
    r.code("A joins alone: SyncGroup", code);
    r.put("A joins alone: A's partitions", parts(&got));
    put_group(w, r, "A joins alone", group).await?;

    // B joins; A learns of it from its heartbeat and rejoins.
    let b_join = {
        let b = Member {
            w: b.w.clone(),
            name: String::new(),
            id: String::new(),
            instance: b.instance.clone(),
            generation: -1,
            owned: BTreeSet::new(),
        };
        let (group, topic) = (group.to_owned(), topic.to_owned());
        let protocols: Vec<String> = protocols.iter().map(|p| (*p).to_owned()).collect();
        tokio::spawn(async move {
            let p: Vec<&str> = protocols.iter().map(String::as_str).collect();
            b.join(&group, &topic, &p).await
        })
    };
    let code = a.until_rebalance(group).await?;
    r.code("B joins: A's heartbeat", code);
    put_group(w, r, "B joins, before A rejoins", group).await?;
    let (_, ja) = a.join(group, topic, &protocols).await?;
    let (b_first, jb) = b_join.await.map_err(|e| e.to_string())??;
    a.joined(r, &ja);
    b.joined(r, &jb);
    put_join(r, "B joins: A", 0, &ja, base);
    put_join(r, "B joins: B", b_first, &jb, base);
    put_group(w, r, "B joins, before SyncGroup", group).await?;
    let (code_a, got_a) = a.sync(r, group, topic, partitions, &ja, assignor).await?;
    let (code_b, got_b) = b.sync(r, group, topic, partitions, &jb, assignor).await?;
    r.code("B joins: A's SyncGroup", code_a);
    r.code("B joins: B's SyncGroup", code_b);
    r.put("B joins: A's partitions", parts(&got_a));
    r.put("B joins: B's partitions", parts(&got_b));
    put_group(w, r, "B joins, after SyncGroup", group).await?;
    Ok((a, b, base))
}

async fn txn_offset_commit_generations(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let group = format!("{ns}-g");
    let tid = format!("{ns}-tx");
    w.create_topic(&topic, 2, &[]).await?;
    let (a, _b, base) = two_members(w, r, &group, &topic, 2, (None, None), Assignor::Range).await?;
    let stale = base;
    let current = a.generation;

    let (pid, epoch) = init_txn(w, r, "InitProducerId", &tid, LONG_TXN_TIMEOUT_MS).await?;
    r.code(
        "AddOffsetsToTxn",
        w.add_offsets(&tid, (pid, epoch), &group).await?,
    );
    let p = (pid, epoch);
    // Distinct offsets, so the one committed shows which commit counted last.
    let stale_code = w
        .txn_offset_commit(&tid, p, &group, stale, &a.id, None, &topic, 0, 1)
        .await?;
    r.code("TxnOffsetCommit, stale generation", stale_code);
    let unknown_code = w
        .txn_offset_commit(&tid, p, &group, current, "not-a-member", None, &topic, 0, 3)
        .await?;
    r.code("TxnOffsetCommit, unknown member", unknown_code);
    let current_code = w
        .txn_offset_commit(&tid, p, &group, current, &a.id, None, &topic, 0, 4)
        .await?;
    r.code("TxnOffsetCommit, current member", current_code);
    let reset_code = w
        .txn_offset_commit(&tid, p, &group, -1, "", None, &topic, 0, 2)
        .await?;
    r.code(
        "TxnOffsetCommit, reset member (generation -1, no member id)",
        reset_code,
    );
    r.code("EndTxn commit", w.end_txn(&tid, p, true).await?);
    let (code, offset) = stable_offset(w, &group, &topic).await?;
    r.code("OffsetFetch require_stable", code);
    r.put(
        "committed offset (4: current member last, 2: reset member)",
        offset,
    );
    Ok(())
}

async fn static_member_restart(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let group = format!("{ns}-g");
    w.create_topic(&topic, 2, &[]).await?;
    let (a, b, base) = two_members(
        w,
        r,
        &group,
        &topic,
        2,
        (Some("instance-a"), Some("instance-b")),
        Assignor::Range,
    )
    .await?;
    let before = a.owned.clone();
    let old_id = a.id.clone();
    let generation = a.generation;

    // A restarts: a new process with the same instance id and no member id.
    let mut restarted = Member::new(w, Some("instance-a")).await?;
    let (first, j) = restarted.join(&group, &topic, &["range"]).await?;
    put_join(r, "A restarts", first, &j, base);
    let new_name = r.name("member", &j.member_id);
    r.put("A restarts: a new member id", new_name != a.name);
    restarted.joined(r, &j);
    let (code, got) = restarted
        .sync(r, &group, &topic, 2, &j, Assignor::Range)
        .await?;
    r.code("A restarts: SyncGroup", code);
    r.put("A restarts: same partitions as before", got == before);
    r.put("A restarts: partitions", parts(&got));
    r.put(
        "A restarts: generation unchanged",
        restarted.generation == generation,
    );
    r.code("A restarts: B's heartbeat", b.heartbeat(&group).await?);
    r.code(
        "A restarts: heartbeat of A's old member id",
        w.heartbeat(&group, generation, &old_id, Some("instance-a"))
            .await?,
    );
    r.code(
        "A restarts: restarted A's heartbeat",
        restarted.heartbeat(&group).await?,
    );
    put_group(w, r, "A restarted", &group).await?;

    // The old process comes back with its old member id.
    let meta = restarted.subscription(&topic)?;
    let j = w
        .join_group(&group, &old_id, Some("instance-a"), &[("range", meta)])
        .await?;
    r.code("A's old member id: JoinGroup", j.code);
    let (code, _) = w
        .sync_group(
            &group,
            generation,
            &old_id,
            Some("instance-a"),
            "range",
            &[],
        )
        .await?;
    r.code("A's old member id: SyncGroup", code);

    // The restarted A leaves for good: B rebalances alone.
    let (top, member) = restarted
        .w
        .leave_group(&group, &restarted.id, Some("instance-a"))
        .await?;
    r.put(
        "A leaves: LeaveGroup",
        format!(
            "{} / member {}",
            super::code_name(top),
            super::code_name(member)
        ),
    );
    let mut b = b;
    r.code("A leaves: B's heartbeat", b.until_rebalance(&group).await?);
    let (first, j) = b.join(&group, &topic, &["range"]).await?;
    b.joined(r, &j);
    put_join(r, "A leaves: B", first, &j, base);
    let (code, got) = b.sync(r, &group, &topic, 2, &j, Assignor::Range).await?;
    r.code("A leaves: B's SyncGroup", code);
    r.put("A leaves: B's partitions", parts(&got));
    put_group(w, r, "A left", &group).await?;
    Ok(())
}

async fn cooperative_sticky(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let group = format!("{ns}-g");
    let assignor = Assignor::CooperativeSticky;
    w.create_topic(&topic, 4, &[]).await?;
    let (mut a, mut b, base) = two_members(w, r, &group, &topic, 4, (None, None), assignor).await?;

    // A gave up the partitions it no longer has and rejoins; B follows.
    let a_join = {
        let a = Member {
            w: a.w.clone(),
            name: a.name.clone(),
            id: a.id.clone(),
            instance: None,
            generation: a.generation,
            owned: a.owned.clone(),
        };
        let (group, topic) = (group.clone(), topic.clone());
        tokio::spawn(async move { a.join(&group, &topic, &[assignor.name()]).await })
    };
    let code = b.until_rebalance(&group).await?;
    r.code("A rejoins after revoking: B's heartbeat", code);
    let (_, jb) = b.join(&group, &topic, &[assignor.name()]).await?;
    let (_, ja) = a_join.await.map_err(|e| e.to_string())??;
    a.joined(r, &ja);
    b.joined(r, &jb);
    put_join(r, "A rejoins after revoking: A", 0, &ja, base);
    put_join(r, "A rejoins after revoking: B", 0, &jb, base);
    let (ca, pa) = a.sync(r, &group, &topic, 4, &ja, assignor).await?;
    let (cb, pb) = b.sync(r, &group, &topic, 4, &jb, assignor).await?;
    r.code("A rejoins after revoking: A's SyncGroup", ca);
    r.code("A rejoins after revoking: B's SyncGroup", cb);
    r.put("A rejoins after revoking: A's partitions", parts(&pa));
    r.put("A rejoins after revoking: B's partitions", parts(&pb));

    // B leaves.
    let (top, member) = b.w.leave_group(&group, &b.id, None).await?;
    r.code("B leaves: LeaveGroup", top);
    r.code("B leaves: LeaveGroup member", member);
    let code = a.until_rebalance(&group).await?;
    r.code("B leaves: A's heartbeat", code);
    let (_, ja) = a.join(&group, &topic, &[assignor.name()]).await?;
    a.joined(r, &ja);
    put_join(r, "B leaves: A", 0, &ja, base);
    let (ca, pa) = a.sync(r, &group, &topic, 4, &ja, assignor).await?;
    r.code("B leaves: A's SyncGroup", ca);
    r.put("B leaves: A's partitions", parts(&pa));
    r.code("B leaves: B's heartbeat", b.heartbeat(&group).await?);
    put_group(w, r, "B left", &group).await?;
    Ok(())
}

async fn group_edges(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let group = format!("{ns}-g");
    w.create_topic(&topic, 2, &[]).await?;
    let mut a = Member::new(w, None).await?;
    let (first, j) = a.join(&group, &topic, &["range"]).await?;
    a.joined(r, &j);
    put_join(r, "A joins alone", first, &j, j.generation);
    let (code, _) = a.sync(r, &group, &topic, 2, &j, Assignor::Range).await?;
    r.code("A's SyncGroup", code);
    let (code, _) =
        a.w.sync_group(&group, a.generation - 1, &a.id, None, "range", &[])
            .await?;
    r.code("SyncGroup with a stale generation", code);
    r.code(
        "Heartbeat with a stale generation",
        a.w.heartbeat(&group, a.generation - 1, &a.id, None).await?,
    );
    r.code(
        "Heartbeat with the next generation",
        a.w.heartbeat(&group, a.generation + 1, &a.id, None).await?,
    );
    r.code(
        "Heartbeat of an unknown member",
        a.w.heartbeat(&group, a.generation, "not-a-member", None)
            .await?,
    );
    r.code(
        "Heartbeat of a dynamic member with an instance id",
        a.w.heartbeat(&group, a.generation, &a.id, Some("stray"))
            .await?,
    );
    let (top, member) = a.w.leave_group(&group, "not-a-member", None).await?;
    r.put(
        "LeaveGroup of an unknown member",
        format!(
            "{} / member {}",
            super::code_name(top),
            super::code_name(member)
        ),
    );
    let b = Member::new(w, None).await?;
    let (first, j) = b.join(&group, &topic, &["roundrobin"]).await?;
    r.code("JoinGroup with no protocol in common: first", first);
    r.code("JoinGroup with no protocol in common", j.code);
    r.code("A's heartbeat after it", a.heartbeat(&group).await?);
    let (top, member) = a.w.leave_group(&group, &a.id, None).await?;
    r.put(
        "A leaves",
        format!(
            "{} / member {}",
            super::code_name(top),
            super::code_name(member)
        ),
    );
    r.code("A's heartbeat after leaving", a.heartbeat(&group).await?);
    put_group(w, r, "A left", &group).await?;
    Ok(())
}

async fn initial_rebalance_delay(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    let group = format!("{ns}-g");
    w.create_topic(&topic, 1, &[]).await?;
    let mut a = Member::new(w, None).await?;
    // Find the coordinator first, so the time measured is the join's.
    w.coordinator(weir_client::cluster::CoordinatorKind::Group, &group)
        .await?;
    let started = Instant::now();
    let (first, j) = a.join(&group, &topic, &["range"]).await?;
    let held = started.elapsed();
    a.joined(r, &j);
    r.code("first JoinGroup", first);
    r.code("JoinGroup", j.code);
    r.note(format!("the first join of an empty group took {held:?}"));
    r.put(
        "the first join of an empty group is held about 3 s (group.initial.rebalance.delay.ms)",
        held >= Duration::from_millis(2_500),
    );
    Ok(())
}

// ---- offsets and logs ----

async fn list_offsets_by_timestamp(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    w.create_topic(&topic, 1, &[]).await?;
    let t0 = now_ms() - 60_000;
    for (ts, v) in [(100, "r0"), (300, "r1"), (200, "r2")] {
        let rec = Rec {
            key: None,
            value: Some(v.to_owned()),
            timestamp: t0 + ts,
        };
        let (code, _) = w.produce(&topic, 0, None, Writer::PLAIN, &[rec]).await?;
        r.code(format!("produce {v} at t0+{ts}"), code);
    }
    let rel = |ts: i64| {
        if ts < 0 {
            ts.to_string()
        } else {
            format!("t0+{}", ts - t0)
        }
    };
    let mut queries: Vec<(String, i64)> = vec![
        ("EARLIEST (-2)".to_owned(), -2),
        ("LATEST (-1)".to_owned(), -1),
    ];
    for d in [0, 100, 150, 250, 300, 301] {
        queries.push((format!("timestamp t0+{d}"), t0 + d));
    }
    if w.version(weir_protocol::ApiKey::ListOffsets)
        .is_some_and(|v| v >= 7)
    {
        queries.push(("MAX_TIMESTAMP (-3)".to_owned(), -3));
    }
    for (what, ts) in queries {
        let (code, offset, timestamp) = w.list_offsets(&topic, 0, ts, READ_UNCOMMITTED).await?;
        r.put(
            format!("ListOffsets {what}"),
            format!(
                "{} offset {offset} timestamp {}",
                super::code_name(code),
                rel(timestamp)
            ),
        );
    }
    Ok(())
}

async fn idempotent_produce(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    w.create_topic(&topic, 1, &[]).await?;
    let leader = w.leader(&topic, 0).await?;
    let (code, pid, e) = w.init_idempotent(leader).await?;
    put_producer(r, "InitProducerId (idempotent)", code, pid);
    let idem = |epoch: i16, seq: i32| Writer {
        producer_id: pid,
        epoch,
        sequence: seq,
        transactional: false,
    };
    let steps: [(&str, i16, i32, &str); 8] = [
        ("sequence 0", e, 0, "a"),
        ("sequence 0 again (a duplicate)", e, 0, "a"),
        ("sequence 1", e, 1, "b"),
        ("sequence 3 (a gap)", e, 3, "d"),
        ("sequence 0 once more (an older duplicate)", e, 0, "a"),
        ("the next epoch, sequence 0", e + 1, 0, "c"),
        ("the first epoch again, sequence 2", e, 2, "z"),
        ("the next epoch, sequence 2 (a gap)", e + 1, 2, "y"),
    ];
    for (what, epoch, seq, v) in steps {
        let (code, offset) = w
            .produce(&topic, 0, None, idem(epoch, seq), &[Rec::value(v)])
            .await?;
        r.put(
            format!("Produce {what}"),
            if code == 0 {
                format!("NONE@{offset}")
            } else {
                super::code_name(code)
            },
        );
    }
    let (code, _) = w
        .produce(
            &topic,
            0,
            None,
            Writer {
                producer_id: pid + 1_000_000,
                epoch: 0,
                sequence: 5,
                transactional: false,
            },
            &[Rec::value("u")],
        )
        .await?;
    r.code("Produce of an unknown producer id at sequence 5", code);
    let f = w.fetch(&topic, 0, 0, false).await?;
    put_fetch(r, "fetch", &f, false);
    Ok(())
}

async fn compacted_changelog(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-changelog");
    let configs = [
        ("cleanup.policy", "compact"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("segment.ms", "100"),
    ];
    w.create_topic(&topic, 1, &configs).await?;
    r.put(
        "cleanup.policy",
        w.topic_config(&topic, "cleanup.policy")
            .await?
            .unwrap_or_default(),
    );
    let writes: [(&str, Option<&str>); 7] = [
        ("k1", Some("v1")),
        ("k2", Some("v1")),
        ("k1", Some("v2")),
        ("k3", Some("v1")),
        ("k2", Some("v2")),
        ("k3", None),
        ("k1", Some("v3")),
    ];
    let mut produced: BTreeMap<i64, (String, Option<String>)> = BTreeMap::new();
    for (k, v) in writes {
        let rec = Rec {
            key: Some(k.to_owned()),
            value: v.map(str::to_owned),
            timestamp: now_ms(),
        };
        let (code, offset) = w.produce(&topic, 0, None, Writer::PLAIN, &[rec]).await?;
        r.code(format!("produce {k}"), code);
        produced.insert(offset, (k.to_owned(), v.map(str::to_owned)));
    }
    // Compaction: the testkit's cleaner runs when told; Kafka's runs on its
    // own schedule, on closed segments only, so it may or may not have run
    // by the time of the fetch. The observations are what holds either way.
    if let Some(kit) = w.testkit() {
        let stats = kit
            .compact(&topic, false)
            .await
            .map_err(|e| e.to_string())?;
        r.note(format!("testkit compaction: {stats:?}"));
    }
    let f = w.fetch(&topic, 0, 0, false).await?;
    r.code("fetch: error", f.code);
    r.put("fetch: high watermark", f.hwm);
    r.put("fetch: log start offset", f.log_start);
    let read: Vec<(i64, Option<String>, Option<String>)> = f
        .batches
        .iter()
        .flat_map(|b| {
            b.records.iter().map(|rec| {
                (
                    rec.offset,
                    rec.key
                        .as_deref()
                        .map(|k| String::from_utf8_lossy(k).into_owned()),
                    rec.value
                        .as_deref()
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                )
            })
        })
        .collect();
    r.put(
        "records left after compaction",
        format!("{} of {}", read.len(), produced.len()),
    );
    let at_their_offsets = read.iter().all(|(o, k, v)| {
        produced
            .get(o)
            .is_some_and(|(pk, pv)| Some(pk) == k.as_ref() && pv == v)
    });
    r.put(
        "every record read is the one written at its offset",
        at_their_offsets,
    );
    r.put(
        "offsets strictly increase",
        read.windows(2).all(|p| p[0].0 < p[1].0),
    );
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    for (_, k, v) in &read {
        latest.insert(
            k.clone().unwrap_or_default(),
            v.clone().unwrap_or_else(|| "null".to_owned()),
        );
    }
    r.put("the latest value of each key", format!("{latest:?}"));
    let last_offsets_kept = [4_i64, 5, 6]
        .iter()
        .all(|o| read.iter().any(|(ro, ..)| ro == o));
    r.put(
        "each key's last record is still there (offsets 4, 5, 6)",
        last_offsets_kept,
    );
    Ok(())
}

async fn delete_records(w: &Wire, ns: &str, r: &mut Recorder) -> Fallible<()> {
    let topic = format!("{ns}-t");
    w.create_topic(&topic, 1, &[]).await?;
    for i in 0..5 {
        let (code, _) = w
            .produce(
                &topic,
                0,
                None,
                Writer::PLAIN,
                &[Rec::value(&format!("r{i}"))],
            )
            .await?;
        r.code(format!("produce r{i}"), code);
    }
    let (code, low) = w.delete_records(&topic, 0, 3).await?;
    r.put(
        "DeleteRecords before 3",
        format!("{} low watermark {low}", super::code_name(code)),
    );
    let (code, offset, _) = w.list_offsets(&topic, 0, -2, READ_UNCOMMITTED).await?;
    r.put(
        "ListOffsets EARLIEST",
        format!("{} offset {offset}", super::code_name(code)),
    );
    let f = w.fetch(&topic, 0, 1, false).await?;
    r.code("fetch from 1: error", f.code);
    r.put("fetch from 1: records", values(&f.all_values()));
    let f = w.fetch(&topic, 0, 3, false).await?;
    put_fetch(r, "fetch from 3", &f, false);
    let (code, low) = w.delete_records(&topic, 0, 10).await?;
    r.put(
        "DeleteRecords before 10 (past the high watermark)",
        format!("{} low watermark {low}", super::code_name(code)),
    );
    let (code, low) = w.delete_records(&topic, 0, 2).await?;
    r.put(
        "DeleteRecords before 2 (below the log start)",
        format!("{} low watermark {low}", super::code_name(code)),
    );
    let (code, low) = w.delete_records(&topic, 0, -1).await?;
    r.put(
        "DeleteRecords before -1 (the high watermark)",
        format!("{} low watermark {low}", super::code_name(code)),
    );
    let f = w.fetch(&topic, 0, 5, false).await?;
    put_fetch(r, "fetch from 5", &f, false);
    let f = w.fetch(&topic, 0, 4, false).await?;
    r.code("fetch from 4: error", f.code);
    Ok(())
}
