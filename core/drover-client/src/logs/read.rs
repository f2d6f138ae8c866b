//! Reading a task's rotated log files back as one stream, once or following.

use std::fs::File;
use std::future::Future;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use super::frame::stream_frame_json;
use super::rotate::log_files;
use super::{CHUNK_SIZE, LogError, LogKind, LogOrigin, io_error};

/// How often a follower looks for new log data.
const FOLLOW_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A position in a task's log stream: a file index and a byte offset inside that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogCursor {
    pub index: u64,
    pub offset: u64,
}

/// Data read from one log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    /// The file's name inside the log dir, e.g. `web.stdout.0`.
    pub file_name: String,
    /// Offset in that file just after `data`, as Nomad's stream frames report it.
    pub offset: u64,
    pub data: Vec<u8>,
}

impl LogChunk {
    /// The file's path relative to the allocation dir, as Nomad's frames name it:
    /// `alloc/logs/web.stdout.0`.
    pub fn file_rel(&self) -> String {
        format!(
            "{}/{}/{}",
            crate::allocdir::SHARED_ALLOC_NAME,
            crate::allocdir::LOG_DIR_NAME,
            self.file_name
        )
    }

    /// This chunk as one of Nomad's JSON stream frames.
    pub fn frame_json(&self) -> String {
        stream_frame_json(&self.file_rel(), self.offset, &self.data)
    }
}

fn not_found(task: &str, kind: LogKind) -> LogError {
    LogError::NotFound {
        task: task.to_string(),
        kind: kind.as_str(),
    }
}

/// Finds where `offset` bytes from the `origin` of the task's stream falls, with Nomad's rules:
/// an offset past the end stops at the end, one before the start stops at the start.
pub fn seek_logs(
    log_dir: &Path,
    task: &str,
    kind: LogKind,
    origin: LogOrigin,
    offset: u64,
) -> Result<LogCursor, LogError> {
    let base = format!("{task}.{}", kind.as_str());
    let files = match log_files(log_dir, &base) {
        Ok(files) => files,
        Err(err) if err.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(err) => return Err(io_error("list", log_dir)(err)),
    };
    let (Some(&(first, _)), Some(&(last, last_size))) = (files.first(), files.last()) else {
        return Err(not_found(task, kind));
    };
    let mut remaining = offset;
    match origin {
        LogOrigin::Start => {
            for &(index, size) in &files {
                if remaining <= size {
                    return Ok(LogCursor {
                        index,
                        offset: remaining,
                    });
                }
                remaining -= size;
            }
            Ok(LogCursor {
                index: last,
                offset: last_size,
            })
        }
        LogOrigin::End => {
            for &(index, size) in files.iter().rev() {
                if remaining <= size {
                    return Ok(LogCursor {
                        index,
                        offset: size - remaining,
                    });
                }
                remaining -= size;
            }
            Ok(LogCursor {
                index: first,
                offset: 0,
            })
        }
    }
}

/// Reads the next piece of the stream at `cursor` (at most `max_len` bytes, from one file) and
/// advances the cursor; `None` when there is nothing more yet. Moves on to the next file once a
/// newer one exists and the current one is read to its end, and past files that rotation
/// deleted (their data is gone). A file that shrank is read again from its start.
pub fn read_log_chunk(
    log_dir: &Path,
    task: &str,
    kind: LogKind,
    cursor: &mut LogCursor,
    max_len: usize,
) -> Result<Option<LogChunk>, LogError> {
    let base = format!("{task}.{}", kind.as_str());
    let max_len = max_len.max(1);
    loop {
        // Listed before reading: if a newer file exists now, the writer has finished the
        // current one, so reading it to the end below sees all of its data.
        let files = match log_files(log_dir, &base) {
            Ok(files) => files,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(io_error("list", log_dir)(err)),
        };
        if !files.iter().any(|(index, _)| *index == cursor.index) {
            match files.iter().find(|(index, _)| *index > cursor.index) {
                Some(&(index, _)) => *cursor = LogCursor { index, offset: 0 },
                None => return Ok(None),
            }
        }
        let file_name = format!("{base}.{}", cursor.index);
        let path = log_dir.join(&file_name);
        let data = match read_at(&path, &mut cursor.offset, max_len) {
            Ok(data) => data,
            // Rotated away since the listing: list again.
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(io_error("read", &path)(err)),
        };
        if !data.is_empty() {
            return Ok(Some(LogChunk {
                file_name,
                offset: cursor.offset,
                data,
            }));
        }
        match files.iter().find(|(index, _)| *index > cursor.index) {
            Some(&(index, _)) => *cursor = LogCursor { index, offset: 0 },
            None => return Ok(None),
        }
    }
}

