//! The plugin host: the catalog of task drivers an agent offers, built from the built-in drivers
//! the binary registers and (in a later step) the plugins found in `plugin_dir`, each configured
//! from its `plugin "NAME" { config { ... } }` block.
//!
//! Must not depend on: any core crate (server, client, state) or any concrete driver. It sees
//! drivers only through `drover_abi::Driver`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use drover_abi::Driver;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum PluginHostError {
    #[error("plugin \"{name}\" config: {source}")]
    Config {
        name: String,
        source: drover_abi::DriverError,
    },
    #[error("plugin \"{0}\" is configured, but no built-in driver or plugin has that name")]
    UnknownPlugin(String),
    #[error("reading plugin_dir {path}: {source}")]
    PluginDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: loading external plugins ({kind}) is not supported yet; remove it from plugin_dir"
    )]
    NotSupported { path: PathBuf, kind: &'static str },
}

/// A file in `plugin_dir` that looks like a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCandidate {
    pub path: PathBuf,
    /// `dylib` for shared libraries, `executable` for go-plugin sidecars.
    pub kind: &'static str,
}

/// Lists the plugin candidates in `dir`: shared libraries and executables, as Nomad does.
pub fn scan_plugin_dir(dir: &Path) -> Result<Vec<PluginCandidate>, PluginHostError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| PluginHostError::PluginDir {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let is_lib = path.extension().is_some_and(|e| e == "so" || e == "dylib");
        if is_lib {
            out.push(PluginCandidate {
                path,
                kind: "dylib",
            });
        } else if meta.permissions().mode() & 0o111 != 0 {
            out.push(PluginCandidate {
                path,
                kind: "executable",
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The drivers an agent offers, by the name jobs use.
#[derive(Default, Clone)]
pub struct DriverCatalog {
    drivers: BTreeMap<String, Arc<dyn Driver>>,
}

impl DriverCatalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a built-in driver under the name it reports.
    pub fn register(&mut self, driver: Arc<dyn Driver>) {
        self.drivers.insert(driver.plugin_info().name, driver);
    }

    /// Loads the plugins found in `dir`. Until external plugins land, a directory holding any
    /// is refused with an error naming the file, rather than silently ignored.
    pub fn load_plugin_dir(&mut self, dir: &Path) -> Result<(), PluginHostError> {
        if !dir.exists() {
            return Ok(());
        }
        if let Some(c) = scan_plugin_dir(dir)?.into_iter().next() {
            return Err(PluginHostError::NotSupported {
                path: c.path,
                kind: c.kind,
            });
        }
        Ok(())
    }

    /// Applies each driver's `plugin` block (an empty object when there is none). A block for a
    /// name no driver has is an error.
    pub fn configure(&self, configs: &BTreeMap<String, Value>) -> Result<(), PluginHostError> {
        for name in configs.keys() {
            if !self.drivers.contains_key(name) {
                return Err(PluginHostError::UnknownPlugin(name.clone()));
            }
        }
        let empty = Value::Object(Default::default());
        for (name, d) in &self.drivers {
            let cfg = configs.get(name).unwrap_or(&empty);
            d.set_config(cfg)
                .map_err(|source| PluginHostError::Config {
                    name: name.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Driver>> {
        self.drivers.get(name).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        self.drivers.keys().cloned().collect()
    }

    pub fn into_map(self) -> BTreeMap<String, Arc<dyn Driver>> {
        self.drivers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_abi::*;
    use std::sync::Mutex;
    use std::time::Duration;

    /// A driver that records the config it was given; only what the catalog calls is real.
    #[derive(Default)]
    struct RecordingDriver {
        config: Mutex<Option<Value>>,
    }

    impl Driver for RecordingDriver {
        fn plugin_info(&self) -> PluginInfo {
            PluginInfo {
                name: "rec".into(),
                plugin_version: "0".into(),
                api_version: DRIVER_API_VERSION.into(),
            }
        }
        fn set_config(&self, config: &Value) -> Result<(), DriverError> {
            if config.get("bad").is_some() {
                return Err(DriverError::InvalidConfig("unknown field \"bad\"".into()));
            }
            *self.config.lock().unwrap() = Some(config.clone());
            Ok(())
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                send_signals: false,
                exec: false,
                fs_isolation: FsIsolation::None,
                network_isolation: false,
                mount_configs: false,
            }
        }
        fn fingerprint(&self) -> Fingerprint {
            Fingerprint {
                health: HealthState::Healthy,
                health_description: String::new(),
                attributes: Default::default(),
            }
        }
        fn validate_task_config(&self, _: &Value) -> Result<(), DriverError> {
            Ok(())
        }
        fn start_task(&self, _: &TaskConfig) -> Result<TaskHandle, DriverError> {
            Err(DriverError::NotSupported("start_task".into()))
        }
        fn wait_task(&self, id: &str, _: Duration) -> Result<Option<ExitResult>, DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn stop_task(&self, id: &str, _: Duration, _: &str) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn destroy_task(&self, id: &str, _: bool) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn recover_task(&self, h: &TaskHandle) -> Result<(), DriverError> {
            Err(DriverError::TaskNotFound(h.config.id.clone()))
        }
    }

    #[test]
    fn configure_applies_blocks_and_refuses_unknown_names_and_bad_config() {
        let d = Arc::new(RecordingDriver::default());
        let mut cat = DriverCatalog::new();
        cat.register(d.clone());
        let mut cfg = BTreeMap::new();
        cfg.insert("rec".to_string(), serde_json::json!({"x": 1}));
        cat.configure(&cfg).unwrap();
        assert_eq!(d.config.lock().unwrap().as_ref().unwrap()["x"], 1);
        cfg.insert("nope".to_string(), serde_json::json!({}));
        assert!(
            matches!(cat.configure(&cfg), Err(PluginHostError::UnknownPlugin(n)) if n == "nope")
        );
        let mut bad = BTreeMap::new();
        bad.insert("rec".to_string(), serde_json::json!({"bad": true}));
        let e = cat.configure(&bad).unwrap_err().to_string();
        assert!(e.contains("plugin \"rec\"") && e.contains("bad"), "{e}");
    }

    #[test]
    fn plugin_dir_with_a_plugin_is_refused_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("drover-plugin-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cat = DriverCatalog::new();
        cat.load_plugin_dir(&dir).unwrap();
        std::fs::write(dir.join("libfoo.so"), b"").unwrap();
        let e = cat.load_plugin_dir(&dir).unwrap_err().to_string();
        assert!(
            e.contains("libfoo.so") && e.contains("not supported"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
