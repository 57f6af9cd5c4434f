//! Restores and task placement on the runtime, on the in-process cluster
//! under tokio's paused clock:
//! - a restart with its state directory intact restores only the changelog
//!   tail its stores have not committed; a new instance restores everything
//!   before it processes;
//! - a changelog tail of aborted records (an owner's transaction aborted at
//!   a rebalance) is passed over at once, not after a poll's timeout;
//! - the streams assignor spreads stateful tasks by capacity and keeps the
//!   co-partitioned partitions of a task together.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;
use weir_client::producer::{Producer, ProducerRecord};
use weir_client::transaction::{TransactionConfig, TransactionalProducer};
use weir_streams::runtime::{Role, TaskState};

const CHANGELOG: &str = "wc-counts-changelog";

fn word_lines(n: usize, seed: u64) -> (Vec<String>, BTreeMap<String, u64>) {
    lines(n, seed)
}

fn total(counts: &BTreeMap<String, u64>) -> u64 {
    counts.values().sum()
}

/// The stores of every task of `tasks` under `dir`, merged.
fn stores(dir: &std::path::Path, tasks: impl Iterator<Item = String>) -> BTreeMap<String, u64> {
    let mut all = BTreeMap::new();
    for t in tasks {
        all.extend(store_counts(dir, "wc", &t));
    }
    all
}

#[tokio::test(start_paused = true)]
async fn a_restart_restores_only_the_tail_and_a_new_instance_restores_everything() {
    let kit = testkit(1, 2).await;
    let (first, mut expected) = word_lines(100, 3);
    produce_words(&kit, &first).await;
    let words_first = total(&expected);
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dir.path(), &[]),
    )
    .await;
    eventually(
        "the first batch counted",
        Duration::from_secs(120),
        || async { read_committed(&kit, OUTPUT).await.len() as u64 >= words_first },
    )
    .await;
    a.close(Duration::from_secs(30)).await.unwrap();

    // The tail: records another owner wrote to partition 0's changelog
    // after this instance's stores last committed.
    let producer = Producer::with_cluster(client(&kit, "other").await, Default::default()).unwrap();
    let tail = ["tail-a", "tail-b", "tail-c"];
    let mut acks = Vec::new();
    for word in tail {
        let record = ProducerRecord::new(CHANGELOG)
            .with_partition(0)
            .with_key(word.to_owned())
            .with_value(bytes::Bytes::copy_from_slice(&7u64.to_be_bytes()));
        acks.push(producer.enqueue(record).await.unwrap());
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }
    for word in tail {
        expected.insert(word.to_owned(), 7);
    }

    let (second, more) = word_lines(50, 5);
    produce_words(&kit, &second).await;
    for (w, n) in &more {
        *expected.entry(w.clone()).or_default() += n;
    }
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dir.path(), &[]),
    )
    .await;
    let words = words_first + total(&more);
    eventually(
        "the second batch counted",
        Duration::from_secs(120),
        || async { read_committed(&kit, OUTPUT).await.len() as u64 >= words },
    )
    .await;
    assert_eq!(
        a.metrics().restored_records,
        tail.len() as u64,
        "only the tail is restored"
    );
    a.close(Duration::from_secs(30)).await.unwrap();
    let tasks = || ["0_0", "0_1"].into_iter().map(String::from);
    assert_eq!(stores(dir.path(), tasks()), expected);

    // A new instance on an empty directory restores every changelog record
    // before it processes. The last stable offsets once the close's
    // commit markers are written:
    kit.markers_written().await.unwrap();
    let (_, end0, _) = kit.offsets(CHANGELOG, 0).await.unwrap();
    let (_, end1, _) = kit.offsets(CHANGELOG, 1).await.unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let b = start(
        count_keys(),
        streams_config(&kit, "wc", "b", fresh.path(), &[]),
    )
    .await;
    eventually(
        "b restored and running",
        Duration::from_secs(120),
        || async {
            let m = b.metrics();
            m.tasks.len() == 2 && m.restoring_tasks == 0 && m.restored_records > 0
        },
    )
    .await;
    // One changelog record per input word, and the tail; the per-task
    // fence's commit markers are offsets, not records.
    assert_eq!(b.metrics().restored_records, words + tail.len() as u64);
    assert!(end0 + end1 > i64::try_from(words).unwrap());
    b.close(Duration::from_secs(30)).await.unwrap();
    assert_eq!(stores(fresh.path(), tasks()), expected);
}

