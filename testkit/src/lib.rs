//! In-process Kafka cluster for tests.
