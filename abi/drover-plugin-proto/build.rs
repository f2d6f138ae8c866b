//! Generates the prost/tonic code of the protocol files under `proto/`. Uses `$PROTOC` when set,
//! else the protoc vendored by `protoc-bin-vendored` (which also brings the well-known types),
//! so nothing needs to be installed.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "proto/plugins/shared/hclspec/hcl_spec.proto",
    "proto/plugins/shared/structs/proto/attribute.proto",
    "proto/plugins/shared/structs/proto/recoverable_error.proto",
    "proto/plugins/shared/structs/proto/stats.proto",
    "proto/plugins/base/proto/base.proto",
    "proto/plugins/drivers/proto/driver.proto",
    "proto/go-plugin/grpc_controller.proto",
    "proto/go-plugin/grpc_broker.proto",
    "proto/go-plugin/grpc_stdio.proto",
    "proto/grpc/health/v1/health.proto",
    "proto/google/rpc/status.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-env-changed=PROTOC");
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        // SAFETY: a build script is single-threaded; nothing else reads the environment now.
        unsafe { std::env::set_var("PROTOC", protoc) };
    }
    let protos: Vec<PathBuf> = PROTOS.iter().map(PathBuf::from).collect();
    let includes = [PathBuf::from("proto"), protoc_bin_vendored::include_path()?];
    tonic_prost_build::configure().compile_protos(&protos, &includes)?;
    Ok(())
}
