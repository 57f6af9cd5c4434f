//! An exactly-once checker: a consume-transform-produce workload run under
//! a seeded schedule of faults, then checked from the outside.
//!
//! **Workload.** `inputs` records with unique ids are spread over the input
//! partitions. An application instance reads them read_committed from the
//! group's stable offsets, and per transaction writes `out-<id>@<tag>` for
//! each (the tag names the instance and transaction), then commits the
//! input offsets with [`TransactionalProducer::send_offsets_to_transaction`].
//! When an instance dies, a new one with the same transactional id takes
//! over, as a restarted stream thread would. Errors are handled as Kafka
//! prescribes: after an abortable error (or a retriable one that outlasted
//! the API timeout) the instance aborts, rewinds to its committed positions
//! and redoes the work; a retriable `commit` is called again; a fenced
//! instance stops and a new one takes over. Instances run one after
//! another, so the only legitimate fence of a live instance is the
//! coordinator's abort of its own timed-out transaction: any other fatal
//! error fails the run.
//!
//! **Faults** ([`Fault`]), drawn from the seed, up to eight per schedule
//! over 8 to 48 inputs: an instance killed at a step of a transaction, a
//! transaction the application aborts, retriable coordinator errors
//! (`CONCURRENT_TRANSACTIONS`, `NOT_COORDINATOR`,
//! `COORDINATOR_LOAD_IN_PROGRESS`), abortable coordinator errors
//! (`TRANSACTION_ABORTABLE`, a zombie's `ILLEGAL_GENERATION`), a lost EndTxn
//! response, a dropped coordinator connection, a network partition between
//! the producer and its transaction coordinator, its group coordinator or
//! an output partition's leader (healed after a while), the transactional
//! id's or the group's coordinator moving to another broker with its state,
//! a lost or late Produce response (the idempotent deduplication path), an
//! output partition's leader moving (`NOT_LEADER_OR_FOLLOWER` at the old
//! one), `OUT_OF_ORDER_SEQUENCE_NUMBER` or `UNKNOWN_PRODUCER_ID` answers to
//! Produce, a transaction that outlives `transaction.timeout.ms` (the
//! coordinator aborts it and fences the instance), and AddPartitionsToTxn
//! going unanswered after the transaction's first one (with concurrent
//! sends, the race of review finding M2).
//!
//! **Shapes**, also drawn from the seed: the instance sends a
//! transaction's records one after another or all at once from concurrent
//! tasks; the input is plain or written by a transactional producer that
//! aborts some of its transactions (whose records must never be
//! processed); and the brokers verify transactional partitions with the
//! coordinator (Kafka 3.6+) or not (older brokers, where a batch for a
//! partition the client never added is written and hangs).
//!
//! **Time.** The cluster has [`BROKERS`] brokers and is reached in memory
//! ([`crate::testkit_dial`]); run a schedule on tokio's paused clock (as
//! `tests/eos_checker.rs` does) and every timeout, partition and retry is
//! exact and costs no real time.
//!
//! **Checks** ([`check`]): the committed output is read twice, once
//! through Weir's read_committed [`Consumer`] (the filter under test) and
//! once independently, by decoding the testkit's raw log of each output
//! partition and applying Kafka's visibility rule to its batches and
//! markers ([`visible_in_log`]). Both readings must agree, and in each,
//! every input id appears exactly once, no record of a transaction known
//! to be aborted is visible, and nothing is the output of an aborted input
//! record. At the end every output partition's last
//! stable offset must equal its high watermark and the transaction
//! coordinator must have no unfinished transaction (nothing hangs), and the
//! committed offsets must be the ends of the input partitions.
//!
//! A failure is a [`Violation`] whose message carries the seed and the
//! schedule, so the run can be replayed with [`Schedule::from_seed`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions, IsolationLevel};
use weir_client::config::producer::ProducerOptions;
use weir_client::consumer::{Consumer, SeekTo};
use weir_client::producer::{Producer, ProducerRecord, TopicPartition};
use weir_client::transaction::{
    GroupMetadata, TransactionConfig, TransactionErrorClass, TransactionalProducer,
    fetch_stable_offsets,
};
use weir_client::{ClientError, Cluster};
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;
use weir_protocol::records::{ControlKind, DecodeOptions, Record, decode_batches, split_batches};
use weir_testkit::{
    ClientSelector, FaultId, Intercept, InterceptAction, PartitionTarget, RequestMatcher,
};

use crate::testkit_dial::client_config;

type Kit = Arc<weir_testkit::Cluster>;

const INPUT: &str = "eos-in";
/// The output topic ([`read_committed`] reads it; `eos_group` writes it too).
pub const OUTPUT: &str = "eos-out";
const GROUP: &str = "eos-app";
const TRANSACTIONAL_ID: &str = "eos-app-0";
const INPUT_PARTITIONS: i32 = 2;
/// Partitions of [`OUTPUT`].
pub const OUTPUT_PARTITIONS: i32 = 3;
/// Brokers of the cluster a schedule runs on: coordinators and leaders are
/// spread over them, so partitions and coordinator moves hit different ones.
pub const BROKERS: i32 = 3;
/// How often the application calls `commit` or `abort` again after a
/// retriable error (each call retries for the 5 s API timeout itself).
const COMMIT_ATTEMPTS: usize = 4;

/// A step of a transaction at which an instance can die.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Right after `begin`.
    AfterBegin,
    /// After the first record was acknowledged.
    AfterSend,
    /// After the offsets were added (AddOffsetsToTxn + TxnOffsetCommit).
    AfterOffsets,
    /// While EndTxn is out: the coordinator commits, the answer is lost.
    DuringEndTxn,
}

/// When, inside its transaction, a partition or coordinator move starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// Before `begin`: the whole transaction runs into it.
    BeforeBegin,
    /// After the first record was acknowledged: the transaction is open.
    AfterSend,
}

/// What a network partition cuts the producer off from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutOff {
    /// The transactional id's coordinator (InitProducerId,
    /// AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit).
    TxnCoordinator,
    /// The group's coordinator (TxnOffsetCommit, OffsetFetch).
    GroupCoordinator,
    /// Every request to the broker leading this output partition.
    LeaderOf(i32),
}

/// Whose coordinator moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coordinated {
    /// The transactional id's.
    Transaction,
    /// The consumer group's.
    Group,
}

