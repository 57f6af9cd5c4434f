//! The exactly-once checker over the streams runtime: a stateful
//! application run by several [`KafkaStreams`] instances through a seeded
//! schedule of faults, its result decided from the testkit's raw logs and
//! the instances' state directories, never through Weir's own consumer.
//!
//! **Application.** Input records keyed by one of a few keys, each with a
//! unique id as its value. One subtopology: a *dedup* processor keeps the
//! ids it has seen in a persistent window store (`seen`) and drops a repeat;
//! a *count* processor keeps a count per key in a persistent key-value
//! store (`counts`) and writes `key → count` to the output. Both stores
//! have changelogs. An input with an id starting `poison` makes the dedup
//! fail once, after its put (a processing error that aborts the task's
//! work: that put must never stay).
//!
//! **Faults** ([`StreamsFault`]), drawn from the seed, between batches of
//! input: a kill with requests in flight (restarted on the same state
//! directory, on a lost one, or replaced by a new instance with an empty
//! one); a zombie (an instance's member cut off from the group coordinator
//! while its worker is paused past the session timeout right after its
//! lease check, then woken up); an instance cut off from the group
//! coordinator or from a partition leader for a while; a coordinator move;
//! lost Produce or EndTxn responses; an EndTxn held past the transaction
//! timeout; a processing error; a graceful rolling restart of every
//! instance; a new instance joining with an empty state directory. With
//! standbys, kills promote them.
//!
//! **Checks** ([`check`]), once every instance is closed:
//! - the committed output (from the raw log and its markers): under
//!   exactly-once, per key exactly the counts `1, 2, …, n` in order, each
//!   input applied once; under at-least-once, each of those counts at least
//!   once and none above `n`;
//! - the committed changelogs: per key the counts `1, 2, …, n` in order and
//!   each id in `seen` once. A write from an owner after it was fenced (a
//!   zombie's stale count) shows here as a repeat;
//! - every task store in every state directory, dead instances' included,
//!   equals the replay of its committed changelog up to the offset it
//!   committed with its data;
//! - no transaction is left open (every partition's last stable offset is
//!   its high watermark).
//!
//! [`StreamsSchedule::unfenced`] is the negative control: at-least-once
//! without the per-task changelog fence (as Kafka Streams runs it); with a
//! zombie in the schedule the checker must find a violation.
//!
//! Run each schedule on tokio's paused clock, against its own in-memory
//! cluster ([`crate::testkit_dial`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_client::Cluster as Client;
use weir_client::producer::{Producer, ProducerRecord};
use weir_protocol::ApiKey;
use weir_streams::config::{PauseHook, StreamsConfig};
use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::state::{KvStoreRef, WindowStoreRef};
use weir_streams::{KafkaStreams, ProcessError, Record, Topology, TopologyBuilder};
use weir_testkit::{ClientSelector, Intercept, InterceptAction, PartitionTarget, RequestMatcher};

use crate::eos::visible_records;
use crate::testkit_dial::client_config;

type Kit = Arc<weir_testkit::Cluster>;

/// The application id (and group).
pub const APP: &str = "sc";
const INPUT: &str = "sc-in";
const OUTPUT: &str = "sc-out";
const COUNTS: &str = "counts";
const SEEN: &str = "seen";
const PARTITIONS: i32 = 4;
/// Brokers of the cluster: coordinators and leaders are spread over them.
pub const BROKERS: i32 = 3;
const KEYS: usize = 6;
/// The dedup store's retention: far longer than the inputs' time span, so
/// no id ever expires and a replay of the changelog is the whole store.
const RETENTION: Duration = Duration::from_secs(24 * 3600);
/// `session.timeout.ms` of every member.
pub const SESSION: Duration = Duration::from_secs(10);
/// How long a zombie's worker stays paused: past the session timeout, so
/// its tasks have moved when it wakes.
const ZOMBIE_PAUSE: Duration = Duration::from_secs(30);
/// `transaction.timeout.ms` under exactly-once.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);
/// Virtual time after which a run whose output is not complete fails.
const RUN_DEADLINE: Duration = Duration::from_secs(900);

/// The processing guarantee of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarantee {
    /// `at_least_once`, with the per-task changelog fence unless
    /// [`StreamsSchedule::unfenced`].
    AtLeastOnce,
    /// `exactly_once_v2`.
    ExactlyOnce,
}

/// What follows a kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// The same instance id on the same state directory.
    SameDirectory,
    /// The same instance id on an empty state directory (the disk was lost).
    LostDirectory,
    /// A new instance, with a new id and an empty state directory; the old
    /// directory stays as the crash left it.
    NewInstance,
}

/// Which response is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostApi {
    /// Produce: the write happened, the client retries it.
    Produce,
    /// EndTxn: the commit or abort happened, the client retries it.
    EndTxn,
}

