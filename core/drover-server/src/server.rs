//! The server: Raft, the state store and the leader's subsystems, and the endpoints (job
//! register, node heartbeats, client updates...) that turn requests into log entries.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_net::{NoNet, PeerNet};
use drover_raft::{PeerInfo, RaftConfig, RaftNode};
use drover_scheduler::SchedulerConfig;
use drover_state::{StateSnapshot, StateStore, Table};
use drover_structs::time::now_nanos;
use drover_structs::*;
use tokio::sync::{mpsc, watch};

use crate::ServerError;
use crate::broker::EvalBroker;
use crate::cluster::{RpcEndpoint, StartPlan};
use crate::fsm::{Fsm, LogEntry};
use crate::heartbeat::HeartbeatTimers;
use crate::plan_apply::{PlanRequest, run_plan_applier};
use crate::proposed::ProposedEntries;

pub(crate) use crate::leadership::reestablish_leadership;
use crate::leadership::{leader_loop, node_job_evals};

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    /// Raft id of this server (non-zero). `None`: the id kept in the data dir, chosen at
    /// random at the first start.
    pub raft_id: Option<u64>,
    /// Region this server belongs to.
    pub region: String,
    pub datacenter: String,
    /// This server's name (Nomad's `<node>.<region>`), shown by `operator raft list-peers`.
    pub name: String,
    /// The RPC address other servers and clients reach this one at (`host:port`).
    pub rpc_addr: String,
    /// How many servers to wait for before bootstrapping a new cluster; 1 bootstraps alone at
    /// once (a single server, the dev agent). Ignored once the data dir holds a cluster.
    pub bootstrap_expect: u32,
    /// RPC addresses of servers to discover and join (Nomad's `server_join.retry_join`).
    pub join: Vec<String>,
    /// Addresses given after start (`/v1/agent/join`), tried while discovering.
    pub join_later: crate::members::JoinTargets,
    /// One Raft tick. Heartbeats go every 2 ticks; a follower campaigns after 10 to 20 ticks
    /// without hearing from a leader.
    pub raft_tick: Duration,
    /// Number of scheduler workers.
    pub num_schedulers: usize,
    /// The shortest TTL a node is given (Nomad's `min_heartbeat_ttl`); more nodes than
    /// `max_heartbeats_per_second` allows in that time get longer ones, every TTL staggered.
    pub heartbeat_ttl: Duration,
    /// Nomad's `max_heartbeats_per_second`: the heartbeat rate the TTLs are scaled to.
    pub max_heartbeats_per_second: f64,
    /// How long past its TTL the leader waits before marking a node down.
    pub heartbeat_grace: Duration,
    /// Nomad's `failover_heartbeat_ttl`: the TTL every node gets from a new leader.
    pub failover_heartbeat_ttl: Duration,
    /// Raft snapshot every this many entries.
    pub snapshot_threshold: u64,
    pub eval_nack_timeout: Duration,
    pub eval_delivery_limit: u32,
    /// Batches the event broker keeps for `/v1/event/stream` (Nomad's `event_buffer_size`;
    /// 0 turns the broker off, as `enable_event_broker = false` does).
    pub event_buffer_size: usize,
    /// Nomad's `acl { enabled = true }`: every request is checked against its token.
    pub acl_enabled: bool,
}

impl ServerConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ServerConfig {
            data_dir: data_dir.into(),
            raft_id: None,
            region: DEFAULT_REGION.into(),
            datacenter: "dc1".into(),
            name: "server.global".into(),
            rpc_addr: "127.0.0.1:4647".into(),
            bootstrap_expect: 1,
            join: Vec::new(),
            join_later: Default::default(),
            raft_tick: Duration::from_millis(50),
            num_schedulers: 2,
            heartbeat_ttl: Duration::from_secs(10),
            max_heartbeats_per_second: 50.0,
            heartbeat_grace: Duration::from_secs(10),
            failover_heartbeat_ttl: Duration::from_secs(300),
            snapshot_threshold: 8192,
            eval_nack_timeout: Duration::from_secs(60),
            eval_delivery_limit: 3,
            event_buffer_size: crate::events::DEFAULT_BUFFER_SIZE,
            acl_enabled: false,
        }
    }
}

/// What a job registration returns (Nomad's `JobRegisterResponse`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RegisterResult {
    pub eval_id: String,
    pub eval_create_index: u64,
    pub job_modify_index: u64,
    pub index: u64,
    pub warnings: String,
}

