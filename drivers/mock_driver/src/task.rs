//! One fake task: a small state machine advanced by timer events. There is no process and no
//! thread per task; the driver's single scheduler thread delivers the events.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use drover_abi::{ExitResult, TaskConfig};

use crate::task_config::{MockTaskConfig, OutputSpec};
use crate::time::unix_nanos_now;

/// The error a task reports when its (pretend) plugin went away, as Nomad's mock says it.
pub const PLUGIN_SHUTDOWN: &str = "plugin is shut down";

/// How soon a write that found the FIFO full is tried again.
const WRITE_RETRY: Duration = Duration::from_millis(10);

/// What a timer delivers to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    RunForElapsed,
    WriteStdout,
    WriteStderr,
    PluginExit,
}

/// One output stream. Writes are non-blocking so that a host that reads slowly delays only
/// this stream (by retries), never the scheduler thread that serves every task.
struct Output {
    /// `None` once the stream is finished (or had nothing to write).
    sink: Option<File>,
    text: Vec<u8>,
    writes_left: u64,
    every: Duration,
    /// The unwritten rest of the current write.
    pending: Vec<u8>,
}

impl Output {
    /// A stream with nothing (more) to write.
    fn closed(spec: &OutputSpec) -> Self {
        Output {
            sink: None,
            text: spec.text.as_bytes().to_vec(),
            writes_left: 0,
            every: spec.every,
            pending: Vec::new(),
        }
    }

    /// Opens the stream's FIFO if there is anything to write (an empty path discards output).
    fn open(spec: &OutputSpec, path: &Path) -> io::Result<Self> {
        if spec.text.is_empty() || path.as_os_str().is_empty() {
            return Ok(Self::closed(spec));
        }
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))?;
        Ok(Output {
            sink: Some(file),
            writes_left: spec.repeat.saturating_add(1),
            ..Self::closed(spec)
        })
    }

    fn is_active(&self) -> bool {
        self.sink.is_some()
    }

    /// Writes as much as the FIFO takes; returns when to come back, `None` when finished.
    fn step(&mut self, now: Instant) -> io::Result<Option<Instant>> {
        if self.pending.is_empty() {
            if self.writes_left == 0 {
                self.sink = None;
                return Ok(None);
            }
            self.writes_left -= 1;
            self.pending = self.text.clone();
        }
        let Some(sink) = self.sink.as_mut() else {
            return Ok(None);
        };
        while !self.pending.is_empty() {
            match sink.write(&self.pending) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(Some(now + WRITE_RETRY));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.writes_left == 0 {
            self.sink = None;
            return Ok(None);
        }
        Ok(Some(now + self.every))
    }
}

struct Progress {
    exit: Option<ExitResult>,
    completed_at: i64,
    run_for_elapsed: bool,
    stdout: Output,
    stderr: Output,
    /// Called once the task ends (`Driver::notify_exit`).
    on_exit: Vec<Box<dyn FnOnce() + Send>>,
}

/// A running (or finished) mock task.
pub struct MockTask {
    pub config: TaskConfig,
    pub spec: MockTaskConfig,
    pub started_at: i64,
    progress: Mutex<Progress>,
    exited: Condvar,
}

