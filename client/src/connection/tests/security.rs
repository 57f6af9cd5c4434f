//! ApiVersions, SASL (PLAIN, SCRAM) and TLS.

use super::*;

#[tokio::test]
async fn handshake_learns_versions_and_falls_back_from_unsupported_version() {
    // A broker that answers ApiVersions v3 normally.
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut m = Messenger::start(client, "fake", options());
    let mut server = FakeConn::new(server);
    let s = tokio::spawn(async move {
        crate::fake_broker::serve_api_versions(&mut server).await;
        server
    });
    handshake::negotiate_versions(&mut m).await.unwrap();
    assert_eq!(
        m.version_for::<MetadataRequest>().unwrap(),
        12,
        "capped at 12"
    );
    let _ = s.await.unwrap();

    // An old broker (before Kafka 2.4): answers in the v0 layout with
    // UNSUPPORTED_VERSION and no ApiVersions range, so the client asks at v0.
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut m = Messenger::start(client, "old", options());
    let mut server = FakeConn::new(server);
    let s = tokio::spawn(async move {
        let req = server.next_request().await.unwrap();
        let body = ApiVersionsResponse::default().with_error_code(35);
        server
            .respond_as(
                ApiKey::ApiVersions,
                0,
                req.header.correlation_id,
                ResponseKind::ApiVersions(body),
            )
            .await;
        let retry = server.next_request().await.unwrap();
        server
            .respond(&retry, ResponseKind::ApiVersions(all_api_versions()))
            .await;
        (server, retry.version)
    });
    handshake::negotiate_versions(&mut m).await.unwrap();
    assert!(m.versions().range(ApiKey::Fetch).is_some());
    let (_server, retried_at) = s.await.unwrap();
    assert_eq!(retried_at, 0);

    // A broker that refuses outright.
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut m = Messenger::start(client, "bad", options());
    let mut server = FakeConn::new(server);
    let s = tokio::spawn(async move {
        let req = server.next_request().await.unwrap();
        let body = ApiVersionsResponse::default().with_error_code(-1);
        server.respond(&req, ResponseKind::ApiVersions(body)).await;
        server
    });
    let err = handshake::negotiate_versions(&mut m).await.unwrap_err();
    assert_eq!(err.kafka_code().unwrap().name, "UNKNOWN_SERVER_ERROR");
    let _ = s.await.unwrap();
}

/// Serves SASL/PLAIN, accepting only alice/secret.
async fn serve_sasl<S>(server: &mut FakeConn<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let req = server.next_request().await.unwrap();
    match &req.body {
        RequestKind::SaslHandshake(h) => assert_eq!(h.mechanism.as_str(), "PLAIN"),
        other => panic!("{other:?}"),
    }
    let hs =
        SaslHandshakeResponse::default().with_mechanisms(vec![StrBytes::from_static_str("PLAIN")]);
    server.respond(&req, ResponseKind::SaslHandshake(hs)).await;
    let req = server.next_request().await.unwrap();
    let RequestKind::SaslAuthenticate(auth) = &req.body else {
        panic!("{:?}", req.body)
    };
    let ok = &auth.auth_bytes[..] == b"\0alice\0secret";
    let resp = if ok {
        SaslAuthenticateResponse::default().with_session_lifetime_ms(60_000)
    } else {
        SaslAuthenticateResponse::default()
            .with_error_code(58)
            .with_error_message(Some(StrBytes::from_static_str("bad credentials")))
    };
    server
        .respond(&req, ResponseKind::SaslAuthenticate(resp))
        .await;
}