/// One fault of a schedule; `slot` is an index into the running instances
/// (modulo their number when the fault happens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamsFault {
    /// Cut off from every broker with requests in flight, then dropped.
    Kill {
        /// Which instance.
        slot: usize,
        /// What replaces it.
        restart: Restart,
    },
    /// Its member cut off from the group coordinator and its Produce
    /// requests delayed (they land after its tasks moved), while its worker
    /// is paused past the session timeout after its lease check; it wakes
    /// up and tries to write what it processed before.
    Zombie {
        /// Which instance.
        slot: usize,
    },
    /// Cut off from the group coordinator for `secs`.
    CutCoordinator {
        /// Which instance.
        slot: usize,
        /// For how long, virtual seconds.
        secs: u64,
    },
    /// Cut off from the broker leading an input partition for `secs`.
    CutLeader {
        /// Which instance.
        slot: usize,
        /// The input partition whose leader it loses.
        partition: i32,
        /// For how long, virtual seconds.
        secs: u64,
    },
    /// The group coordinator moves to another broker.
    MoveCoordinator,
    /// The next `count` responses of `api` to an instance are lost.
    LoseResponses {
        /// Which instance.
        slot: usize,
        /// Which API.
        api: LostApi,
        /// How many.
        count: u32,
    },
    /// An instance's next EndTxn is held past the transaction timeout: the
    /// coordinator aborts the transaction and bumps the epoch first.
    TransactionTimeout {
        /// Which instance.
        slot: usize,
    },
    /// The next batch starts with a `poison` input that fails once.
    ProcessingError,
    /// Every instance in turn is closed gracefully and restarted on its
    /// state directory.
    RollingRestart,
    /// A new instance joins with an empty state directory.
    Join,
}

/// A seeded run: the application's shape, its guarantee and its faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamsSchedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The processing guarantee.
    pub guarantee: Guarantee,
    /// Instances at the start (2–4).
    pub instances: usize,
    /// `num.stream.threads` (1–3).
    pub threads: usize,
    /// `num.standby.replicas` (0–2, fewer than the instances).
    pub standbys: usize,
    /// Inputs in each batch; one batch before each fault and one after.
    pub batch: usize,
    /// The faults, in order.
    pub faults: Vec<StreamsFault>,
    /// The negative control: at-least-once without the changelog fence.
    pub unfenced: bool,
    /// The testkit without Kafka's timing (no initial rebalance delay,
    /// markers before EndTxn's answer): see
    /// [`StreamsSchedule::unfenced_with_zombie`].
    pub instant_timing: bool,
}

impl StreamsSchedule {
    /// The schedule of `seed`.
    ///
    /// ```
    /// use weir_integration::streams_checker::StreamsSchedule;
    /// let s = StreamsSchedule::from_seed(7);
    /// assert_eq!(s, StreamsSchedule::from_seed(7));
    /// assert!((2..=4).contains(&s.instances) && s.standbys < s.instances);
    /// ```
    pub fn from_seed(seed: u64) -> StreamsSchedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let guarantee = if rng.random_bool(0.5) {
            Guarantee::ExactlyOnce
        } else {
            Guarantee::AtLeastOnce
        };
        let instances = rng.random_range(2..=4);
        let threads = rng.random_range(1..=3);
        let standbys = rng.random_range(0..=2).min(instances - 1);
        let faults = (0..rng.random_range(1..=3))
            .map(|_| random_fault(&mut rng))
            .collect();
        StreamsSchedule {
            seed,
            guarantee,
            instances,
            threads,
            standbys,
            batch: rng.random_range(8..=24),
            faults,
            unfenced: false,
            instant_timing: false,
        }
    }

    /// The negative control for `seed`: at-least-once, unfenced, with a
    /// zombie as its first fault.
    pub fn unfenced_with_zombie(seed: u64) -> StreamsSchedule {
        let mut s = StreamsSchedule::from_seed(seed);
        s.guarantee = Guarantee::AtLeastOnce;
        s.unfenced = true;
        // The zombie's pause is timed against the rebalances of instant
        // timing: under Kafka's 3 s initial rebalance delay these seeds'
        // zombie no longer writes for a task that moved, and the control
        // finds nothing.
        s.instant_timing = true;
        s.faults.insert(0, StreamsFault::Zombie { slot: 0 });
        s
    }
}

