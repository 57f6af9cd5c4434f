//! Helpers for the tests that run against the real broker at
//! `$KAFKA_BOOTSTRAP` (tansu under scripts/test.sh).
//!
//! ```
//! let a = weir_integration::real_broker::unique("topic");
//! assert!(a.starts_with("topic-"));
//! ```

/// The broker to test against, or `None` (the test prints that it was
/// skipped) when `KAFKA_BOOTSTRAP` is unset. With `WEIR_EXPECT_BROKER=1`
/// a missing broker fails the test instead, so CI can't go green by
/// skipping.
///
/// # Panics
/// Under `WEIR_EXPECT_BROKER=1` with no `KAFKA_BOOTSTRAP`, on purpose: it
/// is a test helper.
#[allow(clippy::panic)]
pub fn bootstrap_or_skip(test: &str) -> Option<String> {
    match std::env::var("KAFKA_BOOTSTRAP") {
        Ok(b) if !b.trim().is_empty() => Some(b),
        _ => {
            if std::env::var("WEIR_EXPECT_BROKER").as_deref() == Ok("1") {
                panic!("{test}: WEIR_EXPECT_BROKER=1 but KAFKA_BOOTSTRAP is unset");
            }
            println!("skipped: {test}: KAFKA_BOOTSTRAP is unset");
            None
        }
    }
}

/// `prefix` with the time in nanoseconds: a name no earlier run on the same
/// broker used (tansu's memory engine keeps topics and groups for its life).
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{nanos}")
}

/// Every value a read_committed reader sees on `tp` from its start, until
/// `expected` values came (or 60 s of polling passed), then a little more
/// so that late extras show too. Values are read as UTF-8 (lossily).
///
/// # Errors
/// A consumer error from the broker.
pub async fn read_committed_values(
    cluster: &weir_client::Cluster,
    tp: &weir_client::consumer::TopicPartition,
    expected: usize,
) -> weir_client::Result<Vec<String>> {
    use std::time::Duration;
    use weir_client::config::consumer::{AutoOffsetReset, ConsumerOptions, IsolationLevel};
    use weir_client::consumer::{Consumer, SeekTo};

    let mut consumer = Consumer::with_cluster(
        cluster.clone(),
        ConsumerOptions {
            isolation_level: IsolationLevel::ReadCommitted,
            auto_offset_reset: AutoOffsetReset::Earliest,
            fetch_max_wait: Duration::from_millis(100),
            ..Default::default()
        },
    );
    consumer.assign([tp.clone()]);
    consumer.seek(tp, SeekTo::Earliest)?;
    let value = |r: &weir_client::consumer::ConsumerRecord| {
        r.value
            .as_ref()
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let mut seen = Vec::new();
    for _ in 0..300 {
        seen.extend(
            consumer
                .poll_for(Duration::from_millis(200))
                .await?
                .iter()
                .map(value),
        );
        if seen.len() >= expected {
            break;
        }
    }
    seen.extend(
        consumer
            .poll_for(Duration::from_millis(300))
            .await?
            .iter()
            .map(value),
    );
    Ok(seen)
}
