//! The standalone `weir-testkit serve` binary answers on every broker port.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::TestClient;
use common::librdkafka::Server;
use tokio::net::TcpStream;
use weir_protocol::kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};

#[tokio::test]
async fn serve_prints_its_bootstrap_and_answers_on_every_broker() {
    let server = Server::start(3);
    let addrs: Vec<&str> = server.bootstrap.split(',').collect();
    assert_eq!(addrs.len(), 3);
    for addr in addrs {
        let mut c = TestClient::new(TcpStream::connect(addr).await.unwrap(), "bin");
        assert_eq!(
            c.call(3, &ApiVersionsRequest::default()).await.error_code,
            0
        );
        let md = c
            .call(12, &MetadataRequest::default().with_topics(None))
            .await;
        let mut ports: Vec<String> = md
            .brokers
            .iter()
            .map(|b| format!("127.0.0.1:{}", b.port))
            .collect();
        ports.sort();
        let mut want: Vec<String> = server.bootstrap.split(',').map(str::to_owned).collect();
        want.sort();
        assert_eq!(ports, want, "Metadata advertises the ports it listens on");
    }
}
