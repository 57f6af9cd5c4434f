//! Range-partitioned buffering of an empty-store restore.
//!
//! Changelog records arrive in offset order. Sorting them as whole runs means
//! one random read per record when the sorted run is read, and on this kind of
//! machine a record read that misses every cache costs more than writing it to
//! the store. So records are put in key-range buckets as they arrive: the
//! bucket bounds ([`Splitters`]) are quantiles of the first keys. A bucket of
//! one generation holds a few hundred KiB, so sorting it later happens in
//! cache, and the buckets, taken in order, are already in key order.
//!
//! Memory comes in slabs from a [`SlabPool`], whose thread touches every page
//! of a new slab before handing it over, so the page faults of a large restore
//! are taken off the thread that receives records. A generation's slabs go
//! back to the pool once it has been spilled, and the pool makes no more
//! slabs than two generations take, so memory stays within the budget
//! however long the restore.
//!
//! Bucket bounds only decide where work is split, never what is written: with
//! skewed keys, one bucket just gets larger and is sorted the slow way.

use std::cmp::Ordering;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError, channel, sync_channel,
};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::sorted_run::{
    Decoded, HEADER_LEN, decode_record, key_prefix, records, split_record, write_record,
};

/// How many first records decide the bucket bounds, per bucket.
pub(crate) const SAMPLE_PER_BUCKET: usize = 32;
/// Bits of the key prefix that index the bound lookup table.
const TABLE_BITS: u32 = 12;
/// Bytes of a page, touched once each when a slab is prepared.
const PAGE_BYTES: usize = 4096;
/// Values handed to fjall share buffers of about this size.
const VALUE_BUFFER_BYTES: usize = 4 << 20;

/// Sizes derived from the memory budget of one restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Memory (in slabs) a generation takes before it is spilled.
    pub(crate) generation_bytes: usize,
    /// Memory is allocated in slabs of this size.
    pub(crate) slab_bytes: usize,
    /// A bucket takes memory from a slab in blocks of this size.
    pub(crate) block_bytes: usize,
    /// Buckets (key ranges) to aim for.
    pub(crate) buckets: usize,
}

impl Layout {
    /// The most slabs a restore needs at once: two generations (one filling,
    /// one being spilled), each overshooting by the slab it was filling,
    /// `ahead` slabs ready and the one the pool's thread is preparing.
    pub(crate) fn max_slabs(&self, ahead: usize) -> usize {
        2 * (self.generation_bytes.div_ceil(self.slab_bytes) + 1) + ahead + 1
    }

    /// Two generations (one filling, one being spilled) share `memory_bytes`.
    pub(crate) fn for_memory(memory_bytes: usize) -> Self {
        let generation_bytes = (memory_bytes / 2).max(16 << 10);
        let slab_bytes = (generation_bytes / 16).clamp(4 << 10, 1 << 20);
        let block_bytes = (slab_bytes / 16).clamp(256, 16 << 10);
        let buckets = (generation_bytes / (16 * block_bytes)).clamp(4, 4096);
        Self {
            generation_bytes,
            slab_bytes,
            block_bytes,
            buckets,
        }
    }
}

/// Key-range bounds: bucket `i` holds the keys `k` with
/// `bound[i - 1] <= k < bound[i]`.
#[derive(Debug, Clone)]
pub(crate) struct Splitters {
    prefixes: Vec<u128>,
    keys: Vec<Vec<u8>>,
    /// For each value of the top [`TABLE_BITS`] bits of a key prefix, the
    /// bounds that share them: bounds before `.0` are below every such key,
    /// bounds from `.1` on above.
    table: Vec<(u32, u32)>,
}

