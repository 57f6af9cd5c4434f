//! The first user report, made impossible: under at-least-once, a member cut
//! off from its group coordinator goes on fetching and producing, and its
//! in-flight writes land late, after its tasks moved. Its changelog writes
//! are fenced at the broker by the new owner's takeover of each task's
//! transactional id, so state stays exact: every store and every changelog
//! equals a recount of the input, and outputs, which may repeat, never show a
//! count above the true one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::*;
use weir_protocol::ApiKey;
use weir_testkit::{ClientSelector, Intercept, InterceptAction, PartitionTarget, RequestMatcher};

fn recount(lines: &[String]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for l in lines {
        for w in l.split_whitespace() {
            *counts.entry(w.to_owned()).or_insert(0u64) += 1;
        }
    }
    counts
}

/// Last committed value per key of the counts changelog: what any restore
/// would rebuild.
async fn changelog_state(kit: &std::sync::Arc<weir_testkit::Cluster>) -> BTreeMap<String, u64> {
    let mut state = BTreeMap::new();
    let client = client(kit, "changelog-reader").await;
    drop(client);
    for (_, k, v) in read_committed_raw(kit, "wc-counts-changelog").await {
        state.insert(k, u64::from_be_bytes(v.as_slice().try_into().unwrap()));
    }
    state
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_member_with_late_writes_never_corrupts_state_under_at_least_once() {
    let outcome = zombie_run(&[("commit.interval.ms", "1000")]).await;
    assert_eq!(
        outcome.changelog, outcome.expected,
        "no late write changed the changelog"
    );
    assert_eq!(
        outcome.stores, outcome.expected,
        "every store equals the recount"
    );
    // Outputs may repeat (at-least-once), but none comes from stale state:
    // no count above the true one, and every word reaches its count.
    for (w, v) in &outcome.outputs {
        assert!(
            *v <= outcome.expected[w],
            "{w}: output {v} above the true count {}",
            outcome.expected[w]
        );
    }
    let mut max: BTreeMap<String, u64> = BTreeMap::new();
    for (w, v) in &outcome.outputs {
        let m = max.entry(w.clone()).or_default();
        *m = (*m).max(*v);
    }
    assert_eq!(max, outcome.expected);
}

/// The control: the same outage with the changelog unfenced (Kafka Streams'
/// at-least-once) lets the zombie's late writes into the changelog, so the
/// test above does see what the fence prevents.
#[tokio::test(start_paused = true)]
async fn without_the_fence_the_same_outage_corrupts_the_changelog() {
    let outcome = zombie_run(&[
        ("commit.interval.ms", "1000"),
        ("weir.internal.unfenced.changelog", "true"),
    ])
    .await;
    assert_ne!(
        outcome.changelog, outcome.expected,
        "the zombie's late changelog writes must show without the fence"
    );
}

struct Outcome {
    expected: BTreeMap<String, u64>,
    changelog: BTreeMap<String, u64>,
    stores: BTreeMap<String, u64>,
    outputs: Vec<(String, u64)>,
}

async fn zombie_run(props: &[(&str, &str)]) -> Outcome {
    let kit = testkit(3, 4).await;
    let (first, _) = lines(100, 21);
    let (second, _) = lines(100, 23);
    let (third, _) = lines(100, 29);
    let all: Vec<String> = first.iter().chain(&second).chain(&third).cloned().collect();
    let expected = recount(&all);
    produce_words(&kit, &first).await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let (a, b) = start_both(&kit, &dirs, props, |_| {}).await;

    // The outage: a's group traffic is lost, and its produce requests arrive
    // 60 s late: after b took its tasks over and counted more input, so a's
    // late values are stale ones.
    let cut = cut_from_coordinator(&kit, "a").await;
    let late = kit
        .intercept(Intercept::new(
            RequestMatcher::api(ApiKey::Produce).client("a"),
            InterceptAction::Delay(Duration::from_secs(60)),
        ))
        .await
        .unwrap();
    produce_words(&kit, &second).await;
    let cut_at = tokio::time::Instant::now();
    eventually("b owns every task", Duration::from_secs(40), || async {
        b.metrics().tasks.len() == 4
    })
    .await;
    let b_processed = b.metrics().processed;
    produce_words(&kit, &third).await;
    let words = third
        .iter()
        .map(|l| l.split_whitespace().count() as u64)
        .sum::<u64>();
    eventually(
        "b counts the third batch",
        Duration::from_secs(20),
        || async { b.metrics().processed >= b_processed + words },
    )
    .await;
    eventually(
        "b's counts committed to the changelog",
        Duration::from_secs(10),
        || async { changelog_state(&kit).await == expected },
    )
    .await;
    eprintln!("b took over and counted after {:?}", cut_at.elapsed());
    tokio::time::sleep(Duration::from_secs(65).saturating_sub(cut_at.elapsed())).await;
    kit.remove_fault(cut).await.unwrap();
    kit.remove_fault(late).await.unwrap();

    // Until the changelog settles: unchanged over 10 s.
    let mut last = changelog_state(&kit).await;
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let now = changelog_state(&kit).await;
        if now == last
            && a.state() == weir_streams::State::Running
            && b.state() == weir_streams::State::Running
        {
            break;
        }
        last = now;
    }
    let changelog = changelog_state(&kit).await;
    let outputs = read_committed(&kit, OUTPUT)
        .await
        .into_iter()
        .map(|(_, w, v)| (w, v.parse().unwrap()))
        .collect();
    let (a_tasks, b_tasks) = (a.metrics().tasks, b.metrics().tasks);
    // a's membership may still be waiting out a request lost in the outage.
    a.close(Duration::from_secs(120)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
    let mut stores = BTreeMap::new();
    for (tasks, dir) in [(&a_tasks, &dirs[0]), (&b_tasks, &dirs[1])] {
        for t in tasks.keys() {
            stores.extend(store_counts(dir.path(), "wc", &t.to_string()));
        }
    }
    Outcome {
        expected,
        changelog,
        stores,
        outputs,
    }
}

/// The same report with a process paused at the worst moment: instance a's
/// worker is descheduled for 30 s (three session timeouts) right after it
/// passed its lease check, with records processed and about to be written,
/// while its member has lost the coordinator. The member fences itself, b
/// takes every task over and counts on; then a's worker wakes up and goes
/// on writing and committing what it processed. Under at-least-once the
/// changelog and the outputs never show a stale count; under exactly-once
/// every word is counted once.
#[tokio::test(start_paused = true)]
async fn a_worker_paused_after_its_lease_check_never_writes_stale_state_under_at_least_once() {
    let run = paused_run(&[("commit.interval.ms", "1000")]).await;
    assert_eq!(
        run.changelog, run.expected,
        "no late write changed the changelog"
    );
    for (w, v) in &run.outputs {
        assert!(
            *v <= run.expected[w],
            "{w}: output {v} above the true count"
        );
    }
    assert_eq!(last_counts_of(&run.outputs), run.expected);
}

#[tokio::test(start_paused = true)]
async fn a_worker_paused_after_its_lease_check_never_commits_under_exactly_once() {
    let run = paused_run(&[("processing.guarantee", "exactly_once_v2")]).await;
    let total: u64 = run.expected.values().sum();
    assert_eq!(
        run.outputs.len() as u64,
        total,
        "every word counted exactly once"
    );
    assert_eq!(last_counts_of(&run.outputs), run.expected);
    assert_eq!(run.changelog, run.expected);
}

fn last_counts_of(outputs: &[(String, u64)]) -> BTreeMap<String, u64> {
    outputs.iter().cloned().collect()
}

async fn paused_run(props: &[(&str, &str)]) -> Outcome {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    let kit = testkit(3, 4).await;
    let (first, _) = lines(60, 41);
    let (second, _) = lines(60, 43);
    let (third, _) = lines(60, 47);
    let all: Vec<String> = first.iter().chain(&second).chain(&third).cloned().collect();
    let expected = recount(&all);
    produce_words(&kit, &first).await;
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let armed = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicU32::new(0));
    let (arm, count) = (Arc::clone(&armed), Arc::clone(&paused));
    let (a, b) = start_both(&kit, &dirs, props, move |config_a| {
        config_a.pause_before_write = weir_streams::config::PauseHook(Some(Arc::new(move || {
            arm.swap(false, Ordering::SeqCst).then(|| {
                count.fetch_add(1, Ordering::SeqCst);
                Duration::from_secs(30)
            })
        })));
    })
    .await;

    // a's member loses the coordinator; a's worker pauses at its next write.
    let cut = cut_from_coordinator(&kit, "a").await;
    armed.store(true, Ordering::SeqCst);
    produce_words(&kit, &second).await;
    eventually("a's worker paused", Duration::from_secs(20), || async {
        paused.load(Ordering::SeqCst) == 1
    })
    .await;
    let paused_at = tokio::time::Instant::now();
    eventually("b owns every task", Duration::from_secs(25), || async {
        b.metrics().tasks.len() == 4
    })
    .await;
    produce_words(&kit, &third).await;
    let words: u64 = expected.values().sum();
    eventually("b counted everything", Duration::from_secs(25), || async {
        changelog_state(&kit).await == expected
            && read_committed(&kit, OUTPUT).await.len() as u64 >= words
    })
    .await;
    assert!(
        paused_at.elapsed() < Duration::from_secs(30),
        "b took over and counted while a's worker was still paused"
    );
    // a's worker wakes up and writes what it processed before its pause.
    tokio::time::sleep(Duration::from_secs(35).saturating_sub(paused_at.elapsed())).await;
    kit.remove_fault(cut).await.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let changelog = changelog_state(&kit).await;
    let outputs = read_committed(&kit, OUTPUT)
        .await
        .into_iter()
        .map(|(_, w, v)| (w, v.parse().unwrap()))
        .collect();
    a.close(Duration::from_secs(120)).await.unwrap();
    b.close(Duration::from_secs(30)).await.unwrap();
    Outcome {
        expected,
        changelog,
        stores: BTreeMap::new(),
        outputs,
    }
}

