//! Grouped streams and their aggregations: plain, time-windowed and
//! session-windowed, each into a store with a changelog.

use std::sync::Arc;
use std::time::Duration;

use crate::dsl::Materialized;
use crate::dsl::cache::RecordCache;
use crate::dsl::sliding::{SlidingWindowedKStream, SlidingWindows};
use crate::dsl::stream::KStream;
use crate::dsl::table::KTable;
use crate::dsl::window::{
    Prefixed, SessionWindowed, SessionWindows, TimeWindows, Window, Windowed,
};
use crate::error::ProcessError;
use crate::processor::{Processor, ProcessorContext};
use crate::record::Record;
use crate::serde::Serde;
use crate::state::{KvStoreRef, WindowStoreRef};

/// How an aggregation folds one value into the aggregate so far (`None`
/// before the key's first record).
pub(crate) type Update<K, V, A> = Arc<dyn Fn(&K, V, Option<A>) -> A + Send + Sync>;
/// How two session aggregates combine when a record joins their sessions.
type Merge<K, A> = Arc<dyn Fn(&K, A, A) -> A + Send + Sync>;

/// Counts a record an aggregation drops, and logs it: Kafka Streams'
/// `dropped-records` metric.
pub(crate) fn record_dropped(processor: &str, reason: &'static str, timestamp: i64) {
    metrics::counter!(
        "weir_streams_dropped_records_total",
        "processor" => processor.to_owned(),
        "reason" => reason,
    )
    .increment(1);
    tracing::debug!(processor, reason, timestamp, "record dropped");
}

/// A stream grouped by key, ready to aggregate (Kafka Streams'
/// `KGroupedStream`). Made by [`KStream::group_by_key`] or
/// [`KStream::group_by`].
///
/// ```
/// # use weir_streams::dsl::StreamsBuilder;
/// # use weir_streams::testing::TopologyTestDriver;
/// let builder = StreamsBuilder::new();
/// let by_page = builder.stream::<String, String>("views").group_by(|_user, page| page.clone());
/// by_page.count().to_stream().to("views-per-page");
/// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
/// driver.pipe("views", &"ada".to_string(), &"/home".to_string(), 0).unwrap();
/// driver.pipe("views", &"bob".to_string(), &"/home".to_string(), 1).unwrap();
/// let out = driver.read_output::<String, i64>("views-per-page").unwrap();
/// assert_eq!(out.iter().map(|r| (r.key.as_str(), r.value)).collect::<Vec<_>>(),
///     vec![("/home", 1), ("/home", 2)]);
/// ```
pub struct KGroupedStream<K, V> {
    stream: KStream<K, V>,
    materialized: Materialized,
}

impl<K, V> std::fmt::Debug for KGroupedStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KGroupedStream")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// The parts every aggregation shares: its input (repartitioned if the key
/// changed), and its processor's and store's names.
pub(crate) struct Prepared<K, V> {
    pub(crate) input: KStream<K, V>,
    pub(crate) processor: String,
    pub(crate) store: String,
}

pub(crate) fn prepare<K, V>(
    stream: &KStream<K, V>,
    materialized: &Materialized,
    kind: &str,
) -> Prepared<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    let shared = &stream.shared;
    let store = shared.name_or(
        materialized.name.clone(),
        &format!("KSTREAM-{kind}-STATE-STORE"),
    );
    let input = stream.repartitioned_if_needed(&store);
    let processor = shared.name_or(stream.next_name.clone(), &format!("KSTREAM-{kind}"));
    Prepared {
        input,
        processor,
        store,
    }
}