fn random_fault(rng: &mut StdRng) -> StreamsFault {
    let slot = rng.random_range(0..4);
    match rng.random_range(0..12) {
        0 | 1 => StreamsFault::Kill {
            slot,
            restart: match rng.random_range(0..3) {
                0 => Restart::SameDirectory,
                1 => Restart::LostDirectory,
                _ => Restart::NewInstance,
            },
        },
        2 => StreamsFault::Zombie { slot },
        3 => StreamsFault::CutCoordinator {
            slot,
            secs: rng.random_range(2..=25),
        },
        4 => StreamsFault::CutLeader {
            slot,
            partition: rng.random_range(0..PARTITIONS),
            secs: rng.random_range(2..=25),
        },
        5 => StreamsFault::MoveCoordinator,
        6 => StreamsFault::LoseResponses {
            slot,
            api: LostApi::Produce,
            count: rng.random_range(1..=3),
        },
        7 => StreamsFault::LoseResponses {
            slot,
            api: LostApi::EndTxn,
            count: rng.random_range(1..=2),
        },
        8 => StreamsFault::TransactionTimeout { slot },
        9 => StreamsFault::ProcessingError,
        10 => StreamsFault::RollingRestart,
        _ => StreamsFault::Join,
    }
}

/// What a run saw, for a test to insist that its faults did something.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamsObserved {
    /// Inputs produced.
    pub inputs: usize,
    /// Committed output records.
    pub outputs: usize,
    /// Task stores compared with their changelogs.
    pub stores_checked: usize,
    /// Zombie workers that paused (and later woke up).
    pub zombie_pauses: u32,
    /// Poison inputs that failed.
    pub processing_errors: u32,
    /// Graceful closes that did not finish in time (the instance was then
    /// dropped as it was, as `close` promises): a liveness figure, not a
    /// violation; the checks cover what such an instance left behind.
    pub close_timeouts: u32,
}

/// A schedule whose run broke a guarantee (or did not finish).
#[derive(Debug, Clone)]
pub struct StreamsViolation {
    /// The schedule.
    pub schedule: StreamsSchedule,
    /// What went wrong.
    pub what: String,
}

impl fmt::Display for StreamsViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} ({:?}, {} instances × {} threads, {} standbys, unfenced {}; faults {:?}): {}",
            self.schedule.seed,
            self.schedule.guarantee,
            self.schedule.instances,
            self.schedule.threads,
            self.schedule.standbys,
            self.schedule.unfenced,
            self.schedule.faults,
            self.what
        )
    }
}

// ---------------------------------------------------------------------------
// The application.

struct Dedup {
    seen: WindowStoreRef<String, String>,
    poisoned: Arc<AtomicU32>,
}

impl Processor<String, String> for Dedup {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        let seen = ctx.window_store(&self.seen)?;
        if !seen.fetch(&r.value, r.timestamp, r.timestamp)?.is_empty() {
            return Ok(());
        }
        seen.put(&r.value, &r.key, r.timestamp)?;
        // Fails once per poison input, after its put: the put must go with
        // the aborted work.
        if r.value.starts_with("poison") && self.poisoned.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(ProcessError::msg("cannot process poison"));
        }
        ctx.forward(r);
        Ok(())
    }
}

struct Count(KvStoreRef<String, u64>);

impl Processor<String, String> for Count {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        let counts = ctx.kv_store(&self.0)?;
        let n = counts.get(&r.key)?.unwrap_or(0) + 1;
        counts.put(&r.key, &n, r.timestamp)?;
        ctx.forward(Record::new(r.key, n.to_string(), r.timestamp));
        Ok(())
    }
}

