//! Unpacking artifacts (tar, tar.gz, gz, zip) and writing anything into the task directory
//! without ever leaving it.
//!
//! An archive is read twice: a first pass checks every entry (names, types, link targets,
//! the client's decompression limits) and writes nothing, so a refused archive leaves no
//! trace; the second pass writes, resolving every path physically (through the symlinks that
//! exist) inside the task directory. Rules that keep the second pass contained:
//! - names and link targets are relative, and a `..` never climbs above the root;
//! - absolute symlink targets are refused (they would be followed on the host);
//! - once a path goes through something that does not exist yet, no `..` may follow, and an
//!   existing symlink or directory is never replaced, so a symlink checked when it was created
//!   keeps resolving inside the root whatever entries come after it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Archive formats, by go-getter's extension names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Tar,
    TarGz,
    /// A single gzip-compressed file.
    Gz,
    Zip,
}

/// go-getter's decompressors Drover does not carry: refused rather than saved still compressed.
const UNSUPPORTED: &[&str] = &[
    "tar.bz2", "tbz2", "tar.xz", "txz", "tar.zst", "tzst", "bz2", "xz", "zst",
];

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive format {0} is not supported by Drover (supported: tar, tar.gz, tgz, gz, zip)")]
    UnsupportedFormat(String),
    #[error("archive entry {name:?} escapes the destination directory")]
    EntryEscapes { name: String },
    #[error("archive entry {name:?} is a symlink to {target:?}, outside the task directory")]
    SymlinkEscapes { name: String, target: String },
    #[error("archive entry {name:?} is a {kind}, which artifacts may not contain")]
    UnsupportedEntry { name: String, kind: String },
    #[error("archive entry {name:?} would replace an existing {existing}")]
    WouldReplace { name: String, existing: String },
    #[error("path {0:?} escapes the task directory")]
    PathEscapes(String),
    #[error("archive holds more than the client's decompression_file_count_limit of {0} files")]
    TooManyFiles(u64),
    #[error("archive unpacks to more than the client's decompression_size_limit of {0} bytes")]
    TooLarge(u64),
    #[error("mode \"file\" needs an archive of exactly one file, this one has {0}")]
    NotOneFile(usize),
    #[error("reading the archive: {0}")]
    Read(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ArchiveError {
    let context = context.into();
    move |source| ArchiveError::Io { context, source }
}

/// The archive format of `path` (a URL's path or a file name): `archive` forces one
/// (`"false"` none); otherwise go-getter's extension match. A forced name go-getter does not
/// know unpacks nothing, as in go-getter.
pub fn detect(path: &str, archive: Option<&str>) -> Result<Option<Format>, ArchiveError> {
    let name = match archive {
        Some("false") => return Ok(None),
        Some(forced) if !forced.is_empty() => forced.to_string(),
        _ => {
            let known = ["tar.gz", "tgz", "tar", "zip", "gz"];
            match known
                .iter()
                .chain(UNSUPPORTED)
                .find(|ext| path.ends_with(&format!(".{ext}")))
            {
                Some(ext) => ext.to_string(),
                None => return Ok(None),
            }
        }
    };
    Ok(match name.as_str() {
        "tar" => Some(Format::Tar),
        "tar.gz" | "tgz" => Some(Format::TarGz),
        "gz" => Some(Format::Gz),
        "zip" => Some(Format::Zip),
        other if UNSUPPORTED.contains(&other) => {
            return Err(ArchiveError::UnsupportedFormat(other.to_string()));
        }
        _ => None,
    })
}

/// The client's decompression limits (0: none).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_files: u64,
}

/// Where the archive goes: `dest` (relative to `root`, the task directory) is a directory, or
/// in file mode the file to write.
pub struct Target<'a> {
    pub root: &'a Path,
    pub dest: &'a Path,
    pub file_mode: bool,
}

enum Kind {
    File {
        mode: u32,
    },
    Dir,
    Symlink(PathBuf),
    /// A hard link to an earlier entry (archive-relative name).
    HardLink(PathBuf),
}

struct Entry<'r> {
    name: String,
    kind: Kind,
    size: u64,
    data: Box<dyn Read + 'r>,
}

