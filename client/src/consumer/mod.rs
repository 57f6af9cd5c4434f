//! The consumer (no group yet): assign partitions, seek, poll.
//!
//! [`Consumer::poll`] keeps one Fetch in flight per leader broker on the
//! fetch lane, inside a fetch session ([`fetch_session`], KIP-227), and
//! sends the next Fetch as soon as a response arrives, while the
//! application works on the records: that is the prefetch, bounded by
//! `weir.prefetch.bytes` of records waiting to be polled. Records pass
//! through [`read_committed`] (control records never reach the
//! application), and a position outside the log follows
//! `auto.offset.reset`.

mod buffer;
pub mod fetch_session;
mod fetcher;
pub mod offsets;
pub mod read_committed;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use indexmap::IndexMap;
use tokio::task::JoinSet;
use tokio::time::Instant;
use weir_protocol::records::RecordHeader;

use self::buffer::RecordBuffer;
use self::fetch_session::FetchSession;
use self::fetcher::InFlightFetch;
pub use self::offsets::SeekTo;
use crate::cluster::{BrokerId, Cluster};
use crate::config::consumer::{AutoOffsetReset, ConsumerConfig, ConsumerOptions};
pub use crate::producer::TopicPartition;
use crate::{ClientError, Result};

/// One record as the application sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// Milliseconds since the epoch (create time or log append time).
    pub timestamp: i64,
    /// The key; `None` is a null key.
    pub key: Option<Bytes>,
    /// The value; `None` is a null value.
    pub value: Option<Bytes>,
    /// The headers, in order.
    pub headers: Vec<RecordHeader>,
}

impl ConsumerRecord {
    fn approximate_size(&self) -> usize {
        64 + self.key.as_ref().map_or(0, Bytes::len)
            + self.value.as_ref().map_or(0, Bytes::len)
            + self
                .headers
                .iter()
                .map(|h| h.key.len() + h.value.as_ref().map_or(0, Bytes::len))
                .sum::<usize>()
    }
}

/// Where one assigned partition stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// The next offset to fetch.
    At(i64),
    /// Waiting for an offset lookup.
    Seek(SeekTo),
    /// No position and `auto.offset.reset=none`: polling fails with
    /// [`ClientError::NoOffsetForPartition`] until a seek.
    Unset,
}

/// A consumer of explicitly assigned partitions (no consumer group).
///
/// ```no_run
/// # async fn demo() -> weir_client::Result<()> {
/// use weir_client::config::consumer::ConsumerConfig;
/// use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
///
/// let config = ConsumerConfig::from_properties(&[("bootstrap.servers", "127.0.0.1:9092")])?;
/// let mut consumer = Consumer::new(config).await?;
/// consumer.assign([TopicPartition::new("events", 0)]);
/// consumer.seek(&TopicPartition::new("events", 0), SeekTo::Earliest)?;
/// for record in consumer.poll().await? {
///     println!("{} {:?}", record.offset, record.value);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Consumer {
    cluster: Cluster,
    options: ConsumerOptions,
    assignment: IndexMap<TopicPartition, Position>,
    sessions: HashMap<BrokerId, FetchSession<TopicPartition>>,
    in_flight: JoinSet<InFlightFetch>,
    fetching_from: HashSet<BrokerId>,
    /// Brokers to leave alone until then, after a failed fetch.
    backoff_until: HashMap<BrokerId, (Instant, u32)>,
    buffer: RecordBuffer,
    /// Assigned partitions not fetched from until resumed.
    paused: HashSet<TopicPartition>,
    /// How many times a fetch response has moved a partition's position
    /// (for [`poll_for_progress`](Self::poll_for_progress)).
    positions_moved: u64,
}

impl Consumer {
    /// Connects to the cluster.
    ///
    /// # Errors
    /// An invalid configuration, or [`ClientError::Bootstrap`].
    pub async fn new(config: ConsumerConfig) -> Result<Consumer> {
        let cluster = Cluster::connect(config.client).await?;
        Ok(Self::with_cluster(cluster, config.consumer))
    }

    /// A consumer on an existing cluster handle.
    pub fn with_cluster(cluster: Cluster, options: ConsumerOptions) -> Consumer {
        Consumer {
            cluster,
            options,
            assignment: IndexMap::new(),
            sessions: HashMap::new(),
            in_flight: JoinSet::new(),
            fetching_from: HashSet::new(),
            backoff_until: HashMap::new(),
            buffer: RecordBuffer::default(),
            paused: HashSet::new(),
            positions_moved: 0,
        }
    }

