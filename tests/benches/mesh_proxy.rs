//! Mesh proxy benchmark (a bench binary, not a test): HTTP requests at a fixed rate through
//! two of Drover's proxies (the caller's upstream listener, mTLS between the proxies, the
//! destination's inbound listener) against the same requests straight to the service, in
//! the same run; the added latency and each proxy's memory.
//!
//! Run: `cargo build --release -p drover && DROVER_BIN=$PWD/target/release/drover cargo bench -p drover-tests --bench mesh_proxy`
//! (`MESH_BENCH_SECS` and `MESH_BENCH_RATE` change the 30 s at 1,000 requests/s).
//! Figures go in BENCHMARKS.md.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use drover_mesh::Identity;
use drover_mesh::config::{Inbound, ProxyConfig, Upstream};
use drover_mesh::intentions::Intentions;
use drover_tests::{TempDir, drover_bin, free_port};

/// Connections the load spreads over, each with one request in flight.
const CONNECTIONS: usize = 20;

/// A keep-alive HTTP/1.1 server answering every request with a short body.
fn backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_nodelay(true);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut pending = Vec::new();
                loop {
                    let n = match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        pending.drain(..end + 4);
                        if conn
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .is_err()
                        {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

fn proxy_config(ca: &drover_tls::generate::Pem, service: &str) -> ProxyConfig {
    let id = Identity {
        trust_domain: "bench.drover".into(),
        namespace: "default".into(),
        service: service.into(),
    };
    let leaf = drover_tls::mesh::leaf(ca, &id.spiffe_id(), &id.dns_name(), 1).expect("leaf");
    ProxyConfig {
        trust_domain: id.trust_domain,
        namespace: id.namespace,
        service: id.service,
        inbound: None,
        upstreams: Vec::new(),
        expose: Vec::new(),
        endpoints: BTreeMap::new(),
        intentions: Intentions {
            rules: Vec::new(),
            default: "allow".into(),
        },
        cert_pem: leaf.cert,
        key_pem: leaf.key,
        ca_pem: ca.cert.clone(),
    }
}

fn start_proxy(dir: &TempDir, name: &str, config: &ProxyConfig) -> Child {
    let path = dir.path().join(format!("{name}.json"));
    config.store(&path).expect("config");
    Command::new(drover_bin())
        .args(["connect", "proxy", "-config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the proxy")
}

fn wait_listening(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One request on a kept-alive connection; the time its answer took.
fn request(conn: &mut TcpStream, buf: &mut [u8]) -> Duration {
    let start = Instant::now();
    conn.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
        .expect("send");
    let mut got = 0;
    // The whole answer is 40 bytes: wait for its body.
    while !buf[..got].ends_with(b"ok") {
        let n = conn.read(&mut buf[got..]).expect("read");
        assert!(n > 0, "connection closed");
        got += n;
    }
    start.elapsed()
}

/// `rate` requests per second for `secs`, open loop over [`CONNECTIONS`] connections; the
/// latencies in microseconds, sorted.
fn load(target: SocketAddr, rate: u64, secs: u64) -> Vec<u64> {
    let per_conn = Duration::from_secs_f64(CONNECTIONS as f64 / rate as f64);
    let total = Duration::from_secs(secs);
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            std::thread::spawn(move || {
                let mut conn = TcpStream::connect(target).expect("connect");
                conn.set_nodelay(true).expect("nodelay");
                let mut buf = vec![0u8; 4096];
                // Warm the connection (the mTLS handshake happens on the first request).
                request(&mut conn, &mut buf);
                let start = Instant::now() + per_conn.mul_f64(i as f64 / CONNECTIONS as f64);
                let mut next = start;
                let mut out = Vec::new();
                while next < start + total {
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                    out.push(request(&mut conn, &mut buf).as_micros() as u64);
                    next += per_conn;
                }
                out
            })
        })
        .collect();
    let mut all: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("load thread"))
        .collect();
    all.sort_unstable();
    all
}

fn pct(v: &[u64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// VmRSS, its anonymous part, and Pss of a process, in MB.
fn memory(pid: u32) -> (f64, f64, f64) {
    let field = |file: &str, key: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{file}"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with(key))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<f64>().ok())
            })
            .unwrap_or(0.0)
            / 1024.0
    };
    (
        field("status", "VmRSS:"),
        field("status", "RssAnon:"),
        field("smaps_rollup", "Pss:"),
    )
}

fn main() {
    let secs: u64 = std::env::var("MESH_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let rate: u64 = std::env::var("MESH_BENCH_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let dir = TempDir::new("bench-mesh");
    let service = backend();
    let ca = drover_tls::mesh::ca("bench.drover").expect("ca");

    let db_inbound = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut db = proxy_config(&ca, "db");
    db.inbound = Some(Inbound {
        bind: db_inbound,
        local: service,
    });
    let upstream = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut api = proxy_config(&ca, "api");
    api.upstreams = vec![Upstream {
        destination: "db".into(),
        bind: upstream,
    }];
    api.endpoints.insert("db".into(), vec![db_inbound]);
    let mut db_proc = start_proxy(&dir, "db", &db);
    let mut api_proc = start_proxy(&dir, "api", &api);
    wait_listening(db_inbound);
    wait_listening(upstream);
    std::thread::sleep(Duration::from_millis(300));
    let (idle_rss, idle_anon, idle_pss) = memory(api_proc.id());
    println!(
        "an idle proxy: {idle_rss:.1} MB RSS ({idle_anon:.1} MB anonymous, {idle_pss:.1} MB PSS)"
    );

    let direct = load(service, rate, secs);
    let proxied = load(upstream, rate, secs);
    let (db_rss, db_anon, db_pss) = memory(db_proc.id());
    let (api_rss, api_anon, api_pss) = memory(api_proc.id());
    println!(
        "direct: {} requests, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        direct.len(),
        pct(&direct, 0.5),
        pct(&direct, 0.99),
        pct(&direct, 1.0)
    );
    println!(
        "two proxies: {} requests, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        proxied.len(),
        pct(&proxied, 0.5),
        pct(&proxied, 0.99),
        pct(&proxied, 1.0)
    );
    println!(
        "added: p50 {:.3} ms, p99 {:.3} ms ({rate} requests/s for {secs} s over {CONNECTIONS} connections)",
        pct(&proxied, 0.5) - pct(&direct, 0.5),
        pct(&proxied, 0.99) - pct(&direct, 0.99)
    );
    println!(
        "proxy memory after the run: caller's {api_rss:.1} MB RSS ({api_anon:.1} MB of it anonymous, {api_pss:.1} MB PSS), destination's {db_rss:.1} MB RSS ({db_anon:.1} MB anonymous, {db_pss:.1} MB PSS)"
    );
    let _ = db_proc.kill();
    let _ = api_proc.kill();
    let _ = db_proc.wait();
    let _ = api_proc.wait();
}
