//! The task `template` block: consul-template's Go text/template rendered into the task
//! directory before the task starts, re-rendered while it runs, with the template's
//! `change_mode` applied when an output changes.
//!
//! The engine is `gotmpl` (a port of Go's text/template); this module adds the consul-template
//! functions Drover can serve from the client alone (`env`, `file`, `timestamp`, JSON and
//! string helpers, arithmetic) and Nomad's native services (`nomadService`, `nomadServices`,
//! read from the servers: see `services`). Functions that need Consul, Vault or Nomad's
//! variables fail the render naming the function: a template that renders anything but
//! Nomad's output is worse than a task that fails saying why.
//!
//! Nomad re-renders when a watched dependency changes; Drover's dependencies are files
//! (`source`, `file`) and the service catalog, so the task runner re-renders on a timer
//! (fetching the services the templates read first) and only what changed since the last
//! render is written, leaving a task's own edits of an unchanged output alone.
//!
//! Known difference from Go: `gotmpl` prints a float in an action with Rust's formatting, so
//! a float of 1e6 or more (or under 1e-4), as `parseJSON` gives for such numbers, prints as
//! `1000000` where Go prints `1e+06`; integers and smaller floats print as in Go.
//!
//! Nomad's other template settings: `uid`/`gid` own the written file (a negative or absent id
//! leaves it as is); `wait { min, max }` holds a re-render's write and change action until
//! no further change was seen for `min`, at most `max` after the first change (the first
//! render, before the task starts, is not held back; re-renders run every second, so a wait
//! ends on the next one); `change_mode = "script"` runs `change_script` inside the task
//! through the driver's exec (see the task runner). `vault_grace` is accepted and ignored, as
//! Nomad deprecated and ignores it.
//!
//! File sandbox: Nomad's client default (`template.disable_file_sandbox = false`) keeps
//! `source` and `file` inside the task directory; Drover always does (no setting turns it off).

pub mod services;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use drover_structs::{Node, Task};
use gotmpl::{MissingKey, Template, TemplateError as GoError, Value};
use serde_json::Value as Json;

/// Why a template could not be rendered or written; the text goes into Nomad's
/// "Template failed: ..." event.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("template {index}: {message}")]
    Spec { index: usize, message: String },
    #[error("template source path {path:?} escapes the task directory (the file sandbox is on)")]
    SourceEscapes { path: String },
    #[error("template destination {path:?} escapes the allocation directory")]
    DestEscapes { path: String },
    #[error("failed to read template source {path}: {source}")]
    ReadSource {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{name}: {source}")]
    Render { name: String, source: GoError },
    #[error("failed to write template {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Services(String),
    #[error("failed to parse env template {dest} line {line}: {message}")]
    Env {
        dest: String,
        line: usize,
        message: String,
    },
}

/// What to do when a template's output changes while the task runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeMode {
    Restart,
    Signal(String),
    Noop,
    /// Run a command inside the task (Nomad's `change_mode = "script"`).
    Script(ChangeScript),
}

/// A template's `change_script` block: run inside the task through the driver's exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeScript {
    pub command: String,
    pub args: Vec<String>,
    /// Nomad's default: 5 s.
    pub timeout: std::time::Duration,
    /// Kill the task (failing it) when the script fails; otherwise only an event says so.
    pub fail_on_error: bool,
}

impl ChangeScript {
    /// The command line given to the driver's exec.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.command.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }

    /// The arguments as Go's `%v` prints a `[]string` (Nomad's event texts).
    pub fn go_args(&self) -> String {
        format!("[{}]", self.args.join(" "))
    }
}

/// A template's `wait` block: consul-template's quiescence timer. A change is rendered once
/// no further change was seen for `min`, but no later than `max` after the first change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub min: std::time::Duration,
    pub max: std::time::Duration,
}

impl Wait {
    /// When the changes seen at `first` (the first not yet rendered) and `last` (the latest)
    /// are to be rendered: `None` for now, else the instant to wait for.
    pub fn due(
        &self,
        first: std::time::Instant,
        last: std::time::Instant,
        now: std::time::Instant,
    ) -> Option<std::time::Instant> {
        let at = (last + self.min).min(first + self.max);
        (now < at).then_some(at)
    }
}

/// One `template` block, in Nomad's API names (`EmbeddedTmpl`, `SourcePath`...).
#[derive(Debug, Clone)]
pub struct TemplateSpec {
    pub embedded: String,
    pub source: String,
    pub dest: String,
    pub change_mode: ChangeMode,
    pub perms: u32,
    pub left_delim: String,
    pub right_delim: String,
    pub envvars: bool,
    pub err_missing_key: bool,
    /// The most a change action waits, at random, after the output changed (Nomad's `splay`,
    /// so that many tasks rendering the same change do not all restart at once).
    pub splay: std::time::Duration,
    /// The owner given to the rendered file (Nomad's `uid`/`gid`; `None` leaves it as is).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Quiescence of re-renders (Nomad's `wait`); `None` renders each change at once.
    pub wait: Option<Wait>,
}

/// The task's templates, from the opaque `Templates` JSON of the job.
pub fn of_task(task: &Task) -> Result<Vec<TemplateSpec>, TemplateError> {
    let Some(Json::Array(list)) = task.templates.as_ref() else {
        return Ok(Vec::new());
    };
    list.iter()
        .enumerate()
        .map(|(i, t)| spec(i + 1, t))
        .collect()
}

fn spec(index: usize, t: &Json) -> Result<TemplateSpec, TemplateError> {
    let s = |key: &str| t.get(key).and_then(Json::as_str).unwrap_or("").to_string();
    let b = |key: &str| t.get(key).and_then(Json::as_bool).unwrap_or(false);
    let fail = |message: String| TemplateError::Spec { index, message };
    let change_mode = match s("ChangeMode").as_str() {
        "" | "restart" => ChangeMode::Restart,
        "noop" => ChangeMode::Noop,
        "signal" => match s("ChangeSignal") {
            sig if sig.is_empty() => {
                return Err(fail("change_mode \"signal\" needs a change_signal".into()));
            }
            sig => ChangeMode::Signal(sig),
        },
        "script" => ChangeMode::Script(change_script(t.get("ChangeScript")).map_err(fail)?),
        other => return Err(fail(format!("unknown change_mode {other:?}"))),
    };
    let perms = match s("Perms").as_str() {
        "" => 0o644,
        p => u32::from_str_radix(p, 8).map_err(|e| fail(format!("perms {p:?}: {e}")))?,
    };
    let delim = |key: &str, default: &str| {
        let d = s(key);
        if d.is_empty() { default.to_string() } else { d }
    };
    // Nomad sets the owner only for a uid/gid of 0 or more (its API's default is -1).
    let owner = |key: &str, name: &str| -> Result<Option<u32>, TemplateError> {
        match int_field(t, key).map_err(|m| fail(format!("{name}: {m}")))? {
            Some(n) if n >= 0 => u32::try_from(n)
                .map(Some)
                .map_err(|_| fail(format!("{name} {n} is out of range"))),
            _ => Ok(None),
        }
    };
    Ok(TemplateSpec {
        embedded: s("EmbeddedTmpl"),
        source: s("SourcePath"),
        dest: s("DestPath"),
        change_mode,
        perms,
        left_delim: delim("LeftDelim", "{{"),
        right_delim: delim("RightDelim", "}}"),
        envvars: b("Envvars"),
        err_missing_key: b("ErrMissingKey"),
        // Nomad's default when the job did not go through canonicalization: 5 s.
        splay: std::time::Duration::from_nanos(
            t.get("Splay")
                .and_then(Json::as_i64)
                .unwrap_or(5_000_000_000)
                .max(0) as u64,
        ),
        uid: owner("Uid", "uid")?,
        gid: owner("Gid", "gid")?,
        wait: wait(t.get("Wait")).map_err(fail)?,
    })
}

/// An optional integer field: absent or null is `None`, anything but an integer an error.
fn int_field(t: &Json, key: &str) -> Result<Option<i64>, String> {
    match t.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("expected an integer, got {v}")),
    }
}

/// An optional duration in nanoseconds, refused when negative.
fn nanos_field(t: &Json, key: &str, name: &str) -> Result<Option<std::time::Duration>, String> {
    match int_field(t, key).map_err(|m| format!("{name}: {m}"))? {
        None => Ok(None),
        Some(n) if n < 0 => Err(format!("{name} must not be negative")),
        Some(n) => Ok(Some(std::time::Duration::from_nanos(n as u64))),
    }
}

/// The `change_script` block of a `change_mode = "script"` template (Nomad's API defaults:
/// no arguments, a 5 s timeout, `fail_on_error = false`).
fn change_script(cs: Option<&Json>) -> Result<ChangeScript, String> {
    let cs = match cs {
        Some(cs @ Json::Object(_)) => cs,
        _ => return Err("change_mode \"script\" needs a change_script block".into()),
    };
    let command = cs.get("Command").and_then(Json::as_str).unwrap_or("");
    if command.is_empty() {
        return Err("change_script needs a command".into());
    }
    let args = match cs.get("Args") {
        None | Some(Json::Null) => Vec::new(),
        Some(Json::Array(list)) => list
            .iter()
            .map(|a| {
                a.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("change_script args: expected strings, got {a}"))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("change_script args: expected a list, got {other}")),
    };
    let timeout = nanos_field(cs, "Timeout", "change_script timeout")?
        .unwrap_or(std::time::Duration::from_secs(5));
    let fail_on_error = match cs.get("FailOnError") {
        None | Some(Json::Null) => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| format!("change_script fail_on_error: expected a bool, got {v}"))?,
    };
    Ok(ChangeScript {
        command: command.to_string(),
        args,
        timeout,
        fail_on_error,
    })
}

