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

/// The UI's shared state: the API it reads through.
#[derive(Clone)]
pub struct Ui {
    api: Api,
}

impl Ui {
    pub fn new(api: Api) -> Ui {
        Ui { api }
    }
}

/// The cookie the token page stores the ACL token in (read here for page reads, by the
/// script for actions).
pub const TOKEN_COOKIE: &str = "drover_token";

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
        let path = path.as_ref();
        let answer = self.api.get(path, self.token.as_deref()).await?;
        self.watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((path.to_string(), answer.index));
        Ok(answer.value)
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

/// Answers a page request: the whole page, or (with `live=` in the query, sent by the page's
/// script) the re-rendered page once something it watched changed.
pub async fn respond<F, Fut>(ui: &Ui, headers: &HeaderMap, query: &Query, render: F) -> Response
where
    F: FnOnce(Arc<Ctx>) -> Fut,
    Fut: Future<Output = Result<Page, ApiError>>,
{
    let token = token_of(headers);
    let live_update = query.get("live");
    if let Some(watched) = live_update {
        live::wait_for_change(&ui.api, live::parse_watched(watched), token.clone()).await;
    }
    let started = Instant::now();
    let cx = Arc::new(Ctx {
        api: ui.api.clone(),
        token,
        watched: Mutex::new(Vec::new()),
    });
    let rendered = render(cx.clone()).await;
    let watched = std::mem::take(&mut *cx.watched.lock().unwrap_or_else(PoisonError::into_inner));
    let watch = live::encode_watched(&watched);
    let (status, html) = match rendered {
        Ok(page) if live_update.is_some() => (StatusCode::OK, page.body),
        Ok(page) => (StatusCode::OK, shell(&page, &watch, cx.has_token())),
        Err(e) => {
            let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_GATEWAY);
            let page = error_page(&e, cx.has_token());
            if live_update.is_some() {
                return (status, e.to_string()).into_response();
            }
            (status, shell(&page, "[]", cx.has_token()))
        }
    };
    let mut response = (status, html.into_string()).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(&watch) {
        h.insert("X-Drover-Watch", v);
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

fn shell(page: &Page, watch: &str, has_token: bool) -> Markup {
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
                        a.token-state href="/ui/settings/tokens" {
                            @if has_token { "Token set" } @else { "No token" }
                        }
                    }
                    main data-watch=(watch) { (page.body) }
                }
            }
        }
    }
}

/// The ACL token the browser stored in its cookie, if any.
fn token_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == TOKEN_COOKIE)
        .map(|(_, value)| percent_decode(value))
        .filter(|t| !t.is_empty())
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                // Both digits were just checked to be hex, so the sum fits a byte.
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_its_cookie_decoded() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("theme=dark; drover_token=ab%2Dcd-12; x=y"),
        );
        assert_eq!(token_of(&h).as_deref(), Some("ab-cd-12"));
        h.insert(header::COOKIE, HeaderValue::from_static("drover_token="));
        assert_eq!(token_of(&h), None);
        assert_eq!(token_of(&HeaderMap::new()), None);
    }

    #[test]
    fn percent_decoding_leaves_broken_escapes_alone() {
        assert_eq!(percent_decode("a%20b%zz%4"), "a b%zz%4");
    }
}
