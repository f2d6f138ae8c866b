//! Live updates: a page carries the API paths it watched and their indexes (`data-watch`);
//! its script asks for the page again with them (`?live=`), and the server holds that request
//! on the paths' blocking queries until the first one moves (or [`crate::api::LIVE_WAIT`]
//! passes), then answers the re-rendered page. One request is open per page at a time, so a
//! page left open holds one connection however long it stays.

use serde_json::{Value, json};

use crate::api::Api;

/// At most this many paths are waited on per update (pages watch two or three).
const MAX_WATCHED: usize = 6;

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

/// The watched paths a page sent back. Only `/v1/` reads are taken (anything else is ignored:
/// the waits are API reads made with the browser's own token, nothing more).
pub fn parse_watched(s: &str) -> Vec<(String, u64)> {
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
