//! The group coordinator and the transaction coordinator.
//!
//! Both are plain state machines: every method takes the request and the
//! current time (`tokio::time::Instant`) and returns a response, or stores a
//! continuation that a later event (another member's join, a timer) completes.
//! They do no I/O, so the state task can own them and unit tests can drive
//! them without sockets. [`driver`] connects them to the cluster state: it
//! answers parked requests, schedules deadlines and writes markers.
//!
//! Where the testkit knowingly differs from a Kafka broker, and why:
//!
//! - Transaction markers are written before EndTxn is answered, so the
//!   Prepare states never outlive a request and a read_committed consumer
//!   sees the outcome as soon as the producer does. (Kafka answers first
//!   and writes the markers asynchronously.)
//! - Every deadline fires exactly on time: session expiry, rebalance and
//!   pending-sync timeouts, and the transaction timeout (Kafka scans for
//!   timed-out transactions every 10 s), so paused-time tests are exact.
//! - TxnOffsetCommit outside an open transaction is refused with
//!   `INVALID_TXN_STATE` instead of leaving a hanging transaction in the
//!   offsets, and joins the group to the transaction even without
//!   AddOffsetsToTxn (as Kafka does for KIP-890 transaction-version-2 clients).
//! - Group and transaction state belongs to the cluster, not to a broker:
//!   when a coordinator's broker is down, the next live broker coordinates
//!   with the same state, like a replica taking over `__consumer_offsets`.

/// Identifies a request parked in a coordinator until it can be answered
/// (the state task's request id).
pub type RequestId = u64;

pub mod driver;
pub mod group;
pub mod txn;
