//! Read consistency in a cluster, as Nomad offers it: a read is answered from state at least as
//! new as the leader's at the time of the request (the leader answers at once; a follower first
//! catches up through a Raft read barrier), unless `?stale` lets any server answer from what it
//! has. Every answer carrying `X-Nomad-Index` gets truthful `X-Nomad-KnownLeader` and
//! `X-Nomad-LastContact` (milliseconds since this server last heard from the leader; 0 for
//! consistent reads and on the leader).

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::error::ApiError;

/// State reads: the paths whose answers come from the replicated state.
const STATE_READS: &[&str] = &[
    "/v1/jobs",
    "/v1/job/",
    "/v1/allocations",
    "/v1/allocation/",
    "/v1/evaluations",
    "/v1/evaluation/",
    "/v1/nodes",
    "/v1/node/",
    "/v1/operator/raft/",
];

fn is_state_read(method: &Method, path: &str) -> bool {
    method == Method::GET && STATE_READS.iter().any(|p| path.starts_with(p))
}

/// `?stale`, `?stale=`, `?stale=true`... (Nomad treats its presence as the flag).
fn wants_stale(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "stale" || kv.starts_with("stale="))
    })
}

pub(crate) async fn layer(State(s): State<AppState>, request: Request, next: Next) -> Response {
    let stale = wants_stale(request.uri().query());
    if is_state_read(request.method(), request.uri().path())
        && !stale
        && let Err(e) = s.server.read_barrier().await
    {
        return ApiError::from(e).into_response();
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if headers.contains_key("X-Nomad-Index") {
        let last_contact = if stale {
            s.server
                .last_leader_contact()
                .map(|d| d.as_millis() as u64)
                // Never heard from a leader: as far back as it gets.
                .unwrap_or(u64::MAX)
        } else {
            0
        };
        headers.insert("X-Nomad-LastContact", HeaderValue::from(last_contact));
        headers.insert(
            "X-Nomad-KnownLeader",
            HeaderValue::from_static(if s.server.known_leader() {
                "true"
            } else {
                "false"
            }),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestApi;

    #[test]
    fn stale_is_a_flag_whatever_its_value() {
        assert!(wants_stale(Some("stale")));
        assert!(wants_stale(Some("index=3&stale=")));
        assert!(wants_stale(Some("stale=true")));
        assert!(!wants_stale(Some("stalemate=1")));
        assert!(!wants_stale(None));
    }

    #[test]
    fn only_state_reads_wait_for_the_barrier() {
        assert!(is_state_read(&Method::GET, "/v1/jobs"));
        assert!(is_state_read(&Method::GET, "/v1/job/web/allocations"));
        assert!(!is_state_read(&Method::PUT, "/v1/jobs"));
        assert!(!is_state_read(&Method::GET, "/v1/status/leader"));
        assert!(!is_state_read(&Method::GET, "/v1/client/fs/logs/x"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_leader_answers_stale_and_consistent_reads_with_zero_last_contact() {
        let api = TestApi::start().await;
        for uri in ["/v1/jobs", "/v1/jobs?stale"] {
            let r = api.get(uri).await;
            assert_eq!(r.status, axum::http::StatusCode::OK);
            assert_eq!(r.headers["X-Nomad-LastContact"], "0", "{uri}");
            assert_eq!(r.headers["X-Nomad-KnownLeader"], "true", "{uri}");
        }
    }
}
