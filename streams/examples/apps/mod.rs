//! The example applications' topologies, shared by the example binaries,
//! the runtime tests and `weir demo`.

#![allow(dead_code)]

pub mod dedup;
pub mod wordcount;
