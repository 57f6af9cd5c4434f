//! Metadata, ListOffsets, DeleteRecords, CreateTopics, DeleteTopics,
//! CreatePartitions and DescribeConfigs.

// Helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{PLAIN, TestClient, batch, produce_request, topic};
use tokio::io::DuplexStream;
use weir_protocol::kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use weir_protocol::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use weir_protocol::kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use weir_protocol::kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use weir_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use weir_protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use weir_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use weir_protocol::kafka_protocol::messages::*;
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_protocol::records::{BatchBuilder, BatchOptions, RecordInput};
use weir_testkit::Cluster;

async fn client(cluster: &Cluster, broker: i32) -> TestClient<DuplexStream> {
    TestClient::new(cluster.connect_duplex(broker).await.unwrap(), "admin")
}

fn create(name: &str, partitions: i32, configs: &[(&str, &str)]) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_timeout_ms(1000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(topic(name))
                .with_num_partitions(partitions)
                .with_replication_factor(-1)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string((*k).to_owned()))
                                .with_value(Some(StrBytes::from_string((*v).to_owned())))
                        })
                        .collect(),
                ),
        ])
}

fn metadata(names: &[&str], auto_create: bool) -> MetadataRequest {
    MetadataRequest::default()
        .with_allow_auto_topic_creation(auto_create)
        .with_topics(Some(
            names
                .iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(topic(n))))
                .collect(),
        ))
}

#[tokio::test]
async fn create_describe_grow_and_delete_topics() {
    let cluster = Cluster::builder().brokers(3).build().await.unwrap();
    let mut c = client(&cluster, 0).await;
    let resp = c
        .call(
            7,
            &create(
                "orders",
                3,
                &[("cleanup.policy", "compact"), ("retention.ms", "1000")],
            ),
        )
        .await;
    let t = &resp.topics[0];
    assert_eq!(
        (t.error_code, t.num_partitions, t.replication_factor),
        (0, 3, 1)
    );
    assert!(!t.topic_id.is_nil());
    let policy = t
        .configs
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.name.as_str() == "cleanup.policy")
        .unwrap();
    assert_eq!(policy.value.as_deref(), Some("compact"));

    let resp = c.call(7, &create("orders", 3, &[])).await;
    assert_eq!(resp.topics[0].error_code, 36, "TOPIC_ALREADY_EXISTS");
    let resp = c.call(7, &create("bad name!", 1, &[])).await;
    assert_eq!(resp.topics[0].error_code, 17, "INVALID_TOPIC_EXCEPTION");
    let resp = c.call(7, &create("x", i32::MAX, &[])).await;
    assert_eq!(
        resp.topics[0].error_code, 37,
        "a hostile partition count is refused"
    );
    let resp = c.call(7, &create("x", 0, &[])).await;
    assert_eq!(resp.topics[0].error_code, 37, "INVALID_PARTITIONS");
    let resp = c.call(7, &create("x", 1, &[("no.such.config", "1")])).await;
    assert_eq!(resp.topics[0].error_code, 40, "INVALID_CONFIG");

    // Metadata: three partitions with leaders spread over the brokers.
    let md = c.call(12, &metadata(&["orders"], false)).await;
    assert_eq!(md.brokers.len(), 3);
    let leaders: Vec<i32> = md.topics[0]
        .partitions
        .iter()
        .map(|p| p.leader_id.0)
        .collect();
    assert_eq!(leaders, vec![0, 1, 2]);

    let describe = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("orders"))
            .with_configuration_keys(Some(vec![
                StrBytes::from_static_str("cleanup.policy"),
                StrBytes::from_static_str("segment.bytes"),
            ])),
    ]);
    let resp = c.call(4, &describe).await;
    let got: Vec<(String, String, i8, i8)> = resp.results[0]
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.value.as_ref().unwrap().to_string(),
                c.config_source,
                c.config_type,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("cleanup.policy".into(), "compact".into(), 1, 7),
            ("segment.bytes".into(), "1073741824".into(), 5, 3)
        ]
    );

    let grow = CreatePartitionsRequest::default().with_topics(vec![
        CreatePartitionsTopic::default()
            .with_name(topic("orders"))
            .with_count(5),
    ]);
    assert_eq!(c.call(3, &grow).await.results[0].error_code, 0);
    assert_eq!(
        c.call(3, &grow).await.results[0].error_code,
        37,
        "cannot shrink or keep the count"
    );
    let md = c.call(12, &metadata(&["orders"], false)).await;
    assert_eq!(md.topics[0].partitions.len(), 5);

    let del = DeleteTopicsRequest::default().with_topics(vec![
        DeleteTopicState::default().with_name(Some(topic("orders"))),
    ]);
    assert_eq!(c.call(6, &del).await.responses[0].error_code, 0);
    assert_eq!(c.call(6, &del).await.responses[0].error_code, 3);
    let md = c.call(12, &metadata(&["orders"], false)).await;
    assert_eq!(md.topics[0].error_code, 3, "gone, and not auto-created");
}

