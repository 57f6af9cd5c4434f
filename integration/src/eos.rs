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
//! instance stops and a new one takes over.
//!
//! **Faults** ([`Fault`]), drawn from the seed: an instance killed at a step
//! of a transaction, a transaction the application aborts, retriable
//! coordinator errors (`CONCURRENT_TRANSACTIONS`, `NOT_COORDINATOR`,
//! `COORDINATOR_LOAD_IN_PROGRESS`), abortable coordinator errors
//! (`TRANSACTION_ABORTABLE`, a zombie's `ILLEGAL_GENERATION`), a lost EndTxn
//! response, a dropped
//! coordinator connection, a network partition between the producer and
//! its transaction coordinator, its group coordinator or an output
//! partition's leader (healed after a while), and the transactional id's or
//! the group's coordinator moving to another broker with its state.
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
//! every input id appears exactly once and no record of a transaction known
//! to be aborted is visible. At the end every output partition's last
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
use weir_protocol::records::{ControlKind, DecodeOptions, decode_batches};
use weir_testkit::{ClientSelector, Intercept, InterceptAction, PartitionTarget, RequestMatcher};

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
            | Fault::MoveCoordinator { txn, .. } => txn,
        }
    }
}

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
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} ({} inputs, {} per transaction): {:?}",
            self.seed, self.inputs, self.per_txn, self.faults
        )
    }
}

