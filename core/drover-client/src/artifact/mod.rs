//! A task's `artifact` blocks, fetched into its task directory before it starts, as Nomad's
//! artifact hook does with go-getter.
//!
//! What Drover takes of go-getter: http and https URLs (https over rustls, trusting the
//! platform's certificate store as go-getter's Go does: on Linux the system bundle, or
//! `SSL_CERT_FILE` / `SSL_CERT_DIR` when set; a certificate it does not accept fails the
//! download with the URL and the reason), local paths and `file://` URLs (relative paths from
//! the task directory; only inside the allocation directory unless the client's
//! `artifact.disable_filesystem_isolation` is set, as Nomad's sandbox allows), forced getters
//! `http::`/`https::`/`file::`, the `checksum`, `archive` and `filename` query parameters (the
//! block's `options` become query parameters, as Nomad passes them), and unpacking of tar,
//! tar.gz, gz and zip, and `source//subdir` (only that directory of an archive or directory is
//! taken; symlinks in it are left out). git, hg, s3 and gcs getters are refused by name;
//! `chown = true` is refused.
//!
//! Nothing lands outside the task directory: see `archive` for how paths are resolved.

pub mod archive;
pub mod checksum;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use archive::{ArchiveError, Create, Limits, Target};
use checksum::{Checksum, ChecksumError};

/// The client's `artifact` block (Nomad's names and defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactConfig {
    /// `http_read_timeout`: how long a download may receive nothing.
    pub http_read_timeout: Duration,
    /// `http_max_size`: the largest download.
    pub http_max_bytes: u64,
    /// `decompression_size_limit` (0: none).
    pub decompression_size_limit: u64,
    /// `decompression_file_count_limit` (0: none).
    pub decompression_file_count_limit: u64,
    /// `disable_filesystem_isolation`: local sources may be read anywhere on the host.
    pub disable_filesystem_isolation: bool,
}

impl Default for ArtifactConfig {
    fn default() -> Self {
        ArtifactConfig {
            http_read_timeout: Duration::from_secs(30 * 60),
            http_max_bytes: 100_000_000_000,
            decompression_size_limit: 100_000_000_000,
            decompression_file_count_limit: 4096,
            disable_filesystem_isolation: false,
        }
    }
}

/// go-humanize's `ParseBytes`, as Nomad reads `http_max_size`: `100GB` (powers of 1000),
/// `1GiB` (powers of 1024), a bare number of bytes; case does not matter.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim().to_lowercase());
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid size {text:?}"))?;
    let scale: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "p" | "pb" => 1e15,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024.0 * 1024.0,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "ti" | "tib" => 1024f64.powi(4),
        "pi" | "pib" => 1024f64.powi(5),
        _ => return Err(format!("unknown size unit in {text:?}")),
    };
    Ok((value * scale) as u64)
}

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("invalid artifact block: {0}")]
    Spec(String),
    #[error("artifact destination path escapes the task directory")]
    DestinationEscapes,
    #[error("getter {0:?} is not supported by Drover (supported: http, https and local files)")]
    UnsupportedGetter(String),
    /// The TLS connection failed: an untrusted or mismatched certificate, a failed handshake.
    #[error("TLS connection to {url} failed: {reason}")]
    Tls { url: String, reason: String },
    #[error("invalid source URL: {0}")]
    BadUrl(String),
    #[error("{0}")]
    Http(String),
    /// go-getter's words for a non-200 answer.
    #[error("bad response code: {0}")]
    BadStatus(u16),
    #[error("download is larger than the client's http_max_size of {0} bytes")]
    TooLarge(u64),
    #[error(
        "local source {0} is outside the allocation directory (the client's artifact.disable_filesystem_isolation allows it)"
    )]
    OutsideAllocDir(String),
    #[error("mode \"dir\" needs an archive or a directory source")]
    DirModeNeedsDirectory,
    #[error("chown is not supported by Drover: artifacts stay owned by the agent's user")]
    ChownUnsupported,
    #[error("subdirectory {0:?} of the source escapes it")]
    SubdirEscapes(String),
    #[error("a subdirectory (source//dir) needs an archive or a directory source")]
    SubdirNeedsDirectory,
    #[error("subdirectory {0:?} is not in the source")]
    SubdirMissing(String),
    #[error("checksums apply to files; {0} is a directory")]
    ChecksumOfDirectory(String),
    #[error(transparent)]
    Checksum(#[from] ChecksumError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// go-getter's modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Any,
    File,
    Dir,
}

