//! Produce: appends batches to partition logs, with the idempotent and
//! transactional producer checks.

use tracing::debug;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::produce_request::PartitionProduceData;
use weir_protocol::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use weir_protocol::kafka_protocol::messages::{ProduceRequest, ProduceResponse, ResponseKind};
use weir_protocol::records::{DecodeOptions, decode_batch, split_batches};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::cluster::topic_configs::is_compacted;
use crate::coordinator::driver::flush;
use crate::log::AppendError;

/// Versions 3 (the first with record batch v2) to 12: v10 adds leader
/// hints (KIP-951; left empty: the testkit's errors send clients to
/// Metadata), v11 `TRANSACTION_ABORTABLE`, v12 transaction version 2 (a
/// transactional batch's partition joins the transaction implicitly). v13
/// names topics by id and is not implemented.
pub const VERSIONS: (i16, i16) = (3, 12);

/// Kafka's default `max.message.bytes`: the largest batch a topic accepts.
const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_048_588;

/// Appends every partition's batches and answers per partition; with
/// acks=0 nothing is answered.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: ProduceRequest,
    version: i16,
) -> Reply {
    let acks = req.acks;
    let transactional_id = req.transactional_id.as_ref().map(|t| t.0.to_string());
    let mut responses = Vec::with_capacity(req.topic_data.len());
    let mut appended_any = false;
    let mut failed_any = false;
    for topic in req.topic_data {
        let name = topic.name.0.to_string();
        let partition_responses = topic
            .partition_data
            .into_iter()
            .map(|p| {
                let r = produce_partition(
                    state,
                    ctx,
                    &name,
                    p,
                    acks,
                    transactional_id.as_deref(),
                    version,
                );
                appended_any |= r.error_code == 0;
                failed_any |= r.error_code != 0;
                r
            })
            .collect();
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_partition_responses(partition_responses),
        );
    }
    if appended_any {
        super::fetch::wake_waiting(state, ctx.now);
    }
    if acks == 0 {
        // Like Kafka: an acks=0 producer hears of an error only through a
        // closed connection, which makes it refresh its metadata.
        return if failed_any {
            Reply::Close
        } else {
            Reply::NoResponse
        };
    }
    Reply::Now(ResponseKind::Produce(
        ProduceResponse::default().with_responses(responses),
    ))
}

fn error(index: i32, code: i16, message: &str) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code)
        .with_base_offset(-1)
        .with_error_message(Some(message.to_owned().into()))
}

