//! Fetch: reads whole batches below the high watermark (read_uncommitted)
//! or the last stable offset (read_committed), with min bytes / max wait,
//! KIP-227 fetch sessions and the aborted-transactions list.
//!
//! A fetch that cannot return `min_bytes` at once is parked with its
//! resolved plan and answered as soon as enough data arrives (every append
//! calls `wake_waiting`) or when its max wait fires, whichever is first.

use indexmap::IndexMap;
use tokio::time::{Duration, Instant};
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use weir_protocol::kafka_protocol::messages::{
    FetchRequest, FetchResponse, ProducerId, ResponseKind, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::{Reply, RequestContext, RequestId};
use crate::cluster::ClusterState;
use crate::cluster::fetch_sessions::{SessionPartition, next_epoch};
use crate::cluster::timers::TimerEvent;

/// Versions 4 (isolation level, last stable offset, aborted transactions)
/// to 12 (flexible); v13+ name topics by id and are not implemented.
pub const VERSIONS: (i16, i16) = (4, 12);

const READ_COMMITTED: i8 = 1;

/// How the response relates to a fetch session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionMode {
    /// No session; every partition is listed.
    None,
    /// A full response for a session (new or re-opened).
    Full(i32),
    /// An incremental response: only changed partitions.
    Incremental(i32),
}

#[derive(Debug, Clone)]
struct PlannedPartition {
    topic: String,
    partition: i32,
    fetch_offset: i64,
    max_bytes: i32,
    current_leader_epoch: i32,
}

/// A fetch's resolved partitions and limits, kept while it waits.
#[derive(Debug, Clone)]
pub(crate) struct FetchPlan {
    broker: i32,
    isolation: i8,
    max_bytes: i32,
    min_bytes: i32,
    session: SessionMode,
    partitions: Vec<PlannedPartition>,
}

/// A fetch waiting for min bytes.
#[derive(Debug)]
pub(crate) struct PendingFetch {
    request: RequestId,
    plan: FetchPlan,
}

struct PartitionResult {
    data: PartitionData,
    bytes: usize,
    error: bool,
    /// (high watermark, last stable offset, log start offset)
    marks: (i64, i64, i64),
}

/// Handles a Fetch: answers at once when min bytes are there (or on any
/// error, or with max wait 0), otherwise parks it.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: FetchRequest,
    version: i16,
) -> Reply {
    let plan = match resolve_session(state, ctx, &req, version) {
        Ok(plan) => plan,
        Err(code) => {
            return Reply::Now(ResponseKind::Fetch(
                FetchResponse::default()
                    .with_error_code(code)
                    .with_session_id(0),
            ));
        }
    };
    let results = read_all(state, &plan);
    let bytes: usize = results.iter().map(|r| r.bytes).sum();
    let min_bytes = usize::try_from(plan.min_bytes.max(0)).unwrap_or(0);
    if req.max_wait_ms <= 0 || bytes >= min_bytes || results.iter().any(|r| r.error) {
        return Reply::Now(ResponseKind::Fetch(build_response(state, &plan, results)));
    }
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0));
    state.schedule(ctx.now + wait, TimerEvent::FetchWait(ctx.request_id));
    state.pending_fetches.push(PendingFetch {
        request: ctx.request_id,
        plan,
    });
    Reply::Later
}

/// Answers every parked fetch that now has min bytes; called after appends.
pub(crate) fn wake_waiting(state: &mut ClusterState, _now: Instant) {
    let pending = std::mem::take(&mut state.pending_fetches);
    for p in pending {
        if !state.is_waiting(p.request) {
            continue;
        }
        let results = read_all(state, &p.plan);
        let bytes: usize = results.iter().map(|r| r.bytes).sum();
        let min_bytes = usize::try_from(p.plan.min_bytes.max(0)).unwrap_or(0);
        if bytes >= min_bytes || results.iter().any(|r| r.error) {
            let body = build_response(state, &p.plan, results);
            state.respond(p.request, ResponseKind::Fetch(body));
        } else {
            state.pending_fetches.push(p);
        }
    }
}

