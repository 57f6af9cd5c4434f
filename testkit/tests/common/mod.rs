//! A minimal Kafka client for the testkit's own tests: frames requests
//! with `weir_protocol::api`, one at a time, over any byte stream.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod librdkafka;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use weir_protocol::api::{decode_response, encode_request};
use weir_protocol::frame::FrameDecoder;
use weir_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use weir_protocol::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use weir_protocol::kafka_protocol::messages::{
    FetchRequest, ProduceRequest, TopicName, TransactionalId,
};
use weir_protocol::kafka_protocol::protocol::{Request, StrBytes};
use weir_protocol::records::{
    BatchBuilder, BatchOptions, DecodeOptions, RecordInput, decode_batches,
};

pub struct TestClient<S> {
    stream: S,
    buf: BytesMut,
    correlation: i32,
    pub client_id: String,
}

impl<S: AsyncRead + AsyncWrite + Unpin> TestClient<S> {
    pub fn new(stream: S, client_id: &str) -> Self {
        Self {
            stream,
            buf: BytesMut::new(),
            correlation: 0,
            client_id: client_id.to_owned(),
        }
    }

    /// Writes a request without waiting for the answer.
    pub async fn send_only<R: Request>(&mut self, version: i16, req: &R) -> i32 {
        self.correlation += 1;
        let mut out = BytesMut::new();
        encode_request(
            &mut out,
            self.correlation,
            Some(&self.client_id),
            version,
            req,
        )
        .unwrap();
        self.stream.write_all(&out).await.unwrap();
        self.correlation
    }

    /// Writes raw bytes (for malformed input).
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next response frame, or `None` once the server closed the connection.
    pub async fn recv_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = FrameDecoder::default().decode(&mut self.buf).unwrap() {
                return Some(frame.freeze());
            }
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    pub async fn recv<R: Request>(&mut self, version: i16) -> R::Response {
        let frame = self.recv_frame().await.expect("connection closed");
        let (corr, resp) = decode_response::<R>(frame, version).unwrap();
        assert_eq!(corr, self.correlation, "responses come back in order");
        resp
    }

    pub async fn call<R: Request>(&mut self, version: i16, req: &R) -> R::Response {
        self.send_only(version, req).await;
        self.recv::<R>(version).await
    }
}

pub fn topic(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// Idempotence and transaction fields of a produced batch.
#[derive(Clone, Copy, Debug)]
pub struct Producer {
    pub id: i64,
    pub epoch: i16,
    pub seq: i32,
    pub transactional: bool,
}

pub const PLAIN: Producer = Producer {
    id: -1,
    epoch: -1,
    seq: -1,
    transactional: false,
};

pub fn batch(values: &[&str], p: Producer) -> Bytes {
    let mut b = BatchBuilder::new(BatchOptions {
        producer_id: p.id,
        producer_epoch: p.epoch,
        base_sequence: p.seq,
        transactional: p.transactional,
        ..Default::default()
    });
    for (i, v) in values.iter().enumerate() {
        b.push(RecordInput {
            timestamp: 1_000 + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(v.to_string())),
            headers: vec![],
        });
    }
    b.build().unwrap()
}

pub fn produce_request(
    topic_name: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
    txn: Option<&str>,
) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(1000)
        .with_transactional_id(txn.map(|t| TransactionalId(StrBytes::from_string(t.to_owned()))))
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic(topic_name))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ])
}

pub fn fetch_request(topic_name: &str, partition: i32, offset: i64) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic(topic_name))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ])
}

/// The values of the data records in a fetched records buffer, with offsets.
pub fn values(records: &Bytes) -> Vec<(i64, String)> {
    let decoded = decode_batches(records, &DecodeOptions::default()).unwrap();
    decoded
        .batches
        .iter()
        .filter(|b| !b.header.is_control())
        .flat_map(|b| b.records.iter())
        .map(|r| {
            (
                r.offset,
                String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap(),
            )
        })
        .collect()
}
