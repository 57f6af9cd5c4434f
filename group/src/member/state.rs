//! State shared between the member's handle, its membership task and its
//! heartbeat task.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use weir_client::kerror::codes;
use weir_client::producer::SendGate;

use crate::assignor::TopicPartition;
use crate::consumer_protocol::NO_GENERATION;

/// Who the member is in the group right now: what commits must carry so
/// the coordinator can reject a zombie's (KIP-447).
///
/// [`GroupMember::metadata`](super::GroupMember::metadata) hands it out
/// only while the member has a generation. It converts to and from
/// weir-client's [`GroupMetadata`](weir_client::transaction::GroupMetadata),
/// the form `send_offsets_to_transaction` takes:
///
/// ```
/// use weir_group::member::GroupMetadata;
///
/// let member = GroupMetadata {
///     group_id: "orders-app".to_owned(),
///     generation: 7,
///     member_id: "member-1".to_owned(),
///     instance_id: None,
/// };
/// let txn: weir_client::transaction::GroupMetadata = member.clone().into();
/// assert_eq!(txn.generation_id, 7);
/// assert_eq!(GroupMetadata::from(txn), member);
/// ```
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

impl From<GroupMetadata> for weir_client::transaction::GroupMetadata {
    /// Never [`unchecked`](weir_client::transaction::GroupMetadata::unchecked):
    /// a member's metadata with generation -1 is refused by
    /// `send_offsets_to_transaction`.
    fn from(m: GroupMetadata) -> Self {
        weir_client::transaction::GroupMetadata::new(
            m.group_id,
            m.generation,
            m.member_id,
            m.instance_id,
        )
    }
}

impl From<&GroupMetadata> for weir_client::transaction::GroupMetadata {
    fn from(m: &GroupMetadata) -> Self {
        m.clone().into()
    }
}

