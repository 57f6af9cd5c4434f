//! The differential fidelity suite: every scenario of
//! `weir_integration::fidelity` runs against weir-testkit (3 brokers, in
//! process, over TCP, built with its defaults) and against the Apache
//! Kafka at `$KAFKA_BOOTSTRAP`, concurrently, and their observations are
//! compared. Requests go at the lower of the two sides' negotiated
//! versions, so both brokers answer the same request; the `versions`
//! scenario compares what Weir would negotiate with each.
//!
//! Every difference is printed with both answers. A difference in
//! [`DELIBERATE`] is allowed (and listed in `testkit/README.md` under
//! "Known differences from Kafka 4.4"); one in [`FAILING_FOR_NOW`] is a
//! testkit gap to be fixed, allowed unless
//! `WEIR_FIDELITY_STRICT=1`; any other difference fails the test.
//!
//! `WEIR_FIDELITY_VERSIONS=weir` sends each side the versions Weir's client
//! negotiates with it instead of the common ones, so version-dependent
//! behaviour (transaction version 2 on Kafka 4.4) shows in every scenario;
//! the differences only that shows are in
//! [`FAILING_FOR_NOW_AT_WEIR_VERSIONS`].
//!
//! Without `KAFKA_BOOTSTRAP` the test skips, saying so (it fails instead
//! under `WEIR_EXPECT_BROKER=1`).
//!
//! ```sh
//! eval "$(WEIR_KAFKA_RUN_DIR=/tmp/kafka-fid scripts/kafka.sh start --nodes 1)"
//! KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP cargo test -p weir-integration --test fidelity -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use weir_integration::fidelity::wire::negotiated_versions;
use weir_integration::fidelity::{
    Allowance, Difference, Known, Recorder, Scenario, Side, Wire, common_versions, compare,
};
use weir_integration::real_broker::{bootstrap_or_skip, unique};

use Allowance::{Deliberate, FailingForNow};

/// Differences the testkit has on purpose. Each is also listed in
/// `testkit/README.md` under "Known differences from Kafka 4.4".
const DELIBERATE: &[Known] = &[Known {
    scenario: "compacted_changelog",
    key: "records left after compaction",
    allowance: Deliberate,
    reason: "the testkit compacts when a test calls `cluster.compact(topic, ..)`, so a test can \
                 check exactly what compaction leaves; Kafka's cleaner runs on its own schedule \
                 (log.cleaner.backoff.ms) and never on the active segment, so right after the \
                 writes it has removed nothing. What both guarantee (each key's last record \
                 survives at its offset, offsets increase, the high watermark stays) is compared \
                 as equal",
}];

/// Testkit gaps found by this suite, still to be fixed in the testkit.
/// Allowed for now; `WEIR_FIDELITY_STRICT=1` fails on them.
const FAILING_FOR_NOW: &[Known] = &[];

/// Gaps that show only at the common versions. None left.
const FAILING_FOR_NOW_AT_COMMON_VERSIONS: &[Known] = &[];

/// Gaps that show only under `WEIR_FIDELITY_VERSIONS=weir`, where Kafka
/// gets transaction version 2's requests (EndTxn v5, Produce v12,
/// TxnOffsetCommit v6) and the testkit its older ones. Failing for now,
/// like [`FAILING_FOR_NOW`].
const FAILING_FOR_NOW_AT_WEIR_VERSIONS: &[Known] = &[];

/// How long the whole comparison may take.
const BUDGET: Duration = Duration::from_secs(110);

fn weir_versions() -> bool {
    std::env::var("WEIR_FIDELITY_VERSIONS").as_deref() == Ok("weir")
}

fn strict() -> bool {
    std::env::var("WEIR_FIDELITY_STRICT").as_deref() == Ok("1")
}

