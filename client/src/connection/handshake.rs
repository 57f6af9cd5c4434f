//! What happens on a new connection before it carries requests: ApiVersions,
//! then SASL authentication if configured.

use weir_protocol::ApiKey;
use weir_protocol::api::decode_response;
use weir_protocol::kafka_protocol::messages::{
    ApiVersionsRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use weir_protocol::kafka_protocol::protocol::StrBytes;
use weir_protocol::versions::BrokerVersions;

use super::Messenger;
use crate::kerror::codes;
use crate::{ClientError, Result};

/// The ApiVersions version Weir asks for first.
const API_VERSIONS_VERSION: i16 = 3;

/// SASL credentials. Only PLAIN is implemented; SCRAM is not yet.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslConfig {
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("SaslConfig")
            .field("mechanism", &"PLAIN")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Learns the broker's API versions and stores them in `messenger`.
///
/// A broker that does not know ApiVersions v3 answers in the v0 layout with
/// `UNSUPPORTED_VERSION` and its ranges, which is enough to go on.
///
/// # Errors
/// Connection errors, or [`ClientError::Server`] for any other error code.
pub async fn negotiate_versions(messenger: &mut Messenger) -> Result<()> {
    let req = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("weir"))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
    let timeout = messenger.options.request_timeout;
    let frame = messenger
        .roundtrip(
            ApiKey::ApiVersions,
            API_VERSIONS_VERSION,
            &req,
            timeout,
            true,
        )
        .await?
        .ok_or(ClientError::Closed)?;
    let response = match decode_response::<ApiVersionsRequest>(frame.clone(), API_VERSIONS_VERSION)
    {
        Ok((_, r)) => r,
        Err(first) => match decode_response::<ApiVersionsRequest>(frame, 0) {
            Ok((_, r)) if r.error_code == codes::UNSUPPORTED_VERSION => r,
            _ => {
                let cause = messenger.shared.poison(messenger.protocol_error(first));
                return Err(messenger.shared.poisoned_error(cause));
            }
        },
    };
    if response.error_code != 0 && response.error_code != codes::UNSUPPORTED_VERSION {
        return Err(ClientError::server(
            response.error_code,
            ApiKey::ApiVersions,
        ));
    }
    if response.api_keys.is_empty() {
        return Err(ClientError::server(
            response.error_code,
            ApiKey::ApiVersions,
        ));
    }
    tracing::debug!(broker = %messenger.broker(), apis = response.api_keys.len(), "api versions");
    messenger.set_versions(BrokerVersions::from_response(&response));
    Ok(())
}

/// Authenticates with SASL/PLAIN (RFC 4616): SaslHandshake v1, then
/// SaslAuthenticate carrying `\0user\0password`.
///
/// # Errors
/// [`ClientError::Sasl`] when the broker refuses the mechanism or the
/// credentials, or connection errors.
pub async fn authenticate_plain(messenger: &Messenger, sasl: &SaslConfig) -> Result<()> {
    let sasl_error = |message: String| ClientError::Sasl {
        broker: messenger.broker().to_owned(),
        mechanism: "PLAIN".to_owned(),
        message,
    };
    // v0 would mean raw, unframed SASL tokens after the handshake; Weir
    // speaks only the framed form.
    let handshake_version = messenger
        .versions()
        .negotiate(
            ApiKey::SaslHandshake,
            weir_protocol::kafka_protocol::protocol::VersionRange { min: 1, max: 1 },
        )
        .map_err(|e| sasl_error(e.to_string()))?;
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    let timeout = messenger.options.request_timeout;
    let response = messenger
        .request_at(handshake_version, &handshake, timeout)
        .await?;
    if response.error_code != 0 {
        let enabled: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(sasl_error(format!(
            "mechanism refused ({}); the broker enables: {}",
            crate::kerror::KafkaCode::from_code(response.error_code),
            enabled.join(", ")
        )));
    }
    let mut token = Vec::with_capacity(sasl.username.len() + sasl.password.len() + 2);
    token.push(0);
    token.extend_from_slice(sasl.username.as_bytes());
    token.push(0);
    token.extend_from_slice(sasl.password.as_bytes());
    let authenticate = SaslAuthenticateRequest::default().with_auth_bytes(token.into());
    let response = messenger.request(&authenticate).await?;
    if response.error_code != 0 {
        let detail = response
            .error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default();
        return Err(sasl_error(format!(
            "authentication failed ({}): {detail}",
            crate::kerror::KafkaCode::from_code(response.error_code)
        )));
    }
    tracing::debug!(broker = %messenger.broker(), user = %sasl.username, "SASL/PLAIN authenticated");
    Ok(())
}
