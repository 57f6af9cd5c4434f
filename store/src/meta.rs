//! Keys and values of the metadata keyspace: the format marker, store
//! registrations, committed changelog offsets, window stream times and
//! interrupted-restore markers.
//!
//! All of it lives inside the same fjall database as the data, so a commit can
//! write data and offsets in one atomic batch.

use std::path::Path;

use crate::error::{Result, StoreError};

/// The metadata keyspace's name. Store keyspaces never start with `_`.
pub(crate) const META_KEYSPACE: &str = "_weir_meta";
/// The format marker key and the one value this build understands.
pub(crate) const FORMAT_KEY: &[u8] = b"format";
/// Format written and read by this build.
pub const FORMAT: &str = "weir-store/1";

const STORE_PREFIX: &[u8] = b"store/";
const OFFSET_PREFIX: &[u8] = b"offset/";
const STREAM_TIME_PREFIX: &[u8] = b"streamtime/";
const RESTORING_PREFIX: &[u8] = b"restoring/";

/// A changelog topic partition whose offset is committed with a task's stores.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChangelogPartition {
    /// The changelog topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
}

impl ChangelogPartition {
    /// A topic partition.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for ChangelogPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// What kind of store a name refers to; recorded when the store is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreKind {
    /// A key-value store.
    KeyValue,
    /// A segmented window store.
    Window {
        /// How long windows stay readable after stream time passes them, in ms.
        retention_ms: i64,
        /// Width of one segment in ms; retention drops whole segments.
        segment_ms: i64,
    },
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::KeyValue => write!(f, "key-value store"),
            Self::Window {
                retention_ms,
                segment_ms,
            } => write!(
                f,
                "window store (retention {retention_ms} ms, segments {segment_ms} ms)"
            ),
        }
    }
}

/// A store's recorded kind and the serdes of the typed layer, if one was used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// Key-value or window.
    pub kind: StoreKind,
    /// The key and value serde names, once the store was opened through the typed layer.
    pub serdes: Option<(String, String)>,
}

pub(crate) fn store_key(name: &str) -> Vec<u8> {
    [STORE_PREFIX, name.as_bytes()].concat()
}

pub(crate) fn offset_key(partition: &ChangelogPartition) -> Vec<u8> {
    let mut key = OFFSET_PREFIX.to_vec();
    key.extend_from_slice(&partition.partition.to_be_bytes());
    key.extend_from_slice(partition.topic.as_bytes());
    key
}

pub(crate) fn stream_time_key(store: &str) -> Vec<u8> {
    [STREAM_TIME_PREFIX, store.as_bytes()].concat()
}

pub(crate) fn restoring_key(store: &str) -> Vec<u8> {
    [RESTORING_PREFIX, store.as_bytes()].concat()
}

/// The value of a restore marker: the changelog partition being restored
/// (version 1, the partition as a big-endian i32, the topic). Markers written
/// before the partition was recorded are empty.
pub(crate) fn encode_restoring(partition: &ChangelogPartition) -> Vec<u8> {
    let mut out = vec![1u8];
    out.extend_from_slice(&partition.partition.to_be_bytes());
    out.extend_from_slice(partition.topic.as_bytes());
    out
}

fn decode_restoring(path: &Path, store: &str, bytes: &[u8]) -> Result<Option<ChangelogPartition>> {
    let what = format!("restore marker of store {store:?}");
    let Some((&version, rest)) = bytes.split_first() else {
        return Ok(None);
    };
    if version != 1 || rest.len() < 4 {
        return Err(StoreError::corrupt(
            path,
            format!("{what}: version {version}, {} bytes", rest.len()),
        ));
    }
    let (partition, topic) = rest.split_at(4);
    let mut p = [0u8; 4];
    p.copy_from_slice(partition);
    let topic = String::from_utf8(topic.to_vec())
        .map_err(|_| StoreError::corrupt(path, format!("{what}: topic not UTF-8")))?;
    Ok(Some(ChangelogPartition::new(topic, i32::from_be_bytes(p))))
}

pub(crate) fn encode_registration(reg: &Registration) -> Vec<u8> {
    let mut out = vec![1u8];
    match reg.kind {
        StoreKind::KeyValue => out.push(0),
        StoreKind::Window {
            retention_ms,
            segment_ms,
        } => {
            out.push(1);
            out.extend_from_slice(&retention_ms.to_be_bytes());
            out.extend_from_slice(&segment_ms.to_be_bytes());
        }
    }
    if let Some((k, v)) = &reg.serdes {
        for name in [k, v] {
            // Serde names are short constants; the length byte is checked on decode.
            out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
            out.extend_from_slice(&name.as_bytes()[..name.len().min(255)]);
        }
    }
    out
}

/// A cursor that turns truncated or malformed metadata into a typed error.
struct Reader<'a> {
    bytes: &'a [u8],
    path: &'a Path,
    what: &'a str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(StoreError::corrupt(
                self.path,
                format!(
                    "{} truncated: needed {n} more bytes, {} left",
                    self.what,
                    self.bytes.len()
                ),
            ));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?.first().copied().unwrap_or_default())
    }

    fn i64(&mut self) -> Result<i64> {
        let mut array = [0u8; 8];
        array.copy_from_slice(self.take(8)?);
        Ok(i64::from_be_bytes(array))
    }

    fn string(&mut self) -> Result<String> {
        let len = usize::from(self.u8()?);
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| {
            StoreError::corrupt(self.path, format!("{}: serde name not UTF-8", self.what))
        })
    }
}

