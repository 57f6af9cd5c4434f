//! `KTable`: the latest value per key, its operations, table joins, stream-
//! table joins and the suppression of intermediate windowed results.

use std::sync::Arc;

use crate::dsl::cache::RecordCache;
use crate::dsl::stream::{KStream, Step, StepProcessor};
use crate::dsl::window::{Prefixed, RawKey, WindowedKey, ordered_time};
use crate::dsl::{Materialized, Shared};
use crate::error::ProcessError;
use crate::processor::{Processor, ProcessorContext};
use crate::record::Record;
use crate::serde::Serde;
use crate::state::KvStoreRef;
use crate::topology::NodeRef;

/// A changelog stream read as a table, as Kafka Streams' `KTable`: each
/// record is the new value of its key, `None` a deletion. Its records flow as
/// `Record<K, Option<V>>`.
///
/// ```
/// use weir_streams::dsl::{Materialized, StreamsBuilder};
/// use weir_streams::testing::TopologyTestDriver;
///
/// let builder = StreamsBuilder::new();
/// let prices = builder.table::<String, i64>("prices", Materialized::as_("prices"));
/// prices.filter(|_, p| *p > 100).to_stream().to("expensive");
///
/// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "shop").unwrap();
/// driver.pipe("prices", &"tv".to_string(), &Some(500i64), 0).unwrap();
/// driver.pipe("prices", &"tv".to_string(), &Some(90i64), 1).unwrap();
/// let out = driver.read_output::<String, Option<i64>>("expensive").unwrap();
/// // The second price fails the filter: downstream sees a deletion.
/// assert_eq!(out.iter().map(|r| r.value).collect::<Vec<_>>(), vec![Some(500), None]);
/// assert_eq!(driver.kv_store::<String, i64>("prices").unwrap(), vec![("tv".to_string(), 90)]);
/// ```
pub struct KTable<K, V> {
    pub(crate) shared: Shared,
    pub(crate) node: NodeRef<K, Option<V>>,
    /// The store holding this table's current values, if it is materialized.
    pub(crate) store: Option<KvStoreRef<K, V>>,
    /// For a windowed aggregation's table: the windows' grace period, which
    /// `suppress` waits out.
    pub(crate) grace_ms: Option<i64>,
}

impl<K, V> Clone for KTable<K, V> {
    fn clone(&self) -> Self {
        KTable {
            shared: self.shared.clone(),
            node: self.node.clone(),
            store: self.store.clone(),
            grace_ms: self.grace_ms,
        }
    }
}

impl<K, V> std::fmt::Debug for KTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KTable")
            .field("node", &self.node)
            .field("store", &self.store)
            .finish()
    }
}

/// Writes each table update to a store and passes it on (held back until
/// the commit, with caching on).
struct Materialize<K, V> {
    store: KvStoreRef<K, V>,
    cache: Option<RecordCache<K, V>>,
}

impl<K, V> Processor<K, Option<V>> for Materialize<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    type KOut = K;
    type VOut = Option<V>;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, K, Option<V>>,
        record: Record<K, Option<V>>,
    ) -> Result<(), ProcessError> {
        let store = ctx.kv_store(&self.store)?;
        match &record.value {
            Some(v) => store.put(&record.key, v, record.timestamp)?,
            None => store.delete(&record.key, record.timestamp)?,
        }
        match &mut self.cache {
            Some(cache) => cache.put(ctx, record),
            None => ctx.forward(record),
        }
        Ok(())
    }

    fn flush(&mut self, ctx: &mut ProcessorContext<'_, K, Option<V>>) -> Result<(), ProcessError> {
        if let Some(cache) = &mut self.cache {
            cache.flush(ctx);
        }
        Ok(())
    }
}