/// One injected fault, applied in the given transaction of the run
/// (counted over all instances, from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The instance dies at `step`; a new instance takes over.
    Kill {
        /// Transaction number.
        txn: usize,
        /// Where it dies.
        step: Step,
    },
    /// The application aborts the transaction and redoes the work.
    Abort {
        /// Transaction number.
        txn: usize,
    },
    /// The coordinator answers one request of `api` with `code`, a
    /// retriable error the client must absorb.
    CoordinatorError {
        /// Transaction number.
        txn: usize,
        /// AddPartitionsToTxn, TxnOffsetCommit or EndTxn.
        api: ApiKey,
        /// The Kafka error code.
        code: i16,
    },
    /// The coordinator handles one EndTxn but its answer is lost; the
    /// client times out and sends it again.
    LostEndTxnResponse {
        /// Transaction number.
        txn: usize,
    },
    /// The connection is closed on one AddOffsetsToTxn.
    DroppedConnection {
        /// Transaction number.
        txn: usize,
    },
    /// The coordinator refuses one request as abortable: AddPartitionsToTxn
    /// with `TRANSACTION_ABORTABLE`, or TxnOffsetCommit with
    /// `ILLEGAL_GENERATION` (as a zombie's would be). The application must
    /// abort and redo the transaction.
    AbortableError {
        /// Transaction number.
        txn: usize,
        /// AddPartitionsToTxn or TxnOffsetCommit.
        api: ApiKey,
    },
    /// The producer's requests to `target` are lost from `at` on, for
    /// `millis` ms; then the partition heals.
    Partition {
        /// Transaction number.
        txn: usize,
        /// When it starts.
        at: Moment,
        /// What the producer cannot reach.
        target: CutOff,
        /// How long it lasts.
        millis: u64,
    },
    /// The leader of one Produce request to an output partition writes its
    /// batches but the response is lost: the client times out and sends
    /// the same batches again, which the leader must recognise by their
    /// sequence numbers and acknowledge without writing them twice.
    LostProduceResponse {
        /// Transaction number.
        txn: usize,
        /// When it is installed (it hits the next Produce).
        at: Moment,
    },
    /// One Produce request is handled only after `millis` ms: past the
    /// request timeout, the client sends the batches again while the
    /// first attempt is still on its way.
    DelayedProduce {
        /// Transaction number.
        txn: usize,
        /// When it is installed.
        at: Moment,
        /// How long the first attempt is held.
        millis: u64,
    },
    /// The leadership of an output partition moves to another broker
    /// (leader epoch + 1); Produce still sent to the old leader is
    /// answered `NOT_LEADER_OR_FOLLOWER`.
    MoveLeader {
        /// Transaction number.
        txn: usize,
        /// When it moves.
        at: Moment,
        /// The output partition.
        partition: i32,
        /// Brokers to move by (1 or 2, modulo [`BROKERS`]).
        by: i32,
    },
    /// Once the transaction has written, one Produce is refused, unwritten,
    /// with `code`: `OUT_OF_ORDER_SEQUENCE_NUMBER` (45), as a leader
    /// answers a batch whose sequence does not follow the producer state
    /// it has (after losing the tail of its log), or `UNKNOWN_PRODUCER_ID`
    /// (59), as a broker before Kafka 2.5 answers once retention deleted
    /// the producer's state. Both fail the batch; the transaction must be
    /// aborted and redone, on a new epoch.
    SequenceError {
        /// Transaction number.
        txn: usize,
        /// 45 or 59.
        code: i16,
    },
    /// The transaction coordinator answers the transaction's first
    /// AddPartitionsToTxn after 100 ms and then none for `millis` ms (more
    /// than the 5 s API timeout): with concurrent sends, the callers queued
    /// behind the first one have their partitions taken by a request that
    /// fails as retriable, the race of review finding M2.
    StalledAddPartitions {
        /// Transaction number.
        txn: usize,
        /// How long AddPartitionsToTxn goes unanswered.
        millis: u64,
    },
    /// After its first record, the application stalls for longer than
    /// `transaction.timeout.ms`: the coordinator aborts the transaction
    /// and bumps the epoch, so the instance is fenced and a new one redoes
    /// the work.
    TransactionTimeout {
        /// Transaction number.
        txn: usize,
    },
    /// The coordinator of the transactional id or of the group moves to
    /// another broker, state included; the old one answers NOT_COORDINATOR.
    MoveCoordinator {
        /// Transaction number.
        txn: usize,
        /// When it moves.
        at: Moment,
        /// Whose coordinator.
        of: Coordinated,
        /// The broker it moves to (the next one if it is there already).
        to: i32,
    },
}

impl Fault {
    fn txn(self) -> usize {
        match self {
            Fault::Kill { txn, .. }
            | Fault::Abort { txn }
            | Fault::CoordinatorError { txn, .. }
            | Fault::LostEndTxnResponse { txn }
            | Fault::DroppedConnection { txn }
            | Fault::AbortableError { txn, .. }
            | Fault::Partition { txn, .. }
            | Fault::LostProduceResponse { txn, .. }
            | Fault::DelayedProduce { txn, .. }
            | Fault::MoveLeader { txn, .. }
            | Fault::SequenceError { txn, .. }
            | Fault::TransactionTimeout { txn }
            | Fault::StalledAddPartitions { txn, .. }
            | Fault::MoveCoordinator { txn, .. } => txn,
        }
    }

    /// The variant's name, as counted in [`Observed::effects`].
    pub fn kind(self) -> &'static str {
        match self {
            Fault::Kill { .. } => "Kill",
            Fault::Abort { .. } => "Abort",
            Fault::CoordinatorError { .. } => "CoordinatorError",
            Fault::LostEndTxnResponse { .. } => "LostEndTxnResponse",
            Fault::DroppedConnection { .. } => "DroppedConnection",
            Fault::AbortableError { .. } => "AbortableError",
            Fault::Partition { .. } => "Partition",
            Fault::LostProduceResponse { .. } => "LostProduceResponse",
            Fault::DelayedProduce { .. } => "DelayedProduce",
            Fault::MoveLeader { .. } => "MoveLeader",
            Fault::SequenceError { .. } => "SequenceError",
            Fault::TransactionTimeout { .. } => "TransactionTimeout",
            Fault::StalledAddPartitions { .. } => "StalledAddPartitions",
            Fault::MoveCoordinator { .. } => "MoveCoordinator",
        }
    }
}

/// Every [`Fault::kind`], for coverage checks over many seeds.
pub const FAULT_KINDS: [&str; 14] = [
    "Kill",
    "Abort",
    "CoordinatorError",
    "LostEndTxnResponse",
    "DroppedConnection",
    "AbortableError",
    "Partition",
    "LostProduceResponse",
    "DelayedProduce",
    "MoveLeader",
    "SequenceError",
    "TransactionTimeout",
    "StalledAddPartitions",
    "MoveCoordinator",
];

/// How an instance sends the records of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sends {
    /// `send` after `send`, each acknowledgement awaited.
    Sequential,
    /// Every `send` on its own task, all in flight at once: callers race
    /// in AddPartitionsToTxn and in the producer.
    Concurrent,
    /// `enqueue` after `enqueue` without awaiting the deliveries (as a
    /// stream thread does), then `commit`, which must wait for them all
    /// and refuse if one failed.
    Buffered,
}

/// One transaction of the transactional input loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputTxn {
    /// Records it writes.
    pub records: usize,
    /// Whether the loader aborts it: its records carry ids from
    /// [`ABORTED_INPUT_BASE`] on and must never be processed.
    pub aborted: bool,
}

/// The first id of the records of aborted input transactions.
pub const ABORTED_INPUT_BASE: usize = 1_000_000;

