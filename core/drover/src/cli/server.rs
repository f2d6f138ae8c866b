//! `drover server members`: the servers the agent knows through gossip.

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
    Members,
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
        ServerCommand::Members => members(&client),
    }
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

fn members(client: &Client) -> anyhow::Result<Exit> {
    let mut members: Members = match client.get_json("/v1/agent/members", &[]) {
        Ok((m, _)) => m,
        Err(e) => {
            ui::err(&format!("Error querying servers: {e}"));
            return Ok(1);
        }
    };
    members.members.sort_by(|a, b| a.name.cmp(&b.name));
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
    }
}
