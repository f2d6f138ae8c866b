//! Variables: writes go to the leader, which validates them and stamps its clock; the FSM
//! decides check-and-set. A refused check-and-set answers what is stored (Nomad's 409 body).
//! Reads are served from any server's state by the HTTP layer.
//!
//! Items are stored as written, in the Raft log and the state snapshots: Drover has no keyring
//! yet to encrypt them at rest as Nomad does.

use drover_structs::time::now_nanos;
use drover_structs::{Variable, VariableWrite};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::rpc::{Reply, Request};
use crate::server::Server;

/// The FSM's refusal of a stale check-and-set.
pub(crate) const CAS_REJECTED: &str = "variable check-and-set index mismatch";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VariableRequest {
    pub variable: Variable,
    pub op: VariableWrite,
}

/// What a variable write did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VariableOutcome {
    /// Written at `index`; `stored` is the variable as now stored (`None` after a delete).
    Written {
        stored: Option<Variable>,
        index: u64,
    },
    /// A check-and-set found another modify index: what is stored (only namespace and path
    /// when nothing is).
    Conflict { current: Variable },
}

impl Server {
    /// Sets or deletes a variable (through the leader).
    pub async fn write_variable(
        &self,
        variable: Variable,
        op: VariableWrite,
    ) -> Result<VariableOutcome, ServerError> {
        match self
            .route(Request::Variable(VariableRequest { variable, op }))
            .await?
        {
            Reply::Variable(outcome) => Ok(outcome),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    /// On the leader.
    pub(crate) async fn execute_variable(
        &self,
        request: VariableRequest,
    ) -> Result<Reply, ServerError> {
        let VariableRequest { mut variable, op } = request;
        if variable.namespace.is_empty() {
            variable.namespace = drover_structs::DEFAULT_NAMESPACE.into();
        }
        let deleting = matches!(op, VariableWrite::Delete | VariableWrite::DeleteIfIndex(_));
        if deleting {
            variable.items.clear();
            drover_structs::variable::validate_path(&variable.path)
                .map_err(ServerError::BadRequest)?;
        } else {
            variable.validate().map_err(ServerError::BadRequest)?;
        }
        if self.snapshot().namespace(&variable.namespace).is_none() {
            return Err(ServerError::BadRequest(format!(
                "variable {:?} is in nonexistent namespace {:?}",
                variable.path, variable.namespace
            )));
        }
        let (ns, path) = (variable.namespace.clone(), variable.path.clone());
        let entry = LogEntry::VariableWrite {
            variable,
            op,
            at: now_nanos(),
        };
        let outcome = match self.inner.apply_checked(entry).await {
            Ok(index) => VariableOutcome::Written {
                stored: if deleting {
                    None
                } else {
                    self.snapshot().variable(&ns, &path).map(|v| (*v).clone())
                },
                index,
            },
            Err(ServerError::Conflict(why)) if why == CAS_REJECTED => VariableOutcome::Conflict {
                current: self
                    .snapshot()
                    .variable(&ns, &path)
                    .map(|v| (*v).clone())
                    .unwrap_or(Variable {
                        namespace: ns,
                        path,
                        ..Default::default()
                    }),
            },
            Err(e) => return Err(e),
        };
        Ok(Reply::Variable(outcome))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::test_server::start_leading;

    fn var(path: &str, value: &str) -> Variable {
        Variable {
            path: path.into(),
            items: BTreeMap::from([("k".into(), value.into())]),
            ..Default::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn check_and_set_writes_once_and_a_conflict_answers_what_is_stored() {
        let s = start_leading().await;
        let first = s
            .write_variable(var("app/db", "1"), VariableWrite::SetIfIndex(0))
            .await
            .unwrap();
        let VariableOutcome::Written {
            stored: Some(stored),
            index,
        } = first
        else {
            panic!("{first:?}");
        };
        assert_eq!(
            (stored.namespace.as_str(), stored.modify_index),
            ("default", index)
        );
        let again = s
            .write_variable(var("app/db", "2"), VariableWrite::SetIfIndex(0))
            .await
            .unwrap();
        assert_eq!(
            again,
            VariableOutcome::Conflict {
                current: stored.clone()
            }
        );
        let missing = s
            .write_variable(var("app/none", "x"), VariableWrite::DeleteIfIndex(7))
            .await
            .unwrap();
        let VariableOutcome::Conflict { current } = missing else {
            panic!("{missing:?}");
        };
        assert!(current.items.is_empty() && current.modify_index == 0);
        let e = s
            .write_variable(var("nomad", "x"), VariableWrite::Set)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("reserved top-level"), "{e}");
        let mut elsewhere = var("a", "x");
        elsewhere.namespace = "nowhere".into();
        let e = s
            .write_variable(elsewhere, VariableWrite::Set)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("nonexistent namespace"), "{e}");
        let gone = s
            .write_variable(var("app/db", ""), VariableWrite::DeleteIfIndex(index))
            .await
            .unwrap();
        assert!(matches!(
            gone,
            VariableOutcome::Written { stored: None, .. }
        ));
        assert!(s.snapshot().variable("default", "app/db").is_none());
    }
}
