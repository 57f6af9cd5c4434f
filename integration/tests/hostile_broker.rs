//! The client's memory against a hostile broker, end to end (issue 17.3):
//! the frames a broker sends go through the client's connection (frame
//! decoder), its response decoding and the consumer's fetch decoding, and
//! the process's peak memory is measured around each, while the error names
//! the broker and the API.
//!
//! The hostile broker is a proxy in front of an in-process testkit broker:
//! every request is forwarded, and some responses are replaced (Fetch
//! records by compression bombs at the same offsets, a Metadata response by
//! a huge array count or by a frame announced just under the cap that never
//! arrives). In its own test binary, with one test, because the peaks are
//! the whole process's (VmPeak and VmHWM only grow): the steps run in
//! increasing size, each measured above the last one's peak.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicI16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions};
use weir_client::config::producer::ProducerOptions;
use weir_client::connection::{BoxedStream, Dial, DialFuture};
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_client::{ClientError, Cluster};
use weir_integration::testkit_dial::{TestkitDialer, client_config};
use weir_protocol::ApiKey;
use weir_protocol::api::{decode_response, encode_response, peek_request_prefix};
use weir_protocol::kafka_protocol::messages::{FetchRequest, ResponseKind};
use weir_protocol::records::{
    BatchBuilder, BatchOptions, Compression, DecodeOptions, RecordInput, decode_batches,
};

const TOPIC: &str = "hostile";
/// Records in the topic: the offsets the bombs stand in for.
const RECORDS: i64 = 1_000;
/// What one bomb decompresses to: zeros, a few hundred bytes in gzip.
const BOMB: usize = 128 << 10;
/// Bombs per Fetch response: 300 × 128 KiB = 37.5 MiB decoded, past the
/// 16 MiB budget of a 1 MiB `fetch.max.bytes`.
const BOMBS_PER_RESPONSE: i64 = 300;
const FETCH_MAX_BYTES: i32 = 1 << 20;
const PREFETCH: usize = 8 << 20;
/// The client's frame cap (`receive.message.max.bytes`).
const FRAME_CAP: usize = 100 << 20;
/// The hostile Metadata frame's size.
const METADATA_FRAME: usize = 8 << 20;

/// The version of the last Metadata request the proxy saw.
static METADATA_VERSION: AtomicI16 = AtomicI16::new(0);

/// What the proxy does to the responses it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hostility {
    /// Forward them as they are.
    None,
    /// Replace each partition's Fetch records by `per_response` gzip
    /// batches of one `bomb`-byte record each, from the first offset the
    /// broker returned (up to its high watermark).
    FetchBombs { bomb: usize, per_response: i64 },
    /// Replace a Metadata response by an 8 MiB frame whose brokers array
    /// announces `i32::MAX` elements.
    MetadataCount,
    /// Answer a Metadata request with a length prefix just under the
    /// client's frame cap and 16 bytes, then nothing.
    FrameUnderCap,
}

/// Dials the testkit's brokers through a [`proxy`] each.
struct HostileDialer {
    kit: Arc<weir_testkit::Cluster>,
    brokers: TestkitDialer,
    hostility: Arc<Mutex<Hostility>>,
}

impl Dial for HostileDialer {
    fn dial<'a>(&'a self, addr: &'a str) -> DialFuture<'a> {
        Box::pin(async move {
            let broker = self
                .brokers
                .broker_at(addr)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, addr.to_owned()))?;
            let upstream = self
                .kit
                .connect_duplex(broker)
                .await
                .map_err(|e| io::Error::new(io::ErrorKind::ConnectionRefused, e.to_string()))?;
            let (client, proxy_end) = tokio::io::duplex(1 << 20);
            tokio::spawn(proxy(proxy_end, upstream, Arc::clone(&self.hostility)));
            Ok(Box::new(client) as BoxedStream)
        })
    }
}

async fn read_frame(stream: &mut (impl AsyncReadExt + Unpin)) -> Option<Bytes> {
    let len = stream.read_u32().await.ok()?;
    let mut body = vec![0; len as usize];
    stream.read_exact(&mut body).await.ok()?;
    Some(Bytes::from(body))
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.put_u32(u32::try_from(body.len()).unwrap());
    out.extend_from_slice(body);
    out
}