#[tokio::test(start_paused = true)]
async fn stateful_tasks_spread_by_capacity() {
    let kit = testkit(1, 6).await;
    let (input, expected) = lines(120, 9);
    produce_lines(&kit, &input).await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = start(
        word_count(),
        streams_config(
            &kit,
            "wc",
            "a",
            dirs[0].path(),
            &[("num.stream.threads", "2")],
        ),
    )
    .await;
    let b = start(
        word_count(),
        streams_config(
            &kit,
            "wc",
            "b",
            dirs[1].path(),
            &[("num.stream.threads", "1")],
        ),
    )
    .await;
    eventually("every task placed", Duration::from_secs(120), || async {
        a.metrics().tasks.len() + b.metrics().tasks.len() == 12 && !b.metrics().tasks.is_empty()
    })
    .await;
    let stateful =
        |m: &weir_streams::runtime::Metrics| m.tasks.keys().filter(|t| t.subtopology == 1).count();
    // Capacity 2 : 1 over 6 stateful and 6 stateless tasks.
    assert_eq!(stateful(&a.metrics()), 4, "{:?}", a.metrics());
    assert_eq!(stateful(&b.metrics()), 2, "{:?}", b.metrics());
    assert_eq!(a.metrics().tasks.len(), 8);
    eventually("every word counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total(&expected)
    })
    .await;
    assert_eq!(last_counts(&read_committed(&kit, OUTPUT).await), expected);
    a.close(Duration::from_secs(30)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
}

/// Counts keys across both of its inputs, in one store.
struct Merge(weir_streams::state::KvStoreRef<String, u64>);

impl weir_streams::processor::Processor<String, ()> for Merge {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut weir_streams::processor::ProcessorContext<'_, String, String>,
        r: weir_streams::Record<String, ()>,
    ) -> Result<(), weir_streams::ProcessError> {
        let store = ctx.kv_store(&self.0)?;
        let n = store.get(&r.key)?.unwrap_or(0) + 1;
        store.put(&r.key, &n, r.timestamp)?;
        ctx.forward(weir_streams::Record::new(r.key, n.to_string(), r.timestamp));
        Ok(())
    }
}

/// A subtopology reading two co-partitioned topics: each task gets the same
/// partition of both, so a key's records from either topic meet in one store.
#[tokio::test(start_paused = true)]
async fn a_subtopology_reading_two_topics_gets_both_partitions_in_one_task() {
    let kit = testkit(1, 4).await;
    kit.create_topic("other", 4, std::iter::empty::<(String, String)>())
        .await
        .unwrap();
    let topology = || {
        let mut b = weir_streams::TopologyBuilder::new();
        let counts = b.kv_store::<String, u64>("counts");
        let left = b.source::<String, ()>("left", &[INPUT]);
        let right = b.source::<String, ()>("right", &["other"]);
        let c = counts.clone();
        let merged = b.processor(
            "merge",
            &[&left, &right],
            move || Merge(c.clone()),
            &[&counts],
        );
        b.sink("out", &[&merged], OUTPUT);
        b.build().unwrap()
    };
    assert_eq!(topology().subtopology_count(), 1);

    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let x = start(
        topology(),
        streams_config(&kit, "wc", "x", dirs[0].path(), &[]),
    )
    .await;
    let y = start(
        topology(),
        streams_config(&kit, "wc", "y", dirs[1].path(), &[]),
    )
    .await;
    // The four tasks split two and two. Then every key's records from both
    // topics must meet in one store: a task given partition p of one topic
    // but not of the other would split the counts.
    eventually(
        "both instances run tasks",
        Duration::from_secs(120),
        || async { x.metrics().tasks.len() == 2 && y.metrics().tasks.len() == 2 },
    )
    .await;
    let (input, mut expected) = lines(60, 21);
    produce_words(&kit, &input).await;
    let producer =
        Producer::with_cluster(client(&kit, "other-feeder").await, Default::default()).unwrap();
    let mut acks = Vec::new();
    for line in &input {
        for w in line.split_whitespace() {
            acks.push(
                producer
                    .enqueue(ProducerRecord::new("other").with_key(w.to_owned()))
                    .await
                    .unwrap(),
            );
            *expected.get_mut(w).unwrap() += 1;
        }
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }
    eventually("every record counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total(&expected)
    })
    .await;
    assert_eq!(last_counts(&read_committed(&kit, OUTPUT).await), expected);
    x.close(Duration::from_secs(30)).await.unwrap();
    y.close(Duration::from_secs(30)).await.unwrap();
}

