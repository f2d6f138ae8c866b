//! `/v1/agent/{self,members,health}`, `/v1/status/{leader,peers}` and `/v1/regions`.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::query::{Params, flag};
use crate::response::{known_leader, respond_json};
use crate::{AgentInfo, AppState};

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

/// What a member's JSON is made of (one of Nomad's serf members, as Drover knows it).
pub(crate) struct MemberFacts {
    /// `<node>.<region>`.
    pub name: String,
    /// Its RPC address, `host:port`.
    pub rpc: String,
    pub region: String,
    pub datacenter: String,
    pub build: String,
    /// Raft id, empty when not known yet.
    pub id: String,
    /// `bootstrap_expect`, empty when not known.
    pub expect: String,
    /// `alive` or `failed`.
    pub status: &'static str,
}

/// One of Nomad's serf members. Drover has no gossip: `Addr`/`Port` are where the server is
/// reached over RPC.
pub(crate) fn member_json(a: &AgentInfo, f: &MemberFacts) -> Value {
    let (ip, port) = match f.rpc.rsplit_once(':') {
        Some((ip, port)) => (ip.to_string(), port.parse::<u16>().unwrap_or(0)),
        None => (f.rpc.clone(), a.rpc_addr.port()),
    };
    let mut member = json!({
        "Name": f.name,
        "Addr": ip,
        "Port": port,
        "Tags": {
            "build": f.build,
            "region": f.region,
            "dc": f.datacenter,
            "role": "nomad",
            "id": f.id,
            "rpc_addr": ip,
            "port": port.to_string(),
            "bootstrap": if f.expect == "1" { "1" } else { "0" },
            "expect": f.expect,
            "vsn": "1",
            "mvn": "1",
            "raft_vsn": "3",
        },
        "Status": f.status,
    });
    if let Some(obj) = member.as_object_mut() {
        for (k, v) in PROTOCOL {
            obj.insert(k.into(), json!(v));
        }
    }
    member
}

fn facts(report: &drover_server::MemberReport, status: &'static str) -> MemberFacts {
    MemberFacts {
        name: report.name.clone(),
        rpc: report.address.clone(),
        region: report.region.clone(),
        datacenter: report.datacenter.clone(),
        build: report.build.clone(),
        id: report.id.to_string(),
        expect: report.bootstrap_expect.to_string(),
        status,
    }
}

/// This agent as one of Nomad's serf members.
fn member(s: &AppState) -> Value {
    let mut f = facts(&s.server.member_report(), "alive");
    f.name = format!("{}.{}", s.agent.name, s.agent.region);
    member_json(&s.agent, &f)
}

/// `[{Suffrage:Voter ID:<id> Address:<rpc>} ...]`, as Nomad's raft stats print the
/// configuration (Drover's ids are numbers): `(id, voter, address)` each.
fn latest_configuration(members: impl Iterator<Item = (u64, bool, String)>) -> String {
    let servers: Vec<String> = members
        .map(|(id, voter, address)| {
            let suffrage = if voter { "Voter" } else { "Nonvoter" };
            format!("{{Suffrage:{suffrage} ID:{id} Address:{address}}}")
        })
        .collect();
    format!("[{}]", servers.join(" "))
}

/// Nomad's `runtime` stats of `/v1/agent/self`.
pub(crate) fn runtime_stats() -> Value {
    json!({
        "arch": std::env::consts::ARCH,
        "kernel.name": std::env::consts::OS,
        "cpu_count": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).to_string(),
        "version": concat!("rust/drover-", env!("CARGO_PKG_VERSION")),
    })
}