impl<K, V> KTable<K, V>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    pub(crate) fn new(
        shared: Shared,
        node: NodeRef<K, Option<V>>,
        store: Option<KvStoreRef<K, V>>,
        grace_ms: Option<i64>,
    ) -> Self {
        KTable {
            shared,
            node,
            store,
            grace_ms,
        }
    }

    fn derive<V2>(&self, prefix: &str, step: Step<K, Option<V>, K, Option<V2>>) -> KTable<K, V2>
    where
        V2: Clone + Send + 'static,
    {
        let name = self.shared.with(|inner| inner.name(prefix));
        let node = self.shared.with(|inner| {
            inner.builder.processor(
                &name,
                &[&self.node],
                move || StepProcessor {
                    step: Arc::clone(&step),
                },
                &[],
            )
        });
        KTable::new(self.shared.clone(), node, None, self.grace_ms)
    }

    /// The table's updates as a stream: `None` values are deletions.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder.table::<String, String>("users", Materialized::default()).to_stream().to("user-updates");
    /// # builder.build().unwrap();
    /// ```
    pub fn to_stream(&self) -> KStream<K, Option<V>> {
        let name = self.shared.with(|inner| inner.name("KTABLE-TOSTREAM"));
        let node = self.shared.with(|inner| {
            inner.builder.processor(
                &name,
                &[&self.node],
                || StepProcessor::<K, Option<V>, K, Option<V>> {
                    step: Arc::new(|r, ctx| ctx.forward(r)),
                },
                &[],
            )
        });
        KStream::new(self.shared.clone(), node, false)
    }

    /// The rows for which `predicate` holds; an update that fails it is a
    /// deletion downstream (as in Kafka Streams).
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.table::<String, i64>("stock", Materialized::default())
    ///     .filter(|_, count| *count > 0)
    ///     .to_stream().to("in-stock");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "shop").unwrap();
    /// driver.pipe("stock", &"pen".to_string(), &Some(3i64), 0).unwrap();
    /// driver.pipe("stock", &"pen".to_string(), &Some(0i64), 1).unwrap();
    /// let out = driver.read_output::<String, Option<i64>>("in-stock").unwrap();
    /// assert_eq!(out.iter().map(|r| r.value).collect::<Vec<_>>(), vec![Some(3), None]);
    /// ```
    pub fn filter(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        self.derive(
            "KTABLE-FILTER",
            Arc::new(move |r: Record<K, Option<V>>, ctx| {
                let keep = r.value.as_ref().is_some_and(|v| predicate(&r.key, v));
                let value = if keep { r.value } else { None };
                ctx.forward(Record {
                    key: r.key,
                    value,
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
            }),
        )
    }

    /// The rows for which `predicate` does not hold.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.table::<String, String>("users", Materialized::default())
    ///     .filter_not(|_, status| status == "banned")
    ///     .to_stream().to("active-users");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("users", &"ada".to_string(), &Some("ok".to_string()), 0).unwrap();
    /// driver.pipe("users", &"bob".to_string(), &Some("banned".to_string()), 1).unwrap();
    /// let out = driver.read_output::<String, Option<String>>("active-users").unwrap();
    /// let rows: Vec<_> = out.iter().map(|r| (r.key.as_str(), r.value.as_deref())).collect();
    /// assert_eq!(rows, vec![("ada", Some("ok")), ("bob", None)]);
    /// ```
    pub fn filter_not(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        self.filter(move |k, v| !predicate(k, v))
    }

    /// Each row's value replaced by `f(value)`.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder.table::<String, String>("users", Materialized::default())
    ///     .map_values(|name| name.len() as i64)
    ///     .to_stream().to("name-lengths");
    /// # builder.build().unwrap();
    /// ```
    pub fn map_values<V2>(&self, f: impl Fn(V) -> V2 + Send + Sync + 'static) -> KTable<K, V2>
    where
        V2: Clone + Send + 'static,
    {
        self.derive(
            "KTABLE-MAPVALUES",
            Arc::new(move |r: Record<K, Option<V>>, ctx| {
                let value = r.value.map(&f);
                ctx.forward(Record {
                    key: r.key,
                    value,
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
            }),
        )
    }
}

impl<K, V> KTable<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    /// A table from `source`'s updates, written to a store first.
    pub(crate) fn materialize_from(
        shared: &Shared,
        source: NodeRef<K, Option<V>>,
        materialized: Materialized,
        store_prefix: &str,
    ) -> Self {
        let (table, _) = Self::materialize_with_store(shared, source, materialized, store_prefix);
        table
    }

    fn materialize_with_store(
        shared: &Shared,
        source: NodeRef<K, Option<V>>,
        materialized: Materialized,
        store_prefix: &str,
    ) -> (Self, KvStoreRef<K, V>) {
        let store_name = shared.name_or(materialized.name.clone(), store_prefix);
        let processor = shared.with(|inner| inner.name("KTABLE-MATERIALIZE"));
        let caching = materialized.caching;
        let (node, store) = shared.with(|inner| {
            let store = inner.builder.kv_store::<K, V>(&store_name);
            materialized.apply(&mut inner.builder, &store_name);
            let s = store.clone();
            let node = inner.builder.processor(
                &processor,
                &[&source],
                move || Materialize {
                    store: s.clone(),
                    cache: caching.then(RecordCache::default),
                },
                &[&store],
            );
            (node, store)
        });
        (
            KTable::new(shared.clone(), node, Some(store.clone()), None),
            store,
        )
    }

    /// This table written to a store of its own, named by `materialized`
    /// (so it can be queried, and joins read it rather than a generated
    /// one).
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// builder.table::<String, i64>("prices", Materialized::default())
    ///     .filter(|_, p| *p > 100)
    ///     .materialized(Materialized::as_("expensive"));
    /// assert!(builder.build().unwrap().describe().contains("expensive"));
    /// ```
    pub fn materialized(&self, materialized: Materialized) -> Self {
        Self::materialize_from(
            &self.shared,
            self.node.clone(),
            materialized,
            "KTABLE-STATE-STORE",
        )
    }

    /// This table and a store of its current values: its own if it has one,
    /// else a new one written by a materializing step (what joins read).
    fn with_store(&self) -> (Self, KvStoreRef<K, V>) {
        match &self.store {
            Some(store) => (self.clone(), store.clone()),
            None => Self::materialize_with_store(
                &self.shared,
                self.node.clone(),
                Materialized::default(),
                "KTABLE-STATE-STORE",
            ),
        }
    }

    /// Joins with another table of the same key (co-partitioned): a row
    /// exists where both have one.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let names = builder.table::<String, String>("names", Materialized::default());
    /// let emails = builder.table::<String, String>("emails", Materialized::default());
    /// names.join(&emails, |n, e| format!("{n} <{e}>")).to_stream().to("contacts");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("names", &"u1".to_string(), &Some("Ada".to_string()), 0).unwrap();
    /// driver.pipe("emails", &"u1".to_string(), &Some("ada@x".to_string()), 1).unwrap();
    /// let out = driver.read_output::<String, Option<String>>("contacts").unwrap();
    /// assert_eq!(out.last().unwrap().value.as_deref(), Some("Ada <ada@x>"));
    /// ```
    pub fn join<V2, VR>(
        &self,
        other: &KTable<K, V2>,
        joiner: impl Fn(&V, &V2) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR>
    where
        V2: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        self.join_with(
            other,
            "KTABLE-JOIN",
            Arc::new(move |l, r| match (l, r) {
                (Some(l), Some(r)) => Some(joiner(l, r)),
                _ => None,
            }),
        )
    }

    /// Joins with another table: a row exists wherever this table has one.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let names = builder.table::<String, String>("names", Materialized::default());
    /// let emails = builder.table::<String, String>("emails", Materialized::default());
    /// names
    ///     .left_join(&emails, |n, e| format!("{n} <{}>", e.map_or("?", String::as_str)))
    ///     .to_stream().to("contacts");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("names", &"u1".to_string(), &Some("Ada".to_string()), 0).unwrap();
    /// driver.pipe("emails", &"u1".to_string(), &Some("ada@x".to_string()), 1).unwrap();
    /// let out = driver.read_output::<String, Option<String>>("contacts").unwrap();
    /// let values: Vec<_> = out.iter().map(|r| r.value.as_deref()).collect();
    /// assert_eq!(values, vec![Some("Ada <?>"), Some("Ada <ada@x>")]);
    /// ```
    pub fn left_join<V2, VR>(
        &self,
        other: &KTable<K, V2>,
        joiner: impl Fn(&V, Option<&V2>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR>
    where
        V2: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        self.join_with(
            other,
            "KTABLE-LEFTJOIN",
            Arc::new(move |l, r| l.map(|l| joiner(l, r))),
        )
    }

    /// Joins with another table: a row exists wherever either has one.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let names = builder.table::<String, String>("names", Materialized::default());
    /// let emails = builder.table::<String, String>("emails", Materialized::default());
    /// names
    ///     .outer_join(&emails, |n, e| (n.cloned(), e.cloned()))
    ///     .map_values(|(n, e)| format!("{} <{}>", n.unwrap_or_default(), e.unwrap_or_default()))
    ///     .to_stream().to("contacts");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("emails", &"u2".to_string(), &Some("bob@x".to_string()), 0).unwrap();
    /// driver.pipe("names", &"u2".to_string(), &Some("Bob".to_string()), 1).unwrap();
    /// let out = driver.read_output::<String, Option<String>>("contacts").unwrap();
    /// let values: Vec<_> = out.iter().map(|r| r.value.as_deref()).collect();
    /// assert_eq!(values, vec![Some(" <bob@x>"), Some("Bob <bob@x>")]);
    /// ```
    pub fn outer_join<V2, VR>(
        &self,
        other: &KTable<K, V2>,
        joiner: impl Fn(Option<&V>, Option<&V2>) -> VR + Send + Sync + 'static,
    ) -> KTable<K, VR>
    where
        V2: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        self.join_with(
            other,
            "KTABLE-OUTERJOIN",
            Arc::new(move |l, r| {
                if l.is_none() && r.is_none() {
                    None
                } else {
                    Some(joiner(l, r))
                }
            }),
        )
    }

    fn join_with<V2, VR>(
        &self,
        other: &KTable<K, V2>,
        prefix: &str,
        joiner: TableJoiner<V, V2, VR>,
    ) -> KTable<K, VR>
    where
        V2: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        let (left, left_store) = self.with_store();
        let (right, right_store) = other.with_store();
        let shared = self.shared.clone();
        let (this_side, other_side, merge) = shared.with(|inner| {
            (
                inner.name(prefix),
                inner.name(&format!("{prefix}-OTHER")),
                inner.name("KTABLE-MERGE"),
            )
        });
        let node = shared.with(|inner| {
            let (j, rs) = (Arc::clone(&joiner), right_store.clone());
            let from_left = inner.builder.processor(
                &this_side,
                &[&left.node],
                move || TableJoinSide::<K, V, V2, VR> {
                    other: rs.clone(),
                    join: Arc::new({
                        let j = Arc::clone(&j);
                        move |mine: Option<&V>, theirs: Option<&V2>| j(mine, theirs)
                    }),
                },
                &[&right_store],
            );
            let (j, ls) = (Arc::clone(&joiner), left_store.clone());
            let from_right = inner.builder.processor(
                &other_side,
                &[&right.node],
                move || TableJoinSide::<K, V2, V, VR> {
                    other: ls.clone(),
                    join: Arc::new({
                        let j = Arc::clone(&j);
                        move |mine: Option<&V2>, theirs: Option<&V>| j(theirs, mine)
                    }),
                },
                &[&left_store],
            );
            inner.builder.processor(
                &merge,
                &[&from_left, &from_right],
                || StepProcessor::<K, Option<VR>, K, Option<VR>> {
                    step: Arc::new(|r, ctx| ctx.forward(r)),
                },
                &[],
            )
        });
        KTable::new(shared, node, None, None)
    }
}

/// A table join's result for one key from both sides' values (`None` when a
/// side has no row), or `None` for no row.
type TableJoiner<V1, V2, VR> = Arc<dyn Fn(Option<&V1>, Option<&V2>) -> Option<VR> + Send + Sync>;

/// One side of a table-table join: an update of this side looks up the other
/// side's store.
struct TableJoinSide<K, VMine, VTheirs, VR> {
    other: KvStoreRef<K, VTheirs>,
    join: TableJoiner<VMine, VTheirs, VR>,
}

impl<K, VMine, VTheirs, VR> Processor<K, Option<VMine>> for TableJoinSide<K, VMine, VTheirs, VR>
where
    K: Serde + Clone,
    VMine: Send + 'static,
    VTheirs: Serde + Clone,
    VR: Clone + Send + 'static,
{
    type KOut = K;
    type VOut = Option<VR>;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, K, Option<VR>>,
        record: Record<K, Option<VMine>>,
    ) -> Result<(), ProcessError> {
        let theirs = ctx.kv_store(&self.other)?.get(&record.key)?;
        let value = (self.join)(record.value.as_ref(), theirs.as_ref());
        ctx.forward(Record {
            key: record.key,
            value,
            timestamp: record.timestamp,
            headers: record.headers,
        });
        Ok(())
    }
}

/// A stream record joined with a table's current value of its key.
type StreamJoiner<V, VT, VR> = Arc<dyn Fn(&V, Option<&VT>) -> Option<VR> + Send + Sync>;

struct StreamTableJoin<K, V, VT, VR> {
    table: KvStoreRef<K, VT>,
    join: StreamJoiner<V, VT, VR>,
}

impl<K, V, VT, VR> Processor<K, V> for StreamTableJoin<K, V, VT, VR>
where
    K: Serde + Clone,
    V: Send + 'static,
    VT: Serde + Clone,
    VR: Clone + Send + 'static,
{
    type KOut = K;
    type VOut = VR;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, K, VR>,
        record: Record<K, V>,
    ) -> Result<(), ProcessError> {
        let row = ctx.kv_store(&self.table)?.get(&record.key)?;
        if let Some(value) = (self.join)(&record.value, row.as_ref()) {
            ctx.forward(Record {
                key: record.key,
                value,
                timestamp: record.timestamp,
                headers: record.headers,
            });
        }
        Ok(())
    }
}

