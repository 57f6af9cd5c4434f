//! The streams assignor: places tasks, not partitions, on instances.
//!
//! Each instance is one group member (see the crate README), so a client
//! of weir-group's high-availability task assignor is a member, with its
//! stream-thread count as capacity. Its subscription carries
//! [`SubscriptionInfo`]: a version, its process id, its thread count, its
//! `application.server` and the *offset sum* of every task whose state it
//! holds (the sum of its stores' committed changelog offsets, or
//! [`OFFSET_SUM_RUNNING`] for a task it runs now). The leader lists the
//! changelogs' end offsets, derives each member's lag per task and asks the
//! task assignor; a task's input partitions (one per source topic of its
//! subtopology, so co-partitioned topics stay together) go to the member
//! that runs it. Under cooperative rebalancing a partition another member
//! still owns is withheld for one round: its owner revokes it and rejoins.
//!
//! A stateful task moves only to a member caught up on it (within
//! `acceptable.recovery.lag`); otherwise it stays where it is and the member
//! it should go to gets a warmup replica, which follows the changelog like
//! a standby. The moment a warmup catches up, its instance rejoins with its
//! new offset sums, and that follow-up rebalance moves the task (Kafka
//! Streams waits for the probing rebalance; here the probing interval is
//! only the fallback).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use weir_client::Cluster;
use weir_client::admin::{Admin, OffsetSpec};
use weir_group::GroupError;
use weir_group::assignor::custom::{AssignFuture, CustomGroup, GroupAssignor, MemberAssignment};
use weir_group::assignor::{RebalanceProtocol, TopicPartition};
use weir_group::task_assignor::{
    self, ClientState, OFFSET_SUM_RUNNING, TaskAssignmentInput, TaskAssignorConfig,
};

use crate::task::TaskId;
use crate::topology::Topology;

/// The protocol name in JoinGroup.
pub const PROTOCOL: &str = "weir-streams";
/// The version of [`SubscriptionInfo`] and [`AssignmentInfo`] this build
/// writes. A later version must keep these fields first, so this build can
/// read a newer member's data during a rolling upgrade. Version 2 adds the
/// subscription's `draining` flag (a version 1 member never drains);
/// version 3 its `warmups` (an older member reports none). The assignment
/// is the same in versions 2 and 3.
const VERSION: u16 = 3;

/// One subtopology as the assignor needs it.
#[derive(Debug, Clone)]
pub(crate) struct SubLayout {
    pub id: u32,
    /// Its source topics, resolved.
    pub topics: Vec<String>,
    pub partitions: i32,
    /// Changelog topics of its logged stores (empty: a stateless task).
    pub changelogs: Vec<String>,
}

/// The task layout of a topology for `application_id`.
pub(crate) fn layout(
    topology: &Topology,
    application_id: &str,
    partitions: &BTreeMap<u32, i32>,
) -> Vec<SubLayout> {
    (0..topology.subtopology_count())
        .filter_map(|s| u32::try_from(s).ok())
        .map(|id| SubLayout {
            id,
            topics: topology.source_topics(id, application_id),
            partitions: partitions.get(&id).copied().unwrap_or(0),
            changelogs: topology
                .subtopology_stores(id)
                .into_iter()
                .filter(|spec| spec.logged)
                .map(|spec| spec.changelog_topic(application_id))
                .collect(),
        })
        .collect()
}

/// What a member tells the leader (the user data of its consumer-protocol
/// subscription).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionInfo {
    /// The version the member wrote.
    pub version: u16,
    /// The instance's process id (stable across restarts with the same
    /// state directory).
    pub process_id: String,
    /// Its `num.stream.threads`.
    pub threads: u32,
    /// Its `application.server`, if set.
    pub application_server: Option<String>,
    /// Offset sum per task whose state this instance holds.
    pub offset_sums: BTreeMap<TaskId, i64>,
    /// The instance is closing gracefully: hand its tasks to members caught
    /// up on them, and keep those nobody is caught up on (with warmups
    /// elsewhere) until one is (version 2).
    pub draining: bool,
    /// The warmups the instance restores now, from its last assignment
    /// (version 3): the leader moves those tasks to it first.
    pub warmups: BTreeSet<TaskId>,
}

