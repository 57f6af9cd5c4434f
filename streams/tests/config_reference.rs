//! The user guide's configuration reference
//! (`docs/guide/src/operations/configuration.md`) against the code: every
//! documented property is accepted by the config it is documented under,
//! and setting a property to its documented default gives the same
//! configuration as leaving it out.
//!
//! A default cell is checked when it is a plain value: a number (optionally
//! followed by a note in parentheses, `33554432 (32 MiB)`) or one value in
//! backticks (`` `all` ``). Defaults written in words ("on when `acks=all`",
//! "(none)") are checked for acceptance only. `scripts/config_reference.py`
//! checks that the page lists exactly the properties the code accepts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use weir_client::config::ClientConfig;
use weir_client::config::consumer::ConsumerConfig;
use weir_client::config::producer::ProducerConfig;
use weir_client::transaction::TransactionConfig;
use weir_streams::StreamsConfig;

/// One row of a table of the page.
#[derive(Debug)]
struct Row {
    section: String,
    key: String,
    default: String,
    line: usize,
}

/// The page, from the repository root.
const PAGE: &str = "docs/guide/src/operations/configuration.md";

fn page() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(PAGE);
    std::fs::read_to_string(&path).expect("read the configuration reference")
}

/// The `| `key` | default | meaning |` rows, with the `## ` section each is under.
fn rows(text: &str) -> Vec<Row> {
    let mut section = String::new();
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading.trim().to_owned();
            continue;
        }
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let cells: Vec<&str> = rest.split(" | ").collect();
        let Some(key) = cells[0].strip_suffix('`') else {
            continue;
        };
        assert!(
            cells.len() >= 3,
            "line {}: a property row needs a default and a meaning: {line}",
            index + 1
        );
        found.push(Row {
            section: section.clone(),
            key: key.to_owned(),
            default: cells[1].trim().to_owned(),
            line: index + 1,
        });
    }
    found
}

/// The value to set for a plain default cell, or `None` for one in words.
fn plain_value(cell: &str) -> Option<String> {
    if let Some(inner) = cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')) {
        return (!inner.contains('`')).then(|| inner.to_owned());
    }
    let number = cell
        .split_once(" (")
        .map_or(cell, |(n, note)| if note.ends_with(')') { n } else { cell });
    number
        .chars()
        .all(|c| c.is_ascii_digit())
        .then(|| number.to_owned())
        .filter(|n| !n.is_empty())
}

/// The configuration a section's properties build, as text to compare:
/// `Ok` with the `Debug` of the config, or the error.
fn build(section: &str, extra: Option<(&str, &str)>) -> Result<String, String> {
    fn with<'a>(
        base: &[(&'a str, &'a str)],
        extra: Option<(&'a str, &'a str)>,
    ) -> Vec<(&'a str, &'a str)> {
        let mut props = base.to_vec();
        props.extend(extra);
        props
    }
    let brokers = [("bootstrap.servers", "127.0.0.1:9092")];
    match section {
        "Every client" => ClientConfig::from_properties(&with(&brokers, extra))
            .map(|c| format!("{c:?}"))
            .map_err(|e| e.to_string()),
        "Producer" => ProducerConfig::from_properties(&with(&brokers, extra))
            .map(|c| format!("{c:?}"))
            .map_err(|e| e.to_string()),
        "Consumer" => ConsumerConfig::from_properties(&with(&brokers, extra))
            .map(|c| format!("{c:?}"))
            .map_err(|e| e.to_string()),
        "Transactional producer" => {
            TransactionConfig::split_properties(&with(&[("transactional.id", "t")], extra))
                .map(|(c, rest)| format!("{c:?} {rest:?}"))
                .map_err(|e| e.to_string())
        }
        "Streams" => {
            StreamsConfig::from_properties(&with(&[("application.id", "app"), brokers[0]], extra))
                .map(|c| format!("{c:?}"))
                .map_err(|e| e.to_string())
        }
        other => panic!("no config known for section {other:?}"),
    }
}

#[test]
fn plain_values_are_read_from_default_cells() {
    assert_eq!(plain_value("5"), Some("5".to_owned()));
    assert_eq!(
        plain_value("33554432 (32 MiB)"),
        Some("33554432".to_owned())
    );
    assert_eq!(plain_value("`all`"), Some("all".to_owned()));
    assert_eq!(plain_value("on when `acks=all`"), None);
    assert_eq!(plain_value("30000, or 100 under exactly-once"), None);
    assert_eq!(plain_value("(required)"), None);
    assert_eq!(plain_value("`a` or `b`"), None);
}

#[test]
fn every_documented_property_is_accepted_and_plain_defaults_match_the_code() {
    let text = page();
    let rows = rows(&text);
    assert!(rows.len() >= 60, "found only {} property rows", rows.len());
    let mut failures = Vec::new();
    let mut checked_defaults = 0;
    for row in &rows {
        let at = format!("{PAGE}:{} `{}`", row.line, row.key);
        let baseline = build(&row.section, None)
            .unwrap_or_else(|e| panic!("{at}: the section's base config fails: {e}"));
        match plain_value(&row.default) {
            Some(value) => match build(&row.section, Some((&row.key, &value))) {
                Ok(set) if set == baseline => checked_defaults += 1,
                Ok(_) => failures.push(format!(
                    "{at}: setting it to its documented default {value:?} changes the config"
                )),
                Err(e) => failures.push(format!(
                    "{at}: its documented default {value:?} is refused: {e}"
                )),
            },
            None => {
                // A default in words: the property must still be accepted
                // with some value; a refusal naming another key is fine
                // (a required companion), one naming this key is not.
                if let Err(e) = build(&row.section, Some((&row.key, "1")))
                    && e.contains("unknown")
                {
                    failures.push(format!("{at}: not accepted: {e}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} documented properties disagree with the code:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
    // Guard the parser: most defaults on the page are plain values.
    assert!(
        checked_defaults >= 40,
        "only {checked_defaults} defaults were plain enough to check"
    );
}