impl<K, V> KStream<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    fn table_join<VT, VR>(
        &self,
        table: &KTable<K, VT>,
        prefix: &str,
        join: StreamJoiner<V, VT, VR>,
    ) -> KStream<K, VR>
    where
        VT: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        let name = self.shared.name_or(self.next_name.clone(), prefix);
        let input = self.repartitioned_if_needed(&name);
        let (_table, store) = table.with_store();
        let node = self.shared.with(|inner| {
            let s = store.clone();
            inner.builder.processor(
                &name,
                &[&input.node],
                move || StreamTableJoin {
                    table: s.clone(),
                    join: Arc::clone(&join),
                },
                &[&store],
            )
        });
        KStream::new(self.shared.clone(), node, false)
    }

    /// Joins each record with the table's current row for its key (the table
    /// must be co-partitioned with this stream); records whose key has no
    /// row are dropped. If the stream's key changed, it is repartitioned
    /// first.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let customers = builder.table::<String, String>("customers", Materialized::default());
    /// builder.stream::<String, i64>("orders")
    ///     .join(&customers, |amount, name| format!("{name} paid {amount}"))
    ///     .to("enriched");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "shop").unwrap();
    /// driver.pipe("customers", &"c1".to_string(), &Some("Ada".to_string()), 0).unwrap();
    /// driver.pipe("orders", &"c1".to_string(), &30i64, 1).unwrap();
    /// driver.pipe("orders", &"c2".to_string(), &99i64, 2).unwrap();
    /// let out = driver.read_output::<String, String>("enriched").unwrap();
    /// assert_eq!(out.iter().map(|r| r.value.as_str()).collect::<Vec<_>>(), vec!["Ada paid 30"]);
    /// ```
    pub fn join<VT, VR>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, &VT) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        VT: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        self.table_join(
            table,
            "KSTREAM-JOIN",
            Arc::new(move |v, row| row.map(|row| joiner(v, row))),
        )
    }

    /// As [`join`](Self::join), but every record is kept: the joiner sees
    /// `None` when the key has no row.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let customers = builder.table::<String, String>("customers", Materialized::default());
    /// builder.stream::<String, i64>("orders")
    ///     .left_join(&customers, |amount, name| {
    ///         format!("{} paid {amount}", name.map_or("someone", String::as_str))
    ///     })
    ///     .to("enriched");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "shop").unwrap();
    /// driver.pipe("customers", &"c1".to_string(), &Some("Ada".to_string()), 0).unwrap();
    /// driver.pipe("orders", &"c1".to_string(), &30i64, 1).unwrap();
    /// driver.pipe("orders", &"c2".to_string(), &99i64, 2).unwrap();
    /// let out = driver.read_output::<String, String>("enriched").unwrap();
    /// let values: Vec<_> = out.iter().map(|r| r.value.as_str()).collect();
    /// assert_eq!(values, vec!["Ada paid 30", "someone paid 99"]);
    /// ```
    pub fn left_join<VT, VR>(
        &self,
        table: &KTable<K, VT>,
        joiner: impl Fn(&V, Option<&VT>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        VT: Serde + Clone,
        VR: Clone + Send + 'static,
    {
        self.table_join(
            table,
            "KSTREAM-LEFTJOIN",
            Arc::new(move |v, row| Some(joiner(v, row))),
        )
    }
}

/// Holds each window's latest result until the window closes, then emits it
/// once (Kafka Streams' `suppress(untilWindowCloses)`). The buffer is a
/// logged key-value store keyed by (window end, windowed key), so a task
/// that moves carries its pending results with it.
struct SuppressUntilClose<K, V> {
    buffer: KvStoreRef<RawKey, Prefixed<V>>,
    grace_ms: i64,
    observed: i64,
    _key: std::marker::PhantomData<fn() -> K>,
}

impl<K, V> Processor<K, Option<V>> for SuppressUntilClose<K, V>
where
    K: WindowedKey,
    V: Serde + Clone,
{
    type KOut = K;
    type VOut = Option<V>;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, K, Option<V>>,
        record: Record<K, Option<V>>,
    ) -> Result<(), ProcessError> {
        let buffer = ctx.kv_store(&self.buffer)?;
        self.observed = self.observed.max(record.timestamp);
        let mut key = ordered_time(record.key.window_end()).to_vec();
        key.extend(record.key.serialize().unwrap_or_default());
        let key = RawKey(key);
        match record.value {
            Some(value) => buffer.put(
                &key,
                &Prefixed {
                    n: record.timestamp,
                    value,
                },
                record.timestamp,
            )?,
            // A deleted window (a session merged into another) has no final
            // result; Kafka Streams drops such tombstones too.
            None => buffer.delete(&key, record.timestamp)?,
        }
        let close = self.observed.saturating_sub(self.grace_ms);
        let until = RawKey(ordered_time(close.saturating_add(1)).to_vec());
        let from = RawKey(ordered_time(i64::MIN).to_vec());
        for (k, entry) in buffer.range(&from, &until)? {
            let (end, windowed) = k.0.split_at(8.min(k.0.len()));
            let mut b = [0u8; 8];
            b.copy_from_slice(end);
            let end = i64::from_be_bytes(b) ^ i64::MIN;
            let windowed = K::deserialize(Some(windowed))?.with_end(end);
            buffer.delete(&k, entry.n)?;
            ctx.forward(Record::new(windowed, Some(entry.value), entry.n));
        }
        Ok(())
    }
}

