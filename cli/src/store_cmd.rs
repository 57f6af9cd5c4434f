//! `weir store ...`: look inside a task's state store on disk, the way RocksDB's
//! `ldb scan` is used to debug Kafka Streams stores.
//!
//! Opening a store takes its task lock, so these commands refuse (with the
//! holder's pid) while the application owns the task. Opening also performs
//! the store's normal recovery: an interrupted bulk restore is discarded and
//! expired window segments are dropped.

use std::io::Write;
use std::path::{Path, PathBuf};

use weir_store::{DB_DIR, StoreKind, StoreOptions, TaskStore};

/// Subcommands of `weir store`.
#[derive(Debug, clap::Subcommand)]
pub enum StoreCommand {
    /// Print the keys and values of a task's stores (non-UTF-8 bytes escaped as \xNN).
    Scan {
        /// The task directory, `<state.dir>/<application.id>/<task id>`.
        task_dir: PathBuf,
        /// Only this store.
        #[arg(long)]
        store: Option<String>,
    },
    /// Print the changelog offsets committed with the task's stores.
    Offsets {
        /// The task directory, `<state.dir>/<application.id>/<task id>`.
        task_dir: PathBuf,
    },
}

/// Runs a `weir store` subcommand, printing to stdout.
///
/// # Errors
///
/// A message for the user: missing or locked directory, corrupt store, I/O.
pub fn run(cmd: StoreCommand) -> Result<(), String> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    run_to(cmd, &mut out)
}

fn run_to(cmd: StoreCommand, out: &mut impl Write) -> Result<(), String> {
    match cmd {
        StoreCommand::Scan { task_dir, store } => scan(&task_dir, store.as_deref(), out),
        StoreCommand::Offsets { task_dir } => offsets(&task_dir, out),
    }
}

fn open(task_dir: &Path) -> Result<TaskStore, String> {
    // Opening creates missing directories; a typo must not create an empty store.
    if !task_dir.join(DB_DIR).is_dir() {
        return Err(format!(
            "{} is not a weir-store task directory (no {DB_DIR}/ inside)",
            task_dir.display()
        ));
    }
    TaskStore::open(task_dir, StoreOptions::default()).map_err(|e| e.to_string())
}

fn io_err(e: std::io::Error) -> String {
    format!("writing output: {e}")
}

fn scan(task_dir: &Path, only: Option<&str>, out: &mut impl Write) -> Result<(), String> {
    let task = open(task_dir)?;
    let stores = task.stores();
    if let Some(name) = only
        && !stores.iter().any(|(n, _)| n == name)
    {
        let known: Vec<&str> = stores.iter().map(|(n, _)| n.as_str()).collect();
        return Err(format!(
            "no store {name:?} in {}; stores: {known:?}",
            task_dir.display()
        ));
    }
    for (name, registration) in stores {
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let serdes = registration.serdes.as_ref().map_or_else(
            || "bytes".to_owned(),
            |(k, v)| format!("key {k}, value {v}"),
        );
        writeln!(out, "# store {name}: {} ({serdes})", registration.kind).map_err(io_err)?;
        let mut count = 0u64;
        match registration.kind {
            StoreKind::KeyValue => {
                let kv = task.key_value_store(&name).map_err(|e| e.to_string())?;
                for item in kv.iter().map_err(|e| e.to_string())? {
                    let (k, v) = item.map_err(|e| e.to_string())?;
                    writeln!(out, "{}\t{}", escape(&k), escape(&v)).map_err(io_err)?;
                    count += 1;
                }
            }
            StoreKind::Window {
                retention_ms,
                segment_ms,
            } => {
                let window = task
                    .window_store(
                        &name,
                        std::time::Duration::from_millis(retention_ms.unsigned_abs()),
                        std::time::Duration::from_millis(segment_ms.unsigned_abs()),
                    )
                    .map_err(|e| e.to_string())?;
                for entry in window
                    .fetch_all(i64::MIN, i64::MAX)
                    .map_err(|e| e.to_string())?
                {
                    let e = entry.map_err(|e| e.to_string())?;
                    writeln!(
                        out,
                        "{}@{}\t{}",
                        escape(&e.key),
                        e.window_start,
                        escape(&e.value)
                    )
                    .map_err(io_err)?;
                    count += 1;
                }
            }
            _ => writeln!(out, "# (unsupported store kind)").map_err(io_err)?,
        }
        writeln!(out, "# {count} entries").map_err(io_err)?;
    }
    Ok(())
}

fn offsets(task_dir: &Path, out: &mut impl Write) -> Result<(), String> {
    let task = open(task_dir)?;
    let offsets = task.committed_offsets();
    if offsets.is_empty() {
        writeln!(
            out,
            "# no committed changelog offsets: the stores must be restored from the beginning"
        )
        .map_err(io_err)?;
    }
    for (partition, offset) in offsets {
        writeln!(
            out,
            "{}\t{}\t{}",
            partition.topic, partition.partition, offset
        )
        .map_err(io_err)?;
    }
    Ok(())
}

/// Printable UTF-8 as is; anything else (invalid UTF-8, control characters,
/// tabs and newlines that would break the columns) as `\xNN` escapes.
fn escape(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.chars().any(char::is_control) && !s.contains('\\') => s.to_owned(),
        _ => bytes.escape_ascii().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_store::ChangelogPartition;

    #[test]
    fn escape_keeps_text_and_escapes_the_rest() {
        assert_eq!(escape(b"plain key"), "plain key");
        assert_eq!(escape("grüße".as_bytes()), "grüße");
        assert_eq!(escape(&[0xff, b'a', 0x00]), "\\xffa\\x00");
        assert_eq!(escape(b"tab\there"), "tab\\there");
    }

    #[test]
    fn scan_and_offsets_print_committed_state_only() {
        let dir = std::env::temp_dir().join(format!("weir-cli-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let task = TaskStore::open(&dir, StoreOptions::default()).unwrap();
            let kv = task.key_value_store("dedup").unwrap();
            kv.put(b"cmd-1", &[0xff, 0x01]).unwrap();
            task.commit(&[(ChangelogPartition::new("app-dedup-changelog", 4), 17)])
                .unwrap();
            kv.put(b"aborted", b"x").unwrap(); // staged only
        }
        let mut out = Vec::new();
        run_to(
            StoreCommand::Scan {
                task_dir: dir.clone(),
                store: None,
            },
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("cmd-1\t\\xff\\x01"), "{text}");
        assert!(!text.contains("aborted"), "{text}");
        assert!(text.contains("# 1 entries"), "{text}");

        let mut out = Vec::new();
        run_to(
            StoreCommand::Offsets {
                task_dir: dir.clone(),
            },
            &mut out,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "app-dedup-changelog\t4\t17\n"
        );

        let err = run_to(
            StoreCommand::Scan {
                task_dir: dir.clone(),
                store: Some("nope".into()),
            },
            &mut Vec::new(),
        );
        assert!(err.unwrap_err().contains("no store"));
        let err = run_to(
            StoreCommand::Offsets {
                task_dir: dir.join("missing"),
            },
            &mut Vec::new(),
        );
        assert!(err.unwrap_err().contains("not a weir-store task directory"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
