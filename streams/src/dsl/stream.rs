//! `KStream`: a record stream and its stateless operations.

use std::sync::Arc;

use crate::dsl::Shared;
use crate::dsl::grouped::KGroupedStream;
use crate::error::ProcessError;
use crate::processor::{Processor, ProcessorContext};
use crate::record::Record;
use crate::serde::Serde;
use crate::state::StoreName;
use crate::topology::NodeRef;

/// One step of a stateless operation: what it forwards for one record.
pub(crate) type Step<KIn, VIn, KOut, VOut> =
    Arc<dyn Fn(Record<KIn, VIn>, &mut ProcessorContext<'_, KOut, VOut>) + Send + Sync>;

/// The processor behind every stateless operation.
pub(crate) struct StepProcessor<KIn, VIn, KOut, VOut> {
    pub(crate) step: Step<KIn, VIn, KOut, VOut>,
}

impl<KIn, VIn, KOut, VOut> Processor<KIn, VIn> for StepProcessor<KIn, VIn, KOut, VOut>
where
    KIn: Send + 'static,
    VIn: Send + 'static,
    KOut: Clone + Send + 'static,
    VOut: Clone + Send + 'static,
{
    type KOut = KOut;
    type VOut = VOut;

    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, KOut, VOut>,
        record: Record<KIn, VIn>,
    ) -> Result<(), ProcessError> {
        (self.step)(record, ctx);
        Ok(())
    }
}

/// A stream of records, as Kafka Streams' `KStream`: every record is an
/// independent event. Operations take `&self`, so one stream can feed
/// several (each gets every record).
///
/// ```
/// use weir_streams::dsl::StreamsBuilder;
/// use weir_streams::testing::TopologyTestDriver;
///
/// let builder = StreamsBuilder::new();
/// let orders = builder.stream::<String, i64>("orders");
/// orders.filter(|_, amount| *amount >= 100).to("large-orders");
/// orders.map_values(|amount| amount * 2).to("doubled");
///
/// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
/// driver.pipe("orders", &"o1".to_string(), &150i64, 0).unwrap();
/// driver.pipe("orders", &"o2".to_string(), &20i64, 1).unwrap();
/// assert_eq!(driver.read_output::<String, i64>("large-orders").unwrap().len(), 1);
/// assert_eq!(driver.read_output::<String, i64>("doubled").unwrap()[1].value, 40);
/// ```
pub struct KStream<K, V> {
    pub(crate) shared: Shared,
    pub(crate) node: NodeRef<K, V>,
    /// The key changed since the last repartition (or the source): a
    /// grouping or join must repartition first, as in Kafka Streams.
    pub(crate) repartition_required: bool,
    pub(crate) next_name: Option<String>,
}

impl<K, V> Clone for KStream<K, V> {
    fn clone(&self) -> Self {
        KStream {
            shared: self.shared.clone(),
            node: self.node.clone(),
            repartition_required: self.repartition_required,
            next_name: self.next_name.clone(),
        }
    }
}

impl<K, V> std::fmt::Debug for KStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KStream")
            .field("node", &self.node)
            .field("repartition_required", &self.repartition_required)
            .finish()
    }
}