/// A replayable fault schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Input records.
    pub inputs: usize,
    /// Input records per transaction.
    pub per_txn: usize,
    /// Faults, in transaction order.
    pub faults: Vec<Fault>,
    /// How the instance sends a transaction's records.
    pub sends: Sends,
    /// Empty: the input is written without transactions. Otherwise the
    /// input is written by a transactional producer in these transactions,
    /// in order; the committed ones hold the `inputs` ids.
    pub input_transactions: Vec<InputTxn>,
    /// Whether the brokers verify a transactional batch's partition with
    /// the coordinator before appending it (Kafka 3.6+,
    /// `transaction.partition.verification.enable`). Without it, as in
    /// older brokers, a batch for a partition the client never added is
    /// written and hangs, and nothing on the broker hides a client bug.
    pub partition_verification: bool,
    /// The cluster's finalized `transaction.version`: 2 (Kafka 4.x: the
    /// client adds no partitions itself and every EndTxn bumps the epoch)
    /// or 1 for even and odd seeds with partition verification; 0 without
    /// it (a broker before 3.6 has no transaction version 2).
    pub transaction_version: i16,
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} ({} inputs, {} per transaction, {:?} sends, {} input, {}, transaction version {}): {:?}",
            self.seed,
            self.inputs,
            self.per_txn,
            self.sends,
            if self.input_transactions.is_empty() {
                "plain".to_owned()
            } else {
                format!("transactional {:?}", self.input_transactions)
            },
            if self.partition_verification {
                "partition verification"
            } else {
                "no partition verification"
            },
            self.transaction_version,
            self.faults
        )
    }
}

impl Schedule {
    /// Draws a schedule from `seed`: 8 to 48 inputs, 1 to 8 per
    /// transaction, up to eight faults over the transactions of the run,
    /// sequential, concurrent or buffered sends and transactional input
    /// (with aborted input transactions) in a third. Partitions last 50 ms
    /// to 8 s: the shorter ones the client rides out by itself, the ones
    /// past its 5 s API timeout reach the application as retriable errors.
    pub fn from_seed(seed: u64) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let inputs: usize = rng.random_range(8..=48);
        let per_txn: usize = rng.random_range(1..=8);
        let txns = inputs.div_ceil(per_txn) + 2;
        let mut faults = Vec::new();
        for _ in 0..rng.random_range(1..=8) {
            let txn = rng.random_range(0..txns);
            let fault = match rng.random_range(0..20) {
                kill @ 0..=3 => Fault::Kill {
                    txn,
                    step: [
                        Step::AfterBegin,
                        Step::AfterSend,
                        Step::AfterOffsets,
                        Step::DuringEndTxn,
                    ][kill],
                },
                4 => Fault::Abort { txn },
                5 => {
                    let api = [
                        ApiKey::AddPartitionsToTxn,
                        ApiKey::TxnOffsetCommit,
                        ApiKey::EndTxn,
                    ][rng.random_range(0..3)];
                    // 51 CONCURRENT_TRANSACTIONS, 16 NOT_COORDINATOR,
                    // 14 COORDINATOR_LOAD_IN_PROGRESS.
                    let code = [51, 16, 14][rng.random_range(0..3)];
                    Fault::CoordinatorError { txn, api, code }
                }
                6 => Fault::LostEndTxnResponse { txn },
                7 => Fault::DroppedConnection { txn },
                8 | 9 => Fault::Partition {
                    txn,
                    at: moment(&mut rng),
                    target: match rng.random_range(0..3) {
                        0 => CutOff::TxnCoordinator,
                        1 => CutOff::GroupCoordinator,
                        _ => CutOff::LeaderOf(rng.random_range(0..OUTPUT_PARTITIONS)),
                    },
                    millis: rng.random_range(50..=8000),
                },
                12 => Fault::AbortableError {
                    txn,
                    api: if rng.random_bool(0.5) {
                        ApiKey::AddPartitionsToTxn
                    } else {
                        ApiKey::TxnOffsetCommit
                    },
                },
                13 => Fault::LostProduceResponse {
                    txn,
                    at: moment(&mut rng),
                },
                14 => Fault::DelayedProduce {
                    txn,
                    at: moment(&mut rng),
                    millis: rng.random_range(100..=1500),
                },
                15 => Fault::MoveLeader {
                    txn,
                    at: moment(&mut rng),
                    partition: rng.random_range(0..OUTPUT_PARTITIONS),
                    by: rng.random_range(1..BROKERS),
                },
                16 => Fault::SequenceError {
                    txn,
                    // 45 OUT_OF_ORDER_SEQUENCE_NUMBER, 59 UNKNOWN_PRODUCER_ID.
                    code: if rng.random_bool(0.5) { 45 } else { 59 },
                },
                17 => Fault::TransactionTimeout { txn },
                18 => Fault::StalledAddPartitions {
                    txn,
                    millis: rng.random_range(5500..=9000),
                },
                _ => Fault::MoveCoordinator {
                    txn,
                    at: moment(&mut rng),
                    of: if rng.random_bool(0.5) {
                        Coordinated::Transaction
                    } else {
                        Coordinated::Group
                    },
                    to: rng.random_range(0..BROKERS),
                },
            };
            faults.push(fault);
        }
        faults.sort_by_key(|f| f.txn());
        let sends = [Sends::Sequential, Sends::Concurrent, Sends::Buffered][rng.random_range(0..3)];
        let mut input_transactions = Vec::new();
        if rng.random_bool(1.0 / 3.0) {
            let mut committed = 0;
            while committed < inputs {
                let aborted = rng.random_bool(0.3);
                let records = rng.random_range(1..=6);
                let records = if aborted {
                    records
                } else {
                    records.min(inputs - committed)
                };
                if !aborted {
                    committed += records;
                }
                input_transactions.push(InputTxn { records, aborted });
            }
        }
        let partition_verification = rng.random_bool(0.5);
        // From the seed, not the generator: earlier seeds keep their draws.
        let transaction_version = match (partition_verification, seed % 2) {
            (false, _) => 0,
            (true, 0) => 2,
            (true, _) => 1,
        };
        Schedule {
            seed,
            inputs,
            per_txn,
            faults,
            sends,
            input_transactions,
            partition_verification,
            transaction_version,
        }
    }
}

fn moment(rng: &mut StdRng) -> Moment {
    if rng.random_bool(0.5) {
        Moment::BeforeBegin
    } else {
        Moment::AfterSend
    }
}

/// One reading of the committed output: the values of each output
/// partition, in offset order.
pub type Reading = BTreeMap<i32, Vec<String>>;