fn topology(poisoned: &Arc<AtomicU32>) -> Result<Topology, String> {
    let mut b = TopologyBuilder::new();
    let seen = b.window_store::<String, String>(SEEN, RETENTION);
    let counts = b.kv_store::<String, u64>(COUNTS);
    let input = b.source::<String, String>("input", &[INPUT]);
    let (s, p) = (seen.clone(), Arc::clone(poisoned));
    let deduped = b.processor(
        "dedup",
        &[&input],
        move || Dedup {
            seen: s.clone(),
            poisoned: Arc::clone(&p),
        },
        &[&seen],
    );
    let c = counts.clone();
    let counted = b.processor("count", &[&deduped], move || Count(c.clone()), &[&counts]);
    b.sink("out", &[&counted], OUTPUT);
    b.build().map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------
// A run.

struct Instance {
    id: String,
    dir: PathBuf,
    streams: KafkaStreams,
    zombie: Arc<AtomicBool>,
}

impl Run<'_> {
    /// Waits (at most a minute) until the running instances' active tasks
    /// cover every input partition.
    async fn await_first_assignment(&self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let active: BTreeSet<_> = self
                .running
                .iter()
                .flat_map(|i| i.streams.metrics().tasks.into_keys())
                .collect();
            if active.len() >= usize::try_from(PARTITIONS).unwrap_or(0) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "only {} tasks assigned a minute after the start",
                    active.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

struct Run<'a> {
    schedule: &'a StreamsSchedule,
    kit: Kit,
    root: tempfile::TempDir,
    running: Vec<Instance>,
    next_id: usize,
    poisoned: Arc<AtomicU32>,
    zombie_pauses: Arc<AtomicU32>,
    produced: usize,
    poison_next: bool,
    expected: BTreeMap<String, usize>,
    ids: BTreeSet<String>,
    close_timeouts: u32,
}

fn fail(what: impl fmt::Display) -> String {
    what.to_string()
}

impl Run<'_> {
    fn config(
        &self,
        id: &str,
        dir: &Path,
        zombie: &Arc<AtomicBool>,
    ) -> Result<StreamsConfig, String> {
        let guarantee = match self.schedule.guarantee {
            Guarantee::AtLeastOnce => "at_least_once",
            Guarantee::ExactlyOnce => "exactly_once_v2",
        };
        let threads = self.schedule.threads.to_string();
        let standbys = self.schedule.standbys.to_string();
        let session = SESSION.as_millis().to_string();
        let txn_timeout = TXN_TIMEOUT.as_millis().to_string();
        let state_dir = dir.to_string_lossy().into_owned();
        let mut props = vec![
            ("application.id", APP),
            ("bootstrap.servers", "placeholder:1"),
            ("client.id", id),
            ("group.instance.id", id),
            ("session.timeout.ms", session.as_str()),
            ("heartbeat.interval.ms", "1000"),
            ("fetch.max.wait.ms", "100"),
            ("linger.ms", "5"),
            ("commit.interval.ms", "500"),
            ("processing.guarantee", guarantee),
            ("num.stream.threads", threads.as_str()),
            ("num.standby.replicas", standbys.as_str()),
            ("processing.exception.handler", "replace_thread"),
            ("state.dir", state_dir.as_str()),
        ];
        if self.schedule.guarantee == Guarantee::ExactlyOnce {
            props.push(("transaction.timeout.ms", txn_timeout.as_str()));
        }
        if self.schedule.unfenced {
            props.push(("weir.internal.unfenced.changelog", "true"));
        }
        let mut config = StreamsConfig::from_properties(&props).map_err(fail)?;
        config.client = client_config(&self.kit, id).build().map_err(fail)?;
        let (armed, pauses) = (Arc::clone(zombie), Arc::clone(&self.zombie_pauses));
        config.pause_before_write = PauseHook(Some(Arc::new(move || {
            armed.swap(false, Ordering::SeqCst).then(|| {
                pauses.fetch_add(1, Ordering::SeqCst);
                ZOMBIE_PAUSE
            })
        })));
        Ok(config)
    }

    async fn start(&mut self, id: String, dir: PathBuf) -> Result<(), String> {
        let zombie = Arc::new(AtomicBool::new(false));
        let config = self.config(&id, &dir, &zombie)?;
        let streams = KafkaStreams::start(topology(&self.poisoned)?, config)
            .await
            .map_err(|e| format!("starting {id}: {e}"))?;
        self.running.push(Instance {
            id,
            dir,
            streams,
            zombie,
        });
        Ok(())
    }

    /// Closes an instance gracefully; a close that does not finish in time
    /// is counted, and the instance is gone either way.
    async fn close(&mut self, streams: KafkaStreams, id: &str) {
        if let Err(e) = streams.close(Duration::from_secs(60)).await {
            tracing::warn!(instance = id, error = %e, "close did not finish");
            self.close_timeouts += 1;
        }
    }

    async fn start_new(&mut self) -> Result<(), String> {
        let id = format!("i{}", self.next_id);
        self.next_id += 1;
        let dir = self.root.path().join(&id);
        self.start(id, dir).await
    }

    fn slot(&self, slot: usize) -> usize {
        slot % self.running.len().max(1)
    }

    async fn produce_batch(&mut self) -> Result<(), String> {
        let client = connect(&self.kit, "feeder").await?;
        let producer = Producer::with_cluster(client, Default::default()).map_err(fail)?;
        let mut acks = Vec::new();
        let mut rng = StdRng::seed_from_u64(self.schedule.seed ^ (self.produced as u64) << 20);
        for i in 0..self.schedule.batch {
            let n = self.produced;
            self.produced += 1;
            let key = format!("k{}", rng.random_range(0..KEYS));
            let id = if i == 0 && std::mem::take(&mut self.poison_next) {
                format!("poison{n}")
            } else {
                format!("id{n}")
            };
            *self.expected.entry(key.clone()).or_default() += 1;
            self.ids.insert(id.clone());
            let record = ProducerRecord::new(INPUT)
                .with_key(key)
                .with_value(id)
                .with_timestamp(1_000 + n as i64);
            acks.push(producer.enqueue(record).await.map_err(fail)?);
        }
        producer.flush().await;
        for ack in acks {
            ack.await.map_err(|e| format!("producing the input: {e}"))?;
        }
        Ok(())
    }

    async fn cut(
        &self,
        id: &str,
        target: PartitionTarget,
    ) -> Result<weir_testkit::FaultId, String> {
        self.kit
            .partition_client(ClientSelector::ClientId(id.to_owned()), target)
            .await
            .map_err(fail)
    }

    /// Kills instance `slot`; returns its id and state directory.
    async fn kill(&mut self, slot: usize) -> Result<(String, PathBuf), String> {
        let instance = self.running.remove(self.slot(slot));
        let mut cuts = Vec::new();
        for b in 0..BROKERS {
            cuts.push(self.cut(&instance.id, PartitionTarget::Broker(b)).await?);
        }
        let Instance {
            id, dir, streams, ..
        } = instance;
        streams.kill();
        // The process is gone; what it had sent has arrived or not. The
        // connections a restarted process opens are its own.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for c in cuts {
            self.kit.remove_fault(c).await.map_err(fail)?;
        }
        Ok((id, dir))
    }

    async fn apply(&mut self, fault: StreamsFault) -> Result<(), String> {
        if self.running.is_empty() {
            return Ok(());
        }
        match fault {
            StreamsFault::Kill { slot, restart } => {
                let (id, dir) = self.kill(slot).await?;
                tokio::time::sleep(Duration::from_secs(2)).await;
                match restart {
                    Restart::SameDirectory => self.start(id, dir).await?,
                    Restart::LostDirectory => {
                        std::fs::remove_dir_all(&dir).or_else(ignore_missing)?;
                        self.start(id, dir).await?;
                    }
                    Restart::NewInstance => self.start_new().await?,
                }
            }
            StreamsFault::Zombie { slot } => {
                let i = self.slot(slot);
                let id = self.running[i].id.clone();
                let cut = self
                    .cut(&id, PartitionTarget::GroupCoordinator(APP.to_owned()))
                    .await?;
                // The partition delays what it already sent: its Produce
                // requests land after its tasks moved (a gate cannot recall
                // a request on the wire; only the broker's fence stops it).
                let late = self
                    .kit
                    .intercept(Intercept::new(
                        RequestMatcher::api(ApiKey::Produce).client(id),
                        InterceptAction::Delay(ZOMBIE_PAUSE + Duration::from_secs(10)),
                    ))
                    .await
                    .map_err(fail)?;
                self.running[i].zombie.store(true, Ordering::SeqCst);
                self.produce_batch().await?;
                tokio::time::sleep(ZOMBIE_PAUSE + Duration::from_secs(5)).await;
                self.running[i].zombie.store(false, Ordering::SeqCst);
                self.kit.remove_fault(late).await.map_err(fail)?;
                self.kit.remove_fault(cut).await.map_err(fail)?;
            }
            StreamsFault::CutCoordinator { slot, secs } => {
                let id = self.running[self.slot(slot)].id.clone();
                let cut = self
                    .cut(&id, PartitionTarget::GroupCoordinator(APP.to_owned()))
                    .await?;
                tokio::time::sleep(Duration::from_secs(secs)).await;
                self.kit.remove_fault(cut).await.map_err(fail)?;
            }
            StreamsFault::CutLeader {
                slot,
                partition,
                secs,
            } => {
                let id = self.running[self.slot(slot)].id.clone();
                let leader = (partition + 1) % BROKERS;
                self.kit
                    .move_leader(INPUT, partition, leader)
                    .await
                    .map_err(fail)?;
                let cut = self.cut(&id, PartitionTarget::Broker(leader)).await?;
                tokio::time::sleep(Duration::from_secs(secs)).await;
                self.kit.remove_fault(cut).await.map_err(fail)?;
            }
            StreamsFault::MoveCoordinator => {
                let to = (self.produced as i32) % BROKERS;
                self.kit.move_coordinator(APP, to).await.map_err(fail)?;
            }
            StreamsFault::LoseResponses { slot, api, count } => {
                let id = self.running[self.slot(slot)].id.clone();
                let api = match api {
                    LostApi::Produce => ApiKey::Produce,
                    LostApi::EndTxn => ApiKey::EndTxn,
                };
                self.kit
                    .intercept(
                        Intercept::new(
                            RequestMatcher::api(api).client(id),
                            InterceptAction::DropResponse,
                        )
                        .times(count),
                    )
                    .await
                    .map_err(fail)?;
            }
            StreamsFault::TransactionTimeout { slot } => {
                let id = self.running[self.slot(slot)].id.clone();
                let timeout = match self.schedule.guarantee {
                    Guarantee::ExactlyOnce => TXN_TIMEOUT,
                    // The changelog fences' timeout: the commit interval plus 30 s.
                    Guarantee::AtLeastOnce => Duration::from_millis(30_500),
                };
                self.kit
                    .intercept(
                        Intercept::new(
                            RequestMatcher::api(ApiKey::EndTxn).client(id),
                            InterceptAction::Delay(timeout + Duration::from_secs(5)),
                        )
                        .times(1),
                    )
                    .await
                    .map_err(fail)?;
            }
            StreamsFault::ProcessingError => self.poison_next = true,
            StreamsFault::RollingRestart => {
                for _ in 0..self.running.len() {
                    let instance = self.running.remove(0);
                    self.close(instance.streams, &instance.id).await;
                    self.start(instance.id, instance.dir).await?;
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
            }
            StreamsFault::Join => self.start_new().await?,
        }
        Ok(())
    }

    /// Waits until every key's highest output count and its last committed
    /// changelog count are its input count. (Under at-least-once outputs
    /// are not transactional: they can be complete while the changelog
    /// transaction that goes with them is aborted and redone.)
    async fn await_output(&self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + RUN_DEADLINE;
        loop {
            let out = read_visible(&self.kit, OUTPUT).await?;
            let mut best: BTreeMap<String, usize> = BTreeMap::new();
            for (k, v) in out {
                let n = parse_count(&k, v.as_deref())?;
                let e = best.entry(k).or_default();
                *e = (*e).max(n);
            }
            let mut last: BTreeMap<String, usize> = BTreeMap::new();
            for (k, v) in read_visible(&self.kit, &changelog(COUNTS)).await? {
                let n = decode_count(&k, v.as_deref())?;
                last.insert(k, n);
            }
            if best == self.expected && last == self.expected {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "the run never completed: highest output counts {best:?}, last changelog counts {last:?}, expected {:?}",
                    self.expected
                ));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

fn ignore_missing(e: std::io::Error) -> Result<(), String> {
    if e.kind() == std::io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(format!("removing a state directory: {e}"))
    }
}

async fn connect(kit: &Kit, id: &str) -> Result<Client, String> {
    let config = client_config(kit, id).build().map_err(fail)?;
    Client::connect(config).await.map_err(fail)
}

fn parse_count(key: &str, value: Option<&[u8]>) -> Result<usize, String> {
    let v = value.ok_or_else(|| format!("a null count for {key}"))?;
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("an unreadable count for {key}: {v:?}"))
}

