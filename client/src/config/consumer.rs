//! Consumer configuration: a typed builder plus Kafka-named properties.

use std::time::Duration;

use super::{ClientConfig, parse_bool, parse_choice, parse_millis, parse_number, unknown_property};
use crate::Result;

/// Which records a consumer sees (`isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Everything up to the high watermark, aborted transactions included.
    #[default]
    ReadUncommitted,
    /// Only committed records, up to the last stable offset.
    ReadCommitted,
}

impl IsolationLevel {
    /// The Fetch and ListOffsets requests' `isolation_level` field.
    pub fn wire_value(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Where to start when there is no valid position (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    /// The log start offset.
    Earliest,
    /// The end of the log (the high watermark, or the last stable offset
    /// under read_committed).
    #[default]
    Latest,
    /// Fail with an error instead.
    None,
}

/// Everything the consumer needs besides the connection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// `isolation.level` (default `read_uncommitted`).
    pub isolation_level: IsolationLevel,
    /// `auto.offset.reset` (default `latest`).
    pub auto_offset_reset: AutoOffsetReset,
    /// `fetch.min.bytes` (default 1).
    pub fetch_min_bytes: i32,
    /// `fetch.max.bytes` (default 50 MiB): per Fetch response.
    pub fetch_max_bytes: i32,
    /// `fetch.max.wait.ms` (default 500 ms): how long the broker may hold
    /// a Fetch waiting for `fetch.min.bytes`.
    pub fetch_max_wait: Duration,
    /// `max.partition.fetch.bytes` (default 1 MiB): per partition and Fetch.
    pub max_partition_fetch_bytes: i32,
    /// `max.poll.records` (default 500): the most records one `poll` returns.
    pub max_poll_records: usize,
    /// `check.crcs` (default true): verify each batch's CRC-32C.
    pub check_crcs: bool,
    /// Bounded prefetch (Weir's `weir.prefetch.bytes`, default 50 MiB): no
    /// new Fetch is sent while this many bytes of fetched records wait to
    /// be polled.
    pub max_prefetch_bytes: usize,
    /// `enable.auto.commit` (default **false**, unlike Kafka's `true`):
    /// a group consumer commits what `poll` and `recv` returned every
    /// `auto.commit.interval.ms`, on its next call. Without it, a group
    /// consumer commits when told to, on revocation and on close. A
    /// consumer without a group ignores it.
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms` (default 5 s).
    pub auto_commit_interval: Duration,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        Self {
            isolation_level: IsolationLevel::ReadUncommitted,
            auto_offset_reset: AutoOffsetReset::Latest,
            fetch_min_bytes: 1,
            fetch_max_bytes: 50 << 20,
            fetch_max_wait: Duration::from_millis(500),
            max_partition_fetch_bytes: 1 << 20,
            max_poll_records: 500,
            check_crcs: true,
            max_prefetch_bytes: 50 << 20,
            enable_auto_commit: false,
            auto_commit_interval: Duration::from_secs(5),
        }
    }
}

impl ConsumerOptions {
    /// The property keys [`apply`](Self::apply) accepts.
    pub const KEYS: &'static [&'static str] = &[
        "isolation.level",
        "auto.offset.reset",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "fetch.max.wait.ms",
        "max.partition.fetch.bytes",
        "max.poll.records",
        "check.crcs",
        "weir.prefetch.bytes",
        "enable.auto.commit",
        "auto.commit.interval.ms",
    ];

    /// Applies one consumer property; `Ok(false)` if `key` is not one.
    ///
    /// # Errors
    /// [`ClientError::InvalidProperty`](crate::ClientError::InvalidProperty)
    /// naming the key and the accepted values.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<bool> {
        match key {
            "isolation.level" => {
                self.isolation_level = parse_choice(
                    key,
                    value,
                    &[
                        ("read_uncommitted", IsolationLevel::ReadUncommitted),
                        ("read_committed", IsolationLevel::ReadCommitted),
                    ],
                )?;
            }
            "auto.offset.reset" => {
                self.auto_offset_reset = parse_choice(
                    key,
                    value,
                    &[
                        ("earliest", AutoOffsetReset::Earliest),
                        ("latest", AutoOffsetReset::Latest),
                        ("none", AutoOffsetReset::None),
                    ],
                )?;
            }
            "fetch.min.bytes" => self.fetch_min_bytes = parse_number(key, value, 0, i32::MAX)?,
            "fetch.max.bytes" => self.fetch_max_bytes = parse_number(key, value, 0, i32::MAX)?,
            "fetch.max.wait.ms" => {
                self.fetch_max_wait = parse_millis(key, value)?;
                if self.fetch_max_wait > Duration::from_millis(i32::MAX as u64) {
                    return Err(super::invalid_property(key, value, "at most 2147483647"));
                }
            }
            "max.partition.fetch.bytes" => {
                self.max_partition_fetch_bytes = parse_number(key, value, 0, i32::MAX)?
            }
            "max.poll.records" => {
                self.max_poll_records = parse_number(key, value, 1, i32::MAX as usize)?
            }
            "check.crcs" => self.check_crcs = parse_bool(key, value)?,
            "weir.prefetch.bytes" => {
                self.max_prefetch_bytes = parse_number(key, value, 0, usize::MAX)?
            }
            "enable.auto.commit" => self.enable_auto_commit = parse_bool(key, value)?,
            "auto.commit.interval.ms" => self.auto_commit_interval = parse_millis(key, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The whole consumer configuration: connection settings plus consumer ones.
///
/// ```
/// use weir_client::config::consumer::{AutoOffsetReset, ConsumerConfig, IsolationLevel};
///
/// let config = ConsumerConfig::from_properties(&[
///     ("bootstrap.servers", "127.0.0.1:9092"),
///     ("isolation.level", "read_committed"),
///     ("auto.offset.reset", "earliest"),
/// ])?;
/// assert_eq!(config.consumer.isolation_level, IsolationLevel::ReadCommitted);
/// assert_eq!(config.consumer.auto_offset_reset, AutoOffsetReset::Earliest);
/// # Ok::<(), weir_client::ClientError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Brokers, timeouts, retries and security.
    pub client: ClientConfig,
    /// Fetching, isolation and offset reset.
    pub consumer: ConsumerOptions,
}

impl ConsumerConfig {
    /// A configuration with default consumer settings.
    pub fn new(client: ClientConfig) -> Self {
        Self {
            client,
            consumer: ConsumerOptions::default(),
        }
    }

