//! The deduplicator of the second user report: input key = command id,
//! value = payload; output key = command id, value `accepted` or
//! `duplicate`.
//!
//! ```text
//! input -> dedup: look the id up in the window store `seen`; if absent, put it
//!       -> execute: fail once per process on a payload holding the fail
//!          marker (as the report's validator threw); else write the verdict
//!       -> output
//! ```
//!
//! The put of `dedup` and the failure of `execute` are in one record: the
//! failure aborts the commit, and the put must never reach the store, or a
//! retried command would be rejected as its own duplicate.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::state::WindowStoreRef;
use weir_streams::{ProcessError, Record, Topology, TopologyBuilder};

/// The name of the window store of seen ids.
pub const STORE: &str = "seen";

/// The command ids this process has already failed on, shared by all its
/// tasks: each process fails once per marked command.
pub type FailedOnce = Arc<Mutex<HashSet<String>>>;

#[derive(Clone)]
struct Seen {
    payload: String,
    duplicate: bool,
}

struct Dedup {
    seen: WindowStoreRef<String, i64>,
    window_ms: i64,
}

impl Processor<String, String> for Dedup {
    type KOut = String;
    type VOut = Seen;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, Seen>,
        command: Record<String, String>,
    ) -> Result<(), ProcessError> {
        let seen = ctx.window_store(&self.seen)?;
        let from = command.timestamp.saturating_sub(self.window_ms);
        let duplicate = !seen
            .fetch(&command.key, from, command.timestamp)?
            .is_empty();
        if !duplicate {
            seen.put(&command.key, &command.timestamp, command.timestamp)?;
        }
        let timestamp = command.timestamp;
        ctx.forward(Record::new(
            command.key,
            Seen {
                payload: command.value,
                duplicate,
            },
            timestamp,
        ));
        Ok(())
    }
}

struct Execute {
    fail_marker: Option<String>,
    failed: FailedOnce,
}

impl Processor<String, Seen> for Execute {
    type KOut = String;
    type VOut = String;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        command: Record<String, Seen>,
    ) -> Result<(), ProcessError> {
        if !command.value.duplicate
            && let Some(marker) = &self.fail_marker
            && command.value.payload.contains(marker.as_str())
            && self
                .failed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(command.key.clone())
        {
            return Err(ProcessError::msg(format!(
                "command {}: validation failed on its payload",
                command.key
            )));
        }
        let verdict = if command.value.duplicate {
            "duplicate"
        } else {
            "accepted"
        };
        let timestamp = command.timestamp;
        ctx.forward(Record::new(command.key, verdict.to_owned(), timestamp));
        Ok(())
    }
}

/// The deduplicator from `input` to `output`, remembering ids for
/// `window`, failing once per process on payloads holding `fail_marker`.
///
/// # Errors
///
/// An invalid topology (which this one is not).
pub fn topology(
    input: &str,
    output: &str,
    window: Duration,
    fail_marker: Option<String>,
    failed: FailedOnce,
) -> weir_streams::Result<Topology> {
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    let mut b = TopologyBuilder::new();
    let seen = b.window_store::<String, i64>(STORE, window);
    let commands = b.source::<String, String>("commands", &[input]);
    let store = seen.clone();
    let checked = b.processor(
        "dedup",
        &[&commands],
        move || Dedup {
            seen: store.clone(),
            window_ms,
        },
        &[&seen],
    );
    let executed = b.processor(
        "execute",
        &[&checked],
        move || Execute {
            fail_marker: fail_marker.clone(),
            failed: failed.clone(),
        },
        &[],
    );
    b.sink("verdicts", &[&executed], output);
    b.build()
}