pub(crate) struct Inner {
    pub config: ServerConfig,
    /// This server's Raft id.
    pub id: u64,
    /// Where this server is reached, as it tells the cluster.
    pub own: PeerInfo,
    /// Calls to other servers (forwarding to the leader, joining) and the Raft transport.
    pub net: Arc<dyn PeerNet>,
    pub state: Arc<StateStore>,
    pub raft: RaftNode,
    pub broker: EvalBroker,
    pub plan_tx: mpsc::Sender<PlanRequest>,
    pub sched_config: SchedulerConfig,
    pub heartbeats: HeartbeatTimers,
    pub periodic: crate::periodic::PeriodicDispatcher,
    /// Blocked evaluations by job: at most one per job.
    pub blocked: Mutex<HashMap<(String, String), Evaluation>>,
    /// When blocked evaluations were last let go, to catch the ones blocked on older snapshots.
    pub unblocked_at: Mutex<crate::unblock::UnblockIndexes>,
    pub shutdown_tx: watch::Sender<bool>,
    pub shutdown_rx: watch::Receiver<bool>,
    /// CSI's calls to client agents, once the agent provides them.
    pub csi: crate::csi::CsiServerState,
    /// Frees the CSI volume claims of ended allocations; runs while leading.
    pub volume_watcher: crate::volume_watcher::VolumeWatcher,
    /// Plan entries proposed here, which this server's FSM applies without decoding them.
    pub proposed: Arc<ProposedEntries>,
    /// Collects ended evaluations, allocations and jobs; runs while leading.
    pub garbage: crate::garbage::GarbageCollector,
    /// Moves allocations off draining nodes; runs while leading.
    pub drainer: crate::drainer::NodeDrainer,
    pub deployment_watcher: crate::deployment_watcher::DeploymentWatcher,
    /// The other regions' servers (not replicated: each server keeps its own view).
    pub federation: crate::federation::Federation,
    /// The changes the FSM applied, for `/v1/event/stream` (on every server, not only the
    /// leader).
    pub events: Arc<crate::events::EventBroker>,
}

impl Inner {
    /// Gives the node a fresh TTL scaled to the cluster (plus grace before it expires); returns
    /// the TTL the node is told.
    pub fn reset_heartbeat(&self, node_id: &str) -> Duration {
        let c = &self.config;
        self.heartbeats.reset_scaled(
            node_id,
            c.heartbeat_ttl,
            c.max_heartbeats_per_second,
            c.heartbeat_grace,
        )
    }

    /// Proposes an entry through Raft; resolves once it is applied to the state store.
    pub async fn apply(&self, entry: LogEntry) -> Result<u64, ServerError> {
        let started = std::time::Instant::now();
        let index = self.raft.propose(entry.encode()).await?;
        committed(started);
        Ok(index)
    }

    /// As `apply`, for entries whose decoding reproduces them exactly (plan results): the
    /// entry itself waits for this server's FSM, which then skips decoding it.
    pub async fn apply_kept(&self, entry: LogEntry) -> Result<u64, ServerError> {
        let bytes = entry.encode();
        let ticket = self.proposed.keep(&bytes, entry);
        let started = std::time::Instant::now();
        let index = self.raft.propose(bytes).await.map_err(|e| {
            self.proposed.forget(ticket);
            ServerError::from(e)
        })?;
        committed(started);
        Ok(index)
    }

    /// As `apply`, failing with `Conflict` when the FSM refused the entry's condition.
    pub async fn apply_checked(&self, entry: LogEntry) -> Result<u64, ServerError> {
        let started = std::time::Instant::now();
        let applied = self.raft.propose_for_response(entry.encode()).await?;
        committed(started);
        if applied.response.is_empty() {
            Ok(applied.index)
        } else {
            Err(ServerError::Conflict(
                String::from_utf8_lossy(&applied.response).into_owned(),
            ))
        }
    }

    pub fn is_leader(&self) -> bool {
        self.raft.leadership().borrow().is_leader
    }

