//! The exactly-once checker on Apache Kafka, judged by Kafka's own logs.
//!
//! A consume-transform-produce application (the workload of
//! `weir_integration::eos`: each input `in-<id>` becomes one output
//! `out-<id>@<tag>`, the input offsets committed in the same transaction)
//! runs against the Kafka cluster at `$KAFKA_BOOTSTRAP` through the faults
//! a client can cause on a real broker: a transaction the application
//! aborts, an instance that dies with a transaction open (its successor's
//! InitProducerId aborts it), a zombie instance that goes on writing after
//! its successor started (it must be fenced), and a transaction that
//! outlives `transaction.timeout.ms` (Kafka's periodic scan aborts it). The
//! input itself is written in transactions, some aborted, whose records
//! must never be processed.
//!
//! The verdict is reached twice: through Weir's read_committed consumer,
//! and independently from Kafka's own log segments on disk, read by
//! Kafka's `DumpLogSegments` with Kafka's visibility rule applied to the
//! batches and markers ([`weir_integration::kafka_logs`]), on every
//! replica, which must agree. Both readings must hold every input exactly
//! once and nothing of an aborted transaction, and agree; no replica may
//! keep an open transaction and every output partition's last stable
//! offset must reach its high watermark; the committed input offsets must
//! be the input's ends.
//!
//! The log reading needs the cluster's files: `$WEIR_KAFKA_RUN_DIR`, which
//! `scripts/test.sh` sets for the clusters it starts with
//! `scripts/kafka.sh`. Without it the test says so and checks Weir's
//! reading alone, unless `WEIR_EXPECT_KAFKA_LOGS=1` (set by scripts/test.sh
//! too) makes a missing run directory a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use weir_client::Cluster;
use weir_client::admin::{Admin, NewTopic, OffsetSpec};
use weir_client::config::ClientConfig;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions, IsolationLevel};
use weir_client::consumer::{Consumer, SeekTo};
use weir_client::producer::{ProducerRecord, TopicPartition};
use weir_client::transaction::{
    GroupMetadata, TransactionConfig, TransactionErrorClass, TransactionalProducer,
    fetch_stable_offsets,
};
use weir_integration::eos::{ABORTED_INPUT_BASE, Observed, check};
use weir_integration::kafka_logs::{KafkaLogs, committed_values, open_transactions};
use weir_integration::real_broker::{bootstrap_or_skip, read_committed_values, unique};

const INPUTS: usize = 120;
const PARTITIONS: i32 = 3;
/// Input records per application transaction, at most.
const PER_TRANSACTION: usize = 8;

fn config(bootstrap: &str, client_id: &str) -> ClientConfig {
    ClientConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("client.id", client_id),
        ("default.api.timeout.ms", "30000"),
    ])
    .unwrap()
}

/// What the application does in one of its transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Sends, then aborts by its own decision, rewinds and redoes the work.
    Abort,
    /// Sends and commits the offsets, then dies: never commits or aborts.
    Die,
    /// Sends; a successor starts; the old instance then tries to go on.
    Zombie,
    /// Sends, then stalls past `transaction.timeout.ms` until Kafka's
    /// scan aborts the transaction; the commit must fail.
    Timeout,
}

/// The fault of the application's `n`th transaction, if any.
fn fault_at(n: usize) -> Option<Fault> {
    match n {
        2 => Some(Fault::Abort),
        4 => Some(Fault::Die),
        7 => Some(Fault::Zombie),
        10 => Some(Fault::Timeout),
        13 => Some(Fault::Abort),
        _ => None,
    }
}

struct Names {
    input: String,
    output: String,
    group: String,
    transactional_id: String,
}

/// One application instance: a transactional producer and a read_committed
/// consumer of every input partition, positioned at the group's committed
/// offsets.
struct Instance {
    number: usize,
    producer: TransactionalProducer,
    consumer: Consumer,
    /// The positions of the last commit: where an abort rewinds to.
    committed: BTreeMap<TopicPartition, i64>,
}

