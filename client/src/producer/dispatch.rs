//! Keeps Produce requests to one broker on the wire in the order the
//! sender chose them.
//!
//! Each request runs in a task of its own (so several are in flight), and
//! tasks are not polled in the order they were spawned. Without this, two
//! batches of one partition could reach the broker swapped; the idempotent
//! broker would reject the later sequence and the batch would be retried:
//! correct, but slower. So the sender hands out numbered turns per broker,
//! and a task writes its request only in its turn, releasing the turn as
//! soon as the frame is queued on the connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::cluster::BrokerId;

#[derive(Debug, Default)]
struct Turns {
    next: AtomicU64,
    serving: AtomicU64,
    changed: Notify,
}

/// The turns of every broker.
#[derive(Debug, Default)]
pub(crate) struct SendOrder {
    brokers: Mutex<HashMap<BrokerId, Arc<Turns>>>,
}

impl SendOrder {
    /// The next turn for `broker`; take turns in the order requests are chosen.
    pub(crate) fn ticket(&self, broker: BrokerId) -> Ticket {
        let turns = {
            let mut brokers = self.brokers.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(brokers.entry(broker).or_default())
        };
        let number = turns.next.fetch_add(1, Ordering::AcqRel);
        Ticket { turns, number }
    }
}

/// One request's turn. Dropping it ends the turn, also when the request
/// was never sent, so no later request waits forever.
#[derive(Debug)]
pub(crate) struct Ticket {
    turns: Arc<Turns>,
    number: u64,
}

impl Ticket {
    /// Waits until every earlier ticket of this broker has ended its turn.
    pub(crate) async fn wait_turn(&self) {
        loop {
            let changed = self.turns.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.turns.serving.load(Ordering::Acquire) >= self.number {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // `fetch_max`: a ticket dropped before its turn (its task failed
        // early) must not hold the queue, nor move it backwards.
        self.turns
            .serving
            .fetch_max(self.number + 1, Ordering::AcqRel);
        self.turns.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_are_taken_in_ticket_order_whatever_the_poll_order() {
        let order = SendOrder::default();
        let tickets: Vec<Ticket> = (0..5).map(|_| order.ticket(1)).collect();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Spawned in reverse: the scheduler sees the last ticket first.
        for (i, ticket) in tickets.into_iter().enumerate().rev() {
            let log = Arc::clone(&log);
            tasks.push(tokio::spawn(async move {
                ticket.wait_turn().await;
                log.lock().unwrap().push(i);
                drop(ticket);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        // Another broker has turns of its own.
        let other = order.ticket(2);
        tokio::time::timeout(std::time::Duration::from_secs(1), other.wait_turn())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_ticket_dropped_unused_does_not_block_the_next() {
        let order = SendOrder::default();
        let first = order.ticket(1);
        let second = order.ticket(1);
        drop(first);
        tokio::time::timeout(std::time::Duration::from_secs(1), second.wait_turn())
            .await
            .unwrap();
    }
}