/// Checks the whole archive, then writes it.
pub fn unpack(
    archive: &Path,
    format: Format,
    target: &Target,
    limits: Limits,
) -> Result<(), ArchiveError> {
    let root = target
        .root
        .canonicalize()
        .map_err(io_err(format!("resolving {}", target.root.display())))?;
    if format == Format::Gz {
        let input = File::open(archive).map_err(io_err("opening the download"))?;
        let mut data = limited(flate2::read::GzDecoder::new(input), limits.max_bytes);
        let file = if target.file_mode {
            target.dest.to_path_buf()
        } else {
            // go-getter names the file after the archive without its `.gz`.
            let stem = archive
                .file_stem()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("file"));
            target.dest.join(stem)
        };
        return write_file(&root, &file, &mut data, 0o644).map(|_| ());
    }
    // Pass 1: check everything, write nothing.
    let mut files = 0usize;
    let mut total = 0u64;
    let mut count = 0u64;
    for_each_entry(archive, format, &mut |mut e| {
        check_name(&e.name)?;
        count += 1;
        if limits.max_files > 0 && count > limits.max_files {
            return Err(ArchiveError::TooManyFiles(limits.max_files));
        }
        match &e.kind {
            Kind::File { .. } => {
                files += 1;
                // The header's size can lie; the bytes read are what counts.
                total += io::copy(&mut e.data, &mut io::sink())
                    .map_err(|err| ArchiveError::Read(err.to_string()))?
                    .max(e.size);
                if limits.max_bytes > 0 && total > limits.max_bytes {
                    return Err(ArchiveError::TooLarge(limits.max_bytes));
                }
            }
            Kind::Dir => {}
            Kind::Symlink(to) => {
                let at = target.dest.join(&e.name);
                let parent = at.parent().unwrap_or(Path::new(""));
                if to.is_absolute() || !lexically_inside(&parent.join(to)) {
                    return Err(ArchiveError::SymlinkEscapes {
                        name: e.name.clone(),
                        target: to.display().to_string(),
                    });
                }
                files += 1;
            }
            Kind::HardLink(to) => {
                check_name(&to.display().to_string())?;
                files += 1;
            }
        }
        Ok(())
    })?;
    if target.file_mode && files != 1 {
        return Err(ArchiveError::NotOneFile(files));
    }
    // Pass 2: write.
    for_each_entry(archive, format, &mut |mut e| {
        let at = if target.file_mode {
            target.dest.to_path_buf()
        } else {
            target.dest.join(&e.name)
        };
        match e.kind {
            Kind::Dir if target.file_mode => Ok(()),
            Kind::Dir => resolve(&root, &root, &at, Create::Dirs).map(|_| ()),
            Kind::File { mode } => {
                // Pass 1 checked the total; this holds each file to it again in case the
                // archive reads differently the second time.
                let mut data = limited(&mut e.data, limits.max_bytes);
                write_file(&root, &at, &mut data, mode).map(|_| ())
            }
            Kind::Symlink(to) => write_symlink(&root, &at, &to, &e.name),
            Kind::HardLink(to) => {
                let (parent, leaf) = parent_dir(&root, &at)?;
                refuse_existing(&parent.join(&leaf), &e.name)?;
                let source = resolve(&root, &root, &target.dest.join(to), Create::Nothing)?;
                let meta = std::fs::symlink_metadata(&source)
                    .map_err(io_err(format!("hard link {}", e.name)))?;
                if !meta.is_file() {
                    return Err(ArchiveError::UnsupportedEntry {
                        name: e.name,
                        kind: "hard link to something other than a file".into(),
                    });
                }
                std::fs::hard_link(&source, parent.join(leaf))
                    .map_err(io_err(format!("hard link {}", e.name)))
            }
        }
    })
}

/// Reads entries of a tar, tar.gz or zip archive in order.
fn for_each_entry(
    archive: &Path,
    format: Format,
    each: &mut dyn FnMut(Entry) -> Result<(), ArchiveError>,
) -> Result<(), ArchiveError> {
    let input = File::open(archive).map_err(io_err("opening the download"))?;
    match format {
        Format::Tar => tar_entries(tar::Archive::new(input), each),
        Format::TarGz => tar_entries(tar::Archive::new(flate2::read::GzDecoder::new(input)), each),
        Format::Zip => zip_entries(input, each),
        Format::Gz => Ok(()),
    }
}

