//! An application's own assignor (G1 of the streams design): its
//! subscription user data reaches the leader, the leader's assignment user
//! data reaches each member, and cooperative hand-over works as for the
//! built-in assignors. On the testkit with tokio's paused clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod member_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use member_support::*;
use weir_group::assignor::custom::{AssignFuture, CustomGroup, GroupAssignor, MemberAssignment};
use weir_group::assignor::{RebalanceProtocol, TopicPartition};
use weir_group::member::{AssignmentEvent, GroupMember};

/// Gives every partition to the member whose user data is the smallest,
/// withholding what another member still owns (cooperative), and tells each
/// member, in its assignment's user data, who got everything.
#[derive(Debug)]
struct Smallest {
    me: &'static str,
    /// What the leader saw: user data per member id.
    seen: Mutex<Vec<BTreeMap<String, Option<Bytes>>>>,
    /// The assignments' user data this member received, by generation.
    received: Mutex<Vec<(i32, Option<Bytes>)>>,
}

impl Smallest {
    fn new(me: &'static str) -> Arc<Self> {
        Arc::new(Smallest {
            me,
            seen: Mutex::default(),
            received: Mutex::default(),
        })
    }
}

impl GroupAssignor for Smallest {
    fn name(&self) -> &str {
        "smallest"
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    fn subscription_user_data(
        &self,
        _owned: &BTreeSet<TopicPartition>,
        _generation: i32,
    ) -> Option<Bytes> {
        Some(Bytes::from(self.me))
    }

    fn assign<'a>(
        &'a self,
        _cluster: &'a weir_client::Cluster,
        group: &'a CustomGroup,
    ) -> AssignFuture<'a> {
        Box::pin(async move {
            self.seen.lock().unwrap().push(
                group
                    .members
                    .iter()
                    .map(|(id, m)| (id.clone(), m.user_data.clone()))
                    .collect(),
            );
            let winner = group
                .members
                .iter()
                .min_by_key(|(_, m)| m.user_data.clone())
                .map(|(id, _)| id.clone())
                .unwrap_or_default();
            let owned_elsewhere: BTreeSet<TopicPartition> = group
                .members
                .iter()
                .filter(|(id, _)| **id != winner)
                .flat_map(|(_, m)| m.subscription.owned.iter().cloned())
                .collect();
            let name = group.members.get(&winner).and_then(|m| m.user_data.clone());
            let mut out = BTreeMap::new();
            for id in group.members.keys() {
                let mut given = MemberAssignment {
                    partitions: BTreeSet::new(),
                    user_data: name.clone(),
                };
                if *id == winner {
                    for (topic, n) in &group.partitions_per_topic {
                        given.partitions.extend(
                            (0..*n)
                                .map(|p| TopicPartition::new(topic.clone(), p))
                                .filter(|tp| !owned_elsewhere.contains(tp)),
                        );
                    }
                }
                out.insert(id.clone(), given);
            }
            Ok(out)
        })
    }

    fn on_assignment(&self, assignment: &MemberAssignment, generation: i32) {
        self.received
            .lock()
            .unwrap()
            .push((generation, assignment.user_data.clone()));
    }
}

/// Polls `member` (acking revocations) until `done` holds for its owned set.
async fn drive(
    member: &mut GroupMember,
    owned: &mut BTreeSet<TopicPartition>,
    done: impl Fn(&BTreeSet<TopicPartition>) -> bool,
) {
    tokio::time::timeout(Duration::from_secs(120), async {
        while !done(owned) {
            match member.next_event().await.unwrap() {
                AssignmentEvent::Assigned { partitions: p, .. } => owned.extend(p),
                AssignmentEvent::Revoked(r) => {
                    for tp in &r.partitions {
                        owned.remove(tp);
                    }
                    r.ack();
                }
                AssignmentEvent::Lost(p) => {
                    for tp in &p {
                        owned.remove(tp);
                    }
                }
            }
        }
    })
    .await
    .expect("in time");
}

#[tokio::test(start_paused = true)]
async fn user_data_goes_both_ways_and_partitions_move_cooperatively() {
    let tk = testkit(4).await;
    let (za, ab) = (Smallest::new("zz"), Smallest::new("aa"));
    let mut a = GroupMember::start(
        client(&tk.bootstrap(), "a").await,
        config("custom").with_custom_assignor(za.clone()),
    )
    .unwrap();
    let mut a_owned = BTreeSet::new();
    drive(&mut a, &mut a_owned, |o| o.len() == 4).await;
    assert_eq!(
        za.received.lock().unwrap().last().unwrap().1.as_deref(),
        Some(&b"zz"[..])
    );

    // b's user data is smaller: everything moves to b, after a revoked it.
    let mut b = GroupMember::start(
        client(&tk.bootstrap(), "b").await,
        config("custom").with_custom_assignor(ab.clone()),
    )
    .unwrap();
    let mut b_owned = BTreeSet::new();
    let both = async {
        drive(&mut a, &mut a_owned, |o| o.is_empty()).await;
        (a, a_owned)
    };
    let ((), (a_back, a_owned)) = tokio::join!(
        async {
            drive(&mut b, &mut b_owned, |o| o.len() == 4).await;
        },
        both
    );
    assert!(a_owned.is_empty());
    assert_eq!(b_owned, partitions(4));
    // The leader saw both members' user data.
    let seen = za
        .seen
        .lock()
        .unwrap()
        .iter()
        .chain(ab.seen.lock().unwrap().iter())
        .cloned()
        .collect::<Vec<_>>();
    let last = seen.last().unwrap();
    let mut values: Vec<_> = last.values().cloned().collect();
    values.sort();
    assert_eq!(
        values,
        vec![Some(Bytes::from("aa")), Some(Bytes::from("zz"))]
    );
    // Both members were told who won in the last generation.
    let last_of = |x: &Smallest| x.received.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last_of(&ab).1.as_deref(), Some(&b"aa"[..]));
    assert_eq!(last_of(&za).1.as_deref(), Some(&b"aa"[..]));
    assert_eq!(last_of(&za).0, last_of(&ab).0);
    drop(a_back);
}