/// What the leader tells a member, besides its partitions (the user data
/// of its consumer-protocol assignment).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AssignmentInfo {
    /// The version the leader wrote.
    pub version: u16,
    /// The tasks the member runs.
    pub active: BTreeSet<TaskId>,
    /// The tasks it keeps standby replicas of.
    pub standby: BTreeSet<TaskId>,
    /// Warmups: kept like standbys; when one catches up its instance asks
    /// for the follow-up rebalance that moves the task to it.
    pub warmup: BTreeSet<TaskId>,
    /// When the follow-up rebalance is due in any case (the probing
    /// interval, in ms), if warmups were placed.
    pub probing_ms: Option<u64>,
    /// Every member's `application.server` with the tasks it runs, for
    /// interactive queries (version 2).
    pub hosts: BTreeMap<String, BTreeSet<TaskId>>,
}

/// Why bytes do not decode.
fn short(what: &str) -> String {
    format!("{what}: truncated")
}

fn get_string(buf: &mut &[u8], what: &str) -> Result<Option<String>, String> {
    if buf.remaining() < 2 {
        return Err(short(what));
    }
    let len = buf.get_i16();
    if len < 0 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| short(what))?;
    if buf.remaining() < len {
        return Err(short(what));
    }
    let s = std::str::from_utf8(&buf[..len]).map_err(|e| format!("{what}: {e}"))?;
    let s = s.to_owned();
    buf.advance(len);
    Ok(Some(s))
}

fn put_string(out: &mut BytesMut, s: Option<&str>) {
    match s {
        // Longer strings are cut: process ids and hosts are short.
        Some(s) => {
            let bytes = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
            out.put_i16(i16::try_from(bytes.len()).unwrap_or(i16::MAX));
            out.put_slice(bytes);
        }
        None => out.put_i16(-1),
    }
}

/// Reads a count of entries of `entry` bytes each, refusing one the
/// remaining bytes cannot hold.
fn get_count(buf: &mut &[u8], entry: usize, what: &str) -> Result<usize, String> {
    if buf.remaining() < 4 {
        return Err(short(what));
    }
    let n = buf.get_u32();
    let n = usize::try_from(n).map_err(|_| short(what))?;
    if n.saturating_mul(entry) > buf.remaining() {
        return Err(format!(
            "{what}: {n} entries announced, {} bytes left",
            buf.remaining()
        ));
    }
    Ok(n)
}

fn get_tasks(buf: &mut &[u8], what: &str) -> Result<BTreeSet<TaskId>, String> {
    let n = get_count(buf, 8, what)?;
    let mut tasks = BTreeSet::new();
    for _ in 0..n {
        tasks.insert(TaskId::new(buf.get_u32(), buf.get_u32()));
    }
    Ok(tasks)
}

fn put_tasks(out: &mut BytesMut, tasks: &BTreeSet<TaskId>) {
    out.put_u32(u32::try_from(tasks.len()).unwrap_or(u32::MAX));
    for t in tasks {
        out.put_u32(t.subtopology);
        out.put_u32(t.partition);
    }
}

