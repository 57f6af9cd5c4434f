//! TxnOffsetCommit: offsets staged in a transaction, sent to the group
//! coordinator and checked against the group's generation and member
//! (KIP-447), so a zombie of an older generation is refused.

use weir_protocol::kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use weir_protocol::kafka_protocol::messages::{
    ResponseKind, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};

use weir_protocol::kafka_protocol::ResponseError;

use super::{Reply, RequestContext, existing_partitions, offsets_to_commit};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};
use crate::coordinator::group::{CommitMember, OffsetToCommit};
use crate::coordinator::txn::error_code_for;

/// Versions 0 to 5 (v3: group metadata, KIP-447; v4:
/// `TRANSACTION_ABORTABLE`; v5: transaction version 2, the group's offsets
/// join the transaction without AddOffsetsToTxn). A fenced producer gets
/// `INVALID_PRODUCER_EPOCH` at every version, as from Kafka's verification.
pub const VERSIONS: (i16, i16) = (0, 5);

/// Stages the offsets until EndTxn.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> Reply {
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
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
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
                .with_partitions(partitions)
        })
        .collect();
    Reply::Now(ResponseKind::TxnOffsetCommit(
        TxnOffsetCommitResponse::default().with_topics(topics),
    ))
}