impl From<weir_client::transaction::GroupMetadata> for GroupMetadata {
    fn from(m: weir_client::transaction::GroupMetadata) -> Self {
        GroupMetadata {
            group_id: m.group_id,
            generation: m.generation_id,
            member_id: m.member_id,
            instance_id: m.group_instance_id,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Identity {
    pub member_id: String,
    pub generation: i32,
    pub owned: BTreeSet<TopicPartition>,
    /// When ownership stops being safe; `None` while the member owns nothing
    /// it may write for.
    pub lease_until: Option<Instant>,
    /// Counts the leases that ended (the generation was given up or
    /// forgotten): a [`Lease::gate`] made under one lease stays closed
    /// under the next, even once that one is valid.
    pub lease_term: u64,
    /// [`SuspendClock::suspended`] when the span of `lease_until` began
    /// (the request whose answer granted it was sent).
    pub lease_suspended_base: Duration,
    pub last_poll: Instant,
    /// The member is about to send (or is sending) a JoinGroup: no new
    /// [`CommitPermit`] is handed out until it is answered.
    pub rebalancing: bool,
    /// [`CommitPermit`]s held now.
    pub commits_in_flight: usize,
}

impl Identity {
    /// When ownership stops being safe, with time the machine spent
    /// suspended since the lease's span began taken off.
    fn effective_lease_until(&self, clock: &SuspendClock) -> Option<Instant> {
        let until = self.lease_until?;
        let suspended = clock.suspended().saturating_sub(self.lease_suspended_base);
        Some(until.checked_sub(suspended).unwrap_or_else(Instant::now))
    }
}

/// How long the machine has been suspended since boot (review m14).
///
/// Lease deadlines are [`tokio::time::Instant`]s, so that tests run them on
/// tokio's paused clock. On Linux those read `CLOCK_MONOTONIC`, which
/// stands still while the machine (or VM) is suspended: after a long pause
/// a lease would still look valid although the coordinator's session timer
/// ran on and another member may own the partitions. `CLOCK_BOOTTIME` does
/// count a suspend, so `CLOCK_BOOTTIME - CLOCK_MONOTONIC` is the time spent
/// suspended; each lease records it when its span begins and counts any
/// growth since against the deadline. Only that difference is read from the
/// OS, never the time itself, so tokio's paused clock keeps working: with
/// no suspend the difference does not move. Elsewhere (no `CLOCK_BOOTTIME`)
/// it reads 0, the old behaviour. Read through rustix's safe
/// `clock_gettime` (the workspace forbids `unsafe`).
#[derive(Debug, Clone, Default)]
pub(crate) struct SuspendClock {
    /// Set in tests: nanoseconds of simulated suspend.
    fake: Option<Arc<AtomicU64>>,
}

impl SuspendClock {
    /// A clock whose suspend time is read from `nanos` (tests).
    #[cfg(test)]
    pub(crate) fn fake(nanos: Arc<AtomicU64>) -> Self {
        Self { fake: Some(nanos) }
    }

    /// Time spent suspended since boot.
    pub(crate) fn suspended(&self) -> Duration {
        match &self.fake {
            Some(nanos) => Duration::from_nanos(nanos.load(Ordering::Acquire)),
            None => os_suspended(),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn os_suspended() -> Duration {
    use rustix::time::{ClockId, clock_gettime};
    let to_duration = |t: rustix::time::Timespec| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        )
    };
    // MONOTONIC first: time passing between the reads makes the difference
    // larger by that much (nanoseconds), never hides a suspend.
    let monotonic = to_duration(clock_gettime(ClockId::Monotonic));
    let boot = to_duration(clock_gettime(ClockId::Boottime));
    boot.saturating_sub(monotonic)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn os_suspended() -> Duration {
    Duration::ZERO
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
    /// A JoinGroup is in flight while the old generation's heartbeats go
    /// on (cooperative): ILLEGAL_GENERATION on one of them then only means
    /// the join completed first.
    pub joining: AtomicBool,
    /// Time spent suspended, counted against lease deadlines.
    pub clock: SuspendClock,
    /// Woken when the last [`CommitPermit`] is dropped.
    pub commits_done: Notify,
}

impl Shared {
    pub(crate) fn new(group_id: String, instance_id: Option<String>) -> Arc<Self> {
        Self::with_clock(group_id, instance_id, SuspendClock::default())
    }

    pub(crate) fn with_clock(
        group_id: String,
        instance_id: Option<String>,
        clock: SuspendClock,
    ) -> Arc<Self> {
        Arc::new(Self {
            group_id,
            instance_id,
            identity: Mutex::new(Identity {
                member_id: String::new(),
                generation: NO_GENERATION,
                owned: BTreeSet::new(),
                lease_until: None,
                lease_term: 0,
                lease_suspended_base: Duration::ZERO,
                last_poll: Instant::now(),
                rebalancing: false,
                commits_in_flight: 0,
            }),
            in_poll: AtomicBool::new(false),
            polled: Notify::new(),
            joining: AtomicBool::new(false),
            clock,
            commits_done: Notify::new(),
        })
    }

    /// The suspend reading a lease span starts from: taken when the
    /// request that will extend the lease is sent.
    pub(crate) fn suspended(&self) -> Duration {
        self.clock.suspended()
    }

    /// The lease deadline, less any suspend since its span began; `None`
    /// while there is no lease.
    pub(crate) fn lease_deadline(&self) -> Option<Instant> {
        self.lock().effective_lease_until(&self.clock)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Identity> {
        self.identity.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The metadata commits carry, or `NoGeneration` while the member has
    /// no generation: generation -1 with an empty member id is the one
    /// metadata the coordinator accepts on a TxnOffsetCommit unchecked, so
    /// a member that was dropped must not hand it out.
    pub(crate) fn metadata(&self) -> crate::Result<GroupMetadata> {
        let id = self.lock();
        if id.generation == NO_GENERATION {
            return Err(crate::GroupError::NoGeneration {
                group: self.group_id.clone(),
                member_id: id.member_id.clone(),
            });
        }
        Ok(GroupMetadata {
            group_id: self.group_id.clone(),
            generation: id.generation,
            member_id: id.member_id.clone(),
            instance_id: self.instance_id.clone(),
        })
    }

    pub(crate) fn record_poll(&self) {
        self.lock().last_poll = Instant::now();
        self.polled.notify_one();
    }

    /// Extends the lease of `generation` to `until`, unless the generation
    /// changed meanwhile (a late heartbeat answer must not revive a lease
    /// that was already given up). `suspended` is [`Self::suspended`] when
    /// the span ending at `until` began.
    pub(crate) fn extend_lease(&self, generation: i32, until: Instant, suspended: Duration) {
        let mut id = self.lock();
        if id.generation == generation && id.generation != NO_GENERATION {
            let later = id.effective_lease_until(&self.clock).is_none_or(|current| {
                let span_suspended = self.clock.suspended().saturating_sub(suspended);
                until
                    .checked_sub(span_suspended)
                    .unwrap_or_else(Instant::now)
                    > current
            });
            if later {
                id.lease_until = Some(until);
                id.lease_suspended_base = suspended;
            }
        }
    }

    /// Ends the lease and forgets `generation`, if it is still the
    /// current one; true if it was. Once the generation is gone no late
    /// heartbeat answer can extend the lease again ([`extend_lease`]
    /// checks it), and [`metadata`](Self::metadata) refuses.
    ///
    /// [`extend_lease`]: Self::extend_lease
    pub(crate) fn end_generation(&self, generation: i32) -> bool {
        let mut id = self.lock();
        if id.generation != generation || generation == NO_GENERATION {
            return false;
        }
        id.generation = NO_GENERATION;
        id.lease_until = None;
        id.lease_term += 1;
        true
    }

    /// The reaction to an answer to a request sent with `generation` that
    /// says this member is out of the group (UNKNOWN_MEMBER_ID,
    /// ILLEGAL_GENERATION, FENCED_INSTANCE_ID), whichever request it came
    /// on (heartbeat, commit): the coordinator may already have handed the
    /// partitions on (a replacing static instance gets them at once), so
    /// the lease ends here, not when the membership task gets round to the
    /// outcome (it may be waiting seconds for a revocation's ack). True if
    /// the generation was current and ended.
    ///
    /// While a JoinGroup is in flight (cooperative), ILLEGAL_GENERATION
    /// means the join completed first: the membership task has the new
    /// generation in hand, and the lease stays. A member that was removed
    /// instead gets UNKNOWN_MEMBER_ID.
    pub(crate) fn end_generation_on(&self, generation: i32, code: i16) -> bool {
        let out = match code {
            codes::UNKNOWN_MEMBER_ID | codes::FENCED_INSTANCE_ID => true,
            codes::ILLEGAL_GENERATION => !self.joining.load(Ordering::Acquire),
            _ => false,
        };
        out && self.end_generation(generation)
    }

    /// A [`SendGate`] open while the lease is valid and still of `term`
    /// (see [`Lease::gate`]).
    pub(crate) fn gate_of_term(shared: &Arc<Shared>, term: u64) -> SendGate {
        let shared = Arc::clone(shared);
        SendGate::new(move || {
            let id = shared.lock();
            id.lease_term == term
                && id
                    .effective_lease_until(&shared.clock)
                    .is_some_and(|until| Instant::now() < until)
        })
    }

    /// Ends the lease, forgets the generation and gives up every owned
    /// partition, in one step; returns what was owned.
    pub(crate) fn drop_ownership(&self) -> BTreeSet<TopicPartition> {
        let mut id = self.lock();
        id.generation = NO_GENERATION;
        id.lease_until = None;
        id.lease_term += 1;
        std::mem::take(&mut id.owned)
    }

    /// Marks a rebalance as starting (no new [`CommitPermit`]s), then
    /// waits until the permits already held are dropped, or `limit` passed;
    /// true if they were. See [`Lease::commit_permit`] for why.
    pub(crate) async fn begin_rebalance(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let notified = self.commits_done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut id = self.lock();
                id.rebalancing = true;
                if id.commits_in_flight == 0 {
                    return true;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    /// The JoinGroup was answered (or failed): permits are handed out
    /// again, under whatever generation the member now holds.
    pub(crate) fn end_rebalance(&self) {
        self.lock().rebalancing = false;
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
            .lease_deadline()
            .is_some_and(|until| Instant::now() < until)
    }

    /// When the lease ends unless a heartbeat renews it first (`None`
    /// with no lease at all): the last renewing heartbeat's send time plus
    /// `session.timeout.ms` minus the self-fence margin. A deadline that
    /// moves forward shows a heartbeat the coordinator answered.
    pub fn valid_until(&self) -> Option<Instant> {
        self.shared.lease_deadline()
    }

    /// A [`SendGate`] that binds produced records to this lease, not just
    /// their enqueueing: a producer never sends (nor resends) a batch of
    /// records carrying it once the lease has ended, so buffering
    /// (`linger.ms`, the in-flight limit) and retries up to
    /// `delivery.timeout.ms` cannot carry a record past the moment another
    /// member may own the partition. Those records fail with
    /// [`ClientError::SendGateClosed`](weir_client::ClientError::SendGateClosed).
    ///
    /// The gate is open while the lease is valid and is the same lease as
    /// when the gate was made: once the lease ends (the generation is given
    /// up, the member is fenced or leaves), a later lease of a rejoined
    /// member does not reopen it. Make a gate per lease (for instance on
    /// every assignment) and clone it onto records:
    /// `ProducerRecord::new(t).with_gate(gate.clone())`. A request already
    /// on the wire is not recalled: the self-fence margin must cover
    /// `request.timeout.ms`-bounded delivery of the last request.
    pub fn gate(&self) -> SendGate {
        let term = self.shared.lock().lease_term;
        Shared::gate_of_term(&self.shared, term)
    }

    /// The generation the lease belongs to, if it is valid.
    pub fn valid_generation(&self) -> Option<i32> {
        let id = self.shared.lock();
        id.effective_lease_until(&self.shared.clock)
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
        let valid = id
            .effective_lease_until(&self.shared.clock)
            .is_some_and(|until| Instant::now() < until)
            && id.generation != NO_GENERATION;
        valid.then(|| GroupMetadata {
            group_id: self.shared.group_id.clone(),
            generation: id.generation,
            member_id: id.member_id.clone(),
            instance_id: self.shared.instance_id.clone(),
        })
    }
}

/// Why [`Lease::commit_permit`] handed out no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoPermit {
    /// The lease ended (or the member has no generation): nothing may be
    /// committed; drop the uncommitted work.
    LeaseEnded,
    /// The member is rejoining the group (a JoinGroup is about to be sent
    /// or is in flight): postpone the commit until it is answered; the
    /// partitions are still the member's.
    Rebalancing,
}

/// Leave to commit under one generation: while it is held the member sends
/// no JoinGroup (up to a bound), so the generation in
/// [`metadata`](Self::metadata) cannot be replaced by the member's own
/// rejoin before the commit's offsets reach the coordinator. Drop it as
/// soon as the commit's offsets are answered.
#[derive(Debug)]
pub struct CommitPermit {
    shared: Arc<Shared>,
    metadata: GroupMetadata,
}

impl CommitPermit {
    /// The group metadata the commit must carry, read when the permit was
    /// given.
    pub fn metadata(&self) -> &GroupMetadata {
        &self.metadata
    }
}

impl Drop for CommitPermit {
    fn drop(&mut self) {
        let last = {
            let mut id = self.shared.lock();
            id.commits_in_flight = id.commits_in_flight.saturating_sub(1);
            id.commits_in_flight == 0
        };
        if last {
            self.shared.commits_done.notify_waiters();
        }
    }
}

impl Lease {
    /// A permit to commit now under the lease's generation, or why not.
    ///
    /// Prevents: an owner's commit refused although it keeps its
    /// partitions. Under cooperative rebalancing a member keeps its
    /// partitions through a rebalance, but a commit that read generation N
    /// and reaches the coordinator after the rebalance completed (the
    /// member's own JoinGroup answered with N+1) is refused with
    /// `ILLEGAL_GENERATION`, and a refused TxnOffsetCommit leaves its
    /// transaction abortable: the work in it is lost. Kafka's consumer
    /// cannot race like this, because the thread that commits is the one
    /// that sends the JoinGroup; here the membership task sends it, so it
    /// waits for the permits held, and no permit is given while a JoinGroup
    /// is pending ([`NoPermit::Rebalancing`]: postpone, as Kafka Streams
    /// postpones commits during a rebalance). A commit under a permit is
    /// then refused only when the member really is out of the group
    /// (expelled: `UNKNOWN_MEMBER_ID`), or when a commit outlasted the
    /// member's bounded wait.
    ///
    /// # Errors
    /// [`NoPermit::LeaseEnded`] once the lease ended; [`NoPermit::Rebalancing`]
    /// while the member is rejoining.
    pub fn commit_permit(&self) -> std::result::Result<CommitPermit, NoPermit> {
        let mut id = self.shared.lock();
        let valid = id
            .effective_lease_until(&self.shared.clock)
            .is_some_and(|until| Instant::now() < until)
            && id.generation != NO_GENERATION;
        if !valid {
            return Err(NoPermit::LeaseEnded);
        }
        if id.rebalancing {
            return Err(NoPermit::Rebalancing);
        }
        id.commits_in_flight += 1;
        let metadata = GroupMetadata {
            group_id: self.shared.group_id.clone(),
            generation: id.generation,
            member_id: id.member_id.clone(),
            instance_id: self.shared.instance_id.clone(),
        };
        drop(id);
        Ok(CommitPermit {
            shared: Arc::clone(&self.shared),
            metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_late_heartbeat_answer_cannot_revive_a_lease_after_the_generation_ended() {
        let shared = Shared::new("g".to_owned(), None);
        shared.lock().generation = 4;
        let later = Instant::now() + Duration::from_secs(8);
        shared.extend_lease(4, later, Duration::ZERO);
        assert_eq!(shared.lock().lease_until, Some(later));
        // A fatal answer (or close) ends generation 4 ...
        assert!(shared.end_generation(4));
        assert!(!shared.end_generation(4), "only once");
        // ... and an answer to a heartbeat of generation 4 still in flight
        // must not bring the lease back.
        shared.extend_lease(4, later + Duration::from_secs(1), Duration::ZERO);
        assert_eq!(shared.lock().lease_until, None);
        assert!(shared.metadata().is_err());
        shared.lock().generation = 5;
        let owned = shared.drop_ownership();
        assert!(owned.is_empty());
        shared.extend_lease(5, later, Duration::ZERO);
        assert_eq!(shared.lock().lease_until, None);
    }

    /// Review m14: a suspend (CLOCK_BOOTTIME runs on, CLOCK_MONOTONIC and so
    /// tokio's clock do not) counts against the lease.
    #[tokio::test(start_paused = true)]
    async fn time_spent_suspended_ends_the_lease() {
        let suspended = Arc::new(AtomicU64::new(5_000_000_000));
        let shared = Shared::with_clock(
            "g".to_owned(),
            None,
            SuspendClock::fake(Arc::clone(&suspended)),
        );
        shared.lock().generation = 4;
        let lease = Lease {
            shared: Arc::clone(&shared),
        };
        let gate = lease.gate();
        // A span of 8 s that began with 5 s of suspend behind the machine.
        let start = Instant::now();
        shared.extend_lease(4, start + Duration::from_secs(8), shared.suspended());
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(lease.is_valid() && gate.is_open());
        // The VM is paused for 6 s: tokio's clock does not see it.
        suspended.fetch_add(6_000_000_000, Ordering::AcqRel);
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        assert!(!lease.is_valid(), "3 s + 6 s suspended > 8 s");
        assert!(!gate.is_open());
        assert_eq!(lease.valid_generation(), None);
        assert!(lease.metadata().is_none());
        // A heartbeat sent after the resume grants a new span.
        let sent = Instant::now();
        shared.extend_lease(4, sent + Duration::from_secs(8), shared.suspended());
        assert!(lease.is_valid());
        // A late answer to one sent before the suspend does not shorten it
        // (and, counting the suspend, would not have reached so far).
        shared.extend_lease(4, start + Duration::from_secs(10), Duration::from_secs(5));
        assert_eq!(shared.lease_deadline(), Some(sent + Duration::from_secs(8)));
    }

    /// Issue 15: a rejoin waits for the commits holding a permit, and no
    /// permit is given while it is pending, so a commit never reads a
    /// generation the member's own JoinGroup then replaces.
    #[tokio::test(start_paused = true)]
    async fn a_rejoin_waits_for_the_commits_in_flight_and_postpones_new_ones() {
        let shared = Shared::new("g".to_owned(), None);
        shared.lock().generation = 4;
        shared.extend_lease(4, Instant::now() + Duration::from_secs(8), Duration::ZERO);
        let lease = Lease {
            shared: Arc::clone(&shared),
        };
        let permit = lease.commit_permit().unwrap();
        assert_eq!(permit.metadata().generation, 4);
        let joining = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move { shared.begin_rebalance(Duration::from_secs(4)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!joining.is_finished(), "the join waits for the permit held");
        assert_eq!(lease.commit_permit().unwrap_err(), NoPermit::Rebalancing);
        drop(permit);
        assert!(joining.await.unwrap(), "the permit was dropped in time");
        assert_eq!(lease.commit_permit().unwrap_err(), NoPermit::Rebalancing);
        // The JoinGroup answered with generation 5: permits again, of 5.
        shared.lock().generation = 5;
        shared.extend_lease(5, Instant::now() + Duration::from_secs(8), Duration::ZERO);
        shared.end_rebalance();
        assert_eq!(lease.commit_permit().unwrap().metadata().generation, 5);
        // A commit that never ends does not hold the join back for good.
        let stuck = lease.commit_permit().unwrap();
        assert!(!shared.begin_rebalance(Duration::from_secs(1)).await);
        drop(stuck);
        // The lease ended: no permit, whatever else.
        shared.end_rebalance();
        assert!(shared.end_generation(5));
        assert_eq!(lease.commit_permit().unwrap_err(), NoPermit::LeaseEnded);
    }

    #[test]
    fn the_os_suspend_reading_does_not_go_backwards() {
        let clock = SuspendClock::default();
        let a = clock.suspended();
        let b = clock.suspended();
        // Reading order keeps it from shrinking by more than the gap
        // between the two clock reads.
        assert!(b + Duration::from_millis(1) >= a, "{a:?} then {b:?}");
    }
}
