//! The consumer against a fake broker: fetch sessions, offset resets and
//! read_committed as the wire carries them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use weir_protocol::api::DecodedRequest;
use weir_protocol::kafka_protocol::messages::fetch_response::{
    AbortedTransaction as WireAborted, FetchableTopicResponse, PartitionData,
};
use weir_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use weir_protocol::kafka_protocol::messages::{
    FetchResponse, ListOffsetsResponse, ProducerId, RequestKind, ResponseKind, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_protocol::records::{
    BatchBuilder, BatchHeader, BatchOptions, ControlKind, RecordInput, encode_control_batch,
};

use super::*;
use crate::config::ClientConfig;
use crate::config::consumer::IsolationLevel;
use crate::fake_broker::{Handler, Reply, single_broker_metadata, spawn_broker};
use crate::kerror::codes;

/// One Fetch as the fake saw it.
#[derive(Debug, Clone)]
struct SeenFetch {
    session_id: i32,
    epoch: i32,
    listed: Vec<(i32, i64)>,
    forgotten: Vec<i32>,
}

#[derive(Default)]
struct Partition {
    /// Whole batches with their base and next offsets.
    batches: Vec<(i64, i64, Bytes)>,
    log_start: i64,
    aborted: Vec<(i64, i64)>,
}

impl Partition {
    fn end(&self) -> i64 {
        self.batches.last().map_or(self.log_start, |b| b.1)
    }
}

#[derive(Default)]
struct Fake {
    partitions: HashMap<i32, Partition>,
    seen: Vec<SeenFetch>,
    /// The broker's session: partition → fetch offset.
    session: HashMap<i32, i64>,
    next_epoch: i32,
    /// Answer this Fetch (counting from 0) with FETCH_SESSION_ID_NOT_FOUND.
    expire_session_at: Option<usize>,
    /// Never open a session (session id 0): every fetch is full.
    no_sessions: bool,
}

const SESSION: i32 = 7;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

impl Fake {
    fn metadata(&self, port: u16) -> ResponseKind {
        let mut ids: Vec<i32> = self.partitions.keys().copied().collect();
        ids.sort_unstable();
        single_broker_metadata(port, "t", &ids)
    }

    fn handle(&mut self, port: u16, req: &DecodedRequest) -> Option<Reply> {
        match &req.body {
            RequestKind::Metadata(_) => Reply::now(self.metadata(port)),
            RequestKind::ListOffsets(r) => {
                let partitions = r.topics[0]
                    .partitions
                    .iter()
                    .map(|p| {
                        let log = &self.partitions[&p.partition_index];
                        // Every fake record has timestamp 1.
                        let offset = match p.timestamp {
                            -2 => log.log_start,
                            -1 => log.end(),
                            t if t <= 1 => log.log_start,
                            _ => -1,
                        };
                        ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_offset(offset)
                    })
                    .collect();
                Reply::now(ResponseKind::ListOffsets(
                    ListOffsetsResponse::default().with_topics(vec![
                        ListOffsetsTopicResponse::default()
                            .with_name(name("t"))
                            .with_partitions(partitions),
                    ]),
                ))
            }
            RequestKind::Fetch(f) => {
                let listed: Vec<(i32, i64)> = f
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
                    .collect();
                let forgotten: Vec<i32> = f
                    .forgotten_topics_data
                    .iter()
                    .flat_map(|t| t.partitions.clone())
                    .collect();
                let n = self.seen.len();
                self.seen.push(SeenFetch {
                    session_id: f.session_id,
                    epoch: f.session_epoch,
                    listed: listed.clone(),
                    forgotten: forgotten.clone(),
                });
                let full = f.session_epoch == 0;
                if self.expire_session_at == Some(n)
                    || (!full && (f.session_id != SESSION || f.session_epoch != self.next_epoch))
                {
                    self.session.clear();
                    return Reply::now(ResponseKind::Fetch(
                        FetchResponse::default().with_error_code(codes::FETCH_SESSION_ID_NOT_FOUND),
                    ));
                }
                if full {
                    self.session.clear();
                    self.next_epoch = 1;
                } else {
                    self.next_epoch += 1;
                }
                for p in forgotten {
                    self.session.remove(&p);
                }
                self.session.extend(listed);
                let mut parts = Vec::new();
                let mut keys: Vec<i32> = self.session.keys().copied().collect();
                keys.sort_unstable();
                for p in keys {
                    let offset = self.session[&p];
                    let log = &self.partitions[&p];
                    let mut data = PartitionData::default()
                        .with_partition_index(p)
                        .with_high_watermark(log.end());
                    if offset < log.log_start || offset > log.end() {
                        parts.push(data.with_error_code(codes::OFFSET_OUT_OF_RANGE));
                        continue;
                    }
                    let mut bytes = BytesMut::new();
                    for (_, next, b) in &log.batches {
                        if *next > offset {
                            bytes.extend_from_slice(b);
                        }
                    }
                    // An incremental response leaves out partitions with nothing new.
                    if bytes.is_empty() && !full {
                        continue;
                    }
                    if f.isolation_level == 1 {
                        data = data.with_aborted_transactions(Some(
                            log.aborted
                                .iter()
                                .map(|(pid, first)| {
                                    WireAborted::default()
                                        .with_producer_id(ProducerId(*pid))
                                        .with_first_offset(*first)
                                })
                                .collect(),
                        ));
                    }
                    parts.push(data.with_records(Some(bytes.freeze())));
                }
                if self.no_sessions {
                    self.session.clear();
                }
                Reply::now(ResponseKind::Fetch(
                    FetchResponse::default()
                        .with_session_id(if self.no_sessions { 0 } else { SESSION })
                        .with_responses(vec![
                            FetchableTopicResponse::default()
                                .with_topic(name("t"))
                                .with_partitions(parts),
                        ]),
                ))
            }
            other => panic!("unexpected request {other:?}"),
        }
    }
}

fn batch(base: i64, values: &[&str], producer_id: i64, transactional: bool) -> (i64, i64, Bytes) {
    let mut b = BatchBuilder::new(BatchOptions {
        base_offset: base,
        producer_id,
        producer_epoch: 0,
        base_sequence: 0,
        transactional,
        ..Default::default()
    });
    for v in values {
        b.push(RecordInput {
            timestamp: 1,
            key: None,
            value: Some(Bytes::from(v.to_string())),
            headers: vec![],
        });
    }
    let bytes = b.build().unwrap();
    let next = BatchHeader::parse(&bytes).unwrap().next_offset();
    (base, next, bytes)
}

fn marker(offset: i64, producer_id: i64, kind: ControlKind) -> (i64, i64, Bytes) {
    (
        offset,
        offset + 1,
        encode_control_batch(producer_id, 0, offset, 1, kind, 0),
    )
}

async fn start(fake: Fake, options: ConsumerOptions) -> (Arc<Mutex<Fake>>, Consumer) {
    let fake = Arc::new(Mutex::new(fake));
    let port = Arc::new(std::sync::OnceLock::new());
    let (f, p) = (Arc::clone(&fake), Arc::clone(&port));
    let handler: Handler =
        Arc::new(move |req| f.lock().unwrap().handle(*p.get().unwrap_or(&0), req));
    let (addr, _) = spawn_broker(handler).await;
    port.set(addr.port()).unwrap();
    let config = ClientConfig::builder()
        .bootstrap_servers([addr.to_string()])
        .retry_backoff(Duration::from_millis(1), Duration::from_millis(5))
        .build()
        .unwrap();
    let cluster = Cluster::connect(config).await.unwrap();
    (fake, Consumer::with_cluster(cluster, options))
}

async fn poll_n(consumer: &mut Consumer, n: usize) -> Vec<ConsumerRecord> {
    let mut out = Vec::new();
    for _ in 0..200 {
        if out.len() >= n {
            break;
        }
        out.extend(consumer.poll_for(Duration::from_millis(20)).await.unwrap());
    }
    out
}

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

#[tokio::test]
async fn fetch_sessions_go_incremental_forget_partitions_and_restart_after_errors() {
    let mut fake = Fake {
        expire_session_at: Some(2),
        ..Default::default()
    };
    fake.partitions.insert(
        0,
        Partition {
            batches: vec![
                batch(0, &["a", "b"], -1, false),
                batch(2, &["c"], -1, false),
            ],
            ..Default::default()
        },
    );
    fake.partitions.insert(
        1,
        Partition {
            batches: vec![batch(0, &["x"], -1, false)],
            ..Default::default()
        },
    );
    let (fake, mut consumer) = start(fake, ConsumerOptions::default()).await;
    consumer.assign([tp(0), tp(1)]);
    consumer.seek(&tp(0), SeekTo::Offset(0)).unwrap();
    consumer.seek(&tp(1), SeekTo::Offset(0)).unwrap();
    let records = poll_n(&mut consumer, 4).await;
    let mut values: Vec<&[u8]> = records
        .iter()
        .map(|r| r.value.as_deref().unwrap())
        .collect();
    values.sort_unstable();
    assert_eq!(values, vec![&b"a"[..], b"b", b"c", b"x"]);
    // A few more (empty) rounds so the session error and recovery happen.
    while fake.lock().unwrap().seen.len() < 6 {
        assert!(
            consumer
                .poll_for(Duration::from_millis(20))
                .await
                .unwrap()
                .is_empty()
        );
    }
    consumer.assign([tp(0)]);
    let before = fake.lock().unwrap().seen.len();
    while fake.lock().unwrap().seen.len() < before + 2 {
        consumer.poll_for(Duration::from_millis(20)).await.unwrap();
    }

    let seen = fake.lock().unwrap().seen.clone();
    // 0: the full fetch that opens the session.
    assert_eq!((seen[0].session_id, seen[0].epoch), (0, 0));
    assert_eq!(seen[0].listed, vec![(0, 0), (1, 0)]);
    // 1: incremental, listing only what moved.
    assert_eq!((seen[1].session_id, seen[1].epoch), (SESSION, 1));
    assert_eq!(seen[1].listed, vec![(0, 3), (1, 1)]);
    // 2 is answered FETCH_SESSION_ID_NOT_FOUND; 3 starts over with everything.
    assert_eq!((seen[3].session_id, seen[3].epoch), (0, 0));
    assert_eq!(seen[3].listed, vec![(0, 3), (1, 1)]);
    // 4: incremental again with nothing changed.
    assert_eq!((seen[4].session_id, seen[4].epoch), (SESSION, 1));
    assert!(seen[4].listed.is_empty() && seen[4].forgotten.is_empty());
    // After dropping partition 1 it is forgotten, not listed.
    let forgetting = seen[before..]
        .iter()
        .find(|s| !s.forgotten.is_empty())
        .expect("a forgotten list");
    assert_eq!(forgetting.forgotten, vec![1]);
    assert!(forgetting.epoch > 0, "forgetting is incremental");
    // Records are never delivered twice across the session restart.
    assert_eq!(records.len(), 4);
}

fn out_of_range_log() -> Fake {
    let mut fake = Fake::default();
    fake.partitions.insert(
        0,
        Partition {
            batches: vec![
                batch(2, &["c", "d"], -1, false),
                batch(4, &["e", "f"], -1, false),
            ],
            log_start: 2,
            ..Default::default()
        },
    );
    fake
}

#[tokio::test]
async fn out_of_range_positions_follow_auto_offset_reset() {
    for (reset, first) in [
        (AutoOffsetReset::Earliest, Some(2)),
        (AutoOffsetReset::Latest, None),
    ] {
        let (_fake, mut consumer) = start(
            out_of_range_log(),
            ConsumerOptions {
                auto_offset_reset: reset,
                ..Default::default()
            },
        )
        .await;
        consumer.assign([tp(0)]);
        consumer.seek(&tp(0), SeekTo::Offset(1000)).unwrap();
        let records = match first {
            Some(_) => poll_n(&mut consumer, 4).await,
            None => consumer.poll_for(Duration::from_millis(200)).await.unwrap(),
        };
        assert_eq!(records.first().map(|r| r.offset), first, "{reset:?}");
        if reset == AutoOffsetReset::Latest {
            assert_eq!(consumer.position(&tp(0)).await.unwrap(), 6);
        }
    }
    let (_fake, mut consumer) = start(
        out_of_range_log(),
        ConsumerOptions {
            auto_offset_reset: AutoOffsetReset::None,
            ..Default::default()
        },
    )
    .await;
    consumer.assign([tp(0)]);
    consumer.seek(&tp(0), SeekTo::Offset(1)).unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), consumer.poll())
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::OffsetOutOfRange {
                offset: 1,
                partition: 0,
                ..
            }
        ),
        "{err}"
    );
    // Seeking back into the log recovers.
    consumer.seek(&tp(0), SeekTo::Earliest).unwrap();
    assert_eq!(poll_n(&mut consumer, 4).await.len(), 4);
}

