//! Topic configs: the keys Kafka knows, their defaults, and validation.

use std::collections::BTreeMap;

use weir_protocol::kafka_protocol::ResponseError;

/// Kafka's topic-level configs with their broker defaults.
pub const TOPIC_DEFAULTS: &[(&str, &str)] = &[
    ("cleanup.policy", "delete"),
    ("compression.type", "producer"),
    ("delete.retention.ms", "86400000"),
    ("file.delete.delay.ms", "60000"),
    ("flush.messages", "9223372036854775807"),
    ("flush.ms", "9223372036854775807"),
    ("index.interval.bytes", "4096"),
    ("max.compaction.lag.ms", "9223372036854775807"),
    ("max.message.bytes", "1048588"),
    ("message.timestamp.after.max.ms", "9223372036854775807"),
    ("message.timestamp.before.max.ms", "9223372036854775807"),
    ("message.timestamp.type", "CreateTime"),
    ("min.cleanable.dirty.ratio", "0.5"),
    ("min.compaction.lag.ms", "0"),
    ("min.insync.replicas", "1"),
    ("preallocate", "false"),
    ("retention.bytes", "-1"),
    ("retention.ms", "604800000"),
    ("segment.bytes", "1073741824"),
    ("segment.index.bytes", "10485760"),
    ("segment.jitter.ms", "0"),
    ("segment.ms", "604800000"),
    ("unclean.leader.election.enable", "false"),
];

/// The default of a topic config, if the key is known.
pub fn default_of(key: &str) -> Option<&'static str> {
    TOPIC_DEFAULTS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
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
