//! `ClusterState`: everything the cluster knows, owned by one task.
//!
//! Brokers, topics with their partition logs, the coordinators, fetch
//! sessions, timers, faults and parked responses all live here. Only the
//! state task touches it, one request at a time in arrival order, which
//! makes every run deterministic (franz-go's kfake does the same).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;
use uuid::Uuid;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::ResponseKind;
use weir_protocol::records::ControlKind;

use super::fetch_sessions::FetchSessions;
use super::task::{Outcome, Shared};
use super::timers::{TimerEvent, Timers};
use crate::coordinator::group::GroupCoordinator;
use crate::coordinator::txn::TxnCoordinator;
use crate::faults::Faults;
use crate::handlers::RequestId;
use crate::handlers::fetch::PendingFetch;
use crate::log::{AppendError, PartitionLog};
use crate::server::AbortOnDrop;

/// The most partitions one topic may have: a request cannot make the
/// cluster allocate without bound.
pub const MAX_PARTITIONS: i32 = 10_000;

/// Kafka's `group.initial.rebalance.delay.ms` (3 s), the testkit's default.
pub(crate) const KAFKA_INITIAL_REBALANCE_DELAY: Duration = Duration::from_secs(3);
/// How long Kafka takes to write transaction markers after answering
/// EndTxn, about (20 ms), the testkit's default.
pub(crate) const KAFKA_TXN_MARKER_DELAY: Duration = Duration::from_millis(20);
/// Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms`
/// (10 s), the testkit's default.
pub(crate) const KAFKA_TXN_ABORT_SCAN_INTERVAL: Duration = Duration::from_secs(10);

/// Settings fixed when the cluster is built.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Number of brokers, with ids `0..brokers`.
    pub brokers: i32,
    /// Listener ports per broker; 0 picks a free port.
    pub ports: Vec<u16>,
    /// Whether Metadata and Produce create unknown topics (Kafka's
    /// `auto.create.topics.enable`, default true).
    pub auto_create_topics: bool,
    /// Partitions of an auto-created topic or of CreateTopics with -1.
    pub default_partitions: i32,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an
    /// empty group waits for more members. 3 s by default, as in Kafka.
    pub group_initial_rebalance_delay: Duration,
    /// How long after answering EndTxn (or aborting a transaction) the
    /// coordinator takes to write its markers. Kafka answers EndTxn once
    /// the outcome is in its transaction log and writes the markers after;
    /// meanwhile the next AddPartitionsToTxn or InitProducerId of that id
    /// gets `CONCURRENT_TRANSACTIONS`, a stable offset fetch of its group
    /// `UNSTABLE_OFFSET_COMMIT`, and read_committed readers wait at the
    /// LSO. Kafka 4.4 on three local nodes took 20 to 40 ms; the default is
    /// 20 ms. Zero writes the markers before the answer.
    pub txn_marker_delay: Duration,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: a
    /// transaction past its timeout is aborted at the next scan of this
    /// period (Kafka and the default: 10 s), not at its deadline. Zero
    /// aborts at the deadline.
    pub txn_abort_scan_interval: Duration,
    /// The cluster id reported by Metadata.
    pub cluster_id: String,
    /// Kafka's `transaction.partition.verification.enable` (KIP-890, 3.6+,
    /// default true): a partition leader checks with the transaction
    /// coordinator that a transactional batch's partition was added to
    /// the producer's ongoing transaction (and that its epoch is current)
    /// before appending it. Off, as in brokers before 3.6, the batch is
    /// appended after only the partition's own producer-epoch check, so a
    /// batch for a partition never added to the transaction is written and
    /// left without a marker: a hanging transaction.
    pub transaction_partition_verification: bool,
    /// The finalized `transaction.version` feature ApiVersions reports
    /// (Kafka 4.x formats new clusters at 2; 0 reports none, as a broker
    /// before 4.0). Clients such as Weir and Kafka's Java producer run
    /// transaction version 2 (KIP-890) only where it is 2.
    pub transaction_version: i16,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            brokers: 1,
            ports: Vec::new(),
            auto_create_topics: true,
            default_partitions: 1,
            group_initial_rebalance_delay: KAFKA_INITIAL_REBALANCE_DELAY,
            txn_marker_delay: KAFKA_TXN_MARKER_DELAY,
            txn_abort_scan_interval: KAFKA_TXN_ABORT_SCAN_INTERVAL,
            cluster_id: "weir-testkit".to_owned(),
            transaction_partition_verification: true,
            transaction_version: 2,
        }
    }
}

/// One broker.
#[derive(Debug)]
pub struct Broker {
    /// The broker id (`node_id`).
    pub id: i32,
    /// The port it listens on (kept across a kill and restart).
    pub port: u16,
    /// False between a kill and a restart.
    pub alive: bool,
    pub(crate) listener: Option<AbortOnDrop>,
}

