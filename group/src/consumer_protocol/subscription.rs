use bytes::Bytes;

use super::wire::{Reader, Writer};
use super::{
    CONSUMER_PROTOCOL_MAX_VERSION, NO_GENERATION, TopicPartitions, read_topic_partitions,
    write_topic_partitions,
};
use crate::error::{GroupError, Result};

const MESSAGE: &str = "ConsumerProtocolSubscription";

/// What a member sends as its protocol metadata in JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// Opaque assignor data (Weir's assignors use none; kept for foreign members).
    pub user_data: Option<Bytes>,
    /// Partitions the member owns now (v1+); the cooperative assignor keeps
    /// them where it can and never hands them to someone else in one round.
    pub owned_partitions: Vec<TopicPartitions>,
    /// Generation in which `owned_partitions` were assigned (v2+), or
    /// [`NO_GENERATION`].
    pub generation_id: i32,
    /// The member's rack (v3+).
    pub rack_id: Option<String>,
}

impl Default for Subscription {
    fn default() -> Self {
        Self {
            topics: Vec::new(),
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: NO_GENERATION,
            rack_id: None,
        }
    }
}

impl Subscription {
    /// Encodes the subscription at `version`, prefixed by that version.
    ///
    /// Fields the version cannot carry are dropped, as Java does.
    ///
    /// # Errors
    /// [`GroupError::UnsupportedVersion`] outside 0..=3, and
    /// [`GroupError::TooLarge`] for a string or array that does not fit the
    /// wire format.
    pub fn encode(&self, version: i16) -> Result<Bytes> {
        if !(0..=CONSUMER_PROTOCOL_MAX_VERSION).contains(&version) {
            return Err(GroupError::UnsupportedVersion {
                message: MESSAGE,
                version,
            });
        }
        let mut w = Writer::new(MESSAGE);
        w.i16(version);
        w.array_len("topics", self.topics.len())?;
        for t in &self.topics {
            w.string("topics", Some(t))?;
        }
        w.nullable_bytes("user_data", self.user_data.as_deref())?;
        if version >= 1 {
            write_topic_partitions(&mut w, "owned_partitions", &self.owned_partitions)?;
        }
        if version >= 2 {
            w.i32(self.generation_id);
        }
        if version >= 3 {
            w.string("rack_id", self.rack_id.as_deref())?;
        }
        Ok(w.finish())
    }

    /// Decodes a version-prefixed subscription, returning the version read
    /// and the subscription. Fields absent at that version take their
    /// defaults (no owned partitions, [`NO_GENERATION`], no rack).
    ///
    /// # Errors
    /// A typed error for truncated bytes, a negative version, an impossible
    /// count or invalid UTF-8; never a panic.
    pub fn decode(bytes: &[u8]) -> Result<(i16, Self)> {
        let mut r = Reader::new(MESSAGE, bytes);
        let version = r.i16("version")?;
        if version < 0 {
            return Err(GroupError::UnsupportedVersion {
                message: MESSAGE,
                version,
            });
        }
        let layout = version.min(CONSUMER_PROTOCOL_MAX_VERSION);
        let n = r.array_len("topics", 2)?;
        let mut topics = Vec::with_capacity(n);
        for _ in 0..n {
            topics.push(r.string("topics", false)?.unwrap_or_default());
        }
        let user_data = r.nullable_bytes("user_data")?;
        let mut sub = Subscription {
            topics,
            user_data,
            ..Subscription::default()
        };
        if layout >= 1 {
            sub.owned_partitions = read_topic_partitions(&mut r, "owned_partitions")?;
        }
        if layout >= 2 {
            sub.generation_id = r.i32("generation_id")?;
        }
        if layout >= 3 {
            sub.rack_id = r.string("rack_id", true)?;
        }
        Ok((version, sub))
    }
}
