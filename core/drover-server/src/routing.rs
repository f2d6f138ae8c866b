//! Where a request runs. Writes run on the leader: a follower forwards them over the RPC and
//! answers with the leader's answer. Reads run anywhere once the server has caught up with
//! the leader (`read_barrier`), or at once when the caller accepts stale data.
//!
//! While there is no leader, or it is changing, a request waits for one up to
//! `RPC_HOLD_TIMEOUT` (Nomad's `rpc_hold_timeout`), then fails with "No cluster leader". A
//! request is sent again only when it certainly did not run (refused before reaching the
//! log, or never delivered); a forwarded request whose outcome is unknown fails instead, as a
//! retry could apply it twice.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use drover_structs::{AllocClientUpdate, Allocation, Job, Node, validate};
use tokio::time::Instant;

use crate::ServerError;
use crate::rpc::{
    EndpointResult, METHOD_FORWARD, METHOD_FORWARD_RESTORE, Reply, Request, WireError, decode,
    encode,
};
use crate::server::{RegisterResult, Server};

/// How long a request waits for a leader before "No cluster leader".
pub const RPC_HOLD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a forwarded write may take on the leader.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

fn unexpected(reply: Reply) -> ServerError {
    ServerError::Internal(format!("unexpected endpoint reply: {reply:?}"))
}

impl Server {
    /// Registers a job (a new one or a new version). The job must be canonicalised; it is
    /// validated here and on the leader. `enforce_index` is Nomad's check-and-set on
    /// `JobModifyIndex` (0 = the job must not exist), checked in log order.
    pub async fn register_job(
        &self,
        job: Job,
        enforce_index: Option<u64>,
    ) -> Result<RegisterResult, ServerError> {
        self.register_job_with_source(job, enforce_index, None)
            .await
    }

