//! Sequence numbers of the idempotent producer, with no I/O.
//!
//! The broker accepts a batch only if its base sequence follows the last
//! one it wrote for the producer id and epoch, and it answers a retry of one
//! of the last five batches with the original offset. So a retry that
//! keeps its sequence can never duplicate, and ordering holds as long as
//! retries go out in sequence order. The rules kept here:
//!
//! - sequences are assigned when a batch is first sent (not when records
//!   are appended), contiguously per partition;
//! - at most `max_in_flight` batches of a partition are unanswered;
//! - a batch that failed keeps its sequence and is resent only once every
//!   earlier request of the partition has been answered, so a retried batch
//!   never overtakes or races an older one;
//! - `OUT_OF_ORDER_SEQUENCE_NUMBER` for a batch that was sent while an
//!   earlier batch of its partition was unanswered is the expected echo of
//!   that batch's failure, or of two requests crossing, and is retried.
//!   For a batch sent when everything before it was acknowledged, it means
//!   the broker lost the producer's state: that batch fails and the
//!   producer takes a new producer id, whose sequences start at 0 (as
//!   Java's idempotent producer bumps its epoch). The state *at send time*
//!   decides, because responses of different requests are handled
//!   concurrently: judging by the acknowledgements seen when the error
//!   arrives would be racy;
//! - a sequenced batch that fails for good leaves a gap no later sequence
//!   can cross, so it also takes a new producer id;
//! - the new producer id is taken only once no request is in flight, and a
//!   batch that may have been written under the old id (a lost response, a
//!   timeout) then fails instead of being resent under the new one, where
//!   the broker could not recognise it as a duplicate (the sender keeps
//!   track of that; Java fails such a batch the same way).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// `OUT_OF_ORDER_SEQUENCE_NUMBER`.
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
/// `DUPLICATE_SEQUENCE_NUMBER`: the batch was already written.
pub const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
/// `UNKNOWN_PRODUCER_ID`: the broker no longer has the producer's state.
pub const UNKNOWN_PRODUCER_ID: i16 = 59;
/// `INVALID_PRODUCER_EPOCH`: a newer epoch of this producer id exists.
pub const INVALID_PRODUCER_EPOCH: i16 = 47;

/// A batch's sequence, tied to the producer id generation it was assigned
/// under: after a reset, old sequences mean nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceTag {
    /// Bumped each time the producer gets a new producer id or epoch.
    pub generation: u64,
    /// The batch's base sequence.
    pub base: i32,
}

/// What to do with a batch whose Produce failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureAction {
    /// Put it back, keeping its sequence, and send it again.
    Retry,
    /// Fail the batch's records with the error.
    Fail,
    /// Fail the batch and get a new producer id before sending anything
    /// more: the broker's sequence state no longer matches ours.
    FailAndResetProducer,
    /// The broker lost the producer's state and did not write the batch
    /// (`UNKNOWN_PRODUCER_ID`): bump the epoch, then send the batch again
    /// under it (KIP-360, as Java's idempotent producer). A transactional
    /// producer fails the batch instead.
    RetryAfterReset,
}

/// Kafka's sequence arithmetic: sequences wrap from `i32::MAX` to 0.
pub fn increment_sequence(sequence: i32, by: i32) -> i32 {
    if sequence > i32::MAX - by {
        by - (i32::MAX - sequence) - 1
    } else {
        sequence + by
    }
}

#[derive(Debug, Default)]
struct PartitionSequences {
    /// The next base sequence to assign.
    next: i32,
    /// Batches sent and not yet answered, in send order: the tag (the
    /// generation as well as the base: after a reset an old and a new
    /// batch can share a base), and whether everything before it was
    /// acknowledged when it was sent.
    in_flight: VecDeque<(Option<SequenceTag>, bool)>,
    /// The sequence the broker expects next: just after the last batch it
    /// acknowledged.
    expected: i32,
}

/// Per-partition sequence and in-flight bookkeeping.
#[derive(Debug)]
pub struct SequenceBook<K> {
    idempotent: bool,
    max_in_flight: usize,
    generation: u64,
    partitions: HashMap<K, PartitionSequences>,
}

