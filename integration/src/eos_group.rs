//! An exactly-once checker with real group membership and zombies that run
//! at the same time as their successors (review finding T3).
//!
//! **Workload.** As in [`crate::eos`]: `inputs` records with unique ids on
//! the input partitions, each turned into `out-<id>@<tag>` on the output,
//! the input offsets committed in the same transaction. Here two
//! application instances run *at the same time*, each a real
//! [`weir_group`] consumer-group member ([`GroupMember`], cooperative-sticky)
//! with its own transactional producer and its own transactional id
//! (KIP-447: the group generation, not the transactional id, fences a
//! zombie). A healthy instance reads only the partitions its member owns,
//! starts each from the group's stable offsets (`require_stable`), gates
//! its records on the member's [`Lease`](weir_group::member::Lease), and
//! commits offsets with [`GroupMember::send_offsets_to_transaction`], which
//! carries the member's real metadata (generation >= 0, read at commit
//! time). A killed or fenced instance is replaced by a fresh one (a new
//! process, so a new transactional id), as a supervisor would.
//!
//! **Faults** ([`GroupFault`]), drawn from the seed:
//! - a **zombie**: the instance that runs a given transaction has its
//!   member cut off from the group coordinator (a network partition of the
//!   member's client only: its producer still reaches every broker) and its
//!   processing stalls past the session timeout (a long GC pause), so the
//!   coordinator expels it and its partitions go to the other instance. The
//!   zombie then wakes up, ignores the `Lost` event, and goes on processing
//!   its old partitions while their new owner processes them too: it tries
//!   to commit offsets with the metadata it captured before the cut (the
//!   coordinator must answer `UNKNOWN_MEMBER_ID` / `ILLEGAL_GENERATION`), or
//!   with the member's metadata read at commit time (the member has none:
//!   `NoGroupGeneration`), and to commit the transaction. Afterwards it
//!   either heals and rejoins as a healthy member, or is killed hard;
//! - a **hard kill**: the instance is cut off from every broker, all three
//!   of its clients, and then dropped without `close`, with records in
//!   flight, after its offsets were added, or while its EndTxn is out. No
//!   graceful flush reaches a broker; its open transaction is left to the
//!   coordinator's transaction timeout;
//! - a **flap**: a healthy member is cut off from the coordinator in the
//!   middle of a transaction while the application is slow; it may be
//!   expelled and rejoin before its commit. See
//!   [`GroupSchedule::trust_commit_time_metadata`] for what that breaks.
//!
//! **Checks**: [`crate::eos::check`], on the same two readings (Weir's
//! read_committed consumer and the raw log with [`visible_in_log`](crate::eos::visible_in_log)). The
//! run also reports what the zombie did after another instance had been
//! assigned its partitions ([`ZombieReport`]), so a test can insist that the
//! fence was actually tested. [`GroupSchedule::bypass_fence`] is the
//! negative control: the zombie commits with
//! [`GroupMetadata::unchecked`], which the coordinator does not check, and
//! the checker must then find a violation.
//!
//! Run each schedule on tokio's paused clock, against its own in-memory
//! cluster ([`crate::testkit_dial`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions, IsolationLevel};
use weir_client::config::producer::ProducerOptions;
use weir_client::consumer::{Consumer, ConsumerRecord, SeekTo};
use weir_client::producer::{Producer, ProducerRecord, TopicPartition};
use weir_client::transaction::{
    GroupMetadata, TransactionConfig, TransactionErrorClass, TransactionalProducer,
    fetch_stable_offsets,
};
use weir_client::{ClientError, Cluster};
use weir_group::assignor::Assignor;
use weir_group::member::{AssignmentEvent, GroupMember, MemberConfig, ShutdownMode};
use weir_testkit::{
    ClientSelector, FaultId, Intercept, InterceptAction, PartitionTarget, RequestMatcher,
};

use crate::eos::{OUTPUT, OUTPUT_PARTITIONS, Observed, check, read_end_state};
use crate::testkit_dial::client_config;

type Kit = Arc<weir_testkit::Cluster>;

const INPUT: &str = "eosg-in";
const GROUP: &str = "eosg-app";
const INPUT_PARTITIONS: i32 = 4;
/// Brokers of the cluster: coordinators and leaders are spread over them.
pub const BROKERS: i32 = 3;
/// Instances running side by side at the start.
const INSTANCES: usize = 2;
/// `session.timeout.ms` of every member.
/// (The testkit's smallest, as Kafka's `group.min.session.timeout.ms`.)
pub const SESSION: Duration = Duration::from_secs(6);
const HEARTBEAT: Duration = Duration::from_millis(500);
/// How long an instance with nothing to read waits for an assignment
/// change before it reads again.
const IDLE: Duration = Duration::from_millis(200);
/// Also the rebalance timeout: how long a rebalance waits for a member.
const MAX_POLL: Duration = Duration::from_secs(30);
/// `transaction.timeout.ms`: how long a killed instance's transaction
/// hangs before the coordinator aborts it. Longer than any zombie pause
/// (at most [`ZOMBIE_WAIT`]), so a zombie's own transaction is not timed out.
const TXN_TIMEOUT: Duration = Duration::from_secs(20);
/// The longest a zombie waits, after its pause, to see another instance
/// assigned its partitions.
const ZOMBIE_WAIT: Duration = Duration::from_secs(15);
/// How often `commit`/`abort` are called again after a retriable error.
const COMMIT_ATTEMPTS: usize = 4;
/// Virtual time after which a run that has not finished fails.
const RUN_DEADLINE: Duration = Duration::from_secs(900);

