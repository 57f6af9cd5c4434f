//! ListOffsets: the earliest, latest, or first-at-a-time offset of partitions.

use std::collections::BTreeMap;

use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use weir_protocol::kafka_protocol::messages::{BrokerId as WireId, ListOffsetsRequest, TopicName};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::Admin;
use crate::cluster::{BrokerId, Lane};
use crate::{ClientError, Result};

/// Which offset to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The end of the log: the high watermark (read_uncommitted) or the last
    /// stable offset (read_committed).
    Latest,
    /// The first offset whose timestamp is at or after this many ms since the epoch.
    Timestamp(i64),
}

impl OffsetSpec {
    /// The `timestamp` field of ListOffsets.
    pub fn wire_timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(t) => t,
        }
    }
}

/// One partition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// The partition.
    pub partition: i32,
    /// The offset; -1 if no record is at or after the timestamp asked for.
    pub offset: i64,
    /// The timestamp of that record (-1 for earliest and latest).
    pub timestamp: i64,
    /// The leader epoch, if the broker reports it.
    pub leader_epoch: i32,
}

impl Admin {
    /// The offsets of `partitions` of `topic` at `spec`, in the order asked.
    /// Each leader is asked for its partitions; a moved leader is looked up
    /// again and the request retried.
    ///
    /// # Errors
    /// [`ClientError::Server`] naming topic and partition, or connection errors.
    pub async fn list_offsets(
        &self,
        topic: &str,
        partitions: &[i32],
        spec: OffsetSpec,
        read_committed: bool,
    ) -> Result<Vec<ListedOffset>> {
        self.cluster
            .retry("ListOffsets", || {
                self.list_offsets_once(topic, partitions, spec, read_committed)
            })
            .await
    }

    /// The offsets of every partition of `topic`, sorted by partition.
    ///
    /// # Errors
    /// As [`list_offsets`](Self::list_offsets).
    pub async fn list_topic_offsets(
        &self,
        topic: &str,
        spec: OffsetSpec,
        read_committed: bool,
    ) -> Result<Vec<ListedOffset>> {
        let count = self
            .cluster
            .retry("partition count", || self.cluster.partition_count(topic))
            .await?;
        let partitions: Vec<i32> = (0..i32::try_from(count).unwrap_or(i32::MAX)).collect();
        self.list_offsets(topic, &partitions, spec, read_committed)
            .await
    }

    async fn list_offsets_once(
        &self,
        topic: &str,
        partitions: &[i32],
        spec: OffsetSpec,
        read_committed: bool,
    ) -> Result<Vec<ListedOffset>> {
        let mut by_leader: BTreeMap<BrokerId, Vec<i32>> = BTreeMap::new();
        for &p in partitions {
            let leader = self.cluster.partition_leader(topic, p).await?;
            by_leader.entry(leader).or_default().push(p);
        }
        let mut found: BTreeMap<i32, ListedOffset> = BTreeMap::new();
        for (leader, ps) in by_leader {
            let request = ListOffsetsRequest::default()
                .with_replica_id(WireId(-1))
                .with_isolation_level(i8::from(read_committed))
                .with_topics(vec![
                    ListOffsetsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                        .with_partitions(
                            ps.iter()
                                .map(|p| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(*p)
                                        .with_current_leader_epoch(-1)
                                        .with_timestamp(spec.wire_timestamp())
                                })
                                .collect(),
                        ),
                ]);
            let response = self
                .cluster
                .request(leader, Lane::Metadata, &request)
                .await?;
            for t in response
                .topics
                .iter()
                .filter(|t| t.name.0.as_str() == topic)
            {
                for p in &t.partitions {
                    ClientError::check(
                        p.error_code,
                        ApiKey::ListOffsets,
                        Some(topic),
                        Some(p.partition_index),
                    )
                    .map_err(|e| e.with_broker(leader))?;
                    found.insert(
                        p.partition_index,
                        ListedOffset {
                            partition: p.partition_index,
                            offset: p.offset,
                            timestamp: p.timestamp,
                            leader_epoch: p.leader_epoch,
                        },
                    );
                }
            }
        }
        partitions
            .iter()
            .map(|p| {
                found
                    .get(p)
                    .copied()
                    .ok_or_else(|| ClientError::MissingInResponse {
                        api: ApiKey::ListOffsets,
                        what: format!("{topic}-{p}"),
                    })
            })
            .collect()
    }
}
