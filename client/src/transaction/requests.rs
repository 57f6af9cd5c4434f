//! The transaction coordinator's and group coordinator's requests, each
//! retried on the errors Kafka retries (`CONCURRENT_TRANSACTIONS`, a
//! coordinator that moved or is loading, a lost connection).

use std::collections::BTreeMap;
use std::future::Future;
use tokio::time::Instant;

use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use weir_protocol::kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use weir_protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::errors::{TransactionErrorClass, classify, coordinator_moved};
use super::offsets::GroupMetadata;
use crate::cluster::{Backoff, BrokerId, CoordinatorKind, Lane};
use crate::kerror::codes;
use crate::producer::TopicPartition;
use crate::{ClientError, Cluster, Result};

/// Who the requests speak for.
#[derive(Debug, Clone)]
pub(crate) struct TxnIdentity {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
}

impl TxnIdentity {
    fn wire_id(&self) -> TransactionalId {
        TransactionalId(StrBytes::from_string(self.transactional_id.clone()))
    }
}

/// The retry delay after `CONCURRENT_TRANSACTIONS` (Java's
/// `ADD_PARTITIONS_RETRY_BACKOFF_MS`).
const CONCURRENT_TRANSACTIONS_BACKOFF: std::time::Duration = std::time::Duration::from_millis(20);

/// Runs `op` against the current coordinator for (`kind`, `key`) until it
/// succeeds, fails with a non-retriable error, or `default.api.timeout.ms`
/// runs out.
async fn with_retries<T, F, Fut>(
    cluster: &Cluster,
    kind: CoordinatorKind,
    key: &str,
    what: &'static str,
    mut op: F,
) -> Result<T>
where
    F: FnMut(BrokerId) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let config = cluster.config();
    let backoff = Backoff::new(config.retry_backoff, config.retry_backoff_max);
    let deadline = Instant::now() + config.default_api_timeout;
    let mut failures = 0u32;
    loop {
        let result = match cluster.find_coordinator(kind, key).await {
            Ok(broker) => op(broker).await,
            Err(e) => Err(e),
        };
        let err = match result {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if classify(&err) != TransactionErrorClass::Retriable {
            return Err(err);
        }
        if coordinator_moved(&err) {
            cluster.invalidate_coordinator(kind, key);
        }
        failures += 1;
        // CONCURRENT_TRANSACTIONS mostly means the coordinator is still
        // writing the previous transaction's markers, which takes a few
        // milliseconds on Kafka (EndTxn is answered before they are
        // written): retry soon, as Java's producer does for the first
        // AddPartitionsToTxn after a commit, rather than after
        // `retry.backoff.ms` doubling.
        let delay = if err.kafka_code().map(|c| c.code) == Some(codes::CONCURRENT_TRANSACTIONS) {
            CONCURRENT_TRANSACTIONS_BACKOFF
        } else {
            backoff.delay(failures)
        };
        if Instant::now() + delay >= deadline {
            return Err(ClientError::RetriesExhausted {
                what: format!("{what} for {key}"),
                attempts: failures,
                last: Box::new(err),
            });
        }
        tracing::debug!(what, key, attempt = failures, error = %err, "retrying");
        tokio::time::sleep(delay).await;
    }
}

/// What InitProducerId gave.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewEpoch {
    pub producer_id: i64,
    pub epoch: i16,
    /// Whether the coordinator runs transaction version 2 (KIP-890).
    pub transaction_v2: bool,
}

/// The highest EndTxn and TxnOffsetCommit version of a transaction of
/// transaction version 1: v5 means version 2 to the coordinator (it bumps
/// the epoch at every EndTxn and adds partitions implicitly), so a
/// transaction that added its partitions itself must not send it.
const LAST_VERSION_BEFORE_TV2: i16 = 4;

fn cap_for(transaction_v2: bool) -> Option<i16> {
    (!transaction_v2).then_some(LAST_VERSION_BEFORE_TV2)
}

