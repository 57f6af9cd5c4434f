//! Sliding windows (KIP-450): windows of a fixed length defined by the
//! records themselves, for aggregations.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::dsl::Materialized;
use crate::dsl::grouped::{Update, prepare, record_dropped, retention};
use crate::dsl::join::ValueList;
use crate::dsl::stream::KStream;
use crate::dsl::table::KTable;
use crate::dsl::window::{Window, Windowed};
use crate::error::ProcessError;
use crate::processor::{Processor, ProcessorContext};
use crate::record::Record;
use crate::serde::Serde;
use crate::state::WindowStoreRef;

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Sliding windows (Kafka Streams' `SlidingWindows`): windows
/// `[start, start + difference]`, both ends included, that exist only where
/// records are: each record at `t` has a left window ending at `t` (starting
/// at `max(0, t - difference)`) and, when later records fall within the
/// difference, a right window starting at `t + 1`. A window's aggregate is
/// that of exactly the records it holds. A record is dropped as late when
/// even its right window has closed: `t + 1 + difference <= stream time -
/// grace`.
///
/// ```
/// use std::time::Duration;
/// use weir_streams::dsl::SlidingWindows;
/// let w = SlidingWindows::of_time_difference_and_grace(Duration::from_secs(10), Duration::from_secs(2));
/// assert_eq!((w.time_difference_ms(), w.grace_ms()), (10_000, 2_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindows {
    diff_ms: i64,
    grace_ms: i64,
}

impl SlidingWindows {
    /// Windows of `difference`; late records are dropped.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SlidingWindows, StreamsBuilder, Windowed};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_millis(10)))
    ///     .count()
    ///     .to_stream().to("out");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("clicks", &"u".to_string(), &"c".to_string(), 20).unwrap();
    /// driver.pipe("clicks", &"u".to_string(), &"c".to_string(), 35).unwrap();
    /// // Even its right window [23,33] closed at stream time 35: dropped.
    /// driver.pipe("clicks", &"u".to_string(), &"c".to_string(), 22).unwrap();
    /// let out = driver.read_output::<Windowed<String>, Option<i64>>("out").unwrap();
    /// let got: Vec<_> = out.iter().map(|r| (r.key.window.start, r.value)).collect();
    /// assert_eq!(got, vec![(10, Some(1)), (25, Some(1))]); // [10,20] and [25,35]
    /// ```
    pub fn of_time_difference_with_no_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// Windows of `difference`, accepting records up to `grace` late.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SlidingWindows, StreamsBuilder, Windowed};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_and_grace(
    ///         Duration::from_millis(10),
    ///         Duration::from_millis(5),
    ///     ))
    ///     .count()
    ///     .to_stream().to("out");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("clicks", &"u".to_string(), &"c".to_string(), 20).unwrap();
    /// driver.pipe("clicks", &"u".to_string(), &"c".to_string(), 35).unwrap();
    /// // Its right window [23,33] is within the grace at stream time 35: accepted,
    /// // and the first record's right window [21,31], still open, now holds it.
    /// driver.pipe("clicks", &"u".to_string(), &"c".to_string(), 22).unwrap();
    /// let out = driver.read_output::<Windowed<String>, Option<i64>>("out").unwrap();
    /// let got: Vec<_> = out.iter().map(|r| (r.key.window.start, r.value)).collect();
    /// assert_eq!(got, vec![(10, Some(1)), (25, Some(1)), (21, Some(1))]);
    /// ```
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        SlidingWindows {
            diff_ms: ms(difference),
            grace_ms: ms(grace),
        }
    }

    /// The windows' length in ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SlidingWindows, StreamsBuilder};
    /// let windows = SlidingWindows::of_time_difference_with_no_grace(Duration::from_secs(60));
    /// assert_eq!(windows.time_difference_ms(), 60_000);
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("logins").group_by_key().windowed_by_sliding(windows).count();
    /// # builder.build().unwrap();
    /// ```
    pub fn time_difference_ms(&self) -> i64 {
        self.diff_ms
    }

    /// The grace period in ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SlidingWindows, StreamsBuilder};
    /// let windows =
    ///     SlidingWindows::of_time_difference_and_grace(Duration::from_secs(60), Duration::from_secs(5));
    /// assert_eq!(windows.grace_ms(), 5_000);
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("logins").group_by_key().windowed_by_sliding(windows).count();
    /// # builder.build().unwrap();
    /// ```
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }
}

