//! Plugin call overhead: the same skeleton driver called directly through `dyn Driver`, loaded
//! from its cdylib through the abi_stable adapter (JSON across the boundary), and served by its
//! sidecar binary through the gRPC adapter (Nomad's protocol over a unix socket).
//!
//! Run: `cargo bench -p drover-plugin-host --bench plugin_call`. The skeleton cdylib and sidecar
//! are built in the profile the bench itself was built in (release under `cargo bench`), so all
//! sides run equally optimised code; `SKELETON_SO=/path/to/lib.so` and
//! `SKELETON_SIDECAR=/path/to/skeleton-sidecar` use given builds instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_abi::Driver;
use drover_driver_testkit::{TaskDirs, build_cdylib};
use drover_plugin_host::dylib::load_dylib;
use drover_plugin_host::grpc;
use serde_json::json;
use skeleton_driver::SkeletonDriver;

const CALLS: u32 = 100_000;
/// A gRPC round trip costs tens of microseconds: fewer calls give as steady a figure.
const SIDECAR_CALLS: u32 = 10_000;

fn per_call(mut f: impl FnMut(), calls: u32) -> Duration {
    for _ in 0..calls / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..calls {
        f();
    }
    start.elapsed() / calls
}

fn measure(label: &str, driver: &Arc<dyn Driver>, calls: u32) -> (Duration, Duration) {
    let dirs = TaskDirs::new("bench").expect("task dirs");
    let config = dirs.config("bench", json!({"command": "sleep", "args": ["1000"]}));
    driver.start_task(&config).expect("start a task");
    let fingerprint = per_call(
        || {
            std::hint::black_box(driver.fingerprint());
        },
        calls,
    );
    let inspect = per_call(
        || {
            std::hint::black_box(driver.inspect_task(&config.id).expect("inspect"));
        },
        calls,
    );
    driver.destroy_task(&config.id, true).expect("destroy");
    println!(
        "{label:<8} fingerprint {:>8.2} us/call   inspect_task {:>8.2} us/call   ({calls} calls each)",
        fingerprint.as_secs_f64() * 1e6,
        inspect.as_secs_f64() * 1e6
    );
    (fingerprint, inspect)
}

/// Builds the skeleton sidecar binary in the bench's profile and returns its path.
fn build_sidecar(root: &Path, release: bool) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut args = vec!["build", "-p", "skeleton-sidecar"];
    if release {
        args.push("--release");
    }
    let out = std::process::Command::new(cargo)
        .args(&args)
        .current_dir(root)
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "building skeleton-sidecar failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join(if release { "release" } else { "debug" })
        .join("skeleton-sidecar")
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let release = !cfg!(debug_assertions);
    let so: PathBuf = match std::env::var_os("SKELETON_SO") {
        Some(p) => PathBuf::from(p),
        None => build_cdylib(&root, "skeleton-driver", release).expect("build the skeleton cdylib"),
    };
    let sidecar: PathBuf = match std::env::var_os("SKELETON_SIDECAR") {
        Some(p) => PathBuf::from(p),
        None => build_sidecar(&root, release),
    };
    let direct: Arc<dyn Driver> = Arc::new(SkeletonDriver::new());
    let loaded = load_dylib(&so).expect("load the skeleton cdylib").driver;
    let served: Arc<dyn Driver> = grpc::load(&sidecar, &grpc::GrpcOptions::default())
        .expect("start the skeleton sidecar")
        .driver;
    println!("plugin {}; sidecar {}", so.display(), sidecar.display());
    let (df, di) = measure("direct", &direct, CALLS);
    let (lf, li) = measure("dylib", &loaded, CALLS);
    let (sf, si) = measure("sidecar", &served, SIDECAR_CALLS);
    let over = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1e6;
    println!(
        "overhead: dylib fingerprint +{:.2} us/call, inspect_task +{:.2} us/call",
        over(lf, df),
        over(li, di)
    );
    println!(
        "overhead: sidecar fingerprint +{:.2} us/call, inspect_task +{:.2} us/call",
        over(sf, df),
        over(si, di)
    );
}
