//! K-way merge of sorted runs (in memory or in spill files), newest write per
//! key wins, and the final write of an empty-store restore: one fjall
//! ingestion per range of buckets, on several threads.
//!
//! Buckets (see `partition`) are disjoint key ranges, so each ingestion
//! covers a disjoint key range and the store ends up as disjoint sorted runs
//! that fjall never has to compact (its leveled strategy moves disjoint
//! level-0 runs down without rewriting them).

use std::cmp::Ordering;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::time::Instant;

use crate::error::{Result, StoreError};
use crate::partition::{Generation, emit_live, sort_blocks};
use crate::restore::WriteProgress;
use crate::sorted_run::{Decoded, RecordLayout, decode_record, key_prefix, record_parts};
use crate::spill::SpilledGeneration;

/// How many bytes a file cursor reads at a time.
const READ_CHUNK: usize = 64 << 10;

/// Sorted, encoded records: in memory, or a byte range of a spill file.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Segment<'a> {
    Memory(&'a [u8]),
    File {
        path: &'a Path,
        start: u64,
        len: u64,
    },
}

enum CursorBytes<'a> {
    Memory(&'a [u8]),
    File {
        file: File,
        path: PathBuf,
        buf: Vec<u8>,
        /// Bytes of the run not read into `buf` yet.
        left: u64,
    },
}

/// Reads one segment's records.
struct Cursor<'a> {
    bytes: CursorBytes<'a>,
    pos: usize,
    /// Higher is newer: it wins over older runs for the same key.
    rank: usize,
    head: Option<(u128, RecordLayout)>,
}

impl<'a> Cursor<'a> {
    fn open(segment: &Segment<'a>, rank: usize) -> Result<Self> {
        let bytes = match *segment {
            Segment::Memory(bytes) => CursorBytes::Memory(bytes),
            Segment::File { path, start, len } => {
                let mut file = File::open(path).map_err(|e| StoreError::io(path, e))?;
                file.seek(SeekFrom::Start(start))
                    .map_err(|e| StoreError::io(path, e))?;
                CursorBytes::File {
                    file,
                    path: path.to_path_buf(),
                    buf: Vec::with_capacity(
                        READ_CHUNK.min(usize::try_from(len).unwrap_or(READ_CHUNK)),
                    ),
                    left: len,
                }
            }
        };
        let mut cursor = Self {
            bytes,
            pos: 0,
            rank,
            head: None,
        };
        cursor.load_head()?;
        Ok(cursor)
    }

    fn window(&self) -> &[u8] {
        let all = match &self.bytes {
            CursorBytes::Memory(data) => data,
            CursorBytes::File { buf, .. } => buf.as_slice(),
        };
        all.get(self.pos..).unwrap_or_default()
    }

    fn key(&self) -> &[u8] {
        self.head
            .map_or(&[][..], |(_, layout)| record_parts(self.window(), layout).0)
    }

    fn value(&self) -> Option<&[u8]> {
        let (_, layout) = self.head?;
        record_parts(self.window(), layout).1
    }

    fn advance(&mut self) -> Result<()> {
        if let Some((_, layout)) = self.head.take() {
            self.pos += layout.len();
            self.load_head()?;
        }
        Ok(())
    }

    fn load_head(&mut self) -> Result<()> {
        loop {
            match decode_record(self.window()) {
                Decoded::Record(layout) => {
                    let (key, _) = record_parts(self.window(), layout);
                    self.head = Some((key_prefix(key), layout));
                    return Ok(());
                }
                Decoded::NeedMore(n) => {
                    if !self.refill(n)? {
                        if self.window().is_empty() {
                            self.head = None;
                            return Ok(());
                        }
                        return Err(self.corrupt("run ends inside a record"));
                    }
                }
                Decoded::Corrupt(reason) => return Err(self.corrupt(reason)),
            }
        }
    }

    /// Makes at least `need` bytes available from `pos` if the file has them.
    fn refill(&mut self, need: usize) -> Result<bool> {
        let pos = self.pos;
        let CursorBytes::File {
            file,
            path,
            buf,
            left,
        } = &mut self.bytes
        else {
            return Ok(false);
        };
        if *left == 0 {
            return Ok(false);
        }
        buf.drain(..pos.min(buf.len()));
        self.pos = 0;
        let want = need.max(READ_CHUNK).saturating_sub(buf.len());
        let take = usize::try_from(*left)
            .unwrap_or(usize::MAX)
            .min(want.max(1));
        let old = buf.len();
        buf.resize(old + take, 0);
        file.read_exact(&mut buf[old..])
            .map_err(|e| StoreError::io(path.as_path(), e))?;
        *left -= take as u64;
        Ok(true)
    }

