//! Multiplexing, hostile bytes, cancellation, timeouts and throttling.

use super::*;

#[tokio::test]
async fn concurrent_requests_are_matched_by_correlation_id() {
    let (m, mut server) = pair(12, options());
    let server = tokio::spawn(async move {
        let mut reqs = Vec::new();
        for _ in 0..3 {
            reqs.push(server.next_request().await.unwrap());
        }
        // Answer in reverse order, each with the id it was asked with.
        for req in reqs.iter().rev() {
            assert_eq!(req.version, 12);
            let name = match &req.body {
                RequestKind::Metadata(r) => r.topics.as_ref().unwrap()[0]
                    .name
                    .clone()
                    .unwrap()
                    .0
                    .to_string(),
                other => panic!("{other:?}"),
            };
            server.respond(req, metadata_with_cluster_id(&name)).await;
        }
        server
    });
    let ask = |name: &str| {
        MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(name.to_owned())))),
        ]))
    };
    let (a, b, c) = (ask("a"), ask("b"), ask("c"));
    let (ra, rb, rc) = tokio::join!(m.request(&a), m.request(&b), m.request(&c));
    assert_eq!(cluster_id(&ra.unwrap()), "a");
    assert_eq!(cluster_id(&rb.unwrap()), "b");
    assert_eq!(cluster_id(&rc.unwrap()), "c");
    assert!(m.is_usable());
    server.await.unwrap();
}

#[tokio::test]
async fn unknown_correlation_id_poisons_pending_and_future_requests() {
    let (m, mut server) = pair(12, options());
    let server = tokio::spawn(async move {
        let req = server.next_request().await.unwrap();
        server
            .respond_as(
                ApiKey::Metadata,
                12,
                req.header.correlation_id + 1000,
                metadata_with_cluster_id("x"),
            )
            .await;
        server
    });
    let err = m.request(&MetadataRequest::default()).await.unwrap_err();
    assert_poisoned_by(&err, |c| {
        matches!(c, ClientError::UnknownCorrelationId { .. })
    });
    let _server = server.await.unwrap();
    let again = m.request(&MetadataRequest::default()).await.unwrap_err();
    assert_poisoned_by(&again, |c| {
        matches!(c, ClientError::UnknownCorrelationId { .. })
    });
    assert!(!m.is_usable());
}

#[tokio::test]
async fn truncated_frame_poisons_with_a_typed_error() {
    let (m, mut server) = pair(12, options());
    let server = tokio::spawn(async move {
        let _req = server.next_request().await.unwrap();
        let mut bytes = BytesMut::new();
        bytes.put_i32(100);
        bytes.put_slice(&[0u8; 10]);
        server.write_raw(&bytes).await;
        // Hang up mid-frame.
        drop(server);
    });
    let err = m.request(&MetadataRequest::default()).await.unwrap_err();
    assert_poisoned_by(&err, |c| {
        matches!(
            c,
            ClientError::Protocol {
                source: ProtocolError::Truncated {
                    needed: 104,
                    available: 14,
                    ..
                },
                ..
            }
        )
    });
    server.await.unwrap();
}

#[tokio::test]
async fn oversize_length_poisons_before_anything_is_allocated() {
    let (m, mut server) = pair(12, options());
    let server = tokio::spawn(async move {
        let _req = server.next_request().await.unwrap();
        // 1.9 GiB announced; the limit is 1 MiB. The connection must fail at
        // once rather than wait for (or reserve) the body.
        server.write_raw(&2_000_000_000i32.to_be_bytes()).await;
        server
    });
    let err = m.request(&MetadataRequest::default()).await.unwrap_err();
    assert_poisoned_by(&err, |c| {
        matches!(
            c,
            ClientError::Protocol {
                source: ProtocolError::FrameTooLarge {
                    size: 2_000_000_000,
                    max: 1_048_576
                },
                ..
            }
        )
    });
    let _server = server.await.unwrap();
}

#[tokio::test]
async fn negative_length_and_short_frame_poison() {
    for bytes in [(-1i32).to_be_bytes().to_vec(), vec![0, 0, 0, 2, 0, 0]] {
        let (m, mut server) = pair(12, options());
        let server = tokio::spawn(async move {
            let _req = server.next_request().await.unwrap();
            server.write_raw(&bytes).await;
            server
        });
        let err = m.request(&MetadataRequest::default()).await.unwrap_err();
        assert_poisoned_by(&err, |c| matches!(c, ClientError::Protocol { .. }));
        let _server = server.await.unwrap();
    }
}

