//! Weir's stream-processing runtime: the job of Kafka Streams, in Rust.
//!
//! A [`Topology`] of sources, processors and sinks (built with
//! [`TopologyBuilder`], Kafka Streams' Processor API) is split into
//! subtopologies; each subtopology runs as one [`task::StreamTask`] per input
//! partition, with its own weir-store stores and their changelogs.
//!
//! - [`serde`]: Kafka-compatible record encodings.
//! - [`processor`]: the [`processor::Processor`] trait and its contexts.
//! - [`state`]: typed store handles that stage writes and log them.
//! - [`dsl`]: streams, tables, aggregations, windows and joins ([`dsl::StreamsBuilder`]).
//! - [`testing`]: [`testing::TopologyTestDriver`], to test a topology with no broker.

pub mod assignor_info;
pub mod config;
pub mod dsl;
pub mod error;
pub mod processor;
pub mod record;
pub mod runtime;
pub mod serde;
pub mod state;
pub mod task;
pub mod testing;
pub mod topology;

pub use config::StreamsConfig;
pub use error::{ProcessError, Result, SerdeError, StreamsError};
pub use record::Record;
pub use runtime::{KafkaStreams, QueryableKvStore, QueryableWindowStore, State};
pub use topology::{Topology, TopologyBuilder};
