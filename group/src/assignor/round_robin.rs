//! Java's `RoundRobinAssignor`: all partitions of all subscribed topics,
//! sorted by topic then partition, dealt one by one to members in
//! [`MemberInfo` order](super), skipping members not subscribed to the
//! partition's topic.

use std::collections::BTreeSet;

use super::{
    GroupAssignment, GroupSubscription, TopicPartition, empty_assignment, java_member_order,
};

/// Assigns round-robin over all partitions.
pub fn assign(group: &GroupSubscription) -> GroupAssignment {
    let mut out = empty_assignment(group);
    let order = java_member_order(group);
    if order.is_empty() {
        return out;
    }
    let subscribed: BTreeSet<&String> = group
        .members
        .values()
        .flat_map(|m| m.topics.iter())
        .collect();
    let mut next = 0usize;
    for topic in subscribed {
        let Some(&count) = group.partitions_per_topic.get(topic) else {
            continue;
        };
        for p in 0..count.max(0) {
            // Someone subscribes to this topic, so the search ends within one lap.
            for _ in 0..order.len() {
                let id = order[next % order.len()];
                next += 1;
                if group
                    .members
                    .get(id)
                    .is_some_and(|m| m.topics.contains(topic))
                {
                    if let Some(set) = out.get_mut(id) {
                        set.insert(TopicPartition::new(topic.clone(), p));
                    }
                    break;
                }
            }
        }
    }
    out
}
