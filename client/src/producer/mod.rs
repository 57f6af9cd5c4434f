//! The producer: records in, offsets out.
//!
//! [`Producer::send`] partitions a record (Java's murmur2 for keys, a
//! sticky partition otherwise), waits for room in `buffer.memory`, and
//! appends it to its partition's batch in the [`accumulator`]. One
//! background task, the sender, sends batches when they are full, when
//! `linger.ms` has passed or on [`Producer::flush`], groups them by leader
//! into Produce requests on each broker's produce lane, and completes each
//! record's future with its offset or a typed error.
//!
//! The producer is idempotent by default (`enable.idempotence`): it takes a
//! producer id from InitProducerId and numbers each partition's batches
//! ([`sequence`]), so that retries can neither duplicate nor reorder
//! records.

pub mod accumulator;
mod dispatch;
mod group;
pub mod partitioner;
mod record;
mod sender;
pub mod sequence;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use weir_protocol::records::RecordInput;

pub use group::DeliveryGroup;
pub use record::{ProducerRecord, RecordMetadata, SendGate, TopicPartition};

use self::accumulator::{Accumulator, Appended, BatchingRules, Delivery, MemoryHold};
use self::partitioner::{StickyPartitioner, partition_for_key};
use self::sequence::SequenceBook;
use crate::cluster::Cluster;
use crate::config::producer::{ProducerConfig, ProducerOptions};
use crate::kerror::codes;
use crate::{ClientError, Result};

/// The producer id and epoch batches are written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    producer_id: i64,
    epoch: i16,
    /// False until InitProducerId answered, and again after the broker's
    /// sequence state was lost.
    valid: bool,
}

/// Everything the sender and `send` share under one lock. The lock is
/// never held across an await.
pub(crate) struct State {
    acc: Accumulator,
    sticky: StickyPartitioner,
    book: SequenceBook<TopicPartition>,
    identity: Identity,
}

pub(crate) struct Shared {
    cluster: Cluster,
    options: ProducerOptions,
    state: Mutex<State>,
    /// Wakes the sender: a new batch, a full batch, a flush, a response.
    wake: Notify,
    /// `buffer.memory`, in bytes.
    memory: Arc<Semaphore>,
    /// Records sent but not yet completed.
    pending: AtomicUsize,
    /// Notified whenever `pending` drops to 0.
    idle: Notify,
    /// Callers inside `flush`: while non-zero, linger is ignored.
    flushing: AtomicUsize,
    closed: AtomicBool,
    /// Produce requests awaiting their response.
    requests_in_flight: AtomicUsize,
    /// Per-broker turns that keep requests on the wire in send order.
    order: dispatch::SendOrder,
    /// Set for a [`crate::transaction::TransactionalProducer`]'s producer:
    /// batches carry the transactional bit and the id, and only the
    /// transaction layer may change the producer id and epoch.
    transactional_id: Option<String>,
    /// The highest Produce version to send, or -1 for no cap beyond
    /// Weir's own. A transactional producer starts at 11, the last version
    /// of transaction version 1: v12 tells the broker that the client runs
    /// transaction version 2 (partitions added implicitly), which only the
    /// transaction layer may decide (see [`Producer::set_transaction_v2`]).
    produce_version_cap: AtomicI16,
}

/// The last Produce version of transaction version 1 (KIP-890).
const LAST_PRODUCE_VERSION_BEFORE_TV2: i16 = 11;

