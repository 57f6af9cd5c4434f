//! Global stores: every instance keeps a copy of every partition of each
//! global store's topic (Kafka Streams' global state, behind `GlobalKTable`).
//!
//! At start, before the instance joins its group, each partition is restored
//! into its own store in `<state.dir>/<application.id>/global/` from the
//! offset it committed (a restart reads only the tail), read_committed, in
//! atomic batches with their offsets, through the same restorer as a task's
//! changelog. Then a follower keeps them up to date every
//! [`FOLLOW_INTERVAL`]. Processors read only committed data
//! ([`crate::state::GlobalKvStore`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use weir_client::admin::Admin;
use weir_store::TaskStore;

use super::Runtime;
use super::restore::{self, Purpose, RestoreEnv};
use crate::config::StreamsConfig;
use crate::error::{Result, StreamsError};
use crate::topology::Topology;

/// How often the follower looks for new records of the global topics.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(100);

/// Labels a global partition's restore in logs and errors.
#[derive(Debug, Clone, Copy)]
struct GlobalPartition(i32);

impl std::fmt::Display for GlobalPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "global_{}", self.0)
    }
}

/// The global stores once restored: their task store and, per partition,
/// (store name, topic, partition).
pub(crate) struct Bootstrapped {
    store: TaskStore,
    parts: Vec<(String, String, i32)>,
}

/// Restores every global store to its topic's end and opens it for the
/// topology's processors; `None` when the topology has none.
///
/// # Errors
///
/// A global store's topic is missing, or a client or store error.
pub(crate) async fn bootstrap(
    env: &RestoreEnv<'_>,
    admin: &Admin,
    topology: &Topology,
    config: &StreamsConfig,
) -> Result<Option<Bootstrapped>> {
    let specs: Vec<_> = topology.global_stores().cloned().collect();
    if specs.is_empty() {
        return Ok(None);
    }
    let dir = config.state_dir.join(&config.application_id).join("global");
    let options = config.store.clone();
    let store = tokio::task::spawn_blocking(move || TaskStore::open(dir, options))
        .await
        .map_err(|e| StreamsError::NotRunning(format!("opening the global stores: {e}")))?
        .map_err(|source| StreamsError::store("global", source))?;
    let mut parts = Vec::new();
    let mut handles = std::collections::BTreeMap::new();
    for spec in &specs {
        let described = admin
            .describe_topics(&[spec.topic.as_str()])
            .await
            .map_err(|e| StreamsError::Topic {
                topic: spec.topic.clone(),
                reason: format!(
                    "the topic of global store {} cannot be read: {e}",
                    spec.name
                ),
            })?;
        let count = described
            .iter()
            .find(|t| t.name == spec.topic && t.error.is_none())
            .map(|t| t.partitions.len())
            .filter(|n| *n > 0)
            .ok_or_else(|| StreamsError::Topic {
                topic: spec.topic.clone(),
                reason: format!("the topic of global store {} does not exist", spec.name),
            })?;
        let mut stores = Vec::new();
        for p in 0..i32::try_from(count).unwrap_or(i32::MAX) {
            let name = spec.partition_store(p);
            let kv = store
                .key_value_store(&name)
                .map_err(|source| StreamsError::store(name.clone(), source))?;
            restore::restore_store(
                env,
                GlobalPartition(p),
                &store,
                &name,
                &spec.topic,
                p,
                Purpose::Active,
                None,
            )
            .await?;
            stores.push(kv);
            parts.push((name, spec.topic.clone(), p));
        }
        tracing::info!(store = %spec.name, topic = %spec.topic, partitions = count, "global store restored");
        handles.insert(spec.name.clone(), stores);
    }
    *topology
        .global_handles
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = handles;
    Ok(Some(Bootstrapped { store, parts }))
}

/// The follower of an instance's global stores.
pub(crate) struct GlobalStores {
    stop: watch::Sender<bool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for GlobalStores {
    /// Dropped without `stop` (the instance was killed): it goes with it.
    fn drop(&mut self) {
        if let Some(h) = &self.handle {
            h.abort();
        }
    }
}

impl GlobalStores {
    /// Keeps the bootstrapped stores up to date until stopped.
    pub(crate) fn follow(rt: Arc<Runtime>, boot: Bootstrapped) -> GlobalStores {
        let (stop, mut stopped) = watch::channel(false);
        let handle = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(FOLLOW_INTERVAL) => {}
                    _ = stopped.changed() => break,
                }
                for (name, topic, p) in &boot.parts {
                    if let Err(e) = restore::restore_store(
                        &rt.restore_env(),
                        GlobalPartition(*p),
                        &boot.store,
                        name,
                        topic,
                        *p,
                        Purpose::Standby,
                        None,
                    )
                    .await
                    {
                        tracing::warn!(store = %name, %topic, partition = p, error = %e, "following a global topic");
                    }
                }
            }
            let store = boot.store.clone();
            if let Ok(Err(e)) = tokio::task::spawn_blocking(move || store.close()).await {
                tracing::warn!(error = %e, "closing the global stores");
            }
        });
        GlobalStores {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the follower and closes the stores.
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(h) = self.handle.take() {
            let _ = h.await;
        }
    }
}
