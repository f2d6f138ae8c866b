//! Generates the prost/tonic code of `proto/csi.proto` (client and server: Drover calls
//! plugins, and the plugins shipped with Drover serve it). Uses `$PROTOC` when set, else the
//! protoc vendored by `protoc-bin-vendored` (which also brings the well-known types), so
//! nothing needs to be installed. Nothing to do without the `grpc` feature.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "grpc")]
    generate()?;
    Ok(())
}

#[cfg(feature = "grpc")]
fn generate() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/csi.proto");
    println!("cargo:rerun-if-env-changed=PROTOC");
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        // SAFETY: a build script is single-threaded; nothing else reads the environment now.
        unsafe { std::env::set_var("PROTOC", protoc) };
    }
    let includes = [
        std::path::PathBuf::from("proto"),
        protoc_bin_vendored::include_path()?,
    ];
    tonic_prost_build::configure()
        // Maps as BTreeMap: the model's maps, and a stable order in tests and logs.
        .btree_map(".")
        // A plugin implements what it advertises; the rest answers UNIMPLEMENTED, as the spec
        // asks of RPCs a plugin does not support.
        .generate_default_stubs(true)
        .compile_protos(&[std::path::PathBuf::from("proto/csi.proto")], &includes)?;
    Ok(())
}
