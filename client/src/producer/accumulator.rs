//! Per-partition batching: records wait here until their batch is full,
//! `linger.ms` has passed, or a flush asks for everything.
//!
//! The accumulator does no I/O and reads no clock: callers pass `now`, so
//! the batching rules are tested exactly. Memory is accounted outside (a
//! semaphore of `buffer.memory` bytes); each batch carries the permits of
//! its records and frees them when it is dropped.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use indexmap::IndexMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;
use weir_protocol::records::{BatchBuilder, BatchHeader, BatchOptions, RecordInput};

use super::group::GroupShared;
use super::record::{RecordMetadata, SendGate, TopicPartition};
use super::sequence::SequenceTag;
use crate::Result;

/// Upper bound of one record's encoded size: every varint at its widest.
pub fn record_size_upper_bound(record: &RecordInput) -> usize {
    size_upper_bound(record.key.as_ref(), record.value.as_ref(), &record.headers)
}

/// [`record_size_upper_bound`] of a record's parts.
pub(crate) fn size_upper_bound(
    key: Option<&Bytes>,
    value: Option<&Bytes>,
    headers: &[weir_protocol::records::RecordHeader],
) -> usize {
    const VARINT: usize = 5;
    const VARLONG: usize = 10;
    let headers: usize = headers
        .iter()
        .map(|h| 2 * VARINT + h.key.len() + h.value.as_ref().map_or(0, Bytes::len))
        .sum();
    // length, attributes, timestamp delta, offset delta, key and value
    // lengths, header count.
    VARINT
        + 1
        + VARLONG
        + VARINT
        + VARINT
        + key.map_or(0, Bytes::len)
        + VARINT
        + value.map_or(0, Bytes::len)
        + VARINT
        + headers
}

/// `buffer.memory` held in bytes (permits of the producer's semaphore),
/// given back when the hold is dropped. A batch keeps one for all its
/// records, and a caller appending many records moves each record's share
/// from its own reservation with a subtraction: a semaphore permit per
/// record (split off, then merged into the batch's) cost two atomic
/// operations on the permit's shared count each, a visible share of the
/// producer's CPU.
#[derive(Debug)]
pub struct MemoryHold {
    semaphore: Arc<Semaphore>,
    permits: usize,
}

impl MemoryHold {
    /// Takes over `permit`'s permits of `semaphore` (the semaphore it was
    /// acquired from).
    pub fn new(semaphore: &Arc<Semaphore>, permit: OwnedSemaphorePermit) -> Self {
        let permits = permit.num_permits();
        permit.forget();
        Self {
            semaphore: Arc::clone(semaphore),
            permits,
        }
    }

    fn empty(semaphore: &Arc<Semaphore>) -> Self {
        Self {
            semaphore: Arc::clone(semaphore),
            permits: 0,
        }
    }

    /// Permits held.
    pub fn permits(&self) -> usize {
        self.permits
    }

    /// Moves `n` permits to `to`; false (and nothing moved) if fewer are
    /// held.
    pub fn move_to(&mut self, to: &mut MemoryHold, n: usize) -> bool {
        if n > self.permits {
            return false;
        }
        self.permits -= n;
        to.permits += n;
        true
    }
}

impl Drop for MemoryHold {
    fn drop(&mut self) {
        if self.permits > 0 {
            self.semaphore.add_permits(self.permits);
        }
    }
}

/// Where one record's result goes.
pub struct Delivery {
    /// Receives the outcome.
    pub tx: Option<oneshot::Sender<Result<RecordMetadata>>>,
    /// Tallies that count the record (a caller's [`DeliveryGroup`], a
    /// transaction's), at most two.
    ///
    /// [`DeliveryGroup`]: super::DeliveryGroup
    pub(crate) groups: [Option<Arc<GroupShared>>; 2],
    /// The record's timestamp, reported back unless the broker stamps
    /// append time.
    pub timestamp: i64,
}

impl Delivery {
    /// A delivery to a record's future.
    pub fn to_future(tx: oneshot::Sender<Result<RecordMetadata>>, timestamp: i64) -> Self {
        Delivery {
            tx: Some(tx),
            groups: [None, None],
            timestamp,
        }
    }

