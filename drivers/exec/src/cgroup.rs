//! Per-task cgroups carrying a task's memory limit and CPU share, on either cgroup layout:
//! v1 (one hierarchy per controller, e.g. /sys/fs/cgroup/memory) or v2 (one unified hierarchy).
//! The layout is detected at runtime from /proc/self/mountinfo.
//!
//! Default placement: on v2, `/drover/<task>` from the root of the unified hierarchy (v2 forbids
//! children with controllers under a cgroup that holds processes, such as the agent's own). On
//! v1, `drover/<task>` under the agent's own cgroup of each hierarchy, so tasks stay inside
//! whatever limits confine the agent. The plugin's `cgroup_parent` overrides both.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use drover_abi::TaskResources;
use thiserror::Error;

const MIB: u64 = 1024 * 1024;
const DEFAULT_PARENT: &str = "drover";
/// Linux accepts dir names up to 255 bytes; task ids are much shorter in practice.
const MAX_NAME_LEN: usize = 200;
/// Killed processes leave their cgroup a moment after death; rmdir is retried that long.
const REMOVE_PATIENCE: Duration = Duration::from_secs(5);

#[derive(Debug, Error)]
pub enum CgroupError {
    #[error("no usable cgroup hierarchy: {0}")]
    Unavailable(String),
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CgroupError {
    let path = path.to_path_buf();
    move |source| CgroupError::Io {
        action,
        path,
        source,
    }
}

/// One cgroup filesystem mount from /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub mount_point: PathBuf,
    /// The cgroup path mounted there (not "/" when a subtree is bind-mounted, as in containers).
    pub root: String,
    /// `None` for cgroup2; the controllers bound to a v1 hierarchy otherwise.
    pub v1_controllers: Option<Vec<String>>,
}

/// Undoes mountinfo's octal escapes (`\040` for a space) in a path field.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup mounts in a mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let _source = right.next()?;
            let super_options = right.next().unwrap_or("");
            let root = unescape_mountinfo(left.get(3)?);
            let mount_point = PathBuf::from(unescape_mountinfo(left.get(4)?));
            let v1_controllers = match fstype {
                "cgroup2" => None,
                "cgroup" => Some(super_options.split(',').map(str::to_string).collect()),
                _ => return None,
            };
            Some(CgroupMount {
                mount_point,
                root,
                v1_controllers,
            })
        })
        .collect()
}

/// The agent's own cgroup path in the v1 hierarchy carrying `controller`, from /proc/self/cgroup.
pub fn own_v1_path(proc_self_cgroup: &str, controller: &str) -> Option<String> {
    proc_self_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_string())
    })
}

/// Where task cgroups go, once the layout is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    V1 {
        memory_parent: PathBuf,
        /// `None` when no v1 hierarchy carries the cpu controller.
        cpu_parent: Option<PathBuf>,
    },
    V2 {
        mount_point: PathBuf,
        parent: PathBuf,
        cpu_available: bool,
    },
}

impl Layout {
    pub fn version(&self) -> u32 {
        match self {
            Layout::V1 { .. } => 1,
            Layout::V2 { .. } => 2,
        }
    }
}

/// `path` (absolute cgroup path) as a directory under a mount of cgroup path `root`.
fn under_mount(mount: &CgroupMount, path: &str) -> PathBuf {
    let relative = path
        .strip_prefix(mount.root.as_str())
        .unwrap_or(path)
        .trim_start_matches('/');
    if relative.is_empty() {
        mount.mount_point.clone()
    } else {
        mount.mount_point.join(relative)
    }
}

