//! The driver's own Tokio runtime. The driver contract is synchronous and hosts call it from
//! threads of their own (the client: Tokio's blocking pool); bollard is async. So the driver
//! runs its futures on a small runtime of its own, created on first use and shared by every
//! driver instance of the process, and callers wait on a plain channel. Never `block_on`: a
//! caller may itself be a thread of some runtime, where entering another one would panic.
//!
//! The runtime lives for the rest of the process (a static): dropping a runtime from inside an
//! async context panics, and the driver cannot know where its last owner drops it.

use std::future::Future;
use std::sync::OnceLock;

use thiserror::Error;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// Two workers: the work is waiting on the daemon, not computing.
const WORKER_THREADS: usize = 2;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RuntimeError {
    #[error("cannot start the docker driver's runtime: {0}")]
    Start(String),
    #[error("the docker driver's background task ended without an answer (it panicked)")]
    Lost,
}

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

fn runtime() -> Result<&'static Runtime, RuntimeError> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(WORKER_THREADS)
                .thread_name("docker-driver")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| RuntimeError::Start(e.clone()))
}

/// Runs `fut` on the driver runtime and blocks the calling thread until it is done. Must not be
/// called from the driver runtime's own threads.
pub fn run<F>(fut: F) -> Result<F::Output, RuntimeError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        // The receiver only goes away if the caller did, which cannot happen while it waits.
        let _ = tx.send(fut.await);
    });
    // A panic inside `fut` drops the sender without sending.
    rx.recv().map_err(|_| RuntimeError::Lost)
}

/// Starts `fut` in the background on the driver runtime.
pub fn spawn<F>(fut: F) -> Result<JoinHandle<F::Output>, RuntimeError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Ok(runtime()?.spawn(fut))
}

/// Aborts the task when dropped, so a task's helpers end with it.
pub struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_works_from_inside_another_runtime() {
        let outer = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let v = outer.block_on(async {
            tokio::task::spawn_blocking(|| run(async { 40 + 2 }).unwrap())
                .await
                .unwrap()
        });
        assert_eq!(v, 42);
        // Even from an async context directly (blocking that thread, but not panicking).
        let v = outer.block_on(async { run(async { 7 }).unwrap() });
        assert_eq!(v, 7);
    }

    #[test]
    fn a_panicking_future_is_an_error_not_a_hang() {
        let r = run(async {
            if true {
                panic!("boom");
            }
        });
        assert_eq!(r, Err(RuntimeError::Lost));
    }
}