/// Where in its transaction an instance stalls and becomes a zombie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZombieStep {
    /// Its input read, before `begin`.
    BeforeBegin,
    /// Its records sent and acknowledged, before the offsets.
    AfterSend,
    /// Its offsets in the transaction (accepted: it was still a member),
    /// before `commit`. Its commit after the pause is legitimate; the new
    /// owner's stable-offset fetch must wait for it.
    AfterOffsets,
}

/// The group metadata a zombie commits offsets with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZombieMetadata {
    /// Captured before the cut (generation and member id the coordinator
    /// has since dropped).
    Stale,
    /// The member's, read at commit time
    /// ([`GroupMember::send_offsets_to_transaction`]).
    AtCommit,
}

/// How a zombie ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZombieEnd {
    /// The partition heals; it drops its stale partitions and rejoins.
    Wake,
    /// It is killed hard during its last attempt, records in flight.
    Kill,
}

/// Where a hard kill hits a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillStep {
    /// Records enqueued, not yet acknowledged.
    AfterSend,
    /// Offsets added (pending at the group coordinator).
    AfterOffsets,
    /// `commit` running for the given virtual milliseconds.
    DuringCommit(u64),
}

/// One fault, applied by the first healthy instance whose transaction
/// number (counted over all instances, from 0) reaches `txn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupFault {
    /// The instance becomes a zombie.
    Zombie {
        /// Transaction number.
        txn: usize,
        /// Where it stalls.
        step: ZombieStep,
        /// What metadata it commits with.
        metadata: ZombieMetadata,
        /// The stall, past the session timeout.
        pause_ms: u64,
        /// Further transactions it tries on its stale partitions.
        retries: usize,
        /// How it ends.
        end: ZombieEnd,
    },
    /// A healthy instance's membership flaps in the middle of a
    /// transaction: after its records were acknowledged, its member is cut
    /// off from the group coordinator for `cut_ms` while the application
    /// takes `slow_ms` (a slow processing step, well below
    /// `max.poll.interval.ms`) before it commits its offsets the
    /// recommended way, [`GroupMember::send_offsets_to_transaction`].
    Flap {
        /// Transaction number.
        txn: usize,
        /// How long the member is cut off.
        cut_ms: u64,
        /// Cut off by connections that close (the member retries at once
        /// and rejoins as soon as the cut ends) instead of requests lost
        /// (a JoinGroup lost in the cut waits out its 35 s timeout).
        reset: bool,
        /// How long the application takes before its offsets.
        slow_ms: u64,
    },
    /// The instance is killed hard.
    Kill {
        /// Transaction number.
        txn: usize,
        /// Where.
        step: KillStep,
    },
}

impl GroupFault {
    fn txn(self) -> usize {
        match self {
            GroupFault::Zombie { txn, .. }
            | GroupFault::Flap { txn, .. }
            | GroupFault::Kill { txn, .. } => txn,
        }
    }
}

/// A replayable schedule: one zombie, and up to one hard kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSchedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Input records.
    pub inputs: usize,
    /// Input records per transaction (at most).
    pub per_txn: usize,
    /// Faults, in transaction order.
    pub faults: Vec<GroupFault>,
    /// Negative control: the zombie commits offsets with
    /// [`GroupMetadata::unchecked`], which turns the generation fence off.
    pub bypass_fence: bool,
    /// A healthy instance relies on
    /// [`GroupMember::send_offsets_to_transaction`] alone. Otherwise
    /// (the default) it first checks that the lease its transaction began
    /// under ([`Lease::gate`](weir_group::member::Lease::gate)) still
    /// holds, and aborts if not: the member's metadata read at commit time
    /// may belong to a later generation than the input it read (a member
    /// that lost its partitions and rejoined meanwhile), and the
    /// coordinator checks only the generation, not who owns the partitions.
    pub trust_commit_time_metadata: bool,
}

impl fmt::Display for GroupSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} ({} inputs, {} per transaction{}): {:?}",
            self.seed,
            self.inputs,
            self.per_txn,
            if self.bypass_fence {
                ", fence bypassed"
            } else {
                ""
            },
            self.faults
        )
    }
}