#[tokio::test]
async fn array_count_larger_than_the_bytes_is_a_typed_error_not_an_allocation() {
    // Metadata v1 (non-flexible): header = correlation id; body starts with
    // the brokers array, whose i32 count claims 2^31-1 entries in 0 bytes.
    let (m, mut server) = pair(1, options());
    let server = tokio::spawn(async move {
        let req = server.next_request().await.unwrap();
        assert_eq!(req.version, 1);
        let mut frame = BytesMut::new();
        frame.put_i32(8);
        frame.put_i32(req.header.correlation_id);
        frame.put_i32(i32::MAX);
        server.write_raw(&frame).await;
        server
    });
    let err = m.request(&MetadataRequest::default()).await.unwrap_err();
    assert_poisoned_by(&err, |c| {
        matches!(
            c,
            ClientError::Protocol {
                source: ProtocolError::Decode {
                    api: ApiKey::Metadata,
                    version: 1,
                    ..
                },
                ..
            }
        )
    });
    assert!(
        !m.is_usable(),
        "a response that does not decode poisons the connection"
    );
    let _server = server.await.unwrap();
}

#[tokio::test]
async fn peer_hangup_fails_every_pending_request() {
    let (m, mut server) = pair(12, options());
    let server = tokio::spawn(async move {
        let _a = server.next_request().await.unwrap();
        let _b = server.next_request().await.unwrap();
        drop(server);
    });
    let (a, b) = (MetadataRequest::default(), MetadataRequest::default());
    let (ra, rb) = tokio::join!(m.request(&a), m.request(&b));
    for err in [ra.unwrap_err(), rb.unwrap_err()] {
        assert_poisoned_by(&err, |c| matches!(c, ClientError::ConnectionClosed { .. }));
        assert!(err.is_retriable() && err.is_network());
    }
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dropped_request_leaves_whole_frames_and_its_late_response_is_discarded() {
    // A tiny pipe: a large request cannot be written in one go, so the writer
    // is mid-frame when the caller gives up.
    let (client, server) = tokio::io::duplex(256);
    let mut m = Messenger::start(client, "fake:9092", options());
    m.set_versions(BrokerVersions::from_ranges([(ApiKey::Metadata, 0, 12)]));
    let mut server = FakeConn::new(server);
    let big = MetadataRequest::default().with_topics(Some(
        (0..500)
            .map(|i| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(format!("topic-{i}")))))
            })
            .collect(),
    ));
    let dropped = tokio::time::timeout(Duration::from_millis(20), m.request(&big)).await;
    assert!(
        dropped.is_err(),
        "the server has not read anything yet, so no response"
    );

    let server = tokio::spawn(async move {
        let first = server.next_request().await.unwrap();
        match &first.body {
            RequestKind::Metadata(r) => {
                assert_eq!(r.topics.as_ref().unwrap().len(), 500, "frame arrived whole")
            }
            other => panic!("{other:?}"),
        }
        let second = server.next_request().await.unwrap();
        // The abandoned request's response comes first: it must be discarded.
        server
            .respond(&first, metadata_with_cluster_id("late"))
            .await;
        server
            .respond(&second, metadata_with_cluster_id("second"))
            .await;
        server
    });
    let second = m.request(&MetadataRequest::default()).await.unwrap();
    assert_eq!(cluster_id(&second), "second");
    assert!(
        m.is_usable(),
        "a response to an abandoned request is not an unknown id"
    );
    let _server = server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn request_timeout_is_typed_and_keeps_the_connection() {
    let (m, mut server) = pair(12, options());
    let timeout = Duration::from_secs(2);
    let err = m
        .request_at(12, &MetadataRequest::default(), timeout)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::RequestTimeout { api: ApiKey::Metadata, after, .. } if after == timeout),
        "{err}"
    );
    assert!(err.is_retriable());
    let first = server.next_request().await.unwrap();
    server
        .respond(&first, metadata_with_cluster_id("late"))
        .await;
    let server = tokio::spawn(async move {
        let req = server.next_request().await.unwrap();
        server.respond(&req, metadata_with_cluster_id("ok")).await;
        server
    });
    assert_eq!(
        cluster_id(&m.request(&MetadataRequest::default()).await.unwrap()),
        "ok"
    );
    let _server = server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn throttle_time_delays_the_next_request() {
    let (m, mut server) = pair(12, options());
    let server = tokio::spawn(async move {
        let req = server.next_request().await.unwrap();
        server
            .respond(
                &req,
                ResponseKind::Metadata(MetadataResponse::default().with_throttle_time_ms(700)),
            )
            .await;
        let req = server.next_request().await.unwrap();
        let arrived = tokio::time::Instant::now();
        server
            .respond(&req, metadata_with_cluster_id("after"))
            .await;
        arrived
    });
    let start = tokio::time::Instant::now();
    m.request(&MetadataRequest::default()).await.unwrap();
    m.request(&MetadataRequest::default()).await.unwrap();
    let arrived = server.await.unwrap();
    assert!(
        arrived - start >= Duration::from_millis(700),
        "sent after {:?}",
        arrived - start
    );
}

