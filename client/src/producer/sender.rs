//! The sender task: turns ready batches into Produce requests and their
//! responses into record outcomes.
//!
//! One loop decides what to send, under the state lock and without I/O;
//! each request then runs in a task of its own, so up to
//! `max.in.flight.requests.per.connection` batches per partition are
//! unanswered at once. Responses update the [`SequenceBook`](super::sequence::SequenceBook)
//! and put retriable failures back into the accumulator in sequence order.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use weir_protocol::kafka_protocol::messages::{
    InitProducerIdRequest, ProduceRequest, ProduceResponse, TopicName,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_protocol::records::{BatchOptions, set_producer_state};

use super::accumulator::ProducerBatch;
use super::dispatch::Ticket;
use super::group::GroupShared;
use super::sequence::{DUPLICATE_SEQUENCE_NUMBER, FailureAction};
use super::{Identity, Shared};
use crate::ClientError;
use crate::cluster::{Backoff, BrokerId, Lane};
use crate::config::producer::Acks;
use crate::kerror::KafkaCode;

/// Batches chosen for one Produce request to one broker.
struct Outgoing {
    broker: BrokerId,
    /// This request's turn on the wire to `broker`.
    ticket: Ticket,
    batches: Vec<ProducerBatch>,
    identity: Identity,
    generation: u64,
}

pub(super) async fn run(shared: Arc<Shared>) {
    let config = shared.cluster.config();
    let backoff = Backoff::new(config.retry_backoff, config.retry_backoff_max);
    let mut init_failures = 0u32;
    loop {
        let closed = shared.closed.load(Ordering::Acquire);
        if !shared.lock().identity.valid && shared.transactional_id.is_some() {
            // A fresh InitProducerId here would silently leave the open
            // transaction: only the transaction layer gets a new epoch
            // (after an abort). Until then, queued records fail, which
            // makes the transaction abortable.
            fail_all(&shared, &ClientError::Closed);
            if closed && shared.requests_in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            shared.wake.notified().await;
            continue;
        }
        // As Java's producer, take a new producer id only once no request
        // is unanswered: an answer still on its way decides whether its
        // batch was written, which a new id would make unknowable.
        let in_flight = shared.requests_in_flight.load(Ordering::Acquire);
        if !shared.lock().identity.valid && in_flight > 0 {
            tracing::debug!(
                in_flight,
                "producer id reset waits for the requests in flight"
            );
        } else if !shared.lock().identity.valid {
            match init_producer_id(&shared).await {
                Ok(identity) => {
                    init_failures = 0;
                    install_identity(&shared, identity);
                    tracing::debug!(
                        producer_id = identity.producer_id,
                        epoch = identity.epoch,
                        "producer id acquired"
                    );
                }
                Err(e) => {
                    init_failures += 1;
                    tracing::warn!(error = %e, attempt = init_failures, "InitProducerId failed");
                    // Nothing can be sent without a producer id: don't let
                    // callers wait forever on a permanent failure.
                    if !e.is_retriable() || closed {
                        fail_all(&shared, &e);
                    }
                    if closed && shared.lock().acc.is_empty() {
                        return;
                    }
                    tokio::time::sleep(backoff.delay(init_failures)).await;
                    continue;
                }
            }
        }

        let now = Instant::now();
        let flushing = closed || shared.flushing.load(Ordering::Acquire) > 0;
        let (outgoing, next_check, missing) = collect(&shared, now, flushing);
        let leaderless = !missing.is_empty();
        if leaderless {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let topics: Vec<&str> = missing.iter().map(String::as_str).collect();
                if let Err(e) = shared.cluster.refresh_metadata(&topics).await {
                    tracing::debug!(error = %e, "metadata refresh for produce failed");
                }
                shared.wake.notify_one();
            });
        }
        for request in outgoing {
            shared.requests_in_flight.fetch_add(1, Ordering::AcqRel);
            tokio::spawn(send_request(Arc::clone(&shared), request));
        }
        if closed
            && shared.lock().acc.is_empty()
            && shared.requests_in_flight.load(Ordering::Acquire) == 0
        {
            return;
        }
        let wait = next_check.unwrap_or(now + Duration::from_secs(3600));
        // Without a known leader, look again after the backoff.
        let wait = if leaderless {
            wait.min(now + config.retry_backoff)
        } else {
            wait
        };
        tokio::select! {
            () = shared.wake.notified() => {}
            () = tokio::time::sleep_until(wait) => {}
        }
    }
}

