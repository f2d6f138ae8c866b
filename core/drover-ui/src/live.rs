//! Live updates: a page carries the API paths it watched and their indexes (`data-watch`),
//! signed by this agent; its script asks for the page again with them (`?live=`), and the
//! server holds that request on the paths' blocking queries until the first one moves (or
//! [`crate::api::LIVE_WAIT`] passes), then answers the re-rendered page. One such request is
//! open per page at a time (the allocation page also holds its followed log), so a page left
//! open holds the same connections however long it stays.
//!
//! Why signed: the list names API paths the server will read. Unsigned, any link could make
//! it read any `/v1` path (some GETs act, such as `/v1/client/gc`; some never end, such as
//! `/v1/event/stream`). Signed, it can only name what a page of this agent itself watched.

use std::hash::BuildHasher;

use serde_json::{Value, json};

use crate::api::Api;

/// At most this many paths are waited on per update (pages watch two or three).
const MAX_WATCHED: usize = 6;

/// The per-process key watch lists are signed with (SipHash with random keys, std's
/// `RandomState`: a keyed hash made for short inputs; a restarted agent's pages simply
/// reload their live parts once).
#[derive(Clone, Default)]
pub struct WatchKey(std::collections::hash_map::RandomState);

impl WatchKey {
    pub fn new() -> WatchKey {
        WatchKey::default()
    }

    fn tag(&self, list: &str) -> u64 {
        self.0.hash_one(list)
    }

    /// `<tag>.<list>`: the watch list with its signature.
    pub fn sign(&self, watched: &[(String, u64)]) -> String {
        let list = encode_watched(watched);
        format!("{:016x}.{list}", self.tag(&list))
    }

    /// The watch list of a signed one this key made, `None` for anything else.
    pub fn verify(&self, signed: &str) -> Option<Vec<(String, u64)>> {
        let (tag, list) = signed.split_once('.')?;
        let tag = u64::from_str_radix(tag, 16).ok()?;
        (tag == self.tag(list)).then(|| parse_watched(list))
    }
}

/// `[[path, index], ...]` as the page carries it.
pub fn encode_watched(watched: &[(String, u64)]) -> String {
    Value::from(
        watched
            .iter()
            .map(|(path, index)| json!([path, index]))
            .collect::<Vec<_>>(),
    )
    .to_string()
}

/// The watched paths of a verified list (only `/v1/` paths, at most [`MAX_WATCHED`]).
fn parse_watched(s: &str) -> Vec<(String, u64)> {
    let Ok(Value::Array(items)) = serde_json::from_str::<Value>(s) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let path = item.get(0)?.as_str()?;
            let index = item.get(1)?.as_u64()?;
            path.starts_with("/v1/").then(|| (path.to_string(), index))
        })
        .take(MAX_WATCHED)
        .collect()
}

/// Waits until one of `watched` has moved past its index (or a wait timed out or failed).
/// Nothing watched: answers at once, and the page's script spaces its polls itself.
pub async fn wait_for_change(api: &Api, watched: Vec<(String, u64)>, token: Option<String>) {
    if watched.is_empty() {
        return;
    }
    let mut waits = tokio::task::JoinSet::new();
    for (path, index) in watched {
        let (api, token) = (api.clone(), token.clone());
        waits.spawn(async move { api.wait(&path, index, token.as_deref()).await });
    }
    // The first answer is enough; dropping the set cancels the other waits.
    let _ = waits.join_next().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_watch_lists_this_key_signed_are_taken() {
        let key = WatchKey::new();
        let w = vec![("/v1/jobs".to_string(), 12)];
        let signed = key.sign(&w);
        assert_eq!(key.verify(&signed), Some(w));
        let forged = signed.replace("/v1/jobs", "/v1/client/gc");
        assert_eq!(key.verify(&forged), None);
        assert_eq!(key.verify(r#"[["/v1/client/gc", 0]]"#), None);
        assert_eq!(WatchKey::new().verify(&signed), None, "another agent's key");
    }

    #[test]
    fn watched_paths_round_trip_and_only_api_reads_are_taken() {
        let w = vec![("/v1/jobs".to_string(), 12), ("/v1/nodes".to_string(), 3)];
        assert_eq!(parse_watched(&encode_watched(&w)), w);
        assert_eq!(
            parse_watched(r#"[["/ui/jobs", 1], ["/v1/x", 2], "junk", ["/v1/y"]]"#),
            vec![("/v1/x".to_string(), 2)]
        );
        assert!(parse_watched("not json").is_empty());
    }
}
