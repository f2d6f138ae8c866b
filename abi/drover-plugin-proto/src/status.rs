//! Nomad's recoverable errors: a plugin whose StartTask (or TaskStats) fails answers a gRPC
//! status with code FailedPrecondition whose details (`grpc-status-details-bin`, a
//! `google.rpc.Status`) hold one `RecoverableError` saying whether a retry may succeed.

use prost::Message;

use crate::rpc_status::Status as RpcStatus;
use crate::structs::RecoverableError;

/// The `Any` type URL of Nomad's RecoverableError.
pub const RECOVERABLE_ERROR_TYPE_URL: &str =
    "type.googleapis.com/hashicorp.nomad.plugins.shared.structs.RecoverableError";

/// A FailedPrecondition status carrying a RecoverableError, as Nomad's plugins send it.
pub fn recoverable_status(message: impl Into<String>, recoverable: bool) -> tonic::Status {
    let message = message.into();
    let details = RpcStatus {
        code: tonic::Code::FailedPrecondition as i32,
        message: message.clone(),
        details: vec![prost_types::Any {
            type_url: RECOVERABLE_ERROR_TYPE_URL.to_string(),
            value: RecoverableError { recoverable }.encode_to_vec(),
        }],
    };
    tonic::Status::with_details(
        tonic::Code::FailedPrecondition,
        message,
        details.encode_to_vec().into(),
    )
}

/// The RecoverableError flag a status carries, if any.
pub fn recoverable(status: &tonic::Status) -> Option<bool> {
    let details = RpcStatus::decode(status.details()).ok()?;
    details
        .details
        .iter()
        .find(|any| {
            any.type_url
                .ends_with("hashicorp.nomad.plugins.shared.structs.RecoverableError")
        })
        .and_then(|any| RecoverableError::decode(any.value.as_slice()).ok())
        .map(|e| e.recoverable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recoverable_flag_survives_the_status_details() {
        let s = recoverable_status("image pull failed", true);
        assert_eq!(s.code(), tonic::Code::FailedPrecondition);
        assert_eq!(s.message(), "image pull failed");
        assert_eq!(recoverable(&s), Some(true));
        assert_eq!(recoverable(&recoverable_status("bad", false)), Some(false));
        assert_eq!(recoverable(&tonic::Status::internal("x")), None);
    }
}
