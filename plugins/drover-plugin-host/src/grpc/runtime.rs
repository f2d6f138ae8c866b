//! The tokio runtime the gRPC plugins' clients run on, owned by this crate and shared by every
//! plugin, and the bridge from the synchronous driver contract into it.
//!
//! The contract is called from threads that may block (the client uses `spawn_blocking`), and
//! sometimes from inside another runtime's worker (the agent builds its catalog in an async
//! function). `block_on` of a runtime panics there, so calls never use it: the future is spawned
//! onto this runtime and the caller waits on a plain channel.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Builder, Runtime};

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The shared runtime, built on first use. It is never dropped: dropping a runtime from
/// inside another one panics, and the agent may drop its drivers anywhere.
pub fn runtime() -> Result<&'static Runtime, String> {
    RUNTIME
        .get_or_init(|| {
            Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("drover-plugin-grpc")
                .enable_all()
                .build()
                .map_err(|e| format!("starting the plugin runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Runs `future` on the plugin runtime and blocks the calling thread until it finishes.
pub fn block<F>(future: F) -> Result<F::Output, String>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv()
        .map_err(|_| "a plugin call was cancelled (the plugin runtime is shutting down)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_works_from_a_plain_thread() {
        assert_eq!(block(async { 1 + 1 }), Ok(2));
    }

    #[test]
    fn block_works_from_inside_another_runtimes_worker_without_panicking() {
        let other = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = other.block_on(async {
            block(async {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                7
            })
        });
        assert_eq!(got, Ok(7));
    }
}