/// Answers a parked fetch whose max wait is over, with whatever there is.
pub(crate) fn expire(state: &mut ClusterState, request: RequestId, _now: Instant) {
    let Some(pos) = state
        .pending_fetches
        .iter()
        .position(|p| p.request == request)
    else {
        return;
    };
    let p = state.pending_fetches.remove(pos);
    if !state.is_waiting(p.request) {
        return;
    }
    let results = read_all(state, &p.plan);
    let body = build_response(state, &p.plan, results);
    state.respond(p.request, ResponseKind::Fetch(body));
}

fn requested_partitions(req: &FetchRequest) -> IndexMap<(String, i32), SessionPartition> {
    let mut out = IndexMap::new();
    for t in &req.topics {
        for p in &t.partitions {
            out.insert(
                (t.topic.0.to_string(), p.partition),
                SessionPartition {
                    fetch_offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes,
                    current_leader_epoch: p.current_leader_epoch,
                    last_sent: None,
                },
            );
        }
    }
    out
}

/// Applies KIP-227's rules for session id and epoch and returns what to read.
fn resolve_session(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: &FetchRequest,
    version: i16,
) -> Result<FetchPlan, i16> {
    let requested = requested_partitions(req);
    let (session, parts) = if version < 7 {
        (SessionMode::None, requested)
    } else {
        match (req.session_id, req.session_epoch) {
            (0, -1) => (SessionMode::None, requested),
            (0, 0) => (
                SessionMode::Full(state.fetch_sessions.open(requested.clone())),
                requested,
            ),
            (0, _) => return Err(ResponseError::InvalidFetchSessionEpoch.code()),
            (id, -1) => {
                state.fetch_sessions.close(id);
                (SessionMode::None, requested)
            }
            (id, 0) => {
                state.fetch_sessions.close(id);
                (
                    SessionMode::Full(state.fetch_sessions.open(requested.clone())),
                    requested,
                )
            }
            (id, epoch) => {
                let Some(s) = state.fetch_sessions.get_mut(id) else {
                    return Err(ResponseError::FetchSessionIdNotFound.code());
                };
                if s.next_epoch != epoch {
                    return Err(ResponseError::InvalidFetchSessionEpoch.code());
                }
                s.next_epoch = next_epoch(epoch);
                for (key, p) in requested {
                    let last_sent = s.partitions.get(&key).and_then(|x| x.last_sent);
                    s.partitions
                        .insert(key, SessionPartition { last_sent, ..p });
                }
                for f in &req.forgotten_topics_data {
                    for p in &f.partitions {
                        s.partitions.shift_remove(&(f.topic.0.to_string(), *p));
                    }
                }
                (SessionMode::Incremental(id), s.partitions.clone())
            }
        }
    };
    let partitions = parts
        .into_iter()
        .map(|((topic, partition), p)| PlannedPartition {
            topic,
            partition,
            fetch_offset: p.fetch_offset,
            max_bytes: p.max_bytes,
            current_leader_epoch: p.current_leader_epoch,
        })
        .collect();
    Ok(FetchPlan {
        broker: ctx.broker_id,
        isolation: req.isolation_level,
        max_bytes: req.max_bytes,
        min_bytes: req.min_bytes,
        session,
        partitions,
    })
}

fn failed(partition: i32, code: ResponseError) -> PartitionResult {
    PartitionResult {
        data: PartitionData::default()
            .with_partition_index(partition)
            .with_error_code(code.code())
            .with_high_watermark(-1)
            .with_aborted_transactions(None),
        bytes: 0,
        error: true,
        marks: (-1, -1, -1),
    }
}

