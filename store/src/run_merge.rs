//! K-way merge of sorted runs (in memory or spilled to files), newest write
//! per key wins, split into key ranges that are merged on separate threads.
//!
//! This is how an empty store is restored: every run of the changelog is
//! sorted on its own, and one merge at the end writes each key once. Each key
//! range becomes one fjall ingestion, and the ranges do not overlap, so the
//! store ends up as disjoint sorted runs that fjall never has to compact (its
//! leveled strategy moves disjoint level-0 runs down without rewriting them).

use std::cmp::Ordering;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::time::Instant;

use crate::error::{Result, StoreError};
use crate::sorted_run::{Decoded, HEADER_LEN, RecordLayout, Sample, decode_record, key_prefix};

/// How many bytes a file cursor reads at a time.
const READ_CHUNK: usize = 64 << 10;

/// Where a sorted run's encoded records are.
#[derive(Debug, Clone)]
pub(crate) enum RunBytes {
    Memory(Arc<Vec<u8>>),
    File { path: PathBuf, len: u64 },
}

/// A sorted run ready to be merged.
#[derive(Debug, Clone)]
pub(crate) struct RunSource {
    pub(crate) bytes: RunBytes,
    pub(crate) samples: Vec<Sample>,
    pub(crate) records: u64,
}

/// A half-open key range `[from, to)`; `None` is unbounded.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyRange {
    pub(crate) from: Option<Vec<u8>>,
    pub(crate) to: Option<Vec<u8>>,
}

impl KeyRange {
    /// Splits the key space into up to `parts` ranges holding about as many
    /// records each, judged by the runs' key samples.
    pub(crate) fn split(runs: &[RunSource], parts: usize) -> Vec<KeyRange> {
        let mut keys: Vec<&[u8]> = runs
            .iter()
            .flat_map(|r| r.samples.iter().map(|s| s.key.as_slice()))
            .collect();
        keys.sort_unstable();
        let first = keys.first().copied();
        // Every bound is a sampled key above the smallest, so no range is empty.
        let mut bounds: Vec<&[u8]> = (1..parts.max(1))
            .filter_map(|i| keys.get(i * keys.len() / parts).copied())
            .filter(|b| Some(*b) > first)
            .collect();
        bounds.dedup();
        let mut ranges = Vec::with_capacity(bounds.len() + 1);
        let mut from = None;
        for b in bounds {
            ranges.push(KeyRange {
                from: from.take(),
                to: Some(b.to_vec()),
            });
            from = Some(b.to_vec());
        }
        ranges.push(KeyRange { from, to: None });
        ranges
    }

    fn below_start(&self, key: &[u8]) -> bool {
        self.from.as_deref().is_some_and(|from| key < from)
    }

    fn past_end(&self, key: &[u8]) -> bool {
        self.to.as_deref().is_some_and(|to| key >= to)
    }
}

enum CursorBytes {
    Memory(Arc<Vec<u8>>),
    File {
        file: File,
        path: PathBuf,
        buf: Vec<u8>,
        /// Bytes of the run not read into `buf` yet.
        left: u64,
    },
}

/// Reads one run's records from a start offset, within one key range.
struct Cursor {
    bytes: CursorBytes,
    pos: usize,
    /// Higher is newer: it wins over older runs for the same key.
    rank: usize,
    head: Option<(u128, RecordLayout)>,
}

