//! The proxy's configuration file: written by the client into the proxy task's secrets
//! directory (mode 0600: it holds the workload's private key), read again by the proxy
//! whenever it changes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::intentions::Intentions;

/// Everything one proxy needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyConfig {
    pub trust_domain: String,
    pub namespace: String,
    /// The service this proxy fronts (from its task's kind).
    pub service: String,
    /// Where callers reach this service over the mesh, and the service's own port.
    pub inbound: Option<Inbound>,
    pub upstreams: Vec<Upstream>,
    pub expose: Vec<ExposePath>,
    /// Where each destination's proxies listen, by service name.
    pub endpoints: BTreeMap<String, Vec<SocketAddr>>,
    pub intentions: Intentions,
    /// The workload's certificate and key, and the mesh CA, PEM.
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbound {
    /// The mTLS listener (every address of the allocation's namespace).
    pub bind: SocketAddr,
    /// The service inside the namespace.
    pub local: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upstream {
    pub destination: String,
    /// The plain-text listener the workload dials (the allocation's loopback).
    pub bind: SocketAddr,
}

/// Nomad's `expose { path { ... } }`: `path` served in plain text on `listener_port`,
/// forwarded to `local_path_port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExposePath {
    pub path: String,
    pub protocol: String,
    pub local_path_port: u16,
    pub listener_port: u16,
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading the proxy configuration {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the proxy configuration {path} is not valid: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
}

impl ProxyConfig {
    pub fn load(path: &Path) -> Result<ProxyConfig, ConfigError> {
        let text = std::fs::read(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        serde_json::from_slice(&text).map_err(|source| ConfigError::Parse {
            path: path.display().to_string(),
            source,
        })
    }

    /// Writes the file whole (a temporary file renamed over it, so the proxy never reads half
    /// of one), readable by its owner only.
    pub fn store(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    }

    pub fn identity(&self) -> crate::Identity {
        crate::Identity {
            trust_domain: self.trust_domain.clone(),
            namespace: self.namespace.clone(),
            service: self.service.clone(),
        }
    }
}