fn read_all(state: &ClusterState, plan: &FetchPlan) -> Vec<PartitionResult> {
    let mut left = usize::try_from(plan.max_bytes.max(0)).unwrap_or(0);
    let mut total = 0usize;
    let mut out = Vec::with_capacity(plan.partitions.len());
    for pp in &plan.partitions {
        let Some(p) = state.partition(&pp.topic, pp.partition) else {
            out.push(failed(pp.partition, ResponseError::UnknownTopicOrPartition));
            continue;
        };
        if p.leader != plan.broker || !state.broker_alive(p.leader) {
            out.push(failed(pp.partition, ResponseError::NotLeaderOrFollower));
            continue;
        }
        if pp.current_leader_epoch >= 0 && pp.current_leader_epoch < p.leader_epoch {
            out.push(failed(pp.partition, ResponseError::FencedLeaderEpoch));
            continue;
        }
        if pp.current_leader_epoch > p.leader_epoch {
            out.push(failed(pp.partition, ResponseError::UnknownLeaderEpoch));
            continue;
        }
        let log = &p.log;
        let (hwm, lso, start) = (
            log.high_watermark(),
            log.last_stable_offset(),
            log.log_start_offset(),
        );
        if pp.fetch_offset < start || pp.fetch_offset > hwm {
            let mut r = failed(pp.partition, ResponseError::OffsetOutOfRange);
            r.data = r
                .data
                .with_high_watermark(hwm)
                .with_last_stable_offset(lso)
                .with_log_start_offset(start);
            out.push(r);
            continue;
        }
        let committed = plan.isolation == READ_COMMITTED;
        let upper = if committed { lso } else { hwm };
        let limit = left.min(usize::try_from(pp.max_bytes.max(0)).unwrap_or(0));
        let read = log.read(pp.fetch_offset, upper, limit, total == 0);
        let bytes = read.records.len();
        left = left.saturating_sub(bytes);
        total += bytes;
        let aborted = committed.then(|| {
            log.aborted_between(pp.fetch_offset, read.next_offset)
                .into_iter()
                .map(|a| {
                    AbortedTransaction::default()
                        .with_producer_id(ProducerId(a.producer_id))
                        .with_first_offset(a.first_offset)
                })
                .collect()
        });
        out.push(PartitionResult {
            data: PartitionData::default()
                .with_partition_index(pp.partition)
                .with_high_watermark(hwm)
                .with_last_stable_offset(lso)
                .with_log_start_offset(start)
                .with_aborted_transactions(aborted)
                .with_records(Some(read.records)),
            bytes,
            error: false,
            marks: (hwm, lso, start),
        });
    }
    out
}

fn build_response(
    state: &mut ClusterState,
    plan: &FetchPlan,
    results: Vec<PartitionResult>,
) -> FetchResponse {
    let session_id = match plan.session {
        SessionMode::None => 0,
        SessionMode::Full(id) | SessionMode::Incremental(id) => id,
    };
    let mut session = match plan.session {
        SessionMode::None => None,
        SessionMode::Full(id) | SessionMode::Incremental(id) => state.fetch_sessions.get_mut(id),
    };
    let incremental = matches!(plan.session, SessionMode::Incremental(_));
    let mut topics: IndexMap<String, Vec<PartitionData>> = IndexMap::new();
    for (pp, r) in plan.partitions.iter().zip(results) {
        let key = (pp.topic.clone(), pp.partition);
        let cached = session
            .as_deref_mut()
            .and_then(|s| s.partitions.get_mut(&key));
        let changed =
            r.error || r.bytes > 0 || cached.as_ref().is_none_or(|c| c.last_sent != Some(r.marks));
        if let Some(c) = cached {
            c.last_sent = Some(r.marks);
        }
        if incremental
            && r.bytes > 0
            && let Some(s) = session.as_deref_mut()
            && let Some(c) = s.partitions.shift_remove(&key)
        {
            // Kafka's `IncrementalFetchContext`: a partition that returned
            // records moves to the end of the session, so the next fetch's
            // byte budget goes to the others first.
            s.partitions.insert(key.clone(), c);
        }
        if incremental && !changed {
            continue;
        }
        topics.entry(pp.topic.clone()).or_default().push(r.data);
    }
    let responses = topics
        .into_iter()
        .map(|(name, partitions)| {
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect();
    FetchResponse::default()
        .with_session_id(session_id)
        .with_responses(responses)
}
