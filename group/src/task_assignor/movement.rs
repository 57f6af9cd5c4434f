//! Task movements with warmups (Kafka's `TaskMovement`): a stateful active is
//! never handed to a client that would first have to restore its state while
//! another client could run it now.

use std::collections::{BTreeMap, BTreeSet};

use super::{TaskAssignmentInput, TaskAssignorConfig, TaskId, caught_up, lag_rank};

/// Where actives run this round, and the warmups that prepare the rest.
pub(super) struct Moves {
    /// The client running each stateful task this round.
    pub active: BTreeMap<TaskId, String>,
    /// Warmups placed on target clients.
    pub warmups: BTreeMap<String, BTreeSet<TaskId>>,
    /// Actives kept away from their target this round.
    pub pending: usize,
}

/// Adjusts the target: where the target client is not caught up on a task
/// and another client is more caught up, the task runs on a caught-up client
/// (its current owner if there is one, else the least loaded), or failing
/// that the most caught-up one, and the target gets a warmup while the
/// warmup budget lasts.
///
/// Prevents: a stateful task becoming unavailable for the whole restore of
/// its state on a new client (the downtime KIP-441 removes).
pub(super) fn apply(
    input: &TaskAssignmentInput,
    config: &TaskAssignorConfig,
    target: &BTreeMap<TaskId, String>,
) -> Moves {
    let lag = config.acceptable_recovery_lag;
    let mut active = target.clone();
    let mut load: BTreeMap<&str, usize> = input.clients.keys().map(|c| (c.as_str(), 0)).collect();
    for client in target.values() {
        *load.entry(client.as_str()).or_insert(0) += 1;
    }

    // (caught-up clients, task, target): the most constrained tasks first, as
    // in Kafka, so they get the warmups.
    let mut movements: Vec<(usize, TaskId, &str)> = Vec::new();
    for (task, dest) in target {
        let Some(dest_state) = input.clients.get(dest) else {
            continue;
        };
        let dest_rank = lag_rank(dest_state, task);
        if caught_up(dest_rank, lag) {
            continue;
        }
        if input
            .clients
            .values()
            .any(|c| lag_rank(c, task) < dest_rank)
        {
            let caught = input
                .clients
                .values()
                .filter(|c| caught_up(lag_rank(c, task), lag))
                .count();
            movements.push((caught, *task, dest.as_str()));
        }
    }
    movements.sort();

    let mut warmups: BTreeMap<String, BTreeSet<TaskId>> = BTreeMap::new();
    let mut warmups_left = config.max_warmup_replicas;
    for (caught, task, dest) in &movements {
        let dest_rank = input.clients.get(*dest).map(|c| lag_rank(c, task));
        let source = if *caught > 0 {
            input
                .clients
                .iter()
                .filter(|(_, c)| caught_up(lag_rank(c, task), lag))
                .min_by_key(|(id, c)| {
                    (
                        !c.previous_active.contains(task),
                        load.get(id.as_str()).copied().unwrap_or(0) as u128 * 1_000_000
                            / u128::from(c.capacity.max(1)),
                        id.as_str(),
                    )
                })
        } else {
            input
                .clients
                .iter()
                .filter(|(_, c)| Some(lag_rank(c, task)) < dest_rank)
                .min_by_key(|(id, c)| (lag_rank(c, task), id.as_str()))
        };
        let Some((source, _)) = source else { continue };
        active.insert(*task, source.clone());
        *load.entry(source.as_str()).or_insert(0) += 1;
        if let Some(l) = load.get_mut(dest) {
            *l = l.saturating_sub(1);
        }
        // Prevents: unbounded restore traffic; the warmup cap bounds how much
        // state is copied at once.
        if warmups_left > 0 {
            warmups_left -= 1;
            warmups.entry((*dest).to_owned()).or_default().insert(*task);
        }
    }
    Moves {
        active,
        warmups,
        pending: movements.len(),
    }
}
