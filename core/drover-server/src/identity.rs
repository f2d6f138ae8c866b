//! This server's Raft id: random, chosen once and kept in `<data_dir>/raft/raft-id`, so a
//! restarted server is the same member of its cluster.

use std::path::{Path, PathBuf};

use crate::ServerError;

fn id_path(data_dir: &Path) -> PathBuf {
    data_dir.join("raft").join("raft-id")
}

/// Reads the id kept in the data dir, or picks and keeps a new one. A data dir whose Raft log
/// predates the id file belonged to a single-voter agent, whose id was always 1.
pub(crate) fn resolve_raft_id(data_dir: &Path) -> Result<u64, ServerError> {
    let path = id_path(data_dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            return text
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|id| *id != 0)
                .ok_or_else(|| {
                    ServerError::Internal(format!(
                        "{} does not hold a raft id: {:?}",
                        path.display(),
                        text.trim()
                    ))
                });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(ServerError::Internal(format!(
                "reading {}: {e}",
                path.display()
            )));
        }
    }
    let legacy = data_dir.join("raft").join("raft.redb").exists();
    let id = if legacy { 1 } else { random_id() };
    write_id(&path, id)?;
    Ok(id)
}

/// A random id in [1, 2^53): JSON consumers that read numbers as doubles keep it exact.
fn random_id() -> u64 {
    let (high, low) = uuid::Uuid::new_v4().as_u64_pair();
    ((high ^ low) & ((1u64 << 53) - 1)).max(1)
}

fn write_id(path: &Path, id: u64) -> Result<(), ServerError> {
    let io = |e: std::io::Error| ServerError::Internal(format!("writing {}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    // Written aside then renamed: a crash never leaves a half-written id behind.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{id}\n")).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_chosen_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = resolve_raft_id(dir.path()).unwrap();
        assert_ne!(first, 0);
        assert_eq!(resolve_raft_id(dir.path()).unwrap(), first);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(resolve_raft_id(other.path()).unwrap(), first);
    }

    #[test]
    fn a_log_without_an_id_file_was_the_single_voter_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("raft")).unwrap();
        std::fs::write(dir.path().join("raft").join("raft.redb"), b"").unwrap();
        assert_eq!(resolve_raft_id(dir.path()).unwrap(), 1);
    }

    #[test]
    fn a_garbled_id_file_is_an_error_not_a_new_identity() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("raft")).unwrap();
        std::fs::write(id_path(dir.path()), "abc").unwrap();
        assert!(resolve_raft_id(dir.path()).is_err());
    }
}