/// The `wait` block: `min` defaults to 0 and `max` to 4 × `min` (consul-template's); Nomad
/// refuses a `min` greater than `max`.
fn wait(w: Option<&Json>) -> Result<Option<Wait>, String> {
    let w = match w {
        None | Some(Json::Null) => return Ok(None),
        Some(w @ Json::Object(_)) => w,
        Some(other) => return Err(format!("wait: expected an object, got {other}")),
    };
    let min = nanos_field(w, "Min", "wait min")?;
    let max = nanos_field(w, "Max", "wait max")?;
    let (min, max) = match (min, max) {
        (None, None) => return Ok(None),
        (min, max) => {
            let min = min.unwrap_or_default();
            (min, max.unwrap_or(min.saturating_mul(4)))
        }
    };
    if min > max {
        return Err(format!("wait min {min:?} is greater than wait max {max:?}"));
    }
    Ok(Some(Wait { min, max }))
}

/// What a render sees of the task: its directories and environment, and the node (for
/// `env "attr.kernel.name"`, `env "node.unique.id"`, `env "meta.x"`, as Nomad serves them).
#[derive(Clone)]
pub struct RenderEnv {
    pub task_dir: PathBuf,
    pub alloc_dir: PathBuf,
    pub env: BTreeMap<String, String>,
    pub node: Arc<Node>,
    pub region: String,
    /// What the templates read of the service catalog (shared by the task's renders).
    pub services: Arc<services::ServiceData>,
}

/// For a driver that isolates the task's filesystem: the directory variables templates see are
/// the paths inside the task (Nomad's task dir hook gives its env builder `/alloc`, `/local`,
/// `/secrets` then), so a rendered config names what the task can open.
pub fn use_in_task_paths(env: &mut BTreeMap<String, String>) {
    for (k, v) in [
        ("NOMAD_ALLOC_DIR", "/alloc"),
        ("NOMAD_TASK_DIR", "/local"),
        ("NOMAD_SECRETS_DIR", "/secrets"),
        ("TMPDIR", "/tmp"),
    ] {
        if env.contains_key(k) {
            env.insert(k.to_string(), v.to_string());
        }
    }
}

impl RenderEnv {
    fn lookup(&self, name: &str) -> String {
        crate::taskenv::lookup_in(name, &self.env, &self.node, &self.region).unwrap_or_default()
    }
}

/// Renders one template to text (nothing written).
pub fn render(spec: &TemplateSpec, env: &RenderEnv) -> Result<String, TemplateError> {
    let interpolate = |s: &str| crate::interpolate::interpolate(s, &|n| Some(env.lookup(n)));
    let (text, name) = if spec.source.is_empty() {
        (spec.embedded.clone(), spec.dest.clone())
    } else {
        let source = interpolate(&spec.source);
        let path =
            sandboxed(&env.task_dir, &source).ok_or_else(|| TemplateError::SourceEscapes {
                path: source.clone(),
            })?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| TemplateError::ReadSource { path, source: e })?;
        (text, source)
    };
    let render_err = |source| TemplateError::Render {
        name: name.clone(),
        source,
    };
    // consul-template executes with nil data and missingkey=zero unless error_on_missing_key
    // (for its maps of interface values, zero prints "<no value>" as the default does).
    let missing = if spec.err_missing_key {
        MissingKey::Error
    } else {
        MissingKey::ZeroValue
    };
    let tmpl = functions(Template::new(&name), env)
        .delims(&spec.left_delim, &spec.right_delim)
        .missing_key(missing)
        .parse(&text)
        .map_err(render_err)?;
    let text = tmpl.execute_to_string(&Value::Nil).map_err(render_err)?;
    if env.services.has_missing() {
        // Rendered without some service answers: never written; the runner fetches what it
        // asked for and renders again.
        return Err(TemplateError::Services(
            "the service catalog has not been read yet".into(),
        ));
    }
    Ok(text)
}

/// `path` (relative to the task directory, or absolute) when it stays inside `root` after
/// resolving `..` and symlinks, as far as it exists.
fn sandboxed(root: &Path, path: &str) -> Option<PathBuf> {
    let joined = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        root.join(path)
    };
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let resolved = joined
        .canonicalize()
        .unwrap_or_else(|_| lexical_normal(&joined));
    resolved.starts_with(&root).then_some(resolved)
}

/// `..` and `.` resolved without touching the filesystem (for paths that do not exist yet).
fn lexical_normal(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The task's templates and what each rendered last.
pub struct Templates {
    specs: Vec<TemplateSpec>,
    last: Vec<Option<String>>,
    /// For templates with a `wait`: the changed output not yet written, and when changes
    /// were seen.
    pending: Vec<Option<Pending>>,
}

/// A changed output waiting for its template's quiescence.
struct Pending {
    text: String,
    first: std::time::Instant,
    last: std::time::Instant,
}

/// What a re-render changed: whether any changed template asks for a restart, and the signals
/// the others ask for (each once, in template order).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub restart: bool,
    pub signals: Vec<String>,
    /// The change scripts to run, in template order (Nomad runs one per changed template).
    pub scripts: Vec<ChangeScript>,
    /// The largest splay of the templates that asked for these.
    pub splay: std::time::Duration,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        !self.restart && self.signals.is_empty() && self.scripts.is_empty()
    }

    /// Folds in changes found while these waited for their splay.
    pub fn merge(&mut self, later: Changes) {
        self.restart |= later.restart;
        for s in later.signals {
            if !self.signals.contains(&s) {
                self.signals.push(s);
            }
        }
        self.scripts.extend(later.scripts);
        if self.restart {
            self.signals.clear();
            self.scripts.clear();
        }
        self.splay = self.splay.max(later.splay);
    }

    /// A random wait in `[0, splay)`, as Nomad draws one for each set of changes.
    pub fn splay_wait(&self) -> std::time::Duration {
        let ns = self.splay.as_nanos() as u64;
        if ns == 0 {
            return std::time::Duration::ZERO;
        }
        // uuid's v4 bytes are the random source the client already has.
        let r = uuid::Uuid::new_v4().as_u128() as u64;
        std::time::Duration::from_nanos(r % ns)
    }
}

