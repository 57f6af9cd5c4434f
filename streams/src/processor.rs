//! The Processor API: a processor sees one record at a time, reads and writes
//! its declared stores, and forwards records to its children.
//!
//! Processors are synchronous. A task runs its records in order on a blocking
//! thread, and every store write and forwarded record belongs to the task's
//! current commit: if a processor returns an error, none of it is committed
//! (the staged store writes are aborted and the outputs are never sent or
//! belong to an aborted transaction).
//!
//! ```
//! use weir_streams::processor::{Processor, ProcessorContext};
//! use weir_streams::{ProcessError, Record};
//!
//! /// Forwards every value in upper case.
//! struct Upper;
//!
//! impl Processor<String, String> for Upper {
//!     type KOut = String;
//!     type VOut = String;
//!     fn process(
//!         &mut self,
//!         ctx: &mut ProcessorContext<'_, String, String>,
//!         record: Record<String, String>,
//!     ) -> Result<(), ProcessError> {
//!         let upper = record.value.to_uppercase();
//!         ctx.forward(record.with_value(upper));
//!         Ok(())
//!     }
//! }
//! ```

use std::time::Duration;

use crate::error::ProcessError;
use crate::record::{Record, RecordMetadata};
use crate::serde::Serde;
use crate::state::{
    GlobalKvStore, GlobalKvStoreRef, KvStore, KvStoreRef, WindowStore, WindowStoreRef,
};
use crate::task::{NodeEnv, TaskId};

/// A step of a topology. `KIn`/`VIn` are what it receives, `KOut`/`VOut`
/// what it forwards.
pub trait Processor<KIn, VIn>: Send + 'static {
    /// The key type this processor forwards.
    type KOut: Clone + Send + 'static;
    /// The value type this processor forwards.
    type VOut: Clone + Send + 'static;

    /// Called once when the task starts, before any record: schedule
    /// punctuators here.
    ///
    /// # Errors
    ///
    /// An error stops the task from starting.
    fn init(&mut self, _ctx: &mut InitContext<'_>) -> Result<(), ProcessError> {
        Ok(())
    }

    /// Processes one record.
    ///
    /// # Errors
    ///
    /// A [`ProcessError`] aborts the task's uncommitted work; the
    /// processing-error handler decides what happens next.
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, Self::KOut, Self::VOut>,
        record: Record<KIn, VIn>,
    ) -> Result<(), ProcessError>;

    /// Called when a punctuator scheduled in [`init`](Self::init) is due, with
    /// the stream time or wall-clock time that made it due.
    ///
    /// # Errors
    ///
    /// As [`process`](Self::process).
    fn punctuate(
        &mut self,
        _ctx: &mut ProcessorContext<'_, Self::KOut, Self::VOut>,
        _schedule: ScheduleId,
        _timestamp: i64,
    ) -> Result<(), ProcessError> {
        Ok(())
    }

    /// Called before every commit of the task: forward here what the
    /// processor held back (a record cache's latest values). What it
    /// forwards belongs to the commit about to happen.
    ///
    /// # Errors
    ///
    /// As [`process`](Self::process).
    fn flush(
        &mut self,
        _ctx: &mut ProcessorContext<'_, Self::KOut, Self::VOut>,
    ) -> Result<(), ProcessError> {
        Ok(())
    }

    /// Called when the task closes (cleanly or not).
    fn close(&mut self) {}
}

/// What drives a punctuator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PunctuationType {
    /// The task's stream time: the largest record timestamp it has seen. It
    /// only advances as records arrive.
    StreamTime,
    /// The wall clock (tokio's clock, so tests can drive it).
    WallClockTime,
}

/// Names one punctuator of a processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScheduleId(pub(crate) u32);

/// Given to [`Processor::init`].
pub struct InitContext<'a> {
    pub(crate) env: NodeEnv<'a>,
}

