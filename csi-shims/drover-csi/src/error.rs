//! What a CSI call can fail with. Every variant names the RPC; plugin errors keep the gRPC
//! code so that callers can act on it (NOT_FOUND, ALREADY_EXISTS, ...).

use std::path::PathBuf;

/// gRPC status codes, re-exported so that callers need no gRPC crate to match on them.
pub use tonic::Code;

#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    #[error("connecting to CSI plugin socket {}: {message}", path.display())]
    Connect { path: PathBuf, message: String },

    /// The plugin (or the transport, for UNAVAILABLE and DEADLINE_EXCEEDED) answered with a
    /// status; `attempts` counts the tries, retries included.
    #[error("CSI {rpc} failed with {} after {attempts} attempt(s): {message}", code_name(*code))]
    Rpc {
        rpc: &'static str,
        code: Code,
        message: String,
        attempts: u32,
    },

    /// Refused before sending: the request cannot be put on the wire as given.
    #[error("CSI {rpc}: invalid request: {reason}")]
    InvalidRequest { rpc: &'static str, reason: String },

    /// The plugin answered OK with something the spec does not allow (a missing REQUIRED
    /// field, ...).
    #[error("CSI {rpc}: invalid answer from the plugin: {reason}")]
    InvalidResponse { rpc: &'static str, reason: String },

    /// `ValidateVolumeCapabilities` answered without confirming every capability asked for.
    #[error("CSI {rpc}: volume capabilities not confirmed: {message}")]
    NotConfirmed { rpc: &'static str, message: String },
}

impl CsiError {
    /// The gRPC code the plugin answered with, if the failure is a plugin's status.
    pub fn code(&self) -> Option<Code> {
        match self {
            CsiError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The RPC that failed (`"Connect"` for the connection itself).
    pub fn rpc(&self) -> &'static str {
        match self {
            CsiError::Connect { .. } => "Connect",
            CsiError::Rpc { rpc, .. }
            | CsiError::InvalidRequest { rpc, .. }
            | CsiError::InvalidResponse { rpc, .. }
            | CsiError::NotConfirmed { rpc, .. } => rpc,
        }
    }
}

/// The spec's name of a code (`NOT_FOUND`), as CSI documents errors.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_error_text_names_the_rpc_and_the_code() {
        let e = CsiError::Rpc {
            rpc: "CreateVolume",
            code: Code::AlreadyExists,
            message: "size differs".into(),
            attempts: 1,
        };
        let text = e.to_string();
        assert!(text.contains("CreateVolume"), "{text}");
        assert!(text.contains("ALREADY_EXISTS"), "{text}");
        assert!(text.contains("size differs"), "{text}");
        assert_eq!(e.code(), Some(Code::AlreadyExists));
        assert_eq!(e.rpc(), "CreateVolume");
    }
}
