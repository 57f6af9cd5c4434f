//! Topic configs: the keys Kafka knows, their defaults, and validation.

use std::collections::BTreeMap;

use weir_protocol::kafka_protocol::ResponseError;

/// The type of a config, as DescribeConfigs v3+ reports it (Kafka's `ConfigType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    /// true or false.
    Boolean = 1,
    /// Free text.
    String = 2,
    /// 32-bit integer.
    Int = 3,
    /// 64-bit integer.
    Long = 5,
    /// Floating point.
    Double = 6,
    /// Comma-separated list.
    List = 7,
}

/// Kafka's topic-level configs with their broker defaults and types.
pub const TOPIC_DEFAULTS: &[(&str, &str, ConfigType)] = &[
    ("cleanup.policy", "delete", ConfigType::List),
    ("compression.type", "producer", ConfigType::String),
    ("delete.retention.ms", "86400000", ConfigType::Long),
    ("file.delete.delay.ms", "60000", ConfigType::Long),
    ("flush.messages", "9223372036854775807", ConfigType::Long),
    ("flush.ms", "9223372036854775807", ConfigType::Long),
    ("index.interval.bytes", "4096", ConfigType::Int),
    (
        "max.compaction.lag.ms",
        "9223372036854775807",
        ConfigType::Long,
    ),
    ("max.message.bytes", "1048588", ConfigType::Int),
    (
        "message.timestamp.after.max.ms",
        "9223372036854775807",
        ConfigType::Long,
    ),
    (
        "message.timestamp.before.max.ms",
        "9223372036854775807",
        ConfigType::Long,
    ),
    ("message.timestamp.type", "CreateTime", ConfigType::String),
    ("min.cleanable.dirty.ratio", "0.5", ConfigType::Double),
    ("min.compaction.lag.ms", "0", ConfigType::Long),
    ("min.insync.replicas", "1", ConfigType::Int),
    ("preallocate", "false", ConfigType::Boolean),
    ("retention.bytes", "-1", ConfigType::Long),
    ("retention.ms", "604800000", ConfigType::Long),
    ("segment.bytes", "1073741824", ConfigType::Int),
    ("segment.index.bytes", "10485760", ConfigType::Int),
    ("segment.jitter.ms", "0", ConfigType::Long),
    ("segment.ms", "604800000", ConfigType::Long),
    (
        "unclean.leader.election.enable",
        "false",
        ConfigType::Boolean,
    ),
];

/// The default of a topic config, if the key is known.
pub fn default_of(key: &str) -> Option<&'static str> {
    TOPIC_DEFAULTS
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, v, _)| *v)
}

/// Checks configs given at creation: known keys, sensible values, and
/// nothing the testkit cannot honour.
///
/// # Errors
/// `INVALID_CONFIG` with a message naming the key.
pub fn validate(configs: &BTreeMap<String, String>) -> Result<(), (i16, String)> {
    let invalid = |msg: String| (ResponseError::InvalidConfig.code(), msg);
    for (key, value) in configs {
        if default_of(key).is_none() {
            return Err(invalid(format!("Unknown topic config name: {key}")));
        }
        match key.as_str() {
            "cleanup.policy" => {
                if !value
                    .split(',')
                    .map(str::trim)
                    .all(|p| p == "delete" || p == "compact")
                {
                    return Err(invalid(format!(
                        "Invalid value {value} for configuration cleanup.policy"
                    )));
                }
            }
            "message.timestamp.type" => {
                // LogAppendTime would mean rewriting CRC-covered bytes of
                // every batch; the testkit keeps batches as produced.
                if value != "CreateTime" {
                    return Err(invalid(format!(
                        "message.timestamp.type={value} is not supported by weir-testkit"
                    )));
                }
            }
            "compression.type" => {
                if value != "producer" {
                    return Err(invalid(format!(
                        "compression.type={value} is not supported by weir-testkit (batches are stored as produced)"
                    )));
                }
            }
            "min.cleanable.dirty.ratio" => {
                if value.parse::<f64>().is_err() {
                    return Err(invalid(format!(
                        "Invalid value {value} for configuration {key}"
                    )));
                }
            }
            "preallocate" | "unclean.leader.election.enable" => {
                if value != "true" && value != "false" {
                    return Err(invalid(format!(
                        "Invalid value {value} for configuration {key}"
                    )));
                }
            }
            _ => {
                if value.parse::<i64>().is_err() {
                    return Err(invalid(format!(
                        "Invalid value {value} for configuration {key}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Whether a topic's configs make it compacted.
pub fn is_compacted(configs: &BTreeMap<String, String>) -> bool {
    configs
        .get("cleanup.policy")
        .is_some_and(|p| p.split(',').any(|x| x.trim() == "compact"))
}
