//! Host paths and their places inside the container: the alloc dir at `/alloc`, the task's
//! `local/` at `/local`, its `secrets/` at `/secrets`, as Nomad mounts them.

use std::path::{Component, Path, PathBuf};

use drover_abi::TaskConfig;

pub const ALLOC_DIR_IN_CONTAINER: &str = "/alloc";
pub const LOCAL_DIR_IN_CONTAINER: &str = "/local";
pub const SECRETS_DIR_IN_CONTAINER: &str = "/secrets";

/// The three host directories every task container gets, with their container paths.
pub fn task_binds(task: &TaskConfig) -> [(PathBuf, &'static str); 3] {
    [
        (task.alloc_dir.join("alloc"), ALLOC_DIR_IN_CONTAINER),
        (task.task_dir.join("local"), LOCAL_DIR_IN_CONTAINER),
        (task.task_dir.join("secrets"), SECRETS_DIR_IN_CONTAINER),
    ]
}

/// Removes `.` and resolves `..` without touching the filesystem (a bind source may not exist
/// yet; Docker creates it).
pub fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() && !path.is_absolute() {
                    out.push("..");
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// A relative path is taken relative to the task dir, as Nomad does for volumes and binds.
pub fn expand(task_dir: &Path, source: &str) -> PathBuf {
    let p = Path::new(source);
    if p.is_absolute() {
        clean(p)
    } else {
        clean(&task_dir.join(p))
    }
}

pub fn is_within(parent: &Path, path: &Path) -> bool {
    clean(path).starts_with(clean(parent))
}

/// Rewrites host paths of the task's directories into their container paths, in values the
/// client interpolated with host paths (`NOMAD_TASK_DIR`, `${NOMAD_ALLOC_DIR}/x` in args...).
pub struct PathRewrite {
    pairs: Vec<(String, &'static str)>,
}

impl PathRewrite {
    pub fn for_task(task: &TaskConfig) -> Self {
        let mut pairs: Vec<(String, &'static str)> = task_binds(task)
            .into_iter()
            .map(|(host, inside)| (host.display().to_string(), inside))
            .filter(|(host, _)| host.len() > 1)
            .collect();
        // Longest first, so that a directory nested in another one is rewritten whole.
        pairs.sort_by_key(|(host, _)| std::cmp::Reverse(host.len()));
        PathRewrite { pairs }
    }

    pub fn apply(&self, value: &str) -> String {
        let mut out = value.to_string();
        for (host, inside) in &self.pairs {
            if out.contains(host.as_str()) {
                out = out.replace(host.as_str(), inside);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_resolves_dots_lexically() {
        assert_eq!(clean(Path::new("/a/b/../c/./d")), PathBuf::from("/a/c/d"));
        assert_eq!(clean(Path::new("/a/../../b")), PathBuf::from("/b"));
    }

    #[test]
    fn relative_sources_stay_inside_unless_they_climb_out() {
        let alloc = Path::new("/data/alloc/a1");
        let task = alloc.join("web");
        assert!(is_within(alloc, &expand(&task, "local/x")));
        assert!(is_within(alloc, &expand(&task, "../alloc/data")));
        assert!(!is_within(alloc, &expand(&task, "../../../etc")));
        assert!(!is_within(alloc, &expand(&task, "/etc")));
        assert!(is_within(alloc, &expand(&task, "/data/alloc/a1/web/local")));
    }
}
