//! Per-partition idempotent producer state: Kafka's `ProducerStateManager`.
//!
//! For every producer id that wrote to the partition, the broker remembers
//! its epoch and the sequence ranges and offsets of its last five batches.
//! That is enough to recognise a retried batch (acknowledged again with its
//! original offset, never appended twice), a gap in the sequence (rejected
//! with `OUT_OF_ORDER_SEQUENCE_NUMBER`) and a zombie with an older epoch
//! (rejected with `INVALID_PRODUCER_EPOCH`).

use std::collections::{HashMap, VecDeque};

use weir_protocol::records::BatchHeader;

/// How many batches per producer are kept for duplicate detection; the Java
/// producer allows at most five in flight, so a retry is always among them.
pub const DUPLICATE_WINDOW: usize = 5;

/// One remembered batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    /// Sequence of the first record.
    pub first_seq: i32,
    /// Sequence of the last record.
    pub last_seq: i32,
    /// Offset the batch was appended at.
    pub first_offset: i64,
    /// Offset of its last record.
    pub last_offset: i64,
}

/// What the broker knows about one producer id on one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerEntry {
    /// The newest epoch seen (from data or from a transaction marker).
    pub epoch: i16,
    /// The last batches, oldest first, at most [`DUPLICATE_WINDOW`].
    pub batches: VecDeque<BatchMeta>,
}

/// The verdict on one incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Not an idempotent batch, or the next one in sequence: append it.
    Append,
    /// A retry of a batch already appended at this offset.
    Duplicate(BatchMeta),
    /// The epoch is older than the producer's current one.
    StaleEpoch {
        /// The producer's current epoch.
        current: i16,
    },
    /// The sequence does not follow the last one.
    OutOfOrder {
        /// The sequence expected next.
        expected: i32,
    },
}

/// Sequence numbers wrap from `i32::MAX` to 0, as in Kafka's `DefaultRecordBatch`.
pub fn increment_sequence(seq: i32, by: i32) -> i32 {
    if seq > i32::MAX - by {
        by - (i32::MAX - seq) - 1
    } else {
        seq + by
    }
}

/// All producers of one partition.
#[derive(Debug, Clone, Default)]
pub struct ProducerStates {
    entries: HashMap<i64, ProducerEntry>,
}

impl ProducerStates {
    /// The entry of a producer id, if it ever wrote here.
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.entries.get(&producer_id)
    }

    /// Checks a batch against the producer's state without changing it.
    pub fn check(&self, h: &BatchHeader) -> SequenceCheck {
        if h.producer_id < 0 {
            return SequenceCheck::Append;
        }
        let Some(entry) = self.entries.get(&h.producer_id) else {
            // Like Kafka (ProducerAppendInfo): with no state for the producer
            // (new here, or its records deleted by retention or
            // DeleteRecords), any sequence is accepted.
            return SequenceCheck::Append;
        };
        if h.producer_epoch < entry.epoch {
            return SequenceCheck::StaleEpoch {
                current: entry.epoch,
            };
        }
        if h.base_sequence < 0 {
            // Transactional-only producers without idempotence are not sent by
            // modern clients; nothing to check.
            return SequenceCheck::Append;
        }
        let last_seq = increment_sequence(h.base_sequence, h.last_offset_delta);
        if h.producer_epoch > entry.epoch {
            // A bumped epoch restarts the sequence.
            return if h.base_sequence == 0 {
                SequenceCheck::Append
            } else {
                SequenceCheck::OutOfOrder { expected: 0 }
            };
        }
        if let Some(dup) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq)
        {
            return SequenceCheck::Duplicate(*dup);
        }
        let expected = match entry.batches.back() {
            Some(b) => increment_sequence(b.last_seq, 1),
            None => 0,
        };
        if h.base_sequence == expected {
            SequenceCheck::Append
        } else {
            SequenceCheck::OutOfOrder { expected }
        }
    }

    /// Records an appended batch (already rewritten to its final offset).
    pub fn record_append(&mut self, h: &BatchHeader) {
        if h.producer_id < 0 {
            return;
        }
        let entry = self.entries.entry(h.producer_id).or_default();
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if h.base_sequence < 0 {
            return;
        }
        entry.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: increment_sequence(h.base_sequence, h.last_offset_delta),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
        });
        while entry.batches.len() > DUPLICATE_WINDOW {
            entry.batches.pop_front();
        }
    }

    /// A transaction marker carries the producer's current epoch; a newer
    /// one fences data of older epochs and restarts the sequence.
    pub fn record_marker(&mut self, producer_id: i64, epoch: i16) {
        let entry = self.entries.entry(producer_id).or_default();
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset: offset,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn sequences_wrap_like_kafka() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(5, 3), 8);
    }

    #[test]
    fn duplicates_gaps_and_stale_epochs() {
        let mut s = ProducerStates::default();
        assert_eq!(
            s.check(&header(7, 0, 3, 1, 0)),
            SequenceCheck::Append,
            "unknown producer"
        );
        for (i, seq) in [0, 2, 4, 6, 8, 10].into_iter().enumerate() {
            let h = header(7, 0, seq, 2, i as i64 * 2);
            assert_eq!(s.check(&h), SequenceCheck::Append);
            s.record_append(&h);
        }
        // The oldest of six batches fell out of the window of five.
        assert_eq!(
            s.check(&header(7, 0, 0, 2, 0)),
            SequenceCheck::OutOfOrder { expected: 12 }
        );
        match s.check(&header(7, 0, 4, 2, 0)) {
            SequenceCheck::Duplicate(m) => assert_eq!((m.first_offset, m.last_offset), (4, 5)),
            other => panic!("expected duplicate, got {other:?}"),
        }
        assert_eq!(
            s.check(&header(7, 0, 13, 1, 0)),
            SequenceCheck::OutOfOrder { expected: 12 }
        );
        s.record_marker(7, 1);
        assert_eq!(
            s.check(&header(7, 0, 12, 1, 0)),
            SequenceCheck::StaleEpoch { current: 1 }
        );
        assert_eq!(s.check(&header(7, 1, 0, 1, 0)), SequenceCheck::Append);
        assert_eq!(
            s.check(&header(7, 2, 5, 1, 0)),
            SequenceCheck::OutOfOrder { expected: 0 }
        );
    }
}
