//! `drover connect proxy -config FILE`: Drover's Connect sidecar proxy (drover-mesh), the
//! program of the `connect-proxy-<service>` tasks the admission hook adds; and
//! `drover intention create|delete|list`: the mesh's intentions (Consul's commands).

use std::path::PathBuf;

use drover_structs::mesh::Intention;
use serde_json::json;

use super::format::format_list;
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct ConnectCli {
    #[command(subcommand)]
    pub command: ConnectCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConnectCommand {
    /// Run a Connect sidecar proxy from the configuration the client wrote
    Proxy {
        /// The proxy's configuration file
        #[arg(long = "config", value_name = "FILE")]
        config: PathBuf,
    },
}

pub fn run(cli: ConnectCli) -> anyhow::Result<Exit> {
    match cli.command {
        ConnectCommand::Proxy { config } => Ok(run_proxy(config)),
    }
}

/// The configuration file of exactly `drover connect proxy -config FILE` (how sidecar tasks
/// run it), so the proxy can start without the CLI's command tree.
pub fn proxy_invocation(args: &[std::ffi::OsString]) -> Option<PathBuf> {
    let words: Vec<&str> = args
        .iter()
        .skip(1)
        .map(|a| a.to_str())
        .collect::<Option<_>>()?;
    match words.as_slice() {
        ["connect", "proxy", "-config" | "--config", path] => Some(PathBuf::from(path)),
        ["connect", "proxy", flag] => flag
            .strip_prefix("--config=")
            .or_else(|| flag.strip_prefix("-config="))
            .map(PathBuf::from),
        _ => None,
    }
}

/// Runs the proxy until it is stopped; the exit code.
pub fn run_proxy(config: PathBuf) -> Exit {
    // Warnings and errors reach the task's stderr log.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .try_init();
    // One thread: a proxy moves bytes between a few sockets; TLS is the only work.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error starting the proxy's runtime: {e}"));
            return 1;
        }
    };
    match runtime.block_on(drover_mesh::proxy::run(
        config,
        crate::resident_set::drop_clean,
    )) {
        Ok(()) => 0,
        Err(e) => {
            ui::err(&format!("Error running the proxy: {e}"));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sidecar_invocation_is_recognized_and_nothing_else() {
        let args = |words: &[&str]| -> Vec<std::ffi::OsString> {
            std::iter::once("drover")
                .chain(words.iter().copied())
                .map(Into::into)
                .collect()
        };
        assert_eq!(
            proxy_invocation(&args(&["connect", "proxy", "-config", "/s/p.json"])),
            Some(PathBuf::from("/s/p.json"))
        );
        assert_eq!(
            proxy_invocation(&args(&["connect", "proxy", "--config=/s/p.json"])),
            Some(PathBuf::from("/s/p.json"))
        );
        assert_eq!(proxy_invocation(&args(&["connect", "proxy"])), None);
        assert_eq!(proxy_invocation(&args(&["job", "run", "x"])), None);
    }
}

#[derive(Debug, clap::Args)]
pub struct IntentionCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: IntentionCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum IntentionCommand {
    /// Allow or deny calls from SOURCE to DESTINATION (either may be "*")
    Create {
        /// Deny the calls (the default is to allow them)
        #[arg(long)]
        deny: bool,
        /// Allow the calls
        #[arg(long, conflicts_with = "deny")]
        allow: bool,
        /// Replace an intention of the same pair
        #[arg(long)]
        replace: bool,
        /// A description kept with the intention
        #[arg(long, default_value = "")]
        description: String,
        source: String,
        destination: String,
    },
    /// Delete the intention from SOURCE to DESTINATION
    Delete { source: String, destination: String },
    /// List the intentions of the namespace
    List,
}

pub fn run_intention(cli: IntentionCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    let path = "/v1/connect/intentions/exact";
    match cli.command {
        IntentionCommand::Create {
            deny,
            allow: _,
            replace,
            description,
            source,
            destination,
        } => {
            let pair = [
                ("source", source.as_str()),
                ("destination", destination.as_str()),
            ];
            if !replace {
                let existing: Result<Intention, _> = client.get_json(path, &pair).map(|(i, _)| i);
                if existing.is_ok() {
                    ui::err(&format!(
                        "Error creating intention: an intention {source} => {destination} exists; use -replace to change it"
                    ));
                    return Ok(1);
                }
            }
            let action = if deny { "deny" } else { "allow" };
            let body = json!({"Action": action, "Description": description});
            match client.put_json::<serde_json::Value>(path, &pair, &body) {
                Ok(_) => {
                    ui::out(&format!("Created: {source} => {destination} ({action})"));
                    Ok(0)
                }
                Err(e) => {
                    ui::err(&format!("Error creating intention: {e}"));
                    Ok(1)
                }
            }
        }
        IntentionCommand::Delete {
            source,
            destination,
        } => {
            let pair = [
                ("source", source.as_str()),
                ("destination", destination.as_str()),
            ];
            match client.delete_json::<serde_json::Value>(path, &pair) {
                Ok(_) => {
                    ui::out(&format!("Intention deleted: {source} => {destination}"));
                    Ok(0)
                }
                Err(e) => {
                    ui::err(&format!("Error deleting intention: {e}"));
                    Ok(1)
                }
            }
        }
        IntentionCommand::List => {
            let list: Vec<Intention> = match client.get_json("/v1/connect/intentions", &[]) {
                Ok((list, _)) => list,
                Err(e) => {
                    ui::err(&format!("Error listing intentions: {e}"));
                    return Ok(1);
                }
            };
            if list.is_empty() {
                ui::out("No intentions");
                return Ok(0);
            }
            let mut rows = vec!["Source|Action|Destination|Description".to_string()];
            for i in list {
                rows.push(format!(
                    "{}|{}|{}|{}",
                    i.source_name, i.action, i.destination_name, i.description
                ));
            }
            ui::out(&format_list(&rows));
            Ok(0)
        }
    }
}
