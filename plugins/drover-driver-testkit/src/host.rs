//! The host's part: a throw-away task directory, log FIFOs and their readers, task configs.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use drover_abi::{TaskConfig, TaskResources};

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn mkfifo(path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A task directory with stdout/stderr FIFOs whose read ends are open, as the client's are.
/// Removed on drop.
pub struct TaskDirs {
    /// The allocation directory (`TaskConfig::alloc_dir`).
    pub root: PathBuf,
    /// The task's working directory (`TaskConfig::task_dir`), under `root`.
    pub task_dir: PathBuf,
    /// The read end of the stdout FIFO (`TaskConfig::stdout_path`).
    pub stdout: FifoReader,
    /// The read end of the stderr FIFO (`TaskConfig::stderr_path`).
    pub stderr: FifoReader,
}

impl TaskDirs {
    /// Creates a fresh directory tree under the temp dir (named after `tag`) with both FIFOs.
    pub fn new(tag: &str) -> io::Result<TaskDirs> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let root =
            std::env::temp_dir().join(format!("drover-kit-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let task_dir = root.join("task");
        std::fs::create_dir_all(task_dir.join("local"))?;
        let (out, err) = (root.join("stdout.fifo"), root.join("stderr.fifo"));
        mkfifo(&out)?;
        mkfifo(&err)?;
        Ok(TaskDirs {
            stdout: FifoReader::open(&out)?,
            stderr: FifoReader::open(&err)?,
            root,
            task_dir,
        })
    }

    /// A task config with `driver_config` and a minimal environment; the id is unique.
    pub fn config(&self, name: &str, driver_config: serde_json::Value) -> TaskConfig {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let env = BTreeMap::from([
            (
                "PATH".to_string(),
                "/usr/local/bin:/usr/bin:/bin".to_string(),
            ),
            ("NOMAD_TASK_NAME".to_string(), name.to_string()),
        ]);
        TaskConfig {
            id: format!("kit-alloc/{name}/{n}"),
            name: name.to_string(),
            alloc_id: "kit-alloc".to_string(),
            job_name: "kit".to_string(),
            group_name: "kit".to_string(),
            env: std::sync::Arc::new(env),
            driver_config,
            resources: TaskResources {
                cpu_mhz: 100,
                cores: 0,
                memory_mb: 64,
                memory_max_mb: 0,
            },
            user: String::new(),
            alloc_dir: self.root.clone(),
            task_dir: self.task_dir.clone(),
            stdout_path: self.stdout.path.clone(),
            stderr_path: self.stderr.path.clone(),
            ..Default::default()
        }
    }
}

impl Drop for TaskDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The read end of a log FIFO, non-blocking: it never waits for a writer, and reads gather what
/// arrives until a deadline.
pub struct FifoReader {
    /// The FIFO's path.
    pub path: PathBuf,
    file: File,
    seen: Vec<u8>,
}

impl FifoReader {
    /// Opens the read end of the FIFO at `path` without waiting for a writer.
    pub fn open(path: &Path) -> io::Result<FifoReader> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        Ok(FifoReader {
            path: path.to_path_buf(),
            file,
            seen: Vec::new(),
        })
    }

    fn drain(&mut self) {
        let mut buf = [0u8; 4096];
        loop {
            match self.file.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => self.seen.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// Everything read so far.
    pub fn text(&mut self) -> String {
        self.drain();
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// Waits up to `timeout` for `needle` to appear; returns whether it did.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.text().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