impl Splitters {
    /// Up to `buckets` ranges holding about as many of `keys` each.
    pub(crate) fn from_sample(mut keys: Vec<&[u8]>, buckets: usize) -> Self {
        keys.sort_unstable();
        keys.dedup();
        let n = buckets.max(1);
        let mut bounds: Vec<Vec<u8>> = Vec::with_capacity(n);
        for i in 1..n {
            if let Some(key) = keys.get(i * keys.len() / n)
                && bounds.last().is_none_or(|last| last.as_slice() < *key)
            {
                bounds.push(key.to_vec());
            }
        }
        let prefixes: Vec<u128> = bounds.iter().map(|k| key_prefix(k)).collect();
        let top = |p: u128| (p >> (128 - TABLE_BITS)) as usize;
        let table = (0..1usize << TABLE_BITS)
            .map(|t| {
                let lo = prefixes.partition_point(|p| top(*p) < t);
                let hi = prefixes.partition_point(|p| top(*p) <= t);
                (
                    u32::try_from(lo).unwrap_or(u32::MAX),
                    u32::try_from(hi).unwrap_or(u32::MAX),
                )
            })
            .collect();
        Self {
            prefixes,
            keys: bounds,
            table,
        }
    }

    pub(crate) fn buckets(&self) -> usize {
        self.keys.len() + 1
    }

    /// For each bucket, how many leading bytes all its keys share: the common
    /// prefix of its two bounds (a key `k` with `lo <= k < hi` starts with
    /// every byte `lo` and `hi` share). Sorting a bucket compares the bytes
    /// after them.
    pub(crate) fn shared_prefixes(&self) -> Vec<usize> {
        (0..self.buckets())
            .map(|b| {
                match (
                    b.checked_sub(1).and_then(|lo| self.keys.get(lo)),
                    self.keys.get(b),
                ) {
                    (Some(lo), Some(hi)) => lo.iter().zip(hi).take_while(|(a, b)| a == b).count(),
                    _ => 0, // the first and last buckets are open on one side
                }
            })
            .collect()
    }

