//! The high-availability task assignor: validity invariants over random
//! inputs, the caught-up rule, the early follow-up, balance after
//! convergence, and convergence after a node is added within
//! `stateful tasks / max warmups + 1` rounds.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use weir_group::GroupError;
use weir_group::task_assignor::{
    ClientState, TaskAssignment, TaskAssignmentInput, TaskAssignorConfig, TaskId, assign,
};

fn t(s: u32, p: u32) -> TaskId {
    TaskId::new(s, p)
}

/// The caught-up rule, restated from KIP-441 independently of the code.
fn is_caught_up(c: &ClientState, task: &TaskId, acceptable: u64) -> bool {
    c.previous_active.contains(task) || c.lags.get(task).is_some_and(|l| *l <= acceptable)
}

fn check_invariants(
    input: &TaskAssignmentInput,
    config: &TaskAssignorConfig,
    out: &TaskAssignment,
) -> Result<(), String> {
    if input.clients.is_empty() {
        return Ok(());
    }
    let mut active_of: BTreeMap<TaskId, &str> = BTreeMap::new();
    for (id, c) in &out.clients {
        for task in &c.active {
            if let Some(other) = active_of.insert(*task, id) {
                return Err(format!("{task} active on {other} and {id}"));
            }
        }
        // No client holds two copies of one task.
        if c.active.intersection(&c.standby).next().is_some()
            || c.active.intersection(&c.warmup).next().is_some()
            || c.standby.intersection(&c.warmup).next().is_some()
        {
            return Err(format!("{id} holds two copies of a task: {c:?}"));
        }
        for task in c.standby.iter().chain(&c.warmup) {
            if !input.stateful_tasks.contains(task) {
                return Err(format!("{id} has a standby/warmup of stateless {task}"));
            }
        }
    }
    let all: BTreeSet<TaskId> = input
        .stateful_tasks
        .union(&input.stateless_tasks)
        .copied()
        .collect();
    let assigned: BTreeSet<TaskId> = active_of.keys().copied().collect();
    if assigned != all {
        return Err(format!("actives {assigned:?} != tasks {all:?}"));
    }
    let warmups: usize = out.clients.values().map(|c| c.warmup.len()).sum();
    if warmups > config.max_warmup_replicas as usize {
        return Err(format!(
            "{warmups} warmups > {}",
            config.max_warmup_replicas
        ));
    }
    for task in &input.stateful_tasks {
        let holders = out.clients.values().filter(|c| c.holds(task)).count();
        let copies_without_standby = out
            .clients
            .values()
            .filter(|c| c.active.contains(task) || c.warmup.contains(task))
            .count();
        let want = (config.num_standby_replicas as usize)
            .min(input.clients.len() - copies_without_standby);
        if holders - copies_without_standby != want {
            return Err(format!(
                "{task}: {} standbys, want {want}",
                holders - copies_without_standby
            ));
        }
        // A stateful active goes to a lagging client only if none is caught up.
        let owner = &input.clients[active_of[task]];
        if !is_caught_up(owner, task, config.acceptable_recovery_lag)
            && input
                .clients
                .values()
                .any(|c| is_caught_up(c, task, config.acceptable_recovery_lag))
        {
            return Err(format!(
                "{task} active on lagging {} although a client is caught up",
                active_of[task]
            ));
        }
    }
    match &out.followup {
        None if warmups > 0 => return Err("warmups but no follow-up".into()),
        Some(f) => {
            let listed: BTreeMap<String, BTreeSet<TaskId>> = out
                .clients
                .iter()
                .filter(|(_, c)| !c.warmup.is_empty())
                .map(|(id, c)| (id.clone(), c.warmup.clone()))
                .collect();
            if f.warmups != listed {
                return Err(format!(
                    "follow-up watches {:?}, warmups are {listed:?}",
                    f.warmups
                ));
            }
        }
        None => {}
    }
    Ok(())
}

fn client() -> impl Strategy<Value = (u32, Vec<(u32, u32, u8, u64)>)> {
    // (subtopology, partition, role 0 none/1 active/2 standby, lag)
    (
        1u32..4,
        prop::collection::vec((0u32..3, 0u32..8, 0u8..3, 0u64..40_000), 0..16),
    )
}

