//! The service mesh's control plane: the cluster's mesh CA (made by the leader the first time
//! a certificate is asked for, kept in the replicated state so every later leader signs with
//! it), leaf certificates for workload identities, intentions, and the view of the mesh a
//! client writes into its proxies' configurations.
//!
//! A workload's identity is taken from its task's kind (`connect-proxy:<service>` or
//! `connect-native:<service>`), looked up in the allocation the asking node runs: a client
//! can get a certificate only for a service one of its own allocations implements.

use std::collections::BTreeMap;

use drover_structs::mesh::{Intention, MeshCa, MeshLeaf, MeshView};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::rpc::{Reply, Request};
use crate::server::Server;

/// How long a leaf certificate lasts; clients renew at two thirds of it.
pub const LEAF_HOURS: u32 = 72;

/// Task kind prefixes that carry a mesh identity.
const KIND_PREFIXES: [&str; 2] = ["connect-proxy:", "connect-native:"];

/// The mesh's log entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MeshEntry {
    /// The CA the leader made (kept only if none is stored).
    CaInit {
        ca: MeshCa,
    },
    IntentionUpsert {
        intention: Intention,
    },
    IntentionDelete {
        namespace: String,
        source: String,
        destination: String,
    },
}

pub(crate) fn apply_entry(
    state: &drover_state::StateStore,
    index: u64,
    entry: MeshEntry,
) -> Result<(), crate::fsm::FsmError> {
    match entry {
        MeshEntry::CaInit { ca } => {
            state.init_mesh_ca(index, ca);
        }
        MeshEntry::IntentionUpsert { intention } => state.upsert_intention(index, intention),
        MeshEntry::IntentionDelete {
            namespace,
            source,
            destination,
        } => {
            state.delete_intention(index, &namespace, &source, &destination);
        }
    }
    Ok(())
}

/// Mesh calls (carried in `Request::Mesh`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MeshRequest {
    /// A node asks a certificate for the identity of task `task` of its allocation.
    SignLeaf {
        node_id: String,
        alloc_id: String,
        task: String,
    },
    /// A node asks what its proxies in `namespace` need.
    View {
        namespace: String,
    },
    UpsertIntention {
        intention: Intention,
    },
    DeleteIntention {
        namespace: String,
        source: String,
        destination: String,
    },
}

