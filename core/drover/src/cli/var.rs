//! `drover var list|get|put|purge`: Nomad Variables over `/v1/vars` and `/v1/var/:path`, with
//! Nomad's output and its check-and-set habits (`put` without `-force` or `-check-index` only
//! creates; a stale index is a "Check-and-Set conflict", exit 1). Specification files (`@file`,
//! `-`) and locks are not supported yet.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use drover_structs::{Variable, VariableMetadata};
use serde_json::Value;

use super::api::{ApiError, Client, escape_segment};
use super::format::{format_kv, format_list};
use super::{ConnArgs, Exit, timefmt, ui};

#[derive(Debug, clap::Args)]
pub struct VarCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: VarCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum VarCommand {
    /// List variables (metadata only)
    List {
        /// Output format: table, json or terse
        #[arg(long, default_value = "table")]
        out: String,
        /// Path prefix
        prefix: Option<String>,
    },
    /// Print a variable
    Get {
        /// Output format: table or json [default: table on a terminal, json otherwise]
        #[arg(long)]
        out: Option<String>,
        /// Print only this item's value
        #[arg(long)]
        item: Option<String>,
        path: String,
    },
    /// Create or update a variable from key=value pairs (value @file reads a file)
    Put {
        /// Write only if the stored variable's modify index is this (0: only if none is)
        #[arg(long)]
        check_index: Option<u64>,
        /// Write whatever is stored
        #[arg(long)]
        force: bool,
        /// Output format: none, table or json
        #[arg(long, default_value = "none")]
        out: String,
        path: String,
        items: Vec<String>,
    },
    /// Delete a variable
    Purge {
        /// Delete only if the stored variable's modify index is this
        #[arg(long)]
        check_index: Option<u64>,
        path: String,
    },
}

pub fn run(cmd: VarCli) -> anyhow::Result<Exit> {
    let client = cmd.conn.client()?;
    if client.namespace() == Some("*") && !matches!(cmd.command, VarCommand::List { .. }) {
        bail!("The wildcard namespace (\"*\") is not valid for this command.");
    }
    match cmd.command {
        VarCommand::List { out, prefix } => list(&client, &out, prefix.as_deref().unwrap_or("")),
        VarCommand::Get { out, item, path } => get(&client, out.as_deref(), item.as_deref(), &path),
        VarCommand::Put {
            check_index,
            force,
            out,
            path,
            items,
        } => put(&client, check_index, force, &out, &path, &items),
        VarCommand::Purge { check_index, path } => purge(&client, check_index, &path),
    }
}

/// Nomad's clients trim `/` and spaces from paths.
fn clean(path: &str) -> String {
    path.trim_matches(|c: char| c == '/' || c.is_whitespace())
        .to_string()
}

fn url(path: &str) -> String {
    let segments: Vec<String> = clean(path).split('/').map(escape_segment).collect();
    format!("/v1/var/{}", segments.join("/"))
}

fn list(client: &Client, out: &str, prefix: &str) -> anyhow::Result<Exit> {
    if !matches!(out, "table" | "json" | "terse") {
        bail!("Invalid value for \"-out\"; valid values are [json, table, terse]");
    }
    let (vars, _): (Vec<VariableMetadata>, _) = client
        .get_json("/v1/vars", &[("prefix", prefix)])
        .context("Error retrieving vars")?;
    match out {
        "json" => ui::out(&serde_json::to_string_pretty(&vars)?),
        _ if vars.is_empty() => ui::out("No matching variables found"),
        "terse" => {
            for v in &vars {
                ui::out(&v.path);
            }
        }
        _ => {
            let mut rows = vec!["Namespace|Path|Last Updated".to_string()];
            for v in &vars {
                rows.push(format!(
                    "{}|{}|{}",
                    v.namespace,
                    v.path,
                    timefmt::format_time(v.modify_time)
                ));
            }
            ui::out(&format_list(&rows));
        }
    }
    Ok(0)
}

/// Nomad's table of a variable: its metadata, then its items sorted by key.
fn table(v: &Variable) -> String {
    let mut rows = vec![
        format!("Namespace|{}", v.namespace),
        format!("Path|{}", v.path),
        format!("Create Time|{}", timefmt::format_time(v.create_time)),
    ];
    if v.create_time != v.modify_time {
        rows.push(format!(
            "Modify Time|{}",
            timefmt::format_time(v.modify_time)
        ));
    }
    rows.push(format!("Check Index|{}", v.modify_index));
    let items: Vec<String> = v
        .items
        .iter()
        .map(|(k, val)| format!("{k}|{val}"))
        .collect();
    format!("{}\n\nItems\n{}", format_kv(&rows), format_kv(&items))
}

fn show(v: &Variable, out: &str) -> anyhow::Result<()> {
    match out {
        "json" => ui::out(&serde_json::to_string_pretty(v)?),
        "table" => ui::out(&table(v)),
        "none" => {}
        other => {
            bail!("Invalid value for \"-out\" ({other:?}); valid values are [json, none, table]")
        }
    }
    Ok(())
}

