// Drover UI script: the read with the stored ACL token, live updates (one long poll at a
// time), action buttons, the token form, the log tail and the overview chart. Without it a
// page still shows what an anonymous API read shows.
"use strict";

// The token lives in this origin's localStorage (scheme, host and port): never in a cookie,
// which the browser would also send to any other port of this host.
const TOKEN_KEY = "drover.token";

function token() {
  try {
    return localStorage.getItem(TOKEN_KEY) || "";
  } catch (e) {
    return "";
  }
}

function setToken(value) {
  try {
    if (value) localStorage.setItem(TOKEN_KEY, value);
    else localStorage.removeItem(TOKEN_KEY);
  } catch (e) {
    flash(`The token cannot be stored: ${e.message}`, true);
  }
}

function apiHeaders(json) {
  const headers = {};
  const t = token();
  if (t) headers["X-Nomad-Token"] = t;
  if (json) headers["Content-Type"] = "application/json";
  return headers;
}

function flash(text, isError) {
  const el = document.getElementById("flash");
  if (!el) return;
  el.textContent = text;
  el.classList.toggle("error", Boolean(isError));
}

// ---- Live updates ------------------------------------------------------------------------
// The page carries the API paths it read and their indexes, signed by the agent
// (main[data-watch]); asking for the page again with `live=` makes the server wait until one
// of them moves, then answer the page re-rendered, whose [data-live] parts replace ours.

const live = { controller: null, kicked: false, running: false, hidden: false, wake: null };

// A pause that kick() cuts short.
function pause(ms) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    live.wake = () => {
      clearTimeout(timer);
      resolve();
    };
  });
}

function pageUrl(param, value) {
  const url = new URL(location.href);
  url.searchParams.delete("live");
  url.searchParams.delete("fragment");
  url.searchParams.set(param, value);
  return url;
}

function applyUpdate(html) {
  const doc = new DOMParser().parseFromString(`<body>${html}</body>`, "text/html");
  for (const fresh of doc.querySelectorAll("[data-live][id]")) {
    const old = document.getElementById(fresh.id);
    if (!old) continue;
    // What the user set inside the part stays: open details, chosen options, an armed button.
    const open = new Set([...old.querySelectorAll("details[open][id]")].map((d) => d.id));
    for (const d of fresh.querySelectorAll("details[id]")) d.open = open.has(d.id);
    for (const s of old.querySelectorAll("select[id]")) {
      const twin = fresh.querySelector(`select[id="${s.id}"]`);
      if (twin) twin.value = s.value;
    }
    const armed = [...old.querySelectorAll("button.action.armed")].map((b) => [
      `button.action[data-path="${CSS.escape(b.dataset.path)}"][data-method="${CSS.escape(b.dataset.method)}"]`,
      b.dataset.armedAt,
    ]);
    const placed = document.importNode(fresh, true);
    old.replaceWith(placed);
    for (const [selector, armedAt] of armed) {
      const twin = placed.querySelector(selector);
      if (twin) arm(twin, armedAt);
    }
  }
  document.dispatchEvent(new Event("drover:updated"));
}

async function liveLoop() {
  const main = document.querySelector("main[data-watch]");
  if (!main || !document.querySelector("[data-live]") || live.running) return;
  live.running = true;
  let watch = main.dataset.watch || "";
  let last = 0;
  while (!live.hidden) {
    // A page that watches nothing (its reads cannot block) is refreshed on a timer instead.
    const gap = watch.endsWith(".[]") ? 10000 : 1000;
    const since = Date.now() - last;
    if (!live.kicked && since < gap) await pause(gap - since);
    if (live.hidden) break;
    live.kicked = false;
    last = Date.now();
    live.controller = new AbortController();
    try {
      const r = await fetch(pageUrl("live", watch), {
        headers: apiHeaders(false),
        signal: live.controller.signal,
      });
      if (!r.ok) {
        await pause(5000);
        continue;
      }
      watch = r.headers.get("X-Drover-Watch") || watch;
      applyUpdate(await r.text());
    } catch (e) {
      if (!live.kicked && !live.hidden) await pause(5000);
    }
  }
  live.running = false;
}

