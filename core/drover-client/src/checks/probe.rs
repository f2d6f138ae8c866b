//! One run of a check: where it points (the address rules of Nomad's `GetAddress` for the
//! modes Drover has) and the probe of each type, each bounded by the check's timeout. Output
//! texts follow Nomad's (`nomad: http ok`, `nomad: tcp ok`) where Nomad has them.

use std::io::Read;
use std::time::Duration;

use drover_structs::service_check::*;
use drover_structs::{Allocation, Node};

use crate::alloc_stats::{LiveTasks, NotLive};

/// At most this much of a response or a script's output is kept (Nomad's 3 KiB).
const OUTPUT_LIMIT: usize = 3 * 1024;

/// What one run found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Outcome {
    /// success, warning or failure.
    pub status: &'static str,
    pub status_code: i64,
    pub output: String,
}

impl Outcome {
    fn failure(output: impl Into<String>) -> Outcome {
        Outcome {
            status: CHECK_FAILURE,
            status_code: 0,
            output: output.into(),
        }
    }

    fn success(output: impl Into<String>) -> Outcome {
        Outcome {
            status: CHECK_SUCCESS,
            status_code: 0,
            output: output.into(),
        }
    }
}

/// The host and port a network check connects to: the check's port label, else its
/// service's; in `host` mode the port mapped for that label on the node (a number is the port
/// itself), with the service's `address` when it set one (`auto`).
pub(super) fn target(
    gc: &GroupCheck,
    alloc: &Allocation,
    node: &Node,
) -> Result<(String, u16), String> {
    let c = &gc.check;
    let mode = match c.address_mode.as_str() {
        "" if !gc.service_address.is_empty() => "auto",
        "" => "host",
        other => other,
    };
    if !matches!(mode, "auto" | "host" | "alloc") {
        return Err(format!(
            "address_mode {mode:?} is not supported for checks yet"
        ));
    }
    let label = if c.port_label.is_empty() {
        &gc.service_port_label
    } else {
        &c.port_label
    };
    if label.is_empty() {
        return Err(format!(
            "check {:?} needs a port: neither it nor service {:?} names one",
            c.name, gc.service
        ));
    }
    let mapped = alloc
        .allocated_resources
        .as_ref()
        .and_then(|r| r.shared.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.label == *label));
    let node_ip = node
        .attributes
        .get("unique.network.ip-address")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".into());
    let (host, port) = match (mapped, label.parse::<u16>()) {
        (Some(p), _) => {
            let host = if p.host_ip.is_empty() {
                node_ip
            } else {
                p.host_ip.clone()
            };
            (host, p.value)
        }
        (None, Ok(n)) => (node_ip, i64::from(n)),
        (None, Err(_)) => return Err(format!("invalid port {label:?}: port label not found")),
    };
    let (host, port) = if mode == "alloc" {
        // The allocation's own address, and the port inside it.
        let address = drover_structs::service::alloc_address(alloc).ok_or_else(|| {
            "address_mode \"alloc\" needs the allocation's own network (bridge mode)".to_string()
        })?;
        let inside = mapped.map_or(port, |p| if p.to > 0 { p.to } else { p.value });
        (address, inside)
    } else if mode == "auto" && !gc.service_address.is_empty() {
        (gc.service_address.clone(), port)
    } else {
        (host, port)
    };
    let port = u16::try_from(port).map_err(|_| format!("invalid port {port}"))?;
    Ok((host, port))
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A `tcp` check: the connection opens within the timeout.
pub(super) async fn tcp(host: &str, port: u16, timeout: Duration) -> Outcome {
    let addr = join(host, port);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
        Ok(Ok(_)) => Outcome::success("nomad: tcp ok"),
        Ok(Err(e)) => Outcome::failure(format!("dial tcp {addr}: {e}")),
        Err(_) => Outcome::failure(format!("dial tcp {addr}: i/o timeout")),
    }
}

/// An `http` check's request, built once per observer.
pub(super) struct HttpProbe {
    agent: ureq::Agent,
    method: String,
    path: String,
    scheme: String,
    header: Vec<(String, String)>,
    body: String,
}

