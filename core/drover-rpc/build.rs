//! Generates the tonic code of `proto/drover_rpc.proto`. Uses `$PROTOC` when set, else the
//! protoc binary vendored by `protoc-bin-vendored`, so nothing needs to be installed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/drover_rpc.proto");
    println!("cargo:rerun-if-env-changed=PROTOC");
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        // SAFETY: a build script is single-threaded; nothing else reads the environment now.
        unsafe { std::env::set_var("PROTOC", protoc) };
    }
    tonic_prost_build::configure().compile_protos(&["proto/drover_rpc.proto"], &["proto"])?;
    Ok(())
}
