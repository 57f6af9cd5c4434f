//! The byte-level key-value store.

use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;

use fjall::Keyspace;

use crate::error::{Result, StoreError};
use crate::merge::{Committed, MergedEntries};
use crate::meta::StoreKind;
use crate::task_store::{StoreEntry, TaskInner, TaskStore};

/// A key-value store of one task. Cheap to clone; all clones share the task's staging.
#[derive(Clone)]
pub struct KeyValueStore {
    task: Arc<TaskInner>,
    name: Arc<str>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for KeyValueStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyValueStore")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TaskStore {
    /// Opens the key-value store `name`, creating it if it does not exist.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidStoreName`], [`StoreError::KindMismatch`] if `name`
    /// is a window store, or [`StoreError::Engine`].
    pub fn key_value_store(&self, name: &str) -> Result<KeyValueStore> {
        self.key_value_store_with_serdes(name, None)
    }

    /// Opens the in-memory key-value store `name`, creating it empty if this
    /// task store has no store of that name yet.
    ///
    /// Its committed contents live in memory only: nothing is written to
    /// disk, and they are gone when this task store is closed or dropped.
    /// Writes are staged and applied by [`TaskStore::commit`] (or dropped by
    /// [`TaskStore::abort`]) exactly as for a store on disk. The offset of
    /// `changelog`, the store's changelog partition, is kept in memory too,
    /// so after a reopen [`TaskStore::committed_offset`] says `Unknown` and
    /// the store is restored from the beginning of its changelog.
    ///
    /// # Examples
    ///
    /// ```
    /// use weir_store::{ChangelogPartition, CommittedOffset, StoreOptions, TaskStore};
    /// # fn main() -> Result<(), weir_store::StoreError> {
    /// let dir = tempfile::tempdir().map_err(|e| weir_store::StoreError::InvalidArgument(e.to_string()))?;
    /// let changelog = ChangelogPartition::new("app-cache-changelog", 0);
    /// {
    ///     let task = TaskStore::open(dir.path(), StoreOptions::default())?;
    ///     let cache = task.in_memory_key_value_store("cache", Some(&changelog))?;
    ///     cache.put(b"a", b"1")?;
    ///     task.commit(&[(changelog.clone(), 1)])?;
    ///     assert_eq!(cache.get(b"a")?, Some(b"1".to_vec()));
    /// }
    /// let task = TaskStore::open(dir.path(), StoreOptions::default())?;
    /// assert_eq!(task.committed_offset(&changelog), CommittedOffset::Unknown);
    /// assert_eq!(task.in_memory_key_value_store("cache", Some(&changelog))?.get(b"a")?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidStoreName`], [`StoreError::KindMismatch`] if
    /// `name` is an in-memory window store, [`StoreError::InvalidArgument`]
    /// if it is a store on disk.
    pub fn in_memory_key_value_store(
        &self,
        name: &str,
        changelog: Option<&crate::meta::ChangelogPartition>,
    ) -> Result<KeyValueStore> {
        self.register_in_memory(name, StoreKind::KeyValue, changelog)?;
        Ok(KeyValueStore {
            task: Arc::clone(&self.inner),
            name: Arc::from(name),
            path: Arc::new(self.inner.path.clone()),
        })
    }

    pub(crate) fn key_value_store_with_serdes(
        &self,
        name: &str,
        serdes: Option<(&str, &str)>,
    ) -> Result<KeyValueStore> {
        self.register(name, StoreKind::KeyValue, serdes)?;
        Ok(KeyValueStore {
            task: Arc::clone(&self.inner),
            name: Arc::from(name),
            path: Arc::new(self.inner.path.clone()),
        })
    }
}