/// What the run saw, for the checks.
#[derive(Debug, Default, Clone)]
pub struct Observed {
    /// Committed output as Weir's read_committed [`Consumer`] delivered it.
    pub output: Reading,
    /// Committed output computed from the testkit's raw log and markers
    /// ([`visible_in_log`]), independently of the consumer.
    pub log_output: Reading,
    /// Each output partition's (last stable offset, high watermark) at the end.
    pub stable: BTreeMap<i32, (i64, i64)>,
    /// Transactional ids the coordinator still has unfinished at the end,
    /// with their state.
    pub unfinished: Vec<String>,
    /// The group's committed (stable) offsets per input partition.
    pub offsets: BTreeMap<i32, i64>,
    /// The end offset of each input partition.
    pub input_ends: BTreeMap<i32, i64>,
    /// Tags of transactions whose abort succeeded.
    pub aborted: BTreeSet<String>,
    /// Transactions run (over all instances).
    pub transactions: usize,
    /// Instances started.
    pub instances: usize,
    /// Transactions aborted by the application after an abortable or
    /// retriable error, then redone.
    pub recovered: usize,
    /// What the faults did, by name: `<kind> fired` for each intercept of a
    /// fault that hit a request (a [`Fault::kind`]), `leader moved`,
    /// `Produce sent to a moved partition's old leader` (answered
    /// `NOT_LEADER_OR_FOLLOWER`), `Produce batch sent again` (a retry with
    /// the same sequence, which the leader must deduplicate),
    /// `transaction timed out` (the coordinator aborted it),
    /// `aborted input records`, `concurrent transactions` and `buffered
    /// transactions` (with more than
    /// one record in flight) and `fatal` (instances ended by a fatal error).
    pub effects: BTreeMap<String, usize>,
}

impl Observed {
    fn effect(&mut self, name: &str) {
        *self.effects.entry(name.to_owned()).or_default() += 1;
    }
}

/// A broken exactly-once guarantee, or a run that could not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The schedule, to replay.
    pub schedule: Schedule,
    /// What went wrong.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exactly-once violated: {}; replay {}",
            self.what, self.schedule
        )
    }
}

impl std::error::Error for Violation {}

/// The name of the consumer's reading in violation messages.
pub const CONSUMER_READING: &str = "read_committed consumer";
/// The name of the log's reading in violation messages.
pub const LOG_READING: &str = "log and markers";

/// Checks the exactly-once properties of a run: each reading on its own,
/// their agreement, that nothing hangs, and the committed offsets.
///
/// # Errors
/// The first property that does not hold, described (naming the reading).
pub fn check(inputs: usize, observed: &Observed) -> Result<(), String> {
    check_reading(
        CONSUMER_READING,
        inputs,
        &observed.output,
        &observed.aborted,
    )?;
    check_reading(LOG_READING, inputs, &observed.log_output, &observed.aborted)?;
    if observed.output != observed.log_output {
        return Err(format!(
            "the readings disagree: {CONSUMER_READING} {:?}, {LOG_READING} {:?}",
            observed.output, observed.log_output
        ));
    }
    for (p, (lso, hw)) in &observed.stable {
        if lso != hw {
            return Err(format!(
                "output partition {p}: last stable offset {lso} is not the high watermark {hw} (a transaction hangs)"
            ));
        }
    }
    if !observed.unfinished.is_empty() {
        return Err(format!(
            "the transaction coordinator still has unfinished transactions: {:?}",
            observed.unfinished
        ));
    }
    if observed.offsets != observed.input_ends {
        return Err(format!(
            "committed offsets {:?} are not the input ends {:?}",
            observed.offsets, observed.input_ends
        ));
    }
    Ok(())
}

/// Checks one reading: every input exactly once, nothing of an aborted
/// transaction, nothing unknown.
fn check_reading(
    name: &str,
    inputs: usize,
    reading: &Reading,
    aborted: &BTreeSet<String>,
) -> Result<(), String> {
    let mut seen: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for value in reading.values().flatten() {
        let (id, tag) =
            parse_output(value).ok_or_else(|| format!("{name}: malformed output {value:?}"))?;
        if aborted.contains(tag) {
            return Err(format!("{name}: {value} belongs to an aborted transaction"));
        }
        if id >= ABORTED_INPUT_BASE {
            return Err(format!(
                "{name}: {value} is the output of input {id}, written by an aborted input transaction"
            ));
        }
        seen.entry(id).or_default().push(tag);
    }
    for id in 0..inputs {
        match seen.get(&id).map(Vec::len) {
            Some(1) => {}
            None => {
                return Err(format!(
                    "{name}: input {id} is missing from the committed output"
                ));
            }
            Some(n) => {
                return Err(format!(
                    "{name}: input {id} is in the committed output {n} times: {:?}",
                    seen.get(&id)
                ));
            }
        }
    }
    if let Some(id) = seen.keys().find(|id| **id >= inputs) {
        return Err(format!("{name}: output for unknown input {id}"));
    }
    Ok(())
}

/// The committed values of one partition's raw log, as strings, in offset
/// order: [`visible_records`], values only.
///
/// # Errors
/// As [`visible_records`].
pub fn visible_in_log(log: &Bytes) -> Result<Vec<String>, String> {
    Ok(visible_records(log)?
        .into_iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect())
}

/// The committed records of one partition's raw log (whole batches, as
/// [`weir_testkit::Cluster::raw_log`] returns them), in offset order,
/// computed with Kafka's rule and nothing of the broker's or the consumer's
/// read path: a non-transactional batch is visible; a transactional batch
/// is visible iff a COMMIT marker of its producer id follows it before an
/// ABORT marker of that producer id. Control batches are never visible;
/// markers of unknown type are ignored, as Kafka's readers do. Batches with
/// no marker yet (an open transaction) are not visible.
///
/// # Errors
/// The log does not decode (CRCs are checked), ends inside a batch, or
/// holds a control batch that is not transactional or has no control key.
pub fn visible_records(log: &Bytes) -> Result<Vec<Record>, String> {
    let decoded = decode_batches(log, &DecodeOptions::default())
        .map_err(|e| format!("the log does not decode: {e}"))?;
    if decoded.truncated_tail {
        return Err("the log ends inside a batch".to_owned());
    }
    let mut visible = Vec::new();
    // Per producer id, its transactional records not yet followed by a marker.
    let mut pending: BTreeMap<i64, Vec<Record>> = BTreeMap::new();
    for batch in decoded.batches {
        let h = batch.header;
        if h.is_control() {
            if !h.is_transactional() {
                return Err(format!(
                    "control batch at {} without the transactional bit",
                    h.base_offset
                ));
            }
            let kind = batch.control().map(|c| c.kind).ok_or_else(|| {
                format!("control batch at {} without a control key", h.base_offset)
            })?;
            match kind {
                ControlKind::Commit => {
                    visible.extend(pending.remove(&h.producer_id).unwrap_or_default());
                }
                ControlKind::Abort => {
                    pending.remove(&h.producer_id);
                }
                ControlKind::Unknown(_) => {}
            }
            continue;
        }
        if h.is_transactional() {
            pending
                .entry(h.producer_id)
                .or_default()
                .extend(batch.records);
        } else {
            visible.extend(batch.records);
        }
    }
    visible.sort_by_key(|r: &Record| r.offset);
    Ok(visible)
}

fn parse_output(value: &str) -> Option<(usize, &str)> {
    let rest = value.strip_prefix("out-")?;
    let (id, tag) = rest.split_once('@')?;
    Some((id.parse().ok()?, tag))
}

async fn client(kit: &Kit, client_id: &str) -> Result<Cluster, String> {
    let config = client_config(kit, client_id)
        .retry_backoff(Duration::from_millis(5), Duration::from_millis(40))
        .request_timeout(Duration::from_millis(300))
        .default_api_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    Cluster::connect(config).await.map_err(|e| e.to_string())
}

