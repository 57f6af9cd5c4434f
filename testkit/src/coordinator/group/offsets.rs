//! Committed offsets of one group, and transactional offsets that wait for
//! their transaction's marker.
//!
//! Kafka keeps these in `__consumer_offsets`; the testkit keeps them in
//! memory but follows the same visibility rules: a `TxnOffsetCommit` is
//! pending, invisible to OffsetFetch, until EndTxn commits it, and is
//! dropped if the transaction aborts.

use std::collections::{BTreeMap, HashMap};

/// A topic partition.
pub type TopicPartition = (String, i32);

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The offset.
    pub offset: i64,
    /// The leader epoch the consumer saw (-1: unknown).
    pub leader_epoch: i32,
    /// The client's metadata string.
    pub metadata: Option<String>,
    /// The position of the commit in the group's history. Kafka compares
    /// the offsets-log positions of a transactional commit and a direct one
    /// when the transaction commits (`olderThan`); this is that position.
    pub sequence: u64,
}

/// The offsets of one group.
#[derive(Debug, Clone, Default)]
pub struct GroupOffsets {
    committed: BTreeMap<TopicPartition, CommittedOffset>,
    /// Producer id → offsets of its open transaction.
    pending: HashMap<i64, BTreeMap<TopicPartition, CommittedOffset>>,
    next_sequence: u64,
}

impl GroupOffsets {
    fn next_sequence(&mut self) -> u64 {
        self.next_sequence += 1;
        self.next_sequence
    }

    /// Commits an offset now (OffsetCommit).
    pub fn commit(
        &mut self,
        tp: TopicPartition,
        offset: i64,
        leader_epoch: i32,
        metadata: Option<String>,
    ) {
        let sequence = self.next_sequence();
        self.committed.insert(
            tp,
            CommittedOffset {
                offset,
                leader_epoch,
                metadata,
                sequence,
            },
        );
    }

    /// Stages an offset in a producer's transaction (TxnOffsetCommit).
    pub fn stage(
        &mut self,
        producer_id: i64,
        tp: TopicPartition,
        offset: i64,
        leader_epoch: i32,
        metadata: Option<String>,
    ) {
        let sequence = self.next_sequence();
        self.pending.entry(producer_id).or_default().insert(
            tp,
            CommittedOffset {
                offset,
                leader_epoch,
                metadata,
                sequence,
            },
        );
    }

    /// Ends a producer's transaction: on commit its staged offsets become
    /// committed, unless a direct commit written after them is already there
    /// (Kafka's `completePendingTxnOffsetCommit`); on abort they vanish.
    /// Returns how many offsets were committed.
    pub fn complete(&mut self, producer_id: i64, commit: bool) -> usize {
        let Some(staged) = self.pending.remove(&producer_id) else {
            return 0;
        };
        if !commit {
            return 0;
        }
        let mut applied = 0;
        for (tp, staged) in staged {
            let newer = self
                .committed
                .get(&tp)
                .is_none_or(|current| current.sequence < staged.sequence);
            if newer {
                self.committed.insert(tp, staged);
                applied += 1;
            }
        }
        applied
    }

    /// The committed offset of a partition.
    pub fn get(&self, tp: &TopicPartition) -> Option<&CommittedOffset> {
        self.committed.get(tp)
    }

    /// Every committed offset, ordered by topic and partition.
    pub fn all(&self) -> impl Iterator<Item = (&TopicPartition, &CommittedOffset)> {
        self.committed.iter()
    }

    /// Whether any open transaction has staged an offset for `tp` (OffsetFetch
    /// with `require_stable` answers `UNSTABLE_OFFSET_COMMIT` then).
    pub fn has_pending(&self, tp: &TopicPartition) -> bool {
        self.pending.values().any(|staged| staged.contains_key(tp))
    }

    /// Whether any transaction has staged offsets in this group.
    pub fn has_any_pending(&self) -> bool {
        self.pending.values().any(|staged| !staged.is_empty())
    }

    /// Whether no offset is committed or staged.
    pub fn is_empty(&self) -> bool {
        self.committed.is_empty() && !self.has_any_pending()
    }

    /// Forgets the committed offsets of a deleted topic.
    pub fn forget_topic(&mut self, topic: &str) {
        self.committed.retain(|(t, _), _| t != topic);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        ("t".to_owned(), p)
    }

    #[test]
    fn staged_offsets_are_invisible_until_commit_and_vanish_on_abort() {
        let mut o = GroupOffsets::default();
        o.stage(7, tp(0), 10, -1, None);
        o.stage(8, tp(1), 20, -1, None);
        assert!(o.get(&tp(0)).is_none());
        assert!(o.has_pending(&tp(0)) && o.has_pending(&tp(1)));
        assert_eq!(o.complete(7, true), 1);
        assert_eq!(o.get(&tp(0)).map(|c| c.offset), Some(10));
        assert!(!o.has_pending(&tp(0)));
        assert_eq!(o.complete(8, false), 0);
        assert!(o.get(&tp(1)).is_none());
        assert!(!o.has_any_pending());
    }

    #[test]
    fn a_direct_commit_after_the_staged_one_wins_but_not_one_before() {
        let mut o = GroupOffsets::default();
        o.commit(tp(0), 5, -1, None);
        o.stage(7, tp(0), 10, -1, None);
        o.stage(7, tp(1), 10, -1, None);
        o.commit(tp(1), 30, -1, None);
        assert_eq!(o.complete(7, true), 1);
        assert_eq!(o.get(&tp(0)).map(|c| c.offset), Some(10));
        assert_eq!(o.get(&tp(1)).map(|c| c.offset), Some(30));
    }
}
