//! FindCoordinator: the broker that coordinates a group (key type 0) or a
//! transactional id (key type 1); v4+ looks up several keys at once.

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use weir_protocol::kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, ResponseKind,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;

use super::{Reply, RequestContext};
use crate::cluster::ClusterState;
use crate::coordinator::driver::coordinator_node;

/// Versions 0 to 6 (v4: batched keys, KIP-699; v5 may answer
/// `TRANSACTION_ABORTABLE`, which the testkit never needs to; v6 adds key
/// type 2, a share group's state partition, KIP-932). The testkit has no
/// share groups: key type 2 is answered `INVALID_REQUEST`, as Kafka answers
/// a share key it cannot parse.
pub const VERSIONS: (i16, i16) = (0, 6);

/// One key's answer: (error, node, host, port).
fn locate(state: &ClusterState, key: &str, key_type: i8) -> (i16, i32, String, i32) {
    if !matches!(key_type, 0 | 1) {
        return (ResponseError::InvalidRequest.code(), -1, String::new(), -1);
    }
    let found = coordinator_node(state, key).and_then(|node| {
        let broker = state.brokers.get(usize::try_from(node).ok()?)?;
        Some((node, i32::from(broker.port)))
    });
    match found {
        Some((node, port)) => (0, node, "127.0.0.1".to_owned(), port),
        None => (
            ResponseError::CoordinatorNotAvailable.code(),
            -1,
            String::new(),
            -1,
        ),
    }
}

/// Answers with the coordinator of each key.
pub fn handle(
    state: &mut ClusterState,
    _ctx: &RequestContext,
    req: FindCoordinatorRequest,
    version: i16,
) -> Reply {
    // v0 knows only groups.
    let key_type = if version >= 1 { req.key_type } else { 0 };
    let response = if version >= 4 {
        let coordinators = req
            .coordinator_keys
            .iter()
            .map(|key| {
                let (code, node, host, port) = locate(state, key, key_type);
                Coordinator::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(node))
                    .with_host(StrBytes::from_string(host))
                    .with_port(port)
                    .with_error_code(code)
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        let (code, node, host, port) = locate(state, &req.key, key_type);
        FindCoordinatorResponse::default()
            .with_error_code(code)
            .with_node_id(BrokerId(node))
            .with_host(StrBytes::from_string(host))
            .with_port(port)
    };
    Reply::Now(ResponseKind::FindCoordinator(response))
}
