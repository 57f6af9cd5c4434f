//! OffsetFetch: committed offsets of one group (v1–7) or several (v8);
//! with `require_stable` (v7+), a partition whose offset is pending in an
//! open transaction gets `UNSTABLE_OFFSET_COMMIT`.

use weir_protocol::kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use weir_protocol::kafka_protocol::messages::{
    GroupId, OffsetFetchRequest, OffsetFetchResponse, ResponseKind, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::check_coordinator;
use crate::coordinator::group::FetchedOffset;

/// Versions 1 to 9 (v7: `require_stable`, v8: several groups, v9: the
/// member id and epoch of a KIP-848 consumer group, which a classic group's
/// fetch leaves unset and the testkit, having no such groups, ignores).
pub const VERSIONS: (i16, i16) = (1, 9);

type Fetched = Vec<(String, Vec<FetchedOffset>)>;

fn fetch(
    state: &ClusterState,
    ctx: &RequestContext,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Fetched, i16> {
    check_coordinator(state, ctx, group)?;
    state.groups.fetch_offsets(group, topics, require_stable)
}

fn name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_owned()))
}

/// Answers with the committed offsets.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: OffsetFetchRequest,
    version: i16,
) -> Reply {
    let require_stable = version >= 7 && req.require_stable;
    if version >= 8 {
        let groups = req
            .groups
            .into_iter()
            .map(|g| {
                let topics = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect()
                });
                let out = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                match fetch(state, ctx, &g.group_id.0, topics, require_stable) {
                    Err(code) => out.with_error_code(code),
                    Ok(fetched) => out.with_topics(
                        fetched
                            .into_iter()
                            .map(|(t, parts)| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(name(&t))
                                    .with_partitions(
                                        parts
                                            .into_iter()
                                            .map(|p| {
                                                OffsetFetchResponsePartitions::default()
                                                    .with_partition_index(p.partition)
                                                    .with_committed_offset(p.offset)
                                                    .with_committed_leader_epoch(p.leader_epoch)
                                                    .with_metadata(Some(StrBytes::from_string(
                                                        p.metadata,
                                                    )))
                                                    .with_error_code(p.error_code)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                }
            })
            .collect();
        return Reply::Now(ResponseKind::OffsetFetch(
            OffsetFetchResponse::default().with_groups(groups),
        ));
    }
    let requested: Option<Vec<(String, Vec<i32>)>> = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let group = GroupId::clone(&req.group_id);
    let (top_error, fetched) = match fetch(state, ctx, &group.0, requested.clone(), require_stable)
    {
        Ok(f) => (0, f),
        // v1 has no top-level error: each requested partition carries it.
        Err(code) => (
            code,
            requested
                .unwrap_or_default()
                .into_iter()
                .map(|(t, parts)| {
                    let parts = parts
                        .into_iter()
                        .map(|partition| FetchedOffset {
                            partition,
                            offset: -1,
                            leader_epoch: -1,
                            metadata: String::new(),
                            error_code: code,
                        })
                        .collect();
                    (t, parts)
                })
                .collect(),
        ),
    };
    let topics = fetched
        .into_iter()
        .map(|(t, parts)| {
            OffsetFetchResponseTopic::default()
                .with_name(name(&t))
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|p| {
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(p.partition)
                                .with_committed_offset(p.offset)
                                .with_committed_leader_epoch(if version >= 5 {
                                    p.leader_epoch
                                } else {
                                    -1
                                })
                                .with_metadata(Some(StrBytes::from_string(p.metadata)))
                                .with_error_code(p.error_code)
                        })
                        .collect(),
                )
        })
        .collect();
    let response = OffsetFetchResponse::default()
        .with_topics(topics)
        .with_error_code(if version >= 2 { top_error } else { 0 });
    Reply::Now(ResponseKind::OffsetFetch(response))
}
