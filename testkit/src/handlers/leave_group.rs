//! LeaveGroup: one member (v0–2) or a batch by member or instance id (v3+).

use weir_protocol::kafka_protocol::messages::{
    LeaveGroupRequest, LeaveGroupResponse, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};

/// Versions 0 to 5 (v3: batched members, KIP-345).
pub const VERSIONS: (i16, i16) = (0, 5);

/// Removes the members and rebalances the group.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: LeaveGroupRequest,
    version: i16,
) -> Reply {
    if let Err(code) = check_coordinator(state, ctx, &req.group_id.0) {
        return Reply::Now(ResponseKind::LeaveGroup(
            LeaveGroupResponse::default().with_error_code(code),
        ));
    }
    let out = state.groups.leave(req, version, ctx.now);
    flush(state);
    Reply::Now(ResponseKind::LeaveGroup(out))
}