/// A peer that answers the first request with a Metadata response (cluster
/// id "mock") followed by `trailing` bytes inside the frame.
fn answer_with_trailing(
    mut server: FakeConn<DuplexStream>,
    trailing: &'static [u8],
) -> tokio::task::JoinHandle<FakeConn<DuplexStream>> {
    tokio::spawn(async move {
        let req = server.next_request().await.unwrap();
        let mut encoded = BytesMut::new();
        weir_protocol::api::encode_response(
            &mut encoded,
            ApiKey::Metadata,
            req.version,
            req.header.correlation_id,
            &metadata_with_cluster_id("mock"),
        )
        .unwrap();
        let body = encoded.split_off(4);
        let mut frame = BytesMut::new();
        frame.put_i32(i32::try_from(body.len() + trailing.len()).unwrap());
        frame.extend_from_slice(&body);
        frame.extend_from_slice(trailing);
        server.write_raw(&frame).await;
        server
    })
}

#[tokio::test]
async fn a_byte_after_a_decoded_response_is_ignored_as_java_and_librdkafka_do() {
    // librdkafka's mock cluster ends flexible Metadata responses (v9+) with
    // one empty tagged-fields byte too many.
    let (m, server) = pair(12, options());
    let server = answer_with_trailing(server, &[0]);
    let response = m.request(&MetadataRequest::default()).await.unwrap();
    assert_eq!(cluster_id(&response), "mock");
    assert!(m.is_usable());
    let _server = server.await.unwrap();
}

#[tokio::test]
async fn other_bytes_after_a_decoded_response_still_poison() {
    let (m, server) = pair(12, options());
    let server = answer_with_trailing(server, &[1, 2]);
    let err = m.request(&MetadataRequest::default()).await.unwrap_err();
    assert_poisoned_by(&err, |c| {
        matches!(
            c,
            ClientError::Protocol {
                source: ProtocolError::TrailingBytes { left: 2, .. },
                ..
            }
        )
    });
    let _server = server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_request_is_overdue_only_past_its_timeout_and_until_answered() {
    let opts = MessengerOptions {
        request_timeout: Duration::from_secs(30),
        ..options()
    };
    let (m, mut server) = pair(12, opts);
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        m.request(&MetadataRequest::default()),
    )
    .await;
    assert!(gave_up.is_err());
    let lost = server.next_request().await.unwrap();
    assert!(m.overdue_request().is_none(), "within its timeout");
    tokio::time::sleep(Duration::from_secs(30)).await;
    let overdue = m.overdue_request().expect("unanswered past its 30 s");
    assert!(
        matches!(overdue, ClientError::RequestTimeout { api: ApiKey::Metadata, after, .. } if after == Duration::from_secs(30)),
        "{overdue}"
    );
    // A late answer clears it: the connection was slow, not wedged.
    server
        .respond(&lost, metadata_with_cluster_id("late"))
        .await;
    tokio::time::timeout(Duration::from_secs(1), async {
        while m.overdue_request().is_some() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the late response removes the overdue request");
    assert!(m.is_usable());
}
