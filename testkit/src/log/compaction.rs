//! Log compaction for `cleanup.policy=compact` topics, run when a test asks
//! (Kafka's `LogCleaner`, without segments or timers).
//!
//! Below the last stable offset, only the newest record of each key is
//! kept; records of aborted transactions are dropped; tombstones (null
//! values) are kept unless the caller asks to remove them, as Kafka does
//! once `delete.retention.ms` has passed. A batch keeps its base offset,
//! last offset delta, producer id, epoch and base sequence, so offsets
//! never move. A batch left with no records is dropped, unless it is the
//! last batch of its producer, whose sequence state it carries; it then
//! stays as an empty batch, which readers must skip (next offset = base
//! offset + last offset delta + 1).
//!
//! Rewritten batches are stored uncompressed (`rewrite_batch`).

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use weir_protocol::records::{BatchHeader, DecodeOptions, Record, decode_batch, rewrite_batch};

use super::{PartitionLog, StoredBatch};

/// What a compaction run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Records removed.
    pub records_removed: usize,
    /// Batches dropped entirely.
    pub batches_removed: usize,
    /// Batches kept with no records.
    pub empty_batches_kept: usize,
}

/// Compacts `log` below its last stable offset.
pub fn compact(log: &mut PartitionLog, remove_tombstones: bool) -> CompactionStats {
    let opts = DecodeOptions {
        verify_crc: false,
        ..DecodeOptions::default()
    };
    let limit = log.last_stable_offset();
    let aborted = log.transactions().aborted().to_vec();
    let in_aborted_txn = |pid: i64, offset: i64| {
        aborted
            .iter()
            .any(|a| a.producer_id == pid && a.first_offset <= offset && offset < a.last_offset)
    };
    let cleanable = |b: &StoredBatch| b.header.next_offset() <= limit && !b.header.is_control();

    // The newest offset of every key in the cleanable range.
    let mut latest: HashMap<Bytes, i64> = HashMap::new();
    let mut decoded: Vec<Option<Vec<Record>>> = Vec::with_capacity(log.batches.len());
    for b in &log.batches {
        if !cleanable(b) {
            decoded.push(None);
            continue;
        }
        let records = decode_batch(&b.bytes, &opts).map(|d| d.records).ok();
        if let Some(records) = &records {
            for r in records {
                if in_aborted_txn(b.header.producer_id, r.offset) {
                    continue;
                }
                if let Some(k) = &r.key {
                    latest.insert(k.clone(), r.offset);
                }
            }
        }
        decoded.push(records);
    }
    // The last batch of each producer must survive, even empty.
    let mut last_of_producer: HashMap<i64, usize> = HashMap::new();
    for (i, b) in log.batches.iter().enumerate() {
        if b.header.producer_id >= 0 {
            last_of_producer.insert(b.header.producer_id, i);
        }
    }
    let keep_empty: HashSet<usize> = last_of_producer.into_values().collect();

    let mut stats = CompactionStats::default();
    let mut out = Vec::with_capacity(log.batches.len());
    for (i, (b, records)) in log.batches.iter().zip(decoded).enumerate() {
        let Some(records) = records else {
            out.push(b.clone());
            continue;
        };
        let total = records.len();
        let kept: Vec<Record> = records
            .into_iter()
            .filter(|r| !in_aborted_txn(b.header.producer_id, r.offset))
            .filter(|r| {
                r.key
                    .as_ref()
                    .is_some_and(|k| latest.get(k) == Some(&r.offset))
            })
            .filter(|r| !(remove_tombstones && r.value.is_none()))
            .collect();
        stats.records_removed += total - kept.len();
        if kept.len() == total {
            out.push(b.clone());
        } else if kept.is_empty() && !keep_empty.contains(&i) {
            stats.batches_removed += 1;
        } else {
            if kept.is_empty() {
                stats.empty_batches_kept += 1;
            }
            out.push(rewrite(b, &kept));
        }
    }
    log.batches = out;
    stats
}

