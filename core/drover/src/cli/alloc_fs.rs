//! `drover alloc fs` (alias `drover fs`), as Nomad's `alloc fs`: a directory of an
//! allocation listed, a file's stat shown (`-stat`), or a file printed whole (`/cat`), from its
//! end (`-tail` with `-n`/`-c`, through `/readat`) or followed (`-f`, through `/stream`).

use std::io::{BufReader, Read};
use std::time::{SystemTime, UNIX_EPOCH};

use drover_client::allocdir::AllocFileInfo;
use drover_client::logs::base64_decode;
use drover_structs::AllocListStub;
use serde::Deserialize;
use serde_json::de::IoRead;

use super::alloc::find_alloc;
use super::api::{ApiError, Client, escape_segment};
use super::format::{format_list, humanize_ibytes};
use super::logs::{self, tail_window};
use super::timefmt::{format_time, parse_time};
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Args)]
pub struct AllocFsArgs {
    /// Machine friendly output: sizes in bytes
    #[arg(short = 'H')]
    pub machine: bool,
    /// Show full information
    #[arg(long)]
    pub verbose: bool,
    /// Use a random allocation of the job named instead of an allocation ID
    #[arg(long)]
    pub job: bool,
    /// Show file stat information instead of the file or the directory listing
    #[arg(long)]
    pub stat: bool,
    /// Keep printing what is appended to the file
    #[arg(short = 'f')]
    pub follow: bool,
    /// Show the end of the file (10 lines unless -n or -c says otherwise)
    #[arg(long)]
    pub tail: bool,
    /// With -tail: about this many lines from the end
    #[arg(short = 'n', value_name = "LINES")]
    pub lines: Option<u64>,
    /// With -tail: this many bytes from the end
    #[arg(short = 'c', value_name = "BYTES")]
    pub bytes: Option<u64>,
    /// Allocation ID (or unique prefix); a job ID with -job
    pub alloc: String,
    /// Path relative to the allocation directory [default: /]
    pub path: Option<String>,
}

/// `drover fs`: Nomad's alias of `alloc fs`.
#[derive(Debug, clap::Args)]
pub struct FsCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub args: AllocFsArgs,
}

pub fn run_alias(cli: FsCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    run(&client, cli.args)
}

