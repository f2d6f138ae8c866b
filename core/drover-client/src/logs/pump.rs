//! The pump: one Tokio task per stream copying a FIFO into a [`LogRotator`].

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::rotate::LogRotator;
use super::{CHUNK_SIZE, LogConfig, LogError, LogKind, io_error};

const BYTES_PER_MB: u64 = 1024 * 1024;

/// Copies one FIFO into rotating log files until stopped. Dropping a pump without calling
/// [`LogPump::stop`] stops it the same way, in the background.
#[derive(Debug)]
pub struct LogPump {
    stop_tx: oneshot::Sender<()>,
    worker: JoinHandle<()>,
}

impl LogPump {
    /// Starts copying `fifo` (see [`create_fifo`](super::create_fifo)) into
    /// `<log_dir>/<task>.<kind>.<N>`. Must be called from within a Tokio runtime.
    ///
    /// The FIFO is opened read-write, so the pump itself holds a writer and never sees end of
    /// file when the task closes its end: a restarted task writes into the same, still open pump.
    pub fn start(
        fifo: &Path,
        log_dir: &Path,
        task: &str,
        kind: LogKind,
        config: LogConfig,
    ) -> Result<Self, LogError> {
        let max_file_bytes = config.max_file_size_mb.max(1).saturating_mul(BYTES_PER_MB);
        Self::start_with_limits(fifo, log_dir, task, kind, config.max_files, max_file_bytes)
    }

    fn start_with_limits(
        fifo: &Path,
        log_dir: &Path,
        task: &str,
        kind: LogKind,
        max_files: u32,
        max_file_bytes: u64,
    ) -> Result<Self, LogError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LogError::NoRuntime)?;
        let base = format!("{task}.{}", kind.as_str());
        let rotator = LogRotator::open(log_dir, base, max_files, max_file_bytes)
            .map_err(io_error("open log files in", log_dir))?;
        // Opening registers the FIFO with the reactor of the current runtime.
        let receiver = tokio::net::unix::pipe::OpenOptions::new()
            .read_write(true)
            .open_receiver(fifo)
            .map_err(io_error("open FIFO", fifo))?;
        let (stop_tx, stop_rx) = oneshot::channel();
        let worker = runtime.spawn(pump(receiver, rotator, stop_rx));
        Ok(Self { stop_tx, worker })
    }

    /// Copies whatever the FIFO still holds, without waiting for more, then stops.
    pub async fn stop(self) {
        // The worker may already have ended on its own (after an unrecoverable error).
        let _ = self.stop_tx.send(());
        if let Err(err) = self.worker.await {
            warn!(error = %err, "log pump ended abnormally");
        }
    }
}

/// Waits for the FIFO to have data, and only then takes a buffer for it: a quiet task (most
/// of them) holds no buffer, where one kept per stream cost 64 KiB each, 128 KiB a task.
async fn pump(
    receiver: tokio::net::unix::pipe::Receiver,
    rotator: LogRotator,
    mut stop_rx: oneshot::Receiver<()>,
) {
    let mut slot = Some(rotator);
    loop {
        let Some(rotator) = slot.take() else {
            return;
        };
        let ready = tokio::select! {
            biased;
            // A send or a dropped sender both mean stop.
            _ = &mut stop_rx => {
                slot = Some(rotator);
                break;
            }
            ready = receiver.readable() => ready,
        };
        if let Err(err) = ready {
            warn!(log = %rotator.base, error = %err, "log pump cannot wait on its FIFO, stopping");
            return;
        }
        let mut buf = Vec::with_capacity(CHUNK_SIZE);
        match receiver.try_read_buf(&mut buf) {
            // Not expected while the pump holds a writer itself; nothing more can come.
            Ok(0) => {
                slot = Some(rotator);
                break;
            }
            Ok(n) => slot = write_on_blocking_pool(rotator, buf, n).await,
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                slot = Some(rotator)
            }
            Err(err) => {
                warn!(log = %rotator.base, error = %err, "log pump cannot read its FIFO, stopping");
                return;
            }
        }
    }
    let Some(rotator) = slot else {
        return;
    };
    drain(receiver, rotator).await;
}

/// Writes `buf[..len]` off the async threads; gives the rotator back for the next read, or
/// `None` if the write panicked (the pump cannot go on without its rotator).
async fn write_on_blocking_pool(
    mut rotator: LogRotator,
    buf: Vec<u8>,
    len: usize,
) -> Option<LogRotator> {
    let joined = tokio::task::spawn_blocking(move || {
        if let Err(err) = rotator.write(&buf[..len]) {
            // The task must not block on a full pipe because the disk is full: the data is
            // dropped and the pump keeps draining.
            warn!(log = %rotator.base, error = %err, bytes = len, "log data lost");
        }
        rotator
    })
    .await;
    match joined {
        Ok(rotator) => Some(rotator),
        Err(err) => {
            warn!(error = %err, "log writer failed, stopping the pump");
            None
        }
    }
}

