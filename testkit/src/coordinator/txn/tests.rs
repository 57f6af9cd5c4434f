//! Unit tests of the transaction coordinator, without sockets.

use std::time::Duration;

use tokio::time::Instant;
use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::records::ControlKind;

use super::state::TxnState;
use super::{TxnCoordinator, TxnEnd};

const TID: &str = "tx-1";
const TIMEOUT_MS: i32 = 60_000;

fn tp(topic: &str, p: i32) -> (String, i32) {
    (topic.to_owned(), p)
}

fn init(c: &mut TxnCoordinator) -> (i64, i16) {
    c.init_producer_id(Some(TID), TIMEOUT_MS, None)
        .expect("init")
}

fn state(c: &TxnCoordinator) -> TxnState {
    c.transaction(TID).expect("known").state
}

#[test]
fn a_new_id_gets_a_fresh_producer_and_a_reinit_bumps_the_epoch() {
    let mut c = TxnCoordinator::new();
    let (pid, epoch) = init(&mut c);
    assert_eq!(epoch, 0);
    let (other, _) = c.init_producer_id(Some("tx-2"), TIMEOUT_MS, None).unwrap();
    assert_ne!(pid, other);
    assert_eq!(init(&mut c), (pid, 1));
    assert_eq!(state(&c), TxnState::Empty);
    // Idempotent producers get a new id each time, at epoch 0.
    let a = c.init_producer_id(None, TIMEOUT_MS, None).unwrap();
    let b = c.init_producer_id(None, TIMEOUT_MS, None).unwrap();
    assert_ne!(a.0, b.0);
    assert_eq!((a.1, b.1), (0, 0));
    assert!(c.take_ends().is_empty());
}

#[test]
fn commit_emits_markers_for_partitions_and_groups_and_retries_are_idempotent() {
    let mut c = TxnCoordinator::new();
    let now = Instant::now();
    let (pid, epoch) = init(&mut c);
    assert!(!c.partition_in_txn(pid, epoch, "t", 0));
    c.add_partitions(TID, pid, epoch, &[tp("t", 0), tp("t", 1)], now)
        .unwrap();
    c.add_offsets(TID, pid, epoch, "grp", now).unwrap();
    assert_eq!(state(&c), TxnState::Ongoing);
    assert!(c.partition_in_txn(pid, epoch, "t", 1));
    assert!(!c.partition_in_txn(pid, epoch, "t", 2));
    assert_eq!(
        c.produce_error(TID, pid, epoch, "t", 2),
        Some(ResponseError::InvalidTxnState)
    );
    assert_eq!(c.produce_error(TID, pid, epoch, "t", 1), None);
    c.end_txn(TID, pid, epoch, true).unwrap();
    let ends = c.take_ends();
    assert_eq!(
        ends,
        vec![TxnEnd {
            transactional_id: TID.into(),
            producer_id: pid,
            producer_epoch: epoch,
            kind: ControlKind::Commit,
            partitions: vec![tp("t", 0), tp("t", 1)],
            groups: vec!["grp".into()],
        }]
    );
    assert_eq!(state(&c), TxnState::CompleteCommit);
    assert!(!c.partition_in_txn(pid, epoch, "t", 0));
    // A retried commit succeeds without new markers; an abort now is invalid.
    c.end_txn(TID, pid, epoch, true).unwrap();
    assert!(c.take_ends().is_empty());
    assert_eq!(
        c.end_txn(TID, pid, epoch, false),
        Err(ResponseError::InvalidTxnState)
    );
    // The next transaction aborts.
    c.add_partitions(TID, pid, epoch, &[tp("t", 2)], now)
        .unwrap();
    c.end_txn(TID, pid, epoch, false).unwrap();
    let ends = c.take_ends();
    assert_eq!(
        (ends[0].kind, ends[0].partitions.clone()),
        (ControlKind::Abort, vec![tp("t", 2)])
    );
    assert_eq!(state(&c), TxnState::CompleteAbort);
}