    /// Hands an evaluation to the broker now, or when its `WaitUntil` comes.
    pub fn enqueue_when_due(self: &Arc<Self>, eval: Evaluation) {
        if eval.terminal() || eval.status == EVAL_STATUS_BLOCKED {
            return;
        }
        let wait = eval_delay(&eval);
        if wait.is_zero() {
            self.broker.enqueue(eval);
        } else {
            let inner = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                inner.broker.enqueue(eval);
            });
        }
    }

    /// Tracks a blocked evaluation; an older blocked one of the same job is cancelled. One
    /// that missed an unblock while its scheduler ran (on an older snapshot) is enqueued again
    /// at once instead.
    pub async fn block_eval(&self, eval: Evaluation) {
        let key = (eval.namespace.clone(), eval.job_id.clone());
        // Stopped (or gone) while its scheduler ran: nothing will ever unblock it for a reason
        // that matters, and a blocked evaluation would keep the job pending for good.
        let job = self.state.snapshot().job(&eval.namespace, &eval.job_id);
        if job.is_none_or(|j| j.stop) {
            let mut canceled = eval;
            canceled.status = EVAL_STATUS_CANCELED.into();
            canceled.status_description = "job stopped before the evaluation could block".into();
            canceled.modify_time = now_nanos();
            if let Err(e) = self
                .apply(LogEntry::EvalUpdate {
                    evals: vec![canceled],
                })
                .await
            {
                tracing::warn!(error = %e, "cancelling the blocked eval of a stopped job");
            }
            return;
        }
        let old = {
            let mut b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
            let old = b.insert(key.clone(), eval.clone());
            let job = self.state.snapshot().job(&eval.namespace, &eval.job_id);
            let unblocked = self.unblocked_at.lock().unwrap_or_else(|e| e.into_inner());
            if unblocked.missed(&eval, job.as_deref()) {
                b.remove(&key);
                tracing::debug!(eval = %eval.id, "blocked evaluation missed an unblock; enqueued again");
                self.broker.enqueue(eval.clone());
            }
            old
        };
        if let Some(mut old) = old.filter(|o| o.id != eval.id) {
            old.status = EVAL_STATUS_CANCELED.into();
            old.status_description = format!("evaluation {:?} successful", eval.id);
            old.modify_time = now_nanos();
            if let Err(e) = self.apply(LogEntry::EvalUpdate { evals: vec![old] }).await {
                tracing::warn!(error = %e, "cancelling duplicate blocked eval");
            }
        }
    }

    /// A CSI volume appeared or had a claim freed: the blocked evaluations of the jobs that
    /// ask for it get another try (claims change no node, so capacity changes do not cover
    /// them).
    pub fn unblock_evals_for_csi_volume(&self, namespace: &str, volume_id: &str) {
        let snap = self.state.snapshot();
        let evals: Vec<Evaluation> = {
            let mut b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
            self.unblocked_at
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unblocked_csi_volume(namespace, volume_id, snap.latest_index());
            let waiting: Vec<(String, String)> = b
                .keys()
                .filter(|(ns, job_id)| {
                    ns == namespace
                        && snap.job(ns, job_id).is_some_and(|job| {
                            crate::volume_watcher::job_uses_csi_volume(&job, volume_id)
                        })
                })
                .cloned()
                .collect();
            waiting.iter().filter_map(|k| b.remove(k)).collect()
        };
        if !evals.is_empty() {
            tracing::debug!(count = evals.len(), volume = %volume_id, "unblocking evaluations waiting for a CSI volume");
            self.broker.enqueue_all(evals);
        }
    }

    /// Capacity changed (a node joined, allocations ended): every blocked evaluation gets
    /// another try.
    pub fn unblock_evals(&self) {
        let evals: Vec<Evaluation> = {
            let mut b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
            self.unblocked_at
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unblocked_all(self.state.latest_index());
            b.drain().map(|(_, e)| e).collect()
        };
        if !evals.is_empty() {
            tracing::debug!(count = evals.len(), "unblocking evaluations");
            self.broker.enqueue_all(evals);
        }
    }
}

fn eval_delay(eval: &Evaluation) -> Duration {
    let now = now_nanos();
    let until = eval.wait_until.max(if eval.wait > 0 {
        eval.create_time + eval.wait
    } else {
        0
    });
    if until > now {
        Duration::from_nanos((until - now) as u64)
    } else {
        Duration::ZERO
    }
}

/// A Drover server. Cheap to clone.
#[derive(Clone)]
pub struct Server {
    pub(crate) inner: Arc<Inner>,
}

impl Server {
    /// Opens (or creates) the server's Raft log under the data dir, replays it into the state
    /// store and starts the leader's subsystems. Without a network the server cannot reach
    /// others: a fresh data dir bootstraps a single-voter cluster (`bootstrap_expect` must be 1).
    pub async fn start(config: ServerConfig) -> Result<Server, ServerError> {
        if config.bootstrap_expect != 1 {
            return Err(ServerError::BadRequest(
                "a server without a network can only bootstrap alone (bootstrap_expect = 1)".into(),
            ));
        }
        Self::start_with_net(config, Arc::new(NoNet)).await
    }

