//! Transactions: exactly-once consume-transform-produce (KIP-98, KIP-447).
//!
//! [`TransactionalProducer`] is a type of its own rather than a mode of
//! [`Producer`]: its operations only make sense in an order
//! (`init_transactions`, then `begin` … `commit`/`abort` again and again),
//! its errors carry a [`TransactionErrorClass`], and a plain producer should
//! not pay for, or be able to misuse, any of that. Underneath it drives an
//! ordinary idempotent [`Producer`] whose batches carry the transactional
//! bit and whose producer id and epoch only this type may change.
//!
//! ```no_run
//! # async fn demo() -> weir_client::Result<()> {
//! use std::collections::BTreeMap;
//! use weir_client::config::producer::ProducerConfig;
//! use weir_client::producer::{ProducerRecord, TopicPartition};
//! use weir_client::transaction::{GroupMetadata, TransactionConfig, TransactionalProducer};
//!
//! let config = ProducerConfig::from_properties(&[("bootstrap.servers", "127.0.0.1:9092")])?;
//! let producer = TransactionalProducer::new(config, TransactionConfig::new("orders-app-0")).await?;
//! producer.init_transactions().await?;
//! producer.begin()?;
//! producer.send(ProducerRecord::new("out").with_value("v")).await?;
//! let offsets = BTreeMap::from([(TopicPartition::new("in", 0), 42)]);
//! let group = GroupMetadata::unchecked("orders-app");
//! producer.send_offsets_to_transaction(&offsets, &group).await?;
//! producer.commit().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Which failures need what from the caller is documented in [`errors`].

pub mod errors;
pub mod offsets;
mod requests;
mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Mutex as AsyncMutex;

pub use errors::TransactionErrorClass;
pub use offsets::{GroupMetadata, fetch_stable_offsets};
pub use state::TransactionState;

use self::requests::TxnIdentity;
use self::state::Progress;
use crate::cluster::Cluster;
use crate::config::producer::{ProducerConfig, ProducerOptions};
use crate::kerror::codes;
use crate::producer::partitioner::partition_for_key;
use crate::producer::{
    DeliveryFuture, DeliveryGroup, Producer, ProducerRecord, Receivers, RecordMetadata,
    TopicPartition,
};
use crate::{ClientError, Result};

/// `transactional.id` and `transaction.timeout.ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionConfig {
    /// Names the producer across restarts: a new instance with the same id
    /// fences the old one and finishes its open transaction.
    pub transactional_id: String,
    /// How long the coordinator lets a transaction stay open before it
    /// aborts it (default 60 s).
    pub transaction_timeout: Duration,
}

impl TransactionConfig {
    /// The default timeout (60 s) for `transactional_id`.
    pub fn new(transactional_id: impl Into<String>) -> Self {
        TransactionConfig {
            transactional_id: transactional_id.into(),
            transaction_timeout: Duration::from_secs(60),
        }
    }

    /// Sets `transaction.timeout.ms`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_timeout = timeout;
        self
    }

    /// Takes `transactional.id` and `transaction.timeout.ms` out of
    /// Kafka-named properties and returns the rest (for the producer).
    ///
    /// # Errors
    /// [`ClientError::InvalidProperty`] for a missing id or a bad timeout.
    pub fn split_properties<'a>(
        props: &[(&'a str, &'a str)],
    ) -> Result<(TransactionConfig, Vec<(&'a str, &'a str)>)> {
        let mut id = None;
        let mut timeout = Duration::from_secs(60);
        let mut rest = Vec::new();
        for &(k, v) in props {
            match k {
                "transactional.id" => id = Some(v.to_owned()),
                "transaction.timeout.ms" => {
                    let ms: u64 = v.parse().map_err(|_| ClientError::InvalidProperty {
                        key: k.to_owned(),
                        value: v.to_owned(),
                        expected: "milliseconds".to_owned(),
                    })?;
                    timeout = Duration::from_millis(ms);
                }
                _ => rest.push((k, v)),
            }
        }
        let id = id
            .filter(|i| !i.is_empty())
            .ok_or_else(|| ClientError::InvalidProperty {
                key: "transactional.id".to_owned(),
                value: String::new(),
                expected: "a non-empty transactional id".to_owned(),
            })?;
        Ok((TransactionConfig::new(id).with_timeout(timeout), rest))
    }
}

