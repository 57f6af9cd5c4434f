//! DescribeGroups, ListGroups and DeleteGroups.

use tracing::debug;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::GroupId;
use weir_protocol::kafka_protocol::messages::describe_groups_response::{
    DescribedGroup, DescribedGroupMember,
};
use weir_protocol::kafka_protocol::messages::list_groups_response::ListedGroup;
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::GroupCoordinator;
use super::state::GroupState;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

impl GroupCoordinator {
    /// Describes a group as Kafka's `GroupMetadata.summary` does: in Stable
    /// the members carry their metadata for the chosen protocol and their
    /// assignments; in other states they carry neither. An unknown group is
    /// described as `Dead` with no members, and from v6 on also answered
    /// `GROUP_ID_NOT_FOUND` with Kafka's message.
    pub fn describe(&self, group_id: &str, version: i16) -> DescribedGroup {
        let base = DescribedGroup::default().with_group_id(GroupId(s(group_id)));
        let Some(group) = self.groups.get(group_id) else {
            let dead = base.with_group_state(s(GroupState::Dead.name()));
            return if version >= 6 {
                dead.with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(s(&format!("Group {group_id} not found."))))
            } else {
                dead
            };
        };
        let stable = group.state == GroupState::Stable;
        let protocol = group.protocol_name.as_deref().unwrap_or_default();
        let members = group
            .members
            .values()
            .map(|m| {
                let member = DescribedGroupMember::default()
                    .with_member_id(s(&m.id))
                    .with_group_instance_id(if version >= 4 {
                        m.instance_id.as_deref().map(s)
                    } else {
                        None
                    })
                    .with_client_id(s(&m.client_id))
                    .with_client_host(s(&m.client_host));
                if stable {
                    member
                        .with_member_metadata(m.metadata(protocol).cloned().unwrap_or_default())
                        .with_member_assignment(m.assignment.clone())
                } else {
                    member
                }
            })
            .collect();
        base.with_group_state(s(group.state.name()))
            .with_protocol_type(s(group.protocol_type.as_deref().unwrap_or_default()))
            .with_protocol_data(s(if stable { protocol } else { "" }))
            .with_members(members)
    }

    /// Lists the groups, filtered by state names (ListGroups v4+; empty
    /// means all). Dead groups are never listed.
    pub fn list(&self, states_filter: &[String]) -> Vec<ListedGroup> {
        self.groups
            .values()
            .filter(|g| g.state != GroupState::Dead)
            .filter(|g| {
                states_filter.is_empty()
                    || states_filter
                        .iter()
                        .any(|f| f.eq_ignore_ascii_case(g.state.name()))
            })
            .map(|g| {
                ListedGroup::default()
                    .with_group_id(GroupId(s(&g.id)))
                    .with_protocol_type(s(g.protocol_type.as_deref().unwrap_or_default()))
                    .with_group_state(s(g.state.name()))
                    .with_group_type(s("classic"))
            })
            .collect()
    }

    /// Deletes a group and its offsets: only an empty group can be deleted
    /// (`NON_EMPTY_GROUP` otherwise); an unknown one gives `GROUP_ID_NOT_FOUND`.
    pub fn delete(&mut self, group_id: &str) -> i16 {
        let Some(group) = self.groups.get(group_id) else {
            return ResponseError::GroupIdNotFound.code();
        };
        match group.state {
            GroupState::Dead => ResponseError::GroupIdNotFound.code(),
            GroupState::Empty => {
                self.groups.shift_remove(group_id);
                debug!(group = group_id, "group deleted");
                0
            }
            _ => ResponseError::NonEmptyGroup.code(),
        }
    }
}
