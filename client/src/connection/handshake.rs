//! What happens on a new connection before it carries requests: ApiVersions,
//! then SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) if configured.

use std::time::Duration;

use weir_protocol::ApiKey;
use weir_protocol::api::decode_response;
use weir_protocol::kafka_protocol::messages::{
    ApiVersionsRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use weir_protocol::kafka_protocol::protocol::{StrBytes, VersionRange};
use weir_protocol::versions::BrokerVersions;

use super::Messenger;
use super::scram::{ScramClient, ScramMechanism};
use crate::kerror::{KafkaCode, codes};
use crate::{ClientError, Result};

/// The ApiVersions version Weir asks for first.
const API_VERSIONS_VERSION: i16 = 3;

/// A SASL mechanism Weir speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SaslMechanism {
    /// PLAIN (RFC 4616): the password in clear, so only over TLS in earnest.
    #[default]
    Plain,
    /// SCRAM-SHA-256 (RFC 7677).
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
}

impl SaslMechanism {
    /// The name the broker knows it by.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => ScramMechanism::Sha256.name(),
            SaslMechanism::ScramSha512 => ScramMechanism::Sha512.name(),
        }
    }
}

/// SASL credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslConfig {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("SaslConfig")
            .field("mechanism", &self.mechanism.name())
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

/// Authenticates with the configured mechanism: SaslHandshake v1, then one
/// SaslAuthenticate (PLAIN) or two (SCRAM). Returns the session lifetime the
/// broker granted (KIP-368), if it set one.
///
/// # Errors
/// [`ClientError::Sasl`] when the broker refuses the mechanism or the
/// credentials (or, for SCRAM, cannot prove it knows them), or connection
/// errors.
pub async fn authenticate(messenger: &Messenger, sasl: &SaslConfig) -> Result<Option<Duration>> {
    let mechanism = sasl.mechanism.name();
    let sasl_error = |message: String| ClientError::Sasl {
        broker: messenger.broker().to_owned(),
        mechanism: mechanism.to_owned(),
        message,
    };
    // v0 would mean raw, unframed SASL tokens after the handshake; Weir
    // speaks only the framed form.
    let handshake_version = messenger
        .versions()
        .negotiate(ApiKey::SaslHandshake, VersionRange { min: 1, max: 1 })
        .map_err(|e| sasl_error(e.to_string()))?;
    let handshake =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    let timeout = messenger.options.request_timeout;
    let response = messenger
        .request_at(handshake_version, &handshake, timeout)
        .await?;
    if response.error_code != 0 {
        let enabled: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(sasl_error(format!(
            "mechanism refused ({}); the broker enables: {}",
            KafkaCode::from_code(response.error_code),
            enabled.join(", ")
        )));
    }
    let session;
    match sasl.mechanism {
        SaslMechanism::Plain => {
            let mut token = Vec::with_capacity(sasl.username.len() + sasl.password.len() + 2);
            token.push(0);
            token.extend_from_slice(sasl.username.as_bytes());
            token.push(0);
            token.extend_from_slice(sasl.password.as_bytes());
            let (_, lifetime) = exchange(messenger, token, &sasl_error).await?;
            session = lifetime;
        }
        SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
            let m = if sasl.mechanism == SaslMechanism::ScramSha256 {
                ScramMechanism::Sha256
            } else {
                ScramMechanism::Sha512
            };
            let client = ScramClient::new(m, &sasl.username, &sasl.password);
            let (server_first, _) =
                exchange(messenger, client.client_first().into_bytes(), &sasl_error).await?;
            let server_first = String::from_utf8(server_first)
                .map_err(|_| sasl_error("server-first is not UTF-8".into()))?;
            let (client_final, awaiting) =
                client.client_final(&server_first).map_err(&sasl_error)?;
            let (server_final, lifetime) =
                exchange(messenger, client_final.into_bytes(), &sasl_error).await?;
            session = lifetime;
            let server_final = String::from_utf8(server_final)
                .map_err(|_| sasl_error("server-final is not UTF-8".into()))?;
            awaiting.verify(&server_final).map_err(&sasl_error)?;
        }
    }
    tracing::debug!(broker = %messenger.broker(), user = %sasl.username, mechanism, ?session, "SASL authenticated");
    Ok(session)
}

/// One SaslAuthenticate round trip: sends `token`, returns the server's bytes
/// and the session lifetime, if the broker set one.
async fn exchange(
    messenger: &Messenger,
    token: Vec<u8>,
    sasl_error: &impl Fn(String) -> ClientError,
) -> Result<(Vec<u8>, Option<Duration>)> {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(token.into());
    let response = messenger.request(&request).await?;
    if response.error_code != 0 {
        let detail = response
            .error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default();
        return Err(sasl_error(format!(
            "authentication failed ({}): {detail}",
            KafkaCode::from_code(response.error_code)
        )));
    }
    let lifetime = u64::try_from(response.session_lifetime_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    Ok((response.auth_bytes.to_vec(), lifetime))
}
