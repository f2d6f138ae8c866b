//! Certificates as Nomad's `tls ca create` and `tls cert create` make them: an ECDSA P-256
//! CA, and agent certificates it signs for `server.<region>.nomad`, `client.<region>.nomad`
//! or `cli.<region>.nomad` (plus `localhost` and `127.0.0.1`, as Nomad adds them), usable
//! both to serve and to dial (server and client authentication).

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// What a certificate being made is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Server,
    Client,
    Cli,
}

impl Kind {
    /// Nomad's label: the file names' and the names' middle part.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Server => "server",
            Kind::Client => "client",
            Kind::Cli => "cli",
        }
    }
}

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("the CA certificate: {0}")]
    Ca(String),
    #[error("the CA key: {0}")]
    CaKey(String),
    #[error("{0}")]
    Sign(String),
}

pub(crate) fn sign_error(e: rcgen::Error) -> GenerateError {
    GenerateError::Sign(e.to_string())
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // A minute back: agents whose clocks run a little behind accept it at once.
    params.not_before = now - time::Duration::minutes(1);
    params.not_after = now + time::Duration::days(i64::from(days.max(1)));
}

/// A new CA for `domain` (Nomad's default `nomad`), valid `days`.
pub fn ca(domain: &str, common_name: Option<&str>, days: u32) -> Result<Pem, GenerateError> {
    let key = KeyPair::generate().map_err(sign_error)?;
    let mut params = CertificateParams::default();
    let serial: u64 = rand_serial();
    let cn = common_name
        .map(str::to_string)
        .unwrap_or_else(|| format!("{domain} Agent CA {serial}"));
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CountryName, "US");
    dn.push(DnType::OrganizationName, "HashiCorp Inc.");
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.serial_number = Some(serial.into());
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.subject_alt_names =
        vec![SanType::DnsName(domain.to_string().try_into().map_err(
            |_| GenerateError::Sign(format!("invalid domain {domain:?}")),
        )?)];
    validity(&mut params, days);
    let cert = params.self_signed(&key).map_err(sign_error)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A certificate of `kind` for `region` signed by `ca`, with the names Nomad gives it and the
/// `extra` DNS names or IP addresses.
pub fn agent_cert(
    ca: &Pem,
    kind: Kind,
    region: &str,
    domain: &str,
    extra: &[String],
    days: u32,
) -> Result<Pem, GenerateError> {
    let issuer = issuer_of(ca)?;

    let name = format!("{}.{region}.{domain}", kind.label());
    let mut names = vec![name.clone()];
    // Nomad gives every certificate localhost, and agents' also 127.0.0.1.
    names.push("localhost".into());
    if kind != Kind::Cli {
        names.push("127.0.0.1".into());
    }
    names.extend(extra.iter().cloned());
    let mut params = CertificateParams::default();
    for n in &names {
        let san = match n.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                n.clone()
                    .try_into()
                    .map_err(|_| GenerateError::Sign(format!("invalid DNS name {n:?}")))?,
            ),
        };
        if !params.subject_alt_names.contains(&san) {
            params.subject_alt_names.push(san);
        }
    }
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.serial_number = Some(rand_serial().into());
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days);
    let key = KeyPair::generate().map_err(sign_error)?;
    let cert = params.signed_by(&key, &issuer).map_err(sign_error)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// The signer of certificates `ca` issues, named byte for byte as the CA's subject.
pub(crate) fn issuer_of(ca: &Pem) -> Result<Issuer<'static, KeyPair>, GenerateError> {
    let ca_key = KeyPair::from_pem(&ca.key).map_err(|e| GenerateError::CaKey(e.to_string()))?;
    let ca_der = CertificateDer::from_pem_slice(ca.cert.as_bytes())
        .map_err(|e| GenerateError::Ca(e.to_string()))?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = subject_of(&ca_der).map_err(GenerateError::Ca)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    Ok(Issuer::new(ca_params, ca_key))
}

pub(crate) fn rand_serial() -> u64 {
    let mut bytes = [0u8; 8];
    // The OS's randomness; a failure leaves the clock's nanoseconds, still unique enough for
    // a serial (uniqueness, not secrecy, is what a serial needs).
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_err()
    {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        bytes = nanos.to_be_bytes();
    }
    // Positive and non-zero, as RFC 5280 wants.
    (u64::from_be_bytes(bytes) >> 1).max(1)
}

/// The subject of certificate `der`, entry by entry with its string type, so a certificate
/// it signs names it byte for byte (chains are matched on the encoded names).
pub(crate) fn subject_of(der: &[u8]) -> Result<DistinguishedName, String> {
    let (_, cert, _) = tlv(der).ok_or("not DER")?;
    let (_, tbs, _) = tlv(cert).ok_or("no tbsCertificate")?;
    let mut rest = tbs;
    let (tag, _, after) = tlv(rest).ok_or("empty tbsCertificate")?;
    if tag == 0xa0 {
        rest = after; // the explicit version
    }
    // serial, signature algorithm, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = tlv(rest).ok_or("truncated tbsCertificate")?.2;
    }
    let (tag, mut rdns, _) = tlv(rest).ok_or("no subject")?;
    if tag != 0x30 {
        return Err("the subject is not a sequence".into());
    }
    let mut dn = DistinguishedName::new();
    while !rdns.is_empty() {
        let (tag, set, next) = tlv(rdns).ok_or("truncated subject")?;
        rdns = next;
        if tag != 0x31 {
            return Err("a subject entry is not a set".into());
        }
        let (_, attr, more) = tlv(set).ok_or("empty subject entry")?;
        if !more.is_empty() {
            return Err("multi-valued subject entries are not supported".into());
        }
        let (tag, oid, value) = tlv(attr).ok_or("truncated attribute")?;
        if tag != 0x06 {
            return Err("an attribute without its type".into());
        }
        let (vtag, bytes, _) = tlv(value).ok_or("an attribute without its value")?;
        let text = String::from_utf8(bytes.to_vec()).map_err(|_| "a subject value is not text")?;
        let value = match vtag {
            0x0c => DnValue::Utf8String(text),
            0x13 => DnValue::PrintableString(text.try_into().map_err(|_| "a bad PrintableString")?),
            0x16 => DnValue::Ia5String(text.try_into().map_err(|_| "a bad IA5String")?),
            other => {
                return Err(format!(
                    "subject strings of ASN.1 tag {other:#x} are not supported"
                ));
            }
        };
        dn.push(DnType::CustomDnType(oid_arcs(oid)?), value);
    }
    Ok(dn)
}

/// One DER element: its tag, its content and what follows it.
pub(crate) fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

fn oid_arcs(bytes: &[u8]) -> Result<Vec<u64>, String> {
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().enumerate() {
        value = value.checked_mul(128).ok_or("an OID arc overflows")? | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (value / 40).min(2);
                arcs.push(first);
                arcs.push(value - first * 40);
            } else {
                arcs.push(value);
            }
            value = 0;
        } else if i == bytes.len() - 1 {
            return Err("a truncated OID".into());
        }
    }
    if arcs.is_empty() {
        return Err("an empty OID".into());
    }
    Ok(arcs)
}
