//! Multiregion jobs across federated regions (Nomad Enterprise's multiregion deployments,
//! here in the open product):
//!
//! - registering a job with a `multiregion` block registers its regional copy
//!   (`Job::regional_copy`) in every listed region, through that region's servers;
//! - each region's scheduler creates the copy's deployment `running` in the first
//!   `max_parallel` regions of the rollout and `pending` in the others (the reconciler knows
//!   its region's place from the block), and marks a complete one `blocked`;
//! - each region's leader ([`coordinate`], called by the deployment watcher) moves the
//!   rollout on: a blocked deployment starts the next pending region (`Run`), the last region
//!   of the order unblocks every blocked peer once none is running and then succeeds, and a
//!   failure fails peers as `on_failure` says. A peer only ever starts a *pending*
//!   deployment: an operator's pause is undone by the operator alone.
//!
//! Peers are addressed by namespace and job id (each region has its own deployment ids and
//! job versions): a call acts on the job's latest deployment there.

use std::collections::{BTreeMap, HashMap};

use drover_state::StateSnapshot;
use drover_structs::{
    DEPLOYMENT_DESC_FAILED_BY_PEER, DEPLOYMENT_DESC_RUNNING, DEPLOYMENT_DESC_SUCCESSFUL,
    DEPLOYMENT_DESC_UNBLOCKING, DEPLOYMENT_STATUS_BLOCKED, DEPLOYMENT_STATUS_CANCELLED,
    DEPLOYMENT_STATUS_FAILED, DEPLOYMENT_STATUS_PAUSED, DEPLOYMENT_STATUS_PENDING,
    DEPLOYMENT_STATUS_RUNNING, DEPLOYMENT_STATUS_SUCCESSFUL, DEPLOYMENT_STATUS_UNBLOCKING,
    Deployment, DeploymentStatusUpdate, Job, Multiregion, ON_FAILURE_FAIL_ALL,
    ON_FAILURE_FAIL_LOCAL,
};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::deployments::{
    DeploymentUpdateResult, DeploymentWrite, TRIGGER_DEPLOYMENT_WATCHER, deployment_eval,
    fail_write,
};
use crate::rpc::{Reply, Request};
use crate::server::{RegisterResult, Server};

/// What one region asks of another about a job's latest deployment there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerOp {
    /// Read it (a read: any server answers).
    Latest,
    /// Nomad's `Deployment.Run`: a pending deployment starts running.
    Run,
    /// Nomad's `Deployment.Unblock`: a blocked deployment is successful.
    Unblock,
    /// A peer failed: this one fails too (`on_failure`).
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRequest {
    pub namespace: String,
    pub job_id: String,
    pub op: PeerOp,
}

/// A status change, as a deployment write without evaluation (blocked, unblocking and
/// successful need no scheduler).
fn status_write(d: &Deployment, status: &str, description: &str) -> DeploymentWrite {
    DeploymentWrite {
        updates: vec![DeploymentStatusUpdate {
            deployment_id: d.id.clone(),
            status: status.into(),
            status_description: description.into(),
        }],
        ..Default::default()
    }
}

/// Nomad's `Deployment.Unblock`, for the operator (`deployment unblock`) and for the last
/// region of a rollout.
pub(crate) fn unblock_write(d: &Deployment) -> Result<DeploymentWrite, ServerError> {
    match d.status.as_str() {
        DEPLOYMENT_STATUS_BLOCKED | DEPLOYMENT_STATUS_UNBLOCKING => Ok(status_write(
            d,
            DEPLOYMENT_STATUS_SUCCESSFUL,
            DEPLOYMENT_DESC_SUCCESSFUL,
        )),
        DEPLOYMENT_STATUS_RUNNING => Err(ServerError::BadRequest(
            "can't unblock running deployment".into(),
        )),
        _ if !d.active() => Err(ServerError::BadRequest(
            "can't unblock terminal deployment".into(),
        )),
        other => Err(ServerError::BadRequest(format!(
            "can't unblock {other} deployment"
        ))),
    }
}

