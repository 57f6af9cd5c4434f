//! Settings every client shares: where the brokers are, timeouts, retries,
//! security.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{
    invalid_property, parse_bool, parse_choice, parse_list, parse_millis, parse_number,
    unknown_property,
};
use crate::connection::{
    ConnectOptions, Dialer, MessengerOptions, SaslConfig, SaslMechanism, Throttle, TlsConfig,
};
use crate::{ClientError, Result};

/// How connections are secured (`security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecurityProtocol {
    /// Plain TCP.
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL over plain TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// The settings shared by the producer, the consumer and the admin client.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// `bootstrap.servers`: `host:port` addresses to learn the cluster from.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`, sent with every request.
    pub client_id: String,
    /// `request.timeout.ms`: how long one request may wait for its response.
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms`: dialling plus handshake.
    pub connect_timeout: Duration,
    /// `default.api.timeout.ms`: how long an operation may keep retrying.
    pub default_api_timeout: Duration,
    /// `metadata.max.age.ms`: metadata older than this is refreshed.
    pub metadata_max_age: Duration,
    /// `retry.backoff.ms`: the first wait before a retry.
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms`: the longest wait between retries.
    pub retry_backoff_max: Duration,
    /// `receive.message.max.bytes`: the largest response frame accepted.
    pub max_response_size: usize,
    /// `allow.auto.create.topics`: whether Metadata may create topics.
    pub allow_auto_create_topics: bool,
    /// `security.protocol`.
    pub security_protocol: SecurityProtocol,
    /// `ssl.ca.location`: PEM file of the CAs to trust.
    pub ssl_ca_location: Option<PathBuf>,
    /// `ssl.certificate.location`: PEM client certificate chain (mutual TLS).
    pub ssl_certificate_location: Option<PathBuf>,
    /// `ssl.key.location`: PEM private key of the client certificate.
    pub ssl_key_location: Option<PathBuf>,
    /// TLS configured in code; wins over the `ssl.*` files.
    pub tls: Option<TlsConfig>,
    /// `sasl.mechanism`, `sasl.username` and `sasl.password` (or `sasl.jaas.config`).
    pub sasl: Option<SaslConfig>,
    /// Opens connections in place of TCP (set in code only, e.g. to run
    /// against an in-process cluster in memory); see [`Dialer`].
    pub dialer: Option<Dialer>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: Vec::new(),
            client_id: "weir".to_owned(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            default_api_timeout: Duration::from_secs(60),
            metadata_max_age: Duration::from_secs(300),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_millis(1000),
            max_response_size: weir_protocol::frame::DEFAULT_MAX_FRAME_SIZE,
            allow_auto_create_topics: true,
            security_protocol: SecurityProtocol::Plaintext,
            ssl_ca_location: None,
            ssl_certificate_location: None,
            ssl_key_location: None,
            tls: None,
            sasl: None,
            dialer: None,
        }
    }
}

