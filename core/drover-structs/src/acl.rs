//! ACL policies and tokens in Nomad's JSON shapes (`ACLPolicy`, `ACLToken` and their list
//! stubs). The policy language itself is parsed and evaluated by the server.

use serde::{Deserialize, Serialize};

/// Nomad's token types.
pub const ACL_TOKEN_CLIENT: &str = "client";
pub const ACL_TOKEN_MANAGEMENT: &str = "management";
/// The policy that applies to requests without a token.
pub const ANONYMOUS_POLICY: &str = "anonymous";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclPolicy {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    /// The policy in Nomad's policy language (HCL, or JSON).
    #[serde(rename = "Rules")]
    pub rules: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclPolicyListStub {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl AclPolicy {
    pub fn stub(&self) -> AclPolicyListStub {
        AclPolicyListStub {
            name: self.name.clone(),
            description: self.description.clone(),
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }

    /// Nomad's `ACLPolicy.Validate` for the name and description (the rules are checked by
    /// parsing them).
    pub fn validate_name(&self) -> Result<(), String> {
        let valid = !self.name.is_empty()
            && self.name.len() <= 128
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !valid {
            return Err(format!(
                "invalid name {:?}: must match regex ^[a-zA-Z0-9-]{{1,128}}$",
                self.name
            ));
        }
        if self.description.len() > 256 {
            return Err("description longer than 256".to_string());
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AclToken {
    #[serde(rename = "AccessorID")]
    pub accessor_id: String,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    /// "client" or "management".
    #[serde(rename = "Type")]
    pub token_type: String,
    #[serde(rename = "Policies")]
    pub policies: Option<Vec<String>>,
    #[serde(rename = "Global")]
    pub global: bool,
    /// RFC 3339.
    #[serde(rename = "CreateTime")]
    pub create_time: String,
    /// RFC 3339; `None`: never expires.
    #[serde(rename = "ExpirationTime")]
    pub expiration_time: Option<String>,
    /// Nanoseconds (Go's duration): sets `ExpirationTime` at creation.
    #[serde(rename = "ExpirationTTL")]
    pub expiration_ttl: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclTokenListStub {
    #[serde(rename = "AccessorID")]
    pub accessor_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Type")]
    pub token_type: String,
    #[serde(rename = "Policies")]
    pub policies: Option<Vec<String>>,
    #[serde(rename = "Global")]
    pub global: bool,
    #[serde(rename = "CreateTime")]
    pub create_time: String,
    #[serde(rename = "ExpirationTime")]
    pub expiration_time: Option<String>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

impl AclToken {
    pub fn stub(&self) -> AclTokenListStub {
        AclTokenListStub {
            accessor_id: self.accessor_id.clone(),
            name: self.name.clone(),
            token_type: self.token_type.clone(),
            policies: self.policies.clone(),
            global: self.global,
            create_time: self.create_time.clone(),
            expiration_time: self.expiration_time.clone(),
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }

    pub fn is_management(&self) -> bool {
        self.token_type == ACL_TOKEN_MANAGEMENT
    }

    /// Whether the token has expired at `now` (unix nanoseconds). An expiration time that
    /// cannot be read counts as past: a token fails closed.
    pub fn expired_at(&self, now: i64) -> bool {
        match self.expiration_time.as_deref().filter(|t| !t.is_empty()) {
            None => false,
            Some(t) => crate::time::parse_rfc3339_nanos(t).is_none_or(|at| at <= now),
        }
    }

    /// Nomad's `ACLToken.Validate`: a type Nomad knows, policies only on client tokens.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.len() > 256 {
            return Err("token name too long".to_string());
        }
        match self.token_type.as_str() {
            ACL_TOKEN_CLIENT => {
                if self.policies.as_deref().unwrap_or_default().is_empty() {
                    return Err("client token missing policies".to_string());
                }
            }
            ACL_TOKEN_MANAGEMENT => {
                if !self.policies.as_deref().unwrap_or_default().is_empty() {
                    return Err("management token cannot be associated with policies".to_string());
                }
            }
            _ => return Err("token type must be client or management".to_string()),
        }
        if self.expiration_ttl < 0 {
            return Err("token expiration TTL must be positive".to_string());
        }
        if let Some(t) = self.expiration_time.as_deref().filter(|t| !t.is_empty())
            && crate::time::parse_rfc3339_nanos(t).is_none()
        {
            return Err(format!(
                "ExpirationTime {t:?} is not an RFC 3339 time (such as 2026-12-31T23:59:59Z)"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_token(expiration: Option<&str>) -> AclToken {
        AclToken {
            token_type: ACL_TOKEN_CLIENT.into(),
            policies: Some(vec!["p".into()]),
            expiration_time: expiration.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn a_token_expires_at_its_time_and_an_unreadable_time_fails_closed() {
        let at = crate::time::parse_rfc3339_nanos("2026-01-01T00:00:00Z").unwrap();
        let t = client_token(Some("2026-01-01T00:00:00Z"));
        assert!(!t.expired_at(at - 1));
        assert!(t.expired_at(at));
        assert!(!client_token(None).expired_at(at));
        let garbled = client_token(Some("next tuesday"));
        assert!(garbled.expired_at(0));
        let e = garbled.validate().unwrap_err();
        assert!(e.contains("ExpirationTime \"next tuesday\""), "{e}");
        client_token(Some("2030-01-01T00:00:00.5Z"))
            .validate()
            .unwrap();
    }
}
