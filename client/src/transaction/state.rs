//! Where a transactional producer stands, and what each state refuses.

use std::collections::{BTreeSet, HashSet};
use weir_protocol::ApiKey;

use super::errors::{TransactionErrorClass, classify};
use crate::ClientError;
use crate::producer::{DeliveryGroup, TopicPartition};

/// The state machine of a [`TransactionalProducer`](super::TransactionalProducer).
///
/// ```text
/// Uninitialized --init_transactions--> Ready --begin--> InTransaction
/// InTransaction --commit--> Committing --EndTxn ok--> Ready
/// InTransaction | Abortable --abort--> Aborting --EndTxn ok--> Ready
/// InTransaction | Committing --abortable error--> Abortable
/// any --fenced--> Fatal (final)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransactionState {
    /// `init_transactions` has not succeeded yet.
    Uninitialized,
    /// No transaction is open; `begin` may start one.
    Ready,
    /// A transaction is open.
    InTransaction,
    /// A commit started and has not finished; `commit` again finishes it.
    Committing,
    /// An abort started and has not finished; `abort` again finishes it.
    Aborting,
    /// The open transaction failed; only `abort` is allowed.
    Abortable,
    /// The producer was fenced or refused for good; drop it.
    Fatal,
}

impl TransactionState {
    fn describe(self) -> &'static str {
        match self {
            TransactionState::Uninitialized => "before init_transactions",
            TransactionState::Ready => "outside a transaction (call begin first)",
            TransactionState::InTransaction => "inside an open transaction",
            TransactionState::Committing => "while a commit is unfinished (call commit again)",
            TransactionState::Aborting => "while an abort is unfinished (call abort again)",
            TransactionState::Abortable => "after an abortable error (call abort)",
            TransactionState::Fatal => "after a fatal error (drop the producer)",
        }
    }
}

/// Why an operation is refused in `state`.
pub(super) fn refusal(
    transactional_id: &str,
    operation: &'static str,
    state: TransactionState,
    fatal_cause: Option<i16>,
) -> ClientError {
    let refused = ClientError::TransactionState {
        transactional_id: transactional_id.to_owned(),
        operation,
        state: state.describe(),
    };
    match state {
        // Callers match on the class: these two keep saying what to do.
        TransactionState::Fatal | TransactionState::Abortable => ClientError::Transaction {
            transactional_id: transactional_id.to_owned(),
            operation,
            class: if state == TransactionState::Fatal {
                TransactionErrorClass::Fatal
            } else {
                TransactionErrorClass::Abortable
            },
            source: Box::new(match fatal_cause {
                Some(code) if state == TransactionState::Fatal => {
                    ClientError::server(code, ApiKey::InitProducerId)
                }
                _ => refused,
            }),
        },
        _ => refused,
    }
}

/// The outcome of the current transaction's records: a tally every record
/// of the transaction is counted in.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub group: DeliveryGroup,
}

impl Outcome {
    pub async fn wait_settled(&self) {
        self.group.settled().await;
    }

    /// The first failure: its class and Kafka code.
    pub fn first_failure(&self) -> Option<(TransactionErrorClass, Option<i16>)> {
        self.group
            .with_failure(|e| (classify(e).for_record(), e.kafka_code().map(|c| c.code)))
    }
}

/// Sends admitted into the open transaction: counted as pending in
/// [`Outcome`] from their admission, so a commit that begins meanwhile waits
/// for them. The producer counts each record again when it takes it; the
/// admission's count goes when it is dropped.
#[derive(Debug)]
pub(super) struct Admission {
    outcome: std::sync::Arc<Outcome>,
    count: usize,
}

impl Admission {
    /// Counts `count` more pending records; call with the progress lock
    /// held.
    pub fn new(outcome: std::sync::Arc<Outcome>, count: usize) -> Self {
        outcome.group.admit(count);
        Admission { outcome, count }
    }

    /// The tally the admitted records go to.
    pub fn group(&self) -> &DeliveryGroup {
        &self.outcome.group
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.outcome.group.release(self.count);
    }
}

/// Everything about the current transaction, under one lock never held
/// across an await.
#[derive(Debug)]
pub(super) struct Progress {
    pub state: TransactionState,
    pub producer_id: i64,
    pub epoch: i16,
    /// The Kafka code that made the producer fatal, if any.
    pub fatal_cause: Option<i16>,
    /// Partitions the coordinator has in the transaction.
    pub partitions: HashSet<TopicPartition>,
    /// Partitions waiting for the next AddPartitionsToTxn.
    pub waiting: BTreeSet<TopicPartition>,
    /// Groups whose offsets partition is in the transaction.
    pub groups: HashSet<String>,
    /// Whether the coordinator has anything in this transaction; if not,
    /// EndTxn is skipped (Kafka answers it with INVALID_TXN_STATE).
    pub coordinator_knows: bool,
    /// An AddPartitionsToTxn or AddOffsetsToTxn failed with its outcome
    /// unknown (retries ran out on a lost answer): the coordinator may hold
    /// an open transaction. Ending the transaction then sends EndTxn
    /// anyway, and an abort bumps the epoch (Java's `epochBumpRequired`).
    pub epoch_bump_required: bool,
    pub outcome: std::sync::Arc<Outcome>,
    /// Whether the current transaction runs under transaction version 2
    /// (KIP-890 part 2): its partitions and group offsets join implicitly
    /// (Produce v12, TxnOffsetCommit v5), and EndTxn v5 bumps the epoch.
    /// Fixed for a transaction at `begin`.
    pub transaction_v2: bool,
    /// What the coordinator said last (InitProducerId, EndTxn): the mode
    /// of the next transaction.
    pub next_transaction_v2: bool,
}

impl Progress {
    pub fn new() -> Self {
        Progress {
            state: TransactionState::Uninitialized,
            producer_id: -1,
            epoch: -1,
            fatal_cause: None,
            partitions: HashSet::new(),
            waiting: BTreeSet::new(),
            groups: HashSet::new(),
            coordinator_knows: false,
            epoch_bump_required: false,
            outcome: std::sync::Arc::default(),
            transaction_v2: false,
            next_transaction_v2: false,
        }
    }

    pub fn start_transaction(&mut self) {
        self.state = TransactionState::InTransaction;
        self.partitions.clear();
        self.waiting.clear();
        self.groups.clear();
        self.coordinator_knows = false;
        self.epoch_bump_required = false;
        self.outcome = std::sync::Arc::default();
        self.transaction_v2 = self.next_transaction_v2;
    }
}
