//! A scriptable broker for unit tests: the server side of one connection
//! ([`FakeConn`]), and a loopback listener that answers ApiVersions itself and
//! hands every other request to a closure ([`spawn_broker`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use weir_protocol::ApiKey;
use weir_protocol::api::{DecodedRequest, decode_request, encode_response};
use weir_protocol::frame::FrameDecoder;
use weir_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use weir_protocol::kafka_protocol::messages::{ApiVersionsResponse, RequestKind, ResponseKind};

/// The server side of one connection.
pub(crate) struct FakeConn<S> {
    pub(crate) stream: S,
    buf: BytesMut,
}

impl<S: AsyncRead + AsyncWrite + Unpin> FakeConn<S> {
    pub(crate) fn new(stream: S) -> Self {
        Self {
            stream,
            buf: BytesMut::new(),
        }
    }

    /// The next request, or `None` when the client hung up.
    pub(crate) async fn next_request(&mut self) -> Option<DecodedRequest> {
        loop {
            if let Some(frame) = FrameDecoder::default().decode(&mut self.buf).ok()? {
                return decode_request(frame.freeze()).ok();
            }
            if self.stream.read_buf(&mut self.buf).await.ok()? == 0 {
                return None;
            }
        }
    }

    /// Answers `req` with `body`, at the request's version.
    pub(crate) async fn respond(&mut self, req: &DecodedRequest, body: ResponseKind) {
        self.respond_as(req.api_key, req.version, req.header.correlation_id, body)
            .await;
    }

    /// Writes a response frame with an arbitrary correlation id.
    pub(crate) async fn respond_as(
        &mut self,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        body: ResponseKind,
    ) {
        let mut out = BytesMut::new();
        encode_response(&mut out, api, version, correlation_id, &body).unwrap();
        self.write_raw(&out).await;
    }

    /// Writes bytes exactly as given.
    pub(crate) async fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
        self.stream.flush().await.unwrap();
    }
}

/// Every API `kafka-protocol` knows, at every version it can encode.
pub(crate) fn all_api_versions() -> ApiVersionsResponse {
    let keys = (0..100i16)
        .filter_map(|k| ApiKey::try_from(k).ok())
        .map(|api| {
            let r = api.valid_versions();
            ApiVersion::default()
                .with_api_key(api as i16)
                .with_min_version(r.min)
                .with_max_version(r.max)
        })
        .collect();
    ApiVersionsResponse::default().with_api_keys(keys)
}

/// Answers the ApiVersions request a new connection starts with.
pub(crate) async fn serve_api_versions<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut FakeConn<S>) {
    let req = conn.next_request().await.unwrap();
    assert_eq!(req.api_key, ApiKey::ApiVersions);
    conn.respond(&req, ResponseKind::ApiVersions(all_api_versions()))
        .await;
}

/// A fake broker's answer: the body, and optionally a gate that holds it
/// back until opened (so a test can keep a request in flight).
pub(crate) struct Reply {
    pub(crate) body: ResponseKind,
    pub(crate) hold: Option<watch::Receiver<bool>>,
}

impl Reply {
    /// Answers at once.
    pub(crate) fn now(body: ResponseKind) -> Option<Reply> {
        Some(Reply { body, hold: None })
    }
}

/// What a fake broker does with one request: `None` drops the connection.
pub(crate) type Handler = Arc<dyn Fn(&DecodedRequest) -> Option<Reply> + Send + Sync>;

/// A loopback broker that answers ApiVersions and passes other requests to
/// `handler`. Like Kafka, it answers the requests of one connection in order.
/// Returns its address and a count of accepted connections.
pub(crate) async fn spawn_broker(handler: Handler) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let handler = Arc::clone(&handler);
            tokio::spawn(async move {
                let mut conn = FakeConn::new(socket);
                while let Some(req) = conn.next_request().await {
                    let reply = if let RequestKind::ApiVersions(_) = req.body {
                        Reply::now(ResponseKind::ApiVersions(all_api_versions()))
                    } else {
                        handler(&req)
                    };
                    let Some(reply) = reply else { return };
                    if let Some(mut gate) = reply.hold {
                        let _ = gate.wait_for(|open| *open).await;
                    }
                    conn.respond(&req, reply.body).await;
                }
            });
        }
    });
    (addr, accepted)
}

/// A Metadata entry for broker `node` listening on loopback `port`.
pub(crate) fn loopback_broker(
    node: i32,
    port: u16,
) -> weir_protocol::kafka_protocol::messages::metadata_response::MetadataResponseBroker {
    use weir_protocol::kafka_protocol::messages::BrokerId;
    use weir_protocol::kafka_protocol::messages::metadata_response::MetadataResponseBroker;
    use weir_protocol::kafka_protocol::protocol::StrBytes;
    MetadataResponseBroker::default()
        .with_node_id(BrokerId(node))
        .with_host(StrBytes::from_static_str("127.0.0.1"))
        .with_port(i32::from(port))
}

/// A Metadata answer for one broker (node 1 on loopback `port`, also the
/// controller) that leads `partitions` of topic `topic`.
pub(crate) fn single_broker_metadata(port: u16, topic: &str, partitions: &[i32]) -> ResponseKind {
    use weir_protocol::kafka_protocol::messages::metadata_response::{
        MetadataResponsePartition, MetadataResponseTopic,
    };
    use weir_protocol::kafka_protocol::messages::{BrokerId, MetadataResponse, TopicName};
    use weir_protocol::kafka_protocol::protocol::StrBytes;
    ResponseKind::Metadata(
        MetadataResponse::default()
            .with_controller_id(BrokerId(1))
            .with_brokers(vec![loopback_broker(1, port)])
            .with_topics(vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(topic.to_owned()))))
                    .with_partitions(
                        partitions
                            .iter()
                            .map(|&p| {
                                MetadataResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_leader_id(BrokerId(1))
                            })
                            .collect(),
                    ),
            ]),
    )
}
