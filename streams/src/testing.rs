//! [`TopologyTestDriver`]: runs a topology in the test's own thread, with no
//! broker, so an application's processors can be unit-tested.
//!
//! Each subtopology runs as one task (partition 0) with real weir-store stores
//! in a temporary directory. Every piped record is processed to completion
//! (through repartition topics too) and then committed, as if the commit
//! interval were zero. A processor error aborts that record's writes: the
//! stores keep their last commit and no output of the record is visible.
//!
//! ```
//! use weir_streams::testing::TopologyTestDriver;
//! use weir_streams::processor::{Processor, ProcessorContext};
//! use weir_streams::{ProcessError, Record, TopologyBuilder};
//!
//! struct Double;
//! impl Processor<String, i64> for Double {
//!     type KOut = String;
//!     type VOut = i64;
//!     fn process(&mut self, ctx: &mut ProcessorContext<'_, String, i64>, r: Record<String, i64>)
//!         -> Result<(), ProcessError> {
//!         let v = r.value * 2;
//!         ctx.forward(r.with_value(v));
//!         Ok(())
//!     }
//! }
//! let mut b = TopologyBuilder::new();
//! let src = b.source::<String, i64>("src", &["in"]);
//! let d = b.processor("double", &[&src], || Double, &[]);
//! b.sink("sink", &[&d], "out");
//! let mut driver = TopologyTestDriver::new(b.build().unwrap(), "app").unwrap();
//! driver.pipe("in", &"k".to_string(), &21i64, 0).unwrap();
//! let out = driver.read_output::<String, i64>("out").unwrap();
//! assert_eq!(out[0].value, 42);
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use weir_store::{ChangelogPartition, StoreOptions, TaskStore};

use crate::error::{Result, StreamsError};
use crate::record::{OutputRecord, RawRecord, Record};
use crate::serde::Serde;
use crate::task::{StreamTask, TaskId};
use crate::topology::Topology;

struct DriverTask {
    task: StreamTask,
    store: Option<TaskStore>,
}

/// Runs a [`Topology`] without Kafka. See the module docs.
pub struct TopologyTestDriver {
    application_id: String,
    tasks: Vec<DriverTask>,
    /// Resolved topic to the task index that reads it.
    readers: BTreeMap<String, usize>,
    /// Next offset per topic, for inputs, repartition topics and changelogs alike.
    offsets: BTreeMap<String, i64>,
    /// Records written to topics no task reads.
    outputs: BTreeMap<String, VecDeque<OutputRecord>>,
    /// Every changelog record committed, per changelog topic.
    changelogs: BTreeMap<String, Vec<OutputRecord>>,
    wall_clock_ms: i64,
    /// The global stores' own task store, and which topic feeds which store.
    globals: Option<TaskStore>,
    global_topics: BTreeMap<String, String>,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for TopologyTestDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyTestDriver")
            .field("application_id", &self.application_id)
            .finish_non_exhaustive()
    }
}

fn io(context: &str) -> impl Fn(std::io::Error) -> StreamsError + '_ {
    move |e| StreamsError::InvalidConfig {
        property: "state.dir".into(),
        reason: format!("{context}: {e}"),
    }
}

impl TopologyTestDriver {
    /// Starts every subtopology's task 0 with fresh stores.
    ///
    /// # Errors
    ///
    /// A store that cannot be created, or a processor whose `init` fails.
    pub fn new(topology: Topology, application_id: &str) -> Result<Self> {
        Self::with_cache_max_bytes(
            topology,
            application_id,
            crate::topology::DEFAULT_CACHE_MAX_BYTES,
        )
    }