impl<K, V> KTable<K, V>
where
    K: WindowedKey,
    V: Serde + Clone,
{
    /// Emits only each window's final result, once the window closes (stream
    /// time past its end plus the aggregation's grace period), instead of
    /// every update.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use weir_streams::dsl::{StreamsBuilder, TimeWindows, Windowed};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("views").group_by_key()
    ///     .windowed_by(TimeWindows::of_size_with_no_grace(Duration::from_millis(10)))
    ///     .count()
    ///     .suppress_until_window_closes()
    ///     .to_stream().to("final-counts");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for ts in [1, 2, 3, 12] {
    ///     driver.pipe("views", &"u".to_string(), &"p".to_string(), ts).unwrap();
    /// }
    /// let out = driver.read_output::<Windowed<String>, Option<i64>>("final-counts").unwrap();
    /// // Only [0, 10) is closed (stream time 12): one final count of 3.
    /// assert_eq!(out.len(), 1);
    /// assert_eq!((out[0].key.window.start, out[0].value), (0, Some(3)));
    /// ```
    pub fn suppress_until_window_closes(&self) -> KTable<K, V> {
        let grace_ms = self.grace_ms.unwrap_or(0);
        let (store_name, processor) = self.shared.with(|inner| {
            (
                inner.name("KTABLE-SUPPRESS-STATE-STORE"),
                inner.name("KTABLE-SUPPRESS"),
            )
        });
        let node = self.shared.with(|inner| {
            let buffer = inner.builder.kv_store::<RawKey, Prefixed<V>>(&store_name);
            let b = buffer.clone();
            inner.builder.processor(
                &processor,
                &[&self.node],
                move || SuppressUntilClose::<K, V> {
                    buffer: b.clone(),
                    grace_ms,
                    observed: i64::MIN,
                    _key: std::marker::PhantomData,
                },
                &[&buffer],
            )
        });
        KTable::new(self.shared.clone(), node, None, self.grace_ms)
    }
}
