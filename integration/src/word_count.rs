//! A one-stage stateful word count over weir-streams: each input record's
//! key is a word, a persistent key-value store `counts` keeps each word's
//! count, and every input gives one output record (the word, its new count
//! as a decimal string, the input's timestamp). The throughput bench, the
//! soak and the suite on a real broker all run this app, so their figures
//! are about the same work.
//!
//! ```
//! let topology = weir_integration::word_count::topology("words", "counts-out").unwrap();
//! assert!(topology.describe().to_string().contains("counts"));
//! ```

use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::state::KvStoreRef;
use weir_streams::{ProcessError, Record, Topology, TopologyBuilder};

/// Counts each word (the record key) in the store it holds.
#[derive(Debug)]
pub struct Count(pub KvStoreRef<String, u64>);

impl Processor<String, ()> for Count {
    type KOut = String;
    type VOut = String;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        word: Record<String, ()>,
    ) -> Result<(), ProcessError> {
        let counts = ctx.kv_store(&self.0)?;
        let n = counts.get(&word.key)?.unwrap_or(0) + 1;
        counts.put(&word.key, &n, word.timestamp)?;
        ctx.forward(Record::new(word.key, n.to_string(), word.timestamp));
        Ok(())
    }
}

/// `input` → count (store `counts`) → `output`.
///
/// # Errors
/// The topology's validation errors (none for valid topic names).
pub fn topology(input: &str, output: &str) -> weir_streams::Result<Topology> {
    build(input, output, false)
}

/// [`topology`] with caching on for the store
/// ([`TopologyBuilder::with_caching`]): the same outputs, one changelog
/// record per word per commit instead of one per input.
///
/// ```
/// let topology = weir_integration::word_count::topology_cached("words", "counts-out").unwrap();
/// assert!(topology.stores().all(|s| s.caching));
/// ```
///
/// # Errors
/// As [`topology`].
pub fn topology_cached(input: &str, output: &str) -> weir_streams::Result<Topology> {
    build(input, output, true)
}

fn build(input: &str, output: &str, caching: bool) -> weir_streams::Result<Topology> {
    let mut b = TopologyBuilder::new();
    let counts = b.kv_store::<String, u64>("counts");
    if caching {
        b.with_caching("counts");
    }
    let words = b.source::<String, ()>("words", &[input]);
    let store = counts.clone();
    let counted = b.processor("count", &[&words], move || Count(store.clone()), &[&counts]);
    b.sink("out", &[&counted], output);
    b.build()
}
