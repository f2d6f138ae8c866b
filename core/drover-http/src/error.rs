//! Errors as Nomad answers them: a status code and a plain-text body with the message.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_server::ServerError;
use drover_structs::decode::DecodeError;

use crate::response::QueryMeta;

/// An error answer. Reads that fail after looking at the state (a job that is not there) carry
/// the query meta, so clients still see the index headers, as Nomad sends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub meta: Option<QueryMeta>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            meta: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// A Nomad endpoint Drover does not serve yet.
    pub fn not_implemented(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("{what} is not implemented by Drover yet"),
        )
    }

    pub fn with_meta(mut self, meta: QueryMeta) -> Self {
        self.meta = Some(meta);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.message,
        )
            .into_response();
        if let Some(meta) = self.meta {
            meta.apply(response.headers_mut());
        }
        response
    }
}

impl From<ServerError> for ApiError {
    fn from(e: ServerError) -> Self {
        let status = match &e {
            ServerError::Validation(_) | ServerError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServerError::NotFound(_) => StatusCode::NOT_FOUND,
            ServerError::Conflict(_) => StatusCode::CONFLICT,
            ServerError::Forbidden(_) => StatusCode::FORBIDDEN,
            ServerError::NoLeader | ServerError::Raft(_) | ServerError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        let message = match &e {
            // Nomad's exact text (structs.ErrNoLeader); clients match on it.
            ServerError::NoLeader => "No cluster leader".to_string(),
            other => other.to_string(),
        };
        ApiError::new(status, message)
    }
}

impl From<DecodeError> for ApiError {
    /// `failed to decode Job: TaskGroups[0].Count: invalid type: ...`
    fn from(e: DecodeError) -> Self {
        ApiError::bad_request(format!("failed to decode {e}"))
    }
}

/// Unknown paths, with the text Go's HTTP mux answers them with.
pub(crate) async fn not_found_fallback() -> ApiError {
    ApiError::not_found("404 page not found")
}

/// A known path asked with a method it does not take (Nomad's `ErrInvalidMethod`).
pub(crate) async fn method_not_allowed_fallback() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Invalid method")
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::MultiError;

    #[test]
    fn server_errors_map_to_nomads_status_codes() {
        let mut m = MultiError::new();
        m.push("Missing job ID");
        let cases = [
            (ServerError::Validation(m), StatusCode::BAD_REQUEST),
            (ServerError::BadRequest("x".into()), StatusCode::BAD_REQUEST),
            (
                ServerError::NotFound("job not found".into()),
                StatusCode::NOT_FOUND,
            ),
            (ServerError::Conflict("index".into()), StatusCode::CONFLICT),
            (ServerError::NoLeader, StatusCode::INTERNAL_SERVER_ERROR),
            (
                ServerError::Internal("x".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ];
        for (err, status) in cases {
            assert_eq!(ApiError::from(err).status, status);
        }
        assert_eq!(
            ApiError::from(ServerError::NoLeader).message,
            "No cluster leader"
        );
    }

    #[test]
    fn validation_error_text_is_the_multi_error() {
        let mut m = MultiError::new();
        m.push("Missing job ID");
        m.push("Missing job datacenters");
        let e = ApiError::from(ServerError::Validation(m));
        assert_eq!(
            e.message,
            "2 errors occurred:\n\t* Missing job ID\n\t* Missing job datacenters\n\n"
        );
    }
}