impl MockTask {
    /// Creates the task and the timer events that drive it. `run_for` is the time left to run
    /// (less than `spec.run_for` for a recovered task). If a log FIFO cannot be opened the task
    /// exists but has already ended with that error, as in Nomad.
    pub fn start(
        config: &TaskConfig,
        spec: MockTaskConfig,
        started_at: i64,
        run_for: Duration,
        now: Instant,
    ) -> (Arc<MockTask>, Vec<(Instant, Event)>) {
        let outputs = Output::open(&spec.stdout, &config.stdout_path)
            .and_then(|stdout| Ok((stdout, Output::open(&spec.stderr, &config.stderr_path)?)));
        let (stdout, stderr, exit) = match outputs {
            Ok((stdout, stderr)) => (stdout, stderr, None),
            Err(e) => {
                let failed = ExitResult {
                    err: Some(format!("connecting task output: {e}")),
                    ..ExitResult::default()
                };
                let (stdout, stderr) = (Output::closed(&spec.stdout), Output::closed(&spec.stderr));
                (stdout, stderr, Some(failed))
            }
        };
        let mut events = Vec::new();
        if exit.is_none() {
            events.push((now + run_for, Event::RunForElapsed));
            if stdout.is_active() {
                events.push((now, Event::WriteStdout));
            }
            if stderr.is_active() {
                events.push((now, Event::WriteStderr));
            }
            if !spec.plugin_exit_after.is_zero() {
                events.push((now + spec.plugin_exit_after, Event::PluginExit));
            }
        }
        let completed_at = if exit.is_some() { unix_nanos_now() } else { 0 };
        let task = Arc::new(MockTask {
            config: config.clone(),
            spec,
            started_at,
            progress: Mutex::new(Progress {
                exit,
                completed_at,
                run_for_elapsed: false,
                stdout,
                stderr,
                on_exit: Vec::new(),
            }),
            exited: Condvar::new(),
        });
        (task, events)
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The result the job asked for (`exit_code`, `exit_signal`, `exit_err_msg`).
    fn configured_exit(&self) -> ExitResult {
        ExitResult {
            exit_code: self.spec.exit_code,
            signal: self.spec.exit_signal,
            oom_killed: false,
            err: (!self.spec.exit_err_msg.is_empty()).then(|| self.spec.exit_err_msg.clone()),
        }
    }

    fn finish(&self, progress: &mut Progress, result: ExitResult) {
        progress.exit = Some(result);
        progress.completed_at = unix_nanos_now();
        // Closing the writers lets the host's log reader see the end of the output.
        progress.stdout.sink = None;
        progress.stderr.sink = None;
        self.exited.notify_all();
        // Notifiers must not block (the contract), so calling them under the lock is fine.
        for notify in progress.on_exit.drain(..) {
            notify();
        }
    }

    /// Calls `notify` once the task has ended: now if it has.
    pub fn on_exit(&self, notify: Box<dyn FnOnce() + Send>) {
        let mut progress = self.lock();
        if progress.exit.is_some() {
            drop(progress);
            notify();
        } else {
            progress.on_exit.push(notify);
        }
    }

    /// Advances the task; returns the next event to schedule for it, if any.
    pub fn on_event(&self, event: Event, now: Instant) -> Option<(Instant, Event)> {
        let mut progress = self.lock();
        if progress.exit.is_some() {
            return None;
        }
        let mut next = None;
        match event {
            Event::RunForElapsed => progress.run_for_elapsed = true,
            Event::PluginExit => {
                let result = ExitResult {
                    err: Some(PLUGIN_SHUTDOWN.to_string()),
                    ..ExitResult::default()
                };
                self.finish(&mut progress, result);
                return None;
            }
            Event::WriteStdout | Event::WriteStderr => {
                let (name, output) = if event == Event::WriteStdout {
                    ("stdout", &mut progress.stdout)
                } else {
                    ("stderr", &mut progress.stderr)
                };
                match output.step(now) {
                    Ok(at) => next = at.map(|at| (at, event)),
                    Err(e) => {
                        let result = ExitResult {
                            err: Some(format!("writing {name}: {e}")),
                            ..ExitResult::default()
                        };
                        self.finish(&mut progress, result);
                        return None;
                    }
                }
            }
        }
        // Like Nomad's mock, the task ends only when run_for is over and its output written.
        if progress.run_for_elapsed && !progress.stdout.is_active() && !progress.stderr.is_active()
        {
            let result = self.configured_exit();
            self.finish(&mut progress, result);
        }
        next
    }

    /// Ends the task now with its configured result (a no-op once it has ended).
    pub fn kill(&self) {
        let mut progress = self.lock();
        if progress.exit.is_none() {
            let result = self.configured_exit();
            self.finish(&mut progress, result);
        }
    }

    pub fn exit_result(&self) -> Option<ExitResult> {
        self.lock().exit.clone()
    }

    pub fn completed_at(&self) -> i64 {
        self.lock().completed_at
    }

    /// Blocks up to `timeout` for the task to end; `None` if it still runs.
    pub fn wait(&self, timeout: Duration) -> Option<ExitResult> {
        let deadline = Instant::now().checked_add(timeout);
        let mut progress = self.lock();
        loop {
            if let Some(exit) = &progress.exit {
                return Some(exit.clone());
            }
            let remaining = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                // A timeout too large to add to now is as good as forever.
                None => Duration::from_secs(3600),
            };
            if remaining.is_zero() {
                return None;
            }
            progress = self
                .exited
                .wait_timeout(progress, remaining)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}
