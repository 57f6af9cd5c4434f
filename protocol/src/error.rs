use kafka_protocol::messages::ApiKey;

/// The result type of this crate.
pub type Result<T, E = ProtocolError> = std::result::Result<T, E>;

/// Everything that can go wrong while turning bytes into Kafka messages and back.
///
/// Every variant that comes from bytes read off the network is recoverable by the
/// caller: decoding never panics and never allocates from an unchecked count.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A frame's length prefix is larger than the configured maximum.
    #[error("frame of {size} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The length the peer announced.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// The peer answered in another protocol: its first bytes, read as a
    /// length prefix, spell the start of an HTTP or TLS message (an HTTP
    /// server's `HTTP/1.1 400` reads as a frame of 1213486160 bytes).
    #[error("this endpoint does not speak the Kafka protocol (it answered like {protocol}){hint}")]
    ForeignProtocol {
        /// The protocol the answer looks like: `HTTP` or `TLS`.
        protocol: &'static str,
        /// What to check, starting with `; `, or empty.
        hint: &'static str,
    },
    /// A frame's length prefix is negative.
    #[error("negative frame length {0}")]
    NegativeFrameLength(i32),
    /// The peer and Weir share no version of an API.
    #[error(
        "no common version of {api:?}: ours {ours_min}..={ours_max}, broker's {theirs_min}..={theirs_max}"
    )]
    NoCommonVersion {
        /// The API.
        api: ApiKey,
        /// Lowest version Weir speaks.
        ours_min: i16,
        /// Highest version Weir speaks.
        ours_max: i16,
        /// Lowest version the broker speaks.
        theirs_min: i16,
        /// Highest version the broker speaks.
        theirs_max: i16,
    },
    /// The broker does not support an API at all.
    #[error("the broker does not support {api:?}")]
    UnsupportedApi {
        /// The API.
        api: ApiKey,
    },
    /// A version of an API that Weir cannot encode or decode.
    #[error("{api:?} v{version} is not supported")]
    UnsupportedVersion {
        /// The API.
        api: ApiKey,
        /// The version asked for.
        version: i16,
    },
    /// An API key that this crate does not know.
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    /// A message could not be encoded.
    #[error("encoding {api:?} v{version}: {message}")]
    Encode {
        /// The API.
        api: ApiKey,
        /// The version being encoded.
        version: i16,
        /// What went wrong.
        message: String,
    },
    /// A message could not be decoded.
    #[error("decoding {api:?} v{version}: {message}")]
    Decode {
        /// The API.
        api: ApiKey,
        /// The version being decoded.
        version: i16,
        /// What went wrong.
        message: String,
    },
    /// A message had bytes left over after decoding.
    #[error("decoding {api:?} v{version}: {left} trailing bytes")]
    TrailingBytes {
        /// The API.
        api: ApiKey,
        /// The version being decoded.
        version: i16,
        /// How many bytes were left.
        left: usize,
    },
    /// Input ended before a structure was complete.
    #[error("truncated {what}: needed {needed} bytes, {available} available")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// A count or length read from the wire is impossible given the bytes left.
    #[error("{what} of {count} is more than the {available} bytes left could hold")]
    CountOutOfBounds {
        /// What was being counted.
        what: &'static str,
        /// The count read.
        count: i64,
        /// Bytes left.
        available: usize,
    },
    /// A record batch's CRC-32C does not match its contents.
    #[error(
        "record batch at offset {base_offset}: CRC-32C mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    CrcMismatch {
        /// The batch's base offset.
        base_offset: i64,
        /// The CRC in the batch header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// A record batch with a magic byte other than 2.
    #[error("record batch at offset {base_offset}: unsupported magic {magic}")]
    UnsupportedMagic {
        /// The batch's base offset.
        base_offset: i64,
        /// The magic byte.
        magic: i8,
    },
    /// A malformed record batch or record.
    #[error("record batch at offset {base_offset}: {message}")]
    InvalidBatch {
        /// The batch's base offset.
        base_offset: i64,
        /// What is wrong.
        message: String,
    },
    /// The batches of one response together decompress to more than the
    /// budget the caller gave (see
    /// [`DecompressionBudget`](crate::records::DecompressionBudget)): many
    /// small "bombs" in one response.
    #[error(
        "record batch at offset {base_offset}: decoding the response (decompressed bytes and \
         records) exceeds its budget of {limit} bytes ({used} bytes used before this batch)"
    )]
    DecompressionBudgetExceeded {
        /// The base offset of the batch that went over.
        base_offset: i64,
        /// The budget.
        limit: usize,
        /// Bytes the earlier batches took.
        used: usize,
    },
    /// Compressing or decompressing failed.
    #[error("{codec} {op} failed: {message}")]
    Compression {
        /// The codec.
        codec: &'static str,
        /// "compress" or "decompress".
        op: &'static str,
        /// What went wrong.
        message: String,
    },
}
