//! Writes the seed corpora of every fuzz target into `fuzz/corpus/<target>/`
//! from real traffic: requests, responses and record batches encoded with
//! Weir's own encoders (and the metadata and spill formats weir-store
//! writes). Run from anywhere:
//! `cargo run --manifest-path fuzz/Cargo.toml --example gen_corpus`.

use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use weir_client::connection::version_cap;
use weir_protocol::api::{encode_request, encode_response};
use weir_protocol::kafka_protocol::messages::*;
use weir_protocol::kafka_protocol::protocol::{Message, Request, StrBytes};
use weir_protocol::records::{
    BatchBuilder, BatchOptions, Compression, ControlKind, RecordHeader, RecordInput,
    encode_control_batch,
};

fn corpus(target: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
}

fn batch(opts: BatchOptions, n: i64) -> Bytes {
    let mut b = BatchBuilder::new(opts);
    for i in 0..n {
        b.push(RecordInput {
            timestamp: 1_700_000_000_000 + i,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(format!("value-{i}-").repeat(4))),
            headers: vec![RecordHeader {
                key: "h".into(),
                value: Some(Bytes::from_static(b"v")),
            }],
        });
    }
    b.build().unwrap()
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

fn tp(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

/// The response-target index of each API, as `protocol_responses` maps them.
fn responses() {
    let dir = corpus("protocol_responses");
    let records = batch(BatchOptions::default(), 3);
    let fetch = FetchResponse::default().with_responses(vec![
        fetch_response::FetchableTopicResponse::default()
            .with_topic(tp("t"))
            .with_partitions(vec![
                fetch_response::PartitionData::default()
                    .with_high_watermark(3)
                    .with_records(Some(records)),
            ]),
    ]);
    let metadata = MetadataResponse::default()
        .with_brokers(vec![
            metadata_response::MetadataResponseBroker::default()
                .with_host(StrBytes::from_static_str("localhost"))
                .with_port(9092),
        ])
        .with_topics(vec![
            metadata_response::MetadataResponseTopic::default()
                .with_name(Some(tp("t")))
                .with_partitions(vec![
                    metadata_response::MetadataResponsePartition::default()
                        .with_replica_nodes(vec![BrokerId(0)]),
                ]),
        ]);
    let versions = ApiVersionsResponse::default().with_api_keys(vec![
        api_versions_response::ApiVersion::default()
            .with_api_key(ApiKey::Fetch as i16)
            .with_min_version(4)
            .with_max_version(12),
    ]);
    macro_rules! seed {
        ($idx:expr, $req:ty, $body:expr) => {{
            let api = ApiKey::try_from(<$req>::KEY).unwrap();
            let range = <$req>::VERSIONS;
            let max = version_cap(api).map_or(range.max, |c| c.min(range.max));
            let body = $body;
            for version in [range.min, max] {
                let mut out = BytesMut::new();
                if encode_response(&mut out, api, version, 7, &body).is_ok() {
                    let mut input = vec![$idx, (version - range.min) as u8, 0xff];
                    input.extend_from_slice(&out);
                    write(&dir, &format!("{api:?}-v{version}"), &input);
                }
            }
        }};
    }
    seed!(0, ApiVersionsRequest, ResponseKind::ApiVersions(versions));
    seed!(1, MetadataRequest, ResponseKind::Metadata(metadata));
    seed!(2, ProduceRequest, ResponseKind::Produce(Default::default()));
    seed!(3, FetchRequest, ResponseKind::Fetch(fetch));
    seed!(
        4,
        ListOffsetsRequest,
        ResponseKind::ListOffsets(Default::default())
    );
    seed!(
        5,
        FindCoordinatorRequest,
        ResponseKind::FindCoordinator(Default::default())
    );
    seed!(
        6,
        JoinGroupRequest,
        ResponseKind::JoinGroup(Default::default())
    );
    seed!(
        7,
        SyncGroupRequest,
        ResponseKind::SyncGroup(Default::default())
    );
    seed!(
        8,
        HeartbeatRequest,
        ResponseKind::Heartbeat(Default::default())
    );
    seed!(
        9,
        LeaveGroupRequest,
        ResponseKind::LeaveGroup(Default::default())
    );
    seed!(
        10,
        OffsetCommitRequest,
        ResponseKind::OffsetCommit(Default::default())
    );
    seed!(
        11,
        OffsetFetchRequest,
        ResponseKind::OffsetFetch(Default::default())
    );
    seed!(
        12,
        DescribeGroupsRequest,
        ResponseKind::DescribeGroups(Default::default())
    );
    seed!(
        13,
        ListGroupsRequest,
        ResponseKind::ListGroups(Default::default())
    );
    seed!(
        14,
        CreateTopicsRequest,
        ResponseKind::CreateTopics(Default::default())
    );
    seed!(
        15,
        DeleteTopicsRequest,
        ResponseKind::DeleteTopics(Default::default())
    );
    seed!(
        16,
        DescribeConfigsRequest,
        ResponseKind::DescribeConfigs(Default::default())
    );
    seed!(
        17,
        IncrementalAlterConfigsRequest,
        ResponseKind::IncrementalAlterConfigs(Default::default())
    );
    seed!(
        18,
        InitProducerIdRequest,
        ResponseKind::InitProducerId(Default::default())
    );
    seed!(
        19,
        AddPartitionsToTxnRequest,
        ResponseKind::AddPartitionsToTxn(Default::default())
    );
    seed!(
        20,
        AddOffsetsToTxnRequest,
        ResponseKind::AddOffsetsToTxn(Default::default())
    );
    seed!(
        21,
        TxnOffsetCommitRequest,
        ResponseKind::TxnOffsetCommit(Default::default())
    );
    seed!(22, EndTxnRequest, ResponseKind::EndTxn(Default::default()));
    seed!(
        23,
        SaslHandshakeRequest,
        ResponseKind::SaslHandshake(Default::default())
    );
    seed!(
        24,
        SaslAuthenticateRequest,
        ResponseKind::SaslAuthenticate(Default::default())
    );
}

fn batches() {
    let dir = corpus("record_batches");
    for codec in CODECS {
        let b = batch(
            BatchOptions {
                compression: codec,
                ..BatchOptions::default()
            },
            5,
        );
        for flags in [0u8, 1] {
            let mut input = vec![flags];
            input.extend_from_slice(&b);
            write(&dir, &format!("{}-{flags}", codec.name()), &input);
        }
    }
    let mut input = vec![0u8];
    input.extend_from_slice(&encode_control_batch(5, 0, 9, 0, ControlKind::Commit, 0));
    write(&dir, "control", &input);
}

fn read_committed() {
    let dir = corpus("read_committed");
    let txn = |base: i64, pid: i64| {
        batch(
            BatchOptions {
                producer_id: pid,
                producer_epoch: 0,
                base_sequence: 0,
                transactional: true,
                base_offset: base,
                compression: Compression::Lz4,
                ..BatchOptions::default()
            },
            2,
        )
    };
    let mut log = Vec::new();
    log.extend_from_slice(&txn(0, 1));
    log.extend_from_slice(&txn(2, 2));
    log.extend_from_slice(&encode_control_batch(1, 0, 4, 0, ControlKind::Abort, 0));
    log.extend_from_slice(&encode_control_batch(2, 0, 5, 0, ControlKind::Commit, 0));
    log.extend_from_slice(&batch(
        BatchOptions {
            base_offset: 6,
            ..BatchOptions::default()
        },
        2,
    ));
    let mut input = 1i64.to_be_bytes().to_vec();
    input.push(1);
    input.extend_from_slice(&1i64.to_be_bytes());
    input.extend_from_slice(&0i64.to_be_bytes());
    input.extend_from_slice(&log);
    write(&dir, "abort-then-commit", &input);
}

fn req<R: Request>(out: &mut Vec<u8>, slot: u8, version: i16, body: &R) {
    let mut frame = BytesMut::new();
    encode_request(&mut frame, 1, Some("fuzz"), version, body).unwrap();
    let frame = &frame[4..];
    out.push(slot);
    out.extend_from_slice(&(frame.len() as u16).to_be_bytes());
    out.extend_from_slice(frame);
}

fn testkit() {
    let dir = corpus("testkit_requests");
    let group = || GroupId(StrBytes::from_static_str("g"));
    let mut s = Vec::new();
    req(&mut s, 0, 3, &ApiVersionsRequest::default());
    req(&mut s, 0, 12, &MetadataRequest::default().with_topics(None));
    req(
        &mut s,
        0,
        7,
        &CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(tp("new"))
                .with_num_partitions(2)
                .with_replication_factor(1),
        ]),
    );
    let records = batch(
        BatchOptions {
            compression: Compression::Snappy,
            ..BatchOptions::default()
        },
        3,
    );
    req(
        &mut s,
        1,
        9,
        &ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(1000)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name(tp("t"))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(1)
                            .with_records(Some(records)),
                    ]),
            ]),
    );
    req(
        &mut s,
        1,
        12,
        &FetchRequest::default()
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_isolation_level(1)
            .with_topics(vec![
                fetch_request::FetchTopic::default()
                    .with_topic(tp("t"))
                    .with_partitions(vec![
                        fetch_request::FetchPartition::default()
                            .with_partition(1)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]),
    );
    write(&dir, "produce-fetch", &s);

    let mut g = Vec::new();
    req(
        &mut g,
        2,
        3,
        &FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g")),
    );
    let join = JoinGroupRequest::default()
        .with_group_id(group())
        .with_session_timeout_ms(6000)
        .with_rebalance_timeout_ms(6000)
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(Bytes::from_static(
                    b"\x00\x01\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff",
                )),
        ]);
    req(&mut g, 2, 9, &join);
    req(&mut g, 2, 9, &join);
    req(&mut g, 3, 9, &join);
    req(
        &mut g,
        2,
        5,
        &SyncGroupRequest::default()
            .with_group_id(group())
            .with_generation_id(1),
    );
    req(
        &mut g,
        2,
        4,
        &HeartbeatRequest::default().with_group_id(group()),
    );
    g.extend_from_slice(&[0xf0, 0x27, 0x10]);
    req(
        &mut g,
        3,
        5,
        &LeaveGroupRequest::default().with_group_id(group()),
    );
    write(&dir, "group", &g);

    let mut t = Vec::new();
    let tid = || TransactionalId(StrBytes::from_static_str("tx"));
    req(
        &mut t,
        0,
        3,
        &FindCoordinatorRequest::default()
            .with_key(StrBytes::from_static_str("tx"))
            .with_key_type(1),
    );
    req(
        &mut t,
        0,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(tid()))
            .with_transaction_timeout_ms(60000),
    );
    req(
        &mut t,
        0,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(tid())
            .with_v3_and_below_topics(vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(tp("t"))
                    .with_partitions(vec![0]),
            ]),
    );
    req(
        &mut t,
        0,
        3,
        &AddOffsetsToTxnRequest::default()
            .with_transactional_id(tid())
            .with_group_id(group()),
    );
    req(
        &mut t,
        0,
        3,
        &EndTxnRequest::default()
            .with_transactional_id(tid())
            .with_committed(false),
    );
    write(&dir, "transaction", &t);
}

