//! Property tests of the assignors' invariants over random groups.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use proptest::prelude::*;
use weir_group::assignor::{Assignor, GroupSubscription, MemberSubscription, TopicPartition};

const TOPICS: [&str; 4] = ["a", "b", "c", "d"];

/// A random group: 1–8 members, up to 4 topics of 0–12 partitions, equal or
/// random subscriptions, and random (possibly conflicting, possibly stale)
/// ownership claims with random generations.
fn group(equal: bool) -> impl Strategy<Value = GroupSubscription> {
    (prop::collection::vec(0i32..12, 1..=4), 1usize..=8)
        .prop_flat_map(move |(counts, members)| {
            let topics = counts.len();
            let member = (
                prop::collection::btree_set(0..topics, 1..=topics),
                prop::collection::vec((0..topics, 0i32..14), 0..8),
                -1i32..4,
            );
            (Just(counts), prop::collection::vec(member, members))
        })
        .prop_map(move |(counts, members)| {
            let all: BTreeSet<usize> = (0..counts.len()).collect();
            GroupSubscription {
                partitions_per_topic: counts
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (TOPICS[i].to_owned(), *n))
                    .collect(),
                members: members
                    .into_iter()
                    .enumerate()
                    .map(|(i, (subs, owned, generation))| {
                        let subs = if equal { all.clone() } else { subs };
                        (
                            format!("member-{i}"),
                            MemberSubscription {
                                instance_id: None,
                                topics: subs.iter().map(|t| TOPICS[*t].to_owned()).collect(),
                                owned: owned
                                    .into_iter()
                                    .map(|(t, p)| TopicPartition::new(TOPICS[t], p))
                                    .collect(),
                                generation,
                                rack: None,
                            },
                        )
                    })
                    .collect(),
            }
        })
}

/// A group whose claims come from a previous valid assignment (no conflicts),
/// after random membership changes.
fn settled_group(equal: bool) -> impl Strategy<Value = GroupSubscription> {
    (group(equal), any::<u64>()).prop_map(|(mut g, seed)| {
        for m in g.members.values_mut() {
            m.owned.clear();
        }
        let first = Assignor::CooperativeSticky.assign(&g);
        rejoin_with(&mut g, &first, 1);
        // Churn: drop some members (their partitions become unclaimed) and
        // add fresh ones.
        let ids: Vec<String> = g.members.keys().cloned().collect();
        for (i, id) in ids.iter().enumerate() {
            if (seed >> (i % 64)) & 1 == 1 && g.members.len() > 1 {
                g.members.remove(id);
            }
        }
        let template = g
            .members
            .values()
            .next()
            .map(|m| m.topics.clone())
            .unwrap_or_default();
        for j in 0..(seed % 3) {
            let mut m = MemberSubscription::new(template.iter().cloned());
            m.generation = -1;
            g.members.insert(format!("new-{j}"), m);
        }
        g
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn range_and_round_robin_assign_every_partition_once(g in group(false)) {
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            let a = assignor.assign(&g);
            check_valid(&g, &a).map_err(TestCaseError::fail)?;
            let assigned: BTreeSet<_> = a.values().flatten().cloned().collect();
            prop_assert_eq!(&assigned, &assignable(&g), "{}", assignor.name());
        }
    }

    #[test]
    fn round_robin_is_within_one_for_equal_subscriptions(g in group(true)) {
        check_within_one(&Assignor::RoundRobin.assign(&g)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn range_is_within_one_per_topic(g in group(true)) {
        let a = Assignor::Range.assign(&g);
        for topic in g.partitions_per_topic.keys() {
            let per_topic: BTreeMap<_, BTreeSet<_>> = a.iter().map(|(m, s)| {
                (m.clone(), s.iter().filter(|tp| &tp.topic == topic).cloned().collect())
            }).collect();
            check_within_one(&per_topic).map_err(TestCaseError::fail)?;
        }
    }

    /// Valid, never hands over a claimed partition, leaves nothing unclaimed
    /// unassigned, whatever the claims.
    #[test]
    fn cooperative_sticky_is_safe_for_any_claims(g in group(false)) {
        let a = Assignor::CooperativeSticky.assign(&g);
        check_valid(&g, &a).map_err(TestCaseError::fail)?;
        check_cooperative(&g, &a).map_err(TestCaseError::fail)?;
        check_complete_except_claimed(&g, &a).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&a, &Assignor::CooperativeSticky.assign(&g), "deterministic");
    }

    /// With equal subscriptions and valid claims: one revoke round, then
    /// everything is assigned, within one, and stable.
    #[test]
    fn cooperative_sticky_equal_settles_in_two_rounds_within_one(g in settled_group(true)) {
        let mut g = g;
        let first = Assignor::CooperativeSticky.assign(&g);
        check_cooperative(&g, &first).map_err(TestCaseError::fail)?;
        rejoin_with(&mut g, &first, 2);
        let second = Assignor::CooperativeSticky.assign(&g);
        check_cooperative(&g, &second).map_err(TestCaseError::fail)?;
        let assigned: BTreeSet<_> = second.values().flatten().cloned().collect();
        prop_assert_eq!(&assigned, &assignable(&g));
        check_within_one(&second).map_err(TestCaseError::fail)?;
        rejoin_with(&mut g, &second, 3);
        prop_assert_eq!(&Assignor::CooperativeSticky.assign(&g), &second, "stable");
    }

    /// Stickiness: with equal subscriptions, a member keeps at least
    /// min(owned, ⌊P/M⌋) of the partitions it validly owns.
    #[test]
    fn cooperative_sticky_keeps_owned_partitions_up_to_quota(g in settled_group(true)) {
        let a = Assignor::CooperativeSticky.assign(&g);
        let quota = assignable(&g).len() / g.members.len();
        for (id, m) in &g.members {
            let owned: BTreeSet<_> = m.owned.iter().cloned().collect();
            let kept = owned.intersection(&a[id]).count();
            prop_assert!(kept >= owned.len().min(quota), "{id} kept {kept} of {} (quota {quota})", owned.len());
        }
    }

    /// With unequal subscriptions: settles within a few rounds into an
    /// assignment where no single move improves balance.
    #[test]
    fn cooperative_sticky_unequal_settles_balanced(g in settled_group(false)) {
        let mut g = g;
        let mut previous = None;
        for round in 2..10 {
            let a = Assignor::CooperativeSticky.assign(&g);
            check_valid(&g, &a).map_err(TestCaseError::fail)?;
            check_cooperative(&g, &a).map_err(TestCaseError::fail)?;
            if previous.as_ref() == Some(&a) {
                let assigned: BTreeSet<_> = a.values().flatten().cloned().collect();
                prop_assert_eq!(&assigned, &assignable(&g));
                check_no_improving_move(&g, &a).map_err(TestCaseError::fail)?;
                if equal_subscriptions(&g) {
                    check_within_one(&a).map_err(TestCaseError::fail)?;
                }
                return Ok(());
            }
            rejoin_with(&mut g, &a, round);
            previous = Some(a);
        }
        prop_assert!(false, "did not settle within 8 rounds");
    }
}
