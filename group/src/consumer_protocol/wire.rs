//! Bounded reading and writing of the classic (non-flexible) Kafka types used
//! by the consumer protocol: int16, int32, string, nullable string, nullable
//! bytes and arrays.
//!
//! Every count read from the wire is checked against the bytes left *before*
//! anything is allocated, so a hostile or corrupt subscription of a few bytes
//! cannot make the group leader reserve gigabytes.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{GroupError, Result};

/// A cursor over untrusted bytes that names the message it is decoding.
pub(crate) struct Reader<'a> {
    message: &'static str,
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(message: &'static str, bytes: &'a [u8]) -> Self {
        Self {
            message,
            bytes,
            offset: 0,
        }
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.offset
    }

    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8]> {
        if self.left() < n {
            return Err(GroupError::Truncated {
                message: self.message,
                field,
                offset: self.offset,
                needed: n,
                left: self.left(),
            });
        }
        let slice = &self.bytes[self.offset..self.offset + n];
        self.offset += n;
        Ok(slice)
    }

    pub(crate) fn i16(&mut self, field: &'static str) -> Result<i16> {
        let b = self.take(field, 2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn i32(&mut self, field: &'static str) -> Result<i32> {
        let b = self.take(field, 4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn invalid_count(&self, field: &'static str, offset: usize, count: i64) -> GroupError {
        GroupError::InvalidCount {
            message: self.message,
            field,
            offset,
            count,
            left: self.left(),
        }
    }

    /// Reads a string (int16 length). `-1` is null, allowed only if `nullable`.
    pub(crate) fn string(&mut self, field: &'static str, nullable: bool) -> Result<Option<String>> {
        let at = self.offset;
        let len = self.i16(field)?;
        if len == -1 && nullable {
            return Ok(None);
        }
        if len < 0 {
            return Err(self.invalid_count(field, at, i64::from(len)));
        }
        let start = self.offset;
        let raw = self.take(field, len as usize)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(Some(s.to_owned())),
            Err(_) => Err(GroupError::InvalidUtf8 {
                message: self.message,
                field,
                offset: start,
            }),
        }
    }

    /// Reads a nullable byte string (int32 length, `-1` is null).
    pub(crate) fn nullable_bytes(&mut self, field: &'static str) -> Result<Option<Bytes>> {
        let at = self.offset;
        let len = self.i32(field)?;
        if len == -1 {
            return Ok(None);
        }
        if len < 0 {
            return Err(self.invalid_count(field, at, i64::from(len)));
        }
        Ok(Some(Bytes::copy_from_slice(
            self.take(field, len as usize)?,
        )))
    }

    /// Reads a non-nullable array count and checks that `count` elements of at
    /// least `min_element_size` bytes each can fit in the bytes left.
    ///
    /// Prevents: an allocation sized by an unchecked count from the wire.
    pub(crate) fn array_len(
        &mut self,
        field: &'static str,
        min_element_size: usize,
    ) -> Result<usize> {
        let at = self.offset;
        let count = self.i32(field)?;
        if count < 0 {
            return Err(self.invalid_count(field, at, i64::from(count)));
        }
        let count = count as usize;
        if count.saturating_mul(min_element_size) > self.left() {
            return Err(self.invalid_count(field, at, count as i64));
        }
        Ok(count)
    }
}

/// Writes the classic Kafka types; lengths that do not fit the wire are errors.
pub(crate) struct Writer {
    message: &'static str,
    buf: BytesMut,
}

impl Writer {
    pub(crate) fn new(message: &'static str) -> Self {
        Self {
            message,
            buf: BytesMut::new(),
        }
    }

    pub(crate) fn i16(&mut self, v: i16) {
        self.buf.put_i16(v);
    }

    pub(crate) fn i32(&mut self, v: i32) {
        self.buf.put_i32(v);
    }

    pub(crate) fn string(&mut self, field: &'static str, s: Option<&str>) -> Result<()> {
        match s {
            None => self.buf.put_i16(-1),
            Some(s) => {
                let len = i16::try_from(s.len()).map_err(|_| self.too_large(field, s.len()))?;
                self.buf.put_i16(len);
                self.buf.put_slice(s.as_bytes());
            }
        }
        Ok(())
    }

    pub(crate) fn nullable_bytes(&mut self, field: &'static str, b: Option<&[u8]>) -> Result<()> {
        match b {
            None => self.buf.put_i32(-1),
            Some(b) => {
                self.array_len(field, b.len())?;
                self.buf.put_slice(b);
            }
        }
        Ok(())
    }

    pub(crate) fn array_len(&mut self, field: &'static str, len: usize) -> Result<()> {
        let len = i32::try_from(len).map_err(|_| self.too_large(field, len))?;
        self.buf.put_i32(len);
        Ok(())
    }

    fn too_large(&self, field: &'static str, len: usize) -> GroupError {
        GroupError::TooLarge {
            message: self.message,
            field,
            len,
        }
    }

    pub(crate) fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}
