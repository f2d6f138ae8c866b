//! The plugin host: the catalog of task drivers an agent offers, built from the built-in drivers
//! the binary registers and the plugins found in `plugin_dir`, each configured from its
//! `plugin "NAME" { config { ... } }` block.
//!
//! Plugins come in two kinds, one module each: shared libraries loaded in-process (`dylib`), and
//! executables speaking Nomad's external plugin protocol, go-plugin over gRPC (`grpc`: Drover's
//! sidecars and Nomad's external driver plugins alike). An external plugin whose driver name
//! equals a built-in replaces the built-in.
//!
//! Must not depend on: any core crate (server, client, state) or any concrete driver. It sees
//! drivers only through `drover_abi::Driver`.

pub mod dylib;
pub mod grpc;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use drover_abi::Driver;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum PluginHostError {
    /// The driver's message is part of this one and not its `source`: error chains (anyhow's
    /// `{:#}`) would print it twice.
    #[error("plugin \"{name}\" config: {error}")]
    Config {
        name: String,
        error: drover_abi::DriverError,
    },
    #[error("plugin \"{0}\" is configured, but no built-in driver or plugin has that name")]
    UnknownPlugin(String),
    #[error("reading plugin_dir {path}: {source}")]
    PluginDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Dylib(#[from] drover_abi_ffi::host::LoadError),
    #[error(transparent)]
    Grpc(#[from] grpc::GrpcError),
    #[error("{second} and {first} both provide the driver \"{name}\"; remove one from plugin_dir")]
    DuplicatePlugin {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
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

/// Where a catalog entry comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverSource {
    BuiltIn,
    /// A library in `plugin_dir`.
    Dylib {
        path: PathBuf,
        abi_version: String,
    },
    /// An executable in `plugin_dir` speaking Nomad's plugin protocol.
    Grpc {
        path: PathBuf,
    },
}

impl DriverSource {
    /// The plugin file, for external plugins.
    pub fn path(&self) -> Option<&Path> {
        match self {
            DriverSource::BuiltIn => None,
            DriverSource::Dylib { path, .. } | DriverSource::Grpc { path } => Some(path),
        }
    }
}

#[derive(Clone)]
struct Entry {
    driver: Arc<dyn Driver>,
    /// The `plugin "NAME"` block this entry reads: the driver name for built-ins, the file name
    /// for external plugins (Nomad's rule).
    config_name: String,
    source: DriverSource,
}

/// The drivers an agent offers, by the name jobs use.
#[derive(Default, Clone)]
pub struct DriverCatalog {
    drivers: BTreeMap<String, Entry>,
    grpc: grpc::GrpcOptions,
    /// The gRPC plugin processes this catalog started (not reattached to).
    started: Vec<Arc<grpc::GrpcDriver>>,
}

impl DriverCatalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a built-in driver under the name it reports.
    pub fn register(&mut self, driver: Arc<dyn Driver>) {
        let name = driver.plugin_info().name;
        self.drivers.insert(
            name.clone(),
            Entry {
                driver,
                config_name: name,
                source: DriverSource::BuiltIn,
            },
        );
    }

    /// Keeps the state of gRPC plugins (reattach configs, their logs) in `dir`, normally
    /// `<data_dir>/plugins`: they then outlive the agent, which reattaches to them when it
    /// starts again. Without it, a gRPC plugin lives as long as its driver object.
    pub fn set_plugin_state_dir(&mut self, dir: impl Into<PathBuf>) {
        self.grpc.state_dir = Some(dir.into());
    }

    /// How long a plugin executable gets to print its handshake (go-plugin's default: 1 min).
    pub fn set_handshake_timeout(&mut self, timeout: std::time::Duration) {
        self.grpc.handshake_timeout = timeout;
    }

    /// Loads the plugins found in `dir`: every shared library must be a driver plugin, every
    /// executable a Nomad external driver plugin (one that is not is an error naming the file).
    /// A plugin named like a built-in replaces it; two plugins with one name are an error. A
    /// missing directory holds no plugins.
    pub fn load_plugin_dir(&mut self, dir: &Path) -> Result<(), PluginHostError> {
        if !dir.exists() {
            return Ok(());
        }
        let candidates = scan_plugin_dir(dir)?;
        if let Some(state_dir) = &self.grpc.state_dir {
            // Plugins earlier agents started from files that are gone now.
            let present: Vec<String> = candidates
                .iter()
                .filter(|c| c.kind == "executable")
                .map(|c| grpc::config_name(&c.path))
                .collect();
            grpc::stop_plugins(state_dir, &present);
        }
        for candidate in candidates {
            let (entry, detail) = if candidate.kind == "dylib" {
                let plugin = dylib::load_dylib(&candidate.path)?;
                let detail = format!("cdylib, ABI {}", plugin.abi_version);
                let entry = Entry {
                    driver: plugin.driver,
                    config_name: plugin.config_name,
                    source: DriverSource::Dylib {
                        path: plugin.path,
                        abi_version: plugin.abi_version,
                    },
                };
                (entry, detail)
            } else {
                let plugin = grpc::load(&candidate.path, &self.grpc)?;
                if !plugin.reattached {
                    self.started.push(Arc::clone(&plugin.driver));
                }
                let detail = format!("gRPC, pid {}", plugin.driver.pid().unwrap_or(0));
                let entry = Entry {
                    driver: plugin.driver,
                    config_name: plugin.config_name,
                    source: DriverSource::Grpc { path: plugin.path },
                };
                (entry, detail)
            };
            self.add_external(entry, &detail)?;
        }
        Ok(())
    }

    /// Adds a plugin found in plugin_dir under the driver name it reports.
    fn add_external(&mut self, entry: Entry, detail: &str) -> Result<(), PluginHostError> {
        let name = entry.driver.plugin_info().name;
        let path = entry
            .source
            .path()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        match self.drivers.get(&name).map(|e| &e.source) {
            Some(DriverSource::BuiltIn) => tracing::info!(
                driver = %name,
                path = %path.display(),
                "external plugin replaces the built-in driver"
            ),
            Some(other) => {
                return Err(PluginHostError::DuplicatePlugin {
                    name,
                    first: other.path().map(Path::to_path_buf).unwrap_or_default(),
                    second: path,
                });
            }
            None => {}
        }
        tracing::info!(driver = %name, path = %path.display(), "loaded driver plugin ({detail})");
        self.drivers.insert(name, entry);
        Ok(())
    }

    /// The driver name whose entry reads the `plugin "NAME"` block `block`: the entry with that
    /// config name (a plugin's file name), else the driver of that name.
    fn entry_for_block(&self, block: &str) -> Option<&str> {
        self.drivers
            .iter()
            .find(|(_, e)| e.config_name == block)
            .or_else(|| self.drivers.get_key_value(block))
            .map(|(name, _)| name.as_str())
    }

    /// Applies each driver's `plugin` block (an empty object when there is none). A block for a
    /// name no driver has is an error.
    pub fn configure(&self, configs: &BTreeMap<String, Value>) -> Result<(), PluginHostError> {
        let mut by_driver: BTreeMap<&str, (&str, &Value)> = BTreeMap::new();
        for (block, config) in configs {
            let driver = self
                .entry_for_block(block)
                .ok_or_else(|| PluginHostError::UnknownPlugin(block.clone()))?;
            by_driver.insert(driver, (block.as_str(), config));
        }
        let empty = Value::Object(Default::default());
        for (name, entry) in &self.drivers {
            let (block, cfg) = by_driver
                .get(name.as_str())
                .copied()
                .unwrap_or((entry.config_name.as_str(), &empty));
            entry
                .driver
                .set_config(cfg)
                .map_err(|error| PluginHostError::Config {
                    name: block.to_string(),
                    error,
                })?;
        }
        Ok(())
    }

    /// Shuts down the gRPC plugin processes this catalog started and removes their reattach
    /// configs: for an agent that refuses to start (a bad plugin config, a bad plugin), which
    /// must leave no plugin running without an agent. Plugins an earlier agent left running,
    /// with their tasks, stay for the next agent.
    pub fn stop_started_plugins(&mut self) {
        for driver in self.started.drain(..) {
            driver.shut_down_plugin();
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Driver>> {
        self.drivers.get(name).map(|e| Arc::clone(&e.driver))
    }

    /// Where the driver `name` comes from.
    pub fn source(&self, name: &str) -> Option<&DriverSource> {
        self.drivers.get(name).map(|e| &e.source)
    }

    pub fn names(&self) -> Vec<String> {
        self.drivers.keys().cloned().collect()
    }

    pub fn into_map(self) -> BTreeMap<String, Arc<dyn Driver>> {
        self.drivers
            .into_iter()
            .map(|(name, e)| (name, e.driver))
            .collect()
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
                group_network: false,
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
    fn a_refused_plugin_config_is_said_once_in_the_error_chain() {
        let mut cat = DriverCatalog::new();
        cat.register(Arc::new(RecordingDriver::default()));
        let bad = BTreeMap::from([("rec".to_string(), serde_json::json!({"bad": true}))]);
        let e = cat.configure(&bad).unwrap_err();
        // What anyhow's `{:#}` prints: the error, then each source after ": ".
        let mut chain = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            chain.push_str(&format!(": {s}"));
            source = s.source();
        }
        assert_eq!(chain.matches("unknown field").count(), 1, "{chain}");
    }

    /// A plugin_dir holding one executable script.
    fn script_dir(tag: &str, name: &str, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("drover-plugin-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(name);
        std::fs::write(&exe, script).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    #[test]
    fn an_executable_that_is_not_a_plugin_is_refused_naming_the_file_and_why() {
        let dir = script_dir(
            "exe-garbage",
            "nomad-driver-x",
            "#!/bin/sh\necho hello\nsleep 5\n",
        );
        let e = DriverCatalog::new()
            .load_plugin_dir(&dir)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nomad-driver-x") && e.contains("unrecognized remote plugin message"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let dir = script_dir("exe-exits", "nomad-driver-y", "#!/bin/sh\nexit 3\n");
        let e = DriverCatalog::new()
            .load_plugin_dir(&dir)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nomad-driver-y") && e.contains("exited before its handshake"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let dir = script_dir("exe-silent", "nomad-driver-z", "#!/bin/sh\nsleep 30\n");
        let mut cat = DriverCatalog::new();
        cat.set_handshake_timeout(Duration::from_millis(300));
        let e = cat.load_plugin_dir(&dir).unwrap_err().to_string();
        assert!(
            e.contains("nomad-driver-z") && e.contains("no handshake"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let netrpc = "#!/bin/sh\necho '1|2|unix|/tmp/none|netrpc|'\nsleep 5\n";
        let dir = script_dir("exe-netrpc", "old-plugin", netrpc);
        let e = DriverCatalog::new()
            .load_plugin_dir(&dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("old-plugin") && e.contains("only gRPC"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_library_that_is_not_a_plugin_is_refused_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("drover-plugin-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libfoo.so"), b"").unwrap();
        let mut cat = DriverCatalog::new();
        let e = cat.load_plugin_dir(&dir).unwrap_err().to_string();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            e.contains("libfoo.so") && e.contains("not a Drover driver plugin"),
            "{e}"
        );
    }
}
