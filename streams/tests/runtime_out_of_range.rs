//! A store whose committed offset the changelog no longer holds (the
//! records from there were deleted: DeleteRecords, `delete` retention) is
//! wiped and restored from the changelog's start, not restored from the
//! start on top of its old contents: a tombstone deleted meanwhile would
//! never be applied, and the key it removed would come back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::*;
use weir_client::Lane;
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};
use weir_client::producer::{Producer, ProducerRecord};
use weir_protocol::kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use weir_protocol::kafka_protocol::messages::{DeleteRecordsRequest, TopicName};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_store::ChangelogPartition;
use weir_streams::processor::{Processor, ProcessorContext};
use weir_streams::state::KvStoreRef;
use weir_streams::{ProcessError, Record, Topology, TopologyBuilder};

const APP: &str = "oor";
const CHANGELOG: &str = "oor-kv-changelog";

/// `del` deletes the key; any other value is put.
struct Apply(KvStoreRef<String, String>);

impl Processor<String, String> for Apply {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        let store = ctx.kv_store(&self.0)?;
        if r.value == "del" {
            store.delete(&r.key, r.timestamp)?;
        } else {
            store.put(&r.key, &r.value, r.timestamp)?;
        }
        Ok(())
    }
}

fn apply() -> Topology {
    let mut b = TopologyBuilder::new();
    let kv = b.kv_store::<String, String>("kv");
    let input = b.source::<String, String>("in", &[INPUT]);
    let k = kv.clone();
    let node = b.processor("apply", &[&input], move || Apply(k.clone()), &[&kv]);
    b.sink("out", &[&node], OUTPUT);
    b.build().unwrap()
}

async fn send(kit: &Arc<weir_testkit::Cluster>, records: &[(&str, &str)]) {
    let producer = Producer::with_cluster(client(kit, "feeder").await, Default::default()).unwrap();
    for (k, v) in records {
        let r = ProducerRecord::new(INPUT)
            .with_key((*k).to_owned())
            .with_value((*v).to_owned())
            .with_timestamp(1_000);
        producer.enqueue(r).await.unwrap().await.unwrap();
    }
    producer.close().await;
}

async fn committed(kit: &Arc<weir_testkit::Cluster>) -> Option<i64> {
    let client = client(kit, "checker").await;
    let tp = weir_group::assignor::TopicPartition::new(INPUT, 0);
    weir_group::offsets::fetch_committed(&client, APP, std::slice::from_ref(&tp), true)
        .await
        .unwrap()
        .get(&tp)
        .copied()
}

fn task_store(dir: &std::path::Path) -> weir_store::TaskStore {
    weir_store::TaskStore::open(
        dir.join(APP).join("0_0"),
        weir_store::StoreOptions::default(),
    )
    .unwrap()
}

/// The offset of the changelog's tombstone for `key`.
async fn tombstone(kit: &Arc<weir_testkit::Cluster>, key: &str) -> i64 {
    let mut consumer = Consumer::with_cluster(client(kit, "reader").await, Default::default());
    let tp = TopicPartition::new(CHANGELOG, 0);
    consumer.assign([tp.clone()]);
    consumer.seek(&tp, SeekTo::Earliest).unwrap();
    loop {
        for r in consumer.poll_for(Duration::from_millis(200)).await.unwrap() {
            if r.key.as_deref() == Some(key.as_bytes()) && r.value.is_none() {
                return r.offset;
            }
        }
    }
}

async fn delete_records_before(kit: &Arc<weir_testkit::Cluster>, offset: i64) {
    let client = client(kit, "admin").await;
    let request = DeleteRecordsRequest::default()
        .with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(CHANGELOG)))
                .with_partitions(vec![
                    DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(offset),
                ]),
        ])
        .with_timeout_ms(5_000);
    let response = client.request(0, Lane::Metadata, &request).await.unwrap();
    let p = &response.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, offset));
}

#[tokio::test(start_paused = true)]
async fn a_store_behind_the_changelogs_start_is_wiped_and_restored() {
    let kit = testkit(1, 1).await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let props = [("commit.interval.ms", "1000")];
    let config = |id: &str, dir: usize| streams_config(&kit, APP, id, dirs[dir].path(), &props);

    // a holds k1 and k2, then stops: its store stays on its disk.
    send(&kit, &[("k1", "v1"), ("k2", "v2")]).await;
    let a = start(apply(), config("a", 0)).await;
    eventually("a committed", Duration::from_secs(60), || async {
        committed(&kit).await == Some(2)
    })
    .await;
    a.close(Duration::from_secs(30)).await.unwrap();
    let behind =
        task_store(dirs[0].path()).committed_offset(&ChangelogPartition::new(CHANGELOG, 0));
    eprintln!("a's store: {behind:?}");

    // b deletes k1 and puts k3; then the changelog is truncated right past
    // k1's tombstone, past a's offset.
    let b = start(apply(), config("b", 1)).await;
    send(&kit, &[("k1", "del"), ("k3", "v3")]).await;
    eventually("b committed", Duration::from_secs(60), || async {
        committed(&kit).await == Some(4)
    })
    .await;
    b.close(Duration::from_secs(30)).await.unwrap();
    let tomb = tombstone(&kit, "k1").await;
    delete_records_before(&kit, tomb + 1).await;

    // a comes back on its old store.
    let a = start(apply(), config("a", 0)).await;
    eventually("a runs the task", Duration::from_secs(60), || async {
        a.metrics().tasks.len() == 1 && a.metrics().restoring_tasks == 0
    })
    .await;
    a.close(Duration::from_secs(30)).await.unwrap();
    let store = task_store(dirs[0].path());
    let kv = store.key_value_store("kv").unwrap();
    let keys: Vec<String> = kv
        .iter()
        .unwrap()
        .map(|e| String::from_utf8(e.unwrap().0).unwrap())
        .collect();
    assert_eq!(
        keys,
        ["k3"],
        "a's store after the restart (k1 was deleted, k2's record is gone from the changelog)"
    );
}