    /// Whether someone wants the record's own metadata (its future), not
    /// just a tally.
    fn wants_metadata(&self) -> bool {
        self.tx.is_some()
    }

    /// Takes the tallies that count the record, for a caller that settles
    /// them itself (the sender, once per batch); [`written`](Self::written)
    /// and [`failed`](Self::failed) then reach only the record's future.
    pub(crate) fn take_groups(&mut self) -> [Option<Arc<GroupShared>>; 2] {
        std::mem::take(&mut self.groups)
    }

    /// The record was written at `offset` of `tp`; `append_time` is the
    /// broker's timestamp for `LogAppendTime` topics, else negative.
    pub fn written(mut self, tp: &TopicPartition, offset: i64, append_time: i64) {
        for group in self.groups.iter_mut().filter_map(Option::take) {
            group.written(tp, offset);
        }
        if self.wants_metadata() {
            let timestamp = if append_time >= 0 {
                append_time
            } else {
                self.timestamp
            };
            self.complete(Ok(RecordMetadata {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset,
                timestamp,
            }));
        }
    }

    /// The record failed: each of its receivers gets a copy of the error.
    pub fn failed(mut self, error: &dyn Fn() -> crate::ClientError) {
        for group in self.groups.iter_mut().filter_map(Option::take) {
            group.failed(error());
        }
        if self.wants_metadata() {
            self.complete(Err(error()));
        }
    }

    /// Hands `result` to the record's future (which the caller may have
    /// dropped: nothing to tell then). Groups are settled by
    /// [`written`](Self::written) and [`failed`](Self::failed).
    fn complete(mut self, result: Result<RecordMetadata>) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(result);
        }
    }
}

impl Drop for Delivery {
    /// A record dropped unanswered (the producer went away) still reaches
    /// its groups, as a closed producer, so nothing waits for it for ever.
    /// (Its future sees the channel closed, also as a closed producer.)
    fn drop(&mut self) {
        for group in self.groups.iter_mut().filter_map(Option::take) {
            group.failed(crate::ClientError::Closed);
        }
    }
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("timestamp", &self.timestamp)
            .field("groups", &self.groups.iter().flatten().count())
            .finish_non_exhaustive()
    }
}

/// A batch of records for one partition.
#[derive(Debug)]
pub struct ProducerBatch {
    /// Its partition.
    pub tp: TopicPartition,
    /// The records, encoded as they arrive (so a record's key, value and
    /// headers are not kept until the send), until the batch is built for
    /// its first send; the producer id, epoch, sequence and codec are set
    /// then.
    pub builder: Option<BatchBuilder>,
    /// One per record, in order.
    pub deliveries: Vec<Delivery>,
    /// Upper bound of the encoded size, header included.
    pub size: usize,
    /// When the first record arrived; `linger.ms` and
    /// `delivery.timeout.ms` count from here.
    pub created: Instant,
    /// The sequence the batch was sent with, for retries.
    pub sequence: Option<SequenceTag>,
    /// The encoded batch and the producer id generation it was encoded for.
    pub encoded: Option<(u64, Bytes)>,
    /// The producer id and epoch of its last send.
    pub sent_as: Option<(i64, i16)>,
    /// An earlier send may have been written although no answer said so
    /// (a lost response, a timeout): under a new producer id the broker
    /// could not recognise a resend as a duplicate.
    pub maybe_written: bool,
    /// Sends so far.
    pub attempts: u32,
    /// No send before this instant (retry backoff).
    pub retry_at: Option<Instant>,
    /// No more records may join: the batch was sent at least once.
    pub closed: bool,
    /// `buffer.memory` held by the records.
    pub memory: Option<MemoryHold>,
    /// The gate every record of the batch is bound to (records of another
    /// gate start a batch of their own).
    pub gate: Option<SendGate>,
}