/// A grouped stream with sliding windows (Kafka Streams'
/// `SlidingWindowedKStream`). Made by
/// [`KGroupedStream::windowed_by_sliding`](crate::dsl::KGroupedStream::windowed_by_sliding).
///
/// ```
/// # use std::time::Duration;
/// # use weir_streams::dsl::{SlidingWindows, StreamsBuilder, Windowed};
/// # use weir_streams::testing::TopologyTestDriver;
/// let builder = StreamsBuilder::new();
/// let last_minute = builder.stream::<String, String>("logins").group_by_key()
///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_secs(60)));
/// last_minute.count().to_stream().to("logins-in-a-minute");
/// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
/// driver.pipe("logins", &"ada".to_string(), &"ok".to_string(), 90_000).unwrap();
/// let out = driver.read_output::<Windowed<String>, i64>("logins-in-a-minute").unwrap();
/// assert_eq!((out[0].key.window.start, out[0].value), (30_000, 1)); // [30 s, 90 s]
/// ```
pub struct SlidingWindowedKStream<K, V> {
    pub(crate) stream: KStream<K, V>,
    pub(crate) windows: SlidingWindows,
    pub(crate) materialized: Materialized,
}

impl<K, V> std::fmt::Debug for SlidingWindowedKStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlidingWindowedKStream")
            .field("windows", &self.windows)
            .finish_non_exhaustive()
    }
}

