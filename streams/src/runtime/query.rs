//! Interactive queries: read-only access to the committed contents of the
//! key-value stores of the tasks running on this instance, and which
//! instance runs the task that holds a key.
//!
//! A query reads what the store committed, never a task's staged writes:
//! under exactly-once nothing of a transaction that has not committed shows
//! (Kafka Streams' queries can see uncommitted writes).

use std::marker::PhantomData;
use std::ops::Bound;
use std::sync::{Arc, PoisonError};

use weir_client::producer::partitioner::partition_for_key;

use super::{KafkaStreams, Runtime};
use crate::error::{Result, StreamsError};
use crate::serde::Serde;
use crate::state::StoreType;
use crate::task::TaskId;

/// A read-only view of a key-value store across the tasks running on this
/// instance; see [`KafkaStreams::kv_store`].
pub struct QueryableKvStore<K, V> {
    rt: Arc<Runtime>,
    name: String,
    subtopology: u32,
    partitions: i32,
    in_memory: bool,
    /// Standbys' copies answer too (see
    /// [`enable_stale_stores`](Self::enable_stale_stores)).
    stale: bool,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> std::fmt::Debug for QueryableKvStore<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryableKvStore")
            .field("name", &self.name)
            .field("subtopology", &self.subtopology)
            .finish()
    }
}

fn query_err(store: &str, what: impl std::fmt::Display) -> StreamsError {
    StreamsError::NotRunning(format!("query of store {store}: {what}"))
}

impl<K: Serde, V: Serde> QueryableKvStore<K, V> {
    fn task_of(&self, key: &[u8]) -> TaskId {
        let p = partition_for_key(key, self.partitions.max(1));
        TaskId::new(self.subtopology, u32::try_from(p).unwrap_or(0))
    }

    fn handle(&self, store: &weir_store::TaskStore) -> Result<weir_store::KeyValueStore> {
        let opened = if self.in_memory {
            store.in_memory_key_value_store(&self.name, None)
        } else {
            store.key_value_store(&self.name)
        };
        opened.map_err(|e| StreamsError::store(self.name.clone(), e))
    }

    /// The local stores of the subtopology's tasks: the running tasks',
    /// and with stale stores enabled the standbys' of the other tasks.
    fn local(&self) -> Vec<(TaskId, weir_store::TaskStore)> {
        let mut stores: std::collections::BTreeMap<TaskId, weir_store::TaskStore> = self
            .rt
            .queryable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(t, _)| t.subtopology == self.subtopology)
            .map(|(t, s)| (*t, s.clone()))
            .collect();
        if self.stale {
            for (t, s) in self
                .rt
                .standby_queryable
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|(t, _)| t.subtopology == self.subtopology)
            {
                stores.entry(*t).or_insert_with(|| s.clone());
            }
        }
        stores.into_iter().collect()
    }

    fn store_of(&self, task: TaskId) -> Option<weir_store::TaskStore> {
        let active = self
            .rt
            .queryable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&task)
            .cloned();
        if active.is_some() || !self.stale {
            return active;
        }
        self.rt
            .standby_queryable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&task)
            .cloned()
    }

    /// Lets the standby replicas (and warmups) kept on this instance answer
    /// for their tasks too, as Kafka Streams' `enableStaleStores`: what they
    /// hold is committed, but may be behind the active's last commit by
    /// what the standby has not read yet. A task running here answers from
    /// its own store either way.
    ///
    /// ```no_run
    /// # async fn demo(streams: weir_streams::KafkaStreams) -> weir_streams::Result<()> {
    /// let counts = streams.kv_store::<String, u64>("counts")?.enable_stale_stores();
    /// let maybe_behind = counts.get(&"kafka".to_string())?;
    /// # let _ = maybe_behind;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn enable_stale_stores(mut self) -> Self {
        self.stale = true;
        self
    }

    /// The committed value of `key`, if the task holding it runs here;
    /// `Ok(None)` also when it runs elsewhere (ask
    /// [`KafkaStreams::host_for_key`] where).
    ///
    /// # Errors
    ///
    /// A key that serializes to null, a store error, or bytes that do not
    /// decode as `V`.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        let k = key
            .serialize()
            .ok_or_else(|| query_err(&self.name, "a null key"))?;
        let task = self.task_of(&k);
        let Some(store) = self.store_of(task) else {
            return Ok(None);
        };
        let value = self
            .handle(&store)?
            .get_committed(&k)
            .map_err(|e| StreamsError::store(self.name.clone(), e))?;
        value
            .map(|v| V::deserialize(Some(&v)).map_err(StreamsError::from))
            .transpose()
    }

    /// Every committed entry of the store in the tasks running here, by
    /// task, then key.
    ///
    /// # Errors
    ///
    /// A store error, or bytes that do not decode.
    pub fn all(&self) -> Result<Vec<(K, V)>> {
        let mut out = Vec::new();
        for (_, store) in self.local() {
            let entries = self
                .handle(&store)?
                .range_committed(Bound::Unbounded, Bound::Unbounded)
                .map_err(|e| StreamsError::store(self.name.clone(), e))?;
            for entry in entries {
                let (k, v) = entry.map_err(|e| StreamsError::store(self.name.clone(), e))?;
                out.push((K::deserialize(Some(&k))?, V::deserialize(Some(&v))?));
            }
        }
        Ok(out)
    }

    /// The tasks of this store that answer here: those that run here, and
    /// with [`enable_stale_stores`](Self::enable_stale_stores) the standbys.
    pub fn local_tasks(&self) -> Vec<TaskId> {
        self.local().into_iter().map(|(t, _)| t).collect()
    }
}

