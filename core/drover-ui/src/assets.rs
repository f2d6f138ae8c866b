//! The UI's stylesheet and script, compiled into the binary and served with their content's
//! hash in the URL, so a browser caches them for good and still sees a new build at once.

use axum::extract::{Path, Query};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../assets/ui.css");
const JS: &str = include_str!("../assets/ui.js");
const HEAD_JS: &str = include_str!("../assets/ui-head.js");

/// FNV-1a of the assets, computed at compile time.
const VERSION: u64 = fnv1a(
    fnv1a(fnv1a(0xcbf2_9ce4_8422_2325, CSS.as_bytes()), JS.as_bytes()),
    HEAD_JS.as_bytes(),
);

/// FNV-1a of `bytes`, continuing from `h`.
const fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        h = (h ^ bytes[i] as u64).wrapping_mul(0x100_0000_01b3);
        i += 1;
    }
    h
}

/// The URL of asset `file`, versioned.
pub fn url(file: &str) -> String {
    format!("/ui/assets/{file}?v={VERSION:016x}")
}

/// `GET /ui/assets/:file?v=`: cached for good when `v` is this build's version; another
/// version (a page from an agent of another build, during an upgrade) gets the file
/// uncached, so no browser keeps this build's file under that build's URL.
pub async fn serve(
    Path(file): Path<String>,
    Query(q): Query<std::collections::BTreeMap<String, String>>,
) -> Response {
    let (body, kind) = match file.as_str() {
        "ui.css" => (CSS, "text/css; charset=utf-8"),
        "ui.js" => (JS, "text/javascript; charset=utf-8"),
        "ui-head.js" => (HEAD_JS, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    let this_build = q.get("v").map(String::as_str) == Some(format!("{VERSION:016x}").as_str());
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if this_build {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }),
    );
    r
}
