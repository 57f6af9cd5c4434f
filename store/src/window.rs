//! The byte-level window store: values per (key, window start), kept in one
//! fjall keyspace per time segment so retention drops whole segments at once.
//!
//! Keys inside a segment are `[key length u32][key][window start, sign-flipped,
//! big-endian]`, so one key's windows are contiguous and in time order.

use std::collections::VecDeque;
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Result, StoreError};
use crate::merge::{Committed, MergedEntries};
use crate::meta::StoreKind;
use crate::task_store::{TaskInner, TaskStore};

/// One window of one key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WindowEntry {
    /// The window start in ms.
    pub window_start: i64,
    /// The record key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
}

/// A window store of one task. Cheap to clone; all clones share the task's staging.
#[derive(Debug, Clone)]
pub struct WindowStore {
    task: Arc<TaskInner>,
    name: Arc<str>,
    retention_ms: i64,
    segment_ms: i64,
    path: Arc<PathBuf>,
}

pub(crate) fn segment_of(window_start: i64, segment_ms: i64) -> i64 {
    window_start.div_euclid(segment_ms)
}

/// A window is readable while `window_start + retention > stream time`.
pub(crate) fn is_live(window_start: i64, retention_ms: i64, stream_time: Option<i64>) -> bool {
    stream_time.is_none_or(|t| i128::from(window_start) + i128::from(retention_ms) > i128::from(t))
}

/// Whether every window that can fall in `segment` is past retention.
pub(crate) fn segment_expired(
    segment: i64,
    segment_ms: i64,
    retention_ms: i64,
    stream_time: i64,
) -> bool {
    let last_start = (i128::from(segment) + 1) * i128::from(segment_ms) - 1;
    last_start + i128::from(retention_ms) <= i128::from(stream_time)
}

fn flip(ts: i64) -> [u8; 8] {
    ((ts as u64) ^ (1 << 63)).to_be_bytes()
}

pub(crate) fn encode_segment_key(key: &[u8], window_start: i64) -> Result<Vec<u8>> {
    let len = u32::try_from(key.len())
        .ok()
        .filter(|len| *len <= u32::from(u16::MAX) - 12)
        .ok_or_else(|| {
            StoreError::InvalidArgument(format!("window key of {} bytes exceeds 65523", key.len()))
        })?;
    let mut out = Vec::with_capacity(12 + key.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&flip(window_start));
    Ok(out)
}

pub(crate) fn decode_segment_key(bytes: &[u8]) -> Option<(Vec<u8>, i64)> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    if rest.len() != len.checked_add(8)? {
        return None;
    }
    let (key, ts) = rest.split_at(len);
    let ts: [u8; 8] = ts.try_into().ok()?;
    Some((key.to_vec(), (u64::from_be_bytes(ts) ^ (1 << 63)) as i64))
}

/// The changelog key of a window: `key` followed by the window start as 8
/// big-endian bytes. Restore decodes window store records with this layout.
pub fn window_changelog_key(key: &[u8], window_start: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 8);
    out.extend_from_slice(key);
    out.extend_from_slice(&window_start.to_be_bytes());
    out
}

/// Splits a [`window_changelog_key`] into key and window start.
pub fn split_window_changelog_key(bytes: &[u8]) -> Option<(&[u8], i64)> {
    let (key, ts) = bytes.split_last_chunk::<8>()?;
    Some((key, i64::from_be_bytes(*ts)))
}

fn millis(d: Duration, what: &str) -> Result<i64> {
    i64::try_from(d.as_millis())
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or_else(|| {
            StoreError::InvalidArgument(format!("{what} must be between 1 ms and i64::MAX ms"))
        })
}

impl TaskStore {
    /// Opens the window store `name`, creating it if it does not exist.
    ///
    /// Windows older than `retention` behind stream time (the largest window
    /// start written) are unreadable, and their segments of width `segment` are
    /// dropped whole once every window in them is.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidArgument`] for zero durations,
    /// [`StoreError::KindMismatch`] if `name` exists as another kind or with
    /// other durations, [`StoreError::InvalidStoreName`].
    pub fn window_store(
        &self,
        name: &str,
        retention: Duration,
        segment: Duration,
    ) -> Result<WindowStore> {
        self.window_store_with_serdes(name, retention, segment, None)
    }

