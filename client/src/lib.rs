//! Async pure-Rust Kafka client.
//!
//! - [`connection`]: one TCP (or TLS) connection to one broker, multiplexing
//!   requests by correlation id ([`connection::Messenger`]);
//! - [`cluster`]: bootstrap, metadata, leader routing, per-broker connection
//!   lanes, retries and coordinator lookup ([`cluster::Cluster`]);
//! - [`admin`]: topics, configs, offsets, cluster and group descriptions;
//! - [`producer`] and [`consumer`]: records in and out;
//! - [`config`]: typed builders and Kafka-named properties;
//! - [`kerror`]: Kafka's error codes as data.

pub mod admin;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod consumer;
mod error;
#[cfg(test)]
mod fake_broker;
pub mod kerror;
pub mod producer;

pub use cluster::{BrokerId, Cluster, Lane};
pub use error::{ClientError, Result};