/// Forwards requests from `client` to `upstream`, and responses back,
/// changed as `hostility` says.
async fn proxy(client: DuplexStream, upstream: DuplexStream, hostility: Arc<Mutex<Hostility>>) {
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut up_read, mut up_write) = tokio::io::split(upstream);
    // The API and version of each request in flight, by correlation id.
    let in_flight: Arc<Mutex<HashMap<i32, (i16, i16)>>> = Arc::default();
    let requests = Arc::clone(&in_flight);
    tokio::spawn(async move {
        while let Some(frame) = read_frame(&mut client_read).await {
            let prefix = peek_request_prefix(&frame).unwrap();
            requests
                .lock()
                .unwrap()
                .insert(prefix.correlation_id, (prefix.api_key, prefix.api_version));
            if up_write.write_all(&framed(&frame)).await.is_err() {
                return;
            }
        }
    });
    while let Some(frame) = read_frame(&mut up_read).await {
        let correlation_id = i32::from_be_bytes(frame[..4].try_into().unwrap());
        let (api, version) = in_flight.lock().unwrap().remove(&correlation_id).unwrap();
        if api == ApiKey::Metadata as i16 {
            METADATA_VERSION.store(version, Ordering::Relaxed);
        }
        let mode = *hostility.lock().unwrap();
        let out = match mode {
            Hostility::FetchBombs { bomb, per_response } if api == ApiKey::Fetch as i16 => {
                framed(&bombed_fetch(frame, version, bomb, per_response))
            }
            Hostility::MetadataCount if api == ApiKey::Metadata as i16 => {
                // Written from the shared frame, not copied: the proxy's own
                // memory stays out of the measurement.
                let frame = metadata_count_frame(version);
                let written = async {
                    client_write.write_all(&frame[..4]).await?;
                    client_write
                        .write_all(&correlation_id.to_be_bytes())
                        .await?;
                    client_write.write_all(&frame[8..]).await
                };
                if written.await.is_err() {
                    return;
                }
                continue;
            }
            Hostility::FrameUnderCap if api == ApiKey::Metadata as i16 => {
                let mut out = Vec::new();
                out.put_u32(u32::try_from(FRAME_CAP - 1).unwrap());
                out.put_i32(correlation_id);
                out.extend_from_slice(&[0; 12]);
                let _ = client_write.write_all(&out).await;
                // The rest never comes; the connection stays open.
                std::future::pending::<()>().await;
                return;
            }
            _ => framed(&frame),
        };
        if client_write.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// A gzip batch of one record of `size` zeros at offset 0, compressed once
/// per size.
fn bomb_batch(size: usize) -> Bytes {
    static CACHE: Mutex<Option<(usize, Bytes)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap();
    if let Some((cached, batch)) = &*cache
        && *cached == size
    {
        return batch.clone();
    }
    let mut builder = BatchBuilder::new(BatchOptions {
        compression: Compression::Gzip,
        ..BatchOptions::default()
    });
    builder.push(RecordInput {
        timestamp: 0,
        key: None,
        value: Some(Bytes::from(vec![0u8; size])),
        headers: vec![],
    });
    let batch = builder.build().unwrap();
    *cache = Some((size, batch.clone()));
    batch
}

/// The Fetch response `frame` (without its length prefix), with the records
/// of every partition that returned some replaced by bombs.
fn bombed_fetch(frame: Bytes, version: i16, bomb: usize, per_response: i64) -> Vec<u8> {
    let batch = bomb_batch(bomb);
    let (correlation_id, mut response) = decode_response::<FetchRequest>(frame, version).unwrap();
    for topic in &mut response.responses {
        for p in &mut topic.partitions {
            let Some(records) = &p.records else { continue };
            let real = decode_batches(records, &DecodeOptions::default()).unwrap();
            let Some(first) = real.batches.first() else {
                continue;
            };
            let from = first.header.base_offset;
            let to = (from + per_response).min(p.high_watermark);
            let mut bombs = BytesMut::new();
            for offset in from..to {
                // The base offset is the batch's first field, outside its CRC.
                bombs.put_i64(offset);
                bombs.extend_from_slice(&batch[8..]);
            }
            p.records = Some(bombs.freeze());
        }
    }
    let mut out = BytesMut::new();
    encode_response(
        &mut out,
        ApiKey::Fetch,
        version,
        correlation_id,
        &ResponseKind::Fetch(response),
    )
    .unwrap();
    out[4..].to_vec()
}

/// A Metadata response frame, length prefix included, of `METADATA_FRAME`
/// bytes at `version`: the header (correlation id 0, for the proxy to
/// replace), the throttle time (v3 and later), a brokers count of
/// `i32::MAX`, then 0xff to the end (the first broker fails to decode, so
/// what the client holds is the frame and the array's reservation). Built
/// once per version.
fn metadata_count_frame(version: i16) -> Bytes {
    static CACHE: Mutex<Option<(i16, Bytes)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap();
    if let Some((cached, frame)) = &*cache
        && *cached == version
    {
        return frame.clone();
    }
    let flexible = version >= 9;
    let mut body = BytesMut::with_capacity(METADATA_FRAME);
    body.put_u32(u32::try_from(METADATA_FRAME - 4).unwrap());
    body.put_i32(0);
    if flexible {
        body.put_u8(0); // no tagged fields in the header
    }
    if version >= 3 {
        body.put_i32(0);
    }
    if flexible {
        // Unsigned varint of i32::MAX + 1 (a compact array's length + 1).
        let mut n = u64::from(i32::MAX.unsigned_abs()) + 1;
        while n >= 0x80 {
            body.put_u8((n as u8) | 0x80);
            n >>= 7;
        }
        body.put_u8(n as u8);
    } else {
        body.put_i32(i32::MAX);
    }
    body.resize(METADATA_FRAME, 0xff);
    let frame = body.freeze();
    *cache = Some((version, frame.clone()));
    frame
}

/// The process's peak virtual size and peak resident size, in bytes.
fn peaks() -> [usize; 2] {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    ["VmPeak:", "VmHWM:"].map(|key| {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib * 1024
    })
}

/// How much either peak has grown since `before`.
fn growth_since(before: [usize; 2]) -> usize {
    let now = peaks();
    now[0]
        .saturating_sub(before[0])
        .max(now[1].saturating_sub(before[1]))
}

struct Setup {
    kit: Arc<weir_testkit::Cluster>,
    hostility: Arc<Mutex<Hostility>>,
}

impl Setup {
    async fn new() -> Self {
        let kit = Arc::new(weir_testkit::Cluster::builder().build().await.unwrap());
        kit.create_topic(TOPIC, 1, [] as [(&str, &str); 0])
            .await
            .unwrap();
        let producer = Producer::with_cluster(
            Cluster::connect(client_config(&kit, "writer").build().unwrap())
                .await
                .unwrap(),
            ProducerOptions::default(),
        )
        .unwrap();
        for i in 0..RECORDS {
            producer
                .send(ProducerRecord::new(TOPIC).with_value(Bytes::from(i.to_string())))
                .await
                .unwrap();
        }
        producer.close().await;
        Self {
            kit,
            hostility: Arc::new(Mutex::new(Hostility::None)),
        }
    }

    fn set(&self, hostility: Hostility) {
        *self.hostility.lock().unwrap() = hostility;
    }

    async fn client(&self, id: &str) -> Result<Cluster, ClientError> {
        let dialer = HostileDialer {
            kit: Arc::clone(&self.kit),
            brokers: TestkitDialer::new(Arc::clone(&self.kit)),
            hostility: Arc::clone(&self.hostility),
        };
        let config = client_config(&self.kit, id)
            .request_timeout(Duration::from_secs(5))
            .dialer(weir_client::connection::Dialer::new(dialer))
            .build()
            .unwrap();
        Cluster::connect(config).await
    }

    /// Reads the whole topic through the proxy, dropping what it polls;
    /// the records read, or the first error.
    async fn consume(&self) -> Result<i64, ClientError> {
        let mut consumer = Consumer::with_cluster(
            self.client("reader").await?,
            ConsumerOptions {
                auto_offset_reset: AutoOffsetReset::Earliest,
                fetch_max_bytes: FETCH_MAX_BYTES,
                max_partition_fetch_bytes: FETCH_MAX_BYTES,
                max_prefetch_bytes: PREFETCH,
                fetch_max_wait: Duration::from_millis(20),
                ..Default::default()
            },
        );
        let tp = TopicPartition::new(TOPIC, 0);
        consumer.assign([tp.clone()]);
        consumer.seek(&tp, SeekTo::Earliest)?;
        let mut read = 0;
        while read < RECORDS {
            read += consumer.poll_for(Duration::from_millis(100)).await?.len() as i64;
        }
        Ok(read)
    }
}

#[tokio::test(start_paused = true)]
async fn a_hostile_brokers_frames_hold_the_client_within_the_stated_bounds() {
    let setup = Setup::new().await;
    // Each step's growth is printed above the peak of the steps before it;
    // its bound is checked on the growth since here, which includes the
    // earlier steps' (a conservative figure).
    let mut start = peaks();
    let report =
        |step: &str, start: [usize; 2], before: [usize; 2], err: &dyn std::fmt::Display| {
            let (grown, total) = (growth_since(before), growth_since(start));
            println!("{step}: peak grew by {grown} bytes, {total} since the start; {err}");
            total
        };

    // 1. A frame announced just under the 100 MiB cap, of which 16 bytes
    // come: the client reserves at most 1 MiB ahead, and the request times
    // out naming the broker and the API.
    setup.set(Hostility::FrameUnderCap);
    let before = peaks();
    let err = setup.client("under-cap").await.unwrap_err();
    let total = report("frame just under the cap", start, before, &err);
    let text = err.to_string();
    assert!(text.contains("127.0.0.1:"), "names the broker: {text}");
    assert!(text.contains("Metadata"), "names the API: {text}");
    assert!(
        total <= 4 << 20,
        "a frame just under the cap held {total} bytes"
    );

    // 2. A Metadata response of 8 MiB announcing i32::MAX brokers: the
    // client holds the frame and a reservation bounded by it, and the error
    // names the broker and the API. The frame is built before the
    // measurement, at the version the client negotiates (step 1 saw it).
    setup.set(Hostility::MetadataCount);
    let version = METADATA_VERSION.load(Ordering::Relaxed);
    assert!(version > 0, "step 1 saw the client's Metadata version");
    metadata_count_frame(version);
    // The proxy's frame is not the client's: the count starts again here.
    start = peaks();
    let before = start;
    let err = setup.client("count").await.unwrap_err();
    let total = report(
        "Metadata count of i32::MAX in an 8 MiB frame",
        start,
        before,
        &err,
    );
    let text = err.to_string();
    assert!(text.contains("127.0.0.1:"), "names the broker: {text}");
    assert!(text.contains("Metadata"), "names the API: {text}");
    assert!(
        total <= 2 * METADATA_FRAME,
        "an {METADATA_FRAME}-byte frame held {total} bytes"
    );

    // 3. A single bomb larger than the whole budget (16 x fetch.max.bytes):
    // a typed error naming the broker, the topic and the partition, after
    // decompressing no more than the budget.
    let budget = 16 * FETCH_MAX_BYTES as usize;
    setup.set(Hostility::FetchBombs {
        bomb: budget + (1 << 20),
        per_response: 1,
    });
    let before = peaks();
    let err = setup.consume().await.unwrap_err();
    let total = report("one bomb past the budget", start, before, &err);
    match &err {
        ClientError::FetchDecompressionLimit {
            broker,
            topic,
            partition,
            limit,
            ..
        } => {
            assert!(broker.starts_with("127.0.0.1:"), "{broker}");
            assert_eq!((topic.as_str(), *partition, *limit), (TOPIC, 0, budget));
        }
        other => panic!("expected FetchDecompressionLimit, got {other}"),
    }
    let bound = budget + 2 * METADATA_FRAME;
    assert!(total <= bound, "{total} bytes held past {bound}");

    // 4. Many small bombs in every Fetch response (37.5 MiB decoded each,
    // in under 100 KB on the wire): every record is read, in parts, and
    // the client holds at most the frame, the budget twice (one response
    // decoding while the records of the one before wait to be polled) and
    // the prefetch bound.
    setup.set(Hostility::FetchBombs {
        bomb: BOMB,
        per_response: BOMBS_PER_RESPONSE,
    });
    let before = peaks();
    let read = setup.consume().await.unwrap();
    let total = report(
        "many small bombs per response",
        start,
        before,
        &format!("{read} records read"),
    );
    assert_eq!(read, RECORDS);
    let bound = FETCH_MAX_BYTES as usize + 2 * budget + PREFETCH;
    assert!(
        total <= bound,
        "{total} bytes held past the bound of {bound}"
    );
}
