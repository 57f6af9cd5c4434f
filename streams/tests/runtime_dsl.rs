//! DSL applications end to end on the in-process cluster under exactly-once,
//! with an instance crashing mid-run: the results stay exact.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;
use weir_client::producer::{Producer, ProducerRecord};
use weir_streams::Topology;
use weir_streams::dsl::{Materialized, StreamsBuilder, TimeWindows};

const EOS: [(&str, &str); 2] = [
    ("processing.guarantee", "exactly_once_v2"),
    ("num.stream.threads", "2"),
];

/// The word count in the DSL: split, re-key by word, count in `counts`, and
/// write each new count as a decimal string.
fn dsl_word_count() -> Topology {
    let builder = StreamsBuilder::new();
    builder
        .stream::<(), String>(INPUT)
        .flat_map_values(|line: String| {
            line.split_whitespace()
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
        })
        .select_key(|_, word| word.clone())
        .group_by_key()
        .materialized(Materialized::as_("counts"))
        .count()
        .to_stream()
        .map_values(|n| n.unwrap_or_default().to_string())
        .to(OUTPUT);
    builder.build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_dsl_word_count_stays_exact_when_an_instance_crashes() {
    let kit = testkit(3, 6).await;
    let (first, _) = lines(150, 21);
    let (second, _) = lines(150, 23);
    let mut expected = BTreeMap::new();
    for w in first
        .iter()
        .chain(&second)
        .flat_map(|l| l.split_whitespace())
    {
        *expected.entry(w.to_owned()).or_insert(0u64) += 1;
    }
    let total: u64 = expected.values().sum();
    produce_lines(&kit, &first).await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = start(
        dsl_word_count(),
        streams_config(&kit, "dslwc", "a", dirs[0].path(), &EOS),
    )
    .await;
    let b = start(
        dsl_word_count(),
        streams_config(&kit, "dslwc", "b", dirs[1].path(), &EOS),
    )
    .await;
    eventually(
        "both instances process",
        Duration::from_secs(120),
        || async {
            !a.metrics().tasks.is_empty()
                && !b.metrics().tasks.is_empty()
                && read_committed(&kit, OUTPUT).await.len() > 50
        },
    )
    .await;
    produce_lines(&kit, &second).await;
    crash(&kit, 3, "a", a).await;
    let c = start(
        dsl_word_count(),
        streams_config(&kit, "dslwc", "c", dirs[2].path(), &EOS),
    )
    .await;
    eventually("every word counted", Duration::from_secs(300), || async {
        read_committed(&kit, OUTPUT).await.len() as u64 >= total
    })
    .await;
    // Longer, so that a duplicate would have time to show.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len() as u64, total, "each word once in the output");
    assert_eq!(last_counts(&out), expected);
    let (b_tasks, c_tasks) = (b.metrics().tasks, c.metrics().tasks);
    b.close(Duration::from_secs(30)).await.unwrap();
    c.close(Duration::from_secs(30)).await.unwrap();
    let mut stores = BTreeMap::new();
    for (tasks, dir) in [(&b_tasks, &dirs[1]), (&c_tasks, &dirs[2])] {
        for t in tasks.keys().filter(|t| t.subtopology == 1) {
            stores.extend(store_counts(dir.path(), "dslwc", &t.to_string()));
        }
    }
    assert_eq!(stores, expected, "the stores hold the exact counts");
}

const USERS: usize = 8;
const SIZE_MS: i64 = 10_000;
const ADVANCE_MS: i64 = 5_000;
const GRACE_MS: i64 = 1_000;

/// Page views per user in hopping windows, only each window's final count,
/// written as key `user@window-start`, value the count.
fn final_views_per_window() -> Topology {
    let builder = StreamsBuilder::new();
    let windows = TimeWindows::of_size_and_grace(
        Duration::from_millis(SIZE_MS as u64),
        Duration::from_millis(GRACE_MS as u64),
    )
    .advance_by(Duration::from_millis(ADVANCE_MS as u64));
    builder
        .stream::<String, String>(INPUT)
        .group_by_key()
        .windowed_by(windows)
        .materialized(Materialized::as_("views"))
        .count()
        .suppress_until_window_closes()
        .to_stream()
        .map(|w, n| {
            (
                format!("{}@{}", w.key, w.window.start),
                n.unwrap_or_default().to_string(),
            )
        })
        .to(OUTPUT);
    builder.build().unwrap()
}

/// Produces `(user, timestamp)` views, in order.
async fn produce_views(kit: &std::sync::Arc<weir_testkit::Cluster>, views: &[(usize, i64)]) {
    let producer = Producer::with_cluster(client(kit, "feeder").await, Default::default()).unwrap();
    let mut acks = Vec::new();
    for &(user, ts) in views {
        let record = ProducerRecord::new(INPUT)
            .with_key(format!("u{user}"))
            .with_value("page".to_string())
            .with_timestamp(ts);
        acks.push(producer.enqueue(record).await.unwrap());
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }
}

/// Hopping windows with suppression under exactly-once: one instance
/// crashes with windows pending in its suppression buffers; the instance
/// that takes its tasks restores them, and every closed window's final count
/// comes out exactly once and right.
#[tokio::test(start_paused = true)]
async fn final_windowed_counts_are_exact_and_once_across_a_crash() {
    let kit = testkit(3, 6).await;
    let views: Vec<(usize, i64)> = (0..600)
        .map(|i| ((i * 7 + i / 3) % USERS, 1_000 + i as i64 * 97))
        .collect();
    let last_ts = views.iter().map(|v| v.1).max().unwrap();
    // A last view per user far ahead closes every earlier window.
    let closing_ts = last_ts + 60_000;
    let closers: Vec<(usize, i64)> = (0..USERS).map(|u| (u, closing_ts)).collect();
    let mut expected = BTreeMap::new();
    for &(user, ts) in &views {
        let mut start = (ts - SIZE_MS + ADVANCE_MS).max(0) / ADVANCE_MS * ADVANCE_MS;
        while start <= ts {
            *expected.entry(format!("u{user}@{start}")).or_insert(0u64) += 1;
            start += ADVANCE_MS;
        }
    }
    let (head, tail) = views.split_at(300);
    produce_views(&kit, head).await;
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = start(
        final_views_per_window(),
        streams_config(&kit, "views", "a", dirs[0].path(), &EOS),
    )
    .await;
    let b = start(
        final_views_per_window(),
        streams_config(&kit, "views", "b", dirs[1].path(), &EOS),
    )
    .await;
    eventually("both instances emit", Duration::from_secs(120), || async {
        !a.metrics().tasks.is_empty()
            && !b.metrics().tasks.is_empty()
            && read_committed(&kit, OUTPUT).await.len() > 20
    })
    .await;
    produce_views(&kit, tail).await;
    crash(&kit, 3, "a", a).await;
    let c = start(
        final_views_per_window(),
        streams_config(&kit, "views", "c", dirs[2].path(), &EOS),
    )
    .await;
    produce_views(&kit, &closers).await;
    eventually("every window closed", Duration::from_secs(300), || async {
        read_committed(&kit, OUTPUT).await.len() >= expected.len()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let out = read_committed(&kit, OUTPUT).await;
    let mut emitted = BTreeMap::new();
    for (_, k, v) in &out {
        assert!(
            emitted
                .insert(k.clone(), v.parse::<u64>().unwrap())
                .is_none(),
            "window {k} emitted twice"
        );
    }
    assert_eq!(emitted, expected);
    b.close(Duration::from_secs(30)).await.unwrap();
    c.close(Duration::from_secs(30)).await.unwrap();
}

/// A stream-table join whose table and stream were both written before the
/// application started: the task processes its polled records in timestamp
/// order across its partitions (as Kafka Streams does), so every order
/// meets the customer written before it, whatever order the fetch returned
/// the partitions in (the stream's topic sorts first here on purpose).
#[tokio::test(start_paused = true)]
async fn a_stream_table_join_processes_its_inputs_in_timestamp_order() {
    let kit = testkit(1, 1).await;
    let (orders, customers) = ("a-orders", "z-customers");
    for t in [orders, customers] {
        kit.create_topic(t, 1, std::iter::empty::<(String, String)>())
            .await
            .unwrap();
    }
    let producer =
        Producer::with_cluster(client(&kit, "feeder").await, Default::default()).unwrap();
    let mut acks = Vec::new();
    for c in 0..20 {
        let record = ProducerRecord::new(customers)
            .with_key(format!("c{c}"))
            .with_value(format!("name-{c}"))
            .with_timestamp(1_000 + c);
        acks.push(producer.enqueue(record).await.unwrap());
    }
    for o in 0..100 {
        let record = ProducerRecord::new(orders)
            .with_key(format!("c{}", o % 20))
            .with_value(format!("o{o}"))
            .with_timestamp(5_000 + o);
        acks.push(producer.enqueue(record).await.unwrap());
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }
    let topology = || {
        let builder = StreamsBuilder::new();
        let names = builder.table::<String, String>(customers, Materialized::as_("names"));
        builder
            .stream::<String, String>(orders)
            .left_join(&names, |o, n| {
                format!("{o}:{}", n.map_or("?", String::as_str))
            })
            .to(OUTPUT);
        builder.build().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        topology(),
        streams_config(&kit, "join-order", "a", dir.path(), &EOS),
    )
    .await;
    eventually("every order joined", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() >= 100
    })
    .await;
    let out = read_committed(&kit, OUTPUT).await;
    let unknown: Vec<_> = out.iter().filter(|(_, _, v)| v.ends_with(":?")).collect();
    assert!(
        unknown.is_empty(),
        "orders processed before their customer: {unknown:?}"
    );
    assert_eq!(out.len(), 100);
    a.close(Duration::from_secs(30)).await.unwrap();
}

/// An application whose generated store names moved (an operation added
/// before an unnamed count) refuses to start, naming the changelog the
/// earlier version left, instead of counting again from zero.
#[tokio::test(start_paused = true)]
async fn a_topology_whose_generated_names_moved_is_refused_at_start() {
    let kit = testkit(1, 2).await;
    produce_lines(&kit, &["a b a".to_string()]).await;
    let version = |extra_step: bool| {
        let builder = StreamsBuilder::new();
        let lines = builder.stream::<(), String>(INPUT);
        let lines = if extra_step {
            lines.filter(|_, l| !l.is_empty())
        } else {
            lines
        };
        lines
            .flat_map_values(|l: String| l.split(' ').map(str::to_owned).collect::<Vec<_>>())
            .select_key(|_, w| w.clone())
            .group_by_key()
            .count()
            .to_stream()
            .map_values(|n| n.unwrap_or_default().to_string())
            .to(OUTPUT);
        builder.build().unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let v1 = start(
        version(false),
        streams_config(&kit, "evolve", "a", dir.path(), &EOS),
    )
    .await;
    eventually(
        "the first version counts",
        Duration::from_secs(60),
        || async { read_committed(&kit, OUTPUT).await.len() >= 3 },
    )
    .await;
    v1.close(Duration::from_secs(30)).await.unwrap();
    let second = weir_streams::KafkaStreams::start(
        version(true),
        streams_config(&kit, "evolve", "a", dir.path(), &EOS),
    )
    .await;
    let Err(err) = second else {
        panic!("the second version must not start");
    };
    let msg = err.to_string();
    assert!(
        msg.contains("evolve-KSTREAM-AGGREGATE-STATE-STORE-0000000004-changelog"),
        "{msg}"
    );
    assert!(msg.contains("Materialized::as_"), "{msg}");
}

/// `to_dynamic` on the runtime: each word goes to the topic its chooser
/// names, partitioned by its key like any sink.
#[tokio::test(start_paused = true)]
async fn a_topic_chooser_routes_each_record_on_the_runtime() {
    let kit = testkit(1, 2).await;
    for t in ["short-words", "long-words"] {
        kit.create_topic(t, 2, std::iter::empty::<(String, String)>())
            .await
            .unwrap();
    }
    let (input, counts) = lines(40, 5);
    produce_lines(&kit, &input).await;
    let builder = StreamsBuilder::new();
    builder
        .stream::<(), String>(INPUT)
        .flat_map_values(|l: String| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .select_key(|_, w| w.clone())
        .to_dynamic(|w, _| {
            if w.len() <= 5 {
                "short-words".to_string()
            } else {
                "long-words".to_string()
            }
        });
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        builder.build().unwrap(),
        streams_config(&kit, "router", "a", dir.path(), &EOS),
    )
    .await;
    let total: u64 = counts.values().sum();
    eventually("every word routed", Duration::from_secs(60), || async {
        let short = read_committed(&kit, "short-words").await.len();
        let long = read_committed(&kit, "long-words").await.len();
        (short + long) as u64 >= total
    })
    .await;
    let short = read_committed(&kit, "short-words").await;
    let long = read_committed(&kit, "long-words").await;
    assert!(short.iter().all(|(_, k, _)| k.len() <= 5));
    assert!(long.iter().all(|(_, k, _)| k.len() > 5));
    let want_short: u64 = counts
        .iter()
        .filter(|(w, _)| w.len() <= 5)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(short.len() as u64, want_short);
    assert_eq!((short.len() + long.len()) as u64, total);
    a.close(Duration::from_secs(30)).await.unwrap();
}

/// With caching on, the runtime forwards each count's latest value at the
/// commit: exact final counts, fewer output records than input words.
#[tokio::test(start_paused = true)]
async fn a_cached_count_forwards_its_latest_values_at_each_commit() {
    let kit = testkit(1, 2).await;
    let (input, expected) = lines(300, 9);
    produce_lines(&kit, &input).await;
    let builder = StreamsBuilder::new();
    builder
        .stream::<(), String>(INPUT)
        .flat_map_values(|l: String| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .select_key(|_, w| w.clone())
        .group_by_key()
        .materialized(Materialized::as_("counts").with_caching())
        .count()
        .to_stream()
        .map_values(|n| n.unwrap_or_default().to_string())
        .to(OUTPUT);
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        builder.build().unwrap(),
        streams_config(&kit, "cached", "a", dir.path(), &EOS),
    )
    .await;
    eventually("the final counts", Duration::from_secs(120), || async {
        last_counts(&read_committed(&kit, OUTPUT).await) == expected
    })
    .await;
    let words: u64 = expected.values().sum();
    let outputs = read_committed(&kit, OUTPUT).await.len() as u64;
    assert!(
        outputs < words,
        "{outputs} outputs for {words} words: the cache held nothing back"
    );
    a.close(Duration::from_secs(30)).await.unwrap();
}

/// The source-table optimisation: a table's input topic is its store's
/// changelog. No `-changelog` topic is made or written, and an instance that
/// takes the task over with no state restores the table from the input
/// topic itself, then joins right.
#[tokio::test(start_paused = true)]
async fn a_source_table_restores_from_its_own_topic_and_has_no_changelog() {
    let kit = testkit(1, 2).await;
    let (orders, customers) = ("orders", "customers");
    for t in [orders, customers] {
        kit.create_topic(t, 2, std::iter::empty::<(String, String)>())
            .await
            .unwrap();
    }
    let producer =
        Producer::with_cluster(client(&kit, "feeder").await, Default::default()).unwrap();
    let mut acks = Vec::new();
    for c in 0..20 {
        let record = ProducerRecord::new(customers)
            .with_key(format!("c{c}"))
            .with_value(format!("name-{c}"))
            .with_timestamp(1_000 + c);
        acks.push(producer.enqueue(record).await.unwrap());
    }
    for a in acks.drain(..) {
        a.await.unwrap();
    }
    let topology = || {
        let builder = StreamsBuilder::new();
        let names = builder.table::<String, String>(customers, Materialized::as_("names"));
        builder
            .stream::<String, String>(orders)
            .left_join(&names, |o, n| {
                format!("{o}:{}", n.map_or("?", String::as_str))
            })
            .to(OUTPUT);
        builder.build().unwrap()
    };
    let order = |o: usize| {
        ProducerRecord::new(orders)
            .with_key(format!("c{}", o % 20))
            .with_value(format!("o{o}"))
            .with_timestamp(5_000 + o as i64)
    };
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = start(
        topology(),
        streams_config(&kit, "src-table", "a", dirs[0].path(), &EOS),
    )
    .await;
    for o in 0..50 {
        acks.push(producer.enqueue(order(o)).await.unwrap());
    }
    producer.flush().await;
    for a in acks.drain(..) {
        a.await.unwrap();
    }
    eventually(
        "the first orders joined",
        Duration::from_secs(120),
        || async { read_committed(&kit, OUTPUT).await.len() >= 50 },
    )
    .await;
    let admin = weir_client::admin::Admin::new(client(&kit, "admin").await);
    let topics: Vec<String> = admin
        .list_topics()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(
        !topics.iter().any(|t| t.ends_with("-changelog")),
        "no changelog topic for a source table: {topics:?}"
    );
    crash(&kit, 1, "a", a).await;
    let b = start(
        topology(),
        streams_config(&kit, "src-table", "b", dirs[1].path(), &EOS),
    )
    .await;
    for o in 50..100 {
        acks.push(producer.enqueue(order(o)).await.unwrap());
    }
    producer.flush().await;
    for a in acks.drain(..) {
        a.await.unwrap();
    }
    eventually("every order joined", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() >= 100
    })
    .await;
    let out = read_committed(&kit, OUTPUT).await;
    assert_eq!(out.len(), 100, "each order once");
    let unknown: Vec<_> = out.iter().filter(|(_, _, v)| v.ends_with(":?")).collect();
    assert!(
        unknown.is_empty(),
        "joined without the restored table: {unknown:?}"
    );
    assert!(
        b.metrics().restored_records >= 20,
        "b restored the table from its topic: {:?}",
        b.metrics()
    );
    b.close(Duration::from_secs(30)).await.unwrap();
}

/// A pattern source on the runtime reads every matching topic that exists at
/// start, and only those.
#[tokio::test(start_paused = true)]
async fn a_pattern_source_reads_every_matching_topic() {
    let kit = testkit(1, 2).await;
    for t in ["clicks-eu", "clicks-us", "clickstream"] {
        kit.create_topic(t, 2, std::iter::empty::<(String, String)>())
            .await
            .unwrap();
    }
    let producer =
        Producer::with_cluster(client(&kit, "feeder").await, Default::default()).unwrap();
    let mut acks = Vec::new();
    for (topic, n) in [("clicks-eu", 30), ("clicks-us", 20), ("clickstream", 10)] {
        for i in 0..n {
            let r = ProducerRecord::new(topic)
                .with_key(format!("user{}", i % 5))
                .with_value(topic.to_string());
            acks.push(producer.enqueue(r).await.unwrap());
        }
    }
    producer.flush().await;
    for a in acks {
        a.await.unwrap();
    }
    let builder = StreamsBuilder::new();
    builder
        .stream_pattern::<String, String>("clicks-.*")
        .group_by_key()
        .count()
        .to_stream()
        .map_values(|n| n.unwrap_or_default().to_string())
        .to(OUTPUT);
    let topology = builder.build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        topology,
        streams_config(&kit, "pattern", "a", dir.path(), &EOS),
    )
    .await;
    eventually("50 clicks counted", Duration::from_secs(120), || async {
        read_committed(&kit, OUTPUT).await.len() >= 50
    })
    .await;
    let counts = last_counts(&read_committed(&kit, OUTPUT).await);
    assert_eq!(
        counts.values().sum::<u64>(),
        50,
        "clickstream is not read: {counts:?}"
    );
    a.close(Duration::from_secs(30)).await.unwrap();
}
