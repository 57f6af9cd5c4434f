//! Sliding-window aggregations against their definition, through the test
//! driver.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use proptest::prelude::*;
use weir_streams::dsl::{SlidingWindows, StreamsBuilder, Windowed};
use weir_streams::testing::TopologyTestDriver;

fn driver(diff: i64, grace: i64) -> TopologyTestDriver {
    let builder = StreamsBuilder::new();
    builder
        .stream::<String, String>("in")
        .group_by_key()
        .windowed_by_sliding(SlidingWindows::of_time_difference_and_grace(
            Duration::from_millis(diff as u64),
            Duration::from_millis(grace as u64),
        ))
        .count()
        .to_stream()
        .to("out");
    TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap()
}

fn run(records: &[(u8, i64)], diff: i64, grace: i64) -> (BTreeMap<(String, i64), i64>, u64) {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        let mut d = driver(diff, grace);
        for &(k, ts) in records {
            d.pipe("in", &format!("k{k}"), &"v".to_string(), ts)
                .unwrap();
        }
        let mut last = BTreeMap::new();
        for r in d
            .read_output::<Windowed<String>, Option<i64>>("out")
            .unwrap()
        {
            last.insert((r.key.key, r.key.window.start), r.value.unwrap());
        }
        (last, late_drops(&recorder))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// With nothing late, the windows are exactly each record's left window
    /// (`[max(0, t - d), ..]`) and each non-empty right window (`[t + 1,
    /// t + 1 + d]`), and each window's last count is the number of records
    /// it holds, whatever order the records came in.
    #[test]
    fn sliding_windows_are_the_records_left_and_right_windows(
        records in prop::collection::vec((0u8..3, 0i64..300), 1..50),
        diff in 1i64..50,
    ) {
        let (got, dropped) = run(&records, diff, 100_000);
        prop_assert_eq!(dropped, 0);
        let mut by_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for &(k, ts) in &records {
            by_key.entry(format!("k{k}")).or_default().push(ts);
        }
        let mut want = BTreeMap::new();
        for (k, ts) in by_key {
            let count = |s: i64| ts.iter().filter(|t| (s..=s + diff).contains(*t)).count() as i64;
            let distinct: BTreeSet<i64> = ts.iter().copied().collect();
            for &t in &distinct {
                let left = (t - diff).max(0);
                want.insert((k.clone(), left), count(left));
                if count(t + 1) > 0 {
                    want.insert((k.clone(), t + 1), count(t + 1));
                }
            }
        }
        prop_assert_eq!(got, want);
    }

    /// Late records are dropped exactly by Kafka Streams' rule: when
    /// `t + 1 + d <= stream time - grace`. And with records in order and no
    /// grace, nothing is late and the windows are as defined.
    #[test]
    fn late_sliding_records_are_dropped_by_kafkas_rule(
        records in prop::collection::vec((0u8..2, 0i64..300), 1..50),
        diff in 1i64..40,
        grace in 0i64..40,
    ) {
        let (_, dropped) = run(&records, diff, grace);
        let mut sorted = records.clone();
        sorted.sort_by_key(|r| r.1);
        let (in_order, in_order_dropped) = run(&sorted, diff, 0);
        let (unlimited, _) = run(&sorted, diff, 100_000);
        prop_assert_eq!(in_order_dropped, 0);
        prop_assert_eq!(in_order, unlimited, "in order, no grace is needed");
        let mut observed = i64::MIN;
        let mut want = 0;
        for &(_, t) in &records {
            observed = observed.max(t);
            if t + 1 + diff <= observed - grace {
                want += 1;
            }
        }
        prop_assert_eq!(dropped, want);
    }
}