// Refresh now (after an action), without waiting for the open poll or a pause.
function kick() {
  live.kicked = true;
  if (live.controller) live.controller.abort();
  if (live.wake) live.wake();
}

// ---- Actions -----------------------------------------------------------------------------

// A second click within this long of the first is a double-click, not a confirmation.
const CONFIRM_AFTER_MS = 400;

function arm(btn, armedAt) {
  btn.dataset.label = btn.dataset.label || btn.textContent;
  btn.dataset.armedAt = armedAt || String(Date.now());
  btn.classList.add("armed");
  btn.textContent = "Click again to confirm";
  clearTimeout(Number(btn.dataset.timer));
  btn.dataset.timer = String(setTimeout(() => disarm(btn), 4000));
}

function disarm(btn) {
  clearTimeout(Number(btn.dataset.timer));
  if (!btn.classList.contains("armed")) return;
  btn.classList.remove("armed");
  btn.textContent = btn.dataset.label;
}

document.addEventListener("click", async (ev) => {
  const btn = ev.target.closest("button.action");
  if (!btn || btn.disabled) return;
  if (btn.dataset.confirm) {
    if (!btn.classList.contains("armed")) {
      arm(btn);
      return;
    }
    if (Date.now() - Number(btn.dataset.armedAt) < CONFIRM_AFTER_MS) return;
  }
  disarm(btn);
  let body = btn.dataset.body;
  if (btn.dataset.bodyFrom === "signal") {
    body = JSON.stringify({ Signal: document.getElementById("signal-name").value });
  }
  const label = btn.textContent.trim();
  flash(`${label}…`);
  btn.disabled = true;
  try {
    const r = await fetch(btn.dataset.path, {
      method: btn.dataset.method,
      headers: apiHeaders(Boolean(body)),
      body,
    });
    const text = await r.text();
    if (r.ok) flash(`${label}: done`);
    else flash(`${label}: ${r.status} ${text}`, true);
  } catch (e) {
    flash(`${label}: ${e.message}`, true);
  } finally {
    btn.disabled = false;
  }
  kick();
});

// ---- Token form --------------------------------------------------------------------------

function tokenForm() {
  const form = document.getElementById("token-form");
  if (!form) return;
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    setToken(document.getElementById("token-secret").value.trim());
    location.reload();
  });
  document.getElementById("token-clear").addEventListener("click", () => {
    setToken("");
    location.reload();
  });
}

// ---- Log tail ----------------------------------------------------------------------------

const LOG_KEEP = 256 * 1024;

// What the log tail does when the page is hidden or shown again (set by logTail).
const logStream = { stop: () => {}, start: () => {} };

function logTail() {
  const logs = document.getElementById("logs");
  if (!logs) return;
  const out = document.getElementById("log-output");
  const task = document.getElementById("log-task");
  const follow = document.getElementById("log-follow");
  let type = "stdout";
  let controller = null;

  function append(text) {
    const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    let all = out.textContent + text;
    if (all.length > LOG_KEEP) all = all.slice(-LOG_KEEP);
    out.textContent = all;
    if (atBottom) out.scrollTop = out.scrollHeight;
  }

  async function start() {
    if (controller) controller.abort();
    controller = new AbortController();
    out.textContent = "";
    if (!task.value) return;
    const q = new URLSearchParams({
      task: task.value,
      type,
      origin: "end",
      offset: "65536",
      plain: "true",
      follow: String(follow.checked),
    });
    try {
      const r = await fetch(`/v1/client/fs/logs/${encodeURIComponent(logs.dataset.alloc)}?${q}`, {
        headers: apiHeaders(false),
        signal: controller.signal,
      });
      if (!r.ok) {
        out.textContent = `${r.status}: ${await r.text()}`;
        return;
      }
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        append(decoder.decode(value, { stream: true }));
      }
    } catch (e) {
      if (e.name !== "AbortError") append(`\n[log stream ended: ${e.message}]\n`);
    }
  }

  for (const b of logs.querySelectorAll("button[data-log-type]")) {
    b.addEventListener("click", () => {
      type = b.dataset.logType;
      for (const o of logs.querySelectorAll("button[data-log-type]")) o.classList.toggle("active", o === b);
      start();
    });
  }
  task.addEventListener("change", start);
  follow.addEventListener("change", start);
  logStream.stop = () => controller && controller.abort();
  logStream.start = start;
  start();
}