impl Cursor {
    fn open(source: &RunSource, rank: usize, range: &KeyRange) -> Result<Self> {
        // The last sample below the range start is a record boundary at or
        // before the first record in range.
        let start = range.from.as_deref().map_or(0, |from| {
            let i = source.samples.partition_point(|s| s.key.as_slice() < from);
            i.checked_sub(1)
                .and_then(|i| source.samples.get(i))
                .map_or(0, |s| s.offset)
        });
        let bytes = match &source.bytes {
            RunBytes::Memory(data) => CursorBytes::Memory(Arc::clone(data)),
            RunBytes::File { path, len } => {
                let mut file = File::open(path).map_err(|e| StoreError::io(path, e))?;
                file.seek(SeekFrom::Start(start))
                    .map_err(|e| StoreError::io(path, e))?;
                CursorBytes::File {
                    file,
                    path: path.clone(),
                    buf: Vec::with_capacity(READ_CHUNK),
                    left: len.saturating_sub(start),
                }
            }
        };
        let pos = match bytes {
            CursorBytes::Memory(_) => usize::try_from(start).unwrap_or(usize::MAX),
            CursorBytes::File { .. } => 0,
        };
        let mut cursor = Self {
            bytes,
            pos,
            rank,
            head: None,
        };
        cursor.load_head()?;
        while cursor.head.is_some() && range.below_start(cursor.key()) {
            cursor.advance()?;
        }
        if cursor.head.is_some() && range.past_end(cursor.key()) {
            cursor.head = None;
        }
        Ok(cursor)
    }

    fn window(&self) -> &[u8] {
        let all = match &self.bytes {
            CursorBytes::Memory(data) => data.as_slice(),
            CursorBytes::File { buf, .. } => buf.as_slice(),
        };
        all.get(self.pos..).unwrap_or_default()
    }

    fn key(&self) -> &[u8] {
        let len = self.head.map_or(0, |(_, l)| l.key_len);
        self.window()
            .get(HEADER_LEN..HEADER_LEN + len)
            .unwrap_or_default()
    }

