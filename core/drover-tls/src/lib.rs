//! drover-tls: the agent's TLS, as Nomad's `tls` block sets it up: one CA, one certificate
//! and key per agent, mutual TLS on the RPC port, TLS (optionally mutual) on the HTTP port.
//!
//! - [`TlsFiles`] names the PEM files; [`AgentTls::load`] reads and checks them into the
//!   rustls configurations both ports need, and [`AgentTls::reload`] reads them again (the
//!   agent's SIGHUP): connections made after a reload use the new files, open ones keep theirs.
//! - [`PeerRole`] is what a verified peer certificate says its holder is: with
//!   `verify_server_hostname`, a server certificate is valid for `server.<region>.nomad` and a
//!   client's for `client.<region>.nomad`, so a client certificate can never act as a server.
//!
//! Must not depend on any Drover crate, nor on an HTTP or RPC stack: the RPC (drover-rpc) and
//! the HTTP API (drover-http) wrap their connections with what this crate builds.

pub mod generate;
pub mod mesh;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_name};
use rustls::crypto::CryptoProvider;
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

/// The rustls these types come from, for callers that match its errors.
pub use rustls;
pub use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

/// Why the agent's TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls.{field}: {path}: {reason}")]
    File {
        field: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("tls.{field}: required when TLS is on")]
    Missing { field: &'static str },
    #[error("tls: {0}")]
    Config(String),
}

/// The files of Nomad's `tls` block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// Nomad's `tls` block, as the agent acts on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    pub http: bool,
    pub rpc: bool,
    pub files: TlsFiles,
    /// Outgoing RPC checks that the server's certificate is valid for `server.<region>.nomad`,
    /// and incoming server-only RPC (Raft, forwarding) wants a server certificate.
    pub verify_server_hostname: bool,
    /// The HTTP API wants a client certificate signed by the CA.
    pub verify_https_client: bool,
    pub region: String,
}

/// What a peer's verified certificate says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerRole {
    /// No TLS on the port, or `verify_server_hostname` off: certificates are not told apart
    /// (every peer the CA signed for is trusted alike, as Nomad does).
    Unchecked,
    /// Valid for `server.<region>.nomad`.
    Server,
    /// Valid for `client.<region>.nomad`.
    Client,
    /// Signed by the CA but for neither name (a CLI certificate, another region's agent).
    Other,
}

impl PeerRole {
    /// True when the peer may do what only servers do (Raft, forwarded writes, federation).
    pub fn may_act_as_server(self) -> bool {
        matches!(self, PeerRole::Unchecked | PeerRole::Server)
    }

    /// True when the peer may do what client agents do (register, heartbeat, sessions).
    pub fn may_act_as_client(self) -> bool {
        matches!(
            self,
            PeerRole::Unchecked | PeerRole::Server | PeerRole::Client
        )
    }
}

/// The name a server's certificate must carry.
pub fn server_name(region: &str) -> String {
    format!("server.{region}.nomad")
}

/// The name a client agent's certificate must carry.
pub fn client_name(region: &str) -> String {
    format!("client.{region}.nomad")
}

/// The rustls configurations of one agent, rebuilt whole on every load.
struct Built {
    /// Mutual TLS: every RPC peer shows a certificate the CA signed.
    rpc_server: Arc<ServerConfig>,
    /// Presents the agent's certificate; checks the server's (for `server.<region>.nomad`
    /// when `verify_server_hostname`).
    rpc_client: Arc<ClientConfig>,
    /// The HTTP API's: a client certificate is required when `verify_https_client`.
    http_server: Arc<ServerConfig>,
}

/// The agent's TLS, reloadable. Cheap to share.
pub struct AgentTls {
    settings: TlsSettings,
    built: RwLock<Arc<Built>>,
}

