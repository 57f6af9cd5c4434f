//! CreatePartitions: grows a topic's partition count.

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use weir_protocol::kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::cluster::state::{MAX_PARTITIONS, add_partitions};

/// Versions 0 to 3.
pub const VERSIONS: (i16, i16) = (0, 3);

/// Adds partitions up to each topic's new count.
pub fn handle(
    state: &mut ClusterState,
    _ctx: &RequestContext,
    req: CreatePartitionsRequest,
    _version: i16,
) -> Reply {
    let brokers = i32::try_from(state.brokers.len()).unwrap_or(1);
    let results = req
        .topics
        .into_iter()
        .map(|t| {
            let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            let Some(topic) = state.topics.get_mut(t.name.0.as_str()) else {
                return result.with_error_code(ResponseError::UnknownTopicOrPartition.code());
            };
            let current = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
            if t.count > MAX_PARTITIONS {
                return result
                    .with_error_code(ResponseError::InvalidPartitions.code())
                    .with_error_message(Some(format!("at most {MAX_PARTITIONS} partitions per topic").into()));
            }
            if t.count <= current {
                return result.with_error_code(ResponseError::InvalidPartitions.code()).with_error_message(Some(
                    format!("Topic currently has {current} partitions, which is higher than or equal to the requested {}.", t.count).into(),
                ));
            }
            if let Some(assignments) = t.assignments.as_ref().filter(|a| !a.is_empty()) {
                let added = usize::try_from(t.count - current).unwrap_or(0);
                let bad = assignments.iter().flat_map(|a| &a.broker_ids).any(|b| b.0 < 0 || b.0 >= brokers);
                if assignments.len() != added || bad {
                    return result
                        .with_error_code(ResponseError::InvalidReplicaAssignment.code())
                        .with_error_message(Some("Invalid replica assignment.".into()));
                }
            }
            if !req.validate_only {
                add_partitions(topic, t.count - current, brokers);
                let new = topic.partitions.iter_mut().skip(usize::try_from(current).unwrap_or(0));
                for (p, a) in new.zip(t.assignments.iter().flatten()) {
                    p.replicas = a.broker_ids.iter().map(|b| b.0).collect();
                    p.leader = p.replicas.first().copied().unwrap_or(0);
                }
            }
            result
        })
        .collect();
    Reply::Now(ResponseKind::CreatePartitions(
        CreatePartitionsResponse::default().with_results(results),
    ))
}