impl SubscriptionInfo {
    pub(crate) fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u16(VERSION);
        put_string(&mut out, Some(&self.process_id));
        out.put_u32(self.threads);
        put_string(&mut out, self.application_server.as_deref());
        out.put_u32(u32::try_from(self.offset_sums.len()).unwrap_or(u32::MAX));
        for (task, sum) in &self.offset_sums {
            out.put_u32(task.subtopology);
            out.put_u32(task.partition);
            out.put_i64(*sum);
        }
        out.put_u8(u8::from(self.draining));
        put_tasks(&mut out, &self.warmups);
        out.freeze()
    }

    /// Decodes a member's subscription user data (of this or a later version).
    pub(crate) fn decode(mut buf: &[u8]) -> Result<Self, String> {
        let buf = &mut buf;
        if buf.remaining() < 2 {
            return Err(short("subscription version"));
        }
        let version = buf.get_u16();
        if version == 0 {
            return Err("subscription version 0".into());
        }
        let process_id = get_string(buf, "process id")?.unwrap_or_default();
        if buf.remaining() < 4 {
            return Err(short("thread count"));
        }
        let threads = buf.get_u32();
        let application_server = get_string(buf, "application.server")?;
        let n = get_count(buf, 16, "offset sums")?;
        let mut offset_sums = BTreeMap::new();
        for _ in 0..n {
            let task = TaskId::new(buf.get_u32(), buf.get_u32());
            offset_sums.insert(task, buf.get_i64());
        }
        let draining = if version >= 2 {
            if buf.remaining() < 1 {
                return Err(short("draining flag"));
            }
            buf.get_u8() != 0
        } else {
            false
        };
        let warmups = if version >= 3 {
            get_tasks(buf, "warmup tasks")?
        } else {
            BTreeSet::new()
        };
        Ok(SubscriptionInfo {
            version,
            process_id,
            threads,
            application_server,
            offset_sums,
            draining,
            warmups,
        })
    }
}

impl AssignmentInfo {
    pub(crate) fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u16(VERSION);
        put_tasks(&mut out, &self.active);
        put_tasks(&mut out, &self.standby);
        put_tasks(&mut out, &self.warmup);
        out.put_i64(
            self.probing_ms
                .map_or(-1, |ms| i64::try_from(ms).unwrap_or(i64::MAX)),
        );
        out.put_u32(u32::try_from(self.hosts.len()).unwrap_or(u32::MAX));
        for (host, tasks) in &self.hosts {
            put_string(&mut out, Some(host));
            put_tasks(&mut out, tasks);
        }
        out.freeze()
    }

    pub(crate) fn decode(mut buf: &[u8]) -> Result<Self, String> {
        let buf = &mut buf;
        if buf.remaining() < 2 {
            return Err(short("assignment version"));
        }
        let version = buf.get_u16();
        let active = get_tasks(buf, "active tasks")?;
        let standby = get_tasks(buf, "standby tasks")?;
        let warmup = get_tasks(buf, "warmup tasks")?;
        if buf.remaining() < 8 {
            return Err(short("probing interval"));
        }
        let probing_ms = u64::try_from(buf.get_i64()).ok();
        let mut hosts = BTreeMap::new();
        if version >= 2 {
            // Each host takes at least its string's length and a task count.
            let n = get_count(buf, 6, "hosts")?;
            for _ in 0..n {
                let host = get_string(buf, "host")?.unwrap_or_default();
                hosts.insert(host, get_tasks(buf, "host tasks")?);
            }
        }
        Ok(AssignmentInfo {
            version,
            active,
            standby,
            warmup,
            probing_ms,
            hosts,
        })
    }
}

/// The offset sum of the task whose store is `store`: its logged stores'
/// committed changelog offsets of `partition`, added up (`None` when it has
/// none). In-memory stores count for nothing: the sum outlives the task (it
/// is reported after the task closed, and read from the state directory
/// after a restart), and their contents do not.
pub(crate) fn offset_sum(
    store: &weir_store::TaskStore,
    changelogs: &[String],
    partition: i32,
) -> Option<i64> {
    let mut sum: Option<i64> = None;
    for topic in changelogs {
        let tp = weir_store::ChangelogPartition::new(topic.clone(), partition);
        if store.is_volatile(&tp) {
            continue;
        }
        if let weir_store::CommittedOffset::Known(o) = store.committed_offset(&tp) {
            sum = Some(sum.unwrap_or(0).saturating_add(o));
        }
    }
    sum
}

