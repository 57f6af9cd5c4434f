//! InitProducerId: a producer id and epoch for an idempotent or
//! transactional producer (see
//! [`TxnCoordinator::init_producer_id`](crate::coordinator::txn::TxnCoordinator::init_producer_id)).

use weir_protocol::kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};
use crate::coordinator::txn::error_code_for;

/// Versions 0 to 5 (v3: KIP-360 producer id and epoch in the request,
/// v4: `PRODUCER_FENCED`, v5: `TRANSACTION_ABORTABLE`, which the testkit
/// has no cause to send).
pub const VERSIONS: (i16, i16) = (0, 5);

fn error(code: i16) -> Reply {
    Reply::Now(ResponseKind::InitProducerId(
        InitProducerIdResponse::default()
            .with_error_code(code)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    ))
}

/// Allocates or bumps the producer id.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: InitProducerIdRequest,
    version: i16,
) -> Reply {
    let tid = req.transactional_id.as_ref().map(|t| t.0.to_string());
    if let Some(tid) = &tid
        && let Err(code) = check_coordinator(state, ctx, tid)
    {
        return error(code);
    }
    let expected =
        (version >= 3 && req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
    let out = state
        .txns
        .init_producer_id(tid.as_deref(), req.transaction_timeout_ms, expected);
    flush(state);
    match out {
        Ok((pid, epoch)) => Reply::Now(ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch),
        )),
        Err(e) => error(error_code_for(e, version, 4)),
    }
}
