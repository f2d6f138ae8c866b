//! The node agent (Nomad's "client"): fingerprints the host, lays out allocation directories,
//! collects task logs, interpolates task configuration and keeps its own state on disk so it can
//! recover its allocations after a restart. It runs CSI plugin tasks and mounts their volumes
//! (`csi`, through drover-csi's client).
//!
//! Must not depend on: drover-server, drover-state, drover-raft, drover-scheduler or drover-http;
//! the agent talks to servers only over their public API. It talks to drivers through drover-abi.

pub mod alloc_control;
pub mod alloc_exec;
pub mod alloc_health;
pub mod alloc_runner;
pub mod alloc_stats;
pub mod allocdir;
pub mod artifact;
pub mod checks;
pub mod client;
pub mod client_metrics;
pub mod csi;
pub mod dispatch_payload;
mod driver_calls;
pub mod driver_events;
pub mod fingerprint;
pub mod gc;
pub mod heartbeat_stop;
pub mod host_data;
pub mod host_stats;
pub mod host_volumes;
pub mod interpolate;
pub mod lifecycle;
pub mod logs;
pub mod mesh;
pub mod mountinfo;
pub mod network;
pub mod node_meta;
pub mod restarts;
pub mod state_db;
pub mod task_runner;
pub mod taskenv;
pub mod template;

pub use client::{Client, ClientConfig, ClientError, ServerConn};

#[cfg(test)]
mod test_env;