impl<K, V> KGroupedStream<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    pub(crate) fn new(stream: KStream<K, V>) -> Self {
        KGroupedStream {
            stream,
            materialized: Materialized::default(),
        }
    }

    /// Names the aggregation's store (and so its changelog and, after a key
    /// change, its repartition topic), or keeps it in memory.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").group_by_key()
    ///     .materialized(Materialized::as_("counts"))
    ///     .count();
    /// assert!(builder.build().unwrap().describe().contains("counts"));
    /// ```
    pub fn materialized(mut self, materialized: Materialized) -> Self {
        self.materialized = materialized;
        self
    }

    fn aggregate_with<A>(&self, kind: &str, update: Update<K, V, A>) -> KTable<K, A>
    where
        A: Serde + Clone,
    {
        let p = prepare(&self.stream, &self.materialized, kind);
        let shared = p.input.shared.clone();
        let caching = self.materialized.caching;
        let node = shared.with(|inner| {
            let store = inner.builder.kv_store::<K, A>(&p.store);
            self.materialized.apply(&mut inner.builder, &p.store);
            let s = store.clone();
            inner.builder.processor(
                &p.processor,
                &[&p.input.node],
                move || Aggregate {
                    store: s.clone(),
                    update: Arc::clone(&update),
                    cache: caching.then(RecordCache::default),
                },
                &[&store],
            )
        });
        KTable::new(shared, node, Some(KvStoreRef::new(&p.store)), None)
    }

    /// The number of records per key, as a table (Kafka Streams' `count()`,
    /// a `Long` value).
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key().count().to_stream().to("counts");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for _ in 0..3 {
    ///     driver.pipe("clicks", &"alice".to_string(), &"x".to_string(), 0).unwrap();
    /// }
    /// let out = driver.read_output::<String, i64>("counts").unwrap();
    /// assert_eq!(out.iter().map(|r| r.value).collect::<Vec<_>>(), vec![1, 2, 3]);
    /// ```
    pub fn count(&self) -> KTable<K, i64> {
        self.aggregate_with(
            "AGGREGATE",
            Arc::new(|_, _, old: Option<i64>| old.unwrap_or(0) + 1),
        )
    }

    /// Combines the values of each key with `reducer(aggregate, value)`; the
    /// first value is the aggregate as it is.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, i64>("amounts").group_by_key().reduce(|a, b| a.max(b))
    ///     .to_stream().to("largest");
    /// # builder.build().unwrap();
    /// ```
    pub fn reduce(&self, reducer: impl Fn(V, V) -> V + Send + Sync + 'static) -> KTable<K, V> {
        self.aggregate_with(
            "REDUCE",
            Arc::new(move |_, v, old: Option<V>| match old {
                Some(agg) => reducer(agg, v),
                None => v,
            }),
        )
    }

    /// Folds the values of each key into an aggregate that starts at
    /// `initializer()`.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, i64>("amounts").group_by_key()
    ///     .aggregate(|| 0i64, |_key, amount, total| total + amount)
    ///     .to_stream().to("totals");
    /// # builder.build().unwrap();
    /// ```
    pub fn aggregate<A>(
        &self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        adder: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
    ) -> KTable<K, A>
    where
        A: Serde + Clone,
    {
        self.aggregate_with(
            "AGGREGATE",
            Arc::new(move |k, v, old: Option<A>| adder(k, v, old.unwrap_or_else(&initializer))),
        )
    }

    /// Aggregates per key and time window.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{StreamsBuilder, TimeWindows};
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("views").group_by_key()
    ///     .windowed_by(TimeWindows::of_size_with_no_grace(Duration::from_secs(60)))
    ///     .count()
    ///     .to_stream().to("views-per-minute");
    /// # builder.build().unwrap();
    /// ```
    pub fn windowed_by(&self, windows: TimeWindows) -> TimeWindowedKStream<K, V> {
        TimeWindowedKStream {
            stream: self.stream.clone(),
            windows,
            materialized: self.materialized.clone(),
        }
    }

    /// Aggregates per key in sliding windows (see [`SlidingWindows`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SlidingWindows, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("logins").group_by_key()
    ///     .windowed_by_sliding(SlidingWindows::of_time_difference_with_no_grace(Duration::from_secs(60)))
    ///     .count()
    ///     .to_stream().to("logins-in-any-minute");
    /// # builder.build().unwrap();
    /// ```
    pub fn windowed_by_sliding(&self, windows: SlidingWindows) -> SlidingWindowedKStream<K, V> {
        SlidingWindowedKStream {
            stream: self.stream.clone(),
            windows,
            materialized: self.materialized.clone(),
        }
    }

    /// Aggregates per key and session. A session's store keeps it until its
    /// end is the gap plus grace behind stream time (longer with
    /// [`Materialized::with_retention`]): a late record that would reach
    /// back to a session already forgotten starts a new one, as in Kafka
    /// Streams.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{StreamsBuilder, SessionWindows};
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("activity").group_by_key()
    ///     .windowed_by_session(SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_secs(300)))
    ///     .count()
    ///     .to_stream().to("sessions");
    /// # builder.build().unwrap();
    /// ```
    pub fn windowed_by_session(&self, windows: SessionWindows) -> SessionWindowedKStream<K, V> {
        SessionWindowedKStream {
            stream: self.stream.clone(),
            windows,
            materialized: self.materialized.clone(),
        }
    }
}

