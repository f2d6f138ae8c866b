//! `drover node meta apply|read` (Nomad 1.5's dynamic node metadata, through
//! `/v1/client/metadata`) and `drover node purge`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::api::{Client, escape_segment};
use super::format::format_kv;
use super::node::find_node;
use super::{Exit, ui};

#[derive(Debug, clap::Subcommand)]
pub enum NodeMetaCommand {
    /// Set or unset dynamic metadata of a node (the agent's own unless -node-id)
    Apply(NodeMetaApplyArgs),
    /// Show a node's metadata: all, dynamic and static
    Read(NodeMetaReadArgs),
}

#[derive(Debug, clap::Args)]
pub struct NodeMetaApplyArgs {
    /// The node to change (ID or prefix)
    #[arg(long = "node-id")]
    pub node_id: Option<String>,
    /// Comma-separated keys to unset
    #[arg(long)]
    pub unset: Option<String>,
    /// key=value pairs to set
    pub pairs: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct NodeMetaReadArgs {
    /// The node to read (ID or prefix)
    #[arg(long = "node-id")]
    pub node_id: Option<String>,
    /// Print Nomad's NodeMetaResponse as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct NodePurgeArgs {
    /// Node ID (or prefix)
    pub node: String,
}

pub fn run(client: &Client, command: NodeMetaCommand) -> anyhow::Result<Exit> {
    match command {
        NodeMetaCommand::Apply(args) => apply(client, args),
        NodeMetaCommand::Read(args) => read(client, args),
    }
}

/// The full node id for `-node-id` (a prefix is looked up); empty: the agent's own node.
fn node_id(client: &Client, given: Option<&str>) -> Result<String, String> {
    match given.filter(|g| !g.is_empty()) {
        None => Ok(String::new()),
        Some(prefix) => find_node(client, prefix, false).map(|n| n.id),
    }
}

/// Nomad's `parseMapFromArgs` and `applyNodeMetaUnset`: `k=v` sets, a bare `k` sets "", every
/// key of `-unset` is unset (empty keys skipped).
fn changes(pairs: &[String], unset: Option<&str>) -> BTreeMap<String, Value> {
    let mut meta = BTreeMap::new();
    for pair in pairs {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        meta.insert(k.to_string(), Value::String(v.to_string()));
    }
    for k in unset
        .unwrap_or_default()
        .split(',')
        .filter(|k| !k.is_empty())
    {
        meta.insert(k.to_string(), Value::Null);
    }
    meta
}

fn apply(client: &Client, args: NodeMetaApplyArgs) -> anyhow::Result<Exit> {
    if args.unset.as_deref().unwrap_or_default().is_empty() && args.pairs.is_empty() {
        ui::err("Must specify -unset or at least 1 key=value pair");
        return Ok(1);
    }
    let node_id = match node_id(client, args.node_id.as_deref()) {
        Ok(id) => id,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    let body = json!({
        "NodeID": node_id,
        "Meta": changes(&args.pairs, args.unset.as_deref()),
    });
    if let Err(e) = client.put_json::<Value>("/v1/client/metadata", &[], &body) {
        ui::err(&format!("Error applying dynamic node metadata: {e}"));
        return Ok(1);
    }
    Ok(0)
}

fn kv_rows<'a>(entries: impl Iterator<Item = (&'a String, String)>) -> String {
    let rows: Vec<String> = entries.map(|(k, v)| format!("{k}|{v}")).collect();
    format_kv(&rows)
}

fn read(client: &Client, args: NodeMetaReadArgs) -> anyhow::Result<Exit> {
    let node_id = match node_id(client, args.node_id.as_deref()) {
        Ok(id) => id,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    let query: Vec<(&str, &str)> = if node_id.is_empty() {
        Vec::new()
    } else {
        vec![("node_id", node_id.as_str())]
    };
    let meta = match client.get_value("/v1/client/metadata", &query) {
        Ok(meta) => meta,
        Err(e) => {
            ui::err(&format!("Error reading dynamic node metadata: {e}"));
            return Ok(1);
        }
    };
    if args.json {
        ui::out(&serde_json::to_string_pretty(&meta).unwrap_or_default());
        return Ok(0);
    }
    let strings = |key: &str| -> BTreeMap<String, String> {
        meta[key]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("<unset>").to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let section = |map: &BTreeMap<String, String>| kv_rows(map.iter().map(|(k, v)| (k, v.clone())));
    ui::out("All Meta");
    ui::out(&section(&strings("Meta")));
    ui::out("\nDynamic Meta");
    ui::out(&section(&strings("Dynamic")));
    ui::out("\nStatic Meta");
    ui::out(&section(&strings("Static")));
    Ok(0)
}

/// `drover node purge NODE`: removes the node from the servers (Nomad's
/// `PUT /v1/node/:id/purge`); its allocations are lost and rescheduled.
pub fn purge(client: &Client, args: NodePurgeArgs) -> anyhow::Result<Exit> {
    let node = match find_node(client, &args.node, false) {
        Ok(n) => n,
        Err(e) => {
            ui::err(&e);
            return Ok(1);
        }
    };
    let path = format!("/v1/node/{}/purge", escape_segment(&node.id));
    let reply: Value = match client.put_json(&path, &[], &json!({})) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error purging node: {e}"));
            return Ok(1);
        }
    };
    ui::out(&format!("Node {:?} purged", node.id));
    for id in reply["EvalIDs"].as_array().into_iter().flatten() {
        if let Some(id) = id.as_str() {
            ui::out(&format!("Evaluation {id:?} created"));
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_set_bare_keys_set_empty_and_unset_keys_are_null() {
        let pairs = vec!["rack=r1".to_string(), "flag".into(), "url=a=b".into()];
        let got = changes(&pairs, Some("old,,gone"));
        assert_eq!(
            Value::Object(got.into_iter().collect()),
            json!({"rack": "r1", "flag": "", "url": "a=b", "old": null, "gone": null})
        );
    }
}