/// Every output of an aggregation that lists the ids of the records folded
/// into each window (`"3,0,7,"`), the last per (key, window start), as sorted
/// ids; and the number of records dropped as late.
fn run_ids(
    records: &[(u8, i64)],
    diff: i64,
    grace: i64,
) -> (BTreeMap<(String, i64), Vec<usize>>, u64) {
    let recorder = DebuggingRecorder::new();
    metrics::with_local_recorder(&recorder, || {
        let builder = StreamsBuilder::new();
        builder
            .stream::<String, String>("in")
            .group_by_key()
            .windowed_by_sliding(SlidingWindows::of_time_difference_and_grace(
                Duration::from_millis(diff as u64),
                Duration::from_millis(grace as u64),
            ))
            .aggregate(String::new, |_, v: String, agg: String| agg + &v + ",")
            .to_stream()
            .to("out");
        let mut d = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
        for (id, &(k, ts)) in records.iter().enumerate() {
            d.pipe("in", &format!("k{k}"), &id.to_string(), ts).unwrap();
        }
        let mut last = BTreeMap::new();
        for r in d
            .read_output::<Windowed<String>, Option<String>>("out")
            .unwrap()
        {
            let mut ids: Vec<usize> = r
                .value
                .unwrap()
                .split_terminator(',')
                .map(|s| s.parse().unwrap())
                .collect();
            ids.sort_unstable();
            last.insert((r.key.key, r.key.window.start), ids);
        }
        (last, late_drops(&recorder))
    })
}

fn late_drops(recorder: &DebuggingRecorder) -> u64 {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, ..)| {
            k.key().name() == "weir_streams_dropped_records_total"
                && k.key().labels().any(|l| l.value() == "late")
        })
        .map(|(.., v)| match v {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

/// The definition, step by step over the input in arrival order: stream time
/// is the largest timestamp seen; a record is late (dropped, counted) when
/// `t + d < stream time - grace` (Kafka's `windowEnd < closeTime` for the
/// record's window starting at `t`); otherwise it is kept. After each kept
/// record, every window of its key that exists over the kept records (each
/// record's left window `[max(0, t - d), ..]`, and `[t + 1, t + 1 + d]` when
/// that holds a record) and is still open (`end >= stream time - grace`)
/// holds exactly the kept records in `[start, start + d]`. A window's final
/// value is what it held the last time it was open.
fn model(
    records: &[(u8, i64)],
    diff: i64,
    grace: i64,
) -> (BTreeMap<(String, i64), Vec<usize>>, u64) {
    let mut stream_time = i64::MIN;
    let mut kept: Vec<(u8, i64, usize)> = Vec::new();
    let mut last = BTreeMap::new();
    let mut dropped = 0;
    for (id, &(k, t)) in records.iter().enumerate() {
        stream_time = stream_time.max(t);
        let close = stream_time - grace;
        if t + diff < close {
            dropped += 1;
            continue;
        }
        kept.push((k, t, id));
        let mine: Vec<(i64, usize)> = kept
            .iter()
            .filter(|r| r.0 == k)
            .map(|r| (r.1, r.2))
            .collect();
        let holding = |s: i64| -> Vec<usize> {
            let mut ids: Vec<usize> = mine
                .iter()
                .filter(|(ts, _)| s <= *ts && *ts <= s + diff)
                .map(|(_, id)| *id)
                .collect();
            ids.sort_unstable();
            ids
        };
        let mut starts = BTreeSet::new();
        for &(ts, _) in &mine {
            starts.insert((ts - diff).max(0));
            if !holding(ts + 1).is_empty() {
                starts.insert(ts + 1);
            }
        }
        for s in starts {
            if s + diff >= close {
                last.insert((format!("k{k}"), s), holding(s));
            }
        }
    }
    (last, dropped)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Out of order and with little grace: each window's last output is the
    /// set of records the definition puts in it while it was open, and the
    /// late drops are the definition's.
    #[test]
    fn sliding_aggregates_with_grace_match_the_definition(
        records in prop::collection::vec((0u8..3, 0i64..300), 1..60),
        diff in 1i64..50,
        grace in 0i64..40,
    ) {
        let (got, dropped) = run_ids(&records, diff, grace);
        let (want, want_dropped) = model(&records, diff, grace);
        prop_assert_eq!(dropped, want_dropped, "late drops");
        prop_assert_eq!(got, want);
    }
}

/// A window whose end is exactly stream time minus grace is still open
/// (Kafka's `windowEnd >= closeTime`), and its store entry must still be
/// there: with d = 10 and no grace, after 19 and 20 (stream time 20, and the
/// right window of 19 starts at 20), a record at 10 is not late and joins
/// `[10, 20]`.
#[test]
fn a_window_ending_at_the_close_time_still_takes_records() {
    let (got, dropped) = run_ids(&[(0, 19), (0, 20), (0, 10)], 10, 0);
    assert_eq!(dropped, 0);
    assert_eq!(got.get(&("k0".to_string(), 10)), Some(&vec![0, 1, 2]));
    assert_eq!(got, model(&[(0, 19), (0, 20), (0, 10)], 10, 0).0);
}
