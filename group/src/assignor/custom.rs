//! Assignors written outside weir-group: the streams runtime's task
//! assignor is one. They see every member's raw subscription user data,
//! may query the cluster (end offsets for lags), and give each member
//! user data of its own with its partitions.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use weir_client::Cluster;

use super::{MemberSubscription, RebalanceProtocol, TopicPartition};

/// One member as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CustomMember {
    /// Its topics, owned partitions, generation and instance id.
    pub subscription: MemberSubscription,
    /// The user data its assignor put in its subscription.
    pub user_data: Option<Bytes>,
}

/// The leader's input: every member by member id, and the partition count
/// of every subscribed topic that exists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CustomGroup {
    /// Members by member id.
    pub members: BTreeMap<String, CustomMember>,
    /// Partition count per topic.
    pub partitions_per_topic: BTreeMap<String, i32>,
}

/// What one member is given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberAssignment {
    /// Its partitions.
    pub partitions: BTreeSet<TopicPartition>,
    /// User data for its assignor (for example its tasks).
    pub user_data: Option<Bytes>,
}

/// The future [`GroupAssignor::assign`] returns.
pub type AssignFuture<'a> =
    Pin<Box<dyn Future<Output = crate::Result<BTreeMap<String, MemberAssignment>>> + Send + 'a>>;

/// An assignor the application supplies.
///
/// Under [`RebalanceProtocol::Cooperative`] the assignor must not give a
/// member a partition another member still owns (in its subscription's
/// owned partitions): the owner revokes it first, rejoins, and the next
/// round can hand it over. The member side does the revoking and the
/// rejoin, as for the built-in cooperative-sticky assignor.
///
/// An error of kind [`GroupError::Client`](crate::GroupError::Client) with
/// `retriable` makes the leader join again after a backoff; any other error
/// stops the member.
///
/// ```
/// use std::collections::{BTreeMap, BTreeSet};
/// use weir_group::assignor::custom::{
///     AssignFuture, CustomGroup, GroupAssignor, MemberAssignment,
/// };
/// use weir_group::assignor::{RebalanceProtocol, TopicPartition};
///
/// /// Everything to the member with the smallest id.
/// #[derive(Debug)]
/// struct First;
///
/// impl GroupAssignor for First {
///     fn name(&self) -> &str {
///         "first"
///     }
///     fn protocol(&self) -> RebalanceProtocol {
///         RebalanceProtocol::Eager
///     }
///     fn subscription_user_data(
///         &self,
///         _owned: &BTreeSet<TopicPartition>,
///         _generation: i32,
///     ) -> Option<bytes::Bytes> {
///         None
///     }
///     fn assign<'a>(
///         &'a self,
///         _cluster: &'a weir_client::Cluster,
///         group: &'a CustomGroup,
///     ) -> AssignFuture<'a> {
///         Box::pin(async move {
///             let mut out: BTreeMap<String, MemberAssignment> = group
///                 .members
///                 .keys()
///                 .map(|m| (m.clone(), MemberAssignment::default()))
///                 .collect();
///             if let Some(first) = out.values_mut().next() {
///                 for (topic, n) in &group.partitions_per_topic {
///                     first
///                         .partitions
///                         .extend((0..*n).map(|p| TopicPartition::new(topic.clone(), p)));
///                 }
///             }
///             Ok(out)
///         })
///     }
/// }
/// ```
pub trait GroupAssignor: Send + Sync + fmt::Debug {
    /// The protocol name sent in JoinGroup.
    fn name(&self) -> &str;

    /// How members hand partitions over under this assignor.
    fn protocol(&self) -> RebalanceProtocol;

    /// The user data of this member's subscription, given what it owns now
    /// and the generation it owns it in.
    fn subscription_user_data(
        &self,
        owned: &BTreeSet<TopicPartition>,
        generation: i32,
    ) -> Option<Bytes>;

    /// The leader's step: every member's assignment.
    fn assign<'a>(&'a self, cluster: &'a Cluster, group: &'a CustomGroup) -> AssignFuture<'a>;

    /// This member's assignment of `generation`, before its partitions are
    /// revoked or assigned (so the application can read the user data when
    /// it handles those events). The default ignores it.
    fn on_assignment(&self, assignment: &MemberAssignment, generation: i32) {
        let _ = (assignment, generation);
    }
}

/// A [`GroupAssignor`] in a [`MemberConfig`](crate::member::MemberConfig):
/// two are equal when they are the same object.
#[derive(Clone)]
pub struct CustomAssignor(pub Arc<dyn GroupAssignor>);

impl fmt::Debug for CustomAssignor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CustomAssignor")
            .field(&self.0.name())
            .finish()
    }
}

impl PartialEq for CustomAssignor {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for CustomAssignor {}