impl<K, V> SlidingWindowedKStream<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    /// Names the window store, keeps it in memory, or sets its retention.
    /// The records the windows are computed from go to a second store, named
    /// after the first with `-records`, kept the same way.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{Materialized, SlidingWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_millis(10)))
    ///     .materialized(Materialized::as_("clicks-10ms").in_memory())
    ///     .count();
    /// let topology = builder.build().unwrap();
    /// let mut names: Vec<_> = topology.stores().filter(|s| s.in_memory).map(|s| s.name.clone()).collect();
    /// names.sort();
    /// assert_eq!(names, vec!["clicks-10ms", "clicks-10ms-records"]);
    /// let mut driver = TopologyTestDriver::new(topology, "app").unwrap();
    /// driver.pipe("clicks", &"u".to_string(), &"c".to_string(), 20).unwrap();
    /// let windows = driver.window_fetch::<String, i64>("clicks-10ms", &"u".to_string(), 0, i64::MAX);
    /// assert_eq!(windows.unwrap(), vec![(10, 1)]);
    /// ```
    pub fn materialized(mut self, materialized: Materialized) -> Self {
        self.materialized = materialized;
        self
    }

    fn aggregate_with<A>(&self, kind: &str, update: Update<K, V, A>) -> KTable<Windowed<K>, A>
    where
        A: Serde + Clone,
    {
        let p = prepare(&self.stream, &self.materialized, kind);
        let shared = p.input.shared.clone();
        let windows = self.windows;
        let records_store = format!("{}-records", p.store);
        let diff = windows.diff_ms;
        let keep_windows = retention(
            &self.materialized,
            diff.saturating_add(windows.grace_ms).saturating_add(2),
        );
        // A record is read again while a window holding it can still change.
        let keep_records = retention(
            &self.materialized,
            diff.saturating_mul(2)
                .saturating_add(windows.grace_ms)
                .saturating_add(2),
        );
        let name: Arc<str> = Arc::from(p.processor.as_str());
        let node = shared.with(|inner| {
            let aggs = inner.builder.window_store::<K, A>(&p.store, keep_windows);
            let records = inner
                .builder
                .window_store::<K, ValueList<V>>(&records_store, keep_records);
            self.materialized.apply(&mut inner.builder, &p.store);
            self.materialized.apply(&mut inner.builder, &records_store);
            let (a, r) = (aggs.clone(), records.clone());
            inner.builder.processor(
                &p.processor,
                &[&p.input.node],
                move || SlidingAggregate {
                    aggs: a.clone(),
                    records: r.clone(),
                    windows,
                    update: Arc::clone(&update),
                    observed: i64::MIN,
                    name: Arc::clone(&name),
                },
                &[&aggs, &records],
            )
        });
        KTable::new(shared, node, None, Some(windows.grace_ms))
    }

    /// The number of records per key and window.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SlidingWindows, StreamsBuilder, Windowed};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_millis(10)))
    ///     .count()
    ///     .to_stream().to("out");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for ts in [20, 25] {
    ///     driver.pipe("clicks", &"u".to_string(), &"c".to_string(), ts).unwrap();
    /// }
    /// let out = driver.read_output::<Windowed<String>, Option<i64>>("out").unwrap();
    /// let got: Vec<_> = out.iter().map(|r| (r.key.window.start, r.value)).collect();
    /// // [10,20]=1; then [15,25]=2 (the second record's left window) and
    /// // [21,31]=1 (the first record's right window, now holding the second).
    /// assert_eq!(got, vec![(10, Some(1)), (15, Some(2)), (21, Some(1))]);
    /// ```
    pub fn count(&self) -> KTable<Windowed<K>, i64> {
        self.aggregate_with(
            "AGGREGATE",
            Arc::new(|_, _, old: Option<i64>| old.unwrap_or(0) + 1),
        )
    }

    /// Combines the values of each key and window with `reducer`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SlidingWindows, StreamsBuilder, Windowed};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, i64>("temperatures").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_millis(10)))
    ///     .reduce(|a, b| a.max(b))
    ///     .to_stream().to("hottest");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("temperatures", &"oslo".to_string(), &3i64, 20).unwrap();
    /// driver.pipe("temperatures", &"oslo".to_string(), &5i64, 25).unwrap();
    /// let out = driver.read_output::<Windowed<String>, i64>("hottest").unwrap();
    /// let got: Vec<_> = out.iter().map(|r| (r.key.window.start, r.value)).collect();
    /// // [10,20] holds 3; [15,25] holds 3 and 5; [21,31] holds 5.
    /// assert_eq!(got, vec![(10, 3), (15, 5), (21, 5)]);
    /// ```
    pub fn reduce(
        &self,
        reducer: impl Fn(V, V) -> V + Send + Sync + 'static,
    ) -> KTable<Windowed<K>, V> {
        self.aggregate_with(
            "REDUCE",
            Arc::new(move |_, v, old: Option<V>| match old {
                Some(agg) => reducer(agg, v),
                None => v,
            }),
        )
    }

    /// Folds the values of each key and window (in timestamp order) into an
    /// aggregate that starts at `initializer()`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SlidingWindows, StreamsBuilder, Windowed};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, i64>("amounts").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_millis(10)))
    ///     .aggregate(|| 0i64, |_key, amount, total| total + amount)
    ///     .to_stream().to("totals");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("amounts", &"ada".to_string(), &3i64, 20).unwrap();
    /// driver.pipe("amounts", &"ada".to_string(), &5i64, 25).unwrap();
    /// let out = driver.read_output::<Windowed<String>, i64>("totals").unwrap();
    /// let got: Vec<_> = out.iter().map(|r| (r.key.window.start, r.value)).collect();
    /// assert_eq!(got, vec![(10, 3), (15, 8), (21, 5)]);
    /// ```
    pub fn aggregate<A>(
        &self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        adder: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
    ) -> KTable<Windowed<K>, A>
    where
        A: Serde + Clone,
    {
        self.aggregate_with(
            "AGGREGATE",
            Arc::new(move |k, v, old: Option<A>| adder(k, v, old.unwrap_or_else(&initializer))),
        )
    }
}

