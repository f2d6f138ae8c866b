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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn plain_http_on_the_https_port_gets_a_400_that_says_so() {
        use drover_tls::generate::{Kind, agent_cert, ca};
        let dir = std::env::temp_dir().join(format!("drover-https-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_pem = ca("nomad", None, 1).unwrap();
        let server = agent_cert(&ca_pem, Kind::Server, "global", "nomad", &[], 1).unwrap();
        let files = ["ca.pem", "server.pem", "server-key.pem"].map(|n| dir.join(n));
        std::fs::write(&files[0], &ca_pem.cert).unwrap();
        std::fs::write(&files[1], &server.cert).unwrap();
        std::fs::write(&files[2], &server.key).unwrap();
        let [ca_file, cert_file, key_file] = files;
        let tls = drover_tls::AgentTls::load(drover_tls::TlsSettings {
            http: true,
            files: drover_tls::TlsFiles {
                ca_file: Some(ca_file),
                cert_file: Some(cert_file),
                key_file: Some(key_file),
            },
            region: "global".into(),
            ..Default::default()
        })
        .unwrap()
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = axum::Router::new();
        tokio::spawn(super::serve(
            listener,
            router,
            Arc::clone(&tls),
            std::future::pending(),
        ));
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.0 400 Bad Request"), "{answer}");
        assert!(answer.contains("Client sent an HTTP request to an HTTPS server."));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