pub(crate) fn decode_registration(path: &Path, store: &str, bytes: &[u8]) -> Result<Registration> {
    let what = format!("registration of store {store:?}");
    let mut r = Reader {
        bytes,
        path,
        what: &what,
    };
    let version = r.u8()?;
    if version != 1 {
        return Err(StoreError::corrupt(
            path,
            format!("{what}: unknown version {version}"),
        ));
    }
    let kind = match r.u8()? {
        0 => StoreKind::KeyValue,
        1 => {
            let (retention_ms, segment_ms) = (r.i64()?, r.i64()?);
            // `window_store` refuses durations under 1 ms, and the segment
            // interval divides window starts: anything else is corruption.
            if retention_ms <= 0 || segment_ms <= 0 {
                return Err(StoreError::corrupt(
                    path,
                    format!("{what}: retention {retention_ms} ms, segment {segment_ms} ms"),
                ));
            }
            StoreKind::Window {
                retention_ms,
                segment_ms,
            }
        }
        other => {
            return Err(StoreError::corrupt(
                path,
                format!("{what}: unknown kind {other}"),
            ));
        }
    };
    let serdes = if r.bytes.is_empty() {
        None
    } else {
        Some((r.string()?, r.string()?))
    };
    if !r.bytes.is_empty() {
        return Err(StoreError::corrupt(path, format!("{what}: trailing bytes")));
    }
    Ok(Registration { kind, serdes })
}

pub(crate) fn decode_i64(path: &Path, what: &str, bytes: &[u8]) -> Result<i64> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| {
        StoreError::corrupt(
            path,
            format!("{what}: expected 8 bytes, got {}", bytes.len()),
        )
    })?;
    Ok(i64::from_be_bytes(array))
}

/// One decoded metadata entry.
pub(crate) enum MetaEntry {
    Format(Vec<u8>),
    Store(String, Registration),
    Offset(ChangelogPartition, i64),
    StreamTime(String, i64),
    /// A store with an unfinished bulk restore, and the partition it was
    /// restoring from (unknown for markers of older builds).
    Restoring(String, Option<ChangelogPartition>),
}

pub(crate) fn decode_entry(path: &Path, key: &[u8], value: &[u8]) -> Result<MetaEntry> {
    let utf8 = |bytes: &[u8]| {
        String::from_utf8(bytes.to_vec())
            .map_err(|_| StoreError::corrupt(path, format!("metadata key {key:?} is not UTF-8")))
    };
    if key == FORMAT_KEY {
        Ok(MetaEntry::Format(value.to_vec()))
    } else if let Some(name) = key.strip_prefix(STORE_PREFIX) {
        let name = utf8(name)?;
        let reg = decode_registration(path, &name, value)?;
        Ok(MetaEntry::Store(name, reg))
    } else if let Some(rest) = key.strip_prefix(OFFSET_PREFIX) {
        if rest.len() < 4 {
            return Err(StoreError::corrupt(path, "offset key truncated"));
        }
        let (partition, topic) = rest.split_at(4);
        let mut p = [0u8; 4];
        p.copy_from_slice(partition);
        let tp = ChangelogPartition::new(utf8(topic)?, i32::from_be_bytes(p));
        let offset = decode_i64(path, "changelog offset", value)?;
        Ok(MetaEntry::Offset(tp, offset))
    } else if let Some(name) = key.strip_prefix(STREAM_TIME_PREFIX) {
        Ok(MetaEntry::StreamTime(
            utf8(name)?,
            decode_i64(path, "stream time", value)?,
        ))
    } else if let Some(name) = key.strip_prefix(RESTORING_PREFIX) {
        let name = utf8(name)?;
        let partition = decode_restoring(path, &name, value)?;
        Ok(MetaEntry::Restoring(name, partition))
    } else {
        Err(StoreError::corrupt(
            path,
            format!("unknown metadata key {key:?}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_round_trip_and_truncation_is_an_error() {
        let path = Path::new("/t");
        for reg in [
            Registration {
                kind: StoreKind::KeyValue,
                serdes: None,
            },
            Registration {
                kind: StoreKind::Window {
                    retention_ms: 86_400_000,
                    segment_ms: 3_600_000,
                },
                serdes: Some(("utf8".into(), "i64-ordered".into())),
            },
        ] {
            let bytes = encode_registration(&reg);
            assert_eq!(decode_registration(path, "s", &bytes).unwrap(), reg);
            for cut in 0..bytes.len() {
                let r = decode_registration(path, "s", &bytes[..cut]);
                // A cut exactly before the serde names is a valid registration without serdes.
                if let Ok(decoded) = r {
                    assert_eq!(decoded.serdes, None);
                    assert_eq!(decoded.kind, reg.kind);
                }
            }
        }
        assert!(matches!(
            decode_entry(path, b"offset/\x00", &[0; 8]),
            Err(StoreError::CorruptMetadata { .. })
        ));
        let tp = ChangelogPartition::new("app-kv-changelog", 7);
        match decode_entry(path, &restoring_key("kv"), &encode_restoring(&tp)) {
            Ok(MetaEntry::Restoring(name, Some(p))) => assert_eq!((name.as_str(), p), ("kv", tp)),
            _ => panic!("restore marker does not round-trip"),
        }
        assert!(matches!(
            decode_entry(path, &restoring_key("kv"), b""),
            Ok(MetaEntry::Restoring(_, None))
        ));
        assert!(matches!(
            decode_entry(path, &restoring_key("kv"), &[1, 0, 0]),
            Err(StoreError::CorruptMetadata { .. })
        ));
        assert!(matches!(
            decode_entry(path, b"nonsense", b""),
            Err(StoreError::CorruptMetadata { .. })
        ));
    }
}
