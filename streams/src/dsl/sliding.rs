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
    /// Windows of `difference` and no grace: a record is dropped as late once
    /// its right window `[t + 1, t + 1 + difference]` ends before stream time
    /// (Kafka's `ofTimeDifferenceWithNoGrace`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::SlidingWindows;
    /// let w = SlidingWindows::of_time_difference_with_no_grace(Duration::from_secs(5));
    /// assert_eq!((w.time_difference_ms(), w.grace_ms()), (5_000, 0));
    /// ```
    pub fn of_time_difference_with_no_grace(difference: Duration) -> Self {
        Self::of_time_difference_and_grace(difference, Duration::ZERO)
    }

    /// Windows of `difference`, whose updates are accepted until stream time
    /// passes their end by more than `grace` (Kafka's
    /// `ofTimeDifferenceAndGrace`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weir_streams::dsl::SlidingWindows;
    /// let w = SlidingWindows::of_time_difference_and_grace(Duration::from_millis(300), Duration::from_millis(50));
    /// assert_eq!((w.time_difference_ms(), w.grace_ms()), (300, 50));
    /// ```
    pub fn of_time_difference_and_grace(difference: Duration, grace: Duration) -> Self {
        SlidingWindows {
            diff_ms: ms(difference),
            grace_ms: ms(grace),
        }
    }

    /// The windows' length in ms: a window spans `[start, start + this]`,
    /// both ends included.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::SlidingWindows;
    /// let w = SlidingWindows::of_time_difference_with_no_grace(Duration::from_millis(1_500));
    /// assert_eq!(w.time_difference_ms(), 1_500);
    /// ```
    pub fn time_difference_ms(&self) -> i64 {
        self.diff_ms
    }

    /// The grace period in ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::SlidingWindows;
    /// let w = SlidingWindows::of_time_difference_and_grace(Duration::from_secs(1), Duration::from_millis(250));
    /// assert_eq!(w.grace_ms(), 250);
    /// ```
    pub fn grace_ms(&self) -> i64 {
        self.grace_ms
    }
}

/// A grouped stream with sliding windows (Kafka Streams'
/// `SlidingWindowedKStream`), from [`KGroupedStream::windowed_by_sliding`]:
/// [`count`](Self::count), [`reduce`](Self::reduce) or
/// [`aggregate`](Self::aggregate) give a table of `Windowed<K>` whose window
/// end is its start plus the time difference.
///
/// ```
/// # use std::time::Duration;
/// # use weir_streams::dsl::{SlidingWindowedKStream, SlidingWindows, StreamsBuilder};
/// let builder = StreamsBuilder::new();
/// let windowed: SlidingWindowedKStream<String, String> = builder
///     .stream::<String, String>("clicks")
///     .group_by_key()
///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_secs(30)));
/// windowed.count().to_stream().to("clicks-in-any-30s");
/// # builder.build().unwrap();
/// ```
///
/// [`KGroupedStream::windowed_by_sliding`]: crate::dsl::KGroupedStream::windowed_by_sliding
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
    /// Names the window store, keeps it in memory, or sets its retention. The
    /// records behind the windows go to a second window store,
    /// `<name>-records`, with the same options.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{Materialized, SlidingWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_millis(10)))
    ///     .materialized(Materialized::as_("recent-clicks"))
    ///     .count();
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("clicks", &"u".to_string(), &"c".to_string(), 30).unwrap();
    /// let u = "u".to_string();
    /// // The record's left window [20, 30].
    /// assert_eq!(driver.window_fetch::<String, i64>("recent-clicks", &u, 0, 100).unwrap(), vec![(20, 1)]);
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
    /// builder.stream::<String, i64>("spend").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_millis(10)))
    ///     .reduce(|a, b| a + b)
    ///     .to_stream().to("spend-in-any-10ms");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for (amount, ts) in [(5i64, 20), (7, 25)] {
    ///     driver.pipe("spend", &"u".to_string(), &amount, ts).unwrap();
    /// }
    /// let out = driver.read_output::<Windowed<String>, Option<i64>>("spend-in-any-10ms").unwrap();
    /// let got: Vec<_> = out.iter().map(|r| (r.key.window.start, r.value)).collect();
    /// // [10,20] = 5, then [15,25] = 5 + 7 and [21,31] = 7.
    /// assert_eq!(got, vec![(10, Some(5)), (15, Some(12)), (21, Some(7))]);
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
    /// builder.stream::<String, String>("pages").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_millis(10)))
    ///     .aggregate(String::new, |_, page, trail: String| trail + &page)
    ///     .to_stream().to("trails");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for (page, ts) in [("b", 25), ("a", 20)] {
    ///     driver.pipe("pages", &"u".to_string(), &page.to_string(), ts).unwrap();
    /// }
    /// let out = driver.read_output::<Windowed<String>, Option<String>>("trails").unwrap();
    /// let last = out.iter().rfind(|r| r.key.window.start == 15).unwrap();
    /// // [15, 25] holds both, folded in timestamp order though "b" came first.
    /// assert_eq!(last.value.as_deref(), Some("ab"));
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