impl Instance {
    async fn start(bootstrap: &str, names: &Names, number: usize, timeout: Duration) -> Instance {
        let cluster = Cluster::connect(config(bootstrap, &format!("eos-kafka-{number}")))
            .await
            .unwrap();
        let producer = TransactionalProducer::with_cluster(
            cluster.clone(),
            Default::default(),
            TransactionConfig::new(&names.transactional_id).with_timeout(timeout),
        )
        .unwrap();
        producer.init_transactions().await.unwrap();
        let tps: Vec<TopicPartition> = (0..PARTITIONS)
            .map(|p| TopicPartition::new(&names.input, p))
            .collect();
        let stored = fetch_stable_offsets(&cluster, &names.group, &tps)
            .await
            .unwrap();
        let mut consumer = Consumer::with_cluster(
            cluster,
            ConsumerOptions {
                isolation_level: IsolationLevel::ReadCommitted,
                auto_offset_reset: AutoOffsetReset::Earliest,
                fetch_max_wait: Duration::from_millis(100),
                ..Default::default()
            },
        );
        consumer.assign(tps.clone());
        let mut committed = BTreeMap::new();
        for tp in &tps {
            let at = stored.get(tp).copied().unwrap_or(0);
            consumer.seek(tp, SeekTo::Offset(at)).unwrap();
            committed.insert(tp.clone(), at);
        }
        Instance {
            number,
            producer,
            consumer,
            committed,
        }
    }

    fn rewind(&mut self) {
        for (tp, at) in &self.committed {
            self.consumer.seek(tp, SeekTo::Offset(*at)).unwrap();
        }
    }

    /// Up to [`PER_TRANSACTION`] input records, polling until some come or
    /// 30 s passed; with the positions after them.
    async fn next_inputs(&mut self) -> (Vec<usize>, BTreeMap<TopicPartition, i64>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut ids = Vec::new();
        let mut next = self.committed.clone();
        while ids.is_empty() && Instant::now() < deadline {
            let records = self
                .consumer
                .poll_for(Duration::from_millis(200))
                .await
                .unwrap();
            for r in records {
                if ids.len() == PER_TRANSACTION {
                    break;
                }
                let value =
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
                let id: usize = value
                    .strip_prefix("in-")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("malformed input {value:?}"));
                ids.push(id);
                next.insert(TopicPartition::new(&r.topic, r.partition), r.offset + 1);
            }
        }
        // Whatever was polled beyond the first PER_TRANSACTION records is
        // read again from the new positions.
        for (tp, at) in &next {
            self.consumer.seek(tp, SeekTo::Offset(*at)).unwrap();
        }
        (ids, next)
    }

    /// Begins a transaction and sends the outputs of `ids` and the input
    /// positions after them.
    async fn send(
        &self,
        names: &Names,
        tag: &str,
        ids: &[usize],
        next: &BTreeMap<TopicPartition, i64>,
    ) -> weir_client::Result<()> {
        self.producer.begin()?;
        for id in ids {
            let partition = i32::try_from(id % PARTITIONS as usize).unwrap();
            self.producer
                .send(
                    ProducerRecord::new(&names.output)
                        .with_partition(partition)
                        .with_value(format!("out-{id}@{tag}")),
                )
                .await?;
        }
        self.producer
            .send_offsets_to_transaction(next, &GroupMetadata::unchecked(&names.group))
            .await
    }
}

