//! The records the interop tests write, and the field-by-field comparison
//! of what a client read back with what was written.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;
use serde_json::{Value, json};
use weir_client::consumer::ConsumerRecord;
use weir_client::producer::{ProducerRecord, RecordMetadata};

use super::base64;

/// A header: name and value (`None` is a null value).
pub type Header = (String, Option<Vec<u8>>);

/// A record to write, before any broker saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleRecord {
    /// `None` is a null key.
    pub key: Option<Vec<u8>>,
    /// `None` is a null value.
    pub value: Option<Vec<u8>>,
    /// In order, with duplicates.
    pub headers: Vec<Header>,
    /// `None` lets the producer take the current time.
    pub timestamp: Option<i64>,
    /// `None` lets the partitioner choose.
    pub partition: Option<i32>,
}

/// The awkward cases every codec must carry unchanged: null, empty and
/// non-UTF-8 keys and values; headers with duplicate names, null and empty
/// values and a non-ASCII name; explicit and producer-chosen timestamps
/// and partitions; a value large and repetitive enough for the codec to
/// matter. Contents differ per codec, so a mix-up between topics shows.
pub fn sample_records(codec: &str, partitions: i32) -> Vec<SampleRecord> {
    (0..16u8)
        .map(|i| {
            let key = match i {
                _ if i % 4 == 3 => None,
                6 => Some(Vec::new()),
                _ => Some([&[0xFF, 0x00, i][..], format!("{codec}-key-{i}").as_bytes()].concat()),
            };
            let value = match i {
                _ if i % 5 == 4 => None,
                _ if i % 5 == 2 => Some(Vec::new()),
                8 => Some(
                    (0..16_384u32)
                        .map(|n| (n % 251) as u8 ^ (n / 1024) as u8)
                        .collect(),
                ),
                _ => Some(
                    [
                        &[0xFE, 0x00, i][..],
                        format!("{codec}-value-{i}-")
                            .repeat(usize::from(i) + 1)
                            .as_bytes(),
                    ]
                    .concat(),
                ),
            };
            let headers = match i {
                _ if i % 7 == 6 => Vec::new(),
                _ => vec![
                    ("h".to_owned(), Some(format!("first-{i}").into_bytes())),
                    ("h".to_owned(), None),
                    ("bin".to_owned(), Some(vec![0xFE, i, 0x00])),
                    ("empty".to_owned(), Some(Vec::new())),
                    ("ünïcode-名前".to_owned(), Some(codec.as_bytes().to_vec())),
                ],
            };
            SampleRecord {
                key,
                value,
                headers,
                timestamp: (i % 9 != 0).then(|| 1_700_000_000_000 + i64::from(i) * 1000),
                partition: (i % 6 == 5).then(|| i32::from(i) % partitions),
            }
        })
        .collect()
}

impl SampleRecord {
    /// The record for Weir's producer.
    pub fn to_weir(&self, topic: &str) -> ProducerRecord {
        let mut record = ProducerRecord::new(topic);
        record.key = self.key.clone().map(Bytes::from);
        record.value = self.value.clone().map(Bytes::from);
        record.timestamp = self.timestamp;
        record.partition = self.partition;
        for (name, value) in &self.headers {
            record = record.with_header(name.clone(), value.clone().map(Bytes::from));
        }
        record
    }

    /// One JSON line for kafka_tool.py's `produce --encoding base64`.
    pub fn to_json_line(&self) -> String {
        let b64 = |v: &Option<Vec<u8>>| v.as_deref().map(base64::encode);
        let headers: Vec<Value> = self
            .headers
            .iter()
            .map(|(name, value)| json!([name, b64(value)]))
            .collect();
        let mut obj = json!({"key": b64(&self.key), "value": b64(&self.value), "headers": headers});
        if let Some(ts) = self.timestamp {
            obj["timestamp"] = json!(ts);
        }
        if let Some(p) = self.partition {
            obj["partition"] = json!(p);
        }
        obj.to_string() + "\n"
    }

    /// What a reader must see once a broker stored this record at
    /// `partition`/`offset` with `timestamp`.
    pub fn stored_at(&self, partition: i32, offset: i64, timestamp: i64) -> RecordView {
        RecordView {
            partition,
            offset,
            key: self.key.clone(),
            value: self.value.clone(),
            headers: self.headers.clone(),
            timestamp: Some(timestamp),
            timestamp_type: Some("create".to_owned()),
        }
    }
}

/// A stored record as one client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView {
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Option<Vec<u8>>,
    /// The headers.
    pub headers: Vec<Header>,
    /// Milliseconds since the epoch; `None` if the reader saw none.
    pub timestamp: Option<i64>,
    /// "create" or "log_append"; `None` where the reader does not say
    /// (Weir's `ConsumerRecord` has no timestamp type).
    pub timestamp_type: Option<String>,
}

impl RecordView {
    /// A record Weir's consumer returned.
    pub fn from_weir(record: &ConsumerRecord) -> RecordView {
        RecordView {
            partition: record.partition,
            offset: record.offset,
            key: record.key.as_ref().map(|b| b.to_vec()),
            value: record.value.as_ref().map(|b| b.to_vec()),
            headers: record
                .headers
                .iter()
                .map(|h| (h.key.clone(), h.value.as_ref().map(|b| b.to_vec())))
                .collect(),
            timestamp: Some(record.timestamp),
            timestamp_type: None,
        }
    }

