//! Partition logs: produced batches stored as the bytes the producer sent.
//!
//! A batch is appended by rewriting its base offset and partition leader
//! epoch in place; neither is covered by the CRC, so nothing is re-encoded
//! and a consumer receives exactly the bytes the producer wrote. Besides the
//! batches, a log keeps what Kafka keeps next to its segments: the producer
//! state for idempotence ([`producers`]), the first offset of every open
//! transaction (which gives the last stable offset) and the index of aborted
//! transactions that Fetch reports to read_committed consumers
//! ([`transactions`]).

pub mod compaction;
pub mod producers;
pub mod transactions;

use bytes::{Bytes, BytesMut};
use weir_protocol::records::{
    BatchHeader, ControlKind, DecodeOptions, decode_batch, encode_control_batch, set_base_offset,
    set_partition_leader_epoch,
};

use producers::{ProducerStates, SequenceCheck};
use transactions::{AbortedTxn, TxnIndex};

/// One stored batch.
#[derive(Debug, Clone)]
pub struct StoredBatch {
    /// The header as stored (base offset and leader epoch already rewritten).
    pub header: BatchHeader,
    /// The whole batch, header included.
    pub bytes: Bytes,
}

/// Why a produced batch was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendError {
    /// The epoch is older than the producer's current one.
    StaleEpoch,
    /// A gap or rewind in the producer's sequence numbers.
    OutOfOrderSequence,
    /// A control batch sent by a client; only the coordinator writes markers.
    ControlBatchFromClient,
}

/// The result of a successful append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Offset of the first record appended (or of the original, for a duplicate).
    pub base_offset: i64,
    /// Whether the request was a retry of batches already in the log.
    pub duplicate: bool,
}

/// What a read returned.
#[derive(Debug, Clone, Default)]
pub struct ReadResult {
    /// Whole batches, concatenated.
    pub records: Bytes,
    /// The offset after the last batch returned (the fetch offset if none).
    pub next_offset: i64,
}

/// One partition's log.
#[derive(Debug, Clone, Default)]
pub struct PartitionLog {
    batches: Vec<StoredBatch>,
    log_start_offset: i64,
    /// Log end offset. With one replica per partition this is also the high
    /// watermark: an acknowledged write is immediately committed.
    end_offset: i64,
    producers: ProducerStates,
    txns: TxnIndex,
}

impl PartitionLog {
    /// An empty log starting at offset 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// The offset the next batch gets.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    /// The high watermark (equal to the end offset: there are no followers).
    pub fn high_watermark(&self) -> i64 {
        self.end_offset
    }

    /// The last stable offset: the first offset of the oldest open
    /// transaction, or the high watermark when none is open.
    pub fn last_stable_offset(&self) -> i64 {
        self.txns
            .first_open_offset()
            .unwrap_or(self.end_offset)
            .min(self.end_offset)
    }

    /// The stored batches, in offset order.
    pub fn batches(&self) -> &[StoredBatch] {
        &self.batches
    }

    /// The idempotent producer state.
    pub fn producers(&self) -> &ProducerStates {
        &self.producers
    }

    /// The transaction index (open transactions, aborted ones).
    pub fn transactions(&self) -> &TxnIndex {
        &self.txns
    }

    /// Appends the batches of one Produce request for this partition.
    ///
    /// All batches are checked first, so either all are appended or none.
    /// A request whose first batch is a retry is acknowledged with the
    /// original offset and appends nothing.
    ///
    /// # Errors
    /// [`AppendError`] for a stale epoch, a sequence gap or a control batch.
    pub fn append_produced(
        &mut self,
        batches: Vec<(BatchHeader, Bytes)>,
        leader_epoch: i32,
    ) -> Result<Appended, AppendError> {
        // Check against a scratch copy so that several batches of one
        // producer in one request are checked against each other too.
        let mut scratch = self.producers.clone();
        let mut next = self.end_offset;
        for (i, (h, _)) in batches.iter().enumerate() {
            if h.is_control() {
                return Err(AppendError::ControlBatchFromClient);
            }
            match scratch.check(h) {
                SequenceCheck::Append => {}
                SequenceCheck::Duplicate(meta) if i == 0 => {
                    return Ok(Appended {
                        base_offset: meta.first_offset,
                        duplicate: true,
                    });
                }
                SequenceCheck::Duplicate(_) | SequenceCheck::OutOfOrder { .. } => {
                    return Err(AppendError::OutOfOrderSequence);
                }
                SequenceCheck::StaleEpoch { .. } => return Err(AppendError::StaleEpoch),
            }
            let mut placed = *h;
            placed.base_offset = next;
            scratch.record_append(&placed);
            next = placed.next_offset();
        }
        let base_offset = self.end_offset;
        for (h, bytes) in batches {
            let mut owned = BytesMut::from(&bytes[..]);
            set_base_offset(&mut owned, self.end_offset);
            set_partition_leader_epoch(&mut owned, leader_epoch);
            let mut header = h;
            header.base_offset = self.end_offset;
            header.partition_leader_epoch = leader_epoch;
            if header.is_transactional() {
                self.txns.begin(header.producer_id, header.base_offset);
            }
            self.end_offset = header.next_offset();
            self.batches.push(StoredBatch {
                header,
                bytes: owned.freeze(),
            });
        }
        self.producers = scratch;
        Ok(Appended {
            base_offset,
            duplicate: false,
        })
    }

