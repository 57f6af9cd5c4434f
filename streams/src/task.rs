//! A task: one subtopology's processors for one partition, with its stores.
//!
//! A [`StreamTask`] is plain synchronous code: it takes raw input records,
//! runs them through its processors depth-first, and collects what they
//! write (sink and repartition records, changelog records). It knows nothing
//! of Kafka connections or commits; the runtime (and the test driver) decide
//! when its staged writes are committed or aborted.

use std::any::Any;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

pub use weir_group::task_assignor::TaskId;

use crate::error::{ProcessError, StreamsError};
use crate::processor::{PunctuationType, ScheduleId};
use crate::record::{OutputRecord, RawRecord, RecordMetadata};
use crate::serde::Serde;
use crate::state::{
    ChangelogBuffer, ChangelogQueue, ChangelogTarget, KvStore, KvStoreRef, StoreSpec, StoreType,
    WindowStore, WindowStoreRef,
};
use crate::topology::{NodeKind, Topology};

/// A record between two nodes, its key and value types erased.
pub(crate) type Erased = Box<dyn Any + Send>;

/// One instantiated node of a task.
pub(crate) trait ErasedNode: Send {
    fn init(&mut self, env: NodeEnv<'_>) -> Result<(), ProcessError>;
    fn process(
        &mut self,
        env: NodeEnv<'_>,
        input: Erased,
        out: &mut Vec<Erased>,
    ) -> Result<(), ProcessError>;
    fn punctuate(
        &mut self,
        env: NodeEnv<'_>,
        schedule: ScheduleId,
        timestamp: i64,
        out: &mut Vec<Erased>,
    ) -> Result<(), ProcessError>;
    /// Before a commit: what the node held back (processors only).
    fn flush(&mut self, _env: NodeEnv<'_>, _out: &mut Vec<Erased>) -> Result<(), ProcessError> {
        Ok(())
    }
    /// A copy of an output record, for fan-out to several children.
    fn clone_output(&self, record: &Erased) -> Option<Erased>;
    fn close(&mut self);
}

/// Decodes a topic's bytes into the source node's typed record.
pub(crate) type SourceDecoder =
    Arc<dyn Fn(&RawRecord) -> Result<Erased, crate::error::SerdeError> + Send + Sync>;

/// A store opened for one task.
pub(crate) enum OpenStore {
    Kv(weir_store::KeyValueStore),
    Window(weir_store::WindowStore),
}

pub(crate) struct StoreSlot {
    pub(crate) store: OpenStore,
    pub(crate) changelog: Option<ChangelogTarget>,
}

/// What a round of punctuation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Punctuated {
    /// At least one punctuator ran.
    pub ran: bool,
    /// At least one punctuator forwarded a record.
    pub forwarded: bool,
}

/// A punctuator of one node.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    id: ScheduleId,
    node: usize,
    interval_ms: i64,
    kind: PunctuationType,
    /// When it is next due, in the time of its kind; `None` until that time
    /// is first known.
    next_due: Option<i64>,
}

/// The part of a task every node's context reaches.
pub(crate) struct TaskCore {
    pub(crate) task_id: TaskId,
    pub(crate) stores: BTreeMap<String, StoreSlot>,
    pub(crate) outputs: Vec<OutputRecord>,
    pub(crate) changelog: ChangelogQueue,
    pub(crate) current: Option<RecordMetadata>,
    pub(crate) stream_time: i64,
    pub(crate) wall_clock_ms: i64,
    schedules: Vec<Schedule>,
    /// The instance's global stores (read-only here).
    pub(crate) globals: crate::state::GlobalHandles,
    /// `cache.max.bytes.buffering`.
    pub(crate) cache_max_bytes: u64,
}

/// What a node sees of its task while it runs.
pub(crate) struct NodeEnv<'a> {
    pub(crate) core: &'a mut TaskCore,
    pub(crate) node: usize,
    pub(crate) node_name: &'a str,
    pub(crate) allowed_stores: &'a [String],
}