    /// The cluster handle this consumer fetches through.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Replaces the assignment. Partitions kept keep their position; new
    /// ones start where `auto.offset.reset` says until [`seek`](Self::seek)
    /// moves them. Buffered records of dropped partitions are discarded.
    pub fn assign(&mut self, partitions: impl IntoIterator<Item = TopicPartition>) {
        let reset = match self.options.auto_offset_reset {
            AutoOffsetReset::Earliest => Position::Seek(SeekTo::Earliest),
            AutoOffsetReset::Latest => Position::Seek(SeekTo::Latest),
            // As Java: a partition nobody positioned is an error
            // (NoOffsetForPartition), not a silent start at the end.
            AutoOffsetReset::None => Position::Unset,
        };
        let mut next = IndexMap::new();
        for tp in partitions {
            let position = self.assignment.get(&tp).copied().unwrap_or(reset);
            next.insert(tp, position);
        }
        self.assignment = next;
        let assignment = &self.assignment;
        self.paused.retain(|tp| assignment.contains_key(tp));
        self.buffer
            .retain_partitions(|tp| assignment.contains_key(tp));
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment.keys().cloned().collect()
    }

    /// Moves `tp`'s position; the next [`poll`](Self::poll) resolves
    /// earliest, latest and timestamps with ListOffsets. Buffered records
    /// of `tp` are discarded.
    ///
    /// # Errors
    /// [`ClientError::NotAssigned`].
    pub fn seek(&mut self, tp: &TopicPartition, to: SeekTo) -> Result<()> {
        let position = self
            .assignment
            .get_mut(tp)
            .ok_or_else(|| ClientError::NotAssigned {
                topic: tp.topic.clone(),
                partition: tp.partition,
            })?;
        *position = match to {
            SeekTo::Offset(o) => Position::At(o),
            other => Position::Seek(other),
        };
        self.buffer.retain_partitions(|buffered| buffered != tp);
        Ok(())
    }

    /// The offset of the next record `poll` returns for `tp`, resolving a
    /// pending seek first.
    ///
    /// # Errors
    /// [`ClientError::NotAssigned`], or the offset lookup's error.
    pub async fn position(&mut self, tp: &TopicPartition) -> Result<i64> {
        self.resolve_seeks().await?;
        if let Some(first) = self.buffer.first_offset(tp) {
            return Ok(first);
        }
        match self.assignment.get(tp) {
            Some(Position::At(o)) => Ok(*o),
            Some(Position::Unset) => Err(ClientError::NoOffsetForPartition {
                topic: tp.topic.clone(),
                partition: tp.partition,
            }),
            Some(Position::Seek(_)) | None => Err(ClientError::NotAssigned {
                topic: tp.topic.clone(),
                partition: tp.partition,
            }),
        }
    }

    /// Waits for records and returns at most `max.poll.records` of them.
    /// Never returns an empty batch while partitions are assigned: wrap it
    /// in a timeout, or use [`poll_for`](Self::poll_for).
    ///
    /// Cancel-safe: dropping the future loses no record and no position.
    ///
    /// # Errors
    /// [`ClientError::OffsetOutOfRange`] under `auto.offset.reset=none`,
    /// and [`ClientError::NoOffsetForPartition`] there for an assigned
    /// partition that was never positioned (seek it first), a
    /// corrupt batch ([`ClientError::Protocol`]), or a non-retriable
    /// server error such as an authorization failure.
    pub async fn poll(&mut self) -> Result<Vec<ConsumerRecord>> {
        self.poll_inner(false, self.options.max_poll_records).await
    }