/// Folds each record into its key's aggregate in a key-value store.
struct Aggregate<K, V, A> {
    store: KvStoreRef<K, A>,
    update: Update<K, V, A>,
    /// With caching on: the updates held back until the commit.
    cache: Option<RecordCache<K, A>>,
}

impl<K, V, A> Processor<K, V> for Aggregate<K, V, A>
where
    K: Serde + Clone,
    V: Serde + Clone,
    A: Serde + Clone,
{
    type KOut = K;
    type VOut = Option<A>;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, K, Option<A>>,
        record: Record<K, V>,
    ) -> Result<(), ProcessError> {
        let store = ctx.kv_store(&self.store)?;
        let old = store.get(&record.key)?;
        let new = (self.update)(&record.key, record.value, old);
        store.put(&record.key, &new, record.timestamp)?;
        let update = Record {
            key: record.key,
            value: Some(new),
            timestamp: record.timestamp,
            headers: record.headers,
        };
        match &mut self.cache {
            Some(cache) => cache.put(ctx, update),
            None => ctx.forward(update),
        }
        Ok(())
    }

    fn flush(&mut self, ctx: &mut ProcessorContext<'_, K, Option<A>>) -> Result<(), ProcessError> {
        if let Some(cache) = &mut self.cache {
            cache.flush(ctx);
        }
        Ok(())
    }
}

/// A grouped stream with time windows (Kafka Streams'
/// `TimeWindowedKStream`). Made by [`KGroupedStream::windowed_by`].
///
/// ```
/// # use std::time::Duration;
/// # use weir_streams::dsl::{StreamsBuilder, TimeWindows, Windowed};
/// # use weir_streams::testing::TopologyTestDriver;
/// let builder = StreamsBuilder::new();
/// let per_minute = builder.stream::<String, String>("views").group_by_key()
///     .windowed_by(TimeWindows::of_size_with_no_grace(Duration::from_secs(60)));
/// per_minute.count().to_stream().to("views-per-minute");
/// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
/// for ts in [1_000, 59_000, 61_000] {
///     driver.pipe("views", &"ada".to_string(), &"/".to_string(), ts).unwrap();
/// }
/// let out = driver.read_output::<Windowed<String>, i64>("views-per-minute").unwrap();
/// assert_eq!(out.iter().map(|r| (r.key.window.start, r.value)).collect::<Vec<_>>(),
///     vec![(0, 1), (0, 2), (60_000, 1)]);
/// ```
pub struct TimeWindowedKStream<K, V> {
    stream: KStream<K, V>,
    windows: TimeWindows,
    materialized: Materialized,
}

impl<K, V> std::fmt::Debug for TimeWindowedKStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeWindowedKStream")
            .field("windows", &self.windows)
            .finish_non_exhaustive()
    }
}

pub(crate) fn retention(materialized: &Materialized, needed_ms: i64) -> Duration {
    let needed = Duration::from_millis(u64::try_from(needed_ms.max(1)).unwrap_or(u64::MAX));
    materialized.retention.map_or(needed, |r| r.max(needed))
}

