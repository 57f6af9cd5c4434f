//! DescribeConfigs and IncrementalAlterConfigs.

use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use weir_protocol::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use weir_protocol::kafka_protocol::messages::{
    DescribeConfigsRequest, IncrementalAlterConfigsRequest,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::Admin;
use crate::cluster::Lane;
use crate::{ClientError, Result};

/// What a config belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigResource {
    /// A topic's configs.
    Topic(String),
    /// A broker's configs, by node id.
    Broker(i32),
}

impl ConfigResource {
    fn wire_type(&self) -> i8 {
        match self {
            ConfigResource::Topic(_) => 2,
            ConfigResource::Broker(_) => 4,
        }
    }

    fn wire_name(&self) -> String {
        match self {
            ConfigResource::Topic(t) => t.clone(),
            ConfigResource::Broker(b) => b.to_string(),
        }
    }
}

/// Where a config value comes from (DescribeConfigs v1+ `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigSource {
    /// Set on the topic.
    DynamicTopic,
    /// Set dynamically for this broker.
    DynamicBroker,
    /// Set dynamically as the default for all brokers.
    DynamicDefaultBroker,
    /// From the broker's static configuration file.
    StaticBroker,
    /// The built-in default.
    Default,
    /// Anything else the broker reports.
    Other(i8),
}

impl ConfigSource {
    fn from_wire(v: i8) -> Self {
        match v {
            1 => ConfigSource::DynamicTopic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            other => ConfigSource::Other(other),
        }
    }
}

/// A change to one config (IncrementalAlterConfigs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    /// Sets `name` to `value`.
    Set(String, String),
    /// Removes `name`, reverting it to its default.
    Delete(String),
}

impl ConfigChange {
    fn to_wire(&self) -> AlterableConfig {
        let (name, op, value) = match self {
            ConfigChange::Set(n, v) => (n, 0, Some(StrBytes::from_string(v.clone()))),
            ConfigChange::Delete(n) => (n, 1, None),
        };
        AlterableConfig::default()
            .with_name(StrBytes::from_string(name.clone()))
            .with_config_operation(op)
            .with_value(value)
    }
}

/// One config value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// The config name, e.g. `cleanup.policy`.
    pub name: String,
    /// The value (`None` for sensitive values).
    pub value: Option<String>,
    /// Where the value comes from.
    pub source: ConfigSource,
    /// Whether it cannot be changed.
    pub read_only: bool,
    /// Whether the value is hidden because it is sensitive.
    pub sensitive: bool,
}

impl Admin {
    /// The configs of `resource`, sorted by name. Broker configs are asked of
    /// that broker, topic configs of any broker.
    ///
    /// # Errors
    /// [`ClientError::Server`] naming the resource (e.g. `UNKNOWN_TOPIC_OR_PARTITION`).
    pub async fn describe_configs(&self, resource: &ConfigResource) -> Result<Vec<ConfigEntry>> {
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(resource.wire_type())
                .with_resource_name(StrBytes::from_string(resource.wire_name()))
                .with_configuration_keys(None),
        ]);
        let response = self
            .cluster
            .retry("DescribeConfigs", || async {
                match resource {
                    ConfigResource::Broker(id) => {
                        self.cluster.request(*id, Lane::Metadata, &request).await
                    }
                    ConfigResource::Topic(_) => {
                        self.cluster.request_any(Lane::Metadata, &request).await
                    }
                }
            })
            .await?;
        let name = resource.wire_name();
        let result = response
            .results
            .iter()
            .find(|r| r.resource_name.as_str() == name)
            .ok_or_else(|| ClientError::MissingInResponse {
                api: ApiKey::DescribeConfigs,
                what: name.clone(),
            })?;
        ClientError::check(
            result.error_code,
            ApiKey::DescribeConfigs,
            Some(&name),
            None,
        )
        .map_err(|e| e.with_message(result.error_message.as_deref()))?;
        let mut entries: Vec<ConfigEntry> = result
            .configs
            .iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.as_ref().map(|v| v.to_string()),
                source: ConfigSource::from_wire(c.config_source),
                read_only: c.read_only,
                sensitive: c.is_sensitive,
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Applies `changes` to `resource`'s configs, leaving the others as they are.
    ///
    /// # Errors
    /// [`ClientError::Server`] naming the resource (e.g. `INVALID_CONFIG`).
    pub async fn alter_configs(
        &self,
        resource: &ConfigResource,
        changes: &[ConfigChange],
    ) -> Result<()> {
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource.wire_type())
                .with_resource_name(StrBytes::from_string(resource.wire_name()))
                .with_configs(changes.iter().map(ConfigChange::to_wire).collect()),
        ]);
        let response = self
            .cluster
            .retry("IncrementalAlterConfigs", || async {
                match resource {
                    ConfigResource::Broker(id) => {
                        self.cluster.request(*id, Lane::Metadata, &request).await
                    }
                    ConfigResource::Topic(_) => self.cluster.request_controller(&request).await,
                }
            })
            .await?;
        let name = resource.wire_name();
        let result = response
            .responses
            .iter()
            .find(|r| r.resource_name.as_str() == name)
            .ok_or_else(|| ClientError::MissingInResponse {
                api: ApiKey::IncrementalAlterConfigs,
                what: name.clone(),
            })?;
        ClientError::check(
            result.error_code,
            ApiKey::IncrementalAlterConfigs,
            Some(&name),
            None,
        )
        .map_err(|e| e.with_message(result.error_message.as_deref()))
    }
}