/// The assignor of one instance (see the module docs).
#[derive(Debug)]
pub(crate) struct StreamsAssignor {
    pub app: String,
    pub process_id: String,
    pub threads: u32,
    pub application_server: Option<String>,
    pub layout: Vec<SubLayout>,
    pub standby_replicas: u32,
    pub acceptable_recovery_lag: u64,
    pub max_warmup_replicas: u32,
    pub probing_rebalance_interval: Duration,
    /// Offset sums of the tasks whose state this instance holds, kept by
    /// the runtime (scanned at start, updated at every store commit).
    pub offset_sums: Arc<Mutex<BTreeMap<TaskId, i64>>>,
    /// The last assignment this member received.
    pub assigned: Mutex<Option<(i32, AssignmentInfo)>>,
    /// Set by a graceful close: the next subscriptions say the instance is
    /// draining.
    pub draining: std::sync::atomic::AtomicBool,
}

impl StreamsAssignor {
    /// The last assignment this member received.
    pub(crate) fn assignment(&self) -> Option<AssignmentInfo> {
        self.assigned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, info)| info.clone())
    }

    fn sub(&self, topic: &str) -> Option<&SubLayout> {
        self.layout
            .iter()
            .find(|s| s.topics.iter().any(|t| t == topic))
    }

    /// The tasks whose input partitions are in `partitions`.
    fn tasks_of(&self, partitions: &BTreeSet<TopicPartition>) -> BTreeSet<TaskId> {
        partitions
            .iter()
            .filter_map(|tp| {
                let sub = self.sub(&tp.topic)?;
                Some(TaskId::new(sub.id, u32::try_from(tp.partition).ok()?))
            })
            .collect()
    }

    /// End offset sum of every stateful task: the changelogs' end offsets,
    /// added up per partition.
    ///
    /// The ends are last stable offsets (read_committed), not high
    /// watermarks: changelogs are written in transactions under both
    /// guarantees, and a copy can only ever reach the LSO (its reader is
    /// read_committed). Prevents (review F6): under at-least-once a task's
    /// fence transaction stays open for a whole `commit.interval.ms`, so
    /// against the high watermark every standby lagged by up to 30 s of
    /// changelog writes, never counted as caught up; a draining instance
    /// then kept its tasks until its handover budget ran out.
    async fn end_offset_sums(
        &self,
        cluster: &Cluster,
    ) -> weir_group::Result<BTreeMap<TaskId, u64>> {
        let admin = Admin::new(cluster.clone());
        let mut sums: BTreeMap<TaskId, u64> = BTreeMap::new();
        for sub in &self.layout {
            let partitions: Vec<i32> = (0..sub.partitions).collect();
            for topic in &sub.changelogs {
                let listed = admin
                    .list_offsets(topic, &partitions, OffsetSpec::Latest, true)
                    .await
                    .map_err(|e| GroupError::Client {
                        context: format!(
                            "ListOffsets of changelog {topic} for the streams assignor"
                        ),
                        message: e.to_string(),
                        code: e.kafka_code().map(|c| c.code),
                        retriable: e.is_retriable() || e.is_network(),
                    })?;
                for l in listed {
                    let Ok(p) = u32::try_from(l.partition) else {
                        continue;
                    };
                    *sums.entry(TaskId::new(sub.id, p)).or_default() +=
                        u64::try_from(l.offset.max(0)).unwrap_or(0);
                }
            }
        }
        Ok(sums)
    }

    async fn assign_tasks(
        &self,
        cluster: &Cluster,
        group: &CustomGroup,
    ) -> weir_group::Result<BTreeMap<String, MemberAssignment>> {
        let mut input = TaskAssignmentInput::default();
        for sub in &self.layout {
            for p in 0..u32::try_from(sub.partitions).unwrap_or(0) {
                let task = TaskId::new(sub.id, p);
                if sub.changelogs.is_empty() {
                    input.stateless_tasks.insert(task);
                } else {
                    input.stateful_tasks.insert(task);
                }
            }
        }
        let ends = if input.stateful_tasks.is_empty() {
            BTreeMap::new()
        } else {
            self.end_offset_sums(cluster).await?
        };
        let mut draining = BTreeSet::new();
        let mut servers: BTreeMap<String, String> = BTreeMap::new();
        for (member, m) in &group.members {
            let info = match m.user_data.as_deref().map(SubscriptionInfo::decode) {
                Some(Ok(info)) => info,
                // Such a member gets nothing (and its claims still hold its
                // partitions back from the others below).
                Some(Err(e)) => {
                    tracing::warn!(member = %member, error = %e, "a member's streams subscription does not decode: it is assigned nothing");
                    continue;
                }
                None => {
                    tracing::warn!(member = %member, "a member sent no streams subscription: it is assigned nothing");
                    continue;
                }
            };
            if info.draining {
                draining.insert(member.clone());
            }
            if let Some(server) = &info.application_server {
                servers.insert(member.clone(), server.clone());
            }
            let owned: BTreeSet<TopicPartition> = m.subscription.owned.iter().cloned().collect();
            let mut client = ClientState::new(info.threads.max(1));
            client.previous_active = self.tasks_of(&owned);
            client.lags = task_assignor::task_lags(&ends, &info.offset_sums);
            client.rack.clone_from(&m.subscription.rack);
            client.warmups.clone_from(&info.warmups);
            input.clients.insert(member.clone(), client);
        }
        let config = TaskAssignorConfig {
            acceptable_recovery_lag: self.acceptable_recovery_lag,
            num_standby_replicas: self.standby_replicas,
            max_warmup_replicas: self.max_warmup_replicas.max(1),
            probing_rebalance_interval: self.probing_rebalance_interval,
        };
        let mut assignment = task_assignor::assign(&input, &config)?;
        hand_over(&mut assignment, &input, &draining, &config);
        let mut hosts: BTreeMap<String, BTreeSet<TaskId>> = BTreeMap::new();
        for (member, server) in &servers {
            if let Some(c) = assignment.clients.get(member) {
                hosts
                    .entry(server.clone())
                    .or_default()
                    .extend(c.active.iter().copied());
            }
        }
        // Partitions some member claims to own now: withheld from any other
        // member for one round (cooperative hand-over).
        let mut owner_of: BTreeMap<TopicPartition, &str> = BTreeMap::new();
        for (member, m) in &group.members {
            for tp in &m.subscription.owned {
                owner_of.insert(tp.clone(), member);
            }
        }
        let mut out = BTreeMap::new();
        for member in group.members.keys() {
            let (tasks, standby, warmup) = assignment
                .clients
                .get(member)
                .map(|c| (c.active.clone(), c.standby.clone(), c.warmup.clone()))
                .unwrap_or_default();
            let mut partitions = BTreeSet::new();
            for task in &tasks {
                let Some(sub) = self.layout.iter().find(|s| s.id == task.subtopology) else {
                    continue;
                };
                let p = i32::try_from(task.partition).unwrap_or(i32::MAX);
                let task_partitions: Vec<TopicPartition> = sub
                    .topics
                    .iter()
                    .map(|topic| TopicPartition::new(topic.clone(), p))
                    .collect();
                // A task moves whole: while another member still owns any
                // of its partitions, none of them is given this round.
                if task_partitions
                    .iter()
                    .all(|tp| owner_of.get(tp).is_none_or(|o| o == member))
                {
                    partitions.extend(task_partitions);
                }
            }
            tracing::info!(member = %member, tasks = %list(&tasks), standby = %list(&standby), warmup = %list(&warmup), "streams assignor placed tasks");
            let probing_ms = assignment
                .followup
                .as_ref()
                .map(|f| u64::try_from(f.probing_interval.as_millis()).unwrap_or(u64::MAX));
            let info = AssignmentInfo {
                version: VERSION,
                active: tasks,
                standby,
                warmup,
                probing_ms,
                hosts: hosts.clone(),
            };
            out.insert(
                member.clone(),
                MemberAssignment {
                    partitions,
                    user_data: Some(info.encode()),
                },
            );
        }
        Ok(out)
    }
}

