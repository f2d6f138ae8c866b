//! drover-ui: the web UI at `/ui`, served by the agent itself.
//!
//! Pages are rendered on the server (maud templates, checked at compile time) from the agent's
//! own `/v1` API, called in process with the browser's token ([`api::Api`]): a page shows
//! what the API shows and is refused what the API refuses. The token lives in the browser's
//! `localStorage` and travels only as the `X-Nomad-Token` header of the script's requests
//! (a navigation renders the anonymous view, which the script replaces by the page read with
//! the token). Live parts update without a reload by one long poll at a time: the page's
//! script asks for the page again with the signed list of what it watched, the server waits
//! on those blocking queries and answers the re-rendered live sections (see [`live`]).
//! Actions are buttons whose script calls the `/v1` API directly with the token, so they
//! need the same ACL capability an API client needs.
//!
//! Must not depend on: any Drover crate. It knows the API only as HTTP and JSON, which keeps
//! it honest about the API's shape and lets it run on any agent (server or client-only).

mod api;
mod assets;
mod fmt;
mod live;
mod page;
mod pages;

use axum::Router;
use axum::response::Redirect;
use axum::routing::get;

pub use api::{Api, ApiError};

/// The UI's routes (`/ui/...`, and `/` redirecting to it), reading through `api`: the router
/// of the agent's `/v1` API. Merge them beside that router.
pub fn routes(api: Router) -> Router {
    let ui = page::Ui::new(Api::new(api));
    Router::new()
        .route("/", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui", get(|| async { Redirect::temporary("/ui/") }))
        .route(
            "/ui/",
            get(|| async { Redirect::temporary("/ui/overview") }),
        )
        .route("/ui/assets/{file}", get(assets::serve))
        .route("/ui/overview", get(pages::overview::page))
        .route("/ui/jobs", get(pages::jobs::list))
        .route("/ui/jobs/{id}", get(pages::job::page))
        .route("/ui/allocations/{id}", get(pages::alloc::page))
        .route("/ui/allocations/{id}/fs", get(pages::alloc_fs::page))
        .route("/ui/clients", get(pages::clients::list))
        .route("/ui/clients/{id}", get(pages::clients::detail))
        .route("/ui/servers", get(pages::servers::page))
        .route("/ui/services", get(pages::services::list_page))
        .route("/ui/services/{name}", get(pages::services::detail))
        .route("/ui/topology", get(pages::topology::page))
        .route("/ui/evaluations", get(pages::evals::page))
        .route("/ui/csi/volumes", get(pages::csi::volumes))
        .route("/ui/csi/volumes/{id}", get(pages::csi::volume))
        .route("/ui/csi/plugins", get(pages::csi::plugins))
        .route("/ui/csi/plugins/{id}", get(pages::csi::plugin))
        .route("/ui/settings/tokens", get(pages::tokens::page))
        .with_state(ui)
}
