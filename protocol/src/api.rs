//! Request and response headers and bodies, at explicit versions.
//!
//! The client side encodes requests and decodes responses; the broker side
//! (used by `weir-testkit`) decodes requests and encodes responses. Every body
//! goes through `kafka-protocol`'s generated code, whose `anyhow` errors are
//! turned into [`ProtocolError`] here, with the API and version attached.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use crate::frame::{begin_frame, end_frame};
use crate::{ProtocolError, Result};

/// `kafka-protocol` reports errors as `anyhow::Error`; only its message crosses
/// this crate's boundary.
type BoxedError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The [`ApiKey`] of a request type.
///
/// # Errors
/// [`ProtocolError::UnknownApiKey`] for a key `kafka-protocol` does not list.
pub fn api_key_of<R: Request>() -> Result<ApiKey> {
    ApiKey::try_from(R::KEY).map_err(|_| ProtocolError::UnknownApiKey(R::KEY))
}

fn check_version(api: ApiKey, version: i16) -> Result<()> {
    let range = api.valid_versions();
    if version < range.min || version > range.max {
        return Err(ProtocolError::UnsupportedVersion { api, version });
    }
    Ok(())
}

/// Appends one request frame, length prefix included, to `out`.
///
/// # Errors
/// [`ProtocolError::UnsupportedVersion`] if `version` is outside what
/// `kafka-protocol` can encode, or [`ProtocolError::Encode`].
pub fn encode_request<R: Request>(
    out: &mut BytesMut,
    correlation_id: i32,
    client_id: Option<&str>,
    version: i16,
    body: &R,
) -> Result<()> {
    let api = api_key_of::<R>()?;
    check_version(api, version)?;
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(client_id.map(|c| StrBytes::from_string(c.to_owned())));
    let encode_err = |e: BoxedError| ProtocolError::Encode {
        api,
        version,
        message: e.to_string(),
    };
    let start = begin_frame(out);
    let written = header
        .encode(out, R::header_version(version))
        .and_then(|()| body.encode(out, version));
    if let Err(e) = written {
        // Leave `out` as it was: a half-written frame must never reach the wire.
        out.truncate(start);
        return Err(encode_err(e.into()));
    }
    end_frame(out, start).inspect_err(|_| out.truncate(start))
}

/// The correlation id at the front of a response frame (after the length prefix).
///
/// # Errors
/// [`ProtocolError::Truncated`] if the frame is shorter than 4 bytes.
pub fn peek_correlation_id(frame: &[u8]) -> Result<i32> {
    match frame.get(..4) {
        Some(b) => Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(ProtocolError::Truncated {
            what: "response header",
            needed: 4,
            available: frame.len(),
        }),
    }
}

/// Decodes a response frame (without length prefix) to request `R` sent at `version`.
///
/// Returns the correlation id and the body; trailing bytes are an error, since
/// they mean the two sides disagree about the version. (Where a peer is
/// known to append bytes, see [`decode_response_tolerant`].)
///
/// # Errors
/// [`ProtocolError::Decode`] or [`ProtocolError::TrailingBytes`].
pub fn decode_response<R: Request>(frame: Bytes, version: i16) -> Result<(i32, R::Response)> {
    let (correlation_id, body, rest) = decode_parts::<R>(frame, version)?;
    if !rest.is_empty() {
        return Err(ProtocolError::TrailingBytes {
            api: api_key_of::<R>()?,
            version,
            left: rest.len(),
        });
    }
    Ok((correlation_id, body))
}

/// As [`decode_response`], but one known deviation is let through: a
/// single zero byte after a fully decoded body of a flexible version (an
/// empty tagged-fields section written twice: librdkafka's mock cluster
/// ends its flexible Metadata responses so, and librdkafka's and Java's
/// clients read past it). Returns how many bytes were let through (0 or 1);
/// any other trailing bytes are still [`ProtocolError::TrailingBytes`].
///
/// # Errors
/// [`ProtocolError::Decode`] or [`ProtocolError::TrailingBytes`].
pub fn decode_response_tolerant<R: Request>(
    frame: Bytes,
    version: i16,
) -> Result<(i32, R::Response, usize)> {
    let flexible = <R::Response as HeaderVersion>::header_version(version) >= 1;
    let (correlation_id, body, rest) = decode_parts::<R>(frame, version)?;
    match rest.as_ref() {
        [] => Ok((correlation_id, body, 0)),
        [0] if flexible => Ok((correlation_id, body, 1)),
        rest => Err(ProtocolError::TrailingBytes {
            api: api_key_of::<R>()?,
            version,
            left: rest.len(),
        }),
    }
}

/// The header's correlation id, the body, and the bytes left after it.
fn decode_parts<R: Request>(mut frame: Bytes, version: i16) -> Result<(i32, R::Response, Bytes)> {
    let api = api_key_of::<R>()?;
    let decode_err = |e: BoxedError| ProtocolError::Decode {
        api,
        version,
        message: e.to_string(),
    };
    let header_version = <R::Response as HeaderVersion>::header_version(version);
    let header =
        ResponseHeader::decode(&mut frame, header_version).map_err(|e| decode_err(e.into()))?;
    let body = <R::Response as Decodable>::decode(&mut frame, version)
        .map_err(|e| decode_err(e.into()))?;
    Ok((header.correlation_id, body, frame))
}

/// The fixed start of every request header: enough to answer even a request
/// whose body cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPrefix {
    /// The raw API key.
    pub api_key: i16,
    /// The requested version.
    pub api_version: i16,
    /// The correlation id to echo.
    pub correlation_id: i32,
}