/// Chooses the batches to send now: expires old ones, then takes the first
/// batch of each ready partition whose leader is known and whose sequence
/// rules allow it. Returns the requests, when to look again, and topics
/// whose leaders are unknown.
fn collect(
    shared: &Shared,
    now: Instant,
    flushing: bool,
) -> (Vec<Outgoing>, Option<Instant>, Vec<String>) {
    let options = &shared.options;
    let mut state = shared.lock();
    if let Some(deadline) = now.checked_sub(options.delivery_timeout) {
        for batch in state.acc.expire(deadline) {
            let action = state.book.on_abandoned(&batch.tp, batch.sequence);
            if action == FailureAction::FailAndResetProducer && batch.sequence.is_some() {
                state.identity.valid = false;
            }
            let what = format!(
                "delivery of {} records to {}",
                batch.record_count(),
                batch.tp
            );
            finish(
                shared,
                batch,
                Err(&|| ClientError::Timeout {
                    what: what.clone(),
                    after: options.delivery_timeout,
                    setting: "delivery.timeout.ms",
                }),
            );
        }
    }
    // Batches whose gate closed are never sent, not even once more.
    for batch in state.acc.remove_where(|b| !b.may_send()) {
        close_gated(shared, &mut state, batch);
    }
    if !state.identity.valid {
        return (Vec::new(), None, Vec::new());
    }
    let readiness = state.acc.readiness(now, flushing);
    let metadata = shared.cluster.cached_metadata();
    let mut by_broker: BTreeMap<BrokerId, (usize, Vec<ProducerBatch>)> = BTreeMap::new();
    let mut missing = HashSet::new();
    let mut next_check = readiness.next_check;
    for tp in readiness.ready {
        let leader = metadata
            .topic(&tp.topic)
            .and_then(|t| t.partition(tp.partition))
            .map(|p| p.leader)
            .filter(|&l| l >= 0);
        let Some(leader) = leader else {
            missing.insert(tp.topic.clone());
            continue;
        };
        let Some(front) = state.acc.front(&tp) else {
            continue;
        };
        if !state.book.may_send(&tp, front.sequence) {
            continue;
        }
        let entry = by_broker.entry(leader).or_default();
        if !entry.1.is_empty() && entry.0 + front.size > options.max_request_size {
            // The rest goes in the next request, right after this one.
            next_check = Some(now);
            continue;
        }
        let Some(mut batch) = state.acc.pop(&tp) else {
            continue;
        };
        let count = i32::try_from(batch.record_count()).unwrap_or(i32::MAX);
        batch.sequence = state.book.assign(&tp, batch.sequence, count);
        batch.attempts += 1;
        state.book.on_sent(&tp, batch.sequence);
        entry.0 += batch.size;
        entry.1.push(batch);
        // A request carries one batch per partition: if more wait behind
        // this one, look again at once rather than after the next response,
        // so up to max.in.flight requests per partition are out together.
        if state.acc.front(&tp).is_some() {
            next_check = Some(now);
        }
    }
    let identity = state.identity;
    let generation = state.book.generation();
    let outgoing = by_broker
        .into_iter()
        .map(|(broker, (_, batches))| Outgoing {
            ticket: shared.order.ticket(broker),
            broker,
            batches,
            identity,
            generation,
        })
        .collect();
    (outgoing, next_check, missing.into_iter().collect())
}

