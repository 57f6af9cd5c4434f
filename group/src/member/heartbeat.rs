//! The heartbeat task: one per generation, on its own tokio task and its own
//! connection ([`Lane::Heartbeat`](weir_client::cluster::Lane::Heartbeat)),
//! so neither a slow processing loop nor a slow join, sync or commit on the
//! coordinator connection ever delays a heartbeat.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use weir_client::Cluster;
use weir_client::cluster::CoordinatorKind;
use weir_client::kerror::codes;

use super::config::MemberConfig;
use super::requests;
use super::state::Shared;

/// Why a heartbeat task stopped; the membership task reacts to it only if
/// `generation` is still the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub generation: i32,
    pub kind: OutcomeKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutcomeKind {
    /// A group error code from the coordinator (REBALANCE_IN_PROGRESS,
    /// UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID, ...).
    Code(i16),
    /// No heartbeat got through for the session timeout minus the margin.
    SelfFenced,
    /// The application has not polled for `max.poll.interval.ms`.
    PollTimeout,
}

pub(crate) struct Heartbeat {
    pub cluster: Cluster,
    pub shared: Arc<Shared>,
    pub config: MemberConfig,
    pub generation: i32,
    pub member_id: String,
    /// When the SyncGroup that started this generation was sent.
    pub synced_at: Instant,
    pub outcomes: mpsc::UnboundedSender<Outcome>,
}

impl Heartbeat {
    pub(crate) async fn run(self) {
        let kind = self.beat_until_stopped().await;
        self.report(kind);
    }

    fn report(&self, kind: OutcomeKind) {
        // An answer that says this member is out ends the lease here, not
        // when the membership task gets round to the outcome (see
        // `Shared::end_generation_on`).
        if let OutcomeKind::Code(code) = kind
            && self.shared.end_generation_on(self.generation, code)
        {
            tracing::warn!(group = %self.config.group_id, generation = self.generation, code, "out of the group: lease ended");
        }
        tracing::debug!(group = %self.config.group_id, generation = self.generation, ?kind, "heartbeat outcome");
        let _ = self.outcomes.send(Outcome {
            generation: self.generation,
            kind,
        });
    }

    fn lease_deadline(&self) -> Instant {
        // No lease at all (never granted or given up): fence at once.
        self.shared.lease_deadline().unwrap_or_else(Instant::now)
    }