fn produce_partition(
    state: &mut ClusterState,
    ctx: &RequestContext,
    topic: &str,
    data: PartitionProduceData,
    acks: i16,
    transactional_id: Option<&str>,
    version: i16,
) -> PartitionProduceResponse {
    let transactional = transactional_id.is_some();
    let index = data.index;
    if !matches!(acks, -1..=1) {
        return error(
            index,
            ResponseError::InvalidRequiredAcks.code(),
            "acks must be -1, 0 or 1",
        );
    }
    let Some(partition) = state.partition(topic, index) else {
        return error(
            index,
            ResponseError::UnknownTopicOrPartition.code(),
            "unknown topic or partition",
        );
    };
    if partition.leader != ctx.broker_id {
        return error(
            index,
            ResponseError::NotLeaderOrFollower.code(),
            "this broker is not the leader",
        );
    }
    let leader_epoch = partition.leader_epoch;
    let Some(records) = data.records else {
        return error(index, ResponseError::InvalidRecord.code(), "no records");
    };
    let batches = match split_batches(&records) {
        Ok(b) if !b.is_empty() => b,
        Ok(_) => {
            return error(
                index,
                ResponseError::InvalidRecord.code(),
                "no record batch",
            );
        }
        Err(e) => {
            debug!(topic, partition = index, error = %e, "corrupt produce");
            return error(index, ResponseError::CorruptMessage.code(), &e.to_string());
        }
    };
    for (h, _) in &batches {
        if h.record_count == 0 {
            return error(
                index,
                ResponseError::InvalidRecord.code(),
                "a produced batch must hold records",
            );
        }
        if h.is_transactional() != transactional {
            // A transactional batch needs a transactional id in the request, and vice versa.
            return error(
                index,
                ResponseError::InvalidRecord.code(),
                "transactional bit and transactional id disagree",
            );
        }
        if h.is_transactional() && state.config.transaction_partition_verification {
            // Kafka's leader verifies the partition with the transaction
            // coordinator before appending (KIP-890): a fenced epoch is
            // INVALID_PRODUCER_EPOCH, like the partition's own epoch check.
            let tid = transactional_id.unwrap_or_default();
            let mut refused =
                state
                    .txns
                    .produce_error(tid, h.producer_id, h.producer_epoch, topic, index);
            let not_in_txn = matches!(
                refused,
                Some(ResponseError::InvalidTxnState | ResponseError::NotEnoughReplicas)
            );
            if not_in_txn && version >= 12 {
                // Transaction version 2: the leader adds the partition to
                // the transaction for the client (AddPartitionsToTxn v5).
                refused = state
                    .txns
                    .add_partition_implicitly(
                        tid,
                        h.producer_id,
                        h.producer_epoch,
                        (topic.to_owned(), index),
                        ctx.now,
                    )
                    .err()
                    .map(|e| match e {
                        ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
                        // Kafka 4.4 passes this one on to the producer as it
                        // is (seen on a three-node cluster).
                        e => e,
                    });
                flush(state);
            }
            if let Some(e) = refused {
                let message = match e {
                    ResponseError::InvalidProducerEpoch => {
                        "the producer's epoch is not the transactional id's current one (fenced)"
                    }
                    ResponseError::InvalidProducerIdMapping => {
                        "the transactional id has another producer id"
                    }
                    ResponseError::InvalidTxnState => {
                        "the partition was not added to the producer's transaction"
                    }
                    _ => "the transaction is completing",
                };
                return error(index, e.code(), message);
            }
        }
    }
    let max_message_bytes = state
        .topics
        .get(topic)
        .and_then(|t| t.configs.get("max.message.bytes"))
        .map_or(Some(DEFAULT_MAX_MESSAGE_BYTES), |v| v.parse::<usize>().ok())
        .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES);
    if batches
        .iter()
        .any(|(_, bytes)| bytes.len() > max_message_bytes)
    {
        return error(
            index,
            ResponseError::MessageTooLarge.code(),
            &format!("a batch is larger than max.message.bytes={max_message_bytes}"),
        );
    }
    let compacted = state
        .topics
        .get(topic)
        .is_some_and(|t| is_compacted(&t.configs));
    if compacted && batches.iter().any(|(_, bytes)| has_null_key(bytes)) {
        return error(
            index,
            ResponseError::InvalidRecord.code(),
            "Compacted topic cannot accept message without key",
        );
    }
    let Some(partition) = state.partition_mut(topic, index) else {
        return error(
            index,
            ResponseError::UnknownTopicOrPartition.code(),
            "unknown topic or partition",
        );
    };
    match partition.log.append_produced(batches, leader_epoch) {
        Ok(appended) => {
            if appended.duplicate {
                debug!(
                    topic,
                    partition = index,
                    offset = appended.base_offset,
                    "duplicate batch acknowledged"
                );
            }
            PartitionProduceResponse::default()
                .with_index(index)
                .with_base_offset(appended.base_offset)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(partition.log.log_start_offset())
        }
        // Kafka answers a stale epoch on Produce with INVALID_PRODUCER_EPOCH
        // at every version (KAFKA-10687); PRODUCER_FENCED is for the
        // transaction coordinator's APIs.
        Err(AppendError::StaleEpoch) => error(
            index,
            ResponseError::InvalidProducerEpoch.code(),
            "the producer's epoch is older than the current one",
        ),
        Err(AppendError::OutOfOrderSequence) => error(
            index,
            ResponseError::OutOfOrderSequenceNumber.code(),
            "out of order sequence number",
        ),
        Err(AppendError::ControlBatchFromClient) => error(
            index,
            ResponseError::InvalidRecord.code(),
            "clients may not write control batches",
        ),
    }
}

/// Whether a batch holds a record without a key (or cannot be decoded,
/// which a compacted topic must refuse just the same).
fn has_null_key(batch: &bytes::Bytes) -> bool {
    match decode_batch(batch, &DecodeOptions::default()) {
        Ok(b) => b.records.iter().any(|r| r.key.is_none()),
        Err(_) => true,
    }
}