/// Under exactly-once, an instance restarted on its state directory after a
/// crash has its predecessor's transactional ids (they derive from the
/// process id kept there): it must fence them before it restores, so the
/// crashed process's open transaction is aborted at once. Otherwise the
/// restore (read_committed, up to the end of the changelog) waits for that
/// transaction to time out, and every reader of the outputs it touched waits
/// with it. Here the transaction timeout is 120 s; the restarted instance
/// must have counted everything well within it.
#[tokio::test(start_paused = true)]
async fn a_restarted_exactly_once_instance_aborts_its_crashed_predecessors_transaction_at_once() {
    let kit = testkit(1, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let props = [
        ("processing.guarantee", "exactly_once_v2"),
        ("commit.interval.ms", "20000"),
        ("transaction.timeout.ms", "120000"),
        ("group.instance.id", "a"),
    ];
    let (first, mut expected) = word_lines(60, 43);
    let words_first = total(&expected);
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dir.path(), &props),
    )
    .await;
    produce_words(&kit, &first).await;
    eventually(
        "the first batch counted",
        Duration::from_secs(120),
        || async { read_committed(&kit, OUTPUT).await.len() as u64 >= words_first },
    )
    .await;
    // The second batch is processed but not committed (the commit interval
    // is 20 s): a's transactions are open, on the changelog and the output.
    let (second, more) = word_lines(40, 47);
    for (w, n) in more {
        *expected.entry(w).or_default() += n;
    }
    let words = total(&expected);
    produce_words(&kit, &second).await;
    eventually(
        "the second batch processed",
        Duration::from_secs(10),
        || async { a.metrics().processed >= words },
    )
    .await;
    assert_eq!(
        read_committed(&kit, OUTPUT).await.len() as u64,
        words_first,
        "the second batch is still in an open transaction"
    );
    a.kill();
    let restarted = tokio::time::Instant::now();
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dir.path(), &props),
    )
    .await;
    eventually(
        "every word counted, long before the crashed transaction's timeout",
        Duration::from_secs(60),
        || async { read_committed(&kit, OUTPUT).await.len() as u64 >= words },
    )
    .await;
    println!(
        "counted everything {:?} after the restart",
        restarted.elapsed()
    );
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len() as u64, words, "exactly once");
    assert_eq!(last_counts(&out), expected);
    a.close(Duration::from_secs(30)).await.unwrap();
}

