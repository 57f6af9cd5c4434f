//! The transaction coordinator (Kafka's `TransactionCoordinator` and
//! `TransactionStateManager`).
//!
//! - InitProducerId gives a new transactional id a fresh producer id; a
//!   re-init bumps the epoch (rotating the producer id when the epoch is
//!   exhausted) and, if a transaction is open, aborts it with a fenced
//!   epoch first and answers `CONCURRENT_TRANSACTIONS`, so that the client
//!   retries and gets a second bump, as Kafka does.
//! - AddPartitionsToTxn / AddOffsetsToTxn open the transaction (Ongoing) and
//!   start its timeout.
//! - EndTxn, a timeout or a fence end it: the coordinator emits a [`TxnEnd`]
//!   (through [`TxnCoordinator::take_ends`]) listing the partitions that need
//!   a COMMIT or ABORT marker and the groups whose staged offsets must be
//!   committed or dropped. Whoever owns the logs writes them at once, so the
//!   Prepare states never outlive one call.
//!
//! Like the group coordinator, it does no I/O and takes the time from the
//! caller.

pub mod state;

#[cfg(test)]
mod tests;

use std::time::Duration;

use indexmap::IndexMap;
use tokio::time::Instant;
use tracing::debug;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::records::ControlKind;

use state::{TopicPartition, TxnMetadata, TxnState};

/// The coordinator's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms` (Kafka: 15 minutes).
    pub max_timeout: Duration,
    /// The first producer id handed out.
    pub first_producer_id: i64,
    /// Zero: an ended transaction is complete at once (its markers are
    /// written before anything else is handled). Otherwise it stays in
    /// Prepare* until [`TxnCoordinator::complete`], which the cluster calls
    /// when it writes the markers this long after.
    pub marker_delay: Duration,
    /// Zero: a timed-out transaction is aborted at its deadline. Otherwise
    /// at the first multiple of this period (counted from the
    /// coordinator's first transaction) at or after it, as Kafka's scan.
    pub abort_scan_interval: Duration,
    /// The cluster's finalized `transaction.version` (0 to 2).
    pub transaction_version: i16,
}

impl Default for TxnConfig {
    fn default() -> Self {
        Self {
            max_timeout: Duration::from_secs(900),
            first_producer_id: 1000,
            marker_delay: Duration::ZERO,
            abort_scan_interval: Duration::ZERO,
            transaction_version: 0,
        }
    }
}

/// A transaction that has ended: the markers and offset completions to
/// apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnEnd {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id of the markers.
    pub producer_id: i64,
    /// The epoch of the markers (bumped when a fence or timeout aborted).
    pub producer_epoch: i16,
    /// Commit or abort.
    pub kind: ControlKind,
    /// Partitions that get a marker.
    pub partitions: Vec<TopicPartition>,
    /// Groups whose staged offsets of this producer complete.
    pub groups: Vec<String>,
}

/// All transactional ids of the cluster, with their producer ids, epochs and
/// open transactions.
#[derive(Debug, Default)]
pub struct TxnCoordinator {
    /// Settings.
    pub config: TxnConfig,
    txns: IndexMap<String, TxnMetadata>,
    /// Producer ids handed out so far (the next one is `config.first_producer_id + allocated`).
    allocated: i64,
    ends: Vec<TxnEnd>,
    wakeups: Vec<(Instant, String)>,
    /// When the abort scan's period started (the first transaction).
    scan_origin: Option<Instant>,
}

/// The code to send for `error` at `version`: clients older than KIP-588
/// (`fenced_since`, the first version that knows `PRODUCER_FENCED`) get
/// `INVALID_PRODUCER_EPOCH` instead, as Kafka does.
pub fn error_code_for(error: ResponseError, version: i16, fenced_since: i16) -> i16 {
    if error == ResponseError::ProducerFenced && version < fenced_since {
        ResponseError::InvalidProducerEpoch.code()
    } else {
        error.code()
    }
}

/// What InitProducerId answered.
pub type ProducerIdAndEpoch = (i64, i16);

impl TxnCoordinator {
    /// An empty coordinator with no transactional ids.
    pub fn new() -> Self {
        Self::default()
    }