    /// A record kafka_tool.py's `consume --encoding base64` printed.
    pub fn from_json(line: &Value) -> Result<RecordView, String> {
        let bytes = |v: &Value, what: &str| -> Result<Option<Vec<u8>>, String> {
            match v {
                Value::Null => Ok(None),
                Value::String(s) => base64::decode(s).map(Some),
                other => Err(format!("{what} is {other}, not a string or null")),
            }
        };
        let int = |field: &str| {
            line[field]
                .as_i64()
                .ok_or_else(|| format!("{field} missing in {line}"))
        };
        let mut headers = Vec::new();
        for pair in line["headers"].as_array().ok_or("headers missing")? {
            let name = pair[0].as_str().ok_or_else(|| format!("header {pair}"))?;
            headers.push((name.to_owned(), bytes(&pair[1], "header value")?));
        }
        Ok(RecordView {
            partition: i32::try_from(int("partition")?).map_err(|e| e.to_string())?,
            offset: int("offset")?,
            key: bytes(&line["key"], "key")?,
            value: bytes(&line["value"], "value")?,
            headers,
            timestamp: line["timestamp"].as_i64(),
            timestamp_type: line["timestamp_type"].as_str().map(str::to_owned),
        })
    }
}

/// The records Weir's producer wrote, as stored, from its delivery reports.
/// Also checks the reports themselves: an explicit partition or timestamp
/// must come back as given.
pub fn stored_by_weir(
    sample: &[SampleRecord],
    metadata: &[RecordMetadata],
    problems: &mut Vec<String>,
) -> Vec<RecordView> {
    sample
        .iter()
        .zip(metadata)
        .enumerate()
        .map(|(i, (record, meta))| {
            check_report(i, record, meta.partition, meta.timestamp, problems);
            record.stored_at(meta.partition, meta.offset, meta.timestamp)
        })
        .collect()
}

/// The records librdkafka wrote, from kafka_tool's delivery reports.
pub fn stored_by_tool(
    sample: &[SampleRecord],
    reports: &[Value],
    problems: &mut Vec<String>,
) -> Vec<RecordView> {
    let mut stored = Vec::new();
    for (i, (record, report)) in sample.iter().zip(reports).enumerate() {
        let (Some(partition), Some(offset), Some(timestamp)) = (
            report["partition"].as_i64(),
            report["offset"].as_i64(),
            report["timestamp"].as_i64(),
        ) else {
            problems.push(format!("record {i}: delivery report {report}"));
            continue;
        };
        let partition = i32::try_from(partition).unwrap();
        check_report(i, record, partition, timestamp, problems);
        stored.push(record.stored_at(partition, offset, timestamp));
    }
    stored
}

fn check_report(i: usize, record: &SampleRecord, partition: i32, ts: i64, out: &mut Vec<String>) {
    if record.partition.is_some_and(|p| p != partition) {
        out.push(format!(
            "record {i}: asked for partition {:?}, delivered to {partition}",
            record.partition
        ));
    }
    if record.timestamp.is_some_and(|t| t != ts) {
        out.push(format!(
            "record {i}: timestamp {:?} reported as {ts}",
            record.timestamp
        ));
    }
}

/// Every difference between what was stored and what a reader saw, one
/// line each, naming partition, offset and field.
pub fn differences(stored: &[RecordView], seen: &[RecordView]) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_position: BTreeMap<(i32, i64), &RecordView> = BTreeMap::new();
    for record in seen {
        if by_position
            .insert((record.partition, record.offset), record)
            .is_some()
        {
            out.push(format!(
                "{}@{}: read twice",
                record.partition, record.offset
            ));
        }
    }
    for want in stored {
        let at = format!("{}@{}", want.partition, want.offset);
        let Some(got) = by_position.remove(&(want.partition, want.offset)) else {
            out.push(format!("{at}: never read"));
            continue;
        };
        let mut field = |name: &str, same: bool, want: String, got: String| {
            if !same {
                out.push(format!("{at}: {name}: wrote {want}, read {got}"));
            }
        };
        field("key", want.key == got.key, show(&want.key), show(&got.key));
        field(
            "value",
            want.value == got.value,
            show(&want.value),
            show(&got.value),
        );
        field(
            "headers",
            want.headers == got.headers,
            show_headers(&want.headers),
            show_headers(&got.headers),
        );
        field(
            "timestamp",
            want.timestamp == got.timestamp,
            format!("{:?}", want.timestamp),
            format!("{:?}", got.timestamp),
        );
        if let Some(kind) = &got.timestamp_type {
            field(
                "timestamp type",
                kind == "create",
                "create".into(),
                kind.clone(),
            );
        }
    }
    for extra in by_position.values() {
        out.push(format!(
            "{}@{}: read but never written",
            extra.partition, extra.offset
        ));
    }
    out
}

/// Bytes for a failure message: length and the first bytes in hex.
fn show(bytes: &Option<Vec<u8>>) -> String {
    let Some(bytes) = bytes else {
        return "null".to_owned();
    };
    let mut s = format!("{} bytes [", bytes.len());
    for b in bytes.iter().take(24) {
        let _ = write!(s, "{b:02x}");
    }
    s.push_str(if bytes.len() > 24 { "..]" } else { "]" });
    s
}

fn show_headers(headers: &[Header]) -> String {
    let parts: Vec<String> = headers
        .iter()
        .map(|(name, value)| format!("{name:?}={}", show(value)))
        .collect();
    format!("[{}]", parts.join(", "))
}
