//! `drover status [ID]`: without an ID the job list (as `nomad status`); with one, the status
//! of whatever job, allocation, node or evaluation the ID (or prefix) names.

use drover_structs::{AllocListStub, Evaluation, JobListStub, NodeListStub};

use super::api::Client;
use super::job_status::{self, JobStatusArgs};
use super::{ConnArgs, Exit, alloc, eval, node, ui};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Show full identifiers and times
    #[arg(long)]
    pub verbose: bool,
    /// A job, allocation, node or evaluation ID (or prefix)
    pub id: Option<String>,
}

/// Which kind of object an identifier names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    Job,
    Alloc,
    Node,
    Eval,
}

/// The contexts with at least one ID starting with `prefix`, in Nomad's preference order.
fn matching_contexts(client: &Client, prefix: &str) -> anyhow::Result<Vec<Context>> {
    let q = [("prefix", prefix)];
    let starts = |id: &str| id.starts_with(prefix);
    let mut found = Vec::new();
    let (jobs, _): (Vec<JobListStub>, _) = client.get_json("/v1/jobs", &q)?;
    if jobs.iter().any(|j| starts(&j.id)) {
        found.push(Context::Job);
    }
    // UUID lookups need an even number of hex digits; skip them for other prefixes.
    if prefix.len() >= 2 && prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        let uuid_prefix = super::lookup::sanitize_uuid_prefix(prefix);
        let q = [("prefix", uuid_prefix)];
        let (allocs, _): (Vec<AllocListStub>, _) = client.get_json("/v1/allocations", &q)?;
        if allocs.iter().any(|a| a.id.starts_with(uuid_prefix)) {
            found.push(Context::Alloc);
        }
        let (nodes, _): (Vec<NodeListStub>, _) = client.get_json("/v1/nodes", &q)?;
        if nodes.iter().any(|n| n.id.starts_with(uuid_prefix)) {
            found.push(Context::Node);
        }
        let (evals, _): (Vec<Evaluation>, _) = client.get_json("/v1/evaluations", &q)?;
        if evals.iter().any(|e| e.id.starts_with(uuid_prefix)) {
            found.push(Context::Eval);
        }
    }
    Ok(found)
}

pub fn run(args: StatusArgs) -> anyhow::Result<Exit> {
    let client = args.conn.client()?;
    let Some(id) = args.id.clone().filter(|s| !s.trim().is_empty()) else {
        return job_status::list_jobs(&client);
    };
    let id = id.trim().to_string();
    let contexts = match matching_contexts(&client, &id) {
        Ok(c) => c,
        Err(e) => {
            ui::err(&format!("Error querying objects with prefix {id:?}: {e:#}"));
            return Ok(1);
        }
    };
    match contexts.first() {
        None => {
            ui::err(&format!("No matches returned for query {id:?}"));
            Ok(1)
        }
        Some(Context::Job) => job_status::run(
            &client,
            JobStatusArgs {
                verbose: args.verbose,
                job: Some(id),
                ..Default::default()
            },
        ),
        Some(Context::Alloc) => alloc::run(alloc::AllocCli {
            conn: args.conn.clone(),
            command: alloc::AllocCommand::Status(alloc::AllocStatusArgs {
                verbose: args.verbose,
                json: false,
                stats: false,
                alloc: id,
            }),
        }),
        Some(Context::Node) => node::run(node::NodeCli {
            conn: args.conn.clone(),
            command: node::NodeCommand::Status(node::NodeStatusArgs {
                verbose: args.verbose,
                local: false,
                short: false,
                json: false,
                node: Some(id),
            }),
        }),
        Some(Context::Eval) => eval::run(eval::EvalCli {
            conn: args.conn.clone(),
            command: eval::EvalCommand::Status(eval::EvalStatusArgs {
                monitor: false,
                verbose: args.verbose,
                json: false,
                eval: id,
            }),
        }),
    }
}
