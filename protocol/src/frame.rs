//! Length-prefixed framing.
//!
//! Every Kafka request and response travels as a 4-byte big-endian length
//! followed by that many bytes. The length is checked against a maximum before
//! any buffer is reserved, so a peer cannot make us allocate by lying about it.

use bytes::{Buf, BufMut, BytesMut};

use crate::{ProtocolError, Result};

/// The default largest frame accepted: 100 MiB, Kafka's `socket.request.max.bytes`.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 100 * 1024 * 1024;

/// Bytes in the length prefix.
pub const LENGTH_PREFIX: usize = 4;

/// The most room [`FrameDecoder::decode`] reserves ahead of the bytes that
/// have arrived: 1 MiB.
pub const RESERVE_CHUNK: usize = 1 << 20;

/// The protocol whose messages start with these four bytes, if it is one a
/// Kafka client is likely to meet on a wrong port, with what to check.
fn foreign_protocol(prefix: [u8; 4]) -> Option<(&'static str, &'static str)> {
    match prefix {
        [b'H', b'T', b'T', b'P'] => Some(("HTTP", "")),
        // A TLS record: alert (21) or handshake (22), version 3.x.
        [21 | 22, 3, 0..=4, _] => Some((
            "TLS",
            "; for a TLS listener, set security.protocol=SSL or SASL_SSL",
        )),
        _ => None,
    }
}

/// Splits a byte stream into frames.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_frame_size: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl FrameDecoder {
    /// A decoder that rejects frames larger than `max_frame_size` bytes.
    pub fn new(max_frame_size: usize) -> Self {
        Self { max_frame_size }
    }

    /// The largest frame this decoder accepts.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// The length of the next frame, if its prefix is complete.
    ///
    /// # Errors
    /// [`ProtocolError::FrameTooLarge`] or [`ProtocolError::NegativeFrameLength`].
    pub fn peek_len(&self, buf: &[u8]) -> Result<Option<usize>> {
        let Some(prefix) = buf.get(..LENGTH_PREFIX) else {
            return Ok(None);
        };
        let bytes = [prefix[0], prefix[1], prefix[2], prefix[3]];
        let len = i32::from_be_bytes(bytes);
        let len = usize::try_from(len).map_err(|_| ProtocolError::NegativeFrameLength(len))?;
        // Both signatures read as frames of over 300 MiB, larger than any
        // Kafka response: saying what answered beats quoting that number.
        if len > DEFAULT_MAX_FRAME_SIZE.min(self.max_frame_size)
            && let Some((protocol, hint)) = foreign_protocol(bytes)
        {
            return Err(ProtocolError::ForeignProtocol { protocol, hint });
        }
        if len > self.max_frame_size {
            return Err(ProtocolError::FrameTooLarge {
                size: len,
                max: self.max_frame_size,
            });
        }
        Ok(Some(len))
    }

    /// Takes the next complete frame (without its prefix) off the front of `buf`.
    ///
    /// Returns `Ok(None)` when more bytes are needed; it reserves room for the
    /// rest of a frame only once its length has been checked.
    ///
    /// # Errors
    /// [`ProtocolError::FrameTooLarge`] or [`ProtocolError::NegativeFrameLength`].
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<BytesMut>> {
        let Some(len) = self.peek_len(buf)? else {
            return Ok(None);
        };
        if buf.len() < LENGTH_PREFIX + len {
            // Room for the rest of the frame, at most a chunk at a time: a
            // peer that announces a frame just under the cap and then sends
            // nothing holds only what it really sent (plus one chunk), not
            // `max_frame_size` bytes per connection.
            buf.reserve((LENGTH_PREFIX + len - buf.len()).min(RESERVE_CHUNK));
            return Ok(None);
        }
        buf.advance(LENGTH_PREFIX);
        Ok(Some(buf.split_to(len)))
    }
}

/// Appends a length placeholder and returns where it starts; finish with [`end_frame`].
pub fn begin_frame(out: &mut BytesMut) -> usize {
    let start = out.len();
    out.put_i32(0);
    start
}

