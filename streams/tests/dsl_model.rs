//! The DSL's stateful operators against brute-force models, through the
//! test driver: windowed aggregations (tumbling, hopping, session) with
//! out-of-order and late records, suppression, and the joins.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use proptest::prelude::*;
use weir_streams::dsl::{
    Materialized, SessionWindowed, SessionWindows, StreamsBuilder, TimeWindows, Windowed,
};
use weir_streams::testing::TopologyTestDriver;

fn key(k: u8) -> String {
    format!("k{k}")
}

/// The number of records the DSL dropped as late, from the metrics facade.
fn dropped_late(recorder: &DebuggingRecorder) -> u64 {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, ..)| {
            k.key().name() == "weir_streams_dropped_records_total"
                && k.key()
                    .labels()
                    .any(|l| l.key() == "reason" && l.value() == "late")
        })
        .map(|(.., v)| match v {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

/// Counts per (key, window start) and the records dropped, computed from
/// the definition: a record counts in every window `[s, s + size)` with `s`
/// a multiple of `advance` that holds it, unless the window's end is at or
/// before the stream time (the largest timestamp so far) minus grace.
fn time_window_model(
    records: &[(u8, i64)],
    size: i64,
    advance: i64,
    grace: i64,
) -> (BTreeMap<(String, i64), i64>, u64) {
    let mut counts = BTreeMap::new();
    let mut observed = i64::MIN;
    let mut dropped = 0;
    for &(k, ts) in records {
        observed = observed.max(ts);
        let mut any = false;
        let mut s = 0;
        while s <= ts {
            if s + size > ts && s + size > observed - grace {
                *counts.entry((key(k), s)).or_insert(0) += 1;
                any = true;
            }
            s += advance;
        }
        if !any {
            dropped += 1;
        }
    }
    (counts, dropped)
}

fn windowed_count_driver(
    size: i64,
    advance: i64,
    grace: i64,
    suppress: bool,
) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    let windows = TimeWindows::of_size_and_grace(
        Duration::from_millis(size as u64),
        Duration::from_millis(grace as u64),
    )
    .advance_by(Duration::from_millis(advance as u64));
    let counts = builder
        .stream::<String, String>("views")
        .group_by_key()
        .windowed_by(windows)
        .materialized(Materialized::as_("views-per-window"))
        .count();
    let counts = if suppress {
        counts.suppress_until_window_closes()
    } else {
        counts
    };
    counts.to_stream().to("out");
    TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every update of a windowed count, and the records dropped as late,
    /// match the definition, for tumbling and hopping windows with records
    /// out of order.
    #[test]
    fn time_windowed_counts_match_the_definition(
        records in prop::collection::vec((0u8..3, 0i64..300), 1..60),
        size in 1i64..60,
        advance_pct in 1i64..=100,
        grace in 0i64..40,
    ) {
        let advance = (size * advance_pct / 100).max(1);
        let recorder = DebuggingRecorder::new();
        let (last, dropped) = metrics::with_local_recorder(&recorder, || {
            let mut driver = windowed_count_driver(size, advance, grace, false);
            for &(k, ts) in &records {
                driver.pipe("views", &key(k), &"v".to_string(), ts).unwrap();
            }
            let out = driver.read_output::<Windowed<String>, Option<i64>>("out").unwrap();
            let mut last = BTreeMap::new();
            for r in out {
                prop_assert_eq!(r.key.window.end, i64::MAX, "a time-windowed key read back has no end");
                last.insert((r.key.key, r.key.window.start), r.value.unwrap());
            }
            Ok((last, dropped_late(&recorder)))
        })?;
        let (model, model_dropped) = time_window_model(&records, size, advance, grace);
        prop_assert_eq!(last, model);
        prop_assert_eq!(dropped, model_dropped);
    }

    /// With suppression, each closed window's final count comes out once and
    /// nothing else does.
    #[test]
    fn suppressed_counts_are_final_and_emitted_once(
        records in prop::collection::vec((0u8..3, 0i64..300), 1..60),
        size in 1i64..60,
        advance_pct in 1i64..=100,
        grace in 0i64..40,
    ) {
        let advance = (size * advance_pct / 100).max(1);
        let mut driver = windowed_count_driver(size, advance, grace, true);
        for &(k, ts) in &records {
            driver.pipe("views", &key(k), &"v".to_string(), ts).unwrap();
        }
        let out = driver.read_output::<Windowed<String>, Option<i64>>("out").unwrap();
        let (model, _) = time_window_model(&records, size, advance, grace);
        let observed = records.iter().map(|r| r.1).max().unwrap();
        let expected: BTreeMap<_, _> = model
            .into_iter()
            .filter(|((_, start), _)| start + size <= observed - grace)
            .collect();
        let mut emitted = BTreeMap::new();
        for r in out {
            let id = (r.key.key.clone(), r.key.window.start);
            prop_assert_eq!(r.key.window.end, i64::MAX, "a time-windowed key read back has no end");
            prop_assert!(emitted.insert(id, r.value.unwrap()).is_none(), "emitted twice");
        }
        prop_assert_eq!(emitted, expected);
    }
}

type Sessions = BTreeMap<(String, i64, i64), i64>;
/// A model session: start, end, count.
type Session = (i64, i64, i64);

fn session_driver(gap: i64, grace: i64) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("clicks")
        .group_by_key()
        .windowed_by_session(SessionWindows::of_inactivity_gap_and_grace(
            Duration::from_millis(gap as u64),
            Duration::from_millis(grace as u64),
        ))
        .count()
        .to_stream()
        .to("out");
    TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap()
}