fn input() -> impl Strategy<Value = (TaskAssignmentInput, TaskAssignorConfig)> {
    (
        prop::collection::vec(client(), 0..6),
        prop::collection::btree_set((0u32..3, 0u32..8), 0..20),
        prop::collection::btree_set((3u32..5, 0u32..4), 0..8),
        (0u32..3, 1u32..4, 0u64..20_000),
    )
        .prop_map(|(clients, stateful, stateless, (standbys, warmups, lag))| {
            let clients = clients
                .into_iter()
                .enumerate()
                .map(|(i, (capacity, tasks))| {
                    let mut c = ClientState::new(capacity);
                    for (s, p, role, l) in tasks {
                        match role {
                            1 => {
                                c.previous_active.insert(t(s, p));
                            }
                            2 => {
                                c.previous_standby.insert(t(s, p));
                                c.lags.insert(t(s, p), l / 8);
                            }
                            _ => {
                                c.lags.insert(t(s, p), l);
                            }
                        }
                    }
                    (format!("client-{i}"), c)
                })
                .collect();
            (
                TaskAssignmentInput {
                    clients,
                    stateful_tasks: stateful.into_iter().map(|(s, p)| t(s, p)).collect(),
                    stateless_tasks: stateless.into_iter().map(|(s, p)| t(s, p)).collect(),
                },
                TaskAssignorConfig {
                    acceptable_recovery_lag: lag,
                    num_standby_replicas: standbys,
                    max_warmup_replicas: warmups,
                    probing_rebalance_interval: Duration::from_secs(600),
                },
            )
        })
}

/// What each client reports at the next rebalance: it runs its actives, and
/// its standbys and warmups restored fully in between (the warmup reported
/// caught up); state it no longer holds falls further behind.
fn next_round(input: &TaskAssignmentInput, out: &TaskAssignment) -> TaskAssignmentInput {
    let mut next = input.clone();
    for (id, c) in next.clients.iter_mut() {
        let a = &out.clients[id];
        for lag in c.lags.values_mut() {
            *lag = lag.saturating_add(50_000);
        }
        for task in &c.previous_active.clone() {
            if !a.active.contains(task) {
                c.lags.insert(*task, 50_000);
            }
        }
        for task in a.standby.iter().chain(&a.warmup) {
            c.lags.insert(*task, 0);
        }
        for task in &a.active {
            c.lags.remove(task);
        }
        c.previous_active = a.active.clone();
        c.previous_standby = a.standby.union(&a.warmup).copied().collect();
    }
    next
}

/// Runs rounds until no follow-up is asked for; returns the rounds taken and
/// the final assignment. Every round's follow-up must be triggered early by
/// a warmup reporting caught up.
fn converge(
    mut input: TaskAssignmentInput,
    config: &TaskAssignorConfig,
    max_rounds: usize,
) -> Result<(usize, TaskAssignmentInput, TaskAssignment), String> {
    for round in 1..=max_rounds {
        let out = assign(&input, config).map_err(|e| e.to_string())?;
        check_invariants(&input, config, &out)?;
        let next = next_round(&input, &out);
        match &out.followup {
            None => return Ok((round, input, out)),
            Some(f) => {
                let triggered = next
                    .clients
                    .iter()
                    .any(|(id, c)| f.warmup_caught_up(id, &c.lags));
                if !triggered {
                    return Err(format!("round {round}: no warmup triggers the follow-up"));
                }
            }
        }
        input = next;
    }
    Err(format!("not converged in {max_rounds} rounds"))
}

