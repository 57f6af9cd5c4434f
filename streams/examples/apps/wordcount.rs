//! The word count: text lines in, one `(word, count)` record out per word.
//!
//! ```text
//! input (value = a line)
//!   -> split: lowercase words, keyed by the word
//!   -> <application.id>-by-word-repartition (so one task owns each word)
//!   -> count: a persistent key-value store `counts` with a changelog
//!   -> output (key = word, value = its new count as a decimal string)
//! ```

use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::state::KvStoreRef;
use weir_streams::{ProcessError, Record, Topology, TopologyBuilder};

/// The name of the counts store (its changelog is
/// `<application.id>-counts-changelog`).
pub const STORE: &str = "counts";

struct Split;

impl Processor<(), String> for Split {
    type KOut = String;
    type VOut = ();

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, ()>,
        line: Record<(), String>,
    ) -> Result<(), ProcessError> {
        for word in line.value.split_whitespace() {
            ctx.forward(Record::new(word.to_lowercase(), (), line.timestamp));
        }
        Ok(())
    }
}

struct Count(KvStoreRef<String, u64>);

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

/// The word count from `input` to `output`.
///
/// # Errors
///
/// An invalid topology (which this one is not).
pub fn topology(input: &str, output: &str) -> weir_streams::Result<Topology> {
    let mut b = TopologyBuilder::new();
    let counts = b.kv_store::<String, u64>(STORE);
    let lines = b.source::<(), String>("lines", &[input]);
    let words = b.processor("split", &[&lines], || Split, &[]);
    let by_word = b.repartition("by-word", &[&words], None);
    let store = counts.clone();
    let counted = b.processor(
        "count",
        &[&by_word],
        move || Count(store.clone()),
        &[&counts],
    );
    b.sink("counts-out", &[&counted], output);
    b.build()
}
