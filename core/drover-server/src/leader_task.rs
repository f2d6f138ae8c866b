//! One background task that runs only while this server leads (the periodic dispatcher, the
//! volume watcher): started when leadership is established, replaced if started again, aborted
//! when leadership is lost or the server shuts down.

use std::future::Future;
use std::sync::Mutex;

use tokio::task::JoinHandle;

#[derive(Default)]
pub(crate) struct LeaderTask {
    task: Mutex<Option<JoinHandle<()>>>,
}

impl LeaderTask {
    /// Runs `work`, aborting the task an earlier `start` left running.
    pub(crate) fn start(&self, work: impl Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(work);
        // A poisoned lock only means a panic elsewhere while holding it; the handle inside is
        // still the one to replace.
        let old = self
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(handle);
        if let Some(old) = old {
            old.abort();
        }
    }

    pub(crate) fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }

    #[cfg(test)]
    pub(crate) fn is_running(&self) -> bool {
        self.task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }
}