fn tar_entries<R: Read>(
    mut archive: tar::Archive<R>,
    each: &mut dyn FnMut(Entry) -> Result<(), ArchiveError>,
) -> Result<(), ArchiveError> {
    let read = |e: io::Error| ArchiveError::Read(e.to_string());
    for entry in archive.entries().map_err(read)? {
        let entry = entry.map_err(read)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let header = entry.header();
        let link = || {
            entry
                .link_name_bytes()
                .map(|b| PathBuf::from(String::from_utf8_lossy(&b).into_owned()))
                .unwrap_or_default()
        };
        let kind = match header.entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => Kind::File {
                mode: header.mode().unwrap_or(0o644),
            },
            tar::EntryType::Directory => Kind::Dir,
            tar::EntryType::Symlink => Kind::Symlink(link()),
            tar::EntryType::Link => Kind::HardLink(link()),
            // Metadata for the archive, not files.
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => continue,
            other => {
                return Err(ArchiveError::UnsupportedEntry {
                    name,
                    kind: format!("{other:?}").to_lowercase(),
                });
            }
        };
        let size = entry.size();
        each(Entry {
            name,
            kind,
            size,
            data: Box::new(entry),
        })?;
    }
    Ok(())
}

fn zip_entries(
    input: File,
    each: &mut dyn FnMut(Entry) -> Result<(), ArchiveError>,
) -> Result<(), ArchiveError> {
    let read = |e: zip::result::ZipError| ArchiveError::Read(e.to_string());
    let mut archive = zip::ZipArchive::new(input).map_err(read)?;
    for i in 0..archive.len() {
        let mut file = archive.by_index(i).map_err(read)?;
        let name = String::from_utf8_lossy(file.name_raw()).into_owned();
        let size = file.size();
        let kind = if file.is_dir() {
            Kind::Dir
        } else if file.is_symlink() {
            // A zip symlink's target is its content.
            let mut to = String::new();
            file.by_ref()
                .take(4096)
                .read_to_string(&mut to)
                .map_err(|e| ArchiveError::Read(e.to_string()))?;
            Kind::Symlink(PathBuf::from(to))
        } else {
            Kind::File {
                mode: file.unix_mode().unwrap_or(0o644),
            }
        };
        each(Entry {
            name,
            kind,
            size,
            data: Box::new(file),
        })?;
    }
    Ok(())
}

/// An archive entry's name: relative, and no `..` at all (go-getter refuses them too).
fn check_name(name: &str) -> Result<(), ArchiveError> {
    let path = Path::new(name);
    let ok = !name.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(())
    } else {
        Err(ArchiveError::EntryEscapes {
            name: name.to_string(),
        })
    }
}

/// Whether a relative path stays at or below its start, read lexically.
pub fn lexically_inside(path: &Path) -> bool {
    let mut depth = 0i64;
    for c in path.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Create {
    Nothing,
    Dirs,
}

/// One step of a path being resolved.
enum Step {
    Up,
    Name(std::ffi::OsString),
}

/// The steps of a relative path, last first (a stack); `None` for an absolute one.
fn steps(path: &Path) -> Option<Vec<Step>> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => return None,
            Component::CurDir => {}
            Component::ParentDir => out.push(Step::Up),
            Component::Normal(n) => out.push(Step::Name(n.to_os_string())),
        }
    }
    out.reverse();
    Some(out)
}

/// Resolves `rel` from `start` (a physical directory inside `root`, canonical) through the
/// symlinks that exist, never above `root`; with `Create::Dirs` makes the directories missing
/// on the way. Answers the physical path, inside `root`.
pub fn resolve(
    root: &Path,
    start: &Path,
    rel: &Path,
    create: Create,
) -> Result<PathBuf, ArchiveError> {
    let escapes = || ArchiveError::PathEscapes(rel.display().to_string());
    let mut cur = start.to_path_buf();
    if !cur.starts_with(root) {
        return Err(escapes());
    }
    let mut pending = steps(rel).ok_or_else(escapes)?;
    let mut hops = 0;
    // Set once the path went through something missing: no `..` may follow (what is created
    // there later could be a symlink).
    let mut beyond_existing = false;
    while let Some(step) = pending.pop() {
        let name = match step {
            Step::Up => {
                if beyond_existing || cur == root {
                    return Err(escapes());
                }
                cur.pop();
                continue;
            }
            Step::Name(name) => name,
        };
        let next = cur.join(&name);
        if beyond_existing {
            cur = next;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                let to = std::fs::read_link(&next)
                    .map_err(io_err(format!("reading link {}", next.display())))?;
                // Absolute targets are never followed: they name host paths.
                let more = steps(&to).filter(|_| hops <= 40).ok_or_else(escapes)?;
                pending.extend(more);
            }
            Ok(m) if m.is_dir() => cur = next,
            Ok(_) => {
                // A file can only be the last step.
                if !pending.is_empty() {
                    return Err(escapes());
                }
                cur = next;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if create == Create::Dirs {
                    std::fs::create_dir(&next)
                        .map_err(io_err(format!("creating {}", next.display())))?;
                } else {
                    beyond_existing = true;
                }
                cur = next;
            }
            Err(e) => return Err(io_err(format!("reading {}", next.display()))(e)),
        }
    }
    Ok(cur)
}

