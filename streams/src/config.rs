//! [`StreamsConfig`]: Kafka Streams' property names, typed.
//!
//! ```
//! use weir_streams::config::{ProcessingGuarantee, StreamsConfig};
//! let config = StreamsConfig::from_properties(&[
//!     ("application.id", "wordcount"),
//!     ("bootstrap.servers", "127.0.0.1:9092"),
//!     ("processing.guarantee", "exactly_once_v2"),
//!     ("num.stream.threads", "2"),
//!     ("fetch.max.wait.ms", "100"), // a consumer property, passed through
//! ]).unwrap();
//! assert_eq!(config.guarantee, ProcessingGuarantee::ExactlyOnceV2);
//! assert_eq!(config.commit_interval.as_millis(), 100); // the EOS default
//! assert!(StreamsConfig::from_properties(&[("application.id", "a"), ("no.such.key", "1")]).is_err());
//! ```

use std::path::PathBuf;
use std::time::Duration;

use weir_client::config::consumer::ConsumerOptions;
use weir_client::config::producer::ProducerOptions;
use weir_client::config::{ClientConfig, parse_choice, parse_millis, parse_number};
use weir_client::connection::Dialer;

use crate::error::{Result, StreamsError};

/// `processing.guarantee`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessingGuarantee {
    /// `at_least_once` (the default): outputs may repeat after a failure.
    /// Weir still fences each stateful task's changelog with its own
    /// transactional id, so stores are exact.
    AtLeastOnce,
    /// `exactly_once_v2`: one transaction per stream thread covers outputs,
    /// changelogs and input offsets.
    ExactlyOnceV2,
}

/// What to do with a record whose bytes do not decode
/// (`default.deserialization.exception.handler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeserializationHandling {
    /// Log it and go on (`LogAndContinueExceptionHandler`, Weir's default).
    LogAndContinue,
    /// Stop the thread with the error (`LogAndFailExceptionHandler`).
    LogAndFail,
}

/// What a stream thread does after a processing error
/// (`processing.exception.handler`, Kafka Streams' uncaught exception
/// handler's choices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessingErrorHandling {
    /// Abort the uncommitted work, and start the thread's tasks again from
    /// their last commit (Kafka's `REPLACE_THREAD`; the default).
    ReplaceThread,
    /// Abort the uncommitted work and stop the instance in `ERROR`
    /// (`SHUTDOWN_CLIENT`).
    ShutdownClient,
    /// Skip the record that failed, logged with its topic, partition and
    /// offset: the uncommitted work is aborted, the tasks start again from
    /// their last commit, and the failed record is passed over, so none of
    /// its writes, outputs or store changes survive (`skip`).
    SkipRecord,
}

/// A stable instance id for `group.instance.id` taken from the machine:
/// `$WEIR_INSTANCE_ID` if set, else the host name (`$HOSTNAME`, else the
/// kernel's). In a Kubernetes StatefulSet the host name is the pod name
/// (`app-0`, `app-1`, ...), which stays the same across restarts, so a pod
/// restarted within `session.timeout.ms` keeps its tasks with no
/// rebalance. Opt in explicitly: two processes on one host would share a
/// host name, and a static member fences another with the same id.
///
/// ```
/// let mut config = weir_streams::StreamsConfig::new("app");
/// config.instance_id = weir_streams::config::machine_instance_id();
/// ```
pub fn machine_instance_id() -> Option<String> {
    instance_id_from(
        |name| std::env::var(name).ok(),
        || std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
    )
}

/// [`machine_instance_id`] over given sources: the environment, then the
/// kernel's host name; blank values do not count.
fn instance_id_from(
    env: impl Fn(&str) -> Option<String>,
    kernel_hostname: impl Fn() -> Option<String>,
) -> Option<String> {
    let set = |v: String| {
        let v = v.trim().to_owned();
        (!v.is_empty()).then_some(v)
    };
    env("WEIR_INSTANCE_ID")
        .and_then(set)
        .or_else(|| env("HOSTNAME").and_then(set))
        .or_else(|| kernel_hostname().and_then(set))
}

