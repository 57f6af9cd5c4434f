//! State stores as processors see them: typed handles over a task's
//! weir-store stores that also write every change to the store's changelog.
//!
//! A write is *staged* in the task's [`weir_store::TaskStore`] (visible to the
//! task at once, on disk only after the commit that also makes its changelog
//! record durable) and queued as a changelog record for the task's partition
//! of `<application.id>-<store>-changelog`.

use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::error::{ProcessError, SerdeError};
use crate::record::OutputRecord;
use crate::serde::Serde;

/// The changelog records a task's stores have queued since they were last
/// taken.
pub(crate) type ChangelogQueue = Arc<Mutex<ChangelogBuffer>>;

/// A task's pending changelog records.
///
/// A store with caching on ([`crate::TopologyBuilder::with_caching`],
/// Kafka Streams' `withCachingEnabled`) and `cache.max.bytes.buffering` > 0
/// logs one record per key between two commits: its latest value and
/// timestamp, sent at the commit (or sooner, once the task's pending
/// records pass `cache.max.bytes.buffering`). A key written a thousand times
/// between two commits costs one changelog record, not a thousand. The
/// changelog is compacted and a restore applies a key's last value either
/// way, so the restored store is the same; and nothing is exposed by the
/// wait, since the store applies its staged writes only at the commit,
/// after their changelog records are written. Every other store logs each
/// write, in order, sent with the records it was written for.
#[derive(Debug, Default)]
pub(crate) struct ChangelogBuffer {
    /// Each logged store's changelog topic, partition, and whether its
    /// writes coalesce, by slot.
    targets: Vec<(String, i32, bool)>,
    /// Coalescing stores: the latest value and timestamp per (slot, key),
    /// in first-write order.
    latest: indexmap::IndexMap<(usize, Vec<u8>), Pending, foldhash::fast::RandomState>,
    /// Key and value bytes in `latest`.
    latest_bytes: usize,
    /// Other stores: every write, in order.
    all: Vec<(usize, Vec<u8>, Pending)>,
    /// `cache.max.bytes.buffering` > 0: caching stores coalesce.
    enabled: bool,
}

/// A pending change's value (`None`: a tombstone) and timestamp.
type Pending = (Option<Vec<u8>>, i64);

impl ChangelogBuffer {
    /// `enabled`: `cache.max.bytes.buffering` > 0.
    pub(crate) fn new(enabled: bool) -> Self {
        ChangelogBuffer {
            enabled,
            ..Self::default()
        }
    }

    /// Registers a store's changelog partition; returns its slot.
    pub(crate) fn target(&mut self, topic: String, partition: i32, caching: bool) -> usize {
        self.targets
            .push((topic, partition, caching && self.enabled));
        self.targets.len() - 1
    }

    fn push(&mut self, slot: usize, key: Vec<u8>, value: Option<Vec<u8>>, timestamp: i64) {
        let coalesce = self.targets.get(slot).is_some_and(|t| t.2);
        if !coalesce {
            self.all.push((slot, key, (value, timestamp)));
            return;
        }
        let len = |v: &Option<Vec<u8>>| v.as_ref().map_or(0, Vec::len);
        match self.latest.entry((slot, key)) {
            indexmap::map::Entry::Occupied(mut entry) => {
                self.latest_bytes = self.latest_bytes - len(&entry.get().0) + len(&value);
                *entry.get_mut() = (value, timestamp);
            }
            indexmap::map::Entry::Vacant(entry) => {
                self.latest_bytes += entry.key().1.len() + len(&value);
                entry.insert((value, timestamp));
            }
        }
    }

    /// Whether nothing is pending.
    pub(crate) fn is_empty(&self) -> bool {
        self.latest.is_empty() && self.all.is_empty()
    }

    /// Takes every pending record.
    pub(crate) fn take(&mut self) -> Vec<OutputRecord> {
        let mut out = self.take_all();
        out.extend(self.take_latest());
        out
    }

