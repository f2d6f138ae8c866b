//! Namespaces: written by operators through the leader (validated there, one log entry per
//! write), `default` undeletable, a namespace still holding live jobs, allocations or volumes
//! refused for deletion with Nomad's texts; jobs register only into a namespace that exists
//! and only with the task drivers it allows.

use drover_state::StateSnapshot;
use drover_structs::{DEFAULT_NAMESPACE, Job, MultiError, Namespace};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::rpc::{Reply, Request};
use crate::server::Server;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum NamespaceRequest {
    Upsert { namespaces: Vec<Namespace> },
    Delete { name: String },
}

/// Refuses a job whose namespace does not exist, or that uses task drivers its namespace
/// does not allow (Nomad's `jobNamespaceConstraintCheckHook`).
pub(crate) fn check_job(snap: &StateSnapshot, job: &Job) -> Result<(), ServerError> {
    let Some(ns) = snap.namespace(&job.namespace) else {
        return Err(ServerError::BadRequest(format!(
            "job {:?} is in nonexistent namespace {:?}",
            job.id, job.namespace
        )));
    };
    let used = job
        .task_groups
        .iter()
        .flat_map(|tg| &tg.tasks)
        .map(|t| t.driver.as_str());
    let refused = ns.refused_drivers(used);
    match refused.as_slice() {
        [] => Ok(()),
        [one] => Err(ServerError::BadRequest(format!(
            "used task driver {one:?} is not allowed in namespace {:?}",
            ns.name
        ))),
        many => Err(ServerError::BadRequest(format!(
            "used task drivers {many:?} are not allowed in namespace {:?}",
            ns.name
        ))),
    }
}

/// Refuses volumes filed under a namespace that does not exist (Nomad's text, unquoted).
pub(crate) fn check_volumes(
    snap: &StateSnapshot,
    namespace: &str,
    volumes: &[drover_structs::CsiVolume],
) -> Result<(), ServerError> {
    if snap.namespace(namespace).is_some() {
        return Ok(());
    }
    let id = volumes.first().map(|v| v.id.as_str()).unwrap_or_default();
    Err(ServerError::BadRequest(format!(
        "volume {id} is in nonexistent namespace {namespace}"
    )))
}

/// Why `name` may not be deleted now, in Nomad's words (one line per reason).
fn deletion_refusals(snap: &StateSnapshot, name: &str, region: &str) -> MultiError {
    let mut m = MultiError::new();
    let jobs = snap
        .jobs(Some(name))
        .iter()
        .any(|j| j.status != drover_structs::JOB_STATUS_DEAD);
    if jobs {
        m.push(format!(
            "namespace {name:?} has non-terminal jobs in regions: [{region}]"
        ));
    }
    // Every allocation: a purged job's may still be running.
    let allocs = snap
        .allocs()
        .iter()
        .any(|a| a.namespace == name && !a.client_terminal());
    if allocs {
        m.push(format!(
            "namespace {name:?} has non-terminal allocations in regions: [{region}]"
        ));
    }
    let volumes = !snap
        .csi_volumes(&drover_state::CsiVolumeFilter {
            namespace: Some(name),
            ..Default::default()
        })
        .is_empty();
    if volumes {
        m.push(format!(
            "namespace {name:?} has volumes associated with it in regions: [{region}]"
        ));
    }
    m
}

impl Server {
    /// Creates or updates namespaces (all validated first; nothing is written if one is
    /// invalid). Returns the write's index.
    pub async fn upsert_namespaces(&self, namespaces: Vec<Namespace>) -> Result<u64, ServerError> {
        if namespaces.is_empty() {
            return Err(ServerError::BadRequest(
                "must specify at least one namespace".into(),
            ));
        }
        for n in &namespaces {
            if let Err(m) = n.validate() {
                return Err(ServerError::BadRequest(format!(
                    "Invalid namespace {:?}: {m}",
                    n.name
                )));
            }
            // Quotas are an Enterprise feature; Nomad's open-source state refuses them so.
            if !n.quota.is_empty() {
                return Err(ServerError::BadRequest(format!(
                    "namespace {:?} using non-existent quota {:?}",
                    n.name, n.quota
                )));
            }
        }
        self.namespace_op(NamespaceRequest::Upsert { namespaces })
            .await
    }

    /// Deletes a namespace that holds nothing live.
    pub async fn delete_namespace(&self, name: &str) -> Result<u64, ServerError> {
        self.namespace_op(NamespaceRequest::Delete { name: name.into() })
            .await
    }

    async fn namespace_op(&self, request: NamespaceRequest) -> Result<u64, ServerError> {
        match self.route(Request::Namespace(request)).await? {
            Reply::Index(index) => Ok(index),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    /// On the leader.
    pub(crate) async fn execute_namespace(
        &self,
        request: NamespaceRequest,
    ) -> Result<Reply, ServerError> {
        let entry = match request {
            NamespaceRequest::Upsert { namespaces } => LogEntry::NamespaceUpsert { namespaces },
            NamespaceRequest::Delete { name } => {
                if name == DEFAULT_NAMESPACE {
                    return Err(ServerError::BadRequest(
                        "can not delete default namespace".into(),
                    ));
                }
                let snap = self.snapshot();
                let refusals = deletion_refusals(&snap, &name, self.region());
                if !refusals.is_empty() {
                    return Err(ServerError::BadRequest(refusals.to_string()));
                }
                if snap.namespace(&name).is_none() {
                    return Err(ServerError::NotFound("namespace not found".into()));
                }
                LogEntry::NamespaceDelete { names: vec![name] }
            }
        };
        Ok(Reply::Index(self.inner.apply(entry).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_state::StateStore;
    use drover_structs::{NamespaceCapabilities, Task, TaskGroup};

    fn job(ns: &str, driver: &str) -> Job {
        Job {
            id: "web".into(),
            namespace: ns.into(),
            task_groups: vec![TaskGroup {
                tasks: vec![Task {
                    driver: driver.into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn jobs_need_an_existing_namespace_that_allows_their_drivers() {
        let s = StateStore::new();
        let e = check_job(&s.snapshot(), &job("dev", "raw_exec")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "job \"web\" is in nonexistent namespace \"dev\""
        );
        assert!(check_job(&s.snapshot(), &job("default", "raw_exec")).is_ok());
        s.upsert_namespaces(
            3,
            vec![Namespace {
                name: "dev".into(),
                capabilities: Some(NamespaceCapabilities {
                    enabled_task_drivers: Some(vec!["docker".into()]),
                    ..Default::default()
                }),
                ..Default::default()
            }],
        );
        let e = check_job(&s.snapshot(), &job("dev", "raw_exec")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "used task driver \"raw_exec\" is not allowed in namespace \"dev\""
        );
        assert!(check_job(&s.snapshot(), &job("dev", "docker")).is_ok());
    }

    #[test]
    fn namespaces_with_live_jobs_are_not_deleted() {
        let s = StateStore::new();
        s.upsert_namespaces(
            2,
            vec![Namespace {
                name: "dev".into(),
                ..Default::default()
            }],
        );
        assert!(deletion_refusals(&s.snapshot(), "dev", "global").is_empty());
        s.upsert_job(3, job("dev", "raw_exec"));
        let m = deletion_refusals(&s.snapshot(), "dev", "global");
        assert_eq!(
            m.errors,
            ["namespace \"dev\" has non-terminal jobs in regions: [global]"]
        );
    }
}
