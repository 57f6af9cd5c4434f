//! Error responses for any request: what an `InterceptAction::Error` fault
//! sends back.
//!
//! Each API reports errors in its own places: a top-level code, or one per
//! partition, topic or group. The response built here puts the code in
//! every such place the request names, so the client reacts exactly as it
//! would to a real broker's error.

use weir_protocol::kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use weir_protocol::kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use weir_protocol::kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use weir_protocol::kafka_protocol::messages::fetch_response::{
    FetchableTopicResponse, PartitionData,
};
use weir_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use weir_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use weir_protocol::kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use weir_protocol::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use weir_protocol::kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
use weir_protocol::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use weir_protocol::kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use weir_protocol::kafka_protocol::messages::*;

/// A response to `req` that carries `code` everywhere it can, or `None`
/// for APIs where an error cannot be expressed (the connection is then closed).
pub fn for_request(req: &RequestKind, code: i16) -> Option<ResponseKind> {
    Some(match req {
        RequestKind::ApiVersions(_) => {
            ResponseKind::ApiVersions(ApiVersionsResponse::default().with_error_code(code))
        }
        RequestKind::Metadata(r) => {
            let topics = r.topics.as_ref()?;
            ResponseKind::Metadata(
                MetadataResponse::default().with_topics(
                    topics
                        .iter()
                        .map(|t| {
                            MetadataResponseTopic::default()
                                .with_name(t.name.clone())
                                .with_topic_id(t.topic_id)
                                .with_error_code(code)
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::Produce(r) => ResponseKind::Produce(
            ProduceResponse::default().with_responses(
                r.topic_data
                    .iter()
                    .map(|t| {
                        TopicProduceResponse::default()
                            .with_name(t.name.clone())
                            .with_partition_responses(
                                t.partition_data
                                    .iter()
                                    .map(|p| {
                                        PartitionProduceResponse::default()
                                            .with_index(p.index)
                                            .with_error_code(code)
                                            .with_base_offset(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::Fetch(r) => ResponseKind::Fetch(
            FetchResponse::default().with_responses(
                r.topics
                    .iter()
                    .map(|t| {
                        FetchableTopicResponse::default()
                            .with_topic(t.topic.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        PartitionData::default()
                                            .with_partition_index(p.partition)
                                            .with_error_code(code)
                                            .with_high_watermark(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(
            ListOffsetsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        ListOffsetsTopicResponse::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        ListOffsetsPartitionResponse::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::CreateTopics(r) => ResponseKind::CreateTopics(
            CreateTopicsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::DeleteRecords(r) => ResponseKind::DeleteRecords(
            DeleteRecordsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        DeleteRecordsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        DeleteRecordsPartitionResult::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default()
                .with_error_code(code)
                .with_node_id(BrokerId(-1))
                .with_coordinators(
                    r.coordinator_keys
                        .iter()
                        .map(|k| {
                            Coordinator::default()
                                .with_key(k.clone())
                                .with_error_code(code)
                                .with_node_id(BrokerId(-1))
                        })
                        .collect(),
                ),
        ),
        RequestKind::JoinGroup(r) => ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_member_id(r.member_id.clone()),
        ),
        RequestKind::SyncGroup(_) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        RequestKind::Heartbeat(_) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        RequestKind::LeaveGroup(_) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::OffsetFetch(r) => ResponseKind::OffsetFetch(
            OffsetFetchResponse::default()
                .with_error_code(code)
                .with_groups(
                    r.groups
                        .iter()
                        .map(|g| {
                            OffsetFetchResponseGroup::default()
                                .with_group_id(g.group_id.clone())
                                .with_error_code(code)
                        })
                        .collect(),
                ),
        ),
        RequestKind::TxnOffsetCommit(r) => ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        TxnOffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        TxnOffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::InitProducerId(_) => ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        RequestKind::AddPartitionsToTxn(r) => ResponseKind::AddPartitionsToTxn(
            AddPartitionsToTxnResponse::default()
                .with_error_code(code)
                .with_results_by_topic_v3_and_below(
                    r.v3_and_below_topics
                        .iter()
                        .map(|t| {
                            AddPartitionsToTxnTopicResult::default()
                                .with_name(t.name.clone())
                                .with_results_by_partition(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            AddPartitionsToTxnPartitionResult::default()
                                                .with_partition_index(*p)
                                                .with_partition_error_code(code)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
        ),
        RequestKind::AddOffsetsToTxn(_) => {
            ResponseKind::AddOffsetsToTxn(AddOffsetsToTxnResponse::default().with_error_code(code))
        }
        RequestKind::EndTxn(_) => {
            ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(code))
        }
        RequestKind::ListGroups(_) => {
            ResponseKind::ListGroups(ListGroupsResponse::default().with_error_code(code))
        }
        _ => return None,
    })
}
