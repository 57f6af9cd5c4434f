//! Per-broker connections, one per [`Lane`].
//!
//! Each (broker, lane) slot holds at most one live [`Messenger`]. A slot has
//! its own async lock, so concurrent callers wait for one dial instead of
//! opening several connections, and a slow dial to one broker never blocks
//! another broker. A poisoned connection is replaced on the next use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Mutex as AsyncMutex;

use super::{BrokerId, Lane};
use crate::connection::{ConnectOptions, Messenger, Throttle, connect};
use crate::{ClientError, Result};

#[derive(Default)]
struct Slot {
    /// The address dialled, so a broker that moved gets a new connection.
    addr: String,
    messenger: Option<Arc<Messenger>>,
}

type SharedSlot = Arc<AsyncMutex<Slot>>;

/// The connections of one client.
pub(crate) struct Pool {
    options: ConnectOptions,
    slots: Mutex<HashMap<(BrokerId, Lane), SharedSlot>>,
    /// One throttle per (broker, lane), kept across reconnects. The broker
    /// mutes the connection whose request broke a quota (KIP-219), and a
    /// fetch-quota delay must not hold back a heartbeat on another lane.
    throttles: Mutex<HashMap<(BrokerId, Lane), Arc<Throttle>>>,
}

impl Pool {
    pub(crate) fn new(options: ConnectOptions) -> Self {
        Self {
            options,
            slots: Mutex::new(HashMap::new()),
            throttles: Mutex::new(HashMap::new()),
        }
    }

    fn slot(&self, broker: BrokerId, lane: Lane) -> Arc<AsyncMutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(slots.entry((broker, lane)).or_default())
    }

    fn throttle(&self, broker: BrokerId, lane: Lane) -> Arc<Throttle> {
        let mut t = self.throttles.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(t.entry((broker, lane)).or_default())
    }

    /// The live connection for (broker, lane), dialling `addr` if there is none.
    pub(crate) async fn get(
        &self,
        broker: BrokerId,
        lane: Lane,
        addr: &str,
    ) -> Result<Arc<Messenger>> {
        let slot = self.slot(broker, lane);
        let mut slot = slot.lock().await;
        if let Some(m) = &slot.messenger
            && m.is_usable()
            && slot.addr == addr
        {
            // A request abandoned by its caller and unanswered past its
            // timeout means the broker will answer nothing more on this
            // connection (responses come in order): close it rather than
            // queue behind it forever.
            match m.overdue_request() {
                None => return Ok(Arc::clone(m)),
                Some(cause) => {
                    tracing::info!(broker, ?lane, addr, error = %cause,
                        "closing a connection with a request unanswered past its timeout");
                    m.poison(cause);
                }
            }
        }
        slot.messenger = None;
        let mut options = self.options.clone();
        options.messenger.throttle = self.throttle(broker, lane);
        tracing::debug!(broker, ?lane, addr, "opening connection");
        let messenger = Arc::new(connect(addr, &options).await?);
        slot.addr = addr.to_owned();
        slot.messenger = Some(Arc::clone(&messenger));
        Ok(messenger)
    }

    /// Drops `messenger` from its slot if it is still the one there, so the
    /// next request dials afresh (after a timeout or a lost connection).
    pub(crate) async fn discard(&self, broker: BrokerId, lane: Lane, messenger: &Arc<Messenger>) {
        let slot = self.slot(broker, lane);
        let mut slot = slot.lock().await;
        if slot
            .messenger
            .as_ref()
            .is_some_and(|m| Arc::ptr_eq(m, messenger))
        {
            slot.messenger = None;
        }
    }

    /// Brokers with at least one open connection.
    pub(crate) fn connected_brokers(&self) -> Vec<BrokerId> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut ids: Vec<BrokerId> = slots
            .iter()
            .filter(|(_, s)| {
                s.try_lock()
                    .map(|s| s.messenger.as_ref().is_some_and(|m| m.is_usable()))
                    .unwrap_or(false)
            })
            .map(|((b, _), _)| *b)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Poisons the open connection of (broker, lane), if any, and drops it.
    pub(crate) async fn poison(&self, broker: BrokerId, lane: Lane, cause: ClientError) {
        let slot = self.slot(broker, lane);
        let mut slot = slot.lock().await;
        if let Some(m) = slot.messenger.take() {
            m.poison(cause);
        }
    }

    /// Closes the connections to bootstrap addresses (negative ids).
    pub(crate) fn drop_bootstrap_connections(&self) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|(broker, _), _| *broker >= 0);
    }

    /// Closes every connection.
    pub(crate) fn clear(&self) {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}
