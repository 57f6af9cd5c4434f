//! TxnOffsetCommit: offsets staged in a transaction, sent to the group
//! coordinator and checked against the group's generation and member
//! (KIP-447), so a zombie of an older generation is refused.

use weir_protocol::kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use weir_protocol::kafka_protocol::messages::{
    ResponseKind, TopicName, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use weir_protocol::kafka_protocol::ResponseError;

use super::{Reply, RequestContext, existing_partitions, offsets_to_commit};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};
use crate::coordinator::group::{CommitMember, OffsetToCommit};
use crate::coordinator::txn::error_code_for;

/// Versions 0 to 6 (v3: group metadata, KIP-447; v4:
/// `TRANSACTION_ABORTABLE`; v5: transaction version 2, the group's offsets
/// join the transaction without AddOffsetsToTxn; v6: topics named by id).
/// A fenced producer gets `INVALID_PRODUCER_EPOCH` at every version, as
/// from Kafka's verification.
pub const VERSIONS: (i16, i16) = (0, 6);

/// v6 names topics by id. As Kafka does, each id is resolved to its topic's
/// name; the topics of an id no topic has are taken out of the request and
/// answered `UNKNOWN_TOPIC_ID` for each partition.
fn resolve_topic_ids(
    state: &ClusterState,
    req: &mut TxnOffsetCommitRequest,
) -> Vec<TxnOffsetCommitResponseTopic> {
    let mut unknown = Vec::new();
    let mut known = Vec::new();
    for mut t in std::mem::take(&mut req.topics) {
        let name = state
            .topics
            .values()
            .find(|x| !t.topic_id.is_nil() && x.id == t.topic_id)
            .map(|x| x.name.clone());
        match name {
            Some(name) => {
                t.name = TopicName(StrBytes::from_string(name));
                known.push(t);
            }
            None => unknown.push(
                TxnOffsetCommitResponseTopic::default()
                    .with_topic_id(t.topic_id)
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(ResponseError::UnknownTopicId.code())
                            })
                            .collect(),
                    ),
            ),
        }
    }
    req.topics = known;
    unknown
}

/// Stages the offsets until EndTxn.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    mut req: TxnOffsetCommitRequest,
    version: i16,
) -> Reply {
    let unknown = if version >= 6 {
        resolve_topic_ids(state, &mut req)
    } else {
        Vec::new()
    };
    if req.topics.is_empty() && !unknown.is_empty() {
        // Nothing left for the coordinator: Kafka answers at once.
        return Reply::Now(ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default().with_topics(unknown),
        ));
    }
    let offsets: Vec<OffsetToCommit> = offsets_to_commit!(req);
    let group = req.group_id.0.to_string();
    let checked = check_coordinator(state, ctx, &group).and_then(|()| {
        if version >= 5 {
            // Transaction version 2: the coordinator adds the offsets
            // partition itself (Kafka verifies with AddPartitionsToTxn v5).
            state
                .txns
                .add_offsets_implicitly(
                    &req.transactional_id.0,
                    req.producer_id.0,
                    req.producer_epoch,
                    &group,
                    ctx.now,
                )
                .map_err(|e| match e {
                    ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch.code(),
                    e => e.code(),
                })?;
        }
        state
            .txns
            .check_offset_commit(
                &req.transactional_id.0,
                req.producer_id.0,
                req.producer_epoch,
                &group,
            )
            .map_err(|e| error_code_for(e, version, 3))
    });
    let codes = match checked {
        Err(code) => vec![code; offsets.len()],
        Ok(()) => {
            let existing = existing_partitions(state, &offsets);
            let who = if version >= 3 {
                CommitMember {
                    generation: req.generation_id,
                    member_id: req.member_id.to_string(),
                    instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
                }
            } else {
                // Older clients send no group metadata: nothing to check.
                CommitMember {
                    generation: -1,
                    member_id: String::new(),
                    instance_id: None,
                }
            };
            let exists = |t: &str, p: i32| existing.contains(&(t.to_owned(), p));
            let codes =
                state
                    .groups
                    .txn_commit_offsets(&group, req.producer_id.0, &who, &offsets, &exists);
            flush(state);
            codes
        }
    };
    let mut codes = codes.into_iter();
    let answered = req.topics.into_iter().map(|t| {
        let partitions = t
            .partitions
            .iter()
            .map(|p| {
                TxnOffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(codes.next().unwrap_or_default())
            })
            .collect();
        TxnOffsetCommitResponseTopic::default()
            .with_name(t.name)
            .with_topic_id(t.topic_id)
            .with_partitions(partitions)
    });
    let topics = unknown.into_iter().chain(answered).collect();
    Reply::Now(ResponseKind::TxnOffsetCommit(
        TxnOffsetCommitResponse::default().with_topics(topics),
    ))
}
