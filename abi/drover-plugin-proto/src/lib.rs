//! The wire of Nomad's out-of-process plugin protocol, shared by the agent side
//! (drover-plugin-host) and the plugin side (drover-plugin-sdk's sidecar mode):
//! - the prost/tonic code generated from the protocol files in `proto/`, written from Nomad's
//!   (`base`, `drivers`, `hclspec`, `structs`), go-plugin's (`goplugin`), gRPC health
//!   (`health`) and `google.rpc.Status` (`rpc_status`);
//! - [`handshake`]: go-plugin's environment and handshake line;
//! - [`msgpack`] and [`hcl`]: how plugin and task config travel, as Nomad sends them: a config
//!   block decoded against the plugin's hclspec, msgpack-encoded like go-cty does;
//! - [`status`]: Nomad's RecoverableError in a gRPC status's details.
//!
//! Both sides use the same encoders so that they cannot drift apart.
//!
//! Must not depend on: any other Drover crate (not even drover-abi: conversions to the driver
//! contract live on each side), tokio beyond what tonic brings.

pub mod handshake;
pub mod hcl;
pub mod msgpack;
pub mod status;

/// The generated code, in modules that mirror the protobuf packages (generated code refers to
/// other packages by relative paths). The short aliases below are what callers use.
pub mod generated {
    pub mod hashicorp {
        pub mod nomad {
            pub mod plugins {
                pub mod shared {
                    pub mod hclspec {
                        tonic::include_proto!("hashicorp.nomad.plugins.shared.hclspec");
                    }
                    pub mod structs {
                        tonic::include_proto!("hashicorp.nomad.plugins.shared.structs");
                    }
                }
                pub mod base {
                    pub mod proto {
                        tonic::include_proto!("hashicorp.nomad.plugins.base.proto");
                    }
                }
                pub mod drivers {
                    pub mod proto {
                        tonic::include_proto!("hashicorp.nomad.plugins.drivers.proto");
                    }
                }
            }
        }
    }
    /// go-plugin's services live in `package plugin`.
    pub mod plugin {
        tonic::include_proto!("plugin");
    }
    pub mod grpc {
        pub mod health {
            pub mod v1 {
                tonic::include_proto!("grpc.health.v1");
            }
        }
    }
    pub mod google {
        pub mod rpc {
            tonic::include_proto!("google.rpc");
        }
    }
}

/// `google.rpc.Status`, the encoding of a gRPC status's details.
pub use generated::google::rpc as rpc_status;
/// `grpc.health.v1`: the health service go-plugin pings.
pub use generated::grpc::health::v1 as health;
/// `hashicorp.nomad.plugins.base.proto`: the BasePlugin service.
pub use generated::hashicorp::nomad::plugins::base::proto as base;
/// `hashicorp.nomad.plugins.drivers.proto`: the Driver service.
pub use generated::hashicorp::nomad::plugins::drivers::proto as drivers;
/// `hashicorp.nomad.plugins.shared.hclspec`: config schemas.
pub use generated::hashicorp::nomad::plugins::shared::hclspec;
/// `hashicorp.nomad.plugins.shared.structs`: attributes, stats, recoverable errors.
pub use generated::hashicorp::nomad::plugins::shared::structs;
/// go-plugin's own services (`package plugin`): controller, broker, stdio.
pub use generated::plugin as goplugin;

/// The Nomad driver API version this protocol implements (Nomad's `drivers.ApiVersion010`).
pub const DRIVER_API_VERSION: &str = "v0.1.0";

/// The go-plugin health service name a plugin reports as SERVING.
pub const HEALTH_SERVICE: &str = "plugin";
