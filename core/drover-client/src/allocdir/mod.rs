//! An allocation's working directory, laid out as Nomad lays it out, and the safe path resolver
//! behind the client filesystem API (`/v1/client/fs/...`).
//!
//! ```text
//! <data_dir>/alloc/<alloc_id>/          0755
//!   alloc/                              0777  shared by the group's tasks (NOMAD_ALLOC_DIR)
//!     data/ logs/ tmp/                  0777
//!   <task>/                             0777  the task's working dir
//!     local/                            0777  NOMAD_TASK_DIR
//!     secrets/                          0777  NOMAD_SECRETS_DIR, never readable over the API
//!     private/                          0777  agent-only files, never readable over the API
//!     tmp/                              1777
//! ```
//!
//! Modes are Nomad's: the directories are world-writable because a task may run as any user.
//! Secrets are protected by the API refusing to read them, not by modes. Nomad mounts a small
//! tmpfs on `secrets/` when it runs as root; that is left to drivers here.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

mod file_info;

pub use file_info::{AllocFileInfo, format_rfc3339_nano, go_file_mode};
use file_info::{content_type, file_info};

/// Directory shared by all tasks of the allocation.
pub const SHARED_ALLOC_NAME: &str = "alloc";
/// Directory under the shared dir that holds every task's log files.
pub const LOG_DIR_NAME: &str = "logs";
/// Directory under the shared dir that survives migration of sticky volumes in Nomad.
pub const SHARED_DATA_DIR: &str = "data";
/// Temporary directory, both in the shared dir and in each task dir.
pub const TMP_DIR_NAME: &str = "tmp";
/// The task's own directory for files it keeps.
pub const TASK_LOCAL: &str = "local";
/// The task's directory for secrets, never served over the API.
pub const TASK_SECRETS: &str = "secrets";
/// The agent's private per-task directory, never served over the API.
pub const TASK_PRIVATE: &str = "private";

const ALLOC_DIR_MODE: u32 = 0o755;
const SHARED_DIR_MODE: u32 = 0o777;
const TASK_DIR_MODE: u32 = 0o777;
const TASK_TMP_MODE: u32 = 0o1777;

#[derive(Debug, thiserror::Error)]
pub enum AllocDirError {
    #[error("invalid allocation id {0:?}: it must be a single path component")]
    InvalidAllocId(String),
    #[error("invalid task name {0:?}: it must be a single path component other than \"alloc\"")]
    InvalidTaskName(String),
    #[error("path {0:?} escapes the allocation directory")]
    PathEscapes(String),
    #[error("reading {0:?} is not allowed: it is inside a task's secrets or private directory")]
    SecretPath(String),
    #[error("path {0:?} does not exist in the allocation directory")]
    NotFound(String),
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot unmount {path} before deleting the allocation directory: {source}")]
    Unmount {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> AllocDirError {
    let path = path.to_path_buf();
    move |source| AllocDirError::Io { op, path, source }
}

/// The host paths of one task's directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskDir {
    /// `<alloc>/<task>`, the task's working directory.
    pub dir: PathBuf,
    /// `<alloc>/<task>/local`.
    pub local_dir: PathBuf,
    /// `<alloc>/<task>/secrets`.
    pub secrets_dir: PathBuf,
    /// `<alloc>/<task>/private`.
    pub private_dir: PathBuf,
    /// `<alloc>/<task>/tmp`.
    pub tmp_dir: PathBuf,
    /// `<alloc>/alloc`, shared with the other tasks.
    pub shared_alloc_dir: PathBuf,
    /// `<alloc>/alloc/logs`, where this task's log files go.
    pub log_dir: PathBuf,
}

/// An allocation's directory under `<data_dir>/alloc/<alloc_id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocDir {
    alloc_dir: PathBuf,
    shared_dir: PathBuf,
}

