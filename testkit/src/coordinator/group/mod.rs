//! The classic consumer group coordinator (Kafka's `GroupCoordinator`).

/// All consumer groups of the cluster, with their members and committed
/// offsets.
#[derive(Debug, Default)]
pub struct GroupCoordinator {}

impl GroupCoordinator {
    /// An empty coordinator with no groups.
    pub fn new() -> Self {
        Self::default()
    }
}
