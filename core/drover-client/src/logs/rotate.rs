//! Writing one stream into rotating files with Nomad's naming and limits.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Near the end of a file, at most this many bytes are given up to end the file at a line end
/// instead of splitting a line across two files (Nomad's `lineScanLimit`).
const LINE_SCAN_LIMIT: u64 = 32 * 1024;

const LOG_FILE_MODE: u32 = 0o644;

/// The indexes of a stream's log files, ascending, with their sizes. Names that only look
/// similar (the FIFO, `x.stdout.1.bak`) are ignored.
pub(super) fn log_files(log_dir: &Path, base: &str) -> io::Result<Vec<(u64, u64)>> {
    let prefix = format!("{base}.");
    let mut files = Vec::new();
    for entry in fs::read_dir(log_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(index) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u64>().ok())
        else {
            continue;
        };
        match entry.metadata() {
            Ok(metadata) if metadata.is_file() => files.push((index, metadata.len())),
            Ok(_) => {}
            // Purged between readdir and stat.
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
    }
    files.sort_unstable();
    Ok(files)
}

/// Writes one stream into rotating files. Blocking; the pump runs it on the blocking pool.
#[derive(Debug)]
pub(super) struct LogRotator {
    dir: PathBuf,
    /// `<task>.<kind>`.
    pub(super) base: String,
    max_files: usize,
    max_file_bytes: u64,
    index: u64,
    file: File,
    size: u64,
}

impl LogRotator {
    /// Opens the highest existing index for appending, or index 0.
    pub(super) fn open(
        dir: &Path,
        base: String,
        max_files: u32,
        max_file_bytes: u64,
    ) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let index = log_files(dir, &base)?.last().map_or(0, |(index, _)| *index);
        let (file, size) = open_append(&dir.join(format!("{base}.{index}")))?;
        let rotator = Self {
            dir: dir.to_path_buf(),
            base,
            max_files: usize::try_from(max_files.max(1)).unwrap_or(usize::MAX),
            max_file_bytes: max_file_bytes.max(1),
            index,
            file,
            size,
        };
        rotator.purge()?;
        Ok(rotator)
    }

    pub(super) fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            if self.size >= self.max_file_bytes {
                self.rotate()?;
            }
            let room = self.max_file_bytes - self.size;
            let room_len = usize::try_from(room).unwrap_or(usize::MAX);
            let take = if data.len() <= room_len {
                data.len()
            } else if let Some(newline) = data[..room_len].iter().rposition(|&b| b == b'\n') {
                // End this file at the last line end that fits.
                newline + 1
            } else if self.size > 0 && room <= LINE_SCAN_LIMIT {
                // The line does not fit in the little room left: start it in a fresh file.
                0
            } else {
                // A line longer than the room in a fresh (or mostly empty) file: split it.
                room_len
            };
            if take == 0 {
                self.rotate()?;
                continue;
            }
            if let Err(err) = self.file.write_all(&data[..take]) {
                // Part of the chunk may be on disk; take the file's word for its size.
                self.size = self.file.metadata().map_or(self.size, |m| m.len());
                return Err(err);
            }
            self.size += take as u64;
            data = &data[take..];
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        let next = self.index + 1;
        let (file, size) = open_append(&self.dir.join(format!("{}.{next}", self.base)))?;
        self.file = file;
        self.size = size;
        self.index = next;
        self.purge()
    }

    /// Deletes the oldest files beyond `max_files`.
    fn purge(&self) -> io::Result<()> {
        let files = log_files(&self.dir, &self.base)?;
        let excess = files.len().saturating_sub(self.max_files);
        for (index, _) in files.into_iter().take(excess) {
            let path = self.dir.join(format!("{}.{index}", self.base));
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(LOG_FILE_MODE)
        .open(path)?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::test_support::*;

    #[test]
    fn rotator_starts_at_index_zero_and_rotates_at_the_size_limit() {
        let tmp = TempDir::new();
        let mut rotator = LogRotator::open(&tmp.0, "web.stdout".into(), 10, 10).expect("open");
        rotator.write(b"0123456789abcdefghij12345").expect("write");
        assert_eq!(
            file_names(&tmp.0),
            vec!["web.stdout.0", "web.stdout.1", "web.stdout.2"]
        );
        assert_eq!(read(&tmp.0, "web.stdout.0"), "0123456789");
        assert_eq!(read(&tmp.0, "web.stdout.1"), "abcdefghij");
        assert_eq!(read(&tmp.0, "web.stdout.2"), "12345");
    }

    #[test]
    fn rotator_ends_files_at_line_ends_when_it_can() {
        let tmp = TempDir::new();
        let mut rotator = LogRotator::open(&tmp.0, "web.stdout".into(), 10, 10).expect("open");
        rotator.write(b"aaa\nbbb\ncccc\n").expect("write");
        rotator.write(b"dd\n").expect("write");
        assert_eq!(read(&tmp.0, "web.stdout.0"), "aaa\nbbb\n");
        assert_eq!(read(&tmp.0, "web.stdout.1"), "cccc\ndd\n");
    }

    #[test]
    fn rotator_moves_a_line_that_does_not_fit_into_the_next_file() {
        let tmp = TempDir::new();
        let mut rotator = LogRotator::open(&tmp.0, "web.stdout".into(), 10, 10).expect("open");
        rotator.write(b"aaaaaaa\n").expect("write");
        rotator.write(b"bbbbb").expect("write");
        assert_eq!(read(&tmp.0, "web.stdout.0"), "aaaaaaa\n");
        assert_eq!(read(&tmp.0, "web.stdout.1"), "bbbbb");
    }

    #[test]
    fn rotator_keeps_only_max_files_newest() {
        let tmp = TempDir::new();
        let mut rotator = LogRotator::open(&tmp.0, "web.stdout".into(), 2, 4).expect("open");
        rotator.write(b"aaaabbbbccccdd").expect("write");
        assert_eq!(file_names(&tmp.0), vec!["web.stdout.2", "web.stdout.3"]);
        assert_eq!(read(&tmp.0, "web.stdout.3"), "dd");
    }

    #[test]
    fn rotator_after_restart_appends_to_the_highest_index() {
        let tmp = TempDir::new();
        write_files(&tmp.0, &[(3, "old3"), (4, "old")]);
        fs::write(tmp.0.join("web.stdout.x"), "not a log").expect("write");
        fs::write(tmp.0.join("web.stderr.9"), "other stream").expect("write");
        let mut rotator = LogRotator::open(&tmp.0, "web.stdout".into(), 10, 100).expect("open");
        rotator.write(b"+new").expect("write");
        assert_eq!(read(&tmp.0, "web.stdout.4"), "old+new");
        assert_eq!(read(&tmp.0, "web.stdout.3"), "old3");
    }

    #[test]
    fn rotator_after_restart_with_a_full_file_rotates_on_first_write() {
        let tmp = TempDir::new();
        write_files(&tmp.0, &[(0, "full")]);
        let mut rotator = LogRotator::open(&tmp.0, "web.stdout".into(), 10, 4).expect("open");
        rotator.write(b"next").expect("write");
        assert_eq!(read(&tmp.0, "web.stdout.0"), "full");
        assert_eq!(read(&tmp.0, "web.stdout.1"), "next");
    }
}
