//! Command-line interface: `drover agent` runs the agent; every other command is a thin client
//! of the agent's Nomad-compatible /v1 HTTP API with Nomad's output formats and exit codes
//! (0 success, 1 error, 2 "placed nothing/some allocations failed to place").
//!
//! Must not depend on the server, state or scheduler crates: the CLI only speaks HTTP (through
//! `api`) and uses `drover-structs` for the shapes of API answers and `drover-jobspec` to read
//! job files.

mod acl;
mod agent_monitor;
mod alloc;
mod alloc_checks;
mod alloc_exec;
mod alloc_fs;
mod alloc_lifecycle;
mod api;
mod api_tls;
mod argv;
mod connect;
mod deployment;
mod eval;
mod event;
mod format;
mod job;
mod job_diff;
mod job_dispatch;
mod job_history;
mod job_periodic;
mod job_plan;
mod job_scale;
mod job_status;
mod job_versions;
mod jobfile;
mod logs;
mod lookup;
mod metrics;
mod monitor;
mod namespace;
mod node;
mod node_drain;
mod node_meta;
mod operator;
mod operator_scheduler;
mod plugin;
mod server;
mod service;
mod status;
mod system;
pub(crate) mod timefmt;
mod tls;
mod ui;
mod var;
mod volume;
mod volume_spec;
mod web_ui;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use self::api::{Client, Connection};

/// What a command reports when it finished without an error of its own making: 0, or Nomad's
/// special codes (2: allocations failed to place).
pub type Exit = u8;

/// Address used when neither `--address` nor the environment names one.
const DEFAULT_ADDRESS: &str = "http://127.0.0.1:4646";

#[derive(Debug, Parser)]
#[command(
    name = "drover",
    about = "Drover: a Nomad-compatible cluster scheduler",
    disable_version_flag = true,
    arg_required_else_help = true
)]
struct Cli {
    /// Print the version and exit.
    #[arg(short = 'v', long = "version")]
    version: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a Drover agent (server, client, or both with -dev)
    Agent(crate::agent::AgentArgs),
    /// Interact with jobs
    Job(job::JobCli),
    /// Interact with allocations
    Alloc(alloc::AllocCli),
    /// Inspect the contents of an allocation directory (alias of alloc fs)
    Fs(alloc_fs::FsCli),
    /// Run a command inside a running task (alias of alloc exec)
    Exec(alloc_exec::ExecCli),
    /// Interact with nodes
    Node(node::NodeCli),
    /// Interact with evaluations
    Eval(eval::EvalCli),
    /// Interact with deployments
    Deployment(deployment::DeploymentCli),
    /// Interact with servers
    Server(server::ServerCli),
    /// Interact with the system API (garbage collection, summary reconciliation)
    System(system::SystemCli),
    /// Stream the agent's log
    Monitor(agent_monitor::MonitorArgs),
    /// Follow the cluster's events
    Event(event::EventCli),
    /// Cluster operations: the Raft configuration, snapshots
    Operator(operator::OperatorCli),
    /// Display the status of jobs, or of the object an identifier names
    Status(status::StatusArgs),
    /// Interact with volumes (CSI)
    Volume(volume::VolumeCli),
    /// Interact with plugins (CSI)
    Plugin(plugin::PluginCli),
    /// Interact with namespaces
    Namespace(namespace::NamespaceCli),
    /// Interact with ACL policies and tokens
    Acl(acl::AclCli),
    /// Create a certificate authority and agent certificates for TLS
    Tls(tls::TlsCli),
    /// Interact with variables
    Var(var::VarCli),
    /// Interact with native service registrations
    Service(service::ServiceCli),
    /// Run Drover's Connect sidecar proxy
    Connect(connect::ConnectCli),
    /// Allow or deny service-to-service calls in the mesh
    Intention(connect::IntentionCli),
    /// Open the web UI, at the page of a job, allocation or client
    Ui(web_ui::UiArgs),
    /// Print the version
    Version,
}

