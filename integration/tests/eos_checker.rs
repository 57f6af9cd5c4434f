//! The exactly-once checker over seeded fault schedules: 100 in the normal
//! suite; `WEIR_EOS_SCHEDULES=N` runs N (and `WEIR_EOS_SEED=S` replays one).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use weir_integration::eos::{Schedule, run_schedule};

const DEFAULT_SCHEDULES: u64 = 100;
/// Schedules run at once: each has its own in-process cluster.
const PARALLEL: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_holds_under_seeded_fault_schedules() {
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
    let mut failures = Vec::new();
    let (mut transactions, mut instances, mut aborted) = (0, 0, 0);
    for chunk in seeds.chunks(PARALLEL) {
        let mut tasks = Vec::new();
        for &seed in chunk {
            tasks.push(tokio::spawn(async move {
                run_schedule(&Schedule::from_seed(seed)).await
            }));
        }
        for task in tasks {
            match task.await.unwrap() {
                Ok(observed) => {
                    transactions += observed.transactions;
                    instances += observed.instances;
                    aborted += observed.aborted.len();
                }
                Err(violation) => {
                    eprintln!("{violation}");
                    failures.push(violation);
                }
            }
        }
    }
    eprintln!(
        "eos checker: {} schedules, {} failed, {transactions} transactions, {instances} instances, {aborted} aborted by the app, {:?}",
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
