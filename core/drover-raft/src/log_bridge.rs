//! Forwards the raft crate's slog records to `tracing`, so they land wherever the agent's
//! logs go.
//!
//! raft-rs narrates every step at info level ("became follower", "starting a new election"),
//! which is noise at the agent's default level: its info goes to debug. The node logs the
//! leadership changes that matter itself, at info.

use std::fmt::{self, Write as _};

use slog::{Drain, KV as _, Level, OwnedKVList, Record};

/// raft-rs adds the node's `raft_id` to every record itself.
pub(crate) fn logger() -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!())
}

struct TracingDrain;

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        let enabled = match record.level() {
            Level::Critical | Level::Error => tracing::enabled!(tracing::Level::ERROR),
            Level::Warning => tracing::enabled!(tracing::Level::WARN),
            Level::Info => tracing::enabled!(tracing::Level::DEBUG),
            Level::Debug | Level::Trace => tracing::enabled!(tracing::Level::TRACE),
        };
        if !enabled {
            return Ok(());
        }
        let mut line = KvLine(record.msg().to_string());
        // Formatting into a String cannot fail; a failing serializer only loses key-values.
        let _ = record.kv().serialize(record, &mut line);
        let _ = values.serialize(record, &mut line);
        let line = line.0;
        match record.level() {
            Level::Critical | Level::Error => tracing::error!("{line}"),
            Level::Warning => tracing::warn!("{line}"),
            Level::Info => tracing::debug!("{line}"),
            Level::Debug | Level::Trace => tracing::trace!("{line}"),
        }
        Ok(())
    }
}

struct KvLine(String);

impl slog::Serializer for KvLine {
    fn emit_arguments(&mut self, key: slog::Key, val: &fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}
