//! The cluster: its state, the task that owns it, and the public handle.

pub mod fetch_sessions;
mod handle;
pub mod state;
pub(crate) mod task;
pub mod timers;
pub mod topic_configs;

pub use handle::{Cluster, ClusterBuilder, DataOnRestart};
pub use state::{ClusterConfig, ClusterState};
