//! HTTP over a tunnel: forwarding one request to the agent at the other end (streaming both
//! bodies, and joining the two connections when the request upgrades, as `exec`'s websocket
//! does), and serving a router on a tunnel's far end.

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::error::ApiError;

/// Headers about one connection, not the request: not passed on (but for an upgrade, which
/// needs them end to end).
const HOP_BY_HOP: [header::HeaderName; 4] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
];

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

/// Sends `request` over `io` (a fresh connection to the agent that answers it) and returns
/// that agent's answer as it streams in.
pub(crate) async fn forward<T>(io: T, mut request: Request) -> Result<Response, ApiError>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| ApiError::internal(format!("forwarding the request failed: {e}")))?;
    tokio::spawn(async move {
        if let Err(e) = connection.with_upgrades().await {
            tracing::debug!(error = %e, "forwarded connection ended");
        }
    });
    let upgrade = is_upgrade(request.headers());
    let incoming_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
    if !upgrade {
        strip_hop_by_hop(request.headers_mut());
    }
    let mut response = sender
        .send_request(request)
        .await
        .map_err(|e| ApiError::internal(format!("the forwarded request failed: {e}")))?;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(incoming) = incoming_upgrade {
            let outgoing = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                match tokio::try_join!(incoming, outgoing) {
                    Ok((incoming, outgoing)) => {
                        splice(TokioIo::new(incoming), TokioIo::new(outgoing)).await;
                    }
                    Err(e) => tracing::debug!(error = %e, "forwarded upgrade failed"),
                }
            });
        }
    } else {
        strip_hop_by_hop(response.headers_mut());
    }
    Ok(response.map(Body::new))
}

/// Sends one request with a JSON `body` over `io` and returns the answer's status and body:
/// how an agent calls another agent's internal endpoints through a tunnel.
pub async fn call_over<T>(
    io: T,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(StatusCode, axum::body::Bytes), String>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "drover")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .map_err(|e| format!("building the request: {e}"))?;
    let response = forward(io, request).await.map_err(|e| e.message)?;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), crate::MAX_BODY_BYTES)
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok((status, body))
}

/// Joins two connections until both directions end. Unlike `copy_bidirectional`, a failed
/// direction does not end the other: when the caller's side can no longer be written, what
/// the far side already sent (a websocket's exit frame) still reaches it.
async fn splice<A, B>(a: A, b: B)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut a_read, mut a_write) = tokio::io::split(a);
    let (mut b_read, mut b_write) = tokio::io::split(b);
    let forward = async {
        let _ = tokio::io::copy(&mut a_read, &mut b_write).await;
        let _ = b_write.shutdown().await;
    };
    let backward = async {
        let _ = tokio::io::copy(&mut b_read, &mut a_write).await;
        let _ = a_write.shutdown().await;
    };
    tokio::join!(forward, backward);
}

/// Serves `router` on one connection `io` until it closes (upgrades included).
pub async fn serve_connection<T>(io: T, router: Router)
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
        let router = router.clone();
        async move {
            let request = request.map(Body::new);
            tower_service::Service::call(&mut router.into_service::<Body>(), request).await
        }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await
    {
        tracing::debug!(error = %e, "tunnelled connection ended");
    }
}

#[cfg(test)]
mod tests {
    use axum::routing::{get, put};
    use http_body_util::BodyExt;

    use super::*;

    fn far_router() -> Router {
        Router::new()
            .route("/hello", get(|| async { "hello from afar" }))
            .route(
                "/echo",
                put(|body: String| async move { body.to_uppercase() }),
            )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_forwarded_over_a_connection_gets_the_far_routers_answer() {
        for (method, path, body, want) in [
            ("GET", "/hello", "", "hello from afar"),
            ("PUT", "/echo", "shout", "SHOUT"),
        ] {
            let (near, far) = tokio::io::duplex(64 * 1024);
            tokio::spawn(serve_connection(far, far_router()));
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header(header::HOST, "x")
                .body(Body::from(body))
                .unwrap();
            let response = forward(near, request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let got = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(got, want.as_bytes());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_closed_connection_is_an_error_not_a_hang() {
        let (near, far) = tokio::io::duplex(1024);
        drop(far);
        let request = Request::builder()
            .uri("/hello")
            .body(Body::empty())
            .unwrap();
        let e = forward(near, request).await.unwrap_err();
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
}
