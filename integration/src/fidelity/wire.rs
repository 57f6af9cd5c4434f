//! The raw-request driver the scenarios run on: one kafka-protocol request
//! at a time through weir-client's [`Cluster`], at the versions both
//! brokers speak, with the answers returned as data (error codes are
//! observations here, not failures).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use weir_client::Cluster;
use weir_client::admin::{Admin, NewTopic};
use weir_client::cluster::{BrokerId, CoordinatorKind, Lane};
use weir_client::config::ClientConfig;
use weir_client::connection::ThrottleTime;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use weir_protocol::kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use weir_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use weir_protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use weir_protocol::kafka_protocol::messages::leave_group_request::MemberIdentity;
use weir_protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use weir_protocol::kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use weir_protocol::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use weir_protocol::kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use weir_protocol::kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use weir_protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DeleteRecordsRequest, DescribeGroupsRequest,
    EndTxnRequest, FetchRequest, GroupId, HeartbeatRequest, InitProducerIdRequest,
    JoinGroupRequest, LeaveGroupRequest, ListOffsetsRequest, OffsetFetchRequest, ProduceRequest,
    ProducerId, SyncGroupRequest, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use weir_protocol::kafka_protocol::protocol::{Request, StrBytes};
use weir_protocol::records::{
    BatchBuilder, BatchOptions, DecodeOptions, RecordBatch, RecordInput, decode_batches,
};

use super::Fallible;

/// Which broker a [`Wire`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// weir-testkit, in process, over TCP.
    Testkit,
    /// Apache Kafka at `$KAFKA_BOOTSTRAP`.
    Kafka,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Testkit => "testkit",
            Side::Kafka => "kafka",
        })
    }
}

/// The APIs the scenarios send.
pub const APIS: [ApiKey; 20] = [
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::Metadata,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::SyncGroup,
    ApiKey::CreateTopics,
    ApiKey::DeleteRecords,
    ApiKey::InitProducerId,
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::DescribeConfigs,
    ApiKey::DescribeGroups,
];

/// The highest version of each API that Weir's client would negotiate with
/// the broker at `bootstrap` (its advertised maximum, capped by
/// [`weir_client::connection::version_cap`], and, as Weir's transactional
/// producer does where the broker does not run transaction version 2, at
/// EndTxn 4, TxnOffsetCommit 4 and Produce 11), and its finalized
/// `transaction.version` (0 when it reports none). Keyed by API key.
///
/// # Errors
/// When the broker cannot be reached.
pub async fn negotiated_versions(bootstrap: &str) -> Fallible<(BTreeMap<i16, i16>, i16)> {
    let cluster = connect(bootstrap).await?;
    let md = cluster.metadata(&[]).await.map_err(|e| e.to_string())?;
    let broker = md
        .brokers
        .keys()
        .next()
        .copied()
        .ok_or("no brokers in the metadata")?;
    let conn = cluster
        .connection(broker, Lane::Metadata)
        .await
        .map_err(|e| e.to_string())?;
    let tv2 = conn.transaction_v2();
    let mut out = BTreeMap::new();
    for api in APIS {
        if let Some(r) = conn.versions().range(api) {
            let mut cap = weir_client::connection::version_cap(api).unwrap_or(i16::MAX);
            if !tv2 {
                cap = match api {
                    ApiKey::EndTxn | ApiKey::TxnOffsetCommit => cap.min(4),
                    ApiKey::Produce => cap.min(11),
                    _ => cap,
                };
            }
            out.insert(api as i16, r.max.min(cap));
        }
    }
    Ok((out, conn.transaction_version()))
}

/// Per API key, the lower of the two sides' negotiated versions: what the
/// scenarios send, so both brokers answer the same request.
pub fn common_versions(a: &BTreeMap<i16, i16>, b: &BTreeMap<i16, i16>) -> BTreeMap<i16, i16> {
    a.iter()
        .filter_map(|(api, va)| b.get(api).map(|vb| (*api, (*va).min(*vb))))
        .collect()
}

