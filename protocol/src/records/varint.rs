//! Kafka's zigzag varints (`varint` is an `i32` in at most 5 bytes, `varlong`
//! an `i64` in at most 10), as used inside record batch v2.
//!
//! Decoding is strict: an encoding longer than the type allows, or one whose
//! last byte carries bits beyond the type's width, is an overflow. No
//! conforming encoder writes either, and accepting them would let two byte
//! strings decode to the same record.

use bytes::BufMut;

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VarintError {
    /// The input ended inside the varint; `needed` bytes would have been read.
    Truncated {
        /// Bytes that would be needed at least.
        needed: usize,
    },
    /// The encoding is longer than the type allows or overflows it.
    Overflow,
}

fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag32(u: u32) -> i32 {
    ((u >> 1) as i32) ^ -((u & 1) as i32)
}

fn unzigzag64(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

fn unsigned_len(mut u: u64) -> usize {
    let mut n = 1;
    while u >= 0x80 {
        u >>= 7;
        n += 1;
    }
    n
}

fn put_unsigned<B: BufMut>(out: &mut B, mut u: u64) {
    while u >= 0x80 {
        out.put_u8((u as u8 & 0x7f) | 0x80);
        u >>= 7;
    }
    out.put_u8(u as u8);
}

/// Bytes needed to encode `v` as a varint.
pub(crate) fn varint_len(v: i32) -> usize {
    unsigned_len(u64::from(zigzag32(v)))
}

/// Bytes needed to encode `v` as a varlong.
pub(crate) fn varlong_len(v: i64) -> usize {
    unsigned_len(zigzag64(v))
}

/// Appends `v` as a varint.
pub(crate) fn put_varint<B: BufMut>(out: &mut B, v: i32) {
    put_unsigned(out, u64::from(zigzag32(v)));
}

/// Appends `v` as a varlong.
pub(crate) fn put_varlong<B: BufMut>(out: &mut B, v: i64) {
    put_unsigned(out, zigzag64(v));
}

/// Reads an unsigned LEB128 value of at most `max_bytes` bytes whose last
/// byte may only use the low `last_bits` bits.
fn read_unsigned(
    buf: &[u8],
    max_bytes: usize,
    last_bits: u32,
) -> Result<(u64, usize), VarintError> {
    let mut result: u64 = 0;
    for i in 0..max_bytes {
        let Some(&b) = buf.get(i) else {
            return Err(VarintError::Truncated { needed: i + 1 });
        };
        if i + 1 == max_bytes && u32::from(b) >> last_bits != 0 {
            return Err(VarintError::Overflow);
        }
        result |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((result, i + 1));
        }
    }
    Err(VarintError::Overflow)
}

/// Reads a varint from the start of `buf`: the value and the bytes it took.
pub(crate) fn read_varint(buf: &[u8]) -> Result<(i32, usize), VarintError> {
    // 5 bytes carry 4 * 7 + 4 = 32 bits.
    let (u, n) = read_unsigned(buf, 5, 4)?;
    Ok((unzigzag32(u as u32), n))
}

/// Reads a varlong from the start of `buf`: the value and the bytes it took.
pub(crate) fn read_varlong(buf: &[u8]) -> Result<(i64, usize), VarintError> {
    // 10 bytes carry 9 * 7 + 1 = 64 bits.
    let (u, n) = read_unsigned(buf, 10, 1)?;
    Ok((unzigzag64(u), n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings_match_the_kafka_spec() {
        // Zigzag: 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3; 300 -> 600 = 0xd8 0x04.
        let cases: &[(i32, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-2, &[0x03]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (300, &[0xd8, 0x04]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for (v, bytes) in cases {
            let mut out = Vec::new();
            put_varint(&mut out, *v);
            assert_eq!(&out[..], *bytes, "encoding {v}");
            assert_eq!(varint_len(*v), bytes.len());
            assert_eq!(read_varint(bytes), Ok((*v, bytes.len())));
        }
    }

    #[test]
    fn longest_varlongs_round_trip() {
        for v in [i64::MAX, i64::MIN, 0, -1] {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_len(v));
            assert_eq!(read_varlong(&out), Ok((v, out.len())));
        }
        assert_eq!(varlong_len(i64::MIN), 10);
    }

    #[test]
    fn overlong_and_overflowing_varints_are_rejected() {
        // Six bytes: too long for an i32.
        assert_eq!(
            read_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            Err(VarintError::Overflow)
        );
        // Five bytes, but the last one has bits above bit 31.
        assert_eq!(
            read_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(VarintError::Overflow)
        );
        // Ten bytes whose last byte has more than one bit.
        let mut long = vec![0xff; 9];
        long.push(0x02);
        assert_eq!(read_varlong(&long), Err(VarintError::Overflow));
        long.truncate(9);
        long.push(0x01);
        assert!(read_varlong(&long).is_ok());
    }

    #[test]
    fn truncated_varints_say_how_much_was_needed() {
        assert_eq!(read_varint(&[]), Err(VarintError::Truncated { needed: 1 }));
        assert_eq!(
            read_varint(&[0x80, 0x80]),
            Err(VarintError::Truncated { needed: 3 })
        );
        assert_eq!(
            read_varlong(&[0xff]),
            Err(VarintError::Truncated { needed: 2 })
        );
    }

    proptest! {
        #[test]
        fn varint_round_trips(v in any::<i32>(), tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            let n = out.len();
            out.extend_from_slice(&tail);
            prop_assert_eq!(read_varint(&out), Ok((v, n)));
        }

        #[test]
        fn varlong_round_trips(v in any::<i64>()) {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            prop_assert_eq!(out.len(), varlong_len(v));
            prop_assert_eq!(read_varlong(&out), Ok((v, out.len())));
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            if let Ok((_, n)) = read_varint(&bytes) {
                prop_assert!((1..=5).contains(&n) && n <= bytes.len());
            }
            if let Ok((_, n)) = read_varlong(&bytes) {
                prop_assert!((1..=10).contains(&n) && n <= bytes.len());
            }
        }
    }
}
