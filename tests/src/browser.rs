//! Headless Chromium for the web UI end-to-end tests: a small, synchronous Chrome DevTools
//! Protocol (CDP) client.
//!
//! [`Browser::launch`] starts `chromium --headless` with a throwaway profile and attaches to one
//! page over its DevTools websocket. Tests then load pages served on loopback, read and click
//! the DOM, collect whatever the page reported as an error (console errors, uncaught exceptions,
//! failed loads) and take screenshots. Dropping the [`Browser`] kills chromium with all its
//! helper processes and removes the profile.
//!
//! Tests that need a browser should skip when [`Browser::binary`] is `None`.
//!
//! JavaScript dialogs (`alert`, `confirm`, `prompt`) are accepted as soon as they open, so a
//! `confirm()` behind a button answers "OK" instead of blocking the page.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::fs::File;
use std::io::ErrorKind;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

/// How long one DevTools command may take before it counts as hung.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long chromium may take to start and open its DevTools port (the machine may be busy
/// compiling).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Events kept for later waits; older ones are dropped beyond this.
const MAX_BUFFERED_EVENTS: usize = 1000;
/// How often `wait_for` re-evaluates its expression.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The page's viewport, in CSS pixels; screenshots have this size.
const VIEWPORT: (u32, u32) = (1280, 900);

/// Flags for every launch, besides `--user-data-dir` and the start URL.
const FLAGS: &[&str] = &[
    "--headless",
    // Tests run as root, where chromium's sandbox refuses to start.
    "--no-sandbox",
    "--disable-gpu",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-component-extensions-with-background-pages",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--metrics-recording-only",
    "--password-store=basic",
    "--mute-audio",
    "--hide-scrollbars",
    // Containers have a small /dev/shm; chromium crashes tabs when it runs out.
    "--disable-dev-shm-usage",
    // Keep timers running at full speed in a page nobody looks at.
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
];

/// A headless chromium attached to one page. See the module docs.
pub struct Browser {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    /// Events read while waiting for something else, oldest first.
    events: VecDeque<Value>,
    /// Error reports not yet returned by `take_console_errors`.
    errors: Vec<String>,
    /// URL of each request in flight, by `requestId`, to name it when it fails.
    requests: HashMap<String, String>,
    /// Requests whose failure is already in `errors`.
    reported_requests: HashSet<String>,
    /// Everything set with `set_extra_header` (CDP replaces the whole set on each call).
    headers: BTreeMap<String, String>,
    /// Dropped last: kills chromium and removes its directory.
    chromium: Chromium,
}

impl Browser {
    /// The chromium binary: `$CHROMIUM` when set (returned as is, so a wrong value fails loudly
    /// in [`Browser::launch`] instead of skipping tests), else `chromium`, else
    /// `chromium-browser` on `PATH`; `None` when there is none.
    pub fn binary() -> Option<PathBuf> {
        if let Some(explicit) = std::env::var_os("CHROMIUM").filter(|v| !v.is_empty()) {
            let path = PathBuf::from(&explicit);
            if path.components().count() > 1 {
                return Some(path);
            }
            return Some(find_on_path(&explicit).unwrap_or(path));
        }
        ["chromium", "chromium-browser"]
            .into_iter()
            .find_map(|name| find_on_path(OsStr::new(name)))
    }

