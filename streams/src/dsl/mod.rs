//! The DSL: streams and tables, grouped aggregations, windows and joins, in
//! the shape of Kafka Streams' `StreamsBuilder`, compiled down to the
//! [Processor API](crate::processor) of a [`TopologyBuilder`].
//!
//! ```
//! use weir_streams::dsl::StreamsBuilder;
//! use weir_streams::testing::TopologyTestDriver;
//!
//! let builder = StreamsBuilder::new();
//! builder
//!     .stream::<(), String>("lines")
//!     .flat_map_values(|line: String| {
//!         line.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>()
//!     })
//!     .select_key(|_, word: &String| word.clone())
//!     .group_by_key()
//!     .count()
//!     .to_stream()
//!     .to("word-counts");
//! let topology = builder.build().unwrap();
//!
//! let mut driver = TopologyTestDriver::new(topology, "wordcount").unwrap();
//! driver.pipe("lines", &(), &"to be or not to be".to_string(), 0).unwrap();
//! let counts = driver.read_output::<String, Option<i64>>("word-counts").unwrap();
//! let last_be = counts.iter().rev().find(|r| r.key == "be").unwrap();
//! assert_eq!(last_be.value, Some(2));
//! ```
//!
//! Types: a stream's keys and values need only be `Clone + Send`; a serde
//! ([`Serde`]) is needed where records leave the process or enter a store
//! (`to`, `repartition`, grouping after a key change, aggregations, tables).
//!
//! Names: every node, store and internal topic gets a generated name in Kafka
//! Streams' format (`KSTREAM-MAP-0000000003`), numbered in the order the
//! topology is built. [`KStream::named`] names the next operation, and
//! [`Materialized::as_`] names a store (and so its changelog topic): name the
//! stores of an application that will evolve, since adding an operation before
//! a generated name renumbers it.

mod cache;
mod global;
mod grouped;
mod join;
mod sliding;
mod stream;
mod table;
mod window;

use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Result;
use crate::serde::Serde;
use crate::topology::{NodeRef, Topology, TopologyBuilder};

pub use self::global::GlobalKTable;
pub use self::grouped::{KGroupedStream, SessionWindowedKStream, TimeWindowedKStream};
pub use self::join::JoinWindows;
pub use self::sliding::{SlidingWindowedKStream, SlidingWindows};
pub use self::stream::{BranchedKStream, KStream};
pub use self::table::KTable;
pub use self::window::{
    SessionWindowed, SessionWindows, TimeWindows, Window, Windowed, WindowedKey,
};

/// The builder state every stream and table of one [`StreamsBuilder`] shares.
pub(crate) struct Inner {
    pub(crate) builder: TopologyBuilder,
    next_index: u32,
}

impl Inner {
    /// A fresh name in Kafka Streams' format: `PREFIX-0000000007`.
    pub(crate) fn name(&mut self, prefix: &str) -> String {
        let name = format!("{prefix}-{:010}", self.next_index);
        self.next_index += 1;
        name
    }
}

/// Shared handle to the builder state.
#[derive(Clone)]
pub(crate) struct Shared(Arc<Mutex<Inner>>);

impl Shared {
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut inner = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut inner)
    }

    /// `given` if the user named the operation, else a generated name.
    pub(crate) fn name_or(&self, given: Option<String>, prefix: &str) -> String {
        match given {
            Some(name) => name,
            None => self.with(|inner| inner.name(prefix)),
        }
    }
}

/// Builds a topology from streams and tables, as Kafka Streams'
/// `StreamsBuilder` does.
///
/// ```
/// use weir_streams::dsl::StreamsBuilder;
/// let builder = StreamsBuilder::new();
/// builder.stream::<String, String>("in").filter(|_, v| !v.is_empty()).to("out");
/// let topology = builder.build().unwrap();
/// assert_eq!(topology.subtopology_count(), 1);
/// ```
#[derive(Clone)]
pub struct StreamsBuilder {
    shared: Shared,
}

impl std::fmt::Debug for StreamsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamsBuilder").finish_non_exhaustive()
    }
}

impl Default for StreamsBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamsBuilder {
    /// An empty builder.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").to("out");
    /// let topology = builder.build().unwrap();
    /// assert_eq!(topology.external_source_topics(), vec!["in".to_string()]);
    /// ```
    pub fn new() -> Self {
        StreamsBuilder {
            shared: Shared(Arc::new(Mutex::new(Inner {
                builder: TopologyBuilder::new(),
                next_index: 0,
            }))),
        }
    }

    /// A stream of the records of `topic`, keys decoded as `K` and values as
    /// `V`.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// let builder = StreamsBuilder::new();
    /// let orders = builder.stream::<String, i64>("orders");
    /// # orders.to("x");
    /// ```
    pub fn stream<K, V>(&self, topic: &str) -> KStream<K, V>
    where
        K: Serde + Clone,
        V: Serde + Clone,
    {
        self.streams(&[topic])
    }

