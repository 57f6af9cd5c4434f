//! Connects the coordinators' state machines to the cluster state: answers
//! their parked requests, schedules their deadlines on the state task's
//! timer wheel, writes transaction markers to the logs, and finds the
//! coordinator broker of a key.

use tokio::time::Instant;
use tracing::debug;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::records::ControlKind;

use crate::cluster::ClusterState;
use crate::cluster::timers::TimerEvent;
use crate::coordinator::txn::TxnEnd;
use crate::handlers::RequestContext;

/// The broker that coordinates `key`: the one `coordinator_for` hashes it
/// to, or, while that broker is down, the next live broker in id order (as
/// Kafka fails the `__consumer_offsets` partition over to another replica).
/// `None` when no broker is up.
pub fn coordinator_node(state: &ClusterState, key: &str) -> Option<i32> {
    let n = i32::try_from(state.brokers.len()).ok()?;
    let home = state.coordinator_for(key);
    (0..n)
        .map(|i| (home + i) % n.max(1))
        .find(|&b| state.broker_alive(b))
}

/// Checks that the request reached the coordinator of `key`.
///
/// # Errors
/// `NOT_COORDINATOR` when another broker coordinates `key` (the client
/// looks it up again), `COORDINATOR_NOT_AVAILABLE` when none is up.
pub fn check_coordinator(state: &ClusterState, ctx: &RequestContext, key: &str) -> Result<(), i16> {
    match coordinator_node(state, key) {
        Some(node) if node == ctx.broker_id => Ok(()),
        Some(_) => Err(ResponseError::NotCoordinator.code()),
        None => Err(ResponseError::CoordinatorNotAvailable.code()),
    }
}

/// Delivers what the coordinators produced while handling a request or a
/// timer: answers to parked requests, new deadlines, and the markers and
/// offset completions of ended transactions.
pub fn flush(state: &mut ClusterState) {
    for (request, body) in state.groups.take_completed() {
        state.respond(request, body);
    }
    for (at, group) in state.groups.take_wakeups() {
        state.schedule(at, TimerEvent::Group(group));
    }
    for (at, tid) in state.txns.take_wakeups() {
        state.schedule(at, TimerEvent::Txn(tid));
    }
    let delay = state.txns.config.marker_delay;
    for end in state.txns.take_ends() {
        if delay.is_zero() {
            write_markers(state, &end);
        } else {
            let tid = end.transactional_id.clone();
            state.pending_markers.push(end);
            state.schedule(Instant::now() + delay, TimerEvent::TxnMarkers(tid));
        }
    }
}

/// Writes an ended transaction's markers and completes its offsets.
fn write_markers(state: &mut ClusterState, end: &TxnEnd) {
    {
        let commit = end.kind == ControlKind::Commit;
        for (topic, partition) in &end.partitions {
            // Kafka retries markers until they land; here a marker fails only
            // if the topic was deleted meanwhile, and then there is nothing
            // left to mark.
            if let Err(code) = state.append_marker(
                topic,
                *partition,
                end.producer_id,
                end.producer_epoch,
                end.kind,
                0,
            ) {
                debug!(%topic, partition, code, transactional_id = %end.transactional_id, "marker not written");
            }
        }
        for group in &end.groups {
            state.groups.complete_txn(group, end.producer_id, commit);
        }
    }
}

/// The markers of `tid`'s oldest pending transaction end are due.
fn markers_due(state: &mut ClusterState, tid: &str) {
    let Some(i) = state
        .pending_markers
        .iter()
        .position(|e| e.transactional_id == tid)
    else {
        return;
    };
    let end = state.pending_markers.remove(i);
    write_markers(state, &end);
    if !state
        .pending_markers
        .iter()
        .any(|e| e.transactional_id == tid)
    {
        state.txns.complete(tid);
    }
}

/// Handles a coordinator deadline from the timer wheel.
pub fn on_timer(state: &mut ClusterState, event: &TimerEvent, now: Instant) {
    match event {
        TimerEvent::Group(group) => state.groups.on_timer(group, now),
        TimerEvent::Txn(tid) => state.txns.on_timer(tid, now),
        TimerEvent::TxnMarkers(tid) => markers_due(state, tid),
        _ => {}
    }
    flush(state);
}
