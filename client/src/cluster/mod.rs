//! The cluster: bootstrap, metadata, leader routing, connection lanes,
//! retries, coordinator lookup.
//!
//! [`Cluster`] is a cheap-to-clone handle shared by the producer, the
//! consumer, the admin client and the group member. It does not retry on its
//! own: [`Cluster::request`] sends one request to one broker and reports what
//! happened; callers that want retries wrap their operation in
//! [`Cluster::retry`], which backs off exponentially with jitter and marks the
//! metadata stale when the error says it is.
//!
//! ```no_run
//! use weir_client::cluster::{Cluster, Lane};
//! use weir_client::config::ClientConfig;
//! use weir_protocol::kafka_protocol::messages::ListGroupsRequest;
//!
//! # async fn example() -> weir_client::Result<()> {
//! let config = ClientConfig::from_properties(&[("bootstrap.servers", "127.0.0.1:9092")])?;
//! let cluster = Cluster::connect(config).await?;
//! // Route by leader, retrying while a new topic gets its leader.
//! let leader = cluster
//!     .retry("leader of orders-0", || cluster.partition_leader("orders", 0))
//!     .await?;
//! // Any request, at the version both sides speak, on a lane of its own.
//! let groups = cluster
//!     .request(leader, Lane::Metadata, &ListGroupsRequest::default())
//!     .await?;
//! println!("{} groups on broker {leader}", groups.groups.len());
//! # Ok(())
//! # }
//! ```

mod coordinator;
pub mod metadata;
mod pool;
pub mod retry;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::Mutex as AsyncMutex;
use tokio::time::Instant;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use weir_protocol::kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use weir_protocol::kafka_protocol::protocol::{Request, StrBytes};

pub use coordinator::CoordinatorKind;
pub use metadata::{BrokerAddress, ClusterMetadata, PartitionMetadata, TopicMetadata};
use pool::Pool;
pub use retry::Backoff;

use crate::config::ClientConfig;
use crate::connection::{Messenger, ThrottleTime};
use crate::kerror::codes;
use crate::{ClientError, Result};

/// A broker's node id. Bootstrap addresses, whose ids are not known yet, get
/// the ids -1, -2, … in the order they were given.
pub type BrokerId = i32;

/// Which connection to a broker a request travels on. Each lane is its own
/// TCP connection, because a broker answers the requests of one connection
/// in order: a fetch that long-polls for 500 ms must not hold up a heartbeat
/// or a produce behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Lane {
    /// Produce requests and the producer's InitProducerId.
    Produce,
    /// Fetch and ListOffsets for the consumer.
    Fetch,
    /// Group coordinator traffic of a group member: join, sync, commits,
    /// offset fetches.
    Coordinator,
    /// A transactional producer's requests: InitProducerId,
    /// AddPartitionsToTxn, AddOffsetsToTxn and EndTxn to the transaction
    /// coordinator, TxnOffsetCommit to the group coordinator. Kept off
    /// [`Coordinator`](Lane::Coordinator): a member's JoinGroup is parked
    /// there for the whole rebalance, and a cooperative member must be able
    /// to commit a transaction meanwhile (KIP-429); Java's producer has
    /// connections of its own for the same reason.
    Transaction,
    /// Metadata, FindCoordinator and admin requests.
    Metadata,
    /// A group member's Heartbeat and LeaveGroup requests, which must never
    /// wait on the coordinator lane behind a JoinGroup the coordinator holds
    /// for the whole rebalance or a slow OffsetCommit: a delayed heartbeat
    /// can let the session expire, a delayed leave keeps partitions idle.
    Heartbeat,
}

struct Inner {
    config: ClientConfig,
    pool: Pool,
    metadata: RwLock<Arc<ClusterMetadata>>,
    /// Set by [`Cluster::invalidate`]: the next metadata lookup refreshes.
    stale: AtomicBool,
    /// One metadata refresh at a time; waiters reuse its result.
    refresh_lock: AsyncMutex<()>,
    coordinators: coordinator::CoordinatorCache,
}

/// A response with what was negotiated for it (see [`Cluster::request_at_most`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct Negotiated<T> {
    /// The version the request was sent at.
    pub version: i16,
    /// Whether the answering broker runs transaction version 2 (see
    /// [`Messenger::transaction_v2`]).
    pub transaction_v2: bool,
    /// The response.
    pub response: T,
}

