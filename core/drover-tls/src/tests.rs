use super::*;
use crate::generate::{Kind, Pem, agent_cert, ca};

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Dir {
    let dir = std::env::temp_dir().join(format!("drover-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Dir(dir)
}

fn write(dir: &Path, name: &str, pem: &Pem) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}-key.pem"));
    std::fs::write(&cert, &pem.cert).unwrap();
    std::fs::write(&key, &pem.key).unwrap();
    (cert, key)
}

fn settings(ca: &Path, cert: &Path, key: &Path) -> TlsSettings {
    TlsSettings {
        http: true,
        rpc: true,
        files: TlsFiles {
            ca_file: Some(ca.to_path_buf()),
            cert_file: Some(cert.to_path_buf()),
            key_file: Some(key.to_path_buf()),
        },
        verify_server_hostname: true,
        verify_https_client: true,
        region: "global".into(),
    }
}

fn der(pem: &Pem) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.cert.as_bytes()).unwrap()
}

#[test]
fn agent_certificates_say_whether_their_holder_is_a_server_or_a_client() {
    let ca = ca("nomad", None, 30).unwrap();
    let server = agent_cert(&ca, Kind::Server, "global", "nomad", &[], 30).unwrap();
    let client = agent_cert(&ca, Kind::Client, "global", "nomad", &[], 30).unwrap();
    let cli = agent_cert(&ca, Kind::Cli, "global", "nomad", &[], 30).unwrap();
    let other_region = agent_cert(&ca, Kind::Server, "east", "nomad", &[], 30).unwrap();
    assert_eq!(role_of(Some(&der(&server)), "global"), PeerRole::Server);
    assert_eq!(role_of(Some(&der(&client)), "global"), PeerRole::Client);
    assert_eq!(role_of(Some(&der(&cli)), "global"), PeerRole::Other);
    assert_eq!(
        role_of(Some(&der(&other_region)), "global"),
        PeerRole::Other
    );
    assert_eq!(role_of(None, "global"), PeerRole::Other);
    assert!(!PeerRole::Client.may_act_as_server());
    assert!(PeerRole::Client.may_act_as_client());
    assert!(!PeerRole::Other.may_act_as_client());
}

#[test]
fn loading_names_the_field_of_a_missing_or_unreadable_file() {
    let dir = scratch("load");
    let ca_pem = ca("nomad", None, 30).unwrap();
    let (ca_path, _) = write(&dir.0, "ca", &ca_pem);
    let server = agent_cert(&ca_pem, Kind::Server, "global", "nomad", &[], 30).unwrap();
    let (cert, key) = write(&dir.0, "server", &server);
    assert!(
        AgentTls::load(settings(&ca_path, &cert, &key))
            .unwrap()
            .is_some()
    );

    let mut s = settings(&ca_path, &cert, &key);
    s.files.key_file = None;
    let e = AgentTls::load(s).unwrap_err().to_string();
    assert_eq!(e, "tls.key_file: required when TLS is on");

    let e = AgentTls::load(settings(&dir.0.join("nope.pem"), &cert, &key))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("tls.ca_file: ") && e.contains("nope.pem"),
        "{e}"
    );

    // A key that is not the certificate's.
    let (_, other_key) = write(
        &dir.0,
        "other",
        &agent_cert(&ca_pem, Kind::Client, "global", "nomad", &[], 30).unwrap(),
    );
    let e = AgentTls::load(settings(&ca_path, &cert, &other_key))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("tls.key_file: "), "{e}");

    let mut off = settings(&ca_path, &cert, &key);
    off.http = false;
    off.rpc = false;
    assert!(AgentTls::load(off).unwrap().is_none());
}

/// A handshake over loopback between `server` and `client` agents; the role the server sees.
async fn handshake(server: &AgentTls, client: &AgentTls) -> Result<PeerRole, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = server.rpc_acceptor();
    let accepted = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
        let (_, conn) = tls.get_ref();
        Ok::<_, String>(conn.peer_certificates().and_then(|c| c.first()).cloned())
    });
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let dialed = client
        .rpc_connector()
        .connect(client.rpc_server_name(), tcp)
        .await
        .map_err(|e| e.to_string());
    let peer = accepted.await.unwrap();
    dialed?;
    let peer = peer?;
    Ok(server.role_of(peer.as_ref()))
}

