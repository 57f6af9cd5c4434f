//! Rack-aware standbys: with `client.rack` set, a task's standby goes to
//! an instance in another rack than its active, so losing a rack (a zone)
//! never loses every copy of a task's state. On the in-process cluster
//! under tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;
use weir_streams::runtime::{KafkaStreams, TaskState};

#[tokio::test(start_paused = true)]
async fn each_tasks_standby_is_in_another_rack_than_its_active() {
    let kit = testkit(1, 4).await;
    // Racks chosen against name order: a and b share one, c and d the other.
    let racks = [
        ("a", "rack-1"),
        ("b", "rack-1"),
        ("c", "rack-2"),
        ("d", "rack-2"),
    ];
    let dirs: Vec<_> = racks.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    let mut instances: Vec<(&str, KafkaStreams)> = Vec::new();
    for ((id, rack), dir) in racks.iter().zip(&dirs) {
        let props = [("num.standby.replicas", "1"), ("client.rack", *rack)];
        let s = start(
            count_keys(),
            streams_config(&kit, "rk", id, dir.path(), &props),
        )
        .await;
        instances.push((rack, s));
    }
    // task -> (racks of its actives, racks of its standbys)
    let placement = |instances: &[(&str, KafkaStreams)]| {
        let mut by_task: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
        for (rack, s) in instances {
            for t in s.tasks() {
                let e = by_task.entry(t.id.to_string()).or_default();
                match t.state {
                    TaskState::Running => e.0.push((*rack).to_owned()),
                    TaskState::Standby => e.1.push((*rack).to_owned()),
                    _ => {}
                }
            }
        }
        by_task
    };
    eventually(
        "every task running once with one standby",
        Duration::from_secs(120),
        || async {
            let p = placement(&instances);
            p.len() == 4 && p.values().all(|(a, s)| a.len() == 1 && s.len() == 1)
        },
    )
    .await;
    for (task, (active, standby)) in placement(&instances) {
        assert_ne!(
            active, standby,
            "task {task}: active and standby in the same rack"
        );
    }
    for (_, s) in instances {
        s.close(Duration::from_secs(30)).await.unwrap();
    }
}
