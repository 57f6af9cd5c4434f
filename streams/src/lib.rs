//! Weir's stream-processing runtime.
//!
//! Not implemented yet: this crate reserves the name and its place in the
//! dependency graph (client ← group ← streams, store ← streams). Nothing here
//! works yet; see the README's status table.
