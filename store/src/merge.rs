//! Merging a task's staged writes over the committed contents of a keyspace,
//! so that range reads see the task's own uncommitted writes.

use std::cmp::Ordering;
use std::iter::Peekable;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Result, StoreError};

/// A staged write: the key and its new value, `None` for a delete.
pub(crate) type StagedEntry = (Vec<u8>, Option<Vec<u8>>);

/// Where the committed entries of a merged read come from.
pub(crate) enum Committed {
    /// A fjall scan.
    Fjall(fjall::Iter),
    /// A copy of an in-memory store's entries in the range.
    Memory(std::vec::IntoIter<(Vec<u8>, Vec<u8>)>),
}

impl From<fjall::Iter> for Committed {
    fn from(iter: fjall::Iter) -> Self {
        Self::Fjall(iter)
    }
}

/// Committed entries (from fjall or memory) overlaid with staged ones, in key order.
/// Staged entries win over committed ones with the same key; staged deletes hide them.
pub struct MergedEntries {
    staged: Peekable<std::vec::IntoIter<StagedEntry>>,
    committed: Option<Committed>,
    head: Option<(Vec<u8>, Vec<u8>)>,
    path: Arc<PathBuf>,
    failed: bool,
}

impl std::fmt::Debug for MergedEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergedEntries")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl MergedEntries {
    pub(crate) fn new(
        staged: Vec<StagedEntry>,
        committed: Option<Committed>,
        path: Arc<PathBuf>,
    ) -> Self {
        Self {
            staged: staged.into_iter().peekable(),
            committed,
            head: None,
            path,
            failed: false,
        }
    }
}

impl Iterator for MergedEntries {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if self.head.is_none() {
                let next = match self.committed.as_mut() {
                    None => None,
                    Some(Committed::Memory(entries)) => entries.next().map(Ok),
                    Some(Committed::Fjall(iter)) => iter
                        .next()
                        .map(|g| g.into_inner().map(|(k, v)| (k.to_vec(), v.to_vec()))),
                };
                match next {
                    None => {}
                    Some(Ok(entry)) => self.head = Some(entry),
                    Some(Err(e)) => {
                        self.failed = true;
                        return Some(Err(StoreError::engine(self.path.as_ref(), "scanning", e)));
                    }
                }
            }
            let order = match (self.staged.peek(), &self.head) {
                (None, None) => return None,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some((sk, _)), Some((ck, _))) => sk.cmp(ck),
            };
            match order {
                Ordering::Greater => return self.head.take().map(Ok),
                Ordering::Equal | Ordering::Less => {
                    if order == Ordering::Equal {
                        // The staged write replaces (or deletes) the committed entry.
                        self.head = None;
                    }
                    if let Some((k, Some(v))) = self.staged.next() {
                        return Some(Ok((k, v)));
                    }
                }
            }
        }
    }
}
