//! `weir produce`: one record per line of stdin.

use std::io::BufRead;

use weir_client::config::producer::ProducerConfig;
use weir_client::producer::{Producer, ProducerRecord};
use weir_client::transaction::TransactionConfig;

use crate::args::{Codec, ConnectArgs, ProduceArgs};
use crate::connect::{as_pairs, lookup_admin, topic};
use crate::shutdown;

pub(crate) fn codec_name(codec: Codec) -> &'static str {
    match codec {
        Codec::None => "none",
        Codec::Gzip => "gzip",
        Codec::Snappy => "snappy",
        Codec::Lz4 => "lz4",
        Codec::Zstd => "zstd",
    }
}

/// Splits a line into key and value at the first `sep`; no `sep`: a null key.
fn split_line<'a>(line: &'a str, sep: Option<&str>) -> (Option<&'a str>, &'a str) {
    match sep.and_then(|s| line.split_once(s)) {
        Some((k, v)) => (Some(k), v),
        None => (None, line),
    }
}

/// The lines of stdin, read on a thread of their own so that waiting for
/// input never holds up the runtime (or a signal).
fn stdin_lines() -> tokio::sync::mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Runs the command.
pub async fn run(args: ProduceArgs, connect: &ConnectArgs) -> Result<(), String> {
    let mut props = connect.properties()?;
    props.push(("compression.type".into(), codec_name(args.codec).into()));
    // -X is checked against the producer's properties before anything else.
    let config = match &args.transactional_id {
        Some(id) => {
            let mut pairs = as_pairs(&props);
            pairs.push(("transactional.id", id));
            let (_, rest) =
                TransactionConfig::split_properties(&pairs).map_err(|e| e.to_string())?;
            ProducerConfig::from_properties(&rest).map_err(|e| e.to_string())?;
            None
        }
        None => {
            Some(ProducerConfig::from_properties(&as_pairs(&props)).map_err(|e| e.to_string())?)
        }
    };
    // Fail fast with a clear message on an unreachable broker or unknown topic,
    // rather than after the producer's delivery timeout.
    let admin = lookup_admin(connect).await?;
    let meta = topic(&admin, &args.topic).await?;
    if let Some(p) = args.partition
        && meta.partition(p).is_none()
    {
        return Err(format!("topic {} has no partition {p}", args.topic));
    }
    let Some(config) = config else {
        let Some(id) = &args.transactional_id else {
            return Err("a transactional produce without --transactional-id".into());
        };
        if args.partition.is_some() {
            return Err("--partition is not supported with --transactional-id".into());
        }
        // All of stdin goes into one transaction: a signal before its end
        // sends nothing.
        let mut lines = Vec::new();
        let mut stdin = stdin_lines();
        loop {
            let line = tokio::select! {
                line = stdin.recv() => line,
                signal = shutdown::requested() => {
                    return Err(format!("interrupted by {signal} before the end of stdin; nothing was sent"));
                }
            };
            let Some(line) = line else { break };
            let line = line.map_err(|e| format!("reading stdin: {e}"))?;
            let (key, value) = split_line(&line, args.key_delimiter.as_deref());
            lines.push((key.map(str::to_owned), value.to_owned()));
        }
        return crate::txn_produce::run(props, &args.topic, id, args.abort, lines).await;
    };
    let producer = Producer::new(config).await.map_err(|e| e.to_string())?;

    let mut deliveries = Vec::new();
    let mut lines = stdin_lines();
    loop {
        // A signal stops the reading; what was read is still delivered and
        // the producer closed, so nothing read is left half-sent.
        let line = tokio::select! {
            line = lines.recv() => line,
            signal = shutdown::requested() => {
                tracing::info!(signal, read = deliveries.len(), "stopped reading stdin on a signal");
                break;
            }
        };
        let Some(line) = line else { break };
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        let (key, value) = split_line(&line, args.key_delimiter.as_deref());
        let mut record = ProducerRecord::new(args.topic.clone()).with_value(value.to_owned());
        if let Some(k) = key {
            record = record.with_key(k.to_owned());
        }
        if let Some(p) = args.partition {
            record = record.with_partition(p);
        }
        let delivery = producer.enqueue(record).await.map_err(|e| e.to_string())?;
        deliveries.push(delivery);
    }
    producer.flush().await;
    let count = deliveries.len();
    for delivery in deliveries {
        delivery.await.map_err(|e| e.to_string())?;
    }
    producer.close().await;
    tracing::info!(count, topic = %args.topic, "produced");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_line;

    #[test]
    fn splits_at_the_first_separator_only() {
        assert_eq!(split_line("a:b:c", Some(":")), (Some("a"), "b:c"));
        assert_eq!(split_line("abc", Some(":")), (None, "abc"));
        assert_eq!(split_line("a:b", None), (None, "a:b"));
    }
}