impl AllocDir {
    /// Names the directory; nothing is created until [`AllocDir::build`].
    pub fn new(data_dir: &Path, alloc_id: &str) -> Result<Self, AllocDirError> {
        if !is_single_component(alloc_id) {
            return Err(AllocDirError::InvalidAllocId(alloc_id.to_string()));
        }
        let alloc_dir = data_dir.join("alloc").join(alloc_id);
        let shared_dir = alloc_dir.join(SHARED_ALLOC_NAME);
        Ok(Self {
            alloc_dir,
            shared_dir,
        })
    }

    /// `<data_dir>/alloc/<alloc_id>`.
    pub fn path(&self) -> &Path {
        &self.alloc_dir
    }

    /// `<alloc>/alloc`, Nomad's `NOMAD_ALLOC_DIR` on the host.
    pub fn shared_dir(&self) -> &Path {
        &self.shared_dir
    }

    /// `<alloc>/alloc/logs`.
    pub fn log_dir(&self) -> PathBuf {
        self.shared_dir.join(LOG_DIR_NAME)
    }

    /// Creates the shared directories and one directory set per task. Safe to call again after
    /// an agent restart: existing directories and their contents are kept, modes are reset.
    pub fn build(&self, task_names: &[String]) -> Result<(), AllocDirError> {
        // Validate every name before touching the disk so a bad name leaves nothing half-built.
        let task_dirs = task_names
            .iter()
            .map(|name| self.task_dir(name))
            .collect::<Result<Vec<_>, _>>()?;

        make_dir(&self.alloc_dir, ALLOC_DIR_MODE)?;
        make_dir(&self.shared_dir, SHARED_DIR_MODE)?;
        for sub in [LOG_DIR_NAME, TMP_DIR_NAME, SHARED_DATA_DIR] {
            make_dir(&self.shared_dir.join(sub), SHARED_DIR_MODE)?;
        }
        for task in &task_dirs {
            make_dir(&task.dir, TASK_DIR_MODE)?;
            make_dir(&task.local_dir, TASK_DIR_MODE)?;
            make_dir(&task.tmp_dir, TASK_TMP_MODE)?;
            make_dir(&task.secrets_dir, TASK_DIR_MODE)?;
            make_dir(&task.private_dir, TASK_DIR_MODE)?;
        }
        Ok(())
    }

    /// The paths of one task's directories (whether or not they exist yet).
    pub fn task_dir(&self, task: &str) -> Result<TaskDir, AllocDirError> {
        if !is_single_component(task) || task == SHARED_ALLOC_NAME {
            return Err(AllocDirError::InvalidTaskName(task.to_string()));
        }
        let dir = self.alloc_dir.join(task);
        Ok(TaskDir {
            local_dir: dir.join(TASK_LOCAL),
            secrets_dir: dir.join(TASK_SECRETS),
            private_dir: dir.join(TASK_PRIVATE),
            tmp_dir: dir.join(TMP_DIR_NAME),
            shared_alloc_dir: self.shared_dir.clone(),
            log_dir: self.log_dir(),
            dir,
        })
    }

