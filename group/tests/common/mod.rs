//! Invariant checkers shared by the assignor property tests and the churn
//! simulation. Each is written from the rule, not from the implementation.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use weir_group::assignor::{GroupAssignment, GroupSubscription, TopicPartition};

/// Every partition some member subscribes to.
pub fn assignable(g: &GroupSubscription) -> BTreeSet<TopicPartition> {
    let mut out = BTreeSet::new();
    for (topic, &n) in &g.partitions_per_topic {
        if g.members.values().any(|m| m.topics.contains(topic)) {
            out.extend((0..n.max(0)).map(|p| TopicPartition::new(topic.clone(), p)));
        }
    }
    out
}

/// Every member present; every assigned partition exists, is subscribed by
/// its assignee, and is assigned once.
pub fn check_valid(g: &GroupSubscription, a: &GroupAssignment) -> Result<(), String> {
    let keys: BTreeSet<&String> = a.keys().collect();
    let members: BTreeSet<&String> = g.members.keys().collect();
    if keys != members {
        return Err(format!("members {members:?} but assignment for {keys:?}"));
    }
    let mut seen = BTreeSet::new();
    for (member, parts) in a {
        for tp in parts {
            let Some(&n) = g.partitions_per_topic.get(&tp.topic) else {
                return Err(format!("{member} got {tp:?} of an unknown topic"));
            };
            if tp.partition < 0 || tp.partition >= n {
                return Err(format!("{member} got nonexistent {tp:?}"));
            }
            if !g.members[member].topics.contains(&tp.topic) {
                return Err(format!("{member} got {tp:?} without subscribing"));
            }
            if !seen.insert(tp.clone()) {
                return Err(format!("{tp:?} assigned twice"));
            }
        }
    }
    Ok(())
}

/// Claimants of each partition with their generations.
pub fn claims(g: &GroupSubscription) -> BTreeMap<TopicPartition, Vec<(String, i32)>> {
    let mut out: BTreeMap<TopicPartition, Vec<(String, i32)>> = BTreeMap::new();
    for (id, m) in &g.members {
        for tp in m.owned.iter().collect::<BTreeSet<_>>() {
            out.entry(tp.clone())
                .or_default()
                .push((id.clone(), m.generation));
        }
    }
    out
}

/// KIP-429 safety: a member gets a partition only if nobody claims it, or it
/// claims it itself with a generation above every other claimant's.
pub fn check_cooperative(g: &GroupSubscription, a: &GroupAssignment) -> Result<(), String> {
    let claims = claims(g);
    for (member, parts) in a {
        for tp in parts {
            let Some(claimants) = claims.get(tp) else {
                continue;
            };
            let Some(&(_, mine)) = claimants.iter().find(|(id, _)| id == member) else {
                return Err(format!("{member} got {tp:?} claimed by {claimants:?}"));
            };
            if claimants
                .iter()
                .any(|(id, gen_)| id != member && *gen_ >= mine)
            {
                return Err(format!(
                    "{member} (gen {mine}) got {tp:?} contested by {claimants:?}"
                ));
            }
        }
    }
    Ok(())
}

/// Nothing is left unassigned except partitions someone still claims.
pub fn check_complete_except_claimed(
    g: &GroupSubscription,
    a: &GroupAssignment,
) -> Result<(), String> {
    let assigned: BTreeSet<&TopicPartition> = a.values().flatten().collect();
    let claims = claims(g);
    for tp in assignable(g) {
        if !assigned.contains(&tp) && !claims.contains_key(&tp) {
            return Err(format!("{tp:?} is unclaimed and unassigned"));
        }
    }
    Ok(())
}

/// Member counts differ by at most one.
pub fn check_within_one(a: &GroupAssignment) -> Result<(), String> {
    let min = a.values().map(BTreeSet::len).min().unwrap_or(0);
    let max = a.values().map(BTreeSet::len).max().unwrap_or(0);
    if max > min + 1 {
        return Err(format!("counts from {min} to {max}"));
    }
    Ok(())
}

/// No single partition could move to an eligible member with at least two
/// fewer partitions (the balance criterion for unequal subscriptions).
pub fn check_no_improving_move(g: &GroupSubscription, a: &GroupAssignment) -> Result<(), String> {
    for (member, parts) in a {
        for tp in parts {
            for (other, m) in &g.members {
                if other != member
                    && m.topics.contains(&tp.topic)
                    && a[other].len() + 1 < parts.len()
                {
                    return Err(format!(
                        "{tp:?} could move from {member} ({}) to {other} ({})",
                        parts.len(),
                        a[other].len()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether all members subscribe to the same topics.
pub fn equal_subscriptions(g: &GroupSubscription) -> bool {
    let mut subs = g.members.values().map(|m| &m.topics);
    match subs.next() {
        Some(first) => subs.all(|s| s == first),
        None => true,
    }
}

/// Feeds an assignment back as the members' owned partitions, one
/// generation later (what members report at the next JoinGroup).
pub fn rejoin_with(g: &mut GroupSubscription, a: &GroupAssignment, generation: i32) {
    for (id, m) in g.members.iter_mut() {
        m.owned = a
            .get(id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        m.generation = generation;
    }
}