/// A changelog whose tail past the store's committed offset is one aborted
/// transaction (an owner's, aborted when the group refused its commit at a
/// rebalance: issue 15's rolling deploy) holds no record to restore, and
/// the first fetch moves the restore's position past it. The restore is
/// done then: it took a whole 500 ms poll per store, 1.5 s of the rolling
/// deploy's 2 s per task with three stores.
#[tokio::test(start_paused = true)]
async fn an_aborted_changelog_tail_is_passed_over_without_waiting_out_a_poll() {
    let kit = testkit(1, 1).await;
    let (words, expected) = word_lines(40, 11);
    produce_words(&kit, &words).await;
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dir.path(), &[]),
    )
    .await;
    let n = total(&expected);
    eventually("the words counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= n
    })
    .await;
    a.close(Duration::from_secs(30)).await.unwrap();

    let txn = TransactionalProducer::with_cluster(
        client(&kit, "aborting").await,
        Default::default(),
        TransactionConfig::new("aborting-owner"),
    )
    .unwrap();
    txn.init_transactions().await.unwrap();
    txn.begin().unwrap();
    for word in ["aborted-a", "aborted-b", "aborted-c"] {
        let record = ProducerRecord::new(CHANGELOG)
            .with_partition(0)
            .with_key(word.to_owned())
            .with_value(bytes::Bytes::copy_from_slice(&9u64.to_be_bytes()));
        txn.send(record).await.unwrap();
    }
    txn.abort().await.unwrap();
    txn.close().await;

    let a = start(
        count_keys(),
        streams_config(&kit, "wc", "a", dir.path(), &[]),
    )
    .await;
    let restore = assigned_to_running(&a, "0_0").await;
    println!("assigned to running: {restore:?}");
    assert_eq!(
        a.metrics().restored_records,
        0,
        "nothing committed to restore"
    );
    assert!(
        restore < Duration::from_millis(250),
        "the restore waited {restore:?} over an aborted tail"
    );
    a.close(Duration::from_secs(30)).await.unwrap();
    assert_eq!(stores(dir.path(), ["0_0".to_owned()].into_iter()), expected);
}

/// Counts each key into two stores, `counts` and `seen`: two changelogs,
/// restored one after the other.
fn count_twice() -> weir_streams::Topology {
    use weir_streams::processor::{Processor, ProcessorContext};
    use weir_streams::state::KvStoreRef;
    use weir_streams::{ProcessError, Record, TopologyBuilder};
    struct CountTwice(KvStoreRef<String, u64>, KvStoreRef<String, u64>);
    impl Processor<String, ()> for CountTwice {
        type KOut = String;
        type VOut = String;
        fn process(
            &mut self,
            ctx: &mut ProcessorContext<'_, String, String>,
            r: Record<String, ()>,
        ) -> Result<(), ProcessError> {
            let counts = ctx.kv_store(&self.0)?;
            let n = counts.get(&r.key)?.unwrap_or(0) + 1;
            counts.put(&r.key, &n, r.timestamp)?;
            ctx.kv_store(&self.1)?.put(&r.key, &n, r.timestamp)?;
            ctx.forward(Record::new(r.key, n.to_string(), r.timestamp));
            Ok(())
        }
    }
    let mut b = TopologyBuilder::new();
    let counts = b.kv_store::<String, u64>("counts");
    let seen = b.kv_store::<String, u64>("seen");
    let words = b.source::<String, ()>("words", &[INPUT]);
    let (c, s) = (counts.clone(), seen.clone());
    let counted = b.processor(
        "count",
        &[&words],
        move || CountTwice(c.clone(), s.clone()),
        &[&counts, &seen],
    );
    b.sink("out", &[&counted], OUTPUT);
    b.build().unwrap()
}