impl GroupSchedule {
    /// Draws a schedule from `seed`.
    pub fn from_seed(seed: u64) -> GroupSchedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let inputs: usize = rng.random_range(16..=32);
        let per_txn: usize = rng.random_range(2..=5);
        let mut faults = vec![GroupFault::Zombie {
            txn: rng.random_range(0..=2),
            step: [
                ZombieStep::BeforeBegin,
                ZombieStep::AfterSend,
                ZombieStep::AfterOffsets,
            ][rng.random_range(0..3)],
            metadata: if rng.random_bool(0.5) {
                ZombieMetadata::Stale
            } else {
                ZombieMetadata::AtCommit
            },
            pause_ms: rng.random_range(SESSION.as_millis() as u64 + 2000..=12_000),
            retries: rng.random_range(0..=2),
            end: if rng.random_bool(0.5) {
                ZombieEnd::Wake
            } else {
                ZombieEnd::Kill
            },
        }];
        if rng.random_bool(0.7) {
            faults.push(GroupFault::Kill {
                txn: rng.random_range(0..=4),
                step: match rng.random_range(0..3) {
                    0 => KillStep::AfterSend,
                    1 => KillStep::AfterOffsets,
                    _ => KillStep::DuringCommit(rng.random_range(0..=20)),
                },
            });
        }
        if rng.random_bool(0.3) {
            let cut_ms = rng.random_range(2000..=9000);
            faults.push(GroupFault::Flap {
                txn: rng.random_range(0..=4),
                cut_ms,
                reset: rng.random_bool(0.5),
                slow_ms: cut_ms + rng.random_range(500..=5000),
            });
        }
        faults.sort_by_key(|f| f.txn());
        GroupSchedule {
            seed,
            inputs,
            per_txn,
            faults,
            bypass_fence: false,
            trust_commit_time_metadata: false,
        }
    }

    /// The same schedule with the generation fence bypassed (negative
    /// control).
    pub fn bypassing_the_fence(mut self) -> GroupSchedule {
        self.bypass_fence = true;
        self
    }
}

/// What zombies and kills did, for the test to check that the fence was
/// really exercised.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ZombieReport {
    /// Zombies that ran.
    pub zombies: usize,
    /// Offset commits (`send_offsets_to_transaction`) and `commit`s a
    /// zombie attempted while another instance had been assigned one of
    /// the partitions it still processed.
    pub attempts_after_takeover: usize,
    /// Of those, the ones that succeeded (a transaction whose offsets the
    /// coordinator accepted before the expulsion may commit).
    pub successes_after_takeover: usize,
    /// The fencing errors zombies got, by name (`UNKNOWN_MEMBER_ID`,
    /// `ILLEGAL_GENERATION`, `NO_GENERATION` for a member with no lease,
    /// ...).
    pub fences: BTreeMap<String, usize>,
    /// Hard kills (zombies killed included).
    pub kills: usize,
    /// Records enqueued but not acknowledged when an instance was killed.
    pub in_flight_at_kill: usize,
    /// Kills and flaps never applied: the input ran out before their
    /// transaction.
    pub kills_not_reached: usize,
    /// Flaps applied.
    pub flaps: usize,
    /// Of those, transactions that committed although the member's
    /// generation changed between `begin` and the commit.
    pub flap_commits_across_generations: usize,
}

impl ZombieReport {
    /// All fencing errors zombies got.
    pub fn fence_count(&self) -> usize {
        self.fences.values().sum()
    }
}

/// What a run saw.
#[derive(Debug, Default, Clone)]
pub struct GroupObserved {
    /// The readings and end state, as [`crate::eos::check`] takes them.
    pub observed: Observed,
    /// What the zombies and kills did.
    pub zombie: ZombieReport,
}

/// A broken guarantee, or a run that could not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupViolation {
    /// The schedule, to replay.
    pub schedule: GroupSchedule,
    /// What went wrong.
    pub what: String,
}

impl fmt::Display for GroupViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exactly-once (group) violated: {}; replay {}",
            self.what, self.schedule
        )
    }
}

impl std::error::Error for GroupViolation {}

/// State the instances and the driver share. Never held across an await.
#[derive(Debug, Default)]
struct Board {
    aborted: BTreeSet<String>,
    txns: usize,
    recovered: usize,
    instances: usize,
    /// Faults not yet taken by an instance.
    pending: Vec<GroupFault>,
    /// Faults taken and not yet over (a zombie still running).
    active: usize,
    /// The instance last assigned each input partition.
    owners: BTreeMap<TopicPartition, usize>,
    /// A zombie runs now.
    zombie_running: bool,
    /// Healthy transactions aborted because their lease ended before the
    /// offsets.
    lease_ended_before_offsets: usize,
    report: ZombieReport,
}

#[derive(Debug, Clone)]
struct Shared {
    kit: Kit,
    schedule: Arc<GroupSchedule>,
    board: Arc<Mutex<Board>>,
    stop: watch::Receiver<bool>,
}

impl Shared {
    fn board(&self) -> MutexGuard<'_, Board> {
        // A poisoned lock only means another task panicked; the data is
        // still what it wrote.
        self.board.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How an instance ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Stopped,
    Killed,
    Fenced,
}

