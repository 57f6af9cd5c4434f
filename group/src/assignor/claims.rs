//! The index space the sticky assignor works in, and the resolution of
//! ownership claims from members' subscriptions.

use std::collections::HashMap;

use super::GroupSubscription;

/// Every assignable partition as a dense index, topic by topic.
pub(crate) struct Universe<'a> {
    /// Member ids in member-id order; a member is its index here.
    pub members: Vec<&'a str>,
    /// Topics that exist and that someone subscribes to, sorted, with counts.
    pub topics: Vec<(&'a str, i32)>,
    /// Index of a topic's partition 0.
    pub topic_start: Vec<usize>,
    /// Topic index of every partition.
    pub topic_of: Vec<u32>,
    /// Members subscribed to each topic, in member order.
    pub eligible: Vec<Vec<usize>>,
    topic_index: HashMap<&'a str, usize>,
}

impl<'a> Universe<'a> {
    pub(crate) fn new(group: &'a GroupSubscription) -> Self {
        let members: Vec<&str> = group.members.keys().map(String::as_str).collect();
        let mut topics = Vec::new();
        let mut topic_start = Vec::new();
        let mut topic_of = Vec::new();
        let mut eligible = Vec::new();
        let mut topic_index = HashMap::new();
        for (topic, &count) in &group.partitions_per_topic {
            if count <= 0 {
                continue;
            }
            let subscribers: Vec<usize> = group
                .members
                .values()
                .enumerate()
                .filter(|(_, m)| m.topics.contains(topic))
                .map(|(i, _)| i)
                .collect();
            if subscribers.is_empty() {
                continue;
            }
            let t = topics.len();
            topic_index.insert(topic.as_str(), t);
            topics.push((topic.as_str(), count));
            topic_start.push(topic_of.len());
            topic_of.extend(std::iter::repeat_n(t as u32, count as usize));
            eligible.push(subscribers);
        }
        Self {
            members,
            topics,
            topic_start,
            topic_of,
            eligible,
            topic_index,
        }
    }

    pub(crate) fn num_partitions(&self) -> usize {
        self.topic_of.len()
    }

    /// The index of a partition, if it exists and someone subscribes to it.
    pub(crate) fn index(&self, topic: &str, partition: i32) -> Option<usize> {
        let t = *self.topic_index.get(topic)?;
        let (_, count) = self.topics[t];
        (0..count)
            .contains(&partition)
            .then(|| self.topic_start[t] + partition as usize)
    }

    /// Topic name and partition of an index.
    pub(crate) fn partition(&self, p: usize) -> (&'a str, i32) {
        let t = self.topic_of[p] as usize;
        (self.topics[t].0, (p - self.topic_start[t]) as i32)
    }
}

/// Who may keep each partition, after resolving conflicting claims.
pub(crate) struct Claims {
    /// The valid previous owner of each partition.
    pub owner: Vec<Option<usize>>,
    /// Whether any member claims the partition, validly or not.
    pub claimed: Vec<bool>,
}

/// Resolves owned-partition claims by generation, as Java's
/// `AbstractStickyAssignor` does:
/// - one claimant: it owns the partition;
/// - a unique highest generation: that claimant owns it, the older claims
///   are stale (their members missed a rebalance and must not write);
/// - two or more claimants at the highest generation: nobody owns it.
///
/// Prevents: two members of one generation both keeping a partition after a
/// split brain; we cannot tell which is right, so neither keeps it this round.
pub(crate) fn resolve(group: &GroupSubscription, universe: &Universe<'_>) -> Claims {
    let n = universe.num_partitions();
    let mut best: Vec<Option<(i32, usize)>> = vec![None; n];
    let mut tied = vec![false; n];
    let mut claimed = vec![false; n];
    for (m, member) in group.members.values().enumerate() {
        for tp in &member.owned {
            let Some(p) = universe.index(&tp.topic, tp.partition) else {
                continue;
            };
            claimed[p] = true;
            let gen_ = member.generation;
            match best[p] {
                None => best[p] = Some((gen_, m)),
                Some((_, owner)) if owner == m => {}
                Some((g, _)) if gen_ > g => {
                    best[p] = Some((gen_, m));
                    tied[p] = false;
                }
                Some((g, _)) if gen_ == g => tied[p] = true,
                Some(_) => {}
            }
        }
    }
    let contested = tied.iter().filter(|t| **t).count();
    if contested > 0 {
        tracing::warn!(
            contested,
            "partitions claimed by several members of the same generation; none of them keeps those partitions this round"
        );
    }
    let owner = best
        .iter()
        .zip(&tied)
        .map(|(b, &tie)| if tie { None } else { b.map(|(_, m)| m) })
        .collect();
    Claims { owner, claimed }
}