type KeyValue = (String, Option<Vec<u8>>);

/// A count in the `counts` changelog: 8 big-endian bytes.
fn decode_count(key: &str, value: Option<&[u8]>) -> Result<usize, String> {
    value
        .and_then(|v| <[u8; 8]>::try_from(v).ok())
        .map(u64::from_be_bytes)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        .ok_or_else(|| format!("{}: an unreadable count of {key}", changelog(COUNTS)))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The committed records of every partition of `topic`, as (key, value),
/// in offset order per partition, from the raw log.
async fn read_visible(kit: &Kit, topic: &str) -> Result<Vec<KeyValue>, String> {
    let mut out = Vec::new();
    for (_, records) in read_visible_partitions(kit, topic).await? {
        out.extend(records.into_iter().map(|(_, k, v)| (text(&k), v)));
    }
    Ok(out)
}

/// A committed record: offset, key, value.
type Committed = (i64, Vec<u8>, Option<Vec<u8>>);

/// Per partition, the committed records.
type Partitions = BTreeMap<i32, Vec<Committed>>;

async fn read_visible_partitions(kit: &Kit, topic: &str) -> Result<Partitions, String> {
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        let log = kit.raw_log(topic, p).await.map_err(fail)?;
        let records = visible_records(&log).map_err(|e| format!("{topic}-{p}: {e}"))?;
        out.insert(
            p,
            records
                .into_iter()
                .map(|r| {
                    let key = r.key.map(|k| k.to_vec()).unwrap_or_default();
                    (r.offset, key, r.value.map(|v| v.to_vec()))
                })
                .collect(),
        );
    }
    Ok(out)
}