impl Templates {
    pub fn new(specs: Vec<TemplateSpec>) -> Self {
        let last = vec![None; specs.len()];
        let pending = specs.iter().map(|_| None).collect();
        Templates {
            specs,
            last,
            pending,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Whether every template was rendered once (Nomad renders before the first start only;
    /// later changes come from the re-renders).
    pub fn rendered(&self) -> bool {
        self.last.iter().all(Option::is_some)
    }

    /// Renders and writes every template, in order, so a template may read what an earlier
    /// one wrote. Answers the variables of `env = true` templates.
    pub fn render_all(
        &mut self,
        env: &RenderEnv,
    ) -> Result<BTreeMap<String, String>, TemplateError> {
        for i in 0..self.specs.len() {
            let text = render(&self.specs[i], env)?;
            if self.specs[i].envvars {
                parse_env(&self.specs[i].dest, &text)?;
            }
            write_output(&self.specs[i], env, &text)?;
            self.last[i] = Some(text);
            self.pending[i] = None;
        }
        self.env_vars()
    }

    /// The variables of the `env = true` templates as last rendered, later templates winning.
    pub fn env_vars(&self) -> Result<BTreeMap<String, String>, TemplateError> {
        let mut vars = BTreeMap::new();
        for (spec, text) in self.specs.iter().zip(&self.last) {
            if let (true, Some(text)) = (spec.envvars, text) {
                vars.extend(parse_env(&spec.dest, text)?);
            }
        }
        Ok(vars)
    }

    /// For a task taken back after an agent restart: renders every template to learn what it
    /// gives now, writing those whose file differs, without change actions (the task may have
    /// read the older file or not: nothing says which). Re-renders go on from there.
    pub fn recover(&mut self, env: &RenderEnv) -> Result<(), TemplateError> {
        for i in 0..self.specs.len() {
            let text = render(&self.specs[i], env)?;
            if self.specs[i].envvars {
                parse_env(&self.specs[i].dest, &text)?;
            }
            let dest =
                crate::interpolate::interpolate(&self.specs[i].dest, &|n| Some(env.lookup(n)));
            let on_disk = std::fs::read_to_string(env.task_dir.join(dest)).ok();
            if on_disk.as_deref() != Some(text.as_str()) {
                write_output(&self.specs[i], env, &text)?;
            }
            self.last[i] = Some(text);
            self.pending[i] = None;
        }
        Ok(())
    }

    /// Renders every template again and writes those whose output differs from their last
    /// render; answers what their change modes ask for.
    pub fn rerender(&mut self, env: &RenderEnv) -> Result<Changes, TemplateError> {
        self.rerender_at(env, std::time::Instant::now())
    }

    /// `rerender` at `now`: a template with a `wait` writes a changed output only once its
    /// quiescence allows (see [`Wait::due`]); until then the change is held back.
    pub fn rerender_at(
        &mut self,
        env: &RenderEnv,
        now: std::time::Instant,
    ) -> Result<Changes, TemplateError> {
        let mut changes = Changes::default();
        for i in 0..self.specs.len() {
            let mut text = render(&self.specs[i], env)?;
            if let Some(wait) = self.specs[i].wait {
                match self.pending[i].as_mut() {
                    Some(p) if p.text != text => {
                        p.text = text;
                        p.last = now;
                    }
                    Some(_) => {}
                    None if self.last[i].as_deref() == Some(text.as_str()) => continue,
                    None => {
                        self.pending[i] = Some(Pending {
                            text,
                            first: now,
                            last: now,
                        })
                    }
                }
                match self.pending[i].take() {
                    Some(p) if wait.due(p.first, p.last, now).is_some() => {
                        self.pending[i] = Some(p);
                        continue;
                    }
                    Some(p) => text = p.text,
                    None => continue,
                }
            }
            if self.last[i].as_deref() == Some(text.as_str()) {
                continue;
            }
            if self.specs[i].envvars {
                parse_env(&self.specs[i].dest, &text)?;
            }
            write_output(&self.specs[i], env, &text)?;
            self.last[i] = Some(text);
            let splay = self.specs[i].splay;
            match &self.specs[i].change_mode {
                ChangeMode::Restart => changes.restart = true,
                ChangeMode::Signal(s) if !changes.signals.contains(s) => {
                    changes.signals.push(s.clone())
                }
                ChangeMode::Signal(_) => {}
                ChangeMode::Script(script) => changes.scripts.push(script.clone()),
                ChangeMode::Noop => continue,
            }
            changes.splay = changes.splay.max(splay);
        }
        if changes.restart {
            // A restart delivers every change; signals and scripts for a task being restarted
            // are moot (Nomad's template manager does either).
            changes.signals.clear();
            changes.scripts.clear();
        }
        Ok(changes)
    }
}

/// Writes `text` to the template's destination (relative to the task directory, kept inside
/// the allocation directory) with its permissions, by a rename so that the task never reads
/// a half-written file.
fn write_output(spec: &TemplateSpec, env: &RenderEnv, text: &str) -> Result<(), TemplateError> {
    let dest = crate::interpolate::interpolate(&spec.dest, &|n| Some(env.lookup(n)));
    let path = lexical_normal(&env.task_dir.join(&dest));
    if !path.starts_with(lexical_normal(&env.alloc_dir)) {
        return Err(TemplateError::DestEscapes { path: dest });
    }
    let write_err = |source| TemplateError::Write {
        path: path.clone(),
        source,
    };
    // The directories on the way are resolved on disk, through the symlinks a task may have
    // planted (`local/x -> /etc`), and never leave the allocation directory: the agent
    // writes as root.
    let alloc_dir = env.alloc_dir.canonicalize().map_err(write_err)?;
    let task_dir = env.task_dir.canonicalize().map_err(write_err)?;
    let rel = Path::new(&dest);
    let escapes = || TemplateError::DestEscapes { path: dest.clone() };
    let Some(name) = rel.file_name().and_then(|n| n.to_str()) else {
        return Err(escapes());
    };
    let parent = rel.parent().unwrap_or(Path::new(""));
    let dir = crate::artifact::archive::resolve(
        &alloc_dir,
        &task_dir,
        parent,
        crate::artifact::archive::Create::Dirs,
    )
    .map_err(|_| escapes())?;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.drover-tmp"));
    let written = (|| {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        // Whatever sits at the temporary name goes, and the new file is made afresh: a
        // symlink left there is never followed.
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(spec.perms)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        // The umask narrowed the mode given at creation.
        f.set_permissions(std::fs::Permissions::from_mode(spec.perms))?;
        if spec.uid.is_some() || spec.gid.is_some() {
            // Before the rename: the file appears with its owner.
            std::os::unix::fs::fchown(&f, spec.uid, spec.gid)?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(write_err)
}

/// The variables of an `env = true` template: `KEY=VALUE` lines (go-envparse's rules: blank
/// lines and `#` comments skipped, an optional `export `, values single- or double-quoted,
/// double quotes with backslash escapes, an unquoted value ending at ` #`).
pub fn parse_env(dest: &str, text: &str) -> Result<Vec<(String, String)>, TemplateError> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let fail = |message: &str| TemplateError::Env {
            dest: dest.to_string(),
            line: n + 1,
            message: message.to_string(),
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let (key, value) = line.split_once('=').ok_or_else(|| fail("missing ="))?;
        let key = key.trim();
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
        {
            return Err(fail("invalid variable name"));
        }
        let value = value.trim_start();
        let value = if let Some(rest) = value.strip_prefix('\'') {
            let end = rest.find('\'').ok_or_else(|| fail("unterminated quote"))?;
            rest[..end].to_string()
        } else if let Some(rest) = value.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = rest.chars();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => {
                        closed = true;
                        break;
                    }
                    '\\' => match chars.next() {
                        Some('n') => v.push('\n'),
                        Some('t') => v.push('\t'),
                        Some('r') => v.push('\r'),
                        Some(other) => v.push(other),
                        None => return Err(fail("unterminated quote")),
                    },
                    c => v.push(c),
                }
            }
            if !closed {
                return Err(fail("unterminated quote"));
            }
            v
        } else {
            let end = value.find(" #").unwrap_or(value.len());
            value[..end].trim_end().to_string()
        };
        out.push((key.to_string(), value));
    }
    Ok(out)
}

/// The consul-template functions that need a service Drover does not serve (Consul, Vault,
/// Nomad's variables): rendering one fails naming it.
pub const UNSUPPORTED_FUNCTIONS: &[&str] = &[
    "caLeaf",
    "caRoots",
    "connect",
    "datacenters",
    "exportedServices",
    "key",
    "keyExists",
    "keyOrDefault",
    "ls",
    "node",
    "nodes",
    "nomadVar",
    "nomadVarExists",
    "nomadVarList",
    "nomadVarListSafe",
    "partitions",
    "peerings",
    "pkiCert",
    "safeLs",
    "safeTree",
    "secret",
    "secrets",
    "service",
    "services",
    "tree",
];

/// Nomad's default `template.function_denylist`: they run commands and write files on the
/// client's behalf.
pub const DENIED_FUNCTIONS: &[&str] = &["plugin", "writeToFile"];

fn exec_err(message: String) -> GoError {
    GoError::Exec(message)
}

fn arg_str<'a>(f: &str, args: &'a [Value], i: usize) -> gotmpl::Result<&'a str> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(exec_err(format!(
            "{f}: argument {} must be a string, not {}",
            i + 1,
            other.type_name()
        ))),
        None => Err(exec_err(format!("{f}: wrong number of arguments"))),
    }
}

fn arity(f: &str, args: &[Value], n: usize) -> gotmpl::Result<()> {
    if args.len() == n {
        Ok(())
    } else {
        Err(exec_err(format!(
            "{f}: wants {n} argument(s), got {}",
            args.len()
        )))
    }
}

