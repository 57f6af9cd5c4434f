//! Async pure-Rust Kafka client.
