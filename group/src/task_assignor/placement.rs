//! Balanced placement: the sticky target for stateful actives, standbys, and
//! stateless actives.
//!
//! Balance is in proportion to capacity: with `n` tasks and total capacity
//! `C`, a client of capacity `c` gets `⌊n·c/C⌋` tasks, and the `n − Σ⌊n·c/C⌋`
//! left over go one each to some clients. With equal capacities, counts
//! differ by at most one.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use super::{
    ClientAssignment, ClientState, LagRank, TaskAssignmentInput, TaskAssignorConfig, TaskId,
    lag_rank,
};

/// Capacity-proportional quotas for `n` items.
struct Quotas<'a> {
    floor: BTreeMap<&'a str, usize>,
    count: BTreeMap<&'a str, usize>,
    extra: usize,
}

impl<'a> Quotas<'a> {
    fn new(input: &'a TaskAssignmentInput, n: usize) -> Self {
        let total: u128 = input.clients.values().map(|c| u128::from(c.capacity)).sum();
        let floor: BTreeMap<&str, usize> = input
            .clients
            .iter()
            .map(|(id, c)| {
                let share = (n as u128 * u128::from(c.capacity))
                    .checked_div(total)
                    .unwrap_or(0);
                (id.as_str(), share as usize)
            })
            .collect();
        let extra = n.saturating_sub(floor.values().sum());
        let count = input.clients.keys().map(|id| (id.as_str(), 0)).collect();
        Self {
            floor,
            count,
            extra,
        }
    }

    fn floor(&self, id: &str) -> usize {
        self.floor.get(id).copied().unwrap_or(0)
    }

    fn count(&self, id: &str) -> usize {
        self.count.get(id).copied().unwrap_or(0)
    }

    fn has_room(&self, id: &str) -> bool {
        let floor = self.floor.get(id).copied().unwrap_or(0);
        let count = self.count(id);
        count < floor || (count == floor && self.extra > 0)
    }

    /// Records one more item on `id`, spending a left-over slot if it is at
    /// its floor.
    fn take(&mut self, id: &'a str) {
        let floor = self.floor.get(id).copied().unwrap_or(0);
        let count = self.count.entry(id).or_insert(0);
        if *count >= floor {
            self.extra = self.extra.saturating_sub(1);
        }
        *count += 1;
    }
}

/// Compares `a_count / a_capacity` with `b_count / b_capacity` exactly.
fn cmp_load(a_count: usize, a_cap: u32, b_count: usize, b_cap: u32) -> Ordering {
    (a_count as u128 * u128::from(b_cap)).cmp(&(b_count as u128 * u128::from(a_cap)))
}

