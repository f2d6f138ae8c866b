//! The contract's `exec_task_streaming` over an [`ExecSession`]: the caller's input goes to
//! the plugin from a thread of its own, the plugin's output and exit come back on the calling
//! thread. A caller that is gone drops the session, which cancels the call (Nomad's plugins
//! then end the command).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use drover_abi::{DriverError, ExecInput, ExecRecv, ExecStream, ExitResult};

use super::exec::{ExecEvent, ExecInputs, ExecSession};

/// How long each wait for the caller's input or the plugin's output lasts before the other
/// side's state is looked at again.
const POLL: Duration = Duration::from_millis(100);

fn pump_input(inputs: ExecInputs, stream: &dyn ExecStream, ended: &AtomicBool, gone: &AtomicBool) {
    while !ended.load(Ordering::Relaxed) {
        let sent = match stream.recv(POLL) {
            ExecRecv::Input(ExecInput::Stdin(data)) => inputs.write_stdin(&data),
            ExecRecv::Input(ExecInput::CloseStdin) => inputs.close_stdin(),
            ExecRecv::Input(ExecInput::Resize(size)) => {
                inputs.resize(i32::from(size.height), i32::from(size.width))
            }
            ExecRecv::Timeout => Ok(()),
            ExecRecv::Gone => {
                gone.store(true, Ordering::Relaxed);
                return;
            }
        };
        // The session ended; its events say how.
        if sent.is_err() {
            return;
        }
    }
}

fn caller_gone() -> DriverError {
    DriverError::Other("the exec caller went away; the call was cancelled".into())
}

/// Relays `session` and `stream` until the command's exit.
pub(crate) fn relay(
    session: ExecSession,
    stream: &dyn ExecStream,
) -> Result<ExitResult, DriverError> {
    let ended = AtomicBool::new(false);
    let gone = AtomicBool::new(false);
    let inputs = session.input();
    std::thread::scope(|scope| {
        if let Some(inputs) = inputs {
            scope.spawn(|| pump_input(inputs, stream, &ended, &gone));
        }
        let result = loop {
            if gone.load(Ordering::Relaxed) {
                break Err(caller_gone());
            }
            match session.next(POLL) {
                Ok(Some(ExecEvent::Stdout(data))) => {
                    if stream
                        .send(drover_abi::ExecStreamOutput::Stdout(data))
                        .is_err()
                    {
                        break Err(caller_gone());
                    }
                }
                Ok(Some(ExecEvent::Stderr(data))) => {
                    if stream
                        .send(drover_abi::ExecStreamOutput::Stderr(data))
                        .is_err()
                    {
                        break Err(caller_gone());
                    }
                }
                Ok(Some(ExecEvent::Exited(exit))) => break Ok(exit),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        };
        ended.store(true, Ordering::Relaxed);
        result
    })
    // `session` drops here, after the input thread ended: the call is over either way.
}
