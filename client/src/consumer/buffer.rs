//! The consumer's prefetched records, kept as runs: each run is what one
//! Fetch response returned for one partition, in offset order, and the runs
//! are in the order they arrived. `poll` takes records from the front, as
//! from one queue; a partition's position (its first buffered record) is
//! found by looking at the runs, not at every record. A buffer holds up to
//! `weir.prefetch.bytes` (50 MiB by default: hundreds of thousands of small
//! records), and a streams worker asks for the position of each of its
//! partitions after every poll; scanning every record for it took 46% of
//! the word-count bench's CPU time.

use std::collections::VecDeque;

use super::{ConsumerRecord, TopicPartition};

/// One partition's records from one Fetch response.
#[derive(Debug)]
struct Run {
    tp: TopicPartition,
    records: VecDeque<ConsumerRecord>,
}

/// Buffered records, in the order `poll` returns them.
#[derive(Debug, Default)]
pub(crate) struct RecordBuffer {
    runs: VecDeque<Run>,
    len: usize,
    bytes: usize,
}

impl RecordBuffer {
    /// Appends one response's records for `tp` (in offset order).
    pub(crate) fn push_run(&mut self, tp: TopicPartition, records: Vec<ConsumerRecord>) {
        if records.is_empty() {
            return;
        }
        self.len += records.len();
        self.bytes += records
            .iter()
            .map(ConsumerRecord::approximate_size)
            .sum::<usize>();
        self.runs.push_back(Run {
            tp,
            records: records.into(),
        });
    }

    /// Records buffered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The approximate bytes buffered (what the prefetch bound counts).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes up to `max` records from the front.
    pub(crate) fn take(&mut self, max: usize) -> Vec<ConsumerRecord> {
        let mut out = Vec::with_capacity(max.min(self.len));
        while out.len() < max {
            let Some(run) = self.runs.front_mut() else {
                break;
            };
            let n = (max - out.len()).min(run.records.len());
            out.extend(run.records.drain(..n));
            if run.records.is_empty() {
                self.runs.pop_front();
            }
        }
        self.len -= out.len();
        let taken: usize = out.iter().map(ConsumerRecord::approximate_size).sum();
        self.bytes = self.bytes.saturating_sub(taken);
        out
    }

    /// The offset of the first buffered record of `tp`, if any.
    pub(crate) fn first_offset(&self, tp: &TopicPartition) -> Option<i64> {
        self.runs
            .iter()
            .find(|run| run.tp.partition == tp.partition && run.tp.topic == tp.topic)
            .and_then(|run| run.records.front())
            .map(|r| r.offset)
    }

    /// Drops the records of every partition `keep` refuses.
    pub(crate) fn retain_partitions(&mut self, mut keep: impl FnMut(&TopicPartition) -> bool) {
        self.runs.retain(|run| keep(&run.tp));
        self.len = self.runs.iter().map(|run| run.records.len()).sum();
        self.bytes = self
            .runs
            .iter()
            .flat_map(|run| run.records.iter())
            .map(ConsumerRecord::approximate_size)
            .sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(topic: &str, partition: i32, offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            topic: topic.to_owned(),
            partition,
            offset,
            timestamp: 0,
            key: None,
            value: Some(bytes::Bytes::from_static(b"v")),
            headers: vec![],
        }
    }

    fn run(topic: &str, partition: i32, offsets: std::ops::Range<i64>) -> Vec<ConsumerRecord> {
        offsets.map(|o| record(topic, partition, o)).collect()
    }

    #[test]
    fn records_come_out_in_arrival_order_across_runs_and_positions_follow() {
        let (a0, a1, b0) = (
            TopicPartition::new("a", 0),
            TopicPartition::new("a", 1),
            TopicPartition::new("b", 0),
        );
        let mut buffer = RecordBuffer::default();
        buffer.push_run(a0.clone(), run("a", 0, 10..13));
        buffer.push_run(a1.clone(), run("a", 1, 5..7));
        buffer.push_run(a0.clone(), run("a", 0, 13..15));
        buffer.push_run(b0.clone(), Vec::new());
        assert_eq!((buffer.len(), buffer.bytes()), (7, 7 * 65));
        assert_eq!(buffer.first_offset(&a1), Some(5));
        assert_eq!(buffer.first_offset(&b0), None);

        let taken = buffer.take(4);
        let got: Vec<(i32, i64)> = taken.iter().map(|r| (r.partition, r.offset)).collect();
        assert_eq!(got, [(0, 10), (0, 11), (0, 12), (1, 5)]);
        assert_eq!(buffer.first_offset(&a0), Some(13));
        assert_eq!(buffer.first_offset(&a1), Some(6));
        assert_eq!((buffer.len(), buffer.bytes()), (3, 3 * 65));

        buffer.retain_partitions(|tp| tp != &a1);
        assert_eq!(buffer.first_offset(&a1), None);
        assert_eq!((buffer.len(), buffer.bytes()), (2, 2 * 65));
        let rest: Vec<i64> = buffer.take(10).iter().map(|r| r.offset).collect();
        assert_eq!(rest, [13, 14]);
        assert!(buffer.is_empty() && buffer.bytes() == 0);
    }
}
