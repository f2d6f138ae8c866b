//! What every page shares: the request's context (the API as the browser's token, and what
//! the page watched), the page shell with its navigation, and the one function that answers
//! a page request, whole or as a live update.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;

use crate::api::{Api, ApiError};
use crate::{assets, live};

/// The UI's shared state: the API it reads through, and the key its pages' watch lists are
/// signed with.
#[derive(Clone)]
pub struct Ui {
    api: Api,
    watch_key: live::WatchKey,
}

impl Ui {
    pub fn new(api: Api) -> Ui {
        Ui {
            api,
            watch_key: live::WatchKey::new(),
        }
    }
}

/// A page's query string, as given.
pub type Query = BTreeMap<String, String>;

/// One page request: reads the API with the browser's token and remembers the indexes of
/// what it watched, so a live update can wait until one of them moves.
pub struct Ctx {
    api: Api,
    token: Option<String>,
    watched: Mutex<Vec<(String, u64)>>,
}

impl Ctx {
    /// `GET path` once.
    pub async fn get(&self, path: impl AsRef<str>) -> Result<Value, ApiError> {
        Ok(self
            .api
            .get(path.as_ref(), self.token.as_deref())
            .await?
            .value)
    }

    /// `GET path`, watched: the page updates when its index moves. Only blocking endpoints
    /// may be watched (others would answer a waiting query at once).
    pub async fn watch(&self, path: impl AsRef<str>) -> Result<Value, ApiError> {
        self.watch_as::<Value>(path).await
    }

    /// `GET path` read into `T`, watched as [`Ctx::watch`] watches.
    pub async fn watch_as<T: serde::de::DeserializeOwned>(
        &self,
        path: impl AsRef<str>,
    ) -> Result<T, ApiError> {
        let path = path.as_ref();
        let answer = self.api.get_as::<T>(path, self.token.as_deref()).await?;
        self.watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((path.to_string(), answer.index));
        Ok(answer.value)
    }

    /// Whether the browser sent a token.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }
}

/// The navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Jobs,
    Services,
    Clients,
    Servers,
    Topology,
    Evaluations,
    Volumes,
    Plugins,
    Tokens,
}

const NAV: &[(Section, &str, &str)] = &[
    (Section::Overview, "/ui/overview", "Overview"),
    (Section::Jobs, "/ui/jobs", "Jobs"),
    (Section::Services, "/ui/services", "Services"),
    (Section::Clients, "/ui/clients", "Clients"),
    (Section::Servers, "/ui/servers", "Servers"),
    (Section::Topology, "/ui/topology", "Topology"),
    (Section::Evaluations, "/ui/evaluations", "Evaluations"),
    (Section::Volumes, "/ui/csi/volumes", "CSI Volumes"),
    (Section::Plugins, "/ui/csi/plugins", "CSI Plugins"),
    (Section::Tokens, "/ui/settings/tokens", "ACL Token"),
];

/// A rendered page: its title, where it sits in the navigation, and its content. Parts
/// marked with [`live_section`] are replaced by live updates; the rest stays as loaded (a
/// log being followed, a form being filled).
pub struct Page {
    pub title: String,
    pub section: Section,
    pub body: Markup,
}

/// A part of a page that live updates replace (by `id`, which must be unique on the page).
pub fn live_section(id: &str, content: Markup) -> Markup {
    html! { div id=(id) data-live { (content) } }
}

/// How a page request was made, from its query.
enum Mode {
    /// A navigation: the whole page, rendered without a token (a browser navigation cannot
    /// carry one); the script fetches it again with the token when it has one.
    Whole,
    /// `?fragment=1`, from the script with the token: the page's content at once.
    Fragment,
    /// `?live=<signed watch list>`, from the script: the content once something it watched
    /// moved.
    Live(Vec<(String, u64)>),
}