/// An active restore's fetches are short: each store's restore consumer,
/// done at the changelog's end, leaves a prefetch behind on the instance's
/// restore connection, which the broker serves one request at a time, so
/// the next store's first fetch waited for it, up to fetch.max.wait.ms
/// (as it waited for every standby's long poll there). Issue 15's rolling
/// deploy: with three stores, 0.5-1 s of the worst task's delay.
#[tokio::test(start_paused = true)]
async fn a_restore_does_not_wait_behind_the_previous_stores_long_poll() {
    let kit = testkit(1, 1).await;
    let (words, expected) = word_lines(40, 13);
    produce_words(&kit, &words).await;
    let dir = tempfile::tempdir().unwrap();
    let props = [("fetch.max.wait.ms", "2000")];
    let a = start(
        count_twice(),
        streams_config(&kit, "wc", "a", dir.path(), &props),
    )
    .await;
    let n = total(&expected);
    eventually("the words counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= n
    })
    .await;
    a.close(Duration::from_secs(30)).await.unwrap();

    // A tail on both changelogs, for both stores to restore.
    let producer = Producer::with_cluster(client(&kit, "other").await, Default::default()).unwrap();
    let mut acks = Vec::new();
    for topic in ["wc-counts-changelog", "wc-seen-changelog"] {
        let record = ProducerRecord::new(topic)
            .with_partition(0)
            .with_key("tail".to_owned())
            .with_value(bytes::Bytes::copy_from_slice(&7u64.to_be_bytes()));
        acks.push(producer.enqueue(record).await.unwrap());
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }

    let a = start(
        count_twice(),
        streams_config(&kit, "wc", "a", dir.path(), &props),
    )
    .await;
    let restore = assigned_to_running(&a, "0_0").await;
    println!("assigned to running: {restore:?}");
    assert_eq!(a.metrics().restored_records, 2, "one tail record per store");
    assert!(
        restore < Duration::from_millis(500),
        "the restore waited {restore:?} (fetch.max.wait.ms 2000)"
    );
    a.close(Duration::from_secs(30)).await.unwrap();
}

/// How long `task` took from its assignment as an active to running on
/// `instance` (polled every 5 ms of virtual time, for at most 100 s).
async fn assigned_to_running(instance: &weir_streams::KafkaStreams, task: &str) -> Duration {
    let monitor = instance.task_monitor();
    for _ in 0..20_000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let Some(t) = monitor
            .tasks()
            .into_iter()
            .find(|t| t.id.to_string() == task)
        else {
            continue;
        };
        if t.state == TaskState::Running {
            let acquired = t
                .history
                .iter()
                .rfind(|o| o.role == Role::Active)
                .unwrap()
                .acquired_at;
            return acquired.elapsed();
        }
    }
    panic!("task {task} running after the restart");
}

/// A standby's fetches go over connections of their own: they wait at the
/// broker for new changelog records (here up to 2 s), and a restore on the
/// same connection queued behind them. When b closes, its task moves to
/// a, whose standby of it was long-polling until the promotion; the
/// task's tail restore must not wait for that poll's answer (issue 15:
/// 100-320 ms per store in the rolling deploy).
#[tokio::test(start_paused = true)]
async fn a_promoted_standbys_restore_does_not_wait_behind_standby_long_polls() {
    let kit = testkit(1, 3).await;
    let (words, expected) = word_lines(90, 17);
    produce_words(&kit, &words).await;
    let n = total(&expected);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [("fetch.max.wait.ms", "2000"), ("num.standby.replicas", "2")];
    let mut instances = Vec::new();
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        instances.push(
            start(
                count_keys(),
                streams_config(&kit, "wc", id, dirs[i].path(), &props),
            )
            .await,
        );
    }
    eventually(
        "one task and two standbys each",
        Duration::from_secs(120),
        || async {
            instances
                .iter()
                .all(|i| i.metrics().tasks.len() == 1 && i.metrics().standby_tasks.len() == 2)
                && read_committed(&kit, OUTPUT).await.len() as u64 >= n
        },
    )
    .await;
    // Let the standbys catch up and settle into their long polls.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let b = instances.remove(1);
    let moving = b.metrics().tasks.keys().next().unwrap().to_string();
    b.close(Duration::from_secs(30)).await.unwrap();
    // The task goes to a or c, which keeps its other standby polling.
    let mut took = None;
    for _ in 0..20_000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if let Some(i) = instances
            .iter()
            .find(|i| i.metrics().tasks.keys().any(|t| t.to_string() == moving))
        {
            took = Some(assigned_to_running(i, &moving).await);
            break;
        }
    }
    let took = took.unwrap();
    println!("assigned to running: {took:?}");
    assert!(
        took < Duration::from_millis(500),
        "the promoted task waited {took:?} (fetch.max.wait.ms 2000)"
    );
    for i in instances {
        i.close(Duration::from_secs(30)).await.unwrap();
    }
}
