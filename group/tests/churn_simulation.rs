//! A simulated consumer group under random churn — members join, leave
//! cleanly, crash in the middle of a rebalance, and lose their membership and
//! rejoin — driving the cooperative-sticky assignor round by round as the
//! group protocol would.
//!
//! Each round: every member reports what it owns and its generation, the
//! assignor runs, and members apply their new assignment one at a time in a
//! random order (revoking what they lost, taking what they gained). After
//! every single member's step we check that no partition is owned by two
//! members. After each event the group must settle (a round with no
//! revocation) within two rounds into an assignment that covers every
//! partition and, for equal subscriptions, is balanced within one.
//!
//! `WEIR_CHURN_CASES` raises the number of random histories (default 48).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use proptest::prelude::*;
use weir_group::assignor::{Assignor, GroupSubscription, MemberSubscription, TopicPartition};

#[derive(Debug, Clone)]
enum Event {
    Join {
        topics: BTreeSet<usize>,
    },
    Leave(usize),
    /// The member's subscription is in the next rebalance, but it dies
    /// before applying the result.
    CrashDuringRebalance(usize),
    /// Session expired: the member declared its partitions lost (self-fencing)
    /// and rejoins under a new member id with nothing owned.
    LostAndRejoin(usize),
    Resubscribe {
        member: usize,
        topics: BTreeSet<usize>,
    },
}

struct Member {
    topics: BTreeSet<String>,
    owned: BTreeSet<TopicPartition>,
    generation: i32,
}

struct Sim {
    topics: BTreeMap<String, i32>,
    members: BTreeMap<String, Member>,
    next_id: u32,
    generation: i32,
    shuffle: u64,
}

const TOPIC_NAMES: [&str; 3] = ["orders", "payments", "clicks"];

impl Sim {
    fn topic_names(&self, set: &BTreeSet<usize>) -> BTreeSet<String> {
        set.iter()
            .map(|i| TOPIC_NAMES[i % TOPIC_NAMES.len()].to_owned())
            .collect()
    }

    fn nth(&self, i: usize) -> Option<String> {
        let n = self.members.len();
        (n > 0)
            .then(|| self.members.keys().nth(i % n).cloned())
            .flatten()
    }

    fn join(&mut self, topics: BTreeSet<String>) {
        self.next_id += 1;
        self.members.insert(
            format!("m{:04}", self.next_id),
            Member {
                topics,
                owned: BTreeSet::new(),
                generation: -1,
            },
        );
    }