    /// Takes the records due before the commit: every write of a store
    /// without caching, and the coalesced ones once they hold more than
    /// `limit` bytes.
    pub(crate) fn take_due(&mut self, limit: usize) -> Vec<OutputRecord> {
        let mut out = self.take_all();
        if self.latest_bytes > limit {
            out.extend(self.take_latest());
        }
        out
    }

    fn record(&self, slot: usize, key: Vec<u8>, (value, timestamp): Pending) -> OutputRecord {
        let (topic, partition) = self
            .targets
            .get(slot)
            .map(|(t, p, _)| (t.clone(), *p))
            .unwrap_or_default();
        OutputRecord {
            topic,
            partition: Some(partition),
            key: Some(key),
            value,
            timestamp,
            headers: Vec::new(),
        }
    }

    fn take_all(&mut self) -> Vec<OutputRecord> {
        let all = std::mem::take(&mut self.all);
        all.into_iter()
            .map(|(slot, key, pending)| self.record(slot, key, pending))
            .collect()
    }

    fn take_latest(&mut self) -> Vec<OutputRecord> {
        self.latest_bytes = 0;
        let latest = std::mem::take(&mut self.latest);
        latest
            .into_iter()
            .map(|((slot, key), pending)| self.record(slot, key, pending))
            .collect()
    }
}

/// What kind of store a name refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreType {
    /// A key-value store.
    KeyValue,
    /// A window store: one value per (key, window start), kept for `retention`.
    Window {
        /// How long behind stream time windows stay readable.
        retention: Duration,
        /// The width of the segments expired windows are dropped in.
        segment: Duration,
    },
}

/// A store declared in a topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSpec {
    /// The store's name, unique in the topology.
    pub name: String,
    /// Its kind.
    pub kind: StoreType,
    /// Whether its changes go to `<application.id>-<name>-changelog`
    /// (default). A store without a changelog cannot be restored on another
    /// instance.
    pub logged: bool,
    /// Whether its contents live in memory only (see
    /// [`crate::TopologyBuilder::in_memory`]); by default they are in the
    /// task's fjall database on disk.
    pub in_memory: bool,
    /// Whether its changelog records coalesce per key until the commit
    /// (see [`crate::TopologyBuilder::with_caching`]).
    pub caching: bool,
    /// Key serde name (for describe()).
    pub key_serde: &'static str,
    /// Value serde name (for describe()).
    pub value_serde: &'static str,
    /// The input topic this store is a copy of, which then serves as its
    /// changelog (Kafka Streams' source-table optimisation): nothing is
    /// written for the store, it restores from the topic, and its offsets
    /// are the task's input offsets.
    pub source_topic: Option<String>,
}

impl StoreSpec {
    /// The changelog topic of this store in application `application_id`:
    /// `<application.id>-<name>-changelog`, or its source topic.
    pub fn changelog_topic(&self, application_id: &str) -> String {
        match &self.source_topic {
            Some(topic) => topic.clone(),
            None => format!("{application_id}-{}-changelog", self.name),
        }
    }
}

/// Anything that names a store, for [`crate::TopologyBuilder::processor`]'s
/// list of the stores a processor uses.
pub trait StoreName {
    /// The store's name.
    fn store_name(&self) -> &str;
}

impl StoreName for str {
    fn store_name(&self) -> &str {
        self
    }
}

impl StoreName for &str {
    fn store_name(&self) -> &str {
        self
    }
}

impl StoreName for String {
    fn store_name(&self) -> &str {
        self
    }
}

