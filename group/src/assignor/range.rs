//! Java's `RangeAssignor`: for each topic on its own, the subscribed members
//! in [`MemberInfo` order](super) take contiguous ranges of partitions, the
//! first `partitions % members` one partition more than the rest.
//!
//! Co-partitioned topics therefore land together (partition *n* of every topic
//! goes to the same member when the counts match), which joins rely on.
//! Rack-aware range assignment (KIP-881) is not implemented.

use super::{
    GroupAssignment, GroupSubscription, TopicPartition, empty_assignment, java_member_order,
};

/// Assigns by ranges, per topic.
pub fn assign(group: &GroupSubscription) -> GroupAssignment {
    let mut out = empty_assignment(group);
    let order = java_member_order(group);
    for (topic, &count) in &group.partitions_per_topic {
        let members: Vec<&str> = order
            .iter()
            .copied()
            .filter(|id| {
                group
                    .members
                    .get(*id)
                    .is_some_and(|m| m.topics.contains(topic))
            })
            .collect();
        if members.is_empty() || count <= 0 {
            continue;
        }
        let n = members.len() as i32;
        let per_member = count / n;
        let with_extra = count % n;
        for (i, id) in members.iter().enumerate() {
            let i = i as i32;
            let start = per_member * i + i.min(with_extra);
            let len = per_member + i32::from(i < with_extra);
            if let Some(set) = out.get_mut(*id) {
                set.extend((start..start + len).map(|p| TopicPartition::new(topic.clone(), p)));
            }
        }
    }
    out
}