    /// The bucket of `key`: the number of bounds at or below it.
    pub(crate) fn bucket(&self, key: &[u8]) -> usize {
        let prefix = key_prefix(key);
        let t = (prefix >> (128 - TABLE_BITS)) as usize;
        let (lo, hi) = self.table.get(t).copied().unwrap_or((0, 0));
        let (mut lo, mut hi) = (lo as usize, (hi as usize).min(self.keys.len()));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let at_or_below = match self.prefixes[mid].cmp(&prefix) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => self.keys[mid].as_slice() <= key,
            };
            if at_or_below {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// A slab of memory; its contents are whatever was last written. A slab of
/// a [`SlabPool`] counts itself among the pool's slabs until it is dropped.
#[derive(Debug)]
pub(crate) struct Slab {
    bytes: Box<[u8]>,
    pooled: Option<Arc<AtomicUsize>>,
}

impl std::ops::Deref for Slab {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::ops::DerefMut for Slab {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        if let Some(live) = &self.pooled {
            live.fetch_sub(1, AtomicOrdering::AcqRel);
        }
    }
}

/// A new slab, its pages not touched yet, counted in `pooled` if it belongs
/// to a pool (the count already includes it).
fn new_slab(bytes: usize, pooled: Option<Arc<AtomicUsize>>) -> Slab {
    Slab {
        bytes: vec![0u8; bytes].into_boxed_slice(),
        pooled,
    }
}

/// How long the pool's thread waits for a slab to come back before it looks
/// again whether it may make one (a slab dropped instead of returned, by a
/// worker that failed, frees room without a message).
const RETURN_WAIT: Duration = Duration::from_millis(20);

/// How long [`SlabPool::take`] waits at the cap for a slab to come back.
const CAP_WAIT: Duration = Duration::from_millis(500);

/// Hands out slabs whose pages are already touched, from a thread of its own,
/// and takes spilled ones back for reuse.
///
/// The slabs in existence are capped. Without a cap, each time the pool's
/// thread fell behind (both cores busy) the caller made a slab on the spot,
/// and it stayed in use: over a long restore, memory grew past the budget.
#[derive(Debug)]
pub(crate) struct SlabPool {
    maker: SlabMaker,
    /// Slabs taken ready, and taken new because none was ready.
    taken: std::cell::Cell<(u64, u64)>,
    ready: Option<Receiver<Slab>>,
    returns: Option<Sender<Slab>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SlabPool {
    /// Keeps up to `ahead` slabs ready, and at most `max_slabs` in existence.
    pub(crate) fn start(
        slab_bytes: usize,
        ahead: usize,
        max_slabs: usize,
    ) -> std::io::Result<Self> {
        let (ready_tx, ready) = sync_channel::<Slab>(ahead.max(1));
        let (returns, returned) = channel::<Slab>();
        let stop = Arc::new(AtomicBool::new(false));
        let maker = SlabMaker {
            slab_bytes,
            max_slabs,
            live: Arc::new(AtomicUsize::new(0)),
        };
        let (thread_maker, thread_stop) = (maker.clone(), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("weir-restore-slabs".into())
            .spawn(move || prepare_slabs(&thread_maker, &ready_tx, &returned, &thread_stop))?;
        Ok(Self {
            maker,
            taken: std::cell::Cell::new((0, 0)),
            ready: Some(ready),
            returns: Some(returns),
            stop,
            thread: Some(thread),
        })
    }

    /// A ready slab; else a new untouched one, if the cap allows; else waits
    /// for one to come back from a spill. A restore hands a generation over
    /// to be spilled once it is full, so one comes back within a spill; if
    /// none has after [`CAP_WAIT`], the caller holds more than a restore
    /// would, and gets a new slab past the cap rather than wait forever.
    pub(crate) fn take(&self) -> Slab {
        let (ready, new) = self.taken.get();
        let Some(queue) = self.ready.as_ref() else {
            return new_slab(self.maker.slab_bytes, None);
        };
        if let Ok(slab) = queue.try_recv() {
            self.taken.set((ready + 1, new));
            return slab;
        }
        if let Some(slab) = self.maker.make() {
            self.taken.set((ready, new + 1));
            return slab;
        }
        if let Ok(slab) = queue.recv_timeout(CAP_WAIT) {
            self.taken.set((ready + 1, new));
            return slab;
        }
        self.taken.set((ready, new + 1));
        self.maker.make_past_cap()
    }

    /// Slabs taken ready so far, and slabs made on the spot.
    pub(crate) fn taken(&self) -> (u64, u64) {
        self.taken.get()
    }

    /// Where spilled slabs go back to.
    pub(crate) fn returns(&self) -> Option<Sender<Slab>> {
        self.returns.clone()
    }

    /// Slabs of this pool in existence.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.maker.live.load(AtomicOrdering::Acquire)
    }
}

impl Drop for SlabPool {
    fn drop(&mut self) {
        // Closing the ready channel stops the thread at its next send; the
        // flag stops it while it waits for a slab to come back.
        self.ready = None;
        self.returns = None;
        self.stop.store(true, AtomicOrdering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Makes the slabs of a pool, counting them.
#[derive(Debug, Clone)]
struct SlabMaker {
    slab_bytes: usize,
    max_slabs: usize,
    live: Arc<AtomicUsize>,
}

impl SlabMaker {
    /// A new slab of the pool, its pages not touched yet, unless the cap is
    /// reached.
    fn make(&self) -> Option<Slab> {
        self.live
            .fetch_update(AtomicOrdering::AcqRel, AtomicOrdering::Acquire, |n| {
                (n < self.max_slabs).then_some(n + 1)
            })
            .ok()?;
        Some(self.counted())
    }

    /// A new slab of the pool, cap or not.
    fn make_past_cap(&self) -> Slab {
        self.live.fetch_add(1, AtomicOrdering::AcqRel);
        self.counted()
    }

    /// A slab already counted in `live`.
    fn counted(&self) -> Slab {
        new_slab(self.slab_bytes, Some(Arc::clone(&self.live)))
    }
}

fn prepare_slabs(
    maker: &SlabMaker,
    ready: &SyncSender<Slab>,
    returned: &Receiver<Slab>,
    stop: &AtomicBool,
) {
    while !stop.load(AtomicOrdering::Acquire) {
        let slab = match returned.try_recv() {
            Ok(slab) if slab.len() == maker.slab_bytes => slab,
            Ok(_) => continue, // a dedicated slab of one large record
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => match maker.make() {
                Some(mut slab) => {
                    // One write per page faults the page in here, not later
                    // on the thread that copies records into it.
                    for byte in slab.iter_mut().step_by(PAGE_BYTES) {
                        *byte = 1;
                    }
                    slab
                }
                // As many slabs exist as the budget allows: wait for one.
                None => match returned.recv_timeout(RETURN_WAIT) {
                    Ok(slab) if slab.len() == maker.slab_bytes => slab,
                    Ok(_) | Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return,
                },
            },
        };
        if ready.send(slab).is_err() {
            return;
        }
    }
}

/// Where a block of a bucket lies.
#[derive(Debug, Clone, Copy)]
struct Extent {
    slab: usize,
    start: usize,
    len: usize,
    cap: usize,
}

/// The records of one generation, in buckets, each in arrival order.
#[derive(Debug)]
pub(crate) struct Generation {
    layout: Layout,
    slabs: Vec<Slab>,
    /// The slab blocks are carved from, and the next free byte in it.
    current: Option<usize>,
    fill: usize,
    buckets: Vec<Vec<Extent>>,
    /// Leading key bytes shared by every key of each bucket.
    shared: Arc<[usize]>,
    bytes: usize,
    memory: usize,
}

impl Generation {
    /// One bucket per entry of `shared`, the leading key bytes that all keys
    /// of that bucket share ([`Splitters::shared_prefixes`]).
    pub(crate) fn new(layout: Layout, shared: Arc<[usize]>) -> Self {
        let shared = if shared.is_empty() {
            Arc::from([0usize].as_slice())
        } else {
            shared
        };
        Self {
            layout,
            slabs: Vec::new(),
            current: None,
            fill: 0,
            buckets: vec![Vec::new(); shared.len()],
            shared,
            bytes: 0,
            memory: 0,
        }
    }

    /// Leading key bytes all keys of `bucket` share.
    pub(crate) fn shared_prefix(&self, bucket: usize) -> usize {
        self.shared.get(bucket).copied().unwrap_or(0)
    }

    pub(crate) fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Memory taken, in slab bytes.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.memory
    }

    /// Encoded record bytes held.
    pub(crate) fn record_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the generation has taken more than its share of memory (it
    /// overshoots by at most the slab it is filling).
    pub(crate) fn is_full(&self) -> bool {
        self.memory_bytes() > self.layout.generation_bytes
    }

    /// Appends a record to `bucket` (callers have checked sizes, see
    /// `kv::check_entry`).
    pub(crate) fn push(
        &mut self,
        bucket: usize,
        key: &[u8],
        value: Option<&[u8]>,
        pool: &SlabPool,
    ) {
        let len = HEADER_LEN + key.len() + value.map_or(0, <[u8]>::len);
        let bucket = bucket.min(self.buckets.len() - 1);
        let fits = self.buckets[bucket]
            .last()
            .is_some_and(|e| e.len + len <= e.cap);
        if !fits {
            let extent = self.new_block(len, pool);
            self.buckets[bucket].push(extent);
        }
        let Some(extent) = self.buckets[bucket].last_mut() else {
            return; // cannot happen: a block was just added
        };
        let at = extent.start + extent.len;
        extent.len += len;
        if let Some(out) = self
            .slabs
            .get_mut(extent.slab)
            .and_then(|s| s.get_mut(at..at + len))
        {
            write_record(out, key, value);
        }
        self.bytes += len;
    }

    fn new_block(&mut self, len: usize, pool: &SlabPool) -> Extent {
        if len > self.layout.block_bytes {
            // A record larger than a block gets a slab of its own.
            self.slabs.push(new_slab(len, None));
            self.memory += len;
            return Extent {
                slab: self.slabs.len() - 1,
                start: 0,
                len: 0,
                cap: len,
            };
        }
        let room = self
            .current
            .map_or(0, |_| self.layout.slab_bytes.saturating_sub(self.fill));
        let slab = match self.current {
            Some(slab) if room >= self.layout.block_bytes => slab,
            _ => {
                let slab = pool.take();
                self.memory += slab.len();
                self.slabs.push(slab);
                self.current = Some(self.slabs.len() - 1);
                self.fill = 0;
                self.slabs.len() - 1
            }
        };
        let start = self.fill;
        self.fill += self.layout.block_bytes;
        Extent {
            slab,
            start,
            len: 0,
            cap: self.layout.block_bytes,
        }
    }

    /// Bytes of records in `bucket`.
    pub(crate) fn bucket_bytes(&self, bucket: usize) -> usize {
        self.buckets
            .get(bucket)
            .map_or(0, |b| b.iter().map(|e| e.len).sum())
    }

    /// The blocks of `bucket`, in arrival order.
    pub(crate) fn blocks(&self, bucket: usize) -> Vec<&[u8]> {
        self.buckets.get(bucket).map_or_else(Vec::new, |extents| {
            extents
                .iter()
                .filter_map(|e| {
                    self.slabs
                        .get(e.slab)
                        .and_then(|s| s.get(e.start..e.start + e.len))
                })
                .collect()
        })
    }

    /// Hands the records of `bucket` to `emit` in key order, encoded, keeping
    /// the last write of each key and dropping tombstones if asked. `index`
    /// is scratch space. Returns the records emitted.
    pub(crate) fn sort_bucket<E>(
        &self,
        bucket: usize,
        drop_tombstones: bool,
        index: &mut Vec<IndexEntry>,
        mut emit: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        let blocks = self.blocks(bucket);
        sort_blocks(&blocks, self.shared_prefix(bucket), false, index);
        let mut emitted = 0;
        for &entry in index.iter() {
            let record = record_at(&blocks, position(entry));
            if drop_tombstones && split_record(record).1.is_none() {
                continue;
            }
            emit(record)?;
            emitted += 1;
        }
        Ok(emitted)
    }

    /// Gives the slabs back for reuse.
    pub(crate) fn recycle(self, returns: &Sender<Slab>) {
        for slab in self.slabs {
            if returns.send(slab).is_err() {
                return;
            }
        }
    }
}

/// One entry of a [`sort_blocks`] index: eight key bytes (after the bytes
/// every key shares) in the high half, so that sorting the entries as
/// integers sorts by them first, and the record's position (block << 32 |
/// offset) in the low half.
pub(crate) type IndexEntry = u128;

fn index_entry(key: &[u8], shared: usize, at: u64) -> IndexEntry {
    let rest = key.get(shared..).unwrap_or_default();
    let prefix = match rest.first_chunk::<8>() {
        Some(first) => u64::from_be_bytes(*first),
        None => {
            let mut bytes = [0u8; 8];
            bytes[..rest.len()].copy_from_slice(rest);
            u64::from_be_bytes(bytes)
        }
    };
    (u128::from(prefix) << 64) | u128::from(at)
}

/// The position (block << 32 | offset) of an index entry.
pub(crate) fn position(entry: IndexEntry) -> u64 {
    entry as u64
}

fn prefix_of(entry: IndexEntry) -> u64 {
    (entry >> 64) as u64
}

/// Leaves in `index` the records of `blocks` in key order, one per key (its
/// last write). Blocks are in arrival order, and so are the records within a
/// block, or, with `sorted_runs`, some blocks are spilled runs, in key order
/// with one record per key. Every key starts with the same `shared` bytes
/// (0 if unknown).
pub(crate) fn sort_blocks(
    blocks: &[&[u8]],
    shared: usize,
    sorted_runs: bool,
    index: &mut Vec<IndexEntry>,
) {
    index.clear();
    for (b, block) in blocks.iter().enumerate() {
        // (Blocks hold whole encoded records only.)
        for (offset, key, _) in records(block) {
            index.push(index_entry(key, shared, pack(b, offset)));
        }
    }
    // Positions grow with arrival time, so sorting the entries keeps arrival
    // order among equal prefixes; keys that share the prefix are then
    // ordered by their bytes, stably.
    if sorted_runs {
        // A run's entries are already in order (eight key bytes, then
        // positions that grow with the key), and the stable sort finds such
        // runs and merges them instead of sorting them again.
        index.sort();
    } else {
        index.sort_unstable();
    }
    let key = |entry: IndexEntry| entry_at(blocks, position(entry)).0;
    let mut i = 0;
    while i < index.len() {
        let prefix = prefix_of(index[i]);
        let same = index[i..]
            .iter()
            .take_while(|e| prefix_of(**e) == prefix)
            .count();
        if same > 1 {
            index[i..i + same].sort_by(|a, b| key(*a).cmp(key(*b)));
        }
        i += same;
    }
    // Keep the last write of each key.
    let mut kept = 0;
    for i in 0..index.len() {
        let entry = index[i];
        if let Some(&next) = index.get(i + 1)
            && prefix_of(next) == prefix_of(entry)
            && key(next) == key(entry)
        {
            continue; // a newer write of the same key follows
        }
        index[kept] = entry;
        kept += 1;
    }
    index.truncate(kept);
}

/// The bytes from a position of [`sort_blocks`] to the end of its block.
fn from_position<'a>(blocks: &[&'a [u8]], at: u64) -> &'a [u8] {
    let (block, offset) = unpack(at);
    blocks
        .get(block)
        .and_then(|b| b.get(offset..))
        .unwrap_or_default()
}

/// The encoded record at a position of [`sort_blocks`].
pub(crate) fn record_at<'a>(blocks: &[&'a [u8]], at: u64) -> &'a [u8] {
    let rest = from_position(blocks, at);
    match decode_record(rest) {
        Decoded::Record(layout) => rest.get(..layout.len()).unwrap_or_default(),
        _ => &[],
    }
}