/// A producer whose records and consumer offsets commit or abort together.
///
/// Every operation takes `&self`, so records can be sent from several tasks
/// at once; the transaction boundaries (`begin`, `commit`, `abort`) are
/// the caller's to order. A `send` that started before `commit` or `abort`
/// is part of the transaction (they wait for it); one that starts after is
/// refused. See the [module documentation](self).
pub struct TransactionalProducer {
    producer: Producer,
    config: TransactionConfig,
    progress: Mutex<Progress>,
    /// Serialises AddPartitionsToTxn: partitions that wait meanwhile go out
    /// together in the next request (batching), and no record of a
    /// partition is produced before the coordinator knows the partition.
    adding: AsyncMutex<()>,
    /// Round robin for records with neither a key nor a partition.
    next_partition: AtomicU32,
}

impl std::fmt::Debug for TransactionalProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionalProducer")
            .field("transactional_id", &self.config.transactional_id)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl TransactionalProducer {
    /// Connects and creates the producer. Call
    /// [`init_transactions`](Self::init_transactions) next.
    ///
    /// # Errors
    /// As [`Producer::new`].
    pub async fn new(config: ProducerConfig, txn: TransactionConfig) -> Result<Self> {
        config.validate()?;
        let cluster = Cluster::connect(config.client).await?;
        Self::with_cluster(cluster, config.producer, txn)
    }

    /// Creates the producer on an existing cluster handle. Idempotence is
    /// forced on: transactions need it.
    ///
    /// # Errors
    /// [`ClientError::InvalidProperty`] for options a transactional producer
    /// cannot have (`enable.idempotence=false`, `acks` other than `all`).
    pub fn with_cluster(
        cluster: Cluster,
        mut options: ProducerOptions,
        txn: TransactionConfig,
    ) -> Result<Self> {
        if options.enable_idempotence == Some(false) {
            return Err(ClientError::InvalidProperty {
                key: "enable.idempotence".to_owned(),
                value: "false".to_owned(),
                expected: "true with a transactional.id".to_owned(),
            });
        }
        options.enable_idempotence = Some(true);
        let producer =
            Producer::start_transactional(cluster, options, txn.transactional_id.clone())?;
        Ok(TransactionalProducer {
            producer,
            config: txn,
            progress: Mutex::new(Progress::new()),
            adding: AsyncMutex::new(()),
            next_partition: AtomicU32::new(0),
        })
    }

    /// Where the transaction stands.
    pub fn state(&self) -> TransactionState {
        self.lock().state
    }

    /// The `transactional.id`.
    pub fn transactional_id(&self) -> &str {
        &self.config.transactional_id
    }

    /// The cluster handle this producer sends through.
    pub fn cluster(&self) -> &Cluster {
        self.producer.cluster()
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        // Every mutation of `Progress` is a single step.
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn identity(&self) -> TxnIdentity {
        let p = self.lock();
        TxnIdentity {
            transactional_id: self.config.transactional_id.clone(),
            producer_id: p.producer_id,
            epoch: p.epoch,
        }
    }

    /// Wraps `source` as a transaction failure of its class, and moves the
    /// state to match (fatal sticks; abortable until `abort`).
    fn fail(&self, operation: &'static str, source: ClientError) -> ClientError {
        let class = errors::classify(&source);
        {
            let mut p = self.lock();
            match class {
                TransactionErrorClass::Fatal => {
                    p.state = TransactionState::Fatal;
                    p.fatal_cause = source.kafka_code().map(|c| c.code);
                }
                // Committing too (Java's COMMITTING_TRANSACTION ->
                // ABORTABLE_ERROR): an abortable EndTxn(commit) answer
                // (UNKNOWN_PRODUCER_ID, an unclassified code) tells the
                // caller to abort, and abort must then be allowed, or the
                // producer is stuck.
                TransactionErrorClass::Abortable
                    if matches!(
                        p.state,
                        TransactionState::InTransaction | TransactionState::Committing
                    ) =>
                {
                    p.state = TransactionState::Abortable;
                }
                _ => {}
            }
        }
        tracing::warn!(
            transactional_id = %self.config.transactional_id,
            operation,
            %class,
            error = %source,
            "transactional operation failed"
        );
        ClientError::Transaction {
            transactional_id: self.config.transactional_id.clone(),
            operation,
            class,
            source: Box::new(source),
        }
    }

    fn refuse(&self, operation: &'static str) -> ClientError {
        let p = self.lock();
        state::refusal(
            &self.config.transactional_id,
            operation,
            p.state,
            p.fatal_cause,
        )
    }

    /// Registers the transactional id with its coordinator: InitProducerId
    /// bumps the epoch, which fences any older instance with the same id
    /// and aborts the transaction it left open. Must be called once, first.
    ///
    /// # Errors
    /// [`ClientError::TransactionState`] if called twice;
    /// [`ClientError::Transaction`] (fatal when fenced or refused).
    pub async fn init_transactions(&self) -> Result<()> {
        if self.state() != TransactionState::Uninitialized {
            return Err(self.refuse("init_transactions"));
        }
        self.new_epoch("init_transactions", false).await
    }

    /// InitProducerId. `bump`: this instance bumps its own epoch (after an
    /// abort), naming its producer id and epoch (KIP-360), so that a newer
    /// instance that replaced it meanwhile is not fenced by it: this one
    /// gets `PRODUCER_FENCED` instead.
    async fn new_epoch(&self, operation: &'static str, bump: bool) -> Result<()> {
        let timeout_ms =
            i32::try_from(self.config.transaction_timeout.as_millis()).unwrap_or(i32::MAX);
        let current = if bump {
            let p = self.lock();
            (p.producer_id >= 0 && p.epoch >= 0).then_some((p.producer_id, p.epoch))
        } else {
            None
        };
        let got = requests::init_producer_id(
            self.cluster(),
            &self.config.transactional_id,
            timeout_ms,
            current,
        )
        .await
        .map_err(|e| self.fail(operation, e))?;
        self.adopt(got.producer_id, got.epoch);
        let mut p = self.lock();
        p.next_transaction_v2 = got.transaction_v2;
        p.state = TransactionState::Ready;
        tracing::debug!(
            transactional_id = %self.config.transactional_id,
            producer_id = got.producer_id,
            epoch = got.epoch,
            transaction_v2 = got.transaction_v2,
            "transactions initialised"
        );
        Ok(())
    }

    /// Takes a producer id and epoch the coordinator gave (InitProducerId,
    /// or EndTxn under transaction version 2): the next records are
    /// written as them, every sequence from 0.
    fn adopt(&self, producer_id: i64, epoch: i16) {
        self.producer.set_identity(producer_id, epoch);
        let mut p = self.lock();
        p.producer_id = producer_id;
        p.epoch = epoch;
    }

    /// Starts a transaction. Nothing goes to the coordinator until the
    /// first record or offsets.
    ///
    /// # Errors
    /// [`ClientError::TransactionState`] unless the previous transaction
    /// ended (or `init_transactions` just ran).
    pub fn begin(&self) -> Result<()> {
        let mut p = self.lock();
        if p.state != TransactionState::Ready {
            drop(p);
            return Err(self.refuse("begin"));
        }
        p.start_transaction();
        // Between transactions nothing is in flight: the Produce version
        // can change here.
        self.producer.set_transaction_v2(p.transaction_v2);
        Ok(())
    }

    /// Refuses `operation` unless a transaction is open, and counts it as
    /// pending until its outcome is known (or it fails before enqueueing).
    fn admit(&self, operation: &'static str, count: usize) -> Result<state::Admission> {
        let p = self.lock();
        if p.state != TransactionState::InTransaction {
            drop(p);
            return Err(self.refuse(operation));
        }
        Ok(state::Admission::new(Arc::clone(&p.outcome), count))
    }

    fn require_open(&self, operation: &'static str) -> Result<()> {
        if self.state() == TransactionState::InTransaction {
            Ok(())
        } else {
            Err(self.refuse(operation))
        }
    }

    /// Sends `record` in the current transaction and waits for the broker
    /// to acknowledge it. Its partition joins the transaction first
    /// (AddPartitionsToTxn), batched with partitions other callers need at
    /// the same moment. Acknowledged is not committed: read_committed
    /// consumers see the record only after [`commit`](Self::commit).
    ///
    /// # Errors
    /// [`ClientError::TransactionState`] outside a transaction;
    /// [`ClientError::Transaction`]: abortable when the record could not be
    /// written, fatal when fenced.
    pub async fn send(&self, record: ProducerRecord) -> Result<RecordMetadata> {
        let delivery = self.enqueue(record).await?;
        delivery.await
    }

    /// Like [`send`](Self::send), but returns once the record is buffered;
    /// the future gives its outcome. [`commit`](Self::commit) waits for
    /// every record either way and refuses to commit if one failed.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub async fn enqueue(
        &self,
        record: ProducerRecord,
    ) -> Result<impl std::future::Future<Output = Result<RecordMetadata>> + use<>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.enqueue_to(
            record,
            Receivers {
                tx: Some(tx),
                ..Receivers::default()
            },
        )
        .await?;
        let delivery = DeliveryFuture::from_receiver(rx);
        let id = self.config.transactional_id.clone();
        Ok(async move {
            delivery.await.map_err(|e| ClientError::Transaction {
                class: errors::classify(&e).for_record(),
                transactional_id: id,
                operation: "send",
                source: Box::new(e),
            })
        })
    }

    /// Like [`enqueue`](Self::enqueue), but counts the record's outcome in
    /// `group` instead of a future of its own (see
    /// [`Producer::enqueue_into`]). A failure in the tally is the
    /// producer's error for that record; [`commit`](Self::commit) refuses
    /// to commit after one either way.
    ///
    /// # Errors
    /// As [`send`](Self::send); a record refused here is not counted in
    /// `group`.
    pub async fn enqueue_into(&self, record: ProducerRecord, group: &DeliveryGroup) -> Result<()> {
        self.enqueue_to(
            record,
            Receivers {
                groups: [None, Some(group.shared())],
                ..Receivers::default()
            },
        )
        .await
    }

    /// [`enqueue_into`](Self::enqueue_into) for many records at once (see
    /// [`Producer::enqueue_all_into`]): each new partition joins the
    /// transaction first, then the records join their batches under one
    /// lock.
    ///
    /// # Errors
    /// As [`send`](Self::send), for the first record refused; the records
    /// before it may have been enqueued, those after it are not.
    pub async fn enqueue_all_into(
        &self,
        mut records: Vec<ProducerRecord>,
        group: &DeliveryGroup,
    ) -> Result<()> {
        // Admitted with the state check, as one send (see `enqueue_to`).
        let admitted = self.admit("send", records.len())?;
        let mut added: BTreeSet<(&str, i32)> = BTreeSet::new();
        for record in &mut records {
            if record.partition.is_none() {
                record.partition = Some(self.choose_partition(record).await?);
            }
        }
        for record in &records {
            let partition = record.partition.unwrap_or(0);
            if added.insert((record.topic.as_str(), partition)) {
                self.ensure_in_transaction(&TopicPartition::new(record.topic.clone(), partition))
                    .await?;
            }
        }
        drop(added);
        self.producer
            .enqueue_all_to(
                records,
                [Some(admitted.group().shared()), Some(group.shared())],
            )
            .await
            .map_err(|e| self.fail("send", e))
    }

    async fn enqueue_to(&self, mut record: ProducerRecord, mut receivers: Receivers) -> Result<()> {
        // Admitted (counted as pending) in the same step as the state
        // check: `commit` or `abort`, which start by leaving
        // InTransaction, then wait for every admitted record. Without
        // this a send checked before the commit began could produce after
        // the commit had stopped waiting: outside the transaction, with the
        // coordinator left holding an open one.
        let admitted = self.admit("send", 1)?;
        let partition = match record.partition {
            Some(p) => p,
            None => self.choose_partition(&record).await?,
        };
        record.partition = Some(partition);
        let tp = TopicPartition::new(record.topic.clone(), partition);
        self.ensure_in_transaction(&tp).await?;
        // The transaction's own tally counts the record for `commit`, even
        // if the caller drops its future; the producer counts it there
        // before the admission lets go.
        receivers.groups[0] = Some(admitted.group().shared());
        self.producer
            .enqueue_to(record, receivers)
            .await
            .map_err(|e| self.fail("send", e))
    }

    async fn choose_partition(&self, record: &ProducerRecord) -> Result<i32> {
        let cluster = self.cluster();
        let count = match cluster.fresh_partition_count(&record.topic) {
            Some(n) => n,
            None => cluster
                .retry("producer metadata", || {
                    cluster.partition_count(&record.topic)
                })
                .await
                .map_err(|e| self.fail("send", e))?,
        };
        let count = i32::try_from(count).unwrap_or(i32::MAX).max(1);
        Ok(match &record.key {
            Some(key) => partition_for_key(key, count),
            None => {
                let n = self.next_partition.fetch_add(1, Ordering::Relaxed);
                i32::try_from(n % count.unsigned_abs()).unwrap_or(0)
            }
        })
    }

    /// Makes sure `tp` is part of the transaction before any of its
    /// records is produced (else the broker refuses them).
    async fn ensure_in_transaction(&self, tp: &TopicPartition) -> Result<()> {
        {
            let mut p = self.lock();
            if p.partitions.contains(tp) {
                return Ok(());
            }
            if p.transaction_v2 {
                // Transaction version 2: the partition leader adds the
                // partition when the first Produce (v12) arrives. From now
                // on the coordinator may hold an open transaction.
                p.partitions.insert(tp.clone());
                p.coordinator_knows = true;
                return Ok(());
            }
            p.waiting.insert(tp.clone());
        }
        let _turn = self.adding.lock().await;
        let batch: Vec<TopicPartition> = {
            let mut p = self.lock();
            if p.partitions.contains(tp) {
                return Ok(());
            }
            let mut batch = std::mem::take(&mut p.waiting);
            // Another caller's request that failed may have taken `tp`
            // with it: it is not in the transaction, so it goes in this
            // one (and the batch is never empty).
            batch.insert(tp.clone());
            batch.into_iter().collect()
        };
        if let Err(e) = self.require_open("send") {
            self.put_back(batch);
            return Err(e);
        }
        let id = self.identity();
        match requests::add_partitions(self.cluster(), &id, &batch).await {
            Ok(()) => {
                let mut p = self.lock();
                p.partitions.extend(batch);
                p.coordinator_knows = true;
                Ok(())
            }
            Err(e) => {
                // Their callers (waiting for the turn) add them again.
                self.put_back(batch);
                self.note_unknown_outcome(&e);
                Err(self.fail("send", e))
            }
        }
    }

    /// After a failed AddPartitionsToTxn or AddOffsetsToTxn: if the
    /// request may have reached the coordinator (a retriable failure that
    /// outlasted the retries), the coordinator may hold an open
    /// transaction that only EndTxn or an epoch bump ends.
    fn note_unknown_outcome(&self, error: &ClientError) {
        if errors::classify(error) == TransactionErrorClass::Retriable {
            let mut p = self.lock();
            if !p.epoch_bump_required {
                tracing::debug!(
                    transactional_id = %self.config.transactional_id,
                    error = %error,
                    "outcome unknown: the coordinator may hold an open transaction"
                );
            }
            p.epoch_bump_required = true;
        }
    }

    /// Returns partitions a failed AddPartitionsToTxn took to `waiting`.
    fn put_back(&self, batch: Vec<TopicPartition>) {
        let mut p = self.lock();
        for tp in batch {
            if !p.partitions.contains(&tp) {
                p.waiting.insert(tp);
            }
        }
    }

    /// Puts consumer offsets into the transaction: they commit with its
    /// records or not at all. AddOffsetsToTxn to the transaction
    /// coordinator, then TxnOffsetCommit to the group coordinator with
    /// `group`'s generation, member id and instance id, which the
    /// coordinator checks so that a zombie that lost its partitions cannot
    /// commit for them.
    ///
    /// # Errors
    /// [`ClientError::TransactionState`] outside a transaction;
    /// [`ClientError::Transaction`], abortable for a stale membership
    /// (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `FENCED_INSTANCE_ID`)
    /// and for metadata with no generation that was not built by
    /// [`GroupMetadata::unchecked`] (its source is
    /// [`ClientError::NoGroupGeneration`]), fatal when fenced.
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &BTreeMap<TopicPartition, i64>,
        group: &GroupMetadata,
    ) -> Result<()> {
        self.require_open("send_offsets_to_transaction")?;
        if group.generation_id < 0 && !group.is_unchecked() {
            // A member without a generation (dropped, left after
            // max.poll.interval, not yet joined) would send the one
            // metadata the coordinator never checks: its offsets would
            // overwrite those of the partitions' new owner. The
            // transaction becomes abortable, so its records can't commit
            // without their offsets either.
            return Err(self.fail(
                "send_offsets_to_transaction",
                ClientError::NoGroupGeneration {
                    group: group.group_id.clone(),
                    generation: group.generation_id,
                    member_id: group.member_id.clone(),
                },
            ));
        }
        let id = self.identity();
        let (added, transaction_v2) = {
            let mut p = self.lock();
            if p.transaction_v2 {
                // Transaction version 2: TxnOffsetCommit v5 puts the
                // offsets partition into the transaction itself.
                p.coordinator_knows = true;
            }
            (p.groups.contains(&group.group_id), p.transaction_v2)
        };
        if !added && !transaction_v2 {
            requests::add_offsets(self.cluster(), &id, &group.group_id)
                .await
                .map_err(|e| {
                    self.note_unknown_outcome(&e);
                    self.fail("send_offsets_to_transaction", e)
                })?;
            let mut p = self.lock();
            p.groups.insert(group.group_id.clone());
            p.coordinator_knows = true;
        }
        requests::txn_offset_commit(self.cluster(), &id, group, offsets, transaction_v2)
            .await
            .map_err(|e| self.fail("send_offsets_to_transaction", e))
    }

    /// Sends every buffered record, then commits the transaction (EndTxn):
    /// its records and offsets become visible together.
    ///
    /// Idempotent under retry: after a [`Retriable`](TransactionErrorClass::Retriable)
    /// failure the state stays `Committing` and calling `commit` again
    /// finishes the same commit.
    ///
    /// # Errors
    /// [`ClientError::TransactionState`] outside a transaction;
    /// [`ClientError::Transaction`]: abortable when a record of the
    /// transaction failed (nothing was committed), fatal when fenced,
    /// retriable when the coordinator stayed unreachable.
    pub async fn commit(&self) -> Result<()> {
        self.end("commit", true).await
    }

    /// Aborts the transaction: none of its records or offsets ever become
    /// visible to read_committed consumers. Also the way out of an
    /// abortable error. Idempotent under retry like [`commit`](Self::commit).
    ///
    /// # Errors
    /// [`ClientError::TransactionState`] when no transaction is open;
    /// [`ClientError::Transaction`], fatal when fenced, retriable when the
    /// coordinator stayed unreachable.
    pub async fn abort(&self) -> Result<()> {
        self.end("abort", false).await
    }

    async fn end(&self, operation: &'static str, commit: bool) -> Result<()> {
        let allowed = {
            let mut p = self.lock();
            match (p.state, commit) {
                (TransactionState::InTransaction, true) | (TransactionState::Committing, true) => {
                    p.state = TransactionState::Committing;
                    true
                }
                (
                    TransactionState::InTransaction
                    | TransactionState::Abortable
                    | TransactionState::Aborting,
                    false,
                ) => {
                    p.state = TransactionState::Aborting;
                    true
                }
                _ => false,
            }
        };
        if !allowed {
            return Err(self.refuse(operation));
        }
        // Every record must have its outcome before EndTxn: a commit with
        // a record still in flight could leave it out of the transaction.
        self.producer.flush().await;
        let outcome = Arc::clone(&self.lock().outcome);
        outcome.wait_settled().await;
        if let Some((class, code)) = outcome.first_failure()
            && (commit || class == TransactionErrorClass::Fatal)
        {
            let source = match code {
                Some(code) => ClientError::server(code, weir_protocol::ApiKey::Produce),
                None => ClientError::TransactionState {
                    transactional_id: self.config.transactional_id.clone(),
                    operation,
                    state: "after a record of the transaction could not be delivered",
                },
            };
            let mut p = self.lock();
            p.state = if class == TransactionErrorClass::Fatal {
                p.fatal_cause = code;
                TransactionState::Fatal
            } else {
                TransactionState::Abortable
            };
            drop(p);
            return Err(ClientError::Transaction {
                transactional_id: self.config.transactional_id.clone(),
                operation,
                class,
                source: Box::new(source),
            });
        }
        let (knows, maybe_open, transaction_v2) = {
            let p = self.lock();
            (p.coordinator_knows, p.epoch_bump_required, p.transaction_v2)
        };
        // Under transaction version 2 the coordinator bumps the epoch at
        // every EndTxn and answers with the new one: the next transaction
        // must be written as it, or the coordinator refuses it as fenced.
        let mut bumped = false;
        if knows || maybe_open {
            // With only a request of unknown outcome behind it, the
            // coordinator may have no transaction open: its
            // INVALID_TXN_STATE then says there was nothing to end. (Not
            // InitProducerId straight away: naming this epoch while a
            // transaction is open, it would be fenced, as Java notes.)
            let id = self.identity();
            match requests::end_txn(self.cluster(), &id, commit, transaction_v2).await {
                Ok(ended) => {
                    if let Some((producer_id, epoch)) = ended.next {
                        self.adopt(producer_id, epoch);
                        bumped = true;
                    }
                    self.lock().next_transaction_v2 = ended.transaction_v2;
                }
                Err(e)
                    if !knows
                        && e.kafka_code().map(|c| c.code) == Some(codes::INVALID_TXN_STATE) =>
                {
                    tracing::debug!(
                        transactional_id = %self.config.transactional_id,
                        "no transaction was open at the coordinator"
                    );
                }
                Err(e) => return Err(self.fail(operation, e)),
            }
        }
        let records_failed = outcome.first_failure().is_some();
        self.lock().state = TransactionState::Ready;
        tracing::debug!(transactional_id = %self.config.transactional_id, commit, "transaction ended");
        if !bumped && (records_failed || (maybe_open && !commit)) {
            // A failed batch may have left the partition's sequence out of
            // step with the broker: start the next transaction on a new
            // epoch, where every sequence starts at 0 again. After a
            // request of unknown outcome the bump also fences anything of
            // this epoch still on its way (Java's `epochBumpRequired`).
            self.new_epoch(operation, true).await?;
            self.lock().epoch_bump_required = false;
        }
        Ok(())
    }

    /// Flushes, then stops the underlying producer. An open transaction is
    /// left to the coordinator (the next instance, or the timeout, aborts it).
    pub async fn close(&self) {
        self.producer.close().await;
    }

    /// Partitions in the current transaction (for tests and diagnostics).
    pub fn partitions_in_transaction(&self) -> BTreeSet<TopicPartition> {
        self.lock().partitions.iter().cloned().collect()
    }
}
