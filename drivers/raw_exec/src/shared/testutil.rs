//! Test fixtures: a throw-away task directory with stdout/stderr FIFOs, and a reader that plays
//! the host's part of holding each FIFO open.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use drover_abi::{TaskConfig, TaskResources};
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::stat::Mode;

static COUNTER: AtomicU32 = AtomicU32::new(0);

pub struct TaskDirs {
    pub root: PathBuf,
    pub task_dir: PathBuf,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// Held open like the host holds them, so that opening for write never fails; never read.
    _host_readers: Vec<FifoReader>,
}

impl TaskDirs {
    pub fn new(tag: &str) -> Self {
        Self::build(tag, true)
    }

    /// Without the host's readers: opening the FIFOs for write fails.
    pub fn without_host(tag: &str) -> Self {
        Self::build(tag, false)
    }

    fn build(tag: &str, with_host: bool) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("drover-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let task_dir = root.join("task");
        std::fs::create_dir_all(task_dir.join("local")).unwrap();
        let stdout = root.join("stdout.fifo");
        let stderr = root.join("stderr.fifo");
        nix::unistd::mkfifo(&stdout, Mode::from_bits_truncate(0o600)).unwrap();
        nix::unistd::mkfifo(&stderr, Mode::from_bits_truncate(0o600)).unwrap();
        let _host_readers = if with_host {
            vec![FifoReader::open(&stdout), FifoReader::open(&stderr)]
        } else {
            Vec::new()
        };
        TaskDirs {
            root,
            task_dir,
            stdout,
            stderr,
            _host_readers,
        }
    }

    pub fn stdout_reader(&self) -> FifoReader {
        FifoReader::open(&self.stdout)
    }

    pub fn stderr_reader(&self) -> FifoReader {
        FifoReader::open(&self.stderr)
    }

    /// A task config for `driver_config`, with a minimal environment.
    pub fn config(&self, id: &str, driver_config: serde_json::Value) -> TaskConfig {
        let mut env = BTreeMap::new();
        env.insert("PATH".to_string(), "/usr/bin:/bin".to_string());
        env.insert("DROVER_TEST".to_string(), "yes".to_string());
        TaskConfig {
            id: format!("alloc-1/{id}/{}", COUNTER.fetch_add(1, Ordering::Relaxed)),
            name: id.to_string(),
            alloc_id: "alloc-1".to_string(),
            job_name: "job".to_string(),
            group_name: "group".to_string(),
            env: std::sync::Arc::new(env),
            driver_config,
            resources: TaskResources::default(),
            user: String::new(),
            alloc_dir: self.root.clone(),
            task_dir: self.task_dir.clone(),
            stdout_path: self.stdout.clone(),
            stderr_path: self.stderr.clone(),
            ..Default::default()
        }
    }
}

impl Drop for TaskDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The read side of a FIFO, opened non-blocking so that opening never waits for a writer.
/// Reads switch it to blocking; call them only once a writer is connected (after `start_task`
/// returned), since a FIFO that never had a writer reads as empty.
pub struct FifoReader {
    file: File,
}

impl FifoReader {
    pub fn open(path: &Path) -> Self {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .unwrap();
        FifoReader { file }
    }

    fn make_blocking(&self) {
        let flags = fcntl(&self.file, FcntlArg::F_GETFL).unwrap();
        let blocking = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
        fcntl(&self.file, FcntlArg::F_SETFL(blocking)).unwrap();
    }

    /// Reads one line (without the newline); empty at end of input.
    pub fn read_line(&mut self) -> String {
        self.make_blocking();
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while self.file.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        String::from_utf8(line).unwrap()
    }

    /// Reads until every writer closed the FIFO.
    pub fn read_until_writers_close(mut self) -> String {
        self.make_blocking();
        let mut out = String::new();
        self.file.read_to_string(&mut out).unwrap();
        out
    }
}

/// What an interactive exec gave back: stdout, stderr and the driver's answer.
pub struct ExecRun {
    pub stdout: String,
    pub stderr: String,
    pub result: Result<drover_abi::ExitResult, drover_abi::DriverError>,
}

/// Runs `exec_task_streaming` of `driver` with `inputs` queued up front (the caller stays
/// until the command exits).
pub fn run_exec(
    driver: &dyn drover_abi::Driver,
    task_id: &str,
    command: &[&str],
    tty: bool,
    inputs: Vec<drover_abi::ExecInput>,
) -> ExecRun {
    let (stream, caller) = drover_abi::ChannelExecStream::new();
    for input in inputs {
        caller.input.send(input).unwrap();
    }
    let options = drover_abi::ExecOptions {
        command: command.iter().map(|s| s.to_string()).collect(),
        tty,
    };
    let result = driver.exec_task_streaming(task_id, &options, &stream);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    for out in caller.output.try_iter() {
        match out {
            drover_abi::ExecStreamOutput::Stdout(d) => stdout.extend(d),
            drover_abi::ExecStreamOutput::Stderr(d) => stderr.extend(d),
        }
    }
    ExecRun {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        result,
    }
}
