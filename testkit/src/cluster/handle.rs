//! The public handle: build a cluster, connect to it, create topics and
//! inject faults.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::DuplexStream;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tracing::info;

use super::state::{
    Broker, ClusterConfig, ClusterState, KAFKA_INITIAL_REBALANCE_DELAY,
    KAFKA_TXN_ABORT_SCAN_INTERVAL, KAFKA_TXN_MARKER_DELAY,
};
use super::task::{Message, Shared, run};
use crate::error::{Result, TestkitError};
use crate::faults::{
    ClientSelector, FaultId, Intercept, LoggedRequest, NetworkPartition, PartitionTarget,
};
use crate::log::PartitionLog;
use crate::log::compaction::{self, CompactionStats};
use crate::server::{AbortOnDrop, serve, spawn_listener};

/// Buffer of each side of an in-memory connection.
const DUPLEX_BUFFER: usize = 256 * 1024;

/// Builds a [`Cluster`].
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ClusterBuilder {
    config: ClusterConfig,
}

impl ClusterBuilder {
    /// Number of brokers (default 1), with ids `0..n`.
    pub fn brokers(mut self, n: i32) -> Self {
        self.config.brokers = n.max(1);
        self
    }

    /// Listen on `port` for broker 0, `port + 1` for broker 1, and so on.
    /// Without it every broker gets a free port.
    pub fn port(mut self, port: u16) -> Self {
        self.config.ports = vec![port];
        self
    }

    /// Whether unknown topics are created on Metadata (default true).
    pub fn auto_create_topics(mut self, enabled: bool) -> Self {
        self.config.auto_create_topics = enabled;
        self
    }

    /// Partitions of auto-created topics (default 1).
    pub fn default_partitions(mut self, n: i32) -> Self {
        self.config.default_partitions = n.max(1);
        self
    }

    /// `transaction.partition.verification.enable` (default true, as in
    /// Kafka 3.6+); false behaves like a broker before 3.6 (see
    /// [`ClusterConfig::transaction_partition_verification`]).
    pub fn transaction_partition_verification(mut self, enabled: bool) -> Self {
        self.config.transaction_partition_verification = enabled;
        self
    }

    /// The finalized `transaction.version` (default 2, as a new Kafka 4.x
    /// cluster; 1 as one formatted with `transaction.version=1`, 0 as a
    /// broker before 4.0). See [`ClusterConfig::transaction_version`].
    pub fn transaction_version(mut self, version: i16) -> Self {
        self.config.transaction_version = version.clamp(0, 2);
        self
    }

    /// How long markers take after EndTxn (default 20 ms, as Kafka takes
    /// tens of milliseconds; see [`ClusterConfig::txn_marker_delay`]).
    pub fn txn_marker_delay(mut self, delay: Duration) -> Self {
        self.config.txn_marker_delay = delay;
        self
    }

    /// The period of the scan that aborts timed-out transactions (default
    /// 10 s, as Kafka; 0 aborts at the deadline; see
    /// [`ClusterConfig::txn_abort_scan_interval`]).
    pub fn txn_abort_scan_interval(mut self, interval: Duration) -> Self {
        self.config.txn_abort_scan_interval = interval;
        self
    }

    /// Kafka 4.4's timings, the defaults: markers 20 ms after EndTxn, the
    /// timed-out-transaction scan every 10 s, and a 3 s initial rebalance
    /// delay. Useful to undo [`instant_timing`](Self::instant_timing) (or
    /// `WEIR_TESTKIT_TIMING=instant`); later builder calls still override
    /// each.
    ///
    /// ```
    /// let builder = weir_testkit::Cluster::builder().kafka_timing();
    /// # drop(builder);
    /// ```
    pub fn kafka_timing(self) -> Self {
        self.txn_marker_delay(KAFKA_TXN_MARKER_DELAY)
            .txn_abort_scan_interval(KAFKA_TXN_ABORT_SCAN_INTERVAL)
            .group_initial_rebalance_delay(KAFKA_INITIAL_REBALANCE_DELAY)
    }

    /// No waiting where Kafka waits: markers are written before EndTxn is
    /// answered, a timed-out transaction is aborted at its deadline, and
    /// the first rebalance of a group completes as soon as its members
    /// have joined. For a test that checks exact timing on tokio's paused
    /// clock (a transaction aborted exactly at its timeout), or reads a
    /// transaction's outcome right after EndTxn returns, and does not
    /// want to account for Kafka's delays. Tests about correctness should
    /// rather wait for the outcome, so that they hold on Kafka too.
    ///
    /// ```
    /// let builder = weir_testkit::Cluster::builder().instant_timing();
    /// # drop(builder);
    /// ```
    pub fn instant_timing(self) -> Self {
        self.txn_marker_delay(Duration::ZERO)
            .txn_abort_scan_interval(Duration::ZERO)
            .group_initial_rebalance_delay(Duration::ZERO)
    }

