//! Consumer-group membership and assignors.
//!
//! This crate holds the pure parts of Weir's group protocol:
//!
//! - [`consumer_protocol`]: the subscription and assignment encodings,
//!   versions 0 to 3, decoded with every count bounded by the bytes left;
//! - [`assignor`]: range, round-robin and cooperative-sticky partition
//!   assignors as pure functions;
//! - [`task_assignor`]: Kafka Streams' high-availability task assignor
//!   (KIP-441), with a follow-up rebalance as soon as a warmup catches up.

pub mod assignor;
pub mod consumer_protocol;
mod error;
pub mod task_assignor;

pub use error::{GroupError, Result};
