//! A bounds-checked reader over the records section of one batch.
//!
//! Every length or count it reads is compared with the bytes left *before*
//! anything is sliced or allocated, and every slice it hands out is a
//! zero-copy [`Bytes::slice`] of the buffer it reads.

use bytes::Bytes;

use super::varint::{VarintError, read_varint, read_varlong};
use crate::{ProtocolError, Result};

/// Reads `data[pos..end]`. Errors name the batch by its base offset.
pub(crate) struct Cursor<'a> {
    data: &'a Bytes,
    pos: usize,
    end: usize,
    base_offset: i64,
}

impl<'a> Cursor<'a> {
    /// A cursor over all of `data`, inside the batch at `base_offset`.
    pub(crate) fn new(data: &'a Bytes, base_offset: i64) -> Self {
        Self {
            data,
            pos: 0,
            end: data.len(),
            base_offset,
        }
    }

    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.end - self.pos
    }

    /// An [`ProtocolError::InvalidBatch`] for this batch.
    pub(crate) fn invalid(&self, message: impl Into<String>) -> ProtocolError {
        ProtocolError::InvalidBatch {
            base_offset: self.base_offset,
            message: message.into(),
        }
    }

    fn rest(&self) -> &[u8] {
        self.data.get(self.pos..self.end).unwrap_or_default()
    }

    fn varint_error(&self, e: VarintError, what: &'static str) -> ProtocolError {
        match e {
            VarintError::Truncated { needed } => ProtocolError::Truncated {
                what,
                needed,
                available: self.remaining(),
            },
            VarintError::Overflow => self.invalid(format!("{what}: varint overflows its type")),
        }
    }

    /// Reads one signed byte.
    pub(crate) fn i8(&mut self, what: &'static str) -> Result<i8> {
        let Some(&b) = self.rest().first() else {
            return Err(ProtocolError::Truncated {
                what,
                needed: 1,
                available: 0,
            });
        };
        self.pos += 1;
        Ok(b as i8)
    }

    /// Reads a zigzag varint (`i32`).
    pub(crate) fn varint(&mut self, what: &'static str) -> Result<i32> {
        let (v, n) = read_varint(self.rest()).map_err(|e| self.varint_error(e, what))?;
        self.pos += n;
        Ok(v)
    }

    /// Reads a zigzag varlong (`i64`).
    pub(crate) fn varlong(&mut self, what: &'static str) -> Result<i64> {
        let (v, n) = read_varlong(self.rest()).map_err(|e| self.varint_error(e, what))?;
        self.pos += n;
        Ok(v)
    }

    /// Checks that a length read from the wire fits in what is left and
    /// turns it into a `usize`.
    pub(crate) fn check_len(&self, len: i32, what: &'static str) -> Result<usize> {
        let available = self.remaining();
        match usize::try_from(len) {
            Ok(n) if n <= available => Ok(n),
            _ => Err(ProtocolError::CountOutOfBounds {
                what,
                count: i64::from(len),
                available,
            }),
        }
    }

    /// Takes the next `n` bytes as a zero-copy slice; `n` must have been
    /// checked with [`Cursor::check_len`] or be known to fit.
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<Bytes> {
        let available = self.remaining();
        if n > available {
            return Err(ProtocolError::Truncated {
                what,
                needed: n,
                available,
            });
        }
        let out = self.data.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(out)
    }

    /// Splits off a cursor over the next `n` bytes and skips past them.
    pub(crate) fn sub(&mut self, n: usize, what: &'static str) -> Result<Cursor<'a>> {
        let available = self.remaining();
        if n > available {
            return Err(ProtocolError::Truncated {
                what,
                needed: n,
                available,
            });
        }
        let sub = Cursor {
            data: self.data,
            pos: self.pos,
            end: self.pos + n,
            base_offset: self.base_offset,
        };
        self.pos += n;
        Ok(sub)
    }

    /// Reads a varint length and that many bytes; a length of -1 is null.
    pub(crate) fn nullable_bytes(&mut self, what: &'static str) -> Result<Option<Bytes>> {
        let len = self.varint(what)?;
        if len == -1 {
            return Ok(None);
        }
        if len < -1 {
            return Err(self.invalid(format!("{what}: negative length {len}")));
        }
        let n = self.check_len(len, what)?;
        self.take(n, what).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_bytes_reads_null_empty_and_data() {
        // -1 (null), 0 (empty), 3 "abc"
        let data = Bytes::from_static(&[0x01, 0x00, 0x06, b'a', b'b', b'c']);
        let mut c = Cursor::new(&data, 0);
        assert_eq!(c.nullable_bytes("key").unwrap(), None);
        assert_eq!(c.nullable_bytes("key").unwrap(), Some(Bytes::new()));
        assert_eq!(
            c.nullable_bytes("key").unwrap(),
            Some(Bytes::from_static(b"abc"))
        );
        assert_eq!(c.remaining(), 0);
    }

    #[test]
    fn lengths_beyond_the_buffer_are_count_errors_not_allocations() {
        // Length 1,000,000 with 1 byte left.
        let mut data = Vec::new();
        super::super::varint::put_varint(&mut data, 1_000_000);
        data.push(0);
        let data = Bytes::from(data);
        let mut c = Cursor::new(&data, 7);
        match c.nullable_bytes("value") {
            Err(ProtocolError::CountOutOfBounds {
                what: "value",
                count: 1_000_000,
                available: 1,
            }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn negative_lengths_other_than_minus_one_are_invalid() {
        let data = Bytes::from_static(&[0x03]); // -2
        let mut c = Cursor::new(&data, 42);
        match c.nullable_bytes("key") {
            Err(ProtocolError::InvalidBatch {
                base_offset: 42,
                message,
            }) => {
                assert!(message.contains("negative length -2"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn sub_cursors_cannot_read_past_their_end() {
        let data = Bytes::from_static(&[1, 2, 3, 4]);
        let mut c = Cursor::new(&data, 0);
        let mut sub = c.sub(2, "record").unwrap();
        assert_eq!(sub.take(2, "x").unwrap(), Bytes::from_static(&[1, 2]));
        assert!(matches!(
            sub.i8("attributes"),
            Err(ProtocolError::Truncated { .. })
        ));
        assert_eq!(c.remaining(), 2);
        assert!(c.sub(3, "record").is_err());
    }
}
