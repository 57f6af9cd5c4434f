//! The exactly-once checker over seeded fault schedules: 300 in the normal
//! suite; `WEIR_EOS_SCHEDULES=N` runs N (and `WEIR_EOS_SEED=S` replays one).
//!
//! Each schedule runs on its own current-thread runtime with tokio's clock
//! paused, against its own in-memory cluster, so a seed replays exactly;
//! two OS threads share the schedules.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use weir_integration::eos::{Observed, Schedule, Violation, run_schedule};

const DEFAULT_SCHEDULES: u64 = 300;
const THREADS: usize = 2;

fn run_on_paused_clock(seed: u64) -> Result<Observed, Violation> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(run_schedule(&Schedule::from_seed(seed)))
}

#[test]
fn exactly_once_holds_under_seeded_fault_schedules() {
    let seeds: Vec<u64> = match std::env::var("WEIR_EOS_SEED") {
        Ok(s) => vec![s.parse().expect("WEIR_EOS_SEED is a number")],
        Err(_) => {
            let n = std::env::var("WEIR_EOS_SCHEDULES")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(DEFAULT_SCHEDULES);
            (0..n).collect()
        }
    };
    let started = std::time::Instant::now();
    let results: Mutex<Vec<(u64, Result<Observed, Violation>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (seeds, results) = (&seeds, &results);
            scope.spawn(move || {
                for &seed in seeds.iter().skip(thread).step_by(THREADS) {
                    let result = run_on_paused_clock(seed);
                    results.lock().unwrap().push((seed, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(seed, _)| *seed);
    let mut failures = Vec::new();
    let (mut transactions, mut instances, mut aborted, mut recovered) = (0, 0, 0, 0);
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for (seed, result) in results {
        for fault in Schedule::from_seed(seed).faults {
            let kind = format!("{fault:?}");
            let name = kind.split([' ', '{']).next().unwrap_or("?").to_owned();
            *kinds.entry(name).or_default() += 1;
        }
        match result {
            Ok(observed) => {
                transactions += observed.transactions;
                instances += observed.instances;
                aborted += observed.aborted.len();
                recovered += observed.recovered;
            }
            Err(violation) => {
                eprintln!("{violation}");
                failures.push(violation);
            }
        }
    }
    eprintln!(
        "eos checker: {} schedules, {} failed, {transactions} transactions, {instances} instances, {aborted} aborted ({recovered} of them after an error), faults {kinds:?}, {:?} real time",
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
}
