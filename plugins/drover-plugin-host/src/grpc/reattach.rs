//! A plugin's reattach config, saved under the agent's data dir so that an agent that restarts
//! finds the plugin it started still running and connects to it again (go-plugin's reattach).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReattachConfig {
    /// The executable it was started from.
    pub path: PathBuf,
    pub pid: i32,
    /// With the pid, names the process for good (pids are reused).
    pub start_ticks: u64,
    pub network: String,
    pub address: String,
    pub protocol_version: u32,
}

/// Where the reattach config of the plugin configured as `config_name` lives.
pub fn file(state_dir: &Path, config_name: &str) -> PathBuf {
    state_dir.join(format!("{config_name}.reattach.json"))
}

/// The saved config, if there is a readable one.
pub fn load(state_dir: &Path, config_name: &str) -> Option<ReattachConfig> {
    let text = std::fs::read_to_string(file(state_dir, config_name)).ok()?;
    match serde_json::from_str(&text) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(plugin = config_name, error = %e, "ignoring an unreadable reattach config");
            None
        }
    }
}

/// Saves atomically (write aside, then rename), so a crash never leaves half a file.
pub fn save(state_dir: &Path, config_name: &str, config: &ReattachConfig) -> std::io::Result<()> {
    std::fs::create_dir_all(state_dir)?;
    let target = file(state_dir, config_name);
    let tmp = target.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(config).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &target)
}

/// The config names of every saved reattach config in `state_dir`.
pub fn saved(state_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(state_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".reattach.json")
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

pub fn remove(state_dir: &Path, config_name: &str) {
    let _ = std::fs::remove_file(file(state_dir, config_name));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_config_loads_back_and_removing_it_forgets_it() {
        let dir = std::env::temp_dir().join(format!("drover-reattach-{}", std::process::id()));
        let c = ReattachConfig {
            path: "/plugins/p".into(),
            pid: 42,
            start_ticks: 7,
            network: "unix".into(),
            address: "/tmp/x/plugin.sock".into(),
            protocol_version: 2,
        };
        save(&dir, "p", &c).unwrap();
        assert_eq!(load(&dir, "p"), Some(c));
        std::fs::write(file(&dir, "q"), "{not json").unwrap();
        assert_eq!(load(&dir, "q"), None);
        assert_eq!(saved(&dir), vec!["p".to_string(), "q".to_string()]);
        remove(&dir, "p");
        assert_eq!(load(&dir, "p"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
