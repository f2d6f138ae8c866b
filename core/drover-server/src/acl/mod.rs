//! ACLs (Nomad's ACL system): policies in Nomad's policy language (`policy`), tokens that
//! carry them, the bootstrap of the first management token (and its reset through the
//! `acl-bootstrap-reset` file in the data dir), and resolving a request's secret to the
//! permissions it is checked against. Policies and tokens are Raft-replicated state; every
//! write goes through the leader.
//!
//! Tokens are resolved against this server's state on every request (no cache to go stale:
//! a revoked token stops working at once on the servers that applied the revocation).

pub mod policy;

use std::sync::Arc;

use drover_state::StateSnapshot;
use drover_structs::time::{format_rfc3339_nanos, now_nanos};
use drover_structs::{
    ACL_TOKEN_CLIENT, ACL_TOKEN_MANAGEMENT, ANONYMOUS_POLICY, AclPolicy, AclToken, generate_id,
};
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::rpc::{Reply, Request};
use crate::server::Server;
pub use policy::Acl;

/// Nomad's texts.
pub const PERMISSION_DENIED: &str = "Permission denied";
pub const TOKEN_NOT_FOUND: &str = "ACL token not found";
pub const TOKEN_EXPIRED: &str = "ACL token expired";

/// The file whose content (a bootstrap index) lets the bootstrap run again (Nomad's
/// `acl-bootstrap-reset`).
pub const BOOTSTRAP_RESET_FILE: &str = "acl-bootstrap-reset";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AclRequest {
    Bootstrap { secret: Option<String> },
    UpsertPolicies { policies: Vec<AclPolicy> },
    DeletePolicy { name: String },
    UpsertToken { token: AclToken },
    DeleteToken { accessor: String },
}

/// What a request is allowed: everything (ACLs off), or what its token's policies grant.
#[derive(Debug, Clone)]
pub enum Permissions {
    Unrestricted,
    Acl(Arc<Acl>),
}

impl Permissions {
    pub fn is_management(&self) -> bool {
        match self {
            Permissions::Unrestricted => true,
            Permissions::Acl(a) => a.is_management(),
        }
    }

    pub fn acl(&self) -> Option<&Acl> {
        match self {
            Permissions::Unrestricted => None,
            Permissions::Acl(a) => Some(a),
        }
    }

    /// The namespace capability `cap` in `ns`.
    pub fn namespace_op(&self, ns: &str, cap: &str) -> bool {
        self.acl()
            .is_none_or(|a| a.allow_namespace_operation(ns, cap))
    }
}

/// The permissions of `token`'s policies (missing policies grant nothing).
fn compile(snap: &StateSnapshot, token: &AclToken) -> Result<Acl, ServerError> {
    if token.is_management() {
        return Ok(Acl::management());
    }
    let mut policies = Vec::new();
    for name in token.policies.as_deref().unwrap_or_default() {
        if let Some(p) = snap.acl_policy(name) {
            let parsed = policy::parse_policy(&p.rules).map_err(|e| {
                ServerError::Internal(format!("stored policy {name:?} does not parse: {e}"))
            })?;
            policies.push(parsed);
        }
    }
    Ok(Acl::from_policies(&policies))
}

impl Server {
    pub fn acl_enabled(&self) -> bool {
        self.inner.config.acl_enabled
    }

    /// What a request carrying `secret` (or none) may do: unrestricted with ACLs off; the
    /// anonymous policy without a token; 403 for an unknown or expired token.
    pub fn resolve_token(&self, secret: Option<&str>) -> Result<Permissions, ServerError> {
        if !self.acl_enabled() {
            return Ok(Permissions::Unrestricted);
        }
        let snap = self.snapshot();
        let token = match secret.filter(|s| !s.is_empty()) {
            None => AclToken {
                token_type: ACL_TOKEN_CLIENT.into(),
                policies: Some(vec![ANONYMOUS_POLICY.into()]),
                ..Default::default()
            },
            Some(secret) => {
                let token = snap
                    .acl_token_by_secret(secret)
                    .ok_or_else(|| ServerError::Forbidden(TOKEN_NOT_FOUND.into()))?;
                if token.expired_at(now_nanos()) {
                    return Err(ServerError::Forbidden(TOKEN_EXPIRED.into()));
                }
                (*token).clone()
            }
        };
        Ok(Permissions::Acl(Arc::new(compile(&snap, &token)?)))
    }

    /// The token `secret` names (`/v1/acl/token/self`).
    pub fn token_of_secret(&self, secret: Option<&str>) -> Result<Arc<AclToken>, ServerError> {
        if !self.acl_enabled() {
            return Err(ServerError::BadRequest("ACL support disabled".into()));
        }
        let token = secret
            .filter(|s| !s.is_empty())
            .and_then(|s| self.snapshot().acl_token_by_secret(s))
            .ok_or_else(|| ServerError::Forbidden(TOKEN_NOT_FOUND.into()))?;
        if token.expired_at(now_nanos()) {
            return Err(ServerError::Forbidden(TOKEN_EXPIRED.into()));
        }
        Ok(token)
    }

    fn require_acls(&self) -> Result<(), ServerError> {
        if self.acl_enabled() {
            Ok(())
        } else {
            Err(ServerError::BadRequest("ACL support disabled".into()))
        }
    }