    /// Every key [`from_properties`](Self::from_properties) accepts.
    pub fn keys() -> Vec<&'static str> {
        ClientConfig::KEYS
            .iter()
            .chain(ConsumerOptions::KEYS)
            .copied()
            .collect()
    }

    /// Builds a configuration from Kafka-named properties.
    ///
    /// # Errors
    /// [`ClientError::UnknownProperty`](crate::ClientError::UnknownProperty)
    /// listing every accepted key, or
    /// [`ClientError::InvalidProperty`](crate::ClientError::InvalidProperty).
    pub fn from_properties(props: &[(&str, &str)]) -> Result<Self> {
        let mut config = Self::new(ClientConfig::default());
        for (key, value) in props {
            if !config.client.apply(key, value)? && !config.consumer.apply(key, value)? {
                return Err(unknown_property(key, "consumer", &Self::keys()));
            }
        }
        config.client.validate()?;
        Ok(config)
    }

    /// Sets `isolation.level`.
    pub fn with_isolation_level(mut self, level: IsolationLevel) -> Self {
        self.consumer.isolation_level = level;
        self
    }

    /// Sets `auto.offset.reset`.
    pub fn with_auto_offset_reset(mut self, reset: AutoOffsetReset) -> Self {
        self.consumer.auto_offset_reset = reset;
        self
    }

    /// Sets `fetch.max.wait.ms`.
    pub fn with_fetch_max_wait(mut self, wait: Duration) -> Self {
        self.consumer.fetch_max_wait = wait;
        self
    }

    /// Sets `max.poll.records`.
    pub fn with_max_poll_records(mut self, n: usize) -> Self {
        self.consumer.max_poll_records = n.max(1);
        self
    }

    /// Sets `enable.auto.commit` and `auto.commit.interval.ms`: `Some`
    /// turns auto-commit on with that interval (for a group consumer).
    pub fn with_auto_commit(mut self, interval: Option<Duration>) -> Self {
        self.consumer.enable_auto_commit = interval.is_some();
        if let Some(interval) = interval {
            self.consumer.auto_commit_interval = interval;
        }
        self
    }

    /// Sets the prefetch bound (`weir.prefetch.bytes`).
    pub fn with_max_prefetch_bytes(mut self, bytes: usize) -> Self {
        self.consumer.max_prefetch_bytes = bytes;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_and_errors_name_the_key() {
        let c = ConsumerConfig::from_properties(&[
            ("bootstrap.servers", "a:1"),
            ("isolation.level", "read_committed"),
            ("auto.offset.reset", "none"),
            ("fetch.max.wait.ms", "100"),
            ("max.poll.records", "10"),
            ("enable.auto.commit", "true"),
            ("auto.commit.interval.ms", "250"),
        ])
        .unwrap();
        assert!(c.consumer.enable_auto_commit);
        assert_eq!(c.consumer.auto_commit_interval, Duration::from_millis(250));
        assert_eq!(c.consumer.isolation_level, IsolationLevel::ReadCommitted);
        assert_eq!(c.consumer.auto_offset_reset, AutoOffsetReset::None);
        assert_eq!(c.consumer.fetch_max_wait, Duration::from_millis(100));
        assert_eq!(c.consumer.max_poll_records, 10);

        let e = ConsumerConfig::from_properties(&[("isolation.level", "serializable")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("isolation.level") && e.contains("read_uncommitted, read_committed"),
            "{e}"
        );
        let e = ConsumerConfig::from_properties(&[("auto.offset.reset", "smallest")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("earliest, latest, none"), "{e}");
        let e = ConsumerConfig::from_properties(&[("group.id", "g")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("group.id") && e.contains("isolation.level"),
            "{e}"
        );
    }
}