/// The `address` parameters of `/v1/agent/join` (several allowed, as in Nomad), each with
/// the RPC port 4647 when it names none. None: 400 "missing address to join".
pub(crate) fn join_addresses(pairs: &[(String, String)]) -> Result<Vec<String>, ApiError> {
    let addrs: Vec<String> = pairs
        .iter()
        .filter(|(k, v)| k == "address" && !v.trim().is_empty())
        .map(|(_, v)| {
            let v = v.trim();
            if v.rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            {
                v.to_string()
            } else {
                format!("{v}:4647")
            }
        })
        .collect();
    if addrs.is_empty() {
        return Err(ApiError::bad_request("missing address to join"));
    }
    Ok(addrs)
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
            "known_regions": s.server.regions().len().to_string(),
        },
        "raft": {
            "state": if leader { "Leader" } else if raft.leader_id.is_some() { "Follower" } else { "Candidate" },
            "term": raft.term.to_string(),
            "commit_index": raft.commit_index.to_string(),
            "applied_index": raft.applied_index.to_string(),
            "last_log_index": raft.last_log_index.to_string(),
            "last_snapshot_index": raft.snapshot_index.to_string(),
            "num_peers": raft.voters.len().saturating_sub(1).to_string(),
            // hashicorp/raft's configuration as Go prints it.
            "latest_configuration": latest_configuration(
                raft.voters
                    .iter()
                    .map(|id| (*id, true))
                    .chain(raft.learners.iter().map(|id| (*id, false)))
                    .map(|(id, voter)| {
                        let address = raft.peers.get(&id).map(|p| p.address.clone()).unwrap_or_default();
                        (id, voter, address)
                    }),
            ),
            // Go's Duration strings, as Nomad's raft stats: "0" on the leader, "never" without one.
            "last_contact": match s.server.last_leader_contact() {
                Some(d) if d.is_zero() => "0".to_string(),
                Some(d) => format!("{d:?}"),
                None => "never".to_string(),
            },
        },
        "runtime": runtime_stats(),
    });
    if let (Some(client), Some(obj)) = (&s.client, stats.as_object_mut()) {
        let node_id = client.node_id();
        obj.insert(
            "client".into(),
            json!({
                "node_id": node_id,
                "known_servers": s.agent.rpc_addr.to_string(),
                "num_allocations": snap.allocs_by_node(&node_id).iter().filter(|a| !a.terminal()).count().to_string(),
                // Nomad's `last_heartbeat`: the time since the last heartbeat reached a server.
                "last_heartbeat": client
                    .last_heartbeat()
                    .and_then(|t| t.elapsed().ok())
                    .map(|d| format!("{d:?}"))
                    .unwrap_or_default(),
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

/// `GET /v1/agent/members`: every server of the applied Raft configuration, each described
/// by itself (a server that does not answer is `failed`; Drover has no gossip).
pub(crate) async fn members(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let mut members: Vec<Value> = s
        .server
        .members()
        .await
        .iter()
        .map(|m| member_json(&s.agent, &facts(&m.report, m.status)))
        .collect();
    if members.is_empty() {
        // Not in a configuration yet (joining): this server alone.
        members.push(member(&s));
    }
    let body = json!({
        "ServerName": s.agent.name,
        "ServerRegion": s.agent.region,
        "ServerDC": s.agent.datacenter,
        "Members": members,
    });
    respond_json(&body, None, pretty)
}

/// `PUT /v1/agent/join?address=...`: Nomad's `{"num_joined", "error"}`. Each address (an RPC
/// address) and this server learn each other; a server there waiting to be joined then joins
/// this cluster.
pub(crate) async fn join(
    State(s): State<AppState>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let addrs = join_addresses(&pairs)?;
    let mut joined = 0;
    let mut errors = Vec::new();
    for a in &addrs {
        match s.server.join_server(a).await {
            Ok(()) => joined += 1,
            Err(e) => errors.push(e.to_string()),
        }
    }
    respond_json(
        &json!({"num_joined": joined, "error": errors.join("; ")}),
        None,
        false,
    )
}

/// `PUT /v1/agent/force-leave?node=NAME`: removes that server from the Raft configuration
/// (Nomad's serf force-leave, which for servers ends in a Raft removal).
pub(crate) async fn force_leave(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let node = params
        .get("node")
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request("missing node to force leave"))?;
    if params.contains_key("prune") {
        return Err(ApiError::not_implemented("force-leave ?prune"));
    }
    s.server.force_leave(node).await?;
    respond_json(&Value::Null, None, false)
}

/// `GET /v1/agent/servers` on a server agent: as in Nomad, only an agent with a client has
/// a server list (501 "Invalid method" otherwise); its client uses this server, so the list
/// is this region's servers.
pub(crate) async fn servers(State(s): State<AppState>) -> Result<Response, ApiError> {
    if s.client.is_none() {
        return Err(ApiError::new(StatusCode::NOT_IMPLEMENTED, "Invalid method"));
    }
    respond_json(&s.server.peer_addresses(), None, false)
}

/// `PUT /v1/agent/servers` on a server agent: its client talks to the server in the same
/// process, so there is no list to replace.
pub(crate) async fn set_servers() -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "replacing the server list is not supported on an agent that runs a server: its client uses the local server",
    )
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

/// `GET /v1/regions`: this region and every region joined to it, sorted.
pub(crate) async fn regions(State(s): State<AppState>) -> Result<Response, ApiError> {
    respond_json(&s.server.regions(), None, false)
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, StatusCode};
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_lists_the_raft_configuration_with_each_servers_tags() {
        let api = TestApi::start().await;
        let members = api.get("/v1/agent/members").await.json();
        let list = members["Members"].as_array().expect("a list");
        assert_eq!(list.len(), 1, "{members}");
        assert_eq!(list[0]["Tags"]["region"], "global");
        assert_eq!(list[0]["Tags"]["dc"], "dc1");
        assert_eq!(list[0]["Tags"]["build"], env!("CARGO_PKG_VERSION"));
        assert_eq!(list[0]["Tags"]["expect"], "1");
        assert_eq!(list[0]["Addr"], "127.0.0.1");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn join_needs_an_address_and_reports_what_failed() {
        let api = TestApi::start().await;
        let r = api.call(Method::PUT, "/v1/agent/join", None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.text(), "missing address to join");
        // The test server has no network: the join fails, and says so in Nomad's shape.
        let r = api
            .call(Method::PUT, "/v1/agent/join?address=127.0.0.1:1", None)
            .await;
        assert_eq!(r.status, StatusCode::OK);
        let body = r.json();
        assert_eq!(body["num_joined"], 0);
        assert!(
            !body["error"].as_str().unwrap_or_default().is_empty(),
            "{body}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn force_leave_of_an_unknown_server_is_404_and_needs_a_node() {
        let api = TestApi::start().await;
        let r = api.call(Method::PUT, "/v1/agent/force-leave", None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let r = api
            .call(Method::PUT, "/v1/agent/force-leave?node=nope", None)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text());
        assert_eq!(r.text(), "agent: No node found with name 'nope'");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn servers_on_a_server_only_agent_is_invalid_method_as_in_nomad() {
        let api = TestApi::start().await;
        let r = api.get("/v1/agent/servers").await;
        assert_eq!(r.status, StatusCode::NOT_IMPLEMENTED);
        let r = api
            .call(Method::PUT, "/v1/agent/servers?address=1.2.3.4:4647", None)
            .await;
        assert_eq!(r.status, StatusCode::NOT_IMPLEMENTED);
    }
}