/// A typed reference to a key-value store of a topology; processors use it to
/// reach the store through their context.
pub struct KvStoreRef<K, V> {
    pub(crate) name: Arc<str>,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> KvStoreRef<K, V> {
    pub(crate) fn new(name: &str) -> Self {
        KvStoreRef {
            name: Arc::from(name),
            _types: PhantomData,
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<K, V> Clone for KvStoreRef<K, V> {
    fn clone(&self) -> Self {
        KvStoreRef {
            name: Arc::clone(&self.name),
            _types: PhantomData,
        }
    }
}

impl<K, V> StoreName for KvStoreRef<K, V> {
    fn store_name(&self) -> &str {
        &self.name
    }
}

impl<K, V> std::fmt::Debug for KvStoreRef<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KvStoreRef({})", self.name)
    }
}

/// A typed reference to a window store of a topology.
pub struct WindowStoreRef<K, V> {
    pub(crate) name: Arc<str>,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> WindowStoreRef<K, V> {
    pub(crate) fn new(name: &str) -> Self {
        WindowStoreRef {
            name: Arc::from(name),
            _types: PhantomData,
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<K, V> Clone for WindowStoreRef<K, V> {
    fn clone(&self) -> Self {
        WindowStoreRef {
            name: Arc::clone(&self.name),
            _types: PhantomData,
        }
    }
}

impl<K, V> StoreName for WindowStoreRef<K, V> {
    fn store_name(&self) -> &str {
        &self.name
    }
}

impl<K, V> std::fmt::Debug for WindowStoreRef<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WindowStoreRef({})", self.name)
    }
}

/// Where a store's changes are logged: its slot (changelog topic and the
/// task's partition) in the task's changelog buffer.
#[derive(Debug, Clone)]
pub(crate) struct ChangelogTarget {
    pub(crate) slot: usize,
    pub(crate) queue: ChangelogQueue,
}

impl ChangelogTarget {
    fn log(&self, key: Vec<u8>, value: Option<Vec<u8>>, timestamp: i64) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.slot, key, value, timestamp);
    }
}

fn key_bytes<K: Serde>(store: &str, key: &K) -> Result<Vec<u8>, ProcessError> {
    key.serialize().ok_or_else(|| {
        ProcessError::from_error(
            format!("store {store}"),
            SerdeError::new(K::NAME, "a store key cannot be null"),
        )
    })
}

fn decode<V: Serde>(bytes: &[u8]) -> Result<V, ProcessError> {
    Ok(V::deserialize(Some(bytes))?)
}

/// A task's key-value store, typed. Cheap to clone.
///
/// ```
/// # use weir_streams::testing::TopologyTestDriver;
/// # use weir_streams::{TopologyBuilder, Record, ProcessError};
/// # use weir_streams::processor::{Processor, ProcessorContext};
/// # use weir_streams::state::KvStoreRef;
/// struct Count(KvStoreRef<String, u64>);
/// impl Processor<String, String> for Count {
///     type KOut = String;
///     type VOut = u64;
///     fn process(&mut self, ctx: &mut ProcessorContext<'_, String, u64>, r: Record<String, String>)
///         -> Result<(), ProcessError> {
///         let store = ctx.kv_store(&self.0)?;
///         let n = store.get(&r.value)?.unwrap_or(0) + 1;
///         store.put(&r.value, &n, r.timestamp)?;   // staged, and queued for the changelog
///         ctx.forward(Record::new(r.value, n, r.timestamp));
///         Ok(())
///     }
/// }
/// # let mut b = TopologyBuilder::new();
/// # let counts = b.kv_store::<String, u64>("counts");
/// # let src = b.source::<String, String>("in", &["words"]);
/// # let c = counts.clone();
/// # let p = b.processor("count", &[&src], move || Count(c.clone()), &[&counts]);
/// # b.sink("out", &[&p], "counts-out");
/// # let mut driver = TopologyTestDriver::new(b.build().unwrap(), "app").unwrap();
/// # driver.pipe("words", &String::new(), &"kafka".to_string(), 1).unwrap();
/// # assert_eq!(driver.read_output::<String, u64>("counts-out").unwrap()[0].value, 1);
/// ```
pub struct KvStore<K, V> {
    pub(crate) inner: weir_store::KeyValueStore,
    pub(crate) changelog: Option<ChangelogTarget>,
    pub(crate) _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for KvStore<K, V> {
    fn clone(&self) -> Self {
        KvStore {
            inner: self.inner.clone(),
            changelog: self.changelog.clone(),
            _types: PhantomData,
        }
    }
}

impl<K: Serde, V: Serde> KvStore<K, V> {
    /// The value of `key`, staged writes included.
    ///
    /// # Errors
    ///
    /// A store error, or bytes that do not decode as `V`.
    pub fn get(&self, key: &K) -> Result<Option<V>, ProcessError> {
        let k = key_bytes(self.inner.name(), key)?;
        self.inner
            .get(&k)?
            .map(|bytes| decode::<V>(&bytes))
            .transpose()
    }

    /// Stages `key = value` and queues its changelog record (with
    /// `timestamp`, usually the input record's). A value that serializes to
    /// null (`None`, `()`) deletes the key, as in Kafka Streams.
    ///
    /// # Errors
    ///
    /// A store error, or a key that serializes to null.
    pub fn put(&self, key: &K, value: &V, timestamp: i64) -> Result<(), ProcessError> {
        let k = key_bytes(self.inner.name(), key)?;
        match value.serialize() {
            Some(v) => {
                self.inner.put(&k, &v)?;
                if let Some(log) = &self.changelog {
                    log.log(k, Some(v), timestamp);
                }
            }
            None => {
                self.inner.delete(&k)?;
                if let Some(log) = &self.changelog {
                    log.log(k, None, timestamp);
                }
            }
        }
        Ok(())
    }

    /// Stages the deletion of `key` and queues a tombstone for the changelog.
    ///
    /// # Errors
    ///
    /// A store error.
    pub fn delete(&self, key: &K, timestamp: i64) -> Result<(), ProcessError> {
        let k = key_bytes(self.inner.name(), key)?;
        self.inner.delete(&k)?;
        if let Some(log) = &self.changelog {
            log.log(k, None, timestamp);
        }
        Ok(())
    }

    /// Every entry, in the order of the keys' bytes, staged writes included.
    ///
    /// # Errors
    ///
    /// A store error or undecodable bytes.
    pub fn all(&self) -> Result<Vec<(K, V)>, ProcessError> {
        self.range_bytes(Bound::Unbounded, Bound::Unbounded)
    }

    fn range_bytes(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
    ) -> Result<Vec<(K, V)>, ProcessError> {
        let mut out = Vec::new();
        for entry in self.inner.range(from, to)? {
            let (k, v) = entry?;
            out.push((K::deserialize(Some(&k))?, decode::<V>(&v)?));
        }
        Ok(out)
    }

    /// The entries whose key bytes lie in `[from, to)`.
    ///
    /// # Errors
    ///
    /// A store error or undecodable bytes.
    pub fn range(&self, from: &K, to: &K) -> Result<Vec<(K, V)>, ProcessError> {
        let f = key_bytes(self.inner.name(), from)?;
        let t = key_bytes(self.inner.name(), to)?;
        self.range_bytes(Bound::Included(&f), Bound::Excluded(&t))
    }
}

/// A task's window store, typed: one value per key and window start.
pub struct WindowStore<K, V> {
    pub(crate) inner: weir_store::WindowStore,
    pub(crate) changelog: Option<ChangelogTarget>,
    pub(crate) _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for WindowStore<K, V> {
    fn clone(&self) -> Self {
        WindowStore {
            inner: self.inner.clone(),
            changelog: self.changelog.clone(),
            _types: PhantomData,
        }
    }
}

impl<K: Serde, V: Serde> WindowStore<K, V> {
    /// Stages `value` for `key` in the window starting at `window_start`, and
    /// queues its changelog record. Returns `false` (and writes nothing) when
    /// the window is already past retention. A value that serializes to null
    /// (`None`, `()`) deletes the window, as in Kafka Streams: store a value
    /// such as the timestamp to mark presence.
    ///
    /// # Errors
    ///
    /// A store error, or a key that serializes to null.
    pub fn put(&self, key: &K, value: &V, window_start: i64) -> Result<bool, ProcessError> {
        let k = key_bytes(self.inner.name(), key)?;
        let v = value.serialize();
        let written = match &v {
            Some(bytes) => self.inner.put(&k, bytes, window_start)?,
            None => {
                self.inner.delete(&k, window_start)?;
                true
            }
        };
        if written && let Some(log) = &self.changelog {
            log.log(
                weir_store::window_changelog_key(&k, window_start),
                v,
                window_start,
            );
        }
        Ok(written)
    }

    /// The windows of `key` starting in `[from, to]`, oldest first, as
    /// (window start, value).
    ///
    /// # Errors
    ///
    /// A store error or undecodable bytes.
    pub fn fetch(&self, key: &K, from: i64, to: i64) -> Result<Vec<(i64, V)>, ProcessError> {
        let k = key_bytes(self.inner.name(), key)?;
        self.inner
            .fetch(&k, from, to)?
            .into_iter()
            .map(|e| Ok((e.window_start, decode::<V>(&e.value)?)))
            .collect()
    }

    /// Every window starting in `[from, to]`, as (window start, key, value).
    ///
    /// # Errors
    ///
    /// A store error or undecodable bytes.
    pub fn fetch_all(&self, from: i64, to: i64) -> Result<Vec<(i64, K, V)>, ProcessError> {
        let mut out = Vec::new();
        for entry in self.inner.fetch_all(from, to)? {
            let e = entry?;
            out.push((
                e.window_start,
                K::deserialize(Some(&e.key))?,
                decode::<V>(&e.value)?,
            ));
        }
        Ok(out)
    }
}

/// A global store: a key-value copy of every partition of a topic, held by
/// every instance (Kafka Streams' global store, behind `GlobalKTable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalStoreSpec {
    /// The store's name, unique in the topology.
    pub name: String,
    /// The topic it copies (its own changelog: no other topic is written).
    pub topic: String,
    /// Key serde name (for describe()).
    pub key_serde: &'static str,
    /// Value serde name (for describe()).
    pub value_serde: &'static str,
}

impl GlobalStoreSpec {
    /// The name, in the instance's global `TaskStore`, of the store holding
    /// partition `partition` (one per partition, each restored and committed
    /// with its own offset).
    pub(crate) fn partition_store(&self, partition: i32) -> String {
        format!("{}-{partition}", self.name)
    }
}

/// The open global stores of an instance (or a test driver), by name: one
/// weir-store key-value store per partition of the topic.
pub(crate) type GlobalHandles =
    Arc<Mutex<std::collections::BTreeMap<String, Vec<weir_store::KeyValueStore>>>>;

/// A typed reference to a global store of a topology.
pub struct GlobalKvStoreRef<K, V> {
    pub(crate) name: Arc<str>,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> GlobalKvStoreRef<K, V> {
    pub(crate) fn new(name: &str) -> Self {
        GlobalKvStoreRef {
            name: Arc::from(name),
            _types: PhantomData,
        }
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<K, V> Clone for GlobalKvStoreRef<K, V> {
    fn clone(&self) -> Self {
        GlobalKvStoreRef {
            name: Arc::clone(&self.name),
            _types: PhantomData,
        }
    }
}

impl<K, V> std::fmt::Debug for GlobalKvStoreRef<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GlobalKvStoreRef({})", self.name)
    }
}

/// A global store, read-only, as a processor sees it: the committed copy of
/// its topic (every partition), kept up to date beside the processing.
pub struct GlobalKvStore<K, V> {
    pub(crate) name: Arc<str>,
    pub(crate) partitions: Vec<weir_store::KeyValueStore>,
    pub(crate) _types: PhantomData<fn() -> (K, V)>,
}

impl<K: Serde, V: Serde> GlobalKvStore<K, V> {
    /// The latest value of `key` in the topic, as far as the copy has read.
    ///
    /// # Errors
    ///
    /// A store error, or bytes that do not decode as `V`.
    pub fn get(&self, key: &K) -> Result<Option<V>, ProcessError> {
        let k = key_bytes(&self.name, key)?;
        for store in &self.partitions {
            if let Some(bytes) = store.get_committed(&k)? {
                return Ok(Some(decode::<V>(&bytes)?));
            }
        }
        Ok(None)
    }
}
