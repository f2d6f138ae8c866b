//! The client's plumbing (retries, timeouts, answer checks) against a fake Identity service on
//! a unix socket. The RPCs themselves are tested against the real hostpath plugin in
//! drover-csi-hostpath.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use super::*;
use crate::proto::identity_server::{Identity, IdentityServer};

#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers UNAVAILABLE this many times, then normally.
    UnavailableFirst(u32),
    /// Takes this long to answer.
    Slow(Duration),
    /// Answers GetPluginInfo with an empty name.
    Nameless,
    /// Answers every call with INVALID_ARGUMENT.
    Invalid,
}

struct FakeIdentity {
    calls: Arc<AtomicU32>,
    behaviour: Behaviour,
}

impl FakeIdentity {
    async fn answer<T>(&self, ok: T) -> Result<Response<T>, Status> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        match self.behaviour {
            Behaviour::UnavailableFirst(n) if call <= n => Err(Status::unavailable("starting")),
            Behaviour::Slow(d) => {
                tokio::time::sleep(d).await;
                Ok(Response::new(ok))
            }
            Behaviour::Invalid => Err(Status::invalid_argument("bad request")),
            _ => Ok(Response::new(ok)),
        }
    }
}

#[tonic::async_trait]
impl Identity for FakeIdentity {
    async fn get_plugin_info(
        &self,
        _: Request<proto::GetPluginInfoRequest>,
    ) -> Result<Response<proto::GetPluginInfoResponse>, Status> {
        let name = match self.behaviour {
            Behaviour::Nameless => String::new(),
            _ => "fake.csi.example".to_string(),
        };
        self.answer(proto::GetPluginInfoResponse {
            name,
            vendor_version: "1.2.3".into(),
            manifest: Default::default(),
        })
        .await
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<proto::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<proto::GetPluginCapabilitiesResponse>, Status> {
        let caps = PluginCapabilities {
            controller_service: true,
            ..Default::default()
        };
        self.answer((&caps).into()).await
    }

    async fn probe(
        &self,
        _: Request<proto::ProbeRequest>,
    ) -> Result<Response<proto::ProbeResponse>, Status> {
        // No `ready`: the spec says that means ready.
        self.answer(proto::ProbeResponse { ready: None }).await
    }
}

struct Fake {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    calls: Arc<AtomicU32>,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<()>,
}

impl Fake {
    async fn start(behaviour: Behaviour) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("csi.sock");
        let calls = Arc::new(AtomicU32::new(0));
        let (stop, served) = serve(&socket, Arc::clone(&calls), behaviour);
        Fake {
            _dir: dir,
            socket,
            calls,
            stop: Some(stop),
            served,
        }
    }

    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.served).await.unwrap();
        let _ = std::fs::remove_file(&self.socket);
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

fn serve(
    socket: &Path,
    calls: Arc<AtomicU32>,
    behaviour: Behaviour,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .serve_with_incoming_shutdown(
                IdentityServer::new(FakeIdentity { calls, behaviour }),
                tokio_stream::wrappers::UnixListenerStream::new(listener),
                async {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
    });
    (stop, served)
}

fn quick(max_attempts: u32, timeout: Duration) -> CallOptions {
    CallOptions {
        timeout,
        max_attempts,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
    }
}

#[tokio::test]
async fn unavailable_is_retried_until_the_plugin_answers() {
    let fake = Fake::start(Behaviour::UnavailableFirst(2)).await;
    let client = CsiClient::connect_with(&fake.socket, quick(3, Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(client.probe().await.unwrap(), "no `ready` means ready");
    assert_eq!(fake.calls(), 3);
}

#[tokio::test]
async fn retries_stop_after_max_attempts_with_the_last_code() {
    let fake = Fake::start(Behaviour::UnavailableFirst(u32::MAX)).await;
    let client = CsiClient::connect_with(&fake.socket, quick(2, Duration::from_secs(5)))
        .await
        .unwrap();
    let err = client.plugin_info().await.unwrap_err();
    match &err {
        CsiError::Rpc {
            rpc,
            code,
            attempts,
            ..
        } => {
            assert_eq!(*rpc, "GetPluginInfo");
            assert_eq!(*code, Code::Unavailable);
            assert_eq!(*attempts, 2);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(fake.calls(), 2);
}

#[tokio::test]
async fn other_codes_are_not_retried() {
    let fake = Fake::start(Behaviour::Invalid).await;
    let client = CsiClient::connect_with(&fake.socket, quick(5, Duration::from_secs(5)))
        .await
        .unwrap();
    let err = client.plugin_capabilities().await.unwrap_err();
    assert_eq!(err.code(), Some(Code::InvalidArgument));
    assert_eq!(err.rpc(), "GetPluginCapabilities");
    assert_eq!(fake.calls(), 1);
}

#[tokio::test]
async fn a_slow_plugin_hits_the_per_attempt_timeout_which_is_retried() {
    let fake = Fake::start(Behaviour::Slow(Duration::from_millis(500))).await;
    let client = CsiClient::connect_with(&fake.socket, quick(2, Duration::from_millis(50)))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = client.probe().await.unwrap_err();
    assert_eq!(err.code(), Some(Code::DeadlineExceeded), "{err}");
    assert!(matches!(err, CsiError::Rpc { attempts: 2, .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_millis(450));
    // The same connection with a longer timeout gets the answer.
    let patient = client.with_options(quick(1, Duration::from_secs(5)));
    assert!(patient.probe().await.unwrap());
}

#[tokio::test]
async fn an_empty_plugin_name_is_an_invalid_answer() {
    let fake = Fake::start(Behaviour::Nameless).await;
    let client = CsiClient::connect(&fake.socket).await.unwrap();
    let err = client.plugin_info().await.unwrap_err();
    assert!(
        matches!(
            err,
            CsiError::InvalidResponse {
                rpc: "GetPluginInfo",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn plugin_info_and_capabilities_are_typed() {
    let fake = Fake::start(Behaviour::UnavailableFirst(0)).await;
    let url = format!("unix://{}", fake.socket.display());
    let client = CsiClient::connect(&url).await.unwrap();
    assert_eq!(client.socket_path(), fake.socket);
    let info = client.plugin_info().await.unwrap();
    assert_eq!(info.name, "fake.csi.example");
    assert_eq!(info.vendor_version, "1.2.3");
    let caps = client.plugin_capabilities().await.unwrap();
    assert!(caps.controller_service);
    assert!(!caps.volume_accessibility_constraints);
}

#[tokio::test]
async fn connecting_to_a_missing_socket_fails_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody.sock");
    let err = CsiClient::connect(&socket).await.unwrap_err();
    assert!(matches!(err, CsiError::Connect { .. }), "{err:?}");
    assert!(err.to_string().contains("nobody.sock"), "{err}");
}

#[tokio::test]
async fn the_client_reconnects_to_a_restarted_plugin() {
    let mut fake = Fake::start(Behaviour::UnavailableFirst(0)).await;
    let client = CsiClient::connect_with(&fake.socket, quick(20, Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(client.probe().await.unwrap());
    fake.stop().await;
    // The plugin comes back on the same socket a little later; the retries bridge the gap.
    let socket = fake.socket.clone();
    let calls = Arc::clone(&fake.calls);
    let restarted = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        serve(&socket, calls, Behaviour::UnavailableFirst(0))
    });
    assert!(client.probe().await.unwrap());
    let (stop, served) = restarted.await.unwrap();
    stop.send(()).unwrap();
    served.await.unwrap();
}