/// Runs `schedule` against a fresh in-process cluster and checks it. Run
/// it on a paused clock.
///
/// # Errors
/// A [`GroupViolation`] naming the seed and the schedule.
pub async fn run_group_schedule(schedule: &GroupSchedule) -> Result<GroupObserved, GroupViolation> {
    let violation = |what: String| GroupViolation {
        schedule: schedule.clone(),
        what,
    };
    let observed = run(schedule).await.map_err(violation)?;
    check(schedule.inputs, &observed.observed).map_err(violation)?;
    Ok(observed)
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

fn input_partitions() -> Vec<TopicPartition> {
    (0..INPUT_PARTITIONS)
        .map(|p| TopicPartition::new(INPUT, p))
        .collect()
}

async fn run(schedule: &GroupSchedule) -> Result<GroupObserved, String> {
    let kit: Kit = Arc::new(
        weir_testkit::Cluster::builder()
            .brokers(BROKERS)
            .group_initial_rebalance_delay(Duration::ZERO)
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
    let mut input_ends = BTreeMap::new();
    for p in 0..INPUT_PARTITIONS {
        let (_, _, hw) = kit.offsets(INPUT, p).await.map_err(|e| e.to_string())?;
        if hw > 0 {
            input_ends.insert(p, hw);
        }
    }

    let (stop_tx, stop) = watch::channel(false);
    let shared = Shared {
        kit: Arc::clone(&kit),
        schedule: Arc::new(schedule.clone()),
        board: Arc::new(Mutex::new(Board {
            pending: schedule.faults.clone(),
            ..Board::default()
        })),
        stop,
    };
    let (exits_tx, mut exits) = mpsc::unbounded_channel::<(usize, Result<Exit, String>)>();
    let spawn = |shared: &Shared| {
        let idx = {
            let mut b = shared.board();
            b.instances += 1;
            b.instances - 1
        };
        let shared = shared.clone();
        let exits_tx = exits_tx.clone();
        tokio::spawn(async move {
            let result = match Instance::start(shared, idx).await {
                Ok(instance) => instance.run().await,
                Err(e) => Err(format!("starting: {e}")),
            };
            let _ = exits_tx.send((idx, result));
        });
    };
    for _ in 0..INSTANCES {
        spawn(&shared);
    }
    let mut running = INSTANCES;

    let checker = client(&kit, "checker").await?;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            biased;
            exit = exits.recv() => {
                let Some((idx, exit)) = exit else {
                    return Err("every instance is gone".to_owned());
                };
                match exit.map_err(|e| format!("instance {idx}: {e}"))? {
                    Exit::Stopped => return Err(format!("instance {idx} stopped before the end")),
                    // A supervisor starts a fresh process.
                    Exit::Killed | Exit::Fenced => spawn(&shared),
                }
            }
            _ = tick.tick() => {
                if Instant::now() - started > RUN_DEADLINE {
                    let b = shared.board();
                    return Err(format!(
                        "the run did not finish in {RUN_DEADLINE:?}: faults pending {:?}, active {}, owners {:?}",
                        b.pending, b.active, b.owners
                    ));
                }
                if finished(&kit, &checker, &shared, &input_ends).await {
                    break;
                }
            }
        }
    }
    let _ = stop_tx.send(true);
    let deadline = Instant::now() + Duration::from_secs(120);
    while running > 0 {
        let exit = tokio::time::timeout_at(deadline, exits.recv())
            .await
            .map_err(|_| format!("{running} instances did not stop"))?;
        let Some((idx, exit)) = exit else { break };
        match exit.map_err(|e| format!("instance {idx} while stopping: {e}"))? {
            Exit::Stopped => running -= 1,
            Exit::Killed | Exit::Fenced => {
                return Err(format!("instance {idx} died while stopping"));
            }
        }
    }

    let mut observed = Observed {
        input_ends,
        ..Observed::default()
    };
    {
        let b = shared.board();
        observed.aborted = b.aborted.clone();
        observed.transactions = b.txns;
        observed.instances = b.instances;
        observed.recovered = b.recovered;
    }
    let offsets = fetch_stable_offsets(&checker, GROUP, &input_partitions())
        .await
        .map_err(|e| e.to_string())?;
    observed.offsets = offsets.iter().map(|(tp, o)| (tp.partition, *o)).collect();
    read_end_state(&kit, checker, &mut observed).await?;
    let zombie = {
        let b = shared.board();
        ZombieReport {
            kills_not_reached: b.pending.len(),
            ..b.report.clone()
        }
    };
    Ok(GroupObserved { observed, zombie })
}

/// Every fault applied and over, the committed offsets at the input ends,
/// and nothing left open (a killed instance's transaction is aborted by
/// the coordinator's timeout; the checks assert it happened).
async fn finished(
    kit: &Kit,
    checker: &Cluster,
    shared: &Shared,
    ends: &BTreeMap<i32, i64>,
) -> bool {
    {
        // A kill whose transaction was never reached (the input ran out
        // first) does not hold the run; a zombie does.
        let b = shared.board();
        let zombie_pending = b
            .pending
            .iter()
            .any(|f| matches!(f, GroupFault::Zombie { .. }));
        if zombie_pending || b.active > 0 {
            return false;
        }
    }
    let Ok(offsets) = fetch_stable_offsets(checker, GROUP, &input_partitions()).await else {
        return false;
    };
    let offsets: BTreeMap<i32, i64> = offsets.iter().map(|(tp, o)| (tp.partition, *o)).collect();
    if &offsets != ends {
        return false;
    }
    match kit.unfinished_transactions().await {
        Ok(open) => open.is_empty(),
        Err(_) => false,
    }
}

/// A zombie's state while it runs.
#[derive(Debug)]
struct Zombie {
    fault: GroupFault,
    /// The metadata captured before the cut.
    stale: GroupMetadata,
    /// The member's cut from the group coordinator.
    cut: FaultId,
    /// Attempts left, the current one included.
    attempts_left: usize,
    /// Where the current (first) attempt stalls; `None` once it did.
    stall: Option<ZombieStep>,
}