impl<K: Clone + Eq + Hash> SequenceBook<K> {
    /// A book allowing `max_in_flight` unanswered batches per partition.
    /// Without idempotence it only counts in-flight batches.
    pub fn new(idempotent: bool, max_in_flight: usize) -> Self {
        Self {
            idempotent,
            max_in_flight: max_in_flight.max(1),
            generation: 0,
            partitions: HashMap::new(),
        }
    }

    /// The current producer id generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Unanswered batches of `key`.
    pub fn in_flight(&self, key: &K) -> usize {
        self.partitions.get(key).map_or(0, |p| p.in_flight.len())
    }

    /// Whether the next batch of `key` may be sent now. `tag` is the
    /// batch's sequence if it was sent before.
    pub fn may_send(&self, key: &K, tag: Option<SequenceTag>) -> bool {
        let in_flight = self.in_flight(key);
        match tag {
            // A retry of the current generation waits for every earlier request.
            Some(t) if self.idempotent && t.generation == self.generation => in_flight == 0,
            _ => in_flight < self.max_in_flight,
        }
    }

    /// The tag for a batch of `count` records about to be sent: its old tag
    /// if still valid, else a fresh sequence. `None` without idempotence.
    pub fn assign(&mut self, key: &K, tag: Option<SequenceTag>, count: i32) -> Option<SequenceTag> {
        if !self.idempotent {
            return None;
        }
        if let Some(t) = tag
            && t.generation == self.generation
        {
            return Some(t);
        }
        let p = self.partitions.entry(key.clone()).or_default();
        let base = p.next;
        p.next = increment_sequence(base, count);
        Some(SequenceTag {
            generation: self.generation,
            base,
        })
    }

    /// Records that a batch with `tag` went out.
    pub fn on_sent(&mut self, key: &K, tag: Option<SequenceTag>) {
        let current = self.generation;
        let p = self.partitions.entry(key.clone()).or_default();
        let clean = tag.is_some_and(|t| {
            t.generation == current && p.in_flight.is_empty() && p.expected == t.base
        });
        p.in_flight.push_back((tag, clean));
    }

    /// Removes the batch from the in-flight list. Returns the partition and
    /// whether the batch was sent with everything before it acknowledged.
    fn answered(
        &mut self,
        key: &K,
        tag: Option<SequenceTag>,
    ) -> Option<(&mut PartitionSequences, bool)> {
        let p = self.partitions.get_mut(key)?;
        let clean = match p.in_flight.iter().position(|&(t, _)| t == tag) {
            Some(i) => p.in_flight.remove(i).is_some_and(|(_, clean)| clean),
            None => false,
        };
        Some((p, clean))
    }

    /// Records the broker's acknowledgement of a batch of `count` records.
    pub fn on_acked(&mut self, key: &K, tag: Option<SequenceTag>, count: i32) {
        let current = self.generation;
        if let Some((p, _)) = self.answered(key, tag)
            && let Some(t) = tag
            && t.generation == current
        {
            p.expected = increment_sequence(t.base, count);
        }
    }

    /// Records a failed batch and decides what to do with it.
    /// `retriable` says whether the error (or lost connection) is one a
    /// retry can fix; `code` is the Kafka error code, 0 for network errors.
    pub fn on_failed(
        &mut self,
        key: &K,
        tag: Option<SequenceTag>,
        code: i16,
        retriable: bool,
    ) -> FailureAction {
        let current = self.generation;
        let idempotent = self.idempotent;
        let Some((_, clean)) = self.answered(key, tag) else {
            return if retriable {
                FailureAction::Retry
            } else {
                FailureAction::Fail
            };
        };
        if !idempotent || tag.is_none_or(|t| t.generation != current) {
            // No sequence, or one from an old producer id: a retry gets a
            // new sequence, so nothing about the broker's state is learnt.
            // (The sender fails, rather than retries, such a batch if an
            // attempt may have been written.)
            return if retriable || code == OUT_OF_ORDER_SEQUENCE_NUMBER {
                FailureAction::Retry
            } else {
                FailureAction::Fail
            };
        }
        match code {
            OUT_OF_ORDER_SEQUENCE_NUMBER if !clean => FailureAction::Retry,
            UNKNOWN_PRODUCER_ID => FailureAction::RetryAfterReset,
            _ if retriable => FailureAction::Retry,
            // Lost producer state, a fenced epoch, or any final failure of
            // a sequenced batch: later sequences can't follow it.
            _ => FailureAction::FailAndResetProducer,
        }
    }

