//! Dispatching parameterized jobs (Nomad's `Job.Dispatch`): the request is checked against the
//! parent's `parameterized` block, and a child `<parent>/dispatch-<unix>-<8 hex>` carrying the
//! payload (snappy + base64 in `Job.Payload`, as Nomad) and the merged meta is registered with
//! its evaluation in one log entry. The parameterized parent itself never gets an evaluation.
//!
//! A dispatch with an idempotency token returns the parent's child that carries the same
//! token, whatever its status, as long as it is not garbage collected (Nomad's rule): no new
//! child and no evaluation. The check and the registration of token-carrying dispatches are
//! serialized on the leader, so two concurrent retries cannot both create a child.

use std::collections::BTreeMap;

use drover_structs::time::now_nanos;
use drover_structs::{
    Evaluation, Job, TRIGGER_JOB_REGISTER, dispatched_id, encode_job_payload, validate_dispatch,
};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::rpc::{Reply, Request};
use crate::server::Server;

/// What a dispatch answers (Nomad's `JobDispatchResponse`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchResult {
    pub dispatched_job_id: String,
    /// Empty when the child is itself periodic (its launches get the evaluations).
    pub eval_id: String,
    pub eval_create_index: u64,
    pub job_create_index: u64,
    pub index: u64,
}

/// A dispatch as the endpoint receives it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchRequest {
    pub namespace: String,
    pub job_id: String,
    pub payload: Vec<u8>,
    pub meta: BTreeMap<String, String>,
    pub id_prefix_template: String,
    /// Empty: every dispatch creates a child.
    pub idempotency_token: String,
}

/// Serializes token-carrying dispatches between the token check and the registration of the
/// child (Nomad checks only in the RPC handler, which lets concurrent retries both dispatch).
/// One per process: leadership is per process, and dispatches without a token never wait.
static TOKEN_DISPATCH_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a dispatch answers when the token's child already exists (Nomad's reply: its id,
/// create index and modify index; no evaluation).
fn existing_dispatch(child: &Job) -> DispatchResult {
    DispatchResult {
        dispatched_job_id: child.id.clone(),
        job_create_index: child.create_index,
        index: child.modify_index,
        ..Default::default()
    }
}

/// The child a dispatch registers (Nomad's copy of the parent with a derived id).
fn derive_child(parent: &Job, request: &DispatchRequest, now: i64) -> Job {
    let suffix: String = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let id = dispatched_id(
        &parent.id,
        &request.id_prefix_template,
        now.div_euclid(1_000_000_000),
        &suffix,
    );
    let mut meta = parent.meta.clone().unwrap_or_default();
    meta.extend(request.meta.clone());
    Job {
        parent_id: parent.id.clone(),
        name: id.clone(),
        id,
        dispatched: true,
        status: String::new(),
        status_description: String::new(),
        meta: (!meta.is_empty()).then_some(meta),
        payload: Some(encode_job_payload(&request.payload)),
        dispatch_idempotency_token: request.idempotency_token.clone(),
        stable: false,
        version: 0,
        create_index: 0,
        modify_index: 0,
        job_modify_index: 0,
        submit_time: now,
        ..parent.clone()
    }
}

