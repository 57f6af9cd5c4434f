//! The topology test driver over real stores: counts, an aborted write that
//! must never stay in a store, and punctuators.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use weir_streams::processor::{
    InitContext, Processor, ProcessorContext, PunctuationType, ScheduleId,
};
use weir_streams::state::{KvStoreRef, WindowStoreRef};
use weir_streams::testing::TopologyTestDriver;
use weir_streams::{ProcessError, Record, StreamsError, TopologyBuilder};

struct Split;

impl Processor<(), String> for Split {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<(), String>,
    ) -> Result<(), ProcessError> {
        for w in r.value.split_whitespace() {
            let w = w.to_lowercase();
            ctx.forward(Record::new(w.clone(), w, r.timestamp));
        }
        Ok(())
    }
}

struct Count(KvStoreRef<String, u64>);

impl Processor<String, String> for Count {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        let store = ctx.kv_store(&self.0)?;
        let n = store.get(&r.key)?.unwrap_or(0) + 1;
        store.put(&r.key, &n, r.timestamp)?;
        ctx.forward(Record::new(r.key, n.to_string(), r.timestamp));
        Ok(())
    }
}

fn word_count() -> TopologyTestDriver {
    let mut b = TopologyBuilder::new();
    let counts = b.kv_store::<String, u64>("counts");
    let lines = b.source::<(), String>("lines", &["text"]);
    let words = b.processor("split", &[&lines], || Split, &[]);
    let by_word = b.repartition("by-word", &[&words], None);
    let c = counts.clone();
    let counted = b.processor("count", &[&by_word], move || Count(c.clone()), &[&counts]);
    b.sink("out", &[&counted], "word-counts");
    let topology = b.build().unwrap();
    assert_eq!(topology.subtopology_count(), 2);
    TopologyTestDriver::new(topology, "wc").unwrap()
}

/// The same counts with the store in memory: the driver reads and commits
/// it like a store on disk, and an unknown name is refused at build.
#[test]
fn word_count_with_an_in_memory_store() {
    let mut b = TopologyBuilder::new();
    let counts = b.kv_store::<String, u64>("counts");
    b.in_memory("counts");
    let lines = b.source::<(), String>("lines", &["text"]);
    let words = b.processor("split", &[&lines], || Split, &[]);
    let c = counts.clone();
    let counted = b.processor("count", &[&words], move || Count(c.clone()), &[&counts]);
    b.sink("out", &[&counted], "word-counts");
    let mut d = TopologyTestDriver::new(b.build().unwrap(), "wc").unwrap();
    d.pipe("text", &(), &"rust kafka rust".to_string(), 10)
        .unwrap();
    assert_eq!(
        d.kv_store::<String, u64>("counts").unwrap(),
        vec![("kafka".to_string(), 1), ("rust".to_string(), 2)]
    );
    assert_eq!(d.changelog("counts").len(), 3, "every write logged");

    // With caching on, one changelog record per key written since the last
    // commit (the driver commits after each input record): rust=2 replaced
    // rust=1. Off again with `cache.max.bytes.buffering=0`.
    for (cache, want) in [(1024 * 1024, 2), (0, 3)] {
        let mut b = TopologyBuilder::new();
        let counts = b.kv_store::<String, u64>("counts");
        b.with_caching("counts");
        let lines = b.source::<(), String>("lines", &["text"]);
        let words = b.processor("split", &[&lines], || Split, &[]);
        let c = counts.clone();
        let counted = b.processor("count", &[&words], move || Count(c.clone()), &[&counts]);
        b.sink("out", &[&counted], "word-counts");
        let mut d =
            TopologyTestDriver::with_cache_max_bytes(b.build().unwrap(), "wc", cache).unwrap();
        d.pipe("text", &(), &"rust kafka rust".to_string(), 10)
            .unwrap();
        let changelog = d.changelog("counts");
        assert_eq!(changelog.len(), want, "cache.max.bytes.buffering={cache}");
        if cache > 0 {
            assert_eq!(changelog[0].key.as_deref(), Some(&b"rust"[..]));
            assert_eq!(changelog[0].value.as_deref(), Some(&2u64.to_be_bytes()[..]));
        }
        assert_eq!(
            d.kv_store::<String, u64>("counts").unwrap(),
            vec![("kafka".to_string(), 1), ("rust".to_string(), 2)]
        );
    }

    let mut b = TopologyBuilder::new();
    b.in_memory("nope");
    let _ = b.source::<(), String>("lines", &["text"]);
    assert!(
        matches!(b.build(), Err(StreamsError::InvalidTopology(m)) if m.contains("in_memory: unknown store nope"))
    );
}

