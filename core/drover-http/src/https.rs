//! The HTTP API over TLS (`tls { http = true }`): each connection's handshake runs on its
//! own task with the certificate files as they are at that moment (a SIGHUP reload applies
//! to the next connection), then HTTP/1.1 with upgrades (exec websockets) on the stream.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::io::AsyncWriteExt;

/// A peer that does not finish its handshake in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// What a plain-text request gets on the TLS port, as Go's net/http answers it.
const PLAIN_TEXT_ANSWER: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Arc<drover_tls::AgentTls>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    tokio::pin!(shutdown);
    loop {
        let (mut tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "HTTPS accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let acceptor = tls.http_acceptor();
        let router = router.clone();
        tokio::spawn(async move {
            let handshake = async {
                let mut first = [0u8; 1];
                if tcp.peek(&mut first).await? == 1 && first[0] != TLS_HANDSHAKE_RECORD {
                    let _ = tcp.write_all(PLAIN_TEXT_ANSWER).await;
                    let _ = tcp.shutdown().await;
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "plain HTTP on the HTTPS port",
                    ));
                }
                acceptor.accept(tcp).await
            };
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Ok(Ok(stream)) => crate::proxy::serve_connection(stream, router).await,
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTPS handshake refused"),
                Err(_) => tracing::debug!(%peer, "HTTPS handshake timed out"),
            }
        });
    }
}