/// How to reach the agent; accepted by every client command and its subcommands.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConnArgs {
    /// Address of the agent's HTTP API [env: DROVER_ADDR, then NOMAD_ADDR]
    /// [default: http://127.0.0.1:4646]
    #[arg(long, global = true, value_name = "ADDR")]
    address: Option<String>,
    /// Region to send requests to
    #[arg(long, global = true, env = "NOMAD_REGION")]
    region: Option<String>,
    /// Namespace to work in ("*" lists every namespace where supported)
    #[arg(long, global = true, env = "NOMAD_NAMESPACE")]
    namespace: Option<String>,
    /// ACL token sent as X-Nomad-Token
    #[arg(long, global = true, env = "NOMAD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// PEM file of the CA that signed the agent's HTTPS certificate
    #[arg(long, global = true, env = "NOMAD_CACERT", value_name = "FILE")]
    ca_cert: Option<String>,
    /// Directory of PEM CA certificates (all of them are trusted)
    #[arg(long, global = true, env = "NOMAD_CAPATH", value_name = "DIR")]
    ca_path: Option<String>,
    /// PEM certificate presented to an agent that verifies HTTPS clients
    #[arg(long, global = true, env = "NOMAD_CLIENT_CERT", value_name = "FILE")]
    client_cert: Option<String>,
    /// PEM private key of --client-cert
    #[arg(long, global = true, env = "NOMAD_CLIENT_KEY", value_name = "FILE")]
    client_key: Option<String>,
    /// Server name the agent's certificate must carry instead of the address's host
    #[arg(
        long,
        global = true,
        env = "NOMAD_TLS_SERVER_NAME",
        value_name = "NAME"
    )]
    tls_server_name: Option<String>,
    /// Do not verify the agent's certificate (insecure)
    #[arg(long, global = true, env = "NOMAD_SKIP_VERIFY")]
    tls_skip_verify: bool,
}

impl ConnArgs {
    /// A client for the agent these flags (and the environment) name.
    pub fn client(&self) -> anyhow::Result<Client> {
        let address = resolve_address(self.address.clone(), |k| std::env::var(k).ok());
        let client = Client::new(Connection {
            address,
            namespace: self.namespace.clone().filter(|s| !s.is_empty()),
            region: self.region.clone().filter(|s| !s.is_empty()),
            token: self.token.clone().filter(|s| !s.is_empty()),
            tls: self.https(),
        })?;
        Ok(client)
    }
}

impl ConnArgs {
    fn https(&self) -> api_tls::HttpsOptions {
        let set = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        api_tls::HttpsOptions {
            ca_cert: set(&self.ca_cert),
            ca_path: set(&self.ca_path),
            client_cert: set(&self.client_cert),
            client_key: set(&self.client_key),
            server_name: set(&self.tls_server_name),
            skip_verify: self.tls_skip_verify,
        }
    }
}

/// `--address`, else `DROVER_ADDR`, else `NOMAD_ADDR`, else the local default. Empty values
/// count as unset.
fn resolve_address(flag: Option<String>, env: impl Fn(&str) -> Option<String>) -> String {
    flag.into_iter()
        .chain(env("DROVER_ADDR"))
        .chain(env("NOMAD_ADDR"))
        .find(|a| !a.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_ADDRESS.to_string())
}

/// Runs the command line of this process.
pub fn main() -> ExitCode {
    ExitCode::from(run(std::env::args_os().collect()))
}

fn run(args: Vec<OsString>) -> u8 {
    // The sidecar proxy starts straight away: building the whole command tree would cost each
    // proxy (one per mesh service) memory it never gives back.
    if let Some(config) = connect::proxy_invocation(&args) {
        return connect::run_proxy(config);
    }
    let known = argv::known_long_flags(&Cli::command());
    let args = argv::rewrite_single_dash_flags(args, &known);
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => 1,
            };
        }
    };
    if cli.version {
        print_version();
        return 0;
    }
    let Some(command) = cli.command else {
        // arg_required_else_help makes clap print help before we get here; be safe anyway.
        ui::err("a command is required; see drover --help");
        return 1;
    };
    if let Command::Agent(args) = command {
        return match crate::agent::run(args) {
            Ok(()) => 0,
            Err(e) => {
                ui::err(&format!("Error: {e:#}"));
                1
            }
        };
    }
    restore_default_sigpipe();
    match dispatch(command) {
        Ok(code) => code,
        Err(e) => {
            ui::err(&format!("{e:#}"));
            1
        }
    }
}

