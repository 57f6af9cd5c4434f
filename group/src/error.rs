/// The result type of this crate.
pub type Result<T, E = GroupError> = std::result::Result<T, E>;

/// Everything that can go wrong in `weir-group`.
///
/// Decoding errors carry the byte offset and the field being read, so a bad
/// subscription from a foreign client can be diagnosed from the log alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// The bytes ended before a field was complete.
    #[error(
        "{message}: truncated while reading {field} at byte {offset} (need {needed} more bytes, {left} left)"
    )]
    Truncated {
        /// Which consumer-protocol message was being decoded.
        message: &'static str,
        /// The field being read.
        field: &'static str,
        /// Byte offset of the field.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        left: usize,
    },
    /// A length or count is negative where that is not allowed, or larger than
    /// the bytes left could possibly hold.
    #[error("{message}: invalid count {count} for {field} at byte {offset} ({left} bytes left)")]
    InvalidCount {
        /// Which consumer-protocol message was being decoded.
        message: &'static str,
        /// The field being read.
        field: &'static str,
        /// Byte offset of the count.
        offset: usize,
        /// The count read from the wire.
        count: i64,
        /// Bytes that were left.
        left: usize,
    },
    /// A string is not valid UTF-8.
    #[error("{message}: {field} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Which consumer-protocol message was being decoded.
        message: &'static str,
        /// The field being read.
        field: &'static str,
        /// Byte offset of the string's bytes.
        offset: usize,
    },
    /// A version Weir cannot encode or decode.
    #[error("{message} version {version} is not supported (0..=3)")]
    UnsupportedVersion {
        /// Which consumer-protocol message.
        message: &'static str,
        /// The version asked for or read.
        version: i16,
    },
    /// A value does not fit the wire format (a string longer than 32767 bytes,
    /// more than `i32::MAX` elements).
    #[error("{message}: {field} is too large to encode ({len})")]
    TooLarge {
        /// Which consumer-protocol message.
        message: &'static str,
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// An assignor was given a configuration it cannot work with.
    #[error("invalid assignor configuration: {0}")]
    InvalidConfig(String),
    /// A request to the cluster failed (connection, timeout, or a server
    /// error outside the group protocol), with what was being done.
    #[error("{context}: {message}")]
    Client {
        /// What the member was doing, e.g. `OffsetCommit for group g`.
        context: String,
        /// The client error, rendered.
        message: String,
        /// The Kafka error code, for server errors.
        code: Option<i16>,
        /// Whether trying again may help.
        retriable: bool,
    },
    /// An assigned partition has no committed offset and
    /// `auto.offset.reset` is `none` (Java's `NoOffsetForPartitionException`):
    /// [`seek`](crate::group_consumer::GroupConsumer::seek) it, then poll
    /// again.
    #[error(
        "group {group}: {topic}-{partition} has no committed offset and auto.offset.reset is none"
    )]
    NoOffsetForPartition {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// The group coordinator answered a group request with an error code.
    #[error("{api} for group {group}: {name} ({code})")]
    Coordinator {
        /// The API, e.g. `OffsetCommit`.
        api: &'static str,
        /// The group.
        group: String,
        /// The Kafka error code.
        code: i16,
        /// Kafka's name for the code.
        name: &'static str,
    },
    /// Another member joined with this member's `group.instance.id`
    /// (FENCED_INSTANCE_ID): this member must stop for good.
    #[error("group {group}: group.instance.id {instance_id} was taken over by another member")]
    FencedInstance {
        /// The group.
        group: String,
        /// The instance id.
        instance_id: String,
    },
    /// The member has no generation right now (before its first join,
    /// after it was dropped, or after it left on `max.poll.interval.ms`
    /// and before it rejoined): it owns nothing, and it has no group
    /// metadata a commit could carry.
    #[error(
        "group {group}: the member has no generation (member id {member_id:?}); it owns no partitions and cannot commit"
    )]
    NoGeneration {
        /// The group.
        group: String,
        /// The member id it still has (empty after UNKNOWN_MEMBER_ID).
        member_id: String,
    },
    /// A partition named in a commit, pause or resume is not one the
    /// member owns now: a commit for it could overwrite what its owner
    /// committed.
    #[error("group {group}: {topic}-{partition} is not assigned to this member")]
    NotOwned {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// The membership has ended (closed, fenced or failed) and cannot serve
    /// the request.
    #[error("group {group}: the member has stopped")]
    MemberStopped {
        /// The group.
        group: String,
    },
}