    /// As [`Server::register_job`], keeping `submission` (the job file it was parsed from)
    /// as the source of the version it becomes (`/v1/job/:id/submission`).
    pub async fn register_job_with_source(
        &self,
        job: Job,
        enforce_index: Option<u64>,
        submission: Option<drover_structs::JobSubmission>,
    ) -> Result<RegisterResult, ServerError> {
        validate::validate_job(&job).map_err(ServerError::Validation)?;
        crate::periodic::validate_time_zone(&job)?;
        crate::unsupported::refuse_unacted(&job).map_err(ServerError::Validation)?;
        if let Some(spec) = job.multiregion_spec() {
            return self
                .register_multiregion(job, &spec, enforce_index, submission)
                .await;
        }
        match self
            .route(Request::RegisterJob {
                job,
                enforce_index,
                submission,
            })
            .await?
        {
            Reply::Registered(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Stops a job (`Stop = true`, a new version) or, with `purge`, removes it. Returns the
    /// evaluation that stops its allocations and the write's index.
    pub async fn deregister_job(
        &self,
        namespace: &str,
        job_id: &str,
        purge: bool,
    ) -> Result<(String, u64), ServerError> {
        match self
            .route(Request::DeregisterJob {
                namespace: namespace.into(),
                job_id: job_id.into(),
                purge,
            })
            .await?
        {
            Reply::Eval { eval_id, index } => Ok((eval_id, index)),
            other => Err(unexpected(other)),
        }
    }

    /// Collects every ended evaluation, allocation and job now, whatever their age
    /// (`/v1/system/gc`); on the leader.
    pub async fn force_gc(&self) -> Result<u64, ServerError> {
        match self.route(Request::ForceGc).await? {
            Reply::Index(index) => Ok(index),
            other => Err(unexpected(other)),
        }
    }

    /// Stops one allocation (`alloc stop`); the scheduler replaces it if its job still wants it.
    pub async fn stop_alloc(&self, alloc_id: &str) -> Result<(String, u64), ServerError> {
        match self
            .route(Request::StopAlloc {
                alloc_id: alloc_id.into(),
            })
            .await?
        {
            Reply::Eval { eval_id, index } => Ok((eval_id, index)),
            other => Err(unexpected(other)),
        }
    }

    /// Registers or re-registers a client node; returns the write's index and the heartbeat TTL.
    pub async fn register_node(&self, node: Node) -> Result<(u64, Duration), ServerError> {
        match self.route(Request::RegisterNode { node }).await? {
            Reply::Ttl { index, ttl_ms } => Ok((index, crate::rpc::ttl(ttl_ms))),
            other => Err(unexpected(other)),
        }
    }

    /// A node's heartbeat: resets its TTL (on the leader) and brings a down node back to ready.
    pub async fn heartbeat(&self, node_id: &str) -> Result<Duration, ServerError> {
        match self
            .route(Request::Heartbeat {
                node_id: node_id.into(),
            })
            .await?
        {
            Reply::Ttl { ttl_ms, .. } => Ok(crate::rpc::ttl(ttl_ms)),
            other => Err(unexpected(other)),
        }
    }

    /// Applies what a client reports about its allocations, in one log entry. Failed
    /// allocations trigger an evaluation of their job so it can reschedule them.
    pub async fn update_allocs(&self, updates: Vec<AllocClientUpdate>) -> Result<u64, ServerError> {
        match self.route(Request::UpdateAllocs { updates }).await? {
            Reply::Index(index) => Ok(index),
            other => Err(unexpected(other)),
        }
    }

    /// Sets a node's scheduling eligibility.
    pub async fn set_node_eligibility(
        &self,
        node_id: &str,
        eligible: bool,
    ) -> Result<u64, ServerError> {
        match self
            .route(Request::SetNodeEligibility {
                node_id: node_id.into(),
                eligible,
            })
            .await?
        {
            Reply::Index(index) => Ok(index),
            other => Err(unexpected(other)),
        }
    }

    /// Nomad's node purge: removes the node; its jobs are evaluated and its allocations lost.
    pub async fn purge_node(&self, node_id: &str) -> Result<crate::NodeEvalResult, ServerError> {
        let request = Request::PurgeNode {
            node_id: node_id.into(),
        };
        match self.route(request).await? {
            Reply::NodeEvals(result) => Ok(result),
            other => Err(unexpected(other)),
        }
    }

    /// Nomad's node evaluate: an evaluation of every job with work on the node.
    pub async fn evaluate_node(&self, node_id: &str) -> Result<crate::NodeEvalResult, ServerError> {
        let request = Request::EvaluateNode {
            node_id: node_id.into(),
        };
        match self.route(request).await? {
            Reply::NodeEvals(result) => Ok(result),
            other => Err(unexpected(other)),
        }
    }

    /// A node's allocations once their index passes `min_index` (or `wait` passes), read
    /// after this server caught up with the leader.
    pub async fn node_allocs(
        &self,
        node_id: &str,
        min_index: u64,
        wait: Duration,
    ) -> Result<(Vec<Arc<Allocation>>, u64), ServerError> {
        self.read_barrier().await?;
        Ok(self.node_allocs_here(node_id, min_index, wait).await)
    }

    /// Returns once this server's state holds every write acknowledged before the call (the
    /// leader answers at once; a follower asks the leader for its commit index and applies up
    /// to it). "No cluster leader" when none confirms within `RPC_HOLD_TIMEOUT`.
    pub async fn read_barrier(&self) -> Result<(), ServerError> {
        if self.is_leader() {
            return Ok(());
        }
        match self.inner.raft.read_index(RPC_HOLD_TIMEOUT).await {
            Ok(_) => Ok(()),
            Err(drover_raft::RaftError::NoLeader { .. }) => Err(ServerError::NoLeader),
            Err(e) => Err(ServerError::Raft(e)),
        }
    }

    /// The leader's RPC address, if a leader is known.
    pub fn leader_address(&self) -> Option<String> {
        let leader = self.inner.raft.leadership().borrow().leader_id?;
        if leader == self.inner.id {
            return Some(self.inner.own.address.clone());
        }
        self.inner.raft.peer(leader).map(|p| p.address)
    }

    /// Whether some server is known to lead (this one included).
    pub fn known_leader(&self) -> bool {
        self.inner.raft.leadership().borrow().leader_id.is_some()
    }

    /// Time since this server last heard from the leader: zero on the leader, `None` without one.
    pub fn last_leader_contact(&self) -> Option<Duration> {
        self.inner.raft.last_leader_contact()
    }

    /// RPC addresses of the voters, sorted (`/v1/status/peers`).
    pub fn peer_addresses(&self) -> Vec<String> {
        let status = self.inner.raft.status();
        let mut addrs: Vec<String> = status
            .voters
            .iter()
            .map(|id| {
                status
                    .peers
                    .get(id)
                    .map(|p| p.address.clone())
                    .unwrap_or_else(|| {
                        if *id == self.inner.id {
                            self.inner.own.address.clone()
                        } else {
                            format!("(unknown address of server {id})")
                        }
                    })
            })
            .collect();
        addrs.sort();
        addrs
    }

    /// Runs `request` where it must run (see the module doc).
    pub(crate) async fn route(&self, request: Request) -> Result<Reply, ServerError> {
        if request.is_read() {
            self.read_barrier().await?;
            return self.execute(request).await;
        }
        let timeout = FORWARD_TIMEOUT;
        let body = encode(&request);
        self.route_call(METHOD_FORWARD, &body, timeout, || {
            self.execute(request.clone())
        })
        .await
    }

    /// Runs `local` if this server leads, else sends `body` as `method` to the leader; waits
    /// for a leader and retries while the request certainly did not run.
    pub(crate) async fn route_call<F, Fut>(
        &self,
        method: &str,
        body: &[u8],
        timeout: Duration,
        local: F,
    ) -> Result<Reply, ServerError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Reply, ServerError>>,
    {
        let deadline = Instant::now() + RPC_HOLD_TIMEOUT;
        let mut leadership = self.inner.raft.leadership();
        loop {
            let state = *leadership.borrow_and_update();
            let outcome = if state.is_leader {
                Some(local().await)
            } else {
                match state.leader_id.filter(|l| *l != self.inner.id) {
                    Some(leader) => match self.inner.raft.peer(leader) {
                        Some(peer) => {
                            Some(self.forward(&peer.address, method, body, timeout).await)
                        }
                        None => None,
                    },
                    None => None,
                }
            };
            match outcome {
                Some(Err(e)) if e.not_executed() => {
                    tracing::debug!(error = %e, "request not executed: retrying at the leader");
                }
                Some(result) => return result,
                None => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ServerError::NoLeader);
            }
            // Wait for news of the leader, but not longer than a moment: a forward target that
            // refused may just not have noticed yet.
            let pause = (deadline - now).min(Duration::from_millis(100));
            let _ = tokio::time::timeout(pause, leadership.changed()).await;
        }
    }

    async fn forward(
        &self,
        addr: &str,
        method: &str,
        body: &[u8],
        timeout: Duration,
    ) -> Result<Reply, ServerError> {
        match self
            .inner
            .net
            .call(addr, method, body.to_vec(), timeout)
            .await
        {
            Ok(answer) => {
                decode::<EndpointResult>("endpoint answer", &answer)?.map_err(ServerError::from)
            }
            Err(e) if e.is_not_sent() => {
                tracing::debug!(error = %e, "forward not delivered");
                Err(ServerError::Raft(drover_raft::RaftError::NotLeader {
                    leader_hint: None,
                }))
            }
            Err(e) => Err(ServerError::Internal(format!(
                "forwarding to the leader at {addr}: {e}; the request may or may not have been applied"
            ))),
        }
    }

    /// Runs a request here: writes on the leader (the caller checked), reads anywhere.
    pub(crate) async fn execute(&self, request: Request) -> Result<Reply, ServerError> {
        match request {
            Request::RegisterJob {
                job,
                enforce_index,
                submission,
            } => self
                .register_job_here(job, enforce_index, submission)
                .await
                .map(Reply::Registered),
            Request::DeregisterJob {
                namespace,
                job_id,
                purge,
            } => self
                .deregister_job_here(&namespace, &job_id, purge)
                .await
                .map(|(eval_id, index)| Reply::Eval { eval_id, index }),
            Request::StopAlloc { alloc_id } => self
                .stop_alloc_here(&alloc_id)
                .await
                .map(|(eval_id, index)| Reply::Eval { eval_id, index }),
            Request::RegisterNode { node } => {
                self.register_node_here(node)
                    .await
                    .map(|(index, ttl)| Reply::Ttl {
                        index,
                        ttl_ms: ttl.as_millis() as u64,
                    })
            }
            Request::Heartbeat { node_id } => {
                self.heartbeat_here(&node_id).await.map(|ttl| Reply::Ttl {
                    index: 0,
                    ttl_ms: ttl.as_millis() as u64,
                })
            }
            Request::UpdateAllocs { updates } => {
                self.update_allocs_here(updates).await.map(Reply::Index)
            }
            Request::SetNodeEligibility { node_id, eligible } => self
                .set_node_eligibility_here(&node_id, eligible)
                .await
                .map(Reply::Index),
            Request::NodeAllocs {
                node_id,
                min_index,
                wait_ms,
            } => {
                let (allocs, index) = self
                    .node_allocs_here(&node_id, min_index, Duration::from_millis(wait_ms))
                    .await;
                Ok(Reply::NodeAllocs { allocs, index })
            }
            Request::Deployment(request) => self.execute_deployment(request).await,
            Request::Multiregion(request) => self.execute_peer(request).await,
            Request::Namespace(request) => self.execute_namespace(request).await,
            Request::Acl(request) => self.execute_acl(request).await,
            Request::Variable(request) => self.execute_variable(request).await,
            Request::Mesh(request) => self.execute_mesh(request).await,
            Request::Services(query) => {
                Ok(Reply::Services(self.service_registrations_here(&query)))
            }
            Request::CsiExternal(request) => self.execute_csi_external(request).await,
            Request::JobVersion(request) => self.execute_job_version(request).await,
            Request::Scale(request) => self.scale_job_here(request).await,
            Request::Csi(request) => self.execute_csi(request).await,
            Request::CsiSnapshot(request) => self.execute_csi_snapshot(request).await,
            Request::AddPeer { id, address, name } => self
                .add_peer_here(id, drover_raft::PeerInfo::new(address, name))
                .await
                .map(Reply::Index),
            Request::RemovePeer { id, address } => self
                .remove_peer_here(id, address.as_deref())
                .await
                .map(Reply::Index),
            Request::SetSchedulerConfig { config, cas } => {
                self.set_scheduler_config_here(config, cas).await
            }
            Request::PeriodicForce { namespace, job_id } => {
                self.force_periodic_here(&namespace, &job_id).await
            }
            Request::DispatchJob(request) => self.dispatch_job_here(request).await,
            Request::DrainNode {
                node_id,
                deadline,
                ignore_system_jobs,
                mark_eligible,
            } => {
                let spec = deadline.map(|deadline| crate::drainer::DrainSpec {
                    deadline,
                    ignore_system_jobs,
                });
                self.drain_node_here(&node_id, spec, mark_eligible)
                    .await
                    .map(Reply::Index)
            }
            Request::PurgeNode { node_id } => {
                self.purge_node_here(&node_id).await.map(Reply::NodeEvals)
            }
            Request::EvaluateNode { node_id } => self
                .evaluate_node_here(&node_id)
                .await
                .map(Reply::NodeEvals),
            Request::ForceGc => {
                crate::garbage::run_pass(&self.inner, &crate::garbage::GcThresholds::FORCE).await?;
                Ok(Reply::Index(self.inner.state.latest_index()))
            }
        }
    }

    /// Answers an `Endpoint` or `Forward` call. A forwarded request (`leader_only`) runs only
    /// if this server leads (else "not the leader", and the sender retries with its own view);
    /// any other is routed like a local one.
    pub(crate) async fn serve_endpoint(&self, leader_only: bool, body: &[u8]) -> Vec<u8> {
        let result: EndpointResult = match decode::<Request>("endpoint request", body) {
            Err(e) => Err(WireError::from(&e)),
            Ok(request) => {
                let outcome = if leader_only && !request.is_read() {
                    if self.is_leader() {
                        self.execute(request).await
                    } else {
                        Err(ServerError::Raft(drover_raft::RaftError::NotLeader {
                            leader_hint: None,
                        }))
                    }
                } else {
                    self.route(request).await
                };
                outcome.map_err(|e| WireError::from(&e))
            }
        };
        encode(&result)
    }

    /// Answers a `Restore` or `ForwardRestore` call, like `serve_endpoint`.
    pub(crate) async fn serve_restore(&self, leader_only: bool, archive: Vec<u8>) -> Vec<u8> {
        let outcome = if leader_only && !self.is_leader() {
            Err(ServerError::Raft(drover_raft::RaftError::NotLeader {
                leader_hint: None,
            }))
        } else {
            self.restore_snapshot(archive).await.map(Reply::Index)
        };
        encode(&outcome.map_err(|e| WireError::from(&e)))
    }

    /// Restores an operator snapshot archive (see `operator`): checked here, applied by the
    /// leader as one log entry. Returns that entry's index.
    pub async fn restore_snapshot(&self, archive: Vec<u8>) -> Result<u64, ServerError> {
        let payload = crate::snapshot_archive::verify(&archive)
            .map_err(|e| ServerError::BadRequest(e.to_string()))?;
        let payload = payload.to_vec();
        let reply = self
            .route_call(METHOD_FORWARD_RESTORE, &archive, FORWARD_TIMEOUT, || {
                self.restore_here(payload.clone())
            })
            .await?;
        match reply {
            Reply::Index(index) => Ok(index),
            other => Err(unexpected(other)),
        }
    }
}
