//! The node agent (Nomad's "client"): fingerprints the host, lays out allocation directories,
//! collects task logs, interpolates task configuration and keeps its own state on disk so it can
//! recover its allocations after a restart.
//!
//! Must not depend on: drover-server, drover-state, drover-raft, drover-scheduler or drover-http;
//! the agent talks to servers only over their public API. It talks to drivers through drover-abi.

pub mod allocdir;
pub mod fingerprint;
pub mod interpolate;
pub mod logs;
pub mod mountinfo;
pub mod state_db;
