//! JoinGroup: parked until the rebalance completes (see
//! [`GroupCoordinator::join`](crate::coordinator::group::GroupCoordinator::join)).

use weir_protocol::kafka_protocol::messages::{JoinGroupRequest, ResponseKind};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};
use crate::coordinator::group::{Caller, join_error};

/// Versions 0 to 9 (v4: KIP-394 member ids, v5: static membership,
/// v9: KIP-814 `skip_assignment`).
pub const VERSIONS: (i16, i16) = (0, 9);

/// Joins the member; the answer comes now or when the rebalance completes.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: JoinGroupRequest,
    version: i16,
) -> Reply {
    if let Err(code) = check_coordinator(state, ctx, &req.group_id.0) {
        return Reply::Now(ResponseKind::JoinGroup(join_error(
            version,
            code,
            &req.member_id,
        )));
    }
    // The cluster's setting wins, so a builder option reaches the coordinator.
    state.groups.config.initial_rebalance_delay = state.config.group_initial_rebalance_delay;
    let caller = Caller::new(ctx.request_id, ctx.client_id.clone().unwrap_or_default());
    let out = state.groups.join(&caller, req, version, ctx.now);
    flush(state);
    match out {
        Some(r) => Reply::Now(ResponseKind::JoinGroup(r)),
        None => Reply::Later,
    }
}