impl KeyValueStore {
    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value of `key`, including this task's staged writes.
    ///
    /// # Errors
    ///
    /// [`StoreError::Engine`] if fjall fails to read.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        {
            let state = self.task.state();
            if let Some(staged) = state.store(&self.name)?.staged.kv.get(key) {
                return Ok(staged.clone());
            }
        }
        self.get_committed(key)
    }

    /// The committed value of `key`, without this task's staged writes:
    /// what a reader outside the task (an interactive query) may see. It
    /// never shows a write of a transaction that has not committed.
    ///
    /// ```
    /// use weir_store::{ChangelogPartition, StoreOptions, TaskStore};
    /// # fn main() -> Result<(), weir_store::StoreError> {
    /// # let dir = tempfile::tempdir().map_err(|e| weir_store::StoreError::InvalidArgument(e.to_string()))?;
    /// let task = TaskStore::open(dir.path(), StoreOptions::default())?;
    /// let counts = task.key_value_store("counts")?;
    /// counts.put(b"kafka", b"1")?;
    /// assert_eq!(counts.get_committed(b"kafka")?, None); // staged only
    /// task.commit(&[(ChangelogPartition::new("app-counts-changelog", 0), 1)])?;
    /// assert_eq!(counts.get_committed(b"kafka")?, Some(b"1".to_vec()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`StoreError::Engine`] if fjall fails to read.
    pub fn get_committed(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let state = self.task.state();
        let entry = state.store(&self.name)?;
        if let Some(memory) = &entry.memory {
            return Ok(memory.kv.get(key).cloned());
        }
        let keyspace = self.keyspace_of(entry)?;
        drop(state);
        let value = keyspace
            .get(key)
            .map_err(self.task.engine_err("reading a key"))?;
        Ok(value.map(|v| v.to_vec()))
    }

    /// Stages `key` = `value` until the task commits or aborts.
    ///
    /// # Errors
    ///
    /// [`StoreError::UnknownStore`] if the store vanished (never in practice).
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.stage(key, Some(value))
    }

    /// Stages the deletion of `key`.
    ///
    /// # Errors
    ///
    /// As [`KeyValueStore::put`].
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.stage(key, None)
    }

    fn stage(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        check_entry(&self.name, key, value)?;
        let mut state = self.task.state();
        let staged = &mut state.store_mut(&self.name)?.staged.kv;
        let value = value.map(<[u8]>::to_vec);
        // A key staged again (a count) keeps its key bytes: no copy.
        match staged.get_mut(key) {
            Some(slot) => *slot = value,
            None => {
                staged.insert(key.to_vec(), value);
            }
        }
        Ok(())
    }

    /// Entries with keys in `[from, to)` bounds, in key order, including staged writes.
    ///
    /// # Errors
    ///
    /// [`StoreError::UnknownStore`]; scanning errors are yielded by the iterator.
    pub fn range(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<MergedEntries> {
        self.range_of(from, to, true)
    }

    /// Committed entries with keys in `[from, to)` bounds, in key order,
    /// without this task's staged writes (see
    /// [`get_committed`](Self::get_committed)).
    ///
    /// # Errors
    ///
    /// As [`KeyValueStore::range`].
    pub fn range_committed(&self, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Result<MergedEntries> {
        self.range_of(from, to, false)
    }

    fn range_of(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        with_staged: bool,
    ) -> Result<MergedEntries> {
        if range_is_empty(from, to) {
            // BTreeMap::range panics on inverted bounds; an empty answer is right.
            return Ok(MergedEntries::new(Vec::new(), None, Arc::clone(&self.path)));
        }
        let from = from.map(<[u8]>::to_vec);
        let to = to.map(<[u8]>::to_vec);
        let state = self.task.state();
        let entry = state.store(&self.name)?;
        let staged: Vec<_> = if with_staged {
            entry
                .staged
                .kv
                .range::<Vec<u8>, _>((from.clone(), to.clone()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        } else {
            Vec::new()
        };
        // Taken under the state lock so no commit slips between the two views.
        let committed = match &entry.memory {
            Some(memory) => Committed::Memory(
                memory
                    .kv
                    .range::<Vec<u8>, _>((from, to))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
            None => self
                .keyspace_of(entry)?
                .range::<Vec<u8>, _>((from, to))
                .into(),
        };
        let committed = Some(committed);
        drop(state);
        Ok(MergedEntries::new(
            staged,
            committed,
            Arc::clone(&self.path),
        ))
    }

    /// Entries whose key starts with `prefix`, in key order.
    ///
    /// # Errors
    ///
    /// As [`KeyValueStore::range`].
    pub fn prefix(&self, prefix: &[u8]) -> Result<MergedEntries> {
        let end = prefix_end(prefix);
        let to = match &end {
            Some(end) => Bound::Excluded(end.as_slice()),
            None => Bound::Unbounded,
        };
        self.range(Bound::Included(prefix), to)
    }

    /// All entries in key order.
    ///
    /// # Errors
    ///
    /// As [`KeyValueStore::range`].
    pub fn iter(&self) -> Result<MergedEntries> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }

    /// An estimate of the number of keys: committed entries as fjall counts them
    /// (overwrites and deletes not yet compacted away make it inexact) plus staged puts.
    pub fn approximate_count(&self) -> u64 {
        let state = self.task.state();
        let Ok(entry) = state.store(&self.name) else {
            return 0;
        };
        let staged = entry.staged.kv.values().filter(|v| v.is_some()).count();
        let committed = match &entry.memory {
            Some(memory) => memory.kv.len() as u64,
            None => entry
                .keyspace
                .as_ref()
                .map_or(0, |ks| ks.approximate_len() as u64),
        };
        committed.saturating_add(staged as u64)
    }

    /// The store's keyspace, looked up each time: emptying a store (an
    /// interrupted bulk restore) replaces it with a new one.
    fn keyspace_of(&self, entry: &StoreEntry) -> Result<Keyspace> {
        entry
            .keyspace
            .clone()
            .ok_or_else(|| StoreError::UnknownStore(self.name.to_string()))
    }
}

/// Rejects what fjall would panic on (it asserts key and value sizes).
pub(crate) fn check_entry(store: &str, key: &[u8], value: Option<&[u8]>) -> Result<()> {
    let reason = if key.is_empty() {
        Some("empty keys cannot be stored".to_owned())
    } else if key.len() > usize::from(u16::MAX) {
        Some(format!("key of {} bytes exceeds 65535", key.len()))
    } else if value.is_some_and(|v| u32::try_from(v.len()).is_err()) {
        Some("value of 4 GiB or more".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidEntry {
            store: store.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

fn range_is_empty(from: Bound<&[u8]>, to: Bound<&[u8]>) -> bool {
    match (from, to) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
        _ => false,
    }
}

/// The smallest key greater than every key starting with `prefix`, if any.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_skips_trailing_max_bytes() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 255, 255]), Some(vec![2]));
        assert_eq!(prefix_end(&[255]), None);
        assert_eq!(prefix_end(b""), None);
    }
}