impl Server {
    /// Registers `job`'s regional copy in every region of its `multiregion` block, in the
    /// block's order; answers with this region's registration (or the first region's when
    /// this one is not listed). Every region must be known before anything is written.
    /// Regions the registered version listed and this one does not are stopped there (Nomad's
    /// `multiregionDrop`).
    pub(crate) async fn register_multiregion(
        &self,
        job: Job,
        spec: &Multiregion,
        enforce_index: Option<u64>,
        submission: Option<drover_structs::JobSubmission>,
    ) -> Result<RegisterResult, ServerError> {
        let own = self.region().to_string();
        for r in spec.regions() {
            if r.name != own && self.region_servers(&r.name).is_empty() {
                return Err(ServerError::BadRequest(format!(
                    "could not register job {:?} in region {:?}: {}",
                    job.id,
                    r.name,
                    crate::federation::NO_REGION_PATH
                )));
            }
        }
        self.read_barrier().await?;
        let dropped: Vec<String> = self
            .snapshot()
            .job(&job.namespace, &job.id)
            .and_then(|j| j.multiregion_spec())
            .map(|before| {
                before
                    .regions()
                    .iter()
                    .filter(|r| spec.position(&r.name).is_none())
                    .map(|r| r.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut own_result = None;
        let mut first = None;
        let mut warnings = Vec::new();
        for r in spec.regions() {
            let here = r.name == own;
            let request = Request::RegisterJob {
                job: job.regional_copy(r),
                // The index the caller saw is this region's.
                enforce_index: if here { enforce_index } else { None },
                // Every region's copy came from the same file.
                submission: submission.clone(),
            };
            let reply = if here {
                self.route(request).await
            } else {
                self.call_region(&r.name, &request).await
            };
            let result = match reply {
                Ok(Reply::Registered(result)) => result,
                Ok(other) => {
                    return Err(ServerError::Internal(format!(
                        "unexpected reply of region {:?}: {other:?}",
                        r.name
                    )));
                }
                Err(e) => {
                    return Err(ServerError::BadRequest(format!(
                        "could not register job {:?} in region {:?}: {e}",
                        job.id, r.name
                    )));
                }
            };
            if !result.warnings.is_empty() {
                warnings.push(result.warnings.clone());
            }
            if here {
                own_result = Some(result);
            } else if first.is_none() {
                first = Some(result);
            }
        }
        for region in dropped {
            let request = Request::DeregisterJob {
                namespace: job.namespace.clone(),
                job_id: job.id.clone(),
                purge: false,
            };
            let outcome = if region == own {
                self.route(request).await
            } else {
                self.call_region(&region, &request).await
            };
            if let Err(e) = outcome {
                warnings.push(format!(
                    "could not stop job {:?} in dropped region {region:?}: {e}",
                    job.id
                ));
            }
        }
        let mut result = own_result
            .or(first)
            .ok_or_else(|| ServerError::BadRequest("multiregion job lists no region".into()))?;
        result.warnings = warnings.join("\n");
        Ok(result)
    }

    /// Nomad's `job stop -global`: stops (or purges) the job here and, when it is a
    /// multiregion job, its copy in every other region of its block.
    pub async fn deregister_job_global(
        &self,
        namespace: &str,
        job_id: &str,
        purge: bool,
    ) -> Result<(String, u64), ServerError> {
        self.read_barrier().await?;
        let spec = self
            .snapshot()
            .job(namespace, job_id)
            .and_then(|j| j.multiregion_spec());
        let local = self.deregister_job(namespace, job_id, purge).await?;
        let Some(spec) = spec else {
            return Ok(local);
        };
        let mut errors = Vec::new();
        for r in spec.regions().iter().filter(|r| r.name != self.region()) {
            let request = Request::DeregisterJob {
                namespace: namespace.into(),
                job_id: job_id.into(),
                purge,
            };
            if let Err(e) = self.call_region(&r.name, &request).await {
                errors.push(format!("region {:?}: {e}", r.name));
            }
        }
        if errors.is_empty() {
            Ok(local)
        } else {
            Err(ServerError::Internal(format!(
                "the job stopped here but not in every region: {}",
                errors.join("; ")
            )))
        }
    }

    /// Answers a peer region's call on the job's latest deployment here (on the leader for
    /// the writes).
    pub(crate) async fn execute_peer(&self, r: PeerRequest) -> Result<Reply, ServerError> {
        let snap = self.snapshot();
        let latest = snap.latest_deployment(&r.namespace, &r.job_id);
        if r.op == PeerOp::Latest {
            return Ok(Reply::Peer(latest.map(|d| (*d).clone())));
        }
        let d = latest.ok_or_else(|| {
            ServerError::NotFound(format!(
                "no deployment of job {:?} in region {:?}",
                r.job_id,
                self.region()
            ))
        })?;
        let write = match r.op {
            PeerOp::Latest => unreachable!("answered above"),
            PeerOp::Run => {
                if !d.active() {
                    return Err(ServerError::BadRequest(
                        "can't run terminal deployment".into(),
                    ));
                }
                if d.status != DEPLOYMENT_STATUS_PENDING {
                    // Running already, or held by an operator: a peer does not resume it.
                    return Ok(Reply::Deployment(DeploymentUpdateResult {
                        index: d.modify_index,
                        deployment_modify_index: d.modify_index,
                        ..Default::default()
                    }));
                }
                let mut w = status_write(&d, DEPLOYMENT_STATUS_RUNNING, DEPLOYMENT_DESC_RUNNING);
                w.evals = vec![deployment_eval(&snap, &d, TRIGGER_DEPLOYMENT_WATCHER)];
                w
            }
            PeerOp::Unblock => unblock_write(&d)?,
            PeerOp::Fail => {
                if !d.active() {
                    return Ok(Reply::Deployment(DeploymentUpdateResult {
                        index: d.modify_index,
                        deployment_modify_index: d.modify_index,
                        ..Default::default()
                    }));
                }
                fail_write(&snap, &d, DEPLOYMENT_DESC_FAILED_BY_PEER)
            }
        };
        Ok(Reply::Deployment(self.apply_deployment_write(write).await?))
    }

    async fn call_peer(
        &self,
        region: &str,
        d: &Deployment,
        op: PeerOp,
    ) -> Result<Reply, ServerError> {
        let request = Request::Multiregion(PeerRequest {
            namespace: d.namespace.clone(),
            job_id: d.job_id.clone(),
            op,
        });
        self.call_region(region, &request).await
    }
}

/// A peer region's latest deployment of the job, as far as the rollout cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Peer {
    /// It answered: its deployment's status (`None`: it has none yet).
    Status(Option<String>),
    /// It did not answer this time.
    Unknown,
}

/// One thing the rollout needs done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// This region's deployment takes this status and description.
    Local(&'static str, &'static str),
    /// This region's deployment fails (with its rollback, if it has one).
    FailLocal,
    Run(String),
    Unblock(String),
}

/// What the rollout does next for this region's deployment `d` (blocked or unblocking),
/// given its peers: Nomad's `nextRegion`.
pub(crate) fn next_steps(
    d: &Deployment,
    own: &str,
    spec: &Multiregion,
    peers: &BTreeMap<String, Peer>,
) -> Vec<Step> {
    let status_of = |region: &str| match peers.get(region) {
        Some(Peer::Status(s)) => s.as_deref(),
        _ => None,
    };
    let others: Vec<&str> = spec
        .regions()
        .iter()
        .map(|r| r.name.as_str())
        .filter(|r| *r != own)
        .collect();
    let peer_failed = others.iter().any(|r| {
        matches!(
            status_of(r),
            Some(DEPLOYMENT_STATUS_FAILED | DEPLOYMENT_STATUS_CANCELLED)
        )
    });
    if peer_failed {
        return vec![Step::FailLocal];
    }
    match d.status.as_str() {
        DEPLOYMENT_STATUS_BLOCKED if spec.last_region() == Some(own) => {
            vec![Step::Local(
                DEPLOYMENT_STATUS_UNBLOCKING,
                DEPLOYMENT_DESC_UNBLOCKING,
            )]
        }
        DEPLOYMENT_STATUS_BLOCKED => {
            let max = spec.max_parallel();
            let mut running = others
                .iter()
                .filter(|r| status_of(r) == Some(DEPLOYMENT_STATUS_RUNNING))
                .count() as i64;
            let after = spec.position(own).map_or(0, |i| i + 1);
            let mut steps = Vec::new();
            for r in spec.regions().iter().skip(after) {
                if max > 0 && running >= max {
                    break;
                }
                if status_of(&r.name) == Some(DEPLOYMENT_STATUS_PENDING) {
                    steps.push(Step::Run(r.name.clone()));
                    running += 1;
                }
            }
            steps
        }
        DEPLOYMENT_STATUS_UNBLOCKING => {
            let mut blocked = Vec::new();
            for r in &others {
                match peers.get(*r) {
                    Some(Peer::Status(Some(s))) => match s.as_str() {
                        DEPLOYMENT_STATUS_BLOCKED | DEPLOYMENT_STATUS_UNBLOCKING => {
                            blocked.push(Step::Unblock(r.to_string()))
                        }
                        // The operator holds it; it is theirs to unblock.
                        DEPLOYMENT_STATUS_PAUSED | DEPLOYMENT_STATUS_SUCCESSFUL => {}
                        // Still deploying: wait for it.
                        _ => return Vec::new(),
                    },
                    _ => return Vec::new(),
                }
            }
            blocked.push(Step::Local(
                DEPLOYMENT_STATUS_SUCCESSFUL,
                DEPLOYMENT_DESC_SUCCESSFUL,
            ));
            blocked
        }
        _ => Vec::new(),
    }
}

/// The peers a failed deployment fails, as `on_failure` says: every other region
/// (`fail_all`), none (`fail_local`), or the regions after this one (the default).
pub(crate) fn failure_targets(own: &str, spec: &Multiregion) -> Vec<String> {
    let names = spec.regions().iter().map(|r| r.name.clone());
    match spec.on_failure() {
        ON_FAILURE_FAIL_ALL => names.filter(|r| r != own).collect(),
        ON_FAILURE_FAIL_LOCAL => Vec::new(),
        _ => {
            let after = spec.position(own).map_or(usize::MAX, |i| i + 1);
            names.skip(after).collect()
        }
    }
}

/// What the coordinator saw of each multiregion deployment last pass: a failure is passed to
/// the peers when this leader sees the deployment turn failed (not for failures it found
/// when it started leading, which were passed on by the leader that saw them).
pub(crate) type SeenStatus = HashMap<String, String>;

/// One pass over this region's multiregion deployments (on the leader, from the deployment
/// watcher): peers are asked only for deployments that have something to decide.
pub(crate) async fn coordinate(server: &Server, snap: &StateSnapshot, seen: &mut SeenStatus) {
    let own = server.region().to_string();
    let deployments: Vec<_> = snap
        .deployments(None, "")
        .into_iter()
        .filter(|d| d.is_multiregion)
        .collect();
    seen.retain(|id, _| deployments.iter().any(|d| d.id == *id));
    for d in deployments {
        let before = seen.insert(d.id.clone(), d.status.clone());
        let latest = snap
            .latest_deployment(&d.namespace, &d.job_id)
            .is_some_and(|l| l.id == d.id);
        let Some(spec) = latest
            .then(|| snap.job(&d.namespace, &d.job_id))
            .flatten()
            .and_then(|j| j.multiregion_spec())
        else {
            continue;
        };
        if d.status == DEPLOYMENT_STATUS_FAILED {
            let newly = before.is_some_and(|b| b != DEPLOYMENT_STATUS_FAILED);
            if newly {
                for region in failure_targets(&own, &spec) {
                    if let Err(e) = server.call_peer(&region, &d, PeerOp::Fail).await {
                        tracing::warn!(%region, job = %d.job_id, error = %e, "failing the peer deployment failed");
                    }
                }
            }
            continue;
        }
        if !matches!(
            d.status.as_str(),
            DEPLOYMENT_STATUS_BLOCKED | DEPLOYMENT_STATUS_UNBLOCKING
        ) {
            continue;
        }
        let mut peers = BTreeMap::new();
        for r in spec.regions().iter().filter(|r| r.name != own) {
            let peer = match server.call_peer(&r.name, &d, PeerOp::Latest).await {
                Ok(Reply::Peer(p)) => Peer::Status(p.map(|p| p.status)),
                Ok(_) | Err(_) => Peer::Unknown,
            };
            peers.insert(r.name.clone(), peer);
        }
        for step in next_steps(&d, &own, &spec, &peers) {
            let outcome = match &step {
                Step::Local(status, description) => server
                    .apply_deployment_write(status_write(&d, status, description))
                    .await
                    .map(|_| ()),
                Step::FailLocal => server
                    .apply_deployment_write(fail_write(snap, &d, DEPLOYMENT_DESC_FAILED_BY_PEER))
                    .await
                    .map(|_| ()),
                Step::Run(region) => server.call_peer(region, &d, PeerOp::Run).await.map(|_| ()),
                Step::Unblock(region) => server
                    .call_peer(region, &d, PeerOp::Unblock)
                    .await
                    .map(|_| ()),
            };
            if let Err(e) = outcome {
                tracing::warn!(?step, job = %d.job_id, error = %e, "multiregion rollout step failed");
                // Decided again next pass.
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(max_parallel: i64, on_failure: &str, regions: &[&str]) -> Multiregion {
        serde_json::from_value(json!({
            "Strategy": {"MaxParallel": max_parallel, "OnFailure": on_failure},
            "Regions": regions.iter().map(|r| json!({"Name": r})).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn deployment(status: &str) -> Deployment {
        Deployment {
            id: "d".into(),
            status: status.into(),
            ..Default::default()
        }
    }

    fn peers(list: &[(&str, Option<&str>)]) -> BTreeMap<String, Peer> {
        list.iter()
            .map(|(r, s)| (r.to_string(), Peer::Status(s.map(str::to_string))))
            .collect()
    }

    #[test]
    fn a_blocked_region_starts_the_next_pending_one_within_max_parallel() {
        let s = spec(1, "", &["a", "b", "c"]);
        let p = peers(&[("b", Some("pending")), ("c", Some("pending"))]);
        assert_eq!(
            next_steps(&deployment("blocked"), "a", &s, &p),
            [Step::Run("b".into())]
        );
        let p = peers(&[("b", Some("running")), ("c", Some("pending"))]);
        assert!(next_steps(&deployment("blocked"), "a", &s, &p).is_empty());
        // A paused peer is not started by anyone but its operator.
        let p = peers(&[("b", Some("paused")), ("c", Some("pending"))]);
        assert_eq!(
            next_steps(&deployment("blocked"), "a", &s, &p),
            [Step::Run("c".into())],
            "only pending regions are run"
        );
    }

    #[test]
    fn the_last_region_unblocks_every_blocked_peer_once_none_is_running() {
        let s = spec(1, "", &["a", "b"]);
        let p = peers(&[("a", Some("blocked"))]);
        assert_eq!(
            next_steps(&deployment("blocked"), "b", &s, &p),
            [Step::Local("unblocking", DEPLOYMENT_DESC_UNBLOCKING)]
        );
        assert_eq!(
            next_steps(&deployment("unblocking"), "b", &s, &p),
            [
                Step::Unblock("a".into()),
                Step::Local("successful", DEPLOYMENT_DESC_SUCCESSFUL)
            ]
        );
        let p = peers(&[("a", Some("running"))]);
        assert!(next_steps(&deployment("unblocking"), "b", &s, &p).is_empty());
        let mut p = peers(&[]);
        p.insert("a".into(), Peer::Unknown);
        assert!(next_steps(&deployment("unblocking"), "b", &s, &p).is_empty());
    }

    #[test]
    fn a_failed_peer_fails_a_blocked_region() {
        let s = spec(1, "fail_all", &["a", "b"]);
        let p = peers(&[("b", Some("failed"))]);
        assert_eq!(
            next_steps(&deployment("blocked"), "a", &s, &p),
            [Step::FailLocal]
        );
    }

    #[test]
    fn on_failure_decides_which_peers_fail() {
        let regions = ["a", "b", "c"];
        assert_eq!(
            failure_targets("b", &spec(1, "fail_all", &regions)),
            ["a", "c"]
        );
        assert!(failure_targets("b", &spec(1, "fail_local", &regions)).is_empty());
        assert_eq!(failure_targets("b", &spec(1, "", &regions)), ["c"]);
    }
}
