//! In-process plugins: shared libraries in `plugin_dir` that export a Drover driver plugin root
//! module (drover-abi-ffi). Each is opened, checked, asked for one driver instance, and offered
//! as an `Arc<dyn Driver>` like any built-in.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use drover_abi::Driver;
use drover_abi_ffi::host::{LoadError, load_library};
use drover_abi_ffi::{HostLogger, LogLevel, RStr};

/// A driver loaded from a library.
pub struct DylibPlugin {
    pub path: PathBuf,
    /// The name its `plugin "NAME"` block uses: the file name without its extension.
    pub config_name: String,
    /// The drover-abi-ffi version the plugin was built against.
    pub abi_version: String,
    pub driver: Arc<dyn Driver>,
}

/// The `plugin "NAME"` block a library answers to: its file name without `.so`/`.dylib`, as
/// Nomad matches plugin blocks by file name (`skeleton.so` is configured by `plugin "skeleton"`).
pub fn config_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

extern "C" fn log_from_plugin(level: LogLevel, source: RStr<'_>, message: RStr<'_>) {
    let (source, message) = (source.as_str(), message.as_str());
    match level {
        LogLevel::Error => tracing::error!(plugin = source, "{message}"),
        LogLevel::Warn => tracing::warn!(plugin = source, "{message}"),
        LogLevel::Info => tracing::info!(plugin = source, "{message}"),
        LogLevel::Debug => tracing::debug!(plugin = source, "{message}"),
    }
}

/// Opens the library at `path` and builds its driver. Errors name the file.
pub fn load_dylib(path: &Path) -> Result<DylibPlugin, LoadError> {
    let library = load_library(
        path,
        Some(HostLogger {
            log: log_from_plugin,
        }),
    )?;
    let driver = library.new_driver()?;
    Ok(DylibPlugin {
        path: path.to_path_buf(),
        config_name: config_name(path),
        abi_version: library.abi_version().to_string(),
        driver: Arc::new(driver),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DriverCatalog, DriverSource, PluginHostError};
    use drover_driver_testkit::{Kit, TaskConfigs, build_cdylib};
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::sync::OnceLock;

    /// The skeleton example's cdylib, built once per test process.
    fn skeleton_so() -> &'static Path {
        static SO: OnceLock<PathBuf> = OnceLock::new();
        SO.get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            build_cdylib(&root, "skeleton-driver", false).expect("build the skeleton cdylib")
        })
    }

    /// A fresh plugin_dir holding the skeleton library under each of `names`.
    fn plugin_dir(tag: &str, names: &[&str]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("drover-dylib-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for n in names {
            std::fs::copy(skeleton_so(), dir.join(n)).unwrap();
        }
        dir
    }

    #[test]
    fn the_skeleton_cdylib_passes_the_conformance_kit_through_the_loader() {
        let so = skeleton_so().to_path_buf();
        let mut configs = TaskConfigs::command();
        configs.bad_plugin_config = Some((json!({"verbose": true}), "verbose".into()));
        // Each call makes a new driver instance from the library, as an agent restart would.
        let kit = Kit::new(
            "skeleton (cdylib)",
            move || load_dylib(&so).expect("load skeleton").driver,
            configs,
        );
        kit.assert_conforms();
    }

    #[test]
    fn a_loaded_plugin_reports_its_name_abi_and_file_name() {
        let plugin = load_dylib(skeleton_so()).unwrap();
        assert_eq!(plugin.driver.plugin_info().name, "skeleton");
        assert_eq!(plugin.abi_version, drover_abi_ffi::ABI_VERSION);
        assert_eq!(plugin.config_name, "libskeleton_driver");
    }

    #[test]
    fn plugin_blocks_match_the_file_name_or_the_driver_name() {
        let dir = plugin_dir("config", &["my-skeleton.so"]);
        let mut cat = DriverCatalog::new();
        cat.load_plugin_dir(&dir).unwrap();
        assert!(matches!(
            cat.source("skeleton"),
            Some(DriverSource::Dylib { path, .. }) if path.ends_with("my-skeleton.so")
        ));
        let by_file = BTreeMap::from([("my-skeleton".to_string(), json!({}))]);
        cat.configure(&by_file).unwrap();
        let by_driver = BTreeMap::from([("skeleton".to_string(), json!({}))]);
        cat.configure(&by_driver).unwrap();
        let bad = BTreeMap::from([("my-skeleton".to_string(), json!({"verbose": true}))]);
        let e = cat.configure(&bad).unwrap_err().to_string();
        assert!(
            e.contains("plugin \"my-skeleton\"") && e.contains("verbose"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_external_plugin_replaces_the_builtin_of_the_same_name() {
        // The skeleton driver itself, linked in, plays a built-in that has the plugin's name.
        let builtin = Arc::new(skeleton_driver::SkeletonDriver::new());
        let mut cat = DriverCatalog::new();
        cat.register(builtin);
        assert_eq!(cat.source("skeleton"), Some(&DriverSource::BuiltIn));
        let dir = plugin_dir("replace", &["skeleton.so"]);
        cat.load_plugin_dir(&dir).unwrap();
        assert!(matches!(
            cat.source("skeleton"),
            Some(DriverSource::Dylib { .. })
        ));
        assert_eq!(cat.names(), vec!["skeleton".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn two_plugins_with_one_driver_name_are_refused_naming_both_files() {
        let dir = plugin_dir("dup", &["a.so", "b.so"]);
        let e = DriverCatalog::new().load_plugin_dir(&dir).unwrap_err();
        assert!(matches!(e, PluginHostError::DuplicatePlugin { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("a.so") && text.contains("b.so"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
