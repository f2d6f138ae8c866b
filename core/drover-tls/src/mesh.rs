//! The service mesh's certificates: the cluster's mesh CA (made once by the leader and kept in
//! the replicated state) and the short-lived leaf certificates it signs for workload
//! identities, each with the workload's SPIFFE ID as URI SAN and its DNS name, usable to serve
//! and to dial. Also reads the URI SANs back from a peer's certificate.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::generate::{GenerateError, Pem, issuer_of, rand_serial, sign_error, tlv};

/// How long the mesh CA is valid.
const CA_DAYS: i64 = 3650;

/// A new mesh CA for `trust_domain`.
pub fn ca(trust_domain: &str) -> Result<Pem, GenerateError> {
    let key = KeyPair::generate().map_err(sign_error)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("Drover mesh CA {trust_domain}"));
    params.distinguished_name = dn;
    params.serial_number = Some(rand_serial().into());
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.subject_alt_names = vec![SanType::URI(
        format!("spiffe://{trust_domain}")
            .try_into()
            .map_err(|_| GenerateError::Sign(format!("invalid trust domain {trust_domain:?}")))?,
    )];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(1);
    params.not_after = now + time::Duration::days(CA_DAYS);
    let cert = params.self_signed(&key).map_err(sign_error)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A leaf for the workload `spiffe_id` (served under `dns_name` too), valid `hours`.
pub fn leaf(ca: &Pem, spiffe_id: &str, dns_name: &str, hours: u32) -> Result<Pem, GenerateError> {
    let issuer = issuer_of(ca)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, dns_name);
    params.distinguished_name = dn;
    params.serial_number = Some(rand_serial().into());
    params.subject_alt_names = vec![
        SanType::URI(
            spiffe_id
                .to_string()
                .try_into()
                .map_err(|_| GenerateError::Sign(format!("invalid SPIFFE ID {spiffe_id:?}")))?,
        ),
        SanType::DnsName(
            dns_name
                .to_string()
                .try_into()
                .map_err(|_| GenerateError::Sign(format!("invalid DNS name {dns_name:?}")))?,
        ),
    ];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(1);
    params.not_after = now + time::Duration::hours(i64::from(hours.max(1)));
    let key = KeyPair::generate().map_err(sign_error)?;
    let cert = params.signed_by(&key, &issuer).map_err(sign_error)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// The OID of subjectAltName (2.5.29.17), DER-encoded.
const SAN_OID: [u8; 3] = [0x55, 0x1d, 0x11];

/// The elements of a constructed value's contents.
fn children(mut contents: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while let Some((tag, value, rest)) = tlv(contents) {
        out.push((tag, value));
        contents = rest;
    }
    out
}

/// The URI SANs of a DER certificate; none when it cannot be read.
pub fn uri_sans(cert_der: &[u8]) -> Vec<String> {
    let names = || -> Option<Vec<(u8, &[u8])>> {
        let (_, cert, _) = tlv(cert_der)?;
        let &(_, tbs) = children(cert).first()?;
        // Extensions are the TBS certificate's [3] explicit element.
        let &(_, explicit) = children(tbs).iter().find(|(tag, _)| *tag == 0xa3)?;
        let &(_, extensions) = children(explicit).first()?;
        for (_, extension) in children(extensions) {
            let parts = children(extension);
            if parts.first() != Some(&(0x06, &SAN_OID[..])) {
                continue;
            }
            // [critical BOOLEAN], then the OCTET STRING holding the GeneralNames.
            let &(_, octets) = parts.iter().find(|(tag, _)| *tag == 0x04)?;
            let (_, names, _) = tlv(octets)?;
            return Some(children(names));
        }
        None
    };
    names()
        .unwrap_or_default()
        .into_iter()
        // GeneralName's uniformResourceIdentifier is [6] IA5String.
        .filter(|(tag, _)| *tag == 0x86)
        .filter_map(|(_, v)| String::from_utf8(v.to_vec()).ok())
        .collect()
}

/// Unix seconds when a PEM certificate stops being valid.
pub fn not_after(cert_pem: &str) -> Option<i64> {
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).ok()?;
    let (_, cert, _) = tlv(&der)?;
    let &(_, tbs) = children(cert).first()?;
    let mut parts = children(tbs).into_iter();
    // [0] version (when present), serial, signature, issuer, then validity.
    let first = parts.next()?;
    if first.0 != 0xa0 {
        // No explicit version: the first part was the serial.
    } else {
        parts.next()?;
    }
    parts.next()?; // signature algorithm
    parts.next()?; // issuer
    let (_, validity) = parts.next()?;
    let times = children(validity);
    let &(tag, raw) = times.get(1)?;
    parse_time(tag, std::str::from_utf8(raw).ok()?)
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as Unix seconds.
fn parse_time(tag: u8, s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 => {
            let yy: i64 = s.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, s.get(2..)?)
        }
        0x18 => (s.get(..4)?.parse().ok()?, s.get(4..)?),
        _ => return None,
    };
    let field = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, hour, min, sec) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    let date = time::Date::from_calendar_date(
        i32::try_from(year).ok()?,
        time::Month::try_from(u8::try_from(month).ok()?).ok()?,
        u8::try_from(day).ok()?,
    )
    .ok()?;
    let t = time::Time::from_hms(
        u8::try_from(hour).ok()?,
        u8::try_from(min).ok()?,
        u8::try_from(sec).ok()?,
    )
    .ok()?;
    Some(
        time::PrimitiveDateTime::new(date, t)
            .assume_utc()
            .unix_timestamp(),
    )
}

/// The TLS of one mesh workload: a server that asks every client for a certificate of the
/// mesh CA, and a client that shows its own and checks the server's against the CA (and its
/// name, given per connection). TLS 1.3 only: both ends are Drover's.
pub struct MeshTls {
    pub server: std::sync::Arc<rustls::ServerConfig>,
    pub client: std::sync::Arc<rustls::ClientConfig>,
}

/// Builds [`MeshTls`] from PEM texts.
pub fn workload_tls(cert_pem: &str, key_pem: &str, ca_pem: &str) -> Result<MeshTls, String> {
    use rustls::pki_types::PrivateKeyDer;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let ca = ca.map_err(|e| format!("the mesh CA: {e}"))?;
        roots.add(ca).map_err(|e| format!("the mesh CA: {e}"))?;
    }
    let roots = std::sync::Arc::new(roots);
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the leaf certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("the leaf key: {e}"))?;
    let provider = crate::provider();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots.clone(),
        provider.clone(),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(|e| format!("the leaf: {e}"))?;
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("the leaf: {e}"))?;
    Ok(MeshTls {
        server: std::sync::Arc::new(server),
        client: std::sync::Arc::new(client),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_carries_its_spiffe_id_and_expires_when_asked() {
        let ca = ca("abc.drover").unwrap();
        let id = "spiffe://abc.drover/ns/default/svc/api";
        let leaf = leaf(&ca, id, "api.default.abc.drover", 2).unwrap();
        let der = CertificateDer::from_pem_slice(leaf.cert.as_bytes()).unwrap();
        assert_eq!(uri_sans(&der), vec![id.to_string()]);
        let expires = not_after(&leaf.cert).unwrap();
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        assert!((expires - now - 7200).abs() < 120, "{expires} vs {now}");
        assert!(uri_sans(b"junk").is_empty());
    }
}