/// Runs `schedule` against a fresh in-process testkit cluster of
/// [`BROKERS`] brokers, reached in memory, and checks the result. Run it on
/// a paused clock (each schedule on its own current-thread runtime) for
/// exact, repeatable timing.
///
/// # Errors
/// A [`Violation`] naming the seed and the schedule.
pub async fn run_schedule(schedule: &Schedule) -> Result<Observed, Violation> {
    let violation = |what: String| Violation {
        schedule: schedule.clone(),
        what,
    };
    let observed = run(schedule).await.map_err(violation)?;
    check(schedule.inputs, &observed).map_err(violation)?;
    Ok(observed)
}

async fn run(schedule: &Schedule) -> Result<Observed, String> {
    let kit: Kit = Arc::new(
        weir_testkit::Cluster::builder()
            .brokers(BROKERS)
            .transaction_partition_verification(schedule.partition_verification)
            .transaction_version(schedule.transaction_version)
            .build()
            .await
            .map_err(|e| e.to_string())?,
    );
    let no_configs = [] as [(&str, &str); 0];
    kit.create_topic(INPUT, INPUT_PARTITIONS, no_configs)
        .await
        .map_err(|e| e.to_string())?;
    kit.create_topic(OUTPUT, OUTPUT_PARTITIONS, no_configs)
        .await
        .map_err(|e| e.to_string())?;
    let mut observed = Observed::default();
    // The offset after the last committed input record of each partition:
    // where the application's committed offsets must end.
    let ends = load_input(&kit, schedule, &mut observed).await?;
    let mut txn = 0usize;
    let mut installed = Installed::default();
    // Each instance runs until done or killed; a kill hands over.
    loop {
        observed.instances += 1;
        if observed.instances > schedule.faults.len() + 2 {
            return Err("more instances than kills".to_owned());
        }
        let done = run_instance(
            &kit,
            schedule,
            &ends,
            &mut txn,
            &mut installed,
            &mut observed,
        )
        .await?;
        if done {
            break;
        }
    }
    observed.transactions = txn;

    let reader = client(&kit, "checker").await?;
    let tps: Vec<TopicPartition> = (0..INPUT_PARTITIONS)
        .map(|p| TopicPartition::new(INPUT, p))
        .collect();
    let offsets = fetch_stable_offsets(&reader, GROUP, &tps)
        .await
        .map_err(|e| e.to_string())?;
    observed.offsets = offsets.iter().map(|(tp, o)| (tp.partition, *o)).collect();
    observed.input_ends = ends
        .iter()
        .filter(|(_, end)| **end > 0)
        .map(|(tp, end)| (tp.partition, *end))
        .collect();
    for (kind, id) in std::mem::take(&mut installed.intercepts) {
        // A counted intercept is gone once it hit its request.
        if !kit.remove_fault(id).await.map_err(|e| e.to_string())? {
            observed.effect(&format!("{kind} fired"));
        }
    }
    let requests = kit.requests().await.map_err(|e| e.to_string())?;
    // A batch sent again with the same producer id, epoch and sequence (a
    // retry after a lost or late response, or a timeout): the leader's
    // sequence check must acknowledge it without a second copy.
    let mut sent = BTreeSet::new();
    let mut resent = 0;
    for r in &requests {
        let RequestKind::Produce(p) = &r.body else {
            continue;
        };
        for t in p.topic_data.iter().filter(|t| t.name.0.as_str() == OUTPUT) {
            for d in &t.partition_data {
                let Some(records) = &d.records else { continue };
                for (h, _) in split_batches(records).unwrap_or_default() {
                    let key = (d.index, h.producer_id, h.producer_epoch, h.base_sequence);
                    if !sent.insert(key) {
                        resent += 1;
                    }
                }
            }
        }
    }
    for _ in 0..resent {
        observed.effect("Produce batch sent again");
    }
    // A Produce for a moved partition that still went to its old leader
    // was answered NOT_LEADER_OR_FOLLOWER.
    for (partition, old, at) in &installed.moves {
        let stale = requests.iter().any(|r| {
            r.at >= *at
                && r.broker_id == *old
                && matches!(&r.body, RequestKind::Produce(p) if p.topic_data.iter().any(|t| {
                    t.name.0.as_str() == OUTPUT
                        && t.partition_data.iter().any(|d| d.index == *partition)
                }))
        });
        if stale {
            observed.effect("Produce sent to a moved partition's old leader");
        }
    }
    read_end_state(&kit, reader, &mut observed).await?;
    Ok(observed)
}

/// Reads the end state of a run into `observed`: the committed output
/// through Weir's read_committed consumer on `reader` ([`read_committed`]),
/// the independent reading from the raw log ([`visible_in_log`]), each
/// output partition's last stable offset and high watermark, and the
/// transactions the coordinator still has unfinished (whether anything
/// hangs). Shared by this checker and [`crate::eos_group`].
pub(crate) async fn read_end_state(
    kit: &Kit,
    reader: Cluster,
    observed: &mut Observed,
) -> Result<(), String> {
    observed.output = read_committed(kit, reader).await?;
    // The independent reading, and whether anything hangs.
    for p in 0..OUTPUT_PARTITIONS {
        let log = kit.raw_log(OUTPUT, p).await.map_err(|e| e.to_string())?;
        let values = visible_in_log(&log).map_err(|e| format!("output partition {p}: {e}"))?;
        observed.log_output.insert(p, values);
        let (_, lso, hw) = kit.offsets(OUTPUT, p).await.map_err(|e| e.to_string())?;
        observed.stable.insert(p, (lso, hw));
    }
    observed.unfinished = kit
        .unfinished_transactions()
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(id, state)| format!("{id} ({state})"))
        .collect();
    Ok(())
}

/// Writes the input: plainly, or in the schedule's input transactions
/// (committed ones carry the ids `0..inputs`, aborted ones ids from
/// [`ABORTED_INPUT_BASE`] on). Returns the offset after the last committed
/// record of each input partition (0 if it has none).
async fn load_input(
    kit: &Kit,
    schedule: &Schedule,
    observed: &mut Observed,
) -> Result<BTreeMap<TopicPartition, i64>, String> {
    let mut ends: BTreeMap<TopicPartition, i64> = (0..INPUT_PARTITIONS)
        .map(|p| (TopicPartition::new(INPUT, p), 0))
        .collect();
    let record = |id: usize| {
        ProducerRecord::new(INPUT)
            .with_partition(i32::try_from(id).unwrap_or(0) % INPUT_PARTITIONS)
            .with_value(id.to_string())
    };
    if schedule.input_transactions.is_empty() {
        let loader =
            Producer::with_cluster(client(kit, "loader").await?, ProducerOptions::default())
                .map_err(|e| e.to_string())?;
        for id in 0..schedule.inputs {
            let md = loader.send(record(id)).await.map_err(|e| e.to_string())?;
            ends.insert(TopicPartition::new(INPUT, md.partition), md.offset + 1);
        }
        loader.close().await;
        return Ok(ends);
    }
    let loader = TransactionalProducer::with_cluster(
        client(kit, "loader").await?,
        ProducerOptions::default(),
        TransactionConfig::new("eos-loader"),
    )
    .map_err(|e| e.to_string())?;
    loader
        .init_transactions()
        .await
        .map_err(|e| format!("loader: {e}"))?;
    let (mut committed, mut aborted) = (0, ABORTED_INPUT_BASE);
    for t in &schedule.input_transactions {
        loader.begin().map_err(|e| format!("loader: {e}"))?;
        let mut written = Vec::new();
        for _ in 0..t.records {
            let id = if t.aborted {
                aborted += 1;
                aborted - 1
            } else {
                committed += 1;
                committed - 1
            };
            let md = loader
                .send(record(id))
                .await
                .map_err(|e| format!("loader: {e}"))?;
            written.push(md);
        }
        if t.aborted {
            loader.abort().await.map_err(|e| format!("loader: {e}"))?;
            for _ in &written {
                observed.effect("aborted input records");
            }
        } else {
            loader.commit().await.map_err(|e| format!("loader: {e}"))?;
            for md in written {
                ends.insert(TopicPartition::new(INPUT, md.partition), md.offset + 1);
            }
        }
    }
    loader.close().await;
    Ok(ends)
}

