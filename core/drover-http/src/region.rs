//! `?region=`: a request naming another region than this server's is passed whole to a
//! server of that region (through a tunnel to its API) and answered with its answer, as
//! Nomad forwards RPCs across regions. A region no server knows gets Nomad's "No path to
//! region".

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::client_api::{self, TunnelOpener, Upstream};
use crate::error::ApiError;

/// What the layer needs: the server (its region and its view of the others) and the tunnels.
#[derive(Clone)]
pub(crate) struct RegionRouting {
    pub server: drover_server::Server,
    pub tunnels: Arc<dyn TunnelOpener>,
}

/// The `region` query parameter, percent-decoded; `None` when absent or empty (or when the
/// query does not decode: the handler reports that).
fn requested_region(query: Option<&str>) -> Option<String> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query?).ok()?;
    pairs
        .into_iter()
        .find(|(k, _)| k == "region")
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

pub(crate) async fn layer(
    State(r): State<RegionRouting>,
    request: Request,
    next: Next,
) -> Response {
    let Some(region) = requested_region(request.uri().query()) else {
        return next.run(request).await;
    };
    if region == r.server.region() {
        return next.run(request).await;
    }
    if r.server.region_servers(&region).is_empty() {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            drover_server::federation::NO_REGION_PATH,
        )
        .into_response();
    }
    client_api::forward(r.tunnels.as_ref(), Upstream::Region(region), request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_parameter_is_read_decoded_and_empty_means_none() {
        assert_eq!(requested_region(None), None);
        assert_eq!(requested_region(Some("prefix=a")), None);
        assert_eq!(requested_region(Some("region=")), None);
        assert_eq!(
            requested_region(Some("index=3&region=eu%2Dwest")).as_deref(),
            Some("eu-west")
        );
    }
}
