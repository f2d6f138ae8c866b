//! `drover system gc` and `drover system reconcile summaries`, as Nomad's `system` commands.

use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct SystemCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: SystemCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum SystemCommand {
    /// Run the servers' garbage collection now (ended jobs, evaluations, allocations)
    Gc,
    /// Reconcile the job summaries
    Reconcile {
        #[command(subcommand)]
        what: ReconcileCommand,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum ReconcileCommand {
    /// Recompute every job summary from the allocations
    Summaries,
}

pub fn run(cli: SystemCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    let (path, what) = match cli.command {
        SystemCommand::Gc => ("/v1/system/gc", "system garbage-collection"),
        SystemCommand::Reconcile {
            what: ReconcileCommand::Summaries,
        } => (
            "/v1/system/reconcile/summaries",
            "system summary reconciliation",
        ),
    };
    match client.put_json::<serde_json::Value>(path, &[], &serde_json::Value::Null) {
        Ok(_) => Ok(0),
        Err(e) => {
            ui::err(&format!("Error running {what}: {e}"));
            Ok(1)
        }
    }
}