/// `t` with consul-template's functions this client serves, and the unsupported ones refusing.
fn functions(mut t: Template, env: &RenderEnv) -> Template {
    for name in UNSUPPORTED_FUNCTIONS {
        t = t.func(name, move |_| {
            Err(exec_err(format!(
                "function {name:?} is not supported by Drover (it needs Consul, Vault or Nomad variables)"
            )))
        });
    }
    t = services::functions(t, &env.services);
    for name in DENIED_FUNCTIONS {
        t = t.func(name, move |_| {
            Err(exec_err(format!(
                "function {name:?} is disabled (the client's template function denylist)"
            )))
        });
    }
    let e = env.clone();
    t = t.func("env", move |args| {
        arity("env", args, 1)?;
        Ok(Value::from(e.lookup(arg_str("env", args, 0)?)))
    });
    let e = env.clone();
    t = t.func("mustEnv", move |args| {
        arity("mustEnv", args, 1)?;
        let name = arg_str("mustEnv", args, 0)?;
        let v = e.lookup(name);
        if v.is_empty() {
            return Err(exec_err(format!(
                "required environment variable {name} is empty"
            )));
        }
        Ok(Value::from(v))
    });
    let e = env.clone();
    t = t.func("envOrDefault", move |args| {
        arity("envOrDefault", args, 2)?;
        let name = arg_str("envOrDefault", args, 0)?;
        let default = arg_str("envOrDefault", args, 1)?;
        let found = crate::taskenv::lookup_in(name, &e.env, &e.node, &e.region);
        Ok(Value::from(found.unwrap_or_else(|| default.to_string())))
    });
    let task_dir = env.task_dir.clone();
    t = t.func("file", move |args| {
        arity("file", args, 1)?;
        let path = arg_str("file", args, 0)?;
        if path.is_empty() {
            return Ok(Value::from(""));
        }
        let full = sandboxed(&task_dir, path)
            .ok_or_else(|| exec_err(format!("file: {path:?} is outside of the task directory")))?;
        std::fs::read_to_string(&full)
            .map(Value::from)
            .map_err(|e| exec_err(format!("file: {path}: {e}")))
    });
    t.func("timestamp", |args| {
        let layout = match args.len() {
            0 => "2006-01-02T15:04:05Z07:00",
            1 => arg_str("timestamp", args, 0)?,
            _ => return Err(exec_err("timestamp: wants at most 1 argument".into())),
        };
        Ok(Value::from(timestamp(layout, now_utc())))
    })
    .func("toJSON", |args| {
        arity("toJSON", args, 1)?;
        let mut out = String::new();
        go_json(&args[0], &mut out)?;
        Ok(Value::from(out))
    })
    .func("parseJSON", |args| {
        arity("parseJSON", args, 1)?;
        let s = arg_str("parseJSON", args, 0)?;
        if s.is_empty() {
            return Ok(Value::from(BTreeMap::<String, Value>::new()));
        }
        let j: Json = serde_json::from_str(s).map_err(|e| exec_err(format!("parseJSON: {e}")))?;
        Ok(from_json(&j))
    })
    .func("toUpper", |args| {
        arity("toUpper", args, 1)?;
        Ok(Value::from(arg_str("toUpper", args, 0)?.to_uppercase()))
    })
    .func("toLower", |args| {
        arity("toLower", args, 1)?;
        Ok(Value::from(arg_str("toLower", args, 0)?.to_lowercase()))
    })
    .func("trimSpace", |args| {
        arity("trimSpace", args, 1)?;
        Ok(Value::from(arg_str("trimSpace", args, 0)?.trim()))
    })
    .func("split", |args| {
        // consul-template: split(sep, s), s trimmed first, nothing for an empty s.
        arity("split", args, 2)?;
        let (sep, s) = (
            arg_str("split", args, 0)?,
            arg_str("split", args, 1)?.trim(),
        );
        let parts: Vec<Value> = if s.is_empty() {
            Vec::new()
        } else if sep.is_empty() {
            // Go's strings.Split with an empty separator: one element per character.
            s.chars().map(|c| Value::from(c.to_string())).collect()
        } else {
            s.split(sep).map(Value::from).collect()
        };
        Ok(Value::from(parts))
    })
    .func("join", |args| {
        // consul-template: join(sep, list), the list usually piped in.
        arity("join", args, 2)?;
        let sep = arg_str("join", args, 0)?;
        let Value::List(items) = &args[1] else {
            return Err(exec_err(format!(
                "join: argument 2 must be a list, not {}",
                args[1].type_name()
            )));
        };
        // Go wants a []string: a list with anything but strings does not convert.
        let mut parts = Vec::with_capacity(items.len());
        for item in items.iter() {
            match item {
                Value::String(s) => parts.push(&**s),
                other => {
                    return Err(exec_err(format!(
                        "join: wrong type for value; expected []string; got a list holding a {}",
                        other.type_name()
                    )));
                }
            }
        }
        Ok(Value::from(parts.join(sep)))
    })
    .func("replaceAll", |args| {
        // consul-template: replaceAll(from, to, s).
        arity("replaceAll", args, 3)?;
        let (from, to, s) = (
            arg_str("replaceAll", args, 0)?,
            arg_str("replaceAll", args, 1)?,
            arg_str("replaceAll", args, 2)?,
        );
        Ok(Value::from(go_replace_all(s, from, to)))
    })
    .func("contains", |args| {
        // consul-template: contains(needle, haystack) is in(haystack, needle).
        arity("contains", args, 2)?;
        Ok(Value::Bool(is_in(&args[1], &args[0])))
    })
    .func("in", |args| {
        arity("in", args, 2)?;
        Ok(Value::Bool(is_in(&args[0], &args[1])))
    })
    .func("add", |args| arith("add", args, Op::Add))
    .func("subtract", |args| arith("subtract", args, Op::Sub))
    .func("multiply", |args| arith("multiply", args, Op::Mul))
    .func("divide", |args| arith("divide", args, Op::Div))
    .func("trim", |args| {
        arity("trim", args, 2)?;
        let cutset = arg_str("trim", args, 0)?;
        let s = arg_str("trim", args, 1)?;
        Ok(Value::from(s.trim_matches(|c| cutset.contains(c))))
    })
    .func("trimPrefix", |args| {
        arity("trimPrefix", args, 2)?;
        let (prefix, s) = (
            arg_str("trimPrefix", args, 0)?,
            arg_str("trimPrefix", args, 1)?,
        );
        Ok(Value::from(s.strip_prefix(prefix).unwrap_or(s)))
    })
    .func("trimSuffix", |args| {
        arity("trimSuffix", args, 2)?;
        let (suffix, s) = (
            arg_str("trimSuffix", args, 0)?,
            arg_str("trimSuffix", args, 1)?,
        );
        Ok(Value::from(s.strip_suffix(suffix).unwrap_or(s)))
    })
    .func("indent", |args| {
        arity("indent", args, 2)?;
        let spaces = match args[0] {
            Value::Int(n) => n,
            Value::Uint(n) => i64::try_from(n).unwrap_or(i64::MAX),
            ref other => {
                return Err(exec_err(format!(
                    "indent: wants an int, not {}",
                    other.type_name()
                )));
            }
        };
        if spaces < 0 {
            return Err(exec_err("indent value must be a positive integer".into()));
        }
        let prefix = " ".repeat(spaces as usize);
        let mut out = String::new();
        // Every line but the empty ones gets the prefix, as consul-template's indent.
        for (i, line) in arg_str("indent", args, 1)?.split('\n').enumerate() {
            if i > 0 {
                out.push('\n');
            }
            if !line.is_empty() {
                out.push_str(&prefix);
            }
            out.push_str(line);
        }
        Ok(Value::from(out))
    })
    .func("regexMatch", |args| {
        arity("regexMatch", args, 2)?;
        let re = regex_of("regexMatch", arg_str("regexMatch", args, 0)?)?;
        Ok(Value::Bool(re.is_match(arg_str("regexMatch", args, 1)?)))
    })
    .func("regexReplaceAll", |args| {
        // regexReplaceAll(re, replacement, s), `$1` / `${name}` expanded as Go's.
        arity("regexReplaceAll", args, 3)?;
        let re = regex_of("regexReplaceAll", arg_str("regexReplaceAll", args, 0)?)?;
        let with = arg_str("regexReplaceAll", args, 1)?;
        let s = arg_str("regexReplaceAll", args, 2)?;
        Ok(Value::from(re.replace_all(s, with).into_owned()))
    })
    .func("sha256Hex", |args| {
        use sha2::Digest as _;
        arity("sha256Hex", args, 1)?;
        let digest = sha2::Sha256::digest(arg_str("sha256Hex", args, 0)?.as_bytes());
        Ok(Value::from(hex::encode(digest)))
    })
    .func("md5sum", |args| {
        use md5::Digest as _;
        arity("md5sum", args, 1)?;
        let digest = md5::Md5::digest(arg_str("md5sum", args, 0)?.as_bytes());
        Ok(Value::from(hex::encode(digest)))
    })
    .func("base64Encode", |args| {
        base64_encode("base64Encode", args, false)
    })
    .func("base64URLEncode", |args| {
        base64_encode("base64URLEncode", args, true)
    })
    .func("base64Decode", |args| {
        base64_decode("base64Decode", args, false)
    })
    .func("base64URLDecode", |args| {
        base64_decode("base64URLDecode", args, true)
    })
    .func("parseBool", |args| {
        arity("parseBool", args, 1)?;
        let s = arg_str("parseBool", args, 0)?;
        Ok(Value::Bool(match s {
            "" => false,
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => return Err(strconv_err("parseBool", "ParseBool", s)),
        }))
    })
    .func("parseInt", |args| {
        arity("parseInt", args, 1)?;
        let s = arg_str("parseInt", args, 0)?;
        if s.is_empty() {
            return Ok(Value::Int(0));
        }
        s.parse::<i64>()
            .map(Value::Int)
            .map_err(|_| strconv_err("parseInt", "ParseInt", s))
    })
    .func("parseUint", |args| {
        arity("parseUint", args, 1)?;
        let s = arg_str("parseUint", args, 0)?;
        if s.is_empty() {
            return Ok(Value::Uint(0));
        }
        // Go's ParseUint takes no sign.
        if s.starts_with('+') {
            return Err(strconv_err("parseUint", "ParseUint", s));
        }
        s.parse::<u64>()
            .map(Value::Uint)
            .map_err(|_| strconv_err("parseUint", "ParseUint", s))
    })
    .func("parseFloat", |args| {
        arity("parseFloat", args, 1)?;
        let s = arg_str("parseFloat", args, 0)?;
        if s.is_empty() {
            return Ok(Value::Float(0.0));
        }
        s.parse::<f64>()
            .map(Value::Float)
            .map_err(|_| strconv_err("parseFloat", "ParseFloat", s))
    })
}

fn regex_of(f: &str, re: &str) -> gotmpl::Result<regex::Regex> {
    regex::Regex::new(re).map_err(|e| exec_err(format!("{f}: {e}")))
}

fn base64_encode(f: &str, args: &[Value], url: bool) -> gotmpl::Result<Value> {
    use base64::Engine as _;
    arity(f, args, 1)?;
    let s = arg_str(f, args, 0)?;
    let engine = if url {
        base64::engine::general_purpose::URL_SAFE
    } else {
        base64::engine::general_purpose::STANDARD
    };
    Ok(Value::from(engine.encode(s)))
}

/// Go's padded decoders, which skip `\r` and `\n`; the bytes become text (invalid UTF-8
/// replaced, where Go would keep the raw bytes).
fn base64_decode(f: &str, args: &[Value], url: bool) -> gotmpl::Result<Value> {
    use base64::Engine as _;
    arity(f, args, 1)?;
    let s: String = arg_str(f, args, 0)?
        .chars()
        .filter(|c| !matches!(c, '\r' | '\n'))
        .collect();
    let engine = if url {
        base64::engine::general_purpose::URL_SAFE
    } else {
        base64::engine::general_purpose::STANDARD
    };
    let bytes = engine
        .decode(s)
        .map_err(|e| exec_err(format!("{f}: {e}")))?;
    Ok(Value::from(String::from_utf8_lossy(&bytes).into_owned()))
}

/// consul-template's wrapped strconv error: `parseInt: strconv.ParseInt: parsing "x": invalid
/// syntax` (out-of-range numbers say invalid syntax here too).
fn strconv_err(f: &str, go: &str, s: &str) -> GoError {
    exec_err(format!("{f}: strconv.{go}: parsing {s:?}: invalid syntax"))
}

/// consul-template's `in(l, v)`: a list holds `v` when an element of the same kind (integer,
/// float, string) equals it; a string holds a string it contains; anything else holds nothing.
fn is_in(l: &Value, v: &Value) -> bool {
    match l {
        Value::List(items) => items.iter().any(|e| match (e, v) {
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            _ => false,
        }),
        Value::String(hay) => matches!(v, Value::String(needle) if hay.contains(&**needle)),
        _ => false,
    }
}

/// Go's strings.ReplaceAll: an empty `from` inserts `to` around every character.
fn go_replace_all(s: &str, from: &str, to: &str) -> String {
    if !from.is_empty() {
        return s.replace(from, to);
    }
    let mut out = String::from(to);
    for c in s.chars() {
        out.push(c);
        out.push_str(to);
    }
    out
}

#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Uint(u64),
    Float(f64),
}

impl Num {
    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Uint(u) => u as f64,
            Num::Float(f) => f,
        }
    }
}

fn num(v: &Value) -> Option<Num> {
    match v {
        Value::Int(i) => Some(Num::Int(*i)),
        Value::Uint(u) => Some(Num::Uint(*u)),
        Value::Float(f) => Some(Num::Float(*f)),
        _ => None,
    }
}

#[derive(Clone, Copy)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