/// A read-only view of a window store across the tasks running on this
/// instance (and, on request, its standbys); see
/// [`KafkaStreams::window_store`]. Reads committed windows only.
pub struct QueryableWindowStore<K, V> {
    tasks: QueryableKvStore<K, V>,
    retention: std::time::Duration,
    segment: std::time::Duration,
}

impl<K, V> std::fmt::Debug for QueryableWindowStore<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryableWindowStore")
            .field("name", &self.tasks.name)
            .field("subtopology", &self.tasks.subtopology)
            .finish()
    }
}

impl<K: Serde, V: Serde> QueryableWindowStore<K, V> {
    /// The committed windows of `key` starting in `[from, to]` (ms), in
    /// time order, as (window start, value); empty when the key's task
    /// does not answer here.
    ///
    /// # Errors
    ///
    /// A null key, a store error, or bytes that do not decode.
    pub fn fetch(&self, key: &K, from: i64, to: i64) -> Result<Vec<(i64, V)>> {
        let name = &self.tasks.name;
        let k = key
            .serialize()
            .ok_or_else(|| query_err(name, "a null key"))?;
        let Some(store) = self.tasks.store_of(self.tasks.task_of(&k)) else {
            return Ok(Vec::new());
        };
        let window = if self.tasks.in_memory {
            store.in_memory_window_store(name, self.retention, self.segment, None)
        } else {
            store.window_store(name, self.retention, self.segment)
        }
        .map_err(|e| StreamsError::store(name.clone(), e))?;
        window
            .fetch_committed(&k, from, to)
            .map_err(|e| StreamsError::store(name.clone(), e))?
            .into_iter()
            .map(|e| Ok((e.window_start, V::deserialize(Some(&e.value))?)))
            .collect()
    }

    /// As [`QueryableKvStore::enable_stale_stores`].
    #[must_use]
    pub fn enable_stale_stores(mut self) -> Self {
        self.tasks.stale = true;
        self
    }

    /// The tasks of this store that answer here.
    pub fn local_tasks(&self) -> Vec<TaskId> {
        self.tasks.local_tasks()
    }
}