struct Instance {
    idx: usize,
    shared: Shared,
    member: GroupMember,
    producer: TransactionalProducer,
    consumer: Consumer,
    /// Partitions processed, each with its next offset.
    positions: BTreeMap<TopicPartition, i64>,
    /// Assigned, stable offsets not yet fetched.
    starting: BTreeSet<TopicPartition>,
    zombie: Option<Zombie>,
}

fn ids(idx: usize) -> [String; 3] {
    [
        format!("g{idx}-member"),
        format!("g{idx}-producer"),
        format!("g{idx}-consumer"),
    ]
}

/// The name of a fencing error (the zombie's membership or producer is
/// stale), if `e` is one.
fn fence_name(e: &ClientError) -> Option<String> {
    let ClientError::Transaction { source, .. } = e else {
        return None;
    };
    match source.as_ref() {
        ClientError::NoGroupGeneration { .. } => return Some("NO_GENERATION".to_owned()),
        ClientError::SendGateClosed { .. } => return Some("SEND_GATE_CLOSED".to_owned()),
        _ => {}
    }
    let code = source.kafka_code()?;
    // 22 ILLEGAL_GENERATION, 25 UNKNOWN_MEMBER_ID, 27 REBALANCE_IN_PROGRESS,
    // 47 INVALID_PRODUCER_EPOCH, 82 FENCED_INSTANCE_ID, 90 PRODUCER_FENCED.
    matches!(code.code, 22 | 25 | 27 | 47 | 82 | 90).then(|| code.name.to_owned())
}

fn value_of(r: &ConsumerRecord) -> String {
    String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
}

impl Instance {
    async fn start(shared: Shared, idx: usize) -> Result<Instance, String> {
        let [member_id, producer_id, consumer_id] = ids(idx);
        let config = MemberConfig::new(GROUP, [INPUT])
            .with_assignors([Assignor::CooperativeSticky])
            .with_session_timeout(SESSION)
            .with_heartbeat_interval(HEARTBEAT)
            .with_max_poll_interval(MAX_POLL);
        let member = GroupMember::start(client(&shared.kit, &member_id).await?, config)
            .map_err(|e| e.to_string())?;
        let producer = TransactionalProducer::with_cluster(
            client(&shared.kit, &producer_id).await?,
            ProducerOptions {
                linger: Duration::from_millis(1),
                // A killed instance's producer gives up its buffered
                // records this long after the kill.
                delivery_timeout: Duration::from_secs(10),
                ..ProducerOptions::default()
            },
            TransactionConfig::new(format!("{GROUP}-{idx}")).with_timeout(TXN_TIMEOUT),
        )
        .map_err(|e| e.to_string())?;
        producer
            .init_transactions()
            .await
            .map_err(|e| format!("init_transactions: {e}"))?;
        let consumer = Consumer::with_cluster(
            client(&shared.kit, &consumer_id).await?,
            ConsumerOptions {
                isolation_level: IsolationLevel::ReadCommitted,
                auto_offset_reset: AutoOffsetReset::Earliest,
                fetch_max_wait: Duration::from_millis(10),
                ..ConsumerOptions::default()
            },
        );
        Ok(Instance {
            idx,
            shared,
            member,
            producer,
            consumer,
            positions: BTreeMap::new(),
            starting: BTreeSet::new(),
            zombie: None,
        })
    }

    async fn run(mut self) -> Result<Exit, String> {
        loop {
            if self.zombie.is_none() && *self.shared.stop.borrow() {
                self.producer.close().await;
                self.member.close(ShutdownMode::Planned).await;
                return Ok(Exit::Stopped);
            }
            self.drain_events().await?;
            // A healthy instance writes only under a valid lease: between
            // generations it waits for the member to settle.
            if self.zombie.is_none() && !self.member.lease().is_valid() {
                self.idle().await?;
                continue;
            }
            self.start_assigned().await;
            let records = self.read().await?;
            if records.is_empty() {
                // A zombie with nothing left to process ends.
                if self.zombie.is_some()
                    && let Some(exit) = self.end_zombie().await?
                {
                    return Ok(exit);
                }
                self.idle().await?;
                continue;
            }
            if let Some(exit) = self.transaction(records).await? {
                return Ok(exit);
            }
        }
    }

    /// Waits a while for an assignment change.
    async fn idle(&mut self) -> Result<(), String> {
        if let Ok(event) = tokio::time::timeout(IDLE, self.member.next_event()).await {
            self.handle(event.map_err(|e| format!("membership: {e}"))?);
        }
        Ok(())
    }

    async fn drain_events(&mut self) -> Result<(), String> {
        while let Ok(event) = tokio::time::timeout(Duration::ZERO, self.member.next_event()).await {
            self.handle(event.map_err(|e| format!("membership: {e}"))?);
        }
        Ok(())
    }