/// Runs `schedule` against a fresh in-process testkit cluster of
/// [`BROKERS`] brokers, on its own current-thread runtime with tokio's clock
/// paused, and checks the result. The state directories are checked once
/// that runtime is gone, so no store handle of the run is still open.
///
/// # Errors
/// A [`StreamsViolation`] naming the schedule.
pub fn run_streams_schedule(
    schedule: &StreamsSchedule,
) -> Result<StreamsObserved, StreamsViolation> {
    let violation = |what: String| StreamsViolation {
        schedule: schedule.clone(),
        what,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| violation(format!("building a runtime: {e}")))?;
    let finished = runtime.block_on(run_and_check(schedule));
    // Dropping the runtime waits for its blocking tasks: a store a killed
    // instance was still writing in one is closed after this.
    drop(runtime);
    let (mut observed, logs) = finished.map_err(violation)?;
    observed.stores_checked =
        check_stores(logs.root.path(), &logs.counts, &logs.seen).map_err(violation)?;
    Ok(observed)
}

/// What the store check needs of a finished run.
struct Logs {
    root: tempfile::TempDir,
    counts: Partitions,
    seen: Partitions,
}

async fn run_and_check(schedule: &StreamsSchedule) -> Result<(StreamsObserved, Logs), String> {
    let builder = weir_testkit::Cluster::builder().brokers(BROKERS);
    let builder = if schedule.instant_timing {
        builder.instant_timing()
    } else {
        builder
    };
    let kit: Kit = Arc::new(builder.build().await.map_err(fail)?);
    for t in [INPUT, OUTPUT] {
        kit.create_topic(t, PARTITIONS, std::iter::empty::<(String, String)>())
            .await
            .map_err(fail)?;
    }
    let mut run = Run {
        schedule,
        kit: Arc::clone(&kit),
        root: tempfile::tempdir().map_err(fail)?,
        running: Vec::new(),
        next_id: 0,
        poisoned: Arc::new(AtomicU32::new(0)),
        zombie_pauses: Arc::new(AtomicU32::new(0)),
        produced: 0,
        poison_next: false,
        expected: BTreeMap::new(),
        ids: BTreeSet::new(),
        close_timeouts: 0,
    };
    for _ in 0..schedule.instances {
        run.start_new().await?;
    }
    run.produce_batch().await?;
    // The first assignment waits out the initial rebalance delay (3 s on
    // Kafka and the testkit, longer while members keep joining): the
    // faults start once every task runs somewhere.
    run.await_first_assignment().await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for fault in &schedule.faults {
        run.apply(*fault).await?;
        run.produce_batch().await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    run.kit.clear_faults().await.map_err(fail)?;
    run.await_output().await?;
    // A little longer, so a late write has time to show.
    tokio::time::sleep(Duration::from_secs(10)).await;
    for instance in std::mem::take(&mut run.running) {
        run.close(instance.streams, &instance.id).await;
    }
    await_no_open_transactions(&kit).await?;
    let (mut observed, counts, seen) =
        check(&kit, schedule.guarantee, &run.expected, &run.ids).await?;
    observed.inputs = run.produced;
    observed.zombie_pauses = run.zombie_pauses.load(Ordering::SeqCst);
    observed.processing_errors = run.poisoned.load(Ordering::SeqCst).min(1);
    observed.close_timeouts = run.close_timeouts;
    Ok((
        observed,
        Logs {
            root: run.root,
            counts,
            seen,
        },
    ))
}

/// Killed instances' transactions are aborted by the coordinator after
/// their timeout: waits for that, then insists every partition's last stable
/// offset is its high watermark.
async fn await_no_open_transactions(kit: &Kit) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let open = kit.unfinished_transactions().await.map_err(fail)?;
        if open.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("transactions left open: {open:?}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for topic in topics() {
        for p in 0..PARTITIONS {
            let (_, lso, hw) = kit.offsets(&topic, p).await.map_err(fail)?;
            if lso != hw {
                return Err(format!(
                    "{topic}-{p}: last stable offset {lso} below the high watermark {hw}"
                ));
            }
        }
    }
    Ok(())
}

