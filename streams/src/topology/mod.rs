//! Topologies: sources, processors and sinks, the stores processors use, and
//! the subtopologies (connected parts) that become tasks.
//!
//! ```
//! use weir_streams::TopologyBuilder;
//! use weir_streams::processor::{Processor, ProcessorContext};
//! use weir_streams::{ProcessError, Record};
//!
//! struct Words;
//! impl Processor<(), String> for Words {
//!     type KOut = String;
//!     type VOut = String;
//!     fn process(&mut self, ctx: &mut ProcessorContext<'_, String, String>, r: Record<(), String>)
//!         -> Result<(), ProcessError> {
//!         for w in r.value.split_whitespace() {
//!             ctx.forward(Record::new(w.to_lowercase(), w.to_lowercase(), r.timestamp));
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let mut b = TopologyBuilder::new();
//! let lines = b.source::<(), String>("lines", &["text"]);
//! let words = b.processor("split", &[&lines], || Words, &[]);
//! let by_word = b.repartition::<String, String>("by-word", &[&words], None);
//! b.sink("out", &[&by_word], "words");
//! let topology = b.build().unwrap();
//! assert_eq!(topology.subtopology_count(), 2);
//! println!("{}", topology.describe());
//! ```

mod nodes;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Result, StreamsError};
use crate::processor::Processor;
use crate::record::Record;
use crate::serde::Serde;
use crate::state::{
    GlobalHandles, GlobalKvStoreRef, GlobalStoreSpec, KvStoreRef, StoreName, StoreSpec, StoreType,
    WindowStoreRef,
};
use crate::task::{Erased, ErasedNode, SourceDecoder};

use self::nodes::{ProcessorNode, SinkNode, SourceNode};

/// A topic a topology reads or writes: one of the user's, or internal to the
/// application (named `<application.id>-<name>`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TopicRef {
    /// A topic named by the user.
    External(String),
    /// An internal topic: the application id and a dash come first.
    Internal(String),
}

impl TopicRef {
    /// The topic's name in application `application_id`.
    pub fn resolve(&self, application_id: &str) -> String {
        match self {
            TopicRef::External(t) => t.clone(),
            TopicRef::Internal(suffix) => format!("{application_id}-{suffix}"),
        }
    }

    /// Whether `topic` is this topic's name in application
    /// `application_id`: [`resolve`](Self::resolve) without building the
    /// name (a stream thread asks this for every record it polls).
    ///
    /// ```
    /// use weir_streams::topology::TopicRef;
    /// let internal = TopicRef::Internal("counts-changelog".into());
    /// assert!(internal.is("app-counts-changelog", "app"));
    /// assert!(!internal.is("app-counts-changelog", "ap"));
    /// assert!(TopicRef::External("words".into()).is("words", "app"));
    /// ```
    pub fn is(&self, topic: &str, application_id: &str) -> bool {
        match self {
            TopicRef::External(t) => t == topic,
            TopicRef::Internal(suffix) => topic
                .strip_prefix(application_id)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|rest| rest == suffix),
        }
    }
}

impl std::fmt::Display for TopicRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopicRef::External(t) => f.write_str(t),
            TopicRef::Internal(s) => write!(f, "${{application.id}}-{s}"),
        }
    }
}

/// `cache.max.bytes.buffering` by default: Kafka Streams' 10 MiB.
pub(crate) const DEFAULT_CACHE_MAX_BYTES: u64 = 10 * 1024 * 1024;

pub(crate) type NodeFactory = Arc<dyn Fn(&str) -> Box<dyn ErasedNode> + Send + Sync>;

pub(crate) enum NodeKind {
    Source {
        topics: Vec<TopicRef>,
        /// A pattern source: every existing topic the regex matches whole
        /// (resolved when an instance starts; `topics` is then filled).
        pattern: Option<regex::Regex>,
        decoder: SourceDecoder,
        serdes: (&'static str, &'static str),
    },
    Processor,
    Sink {
        topic: TopicRef,
    },
    /// A sink whose topic a function picks per record.
    DynamicSink,
}

pub(crate) struct NodeDef {
    pub(crate) name: String,
    pub(crate) kind: NodeKind,
    pub(crate) parents: Vec<usize>,
    pub(crate) children: Vec<usize>,
    pub(crate) stores: Vec<String>,
    pub(crate) factory: NodeFactory,
}

/// A typed handle to a node of a [`TopologyBuilder`]: what records it forwards.
pub struct NodeRef<K, V> {
    index: usize,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for NodeRef<K, V> {
    fn clone(&self) -> Self {
        NodeRef {
            index: self.index,
            _types: PhantomData,
        }
    }
}

impl<K, V> std::fmt::Debug for NodeRef<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeRef({})", self.index)
    }
}