/// Writes the length of the frame begun at `start`.
///
/// # Errors
/// [`ProtocolError::FrameTooLarge`] if the frame exceeds `i32::MAX` bytes.
pub fn end_frame(out: &mut BytesMut, start: usize) -> Result<()> {
    let len = out.len() - start - LENGTH_PREFIX;
    let len_i32 = i32::try_from(len).map_err(|_| ProtocolError::FrameTooLarge {
        size: len,
        max: i32::MAX as usize,
    })?;
    out[start..start + LENGTH_PREFIX].copy_from_slice(&len_i32.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_announced_just_under_the_cap_reserves_only_a_chunk() {
        let decoder = FrameDecoder::default();
        let announced = i32::try_from(DEFAULT_MAX_FRAME_SIZE - 1).unwrap();
        let mut buf = BytesMut::new();
        buf.put_i32(announced);
        buf.put_slice(b"abc");
        assert!(decoder.decode(&mut buf).unwrap().is_none());
        assert!(
            buf.capacity() <= LENGTH_PREFIX + 3 + RESERVE_CHUNK,
            "{} bytes reserved for a frame that has sent 3",
            buf.capacity()
        );
        // The whole frame still decodes once it has arrived.
        buf.resize(LENGTH_PREFIX + DEFAULT_MAX_FRAME_SIZE - 1, 7);
        let frame = decoder.decode(&mut buf).unwrap().unwrap();
        assert_eq!(frame.len(), DEFAULT_MAX_FRAME_SIZE - 1);
        assert_eq!(&frame[..3], b"abc");
    }

    #[test]
    fn round_trips_and_waits_for_whole_frames() {
        let mut out = BytesMut::new();
        let start = begin_frame(&mut out);
        out.put_slice(b"hello");
        end_frame(&mut out, start).unwrap();
        let start = begin_frame(&mut out);
        end_frame(&mut out, start).unwrap();

        let decoder = FrameDecoder::default();
        let mut partial = BytesMut::from(&out[..6]);
        assert!(decoder.decode(&mut partial).unwrap().is_none());
        assert_eq!(partial.len(), 6, "a partial frame is left in place");

        let mut buf = out;
        assert_eq!(&decoder.decode(&mut buf).unwrap().unwrap()[..], b"hello");
        assert!(decoder.decode(&mut buf).unwrap().unwrap().is_empty());
        assert!(decoder.decode(&mut buf).unwrap().is_none());
    }

    #[test]
    fn an_http_or_tls_answer_is_named_not_measured() {
        let decoder = FrameDecoder::default();
        let mut http = BytesMut::from(&b"HTTP/1.1 400 Bad Request\r\n"[..]);
        let e = decoder.decode(&mut http).unwrap_err();
        assert_eq!(
            e.to_string(),
            "this endpoint does not speak the Kafka protocol (it answered like HTTP)"
        );
        // A TLS alert, as a TLS listener sends for a plain-text hello.
        let mut tls = BytesMut::from(&[21u8, 3, 3, 0, 2, 2, 80][..]);
        let e = decoder.decode(&mut tls).unwrap_err().to_string();
        assert!(
            e.starts_with("this endpoint does not speak the Kafka protocol (it answered like TLS)")
                && e.contains("security.protocol=SSL"),
            "{e}"
        );
        // Even with the largest frame size allowed.
        let mut http = BytesMut::from(&b"HTTP/1.0 200 OK\r\n"[..]);
        assert!(matches!(
            FrameDecoder::new(i32::MAX as usize).decode(&mut http),
            Err(ProtocolError::ForeignProtocol {
                protocol: "HTTP",
                ..
            })
        ));
    }

    #[test]
    fn rejects_oversize_and_negative_lengths_before_allocating() {
        let decoder = FrameDecoder::new(1024);
        let mut big = BytesMut::from(&1025i32.to_be_bytes()[..]);
        assert!(matches!(
            decoder.decode(&mut big),
            Err(ProtocolError::FrameTooLarge {
                size: 1025,
                max: 1024
            })
        ));
        assert!(
            big.capacity() < 1024,
            "nothing reserved for a rejected frame"
        );
        let mut neg = BytesMut::from(&(-5i32).to_be_bytes()[..]);
        assert!(matches!(
            decoder.decode(&mut neg),
            Err(ProtocolError::NegativeFrameLength(-5))
        ));
    }
}