fn check_balanced(input: &TaskAssignmentInput, out: &TaskAssignment) -> Result<(), String> {
    let total_capacity: u64 = input.clients.values().map(|c| u64::from(c.capacity)).sum();
    let n = input.stateful_tasks.len() as u64;
    for (id, c) in &out.clients {
        let cap = u64::from(input.clients[id].capacity);
        let stateful = c.active.intersection(&input.stateful_tasks).count() as u64;
        let floor = n * cap / total_capacity;
        if stateful < floor || stateful > floor + 1 {
            return Err(format!(
                "{id}: {stateful} stateful actives, quota {floor}..={}",
                floor + 1
            ));
        }
    }
    if input
        .clients
        .values()
        .all(|c| c.capacity == input.clients.values().next().map_or(1, |f| f.capacity))
    {
        for pick in [
            |c: &weir_group::task_assignor::ClientAssignment| c.active.len(),
            |c: &weir_group::task_assignor::ClientAssignment| c.standby.len(),
        ] {
            let counts: Vec<usize> = out.clients.values().map(pick).collect();
            let (min, max) = (
                counts.iter().min().copied().unwrap_or(0),
                counts.iter().max().copied().unwrap_or(0),
            );
            if max > min + 1 {
                return Err(format!("counts {counts:?} not within one"));
            }
        }
    }
    Ok(())
}

/// A settled group of `clients` equal clients, then one more added.
fn cluster_plus_one(
    clients: usize,
    stateful: u32,
    stateless: u32,
    config: &TaskAssignorConfig,
) -> Result<TaskAssignmentInput, String> {
    let mut input = TaskAssignmentInput {
        clients: (0..clients)
            .map(|i| (format!("node-{i}"), ClientState::new(2)))
            .collect(),
        stateful_tasks: (0..stateful).map(|p| t(0, p)).collect(),
        stateless_tasks: (0..stateless).map(|p| t(1, p)).collect(),
    };
    let (_, settled_input, settled) = converge(input.clone(), config, 100)?;
    input = next_round(&settled_input, &settled);
    input.clients.insert("node-new".into(), ClientState::new(2));
    Ok(input)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn invariants_hold_for_any_input((input, config) in input()) {
        let out = assign(&input, &config).unwrap();
        check_invariants(&input, &config, &out).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&out, &assign(&input, &config).unwrap(), "deterministic");
    }

    /// From any state, the group converges, balanced.
    #[test]
    fn converges_balanced_from_any_state((input, config) in input()) {
        let bound = input.stateful_tasks.len() / config.max_warmup_replicas as usize + 2;
        let (_, last_input, out) = converge(input, &config, bound).map_err(TestCaseError::fail)?;
        check_balanced(&last_input, &out).map_err(TestCaseError::fail)?;
    }

    /// After a node is added, the assignment settles within
    /// `stateful tasks / max warmups + 1` follow-up rebalances.
    #[test]
    fn adding_a_node_converges_within_the_bound(
        clients in 1usize..5,
        stateful in 0u32..30,
        stateless in 0u32..6,
        warmups in 1u32..4,
        standbys in 0u32..2,
    ) {
        let config = TaskAssignorConfig {
            max_warmup_replicas: warmups,
            num_standby_replicas: standbys,
            ..TaskAssignorConfig::default()
        };
        let input = cluster_plus_one(clients, stateful, stateless, &config).map_err(TestCaseError::fail)?;
        // Rounds after the rebalance the join itself causes.
        let bound = stateful as usize / warmups as usize + 1;
        let before = input.clone();
        let (rounds, last_input, out) = converge(input, &config, bound + 1).map_err(TestCaseError::fail)?;
        prop_assert!(rounds - 1 <= bound);
        // No bouncing: old nodes only give tasks up (to the new node); none
        // takes over another old node's stateful task.
        for (id, c) in before.clients.iter().filter(|(id, _)| *id != "node-new") {
            let now: BTreeSet<TaskId> = out.clients[id].active.intersection(&before.stateful_tasks).copied().collect();
            prop_assert!(now.is_subset(&c.previous_active), "{} gained stateful tasks: {:?} -> {:?}", id, c.previous_active, now);
        }
        check_balanced(&last_input, &out).map_err(TestCaseError::fail)?;
        prop_assert!(
            stateful < (clients as u32 + 1) || !out.clients["node-new"].active.is_empty(),
            "the new node got no task"
        );
    }
}