impl Shared {
    /// The cap on the Produce version, if any.
    pub(crate) fn produce_version_cap(&self) -> Option<i16> {
        let cap = self.produce_version_cap.load(Ordering::Acquire);
        (cap >= 0).then_some(cap)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data: every
        // mutation is a single step.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `n` records as done and wakes flushers when none is left.
    fn records_done(&self, n: usize) {
        if n > 0 && self.pending.fetch_sub(n, Ordering::AcqRel) == n {
            self.idle.notify_waiters();
        }
    }
}

/// A record checked and ready to join its batch.
struct Prepared {
    topic: String,
    partition: Option<i32>,
    partitions: i32,
    gate: Option<SendGate>,
    input: RecordInput,
    size: usize,
}

/// Who learns a record's outcome: its future, tallies.
#[derive(Default)]
pub(crate) struct Receivers {
    pub(crate) tx: Option<oneshot::Sender<Result<RecordMetadata>>>,
    pub(crate) groups: [Option<Arc<group::GroupShared>>; 2],
}

/// Closes the producer when the last handle is dropped.
struct Handle {
    shared: Arc<Shared>,
    sender: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

/// An async Kafka producer. Cheap to clone; all clones share one sender
/// task and one buffer. Dropping the last clone sends what is buffered
/// and stops; [`close`](Producer::close) also waits for that.
///
/// ```no_run
/// # async fn demo() -> weir_client::Result<()> {
/// use weir_client::config::producer::ProducerConfig;
/// use weir_client::producer::{Producer, ProducerRecord};
///
/// let config = ProducerConfig::from_properties(&[("bootstrap.servers", "127.0.0.1:9092")])?;
/// let producer = Producer::new(config).await?;
/// let meta = producer.send(ProducerRecord::new("events").with_key("k").with_value("v")).await?;
/// println!("{}-{} @ {}", meta.topic, meta.partition, meta.offset);
/// producer.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Producer {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("options", &self.handle.shared.options)
            .finish_non_exhaustive()
    }
}