impl Server {
    /// Dispatches the parameterized job `request.job_id`.
    pub async fn dispatch_job(
        &self,
        request: DispatchRequest,
    ) -> Result<DispatchResult, ServerError> {
        match self.route(Request::DispatchJob(request)).await? {
            Reply::Dispatched(result) => Ok(result),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    /// On the leader.
    pub(crate) async fn dispatch_job_here(
        &self,
        request: DispatchRequest,
    ) -> Result<Reply, ServerError> {
        if request.job_id.is_empty() {
            return Err(ServerError::BadRequest(
                "missing parameterized job ID".into(),
            ));
        }
        let parent = self
            .snapshot()
            .job(&request.namespace, &request.job_id)
            .ok_or_else(|| ServerError::NotFound("parameterized job not found".into()))?;
        if !parent.is_parameterized() {
            return Err(ServerError::BadRequest(format!(
                "Specified job {:?} is not a parameterized job",
                request.job_id
            )));
        }
        if parent.stop {
            return Err(ServerError::BadRequest(format!(
                "Specified job {:?} is stopped",
                request.job_id
            )));
        }
        let config = parent.parameterized_config().unwrap_or_default();
        validate_dispatch(&config, &request.payload, &request.meta)
            .map_err(ServerError::BadRequest)?;

        let _serialized = if request.idempotency_token.is_empty() {
            None
        } else {
            let guard = TOKEN_DISPATCH_LOCK.lock().await;
            if let Some(existing) = self.snapshot().dispatched_child_with_token(
                &parent.namespace,
                &parent.id,
                &request.idempotency_token,
            ) {
                return Ok(Reply::Dispatched(existing_dispatch(&existing)));
            }
            Some(guard)
        };
        let child = derive_child(&parent, &request, now_nanos());
        // A periodic parameterized job's children are periodic: their launches get the
        // evaluations.
        let eval =
            (!child.is_periodic()).then(|| Evaluation::for_job(&child, TRIGGER_JOB_REGISTER));
        let dispatched_job_id = child.id.clone();
        let index = self
            .inner
            .apply(LogEntry::JobRegister {
                job: child,
                evals: eval.iter().cloned().collect(),
                enforce_index: None,
                submission: None,
            })
            .await?;
        let mut result = DispatchResult {
            dispatched_job_id,
            job_create_index: index,
            index,
            ..Default::default()
        };
        if let Some(stored) = eval.and_then(|e| self.snapshot().eval(&e.id)) {
            result.eval_id = stored.id.clone();
            result.eval_create_index = stored.create_index;
            self.inner.enqueue_when_due((*stored).clone());
        }
        Ok(Reply::Dispatched(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::decode_job_payload;

    #[test]
    fn the_child_carries_payload_meta_and_its_parent() {
        let parent = Job {
            id: "render".into(),
            name: "render".into(),
            namespace: "default".into(),
            job_type: "batch".into(),
            version: 3,
            meta: Some([("team".to_string(), "a".to_string())].into()),
            parameterized_job: Some(serde_json::json!({"Payload": "optional"})),
            ..Default::default()
        };
        let request = DispatchRequest {
            namespace: "default".into(),
            job_id: "render".into(),
            payload: b"frame-42".to_vec(),
            meta: [("frame".to_string(), "42".to_string())].into(),
            id_prefix_template: "batch".into(),
            idempotency_token: "retry-7".into(),
        };
        let child = derive_child(&parent, &request, 1_700_000_000_123_000_000);
        assert!(
            child.id.starts_with("render/dispatch-batch-1700000000-"),
            "{}",
            child.id
        );
        assert_eq!(
            child.id.len(),
            "render/dispatch-batch-1700000000-".len() + 8
        );
        assert_eq!(child.name, child.id);
        assert_eq!(child.parent_id, "render");
        assert!(child.dispatched);
        assert!(!child.is_parameterized());
        assert_eq!(child.version, 0);
        assert_eq!(child.dispatch_idempotency_token, "retry-7");
        let meta = child.meta.clone().unwrap();
        assert_eq!((meta["team"].as_str(), meta["frame"].as_str()), ("a", "42"));
        assert_eq!(
            decode_job_payload(child.payload.as_ref().unwrap()).unwrap(),
            b"frame-42"
        );
    }

    #[test]
    fn an_existing_child_answers_with_its_indexes_and_no_evaluation() {
        let child = Job {
            id: "render/dispatch-1-abcd0123".into(),
            create_index: 7,
            modify_index: 12,
            ..Default::default()
        };
        assert_eq!(
            existing_dispatch(&child),
            DispatchResult {
                dispatched_job_id: "render/dispatch-1-abcd0123".into(),
                eval_id: String::new(),
                eval_create_index: 0,
                job_create_index: 7,
                index: 12,
            }
        );
    }
}