    /// As `start`, on `net` (drover-rpc's gRPC in the agent): it serves this server's RPC
    /// first, so other servers discover this one, send it Raft messages and forward writes to
    /// it, and clients call it. With a fresh data dir and `bootstrap_expect` other than 1 this
    /// waits until the cluster forms or is found (see `cluster`).
    pub async fn start_with_net(
        config: ServerConfig,
        net: Arc<dyn PeerNet>,
    ) -> Result<Server, ServerError> {
        let id = match config.raft_id {
            Some(id) => id,
            None => crate::identity::resolve_raft_id(&config.data_dir)?,
        };
        let own = PeerInfo::new(config.rpc_addr.clone(), config.name.clone());
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let endpoint = Arc::new(RpcEndpoint::new(id, own.clone(), config.bootstrap_expect));
        let mut stop = shutdown_rx.clone();
        net.serve(
            endpoint.clone(),
            Box::pin(async move {
                let _ = stop.wait_for(|s| *s).await;
            }),
        );

        let mut raft_config = RaftConfig::new(id, &config.data_dir, Vec::new());
        raft_config.snapshot_threshold = config.snapshot_threshold;
        raft_config.tick_interval = config.raft_tick;
        // Operator restores carry the whole state in one entry; jobs stay far below this.
        raft_config.max_entry_bytes = 256 * 1024 * 1024;
        let plan = if RaftNode::has_state(&raft_config)? {
            StartPlan::Restart
        } else if config.bootstrap_expect == 1 {
            StartPlan::Bootstrap {
                voters: vec![id],
                book: [(id, own.clone())].into_iter().collect(),
            }
        } else {
            crate::cluster::discover(
                &config.join,
                &config.join_later,
                &endpoint,
                net.as_ref(),
                shutdown_rx.clone(),
            )
            .await?
        };
        if let StartPlan::Bootstrap { voters, book } = &plan {
            raft_config.initial_voters.clone_from(voters);
            raft_config.initial_peers.clone_from(book);
        }

        let state = Arc::new(StateStore::new());
        let proposed = Arc::new(ProposedEntries::default());
        let events = Arc::new(crate::events::EventBroker::new(config.event_buffer_size));
        let fsm = Fsm {
            state: state.clone(),
            proposed: proposed.clone(),
            events: events.clone(),
            decode_ahead: Default::default(),
        };
        let raft = RaftNode::start(raft_config, fsm, net.raft_transport())?;
        net.attach(raft.clone());
        let (plan_tx, plan_rx) = mpsc::channel(64);
        let federation = crate::federation::Federation::load(&crate::federation::federation_file(
            &config.data_dir,
        ));
        let inner = Arc::new(Inner {
            broker: EvalBroker::new(config.eval_nack_timeout, config.eval_delivery_limit),
            id,
            own,
            net,
            config,
            state,
            raft,
            plan_tx,
            sched_config: SchedulerConfig::default(),
            heartbeats: HeartbeatTimers::default(),
            periodic: Default::default(),
            blocked: Mutex::new(HashMap::new()),
            unblocked_at: Mutex::default(),
            shutdown_tx,
            shutdown_rx,
            csi: Default::default(),
            volume_watcher: Default::default(),
            proposed,
            garbage: Default::default(),
            drainer: Default::default(),
            deployment_watcher: Default::default(),
            federation,
            events,
        });
        tokio::spawn(run_plan_applier(inner.clone(), plan_rx));
        for id in 0..inner.config.num_schedulers.max(1) {
            tokio::spawn(crate::worker::run_worker(inner.clone(), id));
        }
        tokio::spawn(leader_loop(inner.clone()));
        tokio::spawn(crate::csi::run_plugin_gc(inner.clone()));
        let server = Server { inner };
        tokio::spawn(crate::federation::keep_federation(server.clone()));
        endpoint.attach(server.clone());
        // A joining server asks to be added; a restarted one whose address changed (or whose
        // log predates addresses) has the cluster learn the new one.
        let mut targets = server.inner.config.join.clone();
        targets.extend(endpoint.known().into_values().map(|p| p.address));
        tokio::spawn(crate::cluster::keep_membership(server.clone(), targets));
        Ok(server)
    }

    /// This server's Raft id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Where this server is reached, as it tells the cluster.
    pub fn own_peer(&self) -> PeerInfo {
        self.inner.own.clone()
    }

    pub fn state(&self) -> &Arc<StateStore> {
        &self.inner.state
    }

    /// The event broker (`/v1/event/stream`).
    pub fn events(&self) -> &Arc<crate::events::EventBroker> {
        &self.inner.events
    }