    /// Starts headless chromium with a fresh profile in a temporary directory, attaches to its
    /// page and enables the Page, Runtime, Log and Network domains. Panics with chromium's
    /// output when any of that fails.
    pub fn launch() -> Browser {
        let bin = Self::binary().expect(
            "Browser::launch: no chromium found: install it (`apt-get install chromium`) \
             or point $CHROMIUM at it",
        );
        let dir = fresh_temp_dir();
        let profile = dir.join("profile");
        std::fs::create_dir(&profile)
            .unwrap_or_else(|e| panic!("Browser::launch: creating {}: {e}", profile.display()));
        let log_path = dir.join("chromium.log");
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("Browser::launch: creating {}: {e}", log_path.display()));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("Browser::launch: duplicating the log file handle: {e}"));
        let child = Command::new(&bin)
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own process group, so that Drop can kill every helper process with it.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                panic!("Browser::launch: starting {}: {e}", bin.display())
            });
        let mut chromium = Chromium {
            child,
            dir,
            log: log_path,
        };

        let port = chromium.wait_for_port(&profile);
        let ws_url = page_websocket_url(port)
            .unwrap_or_else(|e| chromium.fail(&format!("finding a page target: {e}")));
        let ws = connect(&ws_url, port)
            .unwrap_or_else(|e| chromium.fail(&format!("attaching to the page: {e}")));
        let mut browser = Browser {
            ws,
            next_id: 1,
            events: VecDeque::new(),
            errors: Vec::new(),
            requests: HashMap::new(),
            reported_requests: HashSet::new(),
            headers: BTreeMap::new(),
            chromium,
        };
        for method in [
            "Page.enable",
            "Runtime.enable",
            "Log.enable",
            "Network.enable",
        ] {
            browser.expect_call(method, json!({}));
        }
        browser.expect_call("Page.setLifecycleEventsEnabled", json!({"enabled": true}));
        // --window-size sizes the window, whose frame takes ~140 px of it even headless: make
        // the viewport (what the page and screenshots see) exactly the window size.
        let (width, height) = VIEWPORT;
        browser.expect_call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        browser
    }

    /// The `--user-data-dir` chromium runs with (removed on drop).
    pub fn user_data_dir(&self) -> PathBuf {
        self.chromium.dir.join("profile")
    }

    /// Navigates to `url` and waits up to `timeout` for its load event. Err on timeout or
    /// when the navigation fails (unreachable host, refused connection, ...). An HTTP error
    /// status still loads a page; its error shows in [`Browser::take_console_errors`].
    pub fn goto(&mut self, url: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        // Load events buffered so far belong to earlier navigations.
        self.events.clear();
        let nav = match self.call_until("Page.navigate", json!({"url": url}), deadline) {
            Ok(nav) => nav,
            Err(_) if Instant::now() >= deadline => {
                // Still waiting for the server's response: leave no navigation running.
                let _ = self.send("Page.stopLoading", json!({}));
                return Err(format!(
                    "{url} did not load within {timeout:?} (no response from its server yet)"
                ));
            }
            Err(e) => return Err(format!("navigating to {url}: {e}")),
        };
        if let Some(err) = nav["errorText"].as_str().filter(|e| !e.is_empty()) {
            return Err(format!("navigating to {url}: {err}"));
        }
        // No loader for a same-document navigation (only the #fragment changed): done.
        let Some(loader) = nav["loaderId"].as_str().map(str::to_owned) else {
            return Ok(());
        };
        loop {
            let Some(event) = self.next_event(deadline)? else {
                let _ = self.send("Page.stopLoading", json!({}));
                return Err(format!("{url} did not finish loading within {timeout:?}"));
            };
            let params = &event["params"];
            if event["method"] == "Page.lifecycleEvent"
                && params["name"] == "load"
                && params["loaderId"] == loader.as_str()
            {
                return Ok(());
            }
        }
    }

    /// Evaluates `js` in the page (awaiting it when it is a promise) and returns its value as
    /// JSON (`Null` for `undefined` and for values JSON cannot hold). Err with the exception
    /// text when it throws.
    pub fn eval(&mut self, js: &str) -> Result<Value, String> {
        self.eval_until(js, Instant::now() + COMMAND_TIMEOUT)
    }

    /// Re-evaluates the expression `js` every ~100 ms until it is `true` (exceptions count as
    /// "not yet"). Err on timeout naming the expression, its last outcome and the start of the
    /// page's text.
    pub fn wait_for(&mut self, js: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let last = loop {
            // A slow evaluation still gets a moment when the deadline is close.
            let eval_deadline = deadline.max(Instant::now() + Duration::from_secs(2));
            let outcome = match self.eval_until(js, eval_deadline) {
                Ok(Value::Bool(true)) => return Ok(()),
                Ok(other) => format!("last value: {other}"),
                Err(e) => format!("last error: {e}"),
            };
            let now = Instant::now();
            if now >= deadline {
                break outcome;
            }
            self.pump_until((now + POLL_INTERVAL).min(deadline))?;
        };
        let text = match self.eval_until(BODY_TEXT, Instant::now() + Duration::from_secs(5)) {
            Ok(Value::String(text)) => excerpt(&text, 1500),
            Ok(other) => other.to_string(),
            Err(e) => format!("<unreadable: {e}>"),
        };
        Err(format!(
            "timed out after {timeout:?} waiting for `{js}` ({last}); page text: {text:?}"
        ))
    }

    /// The page's `document.body.innerText` ("" before there is a body). Panics when the page
    /// cannot be read.
    pub fn text(&mut self) -> String {
        match self.eval(BODY_TEXT) {
            Ok(Value::String(text)) => text,
            Ok(other) => panic!("Browser::text: innerText is not a string: {other}"),
            Err(e) => panic!("Browser::text: {e}"),
        }
    }

    /// Clicks (`el.click()`) the first element matching the CSS `selector`. Err when nothing
    /// matches or the element is disabled (a click there would silently do nothing).
    pub fn click(&mut self, selector: &str) -> Result<(), String> {
        let quoted = Value::from(selector).to_string();
        let js = format!(
            "(() => {{ const el = document.querySelector({quoted}); \
             if (!el) return 'missing'; if (el.disabled) return 'disabled'; \
             el.scrollIntoView({{block: 'center'}}); el.click(); return 'clicked'; }})()"
        );
        match self.eval(&js) {
            Ok(v) if v == "clicked" => Ok(()),
            Ok(v) if v == "missing" => Err(format!("click: no element matches `{selector}`")),
            Ok(v) if v == "disabled" => Err(format!("click: `{selector}` is disabled")),
            Ok(other) => Err(format!("click `{selector}`: unexpected result {other}")),
            Err(e) => Err(format!("click `{selector}`: {e}")),
        }
    }

    /// Everything the page reported as an error since launch or the previous call, one
    /// readable string each: `console.error`/`console.assert` calls, uncaught exceptions (with
    /// their url:line), error log entries (such as a resource that answered 404, with its URL)
    /// and failed network loads (except cancelled ones). A missing `/favicon.ico`, which
    /// chromium requests by itself, does not count.
    pub fn take_console_errors(&mut self) -> Vec<String> {
        // A round trip through the renderer delivers the console events it emitted before;
        // a short pause then lets the network events (sent by another process) catch up.
        if let Err(e) = self.call_until(
            "Runtime.evaluate",
            json!({"expression": "0"}),
            Instant::now() + Duration::from_secs(10),
        ) {
            self.errors.push(format!("browser: {e}"));
        }
        if let Err(e) = self.pump_until(Instant::now() + Duration::from_millis(100)) {
            self.errors.push(format!("browser: {e}"));
        }
        std::mem::take(&mut self.errors)
    }

    /// Writes a PNG screenshot of the viewport to `path`, creating its parent directories.
    pub fn screenshot(&mut self, path: &Path) -> Result<(), String> {
        let shot = self.call_until(
            "Page.captureScreenshot",
            json!({"format": "png"}),
            Instant::now() + COMMAND_TIMEOUT,
        )?;
        let data = shot["data"]
            .as_str()
            .ok_or("Page.captureScreenshot returned no data")?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("Page.captureScreenshot returned bad base64: {e}"))?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        std::fs::write(path, png).map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// Sends the header `name: value` with every request the page makes from now on (on top
    /// of headers set before).
    pub fn set_extra_header(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.headers.insert(name.to_owned(), value.to_owned());
        let headers = json!({"headers": self.headers});
        self.call_until(
            "Network.setExtraHTTPHeaders",
            headers,
            Instant::now() + COMMAND_TIMEOUT,
        )
        .map(drop)
    }

    fn expect_call(&mut self, method: &str, params: Value) -> Value {
        match self.call_until(method, params, Instant::now() + COMMAND_TIMEOUT) {
            Ok(result) => result,
            Err(e) => self.chromium.fail(&e),
        }
    }

    fn eval_until(&mut self, js: &str, deadline: Instant) -> Result<Value, String> {
        let params = json!({
            "expression": js,
            "returnByValue": true,
            "awaitPromise": true,
            "userGesture": true,
        });
        let mut reply = self.call_until("Runtime.evaluate", params, deadline)?;
        if let Some(details) = reply.get("exceptionDetails") {
            return Err(exception_text(details));
        }
        Ok(reply["result"]
            .get_mut("value")
            .map(Value::take)
            .unwrap_or(Value::Null))
    }

    /// Sends one command and waits until `deadline` for its reply, buffering the events read
    /// meanwhile. Returns the reply's `result`, or its `error` as Err.
    fn call_until(
        &mut self,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<Value, String> {
        let id = self.send(method, params)?;
        loop {
            let Some(mut msg) = self.read_message(deadline)? else {
                return Err(format!("{method}: chromium did not answer in time"));
            };
            if msg.get("id").is_none() {
                self.buffer(msg);
            } else if msg["id"] == id {
                if let Some(err) = msg.get("error") {
                    let text = err["message"]
                        .as_str()
                        .map_or_else(|| err.to_string(), str::to_owned);
                    return Err(format!("{method}: {text}"));
                }
                return Ok(msg["result"].take());
            }
            // Other ids answer commands given up on earlier.
        }
    }

    fn send(&mut self, method: &str, params: Value) -> Result<u64, String> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"id": id, "method": method, "params": params});
        self.ws
            .send(Message::text(msg.to_string()))
            .map_err(|e| format!("{method}: sending to chromium: {e}"))?;
        Ok(id)
    }

    /// The next event, from the buffer first, else read until `deadline`.
    fn next_event(&mut self, deadline: Instant) -> Result<Option<Value>, String> {
        if let Some(event) = self.events.pop_front() {
            return Ok(Some(event));
        }
        while let Some(msg) = self.read_message(deadline)? {
            if msg.get("id").is_none() {
                return Ok(Some(msg));
            }
        }
        Ok(None)
    }

    /// Reads (records and buffers) events until `deadline`.
    fn pump_until(&mut self, deadline: Instant) -> Result<(), String> {
        while let Some(msg) = self.read_message(deadline)? {
            if msg.get("id").is_none() {
                self.buffer(msg);
            }
        }
        Ok(())
    }

    fn buffer(&mut self, event: Value) {
        if self.events.len() >= MAX_BUFFERED_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// One message from chromium, or None at `deadline`. Events are recorded on the way.
    fn read_message(&mut self, deadline: Instant) -> Result<Option<Value>, String> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.ws
                .get_ref()
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(|e| format!("setting the DevTools socket timeout: {e}"))?;
            let data = match self.ws.read() {
                Ok(Message::Text(text)) => text.as_bytes().to_vec(),
                Ok(Message::Binary(bytes)) => bytes.to_vec(),
                Ok(Message::Close(_)) => return Err(self.connection_lost("it closed the socket")),
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    continue;
                }
                Err(e) => return Err(self.connection_lost(&e.to_string())),
            };
            let msg: Value = serde_json::from_slice(&data).map_err(|e| {
                format!(
                    "chromium sent bad JSON ({e}): {}",
                    excerpt(&String::from_utf8_lossy(&data), 300)
                )
            })?;
            if msg.get("id").is_none() {
                self.record(&msg);
            }
            return Ok(Some(msg));
        }
    }

    fn connection_lost(&mut self, why: &str) -> String {
        let status = match self.chromium.child.try_wait() {
            Ok(Some(status)) => format!("chromium exited ({status})"),
            _ => "chromium is still running".to_owned(),
        };
        format!("lost the DevTools connection: {why}; {status}")
    }

    /// Notes the error events and answers dialogs.
    fn record(&mut self, event: &Value) {
        let params = &event["params"];
        let method = event["method"].as_str().unwrap_or_default();
        match method {
            "Runtime.consoleAPICalled" => {
                let kind = params["type"].as_str().unwrap_or_default();
                if kind == "error" || kind == "assert" {
                    let args = params["args"].as_array().map_or_else(String::new, |args| {
                        args.iter()
                            .map(remote_object_text)
                            .collect::<Vec<_>>()
                            .join(" ")
                    });
                    let at = params["stackTrace"]["callFrames"]
                        .get(0)
                        .map(location)
                        .unwrap_or_default();
                    self.errors.push(format!("console.{kind}: {args}{at}"));
                }
            }
            "Runtime.exceptionThrown" => {
                let details = &params["exceptionDetails"];
                let text = exception_text(details);
                // An Error's description carries its stack, which starts at the same place.
                let at = location(details);
                let at = if text.contains(at.trim_start_matches(" (at ").trim_end_matches(')')) {
                    String::new()
                } else {
                    at
                };
                let in_promise = details["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("(in promise)"));
                let kind = if in_promise { " (in promise)" } else { "" };
                self.errors
                    .push(format!("uncaught exception{kind}: {text}{at}"));
            }
            "Log.entryAdded" => {
                let entry = &params["entry"];
                // Chromium fetches /favicon.ico on its own when a page declares no icon; its
                // 404 is no error of the page.
                let favicon = entry["url"]
                    .as_str()
                    .is_some_and(|u| u.ends_with("/favicon.ico"));
                let repeat = entry["networkRequestId"]
                    .as_str()
                    .is_some_and(|id| !self.reported_requests.insert(id.to_owned()));
                if entry["level"] == "error" && !favicon && !repeat {
                    let source = entry["source"].as_str().unwrap_or("log");
                    let text = entry["text"].as_str().unwrap_or_default();
                    let url = entry["url"]
                        .as_str()
                        .filter(|u| !u.is_empty())
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default();
                    self.errors.push(format!("{source}: {text}{url}"));
                }
            }
            "Network.requestWillBeSent" => {
                if let (Some(id), Some(url)) = (
                    params["requestId"].as_str(),
                    params["request"]["url"].as_str(),
                ) {
                    if self.requests.len() > 10_000 {
                        self.requests.clear();
                    }
                    if self.reported_requests.len() > 10_000 {
                        self.reported_requests.clear();
                    }
                    self.requests.insert(id.to_owned(), url.to_owned());
                }
            }
            "Network.loadingFinished" => {
                if let Some(id) = params["requestId"].as_str() {
                    self.requests.remove(id);
                }
            }
            "Network.loadingFailed" => {
                let id = params["requestId"].as_str().unwrap_or_default();
                let url = self
                    .requests
                    .remove(id)
                    .unwrap_or_else(|| "<unknown URL>".to_owned());
                // Chromium also logs most failed loads; whichever comes second is dropped.
                let repeat = !self.reported_requests.insert(id.to_owned());
                if params["canceled"] != true && !repeat {
                    let kind = params["type"].as_str().unwrap_or("request");
                    let err = params["errorText"].as_str().unwrap_or("failed");
                    let blocked = params["blockedReason"]
                        .as_str()
                        .map(|r| format!(" (blocked: {r})"))
                        .unwrap_or_default();
                    self.errors
                        .push(format!("network: {kind} {url} failed: {err}{blocked}"));
                }
            }
            "Page.javascriptDialogOpening" => {
                // The page is frozen until the dialog is answered; the reply is not awaited.
                let _ = self.send("Page.handleJavaScriptDialog", json!({"accept": true}));
            }
            _ => {}
        }
    }
}