#[test]
fn a_second_producer_fences_the_first_and_aborts_its_open_transaction() {
    let mut c = TxnCoordinator::new();
    let now = Instant::now();
    let (pid, epoch) = init(&mut c);
    c.add_partitions(TID, pid, epoch, &[tp("t", 0)], now)
        .unwrap();
    // The new instance's InitProducerId aborts the open transaction with a
    // bumped epoch and asks the client to retry...
    assert_eq!(
        c.init_producer_id(Some(TID), TIMEOUT_MS, None),
        Err(ResponseError::ConcurrentTransactions)
    );
    let ends = c.take_ends();
    assert_eq!(ends.len(), 1);
    assert_eq!(
        (ends[0].kind, ends[0].producer_epoch),
        (ControlKind::Abort, epoch + 1)
    );
    assert_eq!(ends[0].partitions, vec![tp("t", 0)]);
    assert_eq!(state(&c), TxnState::CompleteAbort);
    // ...which bumps once more.
    let (pid2, epoch2) = init(&mut c);
    assert_eq!((pid2, epoch2), (pid, epoch + 2));
    // The zombie is fenced everywhere.
    assert_eq!(
        c.add_partitions(TID, pid, epoch, &[tp("t", 0)], now),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.add_offsets(TID, pid, epoch, "g", now),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.end_txn(TID, pid, epoch, true),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.check_offset_commit(TID, pid, epoch, "g"),
        Err(ResponseError::InvalidProducerEpoch),
        "verified like a Produce: the leader's code, not the coordinator's"
    );
    assert_eq!(
        c.produce_error(TID, pid, epoch, "t", 0),
        Some(ResponseError::InvalidProducerEpoch)
    );
    assert_eq!(
        c.produce_error(TID, pid, epoch, "t", 9),
        Some(ResponseError::InvalidProducerEpoch),
        "fenced on a partition that was never in the transaction too"
    );
    assert_eq!(
        c.produce_error(TID, pid + 1, epoch2, "t", 0),
        Some(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        c.produce_error("other", pid, epoch2, "t", 0),
        Some(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        c.check_offset_commit(TID, pid2, epoch2, "g"),
        Err(ResponseError::InvalidTxnState),
        "no open transaction"
    );
    c.add_partitions(TID, pid2, epoch2, &[tp("t", 0)], now)
        .unwrap();
    assert!(c.check_offset_commit(TID, pid2, epoch2, "g").is_ok());
    c.end_txn(TID, pid2, epoch2, true).unwrap();
    assert_eq!(
        c.take_ends()[0].groups,
        vec!["g".to_owned()],
        "the group joins the transaction"
    );
}

#[test]
fn the_transaction_timeout_aborts_exactly_on_time_and_fences_the_producer() {
    let mut c = TxnCoordinator::new();
    let t0 = Instant::now();
    let (pid, epoch) = init(&mut c);
    c.add_partitions(TID, pid, epoch, &[tp("t", 0)], t0)
        .unwrap();
    let deadline = t0 + Duration::from_millis(u64::try_from(TIMEOUT_MS).unwrap());
    assert_eq!(c.take_wakeups(), vec![(deadline, TID.to_owned())]);
    // Adding more partitions does not restart the clock.
    c.add_partitions(TID, pid, epoch, &[tp("t", 1)], t0 + Duration::from_secs(30))
        .unwrap();
    assert!(c.take_wakeups().is_empty());
    c.on_timer(TID, deadline - Duration::from_millis(1));
    assert_eq!(state(&c), TxnState::Ongoing);
    c.on_timer(TID, deadline);
    assert_eq!(state(&c), TxnState::CompleteAbort);
    let ends = c.take_ends();
    assert_eq!(
        (ends[0].kind, ends[0].producer_epoch),
        (ControlKind::Abort, epoch + 1)
    );
    assert_eq!(ends[0].partitions, vec![tp("t", 0), tp("t", 1)]);
    assert_eq!(
        c.end_txn(TID, pid, epoch, true),
        Err(ResponseError::ProducerFenced)
    );
    // A timer for a transaction that has ended since does nothing.
    c.on_timer(TID, deadline + Duration::from_secs(60));
    assert!(c.take_ends().is_empty());
}

#[test]
fn requests_with_bad_ids_states_or_timeouts_get_kafkas_errors() {
    let mut c = TxnCoordinator::new();
    assert_eq!(
        c.init_producer_id(Some(""), TIMEOUT_MS, None),
        Err(ResponseError::InvalidRequest)
    );
    assert_eq!(
        c.init_producer_id(Some(TID), 0, None),
        Err(ResponseError::InvalidTransactionTimeout)
    );
    assert_eq!(
        c.init_producer_id(Some(TID), 900_001, None),
        Err(ResponseError::InvalidTransactionTimeout)
    );
    let now = Instant::now();
    assert_eq!(
        c.add_partitions("nope", 1, 0, &[tp("t", 0)], now),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    let (pid, epoch) = init(&mut c);
    assert_eq!(
        c.add_partitions(TID, pid + 1, epoch, &[tp("t", 0)], now),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        c.end_txn(TID, pid, epoch, true),
        Err(ResponseError::InvalidTxnState),
        "nothing to end"
    );
    assert_eq!(
        c.end_txn(TID, pid, epoch + 1, true),
        Err(ResponseError::ProducerFenced),
        "a future epoch is not ours either"
    );
}

#[test]
fn kip360_reinit_with_the_current_epoch_bumps_a_retry_gets_the_same_and_a_stranger_is_fenced() {
    let mut c = TxnCoordinator::new();
    let (pid, epoch) = init(&mut c);
    let bumped = c
        .init_producer_id(Some(TID), TIMEOUT_MS, Some((pid, epoch)))
        .unwrap();
    assert_eq!(bumped, (pid, epoch + 1));
    // The answer was lost; the client retries with what it had.
    assert_eq!(
        c.init_producer_id(Some(TID), TIMEOUT_MS, Some((pid, epoch)))
            .unwrap(),
        bumped
    );
    assert_eq!(
        c.init_producer_id(Some(TID), TIMEOUT_MS, Some((pid + 7, 0))),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.init_producer_id(Some(TID), TIMEOUT_MS, Some((pid, epoch + 5))),
        Err(ResponseError::ProducerFenced)
    );
}

#[test]
fn an_exhausted_epoch_rotates_the_producer_id() {
    let mut c = TxnCoordinator::new();
    let (pid, _) = init(&mut c);
    if let Some(meta) = c.txns.get_mut(TID) {
        meta.producer_epoch = i16::MAX - 1;
    }
    let (new_pid, epoch) = init(&mut c);
    assert_ne!(new_pid, pid);
    assert_eq!(epoch, 0);
    assert_eq!(c.transaction(TID).unwrap().last_producer_id, pid);
}

/// Kafka (`prepareProducerIdRotation` with `recordLastEpoch`, then
/// `prepareIncrementProducerEpoch`): a KIP-360 bump from an exhausted epoch
/// rotates the producer id and remembers the old epoch, so a retry of that
/// bump (old id, exhausted epoch) gets the same new id and epoch again
/// instead of a second bump.
#[test]
fn a_retried_kip360_bump_across_a_rotation_returns_the_same_id_and_epoch() {
    let mut c = TxnCoordinator::new();
    let (pid, _) = init(&mut c);
    let exhausted = i16::MAX - 1;
    if let Some(meta) = c.txns.get_mut(TID) {
        meta.producer_epoch = exhausted;
    }
    let first = c
        .init_producer_id(Some(TID), TIMEOUT_MS, Some((pid, exhausted)))
        .unwrap();
    assert_ne!(first.0, pid);
    assert_eq!(first.1, 0);
    assert_eq!(c.transaction(TID).unwrap().last_producer_epoch, exhausted);
    // The answer was lost; the client retries with what it had.
    let retry = c
        .init_producer_id(Some(TID), TIMEOUT_MS, Some((pid, exhausted)))
        .unwrap();
    assert_eq!(retry, first, "a retry is not a second bump");
    // The new id bumps normally afterwards.
    assert_eq!(
        c.init_producer_id(Some(TID), TIMEOUT_MS, Some(first)),
        Ok((first.0, 1))
    );
}

#[test]
fn random_clients_never_break_the_transaction_invariants() {
    let mut seed = 7u64;
    let mut below = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let mut c = TxnCoordinator::new();
    let t0 = Instant::now();
    let mut now = t0;
    let tids = ["a", "b", "c"];
    // What each client instance believes: (producer id, epoch).
    let mut clients: Vec<Option<(&str, i64, i16)>> = vec![None; 6];
    let mut last: std::collections::HashMap<&str, (i64, i16)> = Default::default();
    let mut pending: Vec<(Instant, String)> = Vec::new();
    let mut aborts = 0;
    for _ in 0..3000 {
        let k = usize::try_from(below(6)).unwrap();
        let tid = tids[k % 3];
        match (below(5), clients[k]) {
            (0, _) | (_, None) => {
                if let Ok((pid, epoch)) = c.init_producer_id(Some(tid), 5_000, None) {
                    clients[k] = Some((tid, pid, epoch));
                }
            }
            (1, Some((tid, pid, epoch))) => {
                let p = i32::try_from(below(3)).unwrap();
                let _ = c.add_partitions(tid, pid, epoch, &[tp("t", p)], now);
            }
            (2, Some((tid, pid, epoch))) => {
                let _ = c.end_txn(tid, pid, epoch, below(2) == 0);
            }
            (3, Some((tid, pid, epoch))) => {
                let _ = c.add_offsets(tid, pid, epoch, "g", now);
            }
            _ => {
                now += Duration::from_millis(below(3_000));
                pending.extend(c.take_wakeups());
                pending.sort();
                while pending.first().is_some_and(|(at, _)| *at <= now) {
                    let (_, tid) = pending.remove(0);
                    c.on_timer(&tid, now);
                }
            }
        }
        for end in c.take_ends() {
            aborts += usize::from(end.kind == ControlKind::Abort);
            // A transaction ends once, with what it touched, at the id's
            // current epoch, and leaves it complete.
            let meta = c.transaction(&end.transactional_id).unwrap();
            assert_eq!(
                (end.producer_id, end.producer_epoch),
                (meta.producer_id, meta.producer_epoch)
            );
            assert!(matches!(
                meta.state,
                TxnState::CompleteCommit | TxnState::CompleteAbort
            ));
            assert!(meta.partitions.is_empty() && meta.groups.is_empty());
            assert!(
                !end.partitions.is_empty() || !end.groups.is_empty(),
                "an empty transaction never opens"
            );
        }
        for meta in c.transactions() {
            let id = meta.transactional_id.as_str();
            let (pid, epoch) = (meta.producer_id, meta.producer_epoch);
            if let Some(&(last_pid, last_epoch)) = last.get(id) {
                assert!(
                    pid != last_pid || epoch >= last_epoch,
                    "{id}: the epoch went back"
                );
            }
            last.insert(
                tids.iter().find(|t| **t == id).copied().unwrap(),
                (pid, epoch),
            );
            assert_eq!(meta.state == TxnState::Ongoing, meta.started.is_some());
            assert!(!matches!(
                meta.state,
                TxnState::PrepareCommit | TxnState::PrepareAbort
            ));
        }
        let pids: std::collections::HashSet<i64> =
            c.transactions().map(|m| m.producer_id).collect();
        assert_eq!(
            pids.len(),
            c.transactions().count(),
            "producer ids are unique"
        );
    }
    assert!(aborts > 0, "the run exercised aborts");
}

/// Transaction version 2 as Kafka 4.4 answers it: every EndTxn v5 bumps
/// the epoch and returns it, its markers carry the bumped epoch, a retry
/// with the epoch before the bump gets the same answer, an abort of
/// nothing is accepted with a bump, and a stale epoch is fenced.
#[test]
fn transaction_version_2_bumps_the_epoch_at_every_end_txn() {
    let mut c = TxnCoordinator::new();
    let now = Instant::now();
    let (pid, e0) = init(&mut c);
    c.add_partition_implicitly(TID, pid, e0, tp("out", 0), now)
        .unwrap();
    assert_eq!(state(&c), TxnState::Ongoing);
    let (pid1, e1) = c.end_txn_v2(TID, pid, e0, true).unwrap();
    assert_eq!((pid1, e1), (pid, e0 + 1));
    let ends = c.take_ends();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].producer_epoch, e1, "markers carry the bumped epoch");
    assert_eq!(ends[0].kind, ControlKind::Commit);
    // A retry of that EndTxn (its answer lost) names the old epoch.
    assert_eq!(c.end_txn_v2(TID, pid, e0, true), Ok((pid, e1)));
    assert!(c.take_ends().is_empty());
    // The old epoch can no longer add anything.
    assert_eq!(
        c.add_partition_implicitly(TID, pid, e0, tp("out", 0), now),
        Err(ResponseError::ProducerFenced)
    );
    // An abort of nothing (no partition reached the coordinator) is
    // accepted and bumps the epoch, without markers.
    assert_eq!(c.end_txn_v2(TID, pid, e1, false), Ok((pid, e1 + 1)));
    assert!(c.take_ends().is_empty());
    // An epoch two behind is fenced.
    assert_eq!(
        c.end_txn_v2(TID, pid, e1 - 1, false),
        Err(ResponseError::ProducerFenced)
    );
}

/// At an exhausted epoch EndTxn v5 rotates the producer id (epoch 0) and a
/// retry naming the old id and its last epoch gets the new pair.
#[test]
fn transaction_version_2_rotates_the_producer_id_when_the_epoch_runs_out() {
    let mut c = TxnCoordinator::new();
    let now = Instant::now();
    let (pid, _) = init(&mut c);
    let last = i16::MAX - 1;
    if let Some(meta) = c.txns.get_mut(TID) {
        meta.producer_epoch = last;
    }
    c.add_partition_implicitly(TID, pid, last, tp("out", 0), now)
        .unwrap();
    let (new_pid, epoch) = c.end_txn_v2(TID, pid, last, false).unwrap();
    assert_ne!(new_pid, pid);
    assert_eq!(epoch, 0);
    assert_eq!(c.end_txn_v2(TID, pid, last, false), Ok((new_pid, 0)));
}
