//! AddOffsetsToTxn: a group's offsets join the producer's transaction.

use weir_protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};
use crate::coordinator::txn::error_code_for;

/// Versions 0 to 4 (v2: `PRODUCER_FENCED`, v4: `TRANSACTION_ABORTABLE`,
/// which the testkit has no cause to send).
pub const VERSIONS: (i16, i16) = (0, 4);

/// Adds the group to the transaction.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> Reply {
    let code = match check_coordinator(state, ctx, &req.transactional_id.0) {
        Err(code) => code,
        Ok(()) => {
            let out = state.txns.add_offsets(
                &req.transactional_id.0,
                req.producer_id.0,
                req.producer_epoch,
                &req.group_id.0,
                ctx.now,
            );
            flush(state);
            out.map_or_else(|e| error_code_for(e, version, 2), |()| 0)
        }
    };
    Reply::Now(ResponseKind::AddOffsetsToTxn(
        AddOffsetsToTxnResponse::default().with_error_code(code),
    ))
}