impl InitContext<'_> {
    /// Calls [`Processor::punctuate`] every `interval` of `kind` time.
    ///
    /// # Errors
    ///
    /// A zero interval.
    pub fn schedule(
        &mut self,
        interval: Duration,
        kind: PunctuationType,
    ) -> Result<ScheduleId, ProcessError> {
        self.env.schedule(interval, kind)
    }

    /// The task this processor runs in.
    pub fn task_id(&self) -> TaskId {
        self.env.core.task_id
    }

    /// `cache.max.bytes.buffering`: how many bytes a caching processor may
    /// hold back before it forwards early.
    pub fn cache_max_bytes(&self) -> u64 {
        self.env.core.cache_max_bytes
    }

    /// The key-value store `store`, which the processor must have declared.
    ///
    /// # Errors
    ///
    /// The store was not declared by this processor.
    pub fn kv_store<K: Serde, V: Serde>(
        &self,
        store: &KvStoreRef<K, V>,
    ) -> Result<KvStore<K, V>, ProcessError> {
        self.env.kv_store(store)
    }

    /// The window store `store`, which the processor must have declared.
    ///
    /// # Errors
    ///
    /// The store was not declared by this processor.
    pub fn window_store<K: Serde, V: Serde>(
        &self,
        store: &WindowStoreRef<K, V>,
    ) -> Result<WindowStore<K, V>, ProcessError> {
        self.env.window_store(store)
    }
}

/// Given to [`Processor::process`] and [`Processor::punctuate`].
pub struct ProcessorContext<'a, K, V> {
    pub(crate) env: NodeEnv<'a>,
    pub(crate) forwarded: &'a mut Vec<Record<K, V>>,
}

impl<K, V> ProcessorContext<'_, K, V> {
    /// Sends `record` to every child of this processor. Children run after
    /// this call returns, in the order records were forwarded.
    pub fn forward(&mut self, record: Record<K, V>) {
        self.forwarded.push(record);
    }

    /// The task this processor runs in.
    pub fn task_id(&self) -> TaskId {
        self.env.core.task_id
    }

    /// `cache.max.bytes.buffering`: how many bytes a caching processor may
    /// hold back before it forwards early.
    pub fn cache_max_bytes(&self) -> u64 {
        self.env.core.cache_max_bytes
    }

    /// Topic, partition and offset of the input record being processed;
    /// `None` in a punctuation.
    pub fn record_metadata(&self) -> Option<&RecordMetadata> {
        self.env.core.current.as_ref()
    }

    /// The task's stream time: the largest input timestamp seen, or
    /// `i64::MIN` before the first record.
    pub fn stream_time(&self) -> i64 {
        self.env.core.stream_time
    }

    /// The wall-clock time the runtime last read, in ms since the epoch.
    pub fn wall_clock_time(&self) -> i64 {
        self.env.core.wall_clock_ms
    }

    /// The key-value store `store`, which the processor must have declared.
    ///
    /// # Errors
    ///
    /// The store was not declared by this processor.
    pub fn kv_store<K2: Serde, V2: Serde>(
        &self,
        store: &KvStoreRef<K2, V2>,
    ) -> Result<KvStore<K2, V2>, ProcessError> {
        self.env.kv_store(store)
    }

    /// The window store `store`, which the processor must have declared.
    ///
    /// # Errors
    ///
    /// The store was not declared by this processor.
    pub fn window_store<K2: Serde, V2: Serde>(
        &self,
        store: &WindowStoreRef<K2, V2>,
    ) -> Result<WindowStore<K2, V2>, ProcessError> {
        self.env.window_store(store)
    }

    /// The global store `store` (see
    /// [`TopologyBuilder::global_store`](crate::TopologyBuilder::global_store)),
    /// read-only; any processor may read any global store.
    ///
    /// # Errors
    ///
    /// The topology does not declare the store.
    pub fn global_kv_store<K2: Serde, V2: Serde>(
        &self,
        store: &GlobalKvStoreRef<K2, V2>,
    ) -> Result<GlobalKvStore<K2, V2>, ProcessError> {
        self.env.global_kv_store(store)
    }
}
