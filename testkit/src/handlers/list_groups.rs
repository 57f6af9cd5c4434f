//! ListGroups: the groups this broker coordinates (clients ask every broker).

use weir_protocol::kafka_protocol::messages::{
    ListGroupsRequest, ListGroupsResponse, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::coordinator_node;

/// Versions 0 to 5 (v4: states filter, v5: types filter).
pub const VERSIONS: (i16, i16) = (0, 5);

/// Lists the groups whose coordinator is this broker.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: ListGroupsRequest,
    version: i16,
) -> Reply {
    let states: Vec<String> = if version >= 4 {
        req.states_filter.iter().map(|s| s.to_string()).collect()
    } else {
        Vec::new()
    };
    // Every group here is a classic group.
    let classic_wanted = version < 5
        || req.types_filter.is_empty()
        || req
            .types_filter
            .iter()
            .any(|t| t.eq_ignore_ascii_case("classic"));
    let groups = if classic_wanted {
        state
            .groups
            .list(&states)
            .into_iter()
            .filter(|g| coordinator_node(state, &g.group_id.0) == Some(ctx.broker_id))
            .collect()
    } else {
        Vec::new()
    };
    Reply::Now(ResponseKind::ListGroups(
        ListGroupsResponse::default().with_groups(groups),
    ))
}
