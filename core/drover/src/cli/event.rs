//! `drover event stream`: the cluster's event stream (`/v1/event/stream`) printed as it comes,
//! one JSON object per line (Nomad's batches: `{"Index": N, "Events": [...]}`); the stream's
//! `{}` heartbeats are left out.

use std::io::{BufRead, Write};

use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct EventCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: EventCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum EventCommand {
    /// Stream events (Job, Evaluation, Allocation, Deployment, Node, NodeDrain, ACLToken,
    /// ACLPolicy) as JSON lines until interrupted
    Stream(StreamArgs),
}

#[derive(Debug, clap::Args)]
pub struct StreamArgs {
    /// A topic and key to follow, as TOPIC:KEY (KEY `*` or left out: every key). Repeatable;
    /// none: every topic
    #[arg(long = "topic", value_name = "TOPIC[:KEY]")]
    pub topics: Vec<String>,
    /// Start from this Raft index, while the servers still buffer it
    #[arg(long)]
    pub index: Option<u64>,
}

pub fn run(cli: EventCli) -> anyhow::Result<Exit> {
    let EventCommand::Stream(args) = cli.command;
    let client = cli.conn.client()?;
    let index = args.index.map(|i| i.to_string());
    let mut query: Vec<(&str, &str)> = args.topics.iter().map(|t| ("topic", t.as_str())).collect();
    if let Some(i) = &index {
        query.push(("index", i));
    }
    let stream = match client.get_stream("/v1/event/stream", &query) {
        Ok(s) => s,
        Err(e) => {
            ui::err(&format!("Error opening the event stream: {e}"));
            return Ok(1);
        }
    };
    let mut out = std::io::stdout().lock();
    for line in std::io::BufReader::new(stream).lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                ui::err(&format!("Error reading the event stream: {e}"));
                return Ok(1);
            }
        };
        let line = line.trim();
        if line.is_empty() || line == "{}" {
            continue;
        }
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            // stdout closed (`| head`): done.
            return Ok(0);
        }
    }
    Ok(0)
}