/// One `artifact` block, as the job has it (before interpolation).
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    pub source: String,
    pub options: BTreeMap<String, String>,
    pub headers: BTreeMap<String, String>,
    pub mode: Mode,
    pub destination: String,
    /// `chown = true`: refused, Drover does not change the owner of what it fetched.
    pub chown: bool,
}

/// The task's artifacts (its `Artifacts` in Nomad's JSON).
pub fn of_task(task: &drover_structs::Task) -> Result<Vec<Artifact>, ArtifactError> {
    let Some(list) = task.artifacts.as_ref().filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let items = list
        .as_array()
        .ok_or_else(|| ArtifactError::Spec("Artifacts is not a list".into()))?;
    items.iter().map(Artifact::from_json).collect()
}

impl Artifact {
    fn from_json(v: &Value) -> Result<Artifact, ArtifactError> {
        let text = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let map = |key: &str| -> Result<BTreeMap<String, String>, ArtifactError> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => Ok((k.clone(), s.clone())),
                        other => Ok((k.clone(), other.to_string())),
                    })
                    .collect(),
                Some(_) => Err(ArtifactError::Spec(format!("{key} is not a map"))),
            }
        };
        let mode = match text("GetterMode").as_str() {
            "" | "any" => Mode::Any,
            "file" => Mode::File,
            "dir" => Mode::Dir,
            other => {
                return Err(ArtifactError::Spec(format!(
                    "invalid artifact mode {other:?}"
                )));
            }
        };
        let destination = match text("RelativeDest") {
            d if d.is_empty() => "local/".to_string(),
            d => d,
        };
        Ok(Artifact {
            source: text("GetterSource"),
            options: map("GetterOptions")?,
            headers: map("GetterHeaders")?,
            mode,
            destination,
            chown: v.get("Chown").and_then(Value::as_bool).unwrap_or(false),
        })
    }
}

/// Where a task's artifacts go and what they may read.
pub struct Place<'a> {
    /// The task directory: everything lands inside it.
    pub task_dir: &'a Path,
    /// The allocation directory: local sources are read only inside it (with isolation).
    pub alloc_dir: &'a Path,
    /// Downloads wait here before they are checked and unpacked (not seen by the task).
    pub staging_dir: &'a Path,
}