// ---- Overview chart ----------------------------------------------------------------------

function chart() {
  const svg = document.getElementById("running-chart");
  if (!svg) return;
  const key = "drover.running";
  let series = [];
  try {
    const stored = JSON.parse(sessionStorage.getItem(key) || "[]");
    if (Array.isArray(stored)) series = stored.filter((p) => Array.isArray(p) && p.length === 2);
  } catch (e) {
    series = [];
  }
  series.push([Date.now(), Number(svg.dataset.running) || 0]);
  series = series.slice(-240);
  try {
    sessionStorage.setItem(key, JSON.stringify(series));
  } catch (e) {
    // Storage full or off: the chart keeps this page's samples only.
  }
  const max = Math.max(1, ...series.map((p) => p[1]));
  const t0 = series[0][0];
  const t1 = Math.max(series[series.length - 1][0], t0 + 1);
  const y = (v) => (115 - (v / max) * 100).toFixed(1);
  let points = series.map(([t, v]) => `${(((t - t0) / (t1 - t0)) * 600).toFixed(1)},${y(v)}`);
  // One sample so far: a level line, so the chart shows something from the first load.
  if (series.length === 1) points = [`0,${y(series[0][1])}`, `600,${y(series[0][1])}`];
  svg.innerHTML = `<polyline points="${points.join(" ")}"></polyline>`;
  const label = document.getElementById("running-max");
  if (label) label.textContent = `${series[series.length - 1][1]} now, at most ${max} in the last ${series.length} samples`;
}

// ---- Start -------------------------------------------------------------------------------

// A page left for another (kept in the back/forward cache, or still unloading) must not hold
// its long poll and log stream: browsers allow six connections per host, and held ones
// would stall the next pages' loads.
window.addEventListener("pagehide", () => {
  live.hidden = true;
  if (live.controller) live.controller.abort();
  if (live.wake) live.wake();
  logStream.stop();
});
window.addEventListener("pageshow", (ev) => {
  if (!ev.persisted) return;
  live.hidden = false;
  liveLoop();
  logStream.start();
});

// With a token stored, the page is read again with it: a navigation carries no token, so
// what the server rendered first is the anonymous view.
async function readWithToken(main) {
  try {
    const r = await fetch(pageUrl("fragment", "1"), { headers: apiHeaders(false) });
    const html = await r.text();
    main.innerHTML = html;
    main.dataset.watch = r.headers.get("X-Drover-Watch") || "";
    const title = r.headers.get("X-Drover-Title");
    if (title) {
      const text = decodeURIComponent(title);
      document.title = `${text} · Drover`;
      const h1 = document.querySelector("header.top h1");
      if (h1) h1.textContent = text;
    }
  } catch (e) {
    flash(`Reading the page with the token failed: ${e.message}`, true);
  }
}

async function start() {
  const state = document.getElementById("token-state");
  if (state) state.textContent = token() ? "Token set" : "No token";
  const main = document.querySelector("main[data-anon]");
  if (main && token()) await readWithToken(main);
  if (main) main.removeAttribute("data-anon");
  document.documentElement.classList.remove("has-token");
  liveLoop();
  document.addEventListener("drover:updated", chart);
  tokenForm();
  logTail();
  chart();
}

start();