#[test]
fn an_active_stays_caught_up_while_a_warmup_restores() {
    let mut old = ClientState::new(1);
    old.previous_active = [t(0, 0), t(0, 1)].into();
    let input = TaskAssignmentInput {
        clients: [("a".to_owned(), old), ("b".to_owned(), ClientState::new(1))].into(),
        stateful_tasks: [t(0, 0), t(0, 1)].into(),
        stateless_tasks: BTreeSet::new(),
    };
    let config = TaskAssignorConfig::default();
    let out = assign(&input, &config).unwrap();
    // Balance wants one task on b, but b has no state: a keeps both this
    // round, and b warms one up.
    assert_eq!(out.clients["a"].active, [t(0, 0), t(0, 1)].into());
    assert!(out.clients["b"].active.is_empty());
    assert_eq!(out.clients["b"].warmup, [t(0, 1)].into());
    let f = out.followup.expect("a follow-up is needed");
    assert_eq!(f.probing_interval, Duration::from_secs(600));
    // The improvement: b triggers the follow-up the moment its warmup is
    // within acceptable.recovery.lag, not 10 minutes later.
    assert!(!f.warmup_caught_up("b", &[(t(0, 1), 10_001)].into()));
    assert!(!f.warmup_caught_up("b", &BTreeMap::new()));
    assert!(f.warmup_caught_up("b", &[(t(0, 1), 10_000)].into()));
    assert!(!f.warmup_caught_up("a", &[(t(0, 1), 0)].into()));
    assert_eq!(
        f.warmups_of("b").copied().collect::<Vec<_>>(),
        vec![t(0, 1)]
    );
}

#[test]
fn a_lagging_client_gets_an_active_only_if_none_is_caught_up() {
    // Nobody is caught up on 0_0: it goes to the least lagging client.
    let mut a = ClientState::new(1);
    a.lags.insert(t(0, 0), 50_000);
    let mut b = ClientState::new(1);
    b.lags.insert(t(0, 0), 20_000);
    let input = TaskAssignmentInput {
        clients: [("a".to_owned(), a.clone()), ("b".to_owned(), b)].into(),
        stateful_tasks: [t(0, 0)].into(),
        stateless_tasks: BTreeSet::new(),
    };
    let out = assign(&input, &TaskAssignorConfig::default()).unwrap();
    assert_eq!(out.clients["b"].active, [t(0, 0)].into());
    assert!(out.followup.is_none());

    // Once a is caught up, a lagging client never gets it.
    let mut a2 = a;
    a2.lags.insert(t(0, 0), 9_000);
    let mut input2 = input.clone();
    input2.clients.insert("a".into(), a2);
    let out = assign(&input2, &TaskAssignorConfig::default()).unwrap();
    assert_eq!(out.clients["a"].active, [t(0, 0)].into());
}

#[test]
fn a_standby_caught_up_takes_over_from_a_failed_client() {
    // c died; b has a caught-up standby of c's task and takes it at once,
    // without a warmup or a follow-up.
    let mut a = ClientState::new(1);
    a.previous_active = [t(0, 0)].into();
    let mut b = ClientState::new(1);
    b.previous_active = [t(0, 1)].into();
    b.previous_standby = [t(0, 2)].into();
    b.lags.insert(t(0, 2), 5);
    let input = TaskAssignmentInput {
        clients: [("a".to_owned(), a), ("b".to_owned(), b)].into(),
        stateful_tasks: [t(0, 0), t(0, 1), t(0, 2)].into(),
        stateless_tasks: BTreeSet::new(),
    };
    let out = assign(&input, &TaskAssignorConfig::default()).unwrap();
    assert!(out.clients["b"].active.contains(&t(0, 2)));
    assert!(out.followup.is_none());
}