    fn subscription(&self) -> GroupSubscription {
        GroupSubscription {
            partitions_per_topic: self.topics.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| {
                    (
                        id.clone(),
                        MemberSubscription {
                            instance_id: None,
                            topics: m.topics.clone(),
                            owned: m.owned.iter().cloned().collect(),
                            generation: m.generation,
                            rack: None,
                        },
                    )
                })
                .collect(),
        }
    }

    fn check_exclusive(&self) -> Result<(), String> {
        let mut seen: BTreeMap<&TopicPartition, &String> = BTreeMap::new();
        for (id, m) in &self.members {
            for tp in &m.owned {
                if let Some(other) = seen.insert(tp, id) {
                    return Err(format!("{tp:?} owned by {other} and {id} at once"));
                }
            }
        }
        Ok(())
    }

    /// One rebalance round; returns whether any member revoked something.
    fn round(&mut self, crash: Option<&str>) -> Result<bool, String> {
        self.generation += 1;
        let g = self.subscription();
        let a = Assignor::CooperativeSticky.assign(&g);
        check_valid(&g, &a)?;
        check_cooperative(&g, &a)?;
        if let Some(id) = crash {
            self.members.remove(id);
        }
        // Members receive SyncGroup responses in an arbitrary order.
        let mut order: Vec<String> = self.members.keys().cloned().collect();
        order.sort_by_key(|id| {
            let mut h = self.shuffle ^ self.generation as u64;
            for b in id.bytes() {
                h = h.wrapping_mul(0x100_0000_01b3).wrapping_add(u64::from(b));
            }
            h
        });
        let mut revoked_any = false;
        for id in order {
            let Some(m) = self.members.get_mut(&id) else {
                continue;
            };
            let new = a.get(&id).cloned().unwrap_or_default();
            revoked_any |= m.owned.difference(&new).next().is_some();
            m.owned = new;
            m.generation = self.generation;
            self.check_exclusive()?;
        }
        Ok(revoked_any)
    }

    fn settle(&mut self, mut crash: Option<String>, equal: bool) -> Result<(), String> {
        for round in 1..=3 {
            let crashed = crash.take();
            let revoked = self.round(crashed.as_deref())?;
            // A crashed member's session expires and the coordinator starts
            // another rebalance, as it does after a revocation.
            if !revoked && crashed.is_none() {
                if equal && round > 2 {
                    return Err(format!("settled only in round {round}"));
                }
                return self.check_settled(equal);
            }
        }
        if equal {
            return Err("did not settle within 3 rounds".into());
        }
        // Unequal subscriptions may need more rounds of balancing moves.
        for _ in 0..8 {
            if !self.round(None)? {
                return self.check_settled(equal);
            }
        }
        Err("did not settle within 11 rounds".into())
    }

    fn check_settled(&self, equal: bool) -> Result<(), String> {
        let g = self.subscription();
        let owned: BTreeMap<String, BTreeSet<TopicPartition>> = self
            .members
            .iter()
            .map(|(id, m)| (id.clone(), m.owned.clone()))
            .collect();
        let all: BTreeSet<TopicPartition> = owned.values().flatten().cloned().collect();
        if all != assignable(&g) {
            return Err(format!(
                "settled with {} of {} partitions owned",
                all.len(),
                assignable(&g).len()
            ));
        }
        if equal && equal_subscriptions(&g) {
            check_within_one(&owned)?;
        } else {
            check_no_improving_move(&g, &owned)?;
        }
        Ok(())
    }

    fn apply(&mut self, event: &Event, equal: bool) -> Result<(), String> {
        let all: BTreeSet<usize> = (0..TOPIC_NAMES.len()).collect();
        let mut crash = None;
        match event {
            Event::Join { topics } => {
                let topics = if equal { all } else { topics.clone() };
                let names = self.topic_names(&topics);
                self.join(names);
            }
            Event::Leave(i) => {
                if let Some(id) = self.nth(*i) {
                    self.members.remove(&id);
                }
            }
            Event::CrashDuringRebalance(i) => crash = self.nth(*i),
            Event::LostAndRejoin(i) => {
                if let Some(id) = self.nth(*i)
                    && let Some(m) = self.members.remove(&id)
                {
                    self.join(m.topics);
                }
            }
            Event::Resubscribe { member, topics } => {
                if !equal && let Some(id) = self.nth(*member) {
                    let names = self.topic_names(topics);
                    if let Some(m) = self.members.get_mut(&id) {
                        m.topics = names;
                    }
                }
            }
        }
        self.settle(crash, equal)
    }
}

fn topic_set() -> impl Strategy<Value = BTreeSet<usize>> {
    prop::collection::btree_set(0..TOPIC_NAMES.len(), 1..=TOPIC_NAMES.len())
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => topic_set().prop_map(|topics| Event::Join { topics }),
        1 => any::<usize>().prop_map(Event::Leave),
        1 => any::<usize>().prop_map(Event::CrashDuringRebalance),
        1 => any::<usize>().prop_map(Event::LostAndRejoin),
        1 => (any::<usize>(), topic_set()).prop_map(|(member, topics)| Event::Resubscribe { member, topics }),
    ]
}

fn cases() -> u32 {
    std::env::var("WEIR_CHURN_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

fn run(
    counts: Vec<i32>,
    events: Vec<Event>,
    shuffle: u64,
    equal: bool,
) -> Result<(), TestCaseError> {
    let mut sim = Sim {
        topics: TOPIC_NAMES
            .iter()
            .zip(counts)
            .map(|(t, n)| ((*t).to_owned(), n))
            .collect(),
        members: BTreeMap::new(),
        next_id: 0,
        generation: 0,
        shuffle,
    };
    for (step, e) in events.iter().enumerate() {
        sim.apply(e, equal)
            .map_err(|err| TestCaseError::fail(format!("step {step} {e:?}: {err}")))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn churn_with_equal_subscriptions(
        counts in prop::collection::vec(1i32..24, 3),
        events in prop::collection::vec(event(), 1..60),
        shuffle in any::<u64>(),
    ) {
        run(counts, events, shuffle, true)?;
    }

    #[test]
    fn churn_with_unequal_subscriptions(
        counts in prop::collection::vec(1i32..24, 3),
        events in prop::collection::vec(event(), 1..60),
        shuffle in any::<u64>(),
    ) {
        run(counts, events, shuffle, false)?;
    }
}