pub fn run(client: &Client, args: AllocFsArgs) -> anyhow::Result<Exit> {
    let alloc_id = if args.job {
        match random_job_alloc(client, &args.alloc) {
            Ok(id) => id,
            Err(message) => {
                ui::err(&format!("Error fetching allocations: {message}"));
                return Ok(1);
            }
        }
    } else {
        args.alloc.clone()
    };
    let alloc = match find_alloc(client, &alloc_id, args.verbose) {
        Ok(a) => a,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let client = client.in_namespace(&alloc.namespace);
    let fs = AllocFs {
        client: &client,
        alloc_id: &alloc.id,
    };
    let path = args.path.as_deref().unwrap_or("/");
    let file = match fs.stat(path) {
        Ok(f) => f,
        Err(e) => {
            ui::err(&e.to_string());
            return Ok(1);
        }
    };
    if args.stat {
        ui::out(&stat_table(&file, args.machine));
        return Ok(0);
    }
    if file.is_dir {
        return Ok(match fs.list(path) {
            Ok(files) => {
                ui::out(&listing_table(&files, args.machine));
                0
            }
            Err(e) => {
                ui::err(&format!("Error listing alloc dir: {e}"));
                1
            }
        });
    }
    print_file(&fs, path, &file, &args)
}

/// Prints the file: whole, from its end, or followed, as Nomad's `alloc fs` does.
fn print_file(
    fs: &AllocFs<'_>,
    path: &str,
    file: &AllocFileInfo,
    args: &AllocFsArgs,
) -> anyhow::Result<Exit> {
    let (reader, lines) = if !args.tail {
        let reader = if args.follow {
            fs.stream(path, "start", 0)
        } else {
            fs.cat(path)
        };
        match reader {
            Ok(r) => (r, None),
            Err(e) => {
                ui::err(&format!("Error reading file: {e}"));
                return Ok(1);
            }
        }
    } else {
        if args.lines.is_some() && args.bytes.is_some() {
            ui::err("Both -n and -c are not allowed");
            return Ok(1);
        }
        let window = tail_window(true, args.lines, args.bytes);
        let back = window.offset.min(file.size);
        let reader = if args.follow {
            fs.stream(path, "end", back)
        } else {
            fs.read_at(path, file.size - back)
        };
        match reader {
            Ok(r) => (r, window.lines),
            Err(e) => {
                ui::err(&format!("Error tailing file: {e}"));
                return Ok(1);
            }
        }
    };
    match logs::stream(reader, lines, args.follow) {
        Ok(()) => Ok(0),
        Err(e) => {
            ui::err(&format!("error tailing file: {e}"));
            Ok(1)
        }
    }
}

/// Nomad's `-stat` table.
fn stat_table(file: &AllocFileInfo, machine: bool) -> String {
    format_list(&[
        "Mode|Size|Modified Time|Content Type|Name".to_string(),
        format!(
            "{}|{}|{}|{}|{}",
            file.file_mode,
            size_text(file.size, machine),
            mod_time_text(&file.mod_time),
            file.content_type,
            display_name(file)
        ),
    ])
}

/// Nomad's directory listing.
fn listing_table(files: &[AllocFileInfo], machine: bool) -> String {
    let mut rows = vec!["Mode|Size|Modified Time|Name".to_string()];
    rows.extend(files.iter().map(|f| {
        format!(
            "{}|{}|{}|{}",
            f.file_mode,
            size_text(f.size, machine),
            mod_time_text(&f.mod_time),
            display_name(f)
        )
    }));
    format_list(&rows)
}

fn size_text(size: u64, machine: bool) -> String {
    if machine {
        size.to_string()
    } else {
        humanize_ibytes(size)
    }
}

fn mod_time_text(mod_time: &str) -> String {
    parse_time(mod_time).map(format_time).unwrap_or_default()
}

/// Directories end in `/`.
fn display_name(file: &AllocFileInfo) -> String {
    if file.is_dir {
        format!("{}/", file.name)
    } else {
        file.name.clone()
    }
}

/// Nomad's `getRandomJobAlloc`: one of the job's running allocations, or of all of them when
/// none runs. `Err` is the message after "Error fetching allocations: ".
pub(crate) fn random_job_alloc(client: &Client, job_id: &str) -> Result<String, String> {
    let (allocs, _): (Vec<AllocListStub>, _) = client
        .get_json(
            &format!("/v1/job/{}/allocations", escape_segment(job_id)),
            &[],
        )
        .map_err(|e| format!("error querying job {job_id:?}: {e}"))?;
    let running: Vec<&AllocListStub> = allocs
        .iter()
        .filter(|a| a.client_status == "running")
        .collect();
    let pool: Vec<&AllocListStub> = if running.is_empty() {
        allocs.iter().collect()
    } else {
        running
    };
    if pool.is_empty() {
        return Err(format!(
            "job {job_id:?} doesn't exist or it has no allocations"
        ));
    }
    // Any pick will do; the clock's nanoseconds are random enough for choosing one.
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let pick = usize::try_from(nanos).unwrap_or(0) % pool.len();
    Ok(pool[pick].id.clone())
}

/// The client fs endpoints for one allocation.
struct AllocFs<'a> {
    client: &'a Client,
    alloc_id: &'a str,
}