#[test]
fn a_warmup_is_not_retargeted_to_a_task_with_a_smaller_changelog() {
    // a restarted with an empty directory; its tasks 0_1 and 0_4 went to b
    // and c, and a warms both up. 0_4's warmup has caught up; 0_1's has not
    // started (lag 557), and 0_5, of which a has no copy, would restore
    // 290 from scratch. b keeps 0_2 and 0_5; 0_1 stays on b only until
    // a's warmup of it is caught up (seen in tests/rolling_deploy.rs: 0_5
    // moved to a, the 0_1 warmup was dropped, 0_1 moved again later).
    let mut a = ClientState::new(2);
    a.warmups = [t(0, 1), t(0, 4)].into();
    a.previous_standby = [t(0, 0), t(0, 1), t(0, 2), t(0, 4)].into();
    a.lags = [
        (t(0, 0), 291),
        (t(0, 1), 557),
        (t(0, 2), 291),
        (t(0, 3), 389),
        (t(0, 4), 10),
        (t(0, 5), 290),
    ]
    .into();
    let mut b = ClientState::new(2);
    b.previous_active = [t(0, 1), t(0, 2), t(0, 5)].into();
    b.lags = [(t(0, 0), 291), (t(0, 3), 3), (t(0, 4), 25)].into();
    let mut c = ClientState::new(2);
    c.previous_active = [t(0, 0), t(0, 3), t(0, 4)].into();
    c.lags = [(t(0, 1), 14), (t(0, 2), 290), (t(0, 5), 8)].into();
    let input = TaskAssignmentInput {
        clients: [
            ("a".to_owned(), a),
            ("b".to_owned(), b),
            ("c".to_owned(), c),
        ]
        .into(),
        stateful_tasks: (0..6).map(|p| t(0, p)).collect(),
        stateless_tasks: BTreeSet::new(),
    };
    let config = TaskAssignorConfig {
        acceptable_recovery_lag: 100,
        num_standby_replicas: 1,
        max_warmup_replicas: 6,
        ..TaskAssignorConfig::default()
    };
    let out = assign(&input, &config).unwrap();
    check_invariants(&input, &config, &out).unwrap();
    assert_eq!(out.clients["a"].active, [t(0, 4)].into());
    assert_eq!(out.clients["a"].warmup, [t(0, 1)].into());
    assert_eq!(out.clients["b"].active, [t(0, 1), t(0, 2), t(0, 5)].into());
}

#[test]
fn invalid_configurations_are_errors() {
    let input = TaskAssignmentInput {
        clients: [("a".to_owned(), ClientState::new(0))].into(),
        ..TaskAssignmentInput::default()
    };
    assert!(matches!(
        assign(&input, &TaskAssignorConfig::default()),
        Err(GroupError::InvalidConfig(_))
    ));
    let config = TaskAssignorConfig {
        max_warmup_replicas: 0,
        ..TaskAssignorConfig::default()
    };
    assert!(matches!(
        assign(&TaskAssignmentInput::default(), &config),
        Err(GroupError::InvalidConfig(_))
    ));
    let both = TaskAssignmentInput {
        stateful_tasks: [t(0, 0)].into(),
        stateless_tasks: [t(0, 0)].into(),
        ..TaskAssignmentInput::default()
    };
    assert!(matches!(
        assign(&both, &TaskAssignorConfig::default()),
        Err(GroupError::InvalidConfig(_))
    ));
}

#[test]
fn lags_from_offset_sums_follow_kafka() {
    use weir_group::task_assignor::{OFFSET_SUM_RUNNING, task_lags};
    let end: BTreeMap<TaskId, u64> = [
        (t(0, 0), 1_000),
        (t(0, 1), 1_000),
        (t(0, 2), 1_000),
        (t(0, 3), 1_000),
        (t(0, 4), 1_000),
    ]
    .into();
    let sums: BTreeMap<TaskId, i64> = [
        (t(0, 0), 900),
        (t(0, 1), OFFSET_SUM_RUNNING),
        (t(0, 2), 5_000),
        (t(0, 4), -3),
    ]
    .into();
    let lags = task_lags(&end, &sums);
    assert_eq!(
        lags,
        [(t(0, 0), 100), (t(0, 2), 1_000), (t(0, 3), 1_000)].into()
    );
}