    /// Waits for one record (rust-rdkafka's `recv`). Records come in the
    /// same order as from [`poll`](Self::poll), which it can be mixed with.
    ///
    /// Cancel-safe, as `poll`.
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut weir_client::consumer::Consumer) -> weir_client::Result<()> {
    /// let record = consumer.recv().await?;
    /// println!("{}-{}@{}", record.topic, record.partition, record.offset);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub async fn recv(&mut self) -> Result<ConsumerRecord> {
        loop {
            if let Some(record) = self.poll_inner(false, 1).await?.pop() {
                return Ok(record);
            }
        }
    }

    /// The records as a [`futures_core::Stream`] (rust-rdkafka's
    /// `StreamConsumer::stream`): each item is what [`recv`](Self::recv)
    /// returns. Errors are yielded and the stream goes on.
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut weir_client::consumer::Consumer) -> weir_client::Result<()> {
    /// use futures_util::StreamExt;
    ///
    /// let mut records = std::pin::pin!(consumer.stream());
    /// while let Some(record) = records.next().await {
    ///     println!("{}", record?.offset);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn stream(&mut self) -> impl futures_core::Stream<Item = Result<ConsumerRecord>> + '_ {
        futures_util::stream::unfold(self, |consumer| async move {
            let item = consumer.recv().await;
            Some((item, consumer))
        })
    }

    /// Stops fetching and returning records of `partitions` until they are
    /// [`resume`](Self::resume)d; their positions are kept. Records of them
    /// already fetched are dropped and fetched again after the resume.
    ///
    /// ```no_run
    /// # async fn demo(consumer: &mut weir_client::consumer::Consumer) -> weir_client::Result<()> {
    /// use weir_client::consumer::TopicPartition;
    ///
    /// let slow = [TopicPartition::new("events", 0)];
    /// consumer.pause(&slow)?;
    /// // ... poll the other partitions ...
    /// consumer.resume(&slow);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::NotAssigned`]; nothing is paused then.
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        if let Some(tp) = partitions
            .iter()
            .find(|tp| !self.assignment.contains_key(*tp))
        {
            return Err(ClientError::NotAssigned {
                topic: tp.topic.clone(),
                partition: tp.partition,
            });
        }
        for tp in partitions {
            // The position goes back to the first record not returned.
            if let Some(first) = self.buffer.first_offset(tp)
                && let Some(position) = self.assignment.get_mut(tp)
            {
                *position = Position::At(first);
            }
            self.buffer.retain_partitions(|buffered| buffered != tp);
            self.paused.insert(tp.clone());
        }
        Ok(())
    }

    /// Fetches and returns records of `partitions` again after a
    /// [`pause`](Self::pause). Partitions not paused are left as they are.
    pub fn resume(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.paused.remove(tp);
        }
    }

    /// The paused partitions.
    pub fn paused(&self) -> Vec<TopicPartition> {
        self.assignment
            .keys()
            .filter(|tp| self.paused.contains(*tp))
            .cloned()
            .collect()
    }

    /// The poll loop, returning at most `max` records; `on_progress`: also
    /// return (an empty batch) once a fetch response moved a position
    /// without delivering any record.
    async fn poll_inner(&mut self, on_progress: bool, max: usize) -> Result<Vec<ConsumerRecord>> {
        loop {
            if !self.buffer.is_empty() {
                return Ok(self.buffer.take(max));
            }
            if self.assignment.is_empty() {
                // Nothing to fetch: wait like an idle poll would.
                std::future::pending::<()>().await;
            }
            self.resolve_seeks().await?;
            self.start_fetches().await;
            if self.in_flight.is_empty() {
                // Every leader is unknown or backing off.
                let wait = self.backoff_until.values().map(|(t, _)| *t).min();
                let delay = wait.map_or(self.cluster.config().retry_backoff, |t| {
                    t.saturating_duration_since(Instant::now())
                });
                tokio::time::sleep(delay.max(Duration::from_millis(1))).await;
                continue;
            }
            if let Some(done) = self.in_flight.join_next().await {
                let moved_before = self.positions_moved;
                match done {
                    Ok(fetch) => self.handle_fetch(fetch)?,
                    Err(e) => tracing::warn!(error = %e, "fetch task failed"),
                }
                // Prefetch: the next Fetch goes out before the records are returned.
                self.start_fetches().await;
                if on_progress && self.buffer.is_empty() && self.positions_moved != moved_before {
                    return Ok(Vec::new());
                }
            }
        }
    }

    /// [`poll`](Self::poll), but returns an empty batch after `max_wait`.
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub async fn poll_for(&mut self, max_wait: Duration) -> Result<Vec<ConsumerRecord>> {
        match tokio::time::timeout(max_wait, self.poll()).await {
            Ok(result) => result,
            Err(_) => Ok(Vec::new()),
        }
    }

    /// [`poll_for`](Self::poll_for), but also returns an empty batch as soon
    /// as a fetch response moved a position without delivering any record
    /// (transaction markers, and aborted records under read_committed). For
    /// a reader waiting for its position to reach an offset, such as a
    /// restore up to a changelog's end: over a tail with no committed
    /// record, `poll_for` returns only after its whole `max_wait`, though
    /// the position passed the end with the first response.
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub async fn poll_for_progress(&mut self, max_wait: Duration) -> Result<Vec<ConsumerRecord>> {
        let max = self.options.max_poll_records;
        match tokio::time::timeout(max_wait, self.poll_inner(true, max)).await {
            Ok(result) => result,
            Err(_) => Ok(Vec::new()),
        }
    }

    /// Resolves every pending seek with ListOffsets.
    async fn resolve_seeks(&mut self) -> Result<()> {
        if let Some((tp, _)) = self
            .assignment
            .iter()
            .find(|(_, p)| matches!(p, Position::Unset))
        {
            return Err(ClientError::NoOffsetForPartition {
                topic: tp.topic.clone(),
                partition: tp.partition,
            });
        }
        let lookups: Vec<(TopicPartition, i64)> = self
            .assignment
            .iter()
            .filter_map(|(tp, p)| match p {
                Position::Seek(to) => to.lookup_timestamp().map(|t| (tp.clone(), t)),
                Position::At(_) | Position::Unset => None,
            })
            .collect();
        if lookups.is_empty() {
            return Ok(());
        }
        let isolation = self.options.isolation_level;
        let mut found = offsets::list_offsets(&self.cluster, isolation, &lookups).await?;
        // A timestamp after the last record: start at the end.
        let past_end: Vec<(TopicPartition, i64)> = found
            .iter()
            .filter(|(_, o)| **o < 0)
            .map(|(tp, _)| (tp.clone(), offsets::LATEST_TIMESTAMP))
            .collect();
        if !past_end.is_empty() {
            found.extend(offsets::list_offsets(&self.cluster, isolation, &past_end).await?);
        }
        for (tp, offset) in found {
            // Only if nothing moved the position meanwhile.
            if let Some(p @ Position::Seek(_)) = self.assignment.get_mut(&tp) {
                tracing::debug!(%tp, offset, "position resolved");
                *p = Position::At(offset);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