#[tokio::test]
async fn read_committed_uses_the_aborted_list_from_the_fetch_response() {
    let log = || {
        let mut fake = Fake::default();
        fake.partitions.insert(
            0,
            Partition {
                batches: vec![
                    batch(0, &["aborted-1", "aborted-2"], 5, true),
                    marker(2, 5, ControlKind::Abort),
                    batch(3, &["committed"], 6, true),
                    marker(4, 6, ControlKind::Commit),
                    batch(5, &["plain"], -1, false),
                ],
                aborted: vec![(5, 0)],
                ..Default::default()
            },
        );
        fake
    };
    for (level, expected) in [
        (IsolationLevel::ReadCommitted, vec![3, 5]),
        (IsolationLevel::ReadUncommitted, vec![0, 1, 3, 5]),
    ] {
        let (_fake, mut consumer) = start(
            log(),
            ConsumerOptions {
                isolation_level: level,
                ..Default::default()
            },
        )
        .await;
        consumer.assign([tp(0)]);
        consumer.seek(&tp(0), SeekTo::Earliest).unwrap();
        let records = poll_n(&mut consumer, expected.len()).await;
        assert_eq!(
            records.iter().map(|r| r.offset).collect::<Vec<_>>(),
            expected,
            "{level:?}"
        );
        // Control records moved the position past the markers.
        assert_eq!(consumer.position(&tp(0)).await.unwrap(), 6);
    }
}

