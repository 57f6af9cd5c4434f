//! State shared between the member's handle, its membership task and its
//! heartbeat task.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::assignor::TopicPartition;
use crate::consumer_protocol::NO_GENERATION;

/// Who the member is in the group right now: what commits must carry so
/// the coordinator can reject a zombie's (KIP-447).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The group.
    pub group_id: String,
    /// The generation; -1 while the member has none.
    pub generation: i32,
    /// The member id the coordinator gave; empty before the first join.
    pub member_id: String,
    /// `group.instance.id`, for static members.
    pub instance_id: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Identity {
    pub member_id: String,
    pub generation: i32,
    pub owned: BTreeSet<TopicPartition>,
    /// When ownership stops being safe; `None` while the member owns nothing
    /// it may write for.
    pub lease_until: Option<Instant>,
    pub last_poll: Instant,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub group_id: String,
    pub instance_id: Option<String>,
    identity: Mutex<Identity>,
    /// The application is inside `next_event` (waiting counts as polling).
    pub in_poll: AtomicBool,
    /// Woken when the application polls, for a member that left after
    /// `max.poll.interval.ms` and rejoins on the next poll.
    pub polled: Notify,
}

impl Shared {
    pub(crate) fn new(group_id: String, instance_id: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            group_id,
            instance_id,
            identity: Mutex::new(Identity {
                member_id: String::new(),
                generation: NO_GENERATION,
                owned: BTreeSet::new(),
                lease_until: None,
                last_poll: Instant::now(),
            }),
            in_poll: AtomicBool::new(false),
            polled: Notify::new(),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Identity> {
        self.identity.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn metadata(&self) -> GroupMetadata {
        let id = self.lock();
        GroupMetadata {
            group_id: self.group_id.clone(),
            generation: id.generation,
            member_id: id.member_id.clone(),
            instance_id: self.instance_id.clone(),
        }
    }

    pub(crate) fn record_poll(&self) {
        self.lock().last_poll = Instant::now();
        self.polled.notify_one();
    }

    /// Extends the lease of `generation` to `until`, unless the generation
    /// changed meanwhile (a late heartbeat answer must not revive a lease
    /// that was already given up).
    pub(crate) fn extend_lease(&self, generation: i32, until: Instant) {
        let mut id = self.lock();
        if id.generation == generation && id.generation != NO_GENERATION {
            id.lease_until = Some(id.lease_until.map_or(until, |u| u.max(until)));
        }
    }

    pub(crate) fn polled_since(&self, limit: std::time::Duration) -> bool {
        self.in_poll.load(Ordering::Acquire) || self.lock().last_poll.elapsed() <= limit
    }
}

/// Whether the member may still write for the partitions it owns.
///
/// Checked synchronously before every write: it reads a deadline, so it is
/// right even when the membership task has not yet run to deliver a
/// [`Lost`](super::AssignmentEvent::Lost) event.
#[derive(Debug, Clone)]
pub struct Lease {
    pub(crate) shared: Arc<Shared>,
}

impl Lease {
    /// True while the coordinator cannot yet have given this member's
    /// partitions to another member.
    pub fn is_valid(&self) -> bool {
        self.shared
            .lock()
            .lease_until
            .is_some_and(|until| Instant::now() < until)
    }

    /// The generation the lease belongs to, if it is valid.
    pub fn valid_generation(&self) -> Option<i32> {
        let id = self.shared.lock();
        id.lease_until
            .filter(|until| Instant::now() < *until)
            .map(|_| id.generation)
    }

    /// The group metadata a commit for the leased partitions must carry
    /// (generation, member id, instance id), read under one lock with the
    /// deadline; `None` once the lease has ended. A writer that commits with
    /// this never sends the "no generation" sentinel the coordinator does not
    /// check (NOTES.md §3).
    pub fn metadata(&self) -> Option<GroupMetadata> {
        let id = self.shared.lock();
        let valid = id.lease_until.is_some_and(|until| Instant::now() < until)
            && id.generation != NO_GENERATION;
        valid.then(|| GroupMetadata {
            group_id: self.shared.group_id.clone(),
            generation: id.generation,
            member_id: id.member_id.clone(),
            instance_id: self.shared.instance_id.clone(),
        })
    }
}