/// InitProducerId for `transactional_id`: a new epoch, which fences every
/// older instance and aborts (or completes) the transaction it left open.
///
/// `current` is the producer id and epoch this instance already has, for
/// a bump of its own epoch (KIP-360, InitProducerId v3+): if another
/// instance got a newer epoch meanwhile, the coordinator answers
/// `PRODUCER_FENCED` instead of fencing that instance. `None` for the
/// first InitProducerId of an instance.
pub(crate) async fn init_producer_id(
    cluster: &Cluster,
    transactional_id: &str,
    timeout_ms: i32,
    current: Option<(i64, i16)>,
) -> Result<NewEpoch> {
    let request = |(pid, epoch): (i64, i16)| {
        InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
                transactional_id.to_owned(),
            ))))
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
    };
    with_retries(
        cluster,
        CoordinatorKind::Transaction,
        transactional_id,
        "InitProducerId",
        |broker| {
            let request = &request;
            async move {
                let named = match current {
                    Some(current) => {
                        let conn = cluster.connection(broker, Lane::Transaction).await?;
                        let kip360 = conn.version_for::<InitProducerIdRequest>()? >= 3;
                        drop(conn);
                        if !kip360 {
                            tracing::debug!(
                                transactional_id,
                                "the coordinator predates KIP-360: InitProducerId cannot name the current epoch"
                            );
                        }
                        kip360.then_some(current)
                    }
                    None => None,
                };
                let request = request(named.unwrap_or((-1, -1)));
                let answer = cluster
                    .request_at_most(broker, Lane::Transaction, &request, None)
                    .await?;
                let r = answer.response;
                ClientError::check(r.error_code, ApiKey::InitProducerId, None, None)?;
                Ok(NewEpoch {
                    producer_id: r.producer_id.0,
                    epoch: r.producer_epoch,
                    transaction_v2: answer.transaction_v2,
                })
            }
        },
    )
    .await
}

/// AddPartitionsToTxn for all of `partitions` in one request.
pub(crate) async fn add_partitions(
    cluster: &Cluster,
    id: &TxnIdentity,
    partitions: &[TopicPartition],
) -> Result<()> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    let topics: Vec<AddPartitionsToTxnTopic> = by_topic
        .into_iter()
        .map(|(topic, parts)| {
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(parts)
        })
        .collect();
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(id.wire_id())
        .with_v3_and_below_producer_id(ProducerId(id.producer_id))
        .with_v3_and_below_producer_epoch(id.epoch)
        .with_v3_and_below_topics(topics);
    with_retries(
        cluster,
        CoordinatorKind::Transaction,
        &id.transactional_id,
        "AddPartitionsToTxn",
        |broker| {
            let request = &request;
            async move {
                let r = cluster.request(broker, Lane::Transaction, request).await?;
                ClientError::check(r.error_code, ApiKey::AddPartitionsToTxn, None, None)?;
                // OPERATION_NOT_ATTEMPTED only says another partition failed:
                // report the one that did.
                let mut first: Option<ClientError> = None;
                for t in &r.results_by_topic_v3_and_below {
                    for p in &t.results_by_partition {
                        if let Err(e) = ClientError::check(
                            p.partition_error_code,
                            ApiKey::AddPartitionsToTxn,
                            Some(&t.name.0),
                            Some(p.partition_index),
                        ) {
                            let not_attempted =
                                p.partition_error_code == codes::OPERATION_NOT_ATTEMPTED;
                            if first.is_none() || !not_attempted {
                                first = Some(e);
                            }
                        }
                    }
                }
                first.map_or(Ok(()), Err)
            }
        },
    )
    .await
}

/// AddOffsetsToTxn: puts `group`'s offsets partition into the transaction.
pub(crate) async fn add_offsets(cluster: &Cluster, id: &TxnIdentity, group: &str) -> Result<()> {
    let request = AddOffsetsToTxnRequest::default()
        .with_transactional_id(id.wire_id())
        .with_producer_id(ProducerId(id.producer_id))
        .with_producer_epoch(id.epoch)
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())));
    with_retries(
        cluster,
        CoordinatorKind::Transaction,
        &id.transactional_id,
        "AddOffsetsToTxn",
        |broker| {
            let request = &request;
            async move {
                let r = cluster.request(broker, Lane::Transaction, request).await?;
                ClientError::check(r.error_code, ApiKey::AddOffsetsToTxn, Some(group), None)
            }
        },
    )
    .await
}

