//! Finding the program a task's `command` names on the host, the way Nomad's executor does for
//! raw_exec: the task's
//! `local/` directory, then the task directory, then an absolute host path, then `$PATH`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Used when neither the task environment nor the agent has a `PATH`.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, Error)]
pub enum LookupError {
    #[error("binary \"{0}\" could not be found")]
    NotFound(String),
    #[error("making {path} executable: {source}")]
    Chmod {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Files fetched into the task directory (artifacts, templates) may lack the exec bit; like
/// Nomad, make them executable rather than fail. Host binaries are never modified.
fn make_executable(path: &Path) -> Result<(), LookupError> {
    let chmod_err = |source| LookupError::Chmod {
        path: path.to_path_buf(),
        source,
    };
    let mut perms = std::fs::metadata(path).map_err(chmod_err)?.permissions();
    if perms.mode() & 0o555 != 0o555 {
        perms.set_mode(perms.mode() | 0o555);
        std::fs::set_permissions(path, perms).map_err(chmod_err)?;
    }
    Ok(())
}

/// Resolves `command` to an absolute path. `env_path` is the task's `PATH`, searched before the
/// agent's own for a bare name.
pub fn resolve_command(
    task_dir: &Path,
    command: &str,
    env_path: Option<&str>,
) -> Result<PathBuf, LookupError> {
    let relative = command.trim_start_matches('/');
    for candidate in [
        task_dir.join("local").join(relative),
        task_dir.join(relative),
    ] {
        if candidate.is_file() {
            make_executable(&candidate)?;
            return Ok(candidate);
        }
    }
    let as_path = Path::new(command);
    if as_path.is_absolute() && as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    if !command.contains('/') {
        let agent_path = std::env::var("PATH").ok();
        let search = [env_path, agent_path.as_deref()]
            .into_iter()
            .flatten()
            .find(|p| !p.is_empty())
            .unwrap_or(DEFAULT_PATH);
        for dir in search.split(':').filter(|d| !d.is_empty()) {
            let candidate = Path::new(dir).join(command);
            if is_executable_file(&candidate) {
                return Ok(candidate);
            }
        }
    }
    Err(LookupError::NotFound(command.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::testutil::TaskDirs;

    #[test]
    fn bare_name_is_found_on_the_task_path() {
        let dirs = TaskDirs::new("lookup-path");
        let found = resolve_command(&dirs.task_dir, "sh", Some("/nonexistent:/bin")).unwrap();
        assert_eq!(found, PathBuf::from("/bin/sh"));
    }

    #[test]
    fn task_local_binary_wins_and_is_made_executable() {
        let dirs = TaskDirs::new("lookup-local");
        let script = dirs.task_dir.join("local/sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        let found = resolve_command(&dirs.task_dir, "sh", Some("/bin")).unwrap();
        assert_eq!(found, script);
        let mode = std::fs::metadata(&script).unwrap().permissions().mode();
        assert_eq!(mode & 0o555, 0o555);
    }

    #[test]
    fn relative_path_is_resolved_against_the_task_dir() {
        let dirs = TaskDirs::new("lookup-rel");
        std::fs::create_dir_all(dirs.task_dir.join("bin")).unwrap();
        let tool = dirs.task_dir.join("bin/tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        assert_eq!(
            resolve_command(&dirs.task_dir, "bin/tool", None).unwrap(),
            tool
        );
    }

    #[test]
    fn absolute_host_path_is_used_as_is() {
        let dirs = TaskDirs::new("lookup-abs");
        assert_eq!(
            resolve_command(&dirs.task_dir, "/bin/sh", None).unwrap(),
            PathBuf::from("/bin/sh")
        );
    }

    #[test]
    fn missing_binary_names_the_command() {
        let dirs = TaskDirs::new("lookup-missing");
        let err = resolve_command(&dirs.task_dir, "no-such-binary-xyz", Some("/bin")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "binary \"no-such-binary-xyz\" could not be found"
        );
    }
}
