//! How a failed transactional operation is sorted, the way Kafka's
//! `TransactionManager` sorts it.
//!
//! | Class | Causes | What the caller does |
//! | --- | --- | --- |
//! | [`Fatal`](TransactionErrorClass::Fatal) | `PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`, `TRANSACTION_COORDINATOR_FENCED`, `INVALID_TXN_STATE` from the transaction coordinator, `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, `INVALID_TRANSACTION_TIMEOUT` (the configured `transaction.timeout.ms` is over the broker's maximum) | Drop the producer. Another instance owns the transactional id (or the coordinator says this one can never succeed); nothing this one writes can commit. |
//! | [`Abortable`](TransactionErrorClass::Abortable) | `TRANSACTION_ABORTABLE`; `INVALID_TXN_STATE` on Produce (KIP-890 verification: the partition is not in the transaction); a `TxnOffsetCommit` refused with `ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID` or `FENCED_INSTANCE_ID` (the caller's group membership is stale: it is a zombie for those partitions); a record that could not be delivered | Call [`abort`](super::TransactionalProducer::abort), then rejoin the group / rewind the input and go on. |
//! | [`Retriable`](TransactionErrorClass::Retriable) | `CONCURRENT_TRANSACTIONS`, `COORDINATOR_LOAD_IN_PROGRESS`, `NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`, lost connections | Nothing: the client retries these itself. Only when `default.api.timeout.ms` runs out does the caller see one; then calling the same operation again is safe (`commit` and `abort` are idempotent). |

use weir_protocol::ApiKey;

use crate::ClientError;
use crate::kerror::codes;

/// What the caller must do after a transactional operation failed. See
/// the [module documentation](self) for the Kafka errors in each class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransactionErrorClass {
    /// The producer is unusable (fenced); drop it.
    Fatal,
    /// The current transaction must be aborted; then work continues.
    Abortable,
    /// A retriable error outlasted the client's own retries; call the same
    /// operation again.
    Retriable,
}

impl std::fmt::Display for TransactionErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransactionErrorClass::Fatal => "fatal: drop the producer",
            TransactionErrorClass::Abortable => "abortable: abort the transaction",
            TransactionErrorClass::Retriable => "retriable: call the operation again",
        })
    }
}

impl TransactionErrorClass {
    /// The class of a record that could not be delivered: the transaction
    /// cannot commit without it, so anything short of fenced is abortable.
    pub(crate) fn for_record(self) -> TransactionErrorClass {
        match self {
            TransactionErrorClass::Fatal => TransactionErrorClass::Fatal,
            _ => TransactionErrorClass::Abortable,
        }
    }
}

impl ClientError {
    /// The class of a transactional failure, or `None` for errors that are
    /// not about a transaction (for example a bad configuration).
    pub fn transaction_class(&self) -> Option<TransactionErrorClass> {
        match self {
            ClientError::Transaction { class, .. } => Some(*class),
            _ => None,
        }
    }
}

/// Sorts a broker's answer (or a transport failure) into a class.
pub(crate) fn classify(error: &ClientError) -> TransactionErrorClass {
    if let ClientError::Transaction { class, .. } = error {
        return *class;
    }
    if let ClientError::Server {
        code,
        api: ApiKey::Produce,
        ..
    } = error
        && code.code == codes::INVALID_TXN_STATE
    {
        // The partition leader's KIP-890 verification: the partition is
        // not in an open transaction of this epoch. Java's producer makes
        // that abortable (`maybeTransitionToErrorState`); only the
        // coordinator's INVALID_TXN_STATE is fatal.
        return TransactionErrorClass::Abortable;
    }
    match error.kafka_code().map(|c| c.code) {
        Some(
            codes::PRODUCER_FENCED
            | codes::INVALID_PRODUCER_EPOCH
            | codes::TRANSACTION_COORDINATOR_FENCED
            | codes::INVALID_TXN_STATE
            | codes::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            // Java's `InitProducerIdHandler` makes it fatal too: the same
            // configuration is refused again on every try.
            | codes::INVALID_TRANSACTION_TIMEOUT,
        ) => TransactionErrorClass::Fatal,
        Some(
            codes::CONCURRENT_TRANSACTIONS
            | codes::COORDINATOR_LOAD_IN_PROGRESS
            | codes::NOT_COORDINATOR
            | codes::COORDINATOR_NOT_AVAILABLE,
        ) => TransactionErrorClass::Retriable,
        _ if matches!(error, ClientError::RetriesExhausted { .. }) => {
            TransactionErrorClass::Retriable
        }
        _ if error.is_retriable() => TransactionErrorClass::Retriable,
        _ => TransactionErrorClass::Abortable,
    }
}

/// Whether the coordinator moved or is unreachable, so the cached
/// coordinator must be looked up again.
pub(crate) fn coordinator_moved(error: &ClientError) -> bool {
    error.is_network()
        || matches!(
            error.kafka_code().map(|c| c.code),
            Some(codes::NOT_COORDINATOR | codes::COORDINATOR_NOT_AVAILABLE)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of(code: i16) -> TransactionErrorClass {
        classify(&ClientError::server(code, ApiKey::EndTxn))
    }

    #[test]
    fn kafka_codes_sort_into_the_three_classes() {
        use TransactionErrorClass::{Abortable, Fatal, Retriable};
        let table = [
            (codes::PRODUCER_FENCED, Fatal),
            (codes::INVALID_PRODUCER_EPOCH, Fatal),
            (codes::TRANSACTION_COORDINATOR_FENCED, Fatal),
            (codes::INVALID_TRANSACTION_TIMEOUT, Fatal),
            (codes::TRANSACTION_ABORTABLE, Abortable),
            (codes::ILLEGAL_GENERATION, Abortable),
            (codes::UNKNOWN_MEMBER_ID, Abortable),
            (codes::FENCED_INSTANCE_ID, Abortable),
            (codes::CONCURRENT_TRANSACTIONS, Retriable),
            (codes::COORDINATOR_LOAD_IN_PROGRESS, Retriable),
            (codes::NOT_COORDINATOR, Retriable),
        ];
        for (code, class) in table {
            assert_eq!(class_of(code), class, "code {code}");
        }
        // INVALID_TXN_STATE: fatal from the coordinator, abortable from
        // the partition leader's verification.
        assert_eq!(class_of(codes::INVALID_TXN_STATE), Fatal);
        assert_eq!(
            classify(&ClientError::server(
                codes::INVALID_TXN_STATE,
                ApiKey::Produce
            )),
            Abortable
        );
    }
}
