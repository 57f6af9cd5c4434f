//! The transaction coordinator (Kafka's `TransactionCoordinator`).

/// All transactional ids of the cluster, with their producer ids, epochs and
/// open transactions.
#[derive(Debug, Default)]
pub struct TxnCoordinator {}

impl TxnCoordinator {
    /// An empty coordinator with no transactional ids.
    pub fn new() -> Self {
        Self::default()
    }
}