/// The configuration of a streams application.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StreamsConfig {
    /// `application.id`: the consumer group, the prefix of internal topics
    /// and of the state directory.
    pub application_id: String,
    /// `num.stream.threads` (default 1).
    pub threads: usize,
    /// `processing.guarantee`.
    pub guarantee: ProcessingGuarantee,
    /// `commit.interval.ms` (30 s at-least-once, 100 ms exactly-once).
    pub commit_interval: Duration,
    /// `state.dir` (default `<temp>/weir-streams`).
    pub state_dir: PathBuf,
    /// `num.standby.replicas`.
    pub standby_replicas: u32,
    /// `cache.max.bytes.buffering` (default 10 MiB, Kafka's): how many
    /// bytes a DSL table with caching on (`Materialized::with_caching`) holds
    /// back before it forwards early; it forwards the latest value per key at
    /// every commit.
    pub cache_max_bytes: u64,
    /// `acceptable.recovery.lag` (default 10,000): how far behind its
    /// changelog an instance's copy of a task may be and still count as
    /// caught up for it: a stateful task moves only to an instance caught up
    /// on it, and gets a warmup replica there first otherwise.
    pub acceptable_recovery_lag: u64,
    /// `max.warmup.replicas` (default 2): warmups placed at once.
    pub max_warmup_replicas: u32,
    /// `probing.rebalance.interval.ms` (default 10 minutes): the follow-up
    /// rebalance's fallback when no warmup catches up sooner (one that
    /// catches up triggers it at once).
    pub probing_rebalance_interval: Duration,
    /// `application.server` (`host:port`): where this instance serves
    /// queries, sent to the group in its subscription.
    pub application_server: Option<String>,
    /// `group.instance.id`: static membership of this instance.
    pub instance_id: Option<String>,
    /// `client.rack`: this instance's rack (or zone), sent to the group;
    /// standby replicas of a task go to instances in racks that hold no
    /// copy of it yet, where there is one.
    pub rack: Option<String>,
    /// `session.timeout.ms` (default 10 s).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (default 250 ms, Kafka's is 3 s): members learn
    /// of a rebalance at their next heartbeat, so this bounds how long each
    /// round of a handover pauses a task (a rolling restart measured 1.7 s
    /// of worst per-task delay at 1 s, 0.9 s at 250 ms).
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms` (default 300 s).
    pub max_poll_interval: Duration,
    /// `transaction.timeout.ms`: 10 s under exactly-once (as Kafka Streams);
    /// under at-least-once, where a task's changelog transaction stays open
    /// for a commit interval, the commit interval plus 30 s. See
    /// [`transaction_timeout`](Self::transaction_timeout).
    pub transaction_timeout: Option<Duration>,
    /// `default.deserialization.exception.handler`.
    pub deserialization: DeserializationHandling,
    /// `processing.exception.handler`.
    pub processing_errors: ProcessingErrorHandling,
    /// `poll.ms`: how long a thread waits for records (default 100 ms).
    pub poll: Duration,
    /// Client properties (`bootstrap.servers`, security, timeouts, `client.id`).
    pub client: ClientConfig,
    /// Consumer properties (`fetch.max.wait.ms`, ...); the runtime sets the
    /// isolation level itself.
    pub consumer: ConsumerOptions,
    /// Producer properties (`linger.ms`, `compression.type`, ...).
    pub producer: ProducerOptions,
    /// How every task store is opened, Weir's counterpart of Kafka
    /// Streams' `rocksdb.config.setter`. What a store may hold in memory is
    /// its block cache (`weir.store.cache.bytes`, default 32 MiB) plus its
    /// memtables (`weir.store.memtable.bytes` for keyspaces it creates,
    /// fjall's 64 MiB if unset), per task: an instance with many tasks
    /// may want both smaller. `weir.store.restore.memory.bytes` (default
    /// 256 MiB) bounds what an empty-store restore sorts in memory.
    pub store: weir_store::StoreOptions,
    commit_interval_set: bool,
    /// Test-only: at-least-once without the per-task changelog fence, as
    /// Kafka Streams runs it (`weir.internal.unfenced.changelog`). It exists
    /// so tests can show the fence is what keeps a zombie's late writes out.
    #[doc(hidden)]
    pub unfenced_changelog: bool,
    /// Test-only: a worker descheduled right after its lease check, before
    /// it writes (see [`PauseHook`]).
    #[doc(hidden)]
    pub pause_before_write: PauseHook,
}

/// Test-only: asked by a worker each time it has passed its lease check and
/// is about to write; a duration returned is slept there, as if the process
/// had been descheduled (a GC pause, SIGSTOP, a starved VM) at the worst
/// moment. The rest of the instance (its membership, its producers) runs
/// on meanwhile. A real pause stops those too, but every lease check after
/// it sees the time that passed; the only writes a pause can let through are
/// those whose check came before it, which is what this models.
#[doc(hidden)]
#[derive(Clone, Default)]
pub struct PauseHook(pub Option<std::sync::Arc<dyn Fn() -> Option<Duration> + Send + Sync>>);

impl std::fmt::Debug for PauseHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "PauseHook(set)"
        } else {
            "PauseHook(none)"
        })
    }
}

impl PauseHook {
    /// How long to pause now, if at all.
    pub(crate) fn due(&self) -> Option<Duration> {
        self.0.as_ref().and_then(|f| f())
    }
}

/// The properties this config reads itself; the rest go to the client,
/// consumer or producer config, and an unknown one is an error.
pub const KEYS: &[&str] = &[
    "application.id",
    "num.stream.threads",
    "processing.guarantee",
    "commit.interval.ms",
    "state.dir",
    "num.standby.replicas",
    "acceptable.recovery.lag",
    "cache.max.bytes.buffering",
    "max.warmup.replicas",
    "probing.rebalance.interval.ms",
    "application.server",
    "group.instance.id",
    "client.rack",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "transaction.timeout.ms",
    "default.deserialization.exception.handler",
    "processing.exception.handler",
    "poll.ms",
    "weir.store.cache.bytes",
    "weir.store.memtable.bytes",
    "weir.store.restore.memory.bytes",
];

fn invalid(property: &str, reason: impl Into<String>) -> StreamsError {
    StreamsError::InvalidConfig {
        property: property.to_owned(),
        reason: reason.into(),
    }
}

fn from_client(key: &str, e: weir_client::ClientError) -> StreamsError {
    invalid(key, e.to_string())
}

impl StreamsConfig {
    /// A config for `application_id` with every default.
    pub fn new(application_id: impl Into<String>) -> Self {
        let mut consumer = ConsumerOptions::default();
        // Streams reads from the start of a partition without a committed
        // offset, as Kafka Streams does.
        consumer.auto_offset_reset = weir_client::config::consumer::AutoOffsetReset::Earliest;
        // Kafka Streams' consumer override (the plain consumer's is 500):
        // fewer, larger batches, each a trip through a blocking job.
        consumer.max_poll_records = 1000;
        StreamsConfig {
            application_id: application_id.into(),
            threads: 1,
            guarantee: ProcessingGuarantee::AtLeastOnce,
            commit_interval: Duration::from_secs(30),
            state_dir: std::env::temp_dir().join("weir-streams"),
            standby_replicas: 0,
            acceptable_recovery_lag: 10_000,
            cache_max_bytes: crate::topology::DEFAULT_CACHE_MAX_BYTES,
            max_warmup_replicas: 2,
            probing_rebalance_interval: Duration::from_secs(600),
            application_server: None,
            instance_id: None,
            rack: None,
            session_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_millis(250),
            max_poll_interval: Duration::from_secs(300),
            transaction_timeout: None,
            deserialization: DeserializationHandling::LogAndContinue,
            processing_errors: ProcessingErrorHandling::ReplaceThread,
            poll: Duration::from_millis(100),
            client: ClientConfig::default(),
            consumer,
            producer: ProducerOptions::default(),
            store: weir_store::StoreOptions::default(),
            commit_interval_set: false,
            unfenced_changelog: false,
            pause_before_write: PauseHook::default(),
        }
    }

    /// Reads Kafka Streams' properties; client, consumer and producer
    /// properties are passed through (optionally prefixed `consumer.`,
    /// `producer.`, as in Kafka Streams).
    ///
    /// # Errors
    ///
    /// [`StreamsError::InvalidConfig`] naming an unknown property or a bad
    /// value, or a missing `application.id`.
    pub fn from_properties(props: &[(&str, &str)]) -> Result<Self> {
        let app = props
            .iter()
            .rev()
            .find(|(k, _)| *k == "application.id")
            .map(|(_, v)| *v)
            .ok_or_else(|| invalid("application.id", "required"))?;
        let mut config = StreamsConfig::new(app);
        for (k, v) in props {
            config.set(k, v)?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets one property.
    ///
    /// # Errors
    ///
    /// As [`from_properties`](Self::from_properties).
    pub fn set(&mut self, key: &str, value: &str) -> Result<&mut Self> {
        let millis = |k: &str, v: &str| parse_millis(k, v).map_err(|e| from_client(k, e));
        match key {
            "application.id" => {
                if value.is_empty()
                    || !value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                {
                    return Err(invalid(key, "must be non-empty [a-zA-Z0-9._-]"));
                }
                self.application_id = value.to_owned();
            }
            "num.stream.threads" => {
                self.threads =
                    parse_number(key, value, 1usize, 1024).map_err(|e| from_client(key, e))?
            }
            "processing.guarantee" => {
                self.guarantee = parse_choice(
                    key,
                    value,
                    &[
                        ("at_least_once", ProcessingGuarantee::AtLeastOnce),
                        ("exactly_once_v2", ProcessingGuarantee::ExactlyOnceV2),
                    ],
                )
                .map_err(|e| from_client(key, e))?;
                if !self.commit_interval_set {
                    self.commit_interval = match self.guarantee {
                        ProcessingGuarantee::AtLeastOnce => Duration::from_secs(30),
                        ProcessingGuarantee::ExactlyOnceV2 => Duration::from_millis(100),
                    };
                }
            }
            "commit.interval.ms" => {
                self.commit_interval = millis(key, value)?;
                self.commit_interval_set = true;
            }
            "state.dir" => self.state_dir = PathBuf::from(value),
            "num.standby.replicas" => {
                self.standby_replicas =
                    parse_number(key, value, 0u32, 16).map_err(|e| from_client(key, e))?
            }
            "cache.max.bytes.buffering" => {
                self.cache_max_bytes =
                    parse_number(key, value, 0u64, u64::MAX).map_err(|e| from_client(key, e))?
            }
            "acceptable.recovery.lag" => {
                self.acceptable_recovery_lag =
                    parse_number(key, value, 0u64, u64::MAX).map_err(|e| from_client(key, e))?
            }
            "max.warmup.replicas" => {
                self.max_warmup_replicas =
                    parse_number(key, value, 1u32, 1024).map_err(|e| from_client(key, e))?
            }
            "probing.rebalance.interval.ms" => {
                self.probing_rebalance_interval = millis(key, value)?;
            }
            "application.server" => {
                if value
                    .rsplit_once(':')
                    .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
                {
                    return Err(invalid(key, "must be host:port"));
                }
                self.application_server = Some(value.to_owned());
            }
            "group.instance.id" => self.instance_id = Some(value.to_owned()),
            "client.rack" => self.rack = Some(value.to_owned()),
            "session.timeout.ms" => self.session_timeout = millis(key, value)?,
            "heartbeat.interval.ms" => self.heartbeat_interval = millis(key, value)?,
            "max.poll.interval.ms" => self.max_poll_interval = millis(key, value)?,
            "transaction.timeout.ms" => self.transaction_timeout = Some(millis(key, value)?),
            "poll.ms" => self.poll = millis(key, value)?,
            "default.deserialization.exception.handler" => {
                self.deserialization = parse_choice(
                    key,
                    value,
                    &[
                        (
                            "LogAndContinueExceptionHandler",
                            DeserializationHandling::LogAndContinue,
                        ),
                        ("log_and_continue", DeserializationHandling::LogAndContinue),
                        (
                            "LogAndFailExceptionHandler",
                            DeserializationHandling::LogAndFail,
                        ),
                        ("log_and_fail", DeserializationHandling::LogAndFail),
                    ],
                )
                .map_err(|e| from_client(key, e))?
            }
            "processing.exception.handler" => {
                self.processing_errors = parse_choice(
                    key,
                    value,
                    &[
                        ("replace_thread", ProcessingErrorHandling::ReplaceThread),
                        ("shutdown_client", ProcessingErrorHandling::ShutdownClient),
                        ("skip", ProcessingErrorHandling::SkipRecord),
                    ],
                )
                .map_err(|e| from_client(key, e))?
            }
            "weir.store.cache.bytes" => {
                self.store.cache_bytes =
                    parse_number(key, value, 0u64, u64::MAX).map_err(|e| from_client(key, e))?;
            }
            "weir.store.memtable.bytes" => {
                let bytes = parse_number(key, value, 64u64 << 10, u64::MAX)
                    .map_err(|e| from_client(key, e))?;
                self.store = std::mem::take(&mut self.store).with_memtable_bytes(bytes);
            }
            "weir.store.restore.memory.bytes" => {
                let bytes = parse_number(key, value, 1usize << 20, usize::MAX)
                    .map_err(|e| from_client(key, e))?;
                self.store = std::mem::take(&mut self.store).with_restore_memory_bytes(bytes);
            }
            "weir.internal.unfenced.changelog" => {
                self.unfenced_changelog = value == "true";
            }
            _ => self.pass_through(key, value)?,
        }
        Ok(self)
    }

    fn pass_through(&mut self, key: &str, value: &str) -> Result<()> {
        if let Some(k) = key.strip_prefix("consumer.") {
            return match self
                .consumer
                .apply(k, value)
                .map_err(|e| from_client(key, e))?
            {
                true => Ok(()),
                false => Err(invalid(key, "not a consumer property")),
            };
        }
        if let Some(k) = key.strip_prefix("producer.") {
            return match self
                .producer
                .apply(k, value)
                .map_err(|e| from_client(key, e))?
            {
                true => Ok(()),
                false => Err(invalid(key, "not a producer property")),
            };
        }
        if matches!(
            key,
            "isolation.level" | "enable.auto.commit" | "transactional.id"
        ) {
            return Err(invalid(
                key,
                "set by the runtime from processing.guarantee; remove it",
            ));
        }
        // A key both sides know (client.id) goes to the client only.
        if self
            .client
            .apply(key, value)
            .map_err(|e| from_client(key, e))?
        {
            return Ok(());
        }
        let consumer = self
            .consumer
            .apply(key, value)
            .map_err(|e| from_client(key, e))?;
        let producer = self
            .producer
            .apply(key, value)
            .map_err(|e| from_client(key, e))?;
        if consumer || producer {
            return Ok(());
        }
        Err(invalid(
            key,
            "unknown: not a Streams, client, consumer or producer property",
        ))
    }

    /// Sets the dialer every connection goes through (in-memory streams in
    /// tests).
    pub fn with_dialer(mut self, dialer: Dialer) -> Self {
        self.client.dialer = Some(dialer);
        self
    }

    /// The transaction timeout in effect (see the field).
    pub fn transaction_timeout(&self) -> Duration {
        self.transaction_timeout.unwrap_or(match self.guarantee {
            ProcessingGuarantee::ExactlyOnceV2 => Duration::from_secs(10),
            ProcessingGuarantee::AtLeastOnce => self.commit_interval + Duration::from_secs(30),
        })
    }

    /// Checks that the settings fit together.
    ///
    /// # Errors
    ///
    /// [`StreamsError::InvalidConfig`] naming the property at fault.
    pub fn validate(&self) -> Result<()> {
        if self.client.bootstrap_servers.is_empty() {
            return Err(invalid("bootstrap.servers", "required"));
        }
        if self.heartbeat_interval >= self.session_timeout {
            return Err(invalid(
                "heartbeat.interval.ms",
                "must be less than session.timeout.ms",
            ));
        }
        if self.transaction_timeout() <= self.commit_interval {
            return Err(invalid(
                "transaction.timeout.ms",
                "must be longer than commit.interval.ms: a transaction stays open for one interval",
            ));
        }
        self.client
            .validate()
            .map_err(|e| invalid("client", e.to_string()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_instance_id_comes_from_weir_instance_id_then_the_host_name() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let kernel = || Some("node-7\n".to_owned());
        assert_eq!(
            instance_id_from(env(&[("WEIR_INSTANCE_ID", "a"), ("HOSTNAME", "h")]), kernel),
            Some("a".into())
        );
        assert_eq!(
            instance_id_from(
                env(&[("WEIR_INSTANCE_ID", " "), ("HOSTNAME", "app-2")]),
                kernel
            ),
            Some("app-2".into())
        );
        assert_eq!(instance_id_from(env(&[]), kernel), Some("node-7".into()));
        assert_eq!(instance_id_from(env(&[]), || None), None);
    }

    #[test]
    fn max_poll_records_defaults_to_kafka_streams_1000_and_can_be_set() {
        let props = |extra: &[(&'static str, &'static str)]| {
            let mut p = vec![
                ("application.id", "app"),
                ("bootstrap.servers", "localhost:9092"),
            ];
            p.extend_from_slice(extra);
            StreamsConfig::from_properties(&p).unwrap()
        };
        assert_eq!(props(&[]).consumer.max_poll_records, 1000);
        assert_eq!(
            props(&[("max.poll.records", "200")])
                .consumer
                .max_poll_records,
            200
        );
        assert_eq!(
            props(&[("consumer.max.poll.records", "300")])
                .consumer
                .max_poll_records,
            300
        );
    }

    #[test]
    fn store_properties_set_how_task_stores_open() {
        let config = StreamsConfig::from_properties(&[
            ("application.id", "app"),
            ("bootstrap.servers", "localhost:9092"),
            ("weir.store.cache.bytes", "1048576"),
            ("weir.store.memtable.bytes", "262144"),
            ("weir.store.restore.memory.bytes", "16777216"),
        ])
        .unwrap();
        assert_eq!(config.store.cache_bytes, 1 << 20);
        assert_eq!(config.store.memtable_bytes, Some(256 << 10));
        assert_eq!(config.store.restore_memory_bytes, 16 << 20);
        // Defaults otherwise; below fjall's smallest memtable is refused.
        let plain = StreamsConfig::new("app");
        assert_eq!(
            plain.store.cache_bytes,
            weir_store::StoreOptions::default().cache_bytes
        );
        let err = StreamsConfig::from_properties(&[
            ("application.id", "app"),
            ("bootstrap.servers", "localhost:9092"),
            ("weir.store.memtable.bytes", "1024"),
        ])
        .unwrap_err();
        assert!(
            err.to_string().contains("weir.store.memtable.bytes"),
            "{err}"
        );
    }
}