    async fn beat_until_stopped(&self) -> OutcomeKind {
        let config = &self.config;
        let group = config.group_id.as_str();
        let margin = config.effective_margin();
        let span = config.lease_span();
        // No rebalance can have started before this moment: the last
        // heartbeat (or the SyncGroup) the coordinator answered with no
        // rebalance in progress was sent then. The coordinator waits at
        // most the rebalance timeout from the start of a rebalance for this
        // member's JoinGroup, whatever heartbeats it gets meanwhile.
        let mut no_rebalance_at = self.synced_at;
        // REBALANCE_IN_PROGRESS is reported once; the heartbeats go on
        // until the membership task stops them just before its JoinGroup
        // (an eager member revokes first, and its owner may take a while).
        let mut rebalance_reported = false;
        let backoff = self
            .cluster
            .config()
            .retry_backoff
            .max(Duration::from_millis(10));
        // A heartbeat that takes longer than half a session is as good as
        // lost; giving up on it frees the connection for the next try.
        let request_timeout = self
            .cluster
            .config()
            .request_timeout
            .min(config.session_timeout / 2);
        let mut next = Instant::now() + config.heartbeat_interval;
        loop {
            // Self-fencing, the fix for members that went on processing
            // after the coordinator had dropped them (and handed their
            // partitions to others) during a network outage. The lease
            // ends `margin` before the earliest moment the coordinator can
            // expire this member's session, so the cut-off member stops
            // writing strictly before a new owner can start.
            // Every step races the lease deadline (`until_deadline`).
            if until_deadline(self.lease_deadline(), sleep_until(next))
                .await
                .is_none()
            {
                return OutcomeKind::SelfFenced;
            }
            // Static members too: Java's static member does not send
            // LeaveGroup, but it resets its generation and stops
            // heartbeating, so the coordinator expires it after the
            // session timeout instead of a hung member holding its
            // partitions for ever.
            if !self.shared.polled_since(config.max_poll_interval) {
                return OutcomeKind::PollTimeout;
            }
            let coordinator = until_deadline(
                self.lease_deadline(),
                self.cluster.find_coordinator(CoordinatorKind::Group, group),
            )
            .await;
            let Some(coordinator) = coordinator else {
                return OutcomeKind::SelfFenced;
            };
            let coordinator = match coordinator {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(group, error = %e, "no coordinator for the heartbeat");
                    next = Instant::now() + backoff;
                    continue;
                }
            };
            let sent_at = Instant::now();
            let sent_suspended = self.shared.suspended();
            let answer = until_deadline(
                self.lease_deadline(),
                requests::heartbeat(
                    &self.cluster,
                    coordinator,
                    group,
                    &self.member_id,
                    self.shared.instance_id.as_deref(),
                    self.generation,
                    request_timeout,
                ),
            )
            .await;
            let Some(answer) = answer else {
                return OutcomeKind::SelfFenced;
            };
            match answer {
                Ok(codes::NONE) => {
                    // The coordinator reset this member's session timer no
                    // earlier than `sent_at`, and a rebalance may start
                    // right after: measured from there, the lease outlives
                    // neither the session nor the rebalance timeout.
                    self.shared
                        .extend_lease(self.generation, sent_at + span, sent_suspended);
                    no_rebalance_at = sent_at;
                    next = sent_at + config.heartbeat_interval;
                }
                Ok(codes::REBALANCE_IN_PROGRESS) => {
                    // The session timer was reset at `sent_at`, but the
                    // rebalance started after `no_rebalance_at`, and the
                    // coordinator drops this member if it has not joined
                    // within the rebalance timeout from then.
                    let until = (sent_at + config.session_timeout.saturating_sub(margin))
                        .min(no_rebalance_at + config.max_poll_interval.saturating_sub(margin));
                    self.shared
                        .extend_lease(self.generation, until, sent_suspended);
                    if !rebalance_reported {
                        rebalance_reported = true;
                        self.report(OutcomeKind::Code(codes::REBALANCE_IN_PROGRESS));
                    }
                    next = sent_at + config.heartbeat_interval;
                }
                Ok(code)
                    if code == codes::NOT_COORDINATOR
                        || code == codes::COORDINATOR_NOT_AVAILABLE =>
                {
                    tracing::info!(group, code, "coordinator moved; finding it again");
                    self.cluster
                        .invalidate_coordinator(CoordinatorKind::Group, group);
                    next = Instant::now() + backoff;
                }
                Ok(code) if code == codes::COORDINATOR_LOAD_IN_PROGRESS => {
                    next = Instant::now() + backoff;
                }
                Ok(code) => return OutcomeKind::Code(code),
                Err(e) => {
                    tracing::debug!(group, error = %e, "heartbeat failed");
                    if e.is_network() {
                        self.cluster
                            .invalidate_coordinator(CoordinatorKind::Group, group);
                    }
                    next = Instant::now() + backoff;
                }
            }
        }
    }
}

/// Runs `step` unless the lease deadline comes first: `None` when it does,
/// and also when both are ready at the same moment (the `select!` is
/// biased toward the deadline). Otherwise a heartbeat answer that arrives
/// just as the lease ends could extend an expired lease with no event, and
/// a writer that saw it invalid would never learn why.
async fn until_deadline<F: std::future::Future>(deadline: Instant, step: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        _ = sleep_until(deadline) => None,
        r = step => Some(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_answer_ready_at_the_deadline_loses_to_it() {
        // Unbiased, each try would go either way.
        for _ in 0..64 {
            let now = Instant::now();
            assert_eq!(until_deadline(now, std::future::ready(1)).await, None);
        }
        let later = Instant::now() + Duration::from_secs(1);
        assert_eq!(until_deadline(later, std::future::ready(1)).await, Some(1));
    }
}
