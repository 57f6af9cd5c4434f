//! The exactly-once checker with real group members running side by side,
//! zombies that keep writing after they were expelled, and hard kills
//! (`weir_integration::eos_group`): 100 seeded schedules in the normal
//! suite; `WEIR_EOS_GROUP_SCHEDULES=N` runs N, `WEIR_EOS_GROUP_SEED=S`
//! replays one.
//!
//! Each schedule runs on its own current-thread runtime with tokio's clock
//! paused, against its own in-memory cluster; two OS threads share them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use weir_integration::eos_group::{
    GroupFault, GroupObserved, GroupSchedule, GroupViolation, ZombieReport, ZombieStep,
    run_group_schedule,
};

const DEFAULT_SCHEDULES: u64 = 100;
const THREADS: usize = 2;

fn run_on_paused_clock(schedule: &GroupSchedule) -> Result<GroupObserved, GroupViolation> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(run_group_schedule(schedule))
}

fn run_all(
    schedules: &[GroupSchedule],
) -> Vec<(GroupSchedule, Result<GroupObserved, GroupViolation>)> {
    let results = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let results = &results;
            scope.spawn(move || {
                for s in schedules.iter().skip(thread).step_by(THREADS) {
                    let result = run_on_paused_clock(s);
                    results.lock().unwrap().push((s.clone(), result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(s, _)| s.seed);
    results
}

/// Why the run did not exercise the fence, if it did not: the zombie must
/// have attempted a transactional write while another instance had been
/// assigned its partitions, and (unless it stalled with its offsets already
/// accepted) must have been fenced.
fn fence_not_exercised(schedule: &GroupSchedule, report: &ZombieReport) -> Option<String> {
    let step = schedule.faults.iter().find_map(|f| match f {
        GroupFault::Zombie { step, .. } => Some(*step),
        GroupFault::Kill { .. } | GroupFault::Flap { .. } => None,
    });
    if report.zombies == 0 {
        return Some("no zombie ran".to_owned());
    }
    if report.attempts_after_takeover == 0 {
        return Some(format!(
            "the zombie never wrote after its partitions were taken over: {report:?}"
        ));
    }
    if step != Some(ZombieStep::AfterOffsets) && report.fence_count() == 0 {
        return Some(format!("the zombie was never fenced: {report:?}"));
    }
    None
}

#[test]
fn exactly_once_holds_with_zombies_running_beside_their_successors() {
    let seeds: Vec<u64> = match std::env::var("WEIR_EOS_GROUP_SEED") {
        Ok(s) => vec![s.parse().expect("WEIR_EOS_GROUP_SEED is a number")],
        Err(_) => {
            let n = std::env::var("WEIR_EOS_GROUP_SCHEDULES")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(DEFAULT_SCHEDULES);
            (0..n).collect()
        }
    };
    let schedules: Vec<GroupSchedule> =
        seeds.iter().map(|s| GroupSchedule::from_seed(*s)).collect();
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let mut total = ZombieReport::default();
    let (mut transactions, mut instances, mut aborted) = (0, 0, 0);
    for (schedule, result) in run_all(&schedules) {
        match result {
            Ok(observed) => {
                if let Some(why) = fence_not_exercised(&schedule, &observed.zombie) {
                    let message = format!("{why}; replay {schedule}");
                    eprintln!("{message}");
                    failures.push(message);
                }
                let z = &observed.zombie;
                transactions += observed.observed.transactions;
                instances += observed.observed.instances;
                aborted += observed.observed.aborted.len();
                total.zombies += z.zombies;
                total.attempts_after_takeover += z.attempts_after_takeover;
                total.successes_after_takeover += z.successes_after_takeover;
                total.kills += z.kills;
                total.in_flight_at_kill += z.in_flight_at_kill;
                total.flaps += z.flaps;
                total.flap_commits_across_generations += z.flap_commits_across_generations;
                total.kills_not_reached += z.kills_not_reached;
                for (name, n) in &z.fences {
                    *total.fences.entry(name.clone()).or_default() += n;
                }
            }
            Err(violation) => {
                eprintln!("{violation}");
                failures.push(violation.to_string());
            }
        }
    }
    eprintln!(
        "eos group checker: {} schedules, {} failed, {transactions} transactions, {instances} instances, {aborted} aborted; zombies {total:?}; {:?} real time",
        seeds.len(),
        failures.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} schedules failed; first: {}",
        failures.len(),
        failures[0]
    );
    // Over all schedules, the coordinator's fence (not only the member's
    // own refusal) answered, and kills hit records in flight.
    assert!(
        total.fences.keys().any(|k| k != "NO_GENERATION"),
        "the coordinator never fenced a zombie: {total:?}"
    );
    if seeds.len() >= 20 {
        assert!(
            total.in_flight_at_kill > 0,
            "no kill hit records in flight: {total:?}"
        );
    }
}

/// The negative control: with the generation fence bypassed (the zombie
/// commits its offsets with `GroupMetadata::unchecked`, which the
/// coordinator does not check), the checker finds a violation.
#[test]
fn the_checker_catches_a_zombie_whose_fence_is_bypassed() {
    let schedules: Vec<GroupSchedule> = (0..12)
        .map(|s| GroupSchedule::from_seed(s).bypassing_the_fence())
        .collect();
    let results = run_all(&schedules);
    let caught: Vec<String> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err().map(ToString::to_string))
        .collect();
    eprintln!(
        "negative control: {} of {} schedules caught; first: {:?}",
        caught.len(),
        results.len(),
        caught.first()
    );
    assert!(
        caught
            .iter()
            .any(|c| c.contains("times") || c.contains("offsets")),
        "with the fence bypassed no schedule broke exactly-once: {caught:?}"
    );
}

/// Schedules where a healthy member's connections reset past the session
/// timeout in the middle of a transaction, while the application takes
/// longer than that to get to its offsets: the member self-fences (Lost),
/// is expelled, its partitions go to the other instance, and it rejoins
/// under a new member id and generation before the application commits.
fn flap_schedules(trust_commit_time_metadata: bool) -> Vec<GroupSchedule> {
    let mut schedules = Vec::new();
    for (i, (cut_ms, slow_ms)) in [(7000, 9000), (7500, 10_000), (8000, 12_000)]
        .into_iter()
        .enumerate()
    {
        for txn in 1..=3 {
            schedules.push(GroupSchedule {
                seed: 10_000 + (i * 10 + txn) as u64,
                inputs: 24,
                per_txn: 3,
                faults: vec![GroupFault::Flap {
                    txn,
                    cut_ms,
                    reset: true,
                    slow_ms,
                }],
                bypass_fence: false,
                trust_commit_time_metadata,
            });
        }
    }
    schedules
}

fn failures_of(schedules: &[GroupSchedule]) -> Vec<String> {
    run_all(schedules)
        .into_iter()
        .filter_map(|(_, r)| r.err().map(|v| v.to_string()))
        .collect()
}

/// An application that checks, before its offsets, that the lease its
/// transaction began under still holds keeps exactly-once through the flap.
#[test]
fn a_membership_that_flaps_inside_a_transaction_is_survived_by_checking_the_lease() {
    let failures = failures_of(&flap_schedules(false));
    assert!(failures.is_empty(), "{failures:#?}");
}

/// BUG (found by this checker): an application that relies on
/// `GroupMember::send_offsets_to_transaction` alone (its documented use)
/// duplicates output after the flap. The member's metadata read at commit
/// time is the new generation's, which the coordinator accepts, although
/// the transaction's input was read, and its records written, under the
/// old lease, and the partitions were processed by the other instance in
/// between. Seen: "input 2 is in the committed output 2 times" (schedules
/// 10001, 10002, 10011, ...), and for txn 3 the stale offsets overwrite the
/// new owner's, so the run never finishes.
#[test]
#[ignore = "bug: GroupMember::send_offsets_to_transaction reads metadata of a later generation"]
fn a_membership_that_flaps_inside_a_transaction_does_not_break_exactly_once() {
    let failures = failures_of(&flap_schedules(true));
    assert!(failures.is_empty(), "{failures:#?}");
}
