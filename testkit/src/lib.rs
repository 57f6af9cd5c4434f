//! In-process Kafka cluster for tests.

pub mod coordinator;