/// How long the instance's transactions may stay open
/// (`transaction.timeout.ms`); a [`Fault::TransactionTimeout`] stalls
/// longer than this.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// What the faults installed, to count their effects at the end.
#[derive(Default)]
struct Installed {
    /// Counted intercepts, with the fault's kind: one that is gone at the
    /// end of the run hit its request.
    intercepts: Vec<(&'static str, FaultId)>,
    /// Leader moves: the output partition, its old leader and when.
    moves: Vec<(i32, i32, tokio::time::Instant)>,
}

/// Returns whether the input is fully processed (false: killed or fenced).
async fn run_instance(
    kit: &Kit,
    schedule: &Schedule,
    ends: &BTreeMap<TopicPartition, i64>,
    txn: &mut usize,
    installed: &mut Installed,
    observed: &mut Observed,
) -> Result<bool, String> {
    let instance = observed.instances;
    let client_id = format!("app-{instance}");
    let cluster = client(kit, &client_id).await?;
    let producer = Arc::new(
        TransactionalProducer::with_cluster(
            cluster.clone(),
            ProducerOptions {
                linger: Duration::from_millis(1),
                ..ProducerOptions::default()
            },
            TransactionConfig::new(TRANSACTIONAL_ID).with_timeout(TRANSACTION_TIMEOUT),
        )
        .map_err(|e| e.to_string())?,
    );
    producer
        .init_transactions()
        .await
        .map_err(|e| format!("init_transactions: {e}"))?;
    let tps: Vec<TopicPartition> = ends.keys().cloned().collect();
    let mut positions: BTreeMap<TopicPartition, i64> =
        tps.iter().map(|tp| (tp.clone(), 0)).collect();
    let stable = fetch_stable_offsets(&cluster, GROUP, &tps)
        .await
        .map_err(|e| format!("fetch_stable_offsets: {e}"))?;
    positions.extend(stable);
    let mut consumer = Consumer::with_cluster(
        client(kit, &format!("{client_id}-consumer")).await?,
        ConsumerOptions {
            isolation_level: IsolationLevel::ReadCommitted,
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(10),
            ..ConsumerOptions::default()
        },
    );
    consumer.assign(tps.clone());
    let group = GroupMetadata::unchecked(GROUP);
    // Set once a transaction of this instance outlived its timeout: the
    // coordinator fenced the epoch, so a fatal error is then expected.
    let mut timed_out = false;
    'work: loop {
        if positions.iter().all(|(tp, o)| ends.get(tp) == Some(o)) {
            return Ok(true);
        }
        // Read the next batch from the committed positions.
        for (tp, o) in &positions {
            consumer
                .seek(tp, SeekTo::Offset(*o))
                .map_err(|e| e.to_string())?;
        }
        let mut records = Vec::new();
        for _ in 0..100 {
            records.extend(
                consumer
                    .poll_for(Duration::from_millis(20))
                    .await
                    .map_err(|e| e.to_string())?,
            );
            if !records.is_empty() {
                break;
            }
        }
        records.truncate(schedule.per_txn);
        if records.is_empty() {
            return Err(format!("no input readable from {positions:?}"));
        }
        let this = *txn;
        *txn += 1;
        if *txn > schedule.inputs * 4 + 20 {
            return Err("too many transactions".to_owned());
        }
        let faults: Vec<Fault> = schedule
            .faults
            .iter()
            .copied()
            .filter(|f| f.txn() == this)
            .collect();
        let kill = faults.iter().find_map(|f| match f {
            Fault::Kill { step, .. } => Some(*step),
            _ => None,
        });
        let abort = faults.iter().any(|f| matches!(f, Fault::Abort { .. }));
        let stall = faults
            .iter()
            .any(|f| matches!(f, Fault::TransactionTimeout { .. }));
        for fault in &faults {
            inject(
                kit,
                &client_id,
                *fault,
                Moment::BeforeBegin,
                installed,
                observed,
            )
            .await?;
        }
        let tag = format!("i{instance}t{this}");

        producer.begin().map_err(|e| e.to_string())?;
        if kill == Some(Step::AfterBegin) {
            return Ok(false);
        }
        let mut next = positions.clone();
        let outputs: Vec<ProducerRecord> = records
            .iter()
            .map(|r| {
                let id =
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
                ProducerRecord::new(OUTPUT)
                    .with_key(id.clone())
                    .with_value(format!("out-{id}@{tag}"))
            })
            .collect();
        let mut sends = Vec::with_capacity(outputs.len());
        if schedule.sends != Sends::Sequential && outputs.len() > 1 {
            observed.effect(match schedule.sends {
                Sends::Concurrent => "concurrent transactions",
                _ => "buffered transactions",
            });
        }
        if schedule.sends == Sends::Concurrent {
            for record in outputs {
                let producer = Arc::clone(&producer);
                sends.push(Sending::Spawned(tokio::spawn(async move {
                    producer.send(record).await.map(|_| ())
                })));
            }
        } else {
            sends.extend(outputs.into_iter().map(Sending::Later));
        }
        // The first failed operation, if any; the recovery follows below.
        let failed: Option<(&str, ClientError)> = 'txn: {
            let mut failed_send = None;
            for (i, (sending, r)) in sends.into_iter().zip(&records).enumerate() {
                let sent = match sending {
                    Sending::Later(record) if schedule.sends == Sends::Buffered => {
                        match producer.enqueue(record).await {
                            // Only the first acknowledgement is awaited (for
                            // the faults that start after it); `commit`
                            // waits for the others and refuses if one failed.
                            Ok(delivery) if i == 0 => delivery.await.map(|_| ()),
                            Ok(_) => Ok(()),
                            Err(e) => Err(e),
                        }
                    }
                    Sending::Later(record) => producer.send(record).await.map(|_| ()),
                    Sending::Spawned(task) => task.await.map_err(|e| e.to_string())?,
                };
                if let Err(e) = sent {
                    if schedule.sends == Sends::Concurrent {
                        // The others are in flight: wait for them too.
                        failed_send.get_or_insert(e);
                        continue;
                    }
                    break 'txn Some(("send", e));
                }
                next.insert(TopicPartition::new(INPUT, r.partition), r.offset + 1);
                if i == 0 {
                    for fault in &faults {
                        inject(
                            kit,
                            &client_id,
                            *fault,
                            Moment::AfterSend,
                            installed,
                            observed,
                        )
                        .await?;
                    }
                    if kill == Some(Step::AfterSend) {
                        return Ok(false);
                    }
                    if stall {
                        outlive_transaction_timeout(kit, &tag, observed).await?;
                        timed_out = true;
                    }
                }
            }
            if let Some(e) = failed_send {
                break 'txn Some(("send", e));
            }
            if let Err(e) = producer.send_offsets_to_transaction(&next, &group).await {
                break 'txn Some(("send_offsets_to_transaction", e));
            }
            if kill == Some(Step::AfterOffsets) {
                return Ok(false);
            }
            if kill == Some(Step::DuringEndTxn) {
                kit.intercept(
                    Intercept::new(
                        RequestMatcher::api(ApiKey::EndTxn).client(client_id.clone()),
                        InterceptAction::DropResponse,
                    )
                    .times(1),
                )
                .await
                .map_err(|e| e.to_string())?;
                // The instance dies once EndTxn has reached the coordinator.
                let end = tokio::time::timeout(Duration::from_millis(150), producer.commit()).await;
                if let Ok(result) = end {
                    match result {
                        Ok(()) => {}
                        // A buffered record failed (the instance dies
                        // before it can abort), or a timed-out transaction
                        // fenced the commit.
                        Err(e)
                            if e.transaction_class() == Some(TransactionErrorClass::Abortable)
                                || (timed_out
                                    && e.transaction_class()
                                        == Some(TransactionErrorClass::Fatal)) => {}
                        Err(e) => return Err(format!("commit: {e}")),
                    }
                }
                return Ok(false);
            }
            if abort {
                break 'txn None;
            }
            // A retriable error means the coordinator stayed out of reach
            // for the whole API timeout; committing again is safe.
            for attempt in 0.. {
                match producer.commit().await {
                    Ok(()) => break,
                    Err(e)
                        if e.transaction_class() == Some(TransactionErrorClass::Retriable)
                            && attempt < COMMIT_ATTEMPTS =>
                    {
                        continue;
                    }
                    Err(e) => break 'txn Some(("commit", e)),
                }
            }
            positions = next;
            continue 'work;
        };
        // Here the transaction is to be aborted: the application chose to,
        // or an operation failed.
        if let Some((operation, e)) = failed {
            match e.transaction_class() {
                // Fenced: this instance is done; a new one takes over.
                Some(TransactionErrorClass::Fatal) if timed_out => {
                    observed.effect("fatal");
                    return Ok(false);
                }
                // Nothing fenced this instance: its predecessors are gone
                // and no transaction of its own timed out.
                Some(TransactionErrorClass::Fatal) => {
                    return Err(format!("{operation}: fatal, but nothing fenced: {e}"));
                }
                // Abort, rewind to the committed positions, redo.
                Some(TransactionErrorClass::Abortable) => {
                    observed.recovered += 1;
                }
                Some(TransactionErrorClass::Retriable) if operation != "commit" => {
                    observed.recovered += 1;
                }
                _ => return Err(format!("{operation}: {e}")),
            }
        }
        let mut attempt = 0;
        loop {
            match producer.abort().await {
                Ok(()) => break,
                Err(e) if e.transaction_class() == Some(TransactionErrorClass::Fatal) => {
                    if !timed_out {
                        return Err(format!("abort: fatal, but nothing fenced: {e}"));
                    }
                    observed.effect("fatal");
                    return Ok(false);
                }
                Err(e)
                    if e.transaction_class() == Some(TransactionErrorClass::Retriable)
                        && attempt < COMMIT_ATTEMPTS =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(format!("abort: {e}")),
            }
        }
        observed.aborted.insert(tag);
    }
}