    pub fn snapshot(&self) -> StateSnapshot {
        self.inner.state.snapshot()
    }

    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    pub fn raft_status(&self) -> drover_raft::RaftStatus {
        self.inner.raft.status()
    }

    pub fn is_leader(&self) -> bool {
        self.inner.is_leader()
    }

    /// Waits until this server leads and has applied everything before its term.
    pub async fn wait_for_leadership(&self, timeout: Duration) -> Result<(), ServerError> {
        let mut rx = self.inner.raft.leadership();
        tokio::time::timeout(timeout, rx.wait_for(|l| l.is_leader))
            .await
            .map_err(|_| ServerError::NoLeader)?
            .map_err(|_| ServerError::NoLeader)?;
        Ok(())
    }

    pub fn shutdown(&self) {
        let _ = self.inner.shutdown_tx.send(true);
        self.inner.periodic.stop();
        self.inner.volume_watcher.stop();
        // It holds a `Server`: left running, it would keep the server's state alive.
        self.inner.deployment_watcher.stop();
        self.inner.broker.set_enabled(false);
        self.inner.raft.shutdown();
    }

    /// Registers a job on the leader (see `register_job`).
    pub(crate) async fn register_job_here(
        &self,
        mut job: Job,
        enforce_index: Option<u64>,
        submission: Option<drover_structs::JobSubmission>,
    ) -> Result<RegisterResult, ServerError> {
        validate::validate_job(&job).map_err(ServerError::Validation)?;
        // Nomad's rule: a source over the limit is not kept, and the registration says so.
        let (submission, source_warning) = match submission {
            Some(s) if !s.fits() => (
                None,
                Some(format!(
                    "job source of {} bytes was not stored: the limit is {} bytes",
                    s.source.len() + s.variables.len(),
                    drover_structs::submission::JOB_MAX_SOURCE_SIZE
                )),
            ),
            other => (other, None),
        };
        crate::namespaces::check_job(&self.snapshot(), &job)?;
        let existing = self.snapshot().job(&job.namespace, &job.id);
        crate::periodic::check_update(existing.as_deref(), &job)?;
        crate::scaling::assign_policy_ids(&mut job, existing.as_deref());
        // A quick refusal; the FSM checks again in log order, which is what makes it safe.
        if let Some(want) = enforce_index {
            let have = existing.as_ref().map(|j| j.job_modify_index).unwrap_or(0);
            if want != have {
                return Err(ServerError::Conflict(crate::fsm::enforce_index_error(
                    want, have,
                )));
            }
        }
        job.submit_time = now_nanos();
        job.status = existing
            .as_ref()
            .map(|j| j.status.clone())
            .unwrap_or_else(|| JOB_STATUS_PENDING.into());
        job.stable = false;
        let eval = (!job.is_periodic() && !job.is_parameterized())
            .then(|| Evaluation::for_job(&job, TRIGGER_JOB_REGISTER));
        let index = self
            .inner
            .apply_checked(LogEntry::JobRegister {
                job: job.clone(),
                evals: eval.iter().cloned().collect(),
                enforce_index,
                submission,
            })
            .await?;
        let snap = self.snapshot();
        let stored = snap
            .job(&job.namespace, &job.id)
            .ok_or_else(|| ServerError::Internal("job vanished after register".into()))?;
        let mut result = RegisterResult {
            job_modify_index: stored.job_modify_index,
            index,
            warnings: source_warning.unwrap_or_default(),
            ..Default::default()
        };
        if let Some(eval) = eval.and_then(|e| snap.eval(&e.id)) {
            result.eval_id = eval.id.clone();
            result.eval_create_index = eval.create_index;
            self.inner.enqueue_when_due((*eval).clone());
        }
        Ok(result)
    }

