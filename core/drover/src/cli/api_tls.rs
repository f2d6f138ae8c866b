//! How the CLI speaks HTTPS: Nomad's `-ca-cert`, `-ca-path`, `-client-cert`, `-client-key`
//! and `-tls-skip-verify` (and their `NOMAD_*` variables) turned into ureq's TLS settings.
//! Without a CA the platform's roots decide, as Go's default does.

use drover_tls::rustls;
use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};

use super::api::ApiError;

/// The HTTPS flags as given; all empty for plain HTTP.
#[derive(Debug, Clone, Default)]
pub struct HttpsOptions {
    pub ca_cert: Option<String>,
    pub ca_path: Option<String>,
    pub client_cert: Option<String>,
    pub client_key: Option<String>,
    pub server_name: Option<String>,
    pub skip_verify: bool,
}

fn tls_error(reason: String) -> ApiError {
    ApiError::Tls { reason }
}

fn read(flag: &str, path: &str) -> Result<Vec<u8>, ApiError> {
    std::fs::read(path).map_err(|e| tls_error(format!("--{flag} {path}: {e}")))
}

/// Every certificate of PEM file `path`, read for `flag`.
fn certificates(flag: &str, path: &str) -> Result<Vec<Certificate<'static>>, ApiError> {
    let pem = read(flag, path)?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(tls_error(format!("--{flag} {path}: {e}"))),
        }
    }
    if certs.is_empty() {
        return Err(tls_error(format!(
            "--{flag} {path}: no PEM certificate in the file"
        )));
    }
    Ok(certs)
}

impl HttpsOptions {
    /// ureq's TLS settings for these flags: the CAs to trust, the client certificate to show.
    pub fn tls_config(&self) -> Result<TlsConfig, ApiError> {
        if self.server_name.is_some() {
            return Err(tls_error(
                "--tls-server-name is not supported yet: address the agent by a name or an \
                 IP address its certificate carries (server certificates carry localhost, \
                 127.0.0.1 and server.<region>.nomad)"
                    .into(),
            ));
        }
        let mut roots = Vec::new();
        if let Some(path) = &self.ca_cert {
            roots.extend(certificates("ca-cert", path)?);
        }
        if let Some(dir) = &self.ca_path {
            let entries =
                std::fs::read_dir(dir).map_err(|e| tls_error(format!("--ca-path {dir}: {e}")))?;
            let mut files: Vec<_> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            files.sort();
            for f in files {
                roots.extend(certificates("ca-path", &f.to_string_lossy())?);
            }
        }
        let client_cert = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = certificates("client-cert", cert)?;
                let key_pem = read("client-key", key)?;
                let key = PrivateKey::from_pem(&key_pem)
                    .map_err(|e| tls_error(format!("--client-key {key}: {e}")))?;
                Some(ClientCert::new_with_certs(&chain, key))
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(tls_error("--client-cert needs --client-key".into()));
            }
            (None, Some(_)) => {
                return Err(tls_error("--client-key needs --client-cert".into()));
            }
        };
        let root_certs = if roots.is_empty() {
            RootCerts::PlatformVerifier
        } else {
            RootCerts::new_with_certs(&roots)
        };
        Ok(TlsConfig::builder()
            .root_certs(root_certs)
            .client_cert(client_cert)
            .disable_verification(self.skip_verify)
            .build())
    }
}

/// What went wrong in a TLS handshake, with what to give the CLI to fix it; `None` when
/// `e` is not a TLS failure.
pub fn handshake_failure(e: &ureq::Error) -> Option<String> {
    let tls = match e {
        ureq::Error::Rustls(t) => t,
        ureq::Error::Io(io) => io.get_ref()?.downcast_ref::<rustls::Error>()?,
        _ => return None,
    };
    let hint = match tls {
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired) => {
            "; the agent verifies HTTPS clients: give -client-cert and -client-key \
             (NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY)"
        }
        rustls::Error::AlertReceived(
            rustls::AlertDescription::BadCertificate | rustls::AlertDescription::UnknownCA,
        ) => "; the agent refused the client certificate (not signed by its CA?)",
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
            "; the agent's certificate is not signed by a CA the CLI trusts: give -ca-cert \
             (NOMAD_CACERT)"
        }
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. },
        ) => "; the agent's certificate does not carry the address's host name",
        _ => "",
    };
    Some(format!("TLS handshake failed ({tls}){hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_or_a_lone_client_key_is_named() {
        let missing = HttpsOptions {
            ca_cert: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let e = missing.tls_config().unwrap_err().to_string();
        assert!(e.contains("--ca-cert /nonexistent/ca.pem"), "{e}");
        let lone = HttpsOptions {
            client_key: Some("k.pem".into()),
            ..Default::default()
        };
        let e = lone.tls_config().unwrap_err().to_string();
        assert!(e.contains("--client-key needs --client-cert"), "{e}");
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let path = std::env::temp_dir().join(format!("drover-ca-{}.pem", std::process::id()));
        std::fs::write(&path, "not a certificate").unwrap();
        let opts = HttpsOptions {
            ca_cert: Some(path.to_string_lossy().into_owned()),
            ..Default::default()
        };
        let e = opts.tls_config().unwrap_err().to_string();
        let _ = std::fs::remove_file(&path);
        assert!(e.contains("no PEM certificate"), "{e}");
    }
}
