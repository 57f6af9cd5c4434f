//! One handler module per API, and the dispatch that routes to them.
//!
//! Every handler has the same shape:
//!
//! ```text
//! pub fn handle(state: &mut ClusterState, ctx: &RequestContext, req: XRequest, version: i16) -> Reply
//! ```
//!
//! and its module declares `pub const VERSIONS: (i16, i16)`, the range that
//! ApiVersions advertises. A handler that must wait (Fetch for min bytes,
//! JoinGroup for the rebalance) stores `ctx.request_id` in the state and
//! returns [`Reply::Later`]; whoever completes it later calls
//! [`ClusterState::respond`].

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_configs;
pub mod describe_groups;
pub mod end_txn;
pub mod error_response;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod produce;
pub mod sync_group;
pub mod txn_offset_commit;

use std::collections::HashSet;

use tokio::time::Instant;
use tracing::debug;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::cluster::ClusterState;
use crate::cluster::timers::TimerEvent;

/// Identifies one request while it is being handled or waits for its answer.
pub type RequestId = u64;

/// Everything about a request except its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestContext {
    /// Unique per request; the key to answer a deferred request.
    pub request_id: RequestId,
    /// The connection it arrived on.
    pub connection_id: u64,
    /// The broker that connection belongs to.
    pub broker_id: i32,
    /// The header's client id.
    pub client_id: Option<String>,
    /// The API.
    pub api_key: ApiKey,
    /// The request's version.
    pub version: i16,
    /// The header's correlation id.
    pub correlation_id: i32,
    /// When the state task took the request (tokio's clock).
    pub now: Instant,
}

/// What a handler tells the state task to do.
#[derive(Debug)]
pub enum Reply {
    /// Send this response now, at the request's version.
    Now(ResponseKind),
    /// Send this response now, encoded at another version (ApiVersions'
    /// v0 fallback).
    NowAt(ResponseKind, i16),
    /// The response comes later through [`ClusterState::respond`].
    Later,
    /// The request gets no response (Produce with acks=0).
    NoResponse,
    /// The request is never answered (a fault dropped it).
    Swallow,
    /// Close the connection.
    Close,
}

/// The APIs this cluster implements, with the version ranges it advertises.
pub fn supported_versions() -> Vec<(ApiKey, i16, i16)> {
    let table = [
        (ApiKey::ApiVersions, api_versions::VERSIONS),
        (ApiKey::Metadata, metadata::VERSIONS),
        (ApiKey::Produce, produce::VERSIONS),
        (ApiKey::Fetch, fetch::VERSIONS),
        (ApiKey::ListOffsets, list_offsets::VERSIONS),
        (ApiKey::CreateTopics, create_topics::VERSIONS),
        (ApiKey::DeleteTopics, delete_topics::VERSIONS),
        (ApiKey::CreatePartitions, create_partitions::VERSIONS),
        (ApiKey::DeleteRecords, delete_records::VERSIONS),
        (ApiKey::DescribeConfigs, describe_configs::VERSIONS),
        (ApiKey::FindCoordinator, find_coordinator::VERSIONS),
        (ApiKey::JoinGroup, join_group::VERSIONS),
        (ApiKey::SyncGroup, sync_group::VERSIONS),
        (ApiKey::Heartbeat, heartbeat::VERSIONS),
        (ApiKey::LeaveGroup, leave_group::VERSIONS),
        (ApiKey::OffsetCommit, offset_commit::VERSIONS),
        (ApiKey::OffsetFetch, offset_fetch::VERSIONS),
        (ApiKey::DescribeGroups, describe_groups::VERSIONS),
        (ApiKey::ListGroups, list_groups::VERSIONS),
        (ApiKey::DeleteGroups, delete_groups::VERSIONS),
        (ApiKey::InitProducerId, init_producer_id::VERSIONS),
        (ApiKey::AddPartitionsToTxn, add_partitions_to_txn::VERSIONS),
        (ApiKey::AddOffsetsToTxn, add_offsets_to_txn::VERSIONS),
        (ApiKey::TxnOffsetCommit, txn_offset_commit::VERSIONS),
        (ApiKey::EndTxn, end_txn::VERSIONS),
    ];
    table
        .into_iter()
        .map(|(k, (min, max))| (k, min, max))
        .collect()
}

fn advertised(api: ApiKey) -> Option<(i16, i16)> {
    supported_versions()
        .into_iter()
        .find(|(k, _, _)| *k == api)
        .map(|(_, min, max)| (min, max))
}