/// The balanced, sticky target for stateful actives, before lag is
/// considered: each client keeps its previous actives up to its quota; the
/// rest go to a client with room, the least lagging first.
pub(super) fn stateful_target(input: &TaskAssignmentInput) -> BTreeMap<TaskId, String> {
    let mut quotas = Quotas::new(input, input.stateful_tasks.len());
    let mut target: BTreeMap<TaskId, &str> = BTreeMap::new();

    // Stickiness: a task stays where it runs unless its client is over quota.
    // Over quota, a task goes first if a client sure to have room (fewer
    // previous actives than its floor) is caught up on it, and the tasks the
    // other clients are least caught up on are kept first. This is one pass
    // over the previous actives of all clients, so it also decides which
    // clients get the left-over slots (`n − Σ⌊n·c/C⌋`).
    //
    // Prevents: a target that changes over a follow-up rebalance. An active
    // kept on a caught-up client only while the target's warmup restores is
    // a previous active of that client at the next rebalance, just like the
    // tasks the client kept. Kafka's target is a fresh round-robin, the same
    // in every round; a sticky one has to give that interim active to the
    // warmed-up target again. Ranked this way the interim active (its target
    // has room and a caught-up warmup) is the first to go, and the tasks it
    // displaced, and the left-over slots, stay where they went. In client
    // and task order it could keep the interim active and evict another
    // task, wasting the warmup and asking for one more round.
    let demand = |c: &ClientState| {
        c.previous_active
            .iter()
            .filter(|t| input.stateful_tasks.contains(t))
            .count()
    };
    let spare: BTreeSet<&str> = input
        .clients
        .iter()
        .filter(|(id, c)| demand(c) < quotas.floor(id))
        .map(|(id, _)| id.as_str())
        .collect();
    // Prevents: a warmup retargeted before it catches up. A client restarted
    // with an empty state directory is warmed up on the tasks handed away
    // from it; when one warmup catches up, the others may still lag more
    // than a task it has no copy of (a smaller changelog restored from
    // scratch), and ranked by lag alone that other task would move to it
    // instead, leaving the handed-away task on its interim owner, to move
    // again when that one restarts (3-4 moves of one task in a rolling
    // deploy with empty state; `tests/rolling_deploy.rs`). A task some
    // spare client is warming up goes first.
    let warming = |owner: &str, t: &TaskId| {
        input
            .clients
            .iter()
            .any(|(c, s)| c != owner && spare.contains(c.as_str()) && s.warmups.contains(t))
    };
    let mut previous: Vec<(bool, LagRank, LagRank, &str, TaskId)> = input
        .clients
        .iter()
        .flat_map(|(id, client)| {
            let spare = &spare;
            client
                .previous_active
                .iter()
                .filter(|t| input.stateful_tasks.contains(t))
                .map(move |t| {
                    let owner = id.as_str();
                    (
                        warming(owner, t),
                        best_rank(input, t, |c| c != owner && spare.contains(c)),
                        best_rank(input, t, |c| c != owner),
                        owner,
                        *t,
                    )
                })
        })
        .collect();
    // Least caught-up alternatives first; client then task order breaks ties.
    previous.sort_by(|(wa, sa, ra, ca, ta), (wb, sb, rb, cb, tb)| {
        wa.cmp(wb)
            .then_with(|| sb.cmp(sa))
            .then_with(|| rb.cmp(ra))
            .then_with(|| ca.cmp(cb))
            .then_with(|| ta.cmp(tb))
    });
    for (_, _, _, id, task) in previous {
        if !target.contains_key(&task) && quotas.has_room(id) {
            quotas.take(id);
            target.insert(task, id);
        }
    }

    let unplaced: Vec<TaskId> = input
        .stateful_tasks
        .iter()
        .filter(|t| !target.contains_key(t))
        .copied()
        .collect();
    for task in unplaced {
        let best = input
            .clients
            .iter()
            .filter(|(id, _)| quotas.has_room(id))
            .min_by(|(a_id, a), (b_id, b)| {
                lag_rank(a, &task)
                    .cmp(&lag_rank(b, &task))
                    .then_with(|| {
                        cmp_load(
                            quotas.count(a_id),
                            a.capacity,
                            quotas.count(b_id),
                            b.capacity,
                        )
                    })
                    .then_with(|| a_id.cmp(b_id))
            })
            .map(|(id, _)| id.as_str());
        if let Some(id) = best {
            quotas.take(id);
            target.insert(task, id);
        }
    }
    target.into_iter().map(|(t, c)| (t, c.to_owned())).collect()
}

/// The best lag rank on `task` of the clients `pick` accepts
/// ([`LagRank::NoState`] if it accepts none).
fn best_rank(input: &TaskAssignmentInput, task: &TaskId, pick: impl Fn(&str) -> bool) -> LagRank {
    input
        .clients
        .iter()
        .filter(|(id, _)| pick(id))
        .map(|(_, c)| lag_rank(c, task))
        .min()
        .unwrap_or(LagRank::NoState)
}

/// How many clients other than `client` in `client`'s rack hold a copy of
/// `task`; 0 when `client` has no rack.
fn rack_copies(
    input: &TaskAssignmentInput,
    clients: &BTreeMap<String, ClientAssignment>,
    client: &str,
    task: &TaskId,
) -> usize {
    let Some(rack) = input.clients.get(client).and_then(|c| c.rack.as_ref()) else {
        return 0;
    };
    clients
        .iter()
        .filter(|(id, c)| {
            id.as_str() != client
                && c.holds(task)
                && input
                    .clients
                    .get(id.as_str())
                    .is_some_and(|s| s.rack.as_ref() == Some(rack))
        })
        .count()
}

/// Places `num_standby_replicas` standbys of every stateful task on clients
/// that hold no copy of it, balanced by quota, in racks with the fewest
/// copies of it first (`client.rack`), then the least lagging (a previous
/// standby has the least lag, so standbys are sticky too).
pub(super) fn standbys(
    input: &TaskAssignmentInput,
    config: &TaskAssignorConfig,
    clients: &mut BTreeMap<String, ClientAssignment>,
) {
    let k = config.num_standby_replicas as usize;
    if k == 0 {
        return;
    }
    let copies = |clients: &BTreeMap<String, ClientAssignment>, task: &TaskId| {
        k.min(clients.values().filter(|c| !c.holds(task)).count())
    };
    let total: usize = input
        .stateful_tasks
        .iter()
        .map(|t| copies(clients, t))
        .sum();
    let mut quotas = Quotas::new(input, total);
    for task in &input.stateful_tasks {
        for _ in 0..copies(clients, task) {
            // Prevents: two copies of one task's state on one client, which
            // would make the standby useless when that client fails.
            let free: Vec<(&String, &super::ClientState)> = input
                .clients
                .iter()
                .filter(|(id, _)| clients.get(*id).is_some_and(|c| !c.holds(task)))
                .collect();
            // Prevents: every copy of a task in one rack, lost together
            // with it. The rack spread ranks first, as in Kafka's
            // rack-aware standby assignment (even over the quota); then a
            // client within its quota, the least lagging; over quota, the
            // least loaded. Without racks this is the quota-first order.
            let spread = |id: &str| rack_copies(input, clients, id, task);
            let pick = free
                .iter()
                .min_by(|(a_id, a), (b_id, b)| {
                    let by_load = || {
                        cmp_load(
                            quotas.count(a_id),
                            a.capacity,
                            quotas.count(b_id),
                            b.capacity,
                        )
                    };
                    let by_lag = || lag_rank(a, task).cmp(&lag_rank(b, task));
                    let (room_a, room_b) = (quotas.has_room(a_id), quotas.has_room(b_id));
                    spread(a_id)
                        .cmp(&spread(b_id))
                        .then_with(|| room_b.cmp(&room_a))
                        .then_with(|| {
                            if room_a && room_b {
                                by_lag().then_with(by_load)
                            } else {
                                by_load().then_with(by_lag)
                            }
                        })
                        .then_with(|| a_id.cmp(b_id))
                })
                .map(|(id, _)| id.as_str());
            let Some(id) = pick else { break };
            quotas.take(id);
            if let Some(c) = clients.get_mut(id) {
                c.standby.insert(*task);
            }
        }
    }
    balance_standbys(input, clients);
}

