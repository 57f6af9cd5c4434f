//! Producer configuration: a typed builder plus Kafka-named properties.
//!
//! `retry.backoff.ms`, `retry.backoff.max.ms` and `request.timeout.ms` are
//! common settings ([`ClientConfig`]); the Produce request's broker-side
//! timeout is `request.timeout.ms` too.

use std::time::Duration;

use weir_protocol::records::Compression;

use super::{
    ClientConfig, invalid_property, parse_bool, parse_choice, parse_millis, parse_number,
    unknown_property,
};
use crate::Result;

/// How many acknowledgements a Produce request waits for (`acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: the broker sends no response; offsets are unknown (-1).
    None,
    /// `acks=1`: the leader wrote the records.
    Leader,
    /// `acks=all` (or `-1`): every in-sync replica has them. Required by
    /// the idempotent producer.
    All,
}

impl Acks {
    /// The value of the Produce request's `acks` field.
    pub fn wire_value(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Everything the producer needs besides the connection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerOptions {
    /// `acks` (default `all`).
    pub acks: Acks,
    /// `linger.ms` (default 5 ms, as in Kafka 4.0): how long a batch waits
    /// for more records before it is sent.
    pub linger: Duration,
    /// `batch.size` (default 16384): a batch is sent once another record
    /// would make it larger (uncompressed).
    pub batch_size: usize,
    /// `compression.type` (default `none`).
    pub compression: Compression,
    /// `enable.idempotence`: `None` (the default) turns it on unless `acks`
    /// is not `all`, as the Java client does; `Some(true)` with other
    /// `acks` is a configuration error.
    pub enable_idempotence: Option<bool>,
    /// `buffer.memory` (default 32 MiB): bytes of records waiting to be
    /// sent; `send` waits for room (backpressure) at most `max.block.ms`.
    pub buffer_memory: usize,
    /// `max.block.ms` (default 60 s): how long `send` waits for metadata or
    /// buffer memory.
    pub max_block: Duration,
    /// `max.in.flight.requests.per.connection` (default 5; at most 5 with
    /// idempotence): unanswered Produce requests per partition.
    pub max_in_flight: usize,
    /// `retries` (default `u32::MAX`): retries of a failed batch.
    pub retries: u32,
    /// `delivery.timeout.ms` (default 120 s): a record fails if it is not
    /// acknowledged this long after `send`.
    pub delivery_timeout: Duration,
    /// `max.request.size` (default 1 MiB): the largest record accepted by `send`.
    pub max_request_size: usize,
}

impl Default for ProducerOptions {
    fn default() -> Self {
        Self {
            acks: Acks::All,
            linger: Duration::from_millis(5),
            batch_size: 16_384,
            compression: Compression::None,
            enable_idempotence: None,
            buffer_memory: 32 << 20,
            max_block: Duration::from_secs(60),
            max_in_flight: 5,
            retries: u32::MAX,
            delivery_timeout: Duration::from_secs(120),
            max_request_size: 1 << 20,
        }
    }
}

impl ProducerOptions {
    /// Whether the producer will be idempotent.
    pub fn idempotent(&self) -> bool {
        self.enable_idempotence.unwrap_or(self.acks == Acks::All)
    }
}

impl ProducerOptions {
    /// The property keys [`apply`](Self::apply) accepts.
    pub const KEYS: &'static [&'static str] = &[
        "acks",
        "linger.ms",
        "batch.size",
        "compression.type",
        "enable.idempotence",
        "buffer.memory",
        "max.block.ms",
        "max.in.flight.requests.per.connection",
        "retries",
        "delivery.timeout.ms",
        "max.request.size",
    ];

    /// Applies one producer property; `Ok(false)` if `key` is not one.
    ///
    /// # Errors
    /// [`ClientError::InvalidProperty`](crate::ClientError::InvalidProperty)
    /// naming the key and the accepted values.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<bool> {
        match key {
            "acks" => {
                self.acks = parse_choice(
                    key,
                    value,
                    &[
                        ("all", Acks::All),
                        ("-1", Acks::All),
                        ("1", Acks::Leader),
                        ("0", Acks::None),
                    ],
                )?;
            }
            "linger.ms" => self.linger = parse_millis(key, value)?,
            "batch.size" => self.batch_size = parse_number(key, value, 0, i32::MAX as usize)?,
            "compression.type" => {
                self.compression = parse_choice(
                    key,
                    value,
                    &[
                        ("none", Compression::None),
                        ("gzip", Compression::Gzip),
                        ("snappy", Compression::Snappy),
                        ("lz4", Compression::Lz4),
                        ("zstd", Compression::Zstd),
                    ],
                )?;
            }
            "enable.idempotence" => self.enable_idempotence = Some(parse_bool(key, value)?),
            "buffer.memory" => {
                self.buffer_memory = parse_number(key, value, 1024, u32::MAX as usize)?
            }
            "max.block.ms" => self.max_block = parse_millis(key, value)?,
            "max.in.flight.requests.per.connection" => {
                self.max_in_flight = parse_number(key, value, 1, 1000)?
            }
            "retries" => self.retries = parse_number(key, value, 0, i32::MAX as u32)?,
            "delivery.timeout.ms" => self.delivery_timeout = parse_millis(key, value)?,
            "max.request.size" => {
                self.max_request_size = parse_number(key, value, 1, i32::MAX as usize)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks that the settings fit together, as the Java client does.
    ///
    /// # Errors
    /// [`ClientError::InvalidProperty`](crate::ClientError::InvalidProperty)
    /// naming the key at fault.
    pub fn validate(&self) -> Result<()> {
        if self.enable_idempotence == Some(true) {
            if self.acks != Acks::All {
                return Err(invalid_property(
                    "acks",
                    &self.acks.wire_value().to_string(),
                    "all (-1) when enable.idempotence=true",
                ));
            }
            if self.max_in_flight > 5 {
                return Err(invalid_property(
                    "max.in.flight.requests.per.connection",
                    &self.max_in_flight.to_string(),
                    "at most 5 when enable.idempotence=true",
                ));
            }
        }
        Ok(())
    }
}

/// The whole producer configuration: connection settings plus producer ones.
///
/// ```
/// use weir_client::config::producer::{Acks, ProducerConfig};
///
/// let config = ProducerConfig::from_properties(&[
///     ("bootstrap.servers", "127.0.0.1:9092"),
///     ("linger.ms", "20"),
///     ("compression.type", "zstd"),
///     ("acks", "all"),
/// ])?;
/// assert_eq!(config.producer.acks, Acks::All);
/// assert!(config.producer.idempotent());
/// let err = ProducerConfig::from_properties(&[("compression.type", "brotli")]).unwrap_err();
/// assert!(err.to_string().contains("compression.type"));
/// # Ok::<(), weir_client::ClientError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Brokers, timeouts, retries and security.
    pub client: ClientConfig,
    /// Batching, acks and idempotence.
    pub producer: ProducerOptions,
}

impl ProducerConfig {
    /// A configuration with default producer settings.
    pub fn new(client: ClientConfig) -> Self {
        Self {
            client,
            producer: ProducerOptions::default(),
        }
    }

    /// Every key [`from_properties`](Self::from_properties) accepts.
    pub fn keys() -> Vec<&'static str> {
        ClientConfig::KEYS
            .iter()
            .chain(ProducerOptions::KEYS)
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
            if !config.client.apply(key, value)? && !config.producer.apply(key, value)? {
                return Err(unknown_property(key, "producer", &Self::keys()));
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the connection and producer settings.
    ///
    /// # Errors
    /// As [`from_properties`](Self::from_properties).
    pub fn validate(&self) -> Result<()> {
        self.client.validate()?;
        self.producer.validate()
    }

    /// Sets `acks`.
    pub fn with_acks(mut self, acks: Acks) -> Self {
        self.producer.acks = acks;
        self
    }

    /// Sets `linger.ms`.
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.producer.linger = linger;
        self
    }

    /// Sets `batch.size`.
    pub fn with_batch_size(mut self, bytes: usize) -> Self {
        self.producer.batch_size = bytes;
        self
    }

    /// Sets `compression.type`.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.producer.compression = compression;
        self
    }

    /// Sets `enable.idempotence`.
    pub fn with_idempotence(mut self, enabled: bool) -> Self {
        self.producer.enable_idempotence = Some(enabled);
        self
    }

    /// Sets `buffer.memory`.
    pub fn with_buffer_memory(mut self, bytes: usize) -> Self {
        self.producer.buffer_memory = bytes;
        self
    }

    /// Sets `max.block.ms`.
    pub fn with_max_block(mut self, max_block: Duration) -> Self {
        self.producer.max_block = max_block;
        self
    }

    /// Sets `delivery.timeout.ms`.
    pub fn with_delivery_timeout(mut self, timeout: Duration) -> Self {
        self.producer.delivery_timeout = timeout;
        self
    }

    /// Sets `max.in.flight.requests.per.connection`.
    pub fn with_max_in_flight(mut self, n: usize) -> Self {
        self.producer.max_in_flight = n;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_into_typed_settings() {
        let c = ProducerConfig::from_properties(&[
            ("bootstrap.servers", "a:1,b:2"),
            ("acks", "1"),
            ("linger.ms", "20"),
            ("batch.size", "65536"),
            ("compression.type", "LZ4"),
            ("buffer.memory", "1048576"),
            ("retry.backoff.ms", "7"),
        ])
        .unwrap();
        assert_eq!(c.client.bootstrap_servers, vec!["a:1", "b:2"]);
        assert_eq!(c.client.retry_backoff, Duration::from_millis(7));
        let p = &c.producer;
        assert_eq!(
            (p.acks, p.linger, p.batch_size),
            (Acks::Leader, Duration::from_millis(20), 65536)
        );
        assert_eq!(
            (p.compression, p.buffer_memory),
            (Compression::Lz4, 1 << 20)
        );
        assert!(
            !p.idempotent(),
            "acks=1 turns default idempotence off, as in Java"
        );
    }

    #[test]
    fn unknown_and_invalid_properties_name_the_key_and_the_choices() {
        let e =
            ProducerConfig::from_properties(&[("bootstrap.servers", "a:1"), ("linger.msec", "5")])
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("linger.msec") && e.contains("linger.ms") && e.contains("bootstrap.servers"),
            "{e}"
        );
        let e = ProducerConfig::from_properties(&[("acks", "2")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("acks") && e.contains("all, -1, 1, 0"), "{e}");
        let e = ProducerConfig::from_properties(&[("compression.type", "brotli")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("none, gzip, snappy, lz4, zstd"), "{e}");
        // Explicit idempotence with acks=1 is contradictory.
        let e = ProducerConfig::from_properties(&[
            ("bootstrap.servers", "a:1"),
            ("enable.idempotence", "true"),
            ("acks", "1"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("acks") && e.contains("enable.idempotence"),
            "{e}"
        );
    }

    #[test]
    fn idempotence_is_on_by_default() {
        let c = ProducerConfig::from_properties(&[("bootstrap.servers", "a:1")]).unwrap();
        assert!(c.producer.idempotent());
        assert_eq!(c.producer.acks, Acks::All);
        assert!(!c.with_idempotence(false).producer.idempotent());
    }
}
