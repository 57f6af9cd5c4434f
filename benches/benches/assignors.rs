//! Assignor benches at 10,000 partitions × 1,000 members (issue #4).
//!
//! Run: `cargo bench -p weir-benches --bench assignors`.
//!
//! Scenarios: a fresh group (nobody owns anything), one member joining a
//! settled group, one member leaving it, and unequal subscriptions (every
//! member on 5 of the 10 topics, the sticky assignor's general path).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use weir_group::assignor::{Assignor, GroupSubscription, MemberSubscription};
use weir_group::task_assignor::{
    self, ClientState, TaskAssignmentInput, TaskAssignorConfig, TaskId,
};

const TOPICS: usize = 10;
const PARTITIONS_PER_TOPIC: i32 = 1_000;
const MEMBERS: usize = 1_000;

fn topic(i: usize) -> String {
    format!("topic-{i:02}")
}

fn fresh_group(unequal: bool) -> GroupSubscription {
    let partitions_per_topic: BTreeMap<String, i32> = (0..TOPICS)
        .map(|t| (topic(t), PARTITIONS_PER_TOPIC))
        .collect();
    let members = (0..MEMBERS)
        .map(|m| {
            let topics: Vec<String> = if unequal {
                // Five topics per member, shifting with the member.
                (0..5).map(|k| topic((m + k * 2) % TOPICS)).collect()
            } else {
                (0..TOPICS).map(topic).collect()
            };
            (format!("member-{m:04}"), MemberSubscription::new(topics))
        })
        .collect();
    GroupSubscription {
        members,
        partitions_per_topic,
    }
}

/// The group after it settled: every member owns what the assignor gave it.
fn settled_group(unequal: bool) -> GroupSubscription {
    let mut g = fresh_group(unequal);
    let a = Assignor::CooperativeSticky.assign(&g);
    for (id, m) in g.members.iter_mut() {
        m.owned = a[id].iter().cloned().collect();
        m.generation = 1;
    }
    g
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("assignors_10k_partitions_1k_members");

    let fresh = fresh_group(false);
    group.bench_function("cooperative_sticky_fresh", |b| {
        b.iter(|| Assignor::CooperativeSticky.assign(black_box(&fresh)))
    });
    group.bench_function("range_fresh", |b| {
        b.iter(|| Assignor::Range.assign(black_box(&fresh)))
    });
    group.bench_function("round_robin_fresh", |b| {
        b.iter(|| Assignor::RoundRobin.assign(black_box(&fresh)))
    });

    let mut join = settled_group(false);
    join.members.insert(
        "member-joining".into(),
        MemberSubscription::new((0..TOPICS).map(topic)),
    );
    group.bench_function("cooperative_sticky_member_joins", |b| {
        b.iter(|| Assignor::CooperativeSticky.assign(black_box(&join)))
    });

    let mut leave = settled_group(false);
    leave.members.remove("member-0500");
    group.bench_function("cooperative_sticky_member_leaves", |b| {
        b.iter(|| Assignor::CooperativeSticky.assign(black_box(&leave)))
    });

    let unequal = fresh_group(true);
    group.bench_function("cooperative_sticky_unequal_fresh", |b| {
        b.iter(|| Assignor::CooperativeSticky.assign(black_box(&unequal)))
    });
    let mut unequal_join = settled_group(true);
    unequal_join.members.insert(
        "member-joining".into(),
        MemberSubscription::new((0..5).map(topic)),
    );
    group.bench_function("cooperative_sticky_unequal_member_joins", |b| {
        b.iter(|| Assignor::CooperativeSticky.assign(black_box(&unequal_join)))
    });
    group.finish();

    // The high-availability task assignor at Kafka Streams scale: 100
    // instances of 4 threads, 1,000 stateful and 200 stateless tasks, one
    // standby each; a settled group that just gained an instance.
    let config = TaskAssignorConfig {
        num_standby_replicas: 1,
        ..TaskAssignorConfig::default()
    };
    let mut input = TaskAssignmentInput {
        clients: (0..100)
            .map(|i| (format!("instance-{i:03}"), ClientState::new(4)))
            .collect(),
        stateful_tasks: (0..1_000).map(|p| TaskId::new(0, p)).collect(),
        stateless_tasks: (0..200).map(|p| TaskId::new(1, p)).collect(),
    };
    if let Ok(first) = task_assignor::assign(&input, &config) {
        for (id, c) in input.clients.iter_mut() {
            let a = &first.clients[id];
            c.previous_active = a.active.clone();
            c.previous_standby = a.standby.clone();
            c.lags = a.standby.iter().map(|t| (*t, 0)).collect();
        }
    }
    input
        .clients
        .insert("instance-new".into(), ClientState::new(4));
    let mut ha = c.benchmark_group("ha_task_assignor");
    ha.bench_function("1k_stateful_100_instances_one_joins", |b| {
        b.iter(|| task_assignor::assign(black_box(&input), &config))
    });
    ha.finish();
}

criterion_group! {
    name = benches;
    // Few samples: each iteration is a whole group's assignment, and the
    // bench should finish in a minute or two on a shared 2-core machine.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