/// Shrunk from `converges_balanced_from_any_state`. Round 1: a keeps 0_4 and
/// runs 0_1 (it has a caught-up standby of it) only while b warms 0_1 up.
/// Round 2: a runs both, and the sticky target must still give 0_1 to b
/// (whose warmup is now caught up) and keep 0_4 on a. It used to keep 0_1 on
/// a, in task order, and evict 0_4 to b, wasting b's warmup and asking for
/// a third round.
#[test]
fn an_interim_active_goes_to_its_warmed_up_target() {
    let mut a = ClientState::new(1);
    a.previous_active = [t(2, 4)].into();
    a.previous_standby = [t(2, 1)].into();
    a.lags.insert(t(2, 1), 0);
    let input = TaskAssignmentInput {
        clients: [("a".to_owned(), a), ("b".to_owned(), ClientState::new(1))].into(),
        stateful_tasks: [t(2, 1), t(2, 4)].into(),
        stateless_tasks: BTreeSet::new(),
    };
    let config = TaskAssignorConfig {
        acceptable_recovery_lag: 0,
        num_standby_replicas: 0,
        max_warmup_replicas: 3,
        probing_rebalance_interval: Duration::from_secs(600),
    };
    let first = assign(&input, &config).unwrap();
    assert_eq!(first.clients["a"].active, [t(2, 1), t(2, 4)].into());
    assert_eq!(first.clients["b"].warmup, [t(2, 1)].into());

    let (rounds, last_input, out) = converge(input, &config, 2).unwrap();
    assert_eq!(rounds, 2);
    assert_eq!(out.clients["a"].active, [t(2, 4)].into());
    assert_eq!(out.clients["b"].active, [t(2, 1)].into());
    check_balanced(&last_input, &out).unwrap();
}

/// Shrunk from `converges_balanced_from_any_state`: the left-over slot. With
/// capacities 2, 1, 1 and two tasks, a has one slot and one of b, c gets the
/// other. Round 1 gives it to c (caught up on 0_7) and keeps 2_7 on b while
/// a warms it up. Round 2 both b and c run a task and only one may keep it:
/// it must be c, so that 2_7 goes to a, whose warmup is caught up. Taking
/// the slot in client order gave it to b and sent 0_7 to a, cold.
#[test]
fn the_left_over_slot_stays_where_it_went() {
    let mut b = ClientState::new(1);
    b.previous_standby = [t(2, 7)].into();
    b.lags.insert(t(2, 7), 0);
    let mut c = ClientState::new(1);
    c.lags.insert(t(0, 7), 0);
    let input = TaskAssignmentInput {
        clients: [
            ("a".to_owned(), ClientState::new(2)),
            ("b".to_owned(), b),
            ("c".to_owned(), c),
        ]
        .into(),
        stateful_tasks: [t(0, 7), t(2, 7)].into(),
        stateless_tasks: BTreeSet::new(),
    };
    let config = TaskAssignorConfig {
        acceptable_recovery_lag: 0,
        num_standby_replicas: 0,
        max_warmup_replicas: 3,
        probing_rebalance_interval: Duration::from_secs(600),
    };
    let first = assign(&input, &config).unwrap();
    assert_eq!(first.clients["b"].active, [t(2, 7)].into());
    assert_eq!(first.clients["a"].warmup, [t(2, 7)].into());

    let (rounds, last_input, out) = converge(input, &config, 2).unwrap();
    assert_eq!(rounds, 2);
    assert_eq!(out.clients["a"].active, [t(2, 7)].into());
    assert_eq!(out.clients["c"].active, [t(0, 7)].into());
    check_balanced(&last_input, &out).unwrap();
}

/// Shrunk from `converges_balanced_from_any_state`: a standby ties with a
/// warmup. Capacities 1, 2, 1, two tasks, one standby each. Round 1: c takes
/// the left-over slot with 1_3 (caught up), a runs 1_5 while b warms it up,
/// and a gets a standby of 1_3. Round 2: 1_5 (warmup on b) and 1_3 (standby
/// on a) both have a caught-up copy elsewhere, but only b has room: 1_5 must
/// go, and c keep 1_3.
#[test]
fn the_task_whose_warmup_has_room_goes_first() {
    let mut a = ClientState::new(1);
    a.previous_standby = [t(1, 5)].into();
    a.lags.insert(t(1, 5), 0);
    let mut c = ClientState::new(1);
    c.lags.insert(t(1, 3), 0);
    let input = TaskAssignmentInput {
        clients: [
            ("a".to_owned(), a),
            ("b".to_owned(), ClientState::new(2)),
            ("c".to_owned(), c),
        ]
        .into(),
        stateful_tasks: [t(1, 3), t(1, 5)].into(),
        stateless_tasks: BTreeSet::new(),
    };
    let config = TaskAssignorConfig {
        acceptable_recovery_lag: 0,
        num_standby_replicas: 1,
        max_warmup_replicas: 3,
        probing_rebalance_interval: Duration::from_secs(600),
    };
    let first = assign(&input, &config).unwrap();
    assert_eq!(first.clients["a"].active, [t(1, 5)].into());
    assert_eq!(first.clients["b"].warmup, [t(1, 5)].into());
    assert_eq!(first.clients["c"].active, [t(1, 3)].into());

    let (rounds, last_input, out) = converge(input, &config, 2).unwrap();
    assert_eq!(rounds, 2);
    assert_eq!(out.clients["b"].active, [t(1, 5)].into());
    assert_eq!(out.clients["c"].active, [t(1, 3)].into());
    check_balanced(&last_input, &out).unwrap();
}

