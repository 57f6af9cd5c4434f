//! DeleteTopics: by name (all versions) or by topic id (v6).

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use weir_protocol::kafka_protocol::messages::{
    DeleteTopicsRequest, DeleteTopicsResponse, ResponseKind, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;

/// Versions 1 to 6.
pub const VERSIONS: (i16, i16) = (1, 6);

/// Deletes each topic with its data; fetch sessions forget its partitions.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: DeleteTopicsRequest,
    _version: i16,
) -> Reply {
    let mut targets: Vec<(Option<String>, uuid::Uuid)> = req
        .topic_names
        .iter()
        .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
        .collect();
    targets.extend(
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
    );
    let responses = targets
        .into_iter()
        .map(|(name, id)| {
            let found = match &name {
                Some(n) => state.topics.get(n).map(|t| (t.name.clone(), t.id)),
                None => state
                    .topics
                    .values()
                    .find(|t| t.id == id)
                    .map(|t| (t.name.clone(), t.id)),
            };
            let result = DeletableTopicResult::default();
            match found {
                Some((n, id)) => {
                    state.topics.shift_remove(&n);
                    state.fetch_sessions.forget_topic(&n);
                    result
                        .with_name(Some(TopicName(StrBytes::from_string(n))))
                        .with_topic_id(id)
                }
                None => {
                    let code = if name.is_some() {
                        ResponseError::UnknownTopicOrPartition
                    } else {
                        ResponseError::UnknownTopicId
                    };
                    result
                        .with_name(name.map(|n| TopicName(StrBytes::from_string(n))))
                        .with_topic_id(id)
                        .with_error_code(code.code())
                }
            }
        })
        .collect();
    // Fetches parked on a deleted topic answer UNKNOWN_TOPIC_OR_PARTITION now.
    super::fetch::wake_waiting(state, ctx.now);
    Reply::Now(ResponseKind::DeleteTopics(
        DeleteTopicsResponse::default().with_responses(responses),
    ))
}
