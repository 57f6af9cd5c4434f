//! Which fetched records the application may see.
//!
//! A pure function over one partition's decoded batches. Control batches
//! (transaction markers) are never delivered. Under read_committed, a
//! transactional batch is skipped if its producer has an aborted
//! transaction that started at or before the batch, until that producer's
//! ABORT marker, as Kafka's `Fetcher` does. The broker lists the aborted
//! transactions overlapping the fetched range in the Fetch response.

use std::collections::HashSet;

use weir_protocol::records::{ControlKind, Record, RecordBatch};

use crate::config::consumer::IsolationLevel;

/// An aborted transaction as listed in a Fetch response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The producer that aborted.
    pub producer_id: i64,
    /// The offset of the transaction's first record.
    pub first_offset: i64,
}

/// The outcome of filtering one partition's fetched batches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deliverable {
    /// Records to hand to the application, in offset order.
    pub records: Vec<Record>,
    /// The offset to fetch from next: past every complete batch returned,
    /// delivered or not, so that markers and aborted data are not fetched
    /// again. `None` if no batch was complete.
    pub next_offset: Option<i64>,
}

/// Filters `batches`, fetched from `fetch_offset`, for `isolation`.
///
/// Records below `fetch_offset` are dropped: a broker returns whole
/// batches, so the first one may start before the requested offset.
pub fn deliverable(
    batches: Vec<RecordBatch>,
    fetch_offset: i64,
    isolation: IsolationLevel,
    aborted: &[AbortedTransaction],
) -> Deliverable {
    let mut records = Vec::new();
    let next_offset = deliverable_into(
        batches,
        fetch_offset,
        isolation,
        aborted,
        &mut records,
        |r| r,
    );
    Deliverable {
        records,
        next_offset,
    }
}