impl<K, V> TimeWindowedKStream<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    /// Names the window store, keeps it in memory, or sets its retention.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder, TimeWindows};
    /// # use weir_streams::state::StoreType;
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("views").group_by_key()
    ///     .windowed_by(TimeWindows::of_size_with_no_grace(Duration::from_secs(60)))
    ///     .materialized(Materialized::as_("views-per-minute").with_retention(Duration::from_secs(3600)))
    ///     .count();
    /// let topology = builder.build().unwrap();
    /// let store = topology.stores().find(|s| s.name == "views-per-minute").unwrap();
    /// assert!(matches!(store.kind, StoreType::Window { retention, .. } if retention.as_secs() == 3600));
    /// let mut driver = TopologyTestDriver::new(topology, "app").unwrap();
    /// driver.pipe("views", &"ada".to_string(), &"/".to_string(), 61_000).unwrap();
    /// let windows = driver.window_fetch::<String, i64>("views-per-minute", &"ada".to_string(), 0, i64::MAX);
    /// assert_eq!(windows.unwrap(), vec![(60_000, 1)]);
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
        let keep = retention(
            &self.materialized,
            windows.size_ms.saturating_add(windows.grace_ms),
        );
        let name: Arc<str> = Arc::from(p.processor.as_str());
        let node = shared.with(|inner| {
            let store = inner.builder.window_store::<K, A>(&p.store, keep);
            self.materialized.apply(&mut inner.builder, &p.store);
            let s = store.clone();
            inner.builder.processor(
                &p.processor,
                &[&p.input.node],
                move || WindowAggregate {
                    store: s.clone(),
                    windows,
                    update: Arc::clone(&update),
                    observed: i64::MIN,
                    name: Arc::clone(&name),
                },
                &[&store],
            )
        });
        KTable::new(shared, node, None, Some(windows.grace_ms))
    }

    /// The number of records per key and window.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{StreamsBuilder, TimeWindows, Windowed};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("views").group_by_key()
    ///     // Hopping windows: 10 s long, a new one every 5 s.
    ///     .windowed_by(TimeWindows::of_size_with_no_grace(Duration::from_secs(10))
    ///         .advance_by(Duration::from_secs(5)))
    ///     .count()
    ///     .to_stream().to("counts");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("views", &"ada".to_string(), &"/".to_string(), 7_000).unwrap();
    /// let out = driver.read_output::<Windowed<String>, i64>("counts").unwrap();
    /// // 7 s is in [0 s, 10 s) and [5 s, 15 s).
    /// assert_eq!(out.iter().map(|r| (r.key.window.start, r.value)).collect::<Vec<_>>(),
    ///     vec![(0, 1), (5_000, 1)]);
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
    /// # use weir_streams::dsl::{StreamsBuilder, TimeWindows, Windowed};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, i64>("temperatures").group_by_key()
    ///     .windowed_by(TimeWindows::of_size_with_no_grace(Duration::from_secs(60)))
    ///     .reduce(|a, b| a.max(b))
    ///     .to_stream().to("hottest-per-minute");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for (t, ts) in [(20i64, 0), (25, 10_000), (18, 20_000), (15, 60_000)] {
    ///     driver.pipe("temperatures", &"oslo".to_string(), &t, ts).unwrap();
    /// }
    /// let out = driver.read_output::<Windowed<String>, i64>("hottest-per-minute").unwrap();
    /// assert_eq!(out.iter().map(|r| (r.key.window.start, r.value)).collect::<Vec<_>>(),
    ///     vec![(0, 20), (0, 25), (0, 25), (60_000, 15)]);
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

    /// Folds the values of each key and window into an aggregate that starts
    /// at `initializer()`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{StreamsBuilder, TimeWindows, Windowed};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, i64>("amounts").group_by_key()
    ///     .windowed_by(TimeWindows::of_size_with_no_grace(Duration::from_secs(60)))
    ///     .aggregate(|| 0i64, |_key, amount, total| total + amount)
    ///     .to_stream().to("totals-per-minute");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for (amount, ts) in [(5i64, 0), (7, 30_000), (1, 60_000)] {
    ///     driver.pipe("amounts", &"ada".to_string(), &amount, ts).unwrap();
    /// }
    /// let out = driver.read_output::<Windowed<String>, i64>("totals-per-minute").unwrap();
    /// assert_eq!(out.iter().map(|r| (r.key.window.start, r.value)).collect::<Vec<_>>(),
    ///     vec![(0, 5), (0, 12), (60_000, 1)]);
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