/// One partition: its leader and its log. There are no followers; the
/// replica list is what Metadata reports.
#[derive(Debug, Clone)]
pub struct Partition {
    /// The leader's broker id.
    pub leader: i32,
    /// Bumped on every leader move; clients send it back and get
    /// `FENCED_LEADER_EPOCH` / `UNKNOWN_LEADER_EPOCH` when it is stale or ahead.
    pub leader_epoch: i32,
    /// The replica broker ids, leader first.
    pub replicas: Vec<i32>,
    /// The data.
    pub log: PartitionLog,
}

/// One topic.
#[derive(Debug, Clone)]
pub struct Topic {
    /// The name.
    pub name: String,
    /// The topic id (Metadata v10+, Fetch v13+).
    pub id: Uuid,
    /// Configs set at creation (only those given; defaults are implied).
    pub configs: BTreeMap<String, String>,
    /// The partitions, by index.
    pub partitions: Vec<Partition>,
    /// The replication factor asked for at creation.
    pub replication_factor: i16,
}

/// The state of a connection known to the state task.
#[derive(Debug)]
pub(crate) struct ConnectionEntry {
    pub(crate) broker: i32,
    pub(crate) client_id: Option<String>,
    /// Dropping it closes the connection.
    pub(crate) _close: oneshot::Sender<()>,
}

/// A parked reply channel of a request answered later.
#[derive(Debug)]
pub(crate) struct Responder {
    pub(crate) connection_id: u64,
    pub(crate) version: i16,
    pub(crate) tx: oneshot::Sender<Outcome>,
}

/// All state of the cluster.
#[derive(Debug)]
pub struct ClusterState {
    /// Build-time settings.
    pub config: ClusterConfig,
    /// The brokers, by id (`brokers[i].id == i`).
    pub brokers: Vec<Broker>,
    /// Topics by name, in creation order.
    pub topics: IndexMap<String, Topic>,
    /// The consumer group coordinator (tk-coord).
    pub groups: GroupCoordinator,
    /// The transaction coordinator (tk-coord).
    pub txns: TxnCoordinator,
    /// KIP-227 fetch sessions.
    pub fetch_sessions: FetchSessions,
    /// The timer wheel of the state task.
    pub timers: Timers,
    /// Injected faults and the request log.
    pub faults: Faults,
    pub(crate) responders: HashMap<RequestId, Responder>,
    pub(crate) connections: HashMap<u64, ConnectionEntry>,
    pub(crate) pending_fetches: Vec<PendingFetch>,
    /// Ended transactions whose markers are not yet written (see
    /// [`ClusterConfig::txn_marker_delay`]), in the order they ended.
    pub(crate) pending_markers: Vec<crate::coordinator::txn::TxnEnd>,
    pub(crate) shared: Arc<Shared>,
    /// Coordinators moved by [`crate::Cluster::move_coordinator`], by key;
    /// they take the place of the hashed home broker.
    pub(crate) coordinator_moves: HashMap<String, i32>,
    next_request_id: RequestId,
    next_topic_id: u128,
}

impl ClusterState {
    pub(crate) fn new(config: ClusterConfig, brokers: Vec<Broker>, shared: Arc<Shared>) -> Self {
        let mut txns = TxnCoordinator::default();
        txns.config.marker_delay = config.txn_marker_delay;
        txns.config.abort_scan_interval = config.txn_abort_scan_interval;
        txns.config.transaction_version = if config.transaction_partition_verification {
            config.transaction_version
        } else {
            0
        };
        Self {
            config,
            brokers,
            topics: IndexMap::new(),
            groups: GroupCoordinator::default(),
            txns,
            fetch_sessions: FetchSessions::default(),
            timers: Timers::default(),
            faults: Faults::default(),
            responders: HashMap::new(),
            connections: HashMap::new(),
            pending_fetches: Vec::new(),
            pending_markers: Vec::new(),
            shared,
            coordinator_moves: HashMap::new(),
            next_request_id: 1,
            next_topic_id: 1,
        }
    }