fn store() {
    let dir = corpus("store_meta");
    let meta = |key: &[u8], value: &[u8]| {
        let mut v = vec![0u8, key.len() as u8];
        v.extend_from_slice(key);
        v.extend_from_slice(value);
        v
    };
    let mut window = vec![1u8, 1];
    window.extend_from_slice(&60_000i64.to_be_bytes());
    window.extend_from_slice(&10_000i64.to_be_bytes());
    let mut typed = vec![1u8, 0, 4];
    typed.extend_from_slice(b"utf8");
    typed.push(3);
    typed.extend_from_slice(b"i64");
    let mut offset_key = b"offset/".to_vec();
    offset_key.extend_from_slice(&0i32.to_be_bytes());
    offset_key.extend_from_slice(b"changelog");
    let mut restoring = vec![1u8];
    restoring.extend_from_slice(&0i32.to_be_bytes());
    restoring.extend_from_slice(b"changelog");
    let entries: [(&str, Vec<u8>); 6] = [
        ("format", meta(b"format", b"weir-store/1")),
        ("kv", meta(b"store/kv", &[1, 0])),
        ("window", meta(b"store/win", &window)),
        ("typed", meta(b"store/typed", &typed)),
        ("offset", meta(&offset_key, &7i64.to_be_bytes())),
        ("restoring", meta(b"restoring/kv", &restoring)),
    ];
    for (name, bytes) in &entries {
        write(&dir, name, bytes);
    }
    // Spill runs: kind, key_len u16 LE, value_len u32 LE, key, value.
    let rec = |out: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>| {
        out.push(u8::from(value.is_some()));
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(&(value.map_or(0, <[u8]>::len) as u32).to_le_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(value.unwrap_or_default());
    };
    let mut run = vec![1u8, 1];
    for (k, v) in [
        (&b"a"[..], Some(&b"1"[..])),
        (b"b", None),
        (b"c", Some(b"3")),
    ] {
        rec(&mut run, k, v);
    }
    for (k, v) in [
        (&b"a"[..], None),
        (b"b", Some(&b"22"[..])),
        (b"d", Some(b"4")),
    ] {
        rec(&mut run, k, v);
    }
    write(&dir, "spill-two-runs", &run);

    let dir = corpus("store_reopen");
    let entry = |key: &[u8], value: &[u8]| {
        let mut v = vec![key.len() as u8, value.len() as u8];
        v.extend_from_slice(key);
        v.extend_from_slice(value);
        v
    };
    write(&dir, "window-registration", &entry(b"store/win", &window));
    write(
        &dir,
        "stream-time",
        &entry(b"streamtime/win", &30_000i64.to_be_bytes()),
    );
    write(&dir, "restoring", &entry(b"restoring/kv", &restoring));
    write(&dir, "new-store", &entry(b"store/other", &[1, 0]));
}

fn main() {
    responses();
    batches();
    read_committed();
    testkit();
    store();
    println!("corpora written under {}", corpus("").display());
}