/// Answers a page request (see [`Mode`]). The token comes only from the `X-Nomad-Token`
/// header the script sends, never from a cookie: a cookie would be sent to any port of this
/// host (a job's web server included) and would make every page a cross-site target.
pub async fn respond<F, Fut>(ui: &Ui, headers: &HeaderMap, query: &Query, render: F) -> Response
where
    F: FnOnce(Arc<Ctx>) -> Fut,
    Fut: Future<Output = Result<Page, ApiError>>,
{
    let token = token_of(headers);
    let mode = if let Some(signed) = query.get("live") {
        match ui.watch_key.verify(signed) {
            Some(watched) => Mode::Live(watched),
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    "live: not a watch list this agent made",
                )
                    .into_response();
            }
        }
    } else if query.contains_key("fragment") {
        Mode::Fragment
    } else {
        Mode::Whole
    };
    if let Mode::Live(watched) = &mode {
        live::wait_for_change(&ui.api, watched.clone(), token.clone()).await;
    }
    let started = Instant::now();
    let cx = Arc::new(Ctx {
        api: ui.api.clone(),
        token,
        watched: Mutex::new(Vec::new()),
    });
    let rendered = render(cx.clone()).await;
    let watched = std::mem::take(&mut *cx.watched.lock().unwrap_or_else(PoisonError::into_inner));
    let watch = ui.watch_key.sign(&watched);
    let mut title = None;
    let (status, html) = match (rendered, &mode) {
        (Ok(page), Mode::Whole) => (StatusCode::OK, shell(&page, &watch)),
        (Ok(page), _) => {
            title = Some(page.title);
            (StatusCode::OK, page.body)
        }
        (Err(e), Mode::Whole) => {
            // A refusal of the anonymous render is what a browser with a token stored sees
            // first: the page says it, with 200, and the script fetches it with the token.
            let status = match e.status {
                401 | 403 => StatusCode::OK,
                other => StatusCode::from_u16(other).unwrap_or(StatusCode::BAD_GATEWAY),
            };
            (
                status,
                shell(&error_page(&e, false), &ui.watch_key.sign(&[])),
            )
        }
        (Err(e), _) => {
            let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_GATEWAY);
            (status, error_page(&e, cx.has_token()).body)
        }
    };
    let mut response = (status, html.into_string()).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Scripts and styles only from the agent (style attributes carry the bars' widths), and
    // never inside another site's frame.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if let Ok(v) = HeaderValue::from_str(&watch) {
        h.insert("X-Drover-Watch", v);
    }
    // A fragment replaces the page's content; its title goes with it (percent-encoded: a
    // header carries ASCII only).
    if let Some(v) = title.and_then(|t| HeaderValue::from_str(&crate::api::encode(&t)).ok()) {
        h.insert("X-Drover-Title", v);
    }
    // The render time (API reads included), for the browser's devtools and the benchmark.
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Ok(v) = HeaderValue::from_str(&format!("render;dur={ms:.1}")) {
        h.insert("Server-Timing", v);
    }
    response
}

fn error_page(e: &ApiError, has_token: bool) -> Page {
    let hint = match e.status {
        401 | 403 if has_token => Some("The token set for this browser may not read this."),
        401 | 403 => Some("ACLs are on: set a token to read this."),
        _ => None,
    };
    Page {
        title: "Error".into(),
        section: Section::Overview,
        body: html! {
            div.error-box role="alert" {
                h2 { (e.status) " " (status_text(e.status)) }
                p { code { (e.path) } ": " (e.message.trim()) }
                @if let Some(hint) = hint {
                    p { (hint) " " a href="/ui/settings/tokens" { "Set a token" } }
                }
            }
        },
    }
}

fn status_text(status: u16) -> &'static str {
    StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error")
}

fn shell(page: &Page, watch: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (page.title) " · Drover" }
                // No favicon request (and no 404 in the console for it).
                link rel="icon" href="data:,";
                link rel="stylesheet" href=(assets::url("ui.css"));
                // Before the body: marks the page as waiting for its read with the token,
                // so the anonymous render does not flash.
                script src=(assets::url("ui-head.js")) {}
                script defer src=(assets::url("ui.js")) {}
            }
            body {
                nav.side {
                    a.brand href="/ui/overview" { "Drover" }
                    ul {
                        @for (section, href, label) in NAV {
                            li {
                                a href=(href) class=[(*section == page.section).then_some("active")] {
                                    (label)
                                }
                            }
                        }
                    }
                }
                div.content {
                    header.top {
                        h1 { (page.title) }
                        span #flash role="status" {}
                        a.token-state #token-state href="/ui/settings/tokens" { "ACL token" }
                    }
                    main data-watch=(watch) data-anon { (page.body) }
                }
            }
        }
    }
}

/// The ACL token the page's script sent, if any.
fn token_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get("X-Nomad-Token")
        .and_then(|v| v.to_str().ok())
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_header_the_script_sends_never_a_cookie() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("drover_token=abc"));
        assert_eq!(token_of(&h), None);
        h.insert("X-Nomad-Token", HeaderValue::from_static(" ab-cd "));
        assert_eq!(token_of(&h).as_deref(), Some("ab-cd"));
        h.insert("X-Nomad-Token", HeaderValue::from_static(""));
        assert_eq!(token_of(&h), None);
    }
}