const BODY_TEXT: &str = "document.body ? document.body.innerText : ''";

/// The chromium process group and its temporary directory (profile and log); dropping it
/// kills the group and removes the directory.
struct Chromium {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl Chromium {
    /// Waits for chromium to write the port it listens on into `DevToolsActivePort`.
    fn wait_for_port(&mut self, profile: &Path) -> u16 {
        let file = profile.join("DevToolsActivePort");
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(text) = std::fs::read_to_string(&file)
                && let Some(port) = text.lines().next().and_then(|l| l.trim().parse().ok())
            {
                return port;
            }
            match self.child.try_wait() {
                Ok(Some(status)) => self.fail(&format!(
                    "chromium exited ({status}) before opening its DevTools port"
                )),
                Ok(None) => {}
                Err(e) => self.fail(&format!("checking on chromium: {e}")),
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "chromium did not write {} within {STARTUP_TIMEOUT:?}",
                    file.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Panics with `what` and the end of chromium's output (the process is cleaned up by the
    /// unwinding drop).
    fn fail(&self, what: &str) -> ! {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        // Headless chromium in a container complains about D-Bus at length; that is noise.
        let lines: Vec<&str> = log.lines().filter(|l| !l.contains("dbus")).collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        panic!("Browser::launch: {what}; chromium's output ends with:\n{tail}")
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // The child leads its own process group (process_group(0)), so its pid is the group id.
        let group = -(self.child.id() as libc::pid_t);
        // SAFETY: kill(2) only sends a signal; no memory is shared with the callee.
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = self.child.wait();
        // The helpers are not our children: give them a moment to die before removing the
        // directory they write into. Their zombies do not count; whoever inherited them (pid 1
        // in a container) reaps them in its own time, a second or two later.
        let deadline = Instant::now() + Duration::from_secs(5);
        while group_has_live_process(-group) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for _ in 0..20 {
            match std::fs::remove_dir_all(&self.dir) {
                Err(e) if e.kind() != ErrorKind::NotFound => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => break,
            }
        }
    }
}

/// Whether any process of process group `pgid` is alive, zombies aside (from `/proc/*/stat`).
fn group_has_live_process(pgid: libc::pid_t) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // "pid (comm) state ppid pgrp ...", where comm may contain anything, even ") ".
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|f| f.parse::<libc::pid_t>().ok());
        pgrp == Some(pgid) && state != "Z" && state != "X"
    })
}