impl HttpProbe {
    pub(super) fn new(c: &ServiceCheck) -> HttpProbe {
        use ureq::tls::{RootCerts, TlsConfig, TlsProvider};
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(RootCerts::PlatformVerifier)
            .disable_verification(c.tls_skip_verify)
            .build();
        let timeout = Duration::from_nanos(c.timeout.max(0) as u64);
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .user_agent("Drover/health-check")
            .tls_config(tls)
            .build()
            .into();
        HttpProbe {
            agent,
            method: match c.method.as_str() {
                "" => "GET".into(),
                m => m.to_ascii_uppercase(),
            },
            path: c.path.clone(),
            scheme: match c.protocol.as_str() {
                "" => "http".into(),
                p => p.to_ascii_lowercase(),
            },
            header: c
                .header
                .iter()
                .flat_map(|(k, vs)| vs.iter().map(move |v| (k.clone(), v.clone())))
                .collect(),
            body: c.body.clone(),
        }
    }

    /// Runs the request on the blocking pool (ureq blocks). Nomad's rule: 200 passes with
    /// `nomad: http ok`; any other status below 400 passes and 400 or more fails, both with
    /// the response body as output.
    pub(super) async fn run(&self, host: &str, port: u16) -> Outcome {
        let url = format!("{}://{}{}", self.scheme, join(host, port), self.path);
        let agent = self.agent.clone();
        let (method, header, body) = (self.method.clone(), self.header.clone(), self.body.clone());
        let ran =
            tokio::task::spawn_blocking(move || send(&agent, &method, &url, &header, body)).await;
        ran.unwrap_or_else(|e| Outcome::failure(format!("nomad: check panicked: {e}")))
    }
}

fn send(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    header: &[(String, String)],
    body: String,
) -> Outcome {
    macro_rules! with_headers {
        ($builder:expr) => {{
            let mut b = $builder;
            for (k, v) in header {
                b = b.header(k.as_str(), v.as_str());
            }
            b
        }};
    }
    let sent = match method {
        "POST" => with_headers!(agent.post(url)).send(body),
        "PUT" => with_headers!(agent.put(url)).send(body),
        "PATCH" => with_headers!(agent.patch(url)).send(body),
        "GET" | "HEAD" | "DELETE" | "OPTIONS" => {
            let b = match method {
                "GET" => agent.get(url),
                "HEAD" => agent.head(url),
                "DELETE" => agent.delete(url),
                _ => agent.options(url),
            };
            let b = with_headers!(b);
            if body.is_empty() {
                b.call()
            } else {
                b.force_send_body().send(body)
            }
        }
        other => return Outcome::failure(format!("nomad: method {other:?} is not supported")),
    };
    let response = match sent {
        Ok(r) => r,
        Err(e) => return Outcome::failure(format!("nomad: {method} {url}: {e}")),
    };
    let code = i64::from(response.status().as_u16());
    if code == 200 {
        return Outcome {
            status: CHECK_SUCCESS,
            status_code: code,
            output: "nomad: http ok".into(),
        };
    }
    let mut output = Vec::with_capacity(OUTPUT_LIMIT);
    let read = response
        .into_body()
        .into_reader()
        .take(OUTPUT_LIMIT as u64)
        .read_to_end(&mut output);
    Outcome {
        status: if code < 400 {
            CHECK_SUCCESS
        } else {
            CHECK_FAILURE
        },
        status_code: code,
        output: match read {
            Ok(_) => String::from_utf8_lossy(&output).into_owned(),
            Err(e) => format!("nomad: {e}"),
        },
    }
}

/// gRPC's health protocol (`grpc.health.v1.Health/Check`), its two messages.
mod health {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HealthCheckRequest {
        #[prost(string, tag = "1")]
        pub service: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HealthCheckResponse {
        #[prost(int32, tag = "1")]
        pub status: i32,
    }

    /// `ServingStatus.SERVING`.
    pub const SERVING: i32 = 1;

    pub fn status_name(status: i32) -> &'static str {
        match status {
            0 => "UNKNOWN",
            1 => "SERVING",
            2 => "NOT_SERVING",
            3 => "SERVICE_UNKNOWN",
            _ => "unknown status",
        }
    }
}

/// A `grpc` check: the health service answers SERVING for `grpc_service` (empty: the
/// server as a whole).
pub(super) async fn grpc(host: &str, port: u16, service: &str, timeout: Duration) -> Outcome {
    let addr = join(host, port);
    let call = async {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(timeout)
            .timeout(timeout);
        let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
        let mut client = tonic::client::Grpc::new(channel);
        client.ready().await.map_err(|e| e.to_string())?;
        let path =
            tonic::codegen::http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Check");
        let codec = tonic_prost::ProstCodec::<
            health::HealthCheckRequest,
            health::HealthCheckResponse,
        >::default();
        let request = tonic::Request::new(health::HealthCheckRequest {
            service: service.to_string(),
        });
        client
            .unary(request, path, codec)
            .await
            .map(|r| r.into_inner().status)
            .map_err(|s| format!("{}: {}", s.code(), s.message()))
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(health::SERVING)) => Outcome::success(format!("gRPC check {addr}: success")),
        Ok(Ok(status)) => Outcome::failure(format!(
            "gRPC check {addr}: service {service:?} is {}",
            health::status_name(status)
        )),
        Ok(Err(e)) => Outcome::failure(format!("gRPC check {addr}: {e}")),
        Err(_) => Outcome::failure(format!("gRPC check {addr}: timed out after {timeout:?}")),
    }
}