/// Copies what the pipe holds right now, then returns: the descriptor is switched to plain
/// non-blocking reads, which report "would block" as soon as the pipe is empty (the pump's own
/// write end means an empty pipe never reads as end of file).
async fn drain(receiver: tokio::net::unix::pipe::Receiver, rotator: LogRotator) {
    let fd = match receiver.into_nonblocking_fd() {
        Ok(fd) => fd,
        Err(err) => {
            warn!(log = %rotator.base, error = %err, "cannot drain log FIFO");
            return;
        }
    };
    let drained = tokio::task::spawn_blocking(move || {
        let mut rotator = rotator;
        let mut buf = vec![0u8; CHUNK_SIZE];
        let mut pipe = File::from(fd);
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if let Err(err) = rotator.write(&buf[..n]) {
                        warn!(log = %rotator.base, error = %err, bytes = n, "log data lost");
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) => {
                    warn!(log = %rotator.base, error = %err, "cannot drain log FIFO");
                    break;
                }
            }
        }
        debug!(log = %rotator.base, "log pump stopped");
    })
    .await;
    if let Err(err) = drained {
        warn!(error = %err, "log drain failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::test_support::*;
    use crate::logs::{LogOrigin, create_fifo, fifo_path, read_logs};
    use std::fs::{self, OpenOptions};
    use std::io::Write;
    use std::time::Duration;

    fn open_writer(fifo: &Path) -> File {
        // The pump holds the read side, so opening for writing does not block.
        OpenOptions::new()
            .write(true)
            .open(fifo)
            .expect("open FIFO for writing")
    }

    async fn wait_for_content(path: &Path, want: &str) {
        for _ in 0..250 {
            if fs::read_to_string(path).is_ok_and(|text| text == want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "{} never held {want:?}; it holds {:?}",
            path.display(),
            fs::read_to_string(path).ok()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pump_copies_fifo_to_log_file_across_writer_restarts() {
        let tmp = TempDir::new();
        let fifo = fifo_path(&tmp.0, "web", LogKind::Stdout);
        create_fifo(&fifo).expect("fifo");
        let pump = LogPump::start(&fifo, &tmp.0, "web", LogKind::Stdout, LogConfig::default())
            .expect("start");

        let mut first = open_writer(&fifo);
        first.write_all(b"first run\n").expect("write");
        drop(first);
        wait_for_content(&tmp.0.join("web.stdout.0"), "first run\n").await;

        // The task restarts: a new writer, the same pump.
        let mut second = open_writer(&fifo);
        second.write_all(b"second run\n").expect("write");
        drop(second);
        wait_for_content(&tmp.0.join("web.stdout.0"), "first run\nsecond run\n").await;
        pump.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stop_drains_what_is_left_in_the_fifo() {
        let tmp = TempDir::new();
        let fifo = fifo_path(&tmp.0, "web", LogKind::Stderr);
        create_fifo(&fifo).expect("fifo");
        let pump = LogPump::start(&fifo, &tmp.0, "web", LogKind::Stderr, LogConfig::default())
            .expect("start");
        let mut writer = open_writer(&fifo);
        let payload = "x".repeat(50_000) + "\n";
        writer.write_all(payload.as_bytes()).expect("write");
        drop(writer);
        tokio::time::timeout(Duration::from_secs(5), pump.stop())
            .await
            .expect("stop does not wait for more data");
        assert_eq!(read(&tmp.0, "web.stderr.0"), payload);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pump_rotates_and_a_restarted_pump_appends() {
        let tmp = TempDir::new();
        let fifo = fifo_path(&tmp.0, "web", LogKind::Stdout);
        create_fifo(&fifo).expect("fifo");

        let pump =
            LogPump::start_with_limits(&fifo, &tmp.0, "web", LogKind::Stdout, 3, 6).expect("start");
        let mut writer = open_writer(&fifo);
        writer.write_all(b"aaaaa\nbbbbb\n").expect("write");
        drop(writer);
        wait_for_content(&tmp.0.join("web.stdout.1"), "bbbbb\n").await;
        pump.stop().await;

        // The agent restarts: a new pump on the same FIFO continues in the highest index.
        let pump = LogPump::start_with_limits(&fifo, &tmp.0, "web", LogKind::Stdout, 3, 6)
            .expect("restart");
        let mut writer = open_writer(&fifo);
        writer.write_all(b"cc\n").expect("write");
        drop(writer);
        pump.stop().await;
        assert_eq!(read(&tmp.0, "web.stdout.0"), "aaaaa\n");
        assert_eq!(read(&tmp.0, "web.stdout.1"), "bbbbb\n");
        assert_eq!(read(&tmp.0, "web.stdout.2"), "cc\n");
        let (all, _) =
            read_logs(&tmp.0, "web", LogKind::Stdout, LogOrigin::Start, 0).expect("read");
        assert_eq!(all, b"aaaaa\nbbbbb\ncc\n");
    }

    #[test]
    fn pump_outside_a_runtime_is_an_error_not_a_panic() {
        let tmp = TempDir::new();
        let fifo = fifo_path(&tmp.0, "web", LogKind::Stdout);
        create_fifo(&fifo).expect("fifo");
        assert!(matches!(
            LogPump::start(&fifo, &tmp.0, "web", LogKind::Stdout, LogConfig::default()),
            Err(LogError::NoRuntime)
        ));
    }
}
