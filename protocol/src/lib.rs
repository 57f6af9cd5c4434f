//! Kafka wire protocol for Weir.
//!
//! This crate does no I/O. It turns bytes into typed messages and back:
//!
//! - [`frame`]: the 4-byte length prefix, with a maximum frame size;
//! - [`api`]: request and response headers at the right header version,
//!   and the bodies of every API through the `kafka-protocol` crate;
//! - [`versions`]: ApiVersions negotiation;
//! - [`records`]: record batch v2, encoded and decoded by Weir itself so that
//!   every count and length read from the wire is bounded by the bytes left
//!   before anything is allocated.
//!
//! Errors are one enum, [`ProtocolError`]. `kafka-protocol`'s `anyhow` errors
//! never cross this crate's boundary.

pub mod api;
mod error;
pub mod frame;
pub mod records;
pub mod versions;

pub use error::{ProtocolError, Result};
/// The generated Kafka messages, re-exported so that users of Weir need only
/// one protocol dependency.
pub use kafka_protocol;
pub use kafka_protocol::messages::ApiKey;