/// The live sessions after applying every output (a `None` ends one).
fn live_sessions(driver: &mut TopologyTestDriver) -> Sessions {
    let mut live = Sessions::new();
    for r in driver
        .read_output::<SessionWindowed<String>, Option<i64>>("out")
        .unwrap()
    {
        let id = (r.key.key, r.key.window.start, r.key.window.end);
        match r.value {
            Some(n) => live.insert(id, n),
            None => live.remove(&id),
        };
    }
    live
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// With a grace longer than the input's span nothing is late, and the
    /// sessions are the clusters of each key's sorted timestamps split where
    /// two neighbours are more than the gap apart, whatever the order the
    /// records came in.
    #[test]
    fn sessions_are_the_gap_clusters_of_each_keys_timestamps(
        records in prop::collection::vec((0u8..3, 0i64..400), 1..60),
        gap in 1i64..40,
    ) {
        let mut driver = session_driver(gap, 1_000);
        for &(k, ts) in &records {
            driver.pipe("clicks", &key(k), &"c".to_string(), ts).unwrap();
        }
        let live = live_sessions(&mut driver);
        let mut by_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for &(k, ts) in &records {
            by_key.entry(key(k)).or_default().push(ts);
        }
        let mut model = Sessions::new();
        for (k, mut ts) in by_key {
            ts.sort_unstable();
            let (mut start, mut end, mut n) = (ts[0], ts[0], 0);
            for t in ts {
                if t - end > gap {
                    model.insert((k.clone(), start, end), n);
                    start = t;
                    n = 0;
                }
                end = t;
                n += 1;
            }
            model.insert((k, start, end), n);
        }
        prop_assert_eq!(live, model);
    }

    /// With a short grace, late records are dropped exactly when the session
    /// they would make ends before stream time minus grace (Kafka Streams'
    /// rule), counted by the metric, and the rest merge as sessions do with
    /// the sessions still kept: those whose end is within gap + grace of the
    /// largest session end stored.
    #[test]
    fn late_session_records_are_dropped_by_kafkas_rule(
        records in prop::collection::vec((0u8..2, 0i64..300), 1..60),
        gap in 1i64..30,
        grace in 0i64..30,
    ) {
        let recorder = DebuggingRecorder::new();
        let (live, dropped) = metrics::with_local_recorder(&recorder, || {
            let mut driver = session_driver(gap, grace);
            for &(k, ts) in &records {
                driver.pipe("clicks", &key(k), &"c".to_string(), ts).unwrap();
            }
            (live_sessions(&mut driver), dropped_late(&recorder))
        });
        // The model: a list of sessions per key, merged by brute force.
        let mut model: BTreeMap<String, Vec<(i64, i64, i64)>> = BTreeMap::new();
        let mut observed = i64::MIN;
        let mut model_dropped = 0;
        let mut stored_time = i64::MIN;
        for &(k, ts) in &records {
            observed = observed.max(ts);
            let sessions = model.entry(key(k)).or_default();
            let (near, far): (Vec<&Session>, Vec<&Session>) = sessions
                .iter()
                .partition(|(s, e, _)| {
                    // A session the store no longer keeps cannot be extended
                    // (its output stays as it was).
                    let kept = *e > stored_time.saturating_sub(gap + grace);
                    kept && *e >= ts - gap && *s <= ts + gap
                });
            let start = near.iter().map(|x| x.0).chain([ts]).min().unwrap();
            let end = near.iter().map(|x| x.1).chain([ts]).max().unwrap();
            if end < observed - grace {
                model_dropped += 1;
                continue;
            }
            let n = near.iter().map(|x| x.2).sum::<i64>() + 1;
            stored_time = stored_time.max(end);
            *sessions = far.into_iter().copied().chain([(start, end, n)]).collect();
        }
        let model: Sessions = model
            .into_iter()
            .flat_map(|(k, v)| v.into_iter().map(move |(s, e, n)| ((k.clone(), s, e), n)))
            .collect();
        prop_assert_eq!(live, model);
        prop_assert_eq!(dropped, model_dropped);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Order(u8, i64),
    Customer(u8, Option<i64>),
    Region(u8, Option<i64>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, 0i64..100).prop_map(|(k, v)| Op::Order(k, v)),
        (0u8..4, prop::option::of(0i64..100)).prop_map(|(k, v)| Op::Customer(k, v)),
        (0u8..4, prop::option::of(0i64..100)).prop_map(|(k, v)| Op::Region(k, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Stream-table (inner, left) and table-table (inner, left, outer)
    /// joins: each output record equals the join of the tables as they were
    /// when the record that caused it arrived.
    #[test]
    fn joins_match_the_tables_at_each_update(ops in prop::collection::vec(op(), 1..80)) {
        let builder = StreamsBuilder::new();
        let customers = builder.table::<String, i64>("customers", Materialized::as_("customers"));
        let regions = builder.table::<String, i64>("regions", Materialized::default());
        let orders = builder.stream::<String, i64>("orders");
        orders.join(&customers, |o, c| o * 1000 + c).to("inner");
        orders
            .left_join(&customers, |o, c| o * 1000 + c.copied().unwrap_or(-1))
            .to("left");
        customers
            .join(&regions, |c, r| c * 1000 + r)
            .to_stream()
            .to("tt-inner");
        customers
            .left_join(&regions, |c, r| c * 1000 + r.copied().unwrap_or(-1))
            .to_stream()
            .to("tt-left");
        customers
            .outer_join(&regions, |c, r| c.copied().unwrap_or(-1) * 1000 + r.copied().unwrap_or(-1))
            .to_stream()
            .to("tt-outer");
        let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();

        let mut c: BTreeMap<String, i64> = BTreeMap::new();
        let mut r: BTreeMap<String, i64> = BTreeMap::new();
        let mut want: BTreeMap<&str, Vec<(String, Option<i64>)>> = BTreeMap::new();
        for (ts, op) in ops.iter().enumerate() {
            let ts = ts as i64;
            match op {
                Op::Order(k, v) => {
                    driver.pipe("orders", &key(*k), v, ts).unwrap();
                    let row = c.get(&key(*k)).copied();
                    if let Some(row) = row {
                        want.entry("inner").or_default().push((key(*k), Some(v * 1000 + row)));
                    }
                    want.entry("left").or_default().push((key(*k), Some(v * 1000 + row.unwrap_or(-1))));
                }
                Op::Customer(k, v) | Op::Region(k, v) => {
                    let is_customer = matches!(op, Op::Customer(..));
                    let topic = if is_customer { "customers" } else { "regions" };
                    driver.pipe(topic, &key(*k), v, ts).unwrap();
                    let map = if is_customer { &mut c } else { &mut r };
                    match v {
                        Some(v) => map.insert(key(*k), *v),
                        None => map.remove(&key(*k)),
                    };
                    let (cv, rv) = (c.get(&key(*k)).copied(), r.get(&key(*k)).copied());
                    let inner = cv.zip(rv).map(|(a, b)| a * 1000 + b);
                    let left = cv.map(|a| a * 1000 + rv.unwrap_or(-1));
                    let outer = (cv.is_some() || rv.is_some())
                        .then(|| cv.unwrap_or(-1) * 1000 + rv.unwrap_or(-1));
                    want.entry("tt-inner").or_default().push((key(*k), inner));
                    want.entry("tt-left").or_default().push((key(*k), left));
                    want.entry("tt-outer").or_default().push((key(*k), outer));
                }
            }
        }
        for topic in ["inner", "left", "tt-inner", "tt-left", "tt-outer"] {
            let got: Vec<(String, Option<i64>)> = driver
                .read_output::<String, Option<i64>>(topic)
                .unwrap()
                .into_iter()
                .map(|r| (r.key, r.value))
                .collect();
            let expected = want.get(topic).cloned().unwrap_or_default();
            prop_assert_eq!(got, expected, "topic {}", topic);
        }
        let mut stored = driver.kv_store::<String, i64>("customers").unwrap();
        stored.sort();
        prop_assert_eq!(stored, c.into_iter().collect::<Vec<_>>());
    }
}

#[derive(Debug, Clone)]
struct JoinInput {
    left: bool,
    key: u8,
    value: u8,
    ts: i64,
}

fn join_input() -> impl Strategy<Value = JoinInput> {
    (any::<bool>(), 0u8..3, 0u8..50, 0i64..200).prop_map(|(left, key, value, ts)| JoinInput {
        left,
        key,
        value,
        ts,
    })
}

/// Stream-stream joins as Kafka Streams defines them, by brute force over
/// lists: a record later than its window's end plus grace behind stream
/// time is dropped; an accepted record joins every record of the other
/// side with its key inside the window; for left and outer joins a record
/// that has joined nothing comes out with `None` once stream time passes its
/// window's end plus grace, unless a partner came first.
fn stream_join_model(
    inputs: &[JoinInput],
    before: i64,
    after: i64,
    grace: i64,
    left_outer: bool,
    right_outer: bool,
) -> Vec<(String, String, i64)> {
    let mut observed = i64::MIN;
    let mut lefts: Vec<(u8, u8, i64)> = Vec::new();
    let mut rights: Vec<(u8, u8, i64)> = Vec::new();
    // (side is left, key, value, ts) still waiting for a partner
    let mut pending: Vec<(bool, u8, u8, i64)> = Vec::new();
    let mut out = Vec::new();
    let show = |l: Option<u8>, r: Option<u8>| {
        format!(
            "{}|{}",
            l.map_or("-".into(), |v| v.to_string()),
            r.map_or("-".into(), |v| v.to_string())
        )
    };
    for i in inputs {
        let reach = if i.left { after } else { before };
        if i.ts + reach + grace < observed {
            continue;
        }
        observed = observed.max(i.ts);
        let partners: Vec<(u8, u8, i64)> = if i.left {
            rights
                .iter()
                .filter(|r| r.0 == i.key && r.2 >= i.ts - before && r.2 <= i.ts + after)
                .copied()
                .collect()
        } else {
            lefts
                .iter()
                .filter(|l| l.0 == i.key && l.2 >= i.ts - after && l.2 <= i.ts + before)
                .copied()
                .collect()
        };
        for p in &partners {
            let (l, r) = if i.left {
                (i.value, p.1)
            } else {
                (p.1, i.value)
            };
            out.push((key(i.key), show(Some(l), Some(r)), i.ts.max(p.2)));
            pending.retain(|q| !(q.0 != i.left && q.1 == i.key && q.3 == p.2));
        }
        if i.left {
            lefts.push((i.key, i.value, i.ts));
        } else {
            rights.push((i.key, i.value, i.ts));
        }
        if partners.is_empty() && ((i.left && left_outer) || (!i.left && right_outer)) {
            pending.push((i.left, i.key, i.value, i.ts));
        }
        pending.retain(|q| {
            let reach = if q.0 { after } else { before };
            if q.3 + reach + grace < observed {
                let (l, r) = if q.0 {
                    (Some(q.2), None)
                } else {
                    (None, Some(q.2))
                };
                out.push((key(q.1), show(l, r), q.3));
                false
            } else {
                true
            }
        });
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Windowed stream-stream joins (inner, left, outer) with out-of-order
    /// and late records equal the brute-force model.
    #[test]
    fn windowed_stream_joins_match_the_model(
        inputs in prop::collection::vec(join_input(), 1..50),
        before in 0i64..30,
        after in 0i64..30,
        grace in 0i64..30,
    ) {
        use weir_streams::dsl::JoinWindows;
        let windows = JoinWindows::of_time_difference_and_grace(
            Duration::from_millis(before as u64),
            Duration::from_millis(grace as u64),
        )
        .after(Duration::from_millis(after as u64));
        let show = |l: Option<&i64>, r: Option<&i64>| {
            format!(
                "{}|{}",
                l.map_or("-".into(), |v| v.to_string()),
                r.map_or("-".into(), |v| v.to_string())
            )
        };
        for (kind, lo, ro) in [("inner", false, false), ("left", true, false), ("outer", true, true)] {
            let builder = StreamsBuilder::new();
            let l = builder.stream::<String, i64>("l");
            let r = builder.stream::<String, i64>("r");
            let joined = match kind {
                "inner" => l.join_windowed(&r, windows, move |a, b| show(Some(a), Some(b))),
                "left" => l.left_join_windowed(&r, windows, move |a, b| show(Some(a), b)),
                _ => l.outer_join_windowed(&r, windows, show),
            };
            joined.to("out");
            let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
            for i in &inputs {
                let topic = if i.left { "l" } else { "r" };
                driver.pipe(topic, &key(i.key), &i64::from(i.value), i.ts).unwrap();
            }
            let mut got: Vec<(String, String, i64)> = driver
                .read_output::<String, String>("out")
                .unwrap()
                .into_iter()
                .map(|r| (r.key, r.value, r.timestamp))
                .collect();
            got.sort();
            let want = stream_join_model(&inputs, before, after, grace, lo, ro);
            prop_assert_eq!(got, want, "{} join", kind);
        }
    }
}