/// consul-template's arithmetic: `add b a` is `a + b`, `subtract b a` is `a - b`, `divide b a`
/// is `a / b` (so `{{ 10 | divide 2 }}` is 5). As its reflect switch: a float on either side
/// gives a float; two unsigned give an unsigned; any other pair of integers an int64; integer
/// results wrap as Go's do, and an integer division by zero fails (Go's runtime panic).
fn arith(name: &str, args: &[Value], op: Op) -> gotmpl::Result<Value> {
    arity(name, args, 2)?;
    let bad = |v: &Value| exec_err(format!("{name}: unknown type for {v} ({})", v.type_name()));
    let a = num(&args[1]).ok_or_else(|| bad(&args[1]))?;
    let b = num(&args[0]).ok_or_else(|| bad(&args[0]))?;
    let by_zero = || exec_err(format!("{name}: runtime error: integer divide by zero"));
    Ok(match (a, b) {
        (Num::Float(_), _) | (_, Num::Float(_)) => {
            let (a, b) = (a.as_f64(), b.as_f64());
            Value::Float(match op {
                Op::Add => a + b,
                Op::Sub => a - b,
                Op::Mul => a * b,
                Op::Div => a / b,
            })
        }
        (Num::Uint(a), Num::Uint(b)) => Value::Uint(match op {
            Op::Add => a.wrapping_add(b),
            Op::Sub => a.wrapping_sub(b),
            Op::Mul => a.wrapping_mul(b),
            Op::Div if b == 0 => return Err(by_zero()),
            Op::Div => a / b,
        }),
        (a, b) => {
            let int = |n: Num| match n {
                Num::Int(i) => i,
                Num::Uint(u) => u as i64,
                Num::Float(f) => f as i64,
            };
            let (a, b) = (int(a), int(b));
            Value::Int(match op {
                Op::Add => a.wrapping_add(b),
                Op::Sub => a.wrapping_sub(b),
                Op::Mul => a.wrapping_mul(b),
                Op::Div if b == 0 => return Err(by_zero()),
                Op::Div => a.wrapping_div(b),
            })
        }
    })
}

/// JSON as Go's `json.Unmarshal` into `interface{}` gives it: every number a float64.
fn from_json(j: &Json) -> Value {
    match j {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => Value::Float(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(a) => Value::from(a.iter().map(from_json).collect::<Vec<_>>()),
        Json::Object(o) => Value::from(
            o.iter()
                .map(|(k, v)| (k.clone(), from_json(v)))
                .collect::<BTreeMap<String, Value>>(),
        ),
    }
}

/// Go's `json.Marshal`: sorted map keys, `<`, `>`, `&`, U+2028 and U+2029 escaped, floats in
/// the shortest form that reads back (exponent form below 1e-6 and from 1e21, as `1e-7` and
/// `1e+21`).
fn go_json(v: &Value, out: &mut String) -> gotmpl::Result<()> {
    use std::fmt::Write as _;
    match v {
        Value::Nil => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Uint(u) => {
            let _ = write!(out, "{u}");
        }
        Value::Float(f) => {
            if !f.is_finite() {
                return Err(exec_err(format!("toJSON: unsupported value: {f}")));
            }
            out.push_str(&go_json_float(*f));
        }
        Value::String(s) => go_json_string(s, out),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(item, out)?;
            }
            out.push(']');
        }
        Value::Map(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json_string(k, out);
                out.push(':');
                go_json(item, out)?;
            }
            out.push('}');
        }
        Value::Function(_) => {
            return Err(exec_err("toJSON: unsupported type: func".into()));
        }
    }
    Ok(())
}

fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Go: strconv's 'e' form ("1e+21"), with encoding/json shortening "e-07" to "e-7".
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        match exp.strip_prefix('-') {
            Some(digits) => format!("{mantissa}e-{digits}"),
            None => format!("{mantissa}e+{exp:0>2}"),
        }
    } else {
        format!("{f}")
    }
}

fn go_json_string(s: &str, out: &mut String) {
    use std::fmt::Write as _;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A UTC instant broken down for formatting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
    /// 0 = Sunday.
    pub weekday: u32,
    pub unix: i64,
}

fn now_utc() -> Utc {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    utc_of(d.as_secs() as i64, d.subsec_nanos())
}

