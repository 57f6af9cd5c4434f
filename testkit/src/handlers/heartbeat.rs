//! Heartbeat: keeps a member's session alive and tells it of rebalances.

use weir_protocol::kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse, ResponseKind};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};

/// Versions 0 to 4 (v3: static membership).
pub const VERSIONS: (i16, i16) = (0, 4);

/// Answers with the member's error code.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: HeartbeatRequest,
    version: i16,
) -> Reply {
    if let Err(code) = check_coordinator(state, ctx, &req.group_id.0) {
        return Reply::Now(ResponseKind::Heartbeat(
            HeartbeatResponse::default().with_error_code(code),
        ));
    }
    let out = state.groups.heartbeat(req, version, ctx.now);
    flush(state);
    Reply::Now(ResponseKind::Heartbeat(out))
}