/// Evens out standby counts after the greedy placement, which can corner
/// itself (the only clients with room already hold the task). Moves a standby
/// from a client to one with a lower load while the move does not reverse
/// the imbalance (Kafka's `shouldMoveATask`); every move lowers
/// `Σ count²/capacity`, so this ends.
fn balance_standbys(input: &TaskAssignmentInput, clients: &mut BTreeMap<String, ClientAssignment>) {
    let capacity = |id: &str| input.clients.get(id).map_or(1, |c| c.capacity.max(1));
    'search: loop {
        // Most loaded sources first, least loaded destinations first.
        let mut by_load: Vec<(&String, usize)> = clients
            .iter()
            .map(|(id, c)| (id, c.standby.len()))
            .collect();
        by_load.sort_by(|(a, ca), (b, cb)| {
            cmp_load(*ca, capacity(a), *cb, capacity(b)).then_with(|| a.cmp(b))
        });
        for &(from, cf) in by_load.iter().rev() {
            if cf == 0 {
                break;
            }
            for &(to, ct) in &by_load {
                // Move only if (cf-1)/cap_from >= (ct+1)/cap_to; later
                // destinations are more loaded, so stop at the first refusal.
                if from == to
                    || cmp_load(cf - 1, capacity(from), ct + 1, capacity(to)) == Ordering::Less
                {
                    break;
                }
                let (Some(src), Some(dst)) = (clients.get(from), clients.get(to)) else {
                    continue;
                };
                let to_state = input.clients.get(to.as_str());
                // A move never puts more copies of a task in one rack.
                let candidate = src
                    .standby
                    .iter()
                    .filter(|task| !dst.holds(task))
                    .filter(|task| {
                        // Copies in `to`'s rack once it holds the task
                        // (without `from`'s, if the two share a rack).
                        let from_rack = input
                            .clients
                            .get(from.as_str())
                            .and_then(|c| c.rack.as_ref());
                        let to_rack = input.clients.get(to.as_str()).and_then(|c| c.rack.as_ref());
                        let shared = usize::from(from_rack.is_some() && from_rack == to_rack);
                        rack_copies(input, clients, to, task).saturating_sub(shared)
                            <= rack_copies(input, clients, from, task)
                    })
                    .min_by_key(|task| to_state.map(|c| lag_rank(c, task)))
                    .copied();
                if let Some(task) = candidate {
                    let (from, to) = (from.clone(), to.clone());
                    if let Some(c) = clients.get_mut(&from) {
                        c.standby.remove(&task);
                    }
                    if let Some(c) = clients.get_mut(&to) {
                        c.standby.insert(task);
                    }
                    continue 'search;
                }
            }
        }
        break;
    }
}

/// Spreads stateless tasks, one at a time, over the client with the lowest
/// active load, preferring the previous owner on a tie.
pub(super) fn stateless(
    input: &TaskAssignmentInput,
    clients: &mut BTreeMap<String, ClientAssignment>,
) {
    for task in &input.stateless_tasks {
        let pick = input
            .clients
            .iter()
            .min_by(|(a_id, a), (b_id, b)| {
                let a_active = clients.get(*a_id).map_or(0, |c| c.active.len());
                let b_active = clients.get(*b_id).map_or(0, |c| c.active.len());
                cmp_load(a_active, a.capacity, b_active, b.capacity)
                    .then_with(|| {
                        b.previous_active
                            .contains(task)
                            .cmp(&a.previous_active.contains(task))
                    })
                    .then_with(|| a_id.cmp(b_id))
            })
            .map(|(id, _)| id.clone());
        if let Some(id) = pick
            && let Some(c) = clients.get_mut(&id)
        {
            c.active.insert(*task);
        }
    }
}
