//! The record encoding shared by restore batches, buckets and spill files.
//!
//! Record format:
//! `kind: u8` (0 tombstone, 1 put), `key_len: u16 LE`, `value_len: u32 LE`,
//! then the key and the value. The format never leaves the process (spill
//! files are deleted when a restore ends or at the next open), but decoding is
//! still checked, so a damaged temporary file gives an error, not a panic.

/// Bytes before the key of an encoded record.
pub(crate) const HEADER_LEN: usize = 7;
const TOMBSTONE: u8 = 0;
const PUT: u8 = 1;

/// The header of a record, and its key and value cut to the lengths the
/// header gives (callers have checked the sizes, see `kv::check_entry`).
fn header<'a>(key: &'a [u8], value: Option<&'a [u8]>) -> ([u8; HEADER_LEN], &'a [u8], &'a [u8]) {
    let key_len = u16::try_from(key.len()).unwrap_or(u16::MAX);
    let (kind, value) = match value {
        Some(v) => (PUT, v),
        None => (TOMBSTONE, &[][..]),
    };
    let value_len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    let [k0, k1] = key_len.to_le_bytes();
    let [v0, v1, v2, v3] = value_len.to_le_bytes();
    (
        [kind, k0, k1, v0, v1, v2, v3],
        &key[..usize::from(key_len).min(key.len())],
        &value[..(value_len as usize).min(value.len())],
    )
}

/// Appends one record.
pub(crate) fn encode_record(out: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
    let (header, key, value) = header(key, value);
    out.extend_from_slice(&header);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Encodes one record into `out`, which has exactly its length
/// (`HEADER_LEN` + key + value).
pub(crate) fn write_record(out: &mut [u8], key: &[u8], value: Option<&[u8]>) {
    let (header, key, value) = header(key, value);
    let mut rest = out;
    for part in [&header[..], key, value] {
        let n = part.len().min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&part[..n]);
        rest = tail;
    }
}

/// Where the parts of one encoded record are, relative to its first byte.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordLayout {
    pub(crate) key_len: usize,
    /// `None` for a tombstone.
    pub(crate) value_len: Option<usize>,
}

impl RecordLayout {
    pub(crate) fn len(&self) -> usize {
        HEADER_LEN + self.key_len + self.value_len.unwrap_or(0)
    }
}

/// What the bytes at the start of a buffer hold.
#[derive(Debug)]
pub(crate) enum Decoded {
    Record(RecordLayout),
    /// The record needs this many bytes in total; fewer are available.
    NeedMore(usize),
    Corrupt(&'static str),
}

pub(crate) fn decode_record(buf: &[u8]) -> Decoded {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Decoded::NeedMore(HEADER_LEN);
    };
    let key_len = usize::from(u16::from_le_bytes([header[1], header[2]]));
    let value_len = u32::from_le_bytes([header[3], header[4], header[5], header[6]]) as usize;
    let layout = match header[0] {
        PUT => RecordLayout {
            key_len,
            value_len: Some(value_len),
        },
        TOMBSTONE if value_len == 0 => RecordLayout {
            key_len,
            value_len: None,
        },
        TOMBSTONE => return Decoded::Corrupt("tombstone with a value"),
        _ => return Decoded::Corrupt("unknown record kind"),
    };
    if key_len == 0 {
        return Decoded::Corrupt("empty key");
    }
    if buf.len() < layout.len() {
        Decoded::NeedMore(layout.len())
    } else {
        Decoded::Record(layout)
    }
}

/// The key and value (`None` for a tombstone) of a record laid out as
/// `layout` at the start of `record`.
pub(crate) fn record_parts(record: &[u8], layout: RecordLayout) -> (&[u8], Option<&[u8]>) {
    let start = HEADER_LEN + layout.key_len;
    let key = record.get(HEADER_LEN..start).unwrap_or_default();
    let value = layout.value_len.and_then(|n| record.get(start..start + n));
    (key, value)
}