/// A record of the transaction, to send now or already on its way.
enum Sending {
    Later(ProducerRecord),
    Spawned(tokio::task::JoinHandle<Result<(), ClientError>>),
}

/// The application stalls past `transaction.timeout.ms` with its
/// transaction open; the coordinator must abort it by its next abort scan
/// (Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms`,
/// 10 s; then `tag` counts as aborted).
async fn outlive_transaction_timeout(
    kit: &Kit,
    tag: &str,
    observed: &mut Observed,
) -> Result<(), String> {
    let open = |unfinished: Vec<(String, &'static str)>| {
        unfinished.iter().any(|(id, _)| id == TRANSACTIONAL_ID)
    };
    let before = open(
        kit.unfinished_transactions()
            .await
            .map_err(|e| e.to_string())?,
    );
    let scan = kit
        .with_state(|s| s.config.txn_abort_scan_interval)
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::sleep(TRANSACTION_TIMEOUT + scan + Duration::from_secs(1)).await;
    let after = open(
        kit.unfinished_transactions()
            .await
            .map_err(|e| e.to_string())?,
    );
    if before && !after {
        observed.effect("transaction timed out");
    }
    if after {
        return Err(format!(
            "transaction {tag} is still open past transaction.timeout.ms and the next abort scan"
        ));
    }
    // Whatever the instance does next, this transaction was aborted.
    observed.aborted.insert(tag.to_owned());
    Ok(())
}