    /// Nomad 1.1's answer to deregistering a job it does not have: an evaluation of that job
    /// id (service type, default priority), committed and scheduled (it finds nothing to
    /// stop and completes), and a 200 naming it, with or without `purge`.
    async fn deregister_unknown_job(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<(String, u64), ServerError> {
        let now = now_nanos();
        let mut eval = Evaluation {
            id: drover_structs::generate_id(),
            namespace: namespace.to_string(),
            priority: drover_structs::job::JOB_DEFAULT_PRIORITY,
            eval_type: drover_structs::job::JOB_TYPE_SERVICE.to_string(),
            triggered_by: TRIGGER_JOB_DEREGISTER.to_string(),
            job_id: job_id.to_string(),
            status: drover_structs::EVAL_STATUS_PENDING.to_string(),
            create_time: now,
            modify_time: now,
            ..Default::default()
        };
        let index = self
            .inner
            .apply(LogEntry::EvalUpdate {
                evals: vec![eval.clone()],
            })
            .await?;
        eval.create_index = index;
        eval.modify_index = index;
        let id = eval.id.clone();
        self.inner.enqueue_when_due(eval);
        Ok((id, index))
    }

    /// Stops a job (`Stop = true`, a new version) or, with `purge`, removes it. Returns the
    /// evaluation that stops its allocations. On the leader.
    pub(crate) async fn deregister_job_here(
        &self,
        namespace: &str,
        job_id: &str,
        purge: bool,
    ) -> Result<(String, u64), ServerError> {
        let Some(job) = self.snapshot().job(namespace, job_id) else {
            return self.deregister_unknown_job(namespace, job_id).await;
        };
        let mut eval = Evaluation::for_job(&job, TRIGGER_JOB_DEREGISTER);
        // A periodic or parameterized parent has no allocations to stop: no evaluation (its
        // children are jobs of their own).
        let stops_allocs = !(job.is_periodic() || job.is_parameterized());
        let mut evals = if stops_allocs {
            vec![eval.clone()]
        } else {
            Vec::new()
        };
        // A blocked evaluation of the job would keep it pending: it goes with the stop.
        let blocked = self
            .inner
            .blocked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(namespace.to_string(), job_id.to_string()));
        if let Some(mut b) = blocked {
            b.status = EVAL_STATUS_CANCELED.into();
            b.status_description = "job stopped".into();
            b.modify_time = now_nanos();
            evals.push(b);
        }
        let entry = if purge {
            LogEntry::JobPurge {
                namespace: namespace.into(),
                job_id: job_id.into(),
                evals: evals.clone(),
            }
        } else {
            let mut stopped = (*job).clone();
            stopped.stop = true;
            stopped.submit_time = now_nanos();
            LogEntry::JobRegister {
                job: stopped,
                evals: evals.clone(),
                enforce_index: None,
                submission: None,
            }
        };
        let index = self.inner.apply(entry).await?;
        // A scheduler that planned on an older snapshot may have blocked an evaluation just
        // before the stop (stored, but not yet in the map above): what is still blocked once
        // the stop is applied goes too.
        let late: Vec<Evaluation> = self
            .snapshot()
            .evals_by_job(namespace, job_id)
            .into_iter()
            .filter(|e| e.status == EVAL_STATUS_BLOCKED)
            .map(|e| {
                let mut e = (*e).clone();
                e.status = EVAL_STATUS_CANCELED.into();
                e.status_description = "job stopped".into();
                e.modify_time = now_nanos();
                e
            })
            .collect();
        if !late.is_empty() {
            self.inner
                .blocked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(namespace.to_string(), job_id.to_string()));
            self.inner
                .apply(LogEntry::EvalUpdate { evals: late })
                .await?;
        }
        crate::volume_watcher::reap_job_claims(self, &job).await;
        if !stops_allocs {
            return Ok((String::new(), index));
        }
        eval.create_index = index;
        eval.modify_index = index;
        self.inner.enqueue_when_due(eval.clone());
        Ok((eval.id, index))
    }

    /// Stops one allocation (`alloc stop`); the scheduler replaces it if its job still wants it.
    pub(crate) async fn stop_alloc_here(
        &self,
        alloc_id: &str,
    ) -> Result<(String, u64), ServerError> {
        let snap = self.snapshot();
        let alloc = snap
            .alloc(alloc_id)
            .ok_or_else(|| ServerError::NotFound("alloc not found".into()))?;
        let job = alloc
            .job
            .clone()
            .ok_or_else(|| ServerError::Internal("allocation has no job".into()))?;
        let mut eval = Evaluation::for_job(&job, TRIGGER_ALLOC_STOP);
        if let Some(current) = snap.job(&alloc.namespace, &alloc.job_id) {
            eval.job_modify_index = current.job_modify_index;
        }
        let index = self
            .inner
            .apply(LogEntry::AllocDesiredUpdate {
                ids: vec![alloc.id.clone()],
                desired_status: ALLOC_DESIRED_STOP.into(),
                desired_description: "alloc was stopped by operator".into(),
                evals: vec![eval.clone()],
            })
            .await?;
        eval.modify_index = index;
        self.inner.enqueue_when_due(eval.clone());
        Ok((eval.id, index))
    }

    /// Registers or re-registers a client node; returns the heartbeat TTL. On the leader.
    pub(crate) async fn register_node_here(
        &self,
        mut node: Node,
    ) -> Result<(u64, Duration), ServerError> {
        if node.id.is_empty() {
            return Err(ServerError::BadRequest("missing node ID".into()));
        }
        if node.datacenter.is_empty() {
            return Err(ServerError::BadRequest("missing datacenter".into()));
        }
        node.status = NODE_STATUS_READY.into();
        node.status_updated_at = now_nanos() / 1_000_000_000;
        // A node that is new or comes back gets the system jobs evaluated for it (Nomad's
        // shouldCreateNodeEval); a re-registration of a ready node does not.
        let original = self.snapshot().node(&node.id);
        let before = original.as_ref().map(|n| n.status.clone());
        let was_ready = before.as_deref() == Some(NODE_STATUS_READY);
        // A ready node whose constraints-relevant fields changed (dynamic meta, a driver's
        // health): everything that runs or could run there is evaluated again.
        let reevaluate =
            was_ready && original.is_some_and(|o| crate::node_ops::feasibility_changed(&o, &node));
        let index = self
            .inner
            .apply(LogEntry::NodeRegister { node: node.clone() })
            .await?;
        let ttl = self.inner.reset_heartbeat(&node.id);
        self.inner.unblock_evals();
        if !was_ready {
            self.evaluate_system_jobs_for(&node.id).await?;
        }
        if reevaluate {
            self.evaluate_node_here(&node.id).await?;
        }
        // Back from a disconnect: its jobs decide which allocations to keep.
        if before.as_deref() == Some(NODE_STATUS_DISCONNECTED) {
            self.evaluate_node_jobs(&node.id).await?;
        }
        Ok((index, ttl))
    }

    /// A node's heartbeat: resets its TTL and brings a down node back to ready.
    pub(crate) async fn heartbeat_here(&self, node_id: &str) -> Result<Duration, ServerError> {
        let node = self
            .snapshot()
            .node(node_id)
            .ok_or_else(|| ServerError::NotFound(format!("node {node_id} not found")))?;
        if node.status != NODE_STATUS_READY {
            self.inner
                .apply(LogEntry::NodeStatusUpdate {
                    node_id: node_id.into(),
                    status: NODE_STATUS_READY.into(),
                    updated_at: now_nanos() / 1_000_000_000,
                    evals: vec![],
                })
                .await?;
            self.inner.unblock_evals();
            self.evaluate_system_jobs_for(node_id).await?;
            // Nomad's nodeStatusTransitionRequiresEval: leaving `disconnected` evaluates the
            // node's jobs, which reconcile the reconnecting allocations with their replacements.
            if node.status == NODE_STATUS_DISCONNECTED {
                self.evaluate_node_jobs(node_id).await?;
            }
        }
        Ok(self.inner.reset_heartbeat(node_id))
    }

    /// Applies what a client reports about its allocations, in one log entry. Failed
    /// allocations trigger an evaluation of their job so it can reschedule them.
    pub(crate) async fn update_allocs_here(
        &self,
        mut updates: Vec<AllocClientUpdate>,
    ) -> Result<u64, ServerError> {
        if updates.is_empty() {
            return Ok(self.inner.state.latest_index());
        }
        // The leader's clock, as Nomad's `Node.UpdateAlloc` stamps it: the entry carries the
        // time, so every server stores the same `ModifyTime` (and client clocks do not count).
        let now = now_nanos();
        for u in &mut updates {
            u.modify_time = now;
        }
        let snap = self.snapshot();
        let mut evals: BTreeMap<(String, String), Evaluation> = BTreeMap::new();
        let mut frees = false;
        for u in &updates {
            let Some(a) = snap.alloc(&u.id) else { continue };
            let terminal_now = matches!(
                u.client_status.as_str(),
                ALLOC_CLIENT_COMPLETE | ALLOC_CLIENT_FAILED | ALLOC_CLIENT_LOST
            );
            if terminal_now && !a.client_terminal() {
                frees = true;
            }
            // Nomad's FollowupEvalForReconnect: a client reporting an allocation the servers
            // hold as disconnected gets its job evaluated, to keep it or its replacement.
            if a.needs_to_reconnect()
                && !a.followup_eval_id.is_empty()
                && matches!(
                    u.client_status.as_str(),
                    ALLOC_CLIENT_RUNNING | ALLOC_CLIENT_COMPLETE | ALLOC_CLIENT_FAILED
                )
                && let Some(job) = snap.job(&a.namespace, &a.job_id)
            {
                evals
                    .entry((job.namespace.clone(), job.id.clone()))
                    .or_insert_with(|| Evaluation::for_job(&job, TRIGGER_RECONNECT));
            }
            if u.client_status == ALLOC_CLIENT_FAILED
                && a.client_status != ALLOC_CLIENT_FAILED
                && a.desired_status == ALLOC_DESIRED_RUN
                && let Some(job) = snap.job(&a.namespace, &a.job_id)
                && !job.stop
            {
                evals
                    .entry((job.namespace.clone(), job.id.clone()))
                    .or_insert_with(|| Evaluation::for_job(&job, TRIGGER_RETRY_FAILED_ALLOC));
            }
        }
        let evals: Vec<Evaluation> = evals.into_values().collect();
        let index = self
            .inner
            .apply(LogEntry::AllocClientUpdate {
                updates,
                evals: evals.clone(),
            })
            .await?;
        for mut e in evals {
            e.modify_index = index;
            self.inner.enqueue_when_due(e);
        }
        if frees {
            self.inner.unblock_evals();
        }
        Ok(index)
    }

    /// A node's allocations in this server's state, once their index passes `min_index` (or
    /// `wait` passes).
    pub(crate) async fn node_allocs_here(
        &self,
        node_id: &str,
        min_index: u64,
        wait: Duration,
    ) -> (Vec<Arc<Allocation>>, u64) {
        let mut rx = self.inner.state.snapshot();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let idx = rx.node_allocs_index(node_id);
            if idx > min_index || tokio::time::Instant::now() >= deadline {
                return (rx.allocs_by_node(node_id), idx.max(1));
            }
            let remaining = deadline - tokio::time::Instant::now();
            rx = self
                .inner
                .state
                .wait_for(&[Table::Allocs], rx.table_index(Table::Allocs), remaining)
                .await;
        }
    }

    /// Sets a node's scheduling eligibility. On the leader.
    pub(crate) async fn set_node_eligibility_here(
        &self,
        node_id: &str,
        eligible: bool,
    ) -> Result<u64, ServerError> {
        if self.snapshot().node(node_id).is_none() {
            return Err(ServerError::NotFound(format!("node {node_id} not found")));
        }
        let index = self
            .inner
            .apply(LogEntry::NodeEligibility {
                node_id: node_id.into(),
                eligibility: if eligible {
                    NODE_ELIGIBLE
                } else {
                    NODE_INELIGIBLE
                }
                .into(),
            })
            .await?;
        if eligible {
            self.inner.unblock_evals();
            self.evaluate_system_jobs_for(node_id).await?;
        }
        Ok(index)
    }

    /// Creates a node-update evaluation of every job with a live allocation on `node_id`.
    async fn evaluate_node_jobs(&self, node_id: &str) -> Result<(), ServerError> {
        let evals = node_job_evals(&self.snapshot(), node_id);
        if evals.is_empty() {
            return Ok(());
        }
        let index = self
            .inner
            .apply(LogEntry::EvalUpdate {
                evals: evals.clone(),
            })
            .await?;
        for mut e in evals {
            e.modify_index = index;
            self.inner.enqueue_when_due(e);
        }
        Ok(())
    }

    /// Creates a node-update evaluation of every running system and sysbatch job for `node_id`,
    /// so the system scheduler places them on a node that joined or became usable.
    pub(crate) async fn evaluate_system_jobs_for(&self, node_id: &str) -> Result<(), ServerError> {
        let snap = self.snapshot();
        let evals: Vec<Evaluation> = crate::node_ops::running_system_jobs(&snap)
            .iter()
            .map(|job| {
                let mut e = Evaluation::for_job(job, TRIGGER_NODE_UPDATE);
                e.node_id = node_id.to_string();
                e
            })
            .collect();
        if evals.is_empty() {
            return Ok(());
        }
        let index = self
            .inner
            .apply(LogEntry::EvalUpdate {
                evals: evals.clone(),
            })
            .await?;
        for mut e in evals {
            e.modify_index = index;
            self.inner.enqueue_when_due(e);
        }
        Ok(())
    }

    /// Broker and blocked-eval counts, for the agent's self report.
    pub fn broker_stats(&self) -> crate::broker::BrokerStats {
        self.inner.broker.stats()
    }
}

/// Nomad's `nomad.raft.apply` (entries this server proposed) and `nomad.raft.commitTime`
/// (from proposing to the entry applied here), for one entry proposed at `started`.
fn committed(started: std::time::Instant) {
    crate::metrics::incr_counter("nomad.raft.apply");
    crate::metrics::record_time("nomad.raft.commitTime", started.elapsed());
}
