//! The four group requests, built for the version the coordinator speaks.

use std::time::Duration;

use bytes::Bytes;
use weir_client::ClientError;
use weir_client::cluster::{BrokerId, Cluster, Lane};
use weir_protocol::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use weir_protocol::kafka_protocol::messages::leave_group_request::MemberIdentity;
use weir_protocol::kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use weir_protocol::kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    SyncGroupRequest, SyncGroupResponse,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use crate::GroupError;

pub(crate) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

pub(crate) fn client_error(context: impl Into<String>, e: &ClientError) -> GroupError {
    GroupError::Client {
        context: context.into(),
        message: e.to_string(),
        code: e.kafka_code().map(|c| c.code),
        retriable: e.is_retriable(),
    }
}

/// Everything a JoinGroup carries.
pub(crate) struct JoinParams<'a> {
    pub group: &'a str,
    pub member_id: &'a str,
    pub instance_id: Option<&'a str>,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    /// (protocol name, subscription bytes), in order of preference.
    pub protocols: Vec<(String, Bytes)>,
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

pub(crate) async fn join(
    cluster: &Cluster,
    coordinator: BrokerId,
    p: &JoinParams<'_>,
) -> Result<JoinGroupResponse, ClientError> {
    let version = cluster
        .connection(coordinator, Lane::Coordinator)
        .await?
        .version_for::<JoinGroupRequest>()?;
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(s(p.group)))
        .with_session_timeout_ms(millis(p.session_timeout))
        .with_rebalance_timeout_ms(millis(p.rebalance_timeout))
        .with_member_id(s(p.member_id))
        .with_group_instance_id(if version >= 5 {
            p.instance_id.map(s)
        } else {
            None
        })
        .with_protocol_type(s("consumer"))
        .with_protocols(
            p.protocols
                .iter()
                .map(|(name, metadata)| {
                    JoinGroupRequestProtocol::default()
                        .with_name(s(name))
                        .with_metadata(metadata.clone())
                })
                .collect(),
        );
    // The coordinator holds a JoinGroup until every member has rejoined,
    // for up to the rebalance timeout; Java allows 5 s more on top.
    let timeout = p.rebalance_timeout + Duration::from_secs(5);
    cluster
        .request_with_timeout(coordinator, Lane::Coordinator, &request, timeout)
        .await
}

pub(crate) struct SyncParams<'a> {
    pub group: &'a str,
    pub member_id: &'a str,
    pub instance_id: Option<&'a str>,
    pub generation: i32,
    pub protocol_name: &'a str,
    pub assignments: Vec<(String, Bytes)>,
    pub rebalance_timeout: Duration,
}

pub(crate) async fn sync(
    cluster: &Cluster,
    coordinator: BrokerId,
    p: SyncParams<'_>,
) -> Result<SyncGroupResponse, ClientError> {
    let version = cluster
        .connection(coordinator, Lane::Coordinator)
        .await?
        .version_for::<SyncGroupRequest>()?;
    let request = SyncGroupRequest::default()
        .with_group_id(GroupId(s(p.group)))
        .with_generation_id(p.generation)
        .with_member_id(s(p.member_id))
        .with_group_instance_id(if version >= 3 {
            p.instance_id.map(s)
        } else {
            None
        })
        .with_protocol_type(if version >= 5 {
            Some(s("consumer"))
        } else {
            None
        })
        .with_protocol_name(if version >= 5 {
            Some(s(p.protocol_name))
        } else {
            None
        })
        .with_assignments(
            p.assignments
                .into_iter()
                .map(|(member, bytes)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(StrBytes::from_string(member))
                        .with_assignment(bytes)
                })
                .collect(),
        );
    // A follower's SyncGroup waits for the leader's.
    let timeout = p.rebalance_timeout + Duration::from_secs(5);
    cluster
        .request_with_timeout(coordinator, Lane::Coordinator, &request, timeout)
        .await
}

/// Heartbeats travel on their own connection ([`Lane::Heartbeat`]): the
/// coordinator answers one connection's requests in order, so on the
/// coordinator lane a heartbeat would queue behind a JoinGroup held for the
/// whole rebalance or a slow OffsetCommit, and the session could expire.
pub(crate) async fn heartbeat(
    cluster: &Cluster,
    coordinator: BrokerId,
    group: &str,
    member_id: &str,
    instance_id: Option<&str>,
    generation: i32,
    timeout: Duration,
) -> Result<i16, ClientError> {
    let version = cluster
        .connection(coordinator, Lane::Heartbeat)
        .await?
        .version_for::<HeartbeatRequest>()?;
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation)
        .with_member_id(s(member_id))
        .with_group_instance_id(if version >= 3 {
            instance_id.map(s)
        } else {
            None
        });
    let response = cluster
        .request_with_timeout(coordinator, Lane::Heartbeat, &request, timeout)
        .await?;
    Ok(response.error_code)
}

/// Sends LeaveGroup; returns the error code (the member's own from v3).
///
/// On the heartbeat lane too: a member that leaves during a rebalance has a
/// JoinGroup held by the coordinator on the coordinator lane, and a
/// LeaveGroup queued behind it would reach the coordinator only once the
/// rebalance completed, followed by one more rebalance for the leave.
pub(crate) async fn leave(
    cluster: &Cluster,
    coordinator: BrokerId,
    group: &str,
    member_id: &str,
    instance_id: Option<&str>,
) -> Result<i16, ClientError> {
    let version = cluster
        .connection(coordinator, Lane::Heartbeat)
        .await?
        .version_for::<LeaveGroupRequest>()?;
    let request = if version >= 3 {
        LeaveGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_members(vec![
                MemberIdentity::default()
                    .with_member_id(s(member_id))
                    .with_group_instance_id(instance_id.map(s)),
            ])
    } else {
        LeaveGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(member_id))
    };
    let response = cluster
        .request(coordinator, Lane::Heartbeat, &request)
        .await?;
    if response.error_code != 0 {
        return Ok(response.error_code);
    }
    Ok(response.members.first().map_or(0, |m| m.error_code))
}
