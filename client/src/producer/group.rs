//! Many records' outcomes tracked as one.
//!
//! A [`DeliveryGroup`] replaces a future per record when the caller only
//! needs to know that *all* of them were written, and where: a stream
//! thread sends hundreds of thousands of records between two commits and
//! then waits for all of them. Per record it costs an atomic operation when
//! the record is admitted; the sender settles a batch's records with one
//! short uncontended lock, instead of a channel, a boxed future and a topic
//! name copied into each record's metadata.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::record::TopicPartition;
use crate::{ClientError, Result};

/// Tracks the outcomes of records sent with
/// [`Producer::enqueue_into`](super::Producer::enqueue_into) or
/// [`TransactionalProducer::enqueue_into`](crate::transaction::TransactionalProducer::enqueue_into):
/// how many are still pending, the first failure, and per partition the
/// offset after the last record written.
///
/// Cheap to clone: clones share one tally.
///
/// ```no_run
/// # async fn demo(producer: weir_client::producer::Producer) -> weir_client::Result<()> {
/// use weir_client::producer::{DeliveryGroup, ProducerRecord};
///
/// let group = DeliveryGroup::new();
/// for i in 0..1000 {
///     producer.enqueue_into(ProducerRecord::new("events").with_value(i.to_string()), &group).await?;
/// }
/// producer.flush().await;
/// let ends = group.wait().await?;
/// for (tp, next) in &ends {
///     println!("{tp}: written up to offset {next}");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct DeliveryGroup {
    shared: Arc<GroupShared>,
}

impl std::fmt::Debug for DeliveryGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryGroup")
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
pub(crate) struct GroupShared {
    /// Records admitted and not yet settled.
    pending: AtomicUsize,
    /// Notified whenever `pending` drops to 0.
    settled: Notify,
    tally: Mutex<Tally>,
}

#[derive(Default)]
struct Tally {
    /// Per partition, the offset after the last record written.
    ends: BTreeMap<TopicPartition, i64>,
    /// The first failure since the last [`DeliveryGroup::take`].
    failure: Option<ClientError>,
    /// Records failed since the last take.
    failed: usize,
}

impl DeliveryGroup {
    /// An empty group.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records whose outcome is not known yet.
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::Acquire)
    }

    /// Waits until no record of the group is pending (returns at once when
    /// none is).
    pub async fn settled(&self) {
        loop {
            let settled = self.shared.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            if self.pending() == 0 {
                return;
            }
            settled.await;
        }
    }

    /// Takes the tally of the records settled so far and starts a new one:
    /// per partition the offset after the last record written, or the first
    /// failure if any record failed.
    ///
    /// # Errors
    /// The first failure among the settled records, as the producer
    /// reported it for that record.
    pub fn take(&self) -> Result<BTreeMap<TopicPartition, i64>> {
        let tally = std::mem::take(&mut *self.shared.lock());
        match tally.failure {
            Some(e) => Err(e),
            None => Ok(tally.ends),
        }
    }

    /// [`settled`](Self::settled), then [`take`](Self::take).
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub async fn wait(&self) -> Result<BTreeMap<TopicPartition, i64>> {
        self.settled().await;
        self.take()
    }

    /// Records failed since the last [`take`](Self::take).
    pub fn failed(&self) -> usize {
        self.shared.lock().failed
    }

    /// Calls `f` with the first failure since the last take, if any,
    /// without taking it.
    pub(crate) fn with_failure<T>(&self, f: impl FnOnce(&ClientError) -> T) -> Option<T> {
        self.shared.lock().failure.as_ref().map(f)
    }

    pub(crate) fn shared(&self) -> Arc<GroupShared> {
        Arc::clone(&self.shared)
    }

    /// Counts `n` more records as pending, before they are enqueued.
    pub(crate) fn admit(&self, n: usize) {
        self.shared.admit(n);
    }

    /// `n` admitted records gave up before they were enqueued: they have no
    /// outcome to record.
    pub(crate) fn release(&self, n: usize) {
        self.shared.settle(n);
    }
}

impl GroupShared {
    fn lock(&self) -> MutexGuard<'_, Tally> {
        // Every mutation is a single step: a panic elsewhere leaves the
        // tally consistent.
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn admit(&self, n: usize) {
        self.pending.fetch_add(n, Ordering::AcqRel);
    }

    fn settle(&self, n: usize) {
        if n > 0 && self.pending.fetch_sub(n, Ordering::AcqRel) == n {
            self.settled.notify_waiters();
        }
    }

    /// One record of the group was written at `offset` of `tp` (-1 when
    /// the broker does not answer, `acks=0`).
    pub(crate) fn written(&self, tp: &TopicPartition, offset: i64) {
        self.written_many(tp, offset, 1);
    }

    /// `count` records of the group were written to `tp`, the last of them
    /// at `offset`.
    pub(crate) fn written_many(&self, tp: &TopicPartition, offset: i64, count: usize) {
        {
            let mut tally = self.lock();
            let next = offset.saturating_add(1);
            match tally.ends.get_mut(tp) {
                Some(end) => *end = (*end).max(next),
                None => {
                    tally.ends.insert(tp.clone(), next);
                }
            }
        }
        self.settle(count);
    }

    /// One record of the group failed with `error`.
    pub(crate) fn failed(&self, error: ClientError) {
        {
            let mut tally = self.lock();
            tally.failed += 1;
            if tally.failure.is_none() {
                tally.failure = Some(error);
            }
        }
        self.settle(1);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[tokio::test]
    async fn the_tally_keeps_each_partitions_end_and_the_first_failure() {
        let group = DeliveryGroup::new();
        group.admit(4);
        let shared = group.shared();
        let a = TopicPartition::new("t", 0);
        let b = TopicPartition::new("t", 1);
        shared.written(&a, 7);
        shared.written(&a, 5);
        shared.written(&b, 0);
        assert_eq!(group.pending(), 1);
        shared.written(&a, 9);
        group.settled().await;
        let ends = group.take().unwrap();
        assert_eq!(ends.get(&a), Some(&10));
        assert_eq!(ends.get(&b), Some(&1));

        group.admit(3);
        shared.failed(ClientError::Closed);
        shared.written(&a, 11);
        group.release(1);
        assert_eq!(group.failed(), 1);
        assert!(matches!(group.wait().await, Err(ClientError::Closed)));
        // The failure was taken with the tally.
        assert!(group.take().unwrap().is_empty());
    }
}
