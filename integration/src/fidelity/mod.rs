//! The differential fidelity suite: scripted scenarios
//! run against weir-testkit and against Apache Kafka 4.4, their observable
//! answers compared.
//!
//! Each scenario is written once, in [`scenarios`], as an async function
//! over a [`Wire`]: a raw-request driver that sends kafka-protocol messages
//! through weir-client's [`Cluster`] at versions both brokers speak (see
//! [`common_versions`]). A scenario records what it observes in a
//! [`Recorder`]: error codes by name, offsets (each scenario creates its
//! own topics, so they start at 0 on both sides), producer ids and member
//! ids by symbolic name, epochs and generations as deltas, sorted
//! assignments, visible record values. Raw ids and timestamps, which
//! legitimately differ, never go in; what is informative but racy on Kafka
//! (how long an asynchronous step took) goes in [`Recorder::note`], printed
//! but not compared.
//!
//! [`compare`] lines two recordings up and returns every difference; the
//! test (`tests/fidelity.rs`) classifies them against its lists of
//! deliberate differences and of testkit gaps not yet fixed.

pub mod scenarios;
pub mod wire;

use std::collections::BTreeMap;
use std::fmt;

pub use scenarios::Scenario;
pub use wire::{Side, Wire, common_versions};

/// What a scenario step returns on a failure that is not an observation
/// (a lost connection, a decode error, a bound reached while polling).
pub type Fallible<T> = std::result::Result<T, String>;

/// One observation: its position in the scenario, what it is, what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// What was observed (e.g. `"zombie EndTxn"`), unique within a scenario.
    pub key: String,
    /// What was seen, normalised (e.g. `"PRODUCER_FENCED"`).
    pub value: String,
}

/// What one scenario saw on one side.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    /// The observations, in the order they were made.
    pub observations: Vec<Observation>,
    /// Informative lines that are not compared (timings, racy states).
    pub notes: Vec<String>,
    /// Raw id (producer id, member id) to symbolic name.
    names: BTreeMap<String, String>,
    /// Names handed out per kind, for the next number.
    counts: BTreeMap<&'static str, usize>,
}

impl Recorder {
    /// Records `value` under `key`.
    pub fn put(&mut self, key: impl Into<String>, value: impl fmt::Display) {
        self.observations.push(Observation {
            key: key.into(),
            value: value.to_string(),
        });
    }

    /// Records an error code by its Kafka name.
    pub fn code(&mut self, key: impl Into<String>, code: i16) {
        self.put(key, code_name(code));
    }

    /// A line printed with the results but not compared.
    pub fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    /// A stable symbolic name for a raw id of some kind (`"producer"`,
    /// `"member"`): the first id seen of that kind is `producer#1`, and so
    /// on. The empty member id stays `""`.
    pub fn name(&mut self, kind: &'static str, raw: &str) -> String {
        if raw.is_empty() {
            return "\"\"".to_owned();
        }
        let key = format!("{kind}:{raw}");
        if let Some(n) = self.names.get(&key) {
            return n.clone();
        }
        let count = self.counts.entry(kind).or_insert(0);
        *count += 1;
        let name = format!("{kind}#{count}");
        self.names.insert(key, name.clone());
        name
    }
}

/// Kafka's name for an error code, e.g. `PRODUCER_FENCED` (`NONE` for 0).
pub fn code_name(code: i16) -> String {
    if code == 0 {
        return "NONE".to_owned();
    }
    let k = weir_client::kerror::KafkaCode::from_code(code);
    if k.name == "UNKNOWN_CODE" {
        format!("UNKNOWN_CODE({code})")
    } else {
        k.name.to_owned()
    }
}

/// One difference between the two sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The scenario's name.
    pub scenario: &'static str,
    /// The observation (the testkit's key when the keys differ).
    pub key: String,
    /// What the testkit answered (`<absent>` when it recorded nothing there).
    pub testkit: String,
    /// What Kafka answered.
    pub kafka: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {}\n    testkit: {}\n    kafka:   {}",
            self.scenario, self.key, self.testkit, self.kafka
        )
    }
}