impl<K, V> KStream<K, V>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    pub(crate) fn new(shared: Shared, node: NodeRef<K, V>, repartition_required: bool) -> Self {
        KStream {
            shared,
            node,
            repartition_required,
            next_name: None,
        }
    }

    /// Names the next operation's node (Kafka Streams' `Named.as`), instead
    /// of a generated `KSTREAM-...` name.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").named("drop-empty").filter(|_, v| !v.is_empty()).to("out");
    /// assert!(builder.build().unwrap().describe().contains("Processor: drop-empty"));
    /// ```
    pub fn named(&self, name: &str) -> Self {
        let mut next = self.clone();
        next.next_name = Some(name.to_owned());
        next
    }

    pub(crate) fn step<K2, V2>(
        &self,
        prefix: &str,
        key_changing: bool,
        step: Step<K, V, K2, V2>,
    ) -> KStream<K2, V2>
    where
        K2: Clone + Send + 'static,
        V2: Clone + Send + 'static,
    {
        let name = self.shared.name_or(self.next_name.clone(), prefix);
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
        KStream::new(
            self.shared.clone(),
            node,
            self.repartition_required || key_changing,
        )
    }

    /// The records for which `predicate` holds.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<String, i64>("in").filter(|_, v| *v > 0).to("positive");
    /// # builder.build().unwrap();
    /// ```
    pub fn filter(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        self.step(
            "KSTREAM-FILTER",
            false,
            Arc::new(move |r, ctx| {
                if predicate(&r.key, &r.value) {
                    ctx.forward(r);
                }
            }),
        )
    }

    /// The records for which `predicate` does not hold.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<String, i64>("in").filter_not(|_, v| *v > 0).to("not-positive");
    /// # builder.build().unwrap();
    /// ```
    pub fn filter_not(&self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        self.step(
            "KSTREAM-FILTER",
            false,
            Arc::new(move |r, ctx| {
                if !predicate(&r.key, &r.value) {
                    ctx.forward(r);
                }
            }),
        )
    }

    /// Each record replaced by a new key and value (timestamp and headers
    /// kept). The key changes, so a later grouping or join repartitions.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").map(|k, v| (v, k)).to("swapped");
    /// # builder.build().unwrap();
    /// ```
    pub fn map<K2, V2>(
        &self,
        f: impl Fn(K, V) -> (K2, V2) + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        K2: Clone + Send + 'static,
        V2: Clone + Send + 'static,
    {
        self.step(
            "KSTREAM-MAP",
            true,
            Arc::new(move |r: Record<K, V>, ctx| {
                let (k, v) = f(r.key, r.value);
                ctx.forward(Record {
                    key: k,
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
            }),
        )
    }

    /// Each record's value replaced; the key is kept (no repartition).
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").map_values(|v| v.len() as i64).to("lengths");
    /// # builder.build().unwrap();
    /// ```
    pub fn map_values<V2>(&self, f: impl Fn(V) -> V2 + Send + Sync + 'static) -> KStream<K, V2>
    where
        V2: Clone + Send + 'static,
    {
        self.step(
            "KSTREAM-MAPVALUES",
            false,
            Arc::new(move |r: Record<K, V>, ctx| {
                let v = f(r.value);
                ctx.forward(Record {
                    key: r.key,
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
            }),
        )
    }

    /// As [`map_values`](Self::map_values), the mapper also seeing the key.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").map_values_with_key(|k, v| format!("{k}:{v}")).to("out");
    /// # builder.build().unwrap();
    /// ```
    pub fn map_values_with_key<V2>(
        &self,
        f: impl Fn(&K, V) -> V2 + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        V2: Clone + Send + 'static,
    {
        self.step(
            "KSTREAM-MAPVALUES",
            false,
            Arc::new(move |r: Record<K, V>, ctx| {
                let v = f(&r.key, r.value);
                ctx.forward(Record {
                    key: r.key,
                    value: v,
                    timestamp: r.timestamp,
                    headers: r.headers,
                });
            }),
        )
    }

    /// Each record replaced by zero or more records. The key changes.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder
    ///     .stream::<(), String>("lines")
    ///     .flat_map(|_, line| line.split(',').map(|w| (w.to_owned(), 1i64)).collect::<Vec<_>>())
    ///     .to("words");
    /// # builder.build().unwrap();
    /// ```
    pub fn flat_map<K2, V2, I>(
        &self,
        f: impl Fn(K, V) -> I + Send + Sync + 'static,
    ) -> KStream<K2, V2>
    where
        K2: Clone + Send + 'static,
        V2: Clone + Send + 'static,
        I: IntoIterator<Item = (K2, V2)>,
    {
        self.step(
            "KSTREAM-FLATMAP",
            true,
            Arc::new(move |r: Record<K, V>, ctx| {
                for (k, v) in f(r.key, r.value) {
                    ctx.forward(Record {
                        key: k,
                        value: v,
                        timestamp: r.timestamp,
                        headers: r.headers.clone(),
                    });
                }
            }),
        )
    }

    /// Each record replaced by zero or more values under its key.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder
    ///     .stream::<String, String>("in")
    ///     .flat_map_values(|v| v.split(' ').map(str::to_owned).collect::<Vec<_>>())
    ///     .to("out");
    /// # builder.build().unwrap();
    /// ```
    pub fn flat_map_values<V2, I>(
        &self,
        f: impl Fn(V) -> I + Send + Sync + 'static,
    ) -> KStream<K, V2>
    where
        V2: Clone + Send + 'static,
        I: IntoIterator<Item = V2>,
    {
        self.step(
            "KSTREAM-FLATMAPVALUES",
            false,
            Arc::new(move |r: Record<K, V>, ctx| {
                for v in f(r.value) {
                    ctx.forward(Record {
                        key: r.key.clone(),
                        value: v,
                        timestamp: r.timestamp,
                        headers: r.headers.clone(),
                    });
                }
            }),
        )
    }

    /// Each record under a new key computed from it. The key changes.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<(), String>("in").select_key(|_, v| v.clone()).to("out");
    /// # builder.build().unwrap();
    /// ```
    pub fn select_key<K2>(&self, f: impl Fn(&K, &V) -> K2 + Send + Sync + 'static) -> KStream<K2, V>
    where
        K2: Clone + Send + 'static,
    {
        self.step(
            "KSTREAM-KEY-SELECT",
            true,
            Arc::new(move |r: Record<K, V>, ctx| {
                let k = f(&r.key, &r.value);
                ctx.forward(r.with_key(k));
            }),
        )
    }

    /// Calls `f` on every record and passes it on unchanged.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").peek(|k, _| println!("seen {k}")).to("out");
    /// # builder.build().unwrap();
    /// ```
    pub fn peek(&self, f: impl Fn(&K, &V) + Send + Sync + 'static) -> Self {
        self.step(
            "KSTREAM-PEEK",
            false,
            Arc::new(move |r: Record<K, V>, ctx| {
                f(&r.key, &r.value);
                ctx.forward(r);
            }),
        )
    }

    /// Calls `f` on every record; a terminal operation.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").for_each(|k, v| println!("{k} = {v}"));
    /// # builder.build().unwrap();
    /// ```
    pub fn for_each(&self, f: impl Fn(&K, &V) + Send + Sync + 'static) {
        let _: KStream<K, V> = self.step(
            "KSTREAM-FOREACH",
            false,
            Arc::new(move |r: Record<K, V>, _ctx| f(&r.key, &r.value)),
        );
    }

    /// Splits the stream by predicates: each record goes to the first branch
    /// whose predicate holds (Kafka Streams' `split()`).
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// let [small, large, rest]: [_; 3] = builder
    ///     .stream::<String, i64>("in")
    ///     .split()
    ///     .branch(|_, v| *v < 10)
    ///     .branch(|_, v| *v < 1000)
    ///     .default_branch()
    ///     .try_into()
    ///     .unwrap();
    /// small.to("small");
    /// large.to("large");
    /// rest.to("huge");
    /// # builder.build().unwrap();
    /// ```
    pub fn split(&self) -> BranchedKStream<K, V> {
        BranchedKStream {
            stream: self.clone(),
            predicates: Vec::new(),
            branches: Vec::new(),
        }
    }

    /// The records of both streams, as one stream.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// let a = builder.stream::<String, String>("a");
    /// let b = builder.stream::<String, String>("b");
    /// a.merge(&b).to("both");
    /// # builder.build().unwrap();
    /// ```
    pub fn merge(&self, other: &KStream<K, V>) -> Self {
        let name = self.shared.name_or(self.next_name.clone(), "KSTREAM-MERGE");
        let node = self.shared.with(|inner| {
            inner.builder.processor(
                &name,
                &[&self.node, &other.node],
                || StepProcessor::<K, V, K, V> {
                    step: Arc::new(|r, ctx| ctx.forward(r)),
                },
                &[],
            )
        });
        KStream::new(
            self.shared.clone(),
            node,
            self.repartition_required || other.repartition_required,
        )
    }

    /// A custom [`Processor`] inside a DSL chain, with the stores it uses
    /// (declared on the builder with [`crate::dsl::StreamsBuilder::kv_store`]).
    /// Its output counts as key-changed.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # use weir_streams::processor::{Processor, ProcessorContext};
    /// # use weir_streams::{ProcessError, Record};
    /// struct Upper;
    /// impl Processor<String, String> for Upper {
    ///     type KOut = String;
    ///     type VOut = String;
    ///     fn process(&mut self, ctx: &mut ProcessorContext<'_, String, String>, r: Record<String, String>)
    ///         -> Result<(), ProcessError> {
    ///         let v = r.value.to_uppercase();
    ///         ctx.forward(r.with_value(v));
    ///         Ok(())
    ///     }
    /// }
    /// let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").process(|| Upper, &[]).to("out");
    /// # builder.build().unwrap();
    /// ```
    pub fn process<P, F>(&self, supplier: F, stores: &[&dyn StoreName]) -> KStream<P::KOut, P::VOut>
    where
        P: Processor<K, V>,
        F: Fn() -> P + Send + Sync + 'static,
    {
        let name = self
            .shared
            .name_or(self.next_name.clone(), "KSTREAM-PROCESSOR");
        let node = self.shared.with(|inner| {
            inner
                .builder
                .processor(&name, &[&self.node], supplier, stores)
        });
        KStream::new(self.shared.clone(), node, true)
    }
}

impl<K, V> KStream<K, V>
where
    K: Serde + Clone,
    V: Serde + Clone,
{
    /// Writes every record to `topic`, partitioned by the murmur2 hash of the
    /// key bytes (Java's default partitioner).
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").to("out");
    /// # builder.build().unwrap();
    /// ```
    pub fn to(&self, topic: &str) {
        let name = self.shared.name_or(self.next_name.clone(), "KSTREAM-SINK");
        self.shared
            .with(|inner| inner.builder.sink(&name, &[&self.node], topic));
    }

    /// Writes each record to the topic `chooser` names for it (Kafka
    /// Streams' `to(TopicNameExtractor)`); the topics must exist.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// builder
    ///     .stream::<String, i64>("amounts")
    ///     .to_dynamic(|_, v| if *v < 0 { "refunds".to_string() } else { "payments".to_string() });
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("amounts", &"a".to_string(), &-5i64, 0).unwrap();
    /// driver.pipe("amounts", &"b".to_string(), &7i64, 1).unwrap();
    /// assert_eq!(driver.read_output::<String, i64>("refunds").unwrap()[0].value, -5);
    /// assert_eq!(driver.read_output::<String, i64>("payments").unwrap()[0].value, 7);
    /// ```
    pub fn to_dynamic(&self, chooser: impl Fn(&K, &V) -> String + Send + Sync + 'static) {
        let name = self.shared.name_or(self.next_name.clone(), "KSTREAM-SINK");
        self.shared.with(|inner| {
            inner
                .builder
                .sink_with_chooser(&name, &[&self.node], chooser)
        });
    }

    /// Repartitions the stream by its current key through
    /// `<application.id>-<name>-repartition`, with `partitions` partitions
    /// (or as many as the upstream input has). The result is no longer
    /// key-changed.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder
    ///     .stream::<(), String>("in")
    ///     .select_key(|_, v| v.clone())
    ///     .repartition(Some("by-value"), Some(12))
    ///     .to("out");
    /// # builder.build().unwrap();
    /// ```
    pub fn repartition(&self, name: Option<&str>, partitions: Option<i32>) -> Self {
        let name = self
            .shared
            .name_or(name.map(str::to_owned), "KSTREAM-REPARTITION");
        let node = self
            .shared
            .with(|inner| inner.builder.repartition(&name, &[&self.node], partitions));
        KStream::new(self.shared.clone(), node, false)
    }

    /// This stream, repartitioned through a topic named after `name` if its
    /// key changed since the last repartition (what a grouping or a join
    /// needs).
    pub(crate) fn repartitioned_if_needed(&self, name: &str) -> Self {
        if self.repartition_required {
            self.repartition(Some(name), None)
        } else {
            self.clone()
        }
    }

    /// Groups the stream by its key, for an aggregation. If the key changed
    /// upstream, the aggregation first repartitions through
    /// `<application.id>-<store>-repartition`.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder.stream::<String, String>("in").group_by_key().count().to_stream().to("counts");
    /// # builder.build().unwrap();
    /// ```
    pub fn group_by_key(&self) -> KGroupedStream<K, V> {
        KGroupedStream::new(self.clone())
    }

    /// Groups the stream by a new key computed from each record (always a
    /// repartition before the aggregation).
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # let builder = StreamsBuilder::new();
    /// builder
    ///     .stream::<String, String>("page-views")
    ///     .group_by(|_user, page| page.clone())
    ///     .count()
    ///     .to_stream()
    ///     .to("views-per-page");
    /// # builder.build().unwrap();
    /// ```
    pub fn group_by<K2>(
        &self,
        selector: impl Fn(&K, &V) -> K2 + Send + Sync + 'static,
    ) -> KGroupedStream<K2, V>
    where
        K2: Serde + Clone,
    {
        KGroupedStream::new(self.select_key(selector))
    }
}

/// A branch's predicate.
type Predicate<K, V> = Arc<dyn Fn(&K, &V) -> bool + Send + Sync>;

/// The branches of [`KStream::split`]: each record goes to the first branch
/// whose predicate holds, or to the default branch if there is one.
///
/// ```
/// # use weir_streams::dsl::StreamsBuilder;
/// # use weir_streams::testing::TopologyTestDriver;
/// let builder = StreamsBuilder::new();
/// let branches = builder.stream::<String, i64>("in").split()
///     .branch(|_, v| *v < 0)
///     .default_branch();
/// branches[0].to("negative");
/// branches[1].to("other");
/// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
/// for v in [-1i64, 2, -3] {
///     driver.pipe("in", &"k".to_string(), &v, 0).unwrap();
/// }
/// let negative = driver.read_output::<String, i64>("negative").unwrap();
/// assert_eq!(negative.iter().map(|r| r.value).collect::<Vec<_>>(), vec![-1, -3]);
/// assert_eq!(driver.read_output::<String, i64>("other").unwrap().len(), 1);
/// ```
pub struct BranchedKStream<K, V> {
    stream: KStream<K, V>,
    predicates: Vec<Predicate<K, V>>,
    branches: Vec<KStream<K, V>>,
}

impl<K, V> std::fmt::Debug for BranchedKStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BranchedKStream")
            .field("branches", &self.branches.len())
            .finish()
    }
}

impl<K, V> BranchedKStream<K, V>
where
    K: Clone + Send + 'static,
    V: Clone + Send + 'static,
{
    fn add(&mut self, predicate: Option<Predicate<K, V>>) {
        // Each branch is a filter that passes the records no earlier
        // predicate took (predicates must be pure, as in Kafka Streams).
        let earlier = self.predicates.clone();
        let this = predicate.clone();
        let branch = self.stream.step(
            "KSTREAM-BRANCH",
            false,
            Arc::new(move |r: Record<K, V>, ctx| {
                if earlier.iter().any(|p| p(&r.key, &r.value)) {
                    return;
                }
                if this.as_ref().is_none_or(|p| p(&r.key, &r.value)) {
                    ctx.forward(r);
                }
            }),
        );
        if let Some(p) = predicate {
            self.predicates.push(p);
        }
        self.branches.push(branch);
    }

    /// A branch of the records for which `predicate` holds (and no earlier
    /// branch's did).
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let branches = builder.stream::<String, i64>("in").split()
    ///     .branch(|_, v| *v < 10)
    ///     .branch(|_, v| *v < 100) // 5 went to the first branch, not here
    ///     .no_default_branch();
    /// branches[0].to("small");
    /// branches[1].to("medium");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("in", &"k".to_string(), &5i64, 0).unwrap();
    /// driver.pipe("in", &"k".to_string(), &50i64, 0).unwrap();
    /// assert_eq!(driver.read_output::<String, i64>("small").unwrap()[0].value, 5);
    /// let medium = driver.read_output::<String, i64>("medium").unwrap();
    /// assert_eq!(medium.iter().map(|r| r.value).collect::<Vec<_>>(), vec![50]);
    /// ```
    pub fn branch(mut self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        self.add(Some(Arc::new(predicate)));
        self
    }

    /// Ends the split with a branch of every record no predicate took, and
    /// returns the branches in order.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let branches = builder.stream::<String, String>("in").split()
    ///     .branch(|_, v| v.starts_with("error"))
    ///     .default_branch();
    /// assert_eq!(branches.len(), 2);
    /// branches[1].to("not-errors");
    /// # branches[0].to("errors");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// driver.pipe("in", &"k".to_string(), &"error: disk".to_string(), 0).unwrap();
    /// driver.pipe("in", &"k".to_string(), &"ok".to_string(), 0).unwrap();
    /// let rest = driver.read_output::<String, String>("not-errors").unwrap();
    /// assert_eq!(rest.iter().map(|r| r.value.as_str()).collect::<Vec<_>>(), vec!["ok"]);
    /// ```
    pub fn default_branch(mut self) -> Vec<KStream<K, V>> {
        self.add(None);
        self.branches
    }

    /// Ends the split; records no predicate took are dropped.
    ///
    /// ```
    /// # use weir_streams::dsl::StreamsBuilder;
    /// # use weir_streams::testing::TopologyTestDriver;
    /// let builder = StreamsBuilder::new();
    /// let branches = builder.stream::<String, i64>("in").split()
    ///     .branch(|_, v| v % 2 == 0)
    ///     .no_default_branch();
    /// assert_eq!(branches.len(), 1);
    /// branches[0].to("even");
    /// let mut driver = TopologyTestDriver::new(builder.build().unwrap(), "app").unwrap();
    /// for v in [1i64, 2, 3] {
    ///     driver.pipe("in", &"k".to_string(), &v, 0).unwrap();
    /// }
    /// let even = driver.read_output::<String, i64>("even").unwrap();
    /// assert_eq!(even.iter().map(|r| r.value).collect::<Vec<_>>(), vec![2]); // 1 and 3 dropped
    /// ```
    pub fn no_default_branch(self) -> Vec<KStream<K, V>> {
        self.branches
    }
}