/// Routes a request to its handler.
pub fn dispatch(state: &mut ClusterState, ctx: &RequestContext, body: RequestKind) -> Reply {
    let v = ctx.version;
    match advertised(ctx.api_key) {
        Some((min, max)) if (min..=max).contains(&v) => {}
        _ if ctx.api_key == ApiKey::ApiVersions => {
            return Reply::NowAt(
                ResponseKind::ApiVersions(api_versions::unsupported_version_response()),
                0,
            );
        }
        _ => {
            // Kafka closes the connection on a version it does not speak.
            debug!(api = ?ctx.api_key, version = v, "unsupported API or version; closing the connection");
            return Reply::Close;
        }
    }
    match body {
        RequestKind::ApiVersions(r) => api_versions::handle(state, ctx, r, v),
        RequestKind::Metadata(r) => metadata::handle(state, ctx, r, v),
        RequestKind::Produce(r) => produce::handle(state, ctx, r, v),
        RequestKind::Fetch(r) => fetch::handle(state, ctx, r, v),
        RequestKind::ListOffsets(r) => list_offsets::handle(state, ctx, r, v),
        RequestKind::CreateTopics(r) => create_topics::handle(state, ctx, r, v),
        RequestKind::DeleteTopics(r) => delete_topics::handle(state, ctx, r, v),
        RequestKind::CreatePartitions(r) => create_partitions::handle(state, ctx, r, v),
        RequestKind::DeleteRecords(r) => delete_records::handle(state, ctx, r, v),
        RequestKind::DescribeConfigs(r) => describe_configs::handle(state, ctx, r, v),
        RequestKind::FindCoordinator(r) => find_coordinator::handle(state, ctx, r, v),
        RequestKind::JoinGroup(r) => join_group::handle(state, ctx, r, v),
        RequestKind::SyncGroup(r) => sync_group::handle(state, ctx, r, v),
        RequestKind::Heartbeat(r) => heartbeat::handle(state, ctx, r, v),
        RequestKind::LeaveGroup(r) => leave_group::handle(state, ctx, r, v),
        RequestKind::OffsetCommit(r) => offset_commit::handle(state, ctx, r, v),
        RequestKind::OffsetFetch(r) => offset_fetch::handle(state, ctx, r, v),
        RequestKind::DescribeGroups(r) => describe_groups::handle(state, ctx, r, v),
        RequestKind::ListGroups(r) => list_groups::handle(state, ctx, r, v),
        RequestKind::DeleteGroups(r) => delete_groups::handle(state, ctx, r, v),
        RequestKind::InitProducerId(r) => init_producer_id::handle(state, ctx, r, v),
        RequestKind::AddPartitionsToTxn(r) => add_partitions_to_txn::handle(state, ctx, r, v),
        RequestKind::AddOffsetsToTxn(r) => add_offsets_to_txn::handle(state, ctx, r, v),
        RequestKind::TxnOffsetCommit(r) => txn_offset_commit::handle(state, ctx, r, v),
        RequestKind::EndTxn(r) => end_txn::handle(state, ctx, r, v),
        _ => Reply::Close,
    }
}

/// Routes a coordinator timer to the group or transaction coordinator.
pub fn coordinator_timer(state: &mut ClusterState, event: TimerEvent, now: Instant) {
    crate::coordinator::driver::on_timer(state, &event, now);
}

/// The offsets of an OffsetCommit or TxnOffsetCommit request: the two
/// requests have their own partition types, with the same field names.
macro_rules! offsets_to_commit {
    ($req:expr) => {
        $req.topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    $crate::coordinator::group::OffsetToCommit::from_request(
                        &t.name.0,
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.committed_metadata.as_deref(),
                    )
                })
            })
            .collect()
    };
}
pub(crate) use offsets_to_commit;

/// The partitions named in a commit that exist. The group coordinator
/// refuses the others with `UNKNOWN_TOPIC_OR_PARTITION`; the set is built
/// first because the coordinator then holds the cluster state mutably.
fn existing_partitions(
    state: &ClusterState,
    offsets: &[crate::coordinator::group::OffsetToCommit],
) -> HashSet<(String, i32)> {
    offsets
        .iter()
        .filter(|o| state.partition(&o.topic, o.partition).is_some())
        .map(|o| (o.topic.clone(), o.partition))
        .collect()
}