/// Folds each record into every time window that contains it and is not yet
/// closed (its end plus grace is past the stream time this processor saw).
struct WindowAggregate<K, V, A> {
    store: WindowStoreRef<K, A>,
    windows: TimeWindows,
    update: Update<K, V, A>,
    observed: i64,
    name: Arc<str>,
}

impl<K, V, A> Processor<K, V> for WindowAggregate<K, V, A>
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
        let ts = record.timestamp;
        if ts < 0 {
            record_dropped(&self.name, "negative-timestamp", ts);
            return Ok(());
        }
        self.observed = self.observed.max(ts);
        let close = self.observed.saturating_sub(self.windows.grace_ms);
        let store = ctx.window_store(&self.store)?;
        let mut accepted = false;
        for (start, end) in self.windows.windows_for(ts) {
            if end <= close {
                continue;
            }
            let old = store
                .fetch(&record.key, start, start)?
                .pop()
                .map(|(_, a)| a);
            let new = (self.update)(&record.key, record.value.clone(), old);
            if store.put(&record.key, &new, start)? {
                accepted = true;
                ctx.forward(Record {
                    key: Windowed::new(record.key.clone(), Window { start, end }),
                    value: Some(new),
                    timestamp: ts,
                    headers: record.headers.clone(),
                });
            }
        }
        if !accepted {
            record_dropped(&self.name, "late", ts);
        }
        Ok(())
    }
}

/// A grouped stream with session windows (Kafka Streams'
/// `SessionWindowedKStream`). Made by [`KGroupedStream::windowed_by_session`].
///
/// ```
/// # use std::time::Duration;
/// # use weir_streams::dsl::{SessionWindowed, SessionWindows, StreamsBuilder};
/// # use weir_streams::testing::TopologyTestDriver;
/// let builder = StreamsBuilder::new();
/// let sessions = builder.stream::<String, String>("clicks").group_by_key()
///     .windowed_by_session(SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_secs(300)));
/// sessions.count().to_stream().to("clicks-per-session");
/// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
/// driver.pipe("clicks", &"ada".to_string(), &"/".to_string(), 0).unwrap();
/// driver.pipe("clicks", &"bob".to_string(), &"/".to_string(), 1_000).unwrap();
/// let out = driver.read_output::<SessionWindowed<String>, Option<i64>>("clicks-per-session").unwrap();
/// assert_eq!(out.iter().map(|r| (r.key.key.as_str(), r.value)).collect::<Vec<_>>(),
///     vec![("ada", Some(1)), ("bob", Some(1))]);
/// ```
pub struct SessionWindowedKStream<K, V> {
    stream: KStream<K, V>,
    windows: SessionWindows,
    materialized: Materialized,
}

impl<K, V> std::fmt::Debug for SessionWindowedKStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWindowedKStream")
            .field("windows", &self.windows)
            .finish_non_exhaustive()
    }
}