impl ProducerBatch {
    fn new(tp: TopicPartition, now: Instant, capacity: usize) -> Self {
        Self {
            tp,
            builder: Some(BatchBuilder::with_capacity(
                BatchOptions::default(),
                capacity,
            )),
            deliveries: Vec::new(),
            size: BatchHeader::LEN,
            created: now,
            sequence: None,
            encoded: None,
            sent_as: None,
            maybe_written: false,
            attempts: 0,
            retry_at: None,
            closed: false,
            memory: None,
            gate: None,
        }
    }

    /// False once the batch's gate is closed: it must not be sent.
    pub fn may_send(&self) -> bool {
        self.gate.as_ref().is_none_or(SendGate::is_open)
    }

    /// Number of records.
    pub fn record_count(&self) -> usize {
        self.deliveries.len()
    }

    /// Fails every record with a copy of `error`.
    pub fn fail(self, error: impl Fn() -> crate::ClientError) {
        for d in self.deliveries {
            d.failed(&error);
        }
    }
}

/// What [`Accumulator::append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Joined the partition's open batch.
    Joined,
    /// Started a new batch (the previous one, if any, is now full).
    NewBatch,
}

/// Partitions with a batch to send, and when to look again.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Partitions whose first batch may go now.
    pub ready: Vec<TopicPartition>,
    /// The earliest instant another batch becomes ready by time alone.
    pub next_check: Option<Instant>,
}

/// The batching rules.
#[derive(Debug, Clone, Copy)]
pub struct BatchingRules {
    /// `batch.size`: a batch is full once another record would pass it.
    pub batch_size: usize,
    /// `linger.ms`: how long a batch waits for more records.
    pub linger: Duration,
}

/// The queues of batches, per partition, in send order.
#[derive(Debug)]
pub struct Accumulator {
    rules: BatchingRules,
    /// Looked up once per record: foldhash, not SipHash, which took 14% of
    /// a 100 B produce's CPU.
    queues: IndexMap<TopicPartition, VecDeque<ProducerBatch>, foldhash::fast::RandomState>,
}

impl Accumulator {
    /// An empty accumulator.
    pub fn new(rules: BatchingRules) -> Self {
        Self {
            rules,
            queues: IndexMap::default(),
        }
    }

    /// Whether a record of `size` bytes for `tp`, bound to `gate`, would
    /// start a new batch.
    pub fn would_start_batch(
        &self,
        tp: &TopicPartition,
        size: usize,
        gate: Option<&SendGate>,
    ) -> bool {
        match self.queues.get(tp).and_then(VecDeque::back) {
            Some(b) if !b.closed => !Self::fits(&self.rules, b, size, gate),
            _ => true,
        }
    }

    fn fits(
        rules: &BatchingRules,
        batch: &ProducerBatch,
        size: usize,
        gate: Option<&SendGate>,
    ) -> bool {
        if batch.gate.as_ref() != gate {
            // A batch is sent or dropped as a whole: one gate per batch.
            return false;
        }
        // An oversized record still gets a batch of its own.
        batch.deliveries.is_empty() || batch.size + size <= rules.batch_size
    }

    /// Appends a record to `tp`'s open batch or a new one.
    pub fn append(
        &mut self,
        tp: &TopicPartition,
        record: RecordInput,
        delivery: Delivery,
        gate: Option<SendGate>,
        memory: Option<(&mut MemoryHold, usize)>,
        now: Instant,
    ) -> Appended {
        let size = record_size_upper_bound(&record);
        // A lookup first: the entry API would copy the topic name for every
        // record.
        let queue = match self.queues.get_index_of(tp) {
            Some(i) => &mut self.queues[i],
            None => self.queues.entry(tp.clone()).or_default(),
        };
        let mut outcome = Appended::Joined;
        let open = matches!(queue.back(), Some(b) if !b.closed && Self::fits(&self.rules, b, size, gate.as_ref()));
        if !open {
            // A partition whose last batch filled up is busy: its new batch
            // gets `batch.size` at once rather than growing record by
            // record. A quiet partition's batch starts small, so thousands
            // of them do not each hold `batch.size` for a record or two.
            let busy = queue.back().is_some();
            let capacity = if busy {
                self.rules.batch_size.max(BatchHeader::LEN + size)
            } else {
                (BatchHeader::LEN + 4 * size)
                    .min(self.rules.batch_size.max(BatchHeader::LEN + size))
            };
            queue.push_back(ProducerBatch::new(tp.clone(), now, capacity));
            outcome = Appended::NewBatch;
        }
        if let Some(batch) = queue.back_mut() {
            if batch.gate.is_none() {
                batch.gate = gate;
            }
            batch.size += size;
            if let Some(builder) = &mut batch.builder {
                builder.push_ref(&record);
            }
            batch.deliveries.push(delivery);
            if let Some((from, n)) = memory {
                let held = batch
                    .memory
                    .get_or_insert_with(|| MemoryHold::empty(&from.semaphore));
                // The caller reserved at least this much for the record.
                from.move_to(held, n.min(from.permits));
            }
        }
        outcome
    }

