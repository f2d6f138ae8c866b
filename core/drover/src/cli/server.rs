//! `drover server members`: the servers of the region (Drover: its Raft configuration);
//! `server join` and `server force-leave`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::api::Client;
use super::format::format_list;
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct ServerCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: ServerCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ServerCommand {
    /// List the cluster's servers
    Members {
        /// Show every tag of each member
        #[arg(long)]
        detailed: bool,
    },
    /// Join the agent's server to others (RPC addresses, host[:port])
    Join {
        #[arg(required = true)]
        addresses: Vec<String>,
    },
    /// Remove a server from the cluster (its name, or RPC address)
    ForceLeave { node: String },
}

/// One entry of `GET /v1/agent/members`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Member {
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "Addr")]
    addr: String,
    #[serde(rename = "Port")]
    port: u64,
    #[serde(rename = "Tags")]
    tags: BTreeMap<String, String>,
    #[serde(rename = "Status")]
    status: String,
    #[serde(rename = "ProtocolCur")]
    protocol_cur: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Members {
    #[serde(rename = "Members")]
    members: Vec<Member>,
}

pub fn run(cli: ServerCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        ServerCommand::Members { detailed } => members(&client, detailed),
        ServerCommand::Join { addresses } => join(&client, &addresses),
        ServerCommand::ForceLeave { node } => force_leave(&client, &node),
    }
}

/// Nomad's `{"num_joined", "error"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct JoinResult {
    num_joined: u64,
    error: String,
}

fn join(client: &Client, addresses: &[String]) -> anyhow::Result<Exit> {
    let query: Vec<(&str, &str)> = addresses.iter().map(|a| ("address", a.as_str())).collect();
    match client.put_json::<JoinResult>("/v1/agent/join", &query, &serde_json::Value::Null) {
        Ok(r) if r.error.is_empty() => {
            ui::out(&format!("Joined {} servers successfully", r.num_joined));
            Ok(0)
        }
        Ok(r) => {
            ui::err(&format!("Error joining: {}", r.error));
            Ok(1)
        }
        Err(e) => {
            ui::err(&format!("Error joining: {e}"));
            Ok(1)
        }
    }
}

fn force_leave(client: &Client, node: &str) -> anyhow::Result<Exit> {
    match client.put_json::<serde_json::Value>(
        "/v1/agent/force-leave",
        &[("node", node)],
        &serde_json::Value::Null,
    ) {
        Ok(_) => Ok(0),
        Err(e) => {
            ui::err(&format!("Error force-leaving server {node}: {e}"));
            Ok(1)
        }
    }
}

/// Nomad's `server members -detailed`: every tag, `k=v` joined by commas, sorted.
fn detailed_table(members: &[Member]) -> String {
    let mut rows = vec!["Name|Address|Port|Status|Tags".to_string()];
    for m in members {
        let tags: Vec<String> = m.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        rows.push(format!(
            "{}|{}|{}|{}|{}",
            m.name,
            m.addr,
            m.port,
            m.status,
            tags.join(",")
        ));
    }
    format_list(&rows)
}

/// `host:port` of the member's RPC listener, the form `/v1/status/leader` answers with.
fn rpc_addr(m: &Member) -> String {
    let host = &m.addr;
    let port = m.tags.get("port").map(String::as_str).unwrap_or_default();
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn members_table(members: &[Member], leader: &str) -> String {
    let mut rows =
        vec!["Name|Address|Port|Status|Leader|Protocol|Build|Datacenter|Region".to_string()];
    for m in members {
        let tag = |k: &str| m.tags.get(k).cloned().unwrap_or_default();
        rows.push(format!(
            "{}|{}|{}|{}|{}|{}|{}|{}|{}",
            m.name,
            m.addr,
            m.port,
            m.status,
            !leader.is_empty() && rpc_addr(m) == leader,
            m.protocol_cur,
            tag("build"),
            tag("dc"),
            tag("region")
        ));
    }
    format_list(&rows)
}

fn members(client: &Client, detailed: bool) -> anyhow::Result<Exit> {
    let mut members: Members = match client.get_json("/v1/agent/members", &[]) {
        Ok((m, _)) => m,
        Err(e) => {
            ui::err(&format!("Error querying servers: {e}"));
            return Ok(1);
        }
    };
    members.members.sort_by(|a, b| a.name.cmp(&b.name));
    if detailed {
        ui::out(&detailed_table(&members.members));
        return Ok(0);
    }
    // Without a leader every server shows `false`; that is information, not an error.
    let leader: String = client
        .get_json("/v1/status/leader", &[])
        .map(|(l, _)| l)
        .unwrap_or_default();
    ui::out(&members_table(&members.members, &leader));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_table_marks_the_leader() {
        let sample = r#"{"Members":[{"Name":"vm.global","Addr":"127.0.0.1","Port":4648,
            "Tags":{"build":"1.1.2","region":"global","port":"4647","dc":"dc1"},
            "Status":"alive","ProtocolCur":2}]}"#;
        let m: Members = serde_json::from_str(sample).unwrap();
        assert_eq!(
            members_table(&m.members, "127.0.0.1:4647"),
            "Name       Address    Port  Status  Leader  Protocol  Build  Datacenter  Region\n\
             vm.global  127.0.0.1  4648  alive   true    2         1.1.2  dc1         global"
        );
        assert!(members_table(&m.members, "").contains("alive   false"));
        assert_eq!(
            detailed_table(&m.members),
            "Name       Address    Port  Status  Tags\n\
             vm.global  127.0.0.1  4648  alive   build=1.1.2,dc=dc1,port=4647,region=global"
        );
    }
}
