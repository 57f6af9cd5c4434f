//! `weir groups list|describe`: consumer groups, their members, what each
//! member is assigned, and the lag of every committed partition.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use weir_client::ClientError;
use weir_client::admin::{Admin, GroupDescription, OffsetSpec};
use weir_group::consumer_protocol::Assignment;

use crate::args::ConnectArgs;

/// The `groups` subcommands.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum GroupsCommand {
    /// Lists every group with its protocol type and state.
    List {},
    /// Shows members, assignments, committed offsets and lag of groups.
    Describe {
        /// The groups to describe.
        #[arg(required = true)]
        groups: Vec<String>,
    },
}

/// Runs a `groups` subcommand against the cluster (with its `-X`
/// properties) and prints the result.
///
/// # Errors
/// A message naming what failed (no brokers, connecting, listing, describing).
pub async fn run(connect: &ConnectArgs, cmd: GroupsCommand) -> Result<(), String> {
    let admin = crate::connect::admin(connect).await?;
    match cmd {
        GroupsCommand::List {} => {
            let groups = admin
                .list_groups()
                .await
                .map_err(|e| format!("listing groups: {e}"))?;
            print!("{}", render_list(&groups));
        }
        GroupsCommand::Describe { groups } => {
            let mut unknown = Vec::new();
            for name in &groups {
                let described = match admin.describe_groups(&[name.as_str()]).await {
                    Ok(mut d) if d.len() == 1 => d.remove(0),
                    Ok(_) => return Err(format!("describing {name}: no answer for it")),
                    // Kafka 4 answers this for a group that does not exist.
                    Err(ClientError::Server { code, .. }) if code.code == GROUP_ID_NOT_FOUND => {
                        unknown.push(name.as_str());
                        continue;
                    }
                    Err(e) => return Err(format!("describing {name}: {e}")),
                };
                // Older brokers describe a group that does not exist as Dead;
                // one that only has committed offsets left is Empty.
                if described.state == "Dead" {
                    unknown.push(name.as_str());
                    continue;
                }
                let offsets = group_offsets(&admin, &described.group_id).await?;
                print!("{}", render_description(&described, &offsets));
            }
            match unknown.as_slice() {
                [] => {}
                [one] => return Err(format!("unknown group {one}")),
                many => return Err(format!("unknown groups {}", many.join(", "))),
            }
        }
    }
    Ok(())
}

/// Kafka's `GROUP_ID_NOT_FOUND`.
const GROUP_ID_NOT_FOUND: i16 = 69;

/// Committed offset and log end offset per (topic, partition).
type Offsets = BTreeMap<(String, i32), (i64, Option<i64>)>;

async fn group_offsets(admin: &Admin, group: &str) -> Result<Offsets, String> {
    let committed = admin
        .list_group_offsets(group)
        .await
        .map_err(|e| format!("committed offsets of {group}: {e}"))?;
    let topics: BTreeSet<&str> = committed.iter().map(|c| c.topic.as_str()).collect();
    let mut ends: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for topic in topics {
        // A topic deleted since the commit has no end: its lag is unknown.
        if let Ok(listed) = admin
            .list_topic_offsets(topic, OffsetSpec::Latest, false)
            .await
        {
            for o in listed {
                ends.insert((topic.to_owned(), o.partition), o.offset);
            }
        }
    }
    Ok(committed
        .into_iter()
        .map(|c| {
            let key = (c.topic, c.partition);
            let end = ends.get(&key).copied();
            (key, (c.offset, end))
        })
        .collect())
}

fn render_list(groups: &[weir_client::admin::GroupListing]) -> String {
    let mut out = format!("{:<40} {:<12} {}\n", "GROUP", "TYPE", "STATE");
    for g in groups {
        let state = if g.state.is_empty() { "-" } else { &g.state };
        let _ = writeln!(out, "{:<40} {:<12} {}", g.group_id, g.protocol_type, state);
    }
    out
}

/// The member's partitions, decoded from its consumer-protocol assignment.
fn assigned(bytes: &[u8]) -> Result<Vec<(String, i32)>, String> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let (_, a) = Assignment::decode(bytes).map_err(|e| e.to_string())?;
    Ok(a.assigned_partitions
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
        .collect())
}

fn render_description(group: &GroupDescription, offsets: &Offsets) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "group {} state {} protocol {} ({} members)",
        group.group_id,
        group.state,
        if group.protocol.is_empty() {
            "-"
        } else {
            &group.protocol
        },
        group.members.len()
    );
    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    for m in &group.members {
        let instance = m.group_instance_id.as_deref().unwrap_or("-");
        let _ = writeln!(
            out,
            "  member {} instance {} client {} host {}",
            m.member_id, instance, m.client_id, m.client_host
        );
        match assigned(&m.assignment) {
            Ok(partitions) => {
                let listed: Vec<String> =
                    partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
                let _ = writeln!(
                    out,
                    "    assigned: {}",
                    if listed.is_empty() {
                        "-".to_owned()
                    } else {
                        listed.join(" ")
                    }
                );
                for tp in partitions {
                    owner.insert(tp, m.member_id.clone());
                }
            }
            Err(e) => {
                let _ = writeln!(
                    out,
                    "    assigned: (not a consumer-protocol assignment: {e})"
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "  {:<30} {:>9} {:>12} {:>12} {:>8}  OWNER",
        "TOPIC", "PARTITION", "COMMITTED", "END", "LAG"
    );
    let mut total = 0i64;
    for ((topic, partition), (committed, end)) in offsets {
        let (end_s, lag_s) = match end {
            Some(end) => {
                let lag = (end - committed).max(0);
                total += lag;
                (end.to_string(), lag.to_string())
            }
            None => ("-".to_owned(), "-".to_owned()),
        };
        let who = owner
            .get(&(topic.clone(), *partition))
            .map_or("-", String::as_str);
        let _ = writeln!(
            out,
            "  {topic:<30} {partition:>9} {committed:>12} {end_s:>12} {lag_s:>8}  {who}"
        );
    }
    let _ = writeln!(out, "  total lag {total}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_client::admin::MemberDescription;
    use weir_group::consumer_protocol::TopicPartitions;

    #[test]
    fn describe_shows_assignments_owners_and_lag() {
        let assignment = Assignment {
            assigned_partitions: vec![TopicPartitions {
                topic: "orders".into(),
                partitions: vec![0, 2],
            }],
            user_data: None,
        }
        .encode(3)
        .unwrap();
        let group = GroupDescription {
            group_id: "g".into(),
            state: "Stable".into(),
            protocol_type: "consumer".into(),
            protocol: "cooperative-sticky".into(),
            members: vec![MemberDescription {
                member_id: "m-1".into(),
                group_instance_id: Some("i-1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                metadata: bytes::Bytes::new(),
                assignment,
            }],
        };
        let offsets: Offsets = [
            (("orders".to_owned(), 0), (5, Some(12))),
            (("orders".to_owned(), 1), (3, None)),
        ]
        .into();
        let text = render_description(&group, &offsets);
        assert!(text.contains("assigned: orders-0 orders-2"), "{text}");
        assert!(text.contains("instance i-1"), "{text}");
        let p0 = text
            .lines()
            .find(|l| l.trim_start().starts_with("orders") && l.contains(" 12 "))
            .unwrap();
        assert!(p0.contains(" 7 ") && p0.ends_with("m-1"), "{p0}");
        assert!(text.contains("total lag 7"), "{text}");
    }
}
