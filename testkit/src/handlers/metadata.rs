//! Metadata: brokers, topics, partition leaders; auto-creates topics.

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use weir_protocol::kafka_protocol::messages::{
    BrokerId, MetadataRequest, MetadataResponse, ResponseKind, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::cluster::state::Topic;

/// Versions 0 to 12 (v10+ carry topic ids; v13 only adds a top-level error).
pub const VERSIONS: (i16, i16) = (0, 12);

/// Answers with the live brokers and the requested topics.
pub fn handle(
    state: &mut ClusterState,
    _ctx: &RequestContext,
    req: MetadataRequest,
    version: i16,
) -> Reply {
    // Before v4 there is no flag: the broker's setting alone decides.
    let may_create =
        state.config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
    // In v0 an empty list means every topic (v1 introduced null for that).
    let all = req
        .topics
        .as_ref()
        .is_none_or(|t| version == 0 && t.is_empty());
    let topics = match req.topics.filter(|_| !all) {
        None => state
            .topics
            .values()
            .map(|t| topic_metadata(state, t))
            .collect(),
        Some(list) => list
            .into_iter()
            .map(|t| match t.name {
                Some(name) => named_topic(state, name.0.as_str(), may_create),
                None => match state.topics.values().find(|x| x.id == t.topic_id) {
                    Some(x) => topic_metadata(state, x),
                    None => MetadataResponseTopic::default()
                        .with_topic_id(t.topic_id)
                        .with_error_code(ResponseError::UnknownTopicId.code()),
                },
            })
            .collect(),
    };
    let brokers = state
        .alive_brokers()
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.id))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(i32::from(b.port))
        })
        .collect();
    let controller = state.alive_brokers().next().map_or(-1, |b| b.id);
    Reply::Now(ResponseKind::Metadata(
        MetadataResponse::default()
            .with_brokers(brokers)
            .with_cluster_id(Some(StrBytes::from_string(state.config.cluster_id.clone())))
            .with_controller_id(BrokerId(controller))
            .with_topics(topics),
    ))
}

fn named_topic(state: &mut ClusterState, name: &str, may_create: bool) -> MetadataResponseTopic {
    if !state.topics.contains_key(name) && may_create {
        let partitions = state.config.default_partitions;
        if let Err((code, _)) = state.create_topic(name, partitions, -1, Default::default()) {
            return MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(name.to_owned()))))
                .with_error_code(code);
        }
    }
    match state.topics.get(name) {
        Some(t) => topic_metadata(state, t),
        None => MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name.to_owned()))))
            .with_error_code(ResponseError::UnknownTopicOrPartition.code()),
    }
}

fn topic_metadata(state: &ClusterState, t: &Topic) -> MetadataResponseTopic {
    let partitions = t
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let alive = state.broker_alive(p.leader);
            let isr: Vec<BrokerId> = p
                .replicas
                .iter()
                .filter(|r| state.broker_alive(**r))
                .map(|r| BrokerId(*r))
                .collect();
            let offline = p
                .replicas
                .iter()
                .filter(|r| !state.broker_alive(**r))
                .map(|r| BrokerId(*r))
                .collect();
            MetadataResponsePartition::default()
                .with_partition_index(i32::try_from(i).unwrap_or(i32::MAX))
                .with_error_code(if alive {
                    0
                } else {
                    ResponseError::LeaderNotAvailable.code()
                })
                .with_leader_id(BrokerId(if alive { p.leader } else { -1 }))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(p.replicas.iter().map(|r| BrokerId(*r)).collect())
                .with_isr_nodes(isr)
                .with_offline_replicas(offline)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(t.name.clone()))))
        .with_topic_id(t.id)
        .with_is_internal(false)
        .with_partitions(partitions)
}