fn changelog(store: &str) -> String {
    format!("{APP}-{store}-changelog")
}

fn topics() -> Vec<String> {
    vec![
        INPUT.to_owned(),
        OUTPUT.to_owned(),
        changelog(COUNTS),
        changelog(SEEN),
    ]
}

/// The checks of the logs, once every instance is closed: the output and
/// the changelogs (returned, for the store check).
async fn check(
    kit: &Kit,
    guarantee: Guarantee,
    expected: &BTreeMap<String, usize>,
    ids: &BTreeSet<String>,
) -> Result<(StreamsObserved, Partitions, Partitions), String> {
    let mut observed = StreamsObserved::default();
    // The output.
    let mut outputs: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (k, v) in read_visible(kit, OUTPUT).await? {
        let n = parse_count(&k, v.as_deref())?;
        outputs.entry(k).or_default().push(n);
        observed.outputs += 1;
    }
    for (key, n) in expected {
        let got = outputs.remove(key).unwrap_or_default();
        let want: Vec<usize> = (1..=*n).collect();
        match guarantee {
            Guarantee::ExactlyOnce if got != want => {
                return Err(format!(
                    "output of {key}: {got:?}, expected exactly {want:?}"
                ));
            }
            Guarantee::AtLeastOnce => {
                let set: BTreeSet<usize> = got.iter().copied().collect();
                if set != want.iter().copied().collect() {
                    return Err(format!(
                        "output of {key}: {got:?}, expected each of 1..={n} at least once and nothing else"
                    ));
                }
            }
            _ => {}
        }
    }
    if let Some(key) = outputs.keys().next() {
        return Err(format!("output for a key never produced: {key}"));
    }
    // The changelogs: each count once, in order; each id once.
    let counts = read_visible_partitions(kit, &changelog(COUNTS)).await?;
    let mut sequence: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (_, key, value) in counts.values().flatten() {
        let key = text(key);
        let n = decode_count(&key, value.as_deref())?;
        sequence.entry(key).or_default().push(n);
    }
    for (key, n) in expected {
        let got = sequence.remove(key).unwrap_or_default();
        let want: Vec<usize> = (1..=*n).collect();
        if got != want {
            return Err(format!(
                "{}: the counts of {key} are {got:?}, expected {want:?} (a write from a fenced owner, or a lost one)",
                changelog(COUNTS)
            ));
        }
    }
    let seen = read_visible_partitions(kit, &changelog(SEEN)).await?;
    let mut seen_ids: BTreeMap<String, usize> = BTreeMap::new();
    for (_, key, _) in seen.values().flatten() {
        let id = split_window_key(key)
            .ok_or_else(|| format!("{}: an unreadable window key", changelog(SEEN)))?;
        *seen_ids.entry(id).or_default() += 1;
    }
    if let Some((id, n)) = seen_ids.iter().find(|(_, n)| **n != 1) {
        return Err(format!("{}: {id} written {n} times", changelog(SEEN)));
    }
    let seen_set: BTreeSet<String> = seen_ids.into_keys().collect();
    if &seen_set != ids {
        return Err(format!(
            "{}: the ids differ from the inputs: missing {:?}, unknown {:?}",
            changelog(SEEN),
            ids.difference(&seen_set).collect::<Vec<_>>(),
            seen_set.difference(ids).collect::<Vec<_>>()
        ));
    }
    Ok((observed, counts, seen))
}

