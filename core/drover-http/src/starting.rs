//! The API while the agent starts: a server that waits for its peers (`bootstrap_expect = N`
//! with fewer than N known, or `bootstrap_expect = 0`, waiting to be joined) has no Raft yet,
//! yet Nomad's agent answers HTTP from the start. [`late_router`] serves the starting answers
//! until the agent's full router is ready, then passes everything to it.
//!
//! While starting: `/v1/agent/self`, `/v1/agent/members` (this server alone), `/v1/agent/health`
//! (500, "No cluster leader"), `/v1/agent/join` (the addresses join the ones discovery tries),
//! `/v1/status/leader` (`""`), `/v1/status/peers` (`[]`), `/v1/regions`; every other path
//! answers 500 "No cluster leader", as Nomad's server does without a leader.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use drover_server::JoinTargets;
use serde_json::{Value, json};

use crate::AgentInfo;
use crate::error::ApiError;
use crate::response::respond_json;

/// Where the agent puts its full router once it is built.
#[derive(Clone, Default)]
pub struct ReadyRouter(Arc<OnceLock<Router>>);

impl ReadyRouter {
    /// From now on every request goes to `router`. A second call is ignored.
    pub fn set(&self, router: Router) {
        let _ = self.0.set(router);
    }
}

/// A router that answers with `starting` until `ready` is set, then with the router set.
pub fn late_router(starting: Router) -> (Router, ReadyRouter) {
    let ready = ReadyRouter::default();
    let slot = ready.clone();
    let router = Router::new().fallback(move |request: Request| {
        let mut target = slot.0.get().cloned().unwrap_or_else(|| starting.clone());
        async move {
            // A Router is always ready and its error type is Infallible.
            match tower_service::Service::call(&mut target, request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
    });
    (router, ready)
}

#[derive(Clone)]
struct Starting {
    agent: Arc<AgentInfo>,
    join: JoinTargets,
}

const NO_LEADER: &str = "No cluster leader";

/// The answers of a server agent whose server is not running yet (see the module doc).
pub fn starting_router(agent: AgentInfo, join: JoinTargets) -> Router {
    let state = Starting {
        agent: Arc::new(agent),
        join,
    };
    Router::new()
        .route("/v1/agent/self", get(agent_self))
        .route("/v1/agent/members", get(members))
        .route("/v1/agent/health", get(health))
        .route("/v1/agent/join", post(join_later).put(join_later))
        .route(
            "/v1/status/leader",
            get(|| async { respond_json("", None, false) }),
        )
        .route(
            "/v1/status/peers",
            get(|| async { respond_json(&Vec::<String>::new(), None, false) }),
        )
        .route("/v1/regions", get(regions))
        .fallback(|| async { ApiError::internal(NO_LEADER).into_response() })
        .with_state(state)
}

fn member(a: &AgentInfo) -> Value {
    crate::agent::member_json(
        a,
        &crate::agent::MemberFacts {
            name: format!("{}.{}", a.name, a.region),
            rpc: a.rpc_addr.to_string(),
            region: a.region.clone(),
            datacenter: a.datacenter.clone(),
            build: a.version.clone(),
            id: String::new(),
            expect: String::new(),
            status: "alive",
        },
    )
}

async fn agent_self(State(s): State<Starting>) -> Result<Response, ApiError> {
    let body = json!({
        "config": s.agent.config_json,
        "member": member(&s.agent),
        "stats": {
            "nomad": {
                "server": "true",
                "leader": "false",
                "leader_addr": "",
                "bootstrap": "false",
                "known_regions": "1",
            },
            "raft": {"state": "Follower", "num_peers": "0", "last_contact": "never"},
            "runtime": crate::agent::runtime_stats(),
        },
    });
    respond_json(&body, None, false)
}

async fn members(State(s): State<Starting>) -> Result<Response, ApiError> {
    respond_json(
        &json!({
            "ServerName": s.agent.name,
            "ServerRegion": s.agent.region,
            "ServerDC": s.agent.datacenter,
            "Members": [member(&s.agent)],
        }),
        None,
        false,
    )
}

async fn health(State(s): State<Starting>) -> Result<Response, ApiError> {
    let mut body = json!({"server": {"ok": false, "message": NO_LEADER}});
    if s.agent.client {
        body["client"] = json!({"ok": false, "message": "the agent is starting"});
    }
    let mut response = respond_json(&body, None, false)?;
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    Ok(response)
}

async fn join_later(
    State(s): State<Starting>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let addrs = crate::agent::join_addresses(&pairs)?;
    for a in &addrs {
        s.join.add(a);
    }
    tracing::info!(?addrs, "agent join: addresses added to discovery");
    respond_json(
        &json!({"num_joined": addrs.len(), "error": ""}),
        None,
        false,
    )
}

async fn regions(State(s): State<Starting>) -> Result<Response, ApiError> {
    respond_json(&[&s.agent.region], None, false)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use drover_server::JoinTargets;

    use super::{late_router, starting_router};
    use crate::test_support::agent_info;

    async fn call(router: &axum::Router, method: &str, path: &str) -> (StatusCode, String) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .expect("a valid request");
        let mut r = router.clone();
        let response = tower_service::Service::call(&mut r, request)
            .await
            .expect("infallible");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn a_starting_server_answers_no_cluster_leader_and_takes_join_addresses() {
        let join = JoinTargets::default();
        let (router, ready) = late_router(starting_router(agent_info(), join.clone()));

        let (status, body) = call(&router, "GET", "/v1/jobs").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, "No cluster leader")
        );
        let (status, body) = call(&router, "GET", "/v1/agent/health").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body.contains("No cluster leader"), "{body}");
        assert_eq!(call(&router, "GET", "/v1/status/leader").await.1, "\"\"");
        let (_, me) = call(&router, "GET", "/v1/agent/self").await;
        let me: serde_json::Value = serde_json::from_str(&me).expect("json");
        assert_eq!(me["member"]["Tags"]["role"], "nomad");
        assert_eq!(me["stats"]["nomad"]["leader"], "false");

        let (status, body) = call(
            &router,
            "PUT",
            "/v1/agent/join?address=10.0.0.1:4647&address=10.0.0.2",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body, r#"{"error":"","num_joined":2}"#);
        assert_eq!(
            join.list(),
            vec!["10.0.0.1:4647".to_string(), "10.0.0.2:4647".to_string()]
        );
        let (status, _) = call(&router, "PUT", "/v1/agent/join").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);

        // Once the agent's router is set, it answers everything.
        ready.set(axum::Router::new().fallback(|| async { "ready" }));
        assert_eq!(
            call(&router, "GET", "/v1/jobs").await,
            (StatusCode::OK, "ready".into())
        );
    }
}
