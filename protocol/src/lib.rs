//! Kafka wire protocol for Weir.