#[tokio::test]
async fn a_client_certificate_cannot_serve_as_a_server_and_another_ca_is_refused() {
    let dir = scratch("handshake");
    let ca_pem = ca("nomad", None, 30).unwrap();
    let (ca_path, _) = write(&dir.0, "ca", &ca_pem);
    let (scert, skey) = write(
        &dir.0,
        "server",
        &agent_cert(&ca_pem, Kind::Server, "global", "nomad", &[], 30).unwrap(),
    );
    let (ccert, ckey) = write(
        &dir.0,
        "client",
        &agent_cert(&ca_pem, Kind::Client, "global", "nomad", &[], 30).unwrap(),
    );
    let server = AgentTls::load(settings(&ca_path, &scert, &skey))
        .unwrap()
        .unwrap();
    let client = AgentTls::load(settings(&ca_path, &ccert, &ckey))
        .unwrap()
        .unwrap();

    assert_eq!(handshake(&server, &server).await.unwrap(), PeerRole::Server);
    assert_eq!(handshake(&server, &client).await.unwrap(), PeerRole::Client);
    // A client certificate on the serving side: the dialer wants server.global.nomad.
    let e = handshake(&client, &server).await.unwrap_err();
    assert!(e.contains("certificate"), "{e}");

    // Without verify_server_hostname, the dialer does not check the name (the chain still
    // is checked), and the serving side does not tell certificates apart.
    let mut lax = settings(&ca_path, &scert, &skey);
    lax.verify_server_hostname = false;
    let lax = AgentTls::load(lax).unwrap().unwrap();
    assert_eq!(handshake(&client, &lax).await.unwrap(), PeerRole::Server);
    assert_eq!(handshake(&lax, &client).await.unwrap(), PeerRole::Unchecked);

    let other_ca = ca("nomad", None, 30).unwrap();
    let (oca, _) = write(&dir.0, "other-ca", &other_ca);
    let (ocert, okey) = write(
        &dir.0,
        "other",
        &agent_cert(&other_ca, Kind::Server, "global", "nomad", &[], 30).unwrap(),
    );
    let stranger = AgentTls::load(settings(&oca, &ocert, &okey))
        .unwrap()
        .unwrap();
    assert!(handshake(&server, &stranger).await.is_err());
    assert!(handshake(&stranger, &server).await.is_err());
}

#[tokio::test]
async fn reload_takes_new_files_and_keeps_the_old_ones_on_error() {
    let dir = scratch("reload");
    let ca_pem = ca("nomad", None, 30).unwrap();
    let (ca_path, _) = write(&dir.0, "ca", &ca_pem);
    let (cert, key) = write(
        &dir.0,
        "agent",
        &agent_cert(&ca_pem, Kind::Server, "global", "nomad", &[], 30).unwrap(),
    );
    let agent = AgentTls::load(settings(&ca_path, &cert, &key))
        .unwrap()
        .unwrap();
    // The agent's files become a client certificate: after reload it dials as a client.
    write(
        &dir.0,
        "agent",
        &agent_cert(&ca_pem, Kind::Client, "global", "nomad", &[], 30).unwrap(),
    );
    let server_pem = agent_cert(&ca_pem, Kind::Server, "global", "nomad", &[], 30).unwrap();
    let (scert, skey) = write(&dir.0, "server", &server_pem);
    let server = AgentTls::load(settings(&ca_path, &scert, &skey))
        .unwrap()
        .unwrap();
    assert_eq!(handshake(&server, &agent).await.unwrap(), PeerRole::Server);
    agent.reload().unwrap();
    assert_eq!(handshake(&server, &agent).await.unwrap(), PeerRole::Client);
    std::fs::write(&key, "not a key").unwrap();
    assert!(agent.reload().is_err());
    assert_eq!(handshake(&server, &agent).await.unwrap(), PeerRole::Client);
}

#[test]
fn a_certificate_signed_by_a_loaded_ca_names_it_byte_for_byte() {
    let ca_pem = ca("nomad", Some("Example CA"), 30).unwrap();
    let cert = agent_cert(
        &ca_pem,
        Kind::Server,
        "global",
        "nomad",
        &["node1.example".into(), "10.0.0.5".into()],
        30,
    )
    .unwrap();
    let cert_der = der(&cert);
    let parsed = ParsedCertificate::try_from(&cert_der).unwrap();
    for name in [
        "server.global.nomad",
        "localhost",
        "node1.example",
        "127.0.0.1",
        "10.0.0.5",
    ] {
        let n = ServerName::try_from(name).unwrap();
        assert!(verify_server_name(&parsed, &n).is_ok(), "{name}");
    }
    let mut roots = RootCertStore::empty();
    roots.add(der(&ca_pem)).unwrap();
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .unwrap();
    verifier
        .verify_server_cert(
            &der(&cert),
            &[],
            &ServerName::try_from("server.global.nomad").unwrap(),
            &[],
            UnixTime::now(),
        )
        .unwrap();
}
