//! Nomad's `alloc signal` and `alloc restart` on the client: an allocation's [`AllocControl`]
//! sends commands to its task runners, which act on the task that runs now and answer with
//! Nomad's results and error texts (`client/allocrunner`'s `Signal`, `RestartTask`,
//! `RestartRunning`, `RestartAll`).
//!
//! A restart asked for this way stops the task and starts it again at once, without asking the
//! restart tracker: it does not count against the group's `restart` attempts, as Nomad's
//! `SetRestartTriggered` does not.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_structs::multierror::MultiError;
use drover_structs::{TASK_EVENT_RESTART_SIGNAL, TaskEvent};
use tokio::sync::{mpsc, oneshot, watch};

/// The signal sent when a request names none: Nomad's exec-family drivers send SIGINT for a
/// signal they do not know, the empty one included.
pub const DEFAULT_SIGNAL: &str = "SIGINT";

/// Restart reasons Nomad records on the "Restart Signaled" event.
pub const REASON_RESTART_TASK: &str = "User requested task to restart";
pub const REASON_RESTART_RUNNING: &str = "User requested running tasks to restart";
pub const REASON_RESTART_ALL: &str = "User requested all tasks to restart";

/// Why signalling or restarting failed, in Nomad's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocControlError {
    /// This client runs no such allocation (Nomad's `ErrUnknownAllocation`).
    #[error("Unknown allocation {0:?}")]
    UnknownAlloc(String),
    /// `alloc signal` named a task the allocation does not have.
    #[error("Task not found")]
    SignalUnknownTask(String),
    /// `alloc restart` named a task the allocation does not have.
    #[error("Could not find task runner for task: {0}")]
    RestartUnknownTask(String),
    /// The task has no running instance to act on (Nomad's `ErrTaskNotRunning`).
    #[error("Task not running")]
    TaskNotRunning,
    /// A restart of every task of an allocation that is stopping or stopped.
    #[error("restart of an alloc that should not run")]
    AllocNotRunning,
    #[error("task name cannot be set when restarting all tasks")]
    TaskNameWithAllTasks,
    /// A signal name no driver knows. Nomad leaves this to the drivers (its exec-family drivers
    /// send SIGINT instead); Drover refuses it before anything is sent.
    #[error("unknown signal {0:?}")]
    UnknownSignal(String),
    /// The driver failed to signal or stop the task.
    #[error("{0}")]
    Driver(String),
    /// Several tasks were asked and some failed: one line each, in Nomad's multi-error text.
    #[error("{0}")]
    Tasks(MultiError),
    /// The client behind the API cannot do this.
    #[error("{0}")]
    NotSupported(String),
}

/// Where a task runner answers a command.
pub(crate) type Reply = oneshot::Sender<Result<(), AllocControlError>>;

/// What a task runner is asked to do with the task it runs.
pub(crate) enum TaskCommand {
    /// Send `signal` (a name the drivers know) to the running task.
    Signal { signal: String, done: Reply },
    /// Record `event`, stop the running task and start it again; answered once it stopped.
    /// A `failure` restart (a failing check's `check_restart`) counts against the task's
    /// restart policy, as if the task had failed; others do not.
    Restart {
        event: Box<TaskEvent>,
        failure: bool,
        done: Reply,
    },
}

impl TaskCommand {
    /// Answers that the task does not run (a runner between two runs of its task).
    pub(crate) fn refuse(self) {
        let done = match self {
            TaskCommand::Signal { done, .. } | TaskCommand::Restart { done, .. } => done,
        };
        // The asker may have gone; nobody is left to tell then.
        let _ = done.send(Err(AllocControlError::TaskNotRunning));
    }
}

/// The receiving ends of the commands, by task name, for the alloc runner to hand to the task
/// runners it starts. One it does not hand out must be dropped, which answers its commands.
pub(crate) type TaskCommands = BTreeMap<String, mpsc::UnboundedReceiver<TaskCommand>>;

/// Signals and restarts the tasks of one allocation. Cheap to clone.
#[derive(Clone)]
pub struct AllocControl {
    /// Every task of the group, by name.
    tasks: Arc<BTreeMap<String, mpsc::UnboundedSender<TaskCommand>>>,
    /// Turns true once the allocation is asked to stop.
    stop: watch::Receiver<bool>,
    /// Turns true once every task ended.
    done: watch::Receiver<bool>,
}

impl AllocControl {
    pub(crate) fn new(
        task_names: impl IntoIterator<Item = String>,
        stop: watch::Receiver<bool>,
        done: watch::Receiver<bool>,
    ) -> (AllocControl, TaskCommands) {
        let mut senders = BTreeMap::new();
        let mut receivers = BTreeMap::new();
        for name in task_names {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.insert(name.clone(), tx);
            receivers.insert(name, rx);
        }
        let control = AllocControl {
            tasks: Arc::new(senders),
            stop,
            done,
        };
        (control, receivers)
    }

