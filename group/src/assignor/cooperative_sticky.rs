//! The cooperative-sticky assignor (KIP-429, Java's `CooperativeStickyAssignor`
//! on top of `AbstractStickyAssignor`).
//!
//! Three steps:
//! 1. resolve ownership claims by generation (module `claims`);
//! 2. compute a balanced, sticky target: with equal subscriptions, quotas of
//!    `⌊P/M⌋` and `⌈P/M⌉` where every member keeps up to its quota of what it
//!    owns; otherwise keep what is owned, place the rest on the least loaded
//!    eligible member, and move partitions while a move reduces imbalance;
//! 3. withhold every partition whose target is not its current owner: the
//!    owner revokes it in this round and it is assigned in the next.

use super::claims::{self, Claims, Universe};
use super::{GroupAssignment, GroupSubscription, TopicPartition, empty_assignment};

/// Assigns partitions cooperatively and stickily.
pub fn assign(group: &GroupSubscription) -> GroupAssignment {
    let universe = Universe::new(group);
    let claims = claims::resolve(group, &universe);
    let target = if equal_subscriptions(&universe) {
        balance_equal(&universe, &claims)
    } else {
        balance_general(&universe, &claims)
    };

    let mut out = empty_assignment(group);
    let mut withheld = 0usize;
    for (p, target) in target.iter().enumerate() {
        let Some(m) = *target else { continue };
        // Prevents: a partition owned by two members at once. A partition
        // anyone still claims goes only to its valid owner; a move is done as
        // revoke now (it is absent from the owner's assignment), assign next
        // round (when nobody claims it any more).
        if claims.claimed[p] && claims.owner[p] != Some(m) {
            withheld += 1;
            continue;
        }
        let (topic, partition) = universe.partition(p);
        if let Some(set) = out.get_mut(universe.members[m]) {
            set.insert(TopicPartition::new(topic, partition));
        }
    }
    tracing::debug!(
        members = universe.members.len(),
        partitions = universe.num_partitions(),
        withheld,
        "cooperative-sticky assignment computed"
    );
    out
}

/// Whether every member is eligible for every assignable topic (subscribed
/// topics that do not exist are ignored). A member eligible for none makes
/// the group unequal, and the general path gives it nothing.
fn equal_subscriptions(universe: &Universe<'_>) -> bool {
    let members = universe.members.len();
    universe.eligible.iter().all(|e| e.len() == members)
}

fn owned_by_member(universe: &Universe<'_>, claims: &Claims) -> Vec<Vec<usize>> {
    let mut owned = vec![Vec::new(); universe.members.len()];
    for (p, owner) in claims.owner.iter().enumerate() {
        if let Some(m) = owner {
            owned[*m].push(p);
        }
    }
    owned
}

/// Quota-based balance for equal subscriptions: every member ends with
/// `⌊P/M⌋` or `⌈P/M⌉` partitions, and keeps at least `min(owned, ⌊P/M⌋)`
/// of the partitions it owns.
fn balance_equal(universe: &Universe<'_>, claims: &Claims) -> Vec<Option<usize>> {
    let members = universe.members.len();
    let partitions = universe.num_partitions();
    let mut target = vec![None; partitions];
    if members == 0 {
        return target;
    }
    let min_quota = partitions / members;
    let with_extra = partitions % members;
    let mut extra_used = 0;
    let mut count = vec![0usize; members];

    // Stickiness: each member keeps its owned partitions up to its quota.
    for (m, owned) in owned_by_member(universe, claims).iter().enumerate() {
        let keep = if owned.len() > min_quota && extra_used < with_extra {
            extra_used += 1;
            min_quota + 1
        } else {
            owned.len().min(min_quota)
        };
        for &p in owned.iter().take(keep) {
            target[p] = Some(m);
        }
        count[m] = keep;
    }

    // Fill every member to the minimum quota, then hand the remaining
    // partitions (exactly the unused extra slots) one each.
    let unplaced: Vec<usize> = (0..partitions).filter(|p| target[*p].is_none()).collect();
    let mut unassigned = unplaced.into_iter();
    for (m, c) in count.iter_mut().enumerate() {
        while *c < min_quota {
            let Some(p) = unassigned.next() else { break };
            target[p] = Some(m);
            *c += 1;
        }
    }
    for (m, c) in count.iter_mut().enumerate() {
        if extra_used >= with_extra {
            break;
        }
        if *c == min_quota {
            let Some(p) = unassigned.next() else { break };
            target[p] = Some(m);
            *c += 1;
            extra_used += 1;
        }
    }
    target
}

/// Balance for unequal subscriptions: keep owned partitions the member is
/// still subscribed to, place the rest on the least loaded eligible member
/// (most constrained partitions first), then move partitions from a member to
/// an eligible one with at least two fewer until no such move exists.
fn balance_general(universe: &Universe<'_>, claims: &Claims) -> Vec<Option<usize>> {
    let members = universe.members.len();
    let partitions = universe.num_partitions();
    let mut target: Vec<Option<usize>> = vec![None; partitions];
    let mut count = vec![0usize; members];
    let mut assigned: Vec<Vec<usize>> = vec![Vec::new(); members];
    let eligible_for = |p: usize| &universe.eligible[universe.topic_of[p] as usize];

    for (p, owner) in claims.owner.iter().enumerate() {
        if let Some(m) = *owner
            && eligible_for(p).binary_search(&m).is_ok()
        {
            target[p] = Some(m);
            count[m] += 1;
            assigned[m].push(p);
        }
    }

    let mut unassigned: Vec<usize> = (0..partitions).filter(|p| target[*p].is_none()).collect();
    unassigned.sort_by_key(|&p| (eligible_for(p).len(), p));
    for p in unassigned {
        if let Some(&m) = eligible_for(p).iter().min_by_key(|&&m| (count[m], m)) {
            target[p] = Some(m);
            count[m] += 1;
            assigned[m].push(p);
        }
    }

    // Each move lowers the sum of squared counts by at least 2, so this ends.
    loop {
        let mut moved = false;
        let mut order: Vec<usize> = (0..members).collect();
        order.sort_by_key(|&m| (std::cmp::Reverse(count[m]), m));
        for m in order {
            let mut parts = std::mem::take(&mut assigned[m]);
            // Move partitions the member did not own before first.
            parts.sort_by_key(|&p| (claims.owner[p] == Some(m), p));
            let mut kept = Vec::with_capacity(parts.len());
            for p in parts {
                let to = eligible_for(p)
                    .iter()
                    .copied()
                    .filter(|&n| n != m)
                    .min_by_key(|&n| (count[n], n));
                match to {
                    Some(n) if count[n] + 1 < count[m] => {
                        target[p] = Some(n);
                        count[m] -= 1;
                        count[n] += 1;
                        assigned[n].push(p);
                        moved = true;
                    }
                    _ => kept.push(p),
                }
            }
            assigned[m] = kept;
        }
        if !moved {
            break;
        }
    }
    target
}
