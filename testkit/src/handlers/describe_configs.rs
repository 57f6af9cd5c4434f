//! DescribeConfigs: topic configs (set and default) and a few broker configs.

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use weir_protocol::kafka_protocol::messages::{
    DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::create_topics::{SOURCE_DEFAULT, SOURCE_TOPIC};
use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::cluster::topic_configs::{ConfigType, TOPIC_DEFAULTS};

/// Versions 1 to 4.
pub const VERSIONS: (i16, i16) = (1, 4);

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// `config_source` STATIC_BROKER_CONFIG.
const SOURCE_STATIC_BROKER: i8 = 4;

/// Describes each topic or broker resource.
pub fn handle(
    state: &mut ClusterState,
    _ctx: &RequestContext,
    req: DescribeConfigsRequest,
    _version: i16,
) -> Reply {
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let keys: Option<Vec<String>> = r
                .configuration_keys
                .map(|k| k.iter().map(|s| s.to_string()).collect());
            let wanted = |k: &str| keys.as_ref().is_none_or(|ks| ks.iter().any(|x| x == k));
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let entries: Vec<(String, String, i8, ConfigType)> = match r.resource_type {
                RESOURCE_TOPIC => {
                    let Some(topic) = state.topics.get(r.resource_name.as_str()) else {
                        return result
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                            .with_error_message(Some("Topic does not exist".into()));
                    };
                    TOPIC_DEFAULTS
                        .iter()
                        .map(|(k, d, t)| match topic.configs.get(*k) {
                            Some(v) => ((*k).to_owned(), v.clone(), SOURCE_TOPIC, *t),
                            None => ((*k).to_owned(), (*d).to_owned(), SOURCE_DEFAULT, *t),
                        })
                        .collect()
                }
                RESOURCE_BROKER => {
                    let known = r
                        .resource_name
                        .parse::<i32>()
                        .ok()
                        .is_some_and(|id| state.broker_alive(id))
                        || r.resource_name.is_empty();
                    if !known {
                        return result.with_error_code(ResponseError::InvalidRequest.code());
                    }
                    [
                        (
                            "auto.create.topics.enable",
                            state.config.auto_create_topics.to_string(),
                            ConfigType::Boolean,
                        ),
                        (
                            "num.partitions",
                            state.config.default_partitions.to_string(),
                            ConfigType::Int,
                        ),
                        (
                            "group.initial.rebalance.delay.ms",
                            state
                                .config
                                .group_initial_rebalance_delay
                                .as_millis()
                                .to_string(),
                            ConfigType::Int,
                        ),
                    ]
                    .into_iter()
                    .map(|(k, v, t)| (k.to_owned(), v, SOURCE_STATIC_BROKER, t))
                    .collect()
                }
                _ => return result.with_error_code(ResponseError::InvalidRequest.code()),
            };
            let configs = entries
                .into_iter()
                .filter(|(k, _, _, _)| wanted(k))
                .map(|(k, v, source, config_type)| {
                    DescribeConfigsResourceResult::default()
                        .with_name(StrBytes::from_string(k))
                        .with_value(Some(StrBytes::from_string(v)))
                        .with_config_source(source)
                        .with_config_type(config_type as i8)
                })
                .collect();
            result.with_configs(configs)
        })
        .collect();
    Reply::Now(ResponseKind::DescribeConfigs(
        DescribeConfigsResponse::default().with_results(results),
    ))
}
