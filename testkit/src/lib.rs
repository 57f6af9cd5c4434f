//! In-process Kafka cluster for tests: the real wire protocol, exact group
//! and transaction semantics, and fault injection.
//!
//! ```no_run
//! # async fn example() -> weir_testkit::Result<()> {
//! use weir_testkit::{Cluster, Intercept, InterceptAction, RequestMatcher};
//! use weir_protocol::ApiKey;
//!
//! let cluster = Cluster::builder().brokers(3).build().await?;
//! cluster.create_topic("events", 3, [("cleanup.policy", "delete")]).await?;
//! // Every client connects with bootstrap.servers = cluster.bootstrap().
//! // Fail the next Produce with NOT_LEADER_OR_FOLLOWER (6):
//! cluster
//!     .intercept(Intercept::new(RequestMatcher::api(ApiKey::Produce), InterceptAction::Error(6)).times(1))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Architecture: every connection (TCP or in-memory duplex) decodes frames
//! and sends requests to one state task, which owns all cluster state
//! ([`ClusterState`]) and handles requests one at a time in arrival order,
//! so runs are deterministic. Time comes from tokio's clock: with
//! `tokio::time::pause()` every timeout is exact.

pub mod cluster;
pub mod coordinator;
mod error;
pub mod faults;
/// Fuzzing entry point for `fuzz/` at the repository root; not part of the supported API.
#[doc(hidden)]
pub mod fuzzing;
pub mod handlers;
pub mod log;
mod server;

pub use cluster::DataOnRestart;
pub use cluster::{Cluster, ClusterBuilder, ClusterConfig, ClusterState};
pub use error::{Result, TestkitError};
pub use faults::{
    ClientSelector, FaultId, Intercept, InterceptAction, LoggedRequest, PartitionTarget,
    RequestMatcher,
};
pub use log::compaction::CompactionStats;

/// The README's examples, compiled as doctests so that they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
