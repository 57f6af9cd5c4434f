//! The consumer (no group yet): assign partitions, seek, poll.

pub mod fetch_session;
pub mod read_committed;
