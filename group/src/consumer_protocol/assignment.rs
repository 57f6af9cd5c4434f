use bytes::Bytes;

use super::wire::{Reader, Writer};
use super::{
    CONSUMER_PROTOCOL_MAX_VERSION, TopicPartitions, read_topic_partitions, write_topic_partitions,
};
use crate::error::{GroupError, Result};

const MESSAGE: &str = "ConsumerProtocolAssignment";

/// What the leader hands each member through SyncGroup.
///
/// The layout is the same at every version 0..=3; the version only tells the
/// member which subscription fields the leader understood.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// Partitions assigned to the member.
    pub assigned_partitions: Vec<TopicPartitions>,
    /// Opaque assignor data.
    pub user_data: Option<Bytes>,
}

impl Assignment {
    /// Encodes the assignment at `version`, prefixed by that version.
    ///
    /// # Errors
    /// [`GroupError::UnsupportedVersion`] outside 0..=3, and
    /// [`GroupError::TooLarge`] for a string or array that does not fit.
    pub fn encode(&self, version: i16) -> Result<Bytes> {
        if !(0..=CONSUMER_PROTOCOL_MAX_VERSION).contains(&version) {
            return Err(GroupError::UnsupportedVersion {
                message: MESSAGE,
                version,
            });
        }
        let mut w = Writer::new(MESSAGE);
        w.i16(version);
        write_topic_partitions(&mut w, "assigned_partitions", &self.assigned_partitions)?;
        w.nullable_bytes("user_data", self.user_data.as_deref())?;
        Ok(w.finish())
    }

    /// Decodes a version-prefixed assignment, returning the version read and
    /// the assignment.
    ///
    /// An empty byte string decodes to an empty assignment: the coordinator
    /// sends one to a member the leader left out, and librdkafka treats it
    /// the same way.
    ///
    /// # Errors
    /// A typed error for truncated bytes, a negative version, an impossible
    /// count or invalid UTF-8; never a panic.
    pub fn decode(bytes: &[u8]) -> Result<(i16, Self)> {
        if bytes.is_empty() {
            return Ok((0, Self::default()));
        }
        let mut r = Reader::new(MESSAGE, bytes);
        let version = r.i16("version")?;
        if version < 0 {
            return Err(GroupError::UnsupportedVersion {
                message: MESSAGE,
                version,
            });
        }
        let assigned_partitions = read_topic_partitions(&mut r, "assigned_partitions")?;
        let user_data = r.nullable_bytes("user_data")?;
        Ok((
            version,
            Self {
                assigned_partitions,
                user_data,
            },
        ))
    }
}