/// A new, empty directory under the system temp dir.
fn fresh_temp_dir() -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("drover-chromium-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("Browser::launch: creating {}: {e}", dir.display()),
        }
    }
}

fn find_on_path(name: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The `webSocketDebuggerUrl` of a page target, opening one when there is none.
fn page_websocket_url(port: u16) -> Result<String, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let base = format!("http://127.0.0.1:{port}");
    let read = |resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>| {
        let body = resp
            .and_then(|mut r| r.body_mut().read_to_string())
            .map_err(|e| e.to_string())?;
        serde_json::from_str::<Value>(&body).map_err(|e| format!("{e}: {body}"))
    };
    // The start page's target may take a moment to show up after the port opens.
    for _ in 0..10 {
        let list = read(agent.get(format!("{base}/json/list")).call())?;
        let page = list
            .as_array()
            .into_iter()
            .flatten()
            .find(|target| target["type"] == "page");
        if let Some(url) = page.and_then(|t| t["webSocketDebuggerUrl"].as_str()) {
            return Ok(url.to_owned());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let target = read(
        agent
            .put(format!("{base}/json/new?about:blank"))
            .send_empty(),
    )?;
    target["webSocketDebuggerUrl"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("PUT /json/new gave no webSocketDebuggerUrl: {target}"))
}

fn connect(url: &str, port: u16) -> Result<WebSocket<TcpStream>, String> {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connecting to 127.0.0.1:{port}: {e}"))?;
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_read_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| format!("configuring the DevTools socket: {e}"))?;
    // Screenshots of long pages exceed the default 16 MiB frame limit.
    let config = WebSocketConfig::default()
        .max_message_size(Some(512 << 20))
        .max_frame_size(Some(512 << 20));
    let (ws, _) = tungstenite::client::client_with_config(url, stream, Some(config))
        .map_err(|e| format!("websocket handshake with {url}: {e}"))?;
    Ok(ws)
}

/// A CDP `RemoteObject` as console text: strings bare, other values as JSON, objects by
/// their description and, for plain objects and arrays, their preview (`Object {a: 1}`).
fn remote_object_text(obj: &Value) -> String {
    if let Some(value) = obj.get("value") {
        return match value {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
    }
    let description = obj["unserializableValue"]
        .as_str()
        .or(obj["description"].as_str())
        .or(obj["type"].as_str())
        .unwrap_or("?");
    let preview = &obj["preview"];
    let Some(props) = preview["properties"].as_array() else {
        return description.to_owned();
    };
    if obj["subtype"].as_str().is_some_and(|s| s == "error") {
        return description.to_owned();
    }
    let more = if preview["overflow"] == true {
        ", …"
    } else {
        ""
    };
    let prop = |p: &Value| {
        let value = p["value"].as_str().unwrap_or("?");
        if p["type"] == "string" {
            format!("{value:?}")
        } else {
            value.to_owned()
        }
    };
    if obj["subtype"] == "array" {
        let items: Vec<String> = props.iter().map(prop).collect();
        format!("[{}{more}]", items.join(", "))
    } else {
        let items: Vec<String> = props
            .iter()
            .map(|p| format!("{}: {}", p["name"].as_str().unwrap_or("?"), prop(p)))
            .collect();
        format!("{description} {{{}{more}}}", items.join(", "))
    }
}

/// The message of a CDP `ExceptionDetails`: the error's description (with its stack) when it
/// is an Error, else the text and the thrown value.
fn exception_text(details: &Value) -> String {
    let exception = &details["exception"];
    if let Some(description) = exception["description"].as_str() {
        return description.to_owned();
    }
    let text = details["text"].as_str().unwrap_or("exception");
    if exception.is_object() {
        format!("{text} {}", remote_object_text(exception))
    } else {
        text.to_owned()
    }
}

/// " (at url:line:column)" from an object with CDP's 0-based `url`, `lineNumber` and
/// `columnNumber`; "" without a URL.
fn location(at: &Value) -> String {
    match at["url"].as_str().filter(|u| !u.is_empty()) {
        Some(url) => {
            let line = at["lineNumber"].as_u64().unwrap_or(0) + 1;
            let column = at["columnNumber"].as_u64().unwrap_or(0) + 1;
            format!(" (at {url}:{line}:{column})")
        }
        None => String::new(),
    }
}

/// At most `max` characters of `text`, marked when cut.
fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