    /// Deletes the whole allocation directory. Anything still mounted inside it (a driver's bind
    /// mount, a secrets tmpfs) is detached first, deepest first, so deleting never reaches into a
    /// host directory. A directory that does not exist is not an error.
    pub fn destroy(&self) -> Result<(), AllocDirError> {
        let canonical = match fs::canonicalize(&self.alloc_dir) {
            Ok(path) => path,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(io_error("resolve", &self.alloc_dir)(err)),
        };
        self.unmount_inside(&canonical)?;
        match fs::remove_dir_all(&canonical) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(io_error("delete", &canonical)(err)),
        }
    }

    fn unmount_inside(&self, canonical: &Path) -> Result<(), AllocDirError> {
        let mounts =
            crate::mountinfo::read_self().map_err(io_error("read mounts of", canonical))?;
        let mut inside: Vec<PathBuf> = mounts
            .into_iter()
            .map(|m| m.mount_point)
            .filter(|mount_point| mount_point.starts_with(canonical))
            .collect();
        inside.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        inside.dedup();
        for mount_point in inside {
            match nix::mount::umount2(&mount_point, nix::mount::MntFlags::MNT_DETACH) {
                // EINVAL: no longer a mount point (a stacked mount already went with its parent).
                Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => {}
                Err(source) => {
                    return Err(AllocDirError::Unmount {
                        path: mount_point,
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Resolves a path from the filesystem API, relative to the allocation directory, to a host
    /// path. As in Nomad, a leading `/` means the allocation directory itself (the UI asks for
    /// `/`), and `..` is allowed as long as it stays inside. Refuses paths that leave the
    /// directory lexically or through a symlink, and dangling symlinks (where they point cannot
    /// be checked). The path need not exist.
    pub fn resolve(&self, rel: &str) -> Result<PathBuf, AllocDirError> {
        let escapes = || AllocDirError::PathEscapes(rel.to_string());
        if rel.contains('\0') {
            return Err(escapes());
        }
        let mut parts: Vec<&str> = Vec::new();
        for part in rel.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop().ok_or_else(escapes)?;
                }
                name => parts.push(name),
            }
        }

        let root = fs::canonicalize(&self.alloc_dir).map_err(|err| {
            if err.kind() == std::io::ErrorKind::NotFound {
                AllocDirError::NotFound(rel.to_string())
            } else {
                io_error("resolve", &self.alloc_dir)(err)
            }
        })?;

        // Canonicalise the longest existing prefix; the rest does not exist and so cannot be a
        // symlink.
        let mut existing = parts.len();
        let resolved_prefix = loop {
            let candidate = parts[..existing]
                .iter()
                .fold(root.clone(), |path, part| path.join(part));
            match fs::canonicalize(&candidate) {
                Ok(resolved) => break resolved,
                Err(err)
                    if existing > 0
                        && matches!(
                            err.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                        ) =>
                {
                    if fs::symlink_metadata(&candidate).is_ok() {
                        // It exists as a link but its target does not: a dangling symlink.
                        return Err(escapes());
                    }
                    existing -= 1;
                }
                Err(err) => return Err(io_error("resolve", &candidate)(err)),
            }
        };
        if !resolved_prefix.starts_with(&root) {
            return Err(escapes());
        }
        Ok(parts[existing..]
            .iter()
            .fold(resolved_prefix, |path, part| path.join(part)))
    }

    /// Like [`AllocDir::resolve`], and also refuses anything inside a task's `secrets/` or
    /// `private/` directory: Nomad serves listings of those but never their contents.
    pub fn resolve_readable(&self, rel: &str) -> Result<PathBuf, AllocDirError> {
        let resolved = self.resolve(rel)?;
        let root =
            fs::canonicalize(&self.alloc_dir).map_err(io_error("resolve", &self.alloc_dir))?;
        if is_secret_path(&root, &resolved) {
            return Err(AllocDirError::SecretPath(rel.to_string()));
        }
        Ok(resolved)
    }

    /// Lists a directory, sorted by name, as Nomad's `/v1/client/fs/ls` does. Entries are not
    /// followed: a symlink is listed as a symlink.
    pub fn list(&self, rel: &str) -> Result<Vec<AllocFileInfo>, AllocDirError> {
        let dir = self.resolve(rel)?;
        let entries = fs::read_dir(&dir).map_err(|err| not_found_or(err, rel, "list", &dir))?;
        let mut infos = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_error("list", &dir))?;
            let path = entry.path();
            let metadata = match fs::symlink_metadata(&path) {
                Ok(metadata) => metadata,
                // Deleted between readdir and stat: it is simply no longer there.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(io_error("stat", &path)(err)),
            };
            infos.push(file_info(
                entry.file_name().to_string_lossy().into_owned(),
                &metadata,
                String::new(),
            ));
        }
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(infos)
    }

    /// Describes one file or directory (following symlinks), with a guessed content type, as
    /// Nomad's `/v1/client/fs/stat`.
    pub fn stat(&self, rel: &str) -> Result<AllocFileInfo, AllocDirError> {
        let path = self.resolve(rel)?;
        let metadata = fs::metadata(&path).map_err(|err| not_found_or(err, rel, "stat", &path))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let root =
            fs::canonicalize(&self.alloc_dir).map_err(io_error("resolve", &self.alloc_dir))?;
        // Sniffing reads file contents, which secrets must not leak even in part.
        let sniff = !metadata.is_dir() && !is_secret_path(&root, &path);
        let content_type = content_type(&path, sniff);
        Ok(file_info(name, &metadata, content_type))
    }
}