impl<K, V> SessionWindowedKStream<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    /// Names the session store, keeps it in memory, or sets its retention.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{Materialized, SessionWindows, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .windowed_by_session(SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_secs(300)))
    ///     .materialized(Materialized::as_("sessions").in_memory())
    ///     .count();
    /// let topology = builder.build().unwrap();
    /// let store = topology.stores().find(|s| s.name == "sessions").unwrap();
    /// assert!(store.in_memory && store.logged);
    /// ```
    pub fn materialized(mut self, materialized: Materialized) -> Self {
        self.materialized = materialized;
        self
    }

    fn aggregate_with<A>(
        &self,
        kind: &str,
        update: Update<K, V, A>,
        merge: Merge<K, A>,
    ) -> KTable<SessionWindowed<K>, A>
    where
        A: Serde + Clone,
    {
        let p = prepare(&self.stream, &self.materialized, kind);
        let shared = p.input.shared.clone();
        let windows = self.windows;
        // Sessions are stored under their end and kept while it is within
        // gap + grace of the stream time (Kafka Streams' default): every
        // session a record can still extend without being late is kept; one
        // that ended earlier is forgotten, and a record reaching back to it
        // starts a new session, as in Kafka Streams.
        let keep = retention(
            &self.materialized,
            windows.gap_ms.saturating_add(windows.grace_ms),
        );
        let name: Arc<str> = Arc::from(p.processor.as_str());
        let node = shared.with(|inner| {
            let store = inner
                .builder
                .window_store::<K, Option<Prefixed<A>>>(&p.store, keep);
            self.materialized.apply(&mut inner.builder, &p.store);
            let s = store.clone();
            inner.builder.processor(
                &p.processor,
                &[&p.input.node],
                move || SessionAggregate {
                    store: s.clone(),
                    windows,
                    update: Arc::clone(&update),
                    merge: Arc::clone(&merge),
                    observed: i64::MIN,
                    name: Arc::clone(&name),
                },
                &[&store],
            )
        });
        KTable::new(shared, node, None, Some(windows.grace_ms))
    }

    /// The number of records per key and session.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SessionWindowed, SessionWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .windowed_by_session(SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_millis(10)))
    ///     .count()
    ///     .to_stream().to("sessions");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for ts in [0, 5, 30] {
    ///     driver.pipe("clicks", &"u".to_string(), &"x".to_string(), ts).unwrap();
    /// }
    /// let out = driver.read_output::<SessionWindowed<String>, Option<i64>>("sessions").unwrap();
    /// // [0,0]=1; then [0,0] is replaced: a tombstone and [0,5]=2; then [30,30]=1.
    /// let last: Vec<_> = out.iter().map(|r| (r.key.window.start, r.key.window.end, r.value)).collect();
    /// assert_eq!(last, vec![(0, 0, Some(1)), (0, 0, None), (0, 5, Some(2)), (30, 30, Some(1))]);
    /// ```
    pub fn count(&self) -> KTable<SessionWindowed<K>, i64> {
        self.aggregate_with(
            "AGGREGATE",
            Arc::new(|_, _, old: Option<i64>| old.unwrap_or(0) + 1),
            Arc::new(|_, a, b| a + b),
        )
    }

    /// Combines the values of each key and session with `reducer` (also
    /// used to merge two sessions a record joins).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SessionWindowed, SessionWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("pages").group_by_key()
    ///     .windowed_by_session(SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_millis(10)))
    ///     .reduce(|path, page| format!("{path} {page}"))
    ///     .to_stream().to("paths");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for (page, ts) in [("/home", 0), ("/cart", 5), ("/home", 30)] {
    ///     driver.pipe("pages", &"ada".to_string(), &page.to_string(), ts).unwrap();
    /// }
    /// let out = driver.read_output::<SessionWindowed<String>, Option<String>>("paths").unwrap();
    /// let live: Vec<_> = out.iter().filter_map(|r| Some((r.key.window.start, r.value.clone()?))).collect();
    /// assert_eq!(live, vec![(0, "/home".to_string()), (0, "/home /cart".to_string()), (30, "/home".to_string())]);
    /// ```
    pub fn reduce(
        &self,
        reducer: impl Fn(V, V) -> V + Send + Sync + 'static,
    ) -> KTable<SessionWindowed<K>, V> {
        let reducer = Arc::new(reducer);
        let r2 = Arc::clone(&reducer);
        self.aggregate_with(
            "REDUCE",
            Arc::new(move |_, v, old: Option<V>| match old {
                Some(agg) => reducer(agg, v),
                None => v,
            }),
            Arc::new(move |_, a, b| r2(a, b)),
        )
    }

    /// Folds the values of each key and session into an aggregate that
    /// starts at `initializer()`; `merger` combines two sessions' aggregates
    /// when a record joins them.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{SessionWindowed, SessionWindows, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, i64>("spend").group_by_key()
    ///     // A 10 ms gap; the grace keeps [0,0] in the store when stream time is 16.
    ///     .windowed_by_session(SessionWindows::of_inactivity_gap_and_grace(
    ///         Duration::from_millis(10),
    ///         Duration::from_millis(10),
    ///     ))
    ///     .aggregate(|| 0i64, |_key, amount, total| total + amount, |_key, a, b| a + b)
    ///     .to_stream().to("spend-per-session");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// // Two sessions, [0,0] and [16,16], then a record at 8 within 10 ms of both: one session.
    /// for (amount, ts) in [(1i64, 0), (2, 16), (4, 8)] {
    ///     driver.pipe("spend", &"ada".to_string(), &amount, ts).unwrap();
    /// }
    /// let out = driver.read_output::<SessionWindowed<String>, Option<i64>>("spend-per-session").unwrap();
    /// let last = out.last().unwrap();
    /// assert_eq!((last.key.window.start, last.key.window.end, last.value), (0, 16, Some(7)));
    /// ```
    pub fn aggregate<A>(
        &self,
        initializer: impl Fn() -> A + Send + Sync + 'static,
        adder: impl Fn(&K, V, A) -> A + Send + Sync + 'static,
        merger: impl Fn(&K, A, A) -> A + Send + Sync + 'static,
    ) -> KTable<SessionWindowed<K>, A>
    where
        A: Serde + Clone,
    {
        self.aggregate_with(
            "AGGREGATE",
            Arc::new(move |k, v, old: Option<A>| adder(k, v, old.unwrap_or_else(&initializer))),
            Arc::new(merger),
        )
    }
}