#[tokio::test]
async fn sasl_plain_sends_the_rfc4616_token_and_reports_refusal() {
    for (password, ok) in [("secret", true), ("wrong", false)] {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let mut m = Messenger::start(client, "fake", options());
        let mut server = FakeConn::new(server);
        let s = tokio::spawn(async move {
            crate::fake_broker::serve_api_versions(&mut server).await;
            serve_sasl(&mut server).await;
            server
        });
        handshake::negotiate_versions(&mut m).await.unwrap();
        let creds = SaslConfig {
            mechanism: SaslMechanism::Plain,
            username: "alice".into(),
            password: password.into(),
        };
        let result = handshake::authenticate(&m, &creds).await;
        if ok {
            assert_eq!(result.unwrap(), Some(Duration::from_secs(60)));
        } else {
            let err = result.unwrap_err();
            assert!(matches!(err, ClientError::Sasl { .. }), "{err}");
            assert!(err.to_string().contains("bad credentials"), "{err}");
        }
        let _ = s.await.unwrap();
    }
}

#[tokio::test]
async fn tls_and_sasl_over_a_loopback_listener() {
    use tokio_rustls::rustls;

    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert_pem = cert.cert.pem();
    let server_config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        for _ in 0..2 {
            let (tcp, _) = listener.accept().await.unwrap();
            let Ok(tls) = acceptor.accept(tcp).await else {
                continue; // the client refused our certificate
            };
            let mut conn = FakeConn::new(tls);
            crate::fake_broker::serve_api_versions(&mut conn).await;
            serve_sasl(&mut conn).await;
            let req = conn.next_request().await.unwrap();
            conn.respond(&req, metadata_with_cluster_id("over-tls"))
                .await;
        }
    });

    // Trusting the certificate: connects, authenticates, carries requests.
    let options = ConnectOptions {
        tls: Some(
            TlsConfig::from_ca_pem(cert_pem.as_bytes())
                .unwrap()
                .with_server_name("localhost"),
        ),
        sasl: Some(SaslConfig {
            mechanism: SaslMechanism::Plain,
            username: "alice".into(),
            password: "secret".into(),
        }),
        connect_timeout: Some(Duration::from_secs(10)),
        ..ConnectOptions::default()
    };
    let m = connect(&addr.to_string(), &options).await.unwrap();
    assert!(m.is_usable(), "its 60 s SASL session has not ended");
    assert_eq!(
        cluster_id(&m.request(&MetadataRequest::default()).await.unwrap()),
        "over-tls"
    );

    // Trusting another CA: the handshake fails with a typed error.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let options = ConnectOptions {
        tls: Some(
            TlsConfig::from_ca_pem(other.cert.pem().as_bytes())
                .unwrap()
                .with_server_name("localhost"),
        ),
        ..ConnectOptions::default()
    };
    let err = connect(&addr.to_string(), &options).await.unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Io {
                context: "TLS handshake",
                ..
            }
        ),
        "{err}"
    );
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_connection_past_its_sasl_session_is_not_reused() {
    let (mut m, _server) = pair(12, options());
    m.set_expiry(tokio::time::Instant::now() + Duration::from_secs(51));
    assert!(m.is_usable());
    tokio::time::sleep(Duration::from_secs(51)).await;
    assert!(!m.is_usable());
}

