//! ListOffsets: earliest, latest, by timestamp and max timestamp.

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use weir_protocol::kafka_protocol::messages::{
    ListOffsetsRequest, ListOffsetsResponse, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;

/// Versions 1 to 8 (v7 adds MAX_TIMESTAMP, v8 EARLIEST_LOCAL for tiered
/// storage: with no tiering here, the log start). v9+ (latest tiered) are
/// not implemented.
pub const VERSIONS: (i16, i16) = (1, 8);

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

/// Looks up an offset per partition.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: ListOffsetsRequest,
    version: i16,
) -> Reply {
    let committed = req.isolation_level == 1;
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let result = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1);
                    let Some(part) = state.partition(t.name.0.as_str(), p.partition_index) else {
                        return result
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    if part.leader != ctx.broker_id {
                        return result.with_error_code(ResponseError::NotLeaderOrFollower.code());
                    }
                    if p.current_leader_epoch >= 0 && p.current_leader_epoch < part.leader_epoch {
                        return result.with_error_code(ResponseError::FencedLeaderEpoch.code());
                    }
                    if p.current_leader_epoch > part.leader_epoch {
                        return result.with_error_code(ResponseError::UnknownLeaderEpoch.code());
                    }
                    let log = &part.log;
                    let found = match p.timestamp {
                        LATEST if committed => Some((log.last_stable_offset(), -1)),
                        LATEST => Some((log.high_watermark(), -1)),
                        EARLIEST => Some((log.log_start_offset(), -1)),
                        EARLIEST_LOCAL if version >= 8 => Some((log.log_start_offset(), -1)),
                        MAX_TIMESTAMP => log.max_timestamp_offset(),
                        ts if ts >= 0 => log.offset_for_timestamp(ts).filter(|(o, _)| {
                            // read_committed never reveals offsets above the LSO.
                            !committed || *o < log.last_stable_offset()
                        }),
                        _ => return result.with_error_code(ResponseError::InvalidRequest.code()),
                    };
                    match found {
                        Some((offset, timestamp)) => result
                            .with_offset(offset)
                            .with_timestamp(timestamp)
                            .with_leader_epoch(part.leader_epoch),
                        None => result,
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    Reply::Now(ResponseKind::ListOffsets(
        ListOffsetsResponse::default().with_topics(topics),
    ))
}