/// Keeps each key's records (by timestamp) beside the window aggregates, and
/// recomputes every window a new record touches from the records it holds:
/// the windows holding the record, and those it brings into existence (its
/// own left and right windows, and the right window of the record before
/// it).
struct SlidingAggregate<K, V, A> {
    aggs: WindowStoreRef<K, A>,
    records: WindowStoreRef<K, ValueList<V>>,
    windows: SlidingWindows,
    update: Update<K, V, A>,
    observed: i64,
    name: Arc<str>,
}

impl<K, V, A> Processor<K, V> for SlidingAggregate<K, V, A>
where
    K: Serde + Clone,
    V: Serde + Clone,
    A: Serde + Clone,
{
    type KOut = Windowed<K>;
    type VOut = Option<A>;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, Windowed<K>, Option<A>>,
        record: Record<K, V>,
    ) -> Result<(), ProcessError> {
        let t = record.timestamp;
        let diff = self.windows.diff_ms;
        if t < 0 {
            record_dropped(&self.name, "negative-timestamp", t);
            return Ok(());
        }
        self.observed = self.observed.max(t);
        let close = self.observed.saturating_sub(self.windows.grace_ms);
        if t.saturating_add(1).saturating_add(diff) <= close {
            record_dropped(&self.name, "late", t);
            return Ok(());
        }
        let records = ctx.window_store(&self.records)?;
        let aggs = ctx.window_store(&self.aggs)?;
        let key = record.key;
        let mut here = records
            .fetch(&key, t, t)?
            .pop()
            .map_or_else(|| ValueList(Vec::new()), |(_, l)| l);
        here.0.push(record.value);
        records.put(&key, &here, t)?;
        // Every record a touched window can hold, or that decides whether a
        // window exists, in timestamp order.
        let nearby = records.fetch(
            &key,
            t.saturating_sub(diff).saturating_sub(1).max(0),
            t.saturating_add(diff).saturating_add(1),
        )?;
        let stamps: BTreeSet<i64> = nearby.iter().map(|(ts, _)| *ts).collect();
        let holds = |s: i64| stamps.range(s..=s.saturating_add(diff)).next().is_some();
        let exists = |s: i64| {
            holds(s)
                && (stamps.contains(&s.saturating_add(diff))
                    || (s == 0 && stamps.range(..=diff).next().is_some())
                    || stamps.contains(&s.saturating_sub(1)))
        };
        let mut starts = BTreeSet::new();
        starts.insert(t.saturating_sub(diff).max(0));
        starts.insert(t.saturating_add(1));
        for &r in stamps.range(t.saturating_sub(diff).saturating_sub(1)..t) {
            starts.insert(r + 1);
        }
        for &r in stamps.range(t..=t.saturating_add(diff)) {
            starts.insert(r.saturating_sub(diff).max(0));
        }
        for s in starts {
            let end = s.saturating_add(diff);
            // Both ends are inside a sliding window: it closes once stream
            // time minus grace passes its end (Kafka's `windowEnd >= closeTime`).
            if !exists(s) || end < close {
                continue;
            }
            let holds_t = s <= t && t <= end;
            let stored = aggs.fetch(&key, s, s)?.pop();
            if !holds_t && stored.is_some() {
                // A window the record is not in, and that existed already.
                continue;
            }
            let mut agg: Option<A> = None;
            let mut max_ts = s;
            for (ts, values) in nearby.iter().filter(|(ts, _)| (s..=end).contains(ts)) {
                max_ts = *ts;
                for v in &values.0 {
                    agg = Some((self.update)(&key, v.clone(), agg));
                }
            }
            let Some(agg) = agg else {
                continue;
            };
            if aggs.put(&key, &agg, s)? {
                ctx.forward(Record::new(
                    Windowed::new(key.clone(), Window { start: s, end }),
                    Some(agg),
                    max_ts,
                ));
            }
        }
        Ok(())
    }
}