    /// `group.initial.rebalance.delay.ms` (default 3 s, as Kafka's).
    pub fn group_initial_rebalance_delay(mut self, delay: Duration) -> Self {
        self.config.group_initial_rebalance_delay = delay;
        self
    }

    /// The cluster id reported by Metadata.
    pub fn cluster_id(mut self, id: impl Into<String>) -> Self {
        self.config.cluster_id = id.into();
        self
    }

    /// Binds every broker's listener on 127.0.0.1 and starts the cluster.
    ///
    /// # Errors
    /// [`TestkitError::Io`] if a port cannot be bound.
    pub async fn build(self) -> Result<Cluster> {
        let config = self.config;
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(tx));
        let mut brokers = Vec::new();
        let mut addrs = Vec::new();
        for id in 0..config.brokers {
            let port = match config.ports.first() {
                Some(&base) if base != 0 => base.saturating_add(u16::try_from(id).unwrap_or(0)),
                _ => 0,
            };
            let listener = TcpListener::bind(("127.0.0.1", port)).await.map_err(|e| {
                TestkitError::io(format!("binding broker {id} on 127.0.0.1:{port}"), e)
            })?;
            let addr = listener
                .local_addr()
                .map_err(|e| TestkitError::io("reading the bound address", e))?;
            addrs.push(addr);
            brokers.push(Broker {
                id,
                port: addr.port(),
                alive: true,
                listener: Some(spawn_listener(listener, id, shared.clone())),
            });
        }
        info!(brokers = config.brokers, bootstrap = %join_addrs(&addrs), "weir-testkit cluster started");
        let state = ClusterState::new(config, brokers, shared.clone());
        let task = AbortOnDrop(tokio::spawn(run(state, rx)));
        Ok(Cluster {
            shared,
            addrs,
            _task: task,
        })
    }
}

fn join_addrs(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A running in-process Kafka cluster. Dropping it stops every broker.
///
/// ```
/// # tokio_test_block_on(async {
/// use weir_testkit::Cluster;
/// let cluster = Cluster::builder().brokers(3).build().await?;
/// cluster.create_topic("orders", 6, [("cleanup.policy", "compact")]).await?;
/// assert_eq!(cluster.bootstrap().split(',').count(), 3);
/// # Ok::<(), weir_testkit::TestkitError>(())
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug)]
pub struct Cluster {
    shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
    _task: AbortOnDrop,
}

impl Cluster {
    /// A builder with one broker and Kafka's defaults, timings included
    /// (see [`ClusterBuilder::kafka_timing`]). With
    /// `WEIR_TESTKIT_TIMING=instant` in the environment the timings start
    /// at zero instead ([`ClusterBuilder::instant_timing`]), so a whole
    /// test suite can be measured without them.
    ///
    /// ```
    /// let builder = weir_testkit::Cluster::builder().brokers(3);
    /// # drop(builder);
    /// ```
    pub fn builder() -> ClusterBuilder {
        let builder = ClusterBuilder::default();
        if std::env::var("WEIR_TESTKIT_TIMING").as_deref() == Ok("instant") {
            builder.instant_timing()
        } else {
            builder
        }
    }