#[tokio::test]
async fn seeking_to_a_timestamp_after_the_last_record_lands_at_the_end() {
    let (_fake, mut consumer) = start(out_of_range_log(), ConsumerOptions::default()).await;
    consumer.assign([tp(0)]);
    consumer.seek(&tp(0), SeekTo::Timestamp(0)).unwrap();
    assert_eq!(
        consumer.position(&tp(0)).await.unwrap(),
        2,
        "the first record at or after t=0"
    );
    consumer.seek(&tp(0), SeekTo::Timestamp(1_000)).unwrap();
    assert_eq!(
        consumer.position(&tp(0)).await.unwrap(),
        6,
        "no record that late: the end"
    );
    let err = consumer.seek(&tp(3), SeekTo::Earliest).unwrap_err();
    assert!(
        matches!(err, ClientError::NotAssigned { partition: 3, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn corrupt_fetched_batches_give_a_typed_error_not_a_panic() {
    let (_, _, good) = batch(0, &["a", "b"], -1, false);
    // A flipped byte in the records: the CRC no longer matches.
    let mut bad_crc = good.to_vec();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0xff;
    // A record count far beyond the bytes (CRC recomputed is not needed
    // with check.crcs=false, which makes the count check the one that fires).
    let mut bad_count = good.to_vec();
    bad_count[57..61].copy_from_slice(&1_000_000i32.to_be_bytes());
    for (bytes, check_crcs) in [(bad_crc, true), (bad_count, false)] {
        let mut fake = Fake::default();
        fake.partitions.insert(
            0,
            Partition {
                batches: vec![(0, 2, Bytes::from(bytes))],
                ..Default::default()
            },
        );
        let (_fake, mut consumer) = start(
            fake,
            ConsumerOptions {
                check_crcs,
                ..Default::default()
            },
        )
        .await;
        consumer.assign([tp(0)]);
        consumer.seek(&tp(0), SeekTo::Offset(0)).unwrap();
        let err = tokio::time::timeout(Duration::from_secs(5), consumer.poll())
            .await
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, ClientError::Protocol { .. }), "{err}");
    }
}

/// m11: without a fetch session every fetch is full and lists partitions in
/// the consumer's order. A partition that returned data moves to the end
/// (Java's `movePartitionToEnd`), so no partition is always last, where the
/// response's byte budget may never reach it (KIP-74 exempts only the first
/// partition with an oversized batch).
#[tokio::test]
async fn full_fetches_rotate_partitions_that_returned_data_to_the_end() {
    let mut fake = Fake {
        no_sessions: true,
        ..Default::default()
    };
    fake.partitions.insert(
        0,
        Partition {
            batches: vec![batch(0, &["a"], -1, false)],
            ..Default::default()
        },
    );
    fake.partitions.insert(1, Partition::default());
    let (fake, mut consumer) = start(fake, ConsumerOptions::default()).await;
    consumer.assign([tp(0), tp(1)]);
    consumer.seek(&tp(0), SeekTo::Offset(0)).unwrap();
    consumer.seek(&tp(1), SeekTo::Offset(0)).unwrap();
    let records = poll_n(&mut consumer, 1).await;
    assert_eq!(records.len(), 1);
    while fake.lock().unwrap().seen.len() < 2 {
        consumer.poll_for(Duration::from_millis(20)).await.unwrap();
    }
    let seen = fake.lock().unwrap().seen.clone();
    assert!(seen.iter().all(|s| (s.session_id, s.epoch) == (0, 0)));
    let order = |i: usize| seen[i].listed.iter().map(|l| l.0).collect::<Vec<_>>();
    assert_eq!(order(0), vec![0, 1]);
    assert_eq!(
        order(1),
        vec![1, 0],
        "partition 0 returned data, so it goes last"
    );
}