fn split_window_key(bytes: &[u8]) -> Option<String> {
    let (key, _) = weir_store::split_window_changelog_key(bytes)?;
    String::from_utf8(key.to_vec()).ok()
}

/// What a store must hold: the replay of its changelog partition's
/// committed records below `offset`, last write per key, a null deleting.
fn replay(records: &[Committed], offset: i64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut state = BTreeMap::new();
    for (_, k, v) in records.iter().filter(|(o, _, _)| *o < offset) {
        match v {
            Some(v) => state.insert(k.clone(), v.clone()),
            None => state.remove(k),
        };
    }
    state
}

fn check_stores(root: &Path, counts: &Partitions, seen: &Partitions) -> Result<usize, String> {
    let mut checked = 0;
    let instances = std::fs::read_dir(root).map_err(fail)?;
    for instance in instances {
        let app_dir = instance.map_err(fail)?.path().join(APP);
        let Ok(tasks) = std::fs::read_dir(&app_dir) else {
            continue;
        };
        for task in tasks {
            let task_dir = task.map_err(fail)?.path();
            let name = task_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            let Some(partition) = name
                .as_deref()
                .and_then(|n| n.strip_prefix("0_"))
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            check_store(&task_dir, partition, counts, seen)
                .map_err(|e| format!("{}: {e}", task_dir.display()))?;
            checked += 1;
        }
    }
    Ok(checked)
}

fn check_store(
    dir: &Path,
    partition: i32,
    counts: &Partitions,
    seen: &Partitions,
) -> Result<(), String> {
    let store =
        weir_store::TaskStore::open(dir, weir_store::StoreOptions::default()).map_err(fail)?;
    let offsets = store.committed_offsets();
    let offset_of = |name: &str| {
        offsets
            .get(&weir_store::ChangelogPartition::new(
                changelog(name),
                partition,
            ))
            .copied()
            .unwrap_or(0)
    };
    let empty = Vec::new();
    let want = replay(counts.get(&partition).unwrap_or(&empty), offset_of(COUNTS));
    let kv = store.key_value_store(COUNTS).map_err(fail)?;
    let mut got = BTreeMap::new();
    for entry in kv.iter().map_err(fail)? {
        let (k, v) = entry.map_err(fail)?;
        got.insert(k, v);
    }
    if got != want {
        return Err(format!(
            "store {COUNTS} at changelog offset {} holds {} keys that differ from the changelog's replay ({} keys)",
            offset_of(COUNTS),
            got.len(),
            want.len()
        ));
    }
    let want = replay(seen.get(&partition).unwrap_or(&empty), offset_of(SEEN));
    let window = store
        .window_store(SEEN, RETENTION, RETENTION / 10)
        .map_err(fail)?;
    let mut got = BTreeMap::new();
    for entry in window.fetch_all(i64::MIN, i64::MAX).map_err(fail)? {
        let e = entry.map_err(fail)?;
        got.insert(
            weir_store::window_changelog_key(&e.key, e.window_start),
            e.value,
        );
    }
    if got != want {
        return Err(format!(
            "store {SEEN} at changelog offset {} holds {} windows; the changelog's replay {}",
            offset_of(SEEN),
            got.len(),
            want.len()
        ));
    }
    store.close().map_err(fail)
}