/// Encodes a batch for `identity`, reusing the bytes of an earlier attempt
/// when the producer id generation is unchanged.
fn encode(
    shared: &Shared,
    batch: &mut ProducerBatch,
    identity: Identity,
    generation: u64,
) -> Result<bytes::Bytes, String> {
    let idempotent = batch.sequence.is_some();
    if idempotent {
        batch.sent_as = Some((identity.producer_id, identity.epoch));
    }
    let producer_id = if idempotent { identity.producer_id } else { -1 };
    let producer_epoch = if idempotent { identity.epoch } else { -1 };
    let base_sequence = batch.sequence.map_or(-1, |s| s.base);
    let bytes = match (batch.encoded.take(), batch.builder.take()) {
        (Some((g, bytes)), _) if g == generation => bytes,
        // Sent before under another producer id or epoch: the records stay
        // as they were encoded, only the header's identity and CRC change.
        (Some((_, bytes)), _) => {
            let mut again = bytes.to_vec();
            set_producer_state(&mut again, producer_id, producer_epoch, base_sequence)
                .map_err(|e| e.to_string())?;
            bytes::Bytes::from(again)
        }
        (None, Some(mut builder)) => {
            builder.set_options(BatchOptions {
                compression: shared.options.compression,
                producer_id,
                producer_epoch,
                base_sequence,
                transactional: shared.transactional_id.is_some(),
                ..BatchOptions::default()
            });
            builder.build().map_err(|e| e.to_string())?
        }
        (None, None) => return Err("the batch's records are gone".to_owned()),
    };
    batch.encoded = Some((generation, bytes.clone()));
    Ok(bytes)
}

async fn send_request(shared: Arc<Shared>, mut request: Outgoing) {
    let options = &shared.options;
    let mut encoded = Vec::new();
    for mut batch in std::mem::take(&mut request.batches) {
        match encode(&shared, &mut batch, request.identity, request.generation) {
            Ok(bytes) => encoded.push((batch, bytes)),
            Err(message) => {
                tracing::warn!(tp = %batch.tp, message, "batch could not be encoded");
                let topic = batch.tp.topic.clone();
                retry_or_fail(&shared, batch, -1, false, false, &|| {
                    ClientError::RecordTooLarge {
                        topic: topic.clone(),
                        size: 0,
                        limit: i32::MAX as usize,
                        setting: "the record batch format",
                    }
                });
            }
        }
    }
    // Encoding (and compressing) above ran in parallel with other
    // requests; writing waits for this request's turn, and the turn ends
    // only once the frame is queued on the connection (whose writer keeps
    // queue order), not when a first poll happens to return: waiting for
    // the pool, the broker's throttle or room in the queue would otherwise
    // let a later request overtake.
    request.ticket.wait_turn().await;
    // The wait may have been long: a gate is checked once more right
    // before the request is built.
    let encoded = {
        let mut state = shared.lock();
        let (open, closed): (Vec<_>, Vec<_>) = encoded.into_iter().partition(|(b, _)| b.may_send());
        for (batch, _) in closed {
            close_gated(&shared, &mut state, batch);
        }
        open
    };
    let mut topics: Vec<TopicProduceData> = Vec::new();
    let mut sendable = Vec::new();
    for (batch, bytes) in encoded {
        let partition = PartitionProduceData::default()
            .with_index(batch.tp.partition)
            .with_records(Some(bytes));
        match topics
            .iter_mut()
            .find(|t| t.name.0.as_str() == batch.tp.topic)
        {
            Some(t) => t.partition_data.push(partition),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(batch.tp.topic.clone())))
                    .with_partition_data(vec![partition]),
            ),
        }
        sendable.push(batch);
    }
    if !sendable.is_empty() {
        let timeout_ms =
            i32::try_from(shared.cluster.config().request_timeout.as_millis()).unwrap_or(i32::MAX);
        let req = ProduceRequest::default()
            .with_acks(options.acks.wire_value())
            .with_timeout_ms(timeout_ms)
            .with_transactional_id(
                shared
                    .transactional_id
                    .as_deref()
                    .map(|t| StrBytes::from_string(t.to_owned()).into()),
            )
            .with_topic_data(topics);
        let broker = request.broker;
        if options.acks == Acks::None {
            let result = shared
                .cluster
                .send_oneway(broker, Lane::Produce, &req)
                .await;
            drop(request.ticket);
            handle_unanswered(&shared, broker, sendable, result.err(), true);
        } else {
            let queued = shared
                .cluster
                .enqueue_at_most(broker, Lane::Produce, &req, shared.produce_version_cap())
                .await;
            drop(request.ticket);
            // A failure before the frame was queued leaves nothing written;
            // one after it (timeout, lost connection) may follow a write.
            let result = match queued {
                Ok(response) => response.await.map_err(|e| (e, true)),
                Err(e) => Err((e, false)),
            };
            match result {
                Ok(response) => handle_response(&shared, broker, sendable, response),
                Err((e, written)) => handle_unanswered(&shared, broker, sendable, Some(e), written),
            }
        }
    } else {
        // Nothing to write: the turn ends here, in order (dropping the
        // ticket), so that no later request is let through while an
        // earlier one is not yet queued.
        drop(request.ticket);
    }
    shared.requests_in_flight.fetch_sub(1, Ordering::AcqRel);
    shared.wake.notify_one();
}