/// The outcome of one record, once the broker answered (or the producer
/// gave up).
#[derive(Debug)]
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl DeliveryFuture {
    pub(crate) fn from_receiver(rx: oneshot::Receiver<Result<RecordMetadata>>) -> Self {
        DeliveryFuture { rx }
    }
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ClientError::Closed)))
    }
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Producer {
    /// Connects to the cluster and starts the producer.
    ///
    /// # Errors
    /// An invalid configuration, or [`ClientError::Bootstrap`] when no
    /// bootstrap broker answers.
    pub async fn new(config: ProducerConfig) -> Result<Producer> {
        config.validate()?;
        let cluster = Cluster::connect(config.client).await?;
        Self::with_cluster(cluster, config.producer)
    }

    /// Starts a producer on an existing cluster handle (shared with other
    /// clients). Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// [`ClientError::InvalidProperty`] for contradictory options.
    pub fn with_cluster(cluster: Cluster, options: ProducerOptions) -> Result<Producer> {
        Self::start(cluster, options, None)
    }

    /// Starts a producer whose batches belong to the transactions of
    /// `transactional_id`, written as the producer id and epoch that the
    /// transaction layer set with [`Producer::set_identity`].
    pub(crate) fn start_transactional(
        cluster: Cluster,
        options: ProducerOptions,
        transactional_id: String,
    ) -> Result<Producer> {
        Self::start(cluster, options, Some(transactional_id))
    }

    /// Installs a producer id and epoch from the transaction layer's
    /// InitProducerId, with every partition's sequence back at 0.
    pub(crate) fn set_identity(&self, producer_id: i64, epoch: i16) {
        let shared = &self.handle.shared;
        sender::install_identity(
            shared,
            Identity {
                producer_id,
                epoch,
                valid: true,
            },
        );
        shared.wake.notify_one();
    }

    /// Whether the coming transaction runs under transaction version 2:
    /// its batches then go at Produce v12, which lets the broker add their
    /// partitions to the transaction; otherwise at most v11. Set between
    /// transactions only, when nothing of the last one is in flight.
    pub(crate) fn set_transaction_v2(&self, on: bool) {
        let cap = if on {
            -1
        } else {
            LAST_PRODUCE_VERSION_BEFORE_TV2
        };
        self.handle
            .shared
            .produce_version_cap
            .store(cap, Ordering::Release);
    }

    fn start(
        cluster: Cluster,
        options: ProducerOptions,
        transactional_id: Option<String>,
    ) -> Result<Producer> {
        options.validate()?;
        let idempotent = options.idempotent();
        let permits = options.buffer_memory.min(Semaphore::MAX_PERMITS);
        let shared = Arc::new(Shared {
            cluster,
            state: Mutex::new(State {
                acc: Accumulator::new(BatchingRules {
                    batch_size: options.batch_size,
                    linger: options.linger,
                }),
                sticky: StickyPartitioner::new(),
                book: SequenceBook::new(
                    idempotent,
                    if idempotent {
                        options.max_in_flight.min(5)
                    } else {
                        options.max_in_flight
                    },
                ),
                identity: Identity {
                    producer_id: -1,
                    epoch: -1,
                    valid: !idempotent,
                },
            }),
            options,
            wake: Notify::new(),
            memory: Arc::new(Semaphore::new(permits)),
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
            flushing: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            requests_in_flight: AtomicUsize::new(0),
            order: dispatch::SendOrder::default(),
            produce_version_cap: AtomicI16::new(if transactional_id.is_some() {
                LAST_PRODUCE_VERSION_BEFORE_TV2
            } else {
                -1
            }),
            transactional_id,
        });
        let sender = tokio::spawn(sender::run(Arc::clone(&shared)));
        Ok(Producer {
            handle: Arc::new(Handle {
                shared,
                sender: Mutex::new(Some(sender)),
            }),
        })
    }

    /// The cluster handle this producer sends through.
    pub fn cluster(&self) -> &Cluster {
        &self.handle.shared.cluster
    }

    /// Sends `record` and waits for the broker's acknowledgement.
    ///
    /// Equivalent to [`enqueue`](Self::enqueue) followed by awaiting the
    /// returned [`DeliveryFuture`]. To keep many records in flight, call
    /// `enqueue` in a loop and await the futures later.
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue), plus the record's delivery error: a
    /// non-retriable [`ClientError::Server`] naming topic and partition, or
    /// [`ClientError::Timeout`] after `delivery.timeout.ms`.
    pub async fn send(&self, record: ProducerRecord) -> Result<RecordMetadata> {
        self.enqueue(record).await?.await
    }

    /// Adds `record` to its partition's batch and returns a future for its
    /// outcome. Records enqueued one after another from one task keep
    /// their order within a partition.
    ///
    /// Waits (backpressure) while `buffer.memory` is full, and for the
    /// topic's metadata, at most `max.block.ms` in all.
    ///
    /// # Errors
    /// [`ClientError::RecordTooLarge`], [`ClientError::Timeout`] after
    /// `max.block.ms`, a non-retriable metadata error such as an unknown
    /// topic, or [`ClientError::Closed`].
    pub async fn enqueue(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (tx, rx) = oneshot::channel();
        self.enqueue_to(
            record,
            Receivers {
                tx: Some(tx),
                ..Receivers::default()
            },
        )
        .await?;
        Ok(DeliveryFuture { rx })
    }

    /// Adds `record` to its partition's batch and counts its outcome in
    /// `group` instead of a future of its own: the cheap way to send many
    /// records and wait for all of them ([`DeliveryGroup::wait`]).
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue); a record refused here is not counted
    /// in `group`.
    pub async fn enqueue_into(&self, record: ProducerRecord, group: &DeliveryGroup) -> Result<()> {
        self.enqueue_to(
            record,
            Receivers {
                groups: [Some(group.shared()), None],
                ..Receivers::default()
            },
        )
        .await
    }

    /// Appends `record` with its outcome going to `receivers`. Its groups
    /// count it as pending from the moment it is in its batch; a record
    /// refused before that is in none of them.
    pub(crate) async fn enqueue_to(
        &self,
        record: ProducerRecord,
        receivers: Receivers,
    ) -> Result<()> {
        let shared = &self.handle.shared;
        let deadline = Instant::now() + shared.options.max_block;
        let prepared = self.prepare(record, deadline, &mut None).await?;
        let permit = self
            .reserve(&prepared.topic, prepared.size, deadline)
            .await?;
        let mut memory = MemoryHold::new(&shared.memory, permit);
        let now = Instant::now();
        let wake = {
            let mut state = shared.lock();
            // Checked again under the lock: the sender exits only when it
            // sees `closed` and an empty accumulator under this lock, so a
            // record either gets in before that or is refused here.
            if shared.closed.load(Ordering::Acquire) {
                return Err(ClientError::Closed);
            }
            self.append(&mut state, prepared, receivers, &mut memory, now)?
        };
        if wake {
            shared.wake.notify_one();
        }
        Ok(())
    }

    /// [`enqueue_into`](Self::enqueue_into) for many records at once: their
    /// memory is reserved and they join their batches under one lock, not
    /// one per record. Their order within a partition is kept.
    ///
    /// ```no_run
    /// # async fn demo(producer: weir_client::producer::Producer) -> weir_client::Result<()> {
    /// use weir_client::producer::{DeliveryGroup, ProducerRecord};
    /// let group = DeliveryGroup::new();
    /// let records = (0..100).map(|i| ProducerRecord::new("events").with_value(i.to_string()));
    /// producer.enqueue_all_into(records.collect(), &group).await?;
    /// producer.flush().await;
    /// group.wait().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue), for the first record refused; the
    /// records before it may have been enqueued (and are counted in
    /// `group`), those after it are not.
    pub async fn enqueue_all_into(
        &self,
        records: Vec<ProducerRecord>,
        group: &DeliveryGroup,
    ) -> Result<()> {
        self.enqueue_all_to(records, [Some(group.shared()), None])
            .await
    }

    /// [`enqueue_all_into`](Self::enqueue_all_into), counted in `groups`.
    pub(crate) async fn enqueue_all_to(
        &self,
        records: Vec<ProducerRecord>,
        groups: [Option<Arc<group::GroupShared>>; 2],
    ) -> Result<()> {
        let shared = &self.handle.shared;
        // One clock reading for the call: `max.block.ms` bounds the whole
        // call, and records without a timestamp share the call's (a reading
        // per record was a visible share of the producer's CPU).
        let deadline = Instant::now() + shared.options.max_block;
        let mut millis = None;
        let mut prepared: Vec<Prepared> = Vec::with_capacity(records.len());
        for record in records {
            // Records of one list mostly share a topic: its partition count
            // is looked up once, not per record.
            let known = prepared
                .last()
                .filter(|p| p.topic == record.topic)
                .map(|p| p.partitions);
            let ready = match self.known_partitions(&record.topic, known) {
                Some(n) => self.prepare_with(record, n, &mut millis)?,
                None => self.prepare(record, deadline, &mut millis).await?,
            };
            prepared.push(ready);
        }
        // In chunks that fit `buffer.memory` (a chunk waits for room as a
        // single record does), and a reservation's u32 of permits.
        let limit = shared
            .memory_limit()
            .min(usize::try_from(u32::MAX).unwrap_or(usize::MAX));
        // Each chunk is drained from the front of `prepared` in place (the
        // records are large: every move of one is a copy).
        while let Some(first) = prepared.first() {
            let mut size = first.size;
            let mut end = 1;
            while let Some(next) = prepared.get(end)
                && size + next.size <= limit
            {
                size += next.size;
                end += 1;
            }
            let topic = first.topic.clone();
            let permit = self.reserve(&topic, size, deadline).await?;
            let mut memory = MemoryHold::new(&shared.memory, permit);
            let now = Instant::now();
            let wake = {
                let mut state = shared.lock();
                if shared.closed.load(Ordering::Acquire) {
                    return Err(ClientError::Closed);
                }
                let mut wake = false;
                for p in prepared.drain(..end) {
                    let receivers = Receivers {
                        tx: None,
                        groups: groups.clone(),
                    };
                    wake |= self.append(&mut state, p, receivers, &mut memory, now)?;
                }
                wake
            };
            if wake {
                shared.wake.notify_one();
            }
        }
        Ok(())
    }

    /// Checks `record` against the size limits and its topic's partitions
    /// (from the metadata cache, fetching it if the cache has none),
    /// waiting for metadata until `deadline`. A record without a timestamp
    /// gets `millis`, read from the clock on first need.
    async fn prepare(
        &self,
        record: ProducerRecord,
        deadline: Instant,
        millis: &mut Option<i64>,
    ) -> Result<Prepared> {
        let shared = &self.handle.shared;
        let cluster = &shared.cluster;
        // Fresh cached metadata is the common case: no request, no timer.
        let partitions = match self.known_partitions(&record.topic, None) {
            Some(n) => n,
            None => {
                // A closed producer, or a record that can never be sent,
                // fails before any wait.
                if shared.closed.load(Ordering::Acquire) {
                    return Err(ClientError::Closed);
                }
                self.check_size(&record)?;
                let n = tokio::time::timeout_at(
                    deadline,
                    cluster.retry("producer metadata", || {
                        cluster.partition_count(&record.topic)
                    }),
                )
                .await
                .map_err(|_| ClientError::Timeout {
                    what: format!("metadata for topic {}", record.topic),
                    after: shared.options.max_block,
                    setting: "max.block.ms",
                })??;
                i32::try_from(n).unwrap_or(i32::MAX)
            }
        };
        self.prepare_with(record, partitions, millis)
    }

    /// The partition count of `topic`: `known`, or from fresh cached
    /// metadata.
    fn known_partitions(&self, topic: &str, known: Option<i32>) -> Option<i32> {
        known.or_else(|| {
            self.handle
                .shared
                .cluster
                .fresh_partition_count(topic)
                .map(|n| i32::try_from(n).unwrap_or(i32::MAX))
        })
    }

    /// The record's size upper bound, or the error if it is over
    /// `max.request.size` or `buffer.memory`.
    fn check_size(&self, record: &ProducerRecord) -> Result<usize> {
        let shared = &self.handle.shared;
        let options = &shared.options;
        let size = accumulator::size_upper_bound(
            record.key.as_ref(),
            record.value.as_ref(),
            &record.headers,
        );
        let too_large = |limit: usize, setting| ClientError::RecordTooLarge {
            topic: record.topic.clone(),
            size,
            limit,
            setting,
        };
        if size + weir_protocol::records::BatchHeader::LEN > options.max_request_size {
            return Err(too_large(options.max_request_size, "max.request.size"));
        }
        if size > shared.memory_limit() {
            return Err(too_large(shared.memory_limit(), "buffer.memory"));
        }
        Ok(size)
    }

    /// [`prepare`](Self::prepare) once the topic's partition count is
    /// known: no wait, so no future around the record.
    fn prepare_with(
        &self,
        record: ProducerRecord,
        partitions: i32,
        millis: &mut Option<i64>,
    ) -> Result<Prepared> {
        if self.handle.shared.closed.load(Ordering::Acquire) {
            return Err(ClientError::Closed);
        }
        let size = self.check_size(&record)?;
        if let Some(p) = record.partition
            && (p < 0 || p >= partitions)
        {
            return Err(ClientError::check(
                codes::UNKNOWN_TOPIC_OR_PARTITION,
                weir_protocol::ApiKey::Produce,
                Some(&record.topic),
                Some(p),
            )
            .err()
            .unwrap_or(ClientError::Closed)
            .with_message(Some(&format!("the topic has {partitions} partitions"))));
        }
        Ok(Prepared {
            topic: record.topic,
            partition: record.partition,
            partitions,
            gate: record.gate,
            input: RecordInput {
                timestamp: match record.timestamp {
                    Some(t) => t,
                    None => *millis.get_or_insert_with(now_millis),
                },
                key: record.key,
                value: record.value,
                headers: record.headers,
            },
            size,
        })
    }

    /// Reserves `size` bytes of `buffer.memory`, waiting at most
    /// `max.block.ms` while it is full.
    async fn reserve(
        &self,
        topic: &str,
        size: usize,
        deadline: Instant,
    ) -> Result<OwnedSemaphorePermit> {
        let shared = &self.handle.shared;
        let permits = u32::try_from(size).unwrap_or(u32::MAX);
        // Memory is usually free: only a full buffer waits (and times out).
        match Arc::clone(&shared.memory).try_acquire_many_owned(permits) {
            Ok(permit) => Ok(permit),
            Err(tokio::sync::TryAcquireError::Closed) => Err(ClientError::Closed),
            Err(tokio::sync::TryAcquireError::NoPermits) => tokio::time::timeout_at(
                deadline,
                Arc::clone(&shared.memory).acquire_many_owned(permits),
            )
            .await
            .map_err(|_| ClientError::Timeout {
                what: format!("buffer.memory for topic {topic}"),
                after: shared.options.max_block,
                setting: "max.block.ms",
            })?
            .map_err(|_| ClientError::Closed),
        }
    }

    /// Appends a prepared record under the state lock; true when the
    /// sender should wake (a new or a full batch).
    fn append(
        &self,
        state: &mut State,
        prepared: Prepared,
        receivers: Receivers,
        memory: &mut MemoryHold,
        now: Instant,
    ) -> Result<bool> {
        let shared = &self.handle.shared;
        // The record's share of the caller's reservation (a reservation
        // counts at most a u32 of permits per record, as `reserve`).
        let permits = u32::try_from(prepared.size).unwrap_or(u32::MAX) as usize;
        if memory.permits() < permits {
            return Err(ClientError::Closed);
        }
        let Prepared {
            topic,
            partition,
            partitions,
            gate,
            input,
            size,
            ..
        } = prepared;
        let partition = match (partition, &input.key) {
            (Some(p), _) => p,
            (None, Some(key)) => partition_for_key(key, partitions),
            (None, None) => {
                // The partitions with a leader, for the sticky partitioner
                // (keyless records only).
                let available: Vec<i32> = shared
                    .cluster
                    .cached_metadata()
                    .topic(&topic)
                    .map(|t| {
                        t.partitions
                            .iter()
                            .filter(|p| p.leader >= 0)
                            .map(|p| p.partition)
                            .collect()
                    })
                    .unwrap_or_default();
                let p = state.sticky.partition(&topic, partitions, &available);
                let tp = TopicPartition::new(topic.clone(), p);
                if state.acc.would_start_batch(&tp, size, gate.as_ref()) {
                    // KIP-480: a new batch is the moment to move on.
                    state.sticky.on_new_batch(&topic, partitions, &available, p);
                    state.sticky.partition(&topic, partitions, &available)
                } else {
                    p
                }
            }
        };
        let tp = TopicPartition::new(topic, partition);
        let Receivers { tx, groups } = receivers;
        shared.pending.fetch_add(1, Ordering::AcqRel);
        for group in groups.iter().flatten() {
            group.admit(1);
        }
        let delivery = Delivery {
            tx,
            groups,
            timestamp: input.timestamp,
        };
        let appended = state
            .acc
            .append(&tp, input, delivery, gate, Some((memory, permits)), now);
        Ok(appended == Appended::NewBatch
            || state
                .acc
                .front(&tp)
                .is_some_and(|b| b.size >= shared.options.batch_size))
    }

    /// Sends every buffered record now, ignoring `linger.ms`, and waits
    /// until no record is pending: every record enqueued before this call
    /// (and any enqueued meanwhile) has its outcome.
    pub async fn flush(&self) {
        let shared = &self.handle.shared;
        shared.flushing.fetch_add(1, Ordering::AcqRel);
        shared.wake.notify_one();
        loop {
            let idle = shared.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if shared.pending.load(Ordering::Acquire) == 0 {
                break;
            }
            idle.await;
        }
        shared.flushing.fetch_sub(1, Ordering::AcqRel);
    }

    /// Stops taking records, sends what is buffered, and waits for the
    /// sender to finish. Other clones fail with [`ClientError::Closed`].
    pub async fn close(&self) {
        let shared = &self.handle.shared;
        shared.closed.store(true, Ordering::Release);
        shared.wake.notify_one();
        let sender = self
            .handle
            .sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(sender) = sender {
            let _ = sender.await;
        }
    }
}

impl Shared {
    fn memory_limit(&self) -> usize {
        self.options.buffer_memory.min(Semaphore::MAX_PERMITS)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod wire_order_tests;
