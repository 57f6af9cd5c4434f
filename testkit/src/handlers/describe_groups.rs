//! DescribeGroups: state, protocol and members of each group.

use weir_protocol::kafka_protocol::messages::describe_groups_response::DescribedGroup;
use weir_protocol::kafka_protocol::messages::{
    DescribeGroupsRequest, DescribeGroupsResponse, ResponseKind,
};

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::check_coordinator;

/// Versions 0 to 6 (v4: instance ids; v6, KIP-1043: an unknown group is
/// answered `GROUP_ID_NOT_FOUND` with a message, still described as Dead;
/// up to v5 it is only described as Dead).
pub const VERSIONS: (i16, i16) = (0, 6);

/// Describes each group this broker coordinates.
pub fn handle(
    state: &mut ClusterState,
    ctx: &RequestContext,
    req: DescribeGroupsRequest,
    version: i16,
) -> Reply {
    let groups = req
        .groups
        .iter()
        .map(|g| match check_coordinator(state, ctx, &g.0) {
            Ok(()) => state.groups.describe(&g.0, version),
            Err(code) => DescribedGroup::default()
                .with_group_id(g.clone())
                .with_error_code(code),
        })
        .collect();
    Reply::Now(ResponseKind::DescribeGroups(
        DescribeGroupsResponse::default().with_groups(groups),
    ))
}
