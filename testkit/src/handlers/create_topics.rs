//! CreateTopics: partitions, replication factor, manual assignments, configs.

use std::collections::BTreeMap;

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use weir_protocol::kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use weir_protocol::kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, ResponseKind,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::cluster::state::validate_topic_name;
use crate::cluster::topic_configs::{self, TOPIC_DEFAULTS};

/// Versions 2 to 7 (v5+ return the configs, v7 the topic id).
pub const VERSIONS: (i16, i16) = (2, 7);

/// `config_source` of a config set on the topic (DYNAMIC_TOPIC_CONFIG).
pub const SOURCE_TOPIC: i8 = 1;
/// `config_source` of a default (DEFAULT_CONFIG).
pub const SOURCE_DEFAULT: i8 = 5;

/// Creates each topic (or only validates, with `validate_only`).
pub fn handle(
    state: &mut ClusterState,
    _ctx: &RequestContext,
    req: CreateTopicsRequest,
    _version: i16,
) -> Reply {
    let topics = req
        .topics
        .into_iter()
        .map(|t| create_one(state, t, req.validate_only))
        .collect();
    Reply::Now(ResponseKind::CreateTopics(
        CreateTopicsResponse::default().with_topics(topics),
    ))
}

fn create_one(
    state: &mut ClusterState,
    t: CreatableTopic,
    validate_only: bool,
) -> CreatableTopicResult {
    let name = t.name.0.to_string();
    let result = CreatableTopicResult::default().with_name(t.name.clone());
    let fail = |(code, msg): (i16, String)| {
        result
            .clone()
            .with_error_code(code)
            .with_error_message(Some(msg.into()))
    };
    let configs: BTreeMap<String, String> = t
        .configs
        .iter()
        .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
        .collect();
    if let Err(e) = validate_topic_name(&name).and_then(|()| topic_configs::validate(&configs)) {
        return fail(e);
    }
    let brokers = i32::try_from(state.brokers.len()).unwrap_or(0);
    let (partitions, rf) = if t.assignments.is_empty() {
        (t.num_partitions, t.replication_factor)
    } else {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return fail((
                ResponseError::InvalidRequest.code(),
                "Both numPartitions or replicationFactor and replicasAssignments were set."
                    .to_owned(),
            ));
        }
        let bad = t
            .assignments
            .iter()
            .flat_map(|a| &a.broker_ids)
            .any(|b| b.0 < 0 || b.0 >= brokers);
        let first = t.assignments.first().map_or(0, |a| a.broker_ids.len());
        if bad || first == 0 || t.assignments.iter().any(|a| a.broker_ids.len() != first) {
            return fail((
                ResponseError::InvalidReplicaAssignment.code(),
                "Invalid replica assignment.".to_owned(),
            ));
        }
        (
            i32::try_from(t.assignments.len()).unwrap_or(i32::MAX),
            i16::try_from(first).unwrap_or(i16::MAX),
        )
    };
    if validate_only {
        if state.topics.contains_key(&name) {
            return fail((
                ResponseError::TopicAlreadyExists.code(),
                format!("Topic '{name}' already exists."),
            ));
        }
        return result
            .with_num_partitions(partitions)
            .with_replication_factor(rf);
    }
    let created = match state.create_topic(&name, partitions, rf, configs) {
        Ok(topic) => (
            topic.id,
            topic.partitions.len(),
            topic.replication_factor,
            topic.configs.clone(),
        ),
        Err(e) => return fail(e),
    };
    if let Some(topic) = state.topics.get_mut(&name) {
        for (p, a) in topic.partitions.iter_mut().zip(&t.assignments) {
            p.replicas = a.broker_ids.iter().map(|b| b.0).collect();
            p.leader = p.replicas.first().copied().unwrap_or(0);
        }
    }
    let (id, count, rf, overrides) = created;
    result
        .with_topic_id(id)
        .with_num_partitions(i32::try_from(count).unwrap_or(i32::MAX))
        .with_replication_factor(rf)
        .with_configs(Some(describe(&overrides)))
}

/// Every topic config with its effective value and source.
fn describe(overrides: &BTreeMap<String, String>) -> Vec<CreatableTopicConfigs> {
    TOPIC_DEFAULTS
        .iter()
        .map(|(k, d, _)| {
            let (value, source) = match overrides.get(*k) {
                Some(v) => (v.clone(), SOURCE_TOPIC),
                None => ((*d).to_owned(), SOURCE_DEFAULT),
            };
            CreatableTopicConfigs::default()
                .with_name(StrBytes::from_static_str(k))
                .with_value(Some(StrBytes::from_string(value)))
                .with_config_source(source)
        })
        .collect()
}
