//! The producer against a fake broker that keeps an idempotent log the way
//! Kafka does, and injects the failures the retry rules exist for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use weir_protocol::api::DecodedRequest;
use weir_protocol::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use weir_protocol::kafka_protocol::messages::{
    InitProducerIdResponse, ProduceResponse, ProducerId, RequestKind, ResponseKind, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_protocol::records::{DecodeOptions, decode_batches};

use super::*;
use crate::config::ClientConfig;
use crate::fake_broker::{Handler, Reply, single_broker_metadata, spawn_broker};
use crate::kerror::codes;

/// What the fake does with the n-th Produce request (counting from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Answer NOT_LEADER_OR_FOLLOWER without writing.
    NotLeader,
    /// Write the batch, then drop the connection: the client never learns.
    WriteThenHangUp,
    /// Answer OUT_OF_ORDER_SEQUENCE_NUMBER as if the producer state was lost.
    LoseState,
}

#[derive(Default)]
struct Log {
    /// Values in offset order.
    values: Vec<Bytes>,
    /// Per producer id: the next sequence, and the written batches
    /// `(base sequence, base offset)` for duplicate detection.
    producers: std::collections::HashMap<i64, (i32, Vec<(i32, i64)>)>,
    init_calls: usize,
}

struct FakeCluster {
    log: Mutex<Log>,
    produces: AtomicUsize,
    faults: Box<dyn Fn(usize) -> Fault + Send + Sync>,
    /// While set, Produce answers wait until it opens.
    gate: Mutex<Option<tokio::sync::watch::Receiver<bool>>>,
}

fn metadata(port: u16) -> ResponseKind {
    single_broker_metadata(port, "t", &[0])
}

fn produce_answer(code: i16, base_offset: i64) -> Option<Reply> {
    Reply::now(ResponseKind::Produce(
        ProduceResponse::default().with_responses(vec![
            TopicProduceResponse::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_responses(vec![
                    PartitionProduceResponse::default()
                        .with_index(0)
                        .with_error_code(code)
                        .with_base_offset(base_offset),
                ]),
        ]),
    ))
}

impl FakeCluster {
    fn handle(&self, port: u16, req: &DecodedRequest) -> Option<Reply> {
        match &req.body {
            RequestKind::Metadata(_) => Reply::now(metadata(port)),
            RequestKind::InitProducerId(_) => {
                let mut log = self.log.lock().unwrap();
                log.init_calls += 1;
                let id = 1000 + log.init_calls as i64;
                Reply::now(ResponseKind::InitProducerId(
                    InitProducerIdResponse::default()
                        .with_producer_id(ProducerId(id))
                        .with_producer_epoch(0),
                ))
            }
            RequestKind::Produce(p) => {
                let n = self.produces.fetch_add(1, Ordering::SeqCst);
                let records = p.topic_data[0].partition_data[0].records.clone().unwrap();
                let batch = decode_batches(&records, &DecodeOptions::default())
                    .unwrap()
                    .batches
                    .remove(0);
                let h = batch.header;
                let fault = (self.faults)(n);
                if fault == Fault::NotLeader {
                    return produce_answer(codes::NOT_LEADER_OR_FOLLOWER, -1);
                }
                let mut log = self.log.lock().unwrap();
                let Log {
                    values, producers, ..
                } = &mut *log;
                let (next, written) = producers.entry(h.producer_id).or_insert((0, Vec::new()));
                if fault == Fault::LoseState && h.base_sequence == *next {
                    return produce_answer(codes::OUT_OF_ORDER_SEQUENCE_NUMBER, -1);
                }
                // Kafka's rules: the next sequence is written, a recent
                // duplicate gets its original offset, anything else is out
                // of order.
                if let Some(&(_, offset)) = written.iter().find(|(s, _)| *s == h.base_sequence) {
                    return produce_answer(codes::NONE, offset);
                }
                if h.base_sequence != *next {
                    return produce_answer(codes::OUT_OF_ORDER_SEQUENCE_NUMBER, -1);
                }
                let base = values.len() as i64;
                values.extend(batch.records.into_iter().map(|r| r.value.unwrap()));
                *next += h.record_count;
                written.push((h.base_sequence, base));
                if fault == Fault::WriteThenHangUp {
                    return None;
                }
                produce_answer(codes::NONE, base)
            }
            other => panic!("unexpected request {other:?}"),
        }
    }
}

async fn fake(
    faults: impl Fn(usize) -> Fault + Send + Sync + 'static,
) -> (Arc<FakeCluster>, Cluster) {
    let fake = Arc::new(FakeCluster {
        log: Mutex::default(),
        produces: AtomicUsize::new(0),
        faults: Box::new(faults),
        gate: Mutex::new(None),
    });
    let port = Arc::new(std::sync::OnceLock::new());
    let (f, p) = (Arc::clone(&fake), Arc::clone(&port));
    let handler: Handler = Arc::new(move |req| {
        let mut reply = f.handle(*p.get().unwrap_or(&0), req);
        if let (Some(r), RequestKind::Produce(_)) = (&mut reply, &req.body) {
            r.hold = f.gate.lock().unwrap().clone();
        }
        reply
    });
    let (addr, _) = spawn_broker(handler).await;
    port.set(addr.port()).unwrap();
    let config = ClientConfig::builder()
        .bootstrap_servers([addr.to_string()])
        .retry_backoff(Duration::from_millis(1), Duration::from_millis(5))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let cluster = Cluster::connect(config).await.unwrap();
    (fake, cluster)
}