/// The key and value (`None` for a tombstone) of an encoded record; an empty
/// key if the bytes do not start with a whole record.
pub(crate) fn split_record(record: &[u8]) -> (&[u8], Option<&[u8]>) {
    match decode_record(record) {
        Decoded::Record(layout) => record_parts(record, layout),
        _ => (&[], None),
    }
}

/// The records encoded one after another in `buf`: each one's offset, key
/// and value, up to the first bytes that are not a whole record.
pub(crate) fn records(buf: &[u8]) -> impl Iterator<Item = (usize, &[u8], Option<&[u8]>)> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = buf.get(at..)?;
        let Decoded::Record(layout) = decode_record(rest) else {
            return None;
        };
        let (key, value) = record_parts(rest, layout);
        let offset = at;
        at += layout.len();
        Some((offset, key, value))
    })
}

/// The first 16 key bytes, zero-padded, as a number: `prefix(a) < prefix(b)`
/// implies `a < b`, so most comparisons never touch the arena.
pub(crate) fn key_prefix(key: &[u8]) -> u128 {
    if let Some(first) = key.first_chunk::<16>() {
        return u128::from_be_bytes(*first);
    }
    let mut bytes = [0u8; 16];
    let n = key.len().min(16);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut end = 0;
        let out = records(bytes)
            .map(|(offset, k, v)| {
                end = offset + HEADER_LEN + k.len() + v.map_or(0, <[u8]>::len);
                (k.to_vec(), v.map(<[u8]>::to_vec))
            })
            .collect();
        assert_eq!(end, bytes.len(), "bad record");
        out
    }

    /// Sorts records encoded in one buffer with the restore's
    /// `partition::sort_blocks` and returns them in order.
    fn sorted(records: &[(&[u8], Option<&[u8]>)]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut data = Vec::new();
        for (k, v) in records {
            encode_record(&mut data, k, *v);
        }
        let blocks = [data.as_slice()];
        let mut index = Vec::new();
        crate::partition::sort_blocks(&blocks, 0, false, &mut index);
        let mut out = Vec::new();
        for &entry in &index {
            let at = crate::partition::position(entry);
            out.extend(decode_all(crate::partition::record_at(&blocks, at)));
        }
        out
    }

    #[test]
    fn sorting_keeps_the_last_write_per_key() {
        assert_eq!(
            sorted(&[
                (b"b", Some(b"1")),
                (b"a", Some(b"2")),
                (b"b", None),
                (b"c", Some(b"3")),
                (b"a", Some(b"4")),
            ]),
            vec![
                (b"a".to_vec(), Some(b"4".to_vec())),
                (b"b".to_vec(), None),
                (b"c".to_vec(), Some(b"3".to_vec())),
            ]
        );
    }

    #[test]
    fn keys_sharing_a_long_prefix_or_padding_sort_by_their_bytes() {
        let long_a = b"customer-000000000001".to_vec();
        let long_b = b"customer-000000000000".to_vec();
        let keys: Vec<Vec<u8>> = sorted(&[
            (&long_a, Some(b"x")),
            (&long_b, Some(b"y")),
            (b"ab\0", Some(b"z")),
            (b"ab", Some(b"w")),
        ])
        .into_iter()
        .map(|(k, _)| k)
        .collect();
        assert_eq!(keys, vec![b"ab".to_vec(), b"ab\0".to_vec(), long_b, long_a]);
    }

    #[test]
    fn truncated_or_damaged_records_are_reported() {
        let mut buf = Vec::new();
        encode_record(&mut buf, b"key", Some(b"value"));
        assert!(matches!(decode_record(&buf[..3]), Decoded::NeedMore(7)));
        assert!(matches!(
            decode_record(&buf[..buf.len() - 1]),
            Decoded::NeedMore(n) if n == buf.len()
        ));
        buf[0] = 9;
        assert!(matches!(decode_record(&buf), Decoded::Corrupt(_)));
    }
}
