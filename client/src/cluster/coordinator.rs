//! Finding the coordinator of a group or a transactional id (FindCoordinator).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weir_protocol::ApiKey;
use weir_protocol::kafka_protocol::messages::FindCoordinatorRequest;
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::{BrokerAddress, BrokerId, Cluster, Lane};
use crate::{ClientError, Result};

/// What a coordinator coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinatorKind {
    /// A consumer group (`group.id`).
    Group,
    /// A transactional producer (`transactional.id`).
    Transaction,
}

impl CoordinatorKind {
    fn wire(self) -> i8 {
        match self {
            CoordinatorKind::Group => 0,
            CoordinatorKind::Transaction => 1,
        }
    }
}

/// Coordinators found so far, by (kind, key).
#[derive(Debug, Default)]
pub(super) struct CoordinatorCache {
    known: Mutex<HashMap<(CoordinatorKind, String), BrokerId>>,
}

impl CoordinatorCache {
    fn get(&self, kind: CoordinatorKind, key: &str) -> Option<BrokerId> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.get(&(kind, key.to_owned())).copied()
    }

    fn put(&self, kind: CoordinatorKind, key: &str, broker: BrokerId) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.insert((kind, key.to_owned()), broker);
    }

    fn forget(&self, kind: CoordinatorKind, key: &str) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.remove(&(kind, key.to_owned()));
    }
}

impl Cluster {
    /// The coordinator of group or transactional id `key`, from the cache or
    /// asked of any broker. Retries while the coordinator is unavailable or
    /// loading, within `default.api.timeout.ms`.
    ///
    /// # Errors
    /// A non-retriable [`ClientError::Server`] (e.g. `GROUP_AUTHORIZATION_FAILED`)
    /// or [`ClientError::RetriesExhausted`].
    pub async fn find_coordinator(&self, kind: CoordinatorKind, key: &str) -> Result<BrokerId> {
        if let Some(b) = self.inner.coordinators.get(kind, key) {
            return Ok(b);
        }
        let what = format!("FindCoordinator({kind:?}, {key})");
        let found = self
            .retry(&what, || self.lookup_coordinator(kind, key))
            .await?;
        self.inner.coordinators.put(kind, key, found);
        Ok(found)
    }

    /// Forgets the coordinator of `key`, after NOT_COORDINATOR or a lost
    /// connection, so the next [`find_coordinator`](Self::find_coordinator) asks again.
    pub fn invalidate_coordinator(&self, kind: CoordinatorKind, key: &str) {
        self.inner.coordinators.forget(kind, key);
    }

    async fn lookup_coordinator(&self, kind: CoordinatorKind, key: &str) -> Result<BrokerId> {
        // The version decides the request layout: v4 batches keys.
        // Any broker can answer; prefer one we are connected to.
        self.metadata(&[]).await?;
        let probe = self.any_broker_candidates().first().copied().unwrap_or(-1);
        let version = self
            .connection(probe, Lane::Metadata)
            .await?
            .version_for::<FindCoordinatorRequest>()?;
        let name = StrBytes::from_string(key.to_owned());
        let mut request = FindCoordinatorRequest::default().with_key_type(kind.wire());
        request = if version >= 4 {
            request.with_coordinator_keys(vec![name])
        } else {
            request.with_key(name)
        };
        let response = self.request(probe, Lane::Metadata, &request).await?;
        let (node, host, port, code, message) =
            if version >= 4 {
                let c = response.coordinators.first().ok_or_else(|| {
                    ClientError::MissingInResponse {
                        api: ApiKey::FindCoordinator,
                        what: key.to_owned(),
                    }
                })?;
                (
                    c.node_id.0,
                    c.host.to_string(),
                    c.port,
                    c.error_code,
                    c.error_message.clone(),
                )
            } else {
                (
                    response.node_id.0,
                    response.host.to_string(),
                    response.port,
                    response.error_code,
                    response.error_message.clone(),
                )
            };
        ClientError::check(code, ApiKey::FindCoordinator, Some(key), None)
            .map_err(|e| e.with_message(message.as_deref()).with_broker(probe))?;
        // A coordinator the metadata does not list yet can still be dialled.
        let md = self.cached_metadata();
        if !md.brokers.contains_key(&node) {
            let mut next = (*md).clone();
            next.brokers.insert(
                node,
                BrokerAddress {
                    id: node,
                    host,
                    port,
                    rack: None,
                },
            );
            self.store_metadata(Arc::new(next));
        }
        tracing::debug!(?kind, key, coordinator = node, "coordinator found");
        Ok(node)
    }
}
