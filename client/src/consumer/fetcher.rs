//! Fetch requests and what their responses do to the consumer's state.

use std::collections::{BTreeMap, HashSet};
use tokio::time::Instant;

use indexmap::IndexMap;
use weir_protocol::kafka_protocol::messages::fetch_request::{
    FetchPartition, FetchTopic, ForgottenTopic,
};
use weir_protocol::kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_protocol::records::{
    DecodeOptions, DecodedBatches, DecompressionBudget, decode_batches_within,
};
use weir_protocol::{ApiKey, ProtocolError};

use super::fetch_session::{
    FETCH_SESSION_ID_NOT_FOUND, FetchPlan, INVALID_FETCH_SESSION_EPOCH, PartitionFetch,
};
use super::read_committed::{AbortedTransaction, deliverable_into};
use super::{Consumer, ConsumerRecord, Position, SeekTo, TopicPartition};
use crate::cluster::{Backoff, BrokerId, Lane};
use crate::config::consumer::AutoOffsetReset;
use crate::kerror::{KafkaCode, codes};
use crate::{ClientError, Result};

/// A Fetch on its way: the broker, what the session planned, the outcome.
pub(super) struct InFlightFetch {
    broker: BrokerId,
    plan: FetchPlan<TopicPartition>,
    result: Result<FetchResponse>,
    /// The records of each partition of the response (indexed like its
    /// topics and their partitions), decoded by the fetch's own task as
    /// soon as the response arrived: decoding runs beside the
    /// application's processing instead of inside its `poll`. `None` for
    /// a partition that was not decoded (an error, no records, not asked
    /// for).
    decoded: Vec<Vec<Option<std::result::Result<DecodedBatches, ProtocolError>>>>,
}