impl NodeEnv<'_> {
    fn store(&self, name: &str) -> Result<&StoreSlot, ProcessError> {
        if !self.allowed_stores.iter().any(|s| s == name) {
            return Err(ProcessError::msg(format!(
                "processor {} did not declare store {name}",
                self.node_name
            )));
        }
        self.core.stores.get(name).ok_or_else(|| {
            ProcessError::msg(format!(
                "store {name} is not open in task {}",
                self.core.task_id
            ))
        })
    }

    pub(crate) fn global_kv_store<K: Serde, V: Serde>(
        &self,
        store: &crate::state::GlobalKvStoreRef<K, V>,
    ) -> Result<crate::state::GlobalKvStore<K, V>, ProcessError> {
        let handles = self
            .core
            .globals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let partitions = handles.get(store.name()).cloned().ok_or_else(|| {
            ProcessError::msg(format!(
                "global store {} is not open (the topology does not declare it, or it is run \
                 without its instance's global stores)",
                store.name()
            ))
        })?;
        Ok(crate::state::GlobalKvStore {
            name: Arc::clone(&store.name),
            partitions,
            _types: PhantomData,
        })
    }

    pub(crate) fn kv_store<K: Serde, V: Serde>(
        &self,
        store: &KvStoreRef<K, V>,
    ) -> Result<KvStore<K, V>, ProcessError> {
        let slot = self.store(store.name())?;
        match &slot.store {
            OpenStore::Kv(kv) => Ok(KvStore {
                inner: kv.clone(),
                changelog: slot.changelog.clone(),
                _types: PhantomData,
            }),
            OpenStore::Window(_) => Err(ProcessError::msg(format!(
                "store {} is a window store, not a key-value store",
                store.name()
            ))),
        }
    }

    pub(crate) fn window_store<K: Serde, V: Serde>(
        &self,
        store: &WindowStoreRef<K, V>,
    ) -> Result<WindowStore<K, V>, ProcessError> {
        let slot = self.store(store.name())?;
        match &slot.store {
            OpenStore::Window(w) => Ok(WindowStore {
                inner: w.clone(),
                changelog: slot.changelog.clone(),
                _types: PhantomData,
            }),
            OpenStore::Kv(_) => Err(ProcessError::msg(format!(
                "store {} is a key-value store, not a window store",
                store.name()
            ))),
        }
    }

    pub(crate) fn schedule(
        &mut self,
        interval: Duration,
        kind: PunctuationType,
    ) -> Result<ScheduleId, ProcessError> {
        let interval_ms = i64::try_from(interval.as_millis())
            .ok()
            .filter(|ms| *ms > 0)
            .ok_or_else(|| ProcessError::msg("a punctuation interval must be at least 1 ms"))?;
        let id = ScheduleId(u32::try_from(self.core.schedules.len()).unwrap_or(u32::MAX));
        self.core.schedules.push(Schedule {
            id,
            node: self.node,
            interval_ms,
            kind,
            next_due: None,
        });
        Ok(id)
    }
}

struct NodeSlot {
    name: String,
    stores: Vec<String>,
    children: Vec<usize>,
    node: Option<Box<dyn ErasedNode>>,
}

/// One subtopology's processors for one partition.
pub struct StreamTask {
    id: TaskId,
    core: TaskCore,
    /// Indexed like the topology's nodes; `None` for other subtopologies' nodes.
    nodes: Vec<Option<NodeSlot>>,
    /// Resolved input topic to (source node, decoder).
    sources: BTreeMap<String, (usize, SourceDecoder)>,
    /// Pattern sources not resolved to topics (the test driver's): a record
    /// of a matching topic is read by the pattern's node.
    patterns: Vec<(regex::Regex, usize, SourceDecoder)>,
    /// Input topic partitions to the next offset to commit.
    consumed: BTreeMap<String, i64>,
    /// The last processed record's metadata, kept for its topic name's
    /// allocation.
    spare_metadata: Option<RecordMetadata>,
}

