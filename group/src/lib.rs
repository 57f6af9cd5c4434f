//! Consumer-group membership and assignors.
//!
//! This crate holds the pure parts of Weir's group protocol:
//!
//! - [`consumer_protocol`]: the subscription and assignment encodings,
//!   versions 0 to 3, decoded with every count bounded by the bytes left;
//! - [`assignor`]: range, round-robin and cooperative-sticky partition
//!   assignors as pure functions;
//! - [`task_assignor`]: Kafka Streams' high-availability task assignor
//!   (KIP-441), with a follow-up rebalance as soon as a warmup catches up.
//!
//! The group leader's step, from JoinGroup metadata to SyncGroup assignments:
//!
//! ```
//! use weir_group::assignor::{Assignor, GroupSubscription, MemberSubscription, to_wire_assignment};
//! use weir_group::consumer_protocol::{Assignment, Subscription};
//!
//! # fn main() -> weir_group::Result<()> {
//! let metadata = Subscription { topics: vec!["orders".into()], ..Subscription::default() }.encode(3)?;
//!
//! let (_version, subscription) = Subscription::decode(&metadata)?;
//! let group = GroupSubscription {
//!     members: [("member-1".to_owned(), MemberSubscription::from_wire(None, &subscription))].into(),
//!     partitions_per_topic: [("orders".to_owned(), 3)].into(),
//! };
//! let assignment = Assignor::CooperativeSticky.assign(&group);
//! let bytes = to_wire_assignment(&assignment["member-1"]).encode(3)?;
//!
//! let (_, decoded) = Assignment::decode(&bytes)?;
//! assert_eq!(decoded.assigned_partitions[0].partitions, vec![0, 1, 2]);
//! # Ok(())
//! # }
//! ```

pub mod assignor;
pub mod consumer_protocol;
mod error;
pub mod group_consumer;
pub mod member;
pub mod offsets;
pub mod task_assignor;

pub use error::{GroupError, Result};
