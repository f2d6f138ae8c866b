//! Horizontal scaling (Nomad's `Job.Scale`): a task group's count changed by an operator or
//! an autoscaler within the group's scaling policy (`min <= count <= max`, unless the policy
//! is overridden), registered as a new job version with its evaluation, and recorded as a
//! scaling event of the group. Policies live in the job (`TaskGroup.Scaling`); the leader
//! gives each one an id at registration and keeps it across versions.

use std::collections::BTreeMap;

use drover_structs::time::now_nanos;
use drover_structs::{Job, ScalingEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::rpc::{Reply, Request};
use crate::server::{RegisterResult, Server};

/// Nomad's `JobScaleRequest` (the job named by the path).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScaleRequest {
    pub namespace: String,
    pub job_id: String,
    pub group: String,
    pub count: Option<i64>,
    pub message: String,
    pub error: bool,
    pub meta: Option<BTreeMap<String, Value>>,
    pub policy_override: bool,
}

/// A group's policy bounds, from its canonicalized `Scaling` JSON (`max` -1: none).
fn bounds(policy: &Value) -> (i64, i64) {
    let min = policy["Min"].as_i64().unwrap_or(0);
    let max = policy["Max"].as_i64().unwrap_or(-1);
    (min, max)
}

/// Gives every group scaling policy an id: the one the current version's policy for the
/// same group has, else a new one.
pub(crate) fn assign_policy_ids(job: &mut Job, existing: Option<&Job>) {
    for tg in &mut job.task_groups {
        let Some(Value::Object(policy)) = tg.scaling.as_mut() else {
            continue;
        };
        let has_id = policy
            .get("ID")
            .and_then(Value::as_str)
            .is_some_and(|id| !id.is_empty());
        if has_id {
            continue;
        }
        let kept = existing
            .and_then(|j| j.lookup_task_group(&tg.name))
            .and_then(|g| g.scaling.as_ref())
            .and_then(|p| p["ID"].as_str())
            .filter(|id| !id.is_empty())
            .map(str::to_string);
        let id = kept.unwrap_or_else(drover_structs::generate_id);
        policy.insert("ID".into(), Value::String(id));
    }
}

impl Server {
    /// Routes a scaling request to the leader.
    pub async fn scale_job(&self, request: ScaleRequest) -> Result<RegisterResult, ServerError> {
        match self.route(Request::Scale(request)).await? {
            Reply::Registered(r) => Ok(r),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    pub(crate) async fn scale_job_here(&self, request: ScaleRequest) -> Result<Reply, ServerError> {
        let ScaleRequest {
            namespace,
            job_id,
            group,
            count,
            message,
            error,
            meta,
            policy_override,
        } = request;
        if count.is_some_and(|c| c < 0) {
            return Err(ServerError::BadRequest(
                "scaling action count can't be negative".into(),
            ));
        }
        if error && count.is_some() {
            return Err(ServerError::BadRequest(
                "scaling action should not contain count if error is true".into(),
            ));
        }
        let snap = self.snapshot();
        let job = snap
            .job(&namespace, &job_id)
            .ok_or_else(|| ServerError::NotFound(format!("job {job_id:?} not found")))?;
        let tg = job.lookup_task_group(&group).ok_or_else(|| {
            ServerError::BadRequest(format!(
                "task group {group:?} specified for scaling does not exist in job"
            ))
        })?;
        let previous_count = tg.count;
        if let Some(c) = count
            && !policy_override
            && let Some(policy) = tg.scaling.as_ref().filter(|p| p.is_object())
        {
            let (min, max) = bounds(policy);
            if c < min {
                return Err(ServerError::BadRequest(format!(
                    "group count was less than scaling policy minimum: {c} < {min}"
                )));
            }
            if max >= 0 && c > max {
                return Err(ServerError::BadRequest(format!(
                    "group count was greater than scaling policy maximum: {c} > {max}"
                )));
            }
        }
        let mut result = RegisterResult::default();
        if let Some(c) = count
            && !job.stop
        {
            let mut scaled = (*job).clone();
            for g in &mut scaled.task_groups {
                if g.name == group {
                    g.count = c;
                }
            }
            result = self.register_job_here(scaled, None, None).await?;
        }
        let event = ScalingEvent {
            time: now_nanos(),
            count,
            previous_count,
            message,
            error,
            meta,
            eval_id: (!result.eval_id.is_empty()).then(|| result.eval_id.clone()),
            create_index: 0,
        };
        let index = self
            .inner
            .apply(LogEntry::ScalingEvent {
                namespace,
                job_id,
                group,
                event,
            })
            .await?;
        if result.index == 0 {
            result.index = index;
            result.job_modify_index = job.job_modify_index;
        }
        Ok(Reply::Registered(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::TaskGroup;
    use serde_json::json;

    #[test]
    fn policy_ids_are_kept_across_versions_and_new_groups_get_one() {
        let group = |name: &str, scaling: Option<Value>| TaskGroup {
            name: name.into(),
            scaling,
            ..Default::default()
        };
        let old = Job {
            task_groups: vec![group("a", Some(json!({"ID": "p-a", "Min": 1})))],
            ..Default::default()
        };
        let mut new = Job {
            task_groups: vec![
                group("a", Some(json!({"ID": "", "Min": 1}))),
                group("b", Some(json!({"Min": 0}))),
                group("c", None),
            ],
            ..Default::default()
        };
        assign_policy_ids(&mut new, Some(&old));
        assert_eq!(new.task_groups[0].scaling.as_ref().unwrap()["ID"], "p-a");
        let b = new.task_groups[1].scaling.as_ref().unwrap()["ID"].clone();
        assert!(b.as_str().is_some_and(|id| id.len() == 36), "{b}");
        assert!(new.task_groups[2].scaling.is_none());
    }
}
