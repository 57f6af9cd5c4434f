//! Global tables: a whole topic on every instance, and stream joins with it.

use std::sync::Arc;

use crate::dsl::stream::KStream;
use crate::dsl::{Materialized, StreamsBuilder};
use crate::error::ProcessError;
use crate::processor::{Processor, ProcessorContext};
use crate::record::Record;
use crate::serde::Serde;
use crate::state::GlobalKvStoreRef;

/// A table of every partition of a topic, held by every instance (Kafka
/// Streams' `GlobalKTable`): restored before any task processes and kept up
/// to date beside them, so a stream joins it without repartitioning or
/// co-partitioning, by any key it computes.
///
/// ```
/// # use weir_streams::dsl::{Materialized, StreamsBuilder};
/// # use weir_streams::testing::TopologyTestDriver;
/// let builder = StreamsBuilder::new();
/// let products = builder.global_table::<String, i64>("prices", Materialized::as_("prices"));
/// builder
///     .stream::<String, String>("orders") // key: order id, value: product
///     .join_global(&products, |_order, product| product.clone(), |product, price| {
///         format!("{product} costs {price}")
///     })
///     .to("priced-orders");
/// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "shop").unwrap();
/// driver.pipe("prices", &"pen".to_string(), &Some(2i64), 0).unwrap();
/// driver.pipe("orders", &"o1".to_string(), &"pen".to_string(), 1).unwrap();
/// let out = driver.read_output::<String, String>("priced-orders").unwrap();
/// assert_eq!((out[0].key.as_str(), out[0].value.as_str()), ("o1", "pen costs 2"));
/// ```
pub struct GlobalKTable<K, V> {
    pub(crate) store: GlobalKvStoreRef<K, V>,
}

