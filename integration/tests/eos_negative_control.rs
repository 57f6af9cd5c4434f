//! Negative controls for the exactly-once checker: it is fed deliberately
//! broken runs and must report each one, in both readings (Weir's
//! read_committed consumer and the independent reading of the raw log and
//! its markers), plus a hanging transaction and readings that disagree.
//!
//! The raw logs are encoded with weir-protocol's batch encoder exactly as a
//! broker stores them: transactional batches and COMMIT/ABORT control
//! batches with producer ids and absolute offsets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use weir_integration::eos::{
    ABORTED_INPUT_BASE, CONSUMER_READING, LOG_READING, Observed, Reading, check, visible_in_log,
};
use weir_protocol::records::{
    BatchBuilder, BatchOptions, ControlKind, RecordInput, encode_control_batch,
};

/// One entry of a hand-built partition log.
enum Entry {
    /// A transactional batch of `pid` with these values.
    Txn(i64, &'static [&'static str]),
    /// A non-transactional batch.
    Plain(&'static [&'static str]),
    /// A marker of `pid`.
    Marker(i64, ControlKind),
}

/// Encodes `entries` as a log, offsets assigned as a broker would.
fn log(entries: &[Entry]) -> Bytes {
    let mut out = BytesMut::new();
    let mut offset = 0i64;
    for entry in entries {
        let (bytes, count) = match entry {
            Entry::Txn(_, values) | Entry::Plain(values) => {
                let (producer_id, transactional) = match entry {
                    Entry::Txn(pid, _) => (*pid, true),
                    _ => (-1, false),
                };
                let mut b = BatchBuilder::new(BatchOptions {
                    producer_id,
                    producer_epoch: if transactional { 0 } else { -1 },
                    base_sequence: if transactional { 0 } else { -1 },
                    transactional,
                    base_offset: offset,
                    ..BatchOptions::default()
                });
                for v in *values {
                    b.push(RecordInput {
                        timestamp: 1,
                        value: Some(Bytes::from_static(v.as_bytes())),
                        ..RecordInput::default()
                    });
                }
                (b.build().unwrap(), values.len())
            }
            Entry::Marker(pid, kind) => (encode_control_batch(*pid, 0, offset, 1, *kind, 0), 1),
        };
        out.extend_from_slice(&bytes);
        offset += i64::try_from(count).unwrap();
    }
    out.freeze()
}

/// A correct run: input 0 committed by `a`, input 1 aborted in `b` and
/// redone in `c`; one reading of each partition.
fn good_log() -> Bytes {
    log(&[
        Entry::Txn(7, &["out-0@a"]),
        Entry::Marker(7, ControlKind::Commit),
        Entry::Txn(7, &["out-1@b"]),
        Entry::Marker(7, ControlKind::Abort),
        Entry::Txn(7, &["out-1@c"]),
        Entry::Marker(7, ControlKind::Commit),
    ])
}

fn observed(output: Reading, log_output: Reading) -> Observed {
    Observed {
        output,
        log_output,
        stable: [(0, (6, 6))].into(),
        aborted: BTreeSet::from(["b".to_owned()]),
        ..Observed::default()
    }
}