    /// Opens the in-memory window store `name`, creating it empty if this
    /// task store has no store of that name yet. Retention works as for
    /// [`TaskStore::window_store`]; contents and the offset of `changelog`
    /// live only in memory, as for [`TaskStore::in_memory_key_value_store`].
    ///
    /// # Errors
    ///
    /// As [`TaskStore::window_store`], and [`StoreError::InvalidArgument`]
    /// if `name` is a store on disk.
    pub fn in_memory_window_store(
        &self,
        name: &str,
        retention: Duration,
        segment: Duration,
        changelog: Option<&crate::meta::ChangelogPartition>,
    ) -> Result<WindowStore> {
        let retention_ms = millis(retention, "retention")?;
        let segment_ms = millis(segment, "segment interval")?;
        self.register_in_memory(
            name,
            StoreKind::Window {
                retention_ms,
                segment_ms,
            },
            changelog,
        )?;
        Ok(WindowStore {
            task: Arc::clone(&self.inner),
            name: Arc::from(name),
            retention_ms,
            segment_ms,
            path: Arc::new(self.inner.path.clone()),
        })
    }

    pub(crate) fn window_store_with_serdes(
        &self,
        name: &str,
        retention: Duration,
        segment: Duration,
        serdes: Option<(&str, &str)>,
    ) -> Result<WindowStore> {
        let retention_ms = millis(retention, "retention")?;
        let segment_ms = millis(segment, "segment interval")?;
        self.register(
            name,
            StoreKind::Window {
                retention_ms,
                segment_ms,
            },
            serdes,
        )?;
        Ok(WindowStore {
            task: Arc::clone(&self.inner),
            name: Arc::from(name),
            retention_ms,
            segment_ms,
            path: Arc::new(self.inner.path.clone()),
        })
    }
}

impl WindowStore {
    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream time (largest window start written, staged included).
    ///
    /// # Errors
    ///
    /// [`StoreError::UnknownStore`] (never in practice).
    pub fn stream_time(&self) -> Result<Option<i64>> {
        Ok(self.task.state().store(&self.name)?.current_stream_time())
    }

    /// Stages `value` for (`key`, `window_start`) and advances stream time.
    /// Returns `false`, writing nothing, if the window is already past retention.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidArgument`] for keys longer than `u32::MAX` bytes.
    pub fn put(&self, key: &[u8], value: &[u8], window_start: i64) -> Result<bool> {
        let encoded = encode_segment_key(key, window_start)?;
        let mut state = self.task.state();
        let entry = state.store_mut(&self.name)?;
        let now = entry
            .current_stream_time()
            .map_or(window_start, |t| t.max(window_start));
        if !is_live(window_start, self.retention_ms, Some(now)) {
            tracing::debug!(store = %self.name, window_start, stream_time = now, "dropping write to expired window");
            return Ok(false);
        }
        entry.staged.stream_time = Some(
            entry
                .staged
                .stream_time
                .map_or(window_start, |t| t.max(window_start)),
        );
        entry.staged.window.insert(
            (segment_of(window_start, self.segment_ms), encoded),
            Some(value.to_vec()),
        );
        Ok(true)
    }

    /// Stages the deletion of (`key`, `window_start`).
    ///
    /// # Errors
    ///
    /// As [`WindowStore::put`].
    pub fn delete(&self, key: &[u8], window_start: i64) -> Result<()> {
        let encoded = encode_segment_key(key, window_start)?;
        let mut state = self.task.state();
        state
            .store_mut(&self.name)?
            .staged
            .window
            .insert((segment_of(window_start, self.segment_ms), encoded), None);
        Ok(())
    }

    /// The windows of `key` starting in `[from, to]`, in time order.
    ///
    /// # Errors
    ///
    /// [`StoreError::Engine`] if fjall fails.
    pub fn fetch(&self, key: &[u8], from: i64, to: i64) -> Result<Vec<WindowEntry>> {
        self.fetch_of(key, from, to, true)
    }