/// `acks=0` (no response expected) or a request that got no response.
/// `maybe_written`: the request may have reached the broker.
fn handle_unanswered(
    shared: &Shared,
    broker: BrokerId,
    batches: Vec<ProducerBatch>,
    error: Option<ClientError>,
    maybe_written: bool,
) {
    match error {
        None => {
            for batch in batches {
                shared.lock().book.on_acked(&batch.tp, batch.sequence, 0);
                finish(shared, batch, Ok((-1, -1)));
            }
        }
        Some(e) => {
            tracing::debug!(broker, error = %e, "produce request failed");
            if e.needs_metadata_refresh() {
                shared.cluster.invalidate();
            }
            let retriable = e.is_retriable();
            let message = e.to_string();
            for batch in batches {
                let (what, attempts) = (message.clone(), batch.attempts);
                // ClientError is not Clone: each record gets the cause's text.
                retry_or_fail(shared, batch, 0, retriable, maybe_written, &|| {
                    ClientError::RetriesExhausted {
                        what: format!("produce to broker {broker}"),
                        attempts,
                        last: Box::new(ClientError::Io {
                            broker: broker.to_string(),
                            context: "produce request",
                            source: std::io::Error::other(what.clone()),
                        }),
                    }
                });
            }
        }
    }
}

fn handle_response(
    shared: &Shared,
    broker: BrokerId,
    batches: Vec<ProducerBatch>,
    response: ProduceResponse,
) {
    for batch in batches {
        let found = response
            .responses
            .iter()
            .filter(|t| t.name.0.as_str() == batch.tp.topic)
            .flat_map(|t| t.partition_responses.iter())
            .find(|p| p.index == batch.tp.partition);
        let Some(p) = found else {
            let tp = batch.tp.to_string();
            // No answer for this partition: whether it was written is unknown.
            retry_or_fail(shared, batch, 0, true, true, &|| {
                ClientError::MissingInResponse {
                    api: ApiKey::Produce,
                    what: tp.clone(),
                }
            });
            continue;
        };
        let count = i32::try_from(batch.record_count()).unwrap_or(i32::MAX);
        if p.error_code == 0 || p.error_code == DUPLICATE_SEQUENCE_NUMBER {
            shared
                .lock()
                .book
                .on_acked(&batch.tp, batch.sequence, count);
            let base = if p.error_code == 0 { p.base_offset } else { -1 };
            finish(shared, batch, Ok((base, p.log_append_time_ms)));
            continue;
        }
        let code = KafkaCode::from_code(p.error_code);
        let message = p.error_message.as_ref().map(|m| m.as_str().to_owned());
        let tp = batch.tp.clone();
        let error = || ClientError::Server {
            code,
            api: ApiKey::Produce,
            broker: Some(broker),
            topic: Some(tp.topic.clone()),
            partition: Some(tp.partition),
            message: message.clone(),
        };
        if error().needs_metadata_refresh() {
            shared.cluster.invalidate_topic(&tp.topic);
        }
        tracing::debug!(%tp, error = %code, attempt = batch.attempts, "produce failed for a partition");
        let unknown = outcome_unknown(p.error_code);
        // Kafka 4.x answers a transactional Produce v12 (transaction
        // version 2, the partition added implicitly) with
        // CONCURRENT_TRANSACTIONS while the previous transaction's markers
        // are still being written: nothing was appended, so it is retried
        // soon, as the coordinator's own answer is.
        let retriable = code.retriable || concurrent_transactions(shared, p.error_code);
        retry_or_fail(shared, batch, p.error_code, retriable, unknown, &error);
    }
}

