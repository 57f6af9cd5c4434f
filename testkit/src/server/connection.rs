//! One client connection: frames in, requests to the state task, responses out.
//!
//! Like a Kafka broker, a connection handles one request at a time: the
//! next frame is decoded only after the previous response was written, so
//! responses always come back in request order. While a request waits (a
//! Fetch for min bytes, a JoinGroup for the rebalance), the loop keeps
//! reading so that it notices the client hanging up.

use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tracing::{debug, trace, warn};
use weir_protocol::ApiKey;
use weir_protocol::api::{decode_request, encode_response, peek_request_prefix};
use weir_protocol::frame::FrameDecoder;
use weir_protocol::kafka_protocol::messages::ResponseKind;

use crate::cluster::task::{Message, Outcome, Shared};
use crate::handlers::api_versions;

/// How much a client may send ahead while a request is pending; beyond
/// this the loop stops reading until the response is written.
const READ_AHEAD: usize = 1 << 20;

enum Step {
    Continue,
    Stop,
}

/// Serves one connection to `broker` until either side closes it.
pub(crate) async fn serve<S>(stream: S, broker: i32, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let id = shared.next_connection_id();
    let (close_tx, mut close_rx) = oneshot::channel();
    if shared
        .tx
        .send(Message::Connected {
            id,
            broker,
            close: close_tx,
        })
        .is_err()
    {
        return;
    }
    let (mut rd, mut wr) = tokio::io::split(stream);
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut out = BytesMut::new();
    loop {
        let frame = match decoder.decode(&mut buf) {
            Ok(Some(frame)) => frame.freeze(),
            Ok(None) => {
                tokio::select! {
                    read = rd.read_buf(&mut buf) => match read {
                        Ok(0) => break,
                        Ok(_) => continue,
                        Err(e) => {
                            debug!(connection = id, error = %e, "read failed");
                            break;
                        }
                    },
                    _ = &mut close_rx => break,
                }
            }
            Err(e) => {
                warn!(connection = id, error = %e, "bad frame; closing the connection");
                break;
            }
        };
        let Ok(prefix) = peek_request_prefix(&frame) else {
            warn!(
                connection = id,
                "frame shorter than a request header; closing the connection"
            );
            break;
        };
        let request = match decode_request(frame) {
            Ok(r) => r,
            Err(e) if prefix.api_key == ApiKey::ApiVersions as i16 => {
                // Kafka answers an ApiVersions it cannot parse with
                // UNSUPPORTED_VERSION and its own ranges in a v0 body, so
                // that the client can retry at a version both speak.
                debug!(connection = id, error = %e, "ApiVersions at an unknown version");
                let body = ResponseKind::ApiVersions(api_versions::unsupported_version_response());
                if write_response(
                    &mut wr,
                    &mut out,
                    ApiKey::ApiVersions,
                    0,
                    prefix.correlation_id,
                    &body,
                )
                .await
                .is_err()
                {
                    break;
                }
                continue;
            }
            Err(e) => {
                warn!(connection = id, api_key = prefix.api_key, version = prefix.api_version, error = %e,
                    "undecodable request; closing the connection");
                break;
            }
        };
        let (api_key, correlation_id) = (request.api_key, request.header.correlation_id);
        trace!(
            connection = id,
            ?api_key,
            version = request.version,
            correlation_id,
            "request"
        );
        let (reply_tx, mut reply_rx) = oneshot::channel();
        let msg = Message::Request {
            connection_id: id,
            broker,
            request: Box::new(request),
            reply: reply_tx,
        };
        if shared.tx.send(msg).is_err() {
            break;
        }
        let outcome = loop {
            tokio::select! {
                outcome = &mut reply_rx => break outcome.ok(),
                read = rd.read_buf(&mut buf), if buf.len() < READ_AHEAD => match read {
                    Ok(0) | Err(_) => break None,
                    Ok(_) => {}
                },
                _ = &mut close_rx => break None,
            }
        };
        let step = match outcome {
            Some(Outcome::Respond(body, version)) => {
                match write_response(&mut wr, &mut out, api_key, version, correlation_id, &body)
                    .await
                {
                    Ok(()) => Step::Continue,
                    Err(()) => Step::Stop,
                }
            }
            Some(Outcome::NoResponse) => Step::Continue,
            Some(Outcome::Close) | None => Step::Stop,
        };
        if matches!(step, Step::Stop) {
            break;
        }
    }
    let _ = wr.shutdown().await;
    let _ = shared.tx.send(Message::Disconnected { id });
}

async fn write_response<W: AsyncWrite + Unpin>(
    wr: &mut W,
    out: &mut BytesMut,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<(), ()> {
    out.clear();
    if let Err(e) = encode_response(out, api_key, version, correlation_id, body) {
        warn!(?api_key, version, error = %e, "response does not encode; closing the connection");
        return Err(());
    }
    wr.write_all(out)
        .await
        .map_err(|e| debug!(error = %e, "write failed"))?;
    wr.flush()
        .await
        .map_err(|e| debug!(error = %e, "flush failed"))
}