/// Decodes the records of every partition of a successful `response` that
/// `plan` asked for, under one budget for the whole response (see
/// [`decompression_budget`]).
fn decode_response(
    response: &FetchResponse,
    plan: &FetchPlan<TopicPartition>,
    decode: &DecodeOptions,
    budget_limit: usize,
) -> Vec<Vec<Option<std::result::Result<DecodedBatches, ProtocolError>>>> {
    if response.error_code != 0 {
        return Vec::new();
    }
    let mut budget = DecompressionBudget::new(budget_limit);
    response
        .responses
        .iter()
        .map(|topic| {
            topic
                .partitions
                .iter()
                .map(|p| {
                    // Every partition the session wants, sent in this
                    // request or not: an incremental session's response
                    // carries partitions the request left out.
                    let tp = TopicPartition::new(topic.topic.0.as_str(), p.partition_index);
                    let asked = plan.fetch_state(&tp).is_some();
                    match (&p.records, p.error_code) {
                        (Some(records), codes::NONE) if asked => {
                            Some(decode_batches_within(records, decode, &mut budget))
                        }
                        _ => None,
                    }
                })
                .collect()
        })
        .collect()
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

fn build_request(consumer: &Consumer, plan: &FetchPlan<TopicPartition>) -> FetchRequest {
    let o = &consumer.options;
    let mut topics: Vec<FetchTopic> = Vec::new();
    for (tp, fetch) in &plan.partitions {
        let partition = FetchPartition::default()
            .with_partition(tp.partition)
            .with_fetch_offset(fetch.fetch_offset)
            .with_current_leader_epoch(fetch.current_leader_epoch)
            .with_partition_max_bytes(fetch.max_bytes);
        match topics.iter_mut().find(|t| t.topic.0.as_str() == tp.topic) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(topic_name(&tp.topic))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let mut forgotten: Vec<ForgottenTopic> = Vec::new();
    for tp in &plan.forgotten {
        match forgotten
            .iter_mut()
            .find(|t| t.topic.0.as_str() == tp.topic)
        {
            Some(t) => t.partitions.push(tp.partition),
            None => forgotten.push(
                ForgottenTopic::default()
                    .with_topic(topic_name(&tp.topic))
                    .with_partitions(vec![tp.partition]),
            ),
        }
    }
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(i32::try_from(o.fetch_max_wait.as_millis()).unwrap_or(i32::MAX))
        .with_min_bytes(o.fetch_min_bytes)
        .with_max_bytes(o.fetch_max_bytes)
        .with_isolation_level(o.isolation_level.wire_value())
        .with_session_id(plan.session_id)
        .with_session_epoch(plan.epoch)
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten)
}

impl Consumer {
    /// Sends a Fetch to every leader that has fetchable partitions and no
    /// Fetch in flight, unless the prefetch buffer is full.
    pub(super) async fn start_fetches(&mut self) {
        if self.buffer.bytes() >= self.options.max_prefetch_bytes {
            return;
        }
        let mut metadata = self.cluster.cached_metadata();
        let leaderless: HashSet<&str> = self
            .assignment
            .keys()
            .filter(|tp| {
                metadata
                    .topic(&tp.topic)
                    .and_then(|t| t.partition(tp.partition))
                    .is_none_or(|p| p.leader < 0)
            })
            .map(|tp| tp.topic.as_str())
            .collect();
        if !leaderless.is_empty() {
            let topics: Vec<&str> = leaderless.into_iter().collect();
            match self.cluster.metadata(&topics).await {
                Ok(m) => metadata = m,
                Err(e) => tracing::debug!(error = %e, "metadata for fetching failed"),
            }
        }
        let mut by_leader: BTreeMap<BrokerId, IndexMap<TopicPartition, PartitionFetch>> =
            BTreeMap::new();
        for (tp, position) in &self.assignment {
            let Position::At(offset) = position else {
                continue;
            };
            if self.paused.contains(tp) {
                continue;
            }
            let Some(p) = metadata
                .topic(&tp.topic)
                .and_then(|t| t.partition(tp.partition))
            else {
                continue;
            };
            if p.leader < 0 {
                continue;
            }
            by_leader.entry(p.leader).or_default().insert(
                tp.clone(),
                PartitionFetch {
                    fetch_offset: *offset,
                    current_leader_epoch: p.leader_epoch,
                    max_bytes: self.options.max_partition_fetch_bytes,
                },
            );
        }
        let now = Instant::now();
        for (broker, wanted) in by_leader {
            if self.fetching_from.contains(&broker)
                || self
                    .backoff_until
                    .get(&broker)
                    .is_some_and(|(t, _)| *t > now)
            {
                continue;
            }
            let plan = self.sessions.entry(broker).or_default().plan(wanted);
            let request = build_request(self, &plan);
            let cluster = self.cluster.clone();
            let decode = DecodeOptions {
                verify_crc: self.options.check_crcs,
                ..DecodeOptions::default()
            };
            let budget = decompression_budget(
                self.options.fetch_max_bytes,
                self.options.max_partition_fetch_bytes,
            );
            self.fetching_from.insert(broker);
            tracing::trace!(
                broker,
                session = plan.session_id,
                epoch = plan.epoch,
                partitions = plan.partitions.len(),
                "fetch"
            );
            self.in_flight.spawn(async move {
                let result = cluster.request(broker, Lane::Fetch, &request).await;
                let decoded = match &result {
                    Ok(response) => decode_response(response, &plan, &decode, budget),
                    Err(_) => Vec::new(),
                };
                InFlightFetch {
                    broker,
                    plan,
                    result,
                    decoded,
                }
            });
        }
    }

    fn back_off(&mut self, broker: BrokerId) {
        let config = self.cluster.config();
        let backoff = Backoff::new(config.retry_backoff, config.retry_backoff_max);
        let failures = self.backoff_until.get(&broker).map_or(0, |(_, n)| *n) + 1;
        self.backoff_until
            .insert(broker, (Instant::now() + backoff.delay(failures), failures));
    }

    /// Applies one Fetch outcome: session bookkeeping, records into the
    /// buffer, positions forward, errors handled or returned.
    pub(super) fn handle_fetch(&mut self, fetch: InFlightFetch) -> Result<()> {
        let InFlightFetch {
            broker,
            plan,
            result,
            mut decoded,
        } = fetch;
        self.fetching_from.remove(&broker);
        let session = self.sessions.entry(broker).or_default();
        let response = match result {
            Ok(r) => r,
            Err(e) => {
                session.reset();
                tracing::debug!(broker, error = %e, "fetch failed");
                if !e.is_retriable() && !e.is_network() {
                    return Err(e);
                }
                if e.needs_metadata_refresh() {
                    self.cluster.invalidate();
                }
                self.back_off(broker);
                return Ok(());
            }
        };
        if response.error_code != 0 {
            session.on_response(plan, response.error_code, response.session_id);
            let code = KafkaCode::from_code(response.error_code);
            tracing::debug!(broker, error = %code, "fetch session error; starting a new session");
            if matches!(
                response.error_code,
                FETCH_SESSION_ID_NOT_FOUND | INVALID_FETCH_SESSION_EPOCH
            ) {
                return Ok(());
            }
            if !code.retriable {
                return Err(
                    ClientError::server(response.error_code, ApiKey::Fetch).with_broker(broker)
                );
            }
            self.back_off(broker);
            return Ok(());
        }
        // The broker accepted this request: its session now holds `plan`.
        session.on_response(plan.clone(), 0, response.session_id);
        let expected = |tp: &TopicPartition| plan.fetch_state(tp).map(|f| f.fetch_offset);
        let mut failed = false;
        let mut outcome = Ok(());
        // The response was decoded at once by the fetch's task (Java
        // decompresses lazily, batch by batch): without a cap on all of it,
        // many small compression "bombs", each under the per-batch cap,
        // could exhaust memory. The batches that fit are delivered and the
        // rest fetched again; only a batch bigger than the whole budget is
        // an error.
        for (ti, topic) in response.responses.iter().enumerate() {
            for (pi, p) in topic.partitions.iter().enumerate() {
                let tp = TopicPartition::new(topic.topic.0.as_str(), p.partition_index);
                let Some(fetch_offset) = expected(&tp) else {
                    continue;
                };
                // A seek, pause or reassignment since the request makes
                // this stale.
                if self.assignment.get(&tp) != Some(&Position::At(fetch_offset))
                    || self.paused.contains(&tp)
                {
                    continue;
                }
                match p.error_code {
                    codes::NONE => {
                        let Some(records) = &p.records else { continue };
                        let Some(decoded) = decoded
                            .get_mut(ti)
                            .and_then(|t| t.get_mut(pi))
                            .and_then(Option::take)
                        else {
                            continue;
                        };
                        let decoded = decoded.map_err(|source| {
                                let broker = self
                                    .cluster
                                    .broker_address(broker)
                                    .unwrap_or_else(|_| broker.to_string());
                                match source {
                                    ProtocolError::DecompressionBudgetExceeded { limit, .. } => {
                                        tracing::warn!(%tp, broker, limit, "a record batch decodes past the whole fetch response budget");
                                        ClientError::FetchDecompressionLimit {
                                            broker,
                                            topic: tp.topic.clone(),
                                            partition: tp.partition,
                                            limit,
                                            source,
                                        }
                                    }
                                    source => ClientError::Protocol { broker, source },
                                }
                            })?;
                        if decoded.budget_exhausted && decoded.batches.is_empty() {
                            // Earlier partitions of this response took the
                            // budget: this one is fetched again, from the
                            // same offset, in a later response.
                            tracing::debug!(%tp, fetch_offset, "decode budget used up; fetching again");
                            continue;
                        }
                        let aborted: Vec<AbortedTransaction> = p
                            .aborted_transactions
                            .iter()
                            .flatten()
                            .map(|a| AbortedTransaction {
                                producer_id: a.producer_id.0,
                                first_offset: a.first_offset,
                            })
                            .collect();
                        let mut delivered = Vec::new();
                        let next_offset = deliverable_into(
                            decoded.batches,
                            fetch_offset,
                            self.options.isolation_level,
                            &aborted,
                            &mut delivered,
                            |r| ConsumerRecord {
                                topic: tp.topic.clone(),
                                partition: tp.partition,
                                offset: r.offset,
                                timestamp: r.timestamp,
                                key: r.key,
                                value: r.value,
                                headers: r.headers,
                            },
                        );
                        if let Some(next) = next_offset {
                            if next > fetch_offset {
                                self.positions_moved += 1;
                            }
                            self.assignment
                                .insert(tp.clone(), Position::At(next.max(fetch_offset)));
                        }
                        if !records.is_empty() {
                            // As Java's `movePartitionToEnd`: a partition that
                            // returned data goes to the end of the order, so a
                            // full fetch does not always offer the same
                            // partitions the response's byte budget first
                            // (KIP-74 gives only the first one an oversized
                            // batch).
                            if let Some(position) = self.assignment.shift_remove(&tp) {
                                self.assignment.insert(tp.clone(), position);
                            }
                        }
                        self.buffer.push_run(tp, delivered);
                    }
                    codes::OFFSET_OUT_OF_RANGE => match self.options.auto_offset_reset {
                        AutoOffsetReset::Earliest => {
                            tracing::info!(%tp, fetch_offset, "offset out of range; resetting to earliest");
                            self.positions_moved += 1;
                            self.assignment.insert(tp, Position::Seek(SeekTo::Earliest));
                        }
                        AutoOffsetReset::Latest => {
                            tracing::info!(%tp, fetch_offset, "offset out of range; resetting to latest");
                            self.positions_moved += 1;
                            self.assignment.insert(tp, Position::Seek(SeekTo::Latest));
                        }
                        AutoOffsetReset::None => {
                            outcome = Err(ClientError::OffsetOutOfRange {
                                topic: tp.topic.clone(),
                                partition: tp.partition,
                                offset: fetch_offset,
                            });
                        }
                    },
                    code => {
                        let error = ClientError::check(
                            code,
                            ApiKey::Fetch,
                            Some(&tp.topic),
                            Some(tp.partition),
                        )
                        .err()
                        .map(|e| e.with_broker(broker));
                        let Some(error) = error else { continue };
                        if error.needs_metadata_refresh() {
                            self.cluster.invalidate_topic(&tp.topic);
                        }
                        if error.is_retriable() {
                            tracing::debug!(%tp, %error, "fetch error for a partition; will retry");
                            failed = true;
                        } else {
                            outcome = Err(error);
                        }
                    }
                }
            }
        }
        if failed {
            self.back_off(broker);
        } else {
            self.backoff_until.remove(&broker);
        }
        // Records buffered before an error stay for the next poll.
        outcome
    }
}

/// How many times `fetch.max.bytes` (or `max.partition.fetch.bytes`, if
/// larger) the records of one Fetch response may decode to in all:
/// decompressed bytes plus 104 bytes per decoded `Record`.
pub(crate) const DECOMPRESSED_FETCH_MULTIPLE: usize = 16;

/// What decoding one Fetch response may hold (decompressed bytes and
/// decoded records): [`DECOMPRESSED_FETCH_MULTIPLE`] times the larger of
/// `fetch.max.bytes` and `max.partition.fetch.bytes` (the broker may exceed
/// the first for one batch, KIP-74). With the defaults (50 MiB) that is
/// 800 MiB. The response is decoded at once, not batch by batch as Java's
/// consumer does; when its batches decode to more than this (data that
/// compresses better than 16 to 1, or records under about 6.5 bytes each on
/// the wire), the batches that fit are delivered and the rest fetched
/// again. Only a single batch that decodes to more than the whole budget
/// fails, with [`ClientError::FetchDecompressionLimit`]: raise
/// `fetch.max.bytes` to read it.
pub(crate) fn decompression_budget(fetch_max_bytes: i32, max_partition_fetch_bytes: i32) -> usize {
    let bytes = usize::try_from(fetch_max_bytes.max(max_partition_fetch_bytes)).unwrap_or(0);
    bytes.saturating_mul(DECOMPRESSED_FETCH_MULTIPLE)
}
