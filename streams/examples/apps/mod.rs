//! The example applications' topologies, shared by the example binaries,
//! the runtime tests and `weir demo`.

#![allow(dead_code)]
// The examples return weir-streams' own Result, as a user's code would.

pub mod dedup;
pub mod orders;
pub mod pageviews;
pub mod sessions;
pub mod wordcount;
