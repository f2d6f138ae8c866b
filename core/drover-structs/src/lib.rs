//! Drover's domain model: jobs, nodes, allocations, evaluations and plans, with the JSON field names
//! and shapes of Nomad's HTTP API, Nomad's defaults (canonicalisation) and Nomad's validation rules.
//!
//! Must not depend on: any IO (no tokio, no filesystem, no network), and no other Drover crate. Every
//! other crate depends on this one, so it stays plain data plus pure functions.

pub mod acl;
pub mod alloc;
pub mod canonicalize;
pub mod cron;
pub mod csi;
pub mod decode;
pub mod deployment;
pub mod diff;
pub mod disconnect;
pub mod dispatch;
pub mod eval;
pub mod glob;
pub mod job;
pub mod mesh;
pub mod metrics;
pub mod multierror;
pub mod multiregion;
pub mod namespace;
pub mod node;
pub mod operator;
pub mod periodic;
pub mod plan;
pub mod resources;
pub mod scaling;
pub mod service;
pub mod service_check;
pub mod submission;
pub mod summary;
pub mod time;
pub mod usage;
pub mod validate;
pub mod variable;
pub mod vec_map;

pub use acl::*;
pub use alloc::*;
pub use csi::*;
pub use deployment::*;
pub use disconnect::*;
pub use dispatch::*;
pub use eval::*;
pub use glob::DEFAULT_DATACENTERS_GLOB;
pub use job::*;
pub use multierror::MultiError;
pub use multiregion::*;
pub use namespace::*;
pub use node::*;
pub use operator::*;
pub use periodic::*;
pub use plan::*;
pub use resources::*;
pub use scaling::*;
pub use service::ServiceRegistration;
pub use submission::JobSubmission;
pub use summary::*;
pub use variable::{Variable, VariableMetadata, VariableWrite};
pub use vec_map::VecMap;

/// Namespace every object lives in unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "default";
/// Region of a single-region cluster.
pub const DEFAULT_REGION: &str = "global";

/// A fresh random id in Nomad's UUID format.
pub fn generate_id() -> String {
    uuid::Uuid::new_v4().to_string()
}