    /// The metadata of a transactional id.
    pub fn transaction(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.txns.get(transactional_id)
    }

    /// Every transactional id, in creation order.
    pub fn transactions(&self) -> impl Iterator<Item = &TxnMetadata> {
        self.txns.values()
    }

    /// Transactions that ended since the last call; the caller writes their
    /// markers and completes their offsets.
    pub fn take_ends(&mut self) -> Vec<TxnEnd> {
        std::mem::take(&mut self.ends)
    }

    /// Deadlines (transaction timeouts) requested since the last call: at
    /// each, call [`on_timer`](Self::on_timer) with the transactional id.
    pub fn take_wakeups(&mut self) -> Vec<(Instant, String)> {
        std::mem::take(&mut self.wakeups)
    }

    /// When the abort scan first runs at or after `deadline`.
    fn next_scan(&mut self, deadline: Instant, now: Instant) -> Instant {
        let period = self.config.abort_scan_interval;
        if period.is_zero() {
            return deadline;
        }
        let origin = *self.scan_origin.get_or_insert(now);
        let since = deadline.saturating_duration_since(origin).as_nanos();
        let period_ns = period.as_nanos().max(1);
        let scans = since.div_ceil(period_ns);
        let offset = u64::try_from(scans.saturating_mul(period_ns)).unwrap_or(u64::MAX);
        origin + Duration::from_nanos(offset)
    }

    /// The markers of `tid`'s ended transaction are written: it moves from
    /// Prepare* to Complete* (see [`TxnConfig::marker_delay`]).
    pub fn complete(&mut self, tid: &str) {
        if let Some(meta) = self.txns.get_mut(tid) {
            meta.state = match meta.state {
                TxnState::PrepareCommit => TxnState::CompleteCommit,
                TxnState::PrepareAbort => TxnState::CompleteAbort,
                other => other,
            };
        }
    }

    fn allocate_producer_id(&mut self) -> i64 {
        let id = self.config.first_producer_id + self.allocated;
        self.allocated += 1;
        id
    }