    /// Comma-separated `127.0.0.1:port` of every broker, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        join_addrs(&self.addrs)
    }

    /// The address of one broker.
    pub fn broker_addr(&self, broker: i32) -> Option<SocketAddr> {
        self.addrs.get(usize::try_from(broker).ok()?).copied()
    }

    /// Runs `f` on the cluster state inside the state task, between two
    /// requests, and returns its result.
    ///
    /// # Errors
    /// [`TestkitError::ClusterStopped`] if the state task is gone.
    pub async fn with_state<R, F>(&self, f: F) -> Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut ClusterState) -> R + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let cmd = Box::new(move |state: &mut ClusterState| {
            let _ = tx.send(f(state));
        });
        self.shared
            .tx
            .send(Message::Control(cmd))
            .map_err(|_| TestkitError::ClusterStopped)?;
        rx.await.map_err(|_| TestkitError::ClusterStopped)
    }

    /// Opens an in-memory connection to a broker; the returned stream
    /// speaks the Kafka protocol like a TCP connection would.
    ///
    /// # Errors
    /// [`TestkitError::UnknownBroker`] if the broker does not exist or is down.
    pub async fn connect_duplex(&self, broker: i32) -> Result<DuplexStream> {
        if !self.with_state(move |s| s.broker_alive(broker)).await? {
            return Err(TestkitError::UnknownBroker(broker));
        }
        let (client, server) = tokio::io::duplex(DUPLEX_BUFFER);
        tokio::spawn(serve(server, broker, self.shared.clone()));
        Ok(client)
    }

    /// Creates a topic with `partitions` partitions (replication factor 1)
    /// and the given configs.
    ///
    /// # Errors
    /// [`TestkitError::Kafka`] with the code CreateTopics would return.
    pub async fn create_topic<K, V>(
        &self,
        name: &str,
        partitions: i32,
        configs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<()>
    where
        K: Into<String>,
        V: Into<String>,
    {
        self.create_replicated_topic(name, partitions, 1, configs)
            .await
    }

    /// Like [`Cluster::create_topic`], with `replication_factor` replicas
    /// per partition: when a broker is killed, its partitions fail over to
    /// the next live replica instead of going offline.
    ///
    /// # Errors
    /// [`TestkitError::Kafka`] with the code CreateTopics would return.
    pub async fn create_replicated_topic<K, V>(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<()>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let configs: BTreeMap<String, String> = configs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let name = name.to_owned();
        self.with_state(move |s| {
            super::topic_configs::validate(&configs)
                .and_then(|()| {
                    s.create_topic(&name, partitions, replication_factor, configs)
                        .map(|_| ())
                })
                .map_err(|(code, message)| TestkitError::Kafka {
                    operation: format!("creating topic {name}"),
                    code,
                    message,
                })
        })
        .await?
    }

    /// Waits until the markers of every transaction ended so far are
    /// written. Kafka answers EndTxn before it writes the markers (the
    /// testkit too, by default: see [`ClusterBuilder::txn_marker_delay`]),
    /// so a test that reads a transaction's outcome right after committing
    /// or aborting it waits here first, as a reader on Kafka would wait
    /// for the last stable offset to move. Returns at once under
    /// [`ClusterBuilder::instant_timing`].
    ///
    /// ```
    /// # tokio_test_block_on(async {
    /// let cluster = weir_testkit::Cluster::builder().build().await?;
    /// // ... commit a transaction ...
    /// cluster.markers_written().await?;
    /// // ... read_committed readers now see its outcome ...
    /// # Ok::<(), weir_testkit::TestkitError>(())
    /// # });
    /// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`TestkitError::TimedOut`] if markers are still pending after a
    /// minute of tokio's clock; [`TestkitError::ClusterStopped`].
    pub async fn markers_written(&self) -> Result<()> {
        const BOUND: Duration = Duration::from_secs(60);
        const EVERY: Duration = Duration::from_millis(1);
        let start = tokio::time::Instant::now();
        loop {
            if self.with_state(|s| s.pending_markers.is_empty()).await? {
                return Ok(());
            }
            if start.elapsed() >= BOUND {
                return Err(TestkitError::TimedOut {
                    what: "writing the pending transaction markers".to_owned(),
                    waited: BOUND,
                });
            }
            tokio::time::sleep(EVERY).await;
        }
    }

    /// The log start offset, last stable offset and high watermark of a partition.
    ///
    /// # Errors
    /// [`TestkitError::UnknownTopicOrPartition`].
    pub async fn offsets(&self, topic: &str, partition: i32) -> Result<(i64, i64, i64)> {
        let topic = topic.to_owned();
        self.with_state(move |s| {
            let log = partition_log(s, &topic, partition)?;
            Ok((
                log.log_start_offset(),
                log.last_stable_offset(),
                log.high_watermark(),
            ))
        })
        .await?
    }

    /// A partition's raw log: every stored batch (records and transaction
    /// markers), concatenated in offset order, as the bytes a Fetch would
    /// return. Read-only; for checkers that decode the log themselves
    /// instead of trusting the broker's read path.
    ///
    /// # Errors
    /// [`TestkitError::UnknownTopicOrPartition`].
    pub async fn raw_log(&self, topic: &str, partition: i32) -> Result<bytes::Bytes> {
        let topic = topic.to_owned();
        self.with_state(move |s| {
            let log = partition_log(s, &topic, partition)?;
            let mut out = bytes::BytesMut::new();
            for b in log.batches() {
                out.extend_from_slice(&b.bytes);
            }
            Ok(out.freeze())
        })
        .await?
    }

    /// Every transactional id the transaction coordinator knows whose
    /// transaction is not finished (Ongoing, PrepareCommit or
    /// PrepareAbort), with that state's name. Read-only.
    ///
    /// # Errors
    /// [`TestkitError::ClusterStopped`] if the state task is gone.
    pub async fn unfinished_transactions(&self) -> Result<Vec<(String, &'static str)>> {
        use crate::coordinator::txn::state::TxnState;
        self.with_state(|s| {
            s.txns
                .transactions()
                .filter(|t| {
                    matches!(
                        t.state,
                        TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
                    )
                })
                .map(|t| (t.transactional_id.clone(), t.state.name()))
                .collect()
        })
        .await
    }

    /// Compacts every partition of a `cleanup.policy=compact` topic now,
    /// below each partition's last stable offset. With `remove_tombstones`,
    /// null-value records go too (as once `delete.retention.ms` has passed).
    ///
    /// # Errors
    /// [`TestkitError::UnknownTopicOrPartition`], or [`TestkitError::Kafka`]
    /// with `INVALID_CONFIG` if the topic is not compacted.
    pub async fn compact(&self, topic: &str, remove_tombstones: bool) -> Result<CompactionStats> {
        let topic = topic.to_owned();
        self.with_state(move |s| {
            let t =
                s.topics
                    .get_mut(&topic)
                    .ok_or_else(|| TestkitError::UnknownTopicOrPartition {
                        topic: topic.clone(),
                        partition: -1,
                    })?;
            if !super::topic_configs::is_compacted(&t.configs) {
                return Err(TestkitError::Kafka {
                    operation: format!("compacting topic {topic}"),
                    code: weir_protocol::kafka_protocol::ResponseError::InvalidConfig.code(),
                    message: "cleanup.policy does not include compact".to_owned(),
                });
            }
            let mut total = CompactionStats::default();
            for p in &mut t.partitions {
                let stats = compaction::compact(&mut p.log, remove_tombstones);
                total.records_removed += stats.records_removed;
                total.batches_removed += stats.batches_removed;
                total.empty_batches_kept += stats.empty_batches_kept;
            }
            Ok(total)
        })
        .await?
    }

    /// Moves the leadership of a partition to broker `to`, bumping its
    /// leader epoch; clients still sending to the old leader get
    /// `NOT_LEADER_OR_FOLLOWER`.
    ///
    /// # Errors
    /// [`TestkitError::UnknownTopicOrPartition`] or [`TestkitError::UnknownBroker`].
    pub async fn move_leader(&self, topic: &str, partition: i32, to: i32) -> Result<()> {
        let topic = topic.to_owned();
        self.with_state(move |s| {
            s.move_leader(&topic, partition, to).map_err(|code| {
                if code == weir_protocol::kafka_protocol::ResponseError::BrokerNotAvailable.code() {
                    TestkitError::UnknownBroker(to)
                } else {
                    TestkitError::UnknownTopicOrPartition {
                        topic: topic.clone(),
                        partition,
                    }
                }
            })
        })
        .await?
    }

    /// Moves the coordinator of a group or transactional id to broker `to`,
    /// as Kafka does when the leadership of its `__consumer_offsets` or
    /// `__transaction_state` partition moves. The state (members,
    /// generations, offsets, open transactions) moves with it, as the new
    /// coordinator loads it from the log; requests still sent to the old
    /// broker get `NOT_COORDINATOR`, and FindCoordinator names the new one.
    /// Returns the broker that coordinated the key before.
    ///
    /// # Errors
    /// [`TestkitError::UnknownBroker`].
    pub async fn move_coordinator(&self, key: &str, to: i32) -> Result<i32> {
        let key = key.to_owned();
        self.with_state(move |s| {
            if usize::try_from(to)
                .ok()
                .and_then(|i| s.brokers.get(i))
                .is_none()
            {
                return Err(TestkitError::UnknownBroker(to));
            }
            let from = crate::coordinator::driver::coordinator_node(s, &key).unwrap_or(-1);
            s.coordinator_moves.insert(key.clone(), to);
            info!(key, from, to, "coordinator moved");
            Ok(from)
        })
        .await?
    }

    /// Stops a broker: its listener closes and its connections drop. Each
    /// partition it led moves to its next live replica (leader epoch + 1);
    /// a partition with no other live replica goes offline (Metadata reports
    /// `LEADER_NOT_AVAILABLE`) and, with [`DataOnRestart::Lose`], comes back
    /// empty, as if the broker's disk were wiped.
    ///
    /// # Errors
    /// [`TestkitError::UnknownBroker`].
    pub async fn kill_broker(&self, broker: i32, data: DataOnRestart) -> Result<()> {
        self.with_state(move |s| {
            let b = usize::try_from(broker)
                .ok()
                .and_then(|i| s.brokers.get_mut(i))
                .ok_or(TestkitError::UnknownBroker(broker))?;
            b.alive = false;
            b.listener = None;
            s.connections.retain(|_, c| c.broker != broker);
            let moved = s.fail_over_from(broker);
            if data == DataOnRestart::Lose {
                // Only partitions with no other live replica lose their data:
                // the others are on a follower that took over.
                for topic in s.topics.values_mut() {
                    for p in topic.partitions.iter_mut().filter(|p| p.leader == broker) {
                        p.log = PartitionLog::new();
                    }
                }
            }
            info!(broker, ?data, moved, "broker killed");
            Ok(())
        })
        .await?
    }

    /// Restarts a killed broker on the same port; offline partitions that
    /// have it as a replica get it as their leader again.
    ///
    /// # Errors
    /// [`TestkitError::UnknownBroker`] or [`TestkitError::Io`] if the port
    /// cannot be bound again.
    pub async fn restart_broker(&self, broker: i32) -> Result<()> {
        self.with_state(move |s| {
            let shared = s.shared.clone();
            let b = usize::try_from(broker)
                .ok()
                .and_then(|i| s.brokers.get_mut(i))
                .ok_or(TestkitError::UnknownBroker(broker))?;
            if b.alive {
                return Ok(());
            }
            let std = std::net::TcpListener::bind(("127.0.0.1", b.port)).map_err(|e| {
                TestkitError::io(format!("rebinding broker {broker} on port {}", b.port), e)
            })?;
            std.set_nonblocking(true)
                .map_err(|e| TestkitError::io("set_nonblocking", e))?;
            let listener = TcpListener::from_std(std)
                .map_err(|e| TestkitError::io("registering listener", e))?;
            b.listener = Some(spawn_listener(listener, broker, shared));
            b.alive = true;
            let elected = s.elect_offline_partitions(broker);
            info!(broker, elected, "broker restarted");
            Ok(())
        })
        .await?
    }

    /// Installs a request intercept; remove it with [`Cluster::remove_fault`].
    ///
    /// # Errors
    /// [`TestkitError::ClusterStopped`].
    pub async fn intercept(&self, intercept: Intercept) -> Result<FaultId> {
        self.with_state(move |s| s.faults.add_intercept(intercept))
            .await
    }

    /// Cuts a client off from a broker or a coordinator until healed.
    ///
    /// # Errors
    /// [`TestkitError::ClusterStopped`].
    pub async fn partition_client(
        &self,
        client: ClientSelector,
        target: PartitionTarget,
    ) -> Result<FaultId> {
        self.with_state(move |s| s.faults.add_partition(NetworkPartition { client, target }))
            .await
    }

    /// Removes an intercept or heals a partition; returns whether it existed.
    ///
    /// # Errors
    /// [`TestkitError::ClusterStopped`].
    pub async fn remove_fault(&self, id: FaultId) -> Result<bool> {
        self.with_state(move |s| s.faults.remove(id)).await
    }

    /// Removes every intercept and heals every partition.
    ///
    /// # Errors
    /// [`TestkitError::ClusterStopped`].
    pub async fn clear_faults(&self) -> Result<()> {
        self.with_state(|s| s.faults.clear()).await
    }

    /// Every request received so far (up to the log's capacity), oldest first.
    ///
    /// # Errors
    /// [`TestkitError::ClusterStopped`].
    pub async fn requests(&self) -> Result<Vec<LoggedRequest>> {
        self.with_state(|s| s.faults.requests().cloned().collect())
            .await
    }
}

/// What a killed broker keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataOnRestart {
    /// Its partitions keep their logs.
    Keep,
    /// The partitions it leads come back empty.
    Lose,
}

/// The log of `topic`/`partition`, or [`TestkitError::UnknownTopicOrPartition`].
fn partition_log<'s>(s: &'s ClusterState, topic: &str, partition: i32) -> Result<&'s PartitionLog> {
    s.partition(topic, partition)
        .map(|p| &p.log)
        .ok_or_else(|| TestkitError::UnknownTopicOrPartition {
            topic: topic.to_owned(),
            partition,
        })
}
