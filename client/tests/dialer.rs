//! A client whose connections are opened by a [`Dialer`] instead of TCP:
//! in memory against the testkit, on tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions};
use weir_client::config::producer::ProducerOptions;
use weir_client::connection::{
    BoxedStream, ConnectOptions, Dial, DialFuture, Dialer, TlsConfig, connect,
};
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_client::{ClientError, Cluster};
use weir_integration::testkit_dial::{TestkitDialer, client_config};

/// Counts the addresses it is asked for, then lets the testkit dialer open them.
struct Counting {
    inner: TestkitDialer,
    dialled: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Dial for Counting {
    fn dial<'a>(&'a self, addr: &'a str) -> DialFuture<'a> {
        self.dialled.lock().unwrap().push(addr.to_owned());
        self.inner.dial(addr)
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_dialled_in_memory_produces_and_fetches_on_paused_time() {
    let kit = Arc::new(
        weir_testkit::Cluster::builder()
            .brokers(3)
            .build()
            .await
            .unwrap(),
    );
    kit.create_topic("dialled", 3, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let dialled = Arc::new(std::sync::Mutex::new(Vec::new()));
    let config = client_config(&kit, "dialled")
        .dialer(Dialer::new(Counting {
            inner: TestkitDialer::new(Arc::clone(&kit)),
            dialled: Arc::clone(&dialled),
        }))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let real = std::time::Instant::now();
    let cluster = Cluster::connect(config).await.unwrap();

    let producer = Producer::with_cluster(
        cluster.clone(),
        ProducerOptions {
            linger: Duration::from_millis(5),
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..30 {
        producer
            .send(
                ProducerRecord::new("dialled")
                    .with_partition(i % 3)
                    .with_value(format!("v{i}")),
            )
            .await
            .unwrap();
    }
    producer.close().await;

    let mut consumer = Consumer::with_cluster(
        cluster,
        ConsumerOptions {
            auto_offset_reset: AutoOffsetReset::Earliest,
            // A full second of fetch wait: free on the paused clock.
            fetch_max_wait: Duration::from_secs(1),
            ..Default::default()
        },
    );
    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new("dialled", p)).collect();
    consumer.assign(tps.clone());
    for tp in &tps {
        consumer.seek(tp, SeekTo::Earliest).unwrap();
    }
    let mut values = Vec::new();
    while values.len() < 30 {
        for r in consumer.poll_for(Duration::from_secs(5)).await.unwrap() {
            values.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{values:?}");
    }
    values.sort();
    let mut expected: Vec<String> = (0..30).map(|i| format!("v{i}")).collect();
    expected.sort();
    assert_eq!(values, expected);

    // Every connection went through the dialer, to all three brokers
    // (leaders are spread), and nothing listened on TCP for it.
    let dialled = dialled.lock().unwrap().clone();
    for id in 0..3 {
        let addr = kit.broker_addr(id).unwrap().to_string();
        assert!(dialled.contains(&addr), "{addr} not dialled: {dialled:?}");
    }
    assert!(
        kit.requests()
            .await
            .unwrap()
            .iter()
            .all(|r| r.client_id.as_deref() == Some("dialled")),
        "only this client talked to the cluster"
    );
    // Fetches waited on tokio's clock, not the wall clock.
    assert!(real.elapsed() < Duration::from_secs(30));
}

/// Refuses every address.
struct Refusing(AtomicUsize);

impl Dial for Refusing {
    fn dial<'a>(&'a self, addr: &'a str) -> DialFuture<'a> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            Err::<BoxedStream, _>(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("{addr} refused by the test"),
            ))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_dial_error_is_a_typed_io_error_naming_the_broker() {
    let options = ConnectOptions {
        dialer: Some(Dialer::new(Refusing(AtomicUsize::new(0)))),
        ..ConnectOptions::default()
    };
    let err = connect("broker-7:9092", &options).await.unwrap_err();
    match &err {
        ClientError::Io {
            broker,
            context,
            source,
        } => {
            assert_eq!(broker, "broker-7:9092");
            assert_eq!(*context, "connecting");
            assert_eq!(source.kind(), io::ErrorKind::ConnectionRefused);
        }
        other => panic!("expected ClientError::Io, got {other:?}"),
    }
    assert!(err.to_string().contains("broker-7:9092"), "{err}");
    assert!(err.is_retriable() && err.is_network());

    // Through the cluster: every bootstrap address is tried via the dialer,
    // and the error names them.
    let refusing = Arc::new(Refusing(AtomicUsize::new(0)));
    struct Shared(Arc<Refusing>);
    impl Dial for Shared {
        fn dial<'a>(&'a self, addr: &'a str) -> DialFuture<'a> {
            self.0.dial(addr)
        }
    }
    let config = weir_client::config::ClientConfig::builder()
        .bootstrap_servers(["a:1", "b:2"])
        .dialer(Dialer::new(Shared(Arc::clone(&refusing))))
        .build()
        .unwrap();
    let err = Cluster::connect(config).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("a:1") && text.contains("b:2"), "{text}");
    assert!(refusing.0.load(Ordering::SeqCst) >= 2);
}

#[tokio::test(start_paused = true)]
async fn tls_runs_over_the_dialled_stream() {
    // The testkit speaks no TLS: the handshake must fail as a TLS-handshake
    // I/O error on the in-memory stream, proving TLS is layered over it.
    let kit = Arc::new(weir_testkit::Cluster::builder().build().await.unwrap());
    let addr = kit.broker_addr(0).unwrap().to_string();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let options = ConnectOptions {
        dialer: Some(TestkitDialer::new(Arc::clone(&kit)).into_dialer()),
        tls: Some(
            TlsConfig::from_ca_pem(cert.cert.pem().as_bytes())
                .unwrap()
                .with_server_name("localhost"),
        ),
        connect_timeout: Some(Duration::from_secs(5)),
        ..ConnectOptions::default()
    };
    let err = connect(&addr, &options).await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Io { broker, .. } if *broker == addr),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn linger_and_request_deadlines_run_on_tokio_s_clock() {
    // The producer measures linger with tokio's clock: on a paused clock a
    // 10 s linger takes 10 virtual seconds and almost no real time (with
    // std's clock the sender would spin for 10 real seconds).
    let kit = Arc::new(weir_testkit::Cluster::builder().build().await.unwrap());
    kit.create_topic("lingered", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let cluster = Cluster::connect(client_config(&kit, "lingerer").build().unwrap())
        .await
        .unwrap();
    let producer = Producer::with_cluster(
        cluster,
        ProducerOptions {
            linger: Duration::from_secs(10),
            ..Default::default()
        },
    )
    .unwrap();
    let (virtual_start, real_start) = (tokio::time::Instant::now(), std::time::Instant::now());
    let delivery = producer
        .enqueue(ProducerRecord::new("lingered").with_value("x"))
        .await
        .unwrap();
    let meta = delivery.await.unwrap();
    assert_eq!(meta.offset, 0);
    let waited = virtual_start.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(11),
        "{waited:?}"
    );
    assert!(
        real_start.elapsed() < Duration::from_secs(3),
        "{:?} of real time",
        real_start.elapsed()
    );
}
