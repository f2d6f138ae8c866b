//! Operations on a job's versions and evaluation, as Nomad's `Job.Revert`, `Job.Stable` and
//! `Job.Evaluate` endpoints: a revert registers an older version's spec as the newest
//! version (optionally only if the current version is still the one the caller saw), the
//! stability flag is set by hand, and an evaluation is forced (with `ForceReschedule`, the
//! job's failed allocations are rescheduled now, past their reschedule policy).

use drover_structs::{Evaluation, TRIGGER_JOB_REGISTER};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::rpc::{Reply, Request};
use crate::server::{RegisterResult, Server};

/// The job version calls, routed to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum JobVersionRequest {
    Revert {
        namespace: String,
        job_id: String,
        version: u64,
        enforce_prior_version: Option<u64>,
    },
    Stable {
        namespace: String,
        job_id: String,
        version: u64,
        stable: bool,
    },
    Evaluate {
        namespace: String,
        job_id: String,
        force_reschedule: bool,
    },
}

impl Server {
    /// Routes a job version call to the leader.
    pub async fn job_version_op(
        &self,
        request: JobVersionRequest,
    ) -> Result<RegisterResult, ServerError> {
        match self.route(Request::JobVersion(request)).await? {
            Reply::Registered(r) => Ok(r),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    pub(crate) async fn execute_job_version(
        &self,
        request: JobVersionRequest,
    ) -> Result<Reply, ServerError> {
        let snap = self.snapshot();
        let result = match request {
            JobVersionRequest::Revert {
                namespace,
                job_id,
                version,
                enforce_prior_version,
            } => {
                let cur = snap
                    .job(&namespace, &job_id)
                    .ok_or_else(|| ServerError::NotFound(format!("job {job_id:?} not found")))?;
                if version == cur.version {
                    return Err(ServerError::BadRequest(
                        "can't revert to current version".into(),
                    ));
                }
                let old = snap.job_version(&namespace, &job_id, version).ok_or_else(|| {
                    ServerError::NotFound(format!(
                        "job {job_id:?} in namespace {namespace:?} at version {version} not found"
                    ))
                })?;
                let enforce_index = match enforce_prior_version {
                    Some(prior) if prior != cur.version => {
                        return Err(ServerError::BadRequest(format!(
                            "Current job has version {}; enforcing version {prior}",
                            cur.version
                        )));
                    }
                    Some(_) => Some(cur.job_modify_index),
                    None => None,
                };
                let mut job = (*old).clone();
                job.stop = false;
                // A reverted version is the old spec again, not a file anyone submitted.
                self.register_job_here(job, enforce_index, None).await?
            }
            JobVersionRequest::Stable {
                namespace,
                job_id,
                version,
                stable,
            } => {
                if snap.job_version(&namespace, &job_id, version).is_none() {
                    return Err(ServerError::NotFound(format!(
                        "job {job_id:?} at version {version} not found"
                    )));
                }
                let index = self
                    .inner
                    .apply(LogEntry::JobStability {
                        namespace,
                        job_id,
                        version,
                        stable,
                    })
                    .await?;
                RegisterResult {
                    index,
                    ..Default::default()
                }
            }
            JobVersionRequest::Evaluate {
                namespace,
                job_id,
                force_reschedule,
            } => {
                let job = snap
                    .job(&namespace, &job_id)
                    .ok_or_else(|| ServerError::NotFound("job not found".into()))?;
                if job.is_periodic() {
                    return Err(ServerError::BadRequest(
                        "can't evaluate periodic job".into(),
                    ));
                }
                if job.is_parameterized() {
                    return Err(ServerError::BadRequest(
                        "can't evaluate parameterized job".into(),
                    ));
                }
                let eval = Evaluation::for_job(&job, TRIGGER_JOB_REGISTER);
                let failed: Vec<String> = if force_reschedule {
                    snap.allocs_by_job(&namespace, &job_id)
                        .iter()
                        .filter(|a| a.client_status == drover_structs::ALLOC_CLIENT_FAILED)
                        .map(|a| a.id.clone())
                        .collect()
                } else {
                    Vec::new()
                };
                let entry = LogEntry::AllocForceReschedule {
                    ids: failed,
                    evals: vec![eval.clone()],
                };
                let index = self.inner.apply(entry).await?;
                let mut queued = eval.clone();
                queued.create_index = index;
                queued.modify_index = index;
                self.inner.enqueue_when_due(queued);
                RegisterResult {
                    eval_id: eval.id,
                    eval_create_index: index,
                    job_modify_index: job.job_modify_index,
                    index,
                    warnings: String::new(),
                }
            }
        };
        Ok(Reply::Registered(result))
    }
}
