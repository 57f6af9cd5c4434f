//! The DSL's stateless operators, repartitioning and naming, through the
//! test driver.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use weir_streams::StreamsError;
use weir_streams::dsl::{Materialized, StreamsBuilder};
use weir_streams::testing::TopologyTestDriver;

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A chain of stateless operators equals the same chain over an
    /// iterator: filter, filter_not, map, map_values, flat_map_values,
    /// split with a default branch, merge, peek.
    #[test]
    fn stateless_chains_equal_the_iterator_model(
        records in prop::collection::vec((0u8..5, -50i64..50), 0..40),
    ) {
        let builder = StreamsBuilder::new();
        let input = builder.stream::<String, i64>("in");
        let peeked = Arc::new(Mutex::new(0usize));
        let p = Arc::clone(&peeked);
        let positive = input
            .peek(move |_, _| *p.lock().unwrap() += 1)
            .filter(|_, v| *v > 0)
            .map_values(|v| v * 10);
        positive.to("positive");
        input.filter_not(|_, v| *v > 0).to("not-positive");
        input
            .flat_map_values(|v| (0..v.rem_euclid(3)).map(move |i| v + i).collect::<Vec<_>>())
            .to("flat");
        input.map(|k, v| (format!("{v}"), k)).to("swapped");
        let branches = input
            .split()
            .branch(|_, v| *v < -10)
            .branch(|_, v| *v < 10)
            .default_branch();
        for (i, b) in branches.iter().enumerate() {
            b.to(&format!("branch-{i}"));
        }
        branches[0].merge(&branches[2]).to("outer");
        let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
        for (i, &(k, v)) in records.iter().enumerate() {
            driver.pipe("in", &format!("k{k}"), &v, i as i64).unwrap();
        }
        let read = |driver: &mut TopologyTestDriver, topic: &str| -> Vec<(String, i64)> {
            driver
                .read_output::<String, i64>(topic)
                .unwrap()
                .into_iter()
                .map(|r| (r.key, r.value))
                .collect()
        };
        let input: Vec<(String, i64)> = records.iter().map(|&(k, v)| (format!("k{k}"), v)).collect();
        let pos: Vec<_> = input.iter().filter(|r| r.1 > 0).map(|(k, v)| (k.clone(), v * 10)).collect();
        prop_assert_eq!(read(&mut driver, "positive"), pos);
        let not_pos: Vec<_> = input.iter().filter(|r| r.1 <= 0).cloned().collect();
        prop_assert_eq!(read(&mut driver, "not-positive"), not_pos);
        let flat: Vec<_> = input
            .iter()
            .flat_map(|(k, v)| (0..v.rem_euclid(3)).map(move |i| (k.clone(), v + i)))
            .collect();
        prop_assert_eq!(read(&mut driver, "flat"), flat);
        let swapped: Vec<(String, String)> = driver
            .read_output::<String, String>("swapped")
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect();
        let swapped_model: Vec<_> = input.iter().map(|(k, v)| (v.to_string(), k.clone())).collect();
        prop_assert_eq!(swapped, swapped_model);
        let b0: Vec<_> = input.iter().filter(|r| r.1 < -10).cloned().collect();
        let b1: Vec<_> = input.iter().filter(|r| (-10..10).contains(&r.1)).cloned().collect();
        let b2: Vec<_> = input.iter().filter(|r| r.1 >= 10).cloned().collect();
        prop_assert_eq!(read(&mut driver, "branch-0"), b0);
        prop_assert_eq!(read(&mut driver, "branch-1"), b1);
        prop_assert_eq!(read(&mut driver, "branch-2"), b2);
        // A merge keeps the order records arrived in.
        let outer: Vec<_> = input.iter().filter(|r| r.1 < -10 || r.1 >= 10).cloned().collect();
        prop_assert_eq!(read(&mut driver, "outer"), outer);
        prop_assert_eq!(*peeked.lock().unwrap(), records.len());
    }
}

/// A key change before a grouping repartitions through a topic named after
/// the store; a grouping on the source's own key does not.
#[test]
fn a_key_change_before_an_aggregation_repartitions_through_the_stores_topic() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<(), String>("lines")
        .flat_map_values(|l: String| l.split(' ').map(str::to_owned).collect::<Vec<_>>())
        .select_key(|_, w| w.clone())
        .group_by_key()
        .materialized(Materialized::as_("counts"))
        .count()
        .to_stream()
        .to("counts-out");
    let topology = builder.build().unwrap();
    assert_eq!(topology.subtopology_count(), 2);
    let described = topology.describe();
    assert!(
        described.contains("${application.id}-counts-repartition"),
        "{described}"
    );
    let mut driver = TopologyTestDriver::new(topology, "app").unwrap();
    driver.pipe("lines", &(), &"a b a".to_string(), 0).unwrap();
    driver.pipe("lines", &(), &"b a".to_string(), 1).unwrap();
    let mut last = BTreeMap::new();
    for r in driver.read_output::<String, i64>("counts-out").unwrap() {
        last.insert(r.key, r.value);
    }
    assert_eq!(last, BTreeMap::from([("a".into(), 3), ("b".into(), 2)]));
    let mut stored = driver.kv_store::<String, i64>("counts").unwrap();
    stored.sort();
    assert_eq!(stored, vec![("a".into(), 3), ("b".into(), 2)]);
    assert_eq!(
        driver.changelog("counts").len(),
        5,
        "every increment logged"
    );

    let plain = StreamsBuilder::new();
    plain
        .stream::<String, String>("clicks")
        .filter(|_, v| !v.is_empty())
        .map_values(|v| v.len() as i64)
        .group_by_key()
        .reduce(|a, b| a + b)
        .to_stream()
        .to("out");
    let topology = plain.build().unwrap();
    assert_eq!(topology.subtopology_count(), 1, "{}", topology.describe());
    assert!(!topology.describe().contains("repartition"));
}