/// Reads the API key, version and correlation id at the front of a request frame.
///
/// # Errors
/// [`ProtocolError::Truncated`] if the frame is shorter than 8 bytes.
pub fn peek_request_prefix(frame: &[u8]) -> Result<RequestPrefix> {
    let Some(b) = frame.get(..8) else {
        return Err(ProtocolError::Truncated {
            what: "request header",
            needed: 8,
            available: frame.len(),
        });
    };
    Ok(RequestPrefix {
        api_key: i16::from_be_bytes([b[0], b[1]]),
        api_version: i16::from_be_bytes([b[2], b[3]]),
        correlation_id: i32::from_be_bytes([b[4], b[5], b[6], b[7]]),
    })
}

/// A request decoded on the broker side.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedRequest {
    /// The API.
    pub api_key: ApiKey,
    /// The version the client sent.
    pub version: i16,
    /// The header (correlation id, client id).
    pub header: RequestHeader,
    /// The body.
    pub body: RequestKind,
}

/// Decodes a request frame (without length prefix).
///
/// # Errors
/// [`ProtocolError::UnknownApiKey`], [`ProtocolError::UnsupportedVersion`] (the
/// caller can still answer with [`peek_request_prefix`]'s correlation id),
/// [`ProtocolError::Decode`] or [`ProtocolError::TrailingBytes`].
pub fn decode_request(mut frame: Bytes) -> Result<DecodedRequest> {
    let prefix = peek_request_prefix(&frame)?;
    let api_key = ApiKey::try_from(prefix.api_key)
        .map_err(|_| ProtocolError::UnknownApiKey(prefix.api_key))?;
    let version = prefix.api_version;
    check_version(api_key, version)?;
    let decode_err = |e: BoxedError| ProtocolError::Decode {
        api: api_key,
        version,
        message: e.to_string(),
    };
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version))
        .map_err(|e| decode_err(e.into()))?;
    let body =
        RequestKind::decode(api_key, &mut frame, version).map_err(|e| decode_err(e.into()))?;
    if frame.has_remaining() {
        return Err(ProtocolError::TrailingBytes {
            api: api_key,
            version,
            left: frame.remaining(),
        });
    }
    Ok(DecodedRequest {
        api_key,
        version,
        header,
        body,
    })
}

/// Appends one response frame, length prefix included, to `out`.
///
/// # Errors
/// [`ProtocolError::Encode`] if the body cannot be encoded at `version`.
pub fn encode_response(
    out: &mut BytesMut,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<()> {
    let encode_err = |e: BoxedError| ProtocolError::Encode {
        api: api_key,
        version,
        message: e.to_string(),
    };
    let start = begin_frame(out);
    let written = ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(out, api_key.response_header_version(version))
        .and_then(|()| body.encode(out, version));
    if let Err(e) = written {
        out.truncate(start);
        return Err(encode_err(e.into()));
    }
    end_frame(out, start).inspect_err(|_| out.truncate(start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameDecoder;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
    use kafka_protocol::protocol::Message;

    #[test]
    fn request_round_trips_through_the_broker_side_at_every_version() {
        for version in MetadataRequest::VERSIONS.min..=MetadataRequest::VERSIONS.max {
            let topic = MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("t"))));
            let req = MetadataRequest::default().with_topics(Some(vec![topic]));
            let mut out = BytesMut::new();
            encode_request(&mut out, 42, Some("weir"), version, &req).unwrap();
            let frame = FrameDecoder::default()
                .decode(&mut out)
                .unwrap()
                .unwrap()
                .freeze();
            let decoded = decode_request(frame).unwrap();
            assert_eq!(decoded.api_key, ApiKey::Metadata);
            assert_eq!(decoded.version, version);
            assert_eq!(decoded.header.correlation_id, 42);
            assert_eq!(decoded.body, RequestKind::Metadata(req));
        }
    }

    #[test]
    fn response_round_trips_and_trailing_bytes_are_rejected() {
        let version = 12;
        let topic = MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("t"))));
        let resp = MetadataResponse::default().with_topics(vec![topic]);
        let mut out = BytesMut::new();
        encode_response(
            &mut out,
            ApiKey::Metadata,
            version,
            7,
            &ResponseKind::Metadata(resp.clone()),
        )
        .unwrap();
        let mut frame = FrameDecoder::default().decode(&mut out).unwrap().unwrap();
        assert_eq!(peek_correlation_id(&frame).unwrap(), 7);
        let (corr, got) =
            decode_response::<MetadataRequest>(frame.clone().freeze(), version).unwrap();
        assert_eq!((corr, got), (7, resp));
        frame.extend_from_slice(b"x");
        assert!(matches!(
            decode_response::<MetadataRequest>(frame.freeze(), version),
            Err(ProtocolError::TrailingBytes { left: 1, .. })
        ));
    }

    #[test]
    fn unsupported_version_and_unknown_key_are_typed() {
        let mut frame = BytesMut::new();
        frame.extend_from_slice(&3i16.to_be_bytes());
        frame.extend_from_slice(&999i16.to_be_bytes());
        frame.extend_from_slice(&5i32.to_be_bytes());
        assert!(matches!(
            decode_request(frame.clone().freeze()),
            Err(ProtocolError::UnsupportedVersion {
                api: ApiKey::Metadata,
                version: 999
            })
        ));
        assert_eq!(peek_request_prefix(&frame).unwrap().correlation_id, 5);
        frame[..2].copy_from_slice(&30_000i16.to_be_bytes());
        assert!(matches!(
            decode_request(frame.freeze()),
            Err(ProtocolError::UnknownApiKey(30_000))
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(b"\x00\x03")),
            Err(ProtocolError::Truncated { .. })
        ));
    }
}
