//! DeleteGroups: removes empty groups with their offsets.

use weir_protocol::kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use weir_protocol::kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::check_coordinator;

/// Versions 0 to 2.
pub const VERSIONS: (i16, i16) = (0, 2);

/// Deletes each group: `NON_EMPTY_GROUP` while it has members,
/// `GROUP_ID_NOT_FOUND` if unknown.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: DeleteGroupsRequest,
    _version: i16,
) -> Reply {
    let results = req
        .groups_names
        .into_iter()
        .map(|g| {
            let code = match check_coordinator(state, ctx, &g.0) {
                Ok(()) => state.groups.delete(&g.0),
                Err(code) => code,
            };
            DeletableGroupResult::default()
                .with_group_id(g)
                .with_error_code(code)
        })
        .collect();
    Reply::Now(ResponseKind::DeleteGroups(
        DeleteGroupsResponse::default().with_results(results),
    ))
}