/// Builds a [`Topology`] with Kafka Streams' Processor API.
#[derive(Default)]
pub struct TopologyBuilder {
    nodes: Vec<NodeDef>,
    stores: BTreeMap<String, StoreSpec>,
    repartitions: BTreeMap<String, Option<i32>>,
    globals: BTreeMap<String, GlobalStoreSpec>,
    errors: Vec<String>,
}

impl std::fmt::Debug for TopologyBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyBuilder")
            .field("nodes", &self.nodes.len())
            .field("stores", &self.stores.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl TopologyBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    fn add(
        &mut self,
        name: &str,
        kind: NodeKind,
        parents: Vec<usize>,
        stores: Vec<String>,
        factory: NodeFactory,
    ) -> usize {
        if !valid_name(name) {
            self.errors.push(format!(
                "node name {name:?} must be 1 to 200 of [a-zA-Z0-9._-]"
            ));
        }
        if self.nodes.iter().any(|n| n.name == name) {
            self.errors.push(format!("two nodes are named {name}"));
        }
        let index = self.nodes.len();
        for &p in &parents {
            if let Some(parent) = self.nodes.get_mut(p) {
                parent.children.push(index);
            }
        }
        self.nodes.push(NodeDef {
            name: name.to_owned(),
            kind,
            parents,
            children: Vec::new(),
            stores,
            factory,
        });
        index
    }

    fn source_at<K, V>(&mut self, name: &str, topics: Vec<TopicRef>) -> NodeRef<K, V>
    where
        K: Serde + Clone,
        V: Serde + Clone,
    {
        if topics.is_empty() {
            self.errors.push(format!("source {name} reads no topic"));
        }
        self.source_node(name, topics, None)
    }

    fn source_node<K, V>(
        &mut self,
        name: &str,
        topics: Vec<TopicRef>,
        pattern: Option<regex::Regex>,
    ) -> NodeRef<K, V>
    where
        K: Serde + Clone,
        V: Serde + Clone,
    {
        let decoder: SourceDecoder = Arc::new(|raw| {
            let key = K::deserialize(raw.key.as_deref())?;
            let value = V::deserialize(raw.value.as_deref())?;
            let record = Record {
                key,
                value,
                timestamp: raw.timestamp,
                headers: raw.headers.clone(),
            };
            Ok(Box::new(record) as Erased)
        });
        let index = self.add(
            name,
            NodeKind::Source {
                topics,
                pattern,
                decoder,
                serdes: (K::NAME, V::NAME),
            },
            Vec::new(),
            Vec::new(),
            Arc::new(|_| Box::new(SourceNode::<K, V>(PhantomData))),
        );
        NodeRef {
            index,
            _types: PhantomData,
        }
    }

    /// A source node reading every topic whose whole name matches the
    /// regular expression `pattern` (Kafka Streams' `Pattern` sources). An
    /// instance resolves the pattern against the cluster's topics when it
    /// starts (its own internal topics excluded); a topic created later is
    /// read after the next start. In the test driver any piped topic that
    /// matches is read.
    ///
    /// ```
    /// # use weir_streams::TopologyBuilder;
    /// let mut b = TopologyBuilder::new();
    /// let clicks = b.source_pattern::<String, String>("clicks", "clicks-.*");
    /// b.sink("out", &[&clicks], "all-clicks");
    /// assert!(b.build().unwrap().describe().contains("pattern: clicks-.*"));
    /// ```
    pub fn source_pattern<K, V>(&mut self, name: &str, pattern: &str) -> NodeRef<K, V>
    where
        K: Serde + Clone,
        V: Serde + Clone,
    {
        let compiled = match regex::Regex::new(&format!("^(?:{pattern})$")) {
            Ok(r) => Some(r),
            Err(e) => {
                self.errors.push(format!(
                    "source {name}: pattern {pattern:?} is not a regex: {e}"
                ));
                None
            }
        };
        self.source_node(name, Vec::new(), compiled)
    }

    /// A source node reading `topics`, decoding keys as `K` and values as `V`.
    pub fn source<K, V>(&mut self, name: &str, topics: &[&str]) -> NodeRef<K, V>
    where
        K: Serde + Clone,
        V: Serde + Clone,
    {
        let topics = topics
            .iter()
            .map(|t| TopicRef::External((*t).to_owned()))
            .collect();
        self.source_at(name, topics)
    }

    /// A processor node fed by `parents`, made per task by `supplier`, that
    /// may use the stores `stores` (and only those).
    pub fn processor<KIn, VIn, P, F>(
        &mut self,
        name: &str,
        parents: &[&NodeRef<KIn, VIn>],
        supplier: F,
        stores: &[&dyn StoreName],
    ) -> NodeRef<P::KOut, P::VOut>
    where
        KIn: Send + 'static,
        VIn: Send + 'static,
        P: Processor<KIn, VIn>,
        F: Fn() -> P + Send + Sync + 'static,
    {
        if parents.is_empty() {
            self.errors.push(format!("processor {name} has no parent"));
        }
        let stores = stores.iter().map(|s| s.store_name().to_owned()).collect();
        let index = self.add(
            name,
            NodeKind::Processor,
            parents.iter().map(|p| p.index).collect(),
            stores,
            Arc::new(move |_| {
                Box::new(ProcessorNode {
                    processor: supplier(),
                    _types: PhantomData::<fn(KIn, VIn)>,
                })
            }),
        );
        NodeRef {
            index,
            _types: PhantomData,
        }
    }

    fn sink_at<K: Serde, V: Serde>(
        &mut self,
        name: &str,
        parents: &[&NodeRef<K, V>],
        topic: TopicRef,
    ) {
        if parents.is_empty() {
            self.errors
                .push(format!("sink {name} is not connected to any node"));
        }
        let resolved = topic.clone();
        self.add(
            name,
            NodeKind::Sink { topic },
            parents.iter().map(|p| p.index).collect(),
            Vec::new(),
            Arc::new(move |app| {
                Box::new(SinkNode::<K, V> {
                    topic: resolved.resolve(app),
                    chooser: None,
                    _types: PhantomData,
                })
            }),
        );
    }

    /// A sink node writing the records of `parents` to `topic`, partitioned
    /// by the murmur2 hash of the key bytes (Java's default partitioner).
    pub fn sink<K: Serde, V: Serde>(
        &mut self,
        name: &str,
        parents: &[&NodeRef<K, V>],
        topic: &str,
    ) {
        self.sink_at(name, parents, TopicRef::External(topic.to_owned()));
    }

    /// A sink node writing each record of `parents` to the topic `chooser`
    /// names for it (Kafka Streams' `TopicNameExtractor`). The topics must
    /// exist; a record for a missing one fails when it is sent.
    ///
    /// ```
    /// # use weir_streams::TopologyBuilder;
    /// let mut b = TopologyBuilder::new();
    /// let src = b.source::<String, String>("in", &["events"]);
    /// b.sink_with_chooser("route", &[&src], |_k: &String, v: &String| format!("events-{}", &v[..1]));
    /// # b.build().unwrap();
    /// ```
    pub fn sink_with_chooser<K: Serde, V: Serde>(
        &mut self,
        name: &str,
        parents: &[&NodeRef<K, V>],
        chooser: impl Fn(&K, &V) -> String + Send + Sync + 'static,
    ) {
        if parents.is_empty() {
            self.errors
                .push(format!("sink {name} is not connected to any node"));
        }
        let chooser: nodes::TopicChooser<K, V> = Arc::new(chooser);
        self.add(
            name,
            NodeKind::DynamicSink,
            parents.iter().map(|p| p.index).collect(),
            Vec::new(),
            Arc::new(move |_| {
                Box::new(SinkNode::<K, V> {
                    topic: String::new(),
                    chooser: Some(Arc::clone(&chooser)),
                    _types: PhantomData,
                })
            }),
        );
    }

    /// Repartitions the records of `parents` by key through the internal
    /// topic `<application.id>-<name>-repartition` (with `partitions`, or as
    /// many as the upstream subtopology has) and returns the node that reads
    /// them back. Records with equal keys then meet in one task downstream.
    pub fn repartition<K, V>(
        &mut self,
        name: &str,
        parents: &[&NodeRef<K, V>],
        partitions: Option<i32>,
    ) -> NodeRef<K, V>
    where
        K: Serde + Clone,
        V: Serde + Clone,
    {
        let topic = TopicRef::Internal(format!("{name}-repartition"));
        if self
            .repartitions
            .insert(name.to_owned(), partitions)
            .is_some()
        {
            self.errors
                .push(format!("two repartition topics are named {name}"));
        }
        if partitions.is_some_and(|p| p < 1) {
            self.errors
                .push(format!("repartition {name}: partitions must be at least 1"));
        }
        self.sink_at(&format!("{name}-repartition-sink"), parents, topic.clone());
        self.source_at(&format!("{name}-repartition-source"), vec![topic])
    }

    fn add_store(&mut self, spec: StoreSpec) {
        if !valid_name(&spec.name) {
            self.errors.push(format!(
                "store name {:?} must be 1 to 200 of [a-zA-Z0-9._-]",
                spec.name
            ));
        }
        if self.stores.contains_key(&spec.name) || self.globals.contains_key(&spec.name) {
            self.errors
                .push(format!("two stores are named {}", spec.name));
        }
        self.stores.insert(spec.name.clone(), spec);
    }

    /// A persistent key-value store with a changelog.
    pub fn kv_store<K: Serde, V: Serde>(&mut self, name: &str) -> KvStoreRef<K, V> {
        self.add_store(StoreSpec {
            name: name.to_owned(),
            kind: StoreType::KeyValue,
            logged: true,
            in_memory: false,
            caching: false,
            key_serde: K::NAME,
            value_serde: V::NAME,
            source_topic: None,
        });
        KvStoreRef::new(name)
    }

    /// A persistent window store with a changelog, keeping windows for
    /// `retention` behind stream time (dropped in segments of a tenth of it,
    /// at least one second).
    pub fn window_store<K: Serde, V: Serde>(
        &mut self,
        name: &str,
        retention: Duration,
    ) -> WindowStoreRef<K, V> {
        let segment = (retention / 10).max(Duration::from_secs(1));
        self.add_store(StoreSpec {
            name: name.to_owned(),
            kind: StoreType::Window { retention, segment },
            logged: true,
            in_memory: false,
            caching: false,
            key_serde: K::NAME,
            value_serde: V::NAME,
            source_topic: None,
        });
        WindowStoreRef::new(name)
    }

    /// A global store named `name`: every instance keeps a read-only copy
    /// of every partition of `topic` (keys as `K`, values as `V`, a null
    /// value deleting), restored before any task processes and kept up to
    /// date beside the processing. Processors read it with
    /// [`ProcessorContext::global_kv_store`](crate::processor::ProcessorContext::global_kv_store);
    /// it need not be co-partitioned with anything. The topic is its own
    /// changelog; no topology source may read it.
    ///
    /// ```
    /// # use weir_streams::TopologyBuilder;
    /// let mut b = TopologyBuilder::new();
    /// let rates = b.global_store::<String, f64>("rates", "exchange-rates");
    /// # let _ = rates;
    /// ```
    pub fn global_store<K: Serde, V: Serde>(
        &mut self,
        name: &str,
        topic: &str,
    ) -> GlobalKvStoreRef<K, V> {
        if !valid_name(name) {
            self.errors.push(format!(
                "store name {name:?} must be 1 to 200 of [a-zA-Z0-9._-]"
            ));
        }
        if self.stores.contains_key(name) || self.globals.contains_key(name) {
            self.errors.push(format!("two stores are named {name}"));
        }
        self.globals.insert(
            name.to_owned(),
            GlobalStoreSpec {
                name: name.to_owned(),
                topic: topic.to_owned(),
                key_serde: K::NAME,
                value_serde: V::NAME,
            },
        );
        GlobalKvStoreRef::new(name)
    }

    /// Makes key-value store `name` a copy of input topic `topic`, which
    /// then serves as its changelog (Kafka Streams' source-table
    /// optimisation): no changelog topic is created or written, the store
    /// restores from `topic`, and its committed offsets are the task's input
    /// offsets of `topic`. The processor writing it must write each record
    /// of `topic` as it is (a table's materialization), and the task must
    /// read `topic`.
    ///
    /// ```
    /// # use weir_streams::TopologyBuilder;
    /// let mut b = TopologyBuilder::new();
    /// let users = b.kv_store::<String, String>("users");
    /// b.source_changelog("users", "users-topic");
    /// # let _ = users;
    /// ```
    pub fn source_changelog(&mut self, name: &str, topic: &str) {
        match self.stores.get_mut(name) {
            Some(spec) if matches!(spec.kind, StoreType::KeyValue) => {
                spec.source_topic = Some(topic.to_owned());
            }
            Some(_) => self.errors.push(format!(
                "source_changelog: store {name} is not a key-value store"
            )),
            None => self
                .errors
                .push(format!("source_changelog: unknown store {name}")),
        }
    }

    /// Turns off the changelog of store `name`: its contents then live only
    /// on this instance's disk and are not restored elsewhere.
    pub fn disable_logging(&mut self, name: &str) {
        match self.stores.get_mut(name) {
            Some(spec) => spec.logged = false,
            None => self
                .errors
                .push(format!("disable_logging: unknown store {name}")),
        }
    }

    /// Keeps store `name` in memory instead of on disk: no files, its
    /// contents lost when its task closes or the process dies, and restored
    /// in full from its changelog whenever the task starts (an instance
    /// restarted on the same `state.dir` replays the whole changelog, where a
    /// persistent store replays only what it had not committed). Writes are
    /// staged and applied at commit exactly as for a persistent store, so
    /// under exactly-once an aborted transaction's writes never reach it. An
    /// in-memory store counts for nothing in the task offset sums the
    /// assignor reports; a standby of it keeps its copy in memory.
    ///
    /// ```
    /// # use weir_streams::TopologyBuilder;
    /// let mut b = TopologyBuilder::new();
    /// let counts = b.kv_store::<String, u64>("counts");
    /// b.in_memory("counts");
    /// # let src = b.source::<String, String>("in", &["words"]);
    /// # let _ = (counts, src);
    /// ```
    pub fn in_memory(&mut self, name: &str) {
        match self.stores.get_mut(name) {
            Some(spec) => spec.in_memory = true,
            None => self.errors.push(format!("in_memory: unknown store {name}")),
        }
    }

    /// Turns caching on for store `name` (Kafka Streams'
    /// `withCachingEnabled`): its changelog gets one record per key between
    /// two commits, the key's latest value, instead of one per write. The
    /// store reads and writes as before, and records are forwarded as the
    /// processor forwards them; only the changelog traffic shrinks, by how
    /// often keys repeat within a commit interval. Off when
    /// `cache.max.bytes.buffering` is 0; once a task's pending records pass
    /// that many bytes they are sent before the commit. An unknown name is
    /// an error at build.
    ///
    /// ```
    /// # use weir_streams::TopologyBuilder;
    /// let mut b = TopologyBuilder::new();
    /// let counts = b.kv_store::<String, u64>("counts");
    /// b.with_caching("counts");
    /// # let src = b.source::<String, String>("in", &["words"]);
    /// # let _ = (counts, src);
    /// ```
    pub fn with_caching(&mut self, name: &str) {
        match self.stores.get_mut(name) {
            Some(spec) => spec.caching = true,
            None => self
                .errors
                .push(format!("with_caching: unknown store {name}")),
        }
    }

    /// Validates the topology and computes its subtopologies.
    ///
    /// # Errors
    ///
    /// [`StreamsError::InvalidTopology`] naming every problem: duplicate or
    /// invalid names, a node without parents, a processor using an unknown
    /// store, a topic read by two sources, a topology without sources.
    pub fn build(self) -> Result<Topology> {
        let mut errors = self.errors;
        let mut read_by: BTreeMap<&TopicRef, &str> = BTreeMap::new();
        for node in &self.nodes {
            for store in &node.stores {
                if !self.stores.contains_key(store) {
                    errors.push(format!(
                        "processor {} uses unknown store {store}",
                        node.name
                    ));
                }
            }
            if let NodeKind::Source { topics, .. } = &node.kind {
                for t in topics {
                    if let Some(other) = read_by.insert(t, &node.name) {
                        errors.push(format!(
                            "topic {t} is read by both {other} and {}",
                            node.name
                        ));
                    }
                }
            }
        }
        let has_pattern = self.nodes.iter().any(|n| {
            matches!(
                &n.kind,
                NodeKind::Source {
                    pattern: Some(_),
                    ..
                }
            )
        });
        if read_by.is_empty() && !has_pattern {
            errors.push("the topology has no source".to_owned());
        }
        for global in self.globals.values() {
            let topic = TopicRef::External(global.topic.clone());
            if let Some(source) = read_by.get(&topic) {
                errors.push(format!(
                    "topic {} is read by global store {} and by source {source}",
                    global.topic, global.name
                ));
            }
        }
        for name in self.stores.keys() {
            if !self.nodes.iter().any(|n| n.stores.contains(name)) {
                errors.push(format!("store {name} is used by no processor"));
            }
        }
        for spec in self.stores.values() {
            if let Some(topic) = &spec.source_topic
                && !read_by.contains_key(&TopicRef::External(topic.clone()))
            {
                errors.push(format!(
                    "store {} uses topic {topic} as its changelog, but no source reads it",
                    spec.name
                ));
            }
        }
        if !errors.is_empty() {
            return Err(StreamsError::InvalidTopology(errors.join("; ")));
        }
        let subtopologies = subtopologies(&self.nodes);
        Ok(Topology {
            nodes: self.nodes,
            stores: self.stores,
            repartitions: self.repartitions,
            subtopologies,
            globals: self.globals,
            global_handles: GlobalHandles::default(),
            cache_max_bytes: Arc::new(std::sync::atomic::AtomicU64::new(DEFAULT_CACHE_MAX_BYTES)),
        })
    }
}

