//! `weir app describe|tasks`: a running weir-streams application, read from
//! the broker alone (no access to its instances).
//!
//! The application's consumer group is its `application.id`. DescribeGroups
//! gives every member and its consumer-protocol subscription and assignment,
//! whose user data the streams assignor wrote (decoded with
//! [`weir_streams::assignor_info`]): the member's process id and
//! `application.server`, its active, standby and warmup tasks. OffsetFetch
//! and ListOffsets give the lag of every input partition, and the topics
//! named `<app>-<store>-changelog` the changelogs' end offsets.
//!
//! What the broker does not record: which subtopology reads which topic, and
//! which owns which store. A topic is mapped to subtopology `s` when every
//! member that is assigned one of its partitions `p` runs exactly one task
//! `s_p`; otherwise (say, with no members) its partitions show as task `?_p`.
//! Changelog partition `p` is shown with task `s_p` when the application has
//! one subtopology only; otherwise only in the changelog list.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Value, json};
use weir_client::admin::{Admin, GroupDescription, OffsetSpec};
use weir_group::consumer_protocol::{Assignment, Subscription};
use weir_streams::assignor_info::{AssignmentInfo, decode_assignment, decode_subscription};
use weir_streams::task::TaskId;

use crate::args::ConnectArgs;

/// The `app` subcommands.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum AppCommand {
    /// Summary: group state, members, total input lag, changelog topics.
    ///
    /// Per member: its instance id, client id, host and its active, standby
    /// and warmup task counts (from the streams assignor's user data). The
    /// generation is the one of the members' owned partitions at their last
    /// join (DescribeGroups does not report the coordinator's).
    Describe {
        /// The application.id (the application's consumer group).
        app: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One line per task and role: owner, role, input lag, changelog ends.
    ///
    /// Roles are active, standby, warmup, or unassigned. The broker does not
    /// record which subtopology reads a topic: it is taken from the current
    /// assignments, so a partition no member owns now (say, with no running
    /// instance) shows as task `?_p`, one line per topic-partition.
    /// Changelog end offsets are shown per task only when the application
    /// has a single subtopology (`app describe` lists them all).
    Tasks {
        /// The application.id (the application's consumer group).
        app: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Runs an `app` subcommand and prints its result.
///
/// # Errors
/// A message naming what failed, or that no such application exists.
pub async fn run(connect: &ConnectArgs, cmd: AppCommand) -> Result<(), String> {
    let admin = crate::connect::admin(connect).await?;
    let (app, json) = match &cmd {
        AppCommand::Describe { app, json } | AppCommand::Tasks { app, json } => (app, *json),
    };
    let snapshot = snapshot(&admin, app).await?;
    if snapshot.members.is_empty() && snapshot.offsets.is_empty() && snapshot.changelogs.is_empty()
    {
        return Err(format!(
            "no application {app}: no group members, committed offsets or changelog topics"
        ));
    }
    let out = match (&cmd, json) {
        (AppCommand::Describe { .. }, false) => render_describe(&snapshot),
        (AppCommand::Describe { .. }, true) => format!("{:#}\n", describe_json(&snapshot)),
        (AppCommand::Tasks { .. }, false) => render_tasks(&snapshot),
        (AppCommand::Tasks { .. }, true) => format!("{:#}\n", tasks_json(&snapshot)),
    };
    print!("{out}");
    Ok(())
}

/// One member, decoded.
#[derive(Debug, Clone, Default)]
struct Member {
    member_id: String,
    instance_id: Option<String>,
    client_id: String,
    host: String,
    process_id: Option<String>,
    application_server: Option<String>,
    /// The generation of the partitions it owned at its last join.
    generation: Option<i32>,
    partitions: Vec<(String, i32)>,
    tasks: Option<AssignmentInfo>,
    /// Why its subscription or assignment did not decode.
    problem: Option<String>,
}

impl Member {
    /// The instance id, or the member id of a dynamic member.
    fn owner(&self) -> &str {
        self.instance_id.as_deref().unwrap_or(&self.member_id)
    }
}

/// Committed offset (if any) and end offset (if known) per input partition.
type Offsets = BTreeMap<(String, i32), (Option<i64>, Option<i64>)>;

/// What the broker says about an application.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    app: String,
    state: String,
    protocol: String,
    members: Vec<Member>,
    offsets: Offsets,
    /// End offset per partition of each changelog topic.
    changelogs: BTreeMap<String, BTreeMap<i32, i64>>,
}

fn decode_member(m: &weir_client::admin::MemberDescription) -> Member {
    let mut member = Member {
        member_id: m.member_id.clone(),
        instance_id: m.group_instance_id.clone(),
        client_id: m.client_id.clone(),
        host: m.client_host.clone(),
        ..Member::default()
    };
    let mut problems = Vec::new();
    match Subscription::decode(&m.metadata) {
        Ok((_, s)) => {
            member.generation = (s.generation_id >= 0).then_some(s.generation_id);
            match s.user_data.as_deref().map(decode_subscription) {
                Some(Ok(info)) => {
                    member.process_id = Some(info.process_id);
                    member.application_server = info.application_server;
                }
                Some(Err(e)) => problems.push(e.to_string()),
                None => problems.push("no weir-streams subscription user data".to_owned()),
            }
        }
        Err(e) => problems.push(format!("subscription: {e}")),
    }
    if !m.assignment.is_empty() {
        match Assignment::decode(&m.assignment) {
            Ok((_, a)) => {
                member.partitions = a
                    .assigned_partitions
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
                    .collect();
                match a.user_data.as_deref().map(decode_assignment) {
                    Some(Ok(info)) => member.tasks = Some(info),
                    Some(Err(e)) => problems.push(e.to_string()),
                    None => problems.push("no weir-streams assignment user data".to_owned()),
                }
            }
            Err(e) => problems.push(format!("assignment: {e}")),
        }
    }
    member.problem = (!problems.is_empty()).then(|| problems.join("; "));
    member
}

async fn snapshot(admin: &Admin, app: &str) -> Result<Snapshot, String> {
    let described = admin
        .describe_groups(&[app])
        .await
        .map_err(|e| format!("describing group {app}: {e}"))?;
    let group = described
        .into_iter()
        .find(|g| g.group_id == app)
        .unwrap_or_else(|| GroupDescription {
            group_id: app.to_owned(),
            state: "Dead".to_owned(),
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        });
    let members: Vec<Member> = group.members.iter().map(decode_member).collect();

    let committed = admin
        .list_group_offsets(app)
        .await
        .map_err(|e| format!("committed offsets of {app}: {e}"))?;
    let mut offsets: Offsets = BTreeMap::new();
    for c in committed {
        offsets.insert((c.topic, c.partition), (Some(c.offset), None));
    }
    for m in &members {
        for tp in &m.partitions {
            offsets.entry(tp.clone()).or_insert((None, None));
        }
    }
    let topics: BTreeSet<String> = offsets.keys().map(|(t, _)| t.clone()).collect();
    for topic in topics {
        let ends = end_offsets(admin, &topic).await;
        for ((t, p), (_, end)) in offsets.iter_mut() {
            if *t == topic {
                *end = ends.get(p).copied();
            }
        }
    }

    let prefix = format!("{app}-");
    let listed = admin
        .list_topics()
        .await
        .map_err(|e| format!("listing topics: {e}"))?;
    let mut changelogs = BTreeMap::new();
    for t in listed {
        if t.name.starts_with(&prefix) && t.name.ends_with("-changelog") {
            let ends = end_offsets(admin, &t.name).await;
            changelogs.insert(t.name, ends);
        }
    }
    Ok(Snapshot {
        app: app.to_owned(),
        state: group.state,
        protocol: group.protocol,
        members,
        offsets,
        changelogs,
    })
}

/// The end offset of every partition of a topic (empty for a topic deleted
/// since: its lag is unknown).
async fn end_offsets(admin: &Admin, topic: &str) -> BTreeMap<i32, i64> {
    admin
        .list_topic_offsets(topic, OffsetSpec::Latest, false)
        .await
        .map(|listed| {
            listed
                .into_iter()
                .map(|o| (o.partition, o.offset))
                .collect()
        })
        .unwrap_or_default()
}

/// One input partition of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Input {
    topic: String,
    partition: i32,
    committed: Option<i64>,
    end: Option<i64>,
}

