//! Table tests of the partition assignors against known answers: the
//! examples in Java's assignor documentation, and hand-worked cooperative
//! cases.

use std::collections::{BTreeMap, BTreeSet};

use weir_group::assignor::{
    Assignor, GroupAssignment, GroupSubscription, MemberSubscription, TopicPartition,
    cooperative_sticky_user_data, to_wire_assignment,
};
use weir_group::consumer_protocol::{Assignment, Subscription, TopicPartitions};

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition::new(topic, p)
}

fn tps(list: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
    list.iter().map(|(t, p)| tp(t, *p)).collect()
}

fn group(members: &[(&str, MemberSubscription)], topics: &[(&str, i32)]) -> GroupSubscription {
    GroupSubscription {
        members: members
            .iter()
            .map(|(id, m)| ((*id).to_owned(), m.clone()))
            .collect(),
        partitions_per_topic: topics.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect(),
    }
}

fn owning(topics: &[&str], owned: &[(&str, i32)], generation: i32) -> MemberSubscription {
    MemberSubscription {
        owned: owned.iter().map(|(t, p)| tp(t, *p)).collect(),
        generation,
        ..MemberSubscription::new(topics.iter().copied())
    }
}

fn expect(a: &GroupAssignment, member: &str, want: &[(&str, i32)]) {
    assert_eq!(a[member], tps(want), "member {member}");
}