#[tokio::test]
async fn metadata_auto_creates_when_allowed() {
    let cluster = Cluster::builder()
        .default_partitions(4)
        .build()
        .await
        .unwrap();
    let mut c = client(&cluster, 0).await;
    let md = c.call(12, &metadata(&["auto"], true)).await;
    let v0_all = c
        .call(0, &MetadataRequest::default().with_topics(Some(vec![])))
        .await;
    assert_eq!(
        v0_all.topics.len(),
        1,
        "in v0 an empty list means every topic"
    );
    let v1_none = c
        .call(1, &MetadataRequest::default().with_topics(Some(vec![])))
        .await;
    assert!(v1_none.topics.is_empty());
    assert_eq!(
        (md.topics[0].error_code, md.topics[0].partitions.len()),
        (0, 4)
    );
    let off = Cluster::builder()
        .auto_create_topics(false)
        .build()
        .await
        .unwrap();
    let mut c = client(&off, 0).await;
    assert_eq!(
        c.call(12, &metadata(&["auto"], true)).await.topics[0].error_code,
        3
    );
}

fn list_offsets(timestamp: i64, isolation: i8) -> ListOffsetsRequest {
    ListOffsetsRequest::default()
        .with_isolation_level(isolation)
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(topic("t"))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(timestamp),
                ]),
        ])
}

fn timed_batch(timestamps: &[i64]) -> bytes::Bytes {
    let mut b = BatchBuilder::new(BatchOptions::default());
    for ts in timestamps {
        b.push(RecordInput {
            timestamp: *ts,
            key: None,
            value: Some(bytes::Bytes::from_static(b"v")),
            headers: vec![],
        });
    }
    b.build().unwrap()
}

#[tokio::test]
async fn list_offsets_and_delete_records() {
    let cluster = Cluster::builder().build().await.unwrap();
    cluster
        .create_topic("t", 1, [] as [(&str, &str); 0])
        .await
        .unwrap();
    let mut c = client(&cluster, 0).await;
    // Offsets 0..=2 at times 100, 300, 200; offsets 3..=4 at 400, 400.
    c.call(
        9,
        &produce_request("t", 0, timed_batch(&[100, 300, 200]), 1, None),
    )
    .await;
    c.call(
        9,
        &produce_request("t", 0, timed_batch(&[400, 400]), 1, None),
    )
    .await;
    let lookup = |resp: &ListOffsetsResponse| {
        let p = &resp.topics[0].partitions[0];
        (p.error_code, p.offset, p.timestamp)
    };
    assert_eq!(
        lookup(&c.call(7, &list_offsets(-2, 0)).await),
        (0, 0, -1),
        "earliest"
    );
    assert_eq!(
        lookup(&c.call(7, &list_offsets(-1, 0)).await),
        (0, 5, -1),
        "latest"
    );
    assert_eq!(
        lookup(&c.call(7, &list_offsets(250, 0)).await),
        (0, 1, 300),
        "first at or after 250"
    );
    assert_eq!(lookup(&c.call(7, &list_offsets(400, 0)).await), (0, 3, 400));
    assert_eq!(
        lookup(&c.call(7, &list_offsets(401, 0)).await),
        (0, -1, -1),
        "none"
    );
    assert_eq!(
        lookup(&c.call(7, &list_offsets(-3, 0)).await),
        (0, 3, 400),
        "max timestamp: its first record"
    );

    let delete = |offset: i64| {
        DeleteRecordsRequest::default().with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(topic("t"))
                .with_partitions(vec![
                    DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(offset),
                ]),
        ])
    };
    let resp = c.call(2, &delete(4)).await;
    let p = &resp.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, 4));
    assert_eq!(
        lookup(&c.call(7, &list_offsets(-2, 0)).await),
        (0, 4, -1),
        "earliest moved"
    );
    assert_eq!(
        c.call(2, &delete(9)).await.topics[0].partitions[0].error_code,
        1,
        "beyond the high watermark"
    );
    assert_eq!(
        c.call(2, &delete(-1)).await.topics[0].partitions[0].low_watermark,
        5
    );
    assert_eq!(cluster.offsets("t", 0).await.unwrap(), (5, 5, 5));
    // Produce after deleting everything continues at the end.
    let resp = c
        .call(9, &produce_request("t", 0, batch(&["x"], PLAIN), 1, None))
        .await;
    assert_eq!(resp.responses[0].partition_responses[0].base_offset, 5);
}