    /// Nomad's `acl bootstrap`: the first management token, once (again only when the reset
    /// file holds the current bootstrap index).
    pub async fn acl_bootstrap(&self, secret: Option<String>) -> Result<AclToken, ServerError> {
        self.require_acls()?;
        match self
            .route(Request::Acl(AclRequest::Bootstrap { secret }))
            .await?
        {
            Reply::AclToken(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }

    pub async fn upsert_acl_policies(&self, policies: Vec<AclPolicy>) -> Result<u64, ServerError> {
        self.require_acls()?;
        if policies.is_empty() {
            return Err(ServerError::BadRequest(
                "must specify as least one policy".into(),
            ));
        }
        for p in &policies {
            p.validate_name()
                .map_err(|e| ServerError::BadRequest(format!("policy {}", e)))?;
            policy::parse_policy(&p.rules)
                .map_err(|e| ServerError::BadRequest(format!("failed to parse rules: {e}")))?;
        }
        self.acl_index(AclRequest::UpsertPolicies { policies })
            .await
    }

    pub async fn delete_acl_policy(&self, name: &str) -> Result<u64, ServerError> {
        self.require_acls()?;
        self.acl_index(AclRequest::DeletePolicy { name: name.into() })
            .await
    }

    /// Creates (no accessor id) or updates a token; answers it with its secret.
    pub async fn upsert_acl_token(&self, token: AclToken) -> Result<AclToken, ServerError> {
        self.require_acls()?;
        match self
            .route(Request::Acl(AclRequest::UpsertToken { token }))
            .await?
        {
            Reply::AclToken(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }

    pub async fn delete_acl_token(&self, accessor: &str) -> Result<u64, ServerError> {
        self.require_acls()?;
        self.acl_index(AclRequest::DeleteToken {
            accessor: accessor.into(),
        })
        .await
    }

    async fn acl_index(&self, request: AclRequest) -> Result<u64, ServerError> {
        match self.route(Request::Acl(request)).await? {
            Reply::Index(i) => Ok(i),
            other => Err(unexpected(other)),
        }
    }

    /// On the leader.
    pub(crate) async fn execute_acl(&self, request: AclRequest) -> Result<Reply, ServerError> {
        let snap = self.snapshot();
        match request {
            AclRequest::Bootstrap { secret } => {
                let done = snap.acl_bootstrap_index();
                if done != 0 {
                    let reset = std::fs::read_to_string(
                        self.inner.config.data_dir.join(BOOTSTRAP_RESET_FILE),
                    )
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok());
                    if reset != Some(done) {
                        return Err(ServerError::BadRequest(format!(
                            "ACL bootstrap already done (reset index: {done})"
                        )));
                    }
                }
                let token = AclToken {
                    accessor_id: generate_id(),
                    secret_id: secret.filter(|s| !s.is_empty()).unwrap_or_else(generate_id),
                    name: "Bootstrap Token".into(),
                    token_type: ACL_TOKEN_MANAGEMENT.into(),
                    global: true,
                    create_time: format_rfc3339_nanos(now_nanos()),
                    ..Default::default()
                };
                self.inner
                    .apply(LogEntry::AclBootstrap {
                        token: token.clone(),
                    })
                    .await?;
                let stored = self.snapshot().acl_token(&token.accessor_id);
                Ok(Reply::AclToken(stored.map_or(token, |t| (*t).clone())))
            }
            AclRequest::UpsertPolicies { policies } => Ok(Reply::Index(
                self.inner
                    .apply(LogEntry::AclPolicyUpsert { policies })
                    .await?,
            )),
            AclRequest::DeletePolicy { name } => {
                if snap.acl_policy(&name).is_none() {
                    return Err(ServerError::NotFound("ACL policy not found".into()));
                }
                Ok(Reply::Index(
                    self.inner
                        .apply(LogEntry::AclPolicyDelete { names: vec![name] })
                        .await?,
                ))
            }
            AclRequest::UpsertToken { mut token } => {
                if token.token_type.is_empty() {
                    token.token_type = ACL_TOKEN_CLIENT.into();
                }
                token.validate().map_err(ServerError::BadRequest)?;
                for p in token.policies.as_deref().unwrap_or_default() {
                    if snap.acl_policy(p).is_none() {
                        return Err(ServerError::BadRequest(format!(
                            "policy {p:?} does not exist"
                        )));
                    }
                }
                if token.accessor_id.is_empty() {
                    let now = now_nanos();
                    token.accessor_id = generate_id();
                    token.secret_id = generate_id();
                    token.create_time = format_rfc3339_nanos(now);
                    if token.expiration_ttl > 0 {
                        token.expiration_time =
                            Some(format_rfc3339_nanos(now + token.expiration_ttl));
                    }
                } else {
                    let Some(existing) = snap.acl_token(&token.accessor_id) else {
                        return Err(ServerError::NotFound("ACL token not found".into()));
                    };
                    if existing.token_type != token.token_type {
                        return Err(ServerError::BadRequest("cannot change token type".into()));
                    }
                    token.expiration_time.clone_from(&existing.expiration_time);
                }
                self.inner
                    .apply(LogEntry::AclTokenUpsert {
                        tokens: vec![token.clone()],
                    })
                    .await?;
                let stored = self.snapshot().acl_token(&token.accessor_id);
                Ok(Reply::AclToken(stored.map_or(token, |t| (*t).clone())))
            }
            AclRequest::DeleteToken { accessor } => {
                if snap.acl_token(&accessor).is_none() {
                    return Err(ServerError::NotFound("ACL token not found".into()));
                }
                Ok(Reply::Index(
                    self.inner
                        .apply(LogEntry::AclTokenDelete {
                            accessors: vec![accessor],
                        })
                        .await?,
                ))
            }
        }
    }
}

fn unexpected(reply: Reply) -> ServerError {
    ServerError::Internal(format!("unexpected endpoint reply: {reply:?}"))
}