/// Picks the layout from the mounts, the agent's own cgroups and the available v2 controllers
/// (`v2_controllers` reads a v2 root's `cgroup.controllers`). v2 wins when it carries the memory
/// controller; otherwise v1 is used (the hybrid layout binds memory to v1).
pub fn choose_layout(
    mounts: &[CgroupMount],
    proc_self_cgroup: &str,
    cgroup_parent: Option<&str>,
    v2_controllers: impl Fn(&Path) -> String,
) -> Result<Layout, CgroupError> {
    let v2 = mounts.iter().find(|m| m.v1_controllers.is_none());
    if let Some(v2) = v2 {
        let controllers = v2_controllers(&v2.mount_point);
        let has = |name: &str| controllers.split_whitespace().any(|c| c == name);
        if has("memory") {
            let parent = under_mount(v2, cgroup_parent.unwrap_or("/drover"));
            return Ok(Layout::V2 {
                mount_point: v2.mount_point.clone(),
                parent,
                cpu_available: has("cpu"),
            });
        }
    }
    let v1_mount = |controller: &str| {
        mounts.iter().find(|m| {
            m.v1_controllers
                .as_ref()
                .is_some_and(|cs| cs.iter().any(|c| c == controller))
        })
    };
    let v1_parent = |mount: &CgroupMount, controller: &str| match cgroup_parent {
        Some(parent) => under_mount(mount, parent),
        None => {
            let own = own_v1_path(proc_self_cgroup, controller).unwrap_or_else(|| "/".into());
            under_mount(mount, &own).join(DEFAULT_PARENT)
        }
    };
    let memory = v1_mount("memory").ok_or_else(|| {
        CgroupError::Unavailable(
            "neither a cgroup2 mount with the memory controller nor a v1 memory hierarchy"
                .to_string(),
        )
    })?;
    Ok(Layout::V1 {
        memory_parent: v1_parent(memory, "memory"),
        cpu_parent: v1_mount("cpu").map(|m| v1_parent(m, "cpu")),
    })
}

/// Detects the host's layout.
pub fn detect(cgroup_parent: Option<&str>) -> Result<Layout, CgroupError> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(io_err("reading", Path::new("/proc/self/mountinfo")))?;
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(io_err("reading", Path::new("/proc/self/cgroup")))?;
    choose_layout(&parse_mountinfo(&mountinfo), &own, cgroup_parent, |root| {
        std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default()
    })
}

/// A task id (`<alloc>/<task>/<random>`) as one safe directory name.
pub fn cgroup_name(task_id: &str) -> String {
    let mut name: String = task_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(MAX_NAME_LEN);
    if name.chars().all(|c| c == '.') {
        name.insert(0, '_');
    }
    name
}

/// Nomad gives cpu shares equal to the task's MHz (bounded to what the kernel accepts).
fn cpu_shares(cpu_mhz: u64) -> u64 {
    cpu_mhz.clamp(2, 262_144)
}

/// cgroup v2 has weights 1..=10000 instead of shares 2..=262144; the same linear map as runc's.
fn cpu_weight(shares: u64) -> u64 {
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value).map_err(io_err("writing", path))
}

fn make_dir(path: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map_err(io_err("creating cgroup", path)),
    }
}

/// Makes sure `controllers` are enabled for the children of every cgroup from `mount_point`
/// down to `parent` (creating missing ones), as v2 requires before a task cgroup can use them.
fn enable_v2_controllers(
    mount_point: &Path,
    parent: &Path,
    controllers: &[&str],
) -> Result<(), CgroupError> {
    let relative = parent.strip_prefix(mount_point).unwrap_or(Path::new(""));
    let mut dir = mount_point.to_path_buf();
    let mut levels = vec![dir.clone()];
    for part in relative.components() {
        dir.push(part);
        levels.push(dir.clone());
    }
    for level in levels {
        make_dir(&level)?;
        let control = level.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&control).map_err(io_err("reading", &control))?;
        for controller in controllers {
            if !enabled.split_whitespace().any(|c| c == *controller) {
                write_file(&control, &format!("+{controller}"))?;
            }
        }
    }
    Ok(())
}

/// The cgroup directories of one task. Their layout is known from the files they hold, so the
/// directories alone (as saved in a task handle) are enough to find limits and clean up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCgroup {
    dirs: Vec<PathBuf>,
}

impl TaskCgroup {
    pub fn from_dirs(dirs: Vec<PathBuf>) -> Self {
        TaskCgroup { dirs }
    }

    /// Creates the task's cgroup(s) and writes its limits. Partial work is removed on failure.
    pub fn create(
        layout: &Layout,
        task_id: &str,
        resources: &TaskResources,
    ) -> Result<Self, CgroupError> {
        let name = cgroup_name(task_id);
        let mut cgroup = TaskCgroup { dirs: Vec::new() };
        let result = cgroup.build(layout, &name, resources);
        if let Err(e) = result {
            // Best effort: the error that matters is the one that stopped the setup.
            let _ = cgroup.remove();
            return Err(e);
        }
        Ok(cgroup)
    }