/// The key and value (`None` for a tombstone) of the record at a position of
/// [`sort_blocks`], decoded once.
pub(crate) fn entry_at<'a>(blocks: &[&'a [u8]], at: u64) -> (&'a [u8], Option<&'a [u8]>) {
    split_record(from_position(blocks, at))
}

/// Hands the live records of a [`sort_blocks`] index to `emit` in key order,
/// each value as a [`fjall::Slice`] sharing one buffer per few MiB of
/// values, so that fjall takes them without an allocation and a copy per
/// value. Tombstones are dropped: this is for the last write to the store,
/// when nothing older exists. Returns the records emitted.
pub(crate) fn emit_live<E>(
    blocks: &[&[u8]],
    index: &[IndexEntry],
    mut emit: impl FnMut(&[u8], fjall::Slice) -> Result<(), E>,
) -> Result<u64, E> {
    let mut live: Vec<(&[u8], &[u8])> = Vec::new();
    let mut emitted = 0;
    let mut next = index.iter().peekable();
    loop {
        // The next live records, up to a few MiB of values (or one larger
        // value: a buffer holds up to 4 GiB, and a value is smaller).
        live.clear();
        let mut bytes = 0usize;
        while let Some(&&entry) = next.peek() {
            if let (key, Some(value)) = entry_at(blocks, position(entry)) {
                if !live.is_empty() && bytes + value.len() > VALUE_BUFFER_BYTES {
                    break;
                }
                bytes += value.len();
                live.push((key, value));
            }
            next.next();
        }
        if live.is_empty() {
            return Ok(emitted);
        }
        // Their values in one buffer, which the slices handed out share
        // (read in, so the buffer is not zeroed first).
        let mut values = Values {
            live: &live,
            next: 0,
            at: 0,
        };
        let buffer = byteview::ByteView::from_reader(&mut values, bytes).ok();
        let mut taken = 0;
        for (key, value) in &live {
            let value = match &buffer {
                Some(buffer) if taken + value.len() <= buffer.len() => {
                    let shared = buffer.slice(taken..taken + value.len());
                    taken += value.len();
                    fjall::Slice::from(shared)
                }
                // Cannot happen (the buffer holds exactly these values),
                // but a copy of its own would do.
                _ => fjall::Slice::from(*value),
            };
            emit(key, value)?;
            emitted += 1;
        }
    }
}