/// The physical directory that will hold `at` (relative to `root`), created if missing, and
/// the name of `at` in it.
fn parent_dir(root: &Path, at: &Path) -> Result<(PathBuf, std::ffi::OsString), ArchiveError> {
    let leaf = at
        .file_name()
        .ok_or_else(|| ArchiveError::PathEscapes(at.display().to_string()))?
        .to_os_string();
    let parent = at.parent().unwrap_or(Path::new(""));
    Ok((resolve(root, root, parent, Create::Dirs)?, leaf))
}

/// Refuses to replace anything but a regular file (see the module docs for why).
fn refuse_existing(path: &Path, name: &str) -> Result<(), ArchiveError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) => Err(ArchiveError::WouldReplace {
            name: name.to_string(),
            existing: if m.is_dir() { "directory" } else { "symlink" }.to_string(),
        }),
        Err(_) => Ok(()),
    }
}

/// Writes `data` to `at` (relative to `root`) without following a symlink at its end.
/// Answers the bytes written.
pub fn write_file(
    root: &Path,
    at: &Path,
    data: &mut dyn Read,
    mode: u32,
) -> Result<u64, ArchiveError> {
    let (parent, leaf) = parent_dir(root, at)?;
    let path = parent.join(leaf);
    let name = at.display().to_string();
    refuse_existing(&path, &name)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&path)
        .map_err(io_err(format!("creating {}", path.display())))?;
    let n = io::copy(data, &mut file).map_err(|e| match e.get_ref() {
        Some(inner) if inner.is::<LimitExceeded>() => ArchiveError::TooLarge(
            inner
                .downcast_ref::<LimitExceeded>()
                .map(|l| l.0)
                .unwrap_or_default(),
        ),
        _ => ArchiveError::Io {
            context: format!("writing {}", path.display()),
            source: e,
        },
    })?;
    file.flush()
        .map_err(io_err(format!("writing {}", path.display())))?;
    // Permission bits only: no setuid, setgid or sticky bits from an archive.
    let perm = (mode & 0o777) | 0o600;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(perm))
        .map_err(io_err(format!("setting the mode of {}", path.display())))?;
    Ok(n)
}

/// Creates symlink `at` (relative to `root`) to `to`, if it resolves inside `root` now.
fn write_symlink(root: &Path, at: &Path, to: &Path, name: &str) -> Result<(), ArchiveError> {
    let (parent, leaf) = parent_dir(root, at)?;
    let path = parent.join(&leaf);
    let escapes = || ArchiveError::SymlinkEscapes {
        name: name.to_string(),
        target: to.display().to_string(),
    };
    if to.is_absolute() {
        return Err(escapes());
    }
    resolve(root, &parent, to, Create::Nothing).map_err(|_| escapes())?;
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => {
            std::fs::remove_file(&path).map_err(io_err(format!("replacing {}", path.display())))?
        }
        Ok(_) => refuse_existing(&path, name)?,
        Err(_) => {}
    }
    std::os::unix::fs::symlink(to, &path)
        .map_err(io_err(format!("creating symlink {}", path.display())))
}

/// The error a [`Limited`] reader fails with past its budget.
#[derive(Debug)]
struct LimitExceeded(u64);

impl std::fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "more than {} bytes", self.0)
    }
}

impl std::error::Error for LimitExceeded {}

/// A reader that fails once more than `max` bytes came through (0: no limit).
pub struct Limited<R> {
    inner: R,
    max: u64,
    count: u64,
}