    /// A batch with a sequence was given up on without an answer (it
    /// expired): the broker may or may not have it, so the sequence can't
    /// be trusted any more.
    pub fn on_abandoned(&mut self, key: &K, tag: Option<SequenceTag>) -> FailureAction {
        self.answered(key, tag);
        match tag {
            Some(t) if t.generation == self.generation => FailureAction::FailAndResetProducer,
            _ => FailureAction::Fail,
        }
    }

    /// The producer has a new producer id or epoch: every partition's
    /// sequences start at 0 again. In-flight counts are kept, since those
    /// requests are still out.
    pub fn reset(&mut self) {
        self.generation += 1;
        for p in self.partitions.values_mut() {
            p.next = 0;
            p.expected = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_are_contiguous_per_partition_and_wrap_like_kafka() {
        let mut book = SequenceBook::new(true, 5);
        let a = book.assign(&"a", None, 3).unwrap();
        let b = book.assign(&"a", None, 2).unwrap();
        let other = book.assign(&"b", None, 4).unwrap();
        assert_eq!((a.base, b.base, other.base), (0, 3, 0));
        // A batch keeps its tag on retry.
        assert_eq!(book.assign(&"a", Some(a), 3), Some(a));
        assert_eq!(increment_sequence(i32::MAX - 1, 1), i32::MAX);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 5), 3);
    }

    #[test]
    fn at_most_max_in_flight_and_retries_wait_for_everything_earlier() {
        let mut book = SequenceBook::new(true, 5);
        let mut tags = Vec::new();
        for _ in 0..5 {
            assert!(book.may_send(&"a", None));
            let t = book.assign(&"a", None, 1);
            book.on_sent(&"a", t);
            tags.push(t);
        }
        assert!(!book.may_send(&"a", None), "a sixth request must wait");
        // The first fails retriably (NOT_LEADER_OR_FOLLOWER).
        assert_eq!(book.on_failed(&"a", tags[0], 6, true), FailureAction::Retry);
        // It may not go out while the later four are unanswered.
        assert!(!book.may_send(&"a", tags[0]));
        // Those are rejected as out of order: an echo of the first failure.
        for t in &tags[1..] {
            assert_eq!(
                book.on_failed(&"a", *t, OUT_OF_ORDER_SEQUENCE_NUMBER, false),
                FailureAction::Retry
            );
        }
        assert!(book.may_send(&"a", tags[0]));
        assert_eq!(
            book.assign(&"a", tags[0], 1),
            tags[0],
            "the retry keeps sequence 0"
        );
        book.on_sent(&"a", tags[0]);
        assert!(!book.may_send(&"a", tags[1]), "one retry at a time");
        book.on_acked(&"a", tags[0], 1);
        assert!(book.may_send(&"a", tags[1]));
    }

    #[test]
    fn out_of_order_right_after_the_last_ack_resets_the_producer() {
        let mut book = SequenceBook::new(true, 5);
        let first = book.assign(&"a", None, 2);
        book.on_sent(&"a", first);
        book.on_acked(&"a", first, 2);
        let second = book.assign(&"a", None, 1);
        assert_eq!(second.unwrap().base, 2);
        book.on_sent(&"a", second);
        assert_eq!(
            book.on_failed(&"a", second, OUT_OF_ORDER_SEQUENCE_NUMBER, false),
            FailureAction::FailAndResetProducer
        );
        book.reset();
        // Sequences restart and old tags are replaced.
        let fresh = book.assign(&"a", second, 1).unwrap();
        assert_eq!(
            fresh,
            SequenceTag {
                generation: 1,
                base: 0
            }
        );
        assert!(
            book.may_send(&"a", second),
            "an old-generation tag is a fresh batch"
        );
    }