/// Reads the values of (key, value) pairs one after the other.
struct Values<'a> {
    live: &'a [(&'a [u8], &'a [u8])],
    next: usize,
    at: usize,
}

impl std::io::Read for Values<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some((_, value)) = self.live.get(self.next) {
            let rest = value.get(self.at..).unwrap_or_default();
            if rest.is_empty() {
                self.next += 1;
                self.at = 0;
                continue;
            }
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            self.at += n;
            return Ok(n);
        }
        Ok(0)
    }
}

fn pack(block: usize, offset: usize) -> u64 {
    ((block as u64) << 32) | (offset as u64 & u64::from(u32::MAX))
}

fn unpack(at: u64) -> (usize, usize) {
    ((at >> 32) as usize, (at & u64::from(u32::MAX)) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sorted_run::encode_record;

    #[test]
    fn buckets_follow_key_order_and_bounds() {
        let keys: Vec<Vec<u8>> = (0..1000u32)
            .map(|i| (i * 7).to_be_bytes().to_vec())
            .collect();
        let s = Splitters::from_sample(keys.iter().map(Vec::as_slice).collect(), 8);
        assert_eq!(s.buckets(), 8);
        let mut last = 0;
        for i in 0..10_000u32 {
            let b = s.bucket(&i.to_be_bytes());
            assert!(b >= last, "bucket order broken at {i}");
            last = b;
        }
        assert_eq!(last, 7);
        // A bound itself belongs to the bucket it opens.
        for (i, bound) in s.keys.iter().enumerate() {
            assert_eq!(s.bucket(bound), i + 1);
        }
    }

    #[test]
    fn keys_sharing_long_prefixes_are_bucketed_by_their_bytes() {
        let keys: Vec<Vec<u8>> = (0..400u32)
            .map(|i| format!("customer-000000000-{i:05}").into_bytes())
            .collect();
        let s = Splitters::from_sample(keys.iter().map(Vec::as_slice).collect(), 4);
        assert_eq!(s.buckets(), 4);
        let buckets: Vec<usize> = keys.iter().map(|k| s.bucket(k)).collect();
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!((buckets[0], buckets[399]), (0, 3));
        // Shorter keys and keys outside the sample still land in order.
        assert_eq!(s.bucket(b"a"), 0);
        assert_eq!(s.bucket(b"customer-000000000-"), 0);
        assert_eq!(s.bucket(b"z"), 3);
    }

    #[test]
    fn every_key_of_a_bucket_starts_with_its_shared_prefix() {
        let keys: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| format!("customer-{:09}-{i:05}", i / 100).into_bytes())
            .collect();
        let s = Splitters::from_sample(keys.iter().map(Vec::as_slice).collect(), 16);
        let shared = s.shared_prefixes();
        assert_eq!(shared.len(), s.buckets());
        assert_eq!((shared[0], shared[shared.len() - 1]), (0, 0));
        assert!(shared[1..shared.len() - 1].iter().all(|n| *n >= 13));
        for key in &keys {
            let b = s.bucket(key);
            if b > 0 {
                let n = shared[b];
                assert_eq!(key[..n], s.keys[b - 1][..n], "key {key:?} in bucket {b}");
            }
        }
    }

    #[test]
    fn the_pool_never_makes_more_slabs_than_its_cap() {
        let pool = SlabPool::start(4096, 2, 3).unwrap();
        let returns = pool.returns().unwrap();
        let mut held: Vec<Slab> = (0..3).map(|_| pool.take()).collect();
        assert_eq!(pool.live(), 3);
        // At the cap, a take waits for a slab to come back, and gets it.
        let mut marked = held.pop().unwrap();
        marked[1] = 42;
        returns.send(marked).unwrap();
        let again = pool.take();
        assert_eq!((again[1], pool.live()), (42, 3));
        held.push(again);
        // A slab dropped instead of returned makes room for a new one.
        held.pop();
        assert_eq!(pool.live(), 2);
        held.push(pool.take());
        assert_eq!(pool.live(), 3);
        // A caller that holds the cap and returns nothing still gets a slab,
        // after a wait, rather than waiting forever.
        held.push(pool.take());
        assert_eq!(pool.live(), 4);
        drop(pool);
        drop(held);
    }

    #[test]
    fn a_generation_sorts_each_bucket_keeping_the_last_write() {
        let layout = Layout::for_memory(64 << 10);
        // The generation grows past its budget and is never spilled: no cap.
        let pool = SlabPool::start(layout.slab_bytes, 2, usize::MAX).unwrap();
        let keys: Vec<Vec<u8>> = (0..50u32).map(|i| vec![b'k', (i * 5) as u8]).collect();
        let s = Splitters::from_sample(keys.iter().map(Vec::as_slice).collect(), 4);
        let mut g = Generation::new(layout, s.shared_prefixes().into());
        let mut model = std::collections::BTreeMap::new();
        for round in 0..40u32 {
            for k in &keys {
                let value =
                    (round % 7 != 3).then(|| vec![round as u8; 1 + (round as usize * 13) % 900]);
                g.push(s.bucket(k), k, value.as_deref(), &pool);
                model.insert(k.clone(), value);
            }
        }
        let big = vec![9u8; layout.block_bytes * 3];
        g.push(s.bucket(b"k\x07"), b"k\x07", Some(&big), &pool);
        model.insert(b"k\x07".to_vec(), Some(big));
        for drop in [false, true] {
            let mut out = Vec::new();
            let mut index = Vec::new();
            for b in 0..g.buckets() {
                g.sort_bucket(b, drop, &mut index, |r| {
                    out.extend_from_slice(r);
                    Ok::<(), ()>(())
                })
                .unwrap();
            }
            let mut expected = Vec::new();
            for (k, v) in &model {
                if !(drop && v.is_none()) {
                    encode_record(&mut expected, k, v.as_deref());
                }
            }
            assert!(
                out == expected,
                "bucket sort differs from the model (drop {drop})"
            );
        }
    }

    #[test]
    fn values_larger_than_a_shared_buffer_reach_fjall_intact() {
        let layout = Layout::for_memory(64 << 10);
        // The generation grows past its budget and is never spilled: no cap.
        let pool = SlabPool::start(layout.slab_bytes, 2, usize::MAX).unwrap();
        let mut g = Generation::new(layout, Arc::from([0usize].as_slice()));
        let sizes = [10usize, 3 << 20, 5 << 20, 7, 1 << 20, 0];
        for (i, n) in sizes.iter().enumerate() {
            g.push(0, &[b'k', i as u8], Some(&vec![i as u8; *n]), &pool);
        }
        g.push(0, b"k\x09", None, &pool);
        let blocks = g.blocks(0);
        let mut index = Vec::new();
        sort_blocks(&blocks, 0, false, &mut index);
        let mut got = Vec::new();
        emit_live(&blocks, &index, |key, value| {
            got.push((key.to_vec(), value.to_vec()));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(
            got.len(),
            sizes.len(),
            "the tombstone is dropped, nothing else"
        );
        for (i, (key, value)) in got.iter().enumerate() {
            assert_eq!(key, &[b'k', i as u8]);
            assert!(value.len() == sizes[i] && value.iter().all(|b| *b == i as u8));
        }
    }
}