#[test]
fn word_count_through_a_repartition_topic() {
    let mut d = word_count();
    d.pipe("text", &(), &"Kafka streams in Rust".to_string(), 10)
        .unwrap();
    d.pipe("text", &(), &"rust kafka".to_string(), 20).unwrap();
    let out = d.read_output::<String, String>("word-counts").unwrap();
    let pairs: Vec<(String, String, i64)> = out
        .into_iter()
        .map(|r| (r.key, r.value, r.timestamp))
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("kafka".into(), "1".into(), 10),
            ("streams".into(), "1".into(), 10),
            ("in".into(), "1".into(), 10),
            ("rust".into(), "1".into(), 10),
            ("rust".into(), "2".into(), 20),
            ("kafka".into(), "2".into(), 20),
        ]
    );
    let mut store = d.kv_store::<String, u64>("counts").unwrap();
    store.sort();
    assert_eq!(
        store,
        vec![
            ("in".into(), 1),
            ("kafka".into(), 2),
            ("rust".into(), 2),
            ("streams".into(), 1)
        ]
    );
    // Every store write went to the changelog, keyed like the store, in order.
    let log = d.changelog("counts");
    assert_eq!(log.len(), 6);
    assert_eq!(log[5].key.as_deref(), Some(&b"kafka"[..]));
    assert_eq!(log[5].value.as_deref(), Some(&2u64.to_be_bytes()[..]));
    assert!(
        log.iter()
            .all(|r| r.topic == "wc-counts-changelog" && r.partition == Some(0))
    );
}

/// The second user report: a dedup processor stores a command id, the next
/// processor fails, and the id must not stay in the store.
struct Dedup(WindowStoreRef<String, i64>);

impl Processor<String, String> for Dedup {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        let seen = ctx.window_store(&self.0)?;
        if !seen
            .fetch(&r.key, r.timestamp - 3_600_000, r.timestamp)?
            .is_empty()
        {
            ctx.forward(r.with_value("duplicate".to_string()));
            return Ok(());
        }
        seen.put(&r.key, &r.timestamp, r.timestamp)?;
        ctx.forward(r);
        Ok(())
    }
}

struct Execute;

impl Processor<String, String> for Execute {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        if r.value.contains("boom") {
            return Err(ProcessError::msg("validator threw"));
        }
        let verdict = if r.value == "duplicate" {
            "duplicate"
        } else {
            "accepted"
        };
        ctx.forward(r.with_value(verdict.to_string()));
        Ok(())
    }
}

#[test]
fn a_failed_record_leaves_no_dedup_id_in_the_store() {
    failed_record_leaves_no_dedup_id(false);
}

#[test]
fn a_failed_record_leaves_no_dedup_id_in_an_in_memory_store() {
    failed_record_leaves_no_dedup_id(true);
}

fn failed_record_leaves_no_dedup_id(in_memory: bool) {
    let mut b = TopologyBuilder::new();
    let seen = b.window_store::<String, i64>("seen", Duration::from_secs(3600));
    if in_memory {
        b.in_memory("seen");
    }
    let cmds = b.source::<String, String>("cmds", &["commands"]);
    let s = seen.clone();
    let dedup = b.processor("dedup", &[&cmds], move || Dedup(s.clone()), &[&seen]);
    let exec = b.processor("execute", &[&dedup], || Execute, &[]);
    b.sink("results", &[&exec], "command-results");
    let topology = b.build().unwrap();
    assert_eq!(
        topology.describe().contains("stores: [seen (in-memory)]"),
        in_memory,
        "{}",
        topology.describe()
    );
    let mut d = TopologyTestDriver::new(topology, "dedup").unwrap();

    d.pipe("commands", &"c1".to_string(), &"ok".to_string(), 1_000)
        .unwrap();
    let failed = d.pipe("commands", &"x".to_string(), &"boom".to_string(), 2_000);
    assert!(
        matches!(failed, Err(StreamsError::Process { ref node, .. }) if node == "execute"),
        "{failed:?}"
    );
    // The id was staged by `dedup`, then the record failed: not in the store, not logged.
    assert!(
        d.window_fetch::<String, i64>("seen", &"x".to_string(), 0, 10_000)
            .unwrap()
            .is_empty()
    );
    assert!(
        d.changelog("seen")
            .iter()
            .all(|r| !r.key.as_deref().unwrap_or_default().starts_with(b"x"))
    );
    // The same command, now valid, is accepted; a real duplicate afterwards is flagged.
    d.pipe("commands", &"x".to_string(), &"fine".to_string(), 3_000)
        .unwrap();
    d.pipe("commands", &"x".to_string(), &"fine".to_string(), 4_000)
        .unwrap();
    let out: Vec<(String, String)> = d
        .read_output::<String, String>("command-results")
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.value))
        .collect();
    assert_eq!(
        out,
        vec![
            ("c1".into(), "accepted".into()),
            ("x".into(), "accepted".into()),
            ("x".into(), "duplicate".into())
        ]
    );
    assert_eq!(d.changelog("seen").len(), 2);
}