impl std::fmt::Debug for AgentTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(field: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let fail = |reason: String| TlsError::File {
        field,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| fail(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("no PEM certificate in the file".into()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        field: "key_file",
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn required<'a>(field: &'static str, value: &'a Option<PathBuf>) -> Result<&'a Path, TlsError> {
    value.as_deref().ok_or(TlsError::Missing { field })
}

fn config_error(e: impl std::fmt::Display) -> TlsError {
    TlsError::Config(e.to_string())
}

impl AgentTls {
    /// Reads the files of `settings` (the CA, the agent's certificate and key) and builds
    /// what both ports need. `None` when neither port has TLS on.
    pub fn load(settings: TlsSettings) -> Result<Option<Arc<AgentTls>>, TlsError> {
        if !settings.http && !settings.rpc {
            return Ok(None);
        }
        let built = build(&settings)?;
        Ok(Some(Arc::new(AgentTls {
            settings,
            built: RwLock::new(Arc::new(built)),
        })))
    }

    /// Reads the files again; on an error the agent keeps what it had.
    pub fn reload(&self) -> Result<(), TlsError> {
        let built = build(&self.settings)?;
        *self.built.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(built);
        Ok(())
    }

    fn current(&self) -> Arc<Built> {
        self.built.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    pub fn http_enabled(&self) -> bool {
        self.settings.http
    }

    pub fn rpc_enabled(&self) -> bool {
        self.settings.rpc
    }

    /// Accepts RPC connections (mutual TLS).
    pub fn rpc_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current().rpc_server.clone())
    }

    /// Dials RPC connections to servers.
    pub fn rpc_connector(&self) -> TlsConnector {
        TlsConnector::from(self.current().rpc_client.clone())
    }

    /// The name RPC connections ask for: what servers' certificates carry.
    pub fn rpc_server_name(&self) -> ServerName<'static> {
        // A region name is a DNS label (checked when the config is read); should it not
        // be, the check of the server's certificate fails, which is the safe outcome.
        ServerName::try_from(server_name(&self.settings.region))
            .unwrap_or_else(|_| ServerName::try_from("server.invalid.nomad").expect("valid"))
    }

    /// Accepts HTTPS connections.
    pub fn http_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current().http_server.clone())
    }

    /// What the certificate `peer` (verified by the handshake) says its holder is.
    pub fn role_of(&self, peer: Option<&CertificateDer<'_>>) -> PeerRole {
        if !self.settings.verify_server_hostname {
            return PeerRole::Unchecked;
        }
        role_of(peer, &self.settings.region)
    }
}

/// What certificate `peer` is valid for: `server.<region>.nomad`, `client.<region>.nomad`
/// or neither.
pub fn role_of(peer: Option<&CertificateDer<'_>>, region: &str) -> PeerRole {
    let Some(cert) = peer else {
        return PeerRole::Other;
    };
    let Ok(parsed) = ParsedCertificate::try_from(cert) else {
        return PeerRole::Other;
    };
    let valid_for = |name: String| {
        ServerName::try_from(name)
            .map(|n| verify_server_name(&parsed, &n).is_ok())
            .unwrap_or(false)
    };
    if valid_for(server_name(region)) {
        PeerRole::Server
    } else if valid_for(client_name(region)) {
        PeerRole::Client
    } else {
        PeerRole::Other
    }
}

fn build(settings: &TlsSettings) -> Result<Built, TlsError> {
    let files = &settings.files;
    let ca_path = required("ca_file", &files.ca_file)?;
    let cert_path = required("cert_file", &files.cert_file)?;
    let key_path = required("key_file", &files.key_file)?;
    let mut roots = RootCertStore::empty();
    for ca in read_certs("ca_file", ca_path)? {
        roots.add(ca).map_err(|e| TlsError::File {
            field: "ca_file",
            path: ca_path.to_path_buf(),
            reason: e.to_string(),
        })?;
    }
    let roots = Arc::new(roots);
    let certs = read_certs("cert_file", cert_path)?;
    let key = read_key(key_path)?;
    let provider = provider();

    let client_verifier =
        WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(config_error)?;
    let rpc_server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(|e| TlsError::File {
            field: "key_file",
            path: key_path.to_path_buf(),
            reason: format!("does not match the certificate: {e}"),
        })?;
    let mut rpc_server = rpc_server;
    rpc_server.alpn_protocols = vec![b"h2".to_vec()];

    let http_verifier = if settings.verify_https_client {
        WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(config_error)?
    } else {
        WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .allow_unauthenticated()
            .build()
            .map_err(config_error)?
    };
    let mut http_server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_client_cert_verifier(http_verifier)
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(config_error)?;
    http_server.alpn_protocols = vec![b"http/1.1".to_vec()];

    let server_verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(config_error)?;
    let verifier: Arc<dyn ServerCertVerifier> = if settings.verify_server_hostname {
        server_verifier
    } else {
        Arc::new(ChainOnly(server_verifier))
    };
    let mut rpc_client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(certs, key)
        .map_err(config_error)?;
    rpc_client.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Built {
        rpc_server: Arc::new(rpc_server),
        rpc_client: Arc::new(rpc_client),
        http_server: Arc::new(http_server),
    })
}

/// Checks that the server's certificate chains to the CA and is in date, not what name it
/// carries: Nomad's `verify_server_hostname = false`.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests;