/// Writes the input: [`INPUTS`] records `in-<id>` in committed
/// transactions, with an aborted transaction of ids from
/// [`ABORTED_INPUT_BASE`] after every committed one. Returns, per
/// partition, the offset after its last committed input record: where the
/// application's committed offsets must end (markers and aborted records
/// after it are never returned, so no position passes them).
async fn load_input(bootstrap: &str, names: &Names) -> BTreeMap<i32, i64> {
    let cluster = Cluster::connect(config(bootstrap, "eos-kafka-input"))
        .await
        .unwrap();
    let p = TransactionalProducer::with_cluster(
        cluster.clone(),
        Default::default(),
        TransactionConfig::new(unique("eos-kafka-input")),
    )
    .unwrap();
    p.init_transactions().await.unwrap();
    let mut ends = BTreeMap::new();
    for (chunk, ids) in (0..INPUTS).collect::<Vec<_>>().chunks(20).enumerate() {
        p.begin().unwrap();
        for id in ids {
            let partition = i32::try_from(id % PARTITIONS as usize).unwrap();
            let written = p
                .send(
                    ProducerRecord::new(&names.input)
                        .with_partition(partition)
                        .with_value(format!("in-{id}")),
                )
                .await
                .unwrap();
            ends.insert(partition, written.offset + 1);
        }
        p.commit().await.unwrap();
        p.begin().unwrap();
        for partition in 0..PARTITIONS {
            let id = ABORTED_INPUT_BASE + chunk * 10 + usize::try_from(partition).unwrap();
            p.send(
                ProducerRecord::new(&names.input)
                    .with_partition(partition)
                    .with_value(format!("in-{id}")),
            )
            .await
            .unwrap();
        }
        p.abort().await.unwrap();
    }
    p.close().await;
    wait_stable(&Admin::new(cluster), &names.input).await;
    ends
}

/// Polls (bounded) until every partition's last stable offset is its high
/// watermark, and returns the high watermarks.
async fn wait_stable(admin: &Admin, topic: &str) -> BTreeMap<i32, i64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stable = admin
            .list_topic_offsets(topic, OffsetSpec::Latest, true)
            .await
            .unwrap();
        let high = admin
            .list_topic_offsets(topic, OffsetSpec::Latest, false)
            .await
            .unwrap();
        let lso: BTreeMap<i32, i64> = stable.iter().map(|o| (o.partition, o.offset)).collect();
        let hw: BTreeMap<i32, i64> = high.iter().map(|o| (o.partition, o.offset)).collect();
        if lso == hw {
            return hw;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: last stable offsets {lso:?} never reached the high watermarks {hw:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await; // poll interval, bounded above
    }
}

/// Kafka's own reading of every output partition: the committed values on
/// each replica (all replicas must agree; followers are given a bounded
/// time to fetch the last markers), and no replica with an open
/// transaction.
/// Also returns every payload on disk, visible or not.
fn kafka_reading(logs: &KafkaLogs, topic: &str) -> (BTreeMap<i32, Vec<String>>, BTreeSet<String>) {
    let mut reading = BTreeMap::new();
    let mut on_disk = BTreeSet::new();
    for partition in 0..PARTITIONS {
        let replicas = logs.replicas(topic, partition).unwrap();
        assert!(
            !replicas.is_empty(),
            "{topic}-{partition}: no replica on disk"
        );
        let dirs: Vec<_> = replicas.iter().map(|(_, dir)| dir.clone()).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut by_replica = BTreeMap::new();
            let mut open = BTreeMap::new();
            // One JVM for every replica of the partition.
            let dumps = logs.dump_many(&dirs).unwrap();
            for ((node, _), batches) in replicas.iter().zip(dumps) {
                on_disk.extend(
                    batches
                        .iter()
                        .flat_map(|b| &b.records)
                        .filter_map(|r| r.payload.clone()),
                );
                let values: Vec<String> = committed_values(&batches)
                    .unwrap()
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect();
                by_replica.insert(*node, values);
                open.insert(*node, open_transactions(&batches));
            }
            let first = by_replica.values().next().cloned().unwrap_or_default();
            let agree = by_replica.values().all(|v| *v == first);
            let closed = open.values().all(BTreeMap::is_empty);
            if agree && closed {
                println!(
                    "{topic}-{partition}: {} replica(s) agree on {} committed records",
                    by_replica.len(),
                    first.len()
                );
                reading.insert(partition, first);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{topic}-{partition}: replicas disagree or keep an open transaction: \
                 committed {by_replica:?}, open transactions by producer id {open:?}"
            );
        }
    }
    (reading, on_disk)
}