impl Schedule {
    /// Draws a schedule from `seed`: up to four faults over the
    /// transactions of the run. Partitions last 50 ms to 8 s: the shorter
    /// ones the client rides out by itself, the ones past its 5 s API
    /// timeout reach the application as retriable errors.
    pub fn from_seed(seed: u64) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let inputs: usize = rng.random_range(8..=24);
        let per_txn: usize = rng.random_range(2..=6);
        let txns = inputs.div_ceil(per_txn) + 2;
        let mut faults = Vec::new();
        for _ in 0..rng.random_range(1..=4) {
            let txn = rng.random_range(0..txns);
            let fault = match rng.random_range(0..13) {
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
        Schedule {
            seed,
            inputs,
            per_txn,
            faults,
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

/// The committed values of one partition's raw log (whole batches, as
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
pub fn visible_in_log(log: &Bytes) -> Result<Vec<String>, String> {
    let decoded = decode_batches(log, &DecodeOptions::default())
        .map_err(|e| format!("the log does not decode: {e}"))?;
    if decoded.truncated_tail {
        return Err("the log ends inside a batch".to_owned());
    }
    let mut visible: Vec<(i64, String)> = Vec::new();
    // Per producer id, its transactional records not yet followed by a marker.
    let mut pending: BTreeMap<i64, Vec<(i64, String)>> = BTreeMap::new();
    for batch in &decoded.batches {
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
        let records = batch.records.iter().map(|r| {
            (
                r.offset,
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(),
            )
        });
        if h.is_transactional() {
            pending.entry(h.producer_id).or_default().extend(records);
        } else {
            visible.extend(records);
        }
    }
    visible.sort_by_key(|(offset, _)| *offset);
    Ok(visible.into_iter().map(|(_, v)| v).collect())
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
    let loader = Producer::with_cluster(client(&kit, "loader").await?, ProducerOptions::default())
        .map_err(|e| e.to_string())?;
    for id in 0..schedule.inputs {
        let partition = i32::try_from(id).unwrap_or(0) % INPUT_PARTITIONS;
        loader
            .send(
                ProducerRecord::new(INPUT)
                    .with_partition(partition)
                    .with_value(id.to_string()),
            )
            .await
            .map_err(|e| e.to_string())?;
    }
    loader.close().await;

    let mut observed = Observed::default();
    let mut txn = 0usize;
    // Each instance runs until done or killed; a kill hands over.
    loop {
        observed.instances += 1;
        if observed.instances > schedule.faults.len() + 2 {
            return Err("more instances than kills".to_owned());
        }
        let done = run_instance(&kit, schedule, &mut txn, &mut observed).await?;
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
    for p in 0..INPUT_PARTITIONS {
        let (_, _, hw) = kit.offsets(INPUT, p).await.map_err(|e| e.to_string())?;
        if hw > 0 {
            observed.input_ends.insert(p, hw);
        }
    }
    observed.output = read_committed(&kit, reader).await?;
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
    Ok(observed)
}

/// Returns whether the input is fully processed (false: killed).
async fn run_instance(
    kit: &Kit,
    schedule: &Schedule,
    txn: &mut usize,
    observed: &mut Observed,
) -> Result<bool, String> {
    let instance = observed.instances;
    let client_id = format!("app-{instance}");
    let cluster = client(kit, &client_id).await?;
    let producer = TransactionalProducer::with_cluster(
        cluster.clone(),
        ProducerOptions {
            linger: Duration::from_millis(1),
            ..ProducerOptions::default()
        },
        TransactionConfig::new(TRANSACTIONAL_ID),
    )
    .map_err(|e| e.to_string())?;
    producer
        .init_transactions()
        .await
        .map_err(|e| format!("init_transactions: {e}"))?;
    let tps: Vec<TopicPartition> = (0..INPUT_PARTITIONS)
        .map(|p| TopicPartition::new(INPUT, p))
        .collect();
    let mut positions: BTreeMap<TopicPartition, i64> =
        tps.iter().map(|tp| (tp.clone(), 0)).collect();
    let stable = fetch_stable_offsets(&cluster, GROUP, &tps)
        .await
        .map_err(|e| format!("fetch_stable_offsets: {e}"))?;
    positions.extend(stable);
    let ends: BTreeMap<TopicPartition, i64> = {
        let mut ends = BTreeMap::new();
        for tp in &tps {
            let (_, _, hw) = kit
                .offsets(INPUT, tp.partition)
                .await
                .map_err(|e| e.to_string())?;
            ends.insert(tp.clone(), hw);
        }
        ends
    };
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
        for fault in &faults {
            inject(kit, &cluster, &client_id, *fault, Moment::BeforeBegin).await?;
        }
        let tag = format!("i{instance}t{this}");

        producer.begin().map_err(|e| e.to_string())?;
        if kill == Some(Step::AfterBegin) {
            return Ok(false);
        }
        let mut next = positions.clone();
        // The first failed operation, if any; the recovery follows below.
        let failed: Option<(&str, ClientError)> = 'txn: {
            for (i, r) in records.iter().enumerate() {
                let id =
                    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
                let sent = producer
                    .send(
                        ProducerRecord::new(OUTPUT)
                            .with_key(id.clone())
                            .with_value(format!("out-{id}@{tag}")),
                    )
                    .await;
                if let Err(e) = sent {
                    break 'txn Some(("send", e));
                }
                next.insert(TopicPartition::new(INPUT, r.partition), r.offset + 1);
                if i == 0 {
                    for fault in &faults {
                        inject(kit, &cluster, &client_id, *fault, Moment::AfterSend).await?;
                    }
                    if kill == Some(Step::AfterSend) {
                        return Ok(false);
                    }
                }
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
                    result.map_err(|e| format!("commit: {e}"))?;
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
                    Err(e) => return Err(format!("commit (attempt {}): {e}", attempt + 1)),
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
                Some(TransactionErrorClass::Fatal) => return Ok(false),
                // Abort, rewind to the committed positions, redo.
                Some(TransactionErrorClass::Abortable | TransactionErrorClass::Retriable) => {
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

/// Applies the part of `fault` that starts at `now`: intercepts and kills
/// before `begin`, partitions and coordinator moves at their own moment.
async fn inject(
    kit: &Kit,
    cluster: &Cluster,
    client_id: &str,
    fault: Fault,
    now: Moment,
) -> Result<(), String> {
    let intercept = match fault {
        Fault::Partition {
            at, target, millis, ..
        } if at == now => {
            let target = match target {
                CutOff::TxnCoordinator => PartitionTarget::TxnCoordinator(TRANSACTIONAL_ID.into()),
                CutOff::GroupCoordinator => PartitionTarget::GroupCoordinator(GROUP.into()),
                CutOff::LeaderOf(p) => PartitionTarget::Broker(
                    cluster
                        .partition_leader(OUTPUT, p)
                        .await
                        .map_err(|e| e.to_string())?,
                ),
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
        Fault::Partition { .. } | Fault::MoveCoordinator { .. } => return Ok(()),
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
        Fault::Kill { .. } | Fault::Abort { .. } => return Ok(()),
    };
    kit.intercept(intercept.times(1))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Every committed output value per output partition, read_committed up to
/// the last stable offset of each.
///
/// # Errors
/// The output could not be read to its last stable offsets.
pub async fn read_committed(kit: &Kit, cluster: Cluster) -> Result<Reading, String> {
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