/// Re-encodes a batch keeping `records`. They are a subset of the batch's
/// own records, decoded from it, so they fit; should encoding fail anyway,
/// the batch is kept whole, which only compacts less.
fn rewrite(original: &StoredBatch, records: &[Record]) -> StoredBatch {
    rewrite_batch(&original.header, records)
        .ok()
        .and_then(|bytes| {
            let header = BatchHeader::parse(&bytes).ok()?;
            Some(StoredBatch { header, bytes })
        })
        .unwrap_or_else(|| original.clone())
}

#[cfg(test)]
mod tests {
    use weir_protocol::records::{BatchBuilder, BatchOptions, RecordInput, decode_batches};

    use super::*;

    fn batch(records: &[(&str, Option<&str>)], pid: i64, seq: i32) -> (BatchHeader, Bytes) {
        let mut b = BatchBuilder::new(BatchOptions {
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: seq,
            ..Default::default()
        });
        for (i, (k, v)) in records.iter().enumerate() {
            b.push(RecordInput {
                timestamp: 100 + i as i64,
                key: Some(Bytes::from(k.to_string())),
                value: v.map(|v| Bytes::from(v.to_string())),
                headers: vec![],
            });
        }
        let bytes = b.build().unwrap();
        (BatchHeader::parse(&bytes).unwrap(), bytes)
    }

    fn contents(log: &PartitionLog) -> Vec<(i64, String, Option<String>)> {
        let mut all = Bytes::new().to_vec();
        for b in log.batches() {
            all.extend_from_slice(&b.bytes);
        }
        let decoded = decode_batches(&Bytes::from(all), &DecodeOptions::default()).unwrap();
        decoded
            .batches
            .iter()
            .flat_map(|b| &b.records)
            .map(|r| {
                let s = |b: &Bytes| String::from_utf8(b.to_vec()).unwrap();
                (
                    r.offset,
                    s(r.key.as_ref().unwrap()),
                    r.value.as_ref().map(s),
                )
            })
            .collect()
    }

    #[test]
    fn keeps_the_newest_value_per_key_and_valid_crcs() {
        let mut log = PartitionLog::new();
        log.append_produced(
            vec![batch(
                &[("a", Some("1")), ("b", Some("1")), ("a", Some("2"))],
                -1,
                -1,
            )],
            0,
        )
        .unwrap();
        log.append_produced(vec![batch(&[("b", None), ("c", Some("1"))], -1, -1)], 0)
            .unwrap();
        let stats = compact(&mut log, false);
        assert_eq!(stats.records_removed, 2);
        // decode_batches checks every CRC.
        assert_eq!(
            contents(&log),
            vec![
                (2, "a".into(), Some("2".into())),
                (3, "b".into(), None),
                (4, "c".into(), Some("1".into()))
            ]
        );
        assert_eq!(log.end_offset(), 5, "offsets never move");
        let stats = compact(&mut log, true);
        assert_eq!(stats.records_removed, 1, "the tombstone goes");
        assert_eq!(
            contents(&log),
            vec![
                (2, "a".into(), Some("2".into())),
                (4, "c".into(), Some("1".into()))
            ]
        );
    }

    #[test]
    fn an_emptied_batch_survives_only_as_its_producers_last() {
        let mut log = PartitionLog::new();
        log.append_produced(vec![batch(&[("a", Some("1"))], 7, 0)], 0)
            .unwrap(); // 0
        log.append_produced(vec![batch(&[("a", Some("2"))], 7, 1)], 0)
            .unwrap(); // 1
        log.append_produced(vec![batch(&[("a", Some("3"))], -1, -1)], 0)
            .unwrap(); // 2
        let stats = compact(&mut log, false);
        assert_eq!((stats.batches_removed, stats.empty_batches_kept), (1, 1));
        let headers: Vec<(i64, i32, i32)> = log
            .batches()
            .iter()
            .map(|b| {
                (
                    b.header.base_offset,
                    b.header.record_count,
                    b.header.base_sequence,
                )
            })
            .collect();
        assert_eq!(headers, vec![(1, 0, 1), (2, 1, -1)]);
        assert_eq!(contents(&log), vec![(2, "a".into(), Some("3".into()))]);
        // The producer's sequence state still continues after 1.
        let next = batch(&[("z", Some("z"))], 7, 2);
        assert!(log.append_produced(vec![next], 0).is_ok());
    }
}