/// One connected part of a topology: nodes joined by edges or by a shared store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subtopology {
    pub(crate) id: u32,
    pub(crate) nodes: Vec<usize>,
    pub(crate) sources: Vec<TopicRef>,
    pub(crate) sinks: Vec<TopicRef>,
    pub(crate) stores: Vec<String>,
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

fn subtopologies(nodes: &[NodeDef]) -> Vec<Subtopology> {
    let mut parent: Vec<usize> = (0..nodes.len()).collect();
    let union = |parent: &mut Vec<usize>, a: usize, b: usize| {
        let (ra, rb) = (find(parent, a), find(parent, b));
        if ra != rb {
            parent[ra.max(rb)] = ra.min(rb);
        }
    };
    let mut store_owner: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        for &p in &node.parents {
            union(&mut parent, i, p);
        }
        for s in &node.stores {
            match store_owner.get(s.as_str()) {
                Some(&other) => union(&mut parent, i, other),
                None => {
                    store_owner.insert(s, i);
                }
            }
        }
    }
    // Numbered in the order of each part's first node, as Kafka numbers its
    // node groups in the order their sources were added.
    let mut by_root: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..nodes.len() {
        let root = find(&mut parent, i);
        by_root.entry(root).or_default().push(i);
    }
    by_root
        .into_values()
        .enumerate()
        .map(|(id, members)| {
            let mut sources = Vec::new();
            let mut sinks = Vec::new();
            let mut stores = BTreeSet::new();
            for &m in &members {
                match &nodes[m].kind {
                    NodeKind::Source { topics, .. } => sources.extend(topics.iter().cloned()),
                    NodeKind::Sink { topic } => sinks.push(topic.clone()),
                    NodeKind::Processor | NodeKind::DynamicSink => {}
                }
                stores.extend(nodes[m].stores.iter().cloned());
            }
            Subtopology {
                id: u32::try_from(id).unwrap_or(u32::MAX),
                nodes: members,
                sources,
                sinks,
                stores: stores.into_iter().collect(),
            }
        })
        .collect()
}