    fn handle(&mut self, event: AssignmentEvent) {
        match event {
            AssignmentEvent::Assigned {
                partitions: added, ..
            } => {
                let mut b = self.shared.board();
                for tp in added {
                    let tp = TopicPartition::new(tp.topic, tp.partition);
                    b.owners.insert(tp.clone(), self.idx);
                    self.starting.insert(tp);
                }
            }
            AssignmentEvent::Revoked(revocation) => {
                // Between transactions: every position is committed.
                for tp in &revocation.partitions {
                    let tp = TopicPartition::new(tp.topic.clone(), tp.partition);
                    self.positions.remove(&tp);
                    self.starting.remove(&tp);
                }
                revocation.ack();
            }
            // A zombie does not notice: it goes on with its old partitions.
            AssignmentEvent::Lost(_) if self.zombie.is_some() => {}
            AssignmentEvent::Lost(lost) => {
                for tp in lost {
                    let tp = TopicPartition::new(tp.topic, tp.partition);
                    self.positions.remove(&tp);
                    self.starting.remove(&tp);
                }
            }
        }
    }

    /// Fetches the stable offsets of assigned partitions; tried again on
    /// the next round if they stay unstable (a transaction holding their
    /// offsets is still open).
    async fn start_assigned(&mut self) {
        if self.starting.is_empty() {
            return;
        }
        let tps: Vec<TopicPartition> = self.starting.iter().cloned().collect();
        if let Ok(stable) = fetch_stable_offsets(self.producer.cluster(), GROUP, &tps).await {
            for tp in tps {
                let at = stable.get(&tp).copied().unwrap_or(0);
                self.positions.insert(tp, at);
            }
            self.starting.clear();
        }
    }

    /// Up to `per_txn` records from the current positions.
    async fn read(&mut self) -> Result<Vec<ConsumerRecord>, String> {
        if self.positions.is_empty() {
            return Ok(Vec::new());
        }
        self.consumer.assign(self.positions.keys().cloned());
        for (tp, at) in &self.positions {
            self.consumer
                .seek(tp, SeekTo::Offset(*at))
                .map_err(|e| e.to_string())?;
        }
        let mut records = Vec::new();
        for _ in 0..5 {
            records.extend(
                self.consumer
                    .poll_for(Duration::from_millis(20))
                    .await
                    .map_err(|e| e.to_string())?,
            );
            if !records.is_empty() {
                break;
            }
        }
        records.truncate(self.shared.schedule.per_txn);
        Ok(records)
    }

    /// Whether another instance was assigned one of the partitions this
    /// one processes.
    fn taken_over(&self) -> bool {
        let b = self.shared.board();
        self.positions
            .keys()
            .any(|tp| b.owners.get(tp).is_some_and(|o| *o != self.idx))
    }

    /// Takes the first pending fault due at transaction `n`, for a healthy
    /// instance.
    fn take_fault(&self, n: usize) -> Option<GroupFault> {
        if self.zombie.is_some() {
            return None;
        }
        let mut b = self.shared.board();
        // A flap waits until the zombie is over: its instance is the
        // zombie's successor, and must be able to take over.
        let zombie_ahead = b.zombie_running
            || b.pending
                .iter()
                .any(|f| matches!(f, GroupFault::Zombie { .. }));
        let i = b.pending.iter().position(|f| {
            f.txn() <= n && !(zombie_ahead && matches!(f, GroupFault::Flap { .. }))
        })?;
        let fault = b.pending.remove(i);
        b.active += 1;
        // Set in the same step, so no flap is taken before the zombie runs.
        b.zombie_running |= matches!(fault, GroupFault::Zombie { .. });
        Some(fault)
    }

    fn put_back(&self, fault: GroupFault) {
        let mut b = self.shared.board();
        b.pending.insert(0, fault);
        b.active -= 1;
        b.zombie_running = false;
    }

    /// Cuts the member off from the group coordinator; the instance is a
    /// zombie from now on. False (fault put back) if the member has no
    /// metadata to capture right now.
    async fn become_zombie(&mut self, fault: GroupFault) -> Result<bool, String> {
        let GroupFault::Zombie {
            step, retries, end, ..
        } = fault
        else {
            return Ok(false);
        };
        let Ok(stale) = self.member.metadata() else {
            self.put_back(fault);
            return Ok(false);
        };
        let [member_id, ..] = ids(self.idx);
        let cut = self
            .shared
            .kit
            .partition_client(
                ClientSelector::ClientId(member_id),
                PartitionTarget::GroupCoordinator(GROUP.into()),
            )
            .await
            .map_err(|e| e.to_string())?;
        self.shared.board().report.zombies += 1;
        self.zombie = Some(Zombie {
            fault,
            stale: stale.into(),
            cut,
            // A zombie that ends killed dies in one more attempt, after
            // its sends, with records in flight.
            attempts_left: retries + 1 + usize::from(end == ZombieEnd::Kill),
            stall: Some(step),
        });
        Ok(true)
    }