/// A SCRAM-SHA-256 server for user `alice` with password `secret`, written
/// from RFC 5802 §3 (the server's side of the computation), so the client's
/// proof is checked the way a broker checks it.
async fn serve_scram<S>(server: &mut FakeConn<S>, honest: bool)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use ring::{digest, hmac, pbkdf2};
    use scram::base64;

    let req = server.next_request().await.unwrap();
    match &req.body {
        RequestKind::SaslHandshake(h) => assert_eq!(h.mechanism.as_str(), "SCRAM-SHA-256"),
        other => panic!("{other:?}"),
    }
    server
        .respond(
            &req,
            ResponseKind::SaslHandshake(SaslHandshakeResponse::default()),
        )
        .await;

    let auth = |req: &weir_protocol::api::DecodedRequest| match &req.body {
        RequestKind::SaslAuthenticate(a) => String::from_utf8(a.auth_bytes.to_vec()).unwrap(),
        other => panic!("{other:?}"),
    };
    let req = server.next_request().await.unwrap();
    let client_first = auth(&req);
    let bare = client_first.strip_prefix("n,,").unwrap().to_owned();
    assert!(bare.starts_with("n=alice,r="), "{bare}");
    let nonce = format!("{}SERVERPART", &bare["n=alice,r=".len()..]);
    let salt = b"weir-salt";
    let server_first = format!("r={nonce},s={},i=4096", base64::encode(salt));
    let reply = SaslAuthenticateResponse::default()
        .with_auth_bytes(server_first.clone().into_bytes().into());
    server
        .respond(&req, ResponseKind::SaslAuthenticate(reply))
        .await;

    let req = server.next_request().await.unwrap();
    let client_final = auth(&req);
    let (without_proof, proof) = client_final.rsplit_once(",p=").unwrap();
    assert_eq!(without_proof, format!("c=biws,r={nonce}"));
    let mut salted = [0u8; 32];
    let iterations = std::num::NonZeroU32::new(4096).unwrap();
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        b"secret",
        &mut salted,
    );
    let key = |k: &[u8]| hmac::Key::new(hmac::HMAC_SHA256, k);
    let client_key = hmac::sign(&key(&salted), b"Client Key");
    let stored_key = digest::digest(&digest::SHA256, client_key.as_ref());
    let auth_message = format!("{bare},{server_first},{without_proof}");
    let client_signature = hmac::sign(&key(stored_key.as_ref()), auth_message.as_bytes());
    let recovered: Vec<u8> = base64::decode(proof)
        .unwrap()
        .iter()
        .zip(client_signature.as_ref())
        .map(|(p, s)| p ^ s)
        .collect();
    let proof_ok = digest::digest(&digest::SHA256, &recovered).as_ref() == stored_key.as_ref();
    assert!(proof_ok, "the client's proof verifies");
    let server_key = hmac::sign(&key(&salted), b"Server Key");
    let mut signature = hmac::sign(&key(server_key.as_ref()), auth_message.as_bytes())
        .as_ref()
        .to_vec();
    if !honest {
        signature[0] ^= 1;
    }
    let server_final = format!("v={}", base64::encode(&signature));
    let reply =
        SaslAuthenticateResponse::default().with_auth_bytes(server_final.into_bytes().into());
    server
        .respond(&req, ResponseKind::SaslAuthenticate(reply))
        .await;
}

#[tokio::test]
async fn scram_sha_256_proves_both_sides() {
    for honest in [true, false] {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let mut m = Messenger::start(client, "fake", options());
        let mut server = FakeConn::new(server);
        let s = tokio::spawn(async move {
            crate::fake_broker::serve_api_versions(&mut server).await;
            serve_scram(&mut server, honest).await;
            server
        });
        handshake::negotiate_versions(&mut m).await.unwrap();
        let creds = SaslConfig {
            mechanism: SaslMechanism::ScramSha256,
            username: "alice".into(),
            password: "secret".into(),
        };
        let result = handshake::authenticate(&m, &creds).await;
        if honest {
            result.unwrap();
        } else {
            let err = result.unwrap_err().to_string();
            assert!(
                err.contains("SCRAM-SHA-256") && err.contains("signature is wrong"),
                "{err}"
            );
        }
        let _ = s.await.unwrap();
    }
}

/// A v0-layout ApiVersions refusal (header v0, body v0): `UNSUPPORTED_VERSION`
/// and only the ApiVersions range, as a Kafka 2.4+ broker sends it.
fn refusal_listing_api_versions(max: i16) -> ResponseKind {
    use weir_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
    ResponseKind::ApiVersions(
        ApiVersionsResponse::default()
            .with_error_code(35)
            .with_api_keys(vec![
                ApiVersion::default()
                    .with_api_key(ApiKey::ApiVersions as i16)
                    .with_min_version(0)
                    .with_max_version(max),
            ]),
    )
}