    /// Nomad's `Signal`: sends `signal` (empty: [`DEFAULT_SIGNAL`]) to `task`, or to every task
    /// of the allocation when `None`; each must be running.
    pub async fn signal(&self, task: Option<&str>, signal: &str) -> Result<(), AllocControlError> {
        let signal = signal_to_send(signal)?;
        let command = |done: Reply| TaskCommand::Signal {
            signal: signal.clone(),
            done,
        };
        if let Some(name) = task {
            let tx = self
                .tasks
                .get(name)
                .ok_or_else(|| AllocControlError::SignalUnknownTask(name.to_string()))?;
            return answer(ask(tx, command)).await;
        }
        let asked: Vec<_> = self
            .tasks
            .iter()
            .map(|(name, tx)| (name, ask(tx, command)))
            .collect();
        let mut failures = MultiError::new();
        for (name, reply) in asked {
            if let Err(e) = answer(reply).await {
                failures.push(format!("Failed to signal task: {name}, err: {e}"));
            }
        }
        failures.into_result().map_err(AllocControlError::Tasks)
    }

    /// Nomad's `RestartAllocation`: restarts `task`, or every running task when `None`
    /// (`all_tasks` only changes the reason recorded: tasks that already ended stay so).
    /// Returns once the restarted tasks stopped; they start again right after.
    pub async fn restart(
        &self,
        task: Option<&str>,
        all_tasks: bool,
    ) -> Result<(), AllocControlError> {
        if all_tasks && task.is_some() {
            return Err(AllocControlError::TaskNameWithAllTasks);
        }
        if let Some(name) = task {
            let tx = self
                .tasks
                .get(name)
                .ok_or_else(|| AllocControlError::RestartUnknownTask(name.to_string()))?;
            let event = Box::new(restart_event(REASON_RESTART_TASK));
            return answer(ask(tx, |done| TaskCommand::Restart {
                event,
                failure: false,
                done,
            }))
            .await;
        }
        if *self.stop.borrow() || *self.done.borrow() {
            return Err(AllocControlError::AllocNotRunning);
        }
        let reason = if all_tasks {
            REASON_RESTART_ALL
        } else {
            REASON_RESTART_RUNNING
        };
        let event = Box::new(restart_event(reason));
        let asked: Vec<_> = self
            .tasks
            .iter()
            .map(|(name, tx)| {
                let event = event.clone();
                (
                    name,
                    ask(tx, |done| TaskCommand::Restart {
                        event,
                        failure: false,
                        done,
                    }),
                )
            })
            .collect();
        let mut failures = MultiError::new();
        for (name, reply) in asked {
            match answer(reply).await {
                // Tasks that do not run are not restarted, as in Nomad.
                Ok(()) | Err(AllocControlError::TaskNotRunning) => {}
                Err(e) => failures.push(format!("failed to restart task {name}: {e}")),
            }
        }
        failures.into_result().map_err(AllocControlError::Tasks)
    }
}

impl AllocControl {
    /// Nomad's check watcher: restarts `task` because a check stayed unhealthy past its
    /// `check_restart` limit. Counts as a failure of the task (its restart policy decides
    /// whether and when it starts again). Does not wait for the task to stop.
    pub(crate) fn restart_for_check(&self, task: &str, check: &str) {
        let Some(tx) = self.tasks.get(task) else {
            return;
        };
        let reason = format!("healthcheck: check {check:?} unhealthy");
        let event = Box::new(restart_event(&reason));
        // Nobody waits for the answer: a task that does not run is not restarted.
        drop(ask(tx, |done| TaskCommand::Restart {
            event,
            failure: true,
            done,
        }));
    }
}

/// The "Restart Signaled" event with `reason`.
fn restart_event(reason: &str) -> TaskEvent {
    let mut event = TaskEvent::new(TASK_EVENT_RESTART_SIGNAL);
    event.restart_reason = reason.to_string();
    event.display_message = event.default_display_message();
    event
}

/// The signal name the drivers get for a requested `signal`: `SIG`-prefixed and upper case,
/// [`DEFAULT_SIGNAL`] for none.
fn signal_to_send(signal: &str) -> Result<String, AllocControlError> {
    let trimmed = signal.trim();
    if trimmed.is_empty() {
        return Ok(DEFAULT_SIGNAL.to_string());
    }
    if drover_abi::signal_number(trimmed).is_none() {
        return Err(AllocControlError::UnknownSignal(signal.to_string()));
    }
    let upper = trimmed.to_ascii_uppercase();
    Ok(if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    })
}

/// Sends a command to a task runner; its answer arrives on the returned receiver.
fn ask(
    tx: &mpsc::UnboundedSender<TaskCommand>,
    command: impl FnOnce(Reply) -> TaskCommand,
) -> oneshot::Receiver<Result<(), AllocControlError>> {
    let (done, reply) = oneshot::channel();
    // A runner that ended dropped its receiver: the command, and its reply sender with it, are
    // dropped here, which `answer` reads as a task that does not run.
    let _ = tx.send(command(done));
    reply
}

/// The runner's answer; a runner that ended without answering had no task running.
async fn answer(
    reply: oneshot::Receiver<Result<(), AllocControlError>>,
) -> Result<(), AllocControlError> {
    reply
        .await
        .unwrap_or(Err(AllocControlError::TaskNotRunning))
}

#[cfg(test)]
mod tests;
