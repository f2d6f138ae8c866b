//! ACL policies and tokens: written only through the FSM. Tokens are found by accessor id
//! (the API's handle) and by secret id (what requests carry).

use std::sync::Arc;

use drover_structs::{AclPolicy, AclToken};

use crate::store::StateStore;
use crate::tables::{StateSnapshot, Table};

impl StateStore {
    pub fn upsert_acl_policies(&self, index: u64, policies: Vec<AclPolicy>) {
        self.write(index, &[Table::AclPolicies], |t| {
            for mut p in policies {
                p.create_index = t
                    .acl_policies
                    .get(&p.name)
                    .map_or(index, |old| old.create_index);
                p.modify_index = index;
                t.acl_policies.insert(p.name.clone(), Arc::new(p));
            }
        })
    }

    pub fn delete_acl_policies(&self, index: u64, names: &[String]) {
        self.write(index, &[Table::AclPolicies], |t| {
            for n in names {
                t.acl_policies.remove(n);
            }
        })
    }

    /// Stores tokens (their secret may not change: an update keeps the stored one).
    pub fn upsert_acl_tokens(&self, index: u64, tokens: Vec<AclToken>) {
        self.write(index, &[Table::AclTokens], |t| {
            for mut tok in tokens {
                match t.acl_tokens.get(&tok.accessor_id) {
                    Some(old) => {
                        tok.create_index = old.create_index;
                        tok.secret_id.clone_from(&old.secret_id);
                        tok.create_time.clone_from(&old.create_time);
                    }
                    None => tok.create_index = index,
                }
                tok.modify_index = index;
                t.acl_tokens_by_secret
                    .insert(tok.secret_id.clone(), tok.accessor_id.clone());
                t.acl_tokens.insert(tok.accessor_id.clone(), Arc::new(tok));
            }
        })
    }

    pub fn delete_acl_tokens(&self, index: u64, accessors: &[String]) {
        self.write(index, &[Table::AclTokens], |t| {
            for a in accessors {
                if let Some(tok) = t.acl_tokens.remove(a) {
                    t.acl_tokens_by_secret.remove(&tok.secret_id);
                }
            }
        })
    }

    /// The bootstrap: the first management token, and the index that makes it done.
    pub fn acl_bootstrap(&self, index: u64, token: AclToken) {
        self.upsert_acl_tokens(index, vec![token]);
        self.write(index, &[Table::AclTokens], |t| {
            t.acl_bootstrap_index = index;
        })
    }
}

impl StateSnapshot {
    pub fn acl_policy(&self, name: &str) -> Option<Arc<AclPolicy>> {
        self.t.acl_policies.get(name).cloned()
    }

    pub fn acl_policies(&self, prefix: &str) -> Vec<Arc<AclPolicy>> {
        self.t
            .acl_policies
            .values()
            .filter(|p| p.name.starts_with(prefix))
            .cloned()
            .collect()
    }

    pub fn acl_token(&self, accessor: &str) -> Option<Arc<AclToken>> {
        self.t.acl_tokens.get(accessor).cloned()
    }

    pub fn acl_token_by_secret(&self, secret: &str) -> Option<Arc<AclToken>> {
        let accessor = self.t.acl_tokens_by_secret.get(secret)?;
        self.t.acl_tokens.get(accessor).cloned()
    }

    /// Tokens whose accessor id starts with `prefix`.
    pub fn acl_tokens(&self, prefix: &str) -> Vec<Arc<AclToken>> {
        self.t
            .acl_tokens
            .values()
            .filter(|t| t.accessor_id.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// The index of the ACL bootstrap, 0 before it.
    pub fn acl_bootstrap_index(&self) -> u64 {
        self.t.acl_bootstrap_index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_found_by_secret_and_keep_it_across_updates() {
        let s = StateStore::new();
        let tok = AclToken {
            accessor_id: "a1".into(),
            secret_id: "s1".into(),
            name: "one".into(),
            token_type: "client".into(),
            ..Default::default()
        };
        s.acl_bootstrap(4, tok.clone());
        assert_eq!(s.snapshot().acl_bootstrap_index(), 4);
        s.upsert_acl_tokens(
            6,
            vec![AclToken {
                secret_id: "changed".into(),
                name: "renamed".into(),
                ..tok
            }],
        );
        let snap = s.snapshot();
        let got = snap.acl_token_by_secret("s1").expect("by secret");
        assert_eq!(
            (got.name.as_str(), got.create_index, got.modify_index),
            ("renamed", 4, 6)
        );
        assert!(snap.acl_token_by_secret("changed").is_none());
        s.delete_acl_tokens(7, &["a1".into()]);
        assert!(s.snapshot().acl_token_by_secret("s1").is_none());
    }
}
