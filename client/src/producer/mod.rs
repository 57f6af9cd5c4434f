//! The producer: records in, offsets out.

pub mod accumulator;
pub mod partitioner;
mod record;
pub mod sequence;

pub use record::{ProducerRecord, RecordMetadata, TopicPartition};