impl Input {
    fn lag(&self) -> Option<i64> {
        match (self.committed, self.end) {
            (Some(c), Some(e)) => Some((e - c).max(0)),
            _ => None,
        }
    }
}

/// One line of `weir app tasks`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TaskRow {
    /// `s_p`, or `?_p` when the subtopology is unknown.
    task: String,
    /// The owner's instance id (or member id); `None`: nobody owns it now.
    owner: Option<String>,
    member: Option<String>,
    /// `active`, `standby`, `warmup`, or `unassigned`.
    role: &'static str,
    inputs: Vec<Input>,
    /// Changelog topic and its end offset at the task's partition.
    changelogs: Vec<(String, i64)>,
}

impl TaskRow {
    /// The task's input lag; `None` when no input partition's lag is known.
    fn lag(&self) -> Option<i64> {
        let lags: Vec<i64> = self.inputs.iter().filter_map(Input::lag).collect();
        (!lags.is_empty()).then(|| lags.iter().sum())
    }
}

/// Subtopology of each topic, where the assignments reveal it: every member
/// assigned partition `p` of the topic runs exactly one task `s_p`, and
/// always the same `s`.
fn topic_subtopologies(members: &[Member]) -> BTreeMap<String, u32> {
    let mut candidates: BTreeMap<String, Option<BTreeSet<u32>>> = BTreeMap::new();
    for m in members {
        let Some(info) = &m.tasks else { continue };
        for (topic, p) in &m.partitions {
            let here: BTreeSet<u32> = info
                .active
                .iter()
                .filter(|t| i64::from(t.partition) == i64::from(*p))
                .map(|t| t.subtopology)
                .collect();
            let entry = candidates.entry(topic.clone()).or_insert(None);
            *entry = Some(match entry.take() {
                None => here,
                Some(before) => before.intersection(&here).copied().collect(),
            });
        }
    }
    candidates
        .into_iter()
        .filter_map(
            |(topic, set)| match set.as_ref().map(|s| s.iter().collect::<Vec<_>>()) {
                Some(one) if one.len() == 1 => Some((topic, *one[0])),
                _ => None,
            },
        )
        .collect()
}

