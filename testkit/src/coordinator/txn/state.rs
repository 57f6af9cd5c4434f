//! One transactional id's metadata (Kafka's `TransactionMetadata`).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

/// The states of a transactional id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction open.
    Empty,
    /// Partitions or offsets were added; the transaction is open.
    Ongoing,
    /// EndTxn(commit) accepted; markers being written.
    PrepareCommit,
    /// EndTxn(abort), a fence or a timeout; markers being written.
    PrepareAbort,
    /// The last transaction committed.
    CompleteCommit,
    /// The last transaction aborted.
    CompleteAbort,
}

impl TxnState {
    /// The name Kafka's DescribeTransactions reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Ongoing => "Ongoing",
            Self::PrepareCommit => "PrepareCommit",
            Self::PrepareAbort => "PrepareAbort",
            Self::CompleteCommit => "CompleteCommit",
            Self::CompleteAbort => "CompleteAbort",
        }
    }
}

/// A topic partition.
pub type TopicPartition = (String, i32);

/// What the coordinator knows about one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    /// The transactional id.
    pub transactional_id: String,
    /// The current producer id.
    pub producer_id: i64,
    /// The producer id before the last rotation (-1 if none), so a retried
    /// InitProducerId is recognised.
    pub last_producer_id: i64,
    /// The current epoch.
    pub producer_epoch: i16,
    /// The epoch before the last client-requested bump (-1 if none).
    pub last_producer_epoch: i16,
    /// `transaction.timeout.ms` from the last InitProducerId.
    pub timeout: Duration,
    /// The state.
    pub state: TxnState,
    /// Partitions in the open transaction.
    pub partitions: BTreeSet<TopicPartition>,
    /// Groups whose offsets are in the open transaction.
    pub groups: BTreeSet<String>,
    /// When the open transaction started (its first AddPartitions/AddOffsets).
    pub started: Option<Instant>,
    /// Whether the last transaction was run by a client of transaction
    /// version 2 (KIP-890: Produce v12, TxnOffsetCommit v5, EndTxn v5),
    /// Kafka's `clientTransactionVersion`: EndTxn then bumps the epoch, and
    /// its retries are recognised by the epoch before the bump.
    pub client_tv2: bool,
}

impl TxnMetadata {
    /// Kafka's `isEpochExhausted`: the next bump would overflow, so the
    /// producer id is rotated instead.
    pub fn epoch_exhausted(epoch: i16) -> bool {
        epoch >= i16::MAX - 1
    }

    /// When the open transaction times out.
    pub fn deadline(&self) -> Option<Instant> {
        match self.state {
            TxnState::Ongoing => self.started.map(|s| s + self.timeout),
            _ => None,
        }
    }
}
