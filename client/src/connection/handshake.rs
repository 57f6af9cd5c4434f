//! What happens on a new connection before it carries requests: ApiVersions,
//! then SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) if configured.

use std::time::Duration;

use bytes::Bytes;
use weir_protocol::api::decode_response;
use weir_protocol::kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use weir_protocol::kafka_protocol::protocol::{StrBytes, VersionRange};
use weir_protocol::versions::BrokerVersions;
use weir_protocol::{ApiKey, ProtocolError};

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
/// Asks at ApiVersions v3 first. A broker that does not speak the version
/// asked for answers `UNSUPPORTED_VERSION` in the v0 layout (header v0, body
/// v0), listing the ApiVersions range it does speak (Kafka 2.4+); the request
/// is then sent again at the highest version both sides speak, as Kafka's
/// `NetworkClient` and librdkafka do. A refusal whose body cannot be read
/// past its error code, or that lists no ApiVersions range, is retried at v0,
/// which every broker speaks. The ranges of an error response are never used:
/// a broker lists only ApiVersions there.
///
/// # Errors
/// Connection errors; [`ClientError::Server`] for any other error code, or
/// for `UNSUPPORTED_VERSION` at v0 (or a refusal that would not go lower); a
/// response that is neither a well-formed answer nor a readable refusal
/// poisons the connection.
pub async fn negotiate_versions(messenger: &mut Messenger) -> Result<()> {
    let timeout = messenger.options.request_timeout;
    let mut version = API_VERSIONS_VERSION;
    loop {
        let mut req = ApiVersionsRequest::default();
        if version >= 3 {
            req = req
                .with_client_software_name(StrBytes::from_static_str("weir"))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        }
        let frame = messenger
            .roundtrip(ApiKey::ApiVersions, version, &req, timeout, true)
            .await?
            .ok_or(ClientError::Closed)?;
        match read_api_versions(frame, version) {
            VersionsAnswer::Ranges(response) => {
                if response.api_keys.is_empty() {
                    return Err(ClientError::server(
                        response.error_code,
                        ApiKey::ApiVersions,
                    ));
                }
                tracing::debug!(
                    broker = %messenger.broker(),
                    version,
                    apis = response.api_keys.len(),
                    "api versions"
                );
                messenger.set_versions(BrokerVersions::from_response(&response));
                return Ok(());
            }
            VersionsAnswer::Refused(code) => {
                return Err(ClientError::server(code, ApiKey::ApiVersions));
            }
            VersionsAnswer::Downgrade { listed_max } => {
                let next = listed_max.unwrap_or(0).min(API_VERSIONS_VERSION);
                if version == 0 || next >= version {
                    return Err(ClientError::Server {
                        code: KafkaCode::from_code(codes::UNSUPPORTED_VERSION),
                        api: ApiKey::ApiVersions,
                        broker: None,
                        topic: None,
                        partition: None,
                        message: Some(format!(
                            "broker {} refused ApiVersions v{version} and lists {}",
                            messenger.broker(),
                            listed_max.map_or("no ApiVersions range".to_owned(), |m| format!(
                                "v{m} as its highest"
                            ))
                        )),
                    });
                }
                tracing::debug!(
                    broker = %messenger.broker(),
                    refused = version,
                    retry = next,
                    ?listed_max,
                    "broker does not speak this ApiVersions version; asking again lower"
                );
                version = next;
            }
            VersionsAnswer::Garbled(source) => {
                let cause = messenger.shared.poison(messenger.protocol_error(source));
                return Err(messenger.shared.poisoned_error(cause));
            }
        }
    }
}

/// What an ApiVersions response frame says.
#[derive(Debug)]
enum VersionsAnswer {
    /// A well-formed answer at the version asked for, error code not
    /// `UNSUPPORTED_VERSION` (0, or an error the caller reports).
    Ranges(ApiVersionsResponse),
    /// A well-formed answer carrying another error code.
    Refused(i16),
    /// `UNSUPPORTED_VERSION`: ask again lower. `listed_max` is the highest
    /// ApiVersions version the broker listed, if it listed one readably.
    Downgrade { listed_max: Option<i16> },
    /// Neither a well-formed answer nor a readable refusal.
    Garbled(ProtocolError),
}

/// Reads an ApiVersions response `frame` (header v0, then the body) to a
/// request sent at `version`. A broker that does not know `version` answers
/// in the v0 layout, so a body that does not decode at `version` is tried at
/// v0; failing that, the error code alone (the body's first field in every
/// version) is enough to recognise a refusal.
fn read_api_versions(frame: Bytes, version: i16) -> VersionsAnswer {
    let listed_max = |r: &ApiVersionsResponse| {
        r.api_keys
            .iter()
            .find(|k| k.api_key == ApiKey::ApiVersions as i16)
            .map(|k| k.max_version)
    };
    let first = match decode_response::<ApiVersionsRequest>(frame.clone(), version) {
        Ok((_, r)) if r.error_code == codes::UNSUPPORTED_VERSION => {
            return VersionsAnswer::Downgrade {
                listed_max: listed_max(&r),
            };
        }
        Ok((_, r)) if r.error_code == 0 => return VersionsAnswer::Ranges(r),
        Ok((_, r)) => return VersionsAnswer::Refused(r.error_code),
        Err(first) => first,
    };
    if version > 0
        && let Ok((_, r)) = decode_response::<ApiVersionsRequest>(frame.clone(), 0)
        && r.error_code == codes::UNSUPPORTED_VERSION
    {
        return VersionsAnswer::Downgrade {
            listed_max: listed_max(&r),
        };
    }
    // Header v0 is the 4-byte correlation id; the error code follows.
    match frame.get(4..6) {
        Some(&[hi, lo]) if i16::from_be_bytes([hi, lo]) == codes::UNSUPPORTED_VERSION => {
            VersionsAnswer::Downgrade { listed_max: None }
        }
        _ => VersionsAnswer::Garbled(first),
    }
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