fn limited<R: Read>(inner: R, max: u64) -> Limited<R> {
    Limited {
        inner,
        max,
        count: 0,
    }
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        if self.max > 0 && self.count > self.max {
            return Err(io::Error::other(LimitExceeded(self.max)));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempdir::Dir, PathBuf) {
        let d = tempdir::Dir::new();
        let p = d.path().canonicalize().unwrap();
        (d, p)
    }

    mod tempdir {
        /// A directory removed when dropped.
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "drover-archive-test-{}",
                    uuid::Uuid::new_v4().simple()
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    /// A tar of `entries`: (name, type, content or link target), names written raw so that
    /// hostile ones survive.
    fn tar_of(entries: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            if kind.is_symlink() || kind.is_hard_link() {
                h.set_link_name(data).unwrap();
                h.set_size(0);
                h.set_cksum();
                b.append(&h, io::empty()).unwrap();
            } else {
                h.set_size(data.len() as u64);
                h.set_cksum();
                b.append(&h, data.as_bytes()).unwrap();
            }
        }
        b.into_inner().unwrap()
    }

    fn unpack_tar(root: &Path, bytes: &[u8]) -> Result<(), ArchiveError> {
        let file = root.join("download.tar");
        std::fs::write(&file, bytes).unwrap();
        let target = Target {
            root,
            dest: Path::new("local"),
            file_mode: false,
        };
        let r = unpack(&file, Format::Tar, &target, NO_LIMITS);
        std::fs::remove_file(&file).unwrap();
        r
    }

    const NO_LIMITS: Limits = Limits {
        max_bytes: 0,
        max_files: 0,
    };

    /// Every path under `dir`, relative to it.
    fn listing(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                out.push(p.strip_prefix(base).unwrap().display().to_string());
                if p.symlink_metadata().unwrap().is_dir() {
                    walk(base, &p, out);
                }
            }
        }
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    #[test]
    fn formats_are_detected_by_extension_unless_archive_says_otherwise() {
        assert_eq!(detect("/a/b.tar.gz", None).unwrap(), Some(Format::TarGz));
        assert_eq!(detect("/a/b.tgz", None).unwrap(), Some(Format::TarGz));
        assert_eq!(detect("/a/b.tar", None).unwrap(), Some(Format::Tar));
        assert_eq!(detect("/a/b.zip", None).unwrap(), Some(Format::Zip));
        assert_eq!(detect("/a/b.gz", None).unwrap(), Some(Format::Gz));
        assert_eq!(detect("/a/b.txt", None).unwrap(), None);
        assert_eq!(detect("/a/b.tar.gz", Some("false")).unwrap(), None);
        assert_eq!(detect("/a/b", Some("zip")).unwrap(), Some(Format::Zip));
        assert!(matches!(
            detect("/a/b.tar.xz", None),
            Err(ArchiveError::UnsupportedFormat(f)) if f == "tar.xz"
        ));
    }

    #[test]
    fn a_tar_unpacks_files_dirs_and_inner_symlinks_into_the_destination() {
        let (_d, root) = root();
        let tar = tar_of(&[
            ("bin/", tar::EntryType::Directory, ""),
            ("bin/hello", tar::EntryType::Regular, "hi\n"),
            ("hello-link", tar::EntryType::Symlink, "bin/hello"),
            ("hard", tar::EntryType::Link, "bin/hello"),
        ]);
        unpack_tar(&root, &tar).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("local/hello-link")).unwrap(),
            "hi\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("local/hard")).unwrap(),
            "hi\n"
        );
    }

    #[test]
    fn tar_entries_with_dotdot_or_absolute_names_are_refused_and_nothing_is_written() {
        for bad in ["../evil", "a/../../evil", "/etc/evil"] {
            let (_d, root) = root();
            let tar = tar_of(&[
                ("good", tar::EntryType::Regular, "ok"),
                (bad, tar::EntryType::Regular, "pwned"),
            ]);
            let e = unpack_tar(&root, &tar).unwrap_err();
            assert!(matches!(e, ArchiveError::EntryEscapes { .. }), "{bad}: {e}");
            assert!(listing(&root).is_empty(), "{bad}: {:?}", listing(&root));
        }
    }

    #[test]
    fn symlinks_pointing_out_of_the_task_dir_are_refused() {
        for target in ["/etc/passwd", "../../x", "../.."] {
            let (_d, root) = root();
            let tar = tar_of(&[("l", tar::EntryType::Symlink, target)]);
            let e = unpack_tar(&root, &tar).unwrap_err();
            assert!(
                matches!(e, ArchiveError::SymlinkEscapes { .. }),
                "{target}: {e}"
            );
            assert!(listing(&root).is_empty());
        }
    }

    #[test]
    fn writing_through_a_symlink_planted_earlier_cannot_leave_the_root() {
        let (_d, root) = root();
        let (_o, outside) = self::root();
        std::fs::create_dir(root.join("local")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("local/out")).unwrap();
        let tar = tar_of(&[("out/evil", tar::EntryType::Regular, "pwned")]);
        let e = unpack_tar(&root, &tar).unwrap_err();
        assert!(matches!(e, ArchiveError::PathEscapes(_)), "{e}");
        assert!(listing(&outside).is_empty());
    }

    #[test]
    fn a_symlink_checked_early_cannot_be_made_to_escape_by_later_entries() {
        // `d/l -> a/../..` reads as `local` while `d/a` is missing; making `d/a` a link to
        // `..` later would turn it into `local/..`. Resolving physically refuses the first.
        let (_d, root) = root();
        let tar = tar_of(&[
            ("d/", tar::EntryType::Directory, ""),
            ("d/l", tar::EntryType::Symlink, "a/../.."),
            ("d/a", tar::EntryType::Symlink, ".."),
        ]);
        let e = unpack_tar(&root, &tar).unwrap_err();
        assert!(matches!(e, ArchiveError::SymlinkEscapes { .. }), "{e}");
    }

    #[test]
    fn decompression_limits_refuse_large_and_crowded_archives() {
        let (_d, root) = root();
        let file = root.join("a.tar");
        std::fs::write(
            &file,
            tar_of(&[
                ("a", tar::EntryType::Regular, "0123456789"),
                ("b", tar::EntryType::Regular, "0123456789"),
            ]),
        )
        .unwrap();
        let target = Target {
            root: &root,
            dest: Path::new("local"),
            file_mode: false,
        };
        let small = Limits {
            max_bytes: 15,
            max_files: 0,
        };
        assert!(matches!(
            unpack(&file, Format::Tar, &target, small),
            Err(ArchiveError::TooLarge(15))
        ));
        let few = Limits {
            max_bytes: 0,
            max_files: 1,
        };
        assert!(matches!(
            unpack(&file, Format::Tar, &target, few),
            Err(ArchiveError::TooManyFiles(1))
        ));
        assert!(!root.join("local").exists());
    }

    #[test]
    fn a_zip_unpacks_and_its_escaping_entries_are_refused() {
        use zip::write::SimpleFileOptions;
        let zip_of = |name: &str| {
            let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
            w.start_file("ok.txt", SimpleFileOptions::default())
                .unwrap();
            w.write_all(b"zipped").unwrap();
            w.start_file(name, SimpleFileOptions::default()).unwrap();
            w.write_all(b"x").unwrap();
            w.finish().unwrap().into_inner()
        };
        let (_d, root) = root();
        let target = Target {
            root: &root,
            dest: Path::new("local"),
            file_mode: false,
        };
        let file = root.join("a.zip");
        std::fs::write(&file, zip_of("sub/two.txt")).unwrap();
        unpack(&file, Format::Zip, &target, NO_LIMITS).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("local/ok.txt")).unwrap(),
            "zipped"
        );
        std::fs::write(&file, zip_of("../evil")).unwrap();
        assert!(matches!(
            unpack(&file, Format::Zip, &target, NO_LIMITS),
            Err(ArchiveError::EntryEscapes { .. })
        ));
        assert!(!root.parent().unwrap().join("evil").exists());
    }

    #[test]
    fn file_mode_takes_the_single_file_of_an_archive() {
        let (_d, root) = root();
        let file = root.join("a.tar");
        std::fs::write(&file, tar_of(&[("only", tar::EntryType::Regular, "one")])).unwrap();
        let target = Target {
            root: &root,
            dest: Path::new("local/renamed"),
            file_mode: true,
        };
        unpack(&file, Format::Tar, &target, NO_LIMITS).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("local/renamed")).unwrap(),
            "one"
        );
        std::fs::write(
            &file,
            tar_of(&[
                ("a", tar::EntryType::Regular, "1"),
                ("b", tar::EntryType::Regular, "2"),
            ]),
        )
        .unwrap();
        assert!(matches!(
            unpack(&file, Format::Tar, &target, NO_LIMITS),
            Err(ArchiveError::NotOneFile(2))
        ));
    }
}