/// Graceful handover: a draining member (an instance closing gracefully)
/// keeps no standby or warmup, and each of its active tasks goes at once to
/// the non-draining member best caught up on it (within
/// `acceptable.recovery.lag`; a stateless task to the least loaded), which
/// gets it next round, after the draining member has committed and closed
/// it. A stateful task nobody is caught up on stays on the draining member
/// and the best candidate gets a warmup: the warmup's catching up triggers
/// the follow-up that moves it, so its restore is never on the critical
/// path. With no member left to take over, nothing changes (the instance
/// just leaves).
fn hand_over(
    assignment: &mut task_assignor::TaskAssignment,
    input: &TaskAssignmentInput,
    draining: &BTreeSet<String>,
    config: &TaskAssignorConfig,
) {
    let takers: Vec<&String> = input
        .clients
        .keys()
        .filter(|c| !draining.contains(*c))
        .collect();
    if draining.is_empty() || takers.is_empty() {
        return;
    }
    let mut warmups: BTreeMap<String, BTreeSet<TaskId>> = BTreeMap::new();
    for member in draining {
        let Some(client) = assignment.clients.get_mut(member) else {
            continue;
        };
        client.standby.clear();
        client.warmup.clear();
        let tasks: Vec<TaskId> = client.active.iter().copied().collect();
        for task in tasks {
            let stateful = input.stateful_tasks.contains(&task);
            let lag_of = |c: &str| {
                if stateful {
                    input
                        .clients
                        .get(c)
                        .and_then(|s| s.lags.get(&task).copied())
                        .unwrap_or(u64::MAX)
                } else {
                    0
                }
            };
            let load_of = |c: &str| {
                let active = assignment.clients.get(c).map_or(0, |a| a.active.len());
                let capacity = input.clients.get(c).map_or(1, |s| s.capacity.max(1));
                (active as u64).saturating_mul(1_000) / u64::from(capacity)
            };
            let Some(best) = takers
                .iter()
                .min_by_key(|c| (lag_of(c.as_str()), load_of(c.as_str()), c.as_str()))
                .map(|c| (*c).clone())
            else {
                continue;
            };
            let caught_up = lag_of(&best) <= config.acceptable_recovery_lag;
            if caught_up {
                if let Some(from) = assignment.clients.get_mut(member) {
                    from.active.remove(&task);
                }
                if let Some(to) = assignment.clients.get_mut(&best) {
                    to.standby.remove(&task);
                    to.warmup.remove(&task);
                    to.active.insert(task);
                }
                tracing::info!(task = %task, from = %member, to = %best, "handover: task moves from a draining member");
            } else {
                // A standby of it there becomes the warmup: only a warmup's
                // catching up makes its instance ask for the follow-up.
                if let Some(to) = assignment.clients.get_mut(&best) {
                    to.standby.remove(&task);
                    to.warmup.insert(task);
                }
                warmups.entry(best.clone()).or_default().insert(task);
                tracing::info!(task = %task, draining = %member, warmup = %best, "handover: no member is caught up; the task stays until the warmup is");
            }
        }
    }
    if !warmups.is_empty() {
        match &mut assignment.followup {
            Some(f) => {
                for (client, tasks) in warmups {
                    f.warmups.entry(client).or_default().extend(tasks);
                }
            }
            None => {
                assignment.followup = Some(task_assignor::FollowupRebalance {
                    warmups,
                    acceptable_recovery_lag: config.acceptable_recovery_lag,
                    probing_interval: config.probing_rebalance_interval,
                });
            }
        }
    }
}