const ABSENT: &str = "<absent>";

/// Every difference between what the testkit and Kafka recorded for
/// `scenario`, position by position; a key recorded on one side only
/// shows as `<absent>` on the other.
pub fn compare(scenario: &'static str, testkit: &Recorder, kafka: &Recorder) -> Vec<Difference> {
    let (t, k) = (&testkit.observations, &kafka.observations);
    let mut out = Vec::new();
    for i in 0..t.len().max(k.len()) {
        match (t.get(i), k.get(i)) {
            (Some(a), Some(b)) if a.key == b.key => {
                if a.value != b.value {
                    out.push(Difference {
                        scenario,
                        key: a.key.clone(),
                        testkit: a.value.clone(),
                        kafka: b.value.clone(),
                    });
                }
            }
            (Some(a), Some(b)) => {
                out.push(Difference {
                    scenario,
                    key: a.key.clone(),
                    testkit: format!("{} = {}", a.key, a.value),
                    kafka: format!("{} = {}", b.key, b.value),
                });
            }
            (Some(a), None) => out.push(Difference {
                scenario,
                key: a.key.clone(),
                testkit: a.value.clone(),
                kafka: ABSENT.to_owned(),
            }),
            (None, Some(b)) => out.push(Difference {
                scenario,
                key: b.key.clone(),
                testkit: ABSENT.to_owned(),
                kafka: b.value.clone(),
            }),
            (None, None) => {}
        }
    }
    out
}

/// Why a difference is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    /// The testkit differs on purpose; the reason says why (and
    /// `testkit/README.md` lists it under "Known differences from Kafka 4.4").
    Deliberate,
    /// A gap in the testkit, to be fixed: allowed for
    /// now, a failure under `WEIR_FIDELITY_STRICT=1`.
    FailingForNow,
}

/// A difference the suite knows about: the scenario, a substring of the
/// observation's key, and why.
#[derive(Debug, Clone, Copy)]
pub struct Known {
    /// The scenario's name.
    pub scenario: &'static str,
    /// A substring of the observation key it covers.
    pub key: &'static str,
    /// Deliberate or failing for now.
    pub allowance: Allowance,
    /// Why.
    pub reason: &'static str,
}

impl Known {
    /// Whether this entry covers `d`.
    pub fn covers(&self, d: &Difference) -> bool {
        self.scenario == d.scenario && d.key.contains(self.key)
    }
}

/// The offset and value of each record a read_committed consumer delivers
/// from `batches`, given the fetch response's aborted transactions (Java's
/// `Fetcher` rule: a transactional batch of a producer listed as aborted
/// at or before its base offset is skipped, until that producer's ABORT
/// marker; control batches are never delivered).
pub fn read_committed_view(
    batches: &[weir_protocol::records::RecordBatch],
    aborted: &[(i64, i64)],
) -> Vec<(i64, String)> {
    use std::collections::BTreeSet;
    let mut pending: Vec<(i64, i64)> = aborted.to_vec();
    pending.sort_by_key(|&(_, first)| first);
    let mut pending = std::collections::VecDeque::from(pending);
    let mut skipping: BTreeSet<i64> = BTreeSet::new();
    let mut out = Vec::new();
    for b in batches {
        let h = &b.header;
        while pending
            .front()
            .is_some_and(|&(_, first)| first <= h.last_offset())
        {
            if let Some((pid, _)) = pending.pop_front() {
                skipping.insert(pid);
            }
        }
        if h.is_control() {
            if let Some(c) = b.control()
                && c.kind == weir_protocol::records::ControlKind::Abort
            {
                skipping.remove(&h.producer_id);
            }
            continue;
        }
        if h.is_transactional() && skipping.contains(&h.producer_id) {
            continue;
        }
        for r in &b.records {
            out.push((r.offset, value_text(r.value.as_deref())));
        }
    }
    out
}

/// A record value as text (`null` for a tombstone).
pub fn value_text(v: Option<&[u8]>) -> String {
    v.map_or_else(
        || "null".to_owned(),
        |b| String::from_utf8_lossy(b).into_owned(),
    )
}
