//! Shared pieces of the member tests: a testkit cluster, an application
//! loop that records every event and "write", and waiting on that record.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use weir_client::Cluster;
use weir_client::config::ClientConfig;
use weir_group::GroupError;
use weir_group::assignor::TopicPartition;
use weir_group::member::{AssignmentEvent, GroupMember, MemberConfig, Revocation};
use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::RequestKind;

pub const TOPIC: &str = "t";
pub const SESSION: Duration = Duration::from_secs(10);

/// One thing an application saw or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Assigned {
        at: Instant,
        who: String,
        partitions: Vec<TopicPartition>,
        generation: i32,
    },
    /// Logged when the owner acks (after its commit).
    Revoked {
        at: Instant,
        who: String,
        partitions: Vec<TopicPartition>,
    },
    Lost {
        at: Instant,
        who: String,
        partitions: Vec<TopicPartition>,
    },
    Fatal {
        at: Instant,
        who: String,
        error: GroupError,
    },
    Write {
        at: Instant,
        who: String,
        tp: TopicPartition,
    },
    /// The application stopped (closed or crashed): it owns nothing from
    /// here on, whatever its last events said.
    Released { at: Instant, who: String },
}

impl Entry {
    pub fn who(&self) -> &str {
        match self {
            Entry::Assigned { who, .. }
            | Entry::Revoked { who, .. }
            | Entry::Lost { who, .. }
            | Entry::Fatal { who, .. }
            | Entry::Write { who, .. }
            | Entry::Released { who, .. } => who,
        }
    }
}

/// The shared record of every application, in the order things happened.
#[derive(Clone)]
pub struct Journal {
    entries: Arc<Mutex<Vec<Entry>>>,
    changed: watch::Sender<usize>,
}