/// Reads up to `max_len` bytes at `*offset`, advancing it; restarts at 0 if the file shrank.
fn read_at(path: &Path, offset: &mut u64, max_len: usize) -> io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    if file.metadata()?.len() < *offset {
        *offset = 0;
    }
    file.seek(SeekFrom::Start(*offset))?;
    let mut data = Vec::with_capacity(max_len.min(CHUNK_SIZE));
    let limit = u64::try_from(max_len).unwrap_or(u64::MAX);
    file.take(limit).read_to_end(&mut data)?;
    *offset += data.len() as u64;
    Ok(data)
}

/// Reads the task's stream from `offset` bytes after its start or before its end to its current
/// end, across rotated files. Returns the data and the cursor at its end (to follow from).
pub fn read_logs(
    log_dir: &Path,
    task: &str,
    kind: LogKind,
    origin: LogOrigin,
    offset: u64,
) -> Result<(Vec<u8>, LogCursor), LogError> {
    let mut cursor = seek_logs(log_dir, task, kind, origin, offset)?;
    let mut data = Vec::new();
    while let Some(chunk) = read_log_chunk(log_dir, task, kind, &mut cursor, CHUNK_SIZE)? {
        data.extend_from_slice(&chunk.data);
    }
    Ok((data, cursor))
}