impl<K, V> Clone for GlobalKTable<K, V> {
    fn clone(&self) -> Self {
        GlobalKTable {
            store: self.store.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for GlobalKTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlobalKTable")
            .field("store", &self.store)
            .finish()
    }
}

impl<K, V> GlobalKTable<K, V> {
    /// The store's name (`Materialized::as_` or generated).
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let named = builder.global_table::<String, String>("countries", Materialized::as_("countries"));
    /// assert_eq!(named.store_name(), "countries");
    /// let generated = builder.global_table::<String, String>("currencies", Materialized::default());
    /// assert!(generated.store_name().starts_with("currencies-STATE-STORE"));
    /// builder.stream::<String, String>("users")
    ///     .join_global(&named, |_, code| code.clone(), |_, name| name.clone())
    ///     .to("user-countries");
    /// let topology = builder.build().unwrap();
    /// assert_eq!(topology.global_stores().count(), 2);
    /// ```
    pub fn store_name(&self) -> &str {
        self.store.name()
    }
}

impl StreamsBuilder {
    /// A global table of `topic`: every instance keeps all of it.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let countries = builder.global_table::<String, String>("countries", Materialized::as_("countries"));
    /// assert_eq!(countries.store_name(), "countries");
    /// ```
    pub fn global_table<K: Serde, V: Serde>(
        &self,
        topic: &str,
        materialized: Materialized,
    ) -> GlobalKTable<K, V> {
        let name = self
            .shared
            .name_or(materialized.name, &format!("{topic}-STATE-STORE"));
        let store = self
            .shared
            .with(|inner| inner.builder.global_store::<K, V>(&name, topic));
        GlobalKTable { store }
    }
}

type KeyOf<K, V, KG> = Arc<dyn Fn(&K, &V) -> KG + Send + Sync>;
type GlobalJoiner<V, VG, VR> = Arc<dyn Fn(&V, Option<&VG>) -> Option<VR> + Send + Sync>;

struct GlobalJoin<K, V, KG, VG, VR> {
    store: GlobalKvStoreRef<KG, VG>,
    key: KeyOf<K, V, KG>,
    join: GlobalJoiner<V, VG, VR>,
}

impl<K, V, KG, VG, VR> Processor<K, V> for GlobalJoin<K, V, KG, VG, VR>
where
    K: Clone + Send + 'static,
    V: Send + 'static,
    KG: Serde,
    VG: Serde,
    VR: Clone + Send + 'static,
{
    type KOut = K;
    type VOut = VR;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, K, VR>,
        record: Record<K, V>,
    ) -> Result<(), ProcessError> {
        let key = (self.key)(&record.key, &record.value);
        let row = ctx.global_kv_store(&self.store)?.get(&key)?;
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
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    fn global_join<KG, VG, VR>(
        &self,
        prefix: &str,
        table: &GlobalKTable<KG, VG>,
        key: KeyOf<K, V, KG>,
        join: GlobalJoiner<V, VG, VR>,
    ) -> KStream<K, VR>
    where
        KG: Serde,
        VG: Serde,
        VR: Clone + Send + 'static,
    {
        let name = self.shared.name_or(self.next_name.clone(), prefix);
        let store = table.store.clone();
        let node = self.shared.with(|inner| {
            inner.builder.processor(
                &name,
                &[&self.node],
                move || GlobalJoin {
                    store: store.clone(),
                    key: Arc::clone(&key),
                    join: Arc::clone(&join),
                },
                &[],
            )
        });
        KStream::new(self.shared.clone(), node, self.repartition_required)
    }

    /// Joins each record with the global table's row for the key
    /// `key_of(key, value)` computes; records without a row are dropped. No
    /// repartition, no co-partitioning: every instance holds the whole table.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let countries = builder.global_table::<String, String>("countries", Materialized::as_("countries"));
    /// builder
    ///     .stream::<String, String>("users") // key: user, value: country code
    ///     .join_global(&countries, |_user, code| code.clone(), |code, name| format!("{code}={name}"))
    ///     .to("user-countries");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("countries", &"fr".to_string(), &Some("France".to_string()), 0).unwrap();
    /// driver.pipe("users", &"ada".to_string(), &"fr".to_string(), 1).unwrap();
    /// driver.pipe("users", &"bob".to_string(), &"xx".to_string(), 2).unwrap();
    /// let out = driver.read_output::<String, String>("user-countries").unwrap();
    /// assert_eq!(out.iter().map(|r| r.value.as_str()).collect::<Vec<_>>(), vec!["fr=France"]);
    /// ```
    pub fn join_global<KG, VG, VR>(
        &self,
        table: &GlobalKTable<KG, VG>,
        key_of: impl Fn(&K, &V) -> KG + Send + Sync + 'static,
        joiner: impl Fn(&V, &VG) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        KG: Serde,
        VG: Serde,
        VR: Clone + Send + 'static,
    {
        self.global_join(
            "KSTREAM-JOIN",
            table,
            Arc::new(key_of),
            Arc::new(move |v, row| row.map(|row| joiner(v, row))),
        )
    }

    /// As [`join_global`](Self::join_global), keeping every record: the
    /// joiner sees `None` when the table has no row for it.
    ///
    /// ```
    /// # use weir_streams::dsl::{Materialized, StreamsBuilder};
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let countries = builder.global_table::<String, String>("countries", Materialized::as_("countries"));
    /// builder
    ///     .stream::<String, String>("users") // key: user, value: country code
    ///     .left_join_global(&countries, |_user, code| code.clone(), |code, name| {
    ///         format!("{code}={}", name.map_or("?", String::as_str))
    ///     })
    ///     .to("user-countries");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("countries", &"fr".to_string(), &Some("France".to_string()), 0).unwrap();
    /// driver.pipe("users", &"ada".to_string(), &"fr".to_string(), 1).unwrap();
    /// driver.pipe("users", &"bob".to_string(), &"xx".to_string(), 2).unwrap();
    /// let out = driver.read_output::<String, String>("user-countries").unwrap();
    /// assert_eq!(out.iter().map(|r| r.value.as_str()).collect::<Vec<_>>(), vec!["fr=France", "xx=?"]);
    /// ```
    pub fn left_join_global<KG, VG, VR>(
        &self,
        table: &GlobalKTable<KG, VG>,
        key_of: impl Fn(&K, &V) -> KG + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VG>) -> VR + Send + Sync + 'static,
    ) -> KStream<K, VR>
    where
        KG: Serde,
        VG: Serde,
        VR: Clone + Send + 'static,
    {
        self.global_join(
            "KSTREAM-LEFTJOIN",
            table,
            Arc::new(key_of),
            Arc::new(move |v, row| Some(joiner(v, row))),
        )
    }
}