/// A transactional producer's batch refused because the transaction's
/// previous markers are still being written.
fn concurrent_transactions(shared: &Shared, code: i16) -> bool {
    code == crate::kerror::codes::CONCURRENT_TRANSACTIONS && shared.transactional_id.is_some()
}

/// How long a batch refused because of a concurrent transaction waits
/// before it is sent again (Java's `ADD_PARTITIONS_RETRY_BACKOFF_MS`).
const CONCURRENT_TRANSACTIONS_BACKOFF: std::time::Duration = std::time::Duration::from_millis(20);

/// Produce errors after which the batch may have been written anyway.
fn outcome_unknown(code: i16) -> bool {
    use crate::kerror::codes;
    matches!(
        code,
        codes::REQUEST_TIMED_OUT
            | codes::NETWORK_EXCEPTION
            | codes::NOT_ENOUGH_REPLICAS_AFTER_APPEND
    )
}

/// Applies the sequence book's verdict on a failed batch. `maybe_written`:
/// this attempt may have been written although it failed.
fn retry_or_fail(
    shared: &Shared,
    mut batch: ProducerBatch,
    code: i16,
    retriable: bool,
    maybe_written: bool,
    error: &dyn Fn() -> ClientError,
) {
    let options = &shared.options;
    let mut state = shared.lock();
    batch.maybe_written |= maybe_written;
    let mut action = state
        .book
        .on_failed(&batch.tp, batch.sequence, code, retriable);
    if action == FailureAction::Retry
        && batch.maybe_written
        && batch
            .sequence
            .is_some_and(|t| t.generation != state.book.generation())
    {
        // Resent under the new producer id it could be written twice.
        drop(state);
        fail_stale(shared, batch);
        return;
    }
    if action == FailureAction::RetryAfterReset && shared.transactional_id.is_some() {
        // The transaction layer decides about epochs (the batch's failure
        // makes the transaction abortable).
        action = FailureAction::FailAndResetProducer;
    }
    let expired = batch.created.elapsed() >= options.delivery_timeout;
    if matches!(
        action,
        FailureAction::Retry | FailureAction::RetryAfterReset
    ) && (batch.attempts > options.retries || expired)
    {
        action = if batch.sequence.is_some() {
            FailureAction::FailAndResetProducer
        } else {
            FailureAction::Fail
        };
    }
    match action {
        FailureAction::Retry => {
            let config = shared.cluster.config();
            let delay = if concurrent_transactions(shared, code) {
                CONCURRENT_TRANSACTIONS_BACKOFF
            } else {
                Backoff::new(config.retry_backoff, config.retry_backoff_max).delay(batch.attempts)
            };
            batch.retry_at = Some(Instant::now() + delay);
            state.acc.requeue(batch);
        }
        FailureAction::Fail => {
            drop(state);
            finish(shared, batch, Err(error));
        }
        FailureAction::RetryAfterReset => {
            // Not written: the batch waits in the queue for the new epoch,
            // where it gets a fresh sequence.
            tracing::info!(
                tp = %batch.tp,
                "the broker lost the producer's state; bumping the epoch and retrying"
            );
            state.identity.valid = false;
            let config = shared.cluster.config();
            let delay =
                Backoff::new(config.retry_backoff, config.retry_backoff_max).delay(batch.attempts);
            batch.retry_at = Some(Instant::now() + delay);
            state.acc.requeue(batch);
        }
        FailureAction::FailAndResetProducer => {
            // The broker's sequence for this partition no longer matches
            // ours: a new producer id starts every partition at 0.
            state.identity.valid = false;
            drop(state);
            finish(shared, batch, Err(error));
        }
    }
}