async fn connect(bootstrap: &str) -> Fallible<Cluster> {
    let config = ClientConfig::from_properties(&[
        ("bootstrap.servers", bootstrap),
        ("client.id", "weir-fidelity"),
        ("request.timeout.ms", "30000"),
        ("default.api.timeout.ms", "30000"),
    ])
    .map_err(|e| e.to_string())?;
    Cluster::connect(config).await.map_err(|e| e.to_string())
}

struct Inner {
    side: Side,
    bootstrap: String,
    versions: BTreeMap<i16, i16>,
    testkit: Option<Arc<weir_testkit::Cluster>>,
}

/// A raw-request driver on one side. Cheap to clone; [`Wire::fork`] gives
/// one with connections of its own (a second group member, whose requests
/// must not queue behind the first one's held JoinGroup).
#[derive(Clone)]
pub struct Wire {
    inner: Arc<Inner>,
    cluster: Cluster,
}

/// How long a poll for a condition on the broker may take.
pub const POLL_BOUND: Duration = Duration::from_secs(30);
/// Between two polls.
pub const POLL_EVERY: Duration = Duration::from_millis(50);

/// A record to produce: key, value, timestamp (ms since the epoch).
#[derive(Debug, Clone)]
pub struct Rec {
    /// The key (`None`: null).
    pub key: Option<String>,
    /// The value (`None`: a tombstone).
    pub value: Option<String>,
    /// Create time, ms since the epoch.
    pub timestamp: i64,
}

impl Rec {
    /// A record with a value only, stamped now.
    pub fn value(v: &str) -> Rec {
        Rec {
            key: None,
            value: Some(v.to_owned()),
            timestamp: now_ms(),
        }
    }
}

/// Who writes a batch: plain (no producer id), or a producer id, epoch and
/// first sequence, transactional or not.
#[derive(Debug, Clone, Copy)]
pub struct Writer {
    /// Producer id (-1: none).
    pub producer_id: i64,
    /// Epoch (-1: none).
    pub epoch: i16,
    /// First sequence (-1: none).
    pub sequence: i32,
    /// The transactional bit.
    pub transactional: bool,
}

impl Writer {
    /// No producer id: a plain, non-idempotent write.
    pub const PLAIN: Writer = Writer {
        producer_id: -1,
        epoch: -1,
        sequence: -1,
        transactional: false,
    };

    /// A transactional writer at `sequence`.
    pub fn txn(producer_id: i64, epoch: i16, sequence: i32) -> Writer {
        Writer {
            producer_id,
            epoch,
            sequence,
            transactional: true,
        }
    }
}

/// What a Fetch of one partition answered.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The partition's error code.
    pub code: i16,
    /// High watermark.
    pub hwm: i64,
    /// Last stable offset.
    pub lso: i64,
    /// Log start offset.
    pub log_start: i64,
    /// Aborted transactions (producer id, first offset); `None` if null.
    pub aborted: Option<Vec<(i64, i64)>>,
    /// The decoded batches.
    pub batches: Vec<RecordBatch>,
}

impl Fetched {
    /// (offset, value) of every data record, control batches left out.
    pub fn all_values(&self) -> Vec<(i64, String)> {
        self.batches
            .iter()
            .filter(|b| !b.header.is_control())
            .flat_map(|b| {
                b.records
                    .iter()
                    .map(|r| (r.offset, super::value_text(r.value.as_deref())))
            })
            .collect()
    }

    /// What a read_committed consumer delivers (see
    /// [`read_committed_view`](super::read_committed_view)).
    pub fn committed_values(&self) -> Vec<(i64, String)> {
        super::read_committed_view(&self.batches, self.aborted.as_deref().unwrap_or(&[]))
    }

    /// Offsets and kinds of the control batches (`COMMIT@4`).
    pub fn markers(&self) -> Vec<String> {
        self.batches
            .iter()
            .filter_map(|b| {
                b.control()
                    .map(|c| format!("{:?}@{}", c.kind, b.header.base_offset))
            })
            .collect()
    }
}

