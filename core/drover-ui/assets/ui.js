// Drover UI script: live updates (one long poll at a time), action buttons, the token form,
// the log tail and the overview chart. Pages work without it; it only keeps them current.
"use strict";

const TOKEN_COOKIE = "drover_token";

function token() {
  for (const part of document.cookie.split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === TOKEN_COOKIE) return decodeURIComponent(rest.join("="));
  }
  return "";
}

function setToken(value) {
  const base = "; path=/ui; SameSite=Strict";
  document.cookie = value
    ? `${TOKEN_COOKIE}=${encodeURIComponent(value)}${base}; max-age=31536000`
    : `${TOKEN_COOKIE}=${base}; max-age=0`;
}

function apiHeaders(json) {
  const headers = {};
  const t = token();
  if (t) headers["X-Nomad-Token"] = t;
  if (json) headers["Content-Type"] = "application/json";
  return headers;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function flash(text, isError) {
  const el = document.getElementById("flash");
  if (!el) return;
  el.textContent = text;
  el.classList.toggle("error", Boolean(isError));
}

// ---- Live updates ------------------------------------------------------------------------
// The page carries the API paths it read and their indexes (main[data-watch]); asking for the
// page again with `live=` makes the server wait until one of them moves, then answer the page
// re-rendered, whose [data-live] parts replace ours.

const live = { controller: null, kicked: false, running: false, hidden: false };

function applyUpdate(html) {
  const doc = new DOMParser().parseFromString(`<body>${html}</body>`, "text/html");
  for (const fresh of doc.querySelectorAll("[data-live][id]")) {
    const old = document.getElementById(fresh.id);
    if (!old) continue;
    const open = new Set([...old.querySelectorAll("details[open][id]")].map((d) => d.id));
    for (const d of fresh.querySelectorAll("details[id]")) d.open = open.has(d.id);
    old.replaceWith(document.importNode(fresh, true));
  }
  document.dispatchEvent(new Event("drover:updated"));
}

async function liveLoop() {
  const main = document.querySelector("main[data-watch]");
  if (!main || !document.querySelector("[data-live]") || live.running) return;
  live.running = true;
  let watch = main.dataset.watch || "[]";
  let last = 0;
  while (!live.hidden) {
    // Endpoints that cannot block (nothing watched) are refreshed on a timer instead.
    const gap = watch === "[]" ? 10000 : 1000;
    const since = Date.now() - last;
    if (!live.kicked && since < gap) await sleep(gap - since);
    live.kicked = false;
    last = Date.now();
    live.controller = new AbortController();
    try {
      const url = new URL(location.href);
      url.searchParams.set("live", watch);
      const r = await fetch(url, { signal: live.controller.signal });
      if (!r.ok) {
        await sleep(5000);
        continue;
      }
      watch = r.headers.get("X-Drover-Watch") || "[]";
      applyUpdate(await r.text());
    } catch (e) {
      if (!live.kicked && !live.hidden) await sleep(5000);
    }
  }
  live.running = false;
}

// Refresh now (after an action), without waiting for the open poll to answer.
function kick() {
  live.kicked = true;
  if (live.controller) live.controller.abort();
}

// ---- Actions -----------------------------------------------------------------------------

function disarm(btn) {
  if (!btn.classList.contains("armed")) return;
  btn.classList.remove("armed");
  btn.textContent = btn.dataset.label;
}

document.addEventListener("click", async (ev) => {
  const btn = ev.target.closest("button.action");
  if (!btn) return;
  if (btn.dataset.confirm && !btn.classList.contains("armed")) {
    btn.dataset.label = btn.textContent;
    btn.classList.add("armed");
    btn.textContent = "Click again to confirm";
    setTimeout(() => disarm(btn), 4000);
    return;
  }
  disarm(btn);
  let body = btn.dataset.body;
  if (btn.dataset.bodyFrom === "signal") {
    body = JSON.stringify({ Signal: document.getElementById("signal-name").value });
  }
  const label = btn.textContent.trim();
  flash(`${label}…`);
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
    series = JSON.parse(sessionStorage.getItem(key) || "[]");
  } catch (e) {
    series = [];
  }
  series.push([Date.now(), Number(svg.dataset.running) || 0]);
  series = series.slice(-240);
  sessionStorage.setItem(key, JSON.stringify(series));
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

// A page left for another (kept in the back/forward cache, or still unloading) must not hold
// its long poll and log stream: browsers allow six connections per host, and held ones
// would stall the next pages' loads.
window.addEventListener("pagehide", () => {
  live.hidden = true;
  if (live.controller) live.controller.abort();
  logStream.stop();
});
window.addEventListener("pageshow", (ev) => {
  if (!ev.persisted) return;
  live.hidden = false;
  liveLoop();
  logStream.start();
});

document.addEventListener("drover:updated", chart);
tokenForm();
logTail();
chart();
liveLoop();