    /// One stream of the records of several topics (which must be
    /// co-partitioned if the stream is aggregated or joined).
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// let builder = StreamsBuilder::new();
    /// builder.streams::<String, String>(&["eu-clicks", "us-clicks"]).to("clicks");
    /// # builder.build().unwrap();
    /// ```
    pub fn streams<K, V>(&self, topics: &[&str]) -> KStream<K, V>
    where
        K: Serde + Clone,
        V: Serde + Clone,
    {
        let node = self.shared.with(|inner| {
            let name = inner.name("KSTREAM-SOURCE");
            inner.builder.source::<K, V>(&name, topics)
        });
        KStream::new(self.shared.clone(), node, false)
    }

    /// A stream of the records of every topic whose whole name matches the
    /// regular expression `pattern` (Kafka Streams' `stream(Pattern)`),
    /// resolved when an instance starts (see
    /// [`TopologyBuilder::source_pattern`]).
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream_pattern::<String, String>("clicks-(eu|us)").to("all-clicks");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("clicks-eu", &"a".to_string(), &"x".to_string(), 0).unwrap();
    /// driver.pipe("clicks-us", &"b".to_string(), &"y".to_string(), 1).unwrap();
    /// assert!(driver.pipe("clicks-asia", &"c".to_string(), &"z".to_string(), 2).is_err());
    /// assert_eq!(driver.read_output::<String, String>("all-clicks").unwrap().len(), 2);
    /// ```
    pub fn stream_pattern<K, V>(&self, pattern: &str) -> KStream<K, V>
    where
        K: Serde + Clone,
        V: Serde + Clone,
    {
        let node = self.shared.with(|inner| {
            let name = inner.name("KSTREAM-SOURCE");
            inner.builder.source_pattern::<K, V>(&name, pattern)
        });
        KStream::new(self.shared.clone(), node, false)
    }

    /// A table of the latest value per key of `topic` (a null value deletes
    /// the key), materialized in a key-value store named by `materialized` or
    /// generated. The topic is the store's changelog (Kafka Streams'
    /// source-table optimisation): no `-changelog` topic is made, and the
    /// store restores from the topic itself.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let customers = builder.table::<String, String>("customers", Materialized::as_("customers"));
    /// customers.to_stream().to("customers-copy");
    /// # builder.build().unwrap();
    /// ```
    pub fn table<K, V>(&self, topic: &str, materialized: Materialized) -> KTable<K, V>
    where
        K: Serde + Clone,
        V: Serde + Clone,
    {
        let source: NodeRef<K, Option<V>> = self.shared.with(|inner| {
            let name = inner.name("KTABLE-SOURCE");
            inner.builder.source::<K, Option<V>>(&name, &[topic])
        });
        let table = KTable::materialize_from(
            &self.shared,
            source,
            materialized,
            "KTABLE-SOURCE-STATE-STORE",
        );
        // The source-table optimisation: the topic is the store's changelog.
        if let Some(store) = &table.store {
            let name = store.name().to_owned();
            self.shared
                .with(|inner| inner.builder.source_changelog(&name, topic));
        }
        table
    }

    /// Declares a key-value store for a custom processor of
    /// [`KStream::process`] (see [`TopologyBuilder::kv_store`]).
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// let builder = StreamsBuilder::new();
    /// let seen = builder.kv_store::<String, i64>("seen");
    /// # let _ = seen;
    /// ```
    pub fn kv_store<K: Serde, V: Serde>(&self, name: &str) -> crate::state::KvStoreRef<K, V> {
        self.shared
            .with(|inner| inner.builder.kv_store::<K, V>(name))
    }

    /// Declares a window store for a custom processor (see
    /// [`TopologyBuilder::window_store`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::StreamsBuilder;
    /// let builder = StreamsBuilder::new();
    /// let recent = builder.window_store::<String, i64>("recent", Duration::from_secs(3600));
    /// # let _ = recent;
    /// ```
    pub fn window_store<K: Serde, V: Serde>(
        &self,
        name: &str,
        retention: std::time::Duration,
    ) -> crate::state::WindowStoreRef<K, V> {
        self.shared
            .with(|inner| inner.builder.window_store::<K, V>(name, retention))
    }

    /// Validates and builds the topology.
    ///
    /// # Errors
    ///
    /// [`crate::StreamsError::InvalidTopology`], as
    /// [`TopologyBuilder::build`].
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").map_values(|v| v.to_uppercase()).to("out");
    /// let topology = builder.build().unwrap();
    /// let mut driver = TopologyTestDriver::new(topology, "app").unwrap();
    /// driver.pipe("in", &"k".to_string(), &"hi".to_string(), 0).unwrap();
    /// assert_eq!(driver.read_output::<String, String>("out").unwrap()[0].value, "HI");
    ///
    /// // A builder with no source is no topology.
    /// assert!(StreamsBuilder::new().build().is_err());
    /// ```
    pub fn build(self) -> Result<Topology> {
        let builder = self.shared.with(|inner| std::mem::take(&mut inner.builder));
        builder.build()
    }
}

