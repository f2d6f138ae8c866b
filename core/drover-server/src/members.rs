//! The agent's view of its fellow servers, as Nomad's serf members answer it. Drover has no
//! gossip: the members are the servers of the applied Raft configuration, and each one
//! describes itself when asked (`METHOD_MEMBER`); one that does not answer is `failed`.
//! Joining (`/v1/agent/join`) reaches a server over the discovery call (`Status`), so either
//! side of a join learns the other, and a server still discovering also tries the addresses
//! it is given later ([`JoinTargets`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::rpc::{METHOD_STATUS, StatusReply, StatusRequest, decode, encode};
use crate::server::Server;

/// `Call` method answered with this server's [`MemberReport`].
pub const METHOD_MEMBER: &str = "Member";

/// The version servers report as their `build` tag.
pub const BUILD: &str = env!("CARGO_PKG_VERSION");

const MEMBER_TIMEOUT: Duration = Duration::from_secs(2);

/// Addresses to join given after start (`/v1/agent/join` while the server still discovers).
/// Discovery reads them every round.
#[derive(Debug, Clone, Default)]
pub struct JoinTargets(Arc<Mutex<Vec<String>>>);

impl JoinTargets {
    pub fn add(&self, address: &str) {
        let mut targets = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !targets.iter().any(|t| t == address) {
            targets.push(address.to_string());
        }
    }

    pub fn list(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What a server says about itself (Nomad's member tags, in Drover's terms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberReport {
    pub id: u64,
    pub name: String,
    /// Its RPC address (`host:port`).
    pub address: String,
    pub region: String,
    pub datacenter: String,
    pub build: String,
    pub bootstrap_expect: u32,
    pub leader: bool,
}

/// One member as the asking server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's own report; for a member that did not answer, what the Raft
    /// configuration knows (id, name, address) and this server's region.
    pub report: MemberReport,
    /// Nomad's member status: `alive` (it answered) or `failed`.
    pub status: &'static str,
    /// Voter or learner of the configuration.
    pub voter: bool,
}

impl Server {
    /// This server's own report.
    pub fn member_report(&self) -> MemberReport {
        let c = &self.inner.config;
        MemberReport {
            id: self.inner.id,
            name: self.inner.own.name.clone(),
            address: self.inner.own.address.clone(),
            region: c.region.clone(),
            datacenter: c.datacenter.clone(),
            build: BUILD.to_string(),
            bootstrap_expect: c.bootstrap_expect,
            leader: self.is_leader(),
        }
    }

    /// Every server of the applied Raft configuration, each as it reports itself (asked in
    /// parallel), sorted by name.
    pub async fn members(&self) -> Vec<Member> {
        let status = self.raft_status();
        let ids = status
            .voters
            .iter()
            .map(|id| (*id, true))
            .chain(status.learners.iter().map(|id| (*id, false)));
        let asks = ids.map(|(id, voter)| {
            let peer = status.peers.get(&id).cloned();
            async move {
                if id == self.inner.id {
                    return Member {
                        report: self.member_report(),
                        status: "alive",
                        voter,
                    };
                }
                let fallback = MemberReport {
                    id,
                    name: peer.as_ref().map(|p| p.name.clone()).unwrap_or_default(),
                    address: peer.as_ref().map(|p| p.address.clone()).unwrap_or_default(),
                    region: self.inner.config.region.clone(),
                    datacenter: String::new(),
                    build: String::new(),
                    bootstrap_expect: 0,
                    leader: false,
                };
                let answer = match &peer {
                    Some(p) => self
                        .inner
                        .net
                        .call(&p.address, METHOD_MEMBER, Vec::new(), MEMBER_TIMEOUT)
                        .await
                        .ok()
                        .and_then(|body| decode::<MemberReport>("member", &body).ok()),
                    None => None,
                };
                match answer {
                    Some(report) if report.id == id => Member {
                        report,
                        status: "alive",
                        voter,
                    },
                    _ => Member {
                        report: fallback,
                        status: "failed",
                        voter,
                    },
                }
            }
        });
        let mut members = futures_join_all(asks).await;
        members.extend(self.other_regions_members().await);
        members.sort_by(|a, b| a.report.name.cmp(&b.report.name));
        members
    }

    /// The servers of the other regions this server knows (Nomad's WAN members), each as it
    /// reports itself; one that does not answer is `failed` with what is known of it.
    async fn other_regions_members(&self) -> Vec<Member> {
        let remote: Vec<(String, String)> = self
            .regions()
            .into_iter()
            .filter(|r| r != self.region())
            .flat_map(|r| {
                self.region_servers(&r)
                    .into_iter()
                    .map(move |a| (r.clone(), a))
            })
            .collect();
        let asks = remote.into_iter().map(|(region, address)| async move {
            let answer = self
                .inner
                .net
                .call(&address, METHOD_MEMBER, Vec::new(), MEMBER_TIMEOUT)
                .await
                .ok()
                .and_then(|body| decode::<MemberReport>("member", &body).ok());
            match answer {
                Some(report) => Member {
                    report,
                    status: "alive",
                    voter: true,
                },
                None => Member {
                    report: MemberReport {
                        id: 0,
                        name: address.clone(),
                        address,
                        region,
                        datacenter: String::new(),
                        build: String::new(),
                        bootstrap_expect: 0,
                        leader: false,
                    },
                    status: "failed",
                    voter: false,
                },
            }
        });
        futures_join_all(asks).await
    }

    /// Nomad's `agent join`: makes the server at `address` (RPC, `host:port`) and this one
    /// know each other, so a server that waits to be joined (`bootstrap_expect = 0`) finds
    /// this cluster and asks to be added. Errors when it does not answer.
    pub async fn join_server(&self, address: &str) -> Result<(), ServerError> {
        // A server of another region joins the federation, not this Raft cluster.
        if let Some(region) = crate::federation::join_other_region(self, address).await {
            tracing::info!(%address, %region, "joined a server of another region");
            return Ok(());
        }
        let hello = encode(&StatusRequest {
            id: self.inner.id,
            address: self.inner.own.address.clone(),
            name: self.inner.own.name.clone(),
        });
        let body = self
            .inner
            .net
            .call(address, METHOD_STATUS, hello, MEMBER_TIMEOUT)
            .await
            .map_err(|e| ServerError::BadRequest(format!("joining {address}: {e}")))?;
        let reply: StatusReply = decode("status", &body)?;
        if reply.id == self.inner.id {
            return Err(ServerError::BadRequest(format!("{address} is this server")));
        }
        Ok(())
    }

    /// Nomad's `agent force-leave`: removes the server named `node` (its name, with or without
    /// the `.region` suffix, or its RPC address) from the Raft configuration.
    pub async fn force_leave(&self, node: &str) -> Result<u64, ServerError> {
        let status = self.raft_status();
        let region_suffix = format!(".{}", self.inner.config.region);
        let found = status.peers.iter().find(|(id, p)| {
            (status.voters.contains(id) || status.learners.contains(id))
                && (p.name == node
                    || p.address == node
                    || p.name.strip_suffix(region_suffix.as_str()) == Some(node))
        });
        let Some((id, _)) = found else {
            return Err(ServerError::NotFound(format!(
                "agent: No node found with name '{node}'"
            )));
        };
        self.remove_peer(Some(*id), None).await
    }
}

/// Runs the futures concurrently on this task and collects their outputs in order.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    // Every slot is filled: the poll loop above ends only once each future is ready.
    out.into_iter().flatten().collect()
}
