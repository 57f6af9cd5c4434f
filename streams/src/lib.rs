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

/// The Rust examples of the top-level README and of the user guide
/// (`docs/guide`), compiled as doc tests so that they cannot drift from the
/// API. Built only by `cargo test --doc`.
#[cfg(doctest)]
mod doc_examples {
    #[doc = include_str!("../../README.md")]
    struct Readme;
    #[doc = include_str!("../../docs/guide/src/producer-consumer.md")]
    struct GuideProducerConsumer;
    #[doc = include_str!("../../docs/guide/src/groups.md")]
    struct GuideGroups;
    #[doc = include_str!("../../docs/guide/src/transactions.md")]
    struct GuideTransactions;
    #[doc = include_str!("../../docs/guide/src/streams.md")]
    struct GuideStreams;
    #[doc = include_str!("../../docs/guide/src/state-stores.md")]
    struct GuideStateStores;
    #[doc = include_str!("../../docs/guide/src/testing.md")]
    struct GuideTesting;
    #[doc = include_str!("../../docs/guide/src/operations/logs.md")]
    struct GuideLogs;
}