/// The application run through its faults, judged by Weir's consumer and by
/// Kafka's own logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_holds_on_kafka_by_kafkas_own_logs() {
    let Some(bootstrap) = bootstrap_or_skip("eos_kafka") else {
        return;
    };
    if std::env::var("WEIR_BROKER_KIND").as_deref() == Ok("tansu") {
        println!("skipped: eos_kafka: tansu hands aborted records to read_committed readers");
        return;
    }
    let logs = match KafkaLogs::from_env().unwrap() {
        Some(logs) => Some(logs),
        None if std::env::var("WEIR_EXPECT_KAFKA_LOGS").as_deref() == Ok("1") => {
            panic!("WEIR_EXPECT_KAFKA_LOGS=1 but WEIR_KAFKA_RUN_DIR is unset")
        }
        None => {
            println!(
                "Kafka's own reading skipped: WEIR_KAFKA_RUN_DIR is unset, so the cluster's \
                 files are out of reach; only Weir's read_committed reading is checked"
            );
            None
        }
    };
    let names = Names {
        input: unique("eos-kafka-in"),
        output: unique("eos-kafka-out"),
        group: unique("eos-kafka-app"),
        transactional_id: unique("eos-kafka-app"),
    };
    let admin = Admin::connect(config(&bootstrap, "eos-kafka-admin"))
        .await
        .unwrap();
    for topic in [&names.input, &names.output] {
        admin
            .create_topic(NewTopic::new(topic, PARTITIONS))
            .await
            .unwrap();
    }
    let ends = load_input(&bootstrap, &names).await;
    println!("input ends {ends:?}");

    let normal_timeout = Duration::from_secs(60);
    let mut observed = Observed::default();
    let mut instance = Instance::start(&bootstrap, &names, 0, normal_timeout).await;
    observed.instances = 1;
    let mut txn = 0usize;
    let done = |committed: &BTreeMap<TopicPartition, i64>| {
        committed
            .iter()
            .all(|(tp, at)| ends.get(&tp.partition).copied().unwrap_or(0) == *at)
    };
    while !done(&instance.committed) {
        assert!(txn < 200, "no end after {txn} transactions");
        let fault = fault_at(txn);
        if fault == Some(Fault::Timeout) {
            // A successor with a short transaction timeout, which this
            // transaction outlives.
            instance.producer.close().await;
            observed.instances += 1;
            instance = Instance::start(
                &bootstrap,
                &names,
                observed.instances - 1,
                Duration::from_secs(3),
            )
            .await;
        }
        let tag = format!("i{}t{txn}", instance.number);
        txn += 1;
        let (ids, next) = instance.next_inputs().await;
        assert!(!ids.is_empty(), "no input within 30 s before the end");
        instance.send(&names, &tag, &ids, &next).await.unwrap();
        match fault {
            None => {
                instance.producer.commit().await.unwrap();
                instance.committed = next;
            }
            Some(Fault::Abort) => {
                instance.producer.abort().await.unwrap();
                observed.aborted.insert(tag);
                observed.recovered += 1;
                instance.rewind();
            }
            Some(Fault::Die) => {
                // Dropped without a commit or an abort, as a crash leaves it.
                observed.aborted.insert(tag);
                observed.instances += 1;
                instance =
                    Instance::start(&bootstrap, &names, observed.instances - 1, normal_timeout)
                        .await;
            }
            Some(Fault::Zombie) => {
                observed.aborted.insert(tag.clone());
                observed.instances += 1;
                let successor =
                    Instance::start(&bootstrap, &names, observed.instances - 1, normal_timeout)
                        .await;
                // The zombie goes on: a send, then a commit.
                let refused = match instance
                    .producer
                    .send(
                        ProducerRecord::new(&names.output)
                            .with_partition(0)
                            .with_value(format!("out-0@{tag}")),
                    )
                    .await
                {
                    Err(e) => e,
                    Ok(_) => instance.producer.commit().await.unwrap_err(),
                };
                assert_eq!(
                    refused.transaction_class(),
                    Some(TransactionErrorClass::Fatal),
                    "the zombie must be fenced for good: {refused}"
                );
                observed.effects.insert("zombie fenced".to_owned(), 1);
                instance = successor;
            }
            Some(Fault::Timeout) => {
                // Stall until Kafka's scan has aborted the transaction: its
                // marker makes the output stable again.
                let stalled = Instant::now();
                wait_stable(&admin, &names.output).await;
                let refused = instance.producer.commit().await.unwrap_err();
                println!(
                    "timed-out transaction aborted by Kafka after {} ms; commit refused: {refused}",
                    stalled.elapsed().as_millis()
                );
                observed.aborted.insert(tag);
                observed
                    .effects
                    .insert("transaction timed out".to_owned(), 1);
                match refused.transaction_class() {
                    Some(TransactionErrorClass::Abortable) => {
                        instance.producer.abort().await.unwrap();
                        instance.rewind();
                    }
                    _ => {
                        observed.instances += 1;
                        instance = Instance::start(
                            &bootstrap,
                            &names,
                            observed.instances - 1,
                            normal_timeout,
                        )
                        .await;
                    }
                }
            }
        }
    }
    instance.producer.close().await;
    observed.transactions = txn;
    println!(
        "{txn} transactions over {} instances, {} aborted by the application or Kafka",
        observed.instances,
        observed.aborted.len()
    );

    // The end state.
    let reader = Cluster::connect(config(&bootstrap, "eos-kafka-checker"))
        .await
        .unwrap();
    let output_ends = wait_stable(&admin, &names.output).await;
    for (partition, hw) in &output_ends {
        observed.stable.insert(*partition, (*hw, *hw));
    }
    let input_tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(&names.input, p))
        .collect();
    observed.offsets = fetch_stable_offsets(&reader, &names.group, &input_tps)
        .await
        .unwrap()
        .into_iter()
        .map(|(tp, o)| (tp.partition, o))
        .collect();
    observed.input_ends = ends.into_iter().filter(|(_, end)| *end > 0).collect();
    for partition in 0..PARTITIONS {
        let expected = (0..INPUTS)
            .filter(|id| id % PARTITIONS as usize == usize::try_from(partition).unwrap())
            .count();
        let tp = TopicPartition::new(&names.output, partition);
        let values = read_committed_values(&reader, &tp, expected).await.unwrap();
        observed.output.insert(partition, values);
    }
    match &logs {
        Some(logs) => {
            let (reading, on_disk) = kafka_reading(logs, &names.output);
            observed.log_output = reading;
            // The aborted transactions' records are in Kafka's log, so the
            // verdict excluded them by their markers rather than missing them.
            for tag in &observed.aborted {
                assert!(
                    on_disk.iter().any(|v| v.ends_with(&format!("@{tag}"))),
                    "no record of aborted transaction {tag} in Kafka's log"
                );
            }
            println!(
                "Kafka's log holds {} output records, {} of them committed",
                on_disk.len(),
                observed.log_output.values().map(Vec::len).sum::<usize>()
            );
        }
        // Without Kafka's files, only the consumer's reading is judged.
        None => observed.log_output = observed.output.clone(),
    }
    let unique_aborted: BTreeSet<&String> = observed.aborted.iter().collect();
    println!("aborted tags: {unique_aborted:?}");
    if let Err(violation) = check(INPUTS, &observed) {
        panic!("exactly-once violated on Kafka: {violation}");
    }
    println!(
        "exactly-once holds: {INPUTS} inputs, each once in the committed output, by Weir's \
         read_committed consumer{}",
        if logs.is_some() {
            " and by Kafka's own log segments on every replica"
        } else {
            ""
        }
    );
}