    fn build(
        &mut self,
        layout: &Layout,
        name: &str,
        resources: &TaskResources,
    ) -> Result<(), CgroupError> {
        let hard_mb = if resources.memory_max_mb > 0 {
            resources.memory_max_mb
        } else {
            resources.memory_mb
        };
        let soft_mb = (resources.memory_mb > 0 && resources.memory_mb < hard_mb)
            .then_some(resources.memory_mb);
        match layout {
            Layout::V1 {
                memory_parent,
                cpu_parent,
            } => {
                std::fs::create_dir_all(memory_parent)
                    .map_err(io_err("creating cgroup", memory_parent))?;
                let memory = memory_parent.join(name);
                make_dir(&memory)?;
                self.dirs.push(memory.clone());
                if hard_mb > 0 {
                    let bytes = (hard_mb * MIB).to_string();
                    write_file(&memory.join("memory.limit_in_bytes"), &bytes)?;
                    // Same limit for memory+swap: the task may not dodge its limit by swapping.
                    let memsw = memory.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write_file(&memsw, &bytes)?;
                    }
                }
                if let Some(soft_mb) = soft_mb {
                    let soft = memory.join("memory.soft_limit_in_bytes");
                    write_file(&soft, &(soft_mb * MIB).to_string())?;
                }
                if resources.cpu_mhz > 0 {
                    let cpu_parent = cpu_parent.as_ref().ok_or_else(|| {
                        CgroupError::Unavailable(
                            "no v1 hierarchy carries the cpu controller".into(),
                        )
                    })?;
                    std::fs::create_dir_all(cpu_parent)
                        .map_err(io_err("creating cgroup", cpu_parent))?;
                    let cpu = cpu_parent.join(name);
                    make_dir(&cpu)?;
                    self.dirs.push(cpu.clone());
                    let shares = cpu_shares(resources.cpu_mhz).to_string();
                    write_file(&cpu.join("cpu.shares"), &shares)?;
                }
            }
            Layout::V2 {
                mount_point,
                parent,
                cpu_available,
            } => {
                let mut controllers = vec!["memory"];
                if resources.cpu_mhz > 0 {
                    if !cpu_available {
                        return Err(CgroupError::Unavailable(
                            "the cgroup2 hierarchy lacks the cpu controller".into(),
                        ));
                    }
                    controllers.push("cpu");
                }
                enable_v2_controllers(mount_point, parent, &controllers)?;
                let dir = parent.join(name);
                make_dir(&dir)?;
                self.dirs.push(dir.clone());
                if hard_mb > 0 {
                    write_file(&dir.join("memory.max"), &(hard_mb * MIB).to_string())?;
                    let swap = dir.join("memory.swap.max");
                    if swap.exists() {
                        write_file(&swap, "0")?;
                    }
                }
                if let Some(soft_mb) = soft_mb {
                    write_file(&dir.join("memory.low"), &(soft_mb * MIB).to_string())?;
                }
                if resources.cpu_mhz > 0 {
                    let weight = cpu_weight(cpu_shares(resources.cpu_mhz)).to_string();
                    write_file(&dir.join("cpu.weight"), &weight)?;
                }
            }
        }
        Ok(())
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The `cgroup.procs` files a task process writes itself into.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    fn find_file(&self, names: &[&str]) -> Option<PathBuf> {
        self.dirs
            .iter()
            .flat_map(|d| names.iter().map(move |n| d.join(n)))
            .find(|p| p.exists())
    }