    /// Which partitions have a batch to send at `now`. With `flushing`,
    /// every batch is ready regardless of `linger.ms`.
    pub fn readiness(&self, now: Instant, flushing: bool) -> Readiness {
        let mut out = Readiness::default();
        let later = |t: Instant, out: &mut Readiness| {
            out.next_check = Some(out.next_check.map_or(t, |n| n.min(t)));
        };
        for (tp, queue) in &self.queues {
            let Some(front) = queue.front() else { continue };
            if let Some(at) = front.retry_at
                && at > now
            {
                later(at, &mut out);
                continue;
            }
            let full = queue.len() > 1 || front.size >= self.rules.batch_size || front.closed;
            let lingered = front.created + self.rules.linger;
            if full || flushing || lingered <= now {
                out.ready.push(tp.clone());
            } else {
                later(lingered, &mut out);
            }
        }
        out
    }

    /// The first batch of `tp`, if any, without removing it.
    pub fn front(&self, tp: &TopicPartition) -> Option<&ProducerBatch> {
        self.queues.get(tp).and_then(VecDeque::front)
    }

    /// Removes and returns `tp`'s first batch; it takes no more records.
    pub fn pop(&mut self, tp: &TopicPartition) -> Option<ProducerBatch> {
        let queue = self.queues.get_mut(tp)?;
        let mut batch = queue.pop_front()?;
        if queue.is_empty() {
            self.queues.shift_remove(tp);
        }
        batch.closed = true;
        Some(batch)
    }

    /// Puts a batch back for a retry, ahead of every batch with a later
    /// sequence (or none), so retries go out in sequence order.
    pub fn requeue(&mut self, mut batch: ProducerBatch) {
        batch.closed = true;
        let queue = self.queues.entry(batch.tp.clone()).or_default();
        let position = match batch.sequence {
            Some(tag) => queue
                .iter()
                .position(|b| {
                    b.sequence
                        .is_none_or(|s| s.generation != tag.generation || s.base > tag.base)
                })
                .unwrap_or(queue.len()),
            None => queue
                .iter()
                .position(|b| b.sequence.is_none())
                .unwrap_or(queue.len()),
        };
        queue.insert(position, batch);
    }

    /// Removes every queued batch created before `deadline` (their
    /// `delivery.timeout.ms` has passed).
    pub fn expire(&mut self, deadline: Instant) -> Vec<ProducerBatch> {
        self.remove_where(|b| b.created < deadline)
    }

    /// Removes every queued batch for which `stale` holds, keeping the
    /// order of the rest.
    pub fn remove_where(
        &mut self,
        mut stale: impl FnMut(&ProducerBatch) -> bool,
    ) -> Vec<ProducerBatch> {
        let mut removed = Vec::new();
        // The sender asks at every wakeup, and the answer is almost always
        // none: a queue is only taken apart when it holds a stale batch.
        // Moving every queued batch out and back each time was 14% of a
        // 1 KiB produce's CPU, with the producer's lock held.
        for queue in self.queues.values_mut() {
            if !queue.iter().any(&mut stale) {
                continue;
            }
            let (gone, keep): (VecDeque<_>, VecDeque<_>) = queue.drain(..).partition(|b| stale(b));
            *queue = keep;
            removed.extend(gone);
        }
        if !removed.is_empty() {
            self.queues.retain(|_, q| !q.is_empty());
        }
        removed
    }