    #[test]
    fn an_echo_judged_after_a_later_ack_is_still_retried() {
        // Batches 0 and 1 go out back to back; the broker sees 1 first
        // (out of order), then 0. Their responses are handled the other
        // way round: 0's acknowledgement before 1's error.
        let mut book = SequenceBook::new(true, 5);
        let first = book.assign(&"a", None, 1);
        book.on_sent(&"a", first);
        let second = book.assign(&"a", None, 1);
        book.on_sent(&"a", second);
        book.on_acked(&"a", first, 1);
        assert_eq!(
            book.on_failed(&"a", second, OUT_OF_ORDER_SEQUENCE_NUMBER, false),
            FailureAction::Retry,
            "sent behind an unanswered batch: an echo, not lost state"
        );
        // Resent alone, with everything before it acknowledged, the same
        // error means the broker lost the producer's state.
        book.on_sent(&"a", second);
        assert_eq!(
            book.on_failed(&"a", second, OUT_OF_ORDER_SEQUENCE_NUMBER, false),
            FailureAction::FailAndResetProducer
        );
    }

    #[test]
    fn non_retriable_errors_fail_and_old_generation_batches_get_new_sequences() {
        let mut book = SequenceBook::new(true, 5);
        let t = book.assign(&"a", None, 1);
        book.on_sent(&"a", t);
        // MESSAGE_TOO_LARGE is final, and leaves a gap in the sequences.
        assert_eq!(
            book.on_failed(&"a", t, 10, false),
            FailureAction::FailAndResetProducer
        );
        let mut plain = SequenceBook::new(false, 5);
        plain.on_sent(&"a", None);
        assert_eq!(plain.on_failed(&"a", None, 10, false), FailureAction::Fail);
        let t = book.assign(&"a", None, 1);
        book.on_sent(&"a", t);
        book.reset();
        assert_eq!(
            book.on_failed(&"a", t, OUT_OF_ORDER_SEQUENCE_NUMBER, false),
            FailureAction::Retry
        );
        let abandoned = book.assign(&"a", None, 1);
        book.on_sent(&"a", abandoned);
        assert_eq!(
            book.on_abandoned(&"a", abandoned),
            FailureAction::FailAndResetProducer
        );
        assert_eq!(book.in_flight(&"a"), 0);
    }

    #[test]
    fn in_flight_batches_of_two_generations_sharing_a_base_are_told_apart() {
        let mut book = SequenceBook::new(true, 5);
        // Sent with everything before it acknowledged: a clean batch.
        let old = book.assign(&"a", None, 1);
        book.on_sent(&"a", old);
        // A new producer id while it is out (the transaction layer's
        // set_identity does not wait); the next batch gets base 0 too, and
        // is sent behind the unanswered old one.
        book.reset();
        let new = book.assign(&"a", None, 1);
        assert_eq!(new.map(|t| t.base), old.map(|t| t.base));
        book.on_sent(&"a", new);
        // Its OUT_OF_ORDER is the echo of a batch sent behind another:
        // retried. Matching the old batch's clean entry instead would take
        // yet another producer id.
        assert_eq!(
            book.on_failed(&"a", new, OUT_OF_ORDER_SEQUENCE_NUMBER, false),
            FailureAction::Retry
        );
        assert_eq!(book.in_flight(&"a"), 1, "the old batch is still out");
        book.on_acked(&"a", old, 1);
        assert_eq!(book.in_flight(&"a"), 0);
    }

    #[test]
    fn without_idempotence_only_in_flight_is_counted() {
        let mut book = SequenceBook::new(false, 2);
        assert_eq!(book.assign(&"a", None, 1), None);
        book.on_sent(&"a", None);
        book.on_sent(&"a", None);
        assert!(!book.may_send(&"a", None));
        assert_eq!(book.on_failed(&"a", None, 6, true), FailureAction::Retry);
        assert!(book.may_send(&"a", None));
        book.on_acked(&"a", None, 1);
        assert_eq!(book.in_flight(&"a"), 0);
    }
}