fn list(tasks: &BTreeSet<TaskId>) -> String {
    tasks
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

impl GroupAssignor for StreamsAssignor {
    fn name(&self) -> &str {
        PROTOCOL
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    fn subscription_user_data(
        &self,
        owned: &BTreeSet<TopicPartition>,
        _generation: i32,
    ) -> Option<Bytes> {
        let mut offset_sums = self
            .offset_sums
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let running = self.tasks_of(owned);
        for task in &running {
            offset_sums.insert(*task, OFFSET_SUM_RUNNING);
        }
        let warmups = self
            .assignment()
            .map(|a| a.warmup.difference(&running).copied().collect())
            .unwrap_or_default();
        Some(
            SubscriptionInfo {
                version: VERSION,
                process_id: self.process_id.clone(),
                threads: self.threads,
                application_server: self.application_server.clone(),
                offset_sums,
                draining: self.draining.load(std::sync::atomic::Ordering::Acquire),
                warmups,
            }
            .encode(),
        )
    }

    fn assign<'a>(&'a self, cluster: &'a Cluster, group: &'a CustomGroup) -> AssignFuture<'a> {
        Box::pin(self.assign_tasks(cluster, group))
    }

    fn on_assignment(&self, assignment: &MemberAssignment, generation: i32) {
        match assignment.user_data.as_deref().map(AssignmentInfo::decode) {
            Some(Ok(info)) => {
                tracing::debug!(app = %self.app, generation, active = %list(&info.active), "streams assignment");
                *self.assigned.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((generation, info));
            }
            Some(Err(e)) => {
                tracing::warn!(app = %self.app, generation, error = %e, "the streams assignment's user data does not decode");
            }
            None => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn subscription_info_round_trips_and_bad_counts_are_refused() {
        let info = SubscriptionInfo {
            version: VERSION,
            process_id: "p1".into(),
            threads: 3,
            application_server: Some("h:1".into()),
            offset_sums: [
                (TaskId::new(1, 2), 42),
                (TaskId::new(0, 0), OFFSET_SUM_RUNNING),
            ]
            .into_iter()
            .collect(),
            draining: true,
            warmups: [TaskId::new(1, 2)].into(),
        };
        let bytes = info.encode();
        assert_eq!(SubscriptionInfo::decode(&bytes).unwrap(), info);
        // Version 2 had no warmups.
        let mut v2 = bytes[..bytes.len() - 12].to_vec();
        v2[..2].copy_from_slice(&2u16.to_be_bytes());
        let old = SubscriptionInfo::decode(&v2).unwrap();
        assert_eq!((old.version, old.warmups.len(), old.draining), (2, 0, true));
        // A count the bytes cannot hold is an error, not an allocation.
        let mut bad = bytes.to_vec();
        let at = bad.len() - 12 - 1 - 2 * 16 - 4;
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(SubscriptionInfo::decode(&bad).is_err());
        for cut in 0..bytes.len() {
            assert!(SubscriptionInfo::decode(&bytes[..cut]).is_err(), "{cut}");
        }
    }

    #[test]
    fn a_version_1_subscription_decodes_as_not_draining() {
        let info = SubscriptionInfo {
            version: 1,
            process_id: "old".into(),
            threads: 1,
            application_server: None,
            offset_sums: BTreeMap::new(),
            draining: false,
            warmups: BTreeSet::new(),
        };
        let mut bytes = info.encode().to_vec();
        bytes[..2].copy_from_slice(&1u16.to_be_bytes());
        bytes.truncate(bytes.len() - 5); // a version 1 member wrote no flag, no warmups
        assert_eq!(SubscriptionInfo::decode(&bytes).unwrap(), info);
    }

    /// A client's name, the tasks it ran and its lags.
    type ClientSpec<'a> = (&'a str, &'a [TaskId], &'a [(TaskId, u64)]);

    fn clients(specs: &[ClientSpec<'_>]) -> BTreeMap<String, ClientState> {
        specs
            .iter()
            .map(|(name, active, lags)| {
                let mut c = ClientState::new(1);
                c.previous_active = active.iter().copied().collect();
                c.lags = lags.iter().copied().collect();
                ((*name).to_owned(), c)
            })
            .collect()
    }

    #[test]
    fn a_draining_member_hands_caught_up_tasks_over_and_keeps_the_others_for_warmups() {
        let (t0, t1, t2) = (TaskId::new(1, 0), TaskId::new(1, 1), TaskId::new(0, 0));
        let config = TaskAssignorConfig {
            acceptable_recovery_lag: 10,
            num_standby_replicas: 1,
            max_warmup_replicas: 2,
            probing_rebalance_interval: Duration::from_secs(600),
        };
        let input = TaskAssignmentInput {
            // a runs everything; b has a standby of t0 (lag 3) and nothing of t1.
            clients: clients(&[("a", &[t0, t1, t2], &[]), ("b", &[], &[(t0, 3)])]),
            stateful_tasks: [t0, t1].into_iter().collect(),
            stateless_tasks: [t2].into_iter().collect(),
        };
        let mut assignment = task_assignor::assign(&input, &config).unwrap();
        let draining: BTreeSet<String> = ["a".to_owned()].into_iter().collect();
        hand_over(&mut assignment, &input, &draining, &config);
        let (a, b) = (&assignment.clients["a"], &assignment.clients["b"]);
        assert_eq!(a.active, [t1].into_iter().collect(), "{assignment:?}");
        assert!(
            a.standby.is_empty() && a.warmup.is_empty(),
            "{assignment:?}"
        );
        assert!(
            b.active.contains(&t0) && b.active.contains(&t2),
            "{assignment:?}"
        );
        assert!(b.warmup.contains(&t1), "{assignment:?}");
        let followup = assignment.followup.as_ref().unwrap();
        assert!(followup.warmups["b"].contains(&t1), "{followup:?}");

        // With nobody left to take over, nothing changes.
        let mut alone = task_assignor::assign(&input, &config).unwrap();
        let all: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into_iter().collect();
        let unchanged = alone.clone();
        hand_over(&mut alone, &input, &all, &config);
        assert_eq!(alone, unchanged);
    }

    #[test]
    fn assignment_info_round_trips() {
        let info = AssignmentInfo {
            version: VERSION,
            active: [TaskId::new(0, 1), TaskId::new(1, 1)].into_iter().collect(),
            standby: [TaskId::new(1, 0)].into_iter().collect(),
            warmup: [TaskId::new(1, 2)].into_iter().collect(),
            probing_ms: Some(600_000),
            hosts: [(
                "h1:80".to_owned(),
                [TaskId::new(0, 1)].into_iter().collect(),
            )]
            .into_iter()
            .collect(),
        };
        assert_eq!(AssignmentInfo::decode(&info.encode()).unwrap(), info);
    }
}

#[cfg(test)]
mod offset_sum_tests {
    #![allow(clippy::unwrap_used)]

    use weir_store::{ChangelogPartition, StoreOptions, TaskStore};

    /// An in-memory store's changelog offset is not part of the sum, even
    /// while its task store is open: the sum is still reported after the
    /// task closed, when the contents are gone.
    #[test]
    fn in_memory_changelogs_count_for_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = TaskStore::open(dir.path(), StoreOptions::default()).unwrap();
        let disk = ChangelogPartition::new("app-disk-changelog", 3);
        let mem = ChangelogPartition::new("app-mem-changelog", 3);
        store.key_value_store("disk").unwrap();
        store.in_memory_key_value_store("mem", Some(&mem)).unwrap();
        store.commit(&[(disk, 40), (mem, 2)]).unwrap();
        let topics = [
            "app-disk-changelog".to_owned(),
            "app-mem-changelog".to_owned(),
        ];
        assert_eq!(super::offset_sum(&store, &topics, 3), Some(40));
        assert_eq!(super::offset_sum(&store, &topics[1..], 3), None);
    }
}