/// A scratch directory (physical path, and relative to the task directory), removed however
/// the fetch ends.
struct Scratch(PathBuf, PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes a staged download however the fetch ends.
struct Staged(PathBuf);

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Fetches one artifact. `lookup` answers `${...}` references (task env, node attributes).
pub fn fetch(
    artifact: &Artifact,
    lookup: &dyn Fn(&str) -> Option<String>,
    place: &Place,
    config: &ArtifactConfig,
) -> Result<(), ArtifactError> {
    if artifact.chown {
        return Err(ArtifactError::ChownUnsupported);
    }
    let interpolate = |s: &str| crate::interpolate::interpolate(s, lookup);
    let root = place
        .task_dir
        .canonicalize()
        .map_err(|source| ArtifactError::Io {
            context: format!("resolving {}", place.task_dir.display()),
            source,
        })?;
    let dest = destination(&root, &interpolate(&artifact.destination))?;
    let options: BTreeMap<String, String> = artifact
        .options
        .iter()
        .map(|(k, v)| (k.clone(), interpolate(v)))
        .collect();
    let headers: Vec<(String, String)> = artifact
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), interpolate(v)))
        .collect();
    let source = Source::parse(&interpolate(&artifact.source), &options, &root)?;
    let checksum = source.param("checksum").map(Checksum::parse).transpose()?;
    let archive_opt = source.param("archive");
    let limits = Limits {
        max_bytes: config.decompression_size_limit,
        max_files: config.decompression_file_count_limit,
    };

    let (file, name, _staged) = match &source.location {
        Location::Http(url) => {
            std::fs::create_dir_all(place.staging_dir).map_err(|source| ArtifactError::Io {
                context: format!("creating {}", place.staging_dir.display()),
                source,
            })?;
            let staged = place
                .staging_dir
                .join(format!("artifact-{}", uuid::Uuid::new_v4().simple()));
            let guard = Staged(staged.clone());
            http_get(url, &headers, config, &staged)?;
            (staged, url.path().to_string(), Some(guard))
        }
        Location::Local(path) => {
            let real = path.canonicalize().map_err(|source| ArtifactError::Io {
                context: format!("reading local source {}", path.display()),
                source,
            })?;
            let alloc = place.alloc_dir.canonicalize().unwrap_or_default();
            if !config.disable_filesystem_isolation && !real.starts_with(&alloc) {
                return Err(ArtifactError::OutsideAllocDir(path.display().to_string()));
            }
            if real.is_dir() {
                if checksum.is_some() {
                    return Err(ArtifactError::ChecksumOfDirectory(
                        path.display().to_string(),
                    ));
                }
                if artifact.mode == Mode::File {
                    return Err(ArtifactError::Spec(format!(
                        "mode \"file\" given a directory, {}",
                        path.display()
                    )));
                }
                let from = match &source.subdir {
                    None => real.clone(),
                    Some(sub) => {
                        let inner = real
                            .join(sub)
                            .canonicalize()
                            .map_err(|_| ArtifactError::SubdirMissing(sub.display().to_string()))?;
                        if !inner.starts_with(&real) {
                            return Err(ArtifactError::SubdirEscapes(sub.display().to_string()));
                        }
                        inner
                    }
                };
                copy_tree(&from, &root, &dest)?;
                return Ok(());
            }
            (real, path.display().to_string(), None)
        }
    };
    if let Some(c) = &checksum {
        c.verify_file(&file).map_err(|e| match e {
            // Name what the job named, not the staging file.
            ChecksumError::Mismatch {
                kind,
                expected,
                got,
                ..
            } => ChecksumError::Mismatch {
                file: source.display.clone(),
                kind,
                expected,
                got,
            },
            other => other,
        })?;
    }
    let format = archive::detect(&name, archive_opt)?;
    if source.subdir.is_some() && (format.is_none() || artifact.mode == Mode::File) {
        return Err(ArtifactError::SubdirNeedsDirectory);
    }
    if let Some(format) = format {
        // With a subdirectory, the whole archive goes to a scratch directory the task does not
        // see, and only the subdirectory is copied to the destination (go-getter's `//dir`).
        let scratch = match &source.subdir {
            None => None,
            Some(_) => {
                let staging = std::fs::create_dir_all(place.staging_dir)
                    .and_then(|()| place.staging_dir.canonicalize())
                    .map_err(|source| ArtifactError::Io {
                        context: format!("resolving {}", place.staging_dir.display()),
                        source,
                    })?;
                let rel = staging
                    .strip_prefix(&root)
                    .map_err(|_| ArtifactError::DestinationEscapes)?
                    .join(format!("unpack-{}", uuid::Uuid::new_v4().simple()));
                Some(Scratch(root.join(&rel), rel))
            }
        };
        let target = Target {
            root: &root,
            dest: scratch.as_ref().map(|s| s.1.as_path()).unwrap_or(&dest),
            file_mode: artifact.mode == Mode::File,
        };
        let unpack_from = if format == archive::Format::Gz {
            // The gz decompressor names its output after the source, not the staging file.
            let named = place.staging_dir.join(base_name(&name));
            std::fs::create_dir_all(place.staging_dir)
                .and_then(|()| std::fs::copy(&file, &named).map(|_| ()))
                .map_err(|source| ArtifactError::Io {
                    context: "staging the download".into(),
                    source,
                })?;
            Some(Staged(named))
        } else {
            None
        };
        let path = unpack_from.as_ref().map(|s| s.0.as_path()).unwrap_or(&file);
        archive::unpack(path, format, &target, limits)?;
        if let (Some(scratch), Some(sub)) = (&scratch, &source.subdir) {
            let inner = archive::resolve(&root, &root, &scratch.1.join(sub), Create::Nothing)
                .map_err(|_| ArtifactError::SubdirEscapes(sub.display().to_string()))?;
            if !inner.starts_with(&scratch.0) || !inner.is_dir() {
                return Err(ArtifactError::SubdirMissing(sub.display().to_string()));
            }
            copy_tree(&inner, &root, &dest)?;
        }
        return Ok(());
    }
    let at = match artifact.mode {
        Mode::File => dest,
        Mode::Any => dest.join(
            source
                .param("filename")
                .map(str::to_string)
                .unwrap_or_else(|| base_name(&name)),
        ),
        Mode::Dir => return Err(ArtifactError::DirModeNeedsDirectory),
    };
    if !archive::lexically_inside(&at) {
        return Err(ArtifactError::DestinationEscapes);
    }
    let mut input = std::fs::File::open(&file).map_err(|source| ArtifactError::Io {
        context: format!("opening {}", file.display()),
        source,
    })?;
    archive::write_file(&root, &at, &mut input, 0o644)?;
    Ok(())
}