fn reading(values: Vec<String>) -> Reading {
    Reading::from([(0, values)])
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

/// Asserts `check` fails with a message containing every one of `needles`,
/// and prints it.
fn violation(name: &str, observed: &Observed, needles: &[&str]) {
    let err = check(2, observed).expect_err(name);
    eprintln!("negative control {name}: {err}");
    for needle in needles {
        assert!(err.contains(needle), "{name}: {err:?} lacks {needle:?}");
    }
}

#[test]
fn the_log_reading_applies_kafkas_visibility_rule() {
    assert_eq!(
        visible_in_log(&good_log()).unwrap(),
        strings(&["out-0@a", "out-1@c"])
    );
    // Non-transactional batches are visible; an open transaction is not;
    // interleaved producers are resolved per producer id, in offset order;
    // control records are never values.
    let mixed = log(&[
        Entry::Plain(&["p0"]),
        Entry::Txn(1, &["x0"]),
        Entry::Txn(2, &["y0"]),
        Entry::Txn(1, &["x1"]),
        Entry::Marker(2, ControlKind::Abort),
        Entry::Plain(&["p1"]),
        Entry::Marker(1, ControlKind::Commit),
        Entry::Txn(2, &["y1"]),
        Entry::Marker(2, ControlKind::Unknown(5)),
        Entry::Txn(3, &["z0"]),
    ]);
    assert_eq!(
        visible_in_log(&mixed).unwrap(),
        strings(&["p0", "x0", "x1", "p1"])
    );
    // A corrupted byte fails the CRC: the reading never guesses.
    let mut bad = BytesMut::from(&good_log()[..]);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert!(visible_in_log(&bad.freeze()).is_err());
}

#[test]
fn the_checker_reports_broken_runs_in_both_readings() {
    let good = visible_in_log(&good_log()).unwrap();
    assert_eq!(
        check(2, &observed(reading(good.clone()), reading(good.clone()))),
        Ok(())
    );

    // A record of an aborted transaction is visible.
    // Log: the aborted transaction got a COMMIT marker (a broken coordinator).
    let aborted_committed = visible_in_log(&log(&[
        Entry::Txn(7, &["out-0@a"]),
        Entry::Marker(7, ControlKind::Commit),
        Entry::Txn(7, &["out-1@b"]),
        Entry::Marker(7, ControlKind::Commit),
        Entry::Txn(7, &["out-1@c"]),
        Entry::Marker(7, ControlKind::Commit),
    ]))
    .unwrap();
    violation(
        "aborted record, log reading",
        &observed(reading(good.clone()), reading(aborted_committed.clone())),
        &[LOG_READING, "out-1@b belongs to an aborted transaction"],
    );
    // Consumer: the read_committed filter let the aborted batch through.
    violation(
        "aborted record, consumer reading",
        &observed(
            reading(strings(&["out-0@a", "out-1@b", "out-1@c"])),
            reading(good.clone()),
        ),
        &[
            CONSUMER_READING,
            "out-1@b belongs to an aborted transaction",
        ],
    );

    // Aborted input processed: the instance's read_committed consumer
    // delivered a record of an aborted input transaction (id from
    // ABORTED_INPUT_BASE on), and its output was committed.
    let stray = format!("out-{ABORTED_INPUT_BASE}@c");
    let mut with_aborted_input = good.clone();
    with_aborted_input.push(stray.clone());
    violation(
        "aborted input, consumer reading",
        &observed(reading(with_aborted_input.clone()), reading(good.clone())),
        &[CONSUMER_READING, &stray, "aborted input transaction"],
    );
    violation(
        "aborted input, log reading",
        &observed(reading(good.clone()), reading(with_aborted_input)),
        &[LOG_READING, &stray, "aborted input transaction"],
    );

    // A duplicated output: input 1 committed by two transactions.
    let duplicated = visible_in_log(&log(&[
        Entry::Txn(7, &["out-0@a", "out-1@c"]),
        Entry::Marker(7, ControlKind::Commit),
        Entry::Txn(7, &["out-1@d"]),
        Entry::Marker(7, ControlKind::Commit),
    ]))
    .unwrap();
    violation(
        "duplicate, log reading",
        &observed(reading(good.clone()), reading(duplicated.clone())),
        &[LOG_READING, "input 1 is in the committed output 2 times"],
    );
    violation(
        "duplicate, consumer reading",
        &observed(reading(duplicated), reading(good.clone())),
        &[
            CONSUMER_READING,
            "input 1 is in the committed output 2 times",
        ],
    );

    // A lost output: the redo's marker is an ABORT.
    let lost = visible_in_log(&log(&[
        Entry::Txn(7, &["out-0@a"]),
        Entry::Marker(7, ControlKind::Commit),
        Entry::Txn(7, &["out-1@c"]),
        Entry::Marker(7, ControlKind::Abort),
    ]))
    .unwrap();
    violation(
        "loss, log reading",
        &observed(reading(good.clone()), reading(lost.clone())),
        &[LOG_READING, "input 1 is missing"],
    );
    violation(
        "loss, consumer reading",
        &observed(reading(lost), reading(good.clone())),
        &[CONSUMER_READING, "input 1 is missing"],
    );

    // Each reading is exactly-once, but they differ (same values on
    // different partitions): one of them is wrong.
    violation(
        "disagreement",
        &observed(
            reading(good.clone()),
            Reading::from([(0, strings(&["out-0@a"])), (1, strings(&["out-1@c"]))]),
        ),
        &["the readings disagree"],
    );

    // A hanging transaction after the last committed output: the LSO is
    // stuck below the HW, and the coordinator still has it open.
    let hanging_log = log(&[
        Entry::Txn(7, &["out-0@a"]),
        Entry::Marker(7, ControlKind::Commit),
        Entry::Txn(7, &["out-1@b"]),
        Entry::Marker(7, ControlKind::Abort),
        Entry::Txn(7, &["out-1@c"]),
        Entry::Marker(7, ControlKind::Commit),
        Entry::Txn(8, &["out-1@e"]),
    ]);
    let hanging = visible_in_log(&hanging_log).unwrap();
    assert_eq!(hanging, good, "the open transaction is not visible");
    let mut stuck = observed(reading(hanging.clone()), reading(hanging.clone()));
    stuck.stable.insert(0, (6, 7));
    violation(
        "hanging transaction, LSO",
        &stuck,
        &["last stable offset 6 is not the high watermark 7"],
    );
    let mut open = observed(reading(hanging.clone()), reading(hanging));
    open.unfinished = vec!["eos-app-1 (Ongoing)".to_owned()];
    violation(
        "hanging transaction, coordinator",
        &open,
        &["unfinished transactions", "eos-app-1 (Ongoing)"],
    );
}

/// The testkit accessors the checker relies on, on a real hanging
/// transaction: while a transaction is open, `unfinished_transactions`
/// names it, the LSO is below the HW and the raw log shows nothing visible;
/// after the abort nothing hangs and still nothing is visible; a committed
/// transaction is visible in both readings' source.
#[tokio::test(start_paused = true)]
async fn the_end_checks_see_a_real_hanging_transaction() {
    use std::sync::Arc;
    use std::time::Duration;
    use weir_client::Cluster;
    use weir_client::config::producer::ProducerOptions;
    use weir_client::producer::ProducerRecord;
    use weir_client::transaction::{TransactionConfig, TransactionalProducer};
    use weir_integration::testkit_dial::client_config;

    let kit = Arc::new(weir_testkit::Cluster::builder().build().await.unwrap());
    kit.create_topic("out", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let cluster = Cluster::connect(client_config(&kit, "p").build().unwrap())
        .await
        .unwrap();
    let producer = TransactionalProducer::with_cluster(
        cluster,
        ProducerOptions {
            linger: Duration::from_millis(1),
            ..ProducerOptions::default()
        },
        TransactionConfig::new("hang"),
    )
    .unwrap();
    producer.init_transactions().await.unwrap();
    producer.begin().unwrap();
    producer
        .send(ProducerRecord::new("out").with_value("out-0@open"))
        .await
        .unwrap();

    let (_, lso, hw) = kit.offsets("out", 0).await.unwrap();
    assert!(lso < hw, "open transaction: LSO {lso} below HW {hw}");
    assert_eq!(
        kit.unfinished_transactions().await.unwrap(),
        vec![("hang".to_owned(), "Ongoing")]
    );
    let raw = kit.raw_log("out", 0).await.unwrap();
    assert!(visible_in_log(&raw).unwrap().is_empty());

    producer.abort().await.unwrap();
    // The abort marker follows the answer, as on Kafka.
    kit.markers_written().await.unwrap();
    let (_, lso, hw) = kit.offsets("out", 0).await.unwrap();
    assert_eq!(lso, hw);
    assert!(kit.unfinished_transactions().await.unwrap().is_empty());
    assert!(
        visible_in_log(&kit.raw_log("out", 0).await.unwrap())
            .unwrap()
            .is_empty()
    );

    producer.begin().unwrap();
    producer
        .send(ProducerRecord::new("out").with_value("out-0@done"))
        .await
        .unwrap();
    producer.commit().await.unwrap();
    kit.markers_written().await.unwrap();
    assert_eq!(
        visible_in_log(&kit.raw_log("out", 0).await.unwrap()).unwrap(),
        vec!["out-0@done".to_owned()]
    );
    assert!(kit.unfinished_transactions().await.unwrap().is_empty());
}
