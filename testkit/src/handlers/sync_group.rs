//! SyncGroup: the leader's assignment, handed to every member.

use weir_protocol::kafka_protocol::messages::{ResponseKind, SyncGroupRequest};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::{check_coordinator, flush};
use crate::coordinator::group::{Caller, sync_error};

/// Versions 0 to 5 (v3: static membership, v5: protocol type and name).
pub const VERSIONS: (i16, i16) = (0, 5);

/// Answers now (leader, Stable group, errors) or once the leader syncs.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: SyncGroupRequest,
    version: i16,
) -> Reply {
    if let Err(code) = check_coordinator(state, ctx, &req.group_id.0) {
        return Reply::Now(ResponseKind::SyncGroup(sync_error(code)));
    }
    let caller = Caller::new(ctx.request_id, ctx.client_id.clone().unwrap_or_default());
    let out = state.groups.sync(&caller, req, version, ctx.now);
    flush(state);
    match out {
        Some(r) => Reply::Now(ResponseKind::SyncGroup(r)),
        None => Reply::Later,
    }
}