fn not_found_or(err: std::io::Error, rel: &str, op: &'static str, path: &Path) -> AllocDirError {
    if err.kind() == std::io::ErrorKind::NotFound {
        AllocDirError::NotFound(rel.to_string())
    } else {
        io_error(op, path)(err)
    }
}

fn is_single_component(name: &str) -> bool {
    !name.contains(['/', '\0'])
        && matches!(
            Path::new(name).components().collect::<Vec<_>>().as_slice(),
            [Component::Normal(_)]
        )
}

/// True for `<root>/<task>/secrets/...` and `<root>/<task>/private/...`.
fn is_secret_path(root: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(root) else {
        return false;
    };
    let mut components = rel.components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(task)), Some(Component::Normal(sub))) => {
            task != SHARED_ALLOC_NAME && (sub == TASK_SECRETS || sub == TASK_PRIVATE)
        }
        _ => false,
    }
}

fn make_dir(path: &Path, mode: u32) -> Result<(), AllocDirError> {
    fs::create_dir_all(path).map_err(io_error("create", path))?;
    // Set explicitly: the mode given to mkdir is cut by the umask.
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_error("chmod", path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, symlink};

    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            let path =
                std::env::temp_dir().join(format!("drover-allocdir-{}", uuid::Uuid::new_v4()));
            fs::create_dir_all(&path).expect("create temp dir");
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn built(tasks: &[&str]) -> (TempDir, AllocDir) {
        let tmp = TempDir::new();
        let dir = AllocDir::new(&tmp.0, "a1b2").expect("alloc dir");
        let names: Vec<String> = tasks.iter().map(|t| t.to_string()).collect();
        dir.build(&names).expect("build");
        (tmp, dir)
    }

    fn mode_of(path: &Path) -> u32 {
        fs::metadata(path).expect("stat").mode() & 0o7777
    }

    #[test]
    fn build_creates_nomad_layout_with_nomad_modes() {
        let (tmp, dir) = built(&["web", "sidecar"]);
        let root = tmp.0.join("alloc/a1b2");
        assert_eq!(dir.path(), root);
        assert_eq!(mode_of(&root), 0o755);
        for shared in ["alloc", "alloc/data", "alloc/logs", "alloc/tmp"] {
            assert_eq!(mode_of(&root.join(shared)), 0o777, "{shared}");
        }
        for task in ["web", "sidecar"] {
            let td = dir.task_dir(task).expect("task dir");
            assert_eq!(td.dir, root.join(task));
            assert_eq!(mode_of(&td.local_dir), 0o777);
            assert_eq!(mode_of(&td.secrets_dir), 0o777);
            assert_eq!(mode_of(&td.private_dir), 0o777);
            assert_eq!(mode_of(&td.tmp_dir), 0o1777);
            assert_eq!(td.log_dir, root.join("alloc/logs"));
        }
    }

    #[test]
    fn build_again_keeps_existing_files() {
        let (_tmp, dir) = built(&["web"]);
        let file = dir
            .task_dir("web")
            .expect("task")
            .local_dir
            .join("keep.txt");
        fs::write(&file, "x").expect("write");
        dir.build(&["web".to_string()]).expect("rebuild");
        assert_eq!(fs::read_to_string(&file).expect("read"), "x");
    }

    #[test]
    fn names_that_are_not_one_component_are_refused() {
        let tmp = TempDir::new();
        for bad in ["", ".", "..", "a/b", "/abs", "x\0y"] {
            assert!(matches!(
                AllocDir::new(&tmp.0, bad),
                Err(AllocDirError::InvalidAllocId(_))
            ));
        }
        let dir = AllocDir::new(&tmp.0, "id").expect("alloc dir");
        for bad in ["", "..", "a/b", "alloc"] {
            assert!(matches!(
                dir.task_dir(bad),
                Err(AllocDirError::InvalidTaskName(_))
            ));
        }
        assert!(
            dir.build(&["ok".to_string(), "../evil".to_string()])
                .is_err()
        );
        assert!(!dir.path().exists(), "nothing is built when a name is bad");
    }

    #[test]
    fn resolve_treats_leading_slash_as_alloc_root_and_allows_inner_dotdot() {
        let (_tmp, dir) = built(&["web"]);
        let root = fs::canonicalize(dir.path()).expect("canon");
        assert_eq!(dir.resolve("/").expect("root"), root);
        assert_eq!(dir.resolve("").expect("root"), root);
        assert_eq!(
            dir.resolve("/alloc/logs").expect("logs"),
            root.join("alloc/logs")
        );
        assert_eq!(
            dir.resolve("alloc/../web/./local").expect("local"),
            root.join("web/local")
        );
        assert_eq!(
            dir.resolve("web/local/not/yet").expect("missing ok"),
            root.join("web/local/not/yet")
        );
    }

    #[test]
    fn resolve_refuses_dotdot_out_of_the_alloc_dir() {
        let (_tmp, dir) = built(&["web"]);
        for bad in ["..", "../a1b2", "alloc/../../x", "/../../etc/passwd"] {
            assert!(
                matches!(dir.resolve(bad), Err(AllocDirError::PathEscapes(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn resolve_refuses_symlinks_that_point_outside() {
        let (tmp, dir) = built(&["web"]);
        let outside = tmp.0.join("outside");
        fs::create_dir_all(&outside).expect("mkdir");
        fs::write(outside.join("secret"), "s").expect("write");
        let local = dir.task_dir("web").expect("task").local_dir;
        symlink(&outside, local.join("out")).expect("symlink");
        symlink("/nonexistent/target", local.join("dangling")).expect("symlink");
        symlink("../local", local.join("inside")).expect("symlink");

        assert!(matches!(
            dir.resolve("web/local/out/secret"),
            Err(AllocDirError::PathEscapes(_))
        ));
        assert!(matches!(
            dir.resolve("web/local/out/new-file"),
            Err(AllocDirError::PathEscapes(_))
        ));
        assert!(matches!(
            dir.resolve("web/local/dangling"),
            Err(AllocDirError::PathEscapes(_))
        ));
        let root = fs::canonicalize(dir.path()).expect("canon");
        assert_eq!(
            dir.resolve("web/local/inside").expect("inner link"),
            root.join("web/local")
        );
    }

    #[test]
    fn resolve_readable_refuses_secrets_and_private_but_resolve_allows_listing_them() {
        let (_tmp, dir) = built(&["web"]);
        fs::write(
            dir.task_dir("web").expect("t").secrets_dir.join("token"),
            "t",
        )
        .expect("write");
        assert!(matches!(
            dir.resolve_readable("web/secrets/token"),
            Err(AllocDirError::SecretPath(_))
        ));
        assert!(matches!(
            dir.resolve_readable("web/private/x"),
            Err(AllocDirError::SecretPath(_))
        ));
        assert!(dir.resolve_readable("web/local/x").is_ok());
        assert!(dir.resolve_readable("alloc/logs/web.stdout.0").is_ok());
        let names: Vec<String> = dir
            .list("web/secrets")
            .expect("list")
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, vec!["token"]);
    }

    #[test]
    fn resolve_readable_catches_symlinks_into_secrets() {
        let (_tmp, dir) = built(&["web"]);
        let td = dir.task_dir("web").expect("t");
        fs::write(td.secrets_dir.join("token"), "t").expect("write");
        symlink("../secrets/token", td.local_dir.join("peek")).expect("symlink");
        assert!(matches!(
            dir.resolve_readable("web/local/peek"),
            Err(AllocDirError::SecretPath(_))
        ));
    }

    #[test]
    fn list_returns_sorted_entries_with_go_modes_and_pascal_case_json() {
        let (_tmp, dir) = built(&["web"]);
        let local = dir.task_dir("web").expect("t").local_dir;
        fs::write(local.join("b.txt"), "hello").expect("write");
        fs::set_permissions(local.join("b.txt"), fs::Permissions::from_mode(0o644)).expect("chmod");
        fs::create_dir(local.join("a-dir")).expect("mkdir");
        fs::set_permissions(local.join("a-dir"), fs::Permissions::from_mode(0o750)).expect("chmod");
        symlink("b.txt", local.join("c-link")).expect("symlink");

        let files = dir.list("web/local").expect("list");
        let summary: Vec<(&str, bool, &str)> = files
            .iter()
            .map(|f| (f.name.as_str(), f.is_dir, f.file_mode.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("a-dir", true, "drwxr-x---"),
                ("b.txt", false, "-rw-r--r--"),
                ("c-link", false, "Lrwxrwxrwx"),
            ]
        );
        assert_eq!(files[1].size, 5);

        let json = serde_json::to_value(&files[1]).expect("json");
        let keys: Vec<&str> = json
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys.len(),
            5,
            "ContentType is left out when empty: {keys:?}"
        );
        for key in ["Name", "IsDir", "Size", "FileMode", "ModTime"] {
            assert!(json.get(key).is_some(), "missing {key}");
        }
        assert!(json["ModTime"].as_str().expect("string").ends_with('Z'));
    }

    #[test]
    fn list_of_missing_directory_is_not_found() {
        let (_tmp, dir) = built(&["web"]);
        assert!(matches!(
            dir.list("web/nope"),
            Err(AllocDirError::NotFound(_))
        ));
    }

    #[test]
    fn tmp_dir_mode_string_shows_sticky_bit_like_go() {
        let (_tmp, dir) = built(&["web"]);
        let files = dir.list("web").expect("list");
        let tmp = files.iter().find(|f| f.name == "tmp").expect("tmp");
        assert_eq!(tmp.file_mode, "dtrwxrwxrwx");
    }

    #[test]
    fn stat_sniffs_content_type_but_not_in_secrets() {
        let (_tmp, dir) = built(&["web"]);
        let td = dir.task_dir("web").expect("t");
        fs::write(td.local_dir.join("notes"), "plain words\n").expect("write");
        fs::write(td.local_dir.join("conf.json"), "{}").expect("write");
        fs::write(td.local_dir.join("blob"), [0u8, 1, 2, 3]).expect("write");
        fs::write(td.local_dir.join("empty"), "").expect("write");
        fs::write(td.secrets_dir.join("token"), "plain").expect("write");

        let ct = |p: &str| dir.stat(p).expect("stat").content_type;
        assert_eq!(ct("web/local/notes"), "text/plain; charset=utf-8");
        assert_eq!(ct("web/local/conf.json"), "application/json");
        assert_eq!(ct("web/local/blob"), "application/octet-stream");
        assert_eq!(ct("web/local/empty"), "application/octet-stream");
        assert_eq!(ct("web/secrets/token"), "application/octet-stream");
        let local = dir.stat("web/local").expect("stat");
        assert!(local.is_dir);
        assert_eq!(local.name, "local");
    }

    #[test]
    fn destroy_removes_everything_and_tolerates_a_missing_dir() {
        let (_tmp, dir) = built(&["web"]);
        fs::write(dir.task_dir("web").expect("t").local_dir.join("f"), "x").expect("write");
        dir.destroy().expect("destroy");
        assert!(!dir.path().exists());
        dir.destroy().expect("second destroy is a no-op");
    }

    #[test]
    fn destroy_does_not_follow_symlinks_out_of_the_alloc_dir() {
        let (tmp, dir) = built(&["web"]);
        let outside = tmp.0.join("precious");
        fs::create_dir_all(&outside).expect("mkdir");
        fs::write(outside.join("keep"), "k").expect("write");
        symlink(
            &outside,
            dir.task_dir("web").expect("t").local_dir.join("link"),
        )
        .expect("link");
        dir.destroy().expect("destroy");
        assert!(outside.join("keep").exists());
    }
}