fn task_rows(s: &Snapshot) -> Vec<TaskRow> {
    let by_topic = topic_subtopologies(&s.members);
    // Inputs of every known task, and of the partitions whose task is unknown.
    let mut inputs: BTreeMap<TaskId, Vec<Input>> = BTreeMap::new();
    let mut unknown: Vec<Input> = Vec::new();
    for ((topic, partition), (committed, end)) in &s.offsets {
        let input = Input {
            topic: topic.clone(),
            partition: *partition,
            committed: *committed,
            end: *end,
        };
        match (by_topic.get(topic), u32::try_from(*partition)) {
            (Some(sub), Ok(p)) => inputs.entry(TaskId::new(*sub, p)).or_default().push(input),
            _ => unknown.push(input),
        }
    }
    // Who runs what.
    let mut roles: BTreeMap<TaskId, Vec<(&Member, &'static str)>> = BTreeMap::new();
    for m in &s.members {
        let Some(info) = &m.tasks else { continue };
        for (set, role) in [
            (&info.active, "active"),
            (&info.standby, "standby"),
            (&info.warmup, "warmup"),
        ] {
            for t in set {
                roles.entry(*t).or_default().push((m, role));
            }
        }
    }
    // Active first, then standbys, then warmups.
    let rank = |role: &str| match role {
        "active" => 0,
        "standby" => 1,
        _ => 2,
    };
    for owners in roles.values_mut() {
        owners.sort_by_key(|(_, role)| rank(role));
    }
    let subtopologies: BTreeSet<u32> = roles
        .keys()
        .chain(inputs.keys())
        .map(|t| t.subtopology)
        .collect();
    let single = if subtopologies.len() == 1 {
        subtopologies.first().copied()
    } else {
        None
    };
    let changelogs_of = |partition: i64, sub: Option<u32>| -> Vec<(String, i64)> {
        if sub.is_none() || sub != single {
            return Vec::new();
        }
        s.changelogs
            .iter()
            .filter_map(|(topic, ends)| {
                let p = i32::try_from(partition).ok()?;
                ends.get(&p).map(|e| (topic.clone(), *e))
            })
            .collect()
    };
    let tasks: BTreeSet<TaskId> = roles.keys().chain(inputs.keys()).copied().collect();
    let mut rows = Vec::new();
    for t in tasks {
        let task_inputs = inputs.get(&t).cloned().unwrap_or_default();
        let changelogs = changelogs_of(i64::from(t.partition), Some(t.subtopology));
        match roles.get(&t) {
            Some(owners) => {
                for (m, role) in owners {
                    rows.push(TaskRow {
                        task: t.to_string(),
                        owner: Some(m.owner().to_owned()),
                        member: Some(m.member_id.clone()),
                        role,
                        inputs: task_inputs.clone(),
                        changelogs: changelogs.clone(),
                    });
                }
            }
            None => rows.push(TaskRow {
                task: t.to_string(),
                owner: None,
                member: None,
                role: "unassigned",
                inputs: task_inputs,
                changelogs,
            }),
        }
    }
    for input in unknown {
        let owner = s.members.iter().find(|m| {
            m.partitions
                .iter()
                .any(|(t, p)| *t == input.topic && *p == input.partition)
        });
        rows.push(TaskRow {
            task: format!("?_{}", input.partition),
            owner: owner.map(|m| m.owner().to_owned()),
            member: owner.map(|m| m.member_id.clone()),
            role: if owner.is_some() {
                "active"
            } else {
                "unassigned"
            },
            inputs: vec![input],
            changelogs: Vec::new(),
        });
    }
    rows
}

fn total_lag(s: &Snapshot) -> i64 {
    s.offsets
        .values()
        .filter_map(|(c, e)| Some((e.as_ref()? - c.as_ref()?).max(0)))
        .sum()
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn counts(m: &Member) -> (usize, usize, usize) {
    m.tasks.as_ref().map_or((0, 0, 0), |i| {
        (i.active.len(), i.standby.len(), i.warmup.len())
    })
}

fn generation(s: &Snapshot) -> Option<i32> {
    s.members.iter().filter_map(|m| m.generation).max()
}

fn render_describe(s: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "application {} group state {} protocol {} generation {} ({} members)",
        s.app,
        s.state,
        if s.protocol.is_empty() {
            "-"
        } else {
            &s.protocol
        },
        opt(generation(s)),
        s.members.len()
    );
    let _ = writeln!(
        out,
        "  {:<20} {:<20} {:<16} {:>6} {:>7} {:>6}  MEMBER",
        "INSTANCE", "CLIENT", "HOST", "ACTIVE", "STANDBY", "WARMUP"
    );
    for m in &s.members {
        let (a, st, w) = counts(m);
        let _ = writeln!(
            out,
            "  {:<20} {:<20} {:<16} {a:>6} {st:>7} {w:>6}  {}{}",
            m.instance_id.as_deref().unwrap_or("-"),
            m.client_id,
            m.host,
            m.member_id,
            m.problem
                .as_deref()
                .map(|p| format!(" ({p})"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "  total input lag {} over {} partitions",
        total_lag(s),
        s.offsets.len()
    );
    if s.changelogs.is_empty() {
        let _ = writeln!(out, "  changelogs: -");
    }
    for (topic, ends) in &s.changelogs {
        let _ = writeln!(
            out,
            "  changelog {topic}: {} partitions, {} records (sum of end offsets)",
            ends.len(),
            ends.values().sum::<i64>()
        );
    }
    out
}

fn describe_json(s: &Snapshot) -> Value {
    json!({
        "application": s.app,
        "state": s.state,
        "protocol": s.protocol,
        "generation": generation(s),
        "members": s.members.iter().map(|m| {
            let (a, st, w) = counts(m);
            json!({
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "process_id": m.process_id,
                "application_server": m.application_server,
                "active": a,
                "standby": st,
                "warmup": w,
                "error": m.problem,
            })
        }).collect::<Vec<_>>(),
        "total_lag": total_lag(s),
        "changelogs": s.changelogs.iter().map(|(topic, ends)| json!({
            "topic": topic,
            "end_offsets": ends.iter().map(|(p, e)| json!({"partition": p, "end": e})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn render_tasks(s: &Snapshot) -> String {
    let mut out = format!(
        "{:<8} {:<20} {:<10} {:>8}  {:<30} CHANGELOG END\n",
        "TASK", "OWNER", "ROLE", "LAG", "INPUTS"
    );
    for r in task_rows(s) {
        let inputs: Vec<String> = r
            .inputs
            .iter()
            .map(|i| format!("{}-{}", i.topic, i.partition))
            .collect();
        let changelogs: Vec<String> = r
            .changelogs
            .iter()
            .map(|(t, e)| format!("{t}={e}"))
            .collect();
        let _ = writeln!(
            out,
            "{:<8} {:<20} {:<10} {:>8}  {:<30} {}",
            r.task,
            r.owner.as_deref().unwrap_or("-"),
            r.role,
            opt(r.lag()),
            if inputs.is_empty() {
                "-".to_owned()
            } else {
                inputs.join(",")
            },
            if changelogs.is_empty() {
                "-".to_owned()
            } else {
                changelogs.join(",")
            }
        );
    }
    out
}

fn tasks_json(s: &Snapshot) -> Value {
    json!({
        "application": s.app,
        "state": s.state,
        "tasks": task_rows(s).iter().map(|r| json!({
            "task": r.task,
            "owner": r.owner,
            "member": r.member,
            "role": r.role,
            "lag": r.lag(),
            "inputs": r.inputs.iter().map(|i| json!({
                "topic": i.topic,
                "partition": i.partition,
                "committed": i.committed,
                "end": i.end,
                "lag": i.lag(),
            })).collect::<Vec<_>>(),
            "changelogs": r.changelogs.iter().map(|(t, e)| json!({"topic": t, "end": e})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, partitions: &[(&str, i32)], active: &[(u32, u32)]) -> Member {
        Member {
            member_id: format!("{id}-m"),
            instance_id: Some(id.to_owned()),
            partitions: partitions
                .iter()
                .map(|(t, p)| ((*t).to_owned(), *p))
                .collect(),
            tasks: Some(AssignmentInfo {
                active: active.iter().map(|(s, p)| TaskId::new(*s, *p)).collect(),
                ..AssignmentInfo::default()
            }),
            ..Member::default()
        }
    }

    #[test]
    fn topics_map_to_subtopologies_only_when_the_assignments_say_so() {
        // a runs 0_0 and 1_0 on partition 0 of both topics: ambiguous alone,
        // b's 0_1 (in, 1) and 1_1 (rep, 1) do not settle it either.
        let a = member("a", &[("in", 0), ("rep", 0)], &[(0, 0), (1, 0)]);
        let b = member("b", &[("in", 1)], &[(0, 1)]);
        let map = topic_subtopologies(&[a.clone(), b]);
        assert_eq!(map.get("in"), Some(&0));
        assert_eq!(map.get("rep"), None);
        let c = member("c", &[("rep", 1)], &[(1, 1)]);
        let map = topic_subtopologies(&[a, c]);
        assert_eq!(map.get("rep"), Some(&1));
    }

    #[test]
    fn rows_show_lag_per_task_and_unknown_partitions_as_question_marks() {
        let s = Snapshot {
            app: "app".into(),
            members: vec![member("a", &[("in", 0)], &[(0, 0)])],
            offsets: [
                (("in".to_owned(), 0), (Some(3), Some(5))),
                (("in".to_owned(), 1), (Some(4), Some(4))),
                (("other".to_owned(), 0), (Some(1), Some(9))),
            ]
            .into(),
            changelogs: [("app-counts-changelog".to_owned(), [(0, 7), (1, 2)].into())].into(),
            ..Snapshot::default()
        };
        let rows = task_rows(&s);
        let shown: Vec<(String, Option<String>, &str, Option<i64>)> = rows
            .iter()
            .map(|r| (r.task.clone(), r.owner.clone(), r.role, r.lag()))
            .collect();
        assert_eq!(
            shown,
            [
                ("0_0".into(), Some("a".into()), "active", Some(2)),
                ("0_1".into(), None, "unassigned", Some(0)),
                ("?_0".into(), None, "unassigned", Some(8)),
            ]
        );
        assert_eq!(rows[0].changelogs, [("app-counts-changelog".into(), 7)]);
        assert_eq!(total_lag(&s), 10);
        assert!(render_tasks(&s).contains("?_0"));
    }
}