/// A handle on the cluster, cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
    /// Whether Metadata requests from this handle may create topics; see
    /// [`Cluster::with_auto_create`].
    auto_create: bool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("bootstrap", &self.inner.config.bootstrap_servers)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects to the cluster: tries the bootstrap addresses in order until
    /// one answers a Metadata request, and learns the brokers from it.
    ///
    /// # Errors
    /// [`ClientError::InvalidProperty`] for an invalid config,
    /// [`ClientError::Bootstrap`] if no bootstrap address answers.
    pub async fn connect(config: ClientConfig) -> Result<Cluster> {
        config.validate()?;
        let options = config.connect_options()?;
        let cluster = Cluster {
            inner: Arc::new(Inner {
                pool: Pool::new(options),
                config,
                metadata: RwLock::new(Arc::new(ClusterMetadata::default())),
                stale: AtomicBool::new(false),
                refresh_lock: AsyncMutex::new(()),
                coordinators: coordinator::CoordinatorCache::default(),
            }),
            auto_create: false,
        };
        let cluster = cluster.with_auto_create(cluster.inner.config.allow_auto_create_topics);
        cluster.refresh_metadata(&[]).await?;
        // From now on brokers are dialled by node id; the bootstrap
        // connection would only sit idle.
        cluster.inner.pool.drop_bootstrap_connections();
        Ok(cluster)
    }

    /// A handle on the same cluster (same connections and cache) whose
    /// Metadata requests ask the broker to create missing topics, or not. The
    /// admin client never does: describing a deleted topic must not bring it back.
    pub fn with_auto_create(&self, allow: bool) -> Cluster {
        Cluster {
            inner: Arc::clone(&self.inner),
            auto_create: allow,
        }
    }

    /// The configuration this cluster was built from.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The metadata as last fetched, without any I/O.
    pub fn cached_metadata(&self) -> Arc<ClusterMetadata> {
        Arc::clone(
            &self
                .inner
                .metadata
                .read()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    fn store_metadata(&self, m: Arc<ClusterMetadata>) {
        *self
            .inner
            .metadata
            .write()
            .unwrap_or_else(|e| e.into_inner()) = m;
    }

    /// The partition count of `topic` from the cached metadata, if that is
    /// fresh (what [`metadata`](Self::metadata) would return without a
    /// request): the producer's per-record fast path.
    pub fn fresh_partition_count(&self, topic: &str) -> Option<usize> {
        if self.inner.stale.load(Ordering::Acquire) {
            return None;
        }
        let current = self.cached_metadata();
        current.fetched_at?;
        let max_age = self.inner.config.metadata_max_age;
        current
            .topic(topic)
            .filter(|t| t.error.is_none() && t.fetched_at.elapsed() < max_age)
            .map(|t| t.partitions.len())
    }

    /// Metadata covering `topics`: from the cache while every topic is known,
    /// error-free and younger than `metadata.max.age.ms`, otherwise refreshed
    /// for those topics. A topic's own error (e.g. `UNKNOWN_TOPIC_OR_PARTITION`
    /// while it is being created) is in [`TopicMetadata::error`], not an `Err`.
    ///
    /// # Errors
    /// Connection errors when no broker answers.
    pub async fn metadata(&self, topics: &[&str]) -> Result<Arc<ClusterMetadata>> {
        let current = self.cached_metadata();
        let max_age = self.inner.config.metadata_max_age;
        let fresh = |t: &TopicMetadata| t.error.is_none() && t.fetched_at.elapsed() < max_age;
        if !self.inner.stale.load(Ordering::Acquire)
            && current.fetched_at.is_some()
            && topics.iter().all(|t| current.topic(t).is_some_and(fresh))
        {
            return Ok(current);
        }
        self.refresh_metadata(topics).await
    }

    /// Fetches metadata for `topics` now (for no topic: just the brokers) and
    /// merges it into the cache. Concurrent refreshes are serialised, and one
    /// that finds the cache refreshed while it waited returns that instead.
    ///
    /// # Errors
    /// Connection errors when no broker answers.
    pub async fn refresh_metadata(&self, topics: &[&str]) -> Result<Arc<ClusterMetadata>> {
        self.refresh(Some(topics)).await
    }

    /// Fetches metadata for every topic in the cluster, replacing the cache.
    ///
    /// # Errors
    /// Connection errors when no broker answers.
    pub async fn refresh_all_metadata(&self) -> Result<Arc<ClusterMetadata>> {
        self.refresh(None).await
    }

    async fn refresh(&self, topics: Option<&[&str]>) -> Result<Arc<ClusterMetadata>> {
        let started = Instant::now();
        let _one_at_a_time = self.inner.refresh_lock.lock().await;
        let current = self.cached_metadata();
        if let Some(topics) = topics {
            let done_since = current.fetched_at.is_some_and(|t| t >= started)
                && topics
                    .iter()
                    .all(|t| current.topic(t).is_some_and(|m| m.fetched_at >= started));
            if done_since {
                return Ok(current);
            }
        }
        let request = MetadataRequest::default()
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string((*t).to_owned()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(self.auto_create);
        let response: MetadataResponse = self.request_any(Lane::Metadata, &request).await?;
        // Cleared only once fresh metadata is in hand: a failed refresh leaves
        // the cache marked stale for the next lookup.
        self.inner.stale.store(false, Ordering::Release);
        let merged = Arc::new(current.merged(&response, topics.is_none(), Instant::now()));
        tracing::debug!(
            brokers = merged.brokers.len(),
            topics = response.topics.len(),
            "metadata refreshed"
        );
        self.store_metadata(Arc::clone(&merged));
        Ok(merged)
    }

    /// Marks all metadata stale: the next lookup refreshes it.
    pub fn invalidate(&self) {
        self.inner.stale.store(true, Ordering::Release);
    }

    /// Forgets what is known about `topic`, so the next lookup refreshes it
    /// (after NOT_LEADER_OR_FOLLOWER, say).
    pub fn invalidate_topic(&self, topic: &str) {
        let current = self.cached_metadata();
        if current.topic(topic).is_some() {
            let mut next = (*current).clone();
            next.topics.remove(topic);
            self.store_metadata(Arc::new(next));
        }
    }

    /// The leader of `topic`-`partition`.
    ///
    /// # Errors
    /// [`ClientError::Server`] with the topic's or partition's error code (such
    /// as `UNKNOWN_TOPIC_OR_PARTITION`), or [`ClientError::NoLeader`]. Both
    /// are retriable when the condition is transient.
    pub async fn partition_leader(&self, topic: &str, partition: i32) -> Result<BrokerId> {
        let md = self.metadata(&[topic]).await?;
        let t = topic_or_error(&md, topic)?;
        let p = t.partition(partition).ok_or_else(|| ClientError::Server {
            code: crate::kerror::KafkaCode::from_code(codes::UNKNOWN_TOPIC_OR_PARTITION),
            api: ApiKey::Metadata,
            broker: None,
            topic: Some(topic.to_owned()),
            partition: Some(partition),
            message: Some(format!("the topic has {} partitions", t.partitions.len())),
        })?;
        if p.leader < 0 {
            if let Some(code) = p.error {
                return Err(ClientError::check(
                    code.code,
                    ApiKey::Metadata,
                    Some(topic),
                    Some(partition),
                )
                .err()
                .unwrap_or(ClientError::NoLeader {
                    topic: topic.to_owned(),
                    partition,
                }));
            }
            return Err(ClientError::NoLeader {
                topic: topic.to_owned(),
                partition,
            });
        }
        Ok(p.leader)
    }

    /// The number of partitions of `topic`.
    ///
    /// # Errors
    /// As [`partition_leader`](Self::partition_leader).
    pub async fn partition_count(&self, topic: &str) -> Result<usize> {
        let md = self.metadata(&[topic]).await?;
        Ok(topic_or_error(&md, topic)?.partitions.len())
    }

    /// The address of broker `broker`: from the metadata, or the bootstrap
    /// list for the ids -1, -2, ….
    ///
    /// # Errors
    /// [`ClientError::UnknownBroker`].
    pub fn broker_address(&self, broker: BrokerId) -> Result<String> {
        if let Some(b) = self.cached_metadata().brokers.get(&broker) {
            return Ok(b.addr());
        }
        if broker < 0 {
            let index = usize::try_from(-(i64::from(broker)) - 1).ok();
            if let Some(addr) = index.and_then(|i| self.inner.config.bootstrap_servers.get(i)) {
                return Ok(addr.clone());
            }
        }
        Err(ClientError::UnknownBroker(broker))
    }

    /// The live connection to `broker` on `lane`, opened if needed. Useful to
    /// learn the version a request will be sent at
    /// ([`Messenger::version_for`]) before building it.
    ///
    /// # Errors
    /// [`ClientError::UnknownBroker`] or connection errors.
    pub async fn connection(&self, broker: BrokerId, lane: Lane) -> Result<Arc<Messenger>> {
        let addr = self.broker_address(broker)?;
        self.inner.pool.get(broker, lane, &addr).await
    }

    /// Sends `req` to `broker` on `lane` at the negotiated version and returns
    /// the response. No retries: a lost connection is dropped from the pool
    /// (the next request dials again) and the error returned. Error codes
    /// inside the response are the caller's to check.
    ///
    /// # Errors
    /// [`ClientError::UnknownBroker`], connection and timeout errors.
    pub async fn request<R>(&self, broker: BrokerId, lane: Lane, req: &R) -> Result<R::Response>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        let conn = self.connection(broker, lane).await?;
        let result = conn.request(req).await;
        if result.as_ref().is_err_and(ClientError::is_network) {
            self.inner.pool.discard(broker, lane, &conn).await;
        }
        result
    }

    /// [`request`](Self::request) at no more than version `max` (see
    /// [`Messenger::version_at_most`]); returns the version used and
    /// whether that broker runs transaction version 2 with the response.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn request_at_most<R>(
        &self,
        broker: BrokerId,
        lane: Lane,
        req: &R,
        max: Option<i16>,
    ) -> Result<Negotiated<R::Response>>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        let conn = self.connection(broker, lane).await?;
        let transaction_v2 = conn.transaction_v2();
        let result = conn.request_at_most(req, max).await;
        if result.as_ref().is_err_and(ClientError::is_network) {
            self.inner.pool.discard(broker, lane, &conn).await;
        }
        let (version, response) = result?;
        Ok(Negotiated {
            version,
            transaction_v2,
            response,
        })
    }

    /// Queues `req` on the connection to `broker` on `lane` and returns as
    /// soon as its frame is queued, with a future for the response. Calls
    /// made one after another from one task put their requests on the wire
    /// in that order, while their responses are awaited concurrently (the
    /// producer's per-broker dispatch relies on this). As with
    /// [`request`](Self::request), a lost connection is dropped from the
    /// pool, whether the loss shows before or after queueing.
    ///
    /// # Errors
    /// As [`request`](Self::request): this call for failures before the
    /// frame is queued, the returned future for the rest.
    pub async fn enqueue<R>(
        &self,
        broker: BrokerId,
        lane: Lane,
        req: &R,
    ) -> Result<impl Future<Output = Result<R::Response>> + Send + 'static + use<R>>
    where
        R: Request + 'static,
        R::Response: ThrottleTime + Send + 'static,
    {
        self.enqueue_at_most(broker, lane, req, None).await
    }

    /// [`enqueue`](Self::enqueue) at no more than version `max` (see
    /// [`Messenger::version_at_most`]).
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue).
    pub async fn enqueue_at_most<R>(
        &self,
        broker: BrokerId,
        lane: Lane,
        req: &R,
        max: Option<i16>,
    ) -> Result<impl Future<Output = Result<R::Response>> + Send + 'static + use<R>>
    where
        R: Request + 'static,
        R::Response: ThrottleTime + Send + 'static,
    {
        let conn = self.connection(broker, lane).await?;
        let pending = match conn.enqueue_at_most(req, max).await {
            Ok(pending) => pending,
            Err(e) => {
                if e.is_network() {
                    self.inner.pool.discard(broker, lane, &conn).await;
                }
                return Err(e);
            }
        };
        let cluster = self.clone();
        Ok(async move {
            let result = pending.response().await;
            if result.as_ref().is_err_and(ClientError::is_network) {
                cluster.inner.pool.discard(broker, lane, &conn).await;
            }
            result
        })
    }

    /// [`request`](Self::request) with its own timeout instead of
    /// `request.timeout.ms`: for requests the broker may legitimately hold
    /// longer, such as JoinGroup (up to the rebalance timeout) or a Fetch
    /// with a long `max_wait_ms`.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn request_with_timeout<R>(
        &self,
        broker: BrokerId,
        lane: Lane,
        req: &R,
        timeout: std::time::Duration,
    ) -> Result<R::Response>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        let conn = self.connection(broker, lane).await?;
        let version = conn.version_for::<R>()?;
        let result = conn.request_at(version, req, timeout).await;
        if result.as_ref().is_err_and(ClientError::is_network) {
            self.inner.pool.discard(broker, lane, &conn).await;
        }
        result
    }

    /// Sends `req` to `broker` without waiting for a response (Produce with
    /// `acks=0`).
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn send_oneway<R: Request>(
        &self,
        broker: BrokerId,
        lane: Lane,
        req: &R,
    ) -> Result<()> {
        let conn = self.connection(broker, lane).await?;
        let result = conn.send_oneway(req).await;
        if result.as_ref().is_err_and(ClientError::is_network) {
            self.inner.pool.discard(broker, lane, &conn).await;
        }
        result
    }

    /// Brokers to try for a request any broker can answer: connected ones
    /// first, then the other known ones in random order, then the bootstrap
    /// addresses (in case every known broker has gone).
    pub(crate) fn any_broker_candidates(&self) -> Vec<BrokerId> {
        use rand::seq::SliceRandom;
        let md = self.cached_metadata();
        let connected: Vec<BrokerId> = self
            .inner
            .pool
            .connected_brokers()
            .into_iter()
            .filter(|b| md.brokers.contains_key(b))
            .collect();
        let mut others: Vec<BrokerId> = md
            .brokers
            .keys()
            .copied()
            .filter(|b| !connected.contains(b))
            .collect();
        others.shuffle(&mut rand::rng());
        let bootstrap = (0..self.inner.config.bootstrap_servers.len()).map(|i| -(i as i32) - 1);
        connected
            .into_iter()
            .chain(others)
            .chain(bootstrap)
            .collect()
    }

    /// Sends `req` to any broker that answers (see [`request`](Self::request)),
    /// moving on to the next one when a connection fails.
    ///
    /// # Errors
    /// [`ClientError::Bootstrap`] naming every address tried when none answers.
    pub async fn request_any<R>(&self, lane: Lane, req: &R) -> Result<R::Response>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        let mut tried = Vec::new();
        let mut last = None;
        for broker in self.any_broker_candidates() {
            match self.request(broker, lane, req).await {
                Err(e) if e.is_network() => {
                    tracing::debug!(broker, error = %e, "broker unreachable, trying the next");
                    tried.push(
                        self.broker_address(broker)
                            .unwrap_or_else(|_| broker.to_string()),
                    );
                    last = Some(e);
                }
                other => return other,
            }
        }
        Err(ClientError::Bootstrap {
            tried: tried.join(", "),
            last: Box::new(last.unwrap_or(ClientError::Closed)),
        })
    }

    /// The controller's node id, or any known broker when the metadata names
    /// none (a broker forwards controller requests in KRaft clusters).
    ///
    /// # Errors
    /// Connection errors when the metadata cannot be fetched.
    pub async fn controller(&self) -> Result<BrokerId> {
        let md = self.metadata(&[]).await?;
        if md.controller_id >= 0 && md.brokers.contains_key(&md.controller_id) {
            return Ok(md.controller_id);
        }
        Ok(self.any_broker_candidates().first().copied().unwrap_or(-1))
    }

    /// Sends `req` to the controller (admin requests such as CreateTopics).
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn request_controller<R>(&self, req: &R) -> Result<R::Response>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        let controller = self.controller().await?;
        self.request(controller, Lane::Metadata, req).await
    }

    /// Poisons the connection to `broker` on `lane` with `cause` and drops
    /// it: for bytes found bad after a response decoded, such as a corrupt
    /// record batch in a Fetch response. Requests still in flight on it fail
    /// with [`ClientError::Poisoned`]; the next request dials afresh.
    pub async fn poison_connection(&self, broker: BrokerId, lane: Lane, cause: ClientError) {
        tracing::warn!(broker, ?lane, error = %cause, "poisoning connection");
        self.inner.pool.poison(broker, lane, cause).await;
    }

    /// Closes every connection; later requests dial again.
    pub fn close_connections(&self) {
        self.inner.pool.clear();
    }
}

fn topic_or_error<'a>(md: &'a ClusterMetadata, topic: &str) -> Result<&'a TopicMetadata> {
    let t = md.topic(topic).ok_or_else(|| ClientError::Server {
        code: crate::kerror::KafkaCode::from_code(codes::UNKNOWN_TOPIC_OR_PARTITION),
        api: ApiKey::Metadata,
        broker: None,
        topic: Some(topic.to_owned()),
        partition: None,
        message: None,
    })?;
    if let Some(code) = t.error {
        return Err(ClientError::Server {
            code,
            api: ApiKey::Metadata,
            broker: None,
            topic: Some(topic.to_owned()),
            partition: None,
            message: None,
        });
    }
    Ok(t)
}

#[cfg(test)]
mod tests;
