//! The endpoint protocol spoken over `drover-rpc`'s `Call`: what a follower forwards to the
//! leader, what a joining server asks, what a client-only agent sends its servers. Requests and
//! replies are JSON, so they tolerate added fields like the HTTP API does.

use std::sync::Arc;
use std::time::Duration;

use drover_structs::{AllocClientUpdate, Allocation, Job, MultiError, Node};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::server::RegisterResult;

/// `Call` method carrying one [`Request`] (JSON) and answering `Result<Reply, WireError>`;
/// the receiver routes it (to the leader if it is a write).
pub const METHOD_ENDPOINT: &str = "Endpoint";
/// As `Endpoint`, from a server forwarding to the one it believes leads: the receiver runs
/// it only if it leads, else answers "not the leader" (no second hop; the sender retries).
pub const METHOD_FORWARD: &str = "Forward";
/// `Call` method of the discovery handshake before a cluster forms: a [`StatusRequest`].
pub const METHOD_STATUS: &str = "Status";
/// `Call` method whose body is an operator snapshot archive to restore (raw bytes).
pub const METHOD_RESTORE: &str = "Restore";
/// As `Restore`, forwarded to the leader (see `METHOD_FORWARD`).
pub const METHOD_FORWARD_RESTORE: &str = "ForwardRestore";

/// Endpoint calls that must run on the leader (writes), or that a remote client makes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    RegisterJob {
        job: Job,
        enforce_index: Option<u64>,
        /// The job file it came from, when the client sent it.
        #[serde(default)]
        submission: Option<drover_structs::JobSubmission>,
    },
    DeregisterJob {
        namespace: String,
        job_id: String,
        purge: bool,
    },
    StopAlloc {
        alloc_id: String,
    },
    RegisterNode {
        node: Node,
    },
    Heartbeat {
        node_id: String,
    },
    UpdateAllocs {
        updates: Vec<AllocClientUpdate>,
    },
    SetNodeEligibility {
        node_id: String,
        eligible: bool,
    },
    /// A read: answered by the server that receives it once it has caught up with the leader
    /// (blocking until the node's allocations pass `min_index` or `wait_ms` passes).
    NodeAllocs {
        node_id: String,
        min_index: u64,
        wait_ms: u64,
    },
    /// Adds (or re-addresses) a voter: a server joining the cluster.
    AddPeer {
        id: u64,
        address: String,
        name: String,
    },
    /// Removes a server from the Raft configuration, named by id or by RPC address.
    RemovePeer {
        id: Option<u64>,
        address: Option<String>,
    },
    SetSchedulerConfig {
        config: drover_structs::SchedulerConfiguration,
        cas: Option<u64>,
    },
    PeriodicForce {
        namespace: String,
        job_id: String,
    },
    DispatchJob(crate::dispatch::DispatchRequest),
    /// `PUT /v1/system/gc`: a garbage collection pass on the leader, ages ignored.
    ForceGc,
    /// Starts (`deadline` set, Nomad's ns: negative forces, 0 none) or stops a node's drain.
    DrainNode {
        node_id: String,
        deadline: Option<i64>,
        ignore_system_jobs: bool,
        mark_eligible: bool,
    },
    /// Removes a node and evaluates its jobs (`PUT /v1/node/:id/purge`).
    PurgeNode {
        node_id: String,
    },
    /// Evaluates a node's jobs (`PUT /v1/node/:id/evaluate`).
    EvaluateNode {
        node_id: String,
    },
    /// Deployment operations (see `crate::deployments`).
    Deployment(crate::deployments::DeploymentRequest),
    /// A task group's count changed (see `crate::scaling`).
    Scale(crate::scaling::ScaleRequest),
    /// Job revert, stability and evaluation (see `crate::job_versions`).
    JobVersion(crate::job_versions::JobVersionRequest),
    /// CSI volume and plugin endpoints (see `crate::csi`).
    Csi(crate::csi::CsiRequest),
    /// CSI snapshot endpoints (see `crate::csi::snapshot`).
    CsiSnapshot(crate::csi::CsiSnapshotRequest),
    /// A peer region's call in a multiregion rollout (see `crate::multiregion`).
    Multiregion(crate::multiregion::PeerRequest),
    /// Namespace writes (see `crate::namespaces`).
    Namespace(crate::namespaces::NamespaceRequest),
    /// ACL policy and token writes (see `crate::acl`).
    Acl(crate::acl::AclRequest),
    /// Variable writes (see `crate::variables`).
    Variable(crate::variables::VariableRequest),
    /// A plugin's own list of its volumes (see `crate::csi::external`).
    CsiExternal(crate::csi::ExternalVolumesRequest),
    /// Mesh certificates, view and intentions (see `crate::mesh`).
    Mesh(crate::mesh::MeshRequest),
    /// Service registrations of a namespace, for a client's templates (a read; see
    /// `crate::service_catalog`).
    Services(crate::service_catalog::ServiceQuery),
}