fn print_recording(scenario: Scenario, side: Side, r: &Recorder, took: Duration) {
    println!("--- {} on {side} ({took:.1?})", scenario.name());
    for o in &r.observations {
        println!("    {}: {}", o.key, o.value);
    }
    for n in &r.notes {
        println!("    (note) {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn testkit_answers_as_kafka_4_4_does() {
    if std::env::var("WEIR_BROKER_KIND").as_deref() == Ok("tansu") {
        println!(
            "skipped: fidelity: the testkit is compared with Apache Kafka 4.4, and the broker \
             at KAFKA_BOOTSTRAP is tansu (WEIR_BROKER_KIND=tansu)"
        );
        return;
    }
    let Some(bootstrap) = bootstrap_or_skip("fidelity: the differential suite needs Kafka 4.4")
    else {
        return;
    };
    let started = Instant::now();
    let kit = Arc::new(
        weir_testkit::Cluster::builder()
            .brokers(3)
            .build()
            .await
            .unwrap(),
    );
    let (kit_versions, _) = negotiated_versions(&kit.bootstrap()).await.unwrap();
    let (kafka_versions, _) = negotiated_versions(&bootstrap).await.unwrap();
    // By default both sides get the same request (the lower version);
    // WEIR_FIDELITY_VERSIONS=weir sends each side what Weir's client
    // negotiates with it, so version-dependent behaviour shows in every
    // scenario.
    let (kit_at, kafka_at) = if weir_versions() {
        println!("WEIR_FIDELITY_VERSIONS=weir: each side at the versions Weir negotiates with it");
        (kit_versions, kafka_versions)
    } else {
        let common = common_versions(&kit_versions, &kafka_versions);
        (common.clone(), common)
    };
    let names = |m: &std::collections::BTreeMap<i16, i16>| {
        m.iter()
            .map(|(k, v)| {
                let api = weir_protocol::ApiKey::try_from(*k)
                    .map_or_else(|()| k.to_string(), |a| format!("{a:?}"));
                format!("{api} v{v}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("testkit requests at: {}", names(&kit_at));
    println!("kafka requests at:   {}", names(&kafka_at));
    let sides = [
        Wire::connect(
            Side::Testkit,
            &kit.bootstrap(),
            kit_at,
            Some(Arc::clone(&kit)),
        )
        .await
        .unwrap(),
        Wire::connect(Side::Kafka, &bootstrap, kafka_at, None)
            .await
            .unwrap(),
    ];

    // Every scenario on both sides at once.
    let run = unique("fid");
    let mut tasks = Vec::new();
    for scenario in Scenario::ALL {
        for w in &sides {
            let w = w.clone();
            let ns = format!("{run}-{}", scenario.name().replace('_', "-"));
            tasks.push(tokio::spawn(async move {
                let t = Instant::now();
                let mut r = Recorder::default();
                scenario.run(&w, &ns, &mut r).await;
                (scenario, w.side(), r, t.elapsed())
            }));
        }
    }
    let mut results = Vec::new();
    for t in tasks {
        let left = BUDGET.saturating_sub(started.elapsed());
        let done = tokio::time::timeout(left, t)
            .await
            .unwrap_or_else(|_| panic!("the suite ran past its budget of {BUDGET:?}"))
            .unwrap();
        results.push(done);
    }

    let mut differences: Vec<Difference> = Vec::new();
    for scenario in Scenario::ALL {
        let find = |side: Side| {
            results
                .iter()
                .find(|(s, sd, ..)| *s == scenario && *sd == side)
                .unwrap()
        };
        let (_, _, kit_rec, kit_took) = find(Side::Testkit);
        let (_, _, kafka_rec, kafka_took) = find(Side::Kafka);
        print_recording(scenario, Side::Testkit, kit_rec, *kit_took);
        print_recording(scenario, Side::Kafka, kafka_rec, *kafka_took);
        assert!(
            !kafka_rec.observations.is_empty(),
            "{}: nothing observed on Kafka",
            scenario.name()
        );
        differences.extend(compare(scenario.name(), kit_rec, kafka_rec));
    }

    let lists: Vec<&Known> = DELIBERATE
        .iter()
        .chain(FAILING_FOR_NOW)
        .chain(if weir_versions() {
            FAILING_FOR_NOW_AT_WEIR_VERSIONS
        } else {
            FAILING_FOR_NOW_AT_COMMON_VERSIONS
        })
        .collect();
    let classify = |d: &Difference| lists.iter().find(|k| k.covers(d)).copied().copied();
    let mut failing = Vec::new();
    println!("\n===== {} differences =====", differences.len());
    for d in &differences {
        match classify(d) {
            Some(k) if k.allowance == Deliberate => {
                println!("DELIBERATE {d}\n    why: {}", k.reason)
            }
            Some(k) => {
                println!("FAILING FOR NOW {d}\n    gap: {}", k.reason);
                if strict() {
                    failing.push(d.clone());
                }
            }
            None => {
                println!("UNEXPECTED {d}");
                failing.push(d.clone());
            }
        }
    }
    for k in &lists {
        if !differences.iter().any(|d| k.covers(d)) {
            println!(
                "no longer differs (remove it from the list): [{}] {}",
                k.scenario, k.key
            );
        }
    }
    println!("the suite took {:.1?}", started.elapsed());
    assert!(
        failing.is_empty(),
        "{} difference(s) between the testkit and Kafka 4.4 {}:\n{}",
        failing.len(),
        if strict() {
            "are not deliberate (WEIR_FIDELITY_STRICT=1: the failing-for-now ones fail too)"
        } else {
            "are neither deliberate nor listed as failing for now"
        },
        failing
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---- the suite's own machinery, without a broker ----

/// Every scenario runs to its end on the testkit alone (no Kafka needed),
/// so a scenario broken by a change shows in any `cargo test`, not only
/// where Kafka runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenario_runs_to_its_end_on_the_testkit() {
    let kit = Arc::new(
        weir_testkit::Cluster::builder()
            .brokers(3)
            .build()
            .await
            .unwrap(),
    );
    let (versions, _) = negotiated_versions(&kit.bootstrap()).await.unwrap();
    let w = Wire::connect(
        Side::Testkit,
        &kit.bootstrap(),
        versions,
        Some(Arc::clone(&kit)),
    )
    .await
    .unwrap();
    let tasks: Vec<_> = Scenario::ALL
        .into_iter()
        .map(|scenario| {
            let w = w.clone();
            tokio::spawn(async move {
                let mut r = Recorder::default();
                scenario.run(&w, scenario.name(), &mut r).await;
                (scenario, r)
            })
        })
        .collect();
    for t in tasks {
        let (scenario, r) = tokio::time::timeout(BUDGET, t).await.unwrap().unwrap();
        let failed: Vec<_> = r
            .observations
            .iter()
            .filter(|o| o.key == "scenario failed")
            .collect();
        assert!(failed.is_empty(), "{}: {failed:?}", scenario.name());
        assert!(
            r.observations.len() >= 3,
            "{}: only {:?}",
            scenario.name(),
            r.observations
        );
    }
}

#[test]
fn every_listed_difference_names_a_scenario() {
    let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
    for k in DELIBERATE
        .iter()
        .chain(FAILING_FOR_NOW)
        .chain(FAILING_FOR_NOW_AT_COMMON_VERSIONS)
        .chain(FAILING_FOR_NOW_AT_WEIR_VERSIONS)
    {
        assert!(
            names.contains(&k.scenario),
            "[{}] {}: no such scenario",
            k.scenario,
            k.key
        );
        assert!(
            !k.reason.is_empty(),
            "[{}] {}: no reason",
            k.scenario,
            k.key
        );
    }
    assert!(DELIBERATE.iter().all(|k| k.allowance == Deliberate));
    assert!(
        FAILING_FOR_NOW
            .iter()
            .chain(FAILING_FOR_NOW_AT_COMMON_VERSIONS)
            .chain(FAILING_FOR_NOW_AT_WEIR_VERSIONS)
            .all(|k| k.allowance == FailingForNow)
    );
}

#[test]
fn compare_reports_changed_missing_and_misaligned_observations() {
    let mut kit = Recorder::default();
    let mut kafka = Recorder::default();
    for r in [&mut kit, &mut kafka] {
        r.code("same", 0);
    }
    kit.code("EndTxn", 0);
    kafka.code("EndTxn", 90);
    kit.put("only on the testkit", 1);
    kit.note("notes are never compared");
    let d = compare("s", &kit, &kafka);
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(
        (
            d[0].key.as_str(),
            d[0].testkit.as_str(),
            d[0].kafka.as_str()
        ),
        ("EndTxn", "NONE", "PRODUCER_FENCED")
    );
    assert_eq!(d[1].kafka, "<absent>");

    let mut other = Recorder::default();
    other.code("same", 0);
    other.code("AddOffsetsToTxn", 0);
    let d = compare("s", &other, &kafka);
    assert_eq!(d.len(), 1);
    assert!(
        d[0].testkit.contains("AddOffsetsToTxn") && d[0].kafka.contains("EndTxn"),
        "{d:?}"
    );
}

#[test]
fn symbolic_names_follow_first_appearance() {
    let mut a = Recorder::default();
    assert_eq!(a.name("member", "x-123"), "member#1");
    assert_eq!(a.name("producer", "4000"), "producer#1");
    assert_eq!(a.name("member", "y-456"), "member#2");
    assert_eq!(a.name("member", "x-123"), "member#1");
    assert_eq!(a.name("member", ""), "\"\"");
}

#[test]
fn read_committed_view_skips_aborted_batches_until_their_marker() {
    use bytes::Bytes;
    use weir_integration::fidelity::read_committed_view;
    use weir_protocol::records::{
        BatchBuilder, BatchOptions, ControlKind, DecodeOptions, RecordInput, decode_batches,
        encode_control_batch,
    };
    let batch = |pid: i64, base: i64, transactional: bool, values: &[&str]| {
        let mut b = BatchBuilder::new(BatchOptions {
            producer_id: pid,
            producer_epoch: if pid < 0 { -1 } else { 0 },
            base_sequence: if pid < 0 { -1 } else { 0 },
            transactional,
            base_offset: base,
            ..Default::default()
        });
        for v in values {
            b.push(RecordInput {
                timestamp: 1,
                value: Some(Bytes::from(v.to_string())),
                ..Default::default()
            });
        }
        b.build().unwrap()
    };
    let mut log = Vec::new();
    log.extend_from_slice(&batch(-1, 0, false, &["a"]));
    log.extend_from_slice(&batch(7, 1, true, &["x1", "x2"]));
    log.extend_from_slice(&batch(8, 3, true, &["y"]));
    log.extend_from_slice(&encode_control_batch(7, 0, 4, 1, ControlKind::Abort, 0));
    log.extend_from_slice(&batch(7, 5, true, &["x3"]));
    log.extend_from_slice(&encode_control_batch(8, 0, 6, 1, ControlKind::Commit, 0));
    log.extend_from_slice(&encode_control_batch(7, 0, 7, 1, ControlKind::Commit, 0));
    let batches = decode_batches(&Bytes::from(log), &DecodeOptions::default())
        .unwrap()
        .batches;
    let seen: Vec<(i64, String)> = read_committed_view(&batches, &[(7, 1)]);
    let want: Vec<(i64, String)> = vec![(0, "a".into()), (3, "y".into()), (5, "x3".into())];
    assert_eq!(seen, want);
    // Without the aborted list a reader would deliver the aborted records.
    assert_eq!(read_committed_view(&batches, &[]).len(), 5);
}
