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

/// Appends one record. Callers have checked the sizes (`kv::check_entry`).
pub(crate) fn encode_record(out: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
    let key_len = u16::try_from(key.len()).unwrap_or(u16::MAX);
    let (kind, value) = match value {
        Some(v) => (PUT, v),
        None => (TOMBSTONE, &[][..]),
    };
    let value_len = u32::try_from(value.len()).unwrap_or(u32::MAX);
    out.push(kind);
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(&value_len.to_le_bytes());
    out.extend_from_slice(&key[..usize::from(key_len).min(key.len())]);
    out.extend_from_slice(&value[..(value_len as usize).min(value.len())]);
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

    fn decode_all(mut bytes: &[u8]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let Decoded::Record(layout) = decode_record(bytes) else {
                panic!("bad record");
            };
            let key = bytes[HEADER_LEN..HEADER_LEN + layout.key_len].to_vec();
            let value = layout.value_len.map(|n| {
                bytes[HEADER_LEN + layout.key_len..HEADER_LEN + layout.key_len + n].to_vec()
            });
            out.push((key, value));
            bytes = &bytes[layout.len()..];
        }
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