impl Request {
    /// Reads can be answered by any server; everything else is executed by the leader.
    /// True for what client agents send (registration, heartbeats, their allocations, CSI
    /// claims of their tasks): all a client certificate may ask of a server.
    pub fn is_client_call(&self) -> bool {
        matches!(
            self,
            Request::RegisterNode { .. }
                | Request::Heartbeat { .. }
                | Request::NodeAllocs { .. }
                | Request::UpdateAllocs { .. }
                | Request::Services(_)
                | Request::Csi(
                    crate::csi::CsiRequest::Claim { .. } | crate::csi::CsiRequest::Unpublish { .. }
                )
        ) || matches!(self, Request::Mesh(m) if m.is_client_call())
    }

    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Request::NodeAllocs { .. }
                | Request::Services(_)
                | Request::Multiregion(crate::multiregion::PeerRequest {
                    op: crate::multiregion::PeerOp::Latest,
                    ..
                })
        )
    }
}

/// What an endpoint answers, by request kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    Registered(RegisterResult),
    /// An evaluation id and the index of the write that created it.
    Eval {
        eval_id: String,
        index: u64,
    },
    Index(u64),
    /// A heartbeat TTL, with the write index when there was one.
    Ttl {
        index: u64,
        ttl_ms: u64,
    },
    NodeAllocs {
        allocs: Vec<Arc<Allocation>>,
        index: u64,
    },
    /// A check-and-set write: whether it applied, and the index.
    Updated {
        updated: bool,
        index: u64,
    },
    Dispatched(crate::dispatch::DispatchResult),
    NodeEvals(crate::node_ops::NodeEvalResult),
    Deployment(crate::deployments::DeploymentUpdateResult),
    Csi(crate::csi::CsiReply),
    CsiSnapshot(crate::csi::CsiSnapshotReply),
    /// A job's latest deployment in the answering region.
    Peer(Option<drover_structs::Deployment>),
    /// An ACL token as stored (with its secret).
    AclToken(drover_structs::AclToken),
    Variable(crate::variables::VariableOutcome),
    CsiExternal {
        list: drover_structs::CsiVolumeExternalList,
        index: u64,
    },
    Mesh(crate::mesh::MeshReply),
    Services(Vec<drover_structs::ServiceRegistration>),
}

/// Kinds of endpoint errors, so the caller rebuilds the same `ServerError` (and HTTP status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    Validation,
    BadRequest,
    NotFound,
    Conflict,
    Forbidden,
    NoLeader,
    /// The receiver is not (or no longer) the leader and did not execute the call: the caller
    /// may send it to the leader.
    NotLeader,
    Internal,
}

/// An endpoint error on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    pub kind: ErrorKind,
    pub message: String,
    /// The lines of a validation error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl From<&ServerError> for WireError {
    fn from(e: &ServerError) -> WireError {
        let kind = match e {
            ServerError::Validation(_) => ErrorKind::Validation,
            ServerError::BadRequest(_) => ErrorKind::BadRequest,
            ServerError::NotFound(_) => ErrorKind::NotFound,
            ServerError::Conflict(_) => ErrorKind::Conflict,
            ServerError::Forbidden(_) => ErrorKind::Forbidden,
            ServerError::NoLeader => ErrorKind::NoLeader,
            e if e.not_executed() => ErrorKind::NotLeader,
            _ => ErrorKind::Internal,
        };
        let errors = match e {
            ServerError::Validation(m) => m.errors.clone(),
            _ => Vec::new(),
        };
        WireError {
            kind,
            message: e.to_string(),
            errors,
        }
    }
}

impl From<WireError> for ServerError {
    fn from(e: WireError) -> ServerError {
        match e.kind {
            ErrorKind::Validation => {
                let mut m = MultiError::new();
                for line in e.errors {
                    m.push(line);
                }
                ServerError::Validation(m)
            }
            ErrorKind::BadRequest => ServerError::BadRequest(e.message),
            ErrorKind::NotFound => ServerError::NotFound(e.message),
            ErrorKind::Conflict => ServerError::Conflict(e.message),
            ErrorKind::Forbidden => ServerError::Forbidden(e.message),
            ErrorKind::NoLeader => ServerError::NoLeader,
            ErrorKind::NotLeader => {
                tracing::debug!(reason = %e.message, "remote server was not the leader");
                ServerError::Raft(drover_raft::RaftError::NotLeader { leader_hint: None })
            }
            ErrorKind::Internal => ServerError::Internal(e.message),
        }
    }
}

/// The JSON body of an `Endpoint` answer.
pub type EndpointResult = Result<Reply, WireError>;

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Plain data with string keys: serialising into a Vec cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

pub fn decode<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, ServerError> {
    serde_json::from_slice(body)
        .map_err(|e| ServerError::Internal(format!("undecodable {what} over RPC: {e}")))
}

/// A server introducing itself during discovery.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusRequest {
    pub id: u64,
    pub address: String,
    pub name: String,
}

/// What a server says about itself and the servers it knows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusReply {
    pub id: u64,
    pub address: String,
    pub name: String,
    /// It runs Raft with a configuration: a cluster exists, join it instead of bootstrapping.
    pub initialized: bool,
    pub bootstrap_expect: u32,
    /// Servers it knows (itself included): id, address, name.
    pub known: Vec<(u64, String, String)>,
    /// RPC address of the leader it knows, empty if none.
    pub leader: String,
}

/// The heartbeat TTL of a reply.
pub fn ttl(ttl_ms: u64) -> Duration {
    Duration::from_millis(ttl_ms)
}
