//! The record cache of DSL tables (Kafka Streams' `cache.max.bytes.buffering`
//! with caching enabled on a store): a table's updates are held back and
//! only the latest per key is forwarded, at the next commit or once the
//! cache outgrows its budget.

use std::collections::HashMap;

use crate::processor::ProcessorContext;
use crate::record::Record;
use crate::serde::Serde;

/// The latest update per key, in the order keys were first written.
pub(crate) struct RecordCache<K, V> {
    slots: Vec<Record<K, Option<V>>>,
    index: HashMap<Vec<u8>, usize>,
    bytes: u64,
}

impl<K, V> Default for RecordCache<K, V> {
    fn default() -> Self {
        RecordCache {
            slots: Vec::new(),
            index: HashMap::new(),
            bytes: 0,
        }
    }
}

impl<K: Serde + Clone, V: Serde + Clone> RecordCache<K, V> {
    /// Holds `record` back (replacing an earlier update of its key); when the
    /// cache then holds more than the budget, forwards everything at once.
    pub(crate) fn put(
        &mut self,
        ctx: &mut ProcessorContext<'_, K, Option<V>>,
        record: Record<K, Option<V>>,
    ) {
        let key = record.key.serialize().unwrap_or_default();
        let size = key.len() as u64
            + record
                .value
                .as_ref()
                .and_then(Serde::serialize)
                .map_or(0, |v| v.len() as u64);
        match self.index.get(&key) {
            Some(&i) => {
                if let Some(slot) = self.slots.get_mut(i) {
                    *slot = record;
                }
            }
            None => {
                self.index.insert(key, self.slots.len());
                self.slots.push(record);
            }
        }
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes > ctx.cache_max_bytes() {
            self.flush(ctx);
        }
    }

    /// Forwards every held-back update and empties the cache.
    pub(crate) fn flush(&mut self, ctx: &mut ProcessorContext<'_, K, Option<V>>) {
        self.index.clear();
        self.bytes = 0;
        for record in self.slots.drain(..) {
            ctx.forward(record);
        }
    }
}