impl KafkaStreams {
    /// A read-only view of window store `name` (committed windows of the
    /// tasks running here).
    ///
    /// ```no_run
    /// # async fn demo(streams: weir_streams::KafkaStreams) -> weir_streams::Result<()> {
    /// let per_minute = streams.window_store::<String, u64>("views-per-minute")?;
    /// for (start, views) in per_minute.fetch(&"user-7".to_string(), 0, i64::MAX)? {
    ///     println!("{start}: {views}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// A name that is not a window store of the topology.
    pub fn window_store<K: Serde, V: Serde>(
        &self,
        name: &str,
    ) -> Result<QueryableWindowStore<K, V>> {
        let (subtopology, partitions, kind, in_memory) = self.store_layout(name)?;
        let StoreType::Window { retention, segment } = kind else {
            return Err(query_err(name, "not a window store"));
        };
        Ok(QueryableWindowStore {
            tasks: self.tasks_of(name, subtopology, partitions, in_memory),
            retention,
            segment,
        })
    }

    /// The per-task view both kinds of queryable store read through.
    fn tasks_of<K, V>(
        &self,
        name: &str,
        subtopology: u32,
        partitions: i32,
        in_memory: bool,
    ) -> QueryableKvStore<K, V> {
        QueryableKvStore {
            rt: Arc::clone(&self.runtime),
            name: name.to_owned(),
            subtopology,
            partitions,
            in_memory,
            stale: false,
            _types: PhantomData,
        }
    }

    fn store_layout(&self, name: &str) -> Result<(u32, i32, StoreType, bool)> {
        let rt = &self.runtime;
        let count = u32::try_from(rt.topology.subtopology_count()).unwrap_or(0);
        for sub in 0..count {
            if let Some(spec) = rt
                .topology
                .subtopology_stores(sub)
                .into_iter()
                .find(|s| s.name == name)
            {
                let partitions = rt.partitions.get(&sub).copied().unwrap_or(0);
                return Ok((sub, partitions, spec.kind.clone(), spec.in_memory));
            }
        }
        Err(query_err(name, "no such store in the topology"))
    }

    /// Read-only access to the committed contents of key-value store
    /// `name` in the tasks running on this instance (interactive queries).
    /// Reads never see a write that has not committed.
    ///
    /// ```no_run
    /// # async fn run(streams: weir_streams::KafkaStreams) -> weir_streams::Result<()> {
    /// let counts = streams.kv_store::<String, u64>("counts")?;
    /// match counts.get(&"kafka".to_owned())? {
    ///     Some(n) => println!("kafka: {n}"),
    ///     None => println!("ask {:?}", streams.host_for_key("counts", &"kafka".to_owned())?),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// No key-value store of that name in the topology.
    pub fn kv_store<K: Serde, V: Serde>(&self, name: &str) -> Result<QueryableKvStore<K, V>> {
        let (subtopology, partitions, kind, in_memory) = self.store_layout(name)?;
        if !matches!(kind, StoreType::KeyValue) {
            return Err(query_err(name, "not a key-value store"));
        }
        Ok(self.tasks_of(name, subtopology, partitions, in_memory))
    }

    /// Which instance (its `application.server`) runs the task of store
    /// `store` that holds `key`, as of the last assignment; `None` if no
    /// member with an `application.server` runs it.
    ///
    /// # Errors
    ///
    /// No such store, or a key that serializes to null.
    pub fn host_for_key<K: Serde>(&self, store: &str, key: &K) -> Result<Option<String>> {
        let (subtopology, partitions, _, _) = self.store_layout(store)?;
        let k = key
            .serialize()
            .ok_or_else(|| query_err(store, "a null key"))?;
        let p = partition_for_key(&k, partitions.max(1));
        let task = TaskId::new(subtopology, u32::try_from(p).unwrap_or(0));
        let assignment = self.runtime.assignor.assignment().unwrap_or_default();
        Ok(assignment
            .hosts
            .into_iter()
            .find(|(_, tasks)| tasks.contains(&task))
            .map(|(host, _)| host))
    }
}
