//! ApiVersions: advertises exactly the APIs and versions implemented.

use weir_protocol::kafka_protocol::ResponseError;
use weir_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
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

/// Answers with the supported ranges.
pub fn handle(
    _state: &mut ClusterState,
    _ctx: &RequestContext,
    _req: ApiVersionsRequest,
    _version: i16,
) -> Reply {
    Reply::Now(ResponseKind::ApiVersions(
        ApiVersionsResponse::default().with_api_keys(api_keys()),
    ))
}

/// The answer to an ApiVersions at a version the cluster does not speak:
/// `UNSUPPORTED_VERSION` with the supported ranges, to be encoded at v0.
pub fn unsupported_version_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys())
}
