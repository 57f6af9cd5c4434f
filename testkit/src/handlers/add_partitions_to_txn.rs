//! AddPartitionsToTxn (client versions 0–3): partitions join the producer's
//! transaction.

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use weir_protocol::kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};
use crate::coordinator::txn::error_code_for;

/// Versions 0 to 3 (v2: `PRODUCER_FENCED`). v4+ is the brokers' batched
/// form (KIP-890), which clients do not send.
pub const VERSIONS: (i16, i16) = (0, 3);

/// Adds the partitions; every partition gets the same answer, except that
/// unknown partitions get `UNKNOWN_TOPIC_OR_PARTITION` and the others
/// `OPERATION_NOT_ATTEMPTED`, as Kafka does.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> Reply {
    let tid = req.v3_and_below_transactional_id.0.to_string();
    let partitions: Vec<(String, i32)> = req
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    let unknown: Vec<bool> = partitions
        .iter()
        .map(|(t, p)| state.partition(t, *p).is_none())
        .collect();
    let codes: Vec<i16> = match check_coordinator(state, ctx, &tid) {
        Err(code) => vec![code; partitions.len()],
        Ok(()) if unknown.iter().any(|u| *u) => unknown
            .iter()
            .map(|u| {
                if *u {
                    ResponseError::UnknownTopicOrPartition.code()
                } else {
                    ResponseError::OperationNotAttempted.code()
                }
            })
            .collect(),
        Ok(()) => {
            let out = state.txns.add_partitions(
                &tid,
                req.v3_and_below_producer_id.0,
                req.v3_and_below_producer_epoch,
                &partitions,
                ctx.now,
            );
            flush(state);
            let code = out.map_or_else(|e| error_code_for(e, version, 2), |()| 0);
            vec![code; partitions.len()]
        }
    };
    let mut codes = codes.into_iter();
    let results = req
        .v3_and_below_topics
        .into_iter()
        .map(|t| {
            let by_partition = t
                .partitions
                .iter()
                .map(|p| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*p)
                        .with_partition_error_code(codes.next().unwrap_or_default())
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name)
                .with_results_by_partition(by_partition)
        })
        .collect();
    Reply::Now(ResponseKind::AddPartitionsToTxn(
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results),
    ))
}
