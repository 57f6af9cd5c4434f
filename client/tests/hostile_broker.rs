//! A hostile broker on loopback TCP: after an honest ApiVersions answer it
//! sends exactly the bad bytes of each case. Every case must end in a typed
//! error and a poisoned connection, never a panic or a hang.

// Test helpers outside #[test] functions may panic too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_client::ClientError;
use weir_client::connection::{ConnectOptions, MessengerOptions, connect};
use weir_protocol::api::{decode_request, encode_response};
use weir_protocol::frame::FrameDecoder;
use weir_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use weir_protocol::kafka_protocol::messages::{ApiVersionsResponse, MetadataRequest, ResponseKind};
use weir_protocol::{ApiKey, ProtocolError};

/// What the broker sends after reading the first real request (it gets
/// that request's correlation id), and whether it then hangs up.
type Script = fn(i32) -> (Vec<u8>, bool);

async fn read_request(
    socket: &mut TcpStream,
    buf: &mut BytesMut,
) -> weir_protocol::api::DecodedRequest {
    loop {
        if let Some(frame) = FrameDecoder::default().decode(buf).unwrap() {
            return decode_request(frame.freeze()).unwrap();
        }
        assert!(
            socket.read_buf(buf).await.unwrap() > 0,
            "client hung up early"
        );
    }
}

/// A broker speaking Metadata v0..=1 only (a fixed, non-flexible layout the
/// scripts can write by hand) that runs `script` once.
async fn hostile_broker(script: Script) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = BytesMut::new();
        let req = read_request(&mut socket, &mut buf).await;
        let versions = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default()
                .with_api_key(ApiKey::ApiVersions as i16)
                .with_max_version(3),
            ApiVersion::default()
                .with_api_key(ApiKey::Metadata as i16)
                .with_max_version(1),
        ]);
        let mut out = BytesMut::new();
        encode_response(
            &mut out,
            ApiKey::ApiVersions,
            req.version,
            req.header.correlation_id,
            &ResponseKind::ApiVersions(versions),
        )
        .unwrap();
        socket.write_all(&out).await.unwrap();
        let req = read_request(&mut socket, &mut buf).await;
        let (bytes, hang_up) = script(req.header.correlation_id);
        socket.write_all(&bytes).await.unwrap();
        if hang_up {
            return;
        }
        // Stay connected until the client goes, so that what it reports is
        // the bad bytes and not a hang-up behind them.
        let mut sink = [0u8; 64];
        while socket.read(&mut sink).await.is_ok_and(|n| n > 0) {}
    });
    addr
}

/// Connects, sends one Metadata request, and returns the poison that failed it.
async fn run(script: Script) -> Arc<ClientError> {
    let addr = hostile_broker(script).await;
    let options = ConnectOptions {
        messenger: MessengerOptions {
            max_frame_size: 64 * 1024,
            request_timeout: Duration::from_secs(10),
            ..MessengerOptions::default()
        },
        connect_timeout: Some(Duration::from_secs(10)),
        ..ConnectOptions::default()
    };
    let messenger = connect(&addr, &options).await.unwrap();
    let err = messenger
        .request(&MetadataRequest::default())
        .await
        .unwrap_err();
    assert!(!messenger.is_usable(), "poisoned after {err}");
    let again = messenger
        .request(&MetadataRequest::default())
        .await
        .unwrap_err();
    assert!(
        matches!(again, ClientError::Poisoned { .. }),
        "later requests fail too: {again}"
    );
    match err {
        ClientError::Poisoned { cause, .. } => cause,
        other => panic!("expected a poisoned connection, got {other}"),
    }
}

fn frame(body: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut b = BytesMut::new();
    body(&mut b);
    let mut out = BytesMut::new();
    out.put_i32(b.len() as i32);
    out.put_slice(&b);
    out.to_vec()
}

#[tokio::test]
async fn truncated_frame() {
    // Announces 50 bytes, sends 6, then the connection closes.
    let err = run(|id| {
        let mut b = vec![0, 0, 0, 50];
        b.extend_from_slice(&id.to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        (b, true)
    })
    .await;
    assert!(
        matches!(
            &*err,
            ClientError::Protocol {
                source: ProtocolError::Truncated {
                    needed: 54,
                    available: 10,
                    ..
                },
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn wrong_correlation_id() {
    let err = run(|id| (frame(|b| b.put_i32(id.wrapping_add(7))), false)).await;
    assert!(
        matches!(&*err, ClientError::UnknownCorrelationId { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn over_size_length() {
    let err = run(|_| (i32::MAX.to_be_bytes().to_vec(), false)).await;
    assert!(
        matches!(
            &*err,
            ClientError::Protocol {
                source: ProtocolError::FrameTooLarge { max: 65_536, .. },
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn array_count_larger_than_the_bytes() {
    // Metadata v1 body: brokers array claiming 100 million entries in 4 bytes.
    let err = run(|id| {
        let bytes = frame(|b| {
            b.put_i32(id);
            b.put_i32(100_000_000);
            b.put_i32(0);
        });
        (bytes, false)
    })
    .await;
    assert!(
        matches!(
            &*err,
            ClientError::Protocol {
                source: ProtocolError::Decode {
                    api: ApiKey::Metadata,
                    version: 1,
                    ..
                },
                ..
            }
        ),
        "{err}"
    );
}
