//! Produce requests reach the broker in the order the sender numbered
//! them, even when the broker throttles the connection: a fake broker that
//! checks sequences strictly, as Kafka does, and asks the client to back
//! off after the first request.
//!
//! Throttling matters because every request then waits for the same
//! instant before its frame is queued; requests that each did their own
//! waiting woke up in no particular order and overtook one another.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir_protocol::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use weir_protocol::kafka_protocol::messages::{
    InitProducerIdResponse, ProduceResponse, ProducerId, RequestKind, ResponseKind, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_protocol::records::BatchHeader;

use super::*;
use crate::config::ClientConfig;
use crate::fake_broker::{Handler, Reply, single_broker_metadata, spawn_broker};
use crate::kerror::codes;

/// The broker's view: the next expected sequence, the offsets written, and
/// every base sequence in arrival order.
#[derive(Default)]
struct StrictLog {
    next: i32,
    written: i64,
    arrivals: Vec<i32>,
    out_of_order: usize,
}

fn metadata(port: u16) -> ResponseKind {
    single_broker_metadata(port, "t", &[0])
}

fn answer(code: i16, base_offset: i64, throttle_ms: i32) -> Option<Reply> {
    Reply::now(ResponseKind::Produce(
        ProduceResponse::default()
            .with_throttle_time_ms(throttle_ms)
            .with_responses(vec![
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_connection_keeps_requests_in_sequence_order() {
    let log = Arc::new(Mutex::new(StrictLog::default()));
    let produces = Arc::new(AtomicUsize::new(0));
    let port = Arc::new(std::sync::OnceLock::new());
    let (l, n, p) = (Arc::clone(&log), Arc::clone(&produces), Arc::clone(&port));
    let handler: Handler = Arc::new(move |req| match &req.body {
        RequestKind::Metadata(_) => Reply::now(metadata(*p.get().unwrap_or(&0))),
        RequestKind::InitProducerId(_) => Reply::now(ResponseKind::InitProducerId(
            InitProducerIdResponse::default().with_producer_id(ProducerId(7)),
        )),
        RequestKind::Produce(produce) => {
            let count = n.fetch_add(1, Ordering::SeqCst);
            let records = produce.topic_data[0].partition_data[0]
                .records
                .clone()
                .unwrap();
            let h = BatchHeader::parse(&records).unwrap();
            let mut log = l.lock().unwrap();
            log.arrivals.push(h.base_sequence);
            // Every 8th answer throttles the connection for 30 ms, so the
            // requests chosen meanwhile all wait for the same instant.
            let throttle = if count % 8 == 0 { 30 } else { 0 };
            if h.base_sequence != log.next {
                log.out_of_order += 1;
                return answer(codes::OUT_OF_ORDER_SEQUENCE_NUMBER, -1, throttle);
            }
            log.next += h.record_count;
            let base = log.written;
            log.written += i64::from(h.record_count);
            answer(codes::NONE, base, throttle)
        }
        other => panic!("unexpected request {other:?}"),
    });
    let (addr, _) = spawn_broker(handler).await;
    port.set(addr.port()).unwrap();
    let config = ClientConfig::builder()
        .bootstrap_servers([addr.to_string()])
        .retry_backoff(Duration::from_millis(1), Duration::from_millis(5))
        .build()
        .unwrap();
    let cluster = Cluster::connect(config).await.unwrap();
    let producer = Producer::with_cluster(
        cluster,
        ProducerOptions {
            // One record a batch: many requests, five in flight.
            batch_size: 80,
            linger: Duration::ZERO,
            max_in_flight: 5,
            ..Default::default()
        },
    )
    .unwrap();
    let mut deliveries = Vec::new();
    for i in 0..400 {
        let record = ProducerRecord::new("t")
            .with_partition(0)
            .with_value(format!("v{i:04}"));
        deliveries.push(producer.enqueue(record).await.unwrap());
    }
    for (i, d) in deliveries.into_iter().enumerate() {
        let meta = tokio::time::timeout(Duration::from_secs(30), d)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.offset, i as i64, "written once, in send order");
    }
    producer.close().await;
    let log = log.lock().unwrap();
    assert!(
        produces.load(Ordering::SeqCst) >= 100,
        "small batches: many requests"
    );
    assert_eq!(
        log.out_of_order,
        0,
        "no request overtook another; arrivals: {:?}",
        &log.arrivals[..log.arrivals.len().min(40)]
    );
}
