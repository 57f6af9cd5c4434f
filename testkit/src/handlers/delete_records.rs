//! DeleteRecords: moves a partition's log start offset forward.

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use weir_protocol::kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;

/// Versions 0 to 2.
pub const VERSIONS: (i16, i16) = (0, 2);

/// Offset -1 in a request means "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

/// Deletes records below each requested offset; only the leader may.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: DeleteRecordsRequest,
    _version: i16,
) -> Reply {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let result = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    let Some(part) = state.partition_mut(t.name.0.as_str(), p.partition_index)
                    else {
                        return result
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    if part.leader != ctx.broker_id {
                        return result.with_error_code(ResponseError::NotLeaderOrFollower.code());
                    }
                    let hwm = part.log.high_watermark();
                    let offset = if p.offset == HIGH_WATERMARK {
                        hwm
                    } else {
                        p.offset
                    };
                    if offset < 0 || offset > hwm {
                        return result.with_error_code(ResponseError::OffsetOutOfRange.code());
                    }
                    result.with_low_watermark(part.log.delete_before(offset))
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    Reply::Now(ResponseKind::DeleteRecords(
        DeleteRecordsResponse::default().with_topics(topics),
    ))
}
