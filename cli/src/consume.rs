//! `weir consume`: print records of a topic.

use std::collections::HashMap;
use std::io::Write;

use weir_client::admin::OffsetSpec;
use weir_client::config::consumer::{ConsumerConfig, IsolationLevel};
use weir_client::consumer::{Consumer, SeekTo, TopicPartition};

use weir_group::assignor::TopicPartition as GroupTopicPartition;
use weir_group::group_consumer::GroupConsumer;
use weir_group::member::{MemberConfig, ShutdownMode};

use crate::args::{ConnectArgs, ConsumeArgs, Isolation};
use crate::connect::{as_pairs, lookup_admin, topic};
use crate::format::RecordFormat;
use crate::shutdown;

/// The consumer's configuration: `--isolation` unless `-X isolation.level`
/// says otherwise, then every `-X` property, then `--from-beginning`
/// (`auto.offset.reset=earliest`, where a group has no committed offset).
///
/// # Errors
/// A `-X` key that is not a consumer property, or a bad value.
fn consumer_config(args: &ConsumeArgs, connect: &ConnectArgs) -> Result<ConsumerConfig, String> {
    let isolation = match args.isolation {
        Isolation::ReadCommitted => "read_committed",
        Isolation::ReadUncommitted => "read_uncommitted",
    };
    let mut props = vec![("isolation.level".to_owned(), isolation.to_owned())];
    props.extend(connect.properties()?);
    if args.from_beginning {
        props.push(("auto.offset.reset".into(), "earliest".into()));
    }
    ConsumerConfig::from_properties(&as_pairs(&props)).map_err(|e| e.to_string())
}

/// Runs the command.
pub async fn run(args: ConsumeArgs, connect: &ConnectArgs) -> Result<(), String> {
    let format = RecordFormat::parse(&args.format)?;
    // -X is checked against the consumer's properties before anything else.
    let config = consumer_config(&args, connect)?;
    let admin = lookup_admin(connect).await?;
    let meta = topic(&admin, &args.topic).await?;
    if let Some(group) = args.group.clone() {
        return run_in_group(args, config, group, format).await;
    }
    let partitions: Vec<i32> = match args.partition {
        Some(p) if meta.partition(p).is_some() => vec![p],
        Some(p) => return Err(format!("topic {} has no partition {p}", args.topic)),
        None => meta.partitions.iter().map(|p| p.partition).collect(),
    };
    let read_committed = config.consumer.isolation_level == IsolationLevel::ReadCommitted;

    // With --exit-at-end, the end is each partition's end offset now.
    let mut remaining: HashMap<i32, i64> = HashMap::new();
    if args.exit_at_end {
        for o in admin
            .list_offsets(&args.topic, &partitions, OffsetSpec::Latest, read_committed)
            .await
            .map_err(|e| e.to_string())?
        {
            remaining.insert(o.partition, o.offset);
        }
    }

    let mut consumer = Consumer::new(config).await.map_err(|e| e.to_string())?;
    let tps: Vec<TopicPartition> = partitions
        .iter()
        .map(|p| TopicPartition::new(args.topic.clone(), *p))
        .collect();
    consumer.assign(tps.clone());
    let start = if args.from_beginning {
        SeekTo::Earliest
    } else {
        SeekTo::Latest
    };
    for tp in &tps {
        consumer.seek(tp, start).map_err(|e| e.to_string())?;
    }
    if args.exit_at_end {
        for tp in &tps {
            let position = consumer.position(tp).await.map_err(|e| e.to_string())?;
            if remaining
                .get(&tp.partition)
                .is_some_and(|end| position >= *end)
            {
                remaining.remove(&tp.partition);
            }
        }
    }

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut printed = 0u64;
    loop {
        if args.count.is_some_and(|c| printed >= c) || (args.exit_at_end && remaining.is_empty()) {
            break;
        }
        let records = tokio::select! {
            records = consumer.poll() => records.map_err(|e| e.to_string())?,
            signal = shutdown::requested() => {
                tracing::info!(signal, printed, "stopped by a signal");
                break;
            }
        };
        for record in records {
            if args.count.is_some_and(|c| printed >= c) {
                break;
            }
            format
                .write(&mut out, &record)
                .map_err(|e| format!("writing stdout: {e}"))?;
            printed += 1;
            if let Some(end) = remaining.get(&record.partition)
                && record.offset + 1 >= *end
            {
                remaining.remove(&record.partition);
            }
        }
        out.flush().map_err(|e| format!("writing stdout: {e}"))?;
        if args.exit_at_end {
            // Transaction markers and aborted records take offsets but are never
            // delivered, so compare positions too, not only delivered offsets.
            let mut done = Vec::new();
            for (&partition, &end) in &remaining {
                let tp = TopicPartition::new(args.topic.clone(), partition);
                if consumer.position(&tp).await.map_err(|e| e.to_string())? >= end {
                    done.push(partition);
                }
            }
            for p in done {
                remaining.remove(&p);
            }
        }
    }
    Ok(())
}

/// `--group`: a member of a consumer group, committing after each batch
/// what it printed of it.
async fn run_in_group(
    args: ConsumeArgs,
    config: ConsumerConfig,
    group: String,
    format: RecordFormat,
) -> Result<(), String> {
    let mut member = MemberConfig::new(group.clone(), [args.topic.clone()]);
    member.instance_id = args.instance_id.clone();
    let mut consumer = GroupConsumer::connect(config, member)
        .await
        .map_err(|e| format!("joining group {group}: {e}"))?;
    let stdout = std::io::stdout();
    let mut printed = 0u64;
    while args.count.is_none_or(|c| printed < c) {
        // A signal ends the loop between batches; the close below then
        // commits what was printed and leaves the group, so a rerun does not
        // wait for the coordinator to expire this member.
        let records = tokio::select! {
            records = consumer.poll() => records.map_err(|e| e.to_string())?,
            signal = shutdown::requested() => {
                tracing::info!(signal, printed, group = %group, "stopped by a signal; leaving the group");
                break;
            }
        };
        let mut out = stdout.lock();
        let mut shown = 0;
        for record in &records {
            if args.count.is_some_and(|c| printed >= c) {
                break;
            }
            format
                .write(&mut out, record)
                .map_err(|e| format!("writing stdout: {e}"))?;
            printed += 1;
            shown += 1;
        }
        out.flush().map_err(|e| format!("writing stdout: {e}"))?;
        drop(out);
        // With --count, a batch can hold more records than are printed: the
        // group must not count those as consumed, or the next run of the
        // same group would skip them. Moving each partition back to its
        // first record not printed makes the commit (here and on close)
        // cover exactly what was printed.
        let mut rewound = std::collections::BTreeSet::new();
        for record in records.get(shown..).unwrap_or_default() {
            let tp = GroupTopicPartition::new(record.topic.clone(), record.partition);
            if rewound.insert(tp.clone()) {
                consumer
                    .seek(&tp, SeekTo::Offset(record.offset))
                    .map_err(|e| format!("rewinding {}-{}: {e}", tp.topic, tp.partition))?;
            }
        }
        if shown > 0 {
            consumer
                .commit()
                .await
                .map_err(|e| format!("committing offsets: {e}"))?;
        }
    }
    consumer
        .close(ShutdownMode::Default)
        .await
        .map_err(|e| format!("leaving group {group}: {e}"))
}