/// Instances a (its config adjusted by `adjust_a`) and b of `wc`, once both
/// process and a has committed.
async fn start_both(
    kit: &std::sync::Arc<weir_testkit::Cluster>,
    dirs: &[tempfile::TempDir],
    props: &[(&str, &str)],
    adjust_a: impl FnOnce(&mut weir_streams::StreamsConfig),
) -> (weir_streams::KafkaStreams, weir_streams::KafkaStreams) {
    let mut config_a = streams_config(kit, "wc", "a", dirs[0].path(), props);
    adjust_a(&mut config_a);
    let a = start(count_keys(), config_a).await;
    let b = start(
        count_keys(),
        streams_config(kit, "wc", "b", dirs[1].path(), props),
    )
    .await;
    eventually("both process", Duration::from_secs(120), || async {
        !a.metrics().tasks.is_empty() && !b.metrics().tasks.is_empty() && a.metrics().commits > 0
    })
    .await;
    (a, b)
}

/// Cuts client `id` off from the group coordinator of `wc`.
async fn cut_from_coordinator(
    kit: &std::sync::Arc<weir_testkit::Cluster>,
    id: &str,
) -> weir_testkit::FaultId {
    kit.partition_client(
        ClientSelector::ClientId(id.into()),
        PartitionTarget::GroupCoordinator("wc".into()),
    )
    .await
    .unwrap()
}
