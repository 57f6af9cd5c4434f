//! Integration tests for Weir: against a real broker (see tests/), and
//! the exactly-once checker and in-memory dialer used with the testkit.

pub mod eos;
pub mod eos_group;
pub mod fidelity;
pub mod kafka_logs;
pub mod real_broker;
pub mod streams_checker;
pub mod testkit_dial;
pub mod word_count;