    fn corrupt(&self, reason: &str) -> StoreError {
        let path = match &self.bytes {
            CursorBytes::File { path, .. } => path.clone(),
            CursorBytes::Memory(_) => PathBuf::from("<memory>"),
        };
        StoreError::corrupt(&path, format!("restore run: {reason}"))
    }

    fn order(&self, other: &Self) -> Ordering {
        let (a, b) = (self.head.map_or(0, |h| h.0), other.head.map_or(0, |h| h.0));
        a.cmp(&b)
            .then_with(|| self.key().cmp(other.key()))
            .then(other.rank.cmp(&self.rank))
    }
}

/// A binary min-heap of cursor indices, ordered by head key, newest run first.
struct CursorHeap {
    heap: Vec<usize>,
}

impl CursorHeap {
    fn new(cursors: &[Cursor<'_>]) -> Self {
        let mut heap = Self {
            heap: (0..cursors.len())
                .filter(|&i| cursors[i].head.is_some())
                .collect(),
        };
        for i in (0..heap.heap.len() / 2).rev() {
            heap.sift_down(i, cursors);
        }
        heap
    }

    fn top(&self) -> Option<usize> {
        self.heap.first().copied()
    }

    /// Re-establishes order after the top cursor advanced, dropping it if it ended.
    fn fix_top(&mut self, cursors: &[Cursor<'_>]) {
        let Some(&top) = self.heap.first() else {
            return;
        };
        if cursors[top].head.is_none() {
            self.heap.swap_remove(0);
        }
        self.sift_down(0, cursors);
    }

    fn pop_top(&mut self, cursors: &[Cursor<'_>]) {
        if !self.heap.is_empty() {
            self.heap.swap_remove(0);
            self.sift_down(0, cursors);
        }
    }

    fn push(&mut self, cursor: usize, cursors: &[Cursor<'_>]) {
        self.heap.push(cursor);
        let mut i = self.heap.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if cursors[self.heap[i]].order(&cursors[self.heap[parent]]) != Ordering::Less {
                return;
            }
            self.heap.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize, cursors: &[Cursor<'_>]) {
        let less = |a: usize, b: usize| cursors[a].order(&cursors[b]) == Ordering::Less;
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut smallest = i;
            if l < self.heap.len() && less(self.heap[l], self.heap[smallest]) {
                smallest = l;
            }
            if r < self.heap.len() && less(self.heap[r], self.heap[smallest]) {
                smallest = r;
            }
            if smallest == i {
                return;
            }
            self.heap.swap(i, smallest);
            i = smallest;
        }
    }
}

/// Merges `segments` (oldest first), handing each key's newest record to
/// `emit` in ascending key order. Tombstones are passed on unless
/// `drop_tombstones` (when nothing older than these segments exists).
/// Returns the number of records emitted.
pub(crate) fn merge_segments(
    segments: &[Segment<'_>],
    drop_tombstones: bool,
    mut emit: impl FnMut(&[u8], Option<&[u8]>) -> Result<()>,
) -> Result<u64> {
    let mut cursors = segments
        .iter()
        .enumerate()
        .map(|(rank, segment)| Cursor::open(segment, rank))
        .collect::<Result<Vec<_>>>()?;
    let mut heap = CursorHeap::new(&cursors);
    let mut emitted = 0u64;
    while let Some(top) = heap.top() {
        let value = cursors[top].value();
        if value.is_some() || !drop_tombstones {
            emit(cursors[top].key(), value)?;
            emitted += 1;
        }
        // Older writes of the same key are shadowed: skip them before the
        // winner moves on (its key bytes may be overwritten by a refill).
        heap.pop_top(&cursors);
        while let Some(next) = heap.top() {
            if cursors[next].head.map(|h| h.0) != cursors[top].head.map(|h| h.0)
                || cursors[next].key() != cursors[top].key()
            {
                break;
            }
            cursors[next].advance()?;
            heap.fix_top(&cursors);
        }
        cursors[top].advance()?;
        if cursors[top].head.is_some() {
            heap.push(top, &cursors);
        }
    }
    Ok(emitted)
}

/// Splits buckets `0..sizes.len()` into up to `parts` consecutive ranges of
/// about equal bytes, none empty.
pub(crate) fn bucket_ranges(sizes: &[u64], parts: usize) -> Vec<Range<usize>> {
    let total: u64 = sizes.iter().sum();
    let parts = parts.max(1) as u64;
    let mut ranges = Vec::new();
    let mut start = 0;
    let mut seen = 0u64;
    for (i, size) in sizes.iter().enumerate() {
        seen += size;
        let part = ranges.len() as u64 + 1;
        if part < parts && seen * parts >= total * part && i + 1 < sizes.len() {
            ranges.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < sizes.len() {
        ranges.push(start..sizes.len());
    }
    ranges
}

/// Writes the restore's records into `keyspace`: the spilled generations
/// (oldest first) and the one still in memory (newest), bucket by bucket, as
/// one fjall ingestion per range of buckets, on `threads` cores (the caller's
/// thread among the writers). A bucket whose writes over all generations
/// take at most `read_bucket_bytes` is read into memory and sorted there;
/// a larger one is merged from the files. After each bucket, `report` is
/// told how far the writing got (one call at a time, in order). Returns the
/// records written.
pub(crate) fn ingest_generations(
    spilled: &[&SpilledGeneration],
    memory: &Generation,
    keyspace: &fjall::Keyspace,
    threads: usize,
    read_bucket_bytes: u64,
    db_path: &Path,
    report: &mut (dyn FnMut(WriteProgress) + Send),
) -> Result<u64> {
    let buckets = memory.buckets();
    let sizes: Vec<u64> = (0..buckets)
        .map(|b| {
            memory.bucket_bytes(b) as u64 + spilled.iter().map(|g| g.bucket_len(b)).sum::<u64>()
        })
        .collect();
    let total: u64 = sizes.iter().sum();
    // Bytes of the buckets written so far, and where they are reported:
    // under one lock, so reports come in order, one at a time.
    let done = Mutex::new((0u64, report));
    let bucket_done = |bytes: u64| {
        let mut done = done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (written, report) = &mut *done;
        *written += bytes;
        report(WriteProgress {
            bytes_done: *written,
            bytes_total: total,
        });
    };
    let threads = threads.max(1);
    // Each range ends in a fjall ingestion `finish` that writes the filter
    // and index and fsyncs the table. Four ranges per thread keep the last
    // fsync, which nothing overlaps, short. Below a MiB a second range costs
    // more than it saves.
    let parts = if total < (1 << 20) { 1 } else { 4 * threads };
    let ranges = bucket_ranges(&sizes, parts);
    let engine =
        |action: &'static str| move |e: fjall::Error| StoreError::engine(db_path, action, e);
    let ingest = |range: &Range<usize>| -> Result<u64> {
        let started = Instant::now();
        let mut ingestion = keyspace
            .start_ingestion()
            .map_err(engine("starting ingestion"))?;
        let mut index = Vec::new();
        let mut sorted = Vec::new();
        let mut written = 0;
        let mut write = |key: &[u8], value: fjall::Slice| {
            ingestion
                .write(key, value)
                .map_err(engine("ingesting restored records"))
        };
        // The spilled files, opened once per range, and one buffer for a
        // bucket of all of them: it never holds more than
        // `read_bucket_bytes` (a buffer per file would each keep the largest
        // share it ever held, and together far more).
        let mut files = spilled
            .iter()
            .map(|g| File::open(g.path()).map_err(|e| StoreError::io(g.path(), e)))
            .collect::<Result<Vec<_>>>()?;
        let mut read = Vec::new();
        let mut parts = Vec::with_capacity(files.len());
        for bucket in range.clone() {
            let bytes = sizes.get(bucket).copied().unwrap_or(0);
            // (Positions within a block are 32-bit: a larger bucket is merged.)
            if spilled.is_empty() || bytes <= read_bucket_bytes.min(u64::from(u32::MAX)) {
                // Every write of the bucket, oldest first: the spilled files
                // in order, then the generation in memory. Nothing older
                // exists and the store was empty, so tombstones are dropped.
                read.clear();
                parts.clear();
                for (file, generation) in files.iter_mut().zip(spilled) {
                    parts.push(generation.read_bucket(bucket, file, &mut read)?);
                }
                let mut blocks: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
                blocks.extend(
                    parts
                        .iter()
                        .map(|r| read.get(r.clone()).unwrap_or_default()),
                );
                blocks.extend(memory.blocks(bucket));
                sort_blocks(
                    &blocks,
                    memory.shared_prefix(bucket),
                    !spilled.is_empty(),
                    &mut index,
                );
                written += emit_live(&blocks, &index, &mut write)?;
                bucket_done(bytes);
                continue;
            }
            // A bucket too large to hold at once is merged from the files.
            sorted.clear();
            memory.sort_bucket(bucket, false, &mut index, |record| {
                sorted.extend_from_slice(record);
                Ok::<(), StoreError>(())
            })?;
            let mut segments: Vec<Segment<'_>> =
                spilled.iter().filter_map(|g| g.segment(bucket)).collect();
            segments.push(Segment::Memory(&sorted));
            written += merge_segments(&segments, true, |key, value| match value {
                Some(v) => write(key, fjall::Slice::from(v)),
                None => Ok(()),
            })?;
            bucket_done(bytes);
        }
        let wrote = started.elapsed();
        ingestion.finish().map_err(engine("finishing ingestion"))?;
        crate::failpoints::check(crate::failpoints::points::INGESTED_RANGE, db_path)?;
        tracing::debug!(
            written,
            buckets = range.len(),
            write_ms = wrote.as_millis(),
            finish_ms = (started.elapsed() - wrote).as_millis(),
            "ingested one key range"
        );
        Ok(written)
    };
    // Threads take the next range as they become free.
    let next = AtomicUsize::new(0);
    let work = || -> Result<u64> {
        let mut written = 0;
        while let Some(range) = ranges.get(next.fetch_add(1, AtomicOrdering::Relaxed)) {
            written += ingest(range)?;
        }
        Ok(written)
    };
    // One writer more than `threads`: while one waits for its fsync, the
    // others keep the cores busy.
    let writers = (threads + 1).min(ranges.len()).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (1..writers).map(|_| scope.spawn(work)).collect();
        let mut written = work()?;
        for handle in handles {
            written += handle.join().map_err(|_| StoreError::RestoreWorker {
                store: db_path.display().to_string(),
                reason: "merge thread panicked".into(),
            })??;
        }
        Ok(written)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::sorted_run::encode_record;

    type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

    fn encoded(model: &Model) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in model {
            encode_record(&mut out, k, v.as_deref());
        }
        out
    }

    #[test]
    fn newest_segment_wins_and_tombstones_are_kept_or_dropped() {
        let mut runs = Vec::new();
        let mut model = Model::new();
        for run in 0..3u32 {
            let mut part = Model::new();
            for i in 0..500u32 {
                let k = (i * 7 + run * 100) % 1_000;
                let value = (i % 5 != 0).then(|| format!("{run}:{i}").into_bytes());
                part.insert(format!("k{k:04}").into_bytes(), value);
            }
            model.extend(part.clone());
            runs.push(encoded(&part));
        }
        let segments: Vec<Segment<'_>> = runs.iter().map(|r| Segment::Memory(r)).collect();
        for drop in [false, true] {
            let mut out = Model::new();
            let mut last: Option<Vec<u8>> = None;
            merge_segments(&segments, drop, |k, v| {
                assert!(last.as_deref() < Some(k), "keys not strictly ascending");
                last = Some(k.to_vec());
                out.insert(k.to_vec(), v.map(<[u8]>::to_vec));
                Ok(())
            })
            .unwrap();
            let expected: Model = model
                .iter()
                .filter(|(_, v)| !drop || v.is_some())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(out, expected);
        }
    }

    #[test]
    fn bucket_ranges_cover_every_bucket_once_in_balanced_parts() {
        let sizes = [5u64, 0, 7, 1, 1, 9, 3, 0, 4, 2];
        for parts in 1..=12 {
            let ranges = bucket_ranges(&sizes, parts);
            assert!(ranges.len() <= parts.max(1));
            assert!(ranges.iter().all(|r| !r.is_empty()));
            let flat: Vec<usize> = ranges.iter().flat_map(Clone::clone).collect();
            assert_eq!(flat, (0..sizes.len()).collect::<Vec<_>>());
        }
        assert_eq!(bucket_ranges(&sizes, 2), vec![0..6, 6..10]);
        assert_eq!(bucket_ranges(&[], 4), Vec::<Range<usize>>::new());
    }
}
