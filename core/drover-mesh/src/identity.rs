//! A workload's mesh identity: the service it is, in which namespace of which trust domain,
//! written as a SPIFFE ID (`spiffe://<trust domain>/ns/<namespace>/svc/<service>`) in its
//! certificate's URI SAN, and as a DNS SAN (`<service>.<namespace>.<trust domain>`) that TLS
//! clients check a server against.
//!
//! A workload's identity comes from its task's kind (`connect-proxy:<service>`,
//! `connect-native:<service>`), never from the task's name.

use std::fmt;

/// Who a workload is in the mesh.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    pub trust_domain: String,
    pub namespace: String,
    pub service: String,
}

impl Identity {
    pub fn spiffe_id(&self) -> String {
        format!(
            "spiffe://{}/ns/{}/svc/{}",
            self.trust_domain, self.namespace, self.service
        )
    }

    /// The DNS name a client verifies the server's certificate against.
    pub fn dns_name(&self) -> String {
        format!("{}.{}.{}", self.service, self.namespace, self.trust_domain)
    }

    /// Reads a SPIFFE ID of this shape back.
    pub fn from_spiffe_id(uri: &str) -> Option<Identity> {
        let rest = uri.strip_prefix("spiffe://")?;
        let (trust_domain, path) = rest.split_once('/')?;
        let mut parts = path.split('/');
        match (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) {
            (Some("ns"), Some(ns), Some("svc"), Some(svc), None)
                if !ns.is_empty() && !svc.is_empty() =>
            {
                Some(Identity {
                    trust_domain: trust_domain.to_string(),
                    namespace: ns.to_string(),
                    service: svc.to_string(),
                })
            }
            _ => None,
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spiffe_id())
    }
}

/// The workload identity a peer's certificate (DER) carries, if any.
pub fn of_certificate(cert_der: &[u8]) -> Option<Identity> {
    drover_tls::mesh::uri_sans(cert_der)
        .iter()
        .find_map(|u| Identity::from_spiffe_id(u))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(service: &str) -> Identity {
        Identity {
            trust_domain: "abc.drover".into(),
            namespace: "default".into(),
            service: service.into(),
        }
    }

    #[test]
    fn spiffe_ids_round_trip_and_malformed_ones_are_refused() {
        let i = id("db");
        assert_eq!(i.spiffe_id(), "spiffe://abc.drover/ns/default/svc/db");
        assert_eq!(Identity::from_spiffe_id(&i.spiffe_id()), Some(i.clone()));
        assert_eq!(i.dns_name(), "db.default.abc.drover");
        for bad in [
            "spiffe://abc.drover/ns/default",
            "spiffe://abc.drover/ns//svc/db",
            "https://abc.drover/ns/default/svc/db",
            "spiffe://abc.drover/ns/default/svc/db/extra",
        ] {
            assert_eq!(Identity::from_spiffe_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_identity_is_read_back_from_an_issued_certificate() {
        let ca = drover_tls::mesh::ca("abc.drover").unwrap();
        let leaf =
            drover_tls::mesh::leaf(&ca, &id("api").spiffe_id(), &id("api").dns_name(), 1).unwrap();
        use rustls_pki_types::pem::PemObject;
        let der = rustls_pki_types::CertificateDer::from_pem_slice(leaf.cert.as_bytes()).unwrap();
        assert_eq!(of_certificate(&der), Some(id("api")));
        assert!(of_certificate(b"not a certificate").is_none());
    }
}
