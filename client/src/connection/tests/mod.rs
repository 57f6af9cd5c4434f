//! Messenger tests over `tokio::io::duplex`: the fake broker sends exactly the
//! bytes each case needs, good or hostile.
//!
//! - [`wire`]: multiplexing, hostile bytes, cancellation, timeouts, throttling;
//! - [`security`]: ApiVersions, SASL (PLAIN, SCRAM) and TLS.

mod security;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use tokio::io::DuplexStream;
use weir_protocol::ApiKey;
use weir_protocol::ProtocolError;
use weir_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use weir_protocol::kafka_protocol::messages::{
    ApiVersionsResponse, MetadataRequest, MetadataResponse, RequestKind, ResponseKind,
    SaslAuthenticateResponse, SaslHandshakeResponse, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_protocol::versions::BrokerVersions;

use super::*;
use crate::fake_broker::{FakeConn, all_api_versions};

fn options() -> MessengerOptions {
    MessengerOptions {
        request_timeout: Duration::from_secs(5),
        max_frame_size: 1024 * 1024,
        ..MessengerOptions::default()
    }
}

/// A messenger whose broker speaks Metadata v0..=`metadata_max`.
fn pair(metadata_max: i16, opts: MessengerOptions) -> (Messenger, FakeConn<DuplexStream>) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut m = Messenger::start(client, "fake:9092", opts);
    m.set_versions(BrokerVersions::from_ranges([(
        ApiKey::Metadata,
        0,
        metadata_max,
    )]));
    (m, FakeConn::new(server))
}

fn metadata_with_cluster_id(id: &str) -> ResponseKind {
    ResponseKind::Metadata(
        MetadataResponse::default().with_cluster_id(Some(StrBytes::from_string(id.to_owned()))),
    )
}

fn cluster_id(r: &MetadataResponse) -> String {
    r.cluster_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default()
}

fn assert_poisoned_by(err: &ClientError, check: impl Fn(&ClientError) -> bool) {
    match err {
        ClientError::Poisoned { cause, .. } => assert!(check(cause), "unexpected cause: {cause}"),
        other => panic!("expected a poisoned connection, got {other}"),
    }
}

#[test]
fn host_of_strips_port_and_brackets() {
    assert_eq!(host_of("localhost:9092"), "localhost");
    assert_eq!(host_of("[::1]:9092"), "::1");
    assert_eq!(host_of("10.0.0.1:1"), "10.0.0.1");
}