/// The destination relative to the task directory: a relative path that stays inside it, or
/// an absolute one inside it (`${NOMAD_TASK_DIR}/...` for drivers that see host paths).
pub fn destination(root: &Path, dest: &str) -> Result<PathBuf, ArtifactError> {
    let path = Path::new(dest);
    let rel = if path.is_absolute() {
        path.strip_prefix(root)
            .map_err(|_| ArtifactError::DestinationEscapes)?
            .to_path_buf()
    } else {
        path.to_path_buf()
    };
    if !archive::lexically_inside(&rel) {
        return Err(ArtifactError::DestinationEscapes);
    }
    // `..` that stays inside is folded, so later joins see plain names.
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    Ok(out)
}

/// Go's `path.Base` of a URL or file path, `.` for an empty one.
fn base_name(path: &str) -> String {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|b| !b.is_empty())
        .unwrap_or(".")
        .to_string()
}

enum Location {
    Http(url::Url),
    Local(PathBuf),
}

/// A source after go-getter's detection, with its query parameters.
struct Source {
    location: Location,
    /// The parameters go-getter takes for itself (`checksum`, `archive`, `filename`).
    params: BTreeMap<String, String>,
    /// The source as the job gave it, without its query, for messages.
    display: String,
    /// go-getter's `source//subdir`: only this part of an archive or directory is taken.
    subdir: Option<PathBuf>,
}

/// go-getter's `SourceDirSubdir`: `http://h/a.tgz//dir?q` is `http://h/a.tgz?q` and `dir`
/// (a `//` in the scheme's `://` does not count).
fn split_subdir(text: &str) -> (String, Option<String>) {
    let start = text.find("://").map(|i| i + 3).unwrap_or(0);
    let Some(at) = text[start..].find("//").map(|i| start + i) else {
        return (text.to_string(), None);
    };
    let (source, rest) = (&text[..at], &text[at + 2..]);
    match rest.split_once('?') {
        Some((sub, query)) => (format!("{source}?{query}"), Some(sub.to_string())),
        None => (source.to_string(), Some(rest.to_string())),
    }
}

impl Source {
    fn param(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }

    fn parse(
        text: &str,
        options: &BTreeMap<String, String>,
        task_dir: &Path,
    ) -> Result<Source, ArtifactError> {
        let (text, subdir) = split_subdir(text.trim());
        let subdir = match subdir.filter(|s| !s.is_empty()) {
            None => None,
            Some(s) if archive::lexically_inside(Path::new(&s)) => Some(PathBuf::from(s)),
            Some(s) => return Err(ArtifactError::SubdirEscapes(s)),
        };
        let mut text = text.as_str();
        // go-getter's forced getter: `git::https://...`.
        let mut forced = None;
        if let Some((getter, rest)) = text.split_once("::")
            && !getter.is_empty()
            && getter.chars().all(|c| c.is_ascii_alphanumeric())
        {
            forced = Some(getter.to_string());
            text = rest;
        }
        let scheme = text.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        let getter = forced.clone().or(scheme.clone());
        // go-getter's detectors for hosts it sends to git or mercurial.
        let detected_git = ["github.com/", "gitlab.com/", "bitbucket.org/", "git@"]
            .iter()
            .any(|p| text.starts_with(p));
        match getter.as_deref() {
            // go-getter's http getter serves both schemes.
            Some("http" | "https") => {}
            Some("file") => {}
            Some(other) => return Err(ArtifactError::UnsupportedGetter(other.to_string())),
            None if detected_git => return Err(ArtifactError::UnsupportedGetter("git".into())),
            None => {}
        }
        let special = ["checksum", "archive", "filename"];
        if matches!(scheme.as_deref(), Some("http" | "https")) {
            let mut url =
                url::Url::parse(text).map_err(|e| ArtifactError::BadUrl(e.to_string()))?;
            let mut query: Vec<(String, String)> = url.query_pairs().into_owned().collect();
            // The block's options are query parameters, as Nomad passes them to go-getter.
            for (k, v) in options {
                query.retain(|(qk, _)| qk != k);
                query.push((k.clone(), v.clone()));
            }
            let params = take_params(&mut query, &special);
            if query.is_empty() {
                url.set_query(None);
            } else {
                url.query_pairs_mut().clear().extend_pairs(query);
            }
            let mut display = url.clone();
            display.set_query(None);
            return Ok(Source {
                location: Location::Http(url),
                params,
                display: display.to_string(),
                subdir,
            });
        }
        // A local path (or file:// URL); relative paths start at the task directory, which
        // is go-getter's working directory in Nomad.
        let without_scheme = text.strip_prefix("file://").unwrap_or(text);
        let (path, query) = without_scheme
            .split_once('?')
            .unwrap_or((without_scheme, ""));
        let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        for (k, v) in options {
            pairs.retain(|(qk, _)| qk != k);
            pairs.push((k.clone(), v.clone()));
        }
        let params = take_params(&mut pairs, &special);
        let path = Path::new(path);
        let full = if path.is_absolute() {
            path.to_path_buf()
        } else {
            task_dir.join(path)
        };
        Ok(Source {
            location: Location::Local(full),
            params,
            display: path.display().to_string(),
            subdir,
        })
    }
}