/// Emits a tick per punctuation, with the time that made it due.
struct Ticker {
    stream: Option<ScheduleId>,
}

impl Processor<String, String> for Ticker {
    type KOut = String;
    type VOut = String;
    fn init(&mut self, ctx: &mut InitContext<'_>) -> Result<(), ProcessError> {
        self.stream = Some(ctx.schedule(Duration::from_millis(100), PunctuationType::StreamTime)?);
        ctx.schedule(Duration::from_secs(1), PunctuationType::WallClockTime)?;
        Ok(())
    }
    fn process(
        &mut self,
        _ctx: &mut ProcessorContext<'_, String, String>,
        _r: Record<String, String>,
    ) -> Result<(), ProcessError> {
        Ok(())
    }
    fn punctuate(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        id: ScheduleId,
        ts: i64,
    ) -> Result<(), ProcessError> {
        let kind = if Some(id) == self.stream {
            "stream"
        } else {
            "wall"
        };
        ctx.forward(Record::new(kind.to_string(), ts.to_string(), ts));
        Ok(())
    }
}

#[test]
fn punctuators_fire_on_stream_time_and_wall_clock_time() {
    let mut b = TopologyBuilder::new();
    let s = b.source::<String, String>("s", &["in"]);
    let t = b.processor("tick", &[&s], || Ticker { stream: None }, &[]);
    b.sink("o", &[&t], "ticks");
    let mut d = TopologyTestDriver::new(b.build().unwrap(), "p").unwrap();
    let k = String::new();
    // The first record starts the stream-time schedule (due at 1100).
    for ts in [1_000, 1_050, 1_100, 1_150, 1_450] {
        d.pipe("in", &k, &k, ts).unwrap();
    }
    // A record back in time does not move stream time.
    d.pipe("in", &k, &k, 10).unwrap();
    d.advance_wall_clock(Duration::from_millis(500)).unwrap(); // starts the schedule: due at 1500
    d.advance_wall_clock(Duration::from_millis(999)).unwrap();
    d.advance_wall_clock(Duration::from_millis(1)).unwrap();
    d.advance_wall_clock(Duration::from_millis(3_500)).unwrap();
    let ticks: Vec<(String, String)> = d
        .read_output::<String, String>("ticks")
        .unwrap()
        .into_iter()
        .map(|r| (r.key, r.value))
        .collect();
    assert_eq!(
        ticks,
        vec![
            ("stream".into(), "1100".into()),
            ("stream".into(), "1450".into()),
            ("wall".into(), "1500".into()),
            ("wall".into(), "5000".into()),
        ]
    );
}

#[test]
fn undecodable_input_is_a_serde_error_not_a_panic() {
    let mut b = TopologyBuilder::new();
    let s = b.source::<String, i64>("s", &["in"]);
    b.sink("o", &[&s], "out");
    let mut d = TopologyTestDriver::new(b.build().unwrap(), "p").unwrap();
    let r = d.pipe("in", &"k".to_string(), &"not eight bytes".to_string(), 0);
    assert!(matches!(r, Err(StreamsError::Serde(_))), "{r:?}");
    assert!(d.read_output::<String, i64>("out").unwrap().is_empty());
}