    /// The committed windows of `key` starting in `[from, to]`, without
    /// this task's staged writes: what a reader outside the task (an
    /// interactive query) may see.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_store::{ChangelogPartition, StoreOptions, TaskStore};
    /// # fn main() -> Result<(), weir_store::StoreError> {
    /// # let dir = tempfile::tempdir().map_err(|e| weir_store::StoreError::InvalidArgument(e.to_string()))?;
    /// let task = TaskStore::open(dir.path(), StoreOptions::default())?;
    /// let day = Duration::from_secs(86_400);
    /// let clicks = task.window_store("clicks", day, Duration::from_secs(3_600))?;
    /// clicks.put(b"user-1", b"3", 60_000)?;
    /// assert!(clicks.fetch_committed(b"user-1", 0, 120_000)?.is_empty()); // staged only
    /// task.commit(&[(ChangelogPartition::new("app-clicks-changelog", 0), 1)])?;
    /// assert_eq!(clicks.fetch_committed(b"user-1", 0, 120_000)?[0].value, b"3");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`StoreError::Engine`] if fjall fails.
    pub fn fetch_committed(&self, key: &[u8], from: i64, to: i64) -> Result<Vec<WindowEntry>> {
        self.fetch_of(key, from, to, false)
    }

    fn fetch_of(&self, key: &[u8], from: i64, to: i64, staged: bool) -> Result<Vec<WindowEntry>> {
        let mut out = Vec::new();
        if from > to {
            return Ok(out);
        }
        let lo = encode_segment_key(key, from)?;
        let hi = encode_segment_key(key, to)?;
        for segment in self.segments_between(from, to)? {
            for item in self.merged(segment, Some((&lo, &hi)), staged)? {
                let (k, v) = item?;
                if let Some((key, window_start)) = self.decode(&k)?
                    && self.readable(window_start)?
                {
                    out.push(WindowEntry {
                        window_start,
                        key,
                        value: v,
                    });
                }
            }
        }
        Ok(out)
    }

    /// All windows starting in `[from, to]`, in time order (then key order).
    /// Reads one segment at a time, so memory is bounded by a segment's matches.
    ///
    /// # Errors
    ///
    /// [`StoreError::Engine`] if fjall fails; later errors come from the iterator.
    pub fn fetch_all(&self, from: i64, to: i64) -> Result<TimeOrderedEntries> {
        let segments = if from > to {
            VecDeque::new()
        } else {
            self.segments_between(from, to)?.into()
        };
        Ok(TimeOrderedEntries {
            store: self.clone(),
            from,
            to,
            segments,
            buffer: VecDeque::new(),
        })
    }

    /// Segments that may hold windows in `[from, to]`, committed or staged, ascending.
    fn segments_between(&self, from: i64, to: i64) -> Result<Vec<i64>> {
        let (lo, hi) = (
            segment_of(from, self.segment_ms),
            segment_of(to, self.segment_ms),
        );
        let state = self.task.state();
        let entry = state.store(&self.name)?;
        let mut segments: Vec<i64> = entry.segments.range(lo..=hi).map(|(s, _)| *s).collect();
        if let Some(memory) = &entry.memory {
            segments.extend(memory.segments.range(lo..=hi).map(|(s, _)| *s));
        }
        segments.extend(
            entry
                .staged
                .window
                .keys()
                .map(|(s, _)| *s)
                .filter(|s| (lo..=hi).contains(s)),
        );
        segments.sort_unstable();
        segments.dedup();
        Ok(segments)
    }

