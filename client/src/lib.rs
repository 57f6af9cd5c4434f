//! Async pure-Rust Kafka client.
//!
//! - [`connection`]: one TCP (or TLS) connection to one broker, multiplexing
//!   requests by correlation id ([`connection::Messenger`]), with SASL
//!   PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512;
//! - [`cluster`]: bootstrap, metadata, leader routing, per-broker connection
//!   lanes, retries and coordinator lookup ([`cluster::Cluster`]);
//! - [`admin`]: topics, configs, offsets, cluster and group descriptions;
//! - [`producer`] and [`consumer`]: records in and out;
//! - [`transaction`]: exactly-once transactions (KIP-98, KIP-447);
//! - [`config`]: typed builders and Kafka-named properties;
//! - [`kerror`]: Kafka's error codes as data.
//!
//! Every failure is a [`ClientError`] that names what it is about (broker,
//! API, topic, partition) and says whether retrying may help
//! ([`ClientError::is_retriable`]). Hostile or broken bytes from a broker are
//! typed errors that poison the one connection they arrived on; they never
//! panic and never size an allocation.
//!
//! ```no_run
//! use weir_client::admin::{Admin, NewTopic, OffsetSpec};
//! use weir_client::config::ClientConfig;
//!
//! # async fn example() -> weir_client::Result<()> {
//! let config = ClientConfig::from_properties(&[("bootstrap.servers", "127.0.0.1:9092")])?;
//! let admin = Admin::connect(config).await?;
//! admin
//!     .create_topic(NewTopic::new("orders", 6).config("cleanup.policy", "compact"))
//!     .await?;
//! for o in admin.list_topic_offsets("orders", OffsetSpec::Latest, false).await? {
//!     println!("orders-{}: {}", o.partition, o.offset);
//! }
//! # Ok(())
//! # }
//! ```

pub mod admin;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod consumer;
mod error;
#[cfg(test)]
mod fake_broker;
pub mod group_offsets;
pub mod kerror;
pub mod producer;
pub mod transaction;

pub use cluster::{BrokerId, Cluster, Lane};
pub use error::{ClientError, Result};