    /// [`new`](Self::new) with `cache.max.bytes.buffering` set: 0 turns
    /// the DSL's record caches off and logs every store write to the
    /// changelog on its own (by default a key's writes between two commits
    /// are one changelog record).
    ///
    /// ```
    /// # use weir_streams::testing::TopologyTestDriver;
    /// # use weir_streams::TopologyBuilder;
    /// # let mut b = TopologyBuilder::new();
    /// # let _ = b.source::<String, String>("in", &["words"]);
    /// let driver = TopologyTestDriver::with_cache_max_bytes(b.build()?, "app", 0)?;
    /// # Ok::<(), weir_streams::StreamsError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_cache_max_bytes(
        topology: Topology,
        application_id: &str,
        cache_max_bytes: u64,
    ) -> Result<Self> {
        topology
            .cache_max_bytes
            .store(cache_max_bytes, std::sync::atomic::Ordering::Relaxed);
        let dir = tempfile::tempdir().map_err(io("temporary state directory"))?;
        // Global stores first, as an instance bootstraps them before its
        // tasks start: one partition, 0, per global topic.
        let mut global_topics = BTreeMap::new();
        let globals = if topology.global_stores().next().is_none() {
            None
        } else {
            let path = dir.path().join(application_id).join("global");
            let store = TaskStore::open(&path, StoreOptions::default())
                .map_err(|source| StreamsError::store("global", source))?;
            let mut handles = topology
                .global_handles
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for spec in topology.global_stores() {
                let kv = store
                    .key_value_store(&spec.partition_store(0))
                    .map_err(|source| StreamsError::store(spec.name.clone(), source))?;
                handles.insert(spec.name.clone(), vec![kv]);
                global_topics.insert(spec.topic.clone(), spec.partition_store(0));
            }
            drop(handles);
            Some(store)
        };
        let mut tasks = Vec::new();
        let mut readers = BTreeMap::new();
        for sub in 0..topology.subtopology_count() {
            let sub = u32::try_from(sub).unwrap_or(u32::MAX);
            let id = TaskId::new(sub, 0);
            let store = if topology.subtopology_stores(sub).is_empty() {
                None
            } else {
                let path = dir.path().join(application_id).join(id.to_string());
                Some(
                    TaskStore::open(&path, StoreOptions::default())
                        .map_err(|source| StreamsError::store(id.to_string(), source))?,
                )
            };
            let task = StreamTask::new(&topology, id, application_id, store.as_ref())?;
            for topic in task.input_topics() {
                readers.insert(topic.to_owned(), tasks.len());
            }
            tasks.push(DriverTask { task, store });
        }
        Ok(TopologyTestDriver {
            application_id: application_id.to_owned(),
            tasks,
            readers,
            offsets: BTreeMap::new(),
            outputs: BTreeMap::new(),
            changelogs: BTreeMap::new(),
            wall_clock_ms: 0,
            globals,
            global_topics,
            _dir: dir,
        })
    }

    fn next_offset(&mut self, topic: &str) -> i64 {
        let next = self.offsets.entry(topic.to_owned()).or_insert(0);
        let offset = *next;
        *next += 1;
        offset
    }

    /// Pipes one record into `topic` (a topic the topology reads) and runs it
    /// through to completion, then commits.
    ///
    /// # Errors
    ///
    /// No subtopology reads `topic`, or processing fails: then nothing of this
    /// record is committed or output.
    pub fn pipe<K: Serde, V: Serde>(
        &mut self,
        topic: &str,
        key: &K,
        value: &V,
        timestamp: i64,
    ) -> Result<()> {
        let offset = self.next_offset(topic);
        if let Some(store_name) = self.global_topics.get(topic).cloned() {
            return self.apply_global(
                &store_name,
                topic,
                key.serialize(),
                value.serialize(),
                offset,
            );
        }
        let raw = RawRecord {
            topic: topic.to_owned(),
            partition: 0,
            offset,
            timestamp,
            key: key.serialize().map(Into::into),
            value: value.serialize().map(Into::into),
            headers: Vec::new(),
        };
        self.run(vec![raw])
    }

    fn run(&mut self, first: Vec<RawRecord>) -> Result<()> {
        let mut queue: VecDeque<RawRecord> = first.into();
        let mut outputs = Vec::new();
        let result = (|| {
            while let Some(raw) = queue.pop_front() {
                if !self.readers.contains_key(&raw.topic)
                    && let Some(t) = self.tasks.iter().position(|t| t.task.reads(&raw.topic))
                {
                    self.readers.insert(raw.topic.clone(), t);
                }
                let Some(&t) = self.readers.get(&raw.topic) else {
                    return Err(StreamsError::Topic {
                        topic: raw.topic.clone(),
                        reason: "no subtopology reads this topic".into(),
                    });
                };
                self.tasks[t].task.process(&raw)?;
                self.collect(t, &mut queue, &mut outputs);
                if queue.is_empty() {
                    // Before the commit: what processors held back (record
                    // caches), which may feed repartition topics again.
                    for t in 0..self.tasks.len() {
                        self.tasks[t].task.flush()?;
                        self.collect(t, &mut queue, &mut outputs);
                    }
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                for out in outputs {
                    self.outputs
                        .entry(out.topic.clone())
                        .or_default()
                        .push_back(out);
                }
                self.commit_all()
            }
            Err(e) => {
                for t in &mut self.tasks {
                    t.task.discard_uncommitted();
                    if let Some(store) = &t.store {
                        store.abort();
                    }
                }
                Err(e)
            }
        }
    }

    /// Moves task `t`'s outputs: to the task reading their topic, or to the outputs.
    fn collect(
        &mut self,
        t: usize,
        queue: &mut VecDeque<RawRecord>,
        outputs: &mut Vec<OutputRecord>,
    ) {
        for out in self.tasks[t].task.take_outputs() {
            if self.readers.contains_key(&out.topic) {
                let offset = self.next_offset(&out.topic);
                queue.push_back(RawRecord {
                    topic: out.topic.clone(),
                    partition: 0,
                    offset,
                    timestamp: out.timestamp,
                    key: out.key.map(Into::into),
                    value: out.value.map(Into::into),
                    headers: out.headers,
                });
            } else {
                outputs.push(out);
            }
        }
    }

    fn commit_all(&mut self) -> Result<()> {
        for i in 0..self.tasks.len() {
            let changelog = self.tasks[i].task.take_changelog();
            let mut offsets: BTreeMap<String, i64> = BTreeMap::new();
            for record in &changelog {
                let offset = self.next_offset(&record.topic);
                offsets.insert(record.topic.clone(), offset + 1);
            }
            for record in changelog {
                self.changelogs
                    .entry(record.topic.clone())
                    .or_default()
                    .push(record);
            }
            let t = &self.tasks[i];
            if let Some(store) = &t.store {
                let mut commit: Vec<(ChangelogPartition, i64)> = offsets
                    .into_iter()
                    .map(|(topic, o)| (ChangelogPartition::new(topic, 0), o))
                    .collect();
                for (topic, o) in t.task.consumed_offsets() {
                    commit.push((ChangelogPartition::new(topic.clone(), 0), *o));
                }
                store
                    .commit(&commit)
                    .map_err(|source| StreamsError::store(t.task.id().to_string(), source))?;
            }
        }
        Ok(())
    }

    /// Advances the wall clock by `by` and runs the wall-clock punctuators
    /// that became due, then commits.
    ///
    /// # Errors
    ///
    /// A processor's error (nothing of the punctuation is committed).
    pub fn advance_wall_clock(&mut self, by: Duration) -> Result<()> {
        self.wall_clock_ms = self
            .wall_clock_ms
            .saturating_add(i64::try_from(by.as_millis()).unwrap_or(i64::MAX));
        let mut queue = VecDeque::new();
        let mut outputs = Vec::new();
        for t in 0..self.tasks.len() {
            if let Err(e) = self.tasks[t].task.punctuate_wall_clock(self.wall_clock_ms) {
                for task in &mut self.tasks {
                    task.task.discard_uncommitted();
                    if let Some(store) = &task.store {
                        store.abort();
                    }
                }
                return Err(e);
            }
            self.collect(t, &mut queue, &mut outputs);
        }
        for out in outputs {
            self.outputs
                .entry(out.topic.clone())
                .or_default()
                .push_back(out);
        }
        self.run(queue.into())
    }

    /// A record of a global store's topic: applied to the store and
    /// committed with its offset, as the instance's global stores do.
    fn apply_global(
        &mut self,
        store_name: &str,
        topic: &str,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        offset: i64,
    ) -> Result<()> {
        let Some(store) = &self.globals else {
            return Ok(());
        };
        let err = |source| StreamsError::store(store_name.to_owned(), source);
        let kv = store.key_value_store(store_name).map_err(err)?;
        let key = key.unwrap_or_default();
        match value {
            Some(v) => kv.put(&key, &v).map_err(err)?,
            None => kv.delete(&key).map_err(err)?,
        }
        store
            .commit(&[(ChangelogPartition::new(topic, 0), offset + 1)])
            .map_err(err)
    }

    /// Takes the records written to `topic` so far, decoded.
    ///
    /// # Errors
    ///
    /// Bytes that do not decode as `K`/`V`.
    pub fn read_output<K: Serde, V: Serde>(&mut self, topic: &str) -> Result<Vec<Record<K, V>>> {
        let records = self.outputs.remove(topic).unwrap_or_default();
        records
            .into_iter()
            .map(|r| {
                Ok(Record {
                    key: K::deserialize(r.key.as_deref())?,
                    value: V::deserialize(r.value.as_deref())?,
                    timestamp: r.timestamp,
                    headers: r.headers,
                })
            })
            .collect()
    }

    /// Every changelog record committed so far for `store`, as raw records.
    pub fn changelog(&self, store: &str) -> &[OutputRecord] {
        let topic = format!("{}-{store}-changelog", self.application_id);
        self.changelogs
            .get(&topic)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    fn task_store(&self, store: &str) -> Result<&TaskStore> {
        self.tasks
            .iter()
            .find(|t| {
                t.store
                    .as_ref()
                    .is_some_and(|s| s.stores().iter().any(|(n, _)| n == store))
            })
            .and_then(|t| t.store.as_ref())
            .ok_or_else(|| StreamsError::InvalidTopology(format!("unknown store {store}")))
    }

    /// The committed contents of key-value store `store`.
    ///
    /// # Errors
    ///
    /// An unknown store or undecodable bytes.
    pub fn kv_store<K: Serde, V: Serde>(&self, store: &str) -> Result<Vec<(K, V)>> {
        let kv = self
            .task_store(store)?
            .key_value_store(store)
            .map_err(|source| StreamsError::store(store.to_owned(), source))?;
        let mut out = Vec::new();
        let iter = kv
            .iter()
            .map_err(|source| StreamsError::store(store.to_owned(), source))?;
        for entry in iter {
            let (k, v) = entry.map_err(|source| StreamsError::store(store.to_owned(), source))?;
            out.push((K::deserialize(Some(&k))?, V::deserialize(Some(&v))?));
        }
        Ok(out)
    }

    /// The committed windows of `key` in window store `store` starting in `[from, to]`.
    ///
    /// # Errors
    ///
    /// An unknown store or undecodable bytes.
    pub fn window_fetch<K: Serde, V: Serde>(
        &self,
        store: &str,
        key: &K,
        from: i64,
        to: i64,
    ) -> Result<Vec<(i64, V)>> {
        let task = self.task_store(store)?;
        let err = |source| StreamsError::store(store.to_owned(), source);
        let (_, registration) = task
            .stores()
            .into_iter()
            .find(|(n, _)| n == store)
            .ok_or_else(|| StreamsError::InvalidTopology(format!("unknown store {store}")))?;
        let weir_store::StoreKind::Window {
            retention_ms,
            segment_ms,
        } = registration.kind
        else {
            return Err(StreamsError::InvalidTopology(format!(
                "{store} is not a window store"
            )));
        };
        let w = task
            .window_store(
                store,
                Duration::from_millis(u64::try_from(retention_ms).unwrap_or(0)),
                Duration::from_millis(u64::try_from(segment_ms).unwrap_or(0)),
            )
            .map_err(err)?;
        let k = key.serialize().unwrap_or_default();
        w.fetch(&k, from, to)
            .map_err(err)?
            .into_iter()
            .map(|e| Ok((e.window_start, V::deserialize(Some(&e.value))?)))
            .collect()
    }
}