impl Default for Journal {
    fn default() -> Self {
        Self {
            entries: Arc::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Journal {
    pub fn push(&self, e: Entry) {
        let n = {
            let mut entries = self.entries.lock().unwrap();
            entries.push(e);
            entries.len()
        };
        self.changed.send_replace(n);
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.entries.lock().unwrap().clone()
    }

    /// The generation of `who`'s latest assignment.
    pub fn last_generation(&self, who: &str) -> i32 {
        self.entries()
            .iter()
            .rev()
            .find_map(|e| match e {
                Entry::Assigned {
                    who: w, generation, ..
                } if w == who => Some(*generation),
                _ => None,
            })
            .unwrap()
    }

    /// Waits (on tokio's clock, at most a minute) until `members` own the
    /// `n` partitions between them, balanced (see [`balanced`]).
    pub async fn wait_balanced(&self, members: &[&str], n: i32) {
        let what = format!("{members:?} own {n} partitions, balanced");
        self.wait_for(Duration::from_secs(60), &what, |e| balanced(e, members, n))
            .await;
    }

    /// Waits (on tokio's clock, at most `limit`) until `pred` holds.
    pub async fn wait_for(&self, limit: Duration, what: &str, pred: impl Fn(&[Entry]) -> bool) {
        let mut rx = self.changed.subscribe();
        let ok = tokio::time::timeout(limit, async {
            loop {
                if pred(&self.entries()) {
                    return;
                }
                rx.changed().await.unwrap();
            }
        })
        .await;
        assert!(
            ok.is_ok(),
            "timed out waiting for {what}; journal: {:#?}",
            self.non_writes()
        );
    }

    pub fn non_writes(&self) -> Vec<Entry> {
        self.entries()
            .into_iter()
            .filter(|e| !matches!(e, Entry::Write { .. }))
            .collect()
    }

    /// Who owns what after replaying the events so far.
    pub fn owners(&self) -> BTreeMap<String, BTreeSet<TopicPartition>> {
        owners(&self.entries())
    }
}

pub fn owners(entries: &[Entry]) -> BTreeMap<String, BTreeSet<TopicPartition>> {
    let mut owned: BTreeMap<String, BTreeSet<TopicPartition>> = BTreeMap::new();
    for e in entries {
        match e {
            Entry::Assigned {
                who, partitions, ..
            } => {
                owned
                    .entry(who.clone())
                    .or_default()
                    .extend(partitions.iter().cloned());
            }
            Entry::Revoked {
                who, partitions, ..
            }
            | Entry::Lost {
                who, partitions, ..
            } => {
                let set = owned.entry(who.clone()).or_default();
                for p in partitions {
                    set.remove(p);
                }
            }
            Entry::Released { who, .. } => {
                owned.remove(who);
            }
            _ => {}
        }
    }
    owned
}

/// Replays the journal and fails if a partition ever had two owners.
pub fn assert_never_two_owners(entries: &[Entry]) {
    for i in 0..entries.len() {
        let owned = owners(&entries[..=i]);
        let mut seen: BTreeMap<&TopicPartition, &str> = BTreeMap::new();
        for (who, set) in &owned {
            for tp in set {
                if let Some(other) = seen.insert(tp, who) {
                    panic!("{tp:?} owned by {other} and {who} after {:?}", entries[i]);
                }
            }
        }
    }
}

pub fn partitions(n: i32) -> BTreeSet<TopicPartition> {
    (0..n).map(|p| TopicPartition::new(TOPIC, p)).collect()
}

/// True when the named members together own exactly `n` partitions, each
/// once, and each owns `n / members` or one more.
pub fn balanced(entries: &[Entry], members: &[&str], n: i32) -> bool {
    let owned = owners(entries);
    let mut all = BTreeSet::new();
    let mut total = 0;
    for m in members {
        let set = owned.get(*m).cloned().unwrap_or_default();
        let share = n as usize / members.len();
        if set.len() < share || set.len() > share + 1 {
            return false;
        }
        total += set.len();
        all.extend(set);
    }
    total == n as usize && all == partitions(n)
}

pub async fn testkit(partitions: i32) -> Arc<weir_testkit::Cluster> {
    testkit_with(weir_testkit::Cluster::builder(), partitions).await
}

/// A testkit cluster built by `builder` with the topic, registered so that
/// [`client`] reaches it in memory.
pub async fn testkit_with(
    builder: weir_testkit::ClusterBuilder,
    partitions: i32,
) -> Arc<weir_testkit::Cluster> {
    let cluster = Arc::new(builder.build().await.unwrap());
    cluster
        .create_topic(TOPIC, partitions, std::iter::empty::<(String, String)>())
        .await
        .unwrap();
    IN_MEMORY
        .lock()
        .unwrap()
        .insert(cluster.bootstrap(), Arc::downgrade(&cluster));
    cluster
}

/// The testkit clusters of this process by bootstrap address: a client of
/// one of them connects over in-memory streams, where tokio's paused clock
/// is exact (a real socket lets the clock jump ahead while it is idle).
/// Any other address (tansu) is dialled over TCP.
static IN_MEMORY: Mutex<BTreeMap<String, Weak<weir_testkit::Cluster>>> =
    Mutex::new(BTreeMap::new());

pub async fn client(bootstrap: &str, client_id: &str) -> Cluster {
    let kit = IN_MEMORY
        .lock()
        .unwrap()
        .get(bootstrap)
        .and_then(Weak::upgrade);
    let config = match kit {
        Some(kit) => weir_integration::testkit_dial::client_config(&kit, client_id)
            .build()
            .unwrap(),
        None => ClientConfig::from_properties(&[
            ("bootstrap.servers", bootstrap),
            ("client.id", client_id),
        ])
        .unwrap(),
    };
    Cluster::connect(config).await.unwrap()
}

pub fn config(group: &str) -> MemberConfig {
    MemberConfig::new(group, [TOPIC])
        .with_session_timeout(SESSION)
        .with_heartbeat_interval(Duration::from_secs(1))
        .with_max_poll_interval(Duration::from_secs(20))
        .with_self_fence_margin(Duration::from_secs(2))
}

/// How an [`App`] treats a revocation. The default acks it at once.
#[derive(Debug, Clone, Copy, Default)]
pub struct OnRevoke {
    /// Commit the revoked partitions first (offset 1 each) and record the
    /// result in [`App::commits`].
    pub commit: bool,
    /// Hold the ack this long after the revocation arrived (a slow commit
    /// or flush in the revocation callback); zero acks at once.
    pub hold: Duration,
}

/// When a commit of an [`App`] returned, and whether it failed.
pub type Commits = Arc<Mutex<Vec<(Instant, Result<(), GroupError>)>>>;

/// An application running one member: logs its events, acks revocations
/// (as its [`OnRevoke`] says), and writes for each owned partition every
/// 100 ms while its lease holds.
pub struct App {
    pub name: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<GroupMember>,
    journal: Journal,
    /// The commits made on revocation ([`OnRevoke::commit`]).
    pub commits: Commits,
    /// When the first revocation arrived.
    pub revoked_at: Arc<Mutex<Option<Instant>>>,
}

impl App {
    pub async fn start(
        bootstrap: &str,
        name: &str,
        config: MemberConfig,
        journal: &Journal,
    ) -> App {
        Self::start_with(bootstrap, name, config, journal, OnRevoke::default()).await
    }

    /// [`App::start`] with revocations treated as `on_revoke` says.
    pub async fn start_with(
        bootstrap: &str,
        name: &str,
        config: MemberConfig,
        journal: &Journal,
        on_revoke: OnRevoke,
    ) -> App {
        let cluster = client(bootstrap, name).await;
        let member = GroupMember::start(cluster, config).unwrap();
        Self::run_with(member, name, journal, on_revoke)
    }

    pub fn run(member: GroupMember, name: &str, journal: &Journal) -> App {
        Self::run_with(member, name, journal, OnRevoke::default())
    }

    /// [`App::run`] with revocations treated as `on_revoke` says.
    pub fn run_with(
        mut member: GroupMember,
        name: &str,
        journal: &Journal,
        on_revoke: OnRevoke,
    ) -> App {
        let (stop, mut stopped) = oneshot::channel();
        let record = journal.clone();
        let journal = journal.clone();
        let who = name.to_owned();
        let commits = Commits::default();
        let revoked_at = Arc::new(Mutex::new(None));
        let (log, revoked) = (commits.clone(), revoked_at.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            // A revocation whose ack is held, and when to ack it.
            let mut pending: Option<(Revocation, Instant)> = None;
            loop {
                let ack_at = pending.as_ref().map(|(_, at)| *at);
                tokio::select! {
                    _ = &mut stopped => return member,
                    _ = sleep_until(ack_at.unwrap_or_else(Instant::now)), if ack_at.is_some() => {
                        if let Some((r, _)) = pending.take() {
                            journal.push(Entry::Revoked { at: Instant::now(), who: who.clone(), partitions: r.partitions.clone() });
                            r.ack();
                        }
                    }
                    event = member.next_event() => {
                        let at = Instant::now();
                        match event {
                            Ok(AssignmentEvent::Assigned { partitions, generation, .. }) => journal.push(Entry::Assigned {
                                at, who: who.clone(), partitions, generation,
                            }),
                            Ok(AssignmentEvent::Revoked(r)) => {
                                revoked.lock().unwrap().get_or_insert(at);
                                // Logged when acked, after the commit.
                                let mut acked = at;
                                if on_revoke.commit {
                                    let offsets: Vec<_> = r.partitions.iter().map(|tp| (tp.clone(), 1)).collect();
                                    let result = member.commit(&offsets).await;
                                    acked = Instant::now();
                                    log.lock().unwrap().push((acked, result));
                                }
                                if on_revoke.hold.is_zero() {
                                    journal.push(Entry::Revoked { at: acked, who: who.clone(), partitions: r.partitions.clone() });
                                    r.ack();
                                } else {
                                    // The hold counts from the revocation's arrival.
                                    pending = Some((r, at + on_revoke.hold));
                                }
                            }
                            Ok(AssignmentEvent::Lost(partitions)) => journal.push(Entry::Lost { at, who: who.clone(), partitions }),
                            Err(error) => {
                                journal.push(Entry::Fatal { at, who: who.clone(), error });
                                let _ = stopped.await;
                                return member;
                            }
                        }
                    }
                    _ = tick.tick() => {
                        // The write path: checked against the lease, never
                        // against events that may not have arrived yet.
                        if member.lease().is_valid() {
                            for tp in member.assignment() {
                                journal.push(Entry::Write { at: Instant::now(), who: who.clone(), tp });
                            }
                        }
                    }
                }
            }
        });
        App {
            name: name.to_owned(),
            stop: Some(stop),
            task,
            journal: record,
            commits,
            revoked_at,
        }
    }

    /// Stops the loop, records that the application let go of everything
    /// (before the member leaves, so a new owner's events come after it),
    /// then closes the member as `mode` says.
    pub async fn shut_down(self, mode: weir_group::member::ShutdownMode) {
        let journal = self.journal.clone();
        let who = self.name.clone();
        let member = self.stop().await;
        journal.push(Entry::Released {
            at: Instant::now(),
            who,
        });
        member.close(mode).await;
    }

    /// Stops the loop and hands the member back (for `close`).
    pub async fn stop(mut self) -> GroupMember {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.await.unwrap()
    }
}

/// Requests of `api` from `client` in the testkit's log.
pub async fn requests_of(
    cluster: &weir_testkit::Cluster,
    api: ApiKey,
    client: &str,
) -> Vec<(Instant, RequestKind)> {
    cluster
        .requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.api_key == api && r.client_id.as_deref() == Some(client))
        .map(|r| (r.at, r.body))
        .collect()
}

/// The member ids `client`'s JoinGroups carried, in order.
pub async fn join_member_ids(tk: &weir_testkit::Cluster, client: &str) -> Vec<String> {
    requests_of(tk, ApiKey::JoinGroup, client)
        .await
        .into_iter()
        .filter_map(|(_, b)| match b {
            RequestKind::JoinGroup(j) => Some(j.member_id.to_string()),
            _ => None,
        })
        .collect()
}

/// Holds `client`'s next `api` request for `delay` before the coordinator
/// sees it.
pub async fn delay_next(tk: &weir_testkit::Cluster, client: &str, api: ApiKey, delay: Duration) {
    intercept_next(tk, client, api, weir_testkit::InterceptAction::Delay(delay)).await;
}

/// Makes `client`'s next `api` request fail with `code`.
pub async fn fail_next(tk: &weir_testkit::Cluster, client: &str, api: ApiKey, code: i16) {
    intercept_next(tk, client, api, weir_testkit::InterceptAction::Error(code)).await;
}

/// Applies `action` to `client`'s next `api` request only.
async fn intercept_next(
    tk: &weir_testkit::Cluster,
    client: &str,
    api: ApiKey,
    action: weir_testkit::InterceptAction,
) {
    tk.intercept(
        weir_testkit::Intercept::new(
            weir_testkit::RequestMatcher::api(api).client(client),
            action,
        )
        .times(1),
    )
    .await
    .unwrap();
}
