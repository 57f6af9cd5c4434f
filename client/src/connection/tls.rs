//! TLS over rustls (ring provider).

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;

use crate::{ClientError, Result};

/// How to verify the broker and, optionally, who we are.
#[derive(Clone)]
pub struct TlsConfig {
    config: Arc<rustls::ClientConfig>,
    server_name: Option<String>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

fn tls_err(what: &str, e: impl std::fmt::Display) -> ClientError {
    ClientError::Tls(format!("{what}: {e}"))
}

fn read_certs(pem: &[u8]) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    let certs: Vec<_> = rustls_pemfile::certs(&mut &pem[..])
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| tls_err("reading PEM certificates", e))?;
    if certs.is_empty() {
        return Err(ClientError::Tls("no certificate found in PEM".to_owned()));
    }
    Ok(certs)
}

fn builder() -> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>> {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err("protocol versions", e))
}

impl TlsConfig {
    /// Trusts the CA certificates in `ca_pem` (PEM, one or more).
    ///
    /// # Errors
    /// [`ClientError::Tls`] if the PEM holds no valid certificate.
    pub fn from_ca_pem(ca_pem: &[u8]) -> Result<Self> {
        Self::build(ca_pem, None)
    }

    /// Trusts the CA certificates in `ca_pem` and authenticates with the
    /// client certificate chain and private key (PEM) (mutual TLS).
    ///
    /// # Errors
    /// [`ClientError::Tls`] if a PEM is invalid or the key does not fit.
    pub fn from_ca_pem_with_client_cert(
        ca_pem: &[u8],
        cert_pem: &[u8],
        key_pem: &[u8],
    ) -> Result<Self> {
        Self::build(ca_pem, Some((cert_pem, key_pem)))
    }

    /// Reads the CA certificates from a PEM file (`ssl.ca.location`).
    ///
    /// # Errors
    /// [`ClientError::Tls`] if the file cannot be read or holds no certificate.
    pub fn from_ca_file(path: &std::path::Path) -> Result<Self> {
        let pem =
            std::fs::read(path).map_err(|e| tls_err(&format!("reading {}", path.display()), e))?;
        Self::from_ca_pem(&pem)
    }

    /// Uses a rustls configuration as it is.
    pub fn from_rustls(config: Arc<rustls::ClientConfig>) -> Self {
        Self {
            config,
            server_name: None,
        }
    }

    /// Verifies the broker's certificate against `name` instead of the host
    /// of the address dialled.
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    fn build(ca_pem: &[u8], client: Option<(&[u8], &[u8])>) -> Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in read_certs(ca_pem)? {
            roots
                .add(cert)
                .map_err(|e| tls_err("adding a CA certificate", e))?;
        }
        let with_roots = builder()?.with_root_certificates(roots);
        let config = match client {
            None => with_roots.with_no_client_auth(),
            Some((cert_pem, key_pem)) => {
                let chain = read_certs(cert_pem)?;
                let key = rustls_pemfile::private_key(&mut &key_pem[..])
                    .map_err(|e| tls_err("reading the private key", e))?
                    .ok_or_else(|| ClientError::Tls("no private key found in PEM".to_owned()))?;
                with_roots
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| tls_err("client certificate", e))?
            }
        };
        Ok(Self::from_rustls(Arc::new(config)))
    }

    /// Runs the TLS handshake over `stream` (TCP, or what a
    /// [`Dialer`](super::Dialer) opened), verifying the certificate for `host`.
    ///
    /// # Errors
    /// [`ClientError::Tls`] for an invalid name, [`ClientError::Io`] when the
    /// handshake fails (including certificate verification).
    pub async fn wrap<S>(&self, host: &str, broker: &str, stream: S) -> Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let name = self.server_name.as_deref().unwrap_or(host).to_owned();
        let name = ServerName::try_from(name).map_err(|e| tls_err("server name", e))?;
        TlsConnector::from(Arc::clone(&self.config))
            .connect(name, stream)
            .await
            .map_err(|source| ClientError::Io {
                broker: broker.to_owned(),
                context: "TLS handshake",
                source,
            })
    }
}
