//! The leader's step: decode every member's subscription, run the chosen
//! assignor, encode each member's assignment.

use std::collections::BTreeMap;

use bytes::Bytes;
use weir_client::{ClientError, Cluster};
use weir_protocol::kafka_protocol::messages::JoinGroupResponse;

use crate::GroupError;
use crate::assignor::custom::{CustomGroup, CustomMember, GroupAssignor};
use crate::assignor::{Assignor, GroupSubscription, MemberSubscription, to_wire_assignment};
use crate::consumer_protocol::{CONSUMER_PROTOCOL_MAX_VERSION, NO_GENERATION, Subscription};

/// Why the leader could not compute the assignment.
#[derive(Debug)]
pub(crate) enum AssignError {
    /// The Metadata request for the subscribed topics failed: the caller
    /// decides whether joining again may help.
    Metadata(ClientError),
    /// Anything else (an assignor Weir lacks, an assignment that does not
    /// encode): retrying cannot help.
    Group(GroupError),
}

impl From<GroupError> for AssignError {
    fn from(e: GroupError) -> Self {
        AssignError::Group(e)
    }
}

/// The assignments to send in the leader's SyncGroup.
///
/// A member whose subscription does not decode is assigned nothing (with a
/// warning), rather than failing the leader: otherwise one malformed
/// member would kill every member that becomes leader in turn.
pub(crate) async fn assign(
    cluster: &Cluster,
    join: &JoinGroupResponse,
    custom: Option<&dyn GroupAssignor>,
) -> Result<Vec<(String, Bytes)>, AssignError> {
    let protocol = join
        .protocol_name
        .as_ref()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let assignor = match custom {
        Some(custom) if custom.name() == protocol => None,
        _ => Some(Assignor::from_name(&protocol).ok_or_else(|| {
            GroupError::InvalidConfig(format!(
                "the group chose assignor {protocol:?}, which Weir lacks"
            ))
        })?),
    };
    let mut user_data = BTreeMap::new();
    let mut group = GroupSubscription::default();
    // Answer in the lowest version any member sent, so every member
    // (Java, librdkafka, older Weir) can read its assignment.
    let mut version = CONSUMER_PROTOCOL_MAX_VERSION;
    for m in &join.members {
        let instance_id = m.group_instance_id.as_ref().map(|i| i.to_string());
        let member = match Subscription::decode(&m.metadata) {
            Ok((v, subscription)) => {
                version = version.min(v.max(0));
                user_data.insert(m.member_id.to_string(), subscription.user_data.clone());
                MemberSubscription::from_wire(instance_id, &subscription)
            }
            Err(error) => {
                tracing::warn!(
                    member = %m.member_id,
                    %error,
                    "a member's subscription does not decode: it is assigned nothing"
                );
                MemberSubscription {
                    instance_id,
                    topics: Default::default(),
                    owned: Vec::new(),
                    generation: NO_GENERATION,
                    rack: None,
                }
            }
        };
        group.members.insert(m.member_id.to_string(), member);
    }
    let topics: Vec<String> = group
        .members
        .values()
        .flat_map(|m| m.topics.iter().cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let metadata = cluster
        .refresh_metadata(&names)
        .await
        .map_err(AssignError::Metadata)?;
    let mut partitions_per_topic = BTreeMap::new();
    for t in &names {
        // A topic that does not exist (yet) gets no partitions this round.
        if let Some(tm) = metadata.topic(t).filter(|tm| tm.error.is_none()) {
            partitions_per_topic.insert(
                (*t).to_owned(),
                i32::try_from(tm.partitions.len()).unwrap_or(i32::MAX),
            );
        }
    }
    group.partitions_per_topic = partitions_per_topic;
    let Some(assignor) = assignor else {
        let Some(custom) = custom else {
            return Ok(Vec::new());
        };
        return custom_assign(cluster, join, custom, group, user_data, version).await;
    };
    let assignment = assignor.assign(&group);
    tracing::info!(
        assignor = assignor.name(),
        members = group.members.len(),
        generation = join.generation_id,
        "leader assigned partitions"
    );
    let mut out = Vec::with_capacity(group.members.len());
    for member in group.members.keys() {
        let partitions = assignment.get(member).cloned().unwrap_or_default();
        out.push((
            member.clone(),
            to_wire_assignment(&partitions).encode(version)?,
        ));
    }
    Ok(out)
}

/// The leader's step under the application's own assignor.
async fn custom_assign(
    cluster: &Cluster,
    join: &JoinGroupResponse,
    custom: &dyn GroupAssignor,
    group: GroupSubscription,
    mut user_data: BTreeMap<String, Option<Bytes>>,
    version: i16,
) -> Result<Vec<(String, Bytes)>, AssignError> {
    let input = CustomGroup {
        members: group
            .members
            .into_iter()
            .map(|(id, subscription)| {
                let user_data = user_data.remove(&id).flatten();
                (
                    id,
                    CustomMember {
                        subscription,
                        user_data,
                    },
                )
            })
            .collect(),
        partitions_per_topic: group.partitions_per_topic,
    };
    let mut assignment = custom.assign(cluster, &input).await?;
    tracing::info!(
        assignor = custom.name(),
        members = input.members.len(),
        generation = join.generation_id,
        "leader assigned partitions"
    );
    let mut out = Vec::with_capacity(input.members.len());
    for member in input.members.keys() {
        let given = assignment.remove(member).unwrap_or_default();
        let mut wire = to_wire_assignment(&given.partitions);
        wire.user_data = given.user_data;
        out.push((member.clone(), wire.encode(version)?));
    }
    Ok(out)
}