impl MeshRequest {
    /// What a client agent may ask.
    pub fn is_client_call(&self) -> bool {
        matches!(
            self,
            MeshRequest::SignLeaf { .. } | MeshRequest::View { .. }
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MeshReply {
    Leaf(MeshLeaf),
    View(MeshView),
    Index(u64),
}

/// The service a task kind gives an identity for.
pub fn identity_service(kind: &str) -> Option<&str> {
    KIND_PREFIXES
        .iter()
        .find_map(|p| kind.strip_prefix(p))
        .filter(|s| !s.is_empty())
}

impl Server {
    async fn route_mesh(&self, request: MeshRequest) -> Result<MeshReply, ServerError> {
        match self.route(Request::Mesh(request)).await? {
            Reply::Mesh(reply) => Ok(reply),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    /// A certificate for the mesh identity of task `task` of allocation `alloc_id`, which node
    /// `node_id` must run.
    pub async fn sign_mesh_leaf(
        &self,
        node_id: &str,
        alloc_id: &str,
        task: &str,
    ) -> Result<MeshLeaf, ServerError> {
        let request = MeshRequest::SignLeaf {
            node_id: node_id.into(),
            alloc_id: alloc_id.into(),
            task: task.into(),
        };
        match self.route_mesh(request).await? {
            MeshReply::Leaf(leaf) => Ok(leaf),
            other => Err(ServerError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    /// The intentions of `namespace` and where its services' proxies listen.
    pub async fn mesh_view(&self, namespace: &str) -> Result<MeshView, ServerError> {
        let request = MeshRequest::View {
            namespace: namespace.into(),
        };
        match self.route_mesh(request).await? {
            MeshReply::View(view) => Ok(view),
            other => Err(ServerError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    /// Creates or replaces the intention of its namespace, source and destination.
    pub async fn upsert_intention(&self, intention: Intention) -> Result<u64, ServerError> {
        match self
            .route_mesh(MeshRequest::UpsertIntention { intention })
            .await?
        {
            MeshReply::Index(i) => Ok(i),
            other => Err(ServerError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    pub async fn delete_intention(
        &self,
        namespace: &str,
        source: &str,
        destination: &str,
    ) -> Result<u64, ServerError> {
        let request = MeshRequest::DeleteIntention {
            namespace: namespace.into(),
            source: source.into(),
            destination: destination.into(),
        };
        match self.route_mesh(request).await? {
            MeshReply::Index(i) => Ok(i),
            other => Err(ServerError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    /// On the leader.
    pub(crate) async fn execute_mesh(&self, request: MeshRequest) -> Result<Reply, ServerError> {
        let reply = match request {
            MeshRequest::SignLeaf {
                node_id,
                alloc_id,
                task,
            } => MeshReply::Leaf(self.sign_leaf_here(&node_id, &alloc_id, &task).await?),
            MeshRequest::View { namespace } => MeshReply::View(self.view_here(&namespace)),
            MeshRequest::UpsertIntention { mut intention } => {
                if intention.namespace.is_empty() {
                    intention.namespace = drover_structs::DEFAULT_NAMESPACE.into();
                }
                intention.validate().map_err(ServerError::BadRequest)?;
                if self.snapshot().namespace(&intention.namespace).is_none() {
                    return Err(ServerError::BadRequest(format!(
                        "namespace {:?} does not exist",
                        intention.namespace
                    )));
                }
                let entry = MeshEntry::IntentionUpsert { intention };
                MeshReply::Index(self.inner.apply(LogEntry::Mesh(entry)).await?)
            }
            MeshRequest::DeleteIntention {
                namespace,
                source,
                destination,
            } => {
                let namespace = if namespace.is_empty() {
                    drover_structs::DEFAULT_NAMESPACE.to_string()
                } else {
                    namespace
                };
                let exists = self
                    .snapshot()
                    .intentions(Some(&namespace))
                    .iter()
                    .any(|i| i.source_name == source && i.destination_name == destination);
                if !exists {
                    return Err(ServerError::NotFound(format!(
                        "intention {source} => {destination} not found in namespace {namespace:?}"
                    )));
                }
                let entry = MeshEntry::IntentionDelete {
                    namespace,
                    source,
                    destination,
                };
                MeshReply::Index(self.inner.apply(LogEntry::Mesh(entry)).await?)
            }
        };
        Ok(Reply::Mesh(reply))
    }

    /// The stored CA, made first when there is none.
    async fn mesh_ca(&self) -> Result<std::sync::Arc<MeshCa>, ServerError> {
        if let Some(ca) = self.snapshot().mesh_ca() {
            return Ok(ca);
        }
        let trust_domain = format!("{}.drover", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let pem = drover_tls::mesh::ca(&trust_domain)
            .map_err(|e| ServerError::Internal(format!("making the mesh CA: {e}")))?;
        let ca = MeshCa {
            trust_domain,
            cert_pem: pem.cert,
            key_pem: pem.key,
            create_index: 0,
        };
        self.inner
            .apply(LogEntry::Mesh(MeshEntry::CaInit { ca }))
            .await?;
        self.snapshot()
            .mesh_ca()
            .ok_or_else(|| ServerError::Internal("the mesh CA was not stored".into()))
    }

    async fn sign_leaf_here(
        &self,
        node_id: &str,
        alloc_id: &str,
        task: &str,
    ) -> Result<MeshLeaf, ServerError> {
        let snap = self.snapshot();
        let alloc = snap
            .alloc(alloc_id)
            .filter(|a| a.node_id == node_id)
            .ok_or_else(|| {
                ServerError::BadRequest(format!(
                    "allocation {alloc_id} does not run on node {node_id}"
                ))
            })?;
        let kind = alloc
            .job
            .as_ref()
            .and_then(|j| j.lookup_task_group(&alloc.task_group))
            .and_then(|g| g.tasks.iter().find(|t| t.name == task))
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        let service = identity_service(&kind).ok_or_else(|| {
            ServerError::BadRequest(format!(
                "task {task:?} of allocation {alloc_id} has no mesh identity (its kind is {kind:?})"
            ))
        })?;
        let ca = self.mesh_ca().await?;
        let identity = drover_mesh_identity(&ca.trust_domain, &alloc.namespace, service);
        let ca_pem = drover_tls::generate::Pem {
            cert: ca.cert_pem.clone(),
            key: ca.key_pem.clone(),
        };
        let leaf = drover_tls::mesh::leaf(&ca_pem, &identity.0, &identity.1, LEAF_HOURS)
            .map_err(|e| ServerError::Internal(format!("signing a mesh certificate: {e}")))?;
        Ok(MeshLeaf {
            trust_domain: ca.trust_domain.clone(),
            namespace: alloc.namespace.clone(),
            service: service.to_string(),
            expires: drover_tls::mesh::not_after(&leaf.cert).unwrap_or(0),
            cert_pem: leaf.cert,
            key_pem: leaf.key,
            ca_pem: ca.cert_pem.clone(),
        })
    }

    fn view_here(&self, namespace: &str) -> MeshView {
        let snap = self.snapshot();
        let mut endpoints: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in snap.service_registrations(Some(namespace)) {
            if let Some(service) = r.service_name.strip_suffix("-sidecar-proxy") {
                endpoints
                    .entry(service.to_string())
                    .or_default()
                    .push(format!("{}:{}", r.address, r.port));
            }
        }
        MeshView {
            intentions: snap
                .intentions(Some(namespace))
                .iter()
                .map(|i| (**i).clone())
                .collect(),
            endpoints,
            index: snap.latest_index(),
        }
    }
}

/// The SPIFFE ID and DNS name of a service's identity (drover-mesh's `Identity` layout; the
/// servers do not link the proxy).
fn drover_mesh_identity(trust_domain: &str, namespace: &str, service: &str) -> (String, String) {
    (
        format!("spiffe://{trust_domain}/ns/{namespace}/svc/{service}"),
        format!("{service}.{namespace}.{trust_domain}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_server::start_leading;

    #[test]
    fn identities_come_from_task_kinds_only() {
        assert_eq!(identity_service("connect-proxy:api"), Some("api"));
        assert_eq!(identity_service("connect-native:db"), Some("db"));
        assert_eq!(identity_service("connect-proxy:"), None);
        assert_eq!(identity_service(""), None);
        assert_eq!(identity_service("connect-ingress:gw"), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn intentions_are_validated_stored_and_deleted_through_the_leader() {
        let s = start_leading().await;
        let i = Intention {
            source_name: "api".into(),
            destination_name: "db".into(),
            action: "deny".into(),
            ..Default::default()
        };
        s.upsert_intention(i.clone()).await.unwrap();
        let view = s.mesh_view("default").await.unwrap();
        assert_eq!(view.intentions.len(), 1);
        assert_eq!(view.intentions[0].namespace, "default");
        let bad = Intention {
            action: "perhaps".into(),
            ..i.clone()
        };
        assert!(matches!(
            s.upsert_intention(bad).await,
            Err(ServerError::BadRequest(_))
        ));
        s.delete_intention("default", "api", "db").await.unwrap();
        assert!(matches!(
            s.delete_intention("default", "api", "db").await,
            Err(ServerError::NotFound(_))
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leaf_is_signed_only_for_a_task_kind_of_an_allocation_on_the_asking_node() {
        let s = start_leading().await;
        let e = s.sign_mesh_leaf("n1", "nope", "t").await.unwrap_err();
        assert!(e.to_string().contains("does not run on node"), "{e}");
    }
}
