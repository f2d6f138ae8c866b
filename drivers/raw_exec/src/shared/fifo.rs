//! Opening the host's log FIFOs for writing.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::fcntl::{FcntlArg, OFlag, fcntl};

/// Opens `path` (a FIFO the host reads) write-only for a task's stdout or stderr.
///
/// The open is non-blocking so that a missing reader fails at once with ENXIO instead of hanging
/// the caller forever; the descriptor is then switched back to blocking because programs expect
/// a blocking stdout. The file is close-on-exec until it is dup2'ed onto fd 1 or 2.
pub fn open_fifo_writer(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))?;
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
    fn fifo_without_reader_fails_instead_of_hanging() {
        let dirs = TaskDirs::without_host("fifo-noreader");
        let err = open_fifo_writer(&dirs.stdout).unwrap_err();
        assert!(err.to_string().contains("stdout.fifo"), "{err}");
    }
}
