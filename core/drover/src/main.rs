//! The `drover` binary: the CLI and the agent. Registers the built-in drivers; nothing else in
//! the workspace names a concrete driver.

mod agent;
mod agent_run;
mod cli;
mod config;

fn main() -> std::process::ExitCode {
    cli::main()
}
