//! Open and aborted transactions of one partition.
//!
//! A transactional producer's first batch on a partition opens its
//! transaction there; the marker closes it. The oldest open transaction's
//! first offset is the last stable offset, below which read_committed
//! consumers may read. Aborted transactions are indexed with their first
//! offset and the offset of their ABORT marker, so that a Fetch can list
//! those that overlap what it returns and the consumer can skip their
//! batches (Kafka's `AbortedTxn` / transaction index).

use std::collections::BTreeMap;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of the transaction's first batch on this partition.
    pub first_offset: i64,
    /// Offset of its ABORT marker.
    pub last_offset: i64,
}

/// The transaction index of one partition.
#[derive(Debug, Clone, Default)]
pub struct TxnIndex {
    /// Producer id → first offset of its open transaction.
    open: BTreeMap<i64, i64>,
    aborted: Vec<AbortedTxn>,
}

impl TxnIndex {
    /// Notes a transactional batch at `offset`; opens the producer's
    /// transaction if this is its first batch.
    pub fn begin(&mut self, producer_id: i64, offset: i64) {
        self.open.entry(producer_id).or_insert(offset);
    }

    /// Closes the producer's transaction with a marker at `marker_offset`.
    pub fn end(&mut self, producer_id: i64, marker_offset: i64, aborted: bool) {
        if let Some(first_offset) = self.open.remove(&producer_id)
            && aborted
        {
            self.aborted.push(AbortedTxn {
                producer_id,
                first_offset,
                last_offset: marker_offset,
            });
        }
    }

    /// The first offset of the oldest open transaction.
    pub fn first_open_offset(&self) -> Option<i64> {
        self.open.values().copied().min()
    }

    /// The first offset of a producer's open transaction here, if any.
    pub fn open_transaction(&self, producer_id: i64) -> Option<i64> {
        self.open.get(&producer_id).copied()
    }

    /// Every aborted transaction, oldest first.
    pub fn aborted(&self) -> &[AbortedTxn] {
        &self.aborted
    }

    /// Aborted transactions with data in `[from, to)`.
    pub fn aborted_overlapping(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.aborted
            .iter()
            .filter(|a| a.last_offset >= from && a.first_offset < to)
            .copied()
            .collect()
    }

    /// Forgets aborted transactions entirely below the log start offset.
    pub fn drop_aborted_before(&mut self, log_start: i64) {
        self.aborted.retain(|a| a.last_offset >= log_start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lso_follows_the_oldest_open_transaction_and_aborts_are_indexed() {
        let mut t = TxnIndex::default();
        t.begin(1, 10);
        t.begin(2, 12);
        t.begin(1, 14);
        assert_eq!(t.first_open_offset(), Some(10));
        t.end(1, 15, true);
        assert_eq!(t.first_open_offset(), Some(12));
        t.end(2, 16, false);
        assert_eq!(t.first_open_offset(), None);
        assert_eq!(
            t.aborted(),
            &[AbortedTxn {
                producer_id: 1,
                first_offset: 10,
                last_offset: 15
            }]
        );
        assert_eq!(t.aborted_overlapping(0, 10).len(), 0);
        assert_eq!(t.aborted_overlapping(15, 20).len(), 1);
        assert_eq!(t.aborted_overlapping(16, 20).len(), 0);
    }
}