    /// Whether a transactional batch of this producer may be written to the
    /// partition: its transaction is open at exactly this epoch and the
    /// partition was added to it.
    pub fn partition_in_txn(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> bool {
        self.txns.values().any(|t| {
            t.producer_id == producer_id
                && t.producer_epoch == producer_epoch
                && t.state == TxnState::Ongoing
                && t.partitions.contains(&(topic.to_owned(), partition))
        })
    }

    /// The error a transactional Produce of this producer gets, if any, as
    /// Kafka's partition leader answers after verifying the partition with
    /// the coordinator (KIP-890; `AddPartitionsToTxnManager` and
    /// `ReplicaManager` translate the coordinator's answer):
    ///
    /// - `INVALID_PRODUCER_ID_MAPPING`: no such transactional id, or it has
    ///   another producer id;
    /// - `INVALID_PRODUCER_EPOCH`: another epoch than the current one (the
    ///   coordinator says `PRODUCER_FENCED`, which the leader passes on as
    ///   `INVALID_PRODUCER_EPOCH`, the code producers expect on Produce);
    /// - `NOT_ENOUGH_REPLICAS`: the transaction is completing (Kafka's
    ///   translation of `CONCURRENT_TRANSACTIONS` for Produce; the testkit's
    ///   Prepare states never outlive one call, so this is not seen);
    /// - `INVALID_TXN_STATE`: no open transaction, or the partition is not in it.
    pub fn produce_error(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        topic: &str,
        partition: i32,
    ) -> Option<ResponseError> {
        let Some(meta) = self.txns.get(transactional_id) else {
            return Some(ResponseError::InvalidProducerIdMapping);
        };
        if meta.producer_id != producer_id {
            return Some(ResponseError::InvalidProducerIdMapping);
        }
        if meta.producer_epoch != producer_epoch {
            return Some(ResponseError::InvalidProducerEpoch);
        }
        match meta.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Some(ResponseError::NotEnoughReplicas)
            }
            TxnState::Ongoing if meta.partitions.contains(&(topic.to_owned(), partition)) => None,
            _ => Some(ResponseError::InvalidTxnState),
        }
    }

    /// Handles InitProducerId. `expected` is the producer id and epoch the
    /// client already has (v3+, KIP-360), if any.
    ///
    /// # Errors
    /// `INVALID_REQUEST`, `INVALID_TRANSACTION_TIMEOUT`, `PRODUCER_FENCED`
    /// or `CONCURRENT_TRANSACTIONS` (an open transaction was just aborted:
    /// retry).
    pub fn init_producer_id(
        &mut self,
        transactional_id: Option<&str>,
        timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
    ) -> Result<ProducerIdAndEpoch, ResponseError> {
        let Some(tid) = transactional_id else {
            // An idempotent producer: a fresh id every time.
            return Ok((self.allocate_producer_id(), 0));
        };
        if tid.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
        if timeout_ms <= 0 || timeout > self.config.max_timeout {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        if !self.txns.contains_key(tid) {
            let producer_id = self.allocate_producer_id();
            let meta = TxnMetadata {
                transactional_id: tid.to_owned(),
                producer_id,
                last_producer_id: -1,
                producer_epoch: 0,
                last_producer_epoch: -1,
                timeout,
                state: TxnState::Empty,
                partitions: Default::default(),
                groups: Default::default(),
                started: None,
                client_tv2: false,
            };
            self.txns.insert(tid.to_owned(), meta);
            debug!(transactional_id = tid, producer_id, "new transactional id");
            return Ok((producer_id, 0));
        }
        let new_id = self
            .txns
            .get(tid)
            .is_some_and(|m| TxnMetadata::epoch_exhausted(m.producer_epoch));
        let rotated_id = if new_id {
            Some(self.allocate_producer_id())
        } else {
            None
        };
        let Some(meta) = self.txns.get_mut(tid) else {
            return Err(ResponseError::UnknownServerError);
        };
        if let Some((pid, epoch)) = expected {
            let valid = pid == meta.producer_id
                || (pid == meta.last_producer_id && TxnMetadata::epoch_exhausted(epoch));
            if !valid {
                return Err(ResponseError::ProducerFenced);
            }
        }
        match meta.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Err(ResponseError::ConcurrentTransactions)
            }
            TxnState::Ongoing => {
                // Fence the previous owner: abort its transaction with a
                // bumped epoch (Kafka never returns this epoch), and make the
                // client retry, which bumps once more.
                meta.producer_epoch = meta.producer_epoch.saturating_add(1);
                meta.last_producer_epoch = -1;
                debug!(
                    transactional_id = tid,
                    producer_id = meta.producer_id,
                    epoch = meta.producer_epoch,
                    "InitProducerId fences an open transaction"
                );
                self.end(tid, false);
                Err(ResponseError::ConcurrentTransactions)
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let result = match (expected, rotated_id) {
                    // A retry of a bump whose answer was lost (also across
                    // a rotation: the old id with its exhausted epoch).
                    (Some((pid, epoch)), _)
                        if (pid == meta.producer_id
                            || (pid == meta.last_producer_id
                                && TxnMetadata::epoch_exhausted(epoch)))
                            && epoch == meta.last_producer_epoch
                            && epoch >= 0 =>
                    {
                        (meta.producer_id, meta.producer_epoch)
                    }
                    (Some((pid, epoch)), _)
                        if pid == meta.producer_id
                            && epoch != meta.producer_epoch
                            && epoch != -1 =>
                    {
                        return Err(ResponseError::ProducerFenced);
                    }
                    (_, Some(new_id)) => {
                        // Kafka's `prepareProducerIdRotation(recordLastEpoch =
                        // expected.isDefined)`: a KIP-360 caller may retry.
                        meta.last_producer_id = meta.producer_id;
                        meta.producer_id = new_id;
                        meta.last_producer_epoch = if expected.is_some() {
                            meta.producer_epoch
                        } else {
                            -1
                        };
                        meta.producer_epoch = 0;
                        (new_id, 0)
                    }
                    (_, None) => {
                        meta.last_producer_epoch = if expected.is_some() {
                            meta.producer_epoch
                        } else {
                            -1
                        };
                        meta.producer_epoch += 1;
                        (meta.producer_id, meta.producer_epoch)
                    }
                };
                meta.timeout = timeout;
                meta.state = TxnState::Empty;
                meta.partitions.clear();
                meta.groups.clear();
                meta.started = None;
                debug!(
                    transactional_id = tid,
                    producer_id = result.0,
                    epoch = result.1,
                    "producer epoch bumped"
                );
                Ok(result)
            }
        }
    }

    /// Checks a client's producer id and epoch against the transactional id
    /// (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn).
    fn check_producer(
        &self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<&TxnMetadata, ResponseError> {
        if tid.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        let meta = self
            .txns
            .get(tid)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        if meta.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if meta.producer_epoch != producer_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        Ok(meta)
    }

    /// Handles AddPartitionsToTxn (all partitions get the same answer).
    ///
    /// # Errors
    /// `INVALID_PRODUCER_ID_MAPPING`, `PRODUCER_FENCED` or
    /// `CONCURRENT_TRANSACTIONS`.
    pub fn add_partitions(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        now: Instant,
    ) -> Result<(), ResponseError> {
        self.add(tid, producer_id, producer_epoch, now, |m| {
            m.partitions.extend(partitions.iter().cloned());
        })
    }

    /// Handles AddOffsetsToTxn: the group's offsets join the transaction.
    ///
    /// # Errors
    /// As [`add_partitions`](Self::add_partitions).
    pub fn add_offsets(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
        group_id: &str,
        now: Instant,
    ) -> Result<(), ResponseError> {
        self.add(tid, producer_id, producer_epoch, now, |m| {
            m.groups.insert(group_id.to_owned());
        })
    }

    /// A partition joins the transaction implicitly, from a transactional
    /// Produce v12 of a client of transaction version 2 (Kafka's leader
    /// sends AddPartitionsToTxn v5 to the coordinator on its behalf).
    ///
    /// # Errors
    /// As [`add_partitions`](Self::add_partitions).
    pub fn add_partition_implicitly(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: TopicPartition,
        now: Instant,
    ) -> Result<(), ResponseError> {
        self.add_tv2(tid, producer_id, producer_epoch, now, |m| {
            m.partitions.insert(partition);
        })
    }

    /// A group's offsets join the transaction implicitly, from a
    /// TxnOffsetCommit v5 (transaction version 2).
    ///
    /// # Errors
    /// As [`add_partitions`](Self::add_partitions).
    pub fn add_offsets_implicitly(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
        group_id: &str,
        now: Instant,
    ) -> Result<(), ResponseError> {
        self.add_tv2(tid, producer_id, producer_epoch, now, |m| {
            m.groups.insert(group_id.to_owned());
        })
    }

    fn add_tv2(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
        now: Instant,
        f: impl FnOnce(&mut TxnMetadata),
    ) -> Result<(), ResponseError> {
        let starts =
            self.check_producer(tid, producer_id, producer_epoch)?.state != TxnState::Ongoing;
        self.add(tid, producer_id, producer_epoch, now, f)?;
        if starts && let Some(meta) = self.txns.get_mut(tid) {
            meta.client_tv2 = true;
        }
        Ok(())
    }

    fn add(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
        now: Instant,
        f: impl FnOnce(&mut TxnMetadata),
    ) -> Result<(), ResponseError> {
        let state = self.check_producer(tid, producer_id, producer_epoch)?.state;
        if matches!(state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let Some(meta) = self.txns.get_mut(tid) else {
            return Err(ResponseError::InvalidProducerIdMapping);
        };
        f(meta);
        if meta.state != TxnState::Ongoing {
            meta.client_tv2 = false;
            meta.state = TxnState::Ongoing;
            meta.started = Some(now);
            let deadline = now + meta.timeout;
            debug!(
                transactional_id = tid,
                producer_id,
                epoch = producer_epoch,
                "transaction started"
            );
            let at = self.next_scan(deadline, now);
            self.wakeups.push((at, tid.to_owned()));
        }
        Ok(())
    }

    /// Checks the producer of a TxnOffsetCommit. Kafka's group coordinator
    /// verifies it with the transaction coordinator as the partition leader
    /// verifies a Produce (KIP-890), so a fenced producer gets
    /// `INVALID_PRODUCER_EPOCH` here too, at every version.
    ///
    /// # Errors
    /// `INVALID_PRODUCER_EPOCH` (an epoch other than the current one),
    /// `INVALID_PRODUCER_ID_MAPPING` or `INVALID_TXN_STATE` (no open
    /// transaction).
    pub fn check_offset_commit(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
        group_id: &str,
    ) -> Result<(), ResponseError> {
        let Some(meta) = self.txns.get_mut(tid) else {
            return Err(ResponseError::InvalidProducerIdMapping);
        };
        if meta.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if producer_epoch != meta.producer_epoch {
            return Err(ResponseError::InvalidProducerEpoch);
        }
        if meta.state != TxnState::Ongoing {
            // Offsets staged outside a transaction would stay pending forever
            // (a hanging transaction), so they are refused.
            return Err(ResponseError::InvalidTxnState);
        }
        // A client that skipped AddOffsetsToTxn would otherwise leave its
        // staged offsets pending forever.
        meta.groups.insert(group_id.to_owned());
        Ok(())
    }

    /// Handles EndTxn.
    ///
    /// # Errors
    /// `INVALID_PRODUCER_ID_MAPPING`, `PRODUCER_FENCED`, `INVALID_TXN_STATE`
    /// or `CONCURRENT_TRANSACTIONS`.
    pub fn end_txn(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<(), ResponseError> {
        let state = self.check_producer(tid, producer_id, producer_epoch)?.state;
        match (state, commit) {
            (TxnState::Ongoing, _) => {
                self.end(tid, commit);
                Ok(())
            }
            // Retries of an EndTxn that already completed.
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(()),
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Err(ResponseError::ConcurrentTransactions)
            }
            _ => Err(ResponseError::InvalidTxnState),
        }
    }

    /// Handles EndTxn v5 (transaction version 2, KIP-890), as Kafka's
    /// `handleEndTransaction` does for a client of that version: the epoch
    /// is bumped at every commit or abort (a new producer id with epoch 0
    /// once it is exhausted) and the new producer id and epoch are
    /// returned. A retry names the epoch before the bump: it gets the
    /// same answer (or `CONCURRENT_TRANSACTIONS` while markers are being
    /// written); any other epoch is `PRODUCER_FENCED`.
    ///
    /// # Errors
    /// `INVALID_REQUEST`, `INVALID_PRODUCER_ID_MAPPING`, `PRODUCER_FENCED`,
    /// `INVALID_TXN_STATE` or `CONCURRENT_TRANSACTIONS`.
    pub fn end_txn_v2(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<ProducerIdAndEpoch, ResponseError> {
        if tid.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        let meta = self
            .txns
            .get(tid)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        // A retry across a rotation names the old producer id with its
        // exhausted epoch.
        let retry_on_overflow = meta.client_tv2
            && meta.last_producer_id == producer_id
            && TxnMetadata::epoch_exhausted(producer_epoch)
            && meta.producer_epoch == 0;
        let retry_on_bump =
            meta.client_tv2 && meta.producer_epoch == producer_epoch.wrapping_add(1);
        if meta.producer_id != producer_id && !retry_on_overflow {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        let current_epoch = producer_epoch == meta.producer_epoch && !retry_on_overflow;
        let retry = meta.client_tv2 && (retry_on_bump || retry_on_overflow);
        // Kafka 4.4 (checked against it): an abort with the current epoch
        // is accepted in every state, also when nothing of the transaction
        // reached the coordinator (Empty, or just after a completed
        // transaction): the epoch is bumped and no marker is written.
        let nothing_to_abort = !commit
            && current_epoch
            && matches!(
                meta.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            );
        let valid_epoch = match meta.state {
            TxnState::Ongoing | TxnState::Empty => current_epoch,
            TxnState::PrepareCommit | TxnState::PrepareAbort => retry || current_epoch,
            TxnState::CompleteCommit | TxnState::CompleteAbort => retry || nothing_to_abort,
        };
        if !valid_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        let current = (meta.producer_id, meta.producer_epoch);
        match (meta.state, commit) {
            (TxnState::Ongoing, _) => {}
            _ if nothing_to_abort => {}
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) if retry => {
                return Ok(current);
            }
            (TxnState::PrepareCommit | TxnState::PrepareAbort, _) => {
                return Err(ResponseError::ConcurrentTransactions);
            }
            _ => return Err(ResponseError::InvalidTxnState),
        }
        let rotated = if TxnMetadata::epoch_exhausted(meta.producer_epoch) {
            Some(self.allocate_producer_id())
        } else {
            None
        };
        let Some(meta) = self.txns.get_mut(tid) else {
            return Err(ResponseError::InvalidProducerIdMapping);
        };
        meta.client_tv2 = true;
        // The markers carry the bumped epoch (Kafka's
        // `prepareAbortOrCommit` under transaction version 2).
        meta.last_producer_epoch = meta.producer_epoch;
        meta.producer_epoch = meta.producer_epoch.saturating_add(1);
        let marker_epoch = meta.producer_epoch;
        if nothing_to_abort {
            meta.state = TxnState::CompleteAbort;
            meta.partitions.clear();
            meta.groups.clear();
            meta.started = None;
        } else {
            self.end(tid, commit);
        }
        let Some(meta) = self.txns.get_mut(tid) else {
            return Err(ResponseError::InvalidProducerIdMapping);
        };
        if let Some(new_id) = rotated {
            meta.last_producer_id = meta.producer_id;
            meta.producer_id = new_id;
            meta.producer_epoch = 0;
        }
        debug!(
            transactional_id = tid,
            producer_id = meta.producer_id,
            epoch = meta.producer_epoch,
            marker_epoch,
            "transaction version 2: epoch bumped at EndTxn"
        );
        Ok((meta.producer_id, meta.producer_epoch))
    }

    /// Aborts a transaction whose timeout passed: the epoch is bumped first,
    /// so the producer is fenced, as Kafka's `abortTimedOutTransactions`.
    pub fn on_timer(&mut self, tid: &str, now: Instant) {
        let Some(meta) = self.txns.get_mut(tid) else {
            return;
        };
        if meta.deadline().is_some_and(|d| d <= now) {
            // On a cluster of transaction version 2 Kafka 4.4 aborts as a
            // version-2 end (checked against it): the epoch before the bump
            // is kept, so the producer can recover with InitProducerId
            // naming it (KIP-360), and its own late EndTxn counts as a
            // retry (INVALID_TXN_STATE for a commit, not PRODUCER_FENCED).
            let tv2 = self.config.transaction_version >= 2;
            meta.last_producer_epoch = if tv2 { meta.producer_epoch } else { -1 };
            meta.client_tv2 = tv2;
            meta.producer_epoch = meta.producer_epoch.saturating_add(1);
            debug!(
                transactional_id = tid,
                producer_id = meta.producer_id,
                epoch = meta.producer_epoch,
                "transaction timed out; aborting"
            );
            self.end(tid, false);
        }
    }

    /// Moves an open transaction through Prepare* to Complete* and emits its
    /// markers.
    fn end(&mut self, tid: &str, commit: bool) {
        let Some(meta) = self.txns.get_mut(tid) else {
            return;
        };
        meta.state = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        let end = TxnEnd {
            transactional_id: tid.to_owned(),
            producer_id: meta.producer_id,
            producer_epoch: meta.producer_epoch,
            kind: if commit {
                ControlKind::Commit
            } else {
                ControlKind::Abort
            },
            partitions: std::mem::take(&mut meta.partitions).into_iter().collect(),
            groups: std::mem::take(&mut meta.groups).into_iter().collect(),
        };
        // Without a marker delay the caller writes the markers before it
        // handles anything else, so the transaction is complete as soon as
        // this call returns; with one it stays in Prepare* until then.
        if self.config.marker_delay.is_zero() {
            meta.state = if commit {
                TxnState::CompleteCommit
            } else {
                TxnState::CompleteAbort
            };
        }
        meta.started = None;
        debug!(
            transactional_id = tid,
            producer_id = end.producer_id,
            commit,
            partitions = end.partitions.len(),
            groups = end.groups.len(),
            "transaction ended"
        );
        self.ends.push(end);
    }
}
