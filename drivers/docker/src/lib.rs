//! The `docker` task driver: runs each task as a Docker container through the daemon's API
//! (bollard over the unix socket), with Nomad's docker task config and plugin config. The
//! container's output is copied into the host's log FIFOs, its exit (with OOM kills) reported,
//! and containers and unused images are cleaned up as Nomad's driver does.
//!
//! Must not depend on: any Drover crate other than drover-abi. Unlike the other drivers it uses
//! tokio, internally only: the contract stays synchronous, and the driver runs bollard on a
//! small runtime of its own (see `runtime`), never on the caller's.

mod caps;
mod container_spec;
mod daemon;
mod driver;
mod exec;
mod exec_stream;
mod fields;
mod images;
mod network;
mod paths;
mod plugin_config;
mod runtime;
mod stats;
mod task;
mod task_config;
#[cfg(test)]
mod testing;
mod time;

pub use container_spec::LABEL_ALLOC_ID;
pub use driver::{DRIVER_NAME, DockerDriver};
pub use network::{DEFAULT_INFRA_IMAGE, pause_container_name};
