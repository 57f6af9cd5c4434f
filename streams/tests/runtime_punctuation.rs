//! Wall-clock punctuation on a broker: what a punctuator forwards or writes
//! while the input is idle is committed within about one commit interval,
//! under both guarantees (Kafka Streams' `commitNeeded` after a punctuation).
//! Without that, exactly-once kept the ticks in an open transaction until
//! the coordinator aborted it at `transaction.timeout.ms`, and they were
//! lost; at-least-once dropped a punctuator's staged store writes on close.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::*;
use weir_streams::processor::{
    InitContext, Processor, ProcessorContext, PunctuationType, ScheduleId,
};
use weir_streams::state::KvStoreRef;
use weir_streams::{ProcessError, Record, Topology, TopologyBuilder};

/// Forwards `tick-N` every wall-clock second (and writes N to its store, if
/// it has one); input records only start the task.
struct Ticker {
    ticks: Arc<AtomicU64>,
    store: Option<KvStoreRef<String, u64>>,
}

impl Processor<String, ()> for Ticker {
    type KOut = String;
    type VOut = String;
    fn init(&mut self, ctx: &mut InitContext<'_>) -> Result<(), ProcessError> {
        ctx.schedule(Duration::from_secs(1), PunctuationType::WallClockTime)?;
        Ok(())
    }
    fn process(
        &mut self,
        _ctx: &mut ProcessorContext<'_, String, String>,
        _r: Record<String, ()>,
    ) -> Result<(), ProcessError> {
        Ok(())
    }
    fn punctuate(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        _id: ScheduleId,
        ts: i64,
    ) -> Result<(), ProcessError> {
        let n = self.ticks.fetch_add(1, Ordering::SeqCst) + 1;
        let tick = format!("tick-{n}");
        if let Some(store) = &self.store {
            ctx.kv_store(store)?.put(&tick, &n, ts)?;
        }
        ctx.forward(Record::new(tick.clone(), tick, ts));
        Ok(())
    }
}

/// input → ticker (store `ticks`, unlogged, if `store`) → output.
fn ticker(ticks: Arc<AtomicU64>, store: bool) -> Topology {
    let mut b = TopologyBuilder::new();
    let kv = store.then(|| b.kv_store::<String, u64>("ticks"));
    if store {
        b.disable_logging("ticks");
    }
    let input = b.source::<String, ()>("in", &[INPUT]);
    let names = kv.clone();
    let refs: Vec<&dyn weir_streams::state::StoreName> = names
        .iter()
        .map(|s| s as &dyn weir_streams::state::StoreName)
        .collect();
    let node = b.processor(
        "ticker",
        &[&input],
        move || Ticker {
            ticks: Arc::clone(&ticks),
            store: kv.clone(),
        },
        &refs,
    );
    b.sink("out", &[&node], OUTPUT);
    b.build().unwrap()
}

fn tick_count(records: &[(i32, String, String)]) -> usize {
    records
        .iter()
        .filter(|(_, _, v)| v.starts_with("tick-"))
        .count()
}

#[tokio::test(start_paused = true)]
async fn wall_clock_ticks_of_an_idle_task_commit_under_exactly_once() {
    let kit = testkit(1, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let ticks = Arc::new(AtomicU64::new(0));
    let config = streams_config(
        &kit,
        "tick",
        "a",
        dir.path(),
        &[("processing.guarantee", "exactly_once_v2")],
    );
    let streams = start(ticker(Arc::clone(&ticks), false), config).await;
    produce_words(&kit, &["start".to_owned()]).await;
    eventually(
        "the task processed its input",
        Duration::from_secs(30),
        || async { streams.metrics().processed >= 1 },
    )
    .await;

    // 30 s without input. Every 5 s: what was emitted by then must be
    // visible to a read_committed reader one commit interval (100 ms, plus
    // the send) later.
    let mut lags = Vec::new();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let emitted = ticks.load(Ordering::SeqCst) as usize;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let visible = tick_count(&read_committed(&kit, OUTPUT).await);
        lags.push((emitted, visible));
    }
    streams.close(Duration::from_secs(10)).await.unwrap();
    let visible = tick_count(&read_committed(&kit, OUTPUT).await);
    eprintln!("emitted/visible every 5 s: {lags:?}; at the end {visible}");
    assert!(
        visible >= 25,
        "only {visible} ticks visible after 30 s idle"
    );
    for (emitted, seen) in lags {
        assert!(
            seen >= emitted,
            "{emitted} ticks emitted, only {seen} visible one commit interval later"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_punctuators_unlogged_store_writes_commit_under_at_least_once() {
    let kit = testkit(1, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let ticks = Arc::new(AtomicU64::new(0));
    let config = streams_config(
        &kit,
        "tick",
        "a",
        dir.path(),
        &[("commit.interval.ms", "1000")],
    );
    let streams = start(ticker(Arc::clone(&ticks), true), config).await;
    produce_words(&kit, &["start".to_owned()]).await;
    eventually(
        "the task processed its input",
        Duration::from_secs(30),
        || async { streams.metrics().processed >= 1 },
    )
    .await;
    // Let the input's own commit pass, then idle: only ticks from here.
    tokio::time::sleep(Duration::from_secs(10)).await;
    streams.close(Duration::from_secs(10)).await.unwrap();
    let emitted = ticks.load(Ordering::SeqCst);
    assert!(emitted >= 9, "{emitted} ticks");
    let store = weir_store::TaskStore::open(
        dir.path().join("tick").join("0_0"),
        weir_store::StoreOptions::default(),
    )
    .unwrap();
    let kv = store.key_value_store("ticks").unwrap();
    let last = format!("tick-{emitted}");
    assert!(
        kv.get(last.as_bytes()).unwrap().is_some(),
        "the last tick's store write ({last}) was dropped on close"
    );
}
