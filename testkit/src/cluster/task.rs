//! The state task: one tokio task that owns [`ClusterState`] and handles
//! every message (connections' requests, the handle's commands, timers) in
//! arrival order.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until};
use tracing::{debug, trace};
use weir_protocol::api::DecodedRequest;
use weir_protocol::kafka_protocol::messages::ResponseKind;

use super::state::{ClusterState, ConnectionEntry, Responder};
use super::timers::TimerEvent;
use crate::faults::FaultAction;
use crate::handlers::{self, Reply, RequestContext};

/// What a connection does with a request's outcome.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Write this body, encoded at this version.
    Respond(Box<ResponseKind>, i16),
    /// Write nothing (Produce with acks=0) and read the next request.
    NoResponse,
    /// Close the connection.
    Close,
}

/// A command run inside the state task on behalf of the [`Cluster`](crate::Cluster) handle.
pub(crate) type Command = Box<dyn FnOnce(&mut ClusterState) + Send>;

/// Messages to the state task.
pub(crate) enum Message {
    Connected {
        id: u64,
        broker: i32,
        close: oneshot::Sender<()>,
    },
    Disconnected {
        id: u64,
    },
    Request {
        connection_id: u64,
        broker: i32,
        request: Box<DecodedRequest>,
        reply: oneshot::Sender<Outcome>,
    },
    Control(Command),
}

/// What listeners, connections and the handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) tx: mpsc::UnboundedSender<Message>,
    next_connection: AtomicU64,
}

impl Shared {
    pub(crate) fn new(tx: mpsc::UnboundedSender<Message>) -> Self {
        Self {
            tx,
            next_connection: AtomicU64::new(1),
        }
    }

    pub(crate) fn next_connection_id(&self) -> u64 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }
}

/// Runs until every sender is gone or the task is aborted.
pub(crate) async fn run(mut state: ClusterState, mut rx: mpsc::UnboundedReceiver<Message>) {
    loop {
        let deadline = state.timers.next_deadline();
        tokio::select! {
            // Due timers first, so that a steady stream of requests cannot starve them.
            biased;
            () = sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => {
                fire_timers(&mut state, Instant::now());
            }
            msg = rx.recv() => match msg {
                Some(m) => handle_message(&mut state, m, Instant::now()),
                None => break,
            },
        }
    }
    debug!("cluster state task stopped");
}

fn far_future() -> Instant {
    Instant::now() + std::time::Duration::from_secs(86_400 * 365)
}

fn handle_message(state: &mut ClusterState, msg: Message, now: Instant) {
    match msg {
        Message::Connected { id, broker, close } => {
            trace!(connection = id, broker, "connected");
            if !state.broker_alive(broker) {
                // Accepted just before the broker was killed: dropping
                // `close` closes it.
                return;
            }
            state.connections.insert(
                id,
                ConnectionEntry {
                    broker,
                    client_id: None,
                    _close: close,
                },
            );
        }
        Message::Disconnected { id } => {
            trace!(connection = id, "disconnected");
            state.connections.remove(&id);
            state.responders.retain(|_, r| r.connection_id != id);
        }
        Message::Request {
            connection_id,
            broker,
            request,
            reply,
        } => {
            handle_request(state, connection_id, broker, *request, reply, now);
        }
        Message::Control(f) => f(state),
    }
}

/// Handles one decoded request at `now` (tokio's clock in the state task; the
/// fuzz harness passes its own).
pub(crate) fn handle_request(
    state: &mut ClusterState,
    connection_id: u64,
    broker: i32,
    request: DecodedRequest,
    reply: oneshot::Sender<Outcome>,
    now: Instant,
) {
    let client_id = request.header.client_id.as_ref().map(|c| c.to_string());
    let Some(conn) = state.connections.get_mut(&connection_id) else {
        // The connection was closed (its broker killed) while this request
        // was queued: a dead broker handles nothing.
        let _ = reply.send(Outcome::Close);
        return;
    };
    conn.client_id.clone_from(&client_id);
    let ctx = RequestContext {
        request_id: state.next_request_id(),
        connection_id,
        broker_id: broker,
        client_id,
        api_key: request.api_key,
        version: request.version,
        correlation_id: request.header.correlation_id,
        now,
    };
    state.responders.insert(
        ctx.request_id,
        Responder {
            connection_id,
            version: ctx.version,
            tx: reply,
        },
    );
    state.faults.log_request(&ctx, &request.body);
    let action = state.faults.action_for(&ctx, &request.body);
    let reply = match action {
        FaultAction::None => handlers::dispatch(state, &ctx, request.body),
        FaultAction::DropResponse => {
            debug!(api = ?ctx.api_key, connection = connection_id, "fault: response will be lost");
            state.faults.lose_response(ctx.request_id);
            handlers::dispatch(state, &ctx, request.body)
        }
        FaultAction::Drop => {
            debug!(api = ?ctx.api_key, connection = connection_id, "fault: request dropped");
            Reply::Swallow
        }
        FaultAction::Close => {
            debug!(api = ?ctx.api_key, connection = connection_id, "fault: connection closed");
            Reply::Close
        }
        FaultAction::Error(code) => {
            match handlers::error_response::for_request(&request.body, code) {
                Some(body) => Reply::Now(body),
                None => Reply::Close,
            }
        }
        FaultAction::Delay(by) => {
            debug!(api = ?ctx.api_key, ?by, "fault: request delayed");
            let at = ctx.now + by;
            state.schedule(at, TimerEvent::DelayedRequest(ctx.request_id));
            state.faults.hold(ctx.clone(), request.body);
            Reply::Later
        }
    };
    finish(state, ctx.request_id, reply);
}

/// Delivers a handler's reply through the parked responder.
pub(crate) fn finish(state: &mut ClusterState, request: handlers::RequestId, reply: Reply) {
    match reply {
        Reply::Now(body) => state.respond(request, body),
        Reply::NowAt(body, version) => {
            if state.faults.is_response_lost(request) {
                return;
            }
            if let Some(r) = state.responders.remove(&request) {
                let _ = r.tx.send(Outcome::Respond(Box::new(body), version));
            }
        }
        Reply::Later | Reply::Swallow => {}
        Reply::NoResponse => {
            if let Some(r) = state.responders.remove(&request) {
                let _ = r.tx.send(Outcome::NoResponse);
            }
        }
        Reply::Close => {
            if let Some(r) = state.responders.remove(&request) {
                let _ = r.tx.send(Outcome::Close);
            }
        }
    }
}

pub(crate) fn fire_timers(state: &mut ClusterState, now: Instant) {
    for event in state.timers.take_due(now) {
        match event {
            TimerEvent::FetchWait(id) => handlers::fetch::expire(state, id, now),
            TimerEvent::DelayedRequest(id) => {
                if let Some((mut ctx, body)) = state.faults.release(id) {
                    ctx.now = now;
                    let reply = handlers::dispatch(state, &ctx, body);
                    finish(state, id, reply);
                }
            }
            TimerEvent::Group(_) | TimerEvent::Txn(_) | TimerEvent::TxnMarkers(_) => {
                handlers::coordinator_timer(state, event, now)
            }
        }
    }
}