    /// Whether no record is waiting.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Removes everything, for closing the producer.
    pub fn drain_all(&mut self) -> Vec<ProducerBatch> {
        self.queues.drain(..).flat_map(|(_, q)| q).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(batch_size: usize, linger_ms: u64) -> BatchingRules {
        BatchingRules {
            batch_size,
            linger: Duration::from_millis(linger_ms),
        }
    }

    fn record(len: usize) -> RecordInput {
        RecordInput {
            timestamp: 0,
            key: None,
            value: Some(Bytes::from(vec![b'x'; len])),
            headers: vec![],
        }
    }

    fn delivery() -> (Delivery, oneshot::Receiver<Result<RecordMetadata>>) {
        let (tx, rx) = oneshot::channel();
        (Delivery::to_future(tx, 0), rx)
    }

    fn append(acc: &mut Accumulator, tp: &TopicPartition, len: usize, now: Instant) -> Appended {
        acc.append(tp, record(len), delivery().0, None, None, now)
    }

    #[tokio::test]
    async fn a_group_counts_the_outcome_once_and_a_dropped_delivery_as_closed() {
        let group = super::super::DeliveryGroup::new();
        let grouped = || {
            let (mut d, rx) = delivery();
            group.admit(1);
            d.groups[0] = Some(group.shared());
            (d, rx)
        };
        let (d, mut rx) = grouped();
        d.written(&TopicPartition::new("t", 0), 7, -1);
        assert_eq!(rx.try_recv().unwrap().unwrap().offset, 7);
        assert_eq!(group.pending(), 0);
        assert_eq!(
            group.take().unwrap().get(&TopicPartition::new("t", 0)),
            Some(&8)
        );
        let (d, _rx) = grouped();
        drop(d);
        assert_eq!(group.pending(), 0);
        assert!(matches!(group.take(), Err(crate::ClientError::Closed)));
    }

    #[test]
    fn records_share_a_batch_until_batch_size() {
        let per_record = record_size_upper_bound(&record(100));
        // Room for exactly three records.
        let mut acc = Accumulator::new(rules(BatchHeader::LEN + 3 * per_record, 1000));
        let tp = TopicPartition::new("t", 0);
        let now = Instant::now();
        assert_eq!(append(&mut acc, &tp, 100, now), Appended::NewBatch);
        assert_eq!(append(&mut acc, &tp, 100, now), Appended::Joined);
        assert!(!acc.would_start_batch(&tp, per_record, None));
        assert_eq!(append(&mut acc, &tp, 100, now), Appended::Joined);
        assert!(acc.would_start_batch(&tp, per_record, None));
        // The full batch is ready at once, without waiting for linger.
        assert_eq!(acc.readiness(now, false).ready, vec![tp.clone()]);
        assert_eq!(append(&mut acc, &tp, 100, now), Appended::NewBatch);
        assert_eq!(acc.pop(&tp).unwrap().record_count(), 3);
        // The second batch is not full: it waits for linger.ms.
        let r = acc.readiness(now, false);
        assert!(r.ready.is_empty());
        assert_eq!(r.next_check, Some(now + Duration::from_millis(1000)));
    }

    #[test]
    fn linger_and_flush_make_batches_ready() {
        let mut acc = Accumulator::new(rules(1 << 20, 50));
        let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let t0 = Instant::now();
        append(&mut acc, &a, 10, t0);
        append(&mut acc, &b, 10, t0 + Duration::from_millis(20));
        assert!(
            acc.readiness(t0 + Duration::from_millis(49), false)
                .ready
                .is_empty()
        );
        assert_eq!(
            acc.readiness(t0 + Duration::from_millis(49), true)
                .ready
                .len(),
            2,
            "flush ignores linger"
        );
        let r = acc.readiness(t0 + Duration::from_millis(50), false);
        assert_eq!(r.ready, vec![a.clone()]);
        assert_eq!(r.next_check, Some(t0 + Duration::from_millis(70)));
    }

    #[test]
    fn an_oversized_record_gets_its_own_batch() {
        let mut acc = Accumulator::new(rules(200, 0));
        let tp = TopicPartition::new("t", 0);
        let now = Instant::now();
        assert_eq!(append(&mut acc, &tp, 10_000, now), Appended::NewBatch);
        assert_eq!(append(&mut acc, &tp, 10, now), Appended::NewBatch);
        assert_eq!(acc.pop(&tp).unwrap().record_count(), 1);
    }

    #[test]
    fn retries_go_back_in_sequence_order_and_take_no_new_records() {
        let mut acc = Accumulator::new(rules(1 << 20, 0));
        let tp = TopicPartition::new("t", 0);
        let now = Instant::now();
        let mut popped = Vec::new();
        for seq in 0..3 {
            append(&mut acc, &tp, 10, now);
            let mut b = acc.pop(&tp).unwrap();
            b.sequence = Some(SequenceTag {
                generation: 0,
                base: seq,
            });
            popped.push(b);
        }
        append(&mut acc, &tp, 10, now); // a new, unsequenced batch
        // Failures come back in any order; the queue restores 0, 1, 2.
        let third = popped.pop().unwrap();
        acc.requeue(third);
        let second = popped.pop().unwrap();
        acc.requeue(second);
        let first = popped.pop().unwrap();
        acc.requeue(first);
        let order: Vec<Option<i32>> = std::iter::from_fn(|| acc.pop(&tp))
            .map(|b| b.sequence.map(|s| s.base))
            .collect();
        assert_eq!(order, vec![Some(0), Some(1), Some(2), None]);

        // A requeued batch alone in its queue is closed to new records.
        append(&mut acc, &tp, 10, now);
        let b = acc.pop(&tp).unwrap();
        acc.requeue(b);
        assert!(acc.would_start_batch(&tp, 1, None));
        assert_eq!(append(&mut acc, &tp, 10, now), Appended::NewBatch);
    }

    #[test]
    fn retry_backoff_delays_readiness_and_expiry_removes_old_batches() {
        let mut acc = Accumulator::new(rules(1 << 20, 0));
        let tp = TopicPartition::new("t", 0);
        let t0 = Instant::now();
        append(&mut acc, &tp, 10, t0);
        let mut b = acc.pop(&tp).unwrap();
        b.retry_at = Some(t0 + Duration::from_millis(100));
        acc.requeue(b);
        let r = acc.readiness(t0, true);
        assert!(r.ready.is_empty());
        assert_eq!(r.next_check, Some(t0 + Duration::from_millis(100)));
        assert_eq!(
            acc.readiness(t0 + Duration::from_millis(100), false).ready,
            vec![tp.clone()]
        );

        append(&mut acc, &tp, 10, t0 + Duration::from_secs(5));
        let expired = acc.expire(t0 + Duration::from_secs(1));
        assert_eq!(expired.len(), 1);
        assert!(!acc.is_empty());
        assert_eq!(acc.drain_all().len(), 1);
        assert!(acc.is_empty());
    }

    #[test]
    fn records_of_another_gate_start_a_batch_of_their_own() {
        let mut acc = Accumulator::new(rules(10_000, 0));
        let tp = TopicPartition::new("t", 0);
        let now = Instant::now();
        let gate = SendGate::new(|| false);
        let other = SendGate::new(|| true);
        let mut add =
            |g: Option<&SendGate>| acc.append(&tp, record(1), delivery().0, g.cloned(), None, now);
        assert_eq!(add(Some(&gate)), Appended::NewBatch);
        assert_eq!(add(Some(&gate.clone())), Appended::Joined);
        assert_eq!(add(Some(&other)), Appended::NewBatch);
        assert_eq!(add(None), Appended::NewBatch);
        assert_eq!(add(None), Appended::Joined);
        assert!(acc.would_start_batch(&tp, 1, Some(&gate)));
        assert!(!acc.would_start_batch(&tp, 1, None));
        let first = acc.pop(&tp).unwrap();
        assert_eq!(first.record_count(), 2);
        assert!(!first.may_send());
        assert!(acc.pop(&tp).unwrap().may_send());
        assert!(acc.pop(&tp).unwrap().may_send());
    }
}