#[test]
fn range_matches_javas_documented_example() {
    // RangeAssignor javadoc: C0, C1 on t0 and t1 of 3 partitions each.
    let g = group(
        &[
            ("C0", MemberSubscription::new(["t0", "t1"])),
            ("C1", MemberSubscription::new(["t0", "t1"])),
        ],
        &[("t0", 3), ("t1", 3)],
    );
    let a = Assignor::Range.assign(&g);
    expect(&a, "C0", &[("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)]);
    expect(&a, "C1", &[("t0", 2), ("t1", 2)]);
}

#[test]
fn range_orders_static_members_by_instance_id_first() {
    let mut z = MemberSubscription::new(["t"]);
    z.instance_id = Some("a-instance".into());
    let g = group(
        &[
            ("a-member", MemberSubscription::new(["t"])),
            ("z-member", z),
        ],
        &[("t", 3)],
    );
    let a = Assignor::Range.assign(&g);
    // The static member sorts first although its member id sorts last.
    expect(&a, "z-member", &[("t", 0), ("t", 1)]);
    expect(&a, "a-member", &[("t", 2)]);
}

#[test]
fn round_robin_matches_javas_documented_examples() {
    let g = group(
        &[
            ("C0", MemberSubscription::new(["t0", "t1"])),
            ("C1", MemberSubscription::new(["t0", "t1"])),
        ],
        &[("t0", 3), ("t1", 3)],
    );
    let a = Assignor::RoundRobin.assign(&g);
    expect(&a, "C0", &[("t0", 0), ("t0", 2), ("t1", 1)]);
    expect(&a, "C1", &[("t0", 1), ("t1", 0), ("t1", 2)]);

    // Unequal subscriptions.
    let g = group(
        &[
            ("C0", MemberSubscription::new(["t0"])),
            ("C1", MemberSubscription::new(["t0", "t1"])),
            ("C2", MemberSubscription::new(["t0", "t1", "t2"])),
        ],
        &[("t0", 1), ("t1", 2), ("t2", 3)],
    );
    let a = Assignor::RoundRobin.assign(&g);
    expect(&a, "C0", &[("t0", 0)]);
    expect(&a, "C1", &[("t1", 0)]);
    expect(&a, "C2", &[("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]);
}

#[test]
fn cooperative_sticky_fresh_group_is_balanced() {
    let g = group(
        &[
            ("a", MemberSubscription::new(["t"])),
            ("b", MemberSubscription::new(["t"])),
            ("c", MemberSubscription::new(["t"])),
        ],
        &[("t", 7)],
    );
    let a = Assignor::CooperativeSticky.assign(&g);
    let mut counts: Vec<usize> = a.values().map(BTreeSet::len).collect();
    counts.sort();
    assert_eq!(counts, vec![2, 2, 3]);
    let all: BTreeSet<_> = a.values().flatten().cloned().collect();
    assert_eq!(all.len(), 7);
}

#[test]
fn cooperative_sticky_joiner_gets_moved_partitions_one_round_later() {
    let t = ["t"];
    let mut g = group(
        &[
            ("a", owning(&t, &[("t", 0), ("t", 1), ("t", 2)], 1)),
            ("b", owning(&t, &[("t", 3), ("t", 4), ("t", 5)], 1)),
            ("c", MemberSubscription::new(t)),
        ],
        &[("t", 6)],
    );
    let first = Assignor::CooperativeSticky.assign(&g);
    // a and b keep two each; the one each gives up goes to nobody yet.
    expect(&first, "a", &[("t", 0), ("t", 1)]);
    expect(&first, "b", &[("t", 3), ("t", 4)]);
    expect(&first, "c", &[]);

    // Everyone rejoins with what it now owns.
    for (id, parts) in &first {
        let m = g.members.get_mut(id).unwrap();
        m.owned = parts.iter().cloned().collect();
        m.generation = 2;
    }
    let second = Assignor::CooperativeSticky.assign(&g);
    expect(&second, "a", &[("t", 0), ("t", 1)]);
    expect(&second, "b", &[("t", 3), ("t", 4)]);
    expect(&second, "c", &[("t", 2), ("t", 5)]);
}

#[test]
fn cooperative_sticky_same_generation_conflict_goes_to_neither() {
    let g = group(
        &[
            ("a", owning(&["t"], &[("t", 0), ("t", 1)], 3)),
            ("b", owning(&["t"], &[("t", 0)], 3)),
        ],
        &[("t", 2)],
    );
    let a = Assignor::CooperativeSticky.assign(&g);
    assert!(!a["a"].contains(&tp("t", 0)));
    assert!(!a["b"].contains(&tp("t", 0)));
    expect(&a, "a", &[("t", 1)]);
}

#[test]
fn cooperative_sticky_higher_generation_wins_a_conflict() {
    let g = group(
        &[
            ("a", owning(&["t"], &[("t", 0)], 2)),
            ("b", owning(&["t"], &[("t", 0), ("t", 1)], 5)),
        ],
        &[("t", 2)],
    );
    let a = Assignor::CooperativeSticky.assign(&g);
    // b's claim on t-0 is the newer one, and b keeps one partition as balance
    // allows; a's stale claim gives it nothing it claimed.
    assert!(a["b"].contains(&tp("t", 0)));
    assert!(!a["a"].contains(&tp("t", 0)));
}

#[test]
fn cooperative_sticky_reassigns_a_departed_members_partitions_at_once() {
    // c left: nobody claims t-4 and t-5, so they are assigned in this round.
    let t = ["t"];
    let g = group(
        &[
            ("a", owning(&t, &[("t", 0), ("t", 1)], 4)),
            ("b", owning(&t, &[("t", 2), ("t", 3)], 4)),
        ],
        &[("t", 6)],
    );
    let a = Assignor::CooperativeSticky.assign(&g);
    assert_eq!(a["a"].len() + a["b"].len(), 6);
    assert!(a["a"].is_superset(&tps(&[("t", 0), ("t", 1)])));
    assert!(a["b"].is_superset(&tps(&[("t", 2), ("t", 3)])));
}

#[test]
fn cooperative_sticky_revokes_partitions_of_an_unsubscribed_topic_first() {
    // a dropped topic u but still owns u-0: b may only get it next round.
    let g = group(
        &[
            ("a", owning(&["t"], &[("t", 0), ("u", 0)], 1)),
            ("b", owning(&["t", "u"], &[("t", 1)], 1)),
        ],
        &[("t", 2), ("u", 1)],
    );
    let a = Assignor::CooperativeSticky.assign(&g);
    expect(&a, "a", &[("t", 0)]);
    expect(&a, "b", &[("t", 1)]);
}

#[test]
fn cooperative_sticky_ignores_claims_on_partitions_that_do_not_exist() {
    let g = group(
        &[("a", owning(&["t"], &[("t", 0), ("t", 9), ("gone", 0)], 1))],
        &[("t", 2)],
    );
    let a = Assignor::CooperativeSticky.assign(&g);
    expect(&a, "a", &[("t", 0), ("t", 1)]);
}

#[test]
fn members_with_no_assignable_topic_are_present_and_empty() {
    let g = group(
        &[
            ("a", MemberSubscription::new(["t"])),
            ("b", MemberSubscription::new(["missing"])),
        ],
        &[("t", 2)],
    );
    for assignor in [
        Assignor::Range,
        Assignor::RoundRobin,
        Assignor::CooperativeSticky,
    ] {
        let a = assignor.assign(&g);
        assert_eq!(a["b"], BTreeSet::new(), "{}", assignor.name());
        assert_eq!(a["a"].len(), 2, "{}", assignor.name());
        assert_eq!(Assignor::from_name(assignor.name()), Some(assignor));
    }
    let empty = GroupSubscription {
        members: BTreeMap::new(),
        partitions_per_topic: [("t".to_owned(), 3)].into(),
    };
    assert!(Assignor::CooperativeSticky.assign(&empty).is_empty());
}

#[test]
fn wire_subscriptions_feed_the_assignor_and_assignments_go_back_on_the_wire() {
    let sub = Subscription {
        topics: vec!["t".into()],
        owned_partitions: vec![TopicPartitions {
            topic: "t".into(),
            partitions: vec![1, 2],
        }],
        generation_id: 4,
        ..Subscription::default()
    };
    let (_, decoded) = Subscription::decode(&sub.encode(3).unwrap()).unwrap();
    let member = MemberSubscription::from_wire(Some("static-1".into()), &decoded);
    assert_eq!(member.generation, 4);
    assert_eq!(member.owned, vec![tp("t", 1), tp("t", 2)]);
    assert_eq!(member.instance_id.as_deref(), Some("static-1"));

    let g = group(&[("a", member)], &[("t", 3), ("u", 1)]);
    let a = Assignor::CooperativeSticky.assign(&g);
    let wire = to_wire_assignment(&a["a"]);
    assert_eq!(
        wire.assigned_partitions,
        vec![TopicPartitions {
            topic: "t".into(),
            partitions: vec![0, 1, 2]
        }]
    );
    let (_, back) = Assignment::decode(&wire.encode(3).unwrap()).unwrap();
    assert_eq!(back, wire);
}

#[test]
fn generation_falls_back_to_javas_cooperative_user_data() {
    // A Java 3.3 consumer: subscription v1, generation only in user data.
    let sub = Subscription {
        topics: vec!["t".into()],
        user_data: Some(cooperative_sticky_user_data(9)),
        owned_partitions: vec![TopicPartitions {
            topic: "t".into(),
            partitions: vec![0],
        }],
        ..Subscription::default()
    };
    let (_, decoded) = Subscription::decode(&sub.encode(1).unwrap()).unwrap();
    assert_eq!(MemberSubscription::from_wire(None, &decoded).generation, 9);
    // The v2 field wins when present; other user data is not a generation.
    let mut v3 = sub.clone();
    v3.generation_id = 11;
    assert_eq!(MemberSubscription::from_wire(None, &v3).generation, 11);
    let mut other = sub;
    other.user_data = Some(bytes::Bytes::from_static(b"\x00\x00\x00\x01\x00"));
    assert_eq!(MemberSubscription::from_wire(None, &other).generation, -1);
}