impl AllocFs<'_> {
    fn endpoint(&self, what: &str) -> String {
        format!("/v1/client/fs/{what}/{}", escape_segment(self.alloc_id))
    }

    fn stat(&self, path: &str) -> Result<AllocFileInfo, ApiError> {
        self.client
            .get_json(&self.endpoint("stat"), &[("path", path)])
            .map(|(info, _)| info)
    }

    fn list(&self, path: &str) -> Result<Vec<AllocFileInfo>, ApiError> {
        self.client
            .get_json(&self.endpoint("ls"), &[("path", path)])
            .map(|(files, _)| files)
    }

    fn cat(&self, path: &str) -> Result<Box<dyn Read + Send>, ApiError> {
        self.client
            .get_stream(&self.endpoint("cat"), &[("path", path)])
    }

    /// The file from `offset` to its end.
    fn read_at(&self, path: &str, offset: u64) -> Result<Box<dyn Read + Send>, ApiError> {
        let offset = offset.to_string();
        self.client.get_stream(
            &self.endpoint("readat"),
            &[("path", path), ("offset", &offset), ("limit", "-1")],
        )
    }

    /// The file followed from `offset` bytes off `origin`, its frames unwrapped.
    fn stream(
        &self,
        path: &str,
        origin: &str,
        offset: u64,
    ) -> Result<Box<dyn Read + Send>, ApiError> {
        let offset = offset.to_string();
        let body = self.client.get_stream(
            &self.endpoint("stream"),
            &[("path", path), ("origin", origin), ("offset", &offset)],
        )?;
        Ok(Box::new(FrameReader::new(body)))
    }
}

/// What the CLI needs of one of Nomad's stream frames; heartbeats (`{}`) carry nothing.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Frame {
    /// base64
    #[serde(default)]
    data: String,
}

type Frames =
    serde_json::StreamDeserializer<'static, IoRead<BufReader<Box<dyn Read + Send>>>, Frame>;

/// The data of a stream of JSON frames, as Nomad's `api.FrameReader` gives it.
struct FrameReader {
    frames: Frames,
    data: Vec<u8>,
    at: usize,
}

impl FrameReader {
    fn new(body: Box<dyn Read + Send>) -> Self {
        FrameReader {
            frames: serde_json::Deserializer::from_reader(BufReader::new(body)).into_iter(),
            data: Vec::new(),
            at: 0,
        }
    }
}

impl Read for FrameReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.data.len() {
            let frame = match self.frames.next() {
                None => return Ok(0),
                Some(frame) => frame.map_err(std::io::Error::other)?,
            };
            self.data = base64_decode(&frame.data).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a stream frame's Data is not base64",
                )
            })?;
            self.at = 0;
        }
        let n = buf.len().min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, is_dir: bool, size: u64) -> AllocFileInfo {
        AllocFileInfo {
            name: name.into(),
            is_dir,
            size,
            file_mode: if is_dir { "drwxrwxrwx" } else { "-rw-r--r--" }.into(),
            mod_time: "0001-01-01T00:00:00Z".into(),
            content_type: String::new(),
        }
    }

    #[test]
    fn listings_humanize_sizes_unless_machine_and_mark_directories() {
        let files = [info("local", true, 4096), info("out.txt", false, 1536)];
        assert_eq!(
            listing_table(&files, false),
            "Mode        Size     Modified Time  Name\n\
             drwxrwxrwx  4.0 KiB  <none>         local/\n\
             -rw-r--r--  1.5 KiB  <none>         out.txt"
        );
        assert_eq!(
            listing_table(&files, true),
            "Mode        Size  Modified Time  Name\n\
             drwxrwxrwx  4096  <none>         local/\n\
             -rw-r--r--  1536  <none>         out.txt"
        );
    }

    #[test]
    fn stat_shows_the_content_type() {
        let mut file = info("out.txt", false, 12);
        file.content_type = "text/plain; charset=utf-8".into();
        assert_eq!(
            stat_table(&file, true),
            "Mode        Size  Modified Time  Content Type               Name\n\
             -rw-r--r--  12    <none>         text/plain; charset=utf-8  out.txt"
        );
    }

    #[test]
    fn frames_are_read_back_as_their_data_without_heartbeats() {
        let body = concat!(
            r#"{"Offset":6,"Data":"aGVsbG8g","File":"f"}"#,
            "\n{}\n",
            r#"{"Offset":12,"Data":"d29ybGQK","File":"f"}{"File":"f","FileEvent":"file deleted"}"#,
        );
        let mut reader = FrameReader::new(Box::new(std::io::Cursor::new(body.as_bytes())));
        let mut out = String::new();
        reader.read_to_string(&mut out).unwrap();
        assert_eq!(out, "hello world\n");

        let mut bad = FrameReader::new(Box::new(std::io::Cursor::new(&b"{\"Data\":\"!!\"}"[..])));
        let err = bad.read_to_string(&mut String::new()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }
}