/// Unix seconds to a civil UTC date (Howard Hinnant's days-from-civil inverse).
pub fn utc_of(unix: i64, nanos: u32) -> Utc {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400) as u32;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    Utc {
        year,
        month,
        day,
        hour: secs / 3600,
        minute: secs / 60 % 60,
        second: secs % 60,
        nanos,
        weekday: (days + 4).rem_euclid(7) as u32,
        unix,
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// consul-template's `timestamp`: Go's `time.Format` layout in UTC, or `"unix"` for Unix
/// seconds. Go's layout elements (`2006`, `01`, `Jan`, `15`, `.000`, `Z07:00`...) are replaced;
/// other text is copied.
pub fn timestamp(layout: &str, t: Utc) -> String {
    use std::fmt::Write as _;
    if layout == "unix" {
        return t.unix.to_string();
    }
    let hour12 = if t.hour.is_multiple_of(12) {
        12
    } else {
        t.hour % 12
    };
    let month = MONTHS[(t.month as usize).saturating_sub(1) % 12];
    let day = DAYS[t.weekday as usize % 7];
    let mut out = String::new();
    let mut rest = layout;
    // Longest elements first, as Go's nextStdChunk tries them.
    while !rest.is_empty() {
        let elements: [(&str, String); 29] = [
            ("January", month.to_string()),
            ("Jan", month[..3].to_string()),
            ("Monday", day.to_string()),
            ("Mon", day[..3].to_string()),
            ("2006", format!("{:04}", t.year)),
            ("Z07:00", "Z".into()),
            ("Z0700", "Z".into()),
            ("Z07", "Z".into()),
            ("-07:00", "+00:00".into()),
            ("-0700", "+0000".into()),
            ("-07", "+00".into()),
            ("MST", "UTC".into()),
            (".000000000", format!(".{:09}", t.nanos)),
            (".000000", format!(".{:06}", t.nanos / 1000)),
            (".000", format!(".{:03}", t.nanos / 1_000_000)),
            (".999999999", frac_trimmed(t.nanos, 9)),
            (".999999", frac_trimmed(t.nanos / 1000, 6)),
            (".999", frac_trimmed(t.nanos / 1_000_000, 3)),
            ("06", format!("{:02}", t.year.rem_euclid(100))),
            ("01", format!("{:02}", t.month)),
            ("02", format!("{:02}", t.day)),
            ("_2", format!("{:>2}", t.day)),
            ("15", format!("{:02}", t.hour)),
            ("03", format!("{hour12:02}")),
            ("04", format!("{:02}", t.minute)),
            ("05", format!("{:02}", t.second)),
            ("PM", if t.hour >= 12 { "PM" } else { "AM" }.into()),
            ("pm", if t.hour >= 12 { "pm" } else { "am" }.into()),
            ("1", t.month.to_string()),
        ];
        let single: [(&str, String); 4] = [
            ("2", t.day.to_string()),
            ("3", hour12.to_string()),
            ("4", t.minute.to_string()),
            ("5", t.second.to_string()),
        ];
        if let Some((el, v)) = elements
            .iter()
            .chain(single.iter())
            .find(|(el, _)| rest.starts_with(el))
        {
            out.push_str(v);
            rest = &rest[el.len()..];
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            let _ = write!(out, "{c}");
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Go's `.999` fractions: trailing zeros dropped, nothing (not even the dot) for zero.
fn frac_trimmed(v: u32, width: usize) -> String {
    let s = format!("{v:0width$}");
    let s = s.trim_end_matches('0');
    if s.is_empty() {
        String::new()
    } else {
        format!(".{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env_in(dir: &Path) -> RenderEnv {
        let mut node = Node {
            id: "node-1".into(),
            ..Default::default()
        };
        node.attributes.insert("kernel.name".into(), "linux".into());
        node.meta.insert("rack".into(), "r1".into());
        RenderEnv {
            task_dir: dir.join("task"),
            alloc_dir: dir.to_path_buf(),
            env: BTreeMap::from([
                ("NOMAD_ALLOC_ID".into(), "a-1".into()),
                ("GREETING".into(), "Hello World".into()),
            ]),
            node: Arc::new(node),
            region: "global".into(),
            services: services::ServiceData::new("default", "global"),
        }
    }

    fn embedded(data: &str) -> TemplateSpec {
        TemplateSpec {
            embedded: data.into(),
            source: String::new(),
            dest: "local/out.txt".into(),
            change_mode: ChangeMode::Restart,
            perms: 0o644,
            left_delim: "{{".into(),
            right_delim: "}}".into(),
            envvars: false,
            err_missing_key: false,
            splay: std::time::Duration::ZERO,
            uid: None,
            gid: None,
            wait: None,
        }
    }

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tmp() -> Dir {
        let d = std::env::temp_dir().join(format!("drover-tmpl-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(d.join("task/local")).unwrap();
        Dir(d)
    }

    fn r(data: &str) -> Result<String, TemplateError> {
        let d = tmp();
        render(&embedded(data), &env_in(&d.0))
    }

    #[test]
    fn env_reads_the_task_env_node_attributes_meta_and_node_values() {
        assert_eq!(
            r(r#"{{ env "NOMAD_ALLOC_ID" }} {{ env "attr.kernel.name" }} {{ env "meta.rack" }} {{ env "node.unique.id" }} [{{ env "UNSET" }}]"#).unwrap(),
            "a-1 linux r1 node-1 []"
        );
    }

    #[test]
    fn parse_functions_follow_gos_strconv() {
        assert_eq!(
            r(r#"{{ parseBool "True" }} {{ parseBool "" }} {{ parseInt "-42" }} {{ parseUint "7" }} {{ parseFloat "2.5" }}"#)
                .unwrap(),
            "true false -42 7 2.5"
        );
        let e = r(r#"{{ parseInt "4x" }}"#).unwrap_err().to_string();
        assert!(
            e.contains(r#"parseInt: strconv.ParseInt: parsing "4x": invalid syntax"#),
            "{e}"
        );
        assert!(r(r#"{{ parseBool "yes" }}"#).is_err());
        assert!(r(r#"{{ parseUint "-1" }}"#).is_err());
    }

    #[test]
    fn regex_hash_and_base64_functions() {
        assert_eq!(
            r(r#"{{ regexMatch "^v[0-9]+$" "v12" }} {{ regexMatch "^v[0-9]+$" "x" }} {{ "a-1 b-2" | regexReplaceAll "([a-z])-([0-9])" "$2$1" }}"#)
                .unwrap(),
            "true false 1a 2b"
        );
        assert!(
            r(r#"{{ regexMatch "(" "x" }}"#)
                .unwrap_err()
                .to_string()
                .contains("regexMatch")
        );
        assert_eq!(
            r(r#"{{ sha256Hex "abc" }}"#).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            r(r#"{{ md5sum "abc" }}"#).unwrap(),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        assert_eq!(
            r(r#"{{ base64Encode "hi?>" }} {{ base64URLEncode "hi?>" }} {{ base64Decode "aGk/Pg==" }} {{ base64URLDecode "aGk_Pg==" }}"#)
                .unwrap(),
            "aGk/Pg== aGk_Pg== hi?> hi?>"
        );
        assert_eq!(r("{{ base64Decode \"aGk/\\nPg==\" }}").unwrap(), "hi?>");
        assert!(r(r#"{{ base64Decode "!!" }}"#).is_err());
    }

    #[test]
    fn must_env_and_env_or_default() {
        assert_eq!(
            r(r#"{{ mustEnv "NOMAD_ALLOC_ID" }} {{ envOrDefault "UNSET" "dflt" }} {{ envOrDefault "GREETING" "x" }}"#)
                .unwrap(),
            "a-1 dflt Hello World"
        );
        let e = r(r#"{{ mustEnv "UNSET" }}"#).unwrap_err().to_string();
        assert!(
            e.contains("required environment variable UNSET is empty"),
            "{e}"
        );
    }

    #[test]
    fn go_syntax_pipelines_conditionals_ranges_variables_trim_markers_and_comments() {
        let t = r#"{{/* a comment */ -}}
{{ $g := env "GREETING" -}}
{{ if eq $g "Hello World" }}yes{{ else }}no{{ end }}
{{ range $i, $w := split " " $g }}{{ $i }}={{ $w }};{{ end }}
{{ with env "UNSET" }}set{{ else }}unset{{ end }}
{{- " tail" }}"#;
        assert_eq!(r(t).unwrap(), "yes\n0=Hello;1=World;\nunset tail");
    }

    #[test]
    fn string_functions_follow_consul_templates_argument_order() {
        assert_eq!(
            r(r#"{{ env "GREETING" | toUpper }}"#).unwrap(),
            "HELLO WORLD"
        );
        assert_eq!(
            r(r#"{{ env "GREETING" | toLower }}"#).unwrap(),
            "hello world"
        );
        assert_eq!(r(r#"{{ "  x y  " | trimSpace }}"#).unwrap(), "x y");
        assert_eq!(r(r#"{{ "a.b.c" | replaceAll "." "_" }}"#).unwrap(), "a_b_c");
        assert_eq!(
            r(r#"{{ "a,b,c" | split "," | join ";" }}"#).unwrap(),
            "a;b;c"
        );
        assert_eq!(r(r#"{{ len (split "," "  ") }}"#).unwrap(), "0");
        assert_eq!(
            r(r#"{{ "Hello World" | contains "World" }} {{ split "," "a,b" | contains "c" }}"#)
                .unwrap(),
            "true false"
        );
        // consul-template's `in`: same kinds only, and nothing in what is not a list or string.
        assert_eq!(
            r(r#"{{ parseJSON "[1, \"x\"]" | contains 1 }} {{ parseJSON "[1]" | contains 1.0 }} {{ in "abc" "b" }} {{ 5 | contains 5 }}"#)
                .unwrap(),
            "false true true false"
        );
        let e = r(r#"{{ parseJSON "[1]" | join "," }}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected []string"), "{e}");
        assert_eq!(r(r#"{{ "xxhixx" | trim "x" }}"#).unwrap(), "hi");
        assert_eq!(
            r(r#"{{ "pre-x" | trimPrefix "pre-" }} {{ "x.txt" | trimSuffix ".txt" }}"#).unwrap(),
            "x x"
        );
        assert_eq!(r("{{ \"a\\n\\nb\" | indent 2 }}").unwrap(), "  a\n\n  b");
    }

    #[test]
    fn arithmetic_takes_the_piped_value_as_the_left_operand() {
        assert_eq!(r("{{ 2 | add 3 }}").unwrap(), "5");
        assert_eq!(r("{{ 5 | subtract 2 }}").unwrap(), "3");
        assert_eq!(r("{{ 4 | multiply 3 }}").unwrap(), "12");
        assert_eq!(r("{{ 10 | divide 2 }}").unwrap(), "5");
        assert_eq!(r("{{ 7 | divide 2 }}").unwrap(), "3");
        assert_eq!(r("{{ 1.5 | add 1 }}").unwrap(), "2.5");
        assert_eq!(r("{{ 2 | add 1.5 }}").unwrap(), "3.5");
        assert_eq!(
            r("{{ 9223372036854775807 | add 1 }}").unwrap(),
            "-9223372036854775808"
        );
        assert_eq!(
            r(r#"{{ parseUint "3" | subtract (parseUint "5") }}"#).unwrap(),
            "18446744073709551614"
        );
        let e = r("{{ 1 | divide 0 }}").unwrap_err().to_string();
        assert!(e.contains("divide by zero"), "{e}");
        let e = r(r#"{{ "a" | add 1 }}"#).unwrap_err().to_string();
        assert!(e.contains("add: unknown type"), "{e}");
    }

    #[test]
    fn json_round_trips_as_go_encodes_it() {
        assert_eq!(
            r(r#"{{ with parseJSON "{\"b\":[1,2.5],\"a\":\"<x>\"}" }}{{ .a }} {{ index .b 0 }} {{ toJSON . }}{{ end }}"#)
                .unwrap(),
            r#"<x> 1 {"a":"\u003cx\u003e","b":[1,2.5]}"#
        );
        assert_eq!(
            r(r#"{{ (parseJSON "{\"n\":3}").n | divide 2 }}"#).unwrap(),
            "1.5"
        );
        assert_eq!(go_json_float(1e21), "1e+21");
        assert_eq!(go_json_float(1e-7), "1e-7");
        assert_eq!(go_json_float(1.5e-10), "1.5e-10");
        assert_eq!(r(r#"{{ toJSON (parseJSON "") }}"#).unwrap(), "{}");
        assert_eq!(r(r#"{{ toJSON (parseJSON "null") }}"#).unwrap(), "null");
    }

    #[test]
    fn file_reads_inside_the_task_dir_only() {
        let d = tmp();
        let env = env_in(&d.0);
        std::fs::write(d.0.join("task/local/in.txt"), "from a file").unwrap();
        std::fs::write(d.0.join("outside.txt"), "secret").unwrap();
        assert_eq!(
            render(&embedded(r#"{{ file "local/in.txt" }}"#), &env).unwrap(),
            "from a file"
        );
        let abs = d.0.join("task/local/in.txt");
        let t = format!(r#"{{{{ file "{}" }}}}"#, abs.display());
        assert_eq!(render(&embedded(&t), &env).unwrap(), "from a file");
        for escape in ["../outside.txt", "/etc/hostname"] {
            let t = format!(r#"{{{{ file "{escape}" }}}}"#);
            let e = render(&embedded(&t), &env).unwrap_err().to_string();
            assert!(e.contains("outside of the task directory"), "{e}");
        }
    }

    #[test]
    fn a_source_outside_the_task_dir_is_refused() {
        let d = tmp();
        std::fs::write(d.0.join("outside.tpl"), "x").unwrap();
        let mut s = embedded("");
        s.source = "../outside.tpl".into();
        let e = render(&s, &env_in(&d.0)).unwrap_err();
        assert!(matches!(e, TemplateError::SourceEscapes { .. }), "{e}");
        s.source = "local/missing.tpl".into();
        let e = render(&s, &env_in(&d.0)).unwrap_err();
        assert!(matches!(e, TemplateError::ReadSource { .. }), "{e}");
    }

    #[test]
    fn custom_delimiters_leave_braces_as_text() {
        let mut s = embedded(r#"{{ literal }} [[ env "NOMAD_ALLOC_ID" ]]"#);
        s.left_delim = "[[".into();
        s.right_delim = "]]".into();
        let d = tmp();
        assert_eq!(render(&s, &env_in(&d.0)).unwrap(), "{{ literal }} a-1");
    }

    #[test]
    fn a_missing_key_prints_no_value_unless_error_on_missing_key() {
        let t = r#"{{ (parseJSON "{\"a\":1}").b }}"#;
        assert_eq!(r(t).unwrap(), "<no value>");
        let mut s = embedded(t);
        s.err_missing_key = true;
        let d = tmp();
        let e = render(&s, &env_in(&d.0)).unwrap_err().to_string();
        assert!(e.contains("no entry for key"), "{e}");
    }

    #[test]
    fn service_and_variable_functions_fail_naming_the_function() {
        for f in [r#"nomadVar "x""#, r#"key "k""#, r#"secret "s""#] {
            let e = r(&format!("{{{{ {f} }}}}")).unwrap_err().to_string();
            let name = f.split(' ').next().unwrap();
            assert!(
                e.contains(&format!("function {name:?} is not supported")),
                "{e}"
            );
        }
        let e = r(r#"{{ plugin "/bin/true" }}"#).unwrap_err().to_string();
        assert!(e.contains(r#"function "plugin" is disabled"#), "{e}");
        // Not called, not a failure.
        assert_eq!(
            r(r#"{{ if false }}{{ service "x" }}{{ end }}ok"#).unwrap(),
            "ok"
        );
    }

    #[test]
    fn a_parse_error_fails_the_render() {
        assert!(matches!(r("{{ if }}"), Err(TemplateError::Render { .. })));
        assert!(r("{{ undefinedFunction }}").is_err());
    }

    #[test]
    fn timestamps_use_gos_layouts_in_utc() {
        // 2026-12-01T19:30:05.120Z, a Tuesday.
        let t = utc_of(1_796_153_405, 120_000_000);
        assert_eq!(
            timestamp("2006-01-02T15:04:05Z07:00", t),
            "2026-12-01T19:30:05Z"
        );
        assert_eq!(timestamp("unix", t), "1796153405");
        assert_eq!(
            timestamp("Mon Jan _2 03:04:05.000 PM 2006", t),
            "Tue Dec  1 07:30:05.120 PM 2026"
        );
        assert_eq!(timestamp("02/01/06 .999", t), "01/12/26 .12");
        assert_eq!(utc_of(0, 0).year, 1970);
        assert_eq!(utc_of(951_782_400, 0).day, 29, "2000-02-29");
        let now = r("{{ timestamp }}").unwrap();
        assert!(now.ends_with('Z') && now.len() == 20, "{now}");
    }

    #[test]
    fn env_files_parse_as_key_value_lines() {
        let text = "# comment\n\nA=1\nexport B = two words\nC=\"quo\\\"ted\\n\"\nD='single # kept'\nE=x # comment\nF=\n";
        assert_eq!(
            parse_env("local/e.env", text).unwrap(),
            vec![
                ("A".into(), "1".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "quo\"ted\n".into()),
                ("D".into(), "single # kept".into()),
                ("E".into(), "x".into()),
                ("F".into(), "".into()),
            ]
        );
        let e = parse_env("local/e.env", "A=1\nnot a pair\n").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn render_all_writes_in_order_with_perms_and_returns_env_vars() {
        use std::os::unix::fs::PermissionsExt;
        let d = tmp();
        let env = env_in(&d.0);
        let mut first = embedded("inner {{ env \"NOMAD_ALLOC_ID\" }}");
        first.dest = "local/src.tpl".into();
        first.perms = 0o600;
        let mut second = embedded("");
        second.source = "local/src.tpl".into();
        second.dest = "local/out.txt".into();
        let mut vars = embedded("X={{ env \"NOMAD_ALLOC_ID\" }}\n");
        vars.dest = "secrets/x.env".into();
        vars.envvars = true;
        let mut t = Templates::new(vec![first, second, vars]);
        let got = t.render_all(&env).unwrap();
        assert_eq!(got, BTreeMap::from([("X".to_string(), "a-1".to_string())]));
        let out = std::fs::read_to_string(d.0.join("task/local/out.txt")).unwrap();
        assert_eq!(out, "inner a-1");
        let mode = std::fs::metadata(d.0.join("task/local/src.tpl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn rerender_writes_only_changed_outputs_and_reports_their_change_modes() {
        let d = tmp();
        let env = env_in(&d.0);
        let src = d.0.join("task/local/in.tpl");
        std::fs::write(&src, "v1").unwrap();
        let mut signal = embedded("");
        signal.source = "local/in.tpl".into();
        signal.dest = "local/sig.conf".into();
        signal.change_mode = ChangeMode::Signal("SIGUSR1".into());
        let mut noop = embedded("static");
        noop.dest = "local/noop.conf".into();
        noop.change_mode = ChangeMode::Noop;
        let mut t = Templates::new(vec![signal, noop]);
        t.render_all(&env).unwrap();
        // The task edits an output whose inputs did not change: left alone.
        std::fs::write(d.0.join("task/local/noop.conf"), "edited").unwrap();
        assert!(t.rerender(&env).unwrap().is_empty());
        assert_eq!(
            std::fs::read_to_string(d.0.join("task/local/noop.conf")).unwrap(),
            "edited"
        );
        std::fs::write(&src, "v2").unwrap();
        assert_eq!(
            t.rerender(&env).unwrap(),
            Changes {
                restart: false,
                signals: vec!["SIGUSR1".into()],
                scripts: vec![],
                splay: std::time::Duration::ZERO,
            }
        );
        assert_eq!(
            std::fs::read_to_string(d.0.join("task/local/sig.conf")).unwrap(),
            "v2"
        );
        assert!(t.rerender(&env).unwrap().is_empty());
    }

    #[test]
    fn recover_rewrites_only_differing_files_and_later_changes_still_count() {
        let d = tmp();
        let env = env_in(&d.0);
        let src = d.0.join("task/local/in.tpl");
        std::fs::write(&src, "v1").unwrap();
        let out = d.0.join("task/local/out.conf");
        std::fs::write(&out, "stale").unwrap();
        let mut s = embedded("");
        s.source = "local/in.tpl".into();
        s.dest = "local/out.conf".into();
        let mut t = Templates::new(vec![s]);
        t.recover(&env).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "v1");
        assert!(t.rendered());
        assert!(
            t.rerender(&env).unwrap().is_empty(),
            "recovery is no change"
        );
        std::fs::write(&src, "v2").unwrap();
        assert!(t.rerender(&env).unwrap().restart);
    }

    #[test]
    fn changes_wait_up_to_the_largest_splay_of_the_templates_that_changed() {
        use std::time::Duration;
        let d = tmp();
        let env = env_in(&d.0);
        std::fs::write(d.0.join("task/local/in.tpl"), "v1").unwrap();
        let spec = |dest: &str, mode: ChangeMode, splay: u64| {
            let mut s = embedded("");
            s.source = "local/in.tpl".into();
            s.dest = dest.into();
            s.change_mode = mode;
            s.splay = Duration::from_secs(splay);
            s
        };
        let mut t = Templates::new(vec![
            spec("local/a", ChangeMode::Signal("SIGHUP".into()), 2),
            spec("local/b", ChangeMode::Signal("SIGHUP".into()), 3),
            spec("local/c", ChangeMode::Noop, 60),
        ]);
        t.render_all(&env).unwrap();
        std::fs::write(d.0.join("task/local/in.tpl"), "v2").unwrap();
        let mut c = t.rerender(&env).unwrap();
        assert_eq!(
            c.splay,
            Duration::from_secs(3),
            "noop templates do not wait"
        );
        assert!(c.splay_wait() < Duration::from_secs(3));
        c.merge(Changes {
            restart: true,
            signals: vec![],
            scripts: vec![],
            splay: Duration::from_secs(1),
        });
        assert!(c.restart && c.signals.is_empty());
        assert_eq!(c.splay, Duration::from_secs(3));
        let task = Task {
            templates: Some(json!([{ "DestPath": "a", "EmbeddedTmpl": "x" }])),
            ..Default::default()
        };
        assert_eq!(of_task(&task).unwrap()[0].splay, Duration::from_secs(5));
    }

    #[test]
    fn isolated_tasks_templates_see_in_task_directory_paths() {
        let mut env = BTreeMap::from([
            (
                "NOMAD_TASK_DIR".to_string(),
                "/data/alloc/a/t/local".to_string(),
            ),
            (
                "NOMAD_ALLOC_DIR".to_string(),
                "/data/alloc/a/alloc".to_string(),
            ),
            ("OTHER".to_string(), "kept".to_string()),
        ]);
        use_in_task_paths(&mut env);
        assert_eq!(env["NOMAD_TASK_DIR"], "/local");
        assert_eq!(env["NOMAD_ALLOC_DIR"], "/alloc");
        assert_eq!(env["OTHER"], "kept");
        assert!(!env.contains_key("NOMAD_SECRETS_DIR"));
    }

    #[test]
    fn a_destination_outside_the_alloc_dir_is_refused() {
        let d = tmp();
        let mut s = embedded("x");
        s.dest = "../../escape.txt".into();
        let mut t = Templates::new(vec![s]);
        let e = t.render_all(&env_in(&d.0)).unwrap_err();
        assert!(matches!(e, TemplateError::DestEscapes { .. }), "{e}");
    }

    #[test]
    fn a_destination_through_a_planted_symlink_cannot_write_outside_the_alloc_dir() {
        let d = tmp();
        let outside = tmp();
        let victim = outside.0.join("passwd");
        std::fs::write(&victim, "root:x:0:0").unwrap();
        // The task made local/etc point at a host directory, and a link at the name the
        // next render writes to.
        std::os::unix::fs::symlink(&outside.0, d.0.join("task/local/etc")).unwrap();
        let mut through_dir = embedded("owned");
        through_dir.dest = "local/etc/passwd".into();
        let mut t = Templates::new(vec![through_dir]);
        let e = t.render_all(&env_in(&d.0)).unwrap_err();
        assert!(matches!(e, TemplateError::DestEscapes { .. }), "{e}");

        std::os::unix::fs::symlink(&victim, d.0.join("task/local/out.txt")).unwrap();
        std::os::unix::fs::symlink(&victim, d.0.join("task/local/.out.txt.drover-tmp")).unwrap();
        let mut t = Templates::new(vec![embedded("mine")]);
        t.render_all(&env_in(&d.0)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0");
        let out = d.0.join("task/local/out.txt");
        assert!(std::fs::symlink_metadata(&out).unwrap().is_file());
        assert_eq!(std::fs::read_to_string(out).unwrap(), "mine");
    }

    #[test]
    fn specs_read_nomads_api_names() {
        let task = Task {
            templates: Some(json!([{
                "EmbeddedTmpl": "x", "DestPath": "local/a", "ChangeMode": "signal",
                "ChangeSignal": "SIGHUP", "Perms": "0600", "LeftDelim": "<<",
                "RightDelim": ">>", "Envvars": true, "ErrMissingKey": true
            }])),
            ..Default::default()
        };
        let s = &of_task(&task).unwrap()[0];
        assert_eq!(s.change_mode, ChangeMode::Signal("SIGHUP".into()));
        assert_eq!(s.perms, 0o600);
        assert_eq!(
            (s.left_delim.as_str(), s.right_delim.as_str()),
            ("<<", ">>")
        );
        assert!(s.envvars && s.err_missing_key);
        let bad = Task {
            templates: Some(json!([{ "DestPath": "a", "Perms": "9" }])),
            ..Default::default()
        };
        assert!(of_task(&bad).is_err());
    }

    fn one_spec(t: Json) -> Result<TemplateSpec, TemplateError> {
        let task = Task {
            templates: Some(json!([t])),
            ..Default::default()
        };
        of_task(&task).map(|mut v| v.remove(0))
    }

    #[test]
    fn uid_and_gid_read_as_nomad_sets_them() {
        let s = one_spec(json!({ "DestPath": "a", "Uid": 1000, "Gid": 0 })).unwrap();
        assert_eq!((s.uid, s.gid), (Some(1000), Some(0)));
        // Absent, null, and the API's default -1 leave the owner as is.
        let s = one_spec(json!({ "DestPath": "a", "Uid": null, "Gid": -1 })).unwrap();
        assert_eq!((s.uid, s.gid), (None, None));
        let e = one_spec(json!({ "DestPath": "a", "Uid": "root" })).unwrap_err();
        assert!(e.to_string().contains("uid: expected an integer"), "{e}");
        let e = one_spec(json!({ "DestPath": "a", "Gid": 1u64 << 40 })).unwrap_err();
        assert!(
            e.to_string().contains("gid 1099511627776 is out of range"),
            "{e}"
        );
    }

    #[test]
    fn a_template_with_uid_and_gid_renders_a_file_they_own() {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
            eprintln!("not root: chown cannot be tested");
            return;
        }
        let d = tmp();
        let env = env_in(&d.0);
        let mut s = embedded("owned");
        s.uid = Some(1234);
        s.gid = Some(5678);
        let mut only_gid = embedded("group");
        only_gid.dest = "local/g.txt".into();
        only_gid.gid = Some(4321);
        let mut t = Templates::new(vec![s, only_gid]);
        t.render_all(&env).unwrap();
        let m = std::fs::metadata(d.0.join("task/local/out.txt")).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
        let m = std::fs::metadata(d.0.join("task/local/g.txt")).unwrap();
        assert_eq!((m.uid(), m.gid()), (0, 4321));
    }

    #[test]
    fn wait_reads_nanoseconds_and_refuses_min_over_max() {
        use std::time::Duration;
        let s = one_spec(json!({ "DestPath": "a", "Wait": { "Min": 2_000_000_000i64, "Max": 10_000_000_000i64 } }))
            .unwrap();
        assert_eq!(
            s.wait,
            Some(Wait {
                min: Duration::from_secs(2),
                max: Duration::from_secs(10)
            })
        );
        // consul-template's default max: 4 × min.
        let s = one_spec(json!({ "DestPath": "a", "Wait": { "Min": 1_000_000_000i64 } })).unwrap();
        assert_eq!(s.wait.map(|w| w.max), Some(Duration::from_secs(4)));
        for w in [json!(null), json!({ "Min": null, "Max": null })] {
            assert_eq!(
                one_spec(json!({ "DestPath": "a", "Wait": w }))
                    .unwrap()
                    .wait,
                None
            );
        }
        let e = one_spec(json!({ "DestPath": "a", "Wait": { "Min": 5_000_000_000i64, "Max": 1_000_000_000i64 } }))
            .unwrap_err();
        assert!(matches!(e, TemplateError::Spec { index: 1, .. }), "{e}");
        assert!(
            e.to_string()
                .contains("wait min 5s is greater than wait max 1s"),
            "{e}"
        );
        let e = one_spec(json!({ "DestPath": "a", "Wait": { "Min": -1 } })).unwrap_err();
        assert!(
            e.to_string().contains("wait min must not be negative"),
            "{e}"
        );
    }

    #[test]
    fn quiescence_waits_for_min_after_the_last_change_up_to_max_after_the_first() {
        use std::time::{Duration, Instant};
        let w = Wait {
            min: Duration::from_secs(2),
            max: Duration::from_secs(5),
        };
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // One change: rendered `min` after it.
        assert_eq!(w.due(t0, t0, at(1)), Some(at(2)));
        assert_eq!(w.due(t0, t0, at(2)), None);
        // A later change pushes the render back...
        assert_eq!(w.due(t0, at(1), at(2)), Some(at(3)));
        // ...but never past `max` after the first change.
        assert_eq!(w.due(t0, at(4), at(4)), Some(at(5)));
        assert_eq!(w.due(t0, at(4), at(5)), None);
        // A zero wait renders at once.
        let none = Wait {
            min: Duration::ZERO,
            max: Duration::ZERO,
        };
        assert_eq!(none.due(t0, t0, t0), None);
    }

    #[test]
    fn rerenders_with_a_wait_hold_changes_until_quiescent() {
        use std::time::{Duration, Instant};
        let d = tmp();
        let env = env_in(&d.0);
        let src = d.0.join("task/local/in.tpl");
        let out = d.0.join("task/local/out.conf");
        std::fs::write(&src, "v1").unwrap();
        let mut s = embedded("");
        s.source = "local/in.tpl".into();
        s.dest = "local/out.conf".into();
        s.change_mode = ChangeMode::Signal("SIGHUP".into());
        s.wait = Some(Wait {
            min: Duration::from_secs(2),
            max: Duration::from_secs(5),
        });
        let mut t = Templates::new(vec![s]);
        t.render_all(&env).unwrap();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(t.rerender_at(&env, at(0)).unwrap().is_empty());
        std::fs::write(&src, "v2").unwrap();
        assert!(t.rerender_at(&env, at(1)).unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "v1", "held back");
        std::fs::write(&src, "v3").unwrap();
        assert!(t.rerender_at(&env, at(2)).unwrap().is_empty());
        assert!(t.rerender_at(&env, at(3)).unwrap().is_empty());
        let c = t.rerender_at(&env, at(4)).unwrap();
        assert_eq!(c.signals, vec!["SIGHUP".to_string()]);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "v3");
        assert!(t.rerender_at(&env, at(5)).unwrap().is_empty());
        // Changes that never settle render `max` after the first one.
        for (i, n) in (10..16).enumerate() {
            std::fs::write(&src, format!("busy {i}")).unwrap();
            let c = t.rerender_at(&env, at(n)).unwrap();
            assert_eq!(!c.is_empty(), n == 15, "at {n}s");
        }
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "busy 5");
        // A change undone before it was due is no change.
        std::fs::write(&src, "other").unwrap();
        assert!(t.rerender_at(&env, at(20)).unwrap().is_empty());
        std::fs::write(&src, "busy 5").unwrap();
        assert!(t.rerender_at(&env, at(21)).unwrap().is_empty());
        assert!(t.rerender_at(&env, at(30)).unwrap().is_empty());
    }

    #[test]
    fn change_script_reads_nomads_fields_and_defaults() {
        use std::time::Duration;
        let s = one_spec(json!({
            "DestPath": "a", "ChangeMode": "script",
            "ChangeScript": { "Command": "/bin/foo", "Args": ["-v", "x y"],
                              "Timeout": 30_000_000_000i64, "FailOnError": true }
        }))
        .unwrap();
        let ChangeMode::Script(cs) = &s.change_mode else {
            panic!("{:?}", s.change_mode)
        };
        assert_eq!(cs.argv(), vec!["/bin/foo", "-v", "x y"]);
        assert_eq!(cs.go_args(), "[-v x y]");
        assert_eq!(cs.timeout, Duration::from_secs(30));
        assert!(cs.fail_on_error);
        let s = one_spec(json!({
            "DestPath": "a", "ChangeMode": "script", "ChangeScript": { "Command": "/bin/foo" }
        }))
        .unwrap();
        assert_eq!(
            s.change_mode,
            ChangeMode::Script(ChangeScript {
                command: "/bin/foo".into(),
                args: vec![],
                timeout: Duration::from_secs(5),
                fail_on_error: false,
            })
        );
        for (cs, want) in [
            (json!(null), "needs a change_script block"),
            (json!({ "Args": ["x"] }), "change_script needs a command"),
            (json!({ "Command": "" }), "change_script needs a command"),
            (json!({ "Command": "x", "Args": [1] }), "expected strings"),
            (
                json!({ "Command": "x", "Timeout": -5 }),
                "timeout must not be negative",
            ),
            (
                json!({ "Command": "x", "FailOnError": "yes" }),
                "expected a bool",
            ),
        ] {
            let e =
                one_spec(json!({ "DestPath": "a", "ChangeMode": "script", "ChangeScript": cs }))
                    .unwrap_err();
            assert!(matches!(e, TemplateError::Spec { .. }), "{e}");
            assert!(e.to_string().contains(want), "{e} / {want}");
        }
        let e = one_spec(json!({ "DestPath": "a", "ChangeMode": "signal" })).unwrap_err();
        assert!(e.to_string().contains("needs a change_signal"), "{e}");
    }

    #[test]
    fn script_changes_are_reported_and_a_restart_supersedes_them() {
        let d = tmp();
        let env = env_in(&d.0);
        std::fs::write(d.0.join("task/local/in.tpl"), "v1").unwrap();
        let script = ChangeScript {
            command: "/bin/reload".into(),
            args: vec!["now".into()],
            timeout: std::time::Duration::from_secs(5),
            fail_on_error: false,
        };
        let mut s = embedded("");
        s.source = "local/in.tpl".into();
        s.dest = "local/a".into();
        s.change_mode = ChangeMode::Script(script.clone());
        let mut t = Templates::new(vec![s]);
        t.render_all(&env).unwrap();
        std::fs::write(d.0.join("task/local/in.tpl"), "v2").unwrap();
        let mut c = t.rerender(&env).unwrap();
        assert!(!c.is_empty());
        assert_eq!(c.scripts, vec![script]);
        c.merge(Changes {
            restart: true,
            ..Default::default()
        });
        assert!(c.restart && c.scripts.is_empty());
    }
}