/// `group_by` always repartitions; `repartition` resets the key-changed
/// mark, so a grouping after it does not repartition again.
#[test]
fn group_by_repartitions_and_an_explicit_repartition_is_not_repeated() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("views")
        .group_by(|_user, page| page.clone())
        .materialized(Materialized::as_("per-page"))
        .count()
        .to_stream()
        .to("out");
    let described = builder.build().unwrap().describe();
    assert!(described.contains("per-page-repartition"), "{described}");

    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("views")
        .select_key(|_, page| page.clone())
        .repartition(Some("by-page"), Some(4))
        .group_by_key()
        .materialized(Materialized::as_("per-page"))
        .count();
    let topology = builder.build().unwrap();
    let described = topology.describe();
    assert!(described.contains("by-page-repartition"), "{described}");
    assert!(!described.contains("per-page-repartition"), "{described}");
    assert_eq!(topology.subtopology_count(), 2);
}

/// Generated names follow Kafka Streams' numbering; named operations and
/// stores keep their names; a name used twice is a build error naming it.
#[test]
fn names_are_generated_in_kafkas_format_or_given() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in")
        .named("only-long")
        .filter(|_, v| v.len() > 3)
        .map_values(|v| v.to_uppercase())
        .to("out");
    let described = builder.build().unwrap().describe();
    assert!(
        described.contains("Source: KSTREAM-SOURCE-0000000000"),
        "{described}"
    );
    assert!(described.contains("Processor: only-long"), "{described}");
    assert!(
        described.contains("Processor: KSTREAM-MAPVALUES-0000000001"),
        "{described}"
    );
    assert!(
        described.contains("Sink: KSTREAM-SINK-0000000002"),
        "{described}"
    );

    let builder = StreamsBuilder::new();
    let s = builder.stream::<String, String>("in");
    s.named("twice").filter(|_, _| true).to("a");
    s.named("twice").filter(|_, _| true).to("b");
    match builder.build() {
        Err(StreamsError::InvalidTopology(msg)) => assert!(msg.contains("twice"), "{msg}"),
        other => panic!("expected an invalid topology, got {other:?}"),
    }
}

/// Bytes that do not decode as the stream's types are a deserialization
/// error, never a panic.
#[test]
fn a_serde_mismatch_is_an_error() {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, i64>("numbers")
        .map_values(|v| v + 1)
        .to("out");
    let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    let err = driver
        .pipe(
            "numbers",
            &"k".to_string(),
            &"not eight bytes".to_string(),
            0,
        )
        .unwrap_err();
    assert!(matches!(err, StreamsError::Serde(_)), "{err:?}");
    driver.pipe("numbers", &"k".to_string(), &41i64, 1).unwrap();
    assert_eq!(
        driver.read_output::<String, i64>("out").unwrap()[0].value,
        42
    );
}

/// With caching on, a table forwards only the latest value per key at each
/// commit (the driver commits after each piped record); without it, every
/// update.
#[test]
fn a_cached_table_forwards_the_latest_value_per_key_at_commit() {
    let counts = |caching: bool| {
        let builder = StreamsBuilder::new();
        let m = Materialized::as_("counts");
        let m = if caching { m.with_caching() } else { m };
        builder
            .stream::<(), String>("lines")
            .flat_map_values(|l: String| l.split(' ').map(str::to_owned).collect::<Vec<_>>())
            .select_key(|_, w| w.clone())
            .group_by_key()
            .materialized(m)
            .count()
            .to_stream()
            .to("out");
        let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
        driver
            .pipe("lines", &(), &"a b a a".to_string(), 0)
            .unwrap();
        driver.pipe("lines", &(), &"b".to_string(), 1).unwrap();
        driver
            .read_output::<String, i64>("out")
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect::<Vec<_>>()
    };
    let s = |k: &str, n: i64| (k.to_owned(), n);
    assert_eq!(
        counts(false),
        vec![s("a", 1), s("b", 1), s("a", 2), s("a", 3), s("b", 2)]
    );
    assert_eq!(counts(true), vec![s("a", 3), s("b", 1), s("b", 2)]);
}
