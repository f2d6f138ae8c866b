//! `drover operator raft list-peers | remove-peer | state-digest` and
//! `drover operator snapshot save | restore`, over `/v1/operator/...` (the scheduler
//! configuration commands are in `operator_scheduler`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use super::api::normalize_address;
use super::format::{format_kv, format_list, quote};
use super::{ConnArgs, Exit, resolve_address, ui};

#[derive(Debug, clap::Args)]
pub struct OperatorCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: OperatorCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum OperatorCommand {
    /// Inspect and change the Raft configuration
    #[command(subcommand)]
    Raft(RaftCommand),
    /// Save and restore snapshots of the whole cluster state
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Display and change the scheduler configuration
    #[command(subcommand)]
    Scheduler(super::operator_scheduler::SchedulerCommand),
}

#[derive(Debug, clap::Subcommand)]
pub enum RaftCommand {
    /// Display the current Raft peer configuration
    ListPeers {
        /// Let any server answer, even one without a leader
        #[arg(long)]
        stale: bool,
    },
    /// Remove a server from the Raft configuration
    RemovePeer {
        /// RPC address (IP:port) of the server to remove
        #[arg(long = "peer-address", value_name = "ADDR", conflicts_with = "peer_id")]
        peer_address: Option<String>,
        /// Raft ID of the server to remove (see list-peers)
        #[arg(long = "peer-id", value_name = "ID")]
        peer_id: Option<String>,
    },
    /// Print a digest of the state tables of the server answering (compare servers with
    /// -stale against each of them)
    StateDigest {
        /// Digest this server's own state, without catching up with the leader first
        #[arg(long)]
        stale: bool,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCommand {
    /// Save the cluster state to FILE
    Save { file: PathBuf },
    /// Replace the cluster state with the snapshot in FILE
    Restore { file: PathBuf },
}

pub fn run(cli: OperatorCli) -> anyhow::Result<Exit> {
    match cli.command {
        OperatorCommand::Raft(RaftCommand::ListPeers { stale }) => list_peers(&cli.conn, stale),
        OperatorCommand::Raft(RaftCommand::RemovePeer {
            peer_address,
            peer_id,
        }) => remove_peer(&cli.conn, peer_address, peer_id),
        OperatorCommand::Raft(RaftCommand::StateDigest { stale }) => state_digest(&cli.conn, stale),
        OperatorCommand::Snapshot(SnapshotCommand::Save { file }) => save(&cli.conn, &file),
        OperatorCommand::Snapshot(SnapshotCommand::Restore { file }) => restore(&cli.conn, &file),
        OperatorCommand::Scheduler(cmd) => super::operator_scheduler::run(&cli.conn, cmd),
    }
}

/// One server of `GET /v1/operator/raft/configuration`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct RaftServer {
    #[serde(rename = "ID")]
    id: String,
    node: String,
    address: String,
    leader: bool,
    voter: bool,
    raft_protocol: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct RaftConfiguration {
    servers: Vec<RaftServer>,
}

fn peers_table(config: &RaftConfiguration) -> String {
    let mut rows = vec!["Node|ID|Address|State|Voter|RaftProtocol".to_string()];
    for s in &config.servers {
        rows.push(format!(
            "{}|{}|{}|{}|{}|{}",
            s.node,
            s.id,
            s.address,
            if s.leader { "leader" } else { "follower" },
            s.voter,
            s.raft_protocol
        ));
    }
    format_list(&rows)
}

fn list_peers(conn: &ConnArgs, stale: bool) -> anyhow::Result<Exit> {
    let client = conn.client()?;
    let query: &[(&str, &str)] = if stale { &[("stale", "")] } else { &[] };
    match client.get_json::<RaftConfiguration>("/v1/operator/raft/configuration", query) {
        Ok((config, _)) => {
            ui::out(&peers_table(&config));
            Ok(0)
        }
        Err(e) => {
            ui::err(&format!("Failed to retrieve raft configuration: {e}"));
            Ok(1)
        }
    }
}

fn remove_peer(
    conn: &ConnArgs,
    address: Option<String>,
    id: Option<String>,
) -> anyhow::Result<Exit> {
    let (query, what, value) = match (address, id) {
        (Some(a), None) => ("address", "address", a),
        (None, Some(i)) => ("id", "id", i),
        _ => {
            ui::err("Error: exactly one of -peer-address or -peer-id is required");
            return Ok(1);
        }
    };
    let raw = RawApi::new(conn)?;
    let (status, body) = raw.send("DELETE", "/v1/operator/raft/peer", &[(query, &value)], None)?;
    if !(200..300).contains(&status) {
        ui::err(&format!(
            "Error removing peer: Unexpected response code: {status} ({})",
            String::from_utf8_lossy(&body).trim_end()
        ));
        return Ok(1);
    }
    ui::out(&format!("Removed peer with {what} {}", quote(&value)));
    Ok(0)
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
struct Digest {
    #[serde(rename = "ID")]
    id: String,
    address: String,
    digest: String,
    index: u64,
    applied_index: u64,
}

fn state_digest(conn: &ConnArgs, stale: bool) -> anyhow::Result<Exit> {
    let client = conn.client()?;
    let query: &[(&str, &str)] = if stale { &[("stale", "")] } else { &[] };
    match client.get_json::<Digest>("/v1/operator/raft/state-digest", query) {
        Ok((d, _)) => {
            ui::out(&format_kv(&[
                format!("Digest|{}", d.digest),
                format!("Index|{}", d.index),
                format!("Applied Index|{}", d.applied_index),
                format!("Server ID|{}", d.id),
                format!("Server Address|{}", d.address),
            ]));
            Ok(0)
        }
        Err(e) => {
            ui::err(&format!("Error querying the state digest: {e}"));
            Ok(1)
        }
    }
}

fn save(conn: &ConnArgs, file: &Path) -> anyhow::Result<Exit> {
    let raw = RawApi::new(conn)?;
    let (status, mut answer) = raw.open("GET", "/v1/operator/snapshot", &[], None)?;
    if !(200..300).contains(&status) {
        let mut body = Vec::new();
        let _ = answer.read_to_end(&mut body);
        ui::err(&format!(
            "Failed to get snapshot file: Unexpected response code: {status} ({})",
            String::from_utf8_lossy(&body).trim_end()
        ));
        return Ok(1);
    }
    // Written aside as it arrives (the archive of a large state is gigabytes), checked, then
    // renamed: an interrupted or damaged save never leaves a bad FILE behind.
    let tmp = file.with_extension("tmp-drover");
    let written = std::fs::File::create(&tmp)
        .and_then(|mut out| std::io::copy(&mut answer, &mut out).and_then(|_| out.sync_all()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        ui::err(&format!("Failed to get snapshot file: {e}"));
        return Ok(1);
    }
    let checked = std::fs::File::open(&tmp)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            drover_server::snapshot_archive::check(&mut std::io::BufReader::new(f))
                .map_err(|e| e.to_string())
        });
    if let Err(e) = checked {
        let _ = std::fs::remove_file(&tmp);
        ui::err(&format!("Failed to get snapshot file: {e}"));
        return Ok(1);
    }
    std::fs::rename(&tmp, file).with_context(|| format!("writing {}", file.display()))?;
    ui::out(&format!("State file written to {}", file.display()));
    Ok(0)
}

fn restore(conn: &ConnArgs, file: &Path) -> anyhow::Result<Exit> {
    let archive = match std::fs::read(file) {
        Ok(a) => a,
        Err(e) => {
            ui::err(&format!("Error opening snapshot file: {e}"));
            return Ok(1);
        }
    };
    let raw = RawApi::new(conn)?;
    let (status, body) = raw.send("PUT", "/v1/operator/snapshot", &[], Some(&archive))?;
    if !(200..300).contains(&status) {
        ui::err(&format!(
            "Failed to restore snapshot: Unexpected response code: {status} ({})",
            String::from_utf8_lossy(&body).trim_end()
        ));
        return Ok(1);
    }
    ui::out("Snapshot Restored");
    Ok(0)
}

/// Requests whose bodies are not JSON (snapshot archives, empty answers).
struct RawApi {
    base: String,
    conn: ConnArgs,
    agent: ureq::Agent,
}

impl RawApi {
    fn new(conn: &ConnArgs) -> anyhow::Result<RawApi> {
        let address = resolve_address(conn.address.clone(), |k| std::env::var(k).ok());
        let base = normalize_address(&address)?;
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .build()
            .into();
        Ok(RawApi {
            base,
            conn: conn.clone(),
            agent,
        })
    }

    /// Sends a request; the status and the answer's body, to be read as it arrives.
    fn open(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> anyhow::Result<(u16, impl Read + use<>)> {
        let url = format!("{}{path}", self.base);
        let mut pairs: Vec<(&str, &str)> = query.to_vec();
        if let Some(region) = self.conn.region.as_deref().filter(|r| !r.is_empty()) {
            pairs.push(("region", region));
        }
        let token = self.conn.token.clone().filter(|t| !t.is_empty());
        let unreachable = |e: ureq::Error| {
            anyhow::anyhow!(
                "cannot reach the Drover agent at {} ({e}); is the agent running?",
                self.base
            )
        };
        let response = match (method, body) {
            ("PUT", Some(body)) => {
                let mut req = self.agent.put(&url).query_pairs(pairs);
                if let Some(t) = &token {
                    req = req.header("X-Nomad-Token", t);
                }
                req.header("Content-Type", "application/octet-stream")
                    .send(body)
            }
            ("DELETE", _) => {
                let mut req = self.agent.delete(&url).query_pairs(pairs);
                if let Some(t) = &token {
                    req = req.header("X-Nomad-Token", t);
                }
                req.call()
            }
            ("GET", _) => {
                let mut req = self.agent.get(&url).query_pairs(pairs);
                if let Some(t) = &token {
                    req = req.header("X-Nomad-Token", t);
                }
                req.call()
            }
            _ => bail!("internal error: unsupported request {method} {path}"),
        }
        .map_err(unreachable)?;
        let status = response.status().as_u16();
        Ok((status, response.into_body().into_reader()))
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let (status, mut answer) = self.open(method, path, query, body)?;
        let mut bytes = Vec::new();
        answer
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading the answer of {path}"))?;
        Ok((status, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn parse(args: &[&str]) -> super::super::Cli {
        let known = super::super::argv::known_long_flags(
            &<super::super::Cli as clap::CommandFactory>::command(),
        );
        let args = args.iter().map(std::ffi::OsString::from).collect();
        super::super::Cli::try_parse_from(super::super::argv::rewrite_single_dash_flags(
            args, &known,
        ))
        .expect("parses")
    }

    #[test]
    fn nomads_operator_command_lines_parse() {
        let cli = parse(&[
            "drover",
            "operator",
            "raft",
            "remove-peer",
            "-peer-address",
            "10.0.0.1:4647",
        ]);
        let Some(super::super::Command::Operator(op)) = cli.command else {
            panic!("expected the operator command");
        };
        assert!(matches!(
            op.command,
            OperatorCommand::Raft(RaftCommand::RemovePeer { peer_address: Some(ref a), peer_id: None }) if a == "10.0.0.1:4647"
        ));
        let cli = parse(&["drover", "operator", "snapshot", "save", "backup.snap"]);
        assert!(matches!(
            cli.command,
            Some(super::super::Command::Operator(OperatorCli {
                command: OperatorCommand::Snapshot(SnapshotCommand::Save { .. }),
                ..
            }))
        ));
        let cli = parse(&[
            "drover",
            "agent",
            "-server",
            "-bootstrap-expect",
            "3",
            "-join",
            "a:4647",
            "-retry-join",
            "b:4647",
            "-servers",
            "a:4647,b:4647",
        ]);
        let Some(super::super::Command::Agent(agent)) = cli.command else {
            panic!("expected the agent command");
        };
        assert_eq!(agent.bootstrap_expect, Some(3));
        assert_eq!(agent.join, vec!["a:4647", "b:4647"]);
        assert_eq!(agent.servers, vec!["a:4647", "b:4647"]);
    }

    #[test]
    fn list_peers_prints_nomads_table() {
        let config: RaftConfiguration = serde_json::from_str(
            r#"{"Servers":[{"ID":"11","Node":"a.global","Address":"10.0.0.1:4647","Leader":true,"Voter":true,"RaftProtocol":"3"},
                          {"ID":"12","Node":"b.global","Address":"10.0.0.2:4647","Leader":false,"Voter":true,"RaftProtocol":"3"}],"Index":5}"#,
        )
        .unwrap();
        assert_eq!(
            peers_table(&config),
            "Node      ID  Address        State     Voter  RaftProtocol\n\
             a.global  11  10.0.0.1:4647  leader    true   3\n\
             b.global  12  10.0.0.2:4647  follower  true   3"
        );
    }
}
