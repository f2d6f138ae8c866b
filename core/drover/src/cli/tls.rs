//! `drover tls ca create` and `drover tls cert create -server|-client|-cli`: a private CA and
//! agent certificates with Nomad's names, defaults and file names, written to the current
//! directory. Existing files are never overwritten.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use drover_tls::generate::{self, Kind, Pem};

use super::{Exit, ui};

#[derive(Debug, clap::Args)]
pub struct TlsCli {
    #[command(subcommand)]
    pub command: TlsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum TlsCommand {
    /// Create and inspect the certificate authority
    Ca {
        #[command(subcommand)]
        command: CaCommand,
    },
    /// Create agent and CLI certificates
    Cert {
        #[command(subcommand)]
        command: CertCommand,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum CaCommand {
    /// Create a self-signed certificate authority
    Create(CaCreate),
}

#[derive(Debug, clap::Subcommand)]
pub enum CertCommand {
    /// Create a certificate signed by the CA
    Create(CertCreate),
}

#[derive(Debug, clap::Args)]
pub struct CaCreate {
    /// The CA's common name [default: "<domain> Agent CA <serial>"]
    #[arg(long)]
    common_name: Option<String>,
    /// Days the CA is valid for
    #[arg(long, default_value_t = 1825)]
    days: u32,
    /// The cluster's domain (the file names' first part)
    #[arg(long, default_value = "nomad")]
    domain: String,
    /// Name constraints are not supported yet
    #[arg(long)]
    name_constraint: bool,
    /// Name constraints are not supported yet
    #[arg(long)]
    additional_domain: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct CertCreate {
    /// A server certificate (server.<region>.<domain>)
    #[arg(long)]
    server: bool,
    /// A client certificate (client.<region>.<domain>)
    #[arg(long)]
    client: bool,
    /// A CLI certificate (cli.<region>.<domain>)
    #[arg(long)]
    cli: bool,
    /// The CA certificate [default: <domain>-agent-ca.pem]
    #[arg(long)]
    ca: Option<String>,
    /// The CA's key [default: <domain>-agent-ca-key.pem]
    #[arg(long)]
    key: Option<String>,
    /// Days the certificate is valid for
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// The cluster's domain
    #[arg(long, default_value = "nomad")]
    domain: String,
    /// The region the certificate is for
    #[arg(long = "cluster-region", alias = "region", default_value = "global")]
    cluster_region: String,
    /// Another DNS name the certificate carries (repeatable)
    #[arg(long)]
    additional_dnsname: Vec<String>,
    /// Another IP address the certificate carries (repeatable)
    #[arg(long)]
    additional_ipaddress: Vec<String>,
}

pub fn run(cmd: TlsCli) -> anyhow::Result<Exit> {
    match cmd.command {
        TlsCommand::Ca {
            command: CaCommand::Create(args),
        } => ca_create(args, Path::new(".")),
        TlsCommand::Cert {
            command: CertCommand::Create(args),
        } => cert_create(args, Path::new(".")),
    }
}

/// Writes `contents` to a new file `dir/name` (mode `mode`), refusing to replace one.
fn write_new(dir: &Path, name: &str, contents: &str, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                anyhow::anyhow!("File {name:?} already exists")
            } else {
                anyhow::anyhow!("writing {}: {e}", path.display())
            }
        })?;
    f.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Both files must be new: checked before either is written, so a refusal leaves nothing.
fn refuse_existing(dir: &Path, names: &[&str]) -> anyhow::Result<()> {
    for name in names {
        if dir.join(name).exists() {
            bail!("File {name:?} already exists");
        }
    }
    Ok(())
}

fn ca_create(args: CaCreate, dir: &Path) -> anyhow::Result<Exit> {
    if args.name_constraint || !args.additional_domain.is_empty() {
        bail!("-name-constraint and -additional-domain are not supported yet");
    }
    let cert_name = format!("{}-agent-ca.pem", args.domain);
    let key_name = format!("{}-agent-ca-key.pem", args.domain);
    refuse_existing(dir, &[&cert_name, &key_name])?;
    let ca = generate::ca(&args.domain, args.common_name.as_deref(), args.days)?;
    write_new(dir, &cert_name, &ca.cert, 0o644)?;
    write_new(dir, &key_name, &ca.key, 0o600)?;
    ui::info(&format!("CA certificate saved to: {cert_name}"));
    ui::info(&format!("CA certificate key saved to: {key_name}"));
    Ok(0)
}

fn cert_create(args: CertCreate, dir: &Path) -> anyhow::Result<Exit> {
    let kind = match (args.server, args.client, args.cli) {
        (true, false, false) => Kind::Server,
        (false, true, false) => Kind::Client,
        (false, false, true) => Kind::Cli,
        _ => bail!("Please provide either -server, -client, or -cli"),
    };
    for ip in &args.additional_ipaddress {
        ip.parse::<std::net::IpAddr>()
            .map_err(|_| anyhow::anyhow!("-additional-ipaddress {ip:?} is not an IP address"))?;
    }
    let ca_file = args
        .ca
        .clone()
        .unwrap_or_else(|| format!("{}-agent-ca.pem", args.domain));
    let key_file = args
        .key
        .clone()
        .unwrap_or_else(|| format!("{}-agent-ca-key.pem", args.domain));
    let ca = Pem {
        cert: std::fs::read_to_string(dir.join(&ca_file))
            .with_context(|| format!("reading the CA file {ca_file}"))?,
        key: std::fs::read_to_string(dir.join(&key_file))
            .with_context(|| format!("reading the CA key {key_file}"))?,
    };
    let label = kind.label();
    let prefix = format!("{}-{label}-{}", args.cluster_region, args.domain);
    let (cert_name, key_name) = (format!("{prefix}.pem"), format!("{prefix}-key.pem"));
    refuse_existing(dir, &[&cert_name, &key_name])?;
    let extra: Vec<String> = args
        .additional_dnsname
        .iter()
        .chain(&args.additional_ipaddress)
        .cloned()
        .collect();
    let pem = generate::agent_cert(
        &ca,
        kind,
        &args.cluster_region,
        &args.domain,
        &extra,
        args.days,
    )?;
    if kind == Kind::Server {
        ui::info(
            "WARNING: Server Certificates grants authority to become a server and access all \
             state in the cluster including root keys and all ACL tokens. Do not distribute \
             them to production hosts that are not server nodes. Store them as securely as CA \
             keys.",
        );
    }
    ui::info(&format!("Using CA file {ca_file} and CA key {key_file}"));
    write_new(dir, &cert_name, &pem.cert, 0o644)?;
    write_new(dir, &key_name, &pem.key, 0o600)?;
    let title = match kind {
        Kind::Server => "Server",
        Kind::Client => "Client",
        Kind::Cli => "Cli",
    };
    ui::info(&format!("{title} Certificate saved to {cert_name}"));
    ui::info(&format!("{title} Certificate key saved to {key_name}"));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("drover-tls-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn cert_args(server: bool, client: bool) -> CertCreate {
        CertCreate {
            server,
            client,
            cli: false,
            ca: None,
            key: None,
            days: 365,
            domain: "nomad".into(),
            cluster_region: "global".into(),
            additional_dnsname: vec!["node1.example".into()],
            additional_ipaddress: vec!["10.0.0.1".into()],
        }
    }

    #[test]
    fn the_ca_and_a_server_certificate_get_nomads_file_names_and_are_never_overwritten() {
        let dir = scratch("names");
        let ca = || CaCreate {
            common_name: None,
            days: 1825,
            domain: "nomad".into(),
            name_constraint: false,
            additional_domain: vec![],
        };
        assert_eq!(ca_create(ca(), &dir).unwrap(), 0);
        assert!(dir.join("nomad-agent-ca.pem").exists());
        assert!(dir.join("nomad-agent-ca-key.pem").exists());
        let before = std::fs::read(dir.join("nomad-agent-ca.pem")).unwrap();
        let again = ca_create(ca(), &dir).unwrap_err().to_string();
        assert!(again.contains("already exists"), "{again}");
        assert_eq!(
            std::fs::read(dir.join("nomad-agent-ca.pem")).unwrap(),
            before
        );

        assert_eq!(cert_create(cert_args(true, false), &dir).unwrap(), 0);
        let cert = std::fs::read_to_string(dir.join("global-server-nomad.pem")).unwrap();
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("global-server-nomad-key.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let e = cert_create(cert_args(true, false), &dir).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn exactly_one_kind_is_wanted_and_a_missing_ca_is_named() {
        let dir = scratch("kinds");
        let e = cert_create(cert_args(true, true), &dir).unwrap_err();
        assert!(
            e.to_string().contains("either -server, -client, or -cli"),
            "{e}"
        );
        let e = cert_create(cert_args(false, true), &dir).unwrap_err();
        assert!(format!("{e:#}").contains("nomad-agent-ca.pem"), "{e:#}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