/// Folds each record into its key's session, merging every session within
/// the gap of it. Sessions are kept in a window store under their end, the
/// value carrying the start: two sessions of one key never share an end
/// (they would overlap, and be one).
struct SessionAggregate<K, V, A> {
    store: WindowStoreRef<K, Option<Prefixed<A>>>,
    windows: SessionWindows,
    update: Update<K, V, A>,
    merge: Merge<K, A>,
    observed: i64,
    name: Arc<str>,
}

impl<K, V, A> Processor<K, V> for SessionAggregate<K, V, A>
where
    K: Serde + Clone,
    V: Serde + Clone,
    A: Serde + Clone,
{
    type KOut = SessionWindowed<K>;
    type VOut = Option<A>;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, SessionWindowed<K>, Option<A>>,
        record: Record<K, V>,
    ) -> Result<(), ProcessError> {
        let ts = record.timestamp;
        if ts < 0 {
            record_dropped(&self.name, "negative-timestamp", ts);
            return Ok(());
        }
        self.observed = self.observed.max(ts);
        let close = self.observed.saturating_sub(self.windows.grace_ms);
        let gap = self.windows.gap_ms;
        let store = ctx.window_store(&self.store)?;
        let overlapping: Vec<(i64, Prefixed<A>)> = store
            .fetch(&record.key, ts.saturating_sub(gap), i64::MAX)?
            .into_iter()
            .filter_map(|(end, entry)| entry.map(|e| (end, e)))
            .filter(|(_, e)| e.n <= ts.saturating_add(gap))
            .collect();
        let (mut start, mut end) = (ts, ts);
        let mut merged: Option<A> = None;
        for (e, entry) in &overlapping {
            start = start.min(entry.n);
            end = end.max(*e);
            merged = Some(match merged {
                None => entry.value.clone(),
                Some(agg) => (self.merge)(&record.key, agg, entry.value.clone()),
            });
        }
        if end < close {
            record_dropped(&self.name, "late", ts);
            return Ok(());
        }
        let agg = (self.update)(&record.key, record.value, merged);
        for (e, entry) in overlapping {
            if (entry.n, e) == (start, end) {
                continue;
            }
            store.put(&record.key, &None, e)?;
            ctx.forward(Record {
                key: SessionWindowed::new(
                    record.key.clone(),
                    Window {
                        start: entry.n,
                        end: e,
                    },
                ),
                value: None,
                timestamp: ts,
                headers: record.headers.clone(),
            });
        }
        let entry = Prefixed {
            n: start,
            value: agg.clone(),
        };
        store.put(&record.key, &Some(entry), end)?;
        ctx.forward(Record {
            key: SessionWindowed::new(record.key, Window { start, end }),
            value: Some(agg),
            timestamp: ts,
            headers: record.headers,
        });
        Ok(())
    }
}
