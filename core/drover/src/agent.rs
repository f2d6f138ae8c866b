//! `drover agent`: runs a server, a client, or both in one process.

use std::path::PathBuf;

/// Flags of `drover agent` (Nomad's names).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AgentArgs {
    /// Dev mode: server and client in one process, raw_exec enabled, data in a temp dir
    /// unless --data-dir is given.
    #[arg(long)]
    pub dev: bool,
    /// Run a server.
    #[arg(long)]
    pub server: bool,
    /// Run a client.
    #[arg(long)]
    pub client: bool,
    /// Agent config file (HCL, Nomad's agent format). Repeatable; later files win.
    #[arg(long = "config")]
    pub config: Vec<PathBuf>,
    #[arg(long = "data-dir")]
    pub data_dir: Option<PathBuf>,
    /// Address to bind the HTTP and RPC listeners to.
    #[arg(long)]
    pub bind: Option<String>,
    #[arg(long = "http-port")]
    pub http_port: Option<u16>,
    #[arg(long = "rpc-port")]
    pub rpc_port: Option<u16>,
    /// Servers to wait for before bootstrapping a new cluster (server mode). Without it a
    /// server bootstraps alone, unless it is told to join others.
    #[arg(long = "bootstrap-expect", value_name = "N")]
    pub bootstrap_expect: Option<u32>,
    /// RPC address (host:port) of a server to join (server mode). Repeatable.
    #[arg(long = "join", visible_alias = "retry-join", value_name = "ADDR")]
    pub join: Vec<String>,
    /// RPC addresses of the servers a client talks to, comma-separated (client mode).
    #[arg(long = "servers", value_name = "ADDR,...", value_delimiter = ',')]
    pub servers: Vec<String>,
    /// Node name.
    #[arg(long)]
    pub node: Option<String>,
    /// Datacenter.
    #[arg(long)]
    pub dc: Option<String>,
    #[arg(long = "plugin-dir")]
    pub plugin_dir: Option<PathBuf>,
    /// Log level (trace, debug, info, warn, error).
    #[arg(long = "log-level")]
    pub log_level: Option<String>,
}

pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    let level = args.log_level.clone().unwrap_or_else(|| "info".into());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.to_lowercase()));
    crate::agent_logs::init(filter);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .on_thread_park(crate::resident_set::collect_if_trimmed)
        .build()?;
    let result = rt.block_on(crate::agent_run::run(args));
    // Dropping the runtime would wait for every blocking call still running, and task runners
    // sit in drivers' `wait_task` for up to 30 s at a time. Their tasks are meant to outlive the
    // agent (the next one recovers them), so those calls are abandoned instead of awaited.
    rt.shutdown_timeout(SHUTDOWN_GRACE);
    result
}

/// The blocking pool's bound (tokio's default is 512): it runs driver starts and short
/// filesystem calls (log writes, state writes, allocation directories), so starting many
/// tasks at once queues them instead of making a thread each (a burst of 50 starts made about
/// 150 threads, whose stacks and allocator heaps stayed). Starts take at most 16 of these
/// threads (`drover_client::task_runner`), so 8 stay for the rest however long starts take.
/// Calls that block for an unbounded time (waits for an exit, stops, interactive exec
/// sessions) run elsewhere (`drover_client::driver_calls`), so they cannot fill it.
const BLOCKING_THREADS: usize = 24;

/// How long a blocking-pool thread waits idle for more work before it exits (tokio's default
/// is 10 s). A burst of starts fills the pool; once it is over, the threads and what their
/// stacks and allocator heaps hold go within seconds (`resident_set` then gives it back).
const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the agent waits, once its own shutdown is done, for work still on its runtime.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_millis(200);