/// Fails, unsent, a batch whose [`SendGate`](super::SendGate) closed.
///
/// Sequences: a batch never sent has no sequence of the current producer
/// id generation (sequences are assigned at the first send), so dropping
/// it leaves no gap and nothing else changes. A batch that already has one
/// (a retry, or a first send whose gate closed while it waited for its
/// turn on the wire) leaves a gap: later batches of its partition are
/// numbered after it, some maybe in flight, and the broker would refuse
/// them as out of order, and an earlier attempt of the batch itself may
/// have been written. As Java's producer does after a batch expires, and as
/// this sender does on `delivery.timeout.ms`, the producer then takes a new
/// epoch (every partition's sequences start at 0 again; batches of unknown
/// outcome fail as `ProducerIdChanged`). Rewinding just this partition's
/// sequence instead would be wrong as soon as a later batch is in flight,
/// and failing only the partition's later batches would still leave the
/// broker expecting the dropped sequence. A transactional producer gets
/// no new epoch from the sender: its transaction fails (becomes abortable).
fn close_gated(shared: &Shared, state: &mut super::State, batch: ProducerBatch) {
    let action = state.book.on_abandoned(&batch.tp, batch.sequence);
    let gap = action == FailureAction::FailAndResetProducer && batch.sequence.is_some();
    if gap {
        state.identity.valid = false;
    }
    let (topic, partition, records, maybe_written) = (
        batch.tp.topic.clone(),
        batch.tp.partition,
        batch.record_count(),
        batch.maybe_written,
    );
    tracing::info!(
        tp = %batch.tp,
        records,
        attempts = batch.attempts,
        maybe_written,
        reset_producer_id = gap,
        "send gate closed: batch dropped unsent"
    );
    finish(
        shared,
        batch,
        Err(&|| ClientError::SendGateClosed {
            topic: topic.clone(),
            partition,
            records,
            maybe_written,
        }),
    );
}

/// Completes every record of `batch`: offsets `base + i`, or the error.
fn finish(
    shared: &Shared,
    batch: ProducerBatch,
    outcome: Result<(i64, i64), &dyn Fn() -> ClientError>,
) {
    let n = batch.record_count();
    let tp = batch.tp;
    match outcome {
        Ok((base, append_time)) => {
            // Tallies are settled once per batch, not per record (a lock and
            // a partition lookup per record showed in the producer's
            // profile): per tally, its records here and the last offset.
            let mut tallies: Vec<(Arc<GroupShared>, usize, i64)> = Vec::new();
            for (i, mut delivery) in batch.deliveries.into_iter().enumerate() {
                let offset = if base < 0 { -1 } else { base + i as i64 };
                for group in delivery.take_groups().into_iter().flatten() {
                    match tallies.iter_mut().find(|(g, ..)| Arc::ptr_eq(g, &group)) {
                        Some((_, count, last)) => {
                            *count += 1;
                            *last = (*last).max(offset);
                        }
                        None => tallies.push((group, 1, offset)),
                    }
                }
                delivery.written(&tp, offset, append_time);
            }
            for (group, count, last) in tallies {
                group.written_many(&tp, last, count);
            }
        }
        Err(make) => {
            for delivery in batch.deliveries {
                delivery.failed(make);
            }
        }
    }
    // Dropping the batch returns its buffer.memory.
    drop(batch.memory);
    shared.records_done(n);
}

