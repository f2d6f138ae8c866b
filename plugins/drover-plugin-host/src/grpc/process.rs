//! The plugin process: starting an executable with go-plugin's environment, reading its
//! handshake line, following what it logs, and watching it (as our child, or by pid after an
//! agent restart adopted it).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::time::Duration;

use drover_plugin_proto::handshake::{self, Handshake};

use super::GrpcError;

/// A plugin's log file is set aside once it grows past this, when the plugin is started.
const LOG_ROTATE_BYTES: u64 = 10 * 1024 * 1024;

/// When the process with `pid` started, in clock ticks since boot (field 22 of
/// /proc/PID/stat): with the pid, it names one process for good.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// A running plugin process.
pub struct PluginProcess {
    pub pid: i32,
    pub start_ticks: u64,
    /// Set when this agent started the process: it is reaped through it.
    child: Mutex<Option<Child>>,
}

impl PluginProcess {
    /// A process started by an earlier agent, if `pid` is still the process that started at
    /// `start_ticks`.
    pub fn adopt(pid: i32, ticks: u64) -> Option<PluginProcess> {
        (start_ticks(pid) == Some(ticks)).then(|| PluginProcess {
            pid,
            start_ticks: ticks,
            child: Mutex::new(None),
        })
    }

    pub fn is_alive(&self) -> bool {
        if let Some(child) = self
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            return matches!(child.try_wait(), Ok(None));
        }
        start_ticks(self.pid) == Some(self.start_ticks)
    }

    /// SIGKILL, if the process is still the one we know.
    pub fn kill(&self) {
        if self.is_alive() {
            // SAFETY: kill has no memory-safety preconditions; the pid was checked against its
            // start time just above.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
    }

    /// SIGTERM, up to `grace` for the exit, then SIGKILL.
    pub fn terminate(&self, grace: Duration) {
        if !self.is_alive() {
            return;
        }
        // SAFETY: as in `kill`: no memory-safety preconditions, the pid was just checked.
        unsafe {
            libc::kill(self.pid, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + grace;
        while self.is_alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }

    /// Blocks until the process ends; returns how it ended, as far as we can know.
    pub fn wait(&self) -> String {
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut child) = child {
            return match child.wait() {
                Ok(status) => status.to_string(),
                Err(e) => format!("waiting for it failed: {e}"),
            };
        }
        wait_foreign(self.pid, self.start_ticks);
        "exited (exit status unknown: it was started by an earlier agent)".to_string()
    }
}

/// Waits for a process that is not our child: a pidfd when the kernel has them, else polling.
fn wait_foreign(pid: i32, ticks: u64) {
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw >= 0 && start_ticks(pid) == Some(ticks) {
        // SAFETY: `raw` is a descriptor we just opened and own; descriptors fit an i32.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, -1) };
            if rc > 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return;
            }
        }
    }
    while start_ticks(pid) == Some(ticks) {
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Where a plugin's stderr goes: a log file under the agent's state dir (it survives agent
/// restarts, so a plugin never writes into a dead pipe), or the agent's own stderr.
pub fn log_path(state_dir: Option<&Path>, config_name: &str) -> Option<PathBuf> {
    state_dir.map(|d| d.join(format!("{config_name}.log")))
}

fn open_log(path: &Path) -> std::io::Result<File> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let _ = std::fs::rename(path, path.with_extension("log.old"));
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// Starts the plugin at `path` as go-plugin's client does (its environment plus the agent's,
/// in its own process group so that signals for the agent do not reach it) and waits up to
/// `timeout` for its handshake line.
pub fn launch(
    path: &Path,
    log: Option<&Path>,
    timeout: Duration,
) -> Result<(PluginProcess, Handshake), GrpcError> {
    let err = |reason: String| GrpcError::Launch {
        path: path.to_path_buf(),
        reason,
    };
    let stderr = match log {
        Some(log) => {
            Stdio::from(open_log(log).map_err(|e| err(format!("opening {}: {e}", log.display())))?)
        }
        None => Stdio::inherit(),
    };
    let mut command = Command::new(path);
    command
        .envs(handshake::plugin_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| err(format!("starting it: {e}")))?;
    let pid = i32::try_from(child.id()).map_err(|e| err(e.to_string()))?;
    let ticks = start_ticks(pid).unwrap_or(0);
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        return Err(err("its stdout was not captured".into()));
    };

    // The first line is the handshake; later lines (a plugin should print none) go to the log.
    let (tx, rx) = sync_channel(1);
    let name = path.display().to_string();
    std::thread::Builder::new()
        .name("plugin-stdout".into())
        .spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for line in lines.map_while(Result::ok) {
                tracing::info!(plugin = %name, "{line}");
            }
        })
        .map_err(|e| err(format!("starting its stdout reader: {e}")))?;

    // What a failed start leaves behind goes, with whatever it started: nothing legitimate runs
    // in the plugin's process group before its handshake.
    let kill_group = |child: &mut Child| {
        // SAFETY: kill has no memory-safety preconditions; the group is the one the child leads.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = child.kill();
    };
    let fail = |mut child: Child, reason: String| {
        kill_group(&mut child);
        let _ = child.wait();
        Err(err(reason))
    };
    let line = match rx.recv_timeout(timeout) {
        Ok(Some(Ok(line))) => line,
        Ok(Some(Err(e))) => return fail(child, format!("reading its handshake: {e}")),
        Ok(None) | Err(RecvTimeoutError::Disconnected) => {
            // Its stdout closed: it exited, or it is no plugin; either way it is done.
            kill_group(&mut child);
            let status = child
                .wait()
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string());
            let tail = log.map(log_tail).unwrap_or_default();
            return Err(err(format!(
                "it exited before its handshake ({status}){tail}"
            )));
        }
        Err(RecvTimeoutError::Timeout) => {
            return fail(child, format!("no handshake line within {timeout:?}"));
        }
    };
    let handshake = match Handshake::parse(&line).and_then(|h| h.check().map(|()| h)) {
        Ok(h) => h,
        Err(e) => return fail(child, e.to_string()),
    };
    Ok((
        PluginProcess {
            pid,
            start_ticks: ticks,
            child: Mutex::new(Some(child)),
        },
        handshake,
    ))
}

