//! `weir produce --transactional-id ID [--abort]`: all of stdin in one
//! transaction, then a commit (or, with `--abort`, an abort). Handy for
//! checking what a read_committed reader shows.

use weir_client::config::producer::ProducerConfig;
use weir_client::producer::ProducerRecord;
use weir_client::transaction::{TransactionConfig, TransactionalProducer};

/// Sends `lines` (key, value) to `topic` in one transaction of
/// `transactional_id`, then commits it, or aborts it when `abort`.
///
/// `producer_props` are Kafka-named properties (bootstrap servers,
/// security, compression, and optionally `transaction.timeout.ms`).
///
/// # Errors
/// A one-line message: bad properties, an unreachable cluster, a fenced
/// producer, or a record that could not be written (the transaction is
/// then aborted before returning).
pub async fn run(
    producer_props: Vec<(String, String)>,
    topic: &str,
    transactional_id: &str,
    abort: bool,
    lines: Vec<(Option<String>, String)>,
) -> Result<(), String> {
    let mut pairs: Vec<(&str, &str)> = producer_props
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.retain(|(k, _)| *k != "transactional.id");
    pairs.push(("transactional.id", transactional_id));
    let (txn, rest) = TransactionConfig::split_properties(&pairs).map_err(|e| e.to_string())?;
    let config = ProducerConfig::from_properties(&rest).map_err(|e| e.to_string())?;
    let producer = TransactionalProducer::new(config, txn)
        .await
        .map_err(|e| e.to_string())?;
    producer
        .init_transactions()
        .await
        .map_err(|e| e.to_string())?;
    producer.begin().map_err(|e| e.to_string())?;
    let count = lines.len();
    let mut deliveries = Vec::with_capacity(count);
    for (key, value) in lines {
        let mut record = ProducerRecord::new(topic).with_value(value);
        if let Some(k) = key {
            record = record.with_key(k);
        }
        match producer.enqueue(record).await {
            Ok(d) => deliveries.push(d),
            Err(e) => return Err(give_up(&producer, e).await),
        }
    }
    for delivery in deliveries {
        if let Err(e) = delivery.await {
            return Err(give_up(&producer, e).await);
        }
    }
    let ended = if abort {
        producer.abort().await
    } else {
        producer.commit().await
    };
    if let Err(e) = ended {
        return Err(give_up(&producer, e).await);
    }
    producer.close().await;
    tracing::info!(
        count,
        topic,
        transactional_id,
        aborted = abort,
        "transaction ended"
    );
    Ok(())
}

/// Aborts what can be aborted and returns the first error's message.
async fn give_up(producer: &TransactionalProducer, error: weir_client::ClientError) -> String {
    if let Err(abort) = producer.abort().await {
        tracing::debug!(error = %abort, "abort after a failed transaction");
    }
    producer.close().await;
    error.to_string()
}