    /// The stall of a zombie at `step`: the pause, then until another
    /// instance was assigned its partitions (bounded).
    async fn stall(&mut self, step: ZombieStep) {
        let Some(z) = &mut self.zombie else { return };
        if z.stall != Some(step) {
            return;
        }
        z.stall = None;
        let GroupFault::Zombie { pause_ms, .. } = z.fault else {
            return;
        };
        let began = Instant::now();
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        while !self.taken_over() && Instant::now() - began < ZOMBIE_WAIT {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn is_last_zombie_attempt_killed(&self) -> bool {
        self.zombie.as_ref().is_some_and(|z| {
            z.attempts_left == 1
                && z.stall.is_none()
                && matches!(
                    z.fault,
                    GroupFault::Zombie {
                        end: ZombieEnd::Kill,
                        ..
                    }
                )
        })
    }

    /// Counts a zombie's transactional write and its outcome.
    fn note_zombie_attempt(&self, result: &Result<(), ClientError>) {
        if self.zombie.is_none() {
            return;
        }
        let after_takeover = self.taken_over();
        let mut b = self.shared.board();
        if after_takeover {
            b.report.attempts_after_takeover += 1;
            if result.is_ok() {
                b.report.successes_after_takeover += 1;
            }
        }
        if let Err(e) = result
            && let Some(name) = fence_name(e)
        {
            *b.report.fences.entry(name).or_default() += 1;
        }
    }

    /// A zombie's attempt is over: the next one, or the zombie ends.
    async fn zombie_attempt_done(&mut self) -> Result<Option<Exit>, String> {
        let Some(z) = &mut self.zombie else {
            return Ok(None);
        };
        z.attempts_left = z.attempts_left.saturating_sub(1);
        if z.attempts_left > 0 {
            return Ok(None);
        }
        self.end_zombie().await
    }

    /// The zombie ends: killed, or it wakes (the partition heals, it
    /// gives up what it had lost and rejoins as a healthy member).
    async fn end_zombie(&mut self) -> Result<Option<Exit>, String> {
        let Some(z) = self.zombie.take() else {
            return Ok(None);
        };
        self.shared.board().zombie_running = false;
        if matches!(
            z.fault,
            GroupFault::Zombie {
                end: ZombieEnd::Kill,
                ..
            }
        ) {
            return self.kill(0).await.map(Some);
        }
        self.positions.clear();
        self.starting.clear();
        self.shared
            .kit
            .remove_fault(z.cut)
            .await
            .map_err(|e| e.to_string())?;
        self.shared.board().active -= 1;
        Ok(None)
    }

    /// Cuts the member off from the group coordinator for `cut_ms` (healed
    /// by a task of its own) and takes `slow_ms` meanwhile.
    async fn flap(&self, cut_ms: u64, reset: bool, slow_ms: u64) -> Result<(), String> {
        let [member_id, ..] = ids(self.idx);
        let kit = &self.shared.kit;
        let cut = if reset {
            kit.intercept(Intercept::new(
                RequestMatcher::any().client(member_id),
                InterceptAction::CloseConnection,
            ))
            .await
        } else {
            kit.partition_client(
                ClientSelector::ClientId(member_id),
                PartitionTarget::GroupCoordinator(GROUP.into()),
            )
            .await
        }
        .map_err(|e| e.to_string())?;
        let kit = Arc::clone(&self.shared.kit);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(cut_ms)).await;
            let _ = kit.remove_fault(cut).await;
        });
        tokio::time::sleep(Duration::from_millis(slow_ms)).await;
        Ok(())
    }

    /// Cuts every client of this instance off from every broker; the
    /// caller then drops the instance without closing anything, so nothing
    /// buffered or in flight gets through.
    async fn kill(&mut self, in_flight: usize) -> Result<Exit, String> {
        for id in ids(self.idx) {
            for broker in 0..BROKERS {
                self.shared
                    .kit
                    .partition_client(
                        ClientSelector::ClientId(id.clone()),
                        PartitionTarget::Broker(broker),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        let mut b = self.shared.board();
        if self.zombie.take().is_some() {
            b.zombie_running = false;
        }
        b.report.kills += 1;
        b.report.in_flight_at_kill += in_flight;
        b.active -= 1;
        Ok(Exit::Killed)
    }

    /// One transaction over `records`. `Some` when the instance ends.
    async fn transaction(&mut self, records: Vec<ConsumerRecord>) -> Result<Option<Exit>, String> {
        let n = {
            let mut b = self.shared.board();
            b.txns += 1;
            b.txns - 1
        };
        if n > self.shared.schedule.inputs * 6 + 40 {
            return Err("too many transactions".to_owned());
        }
        let mut kill = None;
        let mut flap = None;
        match self.take_fault(n) {
            Some(fault @ GroupFault::Zombie { .. }) => {
                self.become_zombie(fault).await?;
            }
            Some(GroupFault::Kill { step, .. }) => kill = Some(step),
            Some(GroupFault::Flap {
                cut_ms,
                reset,
                slow_ms,
                ..
            }) => {
                let mut b = self.shared.board();
                b.active -= 1;
                b.report.flaps += 1;
                flap = Some((cut_ms, reset, slow_ms));
            }
            None => {}
        }
        let generation_at_begin = self.member.generation();
        let zombie_killed = self.is_last_zombie_attempt_killed();
        let tag = format!("i{}t{n}", self.idx);
        self.stall(ZombieStep::BeforeBegin).await;
        // A healthy instance binds its records to the lease it has now.
        let gate = self.zombie.is_none().then(|| self.member.lease().gate());
        self.producer.begin().map_err(|e| e.to_string())?;
        let mut next = self.positions.clone();
        let failed: Option<(&str, ClientError)> = 'txn: {
            let mut deliveries = Vec::new();
            for r in &records {
                let id = value_of(r);
                let mut record = ProducerRecord::new(OUTPUT)
                    .with_key(id.clone())
                    .with_value(format!("out-{id}@{tag}"));
                if let Some(gate) = &gate {
                    record = record.with_gate(gate.clone());
                }
                match self.producer.enqueue(record).await {
                    Ok(delivery) => deliveries.push(delivery),
                    Err(e) => break 'txn Some(("send", e)),
                }
                next.insert(TopicPartition::new(INPUT, r.partition), r.offset + 1);
            }
            if kill == Some(KillStep::AfterSend) || zombie_killed {
                let mut in_flight = 0;
                for d in deliveries {
                    if tokio::time::timeout(Duration::ZERO, d).await.is_err() {
                        in_flight += 1;
                    }
                }
                return self.kill(in_flight).await.map(Some);
            }
            for d in deliveries {
                if let Err(e) = d.await {
                    break 'txn Some(("send", e));
                }
            }
            if let Some((cut_ms, reset, slow_ms)) = flap {
                self.flap(cut_ms, reset, slow_ms).await?;
            }
            self.stall(ZombieStep::AfterSend).await;
            let offsets = match &self.zombie {
                Some(_) if self.shared.schedule.bypass_fence => {
                    self.producer
                        .send_offsets_to_transaction(&next, &GroupMetadata::unchecked(GROUP))
                        .await
                }
                Some(Zombie {
                    fault:
                        GroupFault::Zombie {
                            metadata: ZombieMetadata::Stale,
                            ..
                        },
                    stale,
                    ..
                }) => {
                    let stale = stale.clone();
                    self.producer
                        .send_offsets_to_transaction(&next, &stale)
                        .await
                }
                None if !self.shared.schedule.trust_commit_time_metadata
                    && gate.as_ref().is_some_and(|g| !g.is_open()) =>
                {
                    // The lease the input was read under ended: abort.
                    self.shared.board().lease_ended_before_offsets += 1;
                    break 'txn None;
                }
                _ => {
                    self.member
                        .send_offsets_to_transaction(&self.producer, &next)
                        .await
                }
            };
            self.note_zombie_attempt(&offsets);
            if let Err(e) = offsets {
                break 'txn Some(("send_offsets_to_transaction", e));
            }
            if kill == Some(KillStep::AfterOffsets) {
                return self.kill(0).await.map(Some);
            }
            self.stall(ZombieStep::AfterOffsets).await;
            if let Some(KillStep::DuringCommit(ms)) = kill {
                let _ =
                    tokio::time::timeout(Duration::from_millis(ms), self.producer.commit()).await;
                return self.kill(0).await.map(Some);
            }
            let mut attempt = 0;
            let committed = loop {
                let result = self.producer.commit().await;
                match result {
                    Err(e)
                        if e.transaction_class() == Some(TransactionErrorClass::Retriable)
                            && attempt < COMMIT_ATTEMPTS =>
                    {
                        attempt += 1;
                    }
                    result => break result,
                }
            };
            self.note_zombie_attempt(&committed);
            match committed {
                Ok(()) => {
                    if flap.is_some() && self.member.generation() != generation_at_begin {
                        self.shared.board().report.flap_commits_across_generations += 1;
                    }
                    self.positions = next;
                    return self.zombie_attempt_done().await;
                }
                Err(e) => break 'txn Some(("commit", e)),
            }
        };
        // The transaction is to be aborted. An instance due to be killed
        // in it dies here instead.
        if kill.is_some() {
            return self.kill(0).await.map(Some);
        }
        if let Some((operation, e)) = failed {
            match e.transaction_class() {
                Some(TransactionErrorClass::Fatal) => {
                    let mut b = self.shared.board();
                    if self.zombie.is_some() {
                        b.active -= 1;
                        b.zombie_running = false;
                    }
                    return Ok(Some(Exit::Fenced));
                }
                Some(TransactionErrorClass::Abortable | TransactionErrorClass::Retriable) => {
                    self.shared.board().recovered += 1;
                }
                _ => return Err(format!("{operation} in transaction {tag}: {e}")),
            }
        }
        let mut attempt = 0;
        loop {
            match self.producer.abort().await {
                Ok(()) => break,
                Err(e) if e.transaction_class() == Some(TransactionErrorClass::Fatal) => {
                    let mut b = self.shared.board();
                    if self.zombie.is_some() {
                        b.active -= 1;
                        b.zombie_running = false;
                    }
                    return Ok(Some(Exit::Fenced));
                }
                Err(e)
                    if e.transaction_class() == Some(TransactionErrorClass::Retriable)
                        && attempt < COMMIT_ATTEMPTS =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(format!("abort of {tag}: {e}")),
            }
        }
        self.shared.board().aborted.insert(tag);
        self.zombie_attempt_done().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_schedule_with_one_zombie() {
        assert_eq!(GroupSchedule::from_seed(3), GroupSchedule::from_seed(3));
        assert_ne!(GroupSchedule::from_seed(3), GroupSchedule::from_seed(4));
        for seed in 0..50 {
            let s = GroupSchedule::from_seed(seed);
            let zombies = s
                .faults
                .iter()
                .filter(|f| matches!(f, GroupFault::Zombie { .. }))
                .count();
            assert_eq!(zombies, 1, "{s}");
        }
    }
}