fn take_params(query: &mut Vec<(String, String)>, keys: &[&str]) -> BTreeMap<String, String> {
    let mut taken = BTreeMap::new();
    query.retain(|(k, v)| {
        if keys.contains(&k.as_str()) {
            taken.insert(k.clone(), v.clone());
            false
        } else {
            true
        }
    });
    taken
}

/// Downloads `url` into `to`, within the client's size and read-timeout limits.
fn http_get(
    url: &url::Url,
    headers: &[(String, String)],
    config: &ArtifactConfig,
    to: &Path,
) -> Result<(), ArtifactError> {
    use ureq::tls::{RootCerts, TlsConfig, TlsProvider};
    // The platform's trust store, as go-getter's crypto/x509 uses: on Linux the system bundle
    // or SSL_CERT_FILE / SSL_CERT_DIR (rustls-native-certs), the OS verifier elsewhere.
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::PlatformVerifier)
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_per_read(Some(config.http_read_timeout))
        .tls_config(tls)
        .build()
        .into();
    let mut req = agent.get(url.as_str());
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = req.call().map_err(|e| request_error(url, e))?;
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(ArtifactError::BadStatus(status));
    }
    let max = config.http_max_bytes;
    let declared = resp
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| max > 0 && n > max) {
        return Err(ArtifactError::TooLarge(max));
    }
    let mut body = resp.into_body().into_reader().take(max.saturating_add(1));
    let mut file = std::fs::File::create(to).map_err(|source| ArtifactError::Io {
        context: format!("creating {}", to.display()),
        source,
    })?;
    let n = std::io::copy(&mut body, &mut file)
        .map_err(|e| ArtifactError::Http(format!("reading the response: {e}")))?;
    if n > max {
        return Err(ArtifactError::TooLarge(max));
    }
    Ok(())
}

/// A failed request as the task's event tells it: the URL (without its query, which may carry
/// credentials) and, for TLS, the reason the certificate or handshake was refused.
fn request_error(url: &url::Url, e: ureq::Error) -> ArtifactError {
    let mut shown = url.clone();
    shown.set_query(None);
    let _ = shown.set_password(None);
    let url = shown.to_string();
    let tls = match &e {
        ureq::Error::Rustls(t) => Some(tls_reason(t)),
        ureq::Error::Tls(t) => Some(t.to_string()),
        // rustls's handshake errors reach ureq inside an io::Error.
        ureq::Error::Io(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .map(tls_reason),
        _ => None,
    };
    match tls {
        Some(reason) => ArtifactError::Tls { url, reason },
        None => ArtifactError::Http(format!("GET {url}: {e}")),
    }
}

/// rustls's reason, with Go's words for the common certificate problems.
fn tls_reason(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    let go = match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => Some("certificate signed by unknown authority"),
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                Some("certificate is not valid for this host")
            }
            C::Expired | C::ExpiredContext { .. } => Some("certificate has expired"),
            C::NotValidYet | C::NotValidYetContext { .. } => Some("certificate is not yet valid"),
            C::Revoked => Some("certificate has been revoked"),
            _ => None,
        },
        _ => None,
    };
    match go {
        Some(go) => format!("{e} ({go})"),
        None => e.to_string(),
    }
}