/// Sends the stream from `from` onwards to `tx`, then keeps polling for new data (every 200 ms),
/// across rotations, until `stop` completes or the receiver is dropped. Waits quietly while the
/// task has no log files yet.
pub async fn follow_logs(
    log_dir: PathBuf,
    task: String,
    kind: LogKind,
    from: LogCursor,
    tx: mpsc::Sender<LogChunk>,
    stop: impl Future<Output = ()>,
) -> Result<(), LogError> {
    tokio::pin!(stop);
    let mut cursor = from;
    loop {
        loop {
            let (dir, name) = (log_dir.clone(), task.clone());
            let mut at = cursor;
            let read = tokio::task::spawn_blocking(move || {
                read_log_chunk(&dir, &name, kind, &mut at, CHUNK_SIZE).map(|chunk| (chunk, at))
            })
            .await
            .map_err(|err| io_error("read logs in", &log_dir)(io::Error::other(err)))?;
            let (chunk, at) = read?;
            cursor = at;
            let Some(chunk) = chunk else {
                break;
            };
            tokio::select! {
                biased;
                _ = &mut stop => return Ok(()),
                sent = tx.send(chunk) => {
                    if sent.is_err() {
                        return Ok(());
                    }
                }
            }
        }
        tokio::select! {
            biased;
            _ = &mut stop => return Ok(()),
            _ = tx.closed() => return Ok(()),
            _ = tokio::time::sleep(FOLLOW_POLL_INTERVAL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::rotate::LogRotator;
    use crate::logs::test_support::*;
    use tokio::sync::oneshot;

    #[test]
    fn seek_from_start_and_end_spans_rotated_files() {
        let tmp = TempDir::new();
        write_files(&tmp.0, &[(2, "abcd"), (3, "efgh"), (4, "ij")]);
        let seek = |origin, offset| {
            seek_logs(&tmp.0, "web", LogKind::Stdout, origin, offset).expect("seek")
        };
        let at = |index, offset| LogCursor { index, offset };
        assert_eq!(seek(LogOrigin::Start, 0), at(2, 0));
        assert_eq!(seek(LogOrigin::Start, 5), at(3, 1));
        assert_eq!(seek(LogOrigin::Start, 100), at(4, 2));
        assert_eq!(seek(LogOrigin::End, 0), at(4, 2));
        assert_eq!(seek(LogOrigin::End, 3), at(3, 3));
        assert_eq!(seek(LogOrigin::End, 100), at(2, 0));
    }

    #[test]
    fn read_logs_concatenates_rotated_files_from_an_offset() {
        let tmp = TempDir::new();
        write_files(&tmp.0, &[(2, "abcd"), (3, "efgh"), (4, "ij")]);
        let (data, cursor) =
            read_logs(&tmp.0, "web", LogKind::Stdout, LogOrigin::Start, 3).expect("read");
        assert_eq!(data, b"defghij");
        assert_eq!(
            cursor,
            LogCursor {
                index: 4,
                offset: 2
            }
        );
        let (tail, _) = read_logs(&tmp.0, "web", LogKind::Stdout, LogOrigin::End, 5).expect("read");
        assert_eq!(tail, b"fghij");
    }

    #[test]
    fn read_logs_without_files_is_not_found() {
        let tmp = TempDir::new();
        let err = read_logs(&tmp.0, "web", LogKind::Stderr, LogOrigin::Start, 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "log entry for task \"web\" and log type \"stderr\" not found"
        );
        let missing_dir = tmp.0.join("nope");
        assert!(matches!(
            seek_logs(&missing_dir, "web", LogKind::Stdout, LogOrigin::End, 0),
            Err(LogError::NotFound { .. })
        ));
    }

    #[test]
    fn chunks_name_their_file_and_end_offset() {
        let tmp = TempDir::new();
        write_files(&tmp.0, &[(0, "hello"), (1, "world")]);
        let mut cursor = LogCursor {
            index: 0,
            offset: 1,
        };
        let first = read_log_chunk(&tmp.0, "web", LogKind::Stdout, &mut cursor, 3)
            .expect("read")
            .expect("chunk");
        assert_eq!(first.data, b"ell");
        assert_eq!(first.offset, 4);
        assert_eq!(first.file_rel(), "alloc/logs/web.stdout.0");
        let mut rest = Vec::new();
        while let Some(chunk) =
            read_log_chunk(&tmp.0, "web", LogKind::Stdout, &mut cursor, 3).expect("read")
        {
            rest.push((chunk.file_name, chunk.data));
        }
        assert_eq!(
            rest,
            vec![
                ("web.stdout.0".to_string(), b"o".to_vec()),
                ("web.stdout.1".to_string(), b"wor".to_vec()),
                ("web.stdout.1".to_string(), b"ld".to_vec()),
            ]
        );
    }

    #[test]
    fn reader_skips_files_that_rotation_deleted() {
        let tmp = TempDir::new();
        write_files(&tmp.0, &[(5, "new")]);
        let mut cursor = LogCursor {
            index: 1,
            offset: 7,
        };
        let chunk = read_log_chunk(&tmp.0, "web", LogKind::Stdout, &mut cursor, 100)
            .expect("read")
            .expect("chunk");
        assert_eq!(chunk.data, b"new");
        assert_eq!(
            cursor,
            LogCursor {
                index: 5,
                offset: 3
            }
        );
    }

    #[test]
    fn reader_restarts_a_file_that_shrank() {
        let tmp = TempDir::new();
        write_files(&tmp.0, &[(0, "ab")]);
        let mut cursor = LogCursor {
            index: 0,
            offset: 10,
        };
        let chunk = read_log_chunk(&tmp.0, "web", LogKind::Stdout, &mut cursor, 100)
            .expect("read")
            .expect("chunk");
        assert_eq!(chunk.data, b"ab");
    }

    #[tokio::test]
    async fn follow_sends_existing_then_new_data_across_rotation_until_stopped() {
        let tmp = TempDir::new();
        write_files(&tmp.0, &[(0, "one ")]);
        let (tx, mut rx) = mpsc::channel(16);
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let follower = tokio::spawn(follow_logs(
            tmp.0.clone(),
            "web".to_string(),
            LogKind::Stdout,
            LogCursor::default(),
            tx,
            async move {
                let _ = stop_rx.await;
            },
        ));

        let mut received = Vec::new();
        let mut recv = async |received: &mut Vec<u8>, want: &[u8]| {
            while !received.ends_with(want) {
                let chunk = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                    .await
                    .expect("data in time")
                    .expect("channel open");
                received.extend_from_slice(&chunk.data);
            }
        };
        recv(&mut received, b"one ").await;

        let mut rotator = LogRotator::open(&tmp.0, "web.stdout".into(), 10, 8).expect("open");
        rotator.write(b"two three four").expect("write");
        recv(&mut received, b"four").await;
        assert_eq!(received, b"one two three four");

        stop_tx.send(()).expect("stop");
        tokio::time::timeout(Duration::from_secs(5), follower)
            .await
            .expect("stops in time")
            .expect("join")
            .expect("follow");
    }

    #[tokio::test]
    async fn follow_ends_when_the_receiver_is_dropped() {
        let tmp = TempDir::new();
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let never = std::future::pending::<()>();
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            follow_logs(
                tmp.0.clone(),
                "web".into(),
                LogKind::Stdout,
                LogCursor::default(),
                tx,
                never,
            ),
        )
        .await
        .expect("ends in time");
        assert!(result.is_ok());
    }
}