    /// Committed entries of one segment in `[lo, hi]` merged with staged ones.
    /// `None` bounds mean the whole segment.
    /// A segment's entries within `bounds`, this task's staged writes over
    /// the committed ones (`with_staged`), or the committed ones alone.
    fn merged(
        &self,
        segment: i64,
        bounds: Option<(&[u8], &[u8])>,
        with_staged: bool,
    ) -> Result<MergedEntries> {
        let state = self.task.state();
        let entry = state.store(&self.name)?;
        let staged: Vec<_> = if with_staged {
            entry
                .staged
                .window
                .range((segment, Vec::new())..)
                .take_while(|((s, _), _)| *s == segment)
                .filter(|((_, k), _)| {
                    bounds.is_none_or(|(lo, hi)| (lo..=hi).contains(&k.as_slice()))
                })
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect()
        } else {
            Vec::new()
        };
        let committed = if let Some(memory) = &entry.memory {
            memory.segments.get(&segment).map(|seg| {
                let entries: Vec<_> = match bounds {
                    Some((lo, hi)) => seg
                        .range::<[u8], _>((Bound::Included(lo), Bound::Included(hi)))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    None => seg.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                };
                Committed::Memory(entries.into_iter())
            })
        } else {
            match (entry.segments.get(&segment), bounds) {
                (Some(ks), Some((lo, hi))) => Some(ks.range(lo..=hi).into()),
                (Some(ks), None) => Some(ks.iter().into()),
                (None, _) => None,
            }
        };
        drop(state);
        Ok(MergedEntries::new(
            staged,
            committed,
            Arc::clone(&self.path),
        ))
    }

    fn decode(&self, k: &[u8]) -> Result<Option<(Vec<u8>, i64)>> {
        decode_segment_key(k).map(Some).ok_or_else(|| {
            StoreError::corrupt(
                self.path.as_ref(),
                format!("malformed key in window store {:?}", self.name),
            )
        })
    }

    fn readable(&self, window_start: i64) -> Result<bool> {
        Ok(is_live(
            window_start,
            self.retention_ms,
            self.stream_time()?,
        ))
    }

    fn load_segment(&self, segment: i64, from: i64, to: i64) -> Result<Vec<WindowEntry>> {
        let mut entries = Vec::new();
        let stream_time = self.stream_time()?;
        for item in self.merged(segment, None, true)? {
            let (k, value) = item?;
            if let Some((key, window_start)) = self.decode(&k)?
                && (from..=to).contains(&window_start)
                && is_live(window_start, self.retention_ms, stream_time)
            {
                entries.push(WindowEntry {
                    window_start,
                    key,
                    value,
                });
            }
        }
        entries.sort_unstable();
        Ok(entries)
    }
}

/// Windows of a time range in time order, loaded one segment at a time.
#[derive(Debug)]
pub struct TimeOrderedEntries {
    store: WindowStore,
    from: i64,
    to: i64,
    segments: VecDeque<i64>,
    buffer: VecDeque<WindowEntry>,
}

impl Iterator for TimeOrderedEntries {
    type Item = Result<WindowEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(entry) = self.buffer.pop_front() {
                return Some(Ok(entry));
            }
            let segment = self.segments.pop_front()?;
            match self.store.load_segment(segment, self.from, self.to) {
                Ok(entries) => self.buffer = entries.into(),
                Err(e) => {
                    self.segments.clear();
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_keys_round_trip_and_sort_by_key_then_time() {
        let a = encode_segment_key(b"k", -5).unwrap();
        let b = encode_segment_key(b"k", 3).unwrap();
        let c = encode_segment_key(b"k2", i64::MIN).unwrap();
        assert!(a < b && b < c);
        assert_eq!(decode_segment_key(&a), Some((b"k".to_vec(), -5)));
        assert_eq!(decode_segment_key(&a[..a.len() - 1]), None);
        assert_eq!(decode_segment_key(&[0xff, 0xff, 0xff, 0xff, 1]), None);
    }

    #[test]
    fn expiry_rules_agree_between_windows_and_segments() {
        // Segment 2 of width 10 holds starts 20..=29; retention 5.
        assert!(!segment_expired(2, 10, 5, 33));
        assert!(is_live(29, 5, Some(33)));
        assert!(segment_expired(2, 10, 5, 34));
        assert!(!is_live(29, 5, Some(34)));
        assert_eq!(segment_of(-1, 10), -1);
    }
}