    pub(crate) fn next_request_id(&mut self) -> RequestId {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    /// Answers a request that a handler deferred with `Reply::Later`.
    /// Does nothing if the connection has gone away meanwhile.
    pub fn respond(&mut self, request: RequestId, body: ResponseKind) {
        if self.faults.is_response_lost(request) {
            // The responder stays parked: the client hears nothing, as if
            // the response were lost on the network.
            debug!(request, "fault: response lost");
            return;
        }
        match self.responders.remove(&request) {
            Some(r) => {
                let _ = r.tx.send(Outcome::Respond(Box::new(body), r.version));
            }
            None => debug!(request, "response to a request whose connection is gone"),
        }
    }

    /// Whether a deferred request still waits for its response.
    pub fn is_waiting(&self, request: RequestId) -> bool {
        self.responders.contains_key(&request)
    }

    /// Schedules a timer event at `at` (see [`TimerEvent`]).
    pub fn schedule(&mut self, at: Instant, event: TimerEvent) {
        self.timers.schedule(at, event);
    }

    /// Ids of the brokers that are up.
    pub fn alive_brokers(&self) -> impl Iterator<Item = &Broker> {
        self.brokers.iter().filter(|b| b.alive)
    }

    /// Whether broker `id` exists and is up.
    pub fn broker_alive(&self, id: i32) -> bool {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.brokers.get(i))
            .is_some_and(|b| b.alive)
    }

    /// The broker that coordinates a group or transactional id: a stable
    /// hash of the key over all brokers, like Kafka's partition of
    /// `__consumer_offsets` / `__transaction_state`, unless a test moved
    /// the key's coordinator elsewhere.
    pub fn coordinator_for(&self, key: &str) -> i32 {
        if let Some(&moved) = self.coordinator_moves.get(key) {
            return moved;
        }
        // FNV-1a: stable across runs and platforms, unlike `DefaultHasher`.
        let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let n = u64::try_from(self.brokers.len().max(1)).unwrap_or(1);
        i32::try_from(hash % n).unwrap_or(0)
    }

    /// A partition, if the topic and index exist.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&Partition> {
        self.topics
            .get(topic)?
            .partitions
            .get(usize::try_from(partition).ok()?)
    }

    /// A partition, mutably.
    pub fn partition_mut(&mut self, topic: &str, partition: i32) -> Option<&mut Partition> {
        self.topics
            .get_mut(topic)?
            .partitions
            .get_mut(usize::try_from(partition).ok()?)
    }

    /// Writes a transaction marker (COMMIT or ABORT) for `producer_id` to a
    /// partition, closing the producer's transaction there, and wakes
    /// fetches waiting for data. Returns the marker's offset.
    ///
    /// The transaction coordinator calls this for every partition of a
    /// transaction at EndTxn, on a timeout abort and when InitProducerId
    /// fences an open transaction.
    ///
    /// # Errors
    /// The Kafka error code: `UNKNOWN_TOPIC_OR_PARTITION` or
    /// `INVALID_PRODUCER_EPOCH` (the marker's epoch is older than the
    /// producer's on that partition).
    pub fn append_marker(
        &mut self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        kind: ControlKind,
        coordinator_epoch: i32,
    ) -> Result<i64, i16> {
        let now_ms = wall_clock_ms();
        let Some(p) = self.partition_mut(topic, partition) else {
            return Err(ResponseError::UnknownTopicOrPartition.code());
        };
        let epoch = p.leader_epoch;
        let offset = p
            .log
            .append_marker(
                producer_id,
                producer_epoch,
                kind,
                coordinator_epoch,
                epoch,
                now_ms,
            )
            .map_err(|e| match e {
                AppendError::StaleEpoch => ResponseError::InvalidProducerEpoch.code(),
                _ => ResponseError::CorruptMessage.code(),
            })?;
        crate::handlers::fetch::wake_waiting(self, Instant::now());
        Ok(offset)
    }

    /// Creates a topic; the leaders of its partitions are spread round-robin
    /// over the brokers, starting at `partition % brokers`.
    ///
    /// # Errors
    /// `TOPIC_ALREADY_EXISTS`, `INVALID_PARTITIONS`,
    /// `INVALID_REPLICATION_FACTOR` or `INVALID_TOPIC_EXCEPTION` (with a message).
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<&Topic, (i16, String)> {
        validate_topic_name(name)?;
        if self.topics.contains_key(name) {
            return Err((
                ResponseError::TopicAlreadyExists.code(),
                format!("Topic '{name}' already exists."),
            ));
        }
        let partitions = if partitions == -1 {
            self.config.default_partitions
        } else {
            partitions
        };
        if partitions <= 0 {
            return Err((
                ResponseError::InvalidPartitions.code(),
                "Number of partitions must be larger than 0.".to_owned(),
            ));
        }
        if partitions > MAX_PARTITIONS {
            return Err((
                ResponseError::InvalidPartitions.code(),
                format!("weir-testkit allows at most {MAX_PARTITIONS} partitions per topic."),
            ));
        }
        let brokers = i32::try_from(self.brokers.len()).unwrap_or(1);
        let rf = if replication_factor == -1 {
            1
        } else {
            replication_factor
        };
        if rf <= 0 || i32::from(rf) > brokers {
            return Err((
                ResponseError::InvalidReplicationFactor.code(),
                format!("Replication factor {rf} is larger than the {brokers} available brokers."),
            ));
        }
        let id = Uuid::from_u128(self.next_topic_id);
        self.next_topic_id += 1;
        let mut topic = Topic {
            name: name.to_owned(),
            id,
            configs,
            partitions: Vec::new(),
            replication_factor: rf,
        };
        add_partitions(&mut topic, partitions, brokers);
        self.topics.insert(name.to_owned(), topic);
        self.topics
            .get(name)
            .ok_or((ResponseError::UnknownServerError.code(), String::new()))
    }

    /// A snapshot of which brokers are up, usable while the topics are
    /// borrowed mutably.
    fn liveness(&self) -> impl Fn(i32) -> bool + use<> {
        let alive: Vec<bool> = self.brokers.iter().map(|b| b.alive).collect();
        move |id: i32| {
            usize::try_from(id)
                .ok()
                .and_then(|i| alive.get(i))
                .copied()
                .unwrap_or(false)
        }
    }

    /// Moves every partition led by the dead `broker` to its first live
    /// replica, bumping the leader epoch, as the controller would. Returns
    /// how many moved; partitions with no live replica stay offline.
    pub fn fail_over_from(&mut self, broker: i32) -> usize {
        let is_alive = self.liveness();
        let mut moved = 0;
        for topic in self.topics.values_mut() {
            for p in topic.partitions.iter_mut().filter(|p| p.leader == broker) {
                if let Some(&next) = p.replicas.iter().find(|&&r| r != broker && is_alive(r)) {
                    p.leader = next;
                    p.leader_epoch += 1;
                    moved += 1;
                }
            }
        }
        crate::handlers::fetch::wake_waiting(self, Instant::now());
        moved
    }

    /// Gives offline partitions that have `broker` as a replica their
    /// leader back once it restarts. Returns how many were elected.
    pub fn elect_offline_partitions(&mut self, broker: i32) -> usize {
        let is_alive = self.liveness();
        let mut elected = 0;
        for topic in self.topics.values_mut() {
            for p in &mut topic.partitions {
                // Its own offline partitions, and those whose leader is
                // still down, elect it.
                let offline = p.leader == broker || !is_alive(p.leader);
                if offline && p.replicas.contains(&broker) {
                    p.leader = broker;
                    p.leader_epoch += 1;
                    elected += 1;
                }
            }
        }
        elected
    }

    /// Moves a partition's leadership to `to`, bumping its leader epoch.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION` or `BROKER_NOT_AVAILABLE`.
    pub fn move_leader(&mut self, topic: &str, partition: i32, to: i32) -> Result<(), i16> {
        if usize::try_from(to)
            .ok()
            .and_then(|i| self.brokers.get(i))
            .is_none()
        {
            return Err(ResponseError::BrokerNotAvailable.code());
        }
        let p = self
            .partition_mut(topic, partition)
            .ok_or(ResponseError::UnknownTopicOrPartition.code())?;
        p.leader = to;
        p.leader_epoch += 1;
        if !p.replicas.contains(&to) {
            p.replicas.insert(0, to);
        } else {
            p.replicas.retain(|&r| r != to);
            p.replicas.insert(0, to);
        }
        // Parked fetches on the old leader now answer NOT_LEADER_OR_FOLLOWER
        // at once, as Kafka completes delayed fetches on a leader change.
        crate::handlers::fetch::wake_waiting(self, Instant::now());
        Ok(())
    }
}