/// Installs a new producer id and epoch: every partition's sequences
/// start at 0 again, and queued batches that may already have been
/// written under the old id fail (see [`ClientError::ProducerIdChanged`]).
pub(super) fn install_identity(shared: &Shared, identity: Identity) {
    let stale = {
        let mut state = shared.lock();
        state.identity = identity;
        state.book.reset();
        let generation = state.book.generation();
        state.acc.remove_where(|b| {
            b.maybe_written && b.sequence.is_some_and(|t| t.generation != generation)
        })
    };
    for batch in stale {
        fail_stale(shared, batch);
    }
}

/// Fails a batch that may have been written under a producer id that is
/// no longer the producer's.
fn fail_stale(shared: &Shared, batch: ProducerBatch) {
    let (producer_id, epoch) = batch.sent_as.unwrap_or((-1, -1));
    let (topic, partition, records) = (
        batch.tp.topic.clone(),
        batch.tp.partition,
        batch.record_count(),
    );
    tracing::warn!(
        %batch.tp,
        records,
        producer_id,
        epoch,
        "batch of unknown outcome not resent: the producer id changed"
    );
    finish(
        shared,
        batch,
        Err(&|| ClientError::ProducerIdChanged {
            topic: topic.clone(),
            partition,
            records,
            producer_id,
            epoch,
        }),
    );
}

/// Fails every queued batch with `error` (when no producer id can be had).
fn fail_all(shared: &Shared, error: &ClientError) {
    let batches = shared.lock().acc.drain_all();
    let message = error.to_string();
    for batch in batches {
        finish(
            shared,
            batch,
            Err(&|| ClientError::RetriesExhausted {
                what: format!("InitProducerId: {message}"),
                attempts: 1,
                last: Box::new(ClientError::Closed),
            }),
        );
    }
}

/// InitProducerId without a transactional id. A producer that already
/// has an id names it with its epoch (KIP-360, InitProducerId v3+), as
/// Java's does when it bumps the epoch after lost producer state.
async fn init_producer_id(shared: &Shared) -> crate::Result<Identity> {
    let cluster = &shared.cluster;
    let current = {
        let identity = shared.lock().identity;
        (identity.producer_id >= 0 && identity.epoch >= 0)
            .then_some((identity.producer_id, identity.epoch))
    };
    let request = |with_current: bool| {
        let (pid, epoch) = current.filter(|_| with_current).unwrap_or((-1, -1));
        InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(pid.into())
            .with_producer_epoch(epoch)
    };
    cluster
        .retry("InitProducerId", || async {
            let response = match current {
                None => cluster.request_any(Lane::Produce, &request(false)).await?,
                Some(_) => {
                    // As `request_any`, but the request's form depends on
                    // the version the chosen broker speaks.
                    let mut last = ClientError::Closed;
                    let mut answered = None;
                    for broker in cluster.any_broker_candidates() {
                        let attempt = async {
                            let conn = cluster.connection(broker, Lane::Produce).await?;
                            let kip360 = conn.version_for::<InitProducerIdRequest>()? >= 3;
                            drop(conn);
                            cluster
                                .request(broker, Lane::Produce, &request(kip360))
                                .await
                        };
                        match attempt.await {
                            Err(e) if e.is_network() => last = e,
                            other => {
                                answered = Some(other?);
                                break;
                            }
                        }
                    }
                    answered.ok_or(last)?
                }
            };
            ClientError::check(response.error_code, ApiKey::InitProducerId, None, None)?;
            Ok(Identity {
                producer_id: response.producer_id.0,
                epoch: response.producer_epoch,
                valid: true,
            })
        })
        .await
}