/// Copies a local directory source under `dest` (relative to `root`).
fn copy_tree(from: &Path, root: &Path, dest: &Path) -> Result<(), ArtifactError> {
    archive::resolve(root, root, dest, Create::Dirs)?;
    let entries = std::fs::read_dir(from).map_err(|source| ArtifactError::Io {
        context: format!("reading {}", from.display()),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| ArtifactError::Io {
            context: format!("reading {}", from.display()),
            source,
        })?;
        let path = entry.path();
        let at = dest.join(entry.file_name());
        let meta = std::fs::symlink_metadata(&path).map_err(|source| ArtifactError::Io {
            context: format!("reading {}", path.display()),
            source,
        })?;
        if meta.is_dir() {
            copy_tree(&path, root, &at)?;
        } else if meta.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let mut input = std::fs::File::open(&path).map_err(|source| ArtifactError::Io {
                context: format!("reading {}", path.display()),
                source,
            })?;
            archive::write_file(root, &at, &mut input, meta.permissions().mode())?;
        }
        // Symlinks and special files are left out: what they name may be anywhere.
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sha2::Digest;

    #[test]
    fn destinations_stay_inside_the_task_directory() {
        let root = Path::new("/data/alloc/a1/web");
        assert_eq!(destination(root, "local/").unwrap(), PathBuf::from("local"));
        assert_eq!(
            destination(root, "local/../secrets/x").unwrap(),
            PathBuf::from("secrets/x")
        );
        assert_eq!(
            destination(root, "/data/alloc/a1/web/local/bin").unwrap(),
            PathBuf::from("local/bin")
        );
        for bad in ["../alloc", "local/../../x", "/etc", "/data/alloc/a1/other"] {
            assert!(
                matches!(
                    destination(root, bad),
                    Err(ArtifactError::DestinationEscapes)
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn artifact_blocks_decode_from_nomads_json_with_defaults() {
        let task = drover_structs::Task {
            artifacts: Some(json!([{
                "GetterSource": "http://h/f.tgz",
                "GetterOptions": {"checksum": "md5:00"},
                "GetterHeaders": {"X-A": "b"},
                "GetterMode": "file",
                "RelativeDest": "local/f"
            }, {"GetterSource": "x"}])),
            ..Default::default()
        };
        let a = of_task(&task).unwrap();
        assert_eq!(a[0].mode, Mode::File);
        assert_eq!(a[0].options["checksum"], "md5:00");
        assert_eq!(a[0].headers["X-A"], "b");
        assert_eq!(a[1].mode, Mode::Any);
        assert_eq!(a[1].destination, "local/");
    }

    #[test]
    fn options_become_query_parameters_and_go_getters_own_are_taken_out() {
        let opts = BTreeMap::from([
            ("checksum".to_string(), "sha256:ab".to_string()),
            ("token".to_string(), "t".to_string()),
        ]);
        let s = Source::parse(
            "http://h:1/f.tar.gz?archive=false&x=1",
            &opts,
            Path::new("/t"),
        )
        .unwrap();
        let Location::Http(url) = &s.location else {
            panic!("not http");
        };
        assert_eq!(url.as_str(), "http://h:1/f.tar.gz?x=1&token=t");
        assert_eq!(s.param("checksum"), Some("sha256:ab"));
        assert_eq!(s.param("archive"), Some("false"));
        assert_eq!(s.display, "http://h:1/f.tar.gz");
    }

    #[test]
    fn https_takes_the_http_getter_and_other_getters_are_refused_clearly() {
        let none = BTreeMap::new();
        let t = Path::new("/t");
        for src in [
            "https://h/f?checksum=md5:00",
            "http::https://h/f?checksum=md5:00",
            "https::https://h/f?checksum=md5:00",
        ] {
            let s = Source::parse(src, &none, t).unwrap();
            assert!(
                matches!(&s.location, Location::Http(u) if u.as_str() == "https://h/f"),
                "{src}"
            );
            assert_eq!(s.param("checksum"), Some("md5:00"), "{src}");
        }
        for (src, getter) in [
            ("git::https://h/r", "git"),
            ("s3://bucket/k", "s3"),
            ("github.com/a/b", "git"),
        ] {
            match Source::parse(src, &none, t) {
                Err(ArtifactError::UnsupportedGetter(g)) => assert_eq!(g, getter, "{src}"),
                other => panic!("{src}: {:?}", other.map(|s| s.display)),
            }
        }
    }

    #[test]
    fn local_sources_resolve_from_the_task_dir_and_keep_their_query() {
        let none = BTreeMap::new();
        let s = Source::parse("file:///srv/a.tgz?archive=false", &none, Path::new("/t")).unwrap();
        assert!(matches!(&s.location, Location::Local(p) if p == Path::new("/srv/a.tgz")));
        assert_eq!(s.param("archive"), Some("false"));
        let s = Source::parse("local/in.txt", &none, Path::new("/t")).unwrap();
        assert!(matches!(&s.location, Location::Local(p) if p == Path::new("/t/local/in.txt")));
    }

    /// Serves one HTTP response per connection on 127.0.0.1 and answers its port; each request's
    /// head goes to the returned channel.
    fn serve(status: &'static str, body: Vec<u8>) -> (u16, std::sync::mpsc::Receiver<String>) {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                let _ = tx.send(head);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        (port, rx)
    }

    fn http(url: String) -> Artifact {
        local(&url, &[], Mode::File, "local/f")
    }

    #[test]
    fn http_downloads_send_headers_and_strip_go_getters_parameters() {
        let d = Dirs::new();
        let (port, heads) = serve("200 OK", b"served".to_vec());
        let mut a = http(format!(
            "http://127.0.0.1:{port}/f?checksum=md5:{}",
            hex::encode(md5::Md5::digest(b"served"))
        ));
        a.headers.insert("X-Token".into(), "${NOMAD_META_t}".into());
        let lookup = |n: &str| (n == "NOMAD_META_t").then(|| "secret".to_string());
        d.fetch(&a, &lookup, &ArtifactConfig::default()).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.0.join("web/local/f")).unwrap(),
            "served"
        );
        let head = heads.recv().unwrap();
        assert!(head.starts_with("GET /f HTTP/1.1\r\n"), "{head}");
        assert!(head.to_lowercase().contains("x-token: secret"), "{head}");
        // Nothing is left in the staging directory.
        let staged = std::fs::read_dir(d.0.join("web/private")).unwrap().count();
        assert_eq!(staged, 0);
    }

    #[test]
    fn http_errors_and_oversized_downloads_are_refused_and_write_nothing() {
        let d = Dirs::new();
        let (port, _heads) = serve("404 Not Found", b"nope".to_vec());
        let e = d
            .fetch(
                &http(format!("http://127.0.0.1:{port}/f")),
                &|_| None,
                &ArtifactConfig::default(),
            )
            .unwrap_err();
        assert_eq!(e.to_string(), "bad response code: 404");
        let (port, _heads) = serve("200 OK", vec![b'x'; 2048]);
        let small = ArtifactConfig {
            http_max_bytes: 1024,
            ..Default::default()
        };
        let e = d
            .fetch(
                &http(format!("http://127.0.0.1:{port}/f")),
                &|_| None,
                &small,
            )
            .unwrap_err();
        assert!(matches!(e, ArtifactError::TooLarge(1024)), "{e}");
        assert!(!d.0.join("web/local/f").exists());
    }

    #[test]
    fn a_failed_tls_handshake_names_the_url_and_writes_nothing() {
        let d = Dirs::new();
        // A plain-HTTP server answers the TLS client hello with garbage.
        let (port, _heads) = serve("400 Bad Request", b"no tls here".to_vec());
        let e = d
            .fetch(
                &http(format!("https://127.0.0.1:{port}/f?token=hidden")),
                &|_| None,
                &ArtifactConfig::default(),
            )
            .unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, ArtifactError::Tls { .. }), "{text}");
        assert!(
            text.starts_with(&format!(
                "TLS connection to https://127.0.0.1:{port}/f failed: "
            )),
            "{text}"
        );
        assert!(!text.contains("hidden"), "{text}");
        assert!(!d.0.join("web/local/f").exists());
    }

    #[test]
    fn a_subdirectory_after_a_double_slash_is_split_off_as_go_getter_does() {
        assert_eq!(
            split_subdir("http://h/a.tgz//sub/dir?checksum=x"),
            (
                "http://h/a.tgz?checksum=x".to_string(),
                Some("sub/dir".to_string())
            )
        );
        assert_eq!(
            split_subdir("http://h/a.tgz"),
            ("http://h/a.tgz".to_string(), None)
        );
        assert_eq!(
            split_subdir("local/a.tar//x"),
            ("local/a.tar".to_string(), Some("x".to_string()))
        );
        assert!(matches!(
            Source::parse("http://h/a.tgz//../..", &BTreeMap::new(), Path::new("/t")),
            Err(ArtifactError::SubdirEscapes(_))
        ));
    }

    #[test]
    fn only_the_subdirectory_of_an_archive_lands_in_the_destination() {
        let d = Dirs::new();
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in [("top.txt", "top"), ("sub/inner.txt", "inner")] {
            let mut h = tar::Header::new_gnu();
            h.set_path(name).unwrap();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append(&h, data.as_bytes()).unwrap();
        }
        std::fs::write(d.0.join("a.tar"), b.into_inner().unwrap()).unwrap();
        let a = local("../a.tar//sub", &[], Mode::Any, "local/");
        d.fetch(&a, &|_| None, &ArtifactConfig::default()).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.0.join("web/local/inner.txt")).unwrap(),
            "inner"
        );
        assert!(!d.0.join("web/local/top.txt").exists());
        // The scratch copy of the whole archive is gone.
        let left: Vec<_> = std::fs::read_dir(d.0.join("web/private"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let missing = local("../a.tar//nope", &[], Mode::Any, "local/");
        let e = d
            .fetch(&missing, &|_| None, &ArtifactConfig::default())
            .unwrap_err();
        assert!(matches!(e, ArtifactError::SubdirMissing(_)), "{e}");
    }

    #[test]
    fn chown_is_refused_rather_than_ignored() {
        let d = Dirs::new();
        std::fs::write(d.0.join("in.txt"), "x").unwrap();
        let mut a = local("../in.txt", &[], Mode::Any, "local/");
        a.chown = true;
        let e = d
            .fetch(&a, &|_| None, &ArtifactConfig::default())
            .unwrap_err();
        assert!(matches!(e, ArtifactError::ChownUnsupported), "{e}");
        assert!(!d.0.join("web/local/in.txt").exists());
    }

    #[test]
    fn sizes_parse_as_go_humanize_does() {
        assert_eq!(parse_bytes("100GB").unwrap(), 100_000_000_000);
        assert_eq!(parse_bytes("1 MiB").unwrap(), 1 << 20);
        assert_eq!(parse_bytes("512").unwrap(), 512);
        assert_eq!(parse_bytes("10kb").unwrap(), 10_000);
        assert!(parse_bytes("ten").is_err());
        assert!(parse_bytes("10 parsecs").is_err());
    }

    /// A task directory inside an allocation directory, removed when dropped.
    struct Dirs(PathBuf);
    impl Dirs {
        fn new() -> Dirs {
            let base = std::env::temp_dir()
                .join(format!("drover-artifact-{}", uuid::Uuid::new_v4().simple()));
            std::fs::create_dir_all(base.join("web/local")).unwrap();
            Dirs(base)
        }
        fn fetch(
            &self,
            a: &Artifact,
            lookup: &dyn Fn(&str) -> Option<String>,
            c: &ArtifactConfig,
        ) -> Result<(), ArtifactError> {
            let (task, staging) = (self.0.join("web"), self.0.join("web/private"));
            let place = Place {
                task_dir: &task,
                alloc_dir: &self.0,
                staging_dir: &staging,
            };
            fetch(a, lookup, &place, c)
        }
    }
    impl Drop for Dirs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn local(source: &str, options: &[(&str, &str)], mode: Mode, dest: &str) -> Artifact {
        Artifact {
            source: source.into(),
            options: options
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            headers: BTreeMap::new(),
            mode,
            destination: dest.into(),
            chown: false,
        }
    }

    #[test]
    fn a_local_file_is_checked_interpolated_and_copied_into_the_destination() {
        let d = Dirs::new();
        std::fs::write(d.0.join("in.txt"), "hello").unwrap();
        let lookup = |n: &str| {
            (n == "NOMAD_META_sum").then(|| "5d41402abc4b2a76b9719d911017c592".to_string())
        };
        let a = local(
            "../in.txt",
            &[("checksum", "md5:${NOMAD_META_sum}")],
            Mode::Any,
            "local/",
        );
        d.fetch(&a, &lookup, &ArtifactConfig::default()).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.0.join("web/local/in.txt")).unwrap(),
            "hello"
        );
        let wrong = local(
            "../in.txt",
            &[("checksum", "md5:00000000000000000000000000000000")],
            Mode::File,
            "local/other",
        );
        let e = d
            .fetch(&wrong, &lookup, &ArtifactConfig::default())
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("Checksums did not match for ../in.txt."),
            "{e}"
        );
        assert!(!d.0.join("web/local/other").exists());
    }

    #[test]
    fn local_sources_outside_the_allocation_are_refused_unless_isolation_is_off() {
        let d = Dirs::new();
        let outside = Dirs::new();
        std::fs::write(outside.0.join("secret"), "s").unwrap();
        let src = outside.0.join("secret").display().to_string();
        let a = local(&src, &[], Mode::Any, "local/");
        let e = d
            .fetch(&a, &|_| None, &ArtifactConfig::default())
            .unwrap_err();
        assert!(matches!(e, ArtifactError::OutsideAllocDir(_)), "{e}");
        let open = ArtifactConfig {
            disable_filesystem_isolation: true,
            ..Default::default()
        };
        d.fetch(&a, &|_| None, &open).unwrap();
        assert!(d.0.join("web/local/secret").exists());
    }
}
