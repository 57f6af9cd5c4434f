//! EndTxn: commits or aborts the transaction, writing its markers before
//! answering.

use weir_protocol::kafka_protocol::messages::{
    EndTxnRequest, EndTxnResponse, ProducerId, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};
use crate::coordinator::txn::error_code_for;

/// Versions 0 to 5 (v2: `PRODUCER_FENCED`; v4: `TRANSACTION_ABORTABLE`;
/// v5: transaction version 2, the epoch bumped and returned).
pub const VERSIONS: (i16, i16) = (0, 5);

/// Ends the transaction.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: EndTxnRequest,
    version: i16,
) -> Reply {
    if version >= 5 {
        let (code, (producer_id, epoch)) =
            match check_coordinator(state, ctx, &req.transactional_id.0) {
                Err(code) => (code, (-1, -1)),
                Ok(()) => {
                    let out = state.txns.end_txn_v2(
                        &req.transactional_id.0,
                        req.producer_id.0,
                        req.producer_epoch,
                        req.committed,
                    );
                    flush(state);
                    match out {
                        Ok(next) => (0, next),
                        Err(e) => (e.code(), (-1, -1)),
                    }
                }
            };
        return Reply::Now(ResponseKind::EndTxn(
            EndTxnResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(epoch),
        ));
    }
    let code = match check_coordinator(state, ctx, &req.transactional_id.0) {
        Err(code) => code,
        Ok(()) => {
            let out = state.txns.end_txn(
                &req.transactional_id.0,
                req.producer_id.0,
                req.producer_epoch,
                req.committed,
            );
            // The markers are written here, so a read_committed consumer
            // sees the outcome as soon as the client has its answer.
            flush(state);
            out.map_or_else(|e| error_code_for(e, version, 2), |()| 0)
        }
    };
    Reply::Now(ResponseKind::EndTxn(
        EndTxnResponse::default().with_error_code(code),
    ))
}