/// What a JoinGroup answered.
#[derive(Debug, Clone)]
pub struct Joined {
    /// Error code.
    pub code: i16,
    /// Generation.
    pub generation: i32,
    /// The member id given.
    pub member_id: String,
    /// The leader's member id.
    pub leader: String,
    /// The chosen protocol (assignor) name.
    pub protocol: Option<String>,
    /// skip_assignment (v9+).
    pub skip_assignment: bool,
    /// The members listed (to the leader): member id, instance id, metadata.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// How long JoinGroup and SyncGroup wait for the coordinator's answer (it
/// holds them while a rebalance is under way).
const GROUP_HOLD: Duration = Duration::from_secs(40);

/// Codes that only say "ask again or elsewhere", on either side, while a
/// coordinator is being found or loaded: retried by the helpers, never
/// observed.
fn coordinator_retriable(code: i16) -> bool {
    // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
    matches!(code, 14..=16)
}

impl Wire {
    /// Connects to `bootstrap`, to send at `versions`.
    ///
    /// # Errors
    /// When the broker cannot be reached.
    pub async fn connect(
        side: Side,
        bootstrap: &str,
        versions: BTreeMap<i16, i16>,
        testkit: Option<Arc<weir_testkit::Cluster>>,
    ) -> Fallible<Wire> {
        Ok(Wire {
            cluster: connect(bootstrap).await?,
            inner: Arc::new(Inner {
                side,
                bootstrap: bootstrap.to_owned(),
                versions,
                testkit,
            }),
        })
    }

    /// A driver on the same side with connections of its own.
    ///
    /// # Errors
    /// When the broker cannot be reached.
    pub async fn fork(&self) -> Fallible<Wire> {
        Ok(Wire {
            cluster: connect(&self.inner.bootstrap).await?,
            inner: Arc::clone(&self.inner),
        })
    }

    /// A driver on the same connections that sends every request at the
    /// version Weir's client negotiates with this broker (see
    /// [`negotiated_versions`]), not the common one: for what a broker
    /// does at its newest versions.
    ///
    /// # Errors
    /// When the broker cannot be reached.
    pub async fn negotiating(&self) -> Fallible<Wire> {
        let (versions, _) = negotiated_versions(&self.inner.bootstrap).await?;
        Ok(Wire {
            cluster: self.cluster.clone(),
            inner: Arc::new(Inner {
                side: self.inner.side,
                bootstrap: self.inner.bootstrap.clone(),
                versions,
                testkit: self.inner.testkit.clone(),
            }),
        })
    }

    /// The bootstrap servers.
    pub fn bootstrap(&self) -> &str {
        &self.inner.bootstrap
    }

    /// Which side this is.
    pub fn side(&self) -> Side {
        self.inner.side
    }

    /// The in-process testkit, on that side.
    pub fn testkit(&self) -> Option<&weir_testkit::Cluster> {
        self.inner.testkit.as_deref()
    }

    /// The version `api` is sent at.
    pub fn version(&self, api: ApiKey) -> Option<i16> {
        self.inner.versions.get(&(api as i16)).copied()
    }

    /// Sends `req` to `broker` at the common version of its API.
    ///
    /// # Errors
    /// Connection and protocol errors (not error codes).
    pub async fn send<Q>(&self, broker: BrokerId, lane: Lane, req: &Q) -> Fallible<Q::Response>
    where
        Q: Request,
        Q::Response: ThrottleTime,
    {
        let api = ApiKey::try_from(Q::KEY).map_err(|()| format!("unknown api key {}", Q::KEY))?;
        let max = self
            .version(api)
            .ok_or_else(|| format!("{api:?} is not spoken by both sides"))?;
        self.cluster
            .request_at_most(broker, lane, req, Some(max))
            .await
            .map(|n| n.response)
            .map_err(err)
    }

    /// Creates a topic (replication factor: the broker's default).
    ///
    /// # Errors
    /// When the broker refuses it or does not answer.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Fallible<()> {
        let admin = Admin::new(self.cluster.clone());
        let mut t = NewTopic::new(name, partitions).replication_factor(-1);
        for (k, v) in configs {
            t = t.config(*k, *v);
        }
        admin.create_topic(t).await.map_err(err)?;
        // Ready when every partition's leader answers ListOffsets.
        for p in 0..partitions {
            self.poll("the new topic's leader", || async move {
                let leader = self.cluster.partition_leader(name, p).await.ok()?;
                let (code, ..) = self.list_offsets_at(leader, name, p, -1, 0).await.ok()?;
                (code == 0).then_some(())
            })
            .await?;
        }
        Ok(())
    }

