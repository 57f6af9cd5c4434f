//! `weir offsets TOPIC`.

use std::collections::BTreeMap;

use weir_client::admin::OffsetSpec;

use crate::args::{ConnectArgs, OffsetsArgs};
use crate::connect::{admin, topic};

/// Runs the command: one line per partition, `partition earliest latest`.
pub async fn run(args: OffsetsArgs, connect: &ConnectArgs) -> Result<(), String> {
    let name = args.topic();
    let admin = admin(connect).await?;
    topic(&admin, name).await?;
    let mut rows: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    for (spec, latest) in [(OffsetSpec::Earliest, false), (OffsetSpec::Latest, true)] {
        let offsets = admin
            .list_topic_offsets(name, spec, false)
            .await
            .map_err(|e| format!("offsets of {name}: {e}"))?;
        for o in offsets {
            let row = rows.entry(o.partition).or_insert((-1, -1));
            if latest {
                row.1 = o.offset;
            } else {
                row.0 = o.offset;
            }
        }
    }
    println!("partition\tearliest\tlatest");
    for (p, (earliest, latest)) in rows {
        println!("{p}\t{earliest}\t{latest}");
    }
    Ok(())
}
