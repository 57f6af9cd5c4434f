//! Group and transaction requests for the coordinator scenario tests, on top
//! of the minimal test client in `common`.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_arguments
)]

use bytes::Bytes;
use tokio::io::DuplexStream;
use weir_protocol::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use weir_protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use weir_protocol::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use weir_protocol::kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use weir_protocol::kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use weir_protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId, HeartbeatRequest,
    InitProducerIdRequest, JoinGroupRequest, JoinGroupResponse, OffsetFetchRequest, ProducerId,
    SyncGroupRequest, TransactionalId, TxnOffsetCommitRequest,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use crate::common::{TestClient, topic};

pub type Client = TestClient<DuplexStream>;

pub const SESSION_MS: i32 = 10_000;
pub const REBALANCE_MS: i32 = 30_000;

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

pub fn gid(v: &str) -> GroupId {
    GroupId(s(v))
}

pub fn tid(v: &str) -> TransactionalId {
    TransactionalId(s(v))
}

/// A JoinGroup at `version`, with only the fields that version has.
pub fn join_request(
    group: &str,
    member: &str,
    instance: Option<&str>,
    version: i16,
) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(gid(group))
        .with_session_timeout_ms(SESSION_MS)
        .with_rebalance_timeout_ms(REBALANCE_MS)
        .with_member_id(s(member))
        .with_group_instance_id(if version >= 5 { instance.map(s) } else { None })
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(b"subscription")),
        ])
}

/// Joins as a new dynamic member (through `MEMBER_ID_REQUIRED` from v4)
/// and sends the JoinGroup that waits for the rebalance, without reading
/// its answer. Returns the member id.
pub async fn start_join(c: &mut Client, group: &str, version: i16) -> String {
    let mut member = String::new();
    if version >= 4 {
        let first = c
            .call(version, &join_request(group, "", None, version))
            .await;
        assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
        member = first.member_id.to_string();
    }
    c.send_only(version, &join_request(group, &member, None, version))
        .await;
    member
}

pub async fn finish_join(c: &mut Client, version: i16) -> JoinGroupResponse {
    c.recv::<JoinGroupRequest>(version).await
}

/// Joins alone and completes the rebalance: (member id, generation).
pub async fn join_alone(c: &mut Client, group: &str, version: i16) -> (String, i32) {
    start_join(c, group, version).await;
    let joined = finish_join(c, version).await;
    assert_eq!(joined.error_code, 0);
    (joined.member_id.to_string(), joined.generation_id)
}

pub fn sync_request(
    group: &str,
    member: &str,
    generation: i32,
    instance: Option<&str>,
    assignments: &[(&str, &[u8])],
    version: i16,
) -> SyncGroupRequest {
    SyncGroupRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_group_instance_id(if version >= 3 { instance.map(s) } else { None })
        .with_protocol_type(if version >= 5 {
            Some(s("consumer"))
        } else {
            None
        })
        .with_protocol_name(if version >= 5 { Some(s("range")) } else { None })
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(Bytes::copy_from_slice(a))
                })
                .collect(),
        )
}

pub fn heartbeat_request(
    group: &str,
    member: &str,
    generation: i32,
    instance: Option<&str>,
    version: i16,
) -> HeartbeatRequest {
    HeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_group_instance_id(if version >= 3 { instance.map(s) } else { None })
}

pub async fn heartbeat(c: &mut Client, group: &str, member: &str, generation: i32) -> i16 {
    c.call(4, &heartbeat_request(group, member, generation, None, 4))
        .await
        .error_code
}

/// OffsetFetch v7 for one partition: (offset, partition error).
pub async fn fetch_offset(
    c: &mut Client,
    group: &str,
    t: &str,
    partition: i32,
    require_stable: bool,
) -> (i64, i16) {
    let req = OffsetFetchRequest::default()
        .with_group_id(gid(group))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic(t))
                .with_partition_indexes(vec![partition]),
        ]))
        .with_require_stable(require_stable);
    let resp = c.call(7, &req).await;
    assert_eq!(resp.error_code, 0);
    let p = &resp.topics[0].partitions[0];
    (p.committed_offset, p.error_code)
}

/// InitProducerId v4: (error, producer id, epoch).
pub async fn init_producer(
    c: &mut Client,
    transactional_id: &str,
    timeout_ms: i32,
) -> (i16, i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid(transactional_id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let resp = c.call(4, &req).await;
    (resp.error_code, resp.producer_id.0, resp.producer_epoch)
}

/// InitProducerId v4 in the KIP-360 form: the client names the producer id
/// and epoch it already has. Returns (error, producer id, epoch).
pub async fn init_producer_as(
    c: &mut Client,
    transactional_id: &str,
    timeout_ms: i32,
    pid: i64,
    epoch: i16,
) -> (i16, i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid(transactional_id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch);
    let resp = c.call(4, &req).await;
    (resp.error_code, resp.producer_id.0, resp.producer_epoch)
}

/// AddPartitionsToTxn v3: the error of each partition.
pub async fn add_partitions(
    c: &mut Client,
    transactional_id: &str,
    pid: i64,
    epoch: i16,
    t: &str,
    partitions: &[i32],
) -> Vec<i16> {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(tid(transactional_id))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(topic(t))
                .with_partitions(partitions.to_vec()),
        ]);
    let resp = c.call(3, &req).await;
    resp.results_by_topic_v3_and_below[0]
        .results_by_partition
        .iter()
        .map(|r| r.partition_error_code)
        .collect()
}

pub async fn add_offsets(
    c: &mut Client,
    transactional_id: &str,
    pid: i64,
    epoch: i16,
    group: &str,
) -> i16 {
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(tid(transactional_id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_group_id(gid(group));
    c.call(3, &req).await.error_code
}

/// TxnOffsetCommit v3 of one offset with the member's group metadata.
pub async fn txn_commit_offset(
    c: &mut Client,
    transactional_id: &str,
    pid: i64,
    epoch: i16,
    group: &str,
    member: (&str, i32),
    t: &str,
    offset: i64,
) -> i16 {
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(tid(transactional_id))
        .with_group_id(gid(group))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_member_id(s(member.0))
        .with_generation_id(member.1)
        .with_topics(vec![
            TxnOffsetCommitRequestTopic::default()
                .with_name(topic(t))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(-1),
                ]),
        ]);
    c.call(3, &req).await.topics[0].partitions[0].error_code
}

pub async fn end_txn(
    c: &mut Client,
    transactional_id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
    version: i16,
) -> i16 {
    let req = EndTxnRequest::default()
        .with_transactional_id(tid(transactional_id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    c.call(version, &req).await.error_code
}