    fn value(&self) -> Option<&[u8]> {
        let (_, layout) = self.head?;
        let start = HEADER_LEN + layout.key_len;
        let len = layout.value_len?;
        self.window().get(start..start + len)
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
                    let key = self
                        .window()
                        .get(HEADER_LEN..HEADER_LEN + layout.key_len)
                        .unwrap_or_default();
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
    fn new(cursors: &[Cursor]) -> Self {
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
    fn fix_top(&mut self, cursors: &[Cursor]) {
        let Some(&top) = self.heap.first() else {
            return;
        };
        if cursors[top].head.is_none() {
            self.heap.swap_remove(0);
        }
        self.sift_down(0, cursors);
    }

    fn pop_top(&mut self, cursors: &[Cursor]) {
        if !self.heap.is_empty() {
            self.heap.swap_remove(0);
            self.sift_down(0, cursors);
        }
    }

    fn push(&mut self, cursor: usize, cursors: &[Cursor]) {
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

    fn sift_down(&mut self, mut i: usize, cursors: &[Cursor]) {
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

/// Merges `runs` (oldest first) within `range`, handing each key's newest
/// record to `emit` in ascending key order. Tombstones are passed on unless
/// `drop_tombstones` (when nothing older than these runs exists). Returns the
/// number of records emitted.
pub(crate) fn merge_runs(
    runs: &[RunSource],
    range: &KeyRange,
    drop_tombstones: bool,
    mut emit: impl FnMut(&[u8], Option<&[u8]>) -> Result<()>,
) -> Result<u64> {
    let mut cursors = runs
        .iter()
        .enumerate()
        .map(|(rank, run)| Cursor::open(run, rank, range))
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
            advance_within(&mut cursors[next], range)?;
            heap.fix_top(&cursors);
        }
        advance_within(&mut cursors[top], range)?;
        if cursors[top].head.is_some() {
            heap.push(top, &cursors);
        }
    }
    Ok(emitted)
}

fn advance_within(cursor: &mut Cursor, range: &KeyRange) -> Result<()> {
    cursor.advance()?;
    if cursor.head.is_some() && range.past_end(cursor.key()) {
        cursor.head = None;
    }
    Ok(())
}

/// Merges `runs` (oldest first, all written since the store was empty) into
/// `keyspace` as one fjall ingestion per key range, on up to `threads`
/// threads (the caller's among them). Returns the records written.
pub(crate) fn ingest_runs(
    runs: &[RunSource],
    keyspace: &fjall::Keyspace,
    threads: usize,
    db_path: &Path,
) -> Result<u64> {
    let total: u64 = runs.iter().map(|r| r.records).sum();
    let threads = threads.max(1);
    // Twice as many key ranges as threads: each range ends in a fjall
    // ingestion `finish` that writes the filter and index and fsyncs the
    // table while holding fjall's journal lock, so finishes serialise; with
    // more, smaller ranges one thread's finish overlaps the others' writing.
    // Below `total` of 10,000 a second range costs more than it saves.
    let parts = if total < 10_000 { 1 } else { 2 * threads };
    let ranges = KeyRange::split(runs, parts);
    let engine =
        |action: &'static str| move |e: fjall::Error| StoreError::engine(db_path, action, e);
    let ingest = |range: &KeyRange| -> Result<u64> {
        let started = Instant::now();
        let mut ingestion = keyspace
            .start_ingestion()
            .map_err(engine("starting ingestion"))?;
        let written = merge_runs(runs, range, true, |key, value| match value {
            Some(v) => ingestion
                .write(key, v)
                .map_err(engine("ingesting restored records")),
            None => Ok(()),
        })?;
        let merged = started.elapsed();
        ingestion.finish().map_err(engine("finishing ingestion"))?;
        tracing::debug!(
            written,
            merge_ms = merged.as_millis(),
            finish_ms = (started.elapsed() - merged).as_millis(),
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
    std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads.min(ranges.len()))
            .map(|_| scope.spawn(work))
            .collect();
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
    use crate::sorted_run::{RunBuilder, SAMPLE_EVERY};

    type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

    /// Three overlapping runs: later runs overwrite and delete earlier keys.
    fn runs() -> (Vec<RunSource>, Model) {
        let mut model = Model::new();
        let mut sources = Vec::new();
        for run in 0..3u32 {
            let mut b = RunBuilder::default();
            for i in 0..(3 * SAMPLE_EVERY as u32) {
                let k = (i * 7 + run * 1_000) % 10_000;
                let key = format!("k{k:05}").into_bytes();
                let value = (i % 5 != 0).then(|| format!("{run}:{i}").into_bytes());
                b.push(&key, value.as_deref());
                model.insert(key, value);
            }
            sources.push(crate::spill::memory_source(b.seal().0));
        }
        (sources, model)
    }

    fn merge_all(runs: &[RunSource], range: &KeyRange, drop: bool) -> Model {
        let mut out = Model::new();
        let mut last: Option<Vec<u8>> = None;
        merge_runs(runs, range, drop, |k, v| {
            assert!(last.as_deref() < Some(k), "keys not strictly ascending");
            last = Some(k.to_vec());
            out.insert(k.to_vec(), v.map(<[u8]>::to_vec));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn newest_write_wins_and_tombstones_are_kept_or_dropped() {
        let (runs, model) = runs();
        assert_eq!(merge_all(&runs, &KeyRange::default(), false), model);
        let live: Model = model.into_iter().filter(|(_, v)| v.is_some()).collect();
        assert_eq!(merge_all(&runs, &KeyRange::default(), true), live);
    }

    #[test]
    fn key_ranges_partition_the_merge_exactly() {
        let (runs, model) = runs();
        for parts in [2, 3, 5] {
            let ranges = KeyRange::split(&runs, parts);
            // Fewer when sampled keys coincide.
            assert!(
                (2..=parts).contains(&ranges.len()),
                "{} ranges",
                ranges.len()
            );
            let mut joined = Model::new();
            for range in &ranges {
                let part = merge_all(&runs, range, false);
                assert!(!part.is_empty(), "an empty key range");
                let before = joined.len();
                joined.extend(part.clone());
                assert_eq!(joined.len(), before + part.len(), "ranges overlap");
            }
            assert_eq!(joined, model);
        }
    }
}