    /// Appends a COMMIT or ABORT marker for a producer's transaction and
    /// closes the transaction: the last stable offset moves past it, and an
    /// abort is entered in the aborted-transactions index.
    ///
    /// # Errors
    /// [`AppendError::StaleEpoch`] if the marker's epoch is older than the
    /// producer's current epoch on this partition.
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        kind: ControlKind,
        coordinator_epoch: i32,
        leader_epoch: i32,
        timestamp_ms: i64,
    ) -> Result<i64, AppendError> {
        if let Some(entry) = self.producers.get(producer_id)
            && producer_epoch < entry.epoch
        {
            return Err(AppendError::StaleEpoch);
        }
        let offset = self.end_offset;
        let batch = encode_control_batch(
            producer_id,
            producer_epoch,
            offset,
            timestamp_ms,
            kind,
            coordinator_epoch,
        );
        let mut owned = BytesMut::from(&batch[..]);
        set_partition_leader_epoch(&mut owned, leader_epoch);
        let bytes = owned.freeze();
        let header = match BatchHeader::parse(&bytes) {
            Ok(h) => h,
            // Our own encoder produced it; a failure here is a bug in the
            // protocol crate, reported rather than hidden.
            Err(_) => return Err(AppendError::ControlBatchFromClient),
        };
        self.producers.record_marker(producer_id, producer_epoch);
        self.txns
            .end(producer_id, offset, kind == ControlKind::Abort);
        self.end_offset = header.next_offset();
        self.batches.push(StoredBatch { header, bytes });
        Ok(offset)
    }

    /// The index of the first batch whose last offset is at least `offset`.
    fn batch_index_at(&self, offset: i64) -> usize {
        self.batches
            .partition_point(|b| b.header.last_offset() < offset)
    }

    /// Whole batches from the one holding `from`, below `upper` (the high
    /// watermark or the last stable offset), up to `max_bytes`, but at least
    /// one batch if `at_least_one` (KIP-74: a batch larger than the limit is
    /// still returned whole, so a consumer can never get stuck).
    pub fn read(&self, from: i64, upper: i64, max_bytes: usize, at_least_one: bool) -> ReadResult {
        let mut out = BytesMut::new();
        let mut next_offset = from;
        for b in self
            .batches
            .get(self.batch_index_at(from)..)
            .unwrap_or_default()
        {
            if b.header.next_offset() > upper {
                break;
            }
            let fits = out.len() + b.bytes.len() <= max_bytes;
            if !(fits || (at_least_one && out.is_empty())) {
                break;
            }
            out.extend_from_slice(&b.bytes);
            next_offset = b.header.next_offset();
        }
        ReadResult {
            records: out.freeze(),
            next_offset,
        }
    }

    /// Aborted transactions overlapping `[from, to)`, for a read_committed Fetch.
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.txns.aborted_overlapping(from, to)
    }

    /// Moves the log start offset forward (DeleteRecords), dropping whole
    /// batches below it. Returns the new log start offset.
    pub fn delete_before(&mut self, offset: i64) -> i64 {
        if offset > self.log_start_offset {
            self.log_start_offset = offset.min(self.end_offset);
            let keep = self.batch_index_at(self.log_start_offset);
            self.batches.drain(..keep);
            self.txns.drop_aborted_before(self.log_start_offset);
        }
        self.log_start_offset
    }

    /// The offset and timestamp of the first record whose timestamp is at
    /// least `timestamp`, as ListOffsets answers a lookup by time.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Option<(i64, i64)> {
        let opts = DecodeOptions {
            verify_crc: false,
            ..DecodeOptions::default()
        };
        for b in self
            .batches
            .iter()
            .filter(|b| b.header.max_timestamp >= timestamp)
        {
            if b.header.is_control() {
                continue;
            }
            let Ok(batch) = decode_batch(&b.bytes, &opts) else {
                continue;
            };
            if let Some(r) = batch
                .records
                .iter()
                .find(|r| r.timestamp >= timestamp && r.offset >= self.log_start_offset)
            {
                return Some((r.offset, r.timestamp));
            }
        }
        None
    }

    /// The offset and timestamp of the record with the largest timestamp
    /// (the first such record if several share it), for MAX_TIMESTAMP.
    pub fn max_timestamp_offset(&self) -> Option<(i64, i64)> {
        let opts = DecodeOptions {
            verify_crc: false,
            ..DecodeOptions::default()
        };
        let best = self
            .batches
            .iter()
            .filter(|b| !b.header.is_control() && b.header.record_count > 0)
            .fold(None::<&StoredBatch>, |best, b| match best {
                Some(x) if x.header.max_timestamp >= b.header.max_timestamp => Some(x),
                _ => Some(b),
            })?;
        let batch = decode_batch(&best.bytes, &opts).ok()?;
        batch
            .records
            .iter()
            .find(|r| r.timestamp == best.header.max_timestamp)
            .map(|r| (r.offset, r.timestamp))
    }
}