fn options() -> ProducerOptions {
    // Small batches so that several requests are in flight at once.
    ProducerOptions {
        batch_size: 200,
        linger: Duration::ZERO,
        ..Default::default()
    }
}

async fn send_all(producer: &Producer, n: usize) -> Vec<Result<RecordMetadata>> {
    let mut futures = Vec::new();
    for i in 0..n {
        let record = ProducerRecord::new("t")
            .with_partition(0)
            .with_value(format!("v{i:04}"));
        futures.push(producer.enqueue(record).await.unwrap());
    }
    let mut out = Vec::new();
    for f in futures {
        out.push(
            tokio::time::timeout(Duration::from_secs(20), f)
                .await
                .unwrap(),
        );
    }
    out
}

fn expected_values(n: usize) -> Vec<Bytes> {
    (0..n).map(|i| Bytes::from(format!("v{i:04}"))).collect()
}

#[tokio::test]
async fn retries_neither_duplicate_nor_reorder() {
    // Every 4th request is refused, every 7th is written but its answer lost.
    let (fake, cluster) = fake(|n| match n {
        n if n % 7 == 3 => Fault::WriteThenHangUp,
        n if n % 4 == 1 => Fault::NotLeader,
        _ => Fault::None,
    })
    .await;
    let producer = Producer::with_cluster(cluster, options()).unwrap();
    let results = send_all(&producer, 300).await;
    let offsets: Vec<i64> = results.into_iter().map(|r| r.unwrap().offset).collect();
    assert_eq!(
        offsets,
        (0..300).collect::<Vec<i64>>(),
        "each record once, in order"
    );
    producer.close().await;
    let log = fake.log.lock().unwrap();
    assert_eq!(log.values, expected_values(300));
    assert_eq!(log.init_calls, 1, "no fault here needs a new producer id");
    assert!(
        fake.produces.load(Ordering::SeqCst) > 30,
        "several requests, several faults"
    );
}

#[tokio::test]
async fn lost_broker_state_fails_that_batch_and_restarts_sequences_under_a_new_id() {
    let (fake, cluster) = fake(|n| {
        if n == 2 {
            Fault::LoseState
        } else {
            Fault::None
        }
    })
    .await;
    let producer = Producer::with_cluster(
        cluster,
        ProducerOptions {
            max_in_flight: 1,
            ..options()
        },
    )
    .unwrap();
    let results = send_all(&producer, 60).await;
    let failed: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_err())
        .map(|(i, _)| i)
        .collect();
    assert!(
        !failed.is_empty(),
        "the batch that met the lost state fails"
    );
    for i in &failed {
        let err = results[*i].as_ref().unwrap_err();
        assert_eq!(
            err.kafka_code().map(|c| c.code),
            Some(codes::OUT_OF_ORDER_SEQUENCE_NUMBER),
            "{err}"
        );
    }
    producer.close().await;
    let log = fake.log.lock().unwrap();
    assert_eq!(log.init_calls, 2, "a new producer id after the loss");
    // Everything else is in the log exactly once, in order.
    let delivered: Vec<Bytes> = expected_values(60)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !failed.contains(i))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(log.values, delivered);
    let new_id = log
        .producers
        .get(&1002)
        .expect("records under the second id");
    assert_eq!(
        new_id.1.first().map(|(seq, _)| *seq),
        Some(0),
        "sequences restart at 0"
    );
}

#[tokio::test]
async fn a_record_larger_than_max_request_size_is_refused_at_once() {
    let (_fake, cluster) = fake(|_| Fault::None).await;
    let producer = Producer::with_cluster(
        cluster,
        ProducerOptions {
            max_request_size: 1000,
            ..options()
        },
    )
    .unwrap();
    let err = producer
        .send(ProducerRecord::new("t").with_value(vec![0u8; 2000]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::RecordTooLarge {
                setting: "max.request.size",
                ..
            }
        ),
        "{err}"
    );
    producer.close().await;
    let err = producer
        .send(ProducerRecord::new("t").with_value("late"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Closed), "{err}");
}

#[tokio::test]
async fn a_full_buffer_blocks_enqueue_until_max_block_then_acks_free_it() {
    let (fake, cluster) = fake(|_| Fault::None).await;
    let (open, gate) = tokio::sync::watch::channel(false);
    *fake.gate.lock().unwrap() = Some(gate);
    let options = ProducerOptions {
        buffer_memory: 4096,
        max_block: Duration::from_millis(300),
        ..options()
    };
    let producer = Producer::with_cluster(cluster, options).unwrap();
    let mut accepted = Vec::new();
    let err = loop {
        let record = ProducerRecord::new("t")
            .with_partition(0)
            .with_value(vec![b'x'; 500]);
        match producer.enqueue(record).await {
            Ok(d) => accepted.push(d),
            Err(e) => break e,
        }
        assert!(accepted.len() < 100, "buffer.memory never pushed back");
    };
    assert!(
        matches!(
            err,
            ClientError::Timeout {
                setting: "max.block.ms",
                ..
            }
        ),
        "{err}"
    );
    // About 4096 / 541 records fit while nothing is acknowledged.
    assert!((5..=8).contains(&accepted.len()), "{}", accepted.len());
    open.send(true).unwrap();
    for (i, d) in accepted.into_iter().enumerate() {
        assert_eq!(d.await.unwrap().offset, i as i64);
    }
    // Acknowledged records gave their memory back.
    let record = ProducerRecord::new("t")
        .with_partition(0)
        .with_value(vec![b'x'; 500]);
    producer.send(record).await.unwrap();
    producer.close().await;
}