/// TxnOffsetCommit to the group coordinator, carrying the group metadata so
/// that the coordinator refuses a zombie (KIP-447).
///
/// Under transaction version 2 (`transaction_v2`) it goes at v5 and the
/// coordinator puts the group's offsets partition into the transaction
/// itself (no AddOffsetsToTxn); otherwise at most v4.
pub(crate) async fn txn_offset_commit(
    cluster: &Cluster,
    id: &TxnIdentity,
    group: &GroupMetadata,
    offsets: &BTreeMap<TopicPartition, i64>,
    transaction_v2: bool,
) -> Result<()> {
    let mut by_topic: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, offset) in offsets {
        by_topic.entry(&tp.topic).or_default().push(
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_static_str(""))),
        );
    }
    let topics: Vec<TxnOffsetCommitRequestTopic> = by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(partitions)
        })
        .collect();
    let request = TxnOffsetCommitRequest::default()
        .with_transactional_id(id.wire_id())
        .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
        .with_producer_id(ProducerId(id.producer_id))
        .with_producer_epoch(id.epoch)
        .with_generation_id(group.generation_id)
        .with_member_id(StrBytes::from_string(group.member_id.clone()))
        .with_group_instance_id(group.group_instance_id.clone().map(StrBytes::from_string))
        .with_topics(topics);
    with_retries(
        cluster,
        CoordinatorKind::Group,
        &group.group_id,
        "TxnOffsetCommit",
        |broker| {
            let request = &request;
            async move {
                let r = cluster
                    .request_at_most(broker, Lane::Transaction, request, cap_for(transaction_v2))
                    .await?
                    .response;
                for t in &r.topics {
                    for p in &t.partitions {
                        ClientError::check(
                            p.error_code,
                            ApiKey::TxnOffsetCommit,
                            Some(&t.name.0),
                            Some(p.partition_index),
                        )?;
                    }
                }
                Ok(())
            }
        },
    )
    .await
}

/// What EndTxn gave.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended {
    /// Under transaction version 2, the producer id and epoch the
    /// coordinator moved to (the epoch is bumped at every EndTxn; a new
    /// producer id with epoch 0 once the epoch is exhausted).
    pub next: Option<(i64, i16)>,
    /// Whether the coordinator runs transaction version 2, for the next
    /// transaction.
    pub transaction_v2: bool,
}

/// EndTxn: commit or abort. Retried as a whole: the coordinator answers a
/// repeated EndTxn of a transaction it already ended the same way with
/// success (under transaction version 2 also when the retry names the
/// epoch before its bump), so a lost response does no harm.
///
/// `transaction_v2`: the transaction was run under transaction version 2
/// (EndTxn v5); otherwise EndTxn goes at most at v4.
pub(crate) async fn end_txn(
    cluster: &Cluster,
    id: &TxnIdentity,
    commit: bool,
    transaction_v2: bool,
) -> Result<Ended> {
    let request = EndTxnRequest::default()
        .with_transactional_id(id.wire_id())
        .with_producer_id(ProducerId(id.producer_id))
        .with_producer_epoch(id.epoch)
        .with_committed(commit);
    with_retries(
        cluster,
        CoordinatorKind::Transaction,
        &id.transactional_id,
        "EndTxn",
        |broker| {
            let request = &request;
            async move {
                let answer = cluster
                    .request_at_most(broker, Lane::Transaction, request, cap_for(transaction_v2))
                    .await?;
                let r = answer.response;
                ClientError::check(r.error_code, ApiKey::EndTxn, None, None)?;
                let next = (answer.version > LAST_VERSION_BEFORE_TV2 && r.producer_id.0 >= 0)
                    .then_some((r.producer_id.0, r.producer_epoch));
                Ok(Ended {
                    next,
                    transaction_v2: answer.transaction_v2,
                })
            }
        },
    )
    .await
}
