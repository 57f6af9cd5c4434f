//! `throttle_time_ms`: the broker's request to slow down (KIP-219).
//!
//! Since Kafka 2.0 a broker answers a quota-violating request at once and
//! expects the client to hold back the next request to it for
//! `throttle_time_ms`. [`Throttle`] remembers that deadline and every request
//! on the connections sharing it waits for it before being sent.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use weir_protocol::kafka_protocol::messages::*;

/// The responses' `throttle_time_ms`, for every response type (0 for those
/// without the field), so the messenger can honour it generically.
pub trait ThrottleTime {
    /// The time the broker asks us to wait before the next request, in ms.
    fn throttle_time_ms(&self) -> i32;
}

macro_rules! throttled {
    ($($t:ty),* $(,)?) => { $(impl ThrottleTime for $t {
        fn throttle_time_ms(&self) -> i32 { self.throttle_time_ms }
    })* };
}

macro_rules! unthrottled {
    ($($t:ty),* $(,)?) => { $(impl ThrottleTime for $t {
        fn throttle_time_ms(&self) -> i32 { 0 }
    })* };
}

throttled!(
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    AddRaftVoterResponse,
    AllocateProducerIdsResponse,
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    AlterPartitionResponse,
    AlterReplicaLogDirsResponse,
    AlterShareGroupOffsetsResponse,
    AlterUserScramCredentialsResponse,
    ApiVersionsResponse,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    ControllerRegistrationResponse,
    CreateAclsResponse,
    CreateDelegationTokenResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DeleteShareGroupOffsetsResponse,
    DeleteTopicsResponse,
    DescribeAclsResponse,
    DescribeClientQuotasResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeDelegationTokenResponse,
    DescribeGroupsResponse,
    DescribeLogDirsResponse,
    DescribeProducersResponse,
    DescribeShareGroupOffsetsResponse,
    DescribeTopicPartitionsResponse,
    DescribeTransactionsResponse,
    DescribeUserScramCredentialsResponse,
    ElectLeadersResponse,
    EndTxnResponse,
    ExpireDelegationTokenResponse,
    FetchResponse,
    FetchSnapshotResponse,
    FindCoordinatorResponse,
    GetTelemetrySubscriptionsResponse,
    HeartbeatResponse,
    IncrementalAlterConfigsResponse,
    InitProducerIdResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListConfigResourcesResponse,
    ListGroupsResponse,
    ListOffsetsResponse,
    ListPartitionReassignmentsResponse,
    ListTransactionsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    OffsetForLeaderEpochResponse,
    ProduceResponse,
    PushTelemetryResponse,
    RemoveRaftVoterResponse,
    RenewDelegationTokenResponse,
    ShareAcknowledgeResponse,
    ShareFetchResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
    UnregisterBrokerResponse,
    UpdateFeaturesResponse,
    UpdateRaftVoterResponse
);

unthrottled!(
    BeginQuorumEpochResponse,
    DeleteShareGroupStateResponse,
    DescribeQuorumResponse,
    EndQuorumEpochResponse,
    EnvelopeResponse,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
    VoteResponse,
    WriteShareGroupStateResponse,
    WriteTxnMarkersResponse
);

/// The earliest time the next request to a broker may be sent.
#[derive(Debug, Default)]
pub struct Throttle {
    until: Mutex<Option<Instant>>,
}

impl Throttle {
    /// Notes a response's `throttle_time_ms`; non-positive values change nothing.
    pub fn record(&self, throttle_time_ms: i32) {
        let Ok(ms) = u64::try_from(throttle_time_ms) else {
            return;
        };
        if ms == 0 {
            return;
        }
        let deadline = Instant::now() + Duration::from_millis(ms);
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if until.is_none_or(|u| u < deadline) {
            tracing::debug!(throttle_time_ms, "broker throttled us");
            *until = Some(deadline);
        }
    }

    /// When the throttle ends, if it is in force.
    pub fn until(&self) -> Option<Instant> {
        let until = *self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.filter(|u| *u > Instant::now())
    }

    /// Waits until the throttle, if any, has passed.
    pub async fn wait(&self) {
        if let Some(deadline) = self.until() {
            tokio::time::sleep_until(deadline).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_exactly_the_longest_throttle() {
        let t = Throttle::default();
        let start = Instant::now();
        t.wait().await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        t.record(500);
        t.record(200);
        t.record(-1);
        t.wait().await;
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        assert!(t.until().is_none());
    }
}
