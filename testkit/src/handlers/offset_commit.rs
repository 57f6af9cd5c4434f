//! OffsetCommit: checked against the group's generation and member.

use weir_protocol::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use weir_protocol::kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, ResponseKind,
};

use super::{Reply, RequestContext, existing_partitions, offsets_to_commit};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};
use crate::coordinator::group::{CommitMember, OffsetToCommit};

/// Versions 2 to 9 (v7: static membership).
pub const VERSIONS: (i16, i16) = (2, 9);

/// Commits the offsets; every partition gets an error code.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: OffsetCommitRequest,
    version: i16,
) -> Reply {
    let offsets: Vec<OffsetToCommit> = offsets_to_commit!(req);
    let codes = match check_coordinator(state, ctx, &req.group_id.0) {
        Err(code) => vec![code; offsets.len()],
        Ok(()) => {
            let existing = existing_partitions(state, &offsets);
            let who = CommitMember {
                generation: req.generation_id_or_member_epoch,
                member_id: req.member_id.to_string(),
                instance_id: if version >= 7 {
                    req.group_instance_id.as_ref().map(|i| i.to_string())
                } else {
                    None
                },
            };
            let exists = |t: &str, p: i32| existing.contains(&(t.to_owned(), p));
            let codes =
                state
                    .groups
                    .commit_offsets(&req.group_id.0, &who, &offsets, &exists, ctx.now);
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
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().unwrap_or_default())
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    Reply::Now(ResponseKind::OffsetCommit(
        OffsetCommitResponse::default().with_topics(topics),
    ))
}