/// An internal topic the application needs, with how to create it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalTopic {
    /// The topic's name.
    pub name: String,
    /// Its partition count.
    pub partitions: i32,
    /// Topic configs to create it with (`cleanup.policy`, `retention.ms`).
    pub configs: Vec<(String, String)>,
    /// Whether it is a changelog (else a repartition topic).
    pub changelog: bool,
}

/// A validated topology.
pub struct Topology {
    pub(crate) nodes: Vec<NodeDef>,
    pub(crate) stores: BTreeMap<String, StoreSpec>,
    repartitions: BTreeMap<String, Option<i32>>,
    pub(crate) subtopologies: Vec<Subtopology>,
    pub(crate) globals: BTreeMap<String, GlobalStoreSpec>,
    /// The global stores once an instance or a driver opened them.
    pub(crate) global_handles: GlobalHandles,
    /// `cache.max.bytes.buffering`, set by the instance that runs it.
    pub(crate) cache_max_bytes: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Topology {
    /// How many subtopologies (Kafka's topic groups) it has.
    pub fn subtopology_count(&self) -> usize {
        self.subtopologies.len()
    }

    pub(crate) fn subtopology(&self, id: u32) -> Result<&Subtopology> {
        self.subtopologies
            .get(id as usize)
            .ok_or_else(|| StreamsError::InvalidTopology(format!("no subtopology {id}")))
    }

    pub(crate) fn store_spec(&self, name: &str) -> Result<&StoreSpec> {
        self.stores
            .get(name)
            .ok_or_else(|| StreamsError::InvalidTopology(format!("unknown store {name}")))
    }

    /// The stores of the topology.
    pub fn stores(&self) -> impl Iterator<Item = &StoreSpec> {
        self.stores.values()
    }

    /// The stores of subtopology `id`.
    pub fn subtopology_stores(&self, id: u32) -> Vec<&StoreSpec> {
        self.subtopologies
            .get(id as usize)
            .map(|s| s.stores.iter().filter_map(|n| self.stores.get(n)).collect())
            .unwrap_or_default()
    }

    /// The resolved topics subtopology `id` reads.
    pub fn source_topics(&self, id: u32, application_id: &str) -> Vec<String> {
        self.subtopologies
            .get(id as usize)
            .map(|s| {
                s.sources
                    .iter()
                    .map(|t| t.resolve(application_id))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every resolved topic any subtopology reads.
    pub fn all_source_topics(&self, application_id: &str) -> Vec<String> {
        let mut topics: Vec<String> = self
            .subtopologies
            .iter()
            .flat_map(|s| s.sources.iter().map(|t| t.resolve(application_id)))
            .collect();
        topics.sort();
        topics.dedup();
        topics
    }

    /// The external topics the topology reads (they must exist).
    pub fn external_source_topics(&self) -> Vec<String> {
        let mut topics: Vec<String> = self
            .subtopologies
            .iter()
            .flat_map(|s| s.sources.iter())
            .filter_map(|t| match t {
                TopicRef::External(t) => Some(t.clone()),
                TopicRef::Internal(_) => None,
            })
            .collect();
        topics.sort();
        topics.dedup();
        topics
    }

    /// The subtopology that reads `topic` (resolved).
    pub fn subtopology_of(&self, topic: &str, application_id: &str) -> Option<u32> {
        self.subtopologies
            .iter()
            .find(|s| s.sources.iter().any(|t| t.is(topic, application_id)))
            .map(|s| s.id)
    }

    /// Whether a source reads a pattern rather than named topics.
    pub fn has_pattern_sources(&self) -> bool {
        self.nodes.iter().any(|n| {
            matches!(
                &n.kind,
                NodeKind::Source {
                    pattern: Some(_),
                    ..
                }
            )
        })
    }

    /// Resolves every pattern source against `existing` topics (those of
    /// `application_id`'s own internal topics and those another source
    /// reads left out), and recomputes the subtopologies.
    ///
    /// # Errors
    ///
    /// A pattern that matches no topic.
    pub(crate) fn resolve_patterns(
        &mut self,
        existing: &[String],
        application_id: &str,
    ) -> Result<()> {
        let internal = format!("{application_id}-");
        let named: BTreeSet<String> = self
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Source {
                    topics,
                    pattern: None,
                    ..
                } => Some(topics.iter().map(|t| t.resolve(application_id))),
                _ => None,
            })
            .flatten()
            .collect();
        for node in &mut self.nodes {
            if let NodeKind::Source {
                topics,
                pattern: Some(p),
                ..
            } = &mut node.kind
            {
                let mut matched: Vec<String> = existing
                    .iter()
                    .filter(|t| p.is_match(t) && !t.starts_with(&internal) && !named.contains(*t))
                    .cloned()
                    .collect();
                matched.sort();
                if matched.is_empty() {
                    return Err(StreamsError::InvalidTopology(format!(
                        "source {}: pattern {} matches no topic",
                        node.name,
                        p.as_str()
                    )));
                }
                tracing::info!(source = %node.name, topics = ?matched, "pattern source resolved");
                *topics = matched.into_iter().map(TopicRef::External).collect();
            }
        }
        self.subtopologies = subtopologies(&self.nodes);
        Ok(())
    }

    /// The global stores: each a copy of a whole topic on every instance.
    pub fn global_stores(&self) -> impl Iterator<Item = &GlobalStoreSpec> {
        self.globals.values()
    }

    /// The partition count of every subtopology, from the partition counts of
    /// the external topics it reads (`external`); repartition topics take
    /// their configured count or that of the subtopology writing them.
    ///
    /// # Errors
    ///
    /// A missing external topic, or topics read by one subtopology that have
    /// different partition counts (they must be co-partitioned).
    pub fn partition_counts(&self, external: &BTreeMap<String, i32>) -> Result<BTreeMap<u32, i32>> {
        let mut internal: BTreeMap<String, i32> = self
            .repartitions
            .iter()
            .filter_map(|(name, p)| p.map(|p| (format!("{name}-repartition"), p)))
            .collect();
        let mut counts: BTreeMap<u32, i32> = BTreeMap::new();
        // A fixpoint: each pass settles subtopologies whose inputs are known.
        for _ in 0..=self.subtopologies.len() {
            for sub in &self.subtopologies {
                if counts.contains_key(&sub.id) {
                    continue;
                }
                let mut known = Vec::new();
                let mut unknown = false;
                for t in &sub.sources {
                    let n = match t {
                        TopicRef::External(name) => match external.get(name) {
                            Some(n) => Some(*n),
                            None => {
                                return Err(StreamsError::Topic {
                                    topic: name.clone(),
                                    reason: "source topic does not exist".into(),
                                });
                            }
                        },
                        TopicRef::Internal(suffix) => internal.get(suffix).copied(),
                    };
                    match n {
                        Some(n) => known.push((t, n)),
                        None => unknown = true,
                    }
                }
                if unknown {
                    continue;
                }
                let Some(&(first_topic, first)) = known.first() else {
                    continue;
                };
                if let Some((t, n)) = known.iter().find(|(_, n)| *n != first) {
                    return Err(StreamsError::Topic {
                        topic: t.to_string(),
                        reason: format!(
                            "has {n} partitions but {first_topic} has {first}: topics read by one \
                             subtopology must be co-partitioned"
                        ),
                    });
                }
                counts.insert(sub.id, first);
                for sink in &sub.sinks {
                    if let TopicRef::Internal(suffix) = sink {
                        internal.entry(suffix.clone()).or_insert(first);
                    }
                }
            }
        }
        if let Some(sub) = self
            .subtopologies
            .iter()
            .find(|s| !counts.contains_key(&s.id))
        {
            return Err(StreamsError::InvalidTopology(format!(
                "the partition count of subtopology {} cannot be derived (a cycle of repartition \
                 topics?)",
                sub.id
            )));
        }
        Ok(counts)
    }

    /// The internal topics (repartition topics and changelogs) the
    /// application needs, given the subtopologies' partition counts.
    pub fn internal_topics(
        &self,
        application_id: &str,
        counts: &BTreeMap<u32, i32>,
    ) -> Vec<InternalTopic> {
        let mut out = Vec::new();
        for sub in &self.subtopologies {
            let Some(&n) = counts.get(&sub.id) else {
                continue;
            };
            for src in &sub.sources {
                if let TopicRef::Internal(_) = src {
                    out.push(InternalTopic {
                        name: src.resolve(application_id),
                        partitions: n,
                        configs: vec![("cleanup.policy".into(), "delete".into())],
                        changelog: false,
                    });
                }
            }
            for store in sub.stores.iter().filter_map(|s| self.stores.get(s)) {
                // A source table's changelog is its input topic: nothing to create.
                if !store.logged || store.source_topic.is_some() {
                    continue;
                }
                let configs = match &store.kind {
                    StoreType::KeyValue => vec![("cleanup.policy".into(), "compact".into())],
                    StoreType::Window { retention, .. } => {
                        // Kafka Streams keeps a window changelog a day longer
                        // than the store (windowstore.changelog.additional.retention.ms).
                        let ms = retention.as_millis().saturating_add(86_400_000);
                        vec![
                            ("cleanup.policy".into(), "compact,delete".into()),
                            ("retention.ms".into(), ms.to_string()),
                        ]
                    }
                };
                out.push(InternalTopic {
                    name: store.changelog_topic(application_id),
                    partitions: n,
                    configs,
                    changelog: true,
                });
            }
        }
        out
    }

    /// A description in Kafka Streams' format: each subtopology with its
    /// sources, processors (and their stores) and sinks, and the edges.
    pub fn describe(&self) -> String {
        let mut s = String::from("Topologies:\n");
        for sub in &self.subtopologies {
            let _ = writeln!(s, "   Sub-topology: {}", sub.id);
            for &i in &sub.nodes {
                let node = &self.nodes[i];
                match &node.kind {
                    NodeKind::Source {
                        topics,
                        pattern: Some(p),
                        serdes,
                        ..
                    } if topics.is_empty() => {
                        let p = p.as_str();
                        let p = p
                            .strip_prefix("^(?:")
                            .and_then(|p| p.strip_suffix(")$"))
                            .unwrap_or(p);
                        let _ = writeln!(
                            s,
                            "    Source: {} (pattern: {p}, key: {}, value: {})",
                            node.name, serdes.0, serdes.1
                        );
                    }
                    NodeKind::Source { topics, serdes, .. } => {
                        let topics: Vec<String> = topics.iter().map(ToString::to_string).collect();
                        let _ = writeln!(
                            s,
                            "    Source: {} (topics: [{}], key: {}, value: {})",
                            node.name,
                            topics.join(", "),
                            serdes.0,
                            serdes.1
                        );
                    }
                    NodeKind::Processor => {
                        let stores: Vec<String> = node
                            .stores
                            .iter()
                            .map(|name| match self.stores.get(name) {
                                Some(spec) if spec.in_memory => format!("{name} (in-memory)"),
                                _ => name.clone(),
                            })
                            .collect();
                        let _ = writeln!(
                            s,
                            "    Processor: {} (stores: [{}])",
                            node.name,
                            stores.join(", ")
                        );
                    }
                    NodeKind::Sink { topic } => {
                        let _ = writeln!(s, "    Sink: {} (topic: {topic})", node.name);
                    }
                    NodeKind::DynamicSink => {
                        let _ = writeln!(s, "    Sink: {} (topic chosen per record)", node.name);
                    }
                }
                let names = |v: &[usize]| {
                    if v.is_empty() {
                        "none".to_owned()
                    } else {
                        v.iter()
                            .map(|&c| self.nodes[c].name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                };
                if !matches!(node.kind, NodeKind::Sink { .. } | NodeKind::DynamicSink) {
                    let _ = writeln!(s, "      --> {}", names(&node.children));
                }
                if !matches!(node.kind, NodeKind::Source { .. }) {
                    let _ = writeln!(s, "      <-- {}", names(&node.parents));
                }
            }
            s.push('\n');
        }
        for g in self.globals.values() {
            let _ = writeln!(
                s,
                "   Global store: {} (topic: {}, key: {}, value: {})",
                g.name, g.topic, g.key_serde, g.value_serde
            );
        }
        s
    }
}

#[cfg(test)]
mod tests;
