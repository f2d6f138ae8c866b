//! Joining the allocation's network namespace (bridge mode): the namespace file is opened
//! before the fork, and the child enters it with `setns(2)` before it execs, so the task (and
//! anything exec'ed in it) has the allocation's network. raw_exec's `spawn` and exec's
//! isolated child each enter it their own way.

use std::fs::File;
use std::io;

use drover_abi::TaskConfig;

/// The open namespace of a task's allocation, if it has one. Keep it alive until the child
/// has been spawned.
pub fn open(config: &TaskConfig) -> io::Result<Option<File>> {
    let Some(net) = &config.network_isolation else {
        return Ok(None);
    };
    File::open(&net.path).map(Some).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("opening network namespace {}: {e}", net.path.display()),
        )
    })
}
