//! The group coordinator and the transaction coordinator.
//!
//! Both are plain state machines: every method takes the request and the
//! current time (`tokio::time::Instant`) and returns a response, or stores a
//! continuation that a later event (another member's join, a timer) completes.
//! They do no I/O, so the state task can own them and unit tests can drive
//! them without sockets. [`driver`] connects them to the cluster state: it
//! answers parked requests, schedules deadlines and writes markers.

/// Identifies a request parked in a coordinator until it can be answered
/// (the state task's request id).
pub type RequestId = u64;

pub mod driver;
pub mod group;
pub mod txn;
