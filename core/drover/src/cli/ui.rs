//! Where command output goes. Nomad's CLI writes results to stdout and problems to stderr; a
//! closed stdout (a pipe into `head`) must not turn into a panic, so every write ignores errors
//! here and the process is left to SIGPIPE (see `mod.rs`).

use std::io::Write;

/// One line of normal output.
pub fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
}

/// Nomad's `Ui.Info` inside a monitor: the `==> ` prefix.
pub fn info(line: &str) {
    out(&format!("==> {line}"));
}

/// Nomad's `Ui.Output` inside a monitor: indented under the last `==> ` line.
pub fn detail(line: &str) {
    out(&format!("    {line}"));
}

/// One problem, on stderr.
pub fn err(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
}

/// Raw bytes (log streaming), flushed so `-f` shows lines as they arrive.
pub fn raw(bytes: &[u8]) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes)?;
    stdout.flush()
}