    /// Polls `f` every [`POLL_EVERY`] until it gives `Some`, for at most
    /// [`POLL_BOUND`].
    ///
    /// # Errors
    /// When the bound is reached, naming `what`.
    pub async fn poll<T, F, Fut>(&self, what: &str, mut f: F) -> Fallible<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + POLL_BOUND;
        loop {
            if let Some(v) = f().await {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(format!("{}: no {what} after {POLL_BOUND:?}", self.side()));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// The partition's leader, polled for while the topic is new.
    ///
    /// # Errors
    /// When no leader shows up within the bound.
    pub async fn leader(&self, topic: &str, partition: i32) -> Fallible<BrokerId> {
        self.poll("partition leader", || async move {
            self.cluster.partition_leader(topic, partition).await.ok()
        })
        .await
    }

    /// The coordinator of `key`, polled for while the internal topic is created.
    ///
    /// # Errors
    /// When none shows up within the bound.
    pub async fn coordinator(&self, kind: CoordinatorKind, key: &str) -> Fallible<BrokerId> {
        self.poll("coordinator", || async move {
            match self.cluster.find_coordinator(kind, key).await {
                Ok(b) => Some(b),
                Err(_) => {
                    self.cluster.invalidate_coordinator(kind, key);
                    None
                }
            }
        })
        .await
    }

    /// Runs `op` against the coordinator of `key` until its code is not one
    /// of the coordinator-moving or loading ones.
    async fn at_coordinator<T, F, Fut>(
        &self,
        kind: CoordinatorKind,
        key: &str,
        mut op: F,
    ) -> Fallible<T>
    where
        F: FnMut(BrokerId) -> Fut,
        Fut: Future<Output = Fallible<(i16, T)>>,
    {
        let deadline = Instant::now() + POLL_BOUND;
        loop {
            let broker = self.coordinator(kind, key).await?;
            let (code, v) = op(broker).await?;
            if !coordinator_retriable(code) {
                return Ok(v);
            }
            self.cluster.invalidate_coordinator(kind, key);
            if Instant::now() >= deadline {
                return Err(format!(
                    "{}: coordinator for {key} still answers {}",
                    self.side(),
                    super::code_name(code)
                ));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// Sends `req` on `lane` to the coordinator of `key` until the code
    /// `answer` reads from the response is not a coordinator-moving or
    /// loading one; returns what `answer` made of the last response. With
    /// `held`, the request waits that long for its response (JoinGroup and
    /// SyncGroup, which the coordinator holds during a rebalance); without,
    /// it is sent at the version both sides speak.
    async fn ask_coordinator<Q, T>(
        &self,
        kind: CoordinatorKind,
        key: &str,
        lane: Lane,
        req: &Q,
        held: Option<Duration>,
        answer: impl Fn(Q::Response) -> Fallible<(i16, T)>,
    ) -> Fallible<T>
    where
        Q: Request,
        Q::Response: ThrottleTime,
    {
        let answer = &answer;
        self.at_coordinator(kind, key, |b| async move {
            let r = match held {
                Some(timeout) => self
                    .cluster
                    .request_with_timeout(b, lane, req, timeout)
                    .await
                    .map_err(err)?,
                None => self.send(b, lane, req).await?,
            };
            answer(r)
        })
        .await
    }

    /// [`Self::ask_coordinator`] at the transaction coordinator of
    /// `transactional_id`, on the transaction lane.
    async fn ask_txn_coordinator<Q, T>(
        &self,
        transactional_id: &str,
        req: &Q,
        answer: impl Fn(Q::Response) -> Fallible<(i16, T)>,
    ) -> Fallible<T>
    where
        Q: Request,
        Q::Response: ThrottleTime,
    {
        let kind = CoordinatorKind::Transaction;
        self.ask_coordinator(kind, transactional_id, Lane::Transaction, req, None, answer)
            .await
    }

    /// [`Self::ask_coordinator`] at the group coordinator of `group`.
    async fn ask_group_coordinator<Q, T>(
        &self,
        group: &str,
        lane: Lane,
        req: &Q,
        held: Option<Duration>,
        answer: impl Fn(Q::Response) -> Fallible<(i16, T)>,
    ) -> Fallible<T>
    where
        Q: Request,
        Q::Response: ThrottleTime,
    {
        self.ask_coordinator(CoordinatorKind::Group, group, lane, req, held, answer)
            .await
    }

    // ---- produce, fetch, offsets ----

    /// Produces one batch of `records` to the partition's leader (acks=all);
    /// returns the partition's error code and base offset.
    ///
    /// # Errors
    /// Connection and encoding errors.
    pub async fn produce(
        &self,
        topic: &str,
        partition: i32,
        transactional_id: Option<&str>,
        writer: Writer,
        records: &[Rec],
    ) -> Fallible<(i16, i64)> {
        let mut builder = BatchBuilder::new(BatchOptions {
            producer_id: writer.producer_id,
            producer_epoch: writer.epoch,
            base_sequence: writer.sequence,
            transactional: writer.transactional,
            ..Default::default()
        });
        for r in records {
            builder.push(RecordInput {
                timestamp: r.timestamp,
                key: r.key.clone().map(Bytes::from),
                value: r.value.clone().map(Bytes::from),
                headers: vec![],
            });
        }
        let batch = builder.build().map_err(err)?;
        let req = ProduceRequest::default()
            .with_transactional_id(transactional_id.map(|t| TransactionalId(s(t))))
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(s(topic)))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(batch)),
                    ]),
            ]);
        let leader = self.leader(topic, partition).await?;
        let r = self.send(leader, Lane::Produce, &req).await?;
        let p = r
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .ok_or("empty Produce response")?;
        Ok((p.error_code, p.base_offset))
    }

    /// Fetches the partition from `offset` (no session, no wait), and on
    /// from where each answer ended while it returns records below the
    /// high watermark (last stable offset for read_committed), as a
    /// consumer does: Kafka answers from one log segment at a time. The
    /// error and offsets are the first answer's; the batches and aborted
    /// transactions are all of them.
    ///
    /// # Errors
    /// Connection and decoding errors.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        read_committed: bool,
    ) -> Fallible<Fetched> {
        let mut first = self
            .fetch_once(topic, partition, offset, read_committed)
            .await?;
        let limit = if read_committed { first.lso } else { first.hwm };
        let mut next = first.batches.last().map(|b| b.header.next_offset());
        for _ in 0..100 {
            let Some(from) = next.filter(|n| *n < limit && first.code == 0) else {
                break;
            };
            let more = self
                .fetch_once(topic, partition, from, read_committed)
                .await?;
            next = more.batches.last().map(|b| b.header.next_offset());
            first.batches.extend(more.batches);
            if let (Some(a), Some(b)) = (first.aborted.as_mut(), more.aborted) {
                for t in b {
                    if !a.contains(&t) {
                        a.push(t);
                    }
                }
            }
        }
        Ok(first)
    }

    async fn fetch_once(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        read_committed: bool,
    ) -> Fallible<Fetched> {
        let req = FetchRequest::default()
            .with_replica_id(weir_protocol::kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(1 << 20)
            .with_isolation_level(i8::from(read_committed))
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(s(topic)))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(offset)
                            .with_log_start_offset(-1)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]);
        let leader = self.leader(topic, partition).await?;
        let r = self.send(leader, Lane::Fetch, &req).await?;
        if r.error_code != 0 {
            return Err(format!("Fetch: {}", super::code_name(r.error_code)));
        }
        let p = r
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or("empty Fetch response")?;
        let batches = match &p.records {
            Some(bytes) if !bytes.is_empty() => {
                decode_batches(bytes, &DecodeOptions::default())
                    .map_err(err)?
                    .batches
            }
            _ => Vec::new(),
        };
        Ok(Fetched {
            code: p.error_code,
            hwm: p.high_watermark,
            lso: p.last_stable_offset,
            log_start: p.log_start_offset,
            aborted: p.aborted_transactions.as_ref().map(|v| {
                v.iter()
                    .map(|a| (a.producer_id.0, a.first_offset))
                    .collect()
            }),
            batches,
        })
    }

    /// Fetches from `offset` until the fetch's last stable offset reaches
    /// `lso`, polling within the bound (markers are written asynchronously
    /// on Kafka).
    ///
    /// # Errors
    /// When it does not within the bound.
    pub async fn fetch_when_stable(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        read_committed: bool,
        lso: i64,
    ) -> Fallible<Fetched> {
        self.poll("stable fetch", || async move {
            let f = self
                .fetch(topic, partition, offset, read_committed)
                .await
                .ok()?;
            (f.lso >= lso).then_some(f)
        })
        .await
    }

    /// ListOffsets for one partition: (code, offset, timestamp).
    ///
    /// # Errors
    /// Connection errors.
    pub async fn list_offsets(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: i8,
    ) -> Fallible<(i16, i64, i64)> {
        let leader = self.leader(topic, partition).await?;
        self.list_offsets_at(leader, topic, partition, timestamp, isolation)
            .await
    }

    async fn list_offsets_at(
        &self,
        broker: BrokerId,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: i8,
    ) -> Fallible<(i16, i64, i64)> {
        let req = ListOffsetsRequest::default()
            .with_replica_id(weir_protocol::kafka_protocol::messages::BrokerId(-1))
            .with_isolation_level(isolation)
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(partition)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(timestamp),
                    ]),
            ]);
        let r = self.send(broker, Lane::Metadata, &req).await?;
        let p = r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or("empty ListOffsets response")?;
        Ok((p.error_code, p.offset, p.timestamp))
    }

    /// Polls ListOffsets(latest, `isolation`) until it reaches `offset`.
    ///
    /// # Errors
    /// When it does not within the bound.
    pub async fn wait_latest(
        &self,
        topic: &str,
        partition: i32,
        isolation: i8,
        offset: i64,
    ) -> Fallible<()> {
        self.poll("latest offset", || async move {
            let (code, o, _) = self
                .list_offsets(topic, partition, -1, isolation)
                .await
                .ok()?;
            (code == 0 && o >= offset).then_some(())
        })
        .await
    }

    /// DeleteRecords before `offset`: (code, low watermark).
    ///
    /// # Errors
    /// Connection errors.
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Fallible<(i16, i64)> {
        let req = DeleteRecordsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![
                DeleteRecordsTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![
                        DeleteRecordsPartition::default()
                            .with_partition_index(partition)
                            .with_offset(offset),
                    ]),
            ]);
        let leader = self.leader(topic, partition).await?;
        let r = self.send(leader, Lane::Metadata, &req).await?;
        let p = r
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or("empty DeleteRecords response")?;
        Ok((p.error_code, p.low_watermark))
    }

    /// A topic config as DescribeConfigs reports it.
    ///
    /// # Errors
    /// Connection errors or a refused request.
    pub async fn topic_config(&self, topic: &str, key: &str) -> Fallible<Option<String>> {
        use weir_client::admin::ConfigResource;
        let admin = Admin::new(self.cluster.clone());
        let entries = admin
            .describe_configs(&ConfigResource::Topic(topic.to_owned()))
            .await
            .map_err(err)?;
        Ok(entries
            .into_iter()
            .find(|e| e.name == key)
            .and_then(|e| e.value))
    }

    // ---- the transaction coordinator ----

    /// InitProducerId: (code, producer id, epoch). `current` names this
    /// producer's id and epoch (KIP-360).
    ///
    /// # Errors
    /// Connection errors.
    pub async fn init_producer_id(
        &self,
        transactional_id: &str,
        timeout_ms: i32,
        current: Option<(i64, i16)>,
    ) -> Fallible<(i16, i64, i16)> {
        let (pid, epoch) = current.unwrap_or((-1, -1));
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s(transactional_id))))
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch);
        self.ask_txn_coordinator(transactional_id, &req, |r| {
            Ok((
                r.error_code,
                (r.error_code, r.producer_id.0, r.producer_epoch),
            ))
        })
        .await
    }

    /// InitProducerId for an idempotent producer (no transactional id),
    /// sent to `broker`: (code, producer id, epoch).
    ///
    /// # Errors
    /// Connection errors.
    pub async fn init_idempotent(&self, broker: BrokerId) -> Fallible<(i16, i64, i16)> {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(-1)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        // A broker answers COORDINATOR_LOAD_IN_PROGRESS until its
        // producer-id block is there (a fresh Kafka cluster): ask again.
        let deadline = Instant::now() + POLL_BOUND;
        loop {
            let r = self.send(broker, Lane::Produce, &req).await?;
            if !coordinator_retriable(r.error_code) || Instant::now() >= deadline {
                return Ok((r.error_code, r.producer_id.0, r.producer_epoch));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// AddPartitionsToTxn (v3 and below): the first non-zero code, top
    /// level or per partition.
    ///
    /// # Errors
    /// Connection errors.
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        topic: &str,
        partitions: &[i32],
    ) -> Fallible<i16> {
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(transactional_id)))
            .with_v3_and_below_producer_id(ProducerId(producer.0))
            .with_v3_and_below_producer_epoch(producer.1)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(partitions.to_vec()),
            ]);
        self.ask_txn_coordinator(transactional_id, &req, |r| {
            let code = std::iter::once(r.error_code)
                .chain(
                    r.results_by_topic_v3_and_below
                        .iter()
                        .flat_map(|t| t.results_by_partition.iter())
                        .map(|p| p.partition_error_code),
                )
                .find(|c| *c != 0)
                .unwrap_or(0);
            Ok((code, code))
        })
        .await
    }

    /// AddOffsetsToTxn: its code.
    ///
    /// # Errors
    /// Connection errors.
    pub async fn add_offsets(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        group: &str,
    ) -> Fallible<i16> {
        let req = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s(transactional_id)))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_group_id(GroupId(s(group)));
        self.ask_txn_coordinator(transactional_id, &req, |r| Ok((r.error_code, r.error_code)))
            .await
    }

    /// EndTxn: its code.
    ///
    /// # Errors
    /// Connection errors.
    pub async fn end_txn(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        commit: bool,
    ) -> Fallible<i16> {
        Ok(self
            .end_txn_epoch(transactional_id, producer, commit)
            .await?
            .0)
    }

    /// EndTxn: its code, and the producer id and epoch it returned
    /// (v5+, transaction version 2; -1 and -1 below).
    ///
    /// # Errors
    /// Connection errors.
    pub async fn end_txn_epoch(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        commit: bool,
    ) -> Fallible<(i16, i64, i16)> {
        let req = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s(transactional_id)))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_committed(commit);
        self.ask_txn_coordinator(transactional_id, &req, |r| {
            Ok((
                r.error_code,
                (r.error_code, r.producer_id.0, r.producer_epoch),
            ))
        })
        .await
    }

    /// TxnOffsetCommit of one offset, with the given group metadata: the
    /// partition's code.
    ///
    /// # Errors
    /// Connection errors.
    #[allow(clippy::too_many_arguments)]
    pub async fn txn_offset_commit(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Fallible<i16> {
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(s(transactional_id)))
            .with_group_id(GroupId(s(group)))
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_generation_id(generation)
            .with_member_id(s(member_id))
            .with_group_instance_id(instance_id.map(s))
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![
                        TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(partition)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(-1),
                    ]),
            ]);
        self.ask_group_coordinator(group, Lane::Transaction, &req, None, |r| {
            let code = r
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .map(|p| p.error_code)
                .ok_or("empty TxnOffsetCommit response")?;
            Ok((code, code))
        })
        .await
    }

    // ---- the group coordinator ----

    /// JoinGroup (protocol type "consumer") with one protocol per
    /// `(name, metadata)`; waits as long as the coordinator holds it.
    ///
    /// # Errors
    /// Connection errors.
    pub async fn join_group(
        &self,
        group: &str,
        member_id: &str,
        instance_id: Option<&str>,
        protocols: &[(&str, Bytes)],
    ) -> Fallible<Joined> {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(20_000)
            .with_member_id(s(member_id))
            .with_group_instance_id(instance_id.map(s))
            .with_protocol_type(s("consumer"))
            .with_protocols(
                protocols
                    .iter()
                    .map(|(name, meta)| {
                        JoinGroupRequestProtocol::default()
                            .with_name(s(name))
                            .with_metadata(meta.clone())
                    })
                    .collect(),
            );
        self.ask_group_coordinator(group, Lane::Coordinator, &req, Some(GROUP_HOLD), |r| {
            Ok((
                r.error_code,
                Joined {
                    code: r.error_code,
                    generation: r.generation_id,
                    member_id: r.member_id.to_string(),
                    leader: r.leader.to_string(),
                    protocol: r.protocol_name.as_ref().map(ToString::to_string),
                    skip_assignment: r.skip_assignment,
                    members: r
                        .members
                        .iter()
                        .map(|m| {
                            (
                                m.member_id.to_string(),
                                m.group_instance_id.as_ref().map(ToString::to_string),
                                m.metadata.clone(),
                            )
                        })
                        .collect(),
                },
            ))
        })
        .await
    }

    /// SyncGroup: (code, assignment bytes). The leader passes the
    /// assignments by member id.
    ///
    /// # Errors
    /// Connection errors.
    pub async fn sync_group(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        protocol: &str,
        assignments: &[(String, Bytes)],
    ) -> Fallible<(i16, Bytes)> {
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member_id))
            .with_group_instance_id(instance_id.map(s))
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s(protocol)))
            .with_assignments(
                assignments
                    .iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(m))
                            .with_assignment(a.clone())
                    })
                    .collect(),
            );
        self.ask_group_coordinator(group, Lane::Coordinator, &req, Some(GROUP_HOLD), |r| {
            Ok((r.error_code, (r.error_code, r.assignment.clone())))
        })
        .await
    }

    /// Heartbeat: its code.
    ///
    /// # Errors
    /// Connection errors.
    pub async fn heartbeat(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Fallible<i16> {
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member_id))
            .with_group_instance_id(instance_id.map(s));
        self.ask_group_coordinator(group, Lane::Heartbeat, &req, None, |r| {
            Ok((r.error_code, r.error_code))
        })
        .await
    }

    /// LeaveGroup (v3+ form) of one member: (top-level code, member's code).
    ///
    /// # Errors
    /// Connection errors.
    pub async fn leave_group(
        &self,
        group: &str,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Fallible<(i16, i16)> {
        let req = LeaveGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_members(vec![
                MemberIdentity::default()
                    .with_member_id(s(member_id))
                    .with_group_instance_id(instance_id.map(s)),
            ]);
        self.ask_group_coordinator(group, Lane::Heartbeat, &req, None, |r| {
            let member = r.members.first().map_or(-1, |m| m.error_code);
            Ok((r.error_code, (r.error_code, member)))
        })
        .await
    }

    /// DescribeGroups of one group: (code, state, protocol, member count).
    ///
    /// # Errors
    /// Connection errors.
    pub async fn describe_group(&self, group: &str) -> Fallible<(i16, String, String, usize)> {
        let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
        self.ask_group_coordinator(group, Lane::Metadata, &req, None, |r| {
            let g = r.groups.first().ok_or("empty DescribeGroups response")?;
            Ok((
                g.error_code,
                (
                    g.error_code,
                    g.group_state.to_string(),
                    g.protocol_data.to_string(),
                    g.members.len(),
                ),
            ))
        })
        .await
    }

    /// OffsetFetch (v8+ form) of one partition: (code, committed offset).
    ///
    /// # Errors
    /// Connection errors.
    pub async fn offset_fetch(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        require_stable: bool,
    ) -> Fallible<(i16, i64)> {
        let req = OffsetFetchRequest::default()
            .with_require_stable(require_stable)
            .with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s(group)))
                    .with_member_epoch(-1)
                    .with_topics(Some(vec![
                        OffsetFetchRequestTopics::default()
                            .with_name(TopicName(s(topic)))
                            .with_partition_indexes(vec![partition]),
                    ])),
            ]);
        self.ask_group_coordinator(group, Lane::Coordinator, &req, None, |r| {
            let g = r.groups.first().ok_or("empty OffsetFetch response")?;
            let (code, offset) = g.topics.first().and_then(|t| t.partitions.first()).map_or(
                (g.error_code, -1),
                |p| {
                    (
                        if g.error_code != 0 {
                            g.error_code
                        } else {
                            p.error_code
                        },
                        p.committed_offset,
                    )
                },
            );
            Ok((code, (code, offset)))
        })
        .await
    }
}