/// A `script` check: `command` with `args` inside task `task` through its driver's exec.
/// Consul's exit codes: 0 passes, 1 warns, anything else fails.
pub(super) async fn script(
    live: &LiveTasks,
    task: &str,
    argv: Vec<String>,
    timeout: Duration,
) -> Outcome {
    let (driver, task_id) = match live.exec_target(task) {
        Ok(t) => t,
        Err(NotLive::UnknownTask) => return Outcome::failure(format!("no task {task:?}")),
        Err(_) => return Outcome::failure(format!("task {task:?} is not running")),
    };
    let ran = tokio::task::spawn_blocking(move || driver.exec_task(&task_id, &argv, timeout)).await;
    let out = match ran {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Outcome::failure(format!("running the check script: {e}")),
        Err(e) => return Outcome::failure(format!("check script panicked: {e}")),
    };
    let mut text = out.stdout;
    text.extend_from_slice(&out.stderr);
    text.truncate(OUTPUT_LIMIT);
    Outcome {
        status: match out.exit_code {
            0 => CHECK_SUCCESS,
            1 => CHECK_WARNING,
            _ => CHECK_FAILURE,
        },
        status_code: 0,
        output: String::from_utf8_lossy(&text).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{AllocatedPortMapping, AllocatedResources};
    use std::io::Write;

    fn alloc_with_port(label: &str, port: i64) -> Allocation {
        let mut resources = AllocatedResources::default();
        resources.shared.ports = Some(vec![AllocatedPortMapping {
            label: label.into(),
            value: port,
            to: 0,
            host_ip: "127.0.0.1".into(),
        }]);
        Allocation {
            allocated_resources: Some(resources),
            ..Default::default()
        }
    }

    fn gc(check: ServiceCheck) -> GroupCheck {
        GroupCheck {
            service: "api".into(),
            service_port_label: "http".into(),
            service_address: String::new(),
            task: String::new(),
            task_service: false,
            check,
        }
    }

    #[test]
    fn a_check_points_at_its_services_mapped_port_or_its_own() {
        let alloc = alloc_with_port("http", 23456);
        let node = Node::default();
        let check = gc(ServiceCheck::default());
        assert_eq!(
            target(&check, &alloc, &node),
            Ok(("127.0.0.1".into(), 23456))
        );
        let own = gc(ServiceCheck {
            port_label: "9100".into(),
            ..Default::default()
        });
        assert_eq!(target(&own, &alloc, &node), Ok(("127.0.0.1".into(), 9100)));
        let missing = gc(ServiceCheck {
            port_label: "admin".into(),
            ..Default::default()
        });
        let e = target(&missing, &alloc, &node).unwrap_err();
        assert!(e.contains("\"admin\": port label not found"), "{e}");
        let mut custom = gc(ServiceCheck::default());
        custom.service_address = "10.1.2.3".into();
        assert_eq!(
            target(&custom, &alloc, &node),
            Ok(("10.1.2.3".into(), 23456))
        );
    }

    #[tokio::test]
    async fn tcp_passes_on_an_open_port_and_fails_on_a_closed_one() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let ok = tcp("127.0.0.1", port, Duration::from_secs(2)).await;
        assert_eq!(ok.status, CHECK_SUCCESS);
        assert_eq!(ok.output, "nomad: tcp ok");
        drop(listener);
        let closed = tcp("127.0.0.1", port, Duration::from_secs(2)).await;
        assert_eq!(closed.status, CHECK_FAILURE, "{closed:?}");
    }

    /// Answers one HTTP request per connection with `status` and `body`, sending back what it
    /// received on `seen`.
    fn http_server(status: u16, body: &'static str) -> (u16, std::sync::mpsc::Receiver<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let _ = tx.send(read_request(&mut conn));
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (port, rx)
    }

    /// One whole request: its head, then as many body bytes as its Content-Length says
    /// (a request may arrive in several reads).
    fn read_request(conn: &mut std::net::TcpStream) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&got).into_owned();
            if let Some(head_end) = text.find("\r\n\r\n") {
                let length = text[..head_end]
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if got.len() >= head_end + 4 + length {
                    return text;
                }
            }
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return text,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    }

    fn http_check(method: &str, body: &str) -> ServiceCheck {
        ServiceCheck {
            check_type: "http".into(),
            path: "/health?x=1".into(),
            method: method.into(),
            body: body.into(),
            timeout: 2_000_000_000,
            header: [("X-Probe".to_string(), vec!["yes".to_string()])].into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn http_sends_method_path_headers_and_body_and_reads_nomads_status_rules() {
        let (port, seen) = http_server(200, "fine");
        let ok = HttpProbe::new(&http_check("post", "ping"))
            .run("127.0.0.1", port)
            .await;
        assert_eq!(
            (ok.status, ok.status_code, ok.output.as_str()),
            (CHECK_SUCCESS, 200, "nomad: http ok")
        );
        let request = seen.recv().unwrap();
        assert!(
            request.starts_with("POST /health?x=1 HTTP/1.1"),
            "{request}"
        );
        assert!(
            request.to_ascii_lowercase().contains("x-probe: yes"),
            "{request}"
        );
        assert!(request.ends_with("ping"), "{request}");

        let (port, _seen) = http_server(503, "down for maintenance");
        let down = HttpProbe::new(&http_check("", ""))
            .run("127.0.0.1", port)
            .await;
        assert_eq!(
            (down.status, down.status_code, down.output.as_str()),
            (CHECK_FAILURE, 503, "down for maintenance")
        );
        let (port, _seen) = http_server(204, "");
        let no_content = HttpProbe::new(&http_check("", ""))
            .run("127.0.0.1", port)
            .await;
        assert_eq!(no_content.status, CHECK_SUCCESS);
    }

    #[tokio::test]
    async fn http_fails_with_the_reason_when_nothing_listens() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = HttpProbe::new(&http_check("", ""))
            .run("127.0.0.1", port)
            .await;
        assert_eq!(out.status, CHECK_FAILURE);
        assert!(
            out.output.starts_with("nomad: GET http://127.0.0.1:"),
            "{}",
            out.output
        );
    }

    #[tokio::test]
    async fn grpc_fails_clearly_when_nothing_speaks_grpc() {
        let (port, _seen) = http_server(200, "not grpc");
        let out = grpc("127.0.0.1", port, "", Duration::from_secs(2)).await;
        assert_eq!(out.status, CHECK_FAILURE);
        assert!(
            out.output.starts_with("gRPC check 127.0.0.1:"),
            "{}",
            out.output
        );
    }

    mod grpc_health {
        use drover_plugin_proto::health::health_server::{Health, HealthServer};
        use drover_plugin_proto::health::{HealthCheckRequest, HealthCheckResponse};
        use tonic::{Request, Response, Status};

        /// SERVING for every service but "down".
        struct Serving;

        type Updates = std::pin::Pin<
            Box<dyn tokio_stream::Stream<Item = Result<HealthCheckResponse, Status>> + Send>,
        >;

        #[tonic::async_trait]
        impl Health for Serving {
            async fn check(
                &self,
                request: Request<HealthCheckRequest>,
            ) -> Result<Response<HealthCheckResponse>, Status> {
                let status = if request.get_ref().service == "down" {
                    2
                } else {
                    1
                };
                Ok(Response::new(HealthCheckResponse { status }))
            }

            type WatchStream = Updates;

            async fn watch(
                &self,
                _: Request<HealthCheckRequest>,
            ) -> Result<Response<Updates>, Status> {
                Err(Status::unimplemented("watch"))
            }
        }

        /// A gRPC server with the health service on a loopback port.
        pub async fn serve() -> u16 {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(HealthServer::new(Serving))
                    .serve_with_incoming(incoming),
            );
            port
        }
    }

    #[tokio::test]
    async fn grpc_passes_when_the_health_service_says_serving() {
        let port = grpc_health::serve().await;
        let ok = grpc("127.0.0.1", port, "api", Duration::from_secs(5)).await;
        assert_eq!(ok.status, CHECK_SUCCESS, "{ok:?}");
        let down = grpc("127.0.0.1", port, "down", Duration::from_secs(5)).await;
        assert_eq!(down.status, CHECK_FAILURE);
        assert!(down.output.contains("NOT_SERVING"), "{}", down.output);
    }
}