fn get(client: &Client, out: Option<&str>, item: Option<&str>, path: &str) -> anyhow::Result<Exit> {
    let v: Variable = match client.get_json(&url(path), &[]) {
        Ok((v, _)) => v,
        Err(e) if e.is_not_found() => {
            ui::err("Variable not found");
            return Ok(1);
        }
        Err(e) => return Err(anyhow::anyhow!("Error retrieving variable: {e}")),
    };
    if let Some(key) = item {
        let Some(value) = v.items.get(key) else {
            bail!("Variable does not contain {key:?} item");
        };
        print!("{value}");
        return Ok(0);
    }
    let default = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        "table"
    } else {
        "json"
    };
    show(&v, out.unwrap_or(default))?;
    Ok(0)
}

/// `key=value` pairs; `key=@file` reads the file as is.
fn parse_items(args: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut items = BTreeMap::new();
    for arg in args {
        let Some((key, value)) = arg.split_once('=') else {
            bail!("Item {arg:?} is not of the form key=value");
        };
        if key.is_empty() {
            bail!("Item {arg:?} has an empty key");
        }
        let value = match value.strip_prefix('@') {
            Some(file) => std::fs::read_to_string(file)
                .with_context(|| format!("reading the value of {key:?} from {file}"))?,
            None if value == "-" => bail!("Values from stdin (\"-\") are not supported yet"),
            None => value.to_string(),
        };
        items.insert(key.to_string(), value);
    }
    Ok(items)
}

/// Nomad's check-and-set conflict report; exit 1.
fn cas_conflict(provided: u64, body: &str) -> anyhow::Result<Exit> {
    let current: Value = serde_json::from_str(body).unwrap_or_default();
    let server = current["ModifyIndex"].as_u64().unwrap_or(0);
    ui::err("Check-and-Set conflict\n");
    ui::err(&format!(
        "    Your provided check-index ({provided}) does not match the server-side index ({server})."
    ));
    ui::err(&format!(
        "    If you are sure you want to perform this operation, add the -force or\n    -check-index={server} flag before the positional arguments."
    ));
    Ok(1)
}

fn put(
    client: &Client,
    check_index: Option<u64>,
    force: bool,
    out: &str,
    path: &str,
    items: &[String],
) -> anyhow::Result<Exit> {
    if path.starts_with('@') || path == "-" {
        bail!("Variable specification files are not supported yet; give key=value items");
    }
    if items.is_empty() {
        bail!("Must supply data");
    }
    let items = parse_items(items)?;
    let body = serde_json::json!({"Path": clean(path), "Items": items});
    let cas = if force {
        None
    } else {
        Some(check_index.unwrap_or(0))
    };
    let cas_text = cas.map(|c| c.to_string());
    let query: Vec<(&str, &str)> = cas_text.iter().map(|c| ("cas", c.as_str())).collect();
    let stored: Variable = match client.put_json(&url(path), &query, &body) {
        Ok(v) => v,
        Err(ApiError::Status { code: 409, body }) => {
            return cas_conflict(cas.unwrap_or(0), &body);
        }
        Err(e) => return Err(anyhow::anyhow!("Error creating variable: {e}")),
    };
    if out == "none" {
        ui::out(&format!(
            "Created variable {:?} with modify index {}",
            stored.path, stored.modify_index
        ));
    } else {
        show(&stored, out)?;
    }
    Ok(0)
}

fn purge(client: &Client, check_index: Option<u64>, path: &str) -> anyhow::Result<Exit> {
    let cas_text = check_index.map(|c| c.to_string());
    let query: Vec<(&str, &str)> = cas_text.iter().map(|c| ("cas", c.as_str())).collect();
    match client.delete_json::<Value>(&url(path), &query) {
        Ok(_) => {
            ui::out(&format!("Successfully purged variable {:?}!", clean(path)));
            Ok(0)
        }
        Err(ApiError::Status { code: 409, body }) => cas_conflict(check_index.unwrap_or(0), &body),
        Err(e) => Err(anyhow::anyhow!("Error purging variable: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_key_value_pairs_and_paths_are_trimmed_and_escaped() {
        let items = parse_items(&["user=me".into(), "pw=a=b".into()]).unwrap();
        assert_eq!(items["pw"], "a=b");
        assert!(parse_items(&["novalue".into()]).is_err());
        assert!(parse_items(&["=x".into()]).is_err());
        assert_eq!(url("/secret/my creds/"), "/v1/var/secret/my%20creds");
    }

    #[test]
    fn the_table_shows_metadata_then_sorted_items() {
        let v = Variable {
            namespace: "default".into(),
            path: "secret/creds".into(),
            modify_index: 116,
            items: BTreeMap::from([("b".into(), "2".into()), ("a".into(), "1".into())]),
            ..Default::default()
        };
        let t = table(&v);
        assert!(
            t.starts_with("Namespace   = default\nPath        = secret/creds\n"),
            "{t}"
        );
        assert!(
            t.contains("Check Index = 116\n\nItems\na = 1\nb = 2"),
            "{t}"
        );
    }
}