/// Applies the part of `fault` that starts at `now`: intercepts before
/// `begin` (a sequence error after the first send), partitions, leader and
/// coordinator moves at their own moment.
async fn inject(
    kit: &Kit,
    client_id: &str,
    fault: Fault,
    now: Moment,
    installed: &mut Installed,
    observed: &mut Observed,
) -> Result<(), String> {
    let intercept = match fault {
        Fault::Partition {
            at, target, millis, ..
        } if at == now => {
            let target = match target {
                CutOff::TxnCoordinator => PartitionTarget::TxnCoordinator(TRANSACTIONAL_ID.into()),
                CutOff::GroupCoordinator => PartitionTarget::GroupCoordinator(GROUP.into()),
                CutOff::LeaderOf(p) => PartitionTarget::Broker(leader_of(kit, p).await?),
            };
            let id = kit
                .partition_client(ClientSelector::ClientId(client_id.to_owned()), target)
                .await
                .map_err(|e| e.to_string())?;
            let kit = Arc::clone(kit);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(millis)).await;
                let _ = kit.remove_fault(id).await;
            });
            return Ok(());
        }
        Fault::MoveCoordinator { at, of, to, .. } if at == now => {
            let key = match of {
                Coordinated::Transaction => TRANSACTIONAL_ID,
                Coordinated::Group => GROUP,
            };
            let from = kit
                .move_coordinator(key, to)
                .await
                .map_err(|e| e.to_string())?;
            if from == to {
                kit.move_coordinator(key, (to + 1) % BROKERS)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            return Ok(());
        }
        Fault::MoveLeader {
            at, partition, by, ..
        } if at == now => {
            let from = leader_of(kit, partition).await?;
            kit.move_leader(OUTPUT, partition, (from + by) % BROKERS)
                .await
                .map_err(|e| e.to_string())?;
            observed.effect("leader moved");
            installed
                .moves
                .push((partition, from, tokio::time::Instant::now()));
            return Ok(());
        }
        Fault::StalledAddPartitions { millis, .. } if now == Moment::BeforeBegin => {
            let matcher =
                RequestMatcher::api(ApiKey::AddPartitionsToTxn).client(client_id.to_owned());
            // The first installed intercept that matches wins: the delay
            // takes the first request, the drop every later one.
            let first = kit
                .intercept(
                    Intercept::new(
                        matcher.clone(),
                        InterceptAction::Delay(Duration::from_millis(100)),
                    )
                    .times(1),
                )
                .await
                .map_err(|e| e.to_string())?;
            installed.intercepts.push((fault.kind(), first));
            let stall = kit
                .intercept(Intercept::new(matcher, InterceptAction::Drop))
                .await
                .map_err(|e| e.to_string())?;
            let kit = Arc::clone(kit);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100 + millis)).await;
                let _ = kit.remove_fault(stall).await;
            });
            return Ok(());
        }
        Fault::LostProduceResponse { at, .. } if at == now => Intercept::new(
            RequestMatcher::api(ApiKey::Produce).client(client_id.to_owned()),
            InterceptAction::DropResponse,
        ),
        Fault::DelayedProduce { at, millis, .. } if at == now => Intercept::new(
            RequestMatcher::api(ApiKey::Produce).client(client_id.to_owned()),
            InterceptAction::Delay(Duration::from_millis(millis)),
        ),
        Fault::SequenceError { code, .. } if now == Moment::AfterSend => Intercept::new(
            RequestMatcher::api(ApiKey::Produce).client(client_id.to_owned()),
            InterceptAction::Error(code),
        ),
        Fault::Partition { .. }
        | Fault::MoveCoordinator { .. }
        | Fault::MoveLeader { .. }
        | Fault::LostProduceResponse { .. }
        | Fault::DelayedProduce { .. }
        | Fault::SequenceError { .. }
        | Fault::StalledAddPartitions { .. } => return Ok(()),
        _ if now != Moment::BeforeBegin => return Ok(()),
        Fault::CoordinatorError { api, code, .. } => Intercept::new(
            RequestMatcher::api(api).client(client_id.to_owned()),
            InterceptAction::Error(code),
        ),
        Fault::LostEndTxnResponse { .. } => Intercept::new(
            RequestMatcher::api(ApiKey::EndTxn).client(client_id.to_owned()),
            InterceptAction::DropResponse,
        ),
        Fault::AbortableError { api, .. } => Intercept::new(
            RequestMatcher::api(api).client(client_id.to_owned()),
            // 120 TRANSACTION_ABORTABLE, 22 ILLEGAL_GENERATION.
            InterceptAction::Error(if api == ApiKey::TxnOffsetCommit {
                22
            } else {
                120
            }),
        ),
        Fault::DroppedConnection { .. } => Intercept::new(
            RequestMatcher::api(ApiKey::AddOffsetsToTxn).client(client_id.to_owned()),
            InterceptAction::CloseConnection,
        ),
        Fault::Kill { .. } | Fault::Abort { .. } | Fault::TransactionTimeout { .. } => {
            return Ok(());
        }
    };
    let id = kit
        .intercept(intercept.times(1))
        .await
        .map_err(|e| e.to_string())?;
    installed.intercepts.push((fault.kind(), id));
    Ok(())
}

/// The testkit's leader of an output partition.
async fn leader_of(kit: &Kit, partition: i32) -> Result<i32, String> {
    kit.with_state(move |s| s.partition(OUTPUT, partition).map(|p| p.leader))
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no output partition {partition}"))
}

/// Every committed output value per output partition, read_committed up to
/// the last stable offset of each.
///
/// # Errors
/// The output could not be read to its last stable offsets.
pub async fn read_committed(kit: &Kit, cluster: Cluster) -> Result<Reading, String> {
    // The testkit, as Kafka, writes a transaction's markers after
    // answering EndTxn: read once those of every ended transaction are in.
    kit.markers_written().await.map_err(|e| e.to_string())?;
    let mut consumer = Consumer::with_cluster(
        cluster,
        ConsumerOptions {
            isolation_level: IsolationLevel::ReadCommitted,
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(10),
            ..ConsumerOptions::default()
        },
    );
    let tps: Vec<TopicPartition> = (0..OUTPUT_PARTITIONS)
        .map(|p| TopicPartition::new(OUTPUT, p))
        .collect();
    consumer.assign(tps.clone());
    let mut out: Reading = tps.iter().map(|tp| (tp.partition, Vec::new())).collect();
    for tp in &tps {
        consumer
            .seek(tp, SeekTo::Earliest)
            .map_err(|e| e.to_string())?;
    }
    for _ in 0..500 {
        let mut done = true;
        for tp in &tps {
            let (_, lso, _) = kit
                .offsets(OUTPUT, tp.partition)
                .await
                .map_err(|e| e.to_string())?;
            if consumer.position(tp).await.map_err(|e| e.to_string())? < lso {
                done = false;
            }
        }
        if done {
            return Ok(out);
        }
        for r in consumer
            .poll_for(Duration::from_millis(20))
            .await
            .map_err(|e| e.to_string())?
        {
            out.entry(r.partition)
                .or_default()
                .push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
        }
    }
    Err("the output could not be read to its last stable offset".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checker_catches_duplicates_losses_aborted_records_and_offsets() {
        let reading = Reading::from([(0, vec!["out-0@a".into(), "out-1@b".into()])]);
        let ok = Observed {
            output: reading.clone(),
            log_output: reading,
            offsets: BTreeMap::from([(0, 1), (1, 1)]),
            input_ends: BTreeMap::from([(0, 1), (1, 1)]),
            ..Observed::default()
        };
        assert_eq!(check(2, &ok), Ok(()));
        let mut dup = ok.clone();
        for r in [&mut dup.output, &mut dup.log_output] {
            r.entry(0).or_default().push("out-1@c".into());
        }
        assert!(check(2, &dup).unwrap_err().contains("2 times"));
        let mut lost = ok.clone();
        for r in [&mut lost.output, &mut lost.log_output] {
            r.entry(0).or_default().pop();
        }
        assert!(check(2, &lost).unwrap_err().contains("missing"));
        let mut aborted = ok.clone();
        aborted.aborted.insert("b".into());
        assert!(check(2, &aborted).unwrap_err().contains("aborted"));
        let mut behind = ok.clone();
        behind.offsets.insert(1, 0);
        assert!(check(2, &behind).unwrap_err().contains("offsets"));
    }

    #[test]
    fn a_seed_always_gives_the_same_schedule() {
        assert_eq!(Schedule::from_seed(7), Schedule::from_seed(7));
        assert_ne!(Schedule::from_seed(7), Schedule::from_seed(8));
    }
}
