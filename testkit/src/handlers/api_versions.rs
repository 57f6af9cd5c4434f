//! ApiVersions: advertises exactly the APIs and versions implemented.

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use weir_protocol::kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, ResponseKind,
};

use super::{Reply, RequestContext, supported_versions};
use crate::cluster::ClusterState;

/// Versions 0 to 3 (v3 is flexible and carries the client's software name).
pub const VERSIONS: (i16, i16) = (0, 3);

fn api_keys() -> Vec<ApiVersion> {
    supported_versions()
        .into_iter()
        .map(|(k, min, max)| {
            ApiVersion::default()
                .with_api_key(k as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect()
}

/// Answers with the supported ranges and, as Kafka 4.x does, the
/// supported and finalized `transaction.version` feature (v3+ only: the
/// fields are tagged).
pub fn handle(
    state: &mut ClusterState,
    _ctx: &RequestContext,
    _req: ApiVersionsRequest,
    _version: i16,
) -> Reply {
    let mut response = ApiVersionsResponse::default()
        .with_api_keys(api_keys())
        .with_supported_features(vec![
            SupportedFeatureKey::default()
                .with_name("transaction.version".into())
                .with_min_version(0)
                .with_max_version(2),
        ]);
    // A broker without partition verification is one before Kafka 3.6,
    // which has no transaction version to report.
    let level = if state.config.transaction_partition_verification {
        state.config.transaction_version
    } else {
        0
    };
    if level > 0 {
        response = response
            .with_finalized_features_epoch(1)
            .with_finalized_features(vec![
                FinalizedFeatureKey::default()
                    .with_name("transaction.version".into())
                    .with_min_version_level(level)
                    .with_max_version_level(level),
            ]);
    }
    Reply::Now(ResponseKind::ApiVersions(response))
}

/// The answer to an ApiVersions at a version the cluster does not speak:
/// `UNSUPPORTED_VERSION` with the supported ranges, to be encoded at v0.
pub fn unsupported_version_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys())
}