#[tokio::test]
async fn handshake_retries_at_the_highest_api_versions_version_the_broker_lists() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut m = Messenger::start(client, "v2-only", options());
    let mut server = FakeConn::new(server);
    let s = tokio::spawn(async move {
        let first = server.next_request().await.unwrap();
        assert_eq!(
            (first.api_key, first.version),
            (ApiKey::ApiVersions, 3),
            "asks at v3 first"
        );
        server
            .respond_as(
                ApiKey::ApiVersions,
                0,
                first.header.correlation_id,
                refusal_listing_api_versions(2),
            )
            .await;
        let second = server.next_request().await.unwrap();
        server
            .respond(
                &second,
                ResponseKind::ApiVersions(all_api_versions().with_throttle_time_ms(0)),
            )
            .await;
        (second.version, server)
    });
    handshake::negotiate_versions(&mut m).await.unwrap();
    assert!(m.is_usable(), "a refusal does not poison the connection");
    assert_eq!(
        m.version_for::<MetadataRequest>().ok(),
        Some(12),
        "the ranges come from the v2 answer, not from the refusal"
    );
    // Dropping the connection ends a server still waiting for a retry.
    drop(m);
    assert_eq!(
        s.await.unwrap().0,
        2,
        "the retry goes at the broker's highest, v2"
    );
}

#[tokio::test]
async fn handshake_caps_the_retry_at_v3_and_refuses_to_go_round_in_circles() {
    // A broker listing a higher ApiVersions than Weir speaks, in a refusal of
    // v3: contradictory, so it is an error, not a loop.
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut m = Messenger::start(client, "odd", options());
    let mut server = FakeConn::new(server);
    let s = tokio::spawn(async move {
        let req = server.next_request().await.unwrap();
        server
            .respond_as(
                ApiKey::ApiVersions,
                0,
                req.header.correlation_id,
                refusal_listing_api_versions(7),
            )
            .await;
        server
    });
    let err = handshake::negotiate_versions(&mut m).await.unwrap_err();
    assert_eq!(
        err.kafka_code().unwrap().name,
        "UNSUPPORTED_VERSION",
        "{err}"
    );
    let _ = s.await.unwrap();
}

#[tokio::test]
async fn handshake_reads_librdkafka_mocks_refusal_and_retries_at_v0() {
    // The bytes librdkafka 2.x's mock cluster sends for an ApiVersions v3
    // request (it speaks v0-v2): error 35, an array count of one byte (the
    // raw count, not the compact count + 1), ApiVersions 0..2, and a throttle
    // time. Neither v3 nor v0 decodes it; the error code is readable, so the
    // client asks again at v0, as Kafka's own client does when a refusal
    // lists no range.
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut m = Messenger::start(client, "mock", options());
    let mut server = FakeConn::new(server);
    let s = tokio::spawn(async move {
        let first = server.next_request().await.unwrap();
        let mut frame = BytesMut::new();
        frame.put_i32(17);
        frame.put_i32(first.header.correlation_id);
        frame.put_slice(&[0x00, 0x23, 0x01, 0x00, 0x12, 0x00, 0x00, 0x00, 0x02]);
        frame.put_i32(0);
        server.write_raw(&frame).await;
        let second = server.next_request().await.unwrap();
        server
            .respond(&second, ResponseKind::ApiVersions(all_api_versions()))
            .await;
        (second.version, server)
    });
    handshake::negotiate_versions(&mut m).await.unwrap();
    assert!(m.is_usable());
    assert!(m.versions().range(ApiKey::Produce).is_some());
    drop(m);
    assert_eq!(s.await.unwrap().0, 0, "the retry goes at v0");
}

#[tokio::test]
async fn handshake_poisons_on_an_answer_that_is_no_refusal_and_does_not_decode() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut m = Messenger::start(client, "garbled", options());
    let mut server = FakeConn::new(server);
    let s = tokio::spawn(async move {
        let first = server.next_request().await.unwrap();
        let mut frame = BytesMut::new();
        frame.put_i32(9);
        frame.put_i32(first.header.correlation_id);
        frame.put_slice(&[0x00, 0x00, 0xff, 0xff, 0xff]);
        server.write_raw(&frame).await;
        server
    });
    let err = handshake::negotiate_versions(&mut m).await.unwrap_err();
    assert_poisoned_by(&err, |c| matches!(c, ClientError::Protocol { .. }));
    let _ = s.await.unwrap();
}
