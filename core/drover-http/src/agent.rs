//! `/v1/agent/{self,members,health}`, `/v1/status/{leader,peers}` and `/v1/regions`.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::query::{Params, flag};
use crate::response::{known_leader, respond_json};

/// Gossip protocol numbers Nomad reports for its members; Drover has no gossip layer and
/// reports Nomad 1.1's values so tools that print them see familiar ones.
const PROTOCOL: [(&str, u64); 6] = [
    ("ProtocolMin", 1),
    ("ProtocolMax", 5),
    ("ProtocolCur", 2),
    ("DelegateMin", 2),
    ("DelegateMax", 5),
    ("DelegateCur", 4),
];

/// This agent as one of Nomad's serf members.
fn member(s: &AppState) -> Value {
    let a = &s.agent;
    let rpc_ip = a.rpc_addr.ip().to_string();
    let rpc_port = a.rpc_addr.port();
    let mut member = json!({
        "Name": format!("{}.{}", a.name, a.region),
        "Addr": rpc_ip,
        // No gossip port: the RPC port is where this server is reached.
        "Port": rpc_port,
        "Tags": {
            "build": a.version,
            "region": a.region,
            "dc": a.datacenter,
            "role": "nomad",
            "id": s.server.id().to_string(),
            "rpc_addr": rpc_ip,
            "port": rpc_port.to_string(),
            "bootstrap": "1",
            "expect": "1",
            "vsn": "1",
            "mvn": "1",
            "raft_vsn": "3",
        },
        "Status": "alive",
    });
    if let Some(obj) = member.as_object_mut() {
        for (k, v) in PROTOCOL {
            obj.insert(k.into(), json!(v));
        }
    }
    member
}

fn leader_addr(s: &AppState) -> String {
    s.server.leader_address().unwrap_or_default()
}

/// `GET /v1/agent/self`: `{"config", "member", "stats"}` as Nomad's agent answers.
pub(crate) async fn agent_self(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let raft = s.server.raft_status();
    let leader = s.server.is_leader();
    let snap = s.server.snapshot();
    let mut stats = json!({
        "nomad": {
            "server": s.agent.server.to_string(),
            "leader": leader.to_string(),
            "leader_addr": leader_addr(&s),
            "bootstrap": "true",
            "known_regions": "1",
        },
        "raft": {
            "state": if leader { "Leader" } else if raft.leader_id.is_some() { "Follower" } else { "Candidate" },
            "term": raft.term.to_string(),
            "commit_index": raft.commit_index.to_string(),
            "applied_index": raft.applied_index.to_string(),
            "last_log_index": raft.last_log_index.to_string(),
            "last_snapshot_index": raft.snapshot_index.to_string(),
            "num_peers": raft.voters.len().saturating_sub(1).to_string(),
            // Go's Duration strings, as Nomad's raft stats: "0" on the leader, "never" without one.
            "last_contact": match s.server.last_leader_contact() {
                Some(d) if d.is_zero() => "0".to_string(),
                Some(d) => format!("{d:?}"),
                None => "never".to_string(),
            },
        },
        "runtime": {
            "arch": std::env::consts::ARCH,
            "kernel.name": std::env::consts::OS,
            "cpu_count": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).to_string(),
        },
    });
    if let (Some(client), Some(obj)) = (&s.client, stats.as_object_mut()) {
        let node_id = client.node_id();
        obj.insert(
            "client".into(),
            json!({
                "node_id": node_id,
                "known_servers": s.agent.rpc_addr.to_string(),
                "num_allocations": snap.allocs_by_node(&node_id).iter().filter(|a| !a.terminal()).count().to_string(),
            }),
        );
    }
    let body = json!({
        "config": s.agent.config_json,
        "member": member(&s),
        "stats": stats,
    });
    respond_json(&body, None, pretty)
}

/// `GET /v1/agent/members`: the servers of the region (this one).
pub(crate) async fn members(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let body = json!({
        "ServerName": s.agent.name,
        "ServerRegion": s.agent.region,
        "ServerDC": s.agent.datacenter,
        "Members": [member(&s)],
    });
    respond_json(&body, None, pretty)
}

/// `GET /v1/agent/health`: 200 when every part of the agent is fine, else 500 with the same
/// shape, as Nomad answers.
pub(crate) async fn health(State(s): State<AppState>) -> Result<Response, ApiError> {
    let mut body = serde_json::Map::new();
    let mut ok = true;
    if s.agent.server {
        let leader = known_leader(&s);
        ok &= leader;
        body.insert(
            "server".into(),
            json!({"ok": leader, "message": if leader { "ok" } else { "No cluster leader" }}),
        );
    }
    if s.client.is_some() {
        body.insert("client".into(), json!({"ok": true, "message": "ok"}));
    }
    let mut response = respond_json(&Value::Object(body), None, false)?;
    if !ok {
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    }
    Ok(response.into_response())
}

/// `GET /v1/status/leader`: the leader's RPC address as a JSON string, `""` when none.
pub(crate) async fn leader(State(s): State<AppState>) -> Result<Response, ApiError> {
    respond_json(&leader_addr(&s), None, false)
}

/// `GET /v1/status/peers`: RPC addresses of the Raft voters.
pub(crate) async fn peers(State(s): State<AppState>) -> Result<Response, ApiError> {
    respond_json(&s.server.peer_addresses(), None, false)
}

/// `GET /v1/regions`.
pub(crate) async fn regions(State(s): State<AppState>) -> Result<Response, ApiError> {
    respond_json(&[&s.agent.region], None, false)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::json;

    use crate::test_support::TestApi;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_and_regions_answer_like_nomad() {
        let api = TestApi::start().await;
        let r = api.get("/v1/status/leader").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.text(), "\"127.0.0.1:4647\"");
        assert_eq!(
            api.get("/v1/status/peers").await.json(),
            json!(["127.0.0.1:4647"])
        );
        assert_eq!(api.get("/v1/regions").await.json(), json!(["global"]));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn agent_self_members_and_health_have_nomads_shapes() {
        let api = TestApi::start().await;
        let me = api.get("/v1/agent/self").await.json();
        assert_eq!(me["config"]["Region"], "global");
        assert_eq!(me["member"]["Name"], "test-agent.global");
        assert_eq!(me["member"]["Tags"]["role"], "nomad");
        assert_eq!(me["stats"]["nomad"]["leader"], "true");
        assert_eq!(me["stats"]["raft"]["state"], "Leader");

        let members = api.get("/v1/agent/members").await.json();
        assert_eq!(members["ServerName"], "test-agent");
        assert_eq!(members["ServerRegion"], "global");
        assert_eq!(members["ServerDC"], "dc1");
        assert_eq!(members["Members"][0]["Status"], "alive");
        assert_eq!(members["Members"][0]["Tags"]["port"], "4647");

        let r = api.get("/v1/agent/health").await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.json(), json!({"server": {"ok": true, "message": "ok"}}));
    }
}