fn dispatch(command: Command) -> anyhow::Result<Exit> {
    match command {
        Command::Agent(_) => unreachable_agent(),
        Command::Job(cmd) => job::run(cmd),
        Command::Alloc(cmd) => alloc::run(cmd),
        Command::Fs(cmd) => alloc_fs::run_alias(cmd),
        Command::Exec(cmd) => alloc_exec::run_alias(cmd),
        Command::Node(cmd) => node::run(cmd),
        Command::Eval(cmd) => eval::run(cmd),
        Command::Deployment(cmd) => deployment::run(cmd),
        Command::Server(cmd) => server::run(cmd),
        Command::System(cmd) => system::run(cmd),
        Command::Monitor(args) => agent_monitor::run(args),
        Command::Event(cmd) => event::run(cmd),
        Command::Operator(cmd) => operator::run(cmd),
        Command::Status(args) => status::run(args),
        Command::Volume(cmd) => volume::run(cmd),
        Command::Plugin(cmd) => plugin::run(cmd),
        Command::Namespace(cmd) => namespace::run(cmd),
        Command::Acl(cmd) => acl::run(cmd),
        Command::Tls(cmd) => tls::run(cmd),
        Command::Var(cmd) => var::run(cmd),
        Command::Ui(args) => web_ui::run(args),
        Command::Service(cmd) => service::run(cmd),
        Command::Connect(cmd) => connect::run(cmd),
        Command::Intention(cmd) => connect::run_intention(cmd),
        Command::Version => {
            print_version();
            Ok(0)
        }
    }
}

/// `run` hands `agent` to the agent before dispatching; reaching this is a wiring mistake.
fn unreachable_agent() -> anyhow::Result<Exit> {
    anyhow::bail!("internal error: the agent command was dispatched as a client command")
}

fn print_version() {
    ui::out(&format!("Drover v{}", env!("CARGO_PKG_VERSION")));
}

/// Client commands behave like other Unix tools when their output pipe closes (`| head`): they
/// end quietly. Rust ignores SIGPIPE by default, which would turn that into write errors. The
/// agent keeps the ignored disposition: it writes to sockets and child pipes.
fn restore_default_sigpipe() {
    // SAFETY: installing SIG_DFL for SIGPIPE before any thread is spawned; no handler code runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn address_prefers_flag_then_drover_then_nomad_env() {
        let env = |k: &str| match k {
            "DROVER_ADDR" => Some("http://d:1".to_string()),
            "NOMAD_ADDR" => Some("http://n:2".to_string()),
            _ => None,
        };
        assert_eq!(
            resolve_address(Some("http://f:3".into()), env),
            "http://f:3"
        );
        assert_eq!(resolve_address(None, env), "http://d:1");
        let nomad_only = |k: &str| (k == "NOMAD_ADDR").then(|| "http://n:2".to_string());
        assert_eq!(resolve_address(None, nomad_only), "http://n:2");
        assert_eq!(
            resolve_address(Some(String::new()), |_| None),
            DEFAULT_ADDRESS
        );
    }

    #[test]
    fn nomad_style_flags_parse_after_rewriting() {
        let known = argv::known_long_flags(&Cli::command());
        let args = [
            "drover",
            "job",
            "stop",
            "-purge",
            "-detach",
            "-address=http://h:1",
            "web",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let cli = Cli::try_parse_from(argv::rewrite_single_dash_flags(args, &known)).unwrap();
        let Some(Command::Job(job)) = cli.command else {
            panic!("expected job command");
        };
        assert_eq!(job.conn.address.as_deref(), Some("http://h:1"));
        assert!(
            matches!(job.command, job::JobCommand::Stop(ref s) if s.purge && s.detach && s.job == "web")
        );
    }

    #[test]
    fn agent_flags_are_known_for_rewriting() {
        let known = argv::known_long_flags(&Cli::command());
        assert!(known.contains("dev"));
        assert!(known.contains("detach"));
        assert!(!known.contains("f"));
    }

    #[test]
    fn usage_errors_exit_one() {
        assert_eq!(
            run(vec!["drover".into(), "job".into(), "frobnicate".into()]),
            1
        );
    }
}