impl std::fmt::Debug for StreamTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamTask")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl StreamTask {
    /// Instantiates task `id` of `topology` for application `application_id`,
    /// its stores in `store` (which must be this task's store when the
    /// subtopology has stores).
    ///
    /// # Errors
    ///
    /// An unknown subtopology, a store that cannot be opened, or a processor
    /// whose `init` fails.
    pub(crate) fn new(
        topology: &Topology,
        id: TaskId,
        application_id: &str,
        store: Option<&weir_store::TaskStore>,
    ) -> Result<StreamTask, StreamsError> {
        let sub = topology.subtopology(id.subtopology)?;
        let cache_max_bytes = topology
            .cache_max_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        let changelog: ChangelogQueue = Arc::new(std::sync::Mutex::new(ChangelogBuffer::new(
            cache_max_bytes > 0,
        )));
        let partition = i32::try_from(id.partition).map_err(|_| {
            StreamsError::InvalidTopology(format!("task {id}: partition out of range"))
        })?;
        let mut stores = BTreeMap::new();
        for name in &sub.stores {
            let spec = topology.store_spec(name)?;
            let Some(task_store) = store else {
                return Err(StreamsError::InvalidTopology(format!(
                    "task {id} has store {name} but no task store was opened"
                )));
            };
            stores.insert(
                name.clone(),
                open_store(task_store, spec, application_id, partition, &changelog)?,
            );
        }
        let mut nodes: Vec<Option<NodeSlot>> = (0..topology.nodes.len()).map(|_| None).collect();
        let mut sources = BTreeMap::new();
        let mut patterns = Vec::new();
        for &index in &sub.nodes {
            let def = &topology.nodes[index];
            if let NodeKind::Source {
                topics,
                decoder,
                pattern,
                ..
            } = &def.kind
            {
                for topic in topics {
                    sources.insert(topic.resolve(application_id), (index, Arc::clone(decoder)));
                }
                if let (Some(p), true) = (pattern, topics.is_empty()) {
                    patterns.push((p.clone(), index, Arc::clone(decoder)));
                }
            }
            nodes[index] = Some(NodeSlot {
                name: def.name.clone(),
                stores: def.stores.clone(),
                children: def.children.clone(),
                node: Some((def.factory)(application_id)),
            });
        }
        let mut task = StreamTask {
            id,
            core: TaskCore {
                task_id: id,
                stores,
                outputs: Vec::new(),
                changelog,
                current: None,
                stream_time: i64::MIN,
                wall_clock_ms: 0,
                schedules: Vec::new(),
                globals: Arc::clone(&topology.global_handles),
                cache_max_bytes,
            },
            nodes,
            sources,
            patterns,
            consumed: BTreeMap::new(),
            spare_metadata: None,
        };
        for &index in &sub.nodes {
            task.with_node(index, |node, env| node.init(env))?;
        }
        Ok(task)
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// Whether this task reads `topic` (a pattern source's match included).
    pub(crate) fn reads(&self, topic: &str) -> bool {
        self.sources.contains_key(topic) || self.patterns.iter().any(|(p, ..)| p.is_match(topic))
    }

    /// The resolved topics this task reads.
    pub fn input_topics(&self) -> impl Iterator<Item = &str> {
        self.sources.keys().map(String::as_str)
    }

    /// The task's stream time (`i64::MIN` before its first record).
    pub fn stream_time(&self) -> i64 {
        self.core.stream_time
    }

    fn with_node<T>(
        &mut self,
        index: usize,
        f: impl FnOnce(&mut dyn ErasedNode, NodeEnv<'_>) -> Result<T, ProcessError>,
    ) -> Result<T, StreamsError> {
        // Names for errors only: formatted when one happens, not per record.
        let task = self.id;
        let Some(slot) = self.nodes.get_mut(index).and_then(Option::as_mut) else {
            return Err(StreamsError::InvalidTopology(format!(
                "task {task}: node {index} is not in this task"
            )));
        };
        let Some(mut node) = slot.node.take() else {
            return Err(StreamsError::InvalidTopology(format!(
                "task {task}: node {} is re-entered (a cycle)",
                slot.name
            )));
        };
        let env = NodeEnv {
            core: &mut self.core,
            node: index,
            node_name: &slot.name,
            allowed_stores: &slot.stores,
        };
        let result = f(node.as_mut(), env);
        slot.node = Some(node);
        result.map_err(|source| StreamsError::Process {
            task: task.to_string(),
            node: slot.name.clone(),
            source,
        })
    }

    /// Runs `record` through node `index` and then, depth-first, its children.
    fn run(&mut self, index: usize, record: Erased) -> Result<(), StreamsError> {
        let mut out = Vec::new();
        self.with_node(index, |node, env| node.process(env, record, &mut out))?;
        self.forward(index, out)
    }

    fn forward(&mut self, index: usize, out: Vec<Erased>) -> Result<(), StreamsError> {
        let children = self
            .nodes
            .get(index)
            .and_then(Option::as_ref)
            .map(|s| s.children.clone())
            .unwrap_or_default();
        for record in out {
            let Some((last, rest)) = children.split_last() else {
                break;
            };
            for &child in rest {
                let copy = self
                    .nodes
                    .get(index)
                    .and_then(Option::as_ref)
                    .and_then(|s| s.node.as_ref())
                    .and_then(|n| n.clone_output(&record))
                    .ok_or_else(|| {
                        StreamsError::InvalidTopology(format!(
                            "task {}: node {index}'s records cannot be copied",
                            self.id
                        ))
                    })?;
                self.run(child, copy)?;
            }
            self.run(*last, record)?;
        }
        Ok(())
    }

    /// Processes one input record: decodes it at its source, advances stream
    /// time, and runs it through the processors. Stream-time punctuators that
    /// became due run after it.
    ///
    /// # Errors
    ///
    /// [`StreamsError::Serde`] when the bytes do not decode (the caller's
    /// deserialization handler decides), [`StreamsError::Process`] when a
    /// processor fails.
    pub fn process(&mut self, record: &RawRecord) -> Result<(), StreamsError> {
        if !self.sources.contains_key(&record.topic)
            && let Some((_, index, decoder)) = self
                .patterns
                .iter()
                .find(|(p, ..)| p.is_match(&record.topic))
        {
            self.sources
                .insert(record.topic.clone(), (*index, Arc::clone(decoder)));
        }
        let Some((source, decoder)) = self.sources.get(&record.topic).cloned() else {
            return Err(StreamsError::InvalidTopology(format!(
                "task {} does not read topic {}",
                self.id, record.topic
            )));
        };
        let next = record.offset.saturating_add(1);
        match self.consumed.get_mut(&record.topic) {
            Some(offset) => *offset = next,
            None => {
                self.consumed.insert(record.topic.clone(), next);
            }
        }
        let typed = decoder(record)?;
        // The last record's metadata is reused while the topic stays the
        // same (a copy of the topic name per record showed in the profile).
        self.core.current = Some(match self.spare_metadata.take() {
            Some(mut m) if m.topic == record.topic => {
                m.partition = record.partition;
                m.offset = record.offset;
                m
            }
            _ => RecordMetadata {
                topic: record.topic.clone(),
                partition: record.partition,
                offset: record.offset,
            },
        });
        self.core.stream_time = self.core.stream_time.max(record.timestamp);
        let result = self.run(source, typed);
        self.spare_metadata = self.core.current.take();
        result?;
        // The record makes the task need a commit whatever its punctuators do.
        self.punctuate(PunctuationType::StreamTime, self.core.stream_time)
            .map(|_| ())
    }

    /// Marks `offset` of `topic` as consumed without processing it (a record
    /// skipped by the deserialization handler), so the commit moves past it.
    pub fn skip(&mut self, topic: &str, offset: i64) {
        self.consumed
            .insert(topic.to_owned(), offset.saturating_add(1));
    }

    /// Runs the wall-clock punctuators due at `now_ms`, and says whether
    /// any ran and whether any forwarded a record.
    ///
    /// # Errors
    ///
    /// A processor's error.
    pub fn punctuate_wall_clock(&mut self, now_ms: i64) -> Result<Punctuated, StreamsError> {
        self.core.wall_clock_ms = now_ms;
        self.punctuate(PunctuationType::WallClockTime, now_ms)
    }

    fn punctuate(&mut self, kind: PunctuationType, now: i64) -> Result<Punctuated, StreamsError> {
        let mut done = Punctuated::default();
        if now == i64::MIN {
            return Ok(done);
        }
        for i in 0..self.core.schedules.len() {
            let schedule = self.core.schedules[i].clone();
            if schedule.kind != kind {
                continue;
            }
            let due = match schedule.next_due {
                // The first time this clock is known starts the schedule.
                None => {
                    self.core.schedules[i].next_due =
                        Some(now.saturating_add(schedule.interval_ms));
                    continue;
                }
                Some(due) => due,
            };
            if now < due {
                continue;
            }
            // Kafka fires once per due time reached, not once per interval elapsed.
            let missed = (now - due) / schedule.interval_ms;
            self.core.schedules[i].next_due =
                Some(due.saturating_add((missed + 1).saturating_mul(schedule.interval_ms)));
            let mut out = Vec::new();
            self.with_node(schedule.node, |node, env| {
                node.punctuate(env, schedule.id, now, &mut out)
            })?;
            done.ran = true;
            done.forwarded |= !out.is_empty();
            self.forward(schedule.node, out)?;
        }
        Ok(done)
    }

    /// Lets every processor forward what it held back, in topology order
    /// (a node's flushed records reach its children before they flush).
    /// Called before each commit.
    ///
    /// # Errors
    ///
    /// A processor's error.
    pub fn flush(&mut self) -> Result<(), StreamsError> {
        let indices: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes.get(i).is_some_and(Option::is_some))
            .collect();
        for index in indices {
            let mut out = Vec::new();
            self.with_node(index, |node, env| node.flush(env, &mut out))?;
            self.forward(index, out)?;
        }
        Ok(())
    }

    /// Takes the sink and repartition records written since the last call.
    pub fn take_outputs(&mut self) -> Vec<OutputRecord> {
        std::mem::take(&mut self.core.outputs)
    }

    /// Takes the changelog records written since the last call (with
    /// coalescing, each store key's latest write).
    pub fn take_changelog(&mut self) -> Vec<OutputRecord> {
        self.changelog_buffer().take()
    }

    /// Takes the changelog records due before the commit: every write of a
    /// store without caching; a caching store's (one per key) only once the
    /// task's pending ones hold more than `cache.max.bytes.buffering` bytes.
    pub fn take_changelog_due(&mut self) -> Vec<OutputRecord> {
        let limit = usize::try_from(self.core.cache_max_bytes).unwrap_or(usize::MAX);
        self.changelog_buffer().take_due(limit)
    }

    /// Whether changelog records are pending.
    pub fn has_changelog(&self) -> bool {
        !self.changelog_buffer().is_empty()
    }

    fn changelog_buffer(&self) -> std::sync::MutexGuard<'_, ChangelogBuffer> {
        self.core
            .changelog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next offset to commit per input topic (this task's partition),
    /// for records processed since the task started.
    pub fn consumed_offsets(&self) -> &BTreeMap<String, i64> {
        &self.consumed
    }

    /// Drops everything written since the last commit: outputs, changelog
    /// records. The caller aborts the task store's staged writes.
    pub fn discard_uncommitted(&mut self) {
        self.core.outputs.clear();
        self.take_changelog();
    }

    /// Closes every processor.
    pub fn close(&mut self) {
        for slot in self.nodes.iter_mut().flatten() {
            if let Some(node) = slot.node.as_mut() {
                node.close();
            }
        }
    }
}

fn open_store(
    task_store: &weir_store::TaskStore,
    spec: &StoreSpec,
    application_id: &str,
    partition: i32,
    queue: &ChangelogQueue,
) -> Result<StoreSlot, StreamsError> {
    let err = |source| StreamsError::store(spec.name.clone(), source);
    let changelog_partition = spec.logged.then(|| {
        weir_store::ChangelogPartition::new(spec.changelog_topic(application_id), partition)
    });
    let store = match (&spec.kind, spec.in_memory) {
        (StoreType::KeyValue, false) => {
            OpenStore::Kv(task_store.key_value_store(&spec.name).map_err(err)?)
        }
        (StoreType::KeyValue, true) => OpenStore::Kv(
            task_store
                .in_memory_key_value_store(&spec.name, changelog_partition.as_ref())
                .map_err(err)?,
        ),
        (StoreType::Window { retention, segment }, false) => OpenStore::Window(
            task_store
                .window_store(&spec.name, *retention, *segment)
                .map_err(err)?,
        ),
        (StoreType::Window { retention, segment }, true) => OpenStore::Window(
            task_store
                .in_memory_window_store(
                    &spec.name,
                    *retention,
                    *segment,
                    changelog_partition.as_ref(),
                )
                .map_err(err)?,
        ),
    };
    // A source table's store writes no changelog: its input topic is one.
    let changelog = (spec.logged && spec.source_topic.is_none()).then(|| ChangelogTarget {
        slot: queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .target(
                spec.changelog_topic(application_id),
                partition,
                spec.caching,
            ),
        queue: Arc::clone(queue),
    });
    Ok(StoreSlot { store, changelog })
}
