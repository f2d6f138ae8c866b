//! Opening the host's log FIFOs for writing.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::fcntl::{FcntlArg, OFlag, fcntl};

/// Opens `path` (a FIFO the host reads) for a task's stdout or stderr.
///
/// A missing reader fails at once with ENXIO instead of hanging the caller forever (a
/// non-blocking write-only open checks it). The task's descriptor is then opened for reading
/// and writing, so the pipe always has a reader, its own: when the agent's log pump goes away
/// (the agent is killed or restarts, its tasks keep running), a task that writes fills the
/// pipe's buffer and then waits for the next agent's pump instead of dying of SIGPIPE (Nomad's
/// logmon outlives the agent for the same reason). Blocking, as programs expect their stdout to
/// be; close-on-exec until it is dup2'ed onto fd 1 or 2.
pub fn open_fifo_writer(path: &Path) -> io::Result<File> {
    let with_path =
        |e: io::Error| io::Error::new(e.kind(), format!("opening {}: {e}", path.display()));
    let reader_check = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(with_path)?;
    // On Linux an O_RDWR open of a FIFO never blocks.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(with_path)?;
    drop(reader_check);
    let flags = fcntl(&file, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let blocking = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
    fcntl(&file, FcntlArg::F_SETFL(blocking)).map_err(io::Error::from)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::testutil::TaskDirs;
    use std::io::Write;

    #[test]
    fn opened_fifo_delivers_bytes_to_the_reader_and_blocks_on_write() {
        let dirs = TaskDirs::new("fifo");
        let reader = dirs.stdout_reader();
        let mut writer = open_fifo_writer(&dirs.stdout).unwrap();
        let flags = fcntl(&writer, FcntlArg::F_GETFL).unwrap();
        assert_eq!(flags & libc::O_NONBLOCK, 0, "writer must be blocking");
        writer.write_all(b"hello").unwrap();
        drop(writer);
        assert_eq!(reader.read_until_writers_close(), "hello");
    }

    #[test]
    fn a_task_writing_after_the_host_reader_left_waits_for_the_next_one() {
        let dirs = TaskDirs::without_host("fifo-reader-gone");
        let first = dirs.stdout_reader();
        let mut writer = open_fifo_writer(&dirs.stdout).unwrap();
        writer.write_all(b"one ").unwrap();
        // The agent goes away, its log pump with it: the task's writes still succeed (no EPIPE,
        // so no SIGPIPE), kept in the pipe.
        drop(first);
        writer.write_all(b"two").unwrap();
        // The next agent's pump reads what was written meanwhile.
        let next = dirs.stdout_reader();
        drop(writer);
        assert_eq!(next.read_until_writers_close(), "one two");
    }

    #[test]
    fn fifo_without_reader_fails_instead_of_hanging() {
        let dirs = TaskDirs::without_host("fifo-noreader");
        let err = open_fifo_writer(&dirs.stdout).unwrap_err();
        assert!(err.to_string().contains("stdout.fifo"), "{err}");
    }
}
