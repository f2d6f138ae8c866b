use std::collections::BTreeMap;

use super::*;
use crate::config::{Inbound, Upstream};
use crate::intentions::{ALLOW, DENY, Intention, Intentions};

const TRUST: &str = "test.drover";

fn leaf(ca: &drover_tls::generate::Pem, service: &str) -> drover_tls::generate::Pem {
    let id = Identity {
        trust_domain: TRUST.into(),
        namespace: "default".into(),
        service: service.into(),
    };
    drover_tls::mesh::leaf(ca, &id.spiffe_id(), &id.dns_name(), 1).unwrap()
}

fn config(ca: &drover_tls::generate::Pem, service: &str) -> ProxyConfig {
    let pem = leaf(ca, service);
    ProxyConfig {
        trust_domain: TRUST.into(),
        namespace: "default".into(),
        service: service.into(),
        inbound: None,
        upstreams: Vec::new(),
        expose: Vec::new(),
        endpoints: BTreeMap::new(),
        intentions: Intentions {
            rules: Vec::new(),
            default: ALLOW.into(),
        },
        cert_pem: pem.cert,
        key_pem: pem.key,
        ca_pem: ca.cert.clone(),
    }
}

/// Echoes every connection's bytes back, prefixed so the test knows who answered.
async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut c, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = c.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut out = b"db:".to_vec();
                    out.extend_from_slice(&buf[..n]);
                    if c.write_all(&out).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Starts a proxy from `config`; returns its listeners' addresses and the sender that swaps
/// its configuration.
async fn start(
    config: ProxyConfig,
) -> (
    Option<SocketAddr>,
    Vec<SocketAddr>,
    watch::Sender<Arc<Loaded>>,
) {
    let listeners = Listeners::bind(&config).await.unwrap();
    let (inbound, upstreams) = (listeners.inbound_addr(), listeners.upstream_addrs());
    let (tx, rx) = watch::channel(Arc::new(Loaded::new(config).unwrap()));
    tokio::spawn(listeners.serve(rx));
    (inbound, upstreams, tx)
}

async fn round_trip(addr: SocketAddr, message: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(message).await.unwrap();
    let mut got = vec![0u8; 64];
    match tokio::time::timeout(Duration::from_secs(5), c.read(&mut got)).await {
        Ok(Ok(n)) => got[..n].to_vec(),
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn an_upstream_reaches_its_destination_over_mtls_and_intentions_decide() {
    let ca = drover_tls::mesh::ca(TRUST).unwrap();
    let service = echo_server().await;
    let mut db = config(&ca, "db");
    db.inbound = Some(Inbound {
        bind: "127.0.0.1:0".parse().unwrap(),
        local: service,
    });
    let (db_inbound, _, db_tx) = start(db.clone()).await;
    let db_inbound = db_inbound.unwrap();

    let mut api = config(&ca, "api");
    api.upstreams = vec![Upstream {
        destination: "db".into(),
        bind: "127.0.0.1:0".parse().unwrap(),
    }];
    api.endpoints.insert("db".into(), vec![db_inbound]);
    let (_, api_upstreams, _api_tx) = start(api).await;
    let upstream = api_upstreams[0];

    assert_eq!(round_trip(upstream, b"ping").await, b"db:ping");
    // Plain text to the inbound listener is not served: at most a TLS alert comes back.
    let plain = round_trip(db_inbound, b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(plain.is_empty() || plain[0] == 21, "{plain:?}");

    // api -> db denied: the connection ends with nothing forwarded.
    let mut denied = db.clone();
    denied.intentions.rules = vec![Intention {
        source: "api".into(),
        destination: "db".into(),
        action: DENY.into(),
    }];
    db_tx.send(Arc::new(Loaded::new(denied).unwrap())).unwrap();
    assert_eq!(round_trip(upstream, b"ping").await, b"");
    db_tx.send(Arc::new(Loaded::new(db).unwrap())).unwrap();
    assert_eq!(round_trip(upstream, b"again").await, b"db:again");
}

#[tokio::test]
async fn a_proxy_that_is_not_the_destination_is_refused() {
    let ca = drover_tls::mesh::ca(TRUST).unwrap();
    let service = echo_server().await;
    // A proxy of "cache" answers where the caller expects "db".
    let mut impostor = config(&ca, "cache");
    impostor.inbound = Some(Inbound {
        bind: "127.0.0.1:0".parse().unwrap(),
        local: service,
    });
    let (inbound, _, _tx) = start(impostor).await;
    let mut api = config(&ca, "api");
    api.upstreams = vec![Upstream {
        destination: "db".into(),
        bind: "127.0.0.1:0".parse().unwrap(),
    }];
    api.endpoints.insert("db".into(), vec![inbound.unwrap()]);
    let (_, upstreams, _api_tx) = start(api).await;
    assert_eq!(round_trip(upstreams[0], b"ping").await, b"");
}

#[tokio::test]
async fn an_expose_listener_forwards_only_its_paths() {
    let ca = drover_tls::mesh::ca(TRUST).unwrap();
    let service = echo_server().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = config(&ca, "web");
    c.expose = vec![ExposePath {
        path: "/health".into(),
        protocol: "http".into(),
        local_path_port: service.port(),
        listener_port: port,
    }];
    let (_, _, _tx) = start(c).await;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let ok = round_trip(addr, b"GET /health?full=1 HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        ok.starts_with(b"db:GET /health?full=1"),
        "{}",
        String::from_utf8_lossy(&ok)
    );
    let other = round_trip(addr, b"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        other.starts_with(b"HTTP/1.1 404"),
        "{}",
        String::from_utf8_lossy(&other)
    );
}
