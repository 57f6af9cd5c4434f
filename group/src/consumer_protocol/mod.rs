//! The consumer protocol: the subscription a member sends in JoinGroup and the
//! assignment the leader hands out through SyncGroup (protocol type
//! `"consumer"`), versions 0 to 3.
//!
//! | version | adds |
//! |---|---|
//! | 0 | topics, user data |
//! | 1 | owned partitions (KIP-429, cooperative rebalancing) |
//! | 2 | generation id, so the leader can tell stale ownership claims |
//! | 3 | rack id (KIP-881) |
//!
//! Each message starts with its int16 version. As in Java's
//! `ConsumerProtocol`, a version above 3 is decoded with the v3 layout (new
//! versions only append fields) and trailing bytes are ignored; fields a lower
//! version cannot carry are dropped on encode, since all are `ignorable` in
//! the Kafka schema.
//!
//! Weir decodes these bytes itself rather than through `kafka-protocol`:
//! that decoder reserves memory from array counts before checking that the
//! bytes exist, and these bytes come from other clients in the group.

mod assignment;
mod subscription;
mod wire;

pub use assignment::Assignment;
pub use subscription::Subscription;

/// The highest consumer-protocol version Weir encodes and decodes.
pub const CONSUMER_PROTOCOL_MAX_VERSION: i16 = 3;

/// The generation a subscription carries when the member has none (and what
/// versions below 2 decode to).
pub const NO_GENERATION: i32 = -1;

/// Partitions of one topic, the wire shape of owned and assigned partitions.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TopicPartitions {
    /// Topic name.
    pub topic: String,
    /// Partition indexes.
    pub partitions: Vec<i32>,
}

use crate::error::Result;
use wire::{Reader, Writer};

fn read_topic_partitions(r: &mut Reader<'_>, field: &'static str) -> Result<Vec<TopicPartitions>> {
    // topic (>= 2 bytes) + partitions count (4 bytes)
    let n = r.array_len(field, 6)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let topic = r.string("topic", false)?.unwrap_or_default();
        let count = r.array_len("partitions", 4)?;
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            partitions.push(r.i32("partition")?);
        }
        out.push(TopicPartitions { topic, partitions });
    }
    Ok(out)
}

fn write_topic_partitions(
    w: &mut Writer,
    field: &'static str,
    tps: &[TopicPartitions],
) -> Result<()> {
    w.array_len(field, tps.len())?;
    for tp in tps {
        w.string("topic", Some(&tp.topic))?;
        w.array_len("partitions", tp.partitions.len())?;
        for p in &tp.partitions {
            w.i32(*p);
        }
    }
    Ok(())
}