/// The racks holding an active or standby copy of each task (warmups are
/// placed for a move, not for redundancy).
fn racks_of_copies(
    input: &TaskAssignmentInput,
    out: &TaskAssignment,
) -> BTreeMap<TaskId, Vec<String>> {
    let mut racks: BTreeMap<TaskId, Vec<String>> = BTreeMap::new();
    for (id, c) in &out.clients {
        let rack = input.clients[id].rack.clone().unwrap_or_default();
        for task in c.active.iter().chain(&c.standby) {
            racks.entry(*task).or_default().push(rack.clone());
        }
    }
    racks
}

#[test]
fn standbys_go_to_racks_that_hold_no_copy_of_their_task() {
    // 3 racks of 1-3 clients each, standbys 1 or 2: every task's copies
    // are in distinct racks, from an empty start and after it settles.
    for per_rack in 1..=3usize {
        for standbys in 1..=2u32 {
            for tasks in [3u32, 6, 12] {
                let mut input = TaskAssignmentInput {
                    clients: BTreeMap::new(),
                    stateful_tasks: (0..tasks).map(|p| t(0, p)).collect(),
                    stateless_tasks: BTreeSet::new(),
                };
                // Names interleave racks so that name order alone would
                // not spread them: a0 a1 a2 in rack-a, then b0 ...
                for rack in ["a", "b", "c"] {
                    for i in 0..per_rack {
                        let mut c = ClientState::new(1);
                        c.rack = Some(format!("rack-{rack}"));
                        input.clients.insert(format!("{rack}{i}"), c);
                    }
                }
                let config = TaskAssignorConfig {
                    num_standby_replicas: standbys,
                    ..TaskAssignorConfig::default()
                };
                let mut out = assign(&input, &config).unwrap();
                for round in 0..3 {
                    check_invariants(&input, &config, &out).unwrap();
                    for (task, racks) in racks_of_copies(&input, &out) {
                        let distinct: BTreeSet<&String> = racks.iter().collect();
                        assert_eq!(
                            distinct.len(),
                            racks.len(),
                            "{per_rack} per rack, {standbys} standbys, {tasks} tasks, round {round}: {task} has copies in {racks:?}: {:?}",
                            out.clients
                        );
                    }
                    input = next_round(&input, &out);
                    out = assign(&input, &config).unwrap();
                }
            }
        }
    }
}

#[test]
fn without_racks_standbys_are_placed_as_before() {
    // No client has a rack: the rack rule changes nothing (same output as
    // with every client in one rack).
    let mut input = TaskAssignmentInput {
        clients: BTreeMap::new(),
        stateful_tasks: (0..6).map(|p| t(0, p)).collect(),
        stateless_tasks: BTreeSet::new(),
    };
    for i in 0..4 {
        input.clients.insert(format!("c{i}"), ClientState::new(1));
    }
    let config = TaskAssignorConfig {
        num_standby_replicas: 1,
        ..TaskAssignorConfig::default()
    };
    let plain = assign(&input, &config).unwrap();
    for c in input.clients.values_mut() {
        c.rack = Some("one".to_owned());
    }
    assert_eq!(assign(&input, &config).unwrap(), plain);
}