/// How a store the DSL creates is named and kept: Kafka Streams'
/// `Materialized`.
///
/// ```
/// use weir_streams::dsl::Materialized;
/// let m = Materialized::as_("counts-by-user").in_memory();
/// # let _ = m;
/// let generated = Materialized::default(); // a generated name, on disk, logged
/// # let _ = generated;
/// ```
#[derive(Debug, Clone, Default)]
pub struct Materialized {
    pub(crate) name: Option<String>,
    pub(crate) in_memory: bool,
    pub(crate) unlogged: bool,
    pub(crate) retention: Option<std::time::Duration>,
    pub(crate) caching: bool,
}

impl Materialized {
    /// A store named `name`: its changelog is
    /// `<application.id>-<name>-changelog`.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .materialized(Materialized::as_("clicks-per-user"))
    ///     .count();
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("clicks", &"ada".to_string(), &"/".to_string(), 0).unwrap();
    /// assert_eq!(driver.kv_store::<String, i64>("clicks-per-user").unwrap(), vec![("ada".to_string(), 1)]);
    /// assert_eq!(driver.changelog("clicks-per-user")[0].topic, "app-clicks-per-user-changelog");
    /// ```
    pub fn as_(name: &str) -> Self {
        Materialized {
            name: Some(name.to_owned()),
            ..Materialized::default()
        }
    }

    /// Keeps the store in memory (see [`TopologyBuilder::in_memory`]).
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .materialized(Materialized::as_("clicks-per-user").in_memory())
    ///     .count();
    /// let topology = builder.build().unwrap();
    /// let store = topology.stores().find(|s| s.name == "clicks-per-user").unwrap();
    /// assert!(store.in_memory && store.logged); // still restored from its changelog
    /// ```
    pub fn in_memory(mut self) -> Self {
        self.in_memory = true;
        self
    }

    /// Turns off the store's changelog (see
    /// [`TopologyBuilder::disable_logging`]).
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .materialized(Materialized::as_("clicks-per-user").without_logging())
    ///     .count();
    /// let topology = builder.build().unwrap();
    /// assert!(!topology.stores().find(|s| s.name == "clicks-per-user").unwrap().logged);
    /// let mut driver = TopologyTestDriver::new(topology, "app").unwrap();
    /// driver.pipe("clicks", &"ada".to_string(), &"/".to_string(), 0).unwrap();
    /// assert!(driver.changelog("clicks-per-user").is_empty());
    /// assert_eq!(driver.kv_store::<String, i64>("clicks-per-user").unwrap().len(), 1);
    /// ```
    pub fn without_logging(mut self) -> Self {
        self.unlogged = true;
        self
    }

    /// Turns the record cache on for this table (Kafka Streams'
    /// `withCachingEnabled`): its updates are held back and only the latest
    /// per key goes downstream, at each commit or when the cache holds more
    /// than `cache.max.bytes.buffering`. Off by default here (on in Kafka
    /// Streams), so every update is seen downstream unless asked.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("clicks").group_by_key()
    ///     .materialized(Materialized::as_("clicks-per-user").with_caching())
    ///     .count()
    ///     .to_stream().to("click-counts"); // the latest count per user per commit
    /// # builder.build().unwrap();
    /// ```
    pub fn with_caching(mut self) -> Self {
        self.caching = true;
        self
    }

    /// For a window or session store: how long windows are kept behind
    /// stream time (at least the window size plus grace, the default).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder, TimeWindows};
    /// # use weir_streams::state::StoreType;
    /// let builder = StreamsBuilder::new();
    /// let views = builder.stream::<String, String>("views").group_by_key();
    /// let minutes = TimeWindows::of_size_with_no_grace(Duration::from_secs(60));
    /// views.windowed_by(minutes)
    ///     .materialized(Materialized::as_("kept-a-day").with_retention(Duration::from_secs(86_400)))
    ///     .count();
    /// // Less than the window size: the size wins.
    /// views.windowed_by(minutes)
    ///     .materialized(Materialized::as_("kept-a-minute").with_retention(Duration::from_secs(1)))
    ///     .count();
    /// let topology = builder.build().unwrap();
    /// let retention = |name: &str| match topology.stores().find(|s| s.name == name).unwrap().kind {
    ///     StoreType::Window { retention, .. } => retention.as_secs(),
    ///     StoreType::KeyValue => unreachable!(),
    /// };
    /// assert_eq!((retention("kept-a-day"), retention("kept-a-minute")), (86_400, 60));
    /// ```
    pub fn with_retention(mut self, retention: std::time::Duration) -> Self {
        self.retention = Some(retention);
        self
    }

    /// Applies the store options to the builder once the store is declared.
    pub(crate) fn apply(&self, builder: &mut TopologyBuilder, store: &str) {
        if self.in_memory {
            builder.in_memory(store);
        }
        if self.unlogged {
            builder.disable_logging(store);
        }
        if self.caching {
            builder.with_caching(store);
        }
    }
}
