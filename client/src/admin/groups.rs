//! ListGroups, DescribeGroups and the committed offsets of a group (OffsetFetch).

use std::collections::BTreeMap;

use bytes::Bytes;
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::{DescribeGroupsRequest, GroupId, ListGroupsRequest};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::Admin;
use crate::cluster::{BrokerId, CoordinatorKind, Lane};
pub use crate::group_offsets::CommittedOffset;
use crate::group_offsets::{Stability, fetch_committed_once};
use crate::kerror::codes;
use crate::{ClientError, Result};

/// A group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// The group id.
    pub group_id: String,
    /// `consumer` for consumer groups, empty for others.
    pub protocol_type: String,
    /// The state (ListGroups v4+), e.g. `Stable`; empty if not reported.
    pub state: String,
}

/// One member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// The member id the coordinator assigned.
    pub member_id: String,
    /// The static instance id, if any.
    pub group_instance_id: Option<String>,
    /// The member's client id.
    pub client_id: String,
    /// The member's host.
    pub client_host: String,
    /// Its subscription metadata, as the protocol encodes it.
    pub metadata: Bytes,
    /// Its assignment, as the protocol encodes it.
    pub assignment: Bytes,
}

/// A group as DescribeGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group id.
    pub group_id: String,
    /// The state, e.g. `Stable`, `Empty`, `Dead`.
    pub state: String,
    /// `consumer` for consumer groups.
    pub protocol_type: String,
    /// The chosen assignor, e.g. `range`.
    pub protocol: String,
    /// The members.
    pub members: Vec<MemberDescription>,
}

impl Admin {
    /// Every group on every broker, sorted by id.
    ///
    /// # Errors
    /// [`ClientError::Server`] naming the broker, or connection errors.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let md = self.cluster.refresh_metadata(&[]).await?;
        let mut brokers: Vec<BrokerId> = md.brokers.keys().copied().collect();
        brokers.sort_unstable();
        let mut groups = BTreeMap::new();
        for broker in brokers {
            let response = self
                .cluster
                .retry("ListGroups", || async {
                    let r = self
                        .cluster
                        .request(broker, Lane::Metadata, &ListGroupsRequest::default())
                        .await?;
                    ClientError::check(r.error_code, ApiKey::ListGroups, None, None)
                        .map_err(|e| e.with_broker(broker))?;
                    Ok(r)
                })
                .await?;
            for g in response.groups {
                let listing = GroupListing {
                    group_id: g.group_id.0.to_string(),
                    protocol_type: g.protocol_type.to_string(),
                    state: g.group_state.to_string(),
                };
                groups.insert(listing.group_id.clone(), listing);
            }
        }
        Ok(groups.into_values().collect())
    }

    /// Describes `groups`, each asked of its coordinator, in the order asked.
    /// A group that does not exist is described as `Dead` with no members,
    /// whatever the broker's version (DescribeGroups v6, Kafka 4.0 on,
    /// answers it `GROUP_ID_NOT_FOUND`; older versions describe it so).
    ///
    /// # Errors
    /// [`ClientError::Server`] naming the group (e.g. `GROUP_AUTHORIZATION_FAILED`),
    /// or connection errors.
    pub async fn describe_groups(&self, groups: &[&str]) -> Result<Vec<GroupDescription>> {
        let mut out = Vec::with_capacity(groups.len());
        for group in groups {
            let described = self
                .cluster
                .retry("DescribeGroups", || self.describe_group_once(group))
                .await?;
            out.push(described);
        }
        Ok(out)
    }

    async fn describe_group_once(&self, group: &str) -> Result<GroupDescription> {
        let coordinator = self
            .cluster
            .find_coordinator(CoordinatorKind::Group, group)
            .await?;
        let request = DescribeGroupsRequest::default()
            .with_groups(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
        let response = match self
            .cluster
            .request(coordinator, Lane::Metadata, &request)
            .await
        {
            Err(e) if e.is_network() => {
                self.cluster
                    .invalidate_coordinator(CoordinatorKind::Group, group);
                return Err(e);
            }
            other => other?,
        };
        let g = response
            .groups
            .into_iter()
            .find(|g| g.group_id.0.as_str() == group)
            .ok_or_else(|| ClientError::MissingInResponse {
                api: ApiKey::DescribeGroups,
                what: group.to_owned(),
            })?;
        if g.error_code == codes::NOT_COORDINATOR
            || g.error_code == codes::COORDINATOR_NOT_AVAILABLE
        {
            self.cluster
                .invalidate_coordinator(CoordinatorKind::Group, group);
        }
        if g.error_code == codes::GROUP_ID_NOT_FOUND {
            return Ok(GroupDescription {
                group_id: group.to_owned(),
                state: "Dead".to_owned(),
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            });
        }
        ClientError::check(g.error_code, ApiKey::DescribeGroups, Some(group), None).map_err(
            |e| {
                e.with_message(g.error_message.as_deref())
                    .with_broker(coordinator)
            },
        )?;
        Ok(GroupDescription {
            group_id: group.to_owned(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            members: g
                .members
                .into_iter()
                .map(|m| MemberDescription {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.map(|i| i.to_string()),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    metadata: m.member_metadata,
                    assignment: m.member_assignment,
                })
                .collect(),
        })
    }

    /// Every offset `group` has committed, sorted by topic and partition.
    ///
    /// # Errors
    /// [`ClientError::Server`] naming the group or the partition, or
    /// connection errors.
    pub async fn list_group_offsets(&self, group: &str) -> Result<Vec<CommittedOffset>> {
        self.cluster
            .retry("OffsetFetch", || self.list_group_offsets_once(group))
            .await
    }

    async fn list_group_offsets_once(&self, group: &str) -> Result<Vec<CommittedOffset>> {
        fetch_committed_once(&self.cluster, group, None, Stability::Any, Lane::Metadata).await
    }
}