    /// The file holding the hard memory limit (`memory.limit_in_bytes` or `memory.max`).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn memory_limit_file(&self) -> Option<PathBuf> {
        self.find_file(&["memory.limit_in_bytes", "memory.max"])
    }

    /// How many times the kernel's OOM killer struck in this cgroup.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = self.find_file(&["memory.events", "memory.oom_control"])?;
        let text = std::fs::read_to_string(file).ok()?;
        text.lines().find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == "oom_kill").then(|| value.trim().parse().ok())?
        })
    }

    /// Removes the task's cgroup directories; their processes must be gone (killed processes
    /// may linger a moment, so a busy cgroup is retried for a few seconds).
    pub fn remove(&self) -> Result<(), CgroupError> {
        for dir in &self.dirs {
            let deadline = Instant::now() + REMOVE_PATIENCE;
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => return Err(io_err("removing cgroup", dir)(e)),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_SELF: &str = "4:memory:/agent/slice\n1:cpu:/\n0::/\n";

    #[test]
    fn mountinfo_yields_cgroup_mounts_only() {
        let mounts = parse_mountinfo(HYBRID_MOUNTINFO);
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[0].mount_point, PathBuf::from("/sys/fs/cgroup/cpu"));
        assert_eq!(
            mounts[1].v1_controllers,
            Some(vec!["rw".to_string(), "memory".to_string()])
        );
        assert_eq!(mounts[2].v1_controllers, None);
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        let text = "1 0 0:1 / /sys/fs/my\\040cg rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parse_mountinfo(text)[0].mount_point,
            PathBuf::from("/sys/fs/my cg")
        );
    }

    #[test]
    fn hybrid_host_without_v2_memory_uses_v1_under_own_cgroup() {
        let mounts = parse_mountinfo(HYBRID_MOUNTINFO);
        let layout = choose_layout(&mounts, HYBRID_SELF, None, |_| "hugetlb\n".into()).unwrap();
        assert_eq!(
            layout,
            Layout::V1 {
                memory_parent: PathBuf::from("/sys/fs/cgroup/memory/agent/slice/drover"),
                cpu_parent: Some(PathBuf::from("/sys/fs/cgroup/cpu/drover")),
            }
        );
    }

    #[test]
    fn v2_with_memory_wins_and_honours_the_parent_override() {
        let text = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let layout = choose_layout(&parse_mountinfo(text), "0::/x\n", Some("/jobs"), |_| {
            "cpuset cpu io memory pids\n".into()
        })
        .unwrap();
        assert_eq!(
            layout,
            Layout::V2 {
                mount_point: PathBuf::from("/sys/fs/cgroup"),
                parent: PathBuf::from("/sys/fs/cgroup/jobs"),
                cpu_available: true,
            }
        );
    }

    #[test]
    fn no_memory_controller_anywhere_is_unavailable() {
        let text = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let err =
            choose_layout(&parse_mountinfo(text), "0::/\n", None, |_| "pids\n".into()).unwrap_err();
        assert!(matches!(err, CgroupError::Unavailable(_)), "{err}");
    }

    #[test]
    fn bind_mounted_subtree_root_is_stripped() {
        let text = "35 31 0:32 /agent /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let layout = choose_layout(&parse_mountinfo(text), "4:memory:/agent/x\n", None, |_| {
            String::new()
        })
        .unwrap();
        assert_eq!(
            layout,
            Layout::V1 {
                memory_parent: PathBuf::from("/sys/fs/cgroup/memory/x/drover"),
                cpu_parent: None,
            }
        );
    }

    #[test]
    fn task_ids_become_flat_safe_names() {
        assert_eq!(cgroup_name("a1b2/web task/x9"), "a1b2_web_task_x9");
        assert_eq!(cgroup_name(".."), "_..");
        assert_eq!(cgroup_name(&"x".repeat(300)).len(), MAX_NAME_LEN);
    }

    #[test]
    fn cpu_weight_spans_the_v2_range() {
        assert_eq!(cpu_weight(cpu_shares(0)), 1);
        assert_eq!(cpu_weight(cpu_shares(u64::MAX)), 10_000);
        assert_eq!(cpu_weight(1024), 39);
    }

    #[test]
    fn cgroup_is_created_with_limits_and_removed() {
        let layout = detect(None).unwrap();
        let resources = TaskResources {
            cpu_mhz: 500,
            cores: 0,
            memory_mb: 32,
            memory_max_mb: 64,
        };
        let cgroup = TaskCgroup::create(&layout, "cgroup-test/unit/1", &resources).unwrap();
        let limit = std::fs::read_to_string(cgroup.memory_limit_file().unwrap()).unwrap();
        assert_eq!(limit.trim(), (64 * MIB).to_string());
        assert_eq!(cgroup.oom_kills(), Some(0));
        for dir in cgroup.dirs() {
            assert!(dir.join("cgroup.procs").exists());
        }
        cgroup.remove().unwrap();
        assert!(cgroup.dirs().iter().all(|d| !d.exists()));
        // Removing twice is fine.
        cgroup.remove().unwrap();
    }
}