/// The last lines of a plugin's log, for errors.
fn log_tail(path: &Path) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(2048)));
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    if lines.is_empty() {
        return String::new();
    }
    let shown: Vec<&str> = lines.into_iter().rev().collect();
    format!("; its log ends with:\n{}", shown.join("\n"))
}

/// Forwards what a plugin writes to its log file into the agent's log, from the file's end on,
/// until `stop` says so. hclog JSON lines keep their level; other lines are logged as info.
pub fn follow_log(path: PathBuf, plugin: String, stop: impl Fn() -> bool + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("plugin-log".into())
        .spawn(move || {
            let mut offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let mut pending = String::new();
            while !stop() {
                std::thread::sleep(Duration::from_millis(250));
                let Ok(mut file) = File::open(&path) else {
                    continue;
                };
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                if len < offset {
                    offset = 0; // rotated
                }
                if file.seek(SeekFrom::Start(offset)).is_err() {
                    continue;
                }
                let mut chunk = Vec::new();
                if let Ok(n) = file.read_to_end(&mut chunk) {
                    offset += n as u64;
                    pending.push_str(&String::from_utf8_lossy(&chunk));
                }
                while let Some(end) = pending.find('\n') {
                    let line: String = pending.drain(..=end).collect();
                    log_line(&plugin, line.trim_end());
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start a plugin log follower");
    }
}

fn log_line(plugin: &str, line: &str) {
    if line.is_empty() {
        return;
    }
    let Ok(serde_json::Value::Object(entry)) = serde_json::from_str::<serde_json::Value>(line)
    else {
        tracing::info!(plugin, "{line}");
        return;
    };
    let text = |k: &str| entry.get(k).and_then(|v| v.as_str()).unwrap_or_default();
    let (message, module) = (text("@message"), text("@module"));
    match text("@level") {
        "error" => tracing::error!(plugin, module, "{message}"),
        "warn" => tracing::warn!(plugin, module, "{message}"),
        "debug" | "trace" => tracing::debug!(plugin, module, "{message}"),
        _ => tracing::info!(plugin, module, "{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_start_ticks_are_readable_and_stable() {
        let me = std::process::id() as i32;
        let t = start_ticks(me).unwrap();
        assert_eq!(start_ticks(me), Some(t));
        assert!(PluginProcess::adopt(me, t).is_some());
        assert!(PluginProcess::adopt(me, t + 1).is_none());
        assert_eq!(start_ticks(i32::MAX), None);
    }
}
