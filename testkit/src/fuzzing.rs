//! An in-process entry point for fuzzing the request path (`fuzz/` at the
//! repository root); not part of the supported API.
//!
//! [`FuzzCluster`] owns a [`ClusterState`] without sockets or a state task
//! and feeds it request frames exactly as a connection does: the frame is
//! decoded with [`decode_request`], an undecodable ApiVersions is answered
//! with the v0 fallback, anything else undecodable closes the connection,
//! and a decoded request goes through the state task's request path
//! (faults, dispatch, deferred replies). Time is the harness's own clock:
//! timers fire only when [`FuzzCluster::advance`] or
//! [`FuzzCluster::settle`] move it, so a run is deterministic.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use weir_protocol::ApiKey;
use weir_protocol::api::{decode_request, encode_response, peek_request_prefix};
use weir_protocol::kafka_protocol::messages::ResponseKind;

use crate::cluster::state::{Broker, ConnectionEntry};
use crate::cluster::task::{Message, Outcome, Shared, fire_timers, handle_request};
use crate::cluster::{ClusterConfig, ClusterState};
use crate::handlers::api_versions;

/// How many timer rounds [`FuzzCluster::settle`] runs at most.
const SETTLE_ROUNDS: usize = 10_000;

/// What became of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameResult {
    /// A response was encoded (its length in bytes, prefix included).
    Answered(usize),
    /// A handler's response did not encode at the request's version: the
    /// connection would be closed.
    EncodeFailed,
    /// No response (Produce with acks=0).
    NoResponse,
    /// The request waits (Fetch min bytes, JoinGroup, ...).
    Pending,
    /// The connection was closed (undecodable frame, unsupported version,
    /// or the handler's choice); the next frame on it reconnects.
    Closed,
    /// The connection still had a request in flight that no timer could
    /// complete: the cluster is wedged for this client.
    Wedged,
}

struct Conn {
    id: u64,
    broker: i32,
    _close: oneshot::Receiver<()>,
    pending: Option<(ApiKey, i32, oneshot::Receiver<Outcome>)>,
}

/// A cluster fed frames directly, for fuzzing.
pub struct FuzzCluster {
    state: ClusterState,
    now: Instant,
    conns: Vec<Option<Conn>>,
    next_conn: u64,
    out: BytesMut,
    _rx: mpsc::UnboundedReceiver<Message>,
}

impl std::fmt::Debug for FuzzCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FuzzCluster")
            .field("connections", &self.conns.len())
            .finish_non_exhaustive()
    }
}

