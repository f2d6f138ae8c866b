//! The RPC port over TLS: connections accepted with the agent's certificate (mutual TLS, so
//! every connection carries what its peer's certificate says it is, as a [`PeerRole`] in each
//! request's extensions), and connections dialled with it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use drover_tls::{AgentTls, PeerRole};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tonic::transport::server::Connected;

/// Handshakes allowed to run at once; more connections wait in the accept queue.
const HANDSHAKES: usize = 64;
/// A peer that does not finish its handshake in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An accepted RPC connection over TLS, with what its peer's certificate says.
pub(crate) struct TlsConn {
    stream: drover_tls::server::TlsStream<TcpStream>,
    role: PeerRole,
}

impl Connected for TlsConn {
    type ConnectInfo = PeerRole;

    fn connect_info(&self) -> PeerRole {
        self.role
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Accepts on `listener` and hands over each connection whose handshake succeeded. A failed
/// handshake (plain text, a certificate the CA did not sign, none at all) is logged and
/// dropped; it never stops the accepting.
pub(crate) fn accept(
    listener: TcpListener,
    tls: Arc<AgentTls>,
) -> mpsc::Receiver<Result<TlsConn, io::Error>> {
    let (tx, rx) = mpsc::channel(HANDSHAKES);
    tokio::spawn(async move {
        let limit = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES));
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "RPC accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = tx.closed() => return,
            };
            let _ = tcp.set_nodelay(true);
            let Ok(permit) = limit.clone().acquire_owned().await else {
                return;
            };
            // The files as they are now: a reload applies to the next connection.
            let acceptor = tls.rpc_acceptor();
            let (tls, tx) = (tls.clone(), tx.clone());
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let role = {
                            let (_, conn) = stream.get_ref();
                            tls.role_of(conn.peer_certificates().and_then(|c| c.first()))
                        };
                        let _ = tx.send(Ok(TlsConn { stream, role })).await;
                    }
                    Ok(Err(e)) => tracing::warn!(%peer, error = %e, "RPC TLS handshake refused"),
                    Err(_) => tracing::warn!(%peer, "RPC TLS handshake timed out"),
                }
            });
        }
    });
    rx
}

/// Dials `host:port` of the URI and runs the TLS handshake, checking the server's certificate
/// as the agent's settings say.
#[derive(Clone)]
pub(crate) struct TlsConnector {
    pub(crate) tls: Arc<AgentTls>,
    pub(crate) timeout: Duration,
}

impl tower_service::Service<http::Uri> for TlsConnector {
    type Response = hyper_util::rt::TokioIo<drover_tls::client::TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (tls, timeout) = (self.tls.clone(), self.timeout);
        Box::pin(async move {
            let authority = uri
                .authority()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host:port"))?
                .to_string();
            let dial = async {
                let tcp = TcpStream::connect(&authority).await?;
                let _ = tcp.set_nodelay(true);
                tls.rpc_connector()
                    .connect(tls.rpc_server_name(), tcp)
                    .await
            };
            match tokio::time::timeout(timeout, dial).await {
                Ok(Ok(stream)) => Ok(hyper_util::rt::TokioIo::new(stream)),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no TLS connection within {timeout:?}"),
                )),
            }
        })
    }
}