impl ClientConfig {
    /// The property keys [`apply`](Self::apply) accepts.
    pub const KEYS: &'static [&'static str] = &[
        "bootstrap.servers",
        "client.id",
        "request.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "default.api.timeout.ms",
        "metadata.max.age.ms",
        "retry.backoff.ms",
        "retry.backoff.max.ms",
        "receive.message.max.bytes",
        "allow.auto.create.topics",
        "security.protocol",
        "sasl.mechanism",
        "sasl.username",
        "sasl.password",
        "sasl.jaas.config",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
    ];

    /// A builder starting from the defaults.
    pub fn builder() -> ClientConfigBuilder {
        ClientConfigBuilder::default()
    }

    /// Builds a configuration from Kafka-named properties.
    ///
    /// # Errors
    /// [`ClientError::UnknownProperty`] for a key not in [`KEYS`](Self::KEYS),
    /// [`ClientError::InvalidProperty`] for a bad value or an incomplete
    /// combination (e.g. `security.protocol=SASL_SSL` without credentials).
    pub fn from_properties(props: &[(&str, &str)]) -> Result<Self> {
        let mut config = ClientConfig::default();
        for (key, value) in props {
            if !config.apply(key, value)? {
                return Err(unknown_property(key, "admin client", Self::KEYS));
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Applies one property if it is a common one. Returns `Ok(false)` for a
    /// key that is not, so the producer and consumer configs can try their own
    /// keys and report unknown ones with the union of accepted keys.
    ///
    /// # Errors
    /// [`ClientError::InvalidProperty`] for a bad value.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<bool> {
        match key {
            "bootstrap.servers" => {
                let servers = parse_list(value);
                if servers.is_empty() || servers.iter().any(|s| !s.contains(':')) {
                    return Err(invalid_property(
                        key,
                        value,
                        "a comma-separated list of host:port",
                    ));
                }
                self.bootstrap_servers = servers;
            }
            "client.id" => self.client_id = value.to_owned(),
            "request.timeout.ms" => self.request_timeout = parse_millis(key, value)?,
            "socket.connection.setup.timeout.ms" => {
                self.connect_timeout = parse_millis(key, value)?
            }
            "default.api.timeout.ms" => self.default_api_timeout = parse_millis(key, value)?,
            "metadata.max.age.ms" => self.metadata_max_age = parse_millis(key, value)?,
            "retry.backoff.ms" => self.retry_backoff = parse_millis(key, value)?,
            "retry.backoff.max.ms" => self.retry_backoff_max = parse_millis(key, value)?,
            "receive.message.max.bytes" => {
                self.max_response_size = parse_number(key, value, 1024, i32::MAX as usize)?;
            }
            "allow.auto.create.topics" => self.allow_auto_create_topics = parse_bool(key, value)?,
            "security.protocol" => {
                self.security_protocol = parse_choice(
                    key,
                    value,
                    &[
                        ("PLAINTEXT", SecurityProtocol::Plaintext),
                        ("SSL", SecurityProtocol::Ssl),
                        ("SASL_PLAINTEXT", SecurityProtocol::SaslPlaintext),
                        ("SASL_SSL", SecurityProtocol::SaslSsl),
                    ],
                )?;
            }
            // OAUTHBEARER and GSSAPI are not implemented.
            "sasl.mechanism" => {
                self.sasl_mut().mechanism = parse_choice(
                    key,
                    value,
                    &[
                        ("PLAIN", SaslMechanism::Plain),
                        ("SCRAM-SHA-256", SaslMechanism::ScramSha256),
                        ("SCRAM-SHA-512", SaslMechanism::ScramSha512),
                    ],
                )?;
            }
            "sasl.jaas.config" => {
                let (username, password) = parse_plain_jaas(key, value)?;
                let sasl = self.sasl_mut();
                sasl.username = username;
                sasl.password = password;
            }
            "sasl.username" => self.sasl_mut().username = value.to_owned(),
            "sasl.password" => self.sasl_mut().password = value.to_owned(),
            "ssl.ca.location" => self.ssl_ca_location = Some(PathBuf::from(value)),
            "ssl.certificate.location" => {
                self.ssl_certificate_location = Some(PathBuf::from(value))
            }
            "ssl.key.location" => self.ssl_key_location = Some(PathBuf::from(value)),
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn sasl_mut(&mut self) -> &mut SaslConfig {
        self.sasl.get_or_insert_with(|| SaslConfig {
            mechanism: SaslMechanism::Plain,
            username: String::new(),
            password: String::new(),
        })
    }

    /// Checks that the settings fit together.
    ///
    /// # Errors
    /// [`ClientError::InvalidProperty`] naming the key at fault.
    pub fn validate(&self) -> Result<()> {
        if self.bootstrap_servers.is_empty() {
            return Err(invalid_property(
                "bootstrap.servers",
                "",
                "at least one host:port",
            ));
        }
        if self.security_protocol.uses_sasl()
            && self.sasl.as_ref().is_none_or(|s| s.username.is_empty())
        {
            return Err(invalid_property(
                "sasl.username",
                "",
                "a user name when security.protocol is SASL_PLAINTEXT or SASL_SSL",
            ));
        }
        if self.security_protocol.uses_tls() && self.tls.is_none() && self.ssl_ca_location.is_none()
        {
            return Err(invalid_property(
                "ssl.ca.location",
                "",
                "a PEM file of trusted CAs when security.protocol is SSL or SASL_SSL",
            ));
        }
        if self.ssl_certificate_location.is_some() != self.ssl_key_location.is_some() {
            return Err(invalid_property(
                "ssl.key.location",
                "",
                "both ssl.certificate.location and ssl.key.location, or neither",
            ));
        }
        Ok(())
    }

    /// The options every new connection is opened with. The cluster gives
    /// each (broker, lane) its own [`Throttle`].
    ///
    /// # Errors
    /// [`ClientError::Tls`] if the `ssl.*` files cannot be read.
    pub fn connect_options(&self) -> Result<ConnectOptions> {
        let tls = if !self.security_protocol.uses_tls() {
            None
        } else if let Some(tls) = &self.tls {
            Some(tls.clone())
        } else if let Some(ca) = &self.ssl_ca_location {
            let read = |p: &PathBuf| {
                std::fs::read(p)
                    .map_err(|e| ClientError::Tls(format!("reading {}: {e}", p.display())))
            };
            let ca = read(ca)?;
            match (&self.ssl_certificate_location, &self.ssl_key_location) {
                (Some(cert), Some(key)) => Some(TlsConfig::from_ca_pem_with_client_cert(
                    &ca,
                    &read(cert)?,
                    &read(key)?,
                )?),
                _ => Some(TlsConfig::from_ca_pem(&ca)?),
            }
        } else {
            return Err(ClientError::Tls(
                "TLS requested but no CA configured".to_owned(),
            ));
        };
        Ok(ConnectOptions {
            messenger: MessengerOptions {
                client_id: Some(self.client_id.clone()),
                request_timeout: self.request_timeout,
                max_frame_size: self.max_response_size,
                throttle: Arc::new(Throttle::default()),
            },
            connect_timeout: Some(self.connect_timeout),
            tls,
            sasl: if self.security_protocol.uses_sasl() {
                self.sasl.clone()
            } else {
                None
            },
            dialer: self.dialer.clone(),
        })
    }
}

/// Reads `username="…"` and `password="…"` from a Java-style
/// `sasl.jaas.config` for `PlainLoginModule` or `ScramLoginModule` (the
/// mechanism itself comes from `sasl.mechanism`, as in Java).
fn parse_plain_jaas(key: &str, value: &str) -> Result<(String, String)> {
    let expected = "org.apache.kafka.common.security.plain.PlainLoginModule (or \
                    scram.ScramLoginModule) required username=\"…\" password=\"…\";";
    if !value.contains("PlainLoginModule") && !value.contains("ScramLoginModule") {
        return Err(invalid_property(key, "(hidden)", expected));
    }
    let field = |name: &str| -> Option<String> {
        let start = value.find(&format!("{name}=\""))? + name.len() + 2;
        let len = value.get(start..)?.find('"')?;
        value.get(start..start + len).map(str::to_owned)
    };
    match (field("username"), field("password")) {
        (Some(u), Some(p)) => Ok((u, p)),
        // The value holds a password: never echo it in the error.
        _ => Err(invalid_property(key, "(hidden)", expected)),
    }
}

/// Builds a [`ClientConfig`] in code.
///
/// ```
/// use std::time::Duration;
/// use weir_client::config::ClientConfig;
///
/// let config = ClientConfig::builder()
///     .bootstrap_servers(["127.0.0.1:9092"])
///     .client_id("orders")
///     .request_timeout(Duration::from_secs(5))
///     .build()?;
/// assert_eq!(config.client_id, "orders");
/// # Ok::<(), weir_client::ClientError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClientConfigBuilder {
    config: ClientConfig,
}

impl ClientConfigBuilder {
    /// `bootstrap.servers`.
    pub fn bootstrap_servers<I, S>(mut self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.bootstrap_servers = servers.into_iter().map(Into::into).collect();
        self
    }

    /// `client.id`.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.config.client_id = id.into();
        self
    }

    /// `request.timeout.ms`.
    pub fn request_timeout(mut self, t: Duration) -> Self {
        self.config.request_timeout = t;
        self
    }

    /// `socket.connection.setup.timeout.ms`.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.config.connect_timeout = t;
        self
    }

    /// `default.api.timeout.ms`.
    pub fn default_api_timeout(mut self, t: Duration) -> Self {
        self.config.default_api_timeout = t;
        self
    }

    /// `metadata.max.age.ms`.
    pub fn metadata_max_age(mut self, t: Duration) -> Self {
        self.config.metadata_max_age = t;
        self
    }

    /// `retry.backoff.ms` and `retry.backoff.max.ms`.
    pub fn retry_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.config.retry_backoff = first;
        self.config.retry_backoff_max = max;
        self
    }

    /// `allow.auto.create.topics`.
    pub fn allow_auto_create_topics(mut self, allow: bool) -> Self {
        self.config.allow_auto_create_topics = allow;
        self
    }

    /// TLS with this configuration (`security.protocol` becomes SSL, or
    /// SASL_SSL with SASL).
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.config.tls = Some(tls);
        self.config.security_protocol = if self.config.security_protocol.uses_sasl() {
            SecurityProtocol::SaslSsl
        } else {
            SecurityProtocol::Ssl
        };
        self
    }

    /// SASL/PLAIN with these credentials.
    pub fn sasl_plain(self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.sasl(SaslMechanism::Plain, username, password)
    }

    /// SASL with `mechanism` and these credentials.
    pub fn sasl(
        mut self,
        mechanism: SaslMechanism,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.config.sasl = Some(SaslConfig {
            mechanism,
            username: username.into(),
            password: password.into(),
        });
        self.config.security_protocol = if self.config.security_protocol.uses_tls() {
            SecurityProtocol::SaslSsl
        } else {
            SecurityProtocol::SaslPlaintext
        };
        self
    }

    /// Opens every connection (bootstrap and brokers) through `dialer`
    /// instead of TCP; TLS and SASL, if configured, run over its streams.
    pub fn dialer(mut self, dialer: Dialer) -> Self {
        self.config.dialer = Some(dialer);
        self
    }

    /// Applies a Kafka-named property.
    ///
    /// # Errors
    /// [`ClientError::UnknownProperty`] or [`ClientError::InvalidProperty`].
    pub fn property(mut self, key: &str, value: &str) -> Result<Self> {
        if !self.config.apply(key, value)? {
            return Err(unknown_property(key, "admin client", ClientConfig::KEYS));
        }
        Ok(self)
    }

    /// Checks and returns the configuration.
    ///
    /// # Errors
    /// As [`ClientConfig::validate`].
    pub fn build(self) -> Result<ClientConfig> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_fill_the_typed_fields() {
        let c = ClientConfig::from_properties(&[
            ("bootstrap.servers", "a:1, b:2"),
            ("client.id", "x"),
            ("request.timeout.ms", "1500"),
            ("retry.backoff.ms", "7"),
            ("allow.auto.create.topics", "false"),
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "alice"),
            ("sasl.password", "secret"),
        ])
        .unwrap();
        assert_eq!(c.bootstrap_servers, ["a:1", "b:2"]);
        assert_eq!(c.client_id, "x");
        assert_eq!(c.request_timeout, Duration::from_millis(1500));
        assert_eq!(c.retry_backoff, Duration::from_millis(7));
        assert!(!c.allow_auto_create_topics);
        assert_eq!(c.security_protocol, SecurityProtocol::SaslPlaintext);
        let opts = c.connect_options().unwrap();
        assert_eq!(opts.sasl.unwrap().password, "secret");
        assert!(
            !format!("{c:?}").contains("secret"),
            "the password is never printed"
        );
    }

    #[test]
    fn java_plain_jaas_config_gives_the_credentials() {
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="p w";"#;
        let c = ClientConfig::from_properties(&[
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.jaas.config", jaas),
        ])
        .unwrap();
        let sasl = c.sasl.unwrap();
        assert_eq!(
            (sasl.username.as_str(), sasl.password.as_str()),
            ("bob", "p w")
        );
        let e = ClientConfig::from_properties(&[(
            "sasl.jaas.config",
            "KerberosLoginModule required password=\"hunter2\";",
        )])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("sasl.jaas.config")
                && e.contains("PlainLoginModule")
                && !e.contains("hunter2"),
            "{e}"
        );
    }

    #[test]
    fn ssl_ca_location_is_read_when_connecting() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let path = std::env::temp_dir().join(format!(
            "weir-ca-{}-{}.pem",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::write(&path, cert.cert.pem()).unwrap();
        let config = |ca: &str| {
            ClientConfig::from_properties(&[
                ("bootstrap.servers", "a:1"),
                ("security.protocol", "SSL"),
                ("ssl.ca.location", ca),
            ])
            .unwrap()
        };
        let opts = config(path.to_str().unwrap()).connect_options().unwrap();
        assert!(opts.tls.is_some() && opts.sasl.is_none());
        std::fs::remove_file(&path).unwrap();
        let err = config(path.to_str().unwrap())
            .connect_options()
            .unwrap_err();
        assert!(
            matches!(err, ClientError::Tls(ref m) if m.contains("weir-ca-")),
            "{err}"
        );
    }

    #[test]
    fn bad_properties_name_key_and_accepted_values() {
        let e = ClientConfig::from_properties(&[("bootstrap.servers", "a:1"), ("linger", "5")])
            .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ClientError::UnknownProperty { ref key, .. } if key == "linger"));
        assert!(
            msg.contains("bootstrap.servers") && msg.contains("client.id"),
            "{msg}"
        );

        let e = ClientConfig::from_properties(&[
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "TLS"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("security.protocol") && e.contains("SASL_SSL"),
            "{e}"
        );

        let e = ClientConfig::from_properties(&[("sasl.mechanism", "GSSAPI")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
            "{e}"
        );

        let e = ClientConfig::from_properties(&[("bootstrap.servers", "nohost")]).unwrap_err();
        assert!(e.to_string().contains("host:port"));

        let e = ClientConfig::from_properties(&[("client.id", "x")]).unwrap_err();
        assert!(e.to_string().contains("bootstrap.servers"));

        let e = ClientConfig::from_properties(&[
            ("bootstrap.servers", "a:1"),
            ("security.protocol", "SSL"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("ssl.ca.location"));
    }
}