/// [`deliverable`], with each delivered record turned by `map` and pushed
/// onto `out` (the consumer builds its own records at once, without an
/// intermediate vector of decoded ones); returns
/// [`Deliverable::next_offset`].
///
/// ```
/// use bytes::Bytes;
/// use weir_client::config::consumer::IsolationLevel;
/// use weir_client::consumer::read_committed::deliverable_into;
/// use weir_protocol::records::*;
/// let mut b = BatchBuilder::new(BatchOptions { base_offset: 10, ..Default::default() });
/// for v in ["a", "b", "c"] {
///     b.push(RecordInput { timestamp: 0, value: Some(Bytes::from(v)), ..Default::default() });
/// }
/// let batches = decode_batches(&b.build()?, &DecodeOptions::default())?.batches;
/// let mut offsets = Vec::new();
/// let next = deliverable_into(batches, 11, IsolationLevel::ReadCommitted, &[], &mut offsets, |r| r.offset);
/// assert_eq!((offsets, next), (vec![11, 12], Some(13)));
/// # Ok::<(), weir_protocol::ProtocolError>(())
/// ```
pub fn deliverable_into<T>(
    batches: Vec<RecordBatch>,
    fetch_offset: i64,
    isolation: IsolationLevel,
    aborted: &[AbortedTransaction],
    out: &mut Vec<T>,
    mut map: impl FnMut(Record) -> T,
) -> Option<i64> {
    let mut pending: Vec<AbortedTransaction> = aborted.to_vec();
    // Consumed from the front in first-offset order.
    pending.sort_by_key(|t| std::cmp::Reverse(t.first_offset));
    let mut aborting: HashSet<i64> = HashSet::new();
    let mut next_offset: Option<i64> = None;
    out.reserve(batches.iter().map(|b| b.records.len()).sum());

    for batch in batches {
        let header = batch.header;
        let next = header.next_offset();
        next_offset = Some(next_offset.map_or(next, |n| n.max(next)));
        if next <= fetch_offset {
            continue;
        }
        if isolation == IsolationLevel::ReadCommitted {
            // Every aborted transaction that began by the end of this batch
            // now hides that producer's transactional batches.
            while let Some(t) = pending.last().copied() {
                if t.first_offset > header.last_offset() {
                    break;
                }
                aborting.insert(t.producer_id);
                pending.pop();
            }
        }
        if header.is_control() {
            if isolation == IsolationLevel::ReadCommitted
                && batch.control().map(|c| c.kind) == Some(ControlKind::Abort)
            {
                aborting.remove(&header.producer_id);
            }
            continue;
        }
        if isolation == IsolationLevel::ReadCommitted
            && header.is_transactional()
            && aborting.contains(&header.producer_id)
        {
            continue;
        }
        out.extend(
            batch
                .records
                .into_iter()
                .filter(|r| r.offset >= fetch_offset)
                .map(&mut map),
        );
    }
    next_offset
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use weir_protocol::records::{
        BatchBuilder, BatchOptions, DecodeOptions, RecordInput, decode_batches,
        encode_control_batch,
    };

    /// A data batch of `n` records at `base`, values "base+i".
    fn data(base: i64, n: i64, producer_id: i64, transactional: bool) -> Bytes {
        let mut b = BatchBuilder::new(BatchOptions {
            base_offset: base,
            producer_id,
            producer_epoch: 0,
            base_sequence: 0,
            transactional,
            ..Default::default()
        });
        for i in 0..n {
            b.push(RecordInput {
                timestamp: 1,
                key: None,
                value: Some(Bytes::from((base + i).to_string())),
                headers: vec![],
            });
        }
        b.build().unwrap()
    }

    fn marker(offset: i64, producer_id: i64, kind: ControlKind) -> Bytes {
        encode_control_batch(producer_id, 0, offset, 1, kind, 0)
    }

    fn decode(parts: &[Bytes]) -> Vec<RecordBatch> {
        let mut buf = BytesMut::new();
        for p in parts {
            buf.extend_from_slice(p);
        }
        decode_batches(&buf.freeze(), &DecodeOptions::default())
            .unwrap()
            .batches
    }

    fn offsets(d: &Deliverable) -> Vec<i64> {
        d.records.iter().map(|r| r.offset).collect()
    }

    /// Producer 1 aborts offsets 0..2 (marker at 2); producer 2 commits
    /// 3..5 (marker at 5); a non-transactional batch follows at 6.
    fn log() -> Vec<RecordBatch> {
        decode(&[
            data(0, 2, 1, true),
            marker(2, 1, ControlKind::Abort),
            data(3, 2, 2, true),
            marker(5, 2, ControlKind::Commit),
            data(6, 1, -1, false),
        ])
    }

    #[test]
    fn read_committed_skips_aborted_batches_and_all_markers() {
        let aborted = [AbortedTransaction {
            producer_id: 1,
            first_offset: 0,
        }];
        let d = deliverable(log(), 0, IsolationLevel::ReadCommitted, &aborted);
        assert_eq!(offsets(&d), vec![3, 4, 6]);
        assert_eq!(d.next_offset, Some(7));
    }

    #[test]
    fn read_uncommitted_delivers_aborted_data_but_never_markers() {
        let aborted = [AbortedTransaction {
            producer_id: 1,
            first_offset: 0,
        }];
        let d = deliverable(log(), 0, IsolationLevel::ReadUncommitted, &aborted);
        assert_eq!(offsets(&d), vec![0, 1, 3, 4, 6]);
        assert_eq!(d.next_offset, Some(7));
    }

    #[test]
    fn an_abort_marker_ends_the_hiding_for_that_producer_only() {
        // Producer 1 aborts at 0..1, then commits a later transaction at 3;
        // producer 2's interleaved transaction at 2 is aborted too.
        let batches = decode(&[
            data(0, 1, 1, true),
            marker(1, 1, ControlKind::Abort),
            data(2, 1, 2, true),
            data(3, 1, 1, true),
            marker(4, 2, ControlKind::Abort),
            marker(5, 1, ControlKind::Commit),
        ]);
        let aborted = [
            AbortedTransaction {
                producer_id: 2,
                first_offset: 2,
            },
            AbortedTransaction {
                producer_id: 1,
                first_offset: 0,
            },
        ];
        let d = deliverable(batches, 0, IsolationLevel::ReadCommitted, &aborted);
        assert_eq!(offsets(&d), vec![3]);
        assert_eq!(d.next_offset, Some(6));
    }

    #[test]
    fn without_an_aborted_list_transactional_data_is_delivered() {
        // What a broker that never lists aborted transactions (tansu 0.6)
        // makes a correct client do: nothing tells it to skip.
        let d = deliverable(log(), 0, IsolationLevel::ReadCommitted, &[]);
        assert_eq!(offsets(&d), vec![0, 1, 3, 4, 6]);
    }

    #[test]
    fn records_before_the_fetch_offset_are_dropped_and_markers_advance() {
        let d = deliverable(log(), 4, IsolationLevel::ReadUncommitted, &[]);
        assert_eq!(offsets(&d), vec![4, 6]);
        // A fetch that returned only a marker still moves the position.
        let only_marker = decode(&[marker(9, 3, ControlKind::Commit)]);
        let d = deliverable(only_marker, 9, IsolationLevel::ReadCommitted, &[]);
        assert!(d.records.is_empty());
        assert_eq!(d.next_offset, Some(10));
        assert_eq!(
            deliverable(vec![], 0, IsolationLevel::ReadCommitted, &[]).next_offset,
            None
        );
    }
}