/// Appends `count` partitions to a topic.
pub(crate) fn add_partitions(topic: &mut Topic, count: i32, brokers: i32) {
    let brokers = brokers.max(1);
    let start = i32::try_from(topic.partitions.len()).unwrap_or(0);
    for index in start..start + count {
        let leader = index % brokers;
        let replicas = (0..i32::from(topic.replication_factor))
            .map(|r| (leader + r) % brokers)
            .collect();
        topic.partitions.push(Partition {
            leader,
            leader_epoch: 0,
            replicas,
            log: PartitionLog::new(),
        });
    }
}

/// Kafka's rules for topic names: 1 to 249 characters of `[a-zA-Z0-9._-]`,
/// not `.` or `..`.
pub(crate) fn validate_topic_name(name: &str) -> Result<(), (i16, String)> {
    let invalid = |why: &str| {
        (
            ResponseError::InvalidTopicException.code(),
            format!("Topic name \"{name}\" is illegal, {why}"),
        )
    };
    if name.is_empty() {
        return Err(invalid("it can't be empty"));
    }
    if name == "." || name == ".." {
        return Err(invalid("it can't be '.' or '..'"));
    }
    if name.len() > 249 {
        return Err(invalid("it can't be longer than 249 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(invalid(
            "it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        ));
    }
    Ok(())
}

/// Milliseconds since the Unix epoch, for record timestamps. Timers never
/// use it: they use tokio's clock, which tests pause.
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
