//! CSI (Container Storage Interface, v1) support shared by Drover's client and server:
//! - [`CsiPluginConfig`]: the task's `csi_plugin` block;
//! - [`CsiClient`]: a typed client of a plugin's unix socket (Identity, Controller and Node
//!   services), with per-attempt timeouts and retries of UNAVAILABLE / DEADLINE_EXCEEDED;
//! - the model ([`VolumeCapability`], [`AccessMode`], [`AttachmentMode`], [`Volume`], the
//!   capability sets...), in Nomad's names, so that the rest of Drover never sees protobuf;
//! - [`proto`]: the generated wire code of `proto/csi.proto` (package `csi.v1`), for plugins
//!   written in Rust (drover-csi-hostpath); Drover itself goes through [`CsiClient`].
//!
//! Using the client:
//! ```no_run
//! # async fn demo() -> Result<(), drover_csi::CsiError> {
//! use drover_csi::{AccessMode, CreateVolumeRequest, CsiClient, VolumeCapability};
//! let plugin = CsiClient::connect("/var/lib/drover/csi/hostpath/csi.sock").await?;
//! let info = plugin.plugin_info().await?; // name, vendor_version
//! if plugin.plugin_capabilities().await?.controller_service {
//!     let volume = plugin
//!         .create_volume(&CreateVolumeRequest {
//!             name: "db".into(),
//!             capabilities: vec![VolumeCapability::file_system(AccessMode::SingleNodeWriter)],
//!             ..Default::default()
//!         })
//!         .await?;
//!     println!("{} made {}", info.name, volume.external_id);
//! }
//! # Ok(()) }
//! ```
//! Every method maps to one RPC (`probe`, `plugin_info`, `plugin_capabilities`,
//! `controller_get_capabilities`, `controller_validate_capabilities`,
//! `controller_publish_volume`, `controller_unpublish_volume`, `create_volume`,
//! `delete_volume`, `list_volumes`, `get_capacity`, `controller_expand_volume`,
//! `create_snapshot`, `delete_snapshot`, `list_snapshots[_with]`, `node_get_capabilities`,
//! `node_get_info`, `node_stage_volume`, `node_unstage_volume`, `node_publish_volume`,
//! `node_unpublish_volume`, `node_expand_volume`). Failures are [`CsiError`]s naming the RPC;
//! a plugin's status keeps its gRPC [`Code`] (`err.code() == Some(Code::NotFound)`).
//! Required fields are not checked before sending: the plugin answers INVALID_ARGUMENT.
//!
//! Everything but the model and the `csi_plugin` block is behind the default `grpc` feature:
//! `default-features = false` gives the model alone, without tonic, prost or tokio.
//!
//! Must not depend on: the server, the client or any driver.

#[cfg(feature = "grpc")]
mod client;
#[cfg(feature = "grpc")]
mod convert;
#[cfg(feature = "grpc")]
mod error;
mod model;
mod plugin_config;

#[cfg(feature = "grpc")]
pub use client::{CONNECT_TIMEOUT, CallOptions, CsiClient};
#[cfg(feature = "grpc")]
pub use convert::CapabilityError;
#[cfg(feature = "grpc")]
pub use error::{Code, CsiError, code_name};
pub use model::*;
pub use plugin_config::*;

#[cfg(feature = "grpc")]
/// The code generated from `proto/csi.proto` (package `csi.v1`): messages, `*_client` and
/// `*_server` modules. Unimplemented server methods answer UNIMPLEMENTED.
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("csi.v1");
}
