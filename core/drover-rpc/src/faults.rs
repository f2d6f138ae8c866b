//! A fault filter for tests: traffic to and from the addresses listed in the file named by
//! `DROVER_TEST_FAULTS` is dropped, as a network partition would. The file is re-read at most
//! every 100 ms, so a test partitions and heals a running server by rewriting it.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Environment variable naming the fault file (one `host:port` per line).
pub const FAULTS_ENV: &str = "DROVER_TEST_FAULTS";

const REFRESH: Duration = Duration::from_millis(100);

/// Addresses this process must neither reach nor hear from.
#[derive(Debug, Default)]
pub struct Faults {
    path: Option<PathBuf>,
    state: Mutex<FaultState>,
}

#[derive(Debug, Default)]
struct FaultState {
    blocked: HashSet<String>,
    read_at: Option<Instant>,
}

impl Faults {
    /// No faults, ever (production).
    pub fn none() -> Faults {
        Faults::default()
    }

    /// Faults from the file `DROVER_TEST_FAULTS` names, if it is set.
    pub fn from_env() -> Faults {
        match std::env::var_os(FAULTS_ENV) {
            Some(p) if !p.is_empty() => {
                tracing::warn!(file = ?p, "test fault injection is on: listed peers are cut off");
                Faults::from_file(PathBuf::from(p))
            }
            _ => Faults::none(),
        }
    }

    pub fn from_file(path: PathBuf) -> Faults {
        Faults {
            path: Some(path),
            state: Mutex::default(),
        }
    }

    /// True if traffic with `addr` must be dropped.
    pub fn blocks(&self, addr: &str) -> bool {
        let Some(path) = &self.path else {
            return false;
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.read_at.is_none_or(|at| at.elapsed() >= REFRESH) {
            // A missing or unreadable file means "no faults": tests remove it to heal.
            state.blocked = std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect();
            state.read_at = Some(Instant::now());
        }
        state.blocked.contains(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_addresses_are_blocked_until_the_file_changes() {
        let path = std::env::temp_dir().join(format!("drover-faults-{}", std::process::id()));
        std::fs::write(&path, "127.0.0.1:1\n\n 127.0.0.1:2 \n").unwrap();
        let faults = Faults::from_file(path.clone());
        assert!(faults.blocks("127.0.0.1:1"));
        assert!(faults.blocks("127.0.0.1:2"));
        assert!(!faults.blocks("127.0.0.1:3"));
        std::fs::remove_file(&path).unwrap();
        std::thread::sleep(REFRESH + Duration::from_millis(20));
        assert!(
            !faults.blocks("127.0.0.1:1"),
            "healed once the file is gone"
        );
        assert!(!Faults::none().blocks("127.0.0.1:1"));
    }
}
