//! The `drover` binary: the CLI and the agent. Registers the built-in drivers; nothing else in
//! the workspace names a concrete driver.

mod agent;
mod agent_client_api;
mod agent_csi;
mod agent_csi_routes;
mod agent_logs;
mod agent_remote;
mod agent_run;
mod agent_tunnels;
mod cli;
mod config;
mod connect_proxy_driver;
mod resident_set;

/// The server allocates and frees many small objects per placement; mimalloc handles that far
/// better than glibc's malloc (see drover-bench in BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
