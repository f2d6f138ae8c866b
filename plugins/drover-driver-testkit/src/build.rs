//! Building a cdylib plugin from a test: `cargo test` builds rlibs and test binaries but never a
//! package's cdylib, so tests that load the real library build it first.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `cargo build -p <package>` (with `--release` when `release`) in the workspace at
/// `workspace_root` and returns the path of the library it produced
/// (`<target>/<debug|release>/lib<package>.so`, dashes as underscores). The target directory is
/// `CARGO_TARGET_DIR` when set, else `<workspace_root>/target`.
pub fn build_cdylib(
    workspace_root: &Path,
    package: &str,
    release: bool,
) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut args = vec!["build", "-p", package];
    if release {
        args.push("--release");
    }
    let out = Command::new(&cargo)
        .args(&args)
        .current_dir(workspace_root)
        .output()
        .map_err(|e| format!("running {cargo} build -p {package}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build -p {package} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root.join("target"));
    let lib = target
        .join(if release { "release" } else { "debug" })
        .join(format!("lib{}.so", package.replace('-', "_")));
    if lib.exists() {
        Ok(lib)
    } else {
        Err(format!(
            "cargo build -p {package} succeeded but {} is missing: is it a cdylib?",
            lib.display()
        ))
    }
}