impl FuzzCluster {
    /// A cluster of `brokers` brokers (at least 1) with topics `t` (3
    /// partitions) and `compacted` (1 partition, `cleanup.policy=compact`),
    /// and `connections` client connection slots (at least 1).
    pub fn new(brokers: i32, connections: usize) -> Self {
        let brokers = brokers.max(1);
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(tx));
        let config = ClusterConfig {
            brokers,
            ..ClusterConfig::default()
        };
        let list = (0..brokers)
            .map(|id| Broker {
                id,
                port: 9092u16.saturating_add(u16::try_from(id).unwrap_or(0)),
                alive: true,
                listener: None,
            })
            .collect();
        let mut state = ClusterState::new(config, list, shared);
        // Both names are valid and new, so neither call can fail.
        let _ = state.create_topic("t", 3, 1, BTreeMap::new());
        let _ = state.create_topic(
            "compacted",
            1,
            1,
            BTreeMap::from([("cleanup.policy".to_owned(), "compact".to_owned())]),
        );
        Self {
            state,
            now: Instant::now(),
            conns: (0..connections.max(1)).map(|_| None).collect(),
            next_conn: 1,
            out: BytesMut::new(),
            _rx: rx,
        }
    }

    /// The cluster state, to inspect after a run.
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    fn connect(&mut self, slot: usize) -> usize {
        let slot = slot % self.conns.len();
        if self.conns[slot].is_none() {
            let id = self.next_conn;
            self.next_conn += 1;
            let broker = i32::try_from(slot).unwrap_or(0) % self.state.config.brokers.max(1);
            let (close_tx, close_rx) = oneshot::channel();
            self.state.connections.insert(
                id,
                ConnectionEntry {
                    broker,
                    client_id: None,
                    _close: close_tx,
                },
            );
            self.conns[slot] = Some(Conn {
                id,
                broker,
                _close: close_rx,
                pending: None,
            });
        }
        slot
    }

    fn disconnect(&mut self, slot: usize) {
        if let Some(conn) = self.conns[slot].take() {
            self.state.connections.remove(&conn.id);
            self.state
                .responders
                .retain(|_, r| r.connection_id != conn.id);
        }
    }

    /// Sends one request frame (without its length prefix) on connection
    /// slot `slot`. A slot whose previous request is still pending first
    /// waits for it, moving the clock from timer to timer, as a client
    /// waiting for its response would.
    pub fn request(&mut self, slot: usize, frame: Bytes) -> FrameResult {
        let slot = self.connect(slot);
        if !self.wait_for(slot) {
            return FrameResult::Wedged;
        }
        let Some(conn) = self.conns[slot].as_ref() else {
            return FrameResult::Closed;
        };
        let (conn_id, broker) = (conn.id, conn.broker);
        let Ok(prefix) = peek_request_prefix(&frame) else {
            self.disconnect(slot);
            return FrameResult::Closed;
        };
        let request = match decode_request(frame) {
            Ok(r) => r,
            Err(_) if prefix.api_key == ApiKey::ApiVersions as i16 => {
                let body = ResponseKind::ApiVersions(api_versions::unsupported_version_response());
                return self.write(slot, ApiKey::ApiVersions, 0, prefix.correlation_id, &body);
            }
            Err(_) => {
                self.disconnect(slot);
                return FrameResult::Closed;
            }
        };
        let (api, correlation_id) = (request.api_key, request.header.correlation_id);
        let (tx, rx) = oneshot::channel();
        handle_request(&mut self.state, conn_id, broker, request, tx, self.now);
        if let Some(conn) = self.conns[slot].as_mut() {
            conn.pending = Some((api, correlation_id, rx));
        }
        self.poll(slot)
    }

    /// Moves the clock forward by `by`, firing the timers due.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        fire_timers(&mut self.state, self.now);
        for slot in 0..self.conns.len() {
            self.poll(slot);
        }
    }

    /// Fires every timer, in deadline order, until none is left (or a
    /// bound on rounds is hit), and returns how many connections still
    /// wait for a response: with no timer left, such a request is never
    /// answered.
    pub fn settle(&mut self) -> usize {
        for _ in 0..SETTLE_ROUNDS {
            let Some(deadline) = self.state.timers.next_deadline() else {
                break;
            };
            self.now = self.now.max(deadline);
            fire_timers(&mut self.state, self.now);
        }
        for slot in 0..self.conns.len() {
            self.poll(slot);
        }
        if self.state.timers.next_deadline().is_some() {
            // Timers keep re-arming: not a wedge this harness can judge.
            return 0;
        }
        self.conns
            .iter()
            .flatten()
            .filter(|c| c.pending.is_some())
            .count()
    }

    /// Waits for slot `slot`'s pending request; false if it can't complete.
    fn wait_for(&mut self, slot: usize) -> bool {
        for _ in 0..SETTLE_ROUNDS {
            match self.conns[slot].as_ref() {
                Some(c) if c.pending.is_some() => {}
                _ => return true,
            }
            let Some(deadline) = self.state.timers.next_deadline() else {
                return false;
            };
            self.now = self.now.max(deadline);
            fire_timers(&mut self.state, self.now);
            self.poll(slot);
        }
        true
    }

    fn poll(&mut self, slot: usize) -> FrameResult {
        let Some(conn) = self.conns[slot].as_mut() else {
            return FrameResult::Closed;
        };
        let Some((api, correlation_id, mut rx)) = conn.pending.take() else {
            return FrameResult::NoResponse;
        };
        match rx.try_recv() {
            Ok(Outcome::Respond(body, version)) => {
                self.write(slot, api, version, correlation_id, &body)
            }
            Ok(Outcome::NoResponse) => FrameResult::NoResponse,
            Ok(Outcome::Close) | Err(oneshot::error::TryRecvError::Closed) => {
                self.disconnect(slot);
                FrameResult::Closed
            }
            Err(oneshot::error::TryRecvError::Empty) => {
                conn.pending = Some((api, correlation_id, rx));
                FrameResult::Pending
            }
        }
    }

    fn write(
        &mut self,
        slot: usize,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        body: &ResponseKind,
    ) -> FrameResult {
        self.out.clear();
        match encode_response(&mut self.out, api, version, correlation_id, body) {
            Ok(()) => FrameResult::Answered(self.out.len()),
            Err(_) => {
                self.disconnect(slot);
                FrameResult::EncodeFailed
            }
        }
    }
}
