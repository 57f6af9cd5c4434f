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
        let dropped = recorder
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
            .sum();
        (last, dropped)
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
