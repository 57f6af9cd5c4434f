//! Standby replicas: a copy of a stateful task's stores that follows the
//! task's changelogs, so the task can move here and restore only the tail.
//!
//! A standby reads its changelogs read_committed, so a write of an aborted
//! transaction never reaches it (the second report: a standby that kept an
//! aborted write). It applies what it reads through the same restorer as a
//! restore, which commits each batch with the changelog offsets it reached
//! in one atomic store batch: the standby's store always equals a prefix of
//! the committed changelog. It never processes and never writes to Kafka.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::Runtime;
use super::restore::{self, Purpose};
use crate::task::TaskId;

/// How long a caught-up standby waits before it looks for new changelog
/// records again.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(500);

/// A running standby replica.
pub(crate) struct Standby {
    stop: watch::Sender<bool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for Standby {
    /// A standby dropped without `stop` (its instance was killed) goes with it.
    fn drop(&mut self) {
        if let Some(h) = &self.handle {
            h.abort();
        }
    }
}

impl Standby {
    /// Starts following `task`'s changelogs in its directory.
    /// Starts following `task`'s changelogs in its directory; `caught_up`
    /// hears the lag left each time it has reached the changelogs' end.
    pub(crate) fn start(
        rt: Arc<Runtime>,
        task: TaskId,
        caught_up: mpsc::UnboundedSender<(TaskId, u64)>,
    ) -> Standby {
        let (stop, stopped) = watch::channel(false);
        let handle = tokio::spawn(tracing::Instrument::instrument(
            follow(rt, task, stopped, caught_up),
            tracing::Span::current(),
        ));
        Standby {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops at the next batch boundary and waits until the store is closed
    /// (its directory's lock released, so an active task can open it).
    pub(crate) async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(mut handle) = self.handle.take()
            && tokio::time::timeout(Duration::from_secs(30), &mut handle)
                .await
                .is_err()
        {
            // Aborted, its store handle (and the directory's lock) goes
            // with it.
            tracing::warn!("a standby did not stop within 30 s: aborted");
            handle.abort();
            let _ = handle.await;
        }
    }
}

/// Withdraws a standby's stores from queries when dropped.
struct Published<'a>(&'a Runtime, TaskId);

impl Drop for Published<'_> {
    fn drop(&mut self) {
        self.0.publish_standby_store(self.1, None);
    }
}

async fn follow(
    rt: Arc<Runtime>,
    task: TaskId,
    mut stopped: watch::Receiver<bool>,
    caught_up: mpsc::UnboundedSender<(TaskId, u64)>,
) {
    // The open waits for the directory's lock (a task closing here, a
    // restore being cancelled); a failure is retried, so a warmup that could
    // not open at first still catches up. A stop ends the wait.
    let store = loop {
        let opened = tokio::select! {
            opened = restore::open_task_store(&rt, task) => opened,
            _ = stopped.changed() => return,
        };
        match opened {
            Ok(Some(store)) => break store,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(task = %task, error = %e, "standby: cannot open the task's stores; trying again");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(5)) => {}
                    _ = stopped.changed() => return,
                }
            }
        }
    };
    tracing::info!(task = %task, "standby replica following its changelogs");
    // Queryable while it follows; withdrawn however this ends (a stop, or
    // the task aborted), before the store closes, so no query keeps the
    // directory open for the task's next owner.
    rt.publish_standby_store(task, Some(&store));
    let _published = Published(&rt, task);
    loop {
        if *stopped.borrow() {
            break;
        }
        let followed = tokio::select! {
            result = restore::catch_up(&rt, task, &store, Purpose::Standby) => result,
            _ = stopped.changed() => break,
        };
        match followed {
            Ok(lag) => {
                rt.note_offset_sum(task, &store);
                let _ = caught_up.send((task, lag));
            }
            Err(e) => {
                tracing::warn!(task = %task, error = %e, "standby: catching up failed; trying again")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_INTERVAL) => {}
            _ = stopped.changed() => break,
        }
    }
    drop(_published);
    let closed = tokio::task::spawn_blocking(move || store.close()).await;
    match closed {
        Ok(Ok(())) => tracing::info!(task = %task, "standby replica stopped"),
        Ok(Err(e)) => tracing::warn!(task = %task, error = %e, "standby: closing the store"),
        Err(e) => tracing::warn!(task = %task, error = %e, "standby: closing the store"),
    }
}
