// The board: one EventSource, per-pane DOM rows updated in place.
// Items from the server (see src/web/board.rs): event, pane, gone,
// approvals, daemon; `snapshot` replaces everything.
"use strict";

const panes = new Map(); // id -> {info, timeline: [[at,state]], series: [[at,tokens,cost]], row, dirty}
let approvals = [];
let feedItems = [];
let daemon = { connected: false, error: null };
let dirtyAll = false, dirtyApprovals = false, dirtyFeed = false, dirtyCharts = false;
let frame = 0;
const FEED_MAX = 200, TIMELINE_MAX = 24, SERIES_MAX = 90;

const $ = (id) => document.getElementById(id);
const tbody = document.querySelector("#panes tbody");

// The session a login opened arrives in the address's fragment (never sent
// to a server); it is kept in this tab only and sent by the page itself,
// never as a cookie (a cookie reaches every port of the host).
const SESSION_KEY = "colibri-session";
(() => {
  const m = location.hash.match(/session=([0-9a-f]+)/);
  if (m) {
    sessionStorage.setItem(SESSION_KEY, m[1]);
    history.replaceState(null, "", location.pathname);
  }
})();
const session = sessionStorage.getItem(SESSION_KEY);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function paneName(id) {
  const p = panes.get(id);
  return (p && p.info && (p.info.name || p.info.agent)) || (id || "").slice(0, 8);
}

function ago(at) {
  if (!at) return "";
  const s = Math.max(0, (Date.now() - Date.parse(at)) / 1000);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  return Math.floor(s / 3600) + "h";
}

// A pane's whole life: its earlier runs (restarts) included.
function usageOf(info) {
  return info.usage_total || info.usage || {};
}

function tokensOf(info) {
  const u = usageOf(info);
  return (u.input_tokens || 0) + (u.output_tokens || 0);
}

function schedule() {
  if (!frame) frame = requestAnimationFrame(render);
}

function markPane(id) {
  const p = panes.get(id);
  if (p) p.dirty = true;
  schedule();
}

function ensurePane(id) {
  let p = panes.get(id);
  if (!p) {
    p = { info: { id, state: "starting" }, timeline: [], series: [], row: null, dirty: true };
    panes.set(id, p);
  }
  return p;
}

function applySnapshot(board) {
  for (const p of panes.values()) if (p.row) p.row.remove();
  panes.clear();
  const byName = (e) => e.info.name || e.info.agent || e.info.id;
  const sorted = board.panes.slice().sort((a, b) => byName(a).localeCompare(byName(b), undefined, { numeric: true }));
  for (const e of sorted) {
    panes.set(e.info.id, { info: e.info, timeline: e.timeline, series: e.series, row: null, dirty: true });
  }
  approvals = board.approvals || [];
  feedItems = (board.feed || []).slice(-FEED_MAX);
  daemon = board.daemon || daemon;
  dirtyAll = dirtyApprovals = dirtyFeed = dirtyCharts = true;
  schedule();
}

function applyEvent(ev) {
  const id = ev.pane;
  if (id) {
    const p = ensurePane(id);
    const i = p.info;
    switch (ev.event) {
      case "state":
        i.state = ev.to; i.state_since = ev.at; i.last_event_at = i.last_event_at || ev.at;
        if (ev.reason) i.blocked_reason = ev.reason;
        p.timeline.push([ev.at, ev.to]);
        if (p.timeline.length > TIMELINE_MAX) p.timeline.shift();
        break;
      case "stalled": i.stalled = true; break;
      case "unstalled": i.stalled = false; break;
      case "paused": i.paused = true; break;
      case "resumed": i.paused = false; break;
      case "attached": if (ev.name) i.name = ev.name; i.agent = ev.agent; i.running = true; i.supervision = null; break;
      case "restarted": i.running = true; i.supervision = null; break;
      case "exited":
        i.running = false; i.paused = false;
        if (ev.planned) i.supervision = Object.assign({}, i.supervision, { actual: "stopped" });
        break;
      case "runtime": i.runtime = ev.runtime; break;
    }
    p.dirty = true;
  }
  if (ev.event !== "heartbeat") {
    feedItems.push(ev);
    if (feedItems.length > FEED_MAX) feedItems.shift();
    dirtyFeed = true;
  }
}

function applyItem(item) {
  switch (item.t) {
    case "event": applyEvent(item.ev); break;
    case "pane": {
      const p = ensurePane(item.pane.id);
      p.info = item.pane;
      if (Array.isArray(item.point)) {
        p.series.push(item.point);
        if (p.series.length > SERIES_MAX) p.series.shift();
        dirtyCharts = true;
      }
      p.dirty = true;
      break;
    }
    case "gone": {
      const p = panes.get(item.pane);
      if (p && p.row) p.row.remove();
      panes.delete(item.pane);
      dirtyCharts = true;
      break;
    }
    case "approvals": approvals = item.approvals || []; dirtyApprovals = true; break;
    case "daemon": daemon = { connected: item.connected, error: item.error }; break;
  }
}

// --- rendering, at most once a frame -------------------------------------

// Read once: getComputedStyle per rectangle costs more than the whole row.
const colours = new Map();
function stateColour(state) {
  if (!colours.has(state)) {
    const c = getComputedStyle(document.documentElement).getPropertyValue("--" + state).trim();
    colours.set(state, c || "#555");
  }
  return colours.get(state);
}

function timelineSvg(timeline) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "timeline");
  svg.setAttribute("viewBox", "0 0 120 10");
  const n = timeline.length;
  timeline.forEach(([at, state], k) => {
    const r = document.createElementNS(ns, "rect");
    r.setAttribute("x", String((k * 120) / Math.max(n, 1)));
    r.setAttribute("width", String(120 / Math.max(n, 1)));
    r.setAttribute("height", "10");
    r.setAttribute("class", "s-" + state);
    r.setAttribute("fill", stateColour(state));
    const t = document.createElementNS(ns, "title");
    t.textContent = state + " at " + at;
    r.appendChild(t);
    svg.appendChild(r);
  });
  return svg;
}

function action(kind, pane, approval, text) {
  const body = { pane };
  if (approval) body.approval = approval;
  if (text !== undefined) body.text = text;
  if (kind === "deny") {
    const m = prompt("Deny: a message for the agent (optional)", "");
    if (m === null) return;
    body.message = m;
  }
  fetch("/api/" + kind, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Authorization": "Bearer " + session },
    body: JSON.stringify(body),
  })
    .then((r) => r.json())
    .then((r) => {
      const box = $("action-error");
      if (r.ok) { box.hidden = true; return; }
      box.hidden = false;
      box.textContent = kind + " " + paneName(pane) + ": " + (r.error || "failed");
    })
    .catch((e) => { const box = $("action-error"); box.hidden = false; box.textContent = String(e); });
}

function buildRow(id) {
  const tr = el("tr");
  tr.dataset.pane = id;
  for (const c of ["name", "state", "since", "timeline", "tokens", "cost", "tool", "actions"]) tr.appendChild(el("td", c));
  const pause = el("button", "pause", "pause");
  pause.addEventListener("click", () => action(panes.get(id).info.paused ? "resume" : "pause", id));
  tr.lastChild.appendChild(pause);
  return tr;
}

// What a row says: a pane a planned stop ended reads "stopped" (not the
// state the stream last said), in its own colour.
function shownState(i) {
  return i.supervision && i.supervision.actual === "stopped" ? "stopped" : i.state;
}

// The seed's health word, as `state` gives it (`core::health`): looping is
// read from a loop policy's hold, since a row does not carry the
// escalation ladder. Empty once the agent is not running.
function healthOf(i) {
  const running = i.running !== undefined ? i.running : i.pid != null && !i.exit;
  if (!running) return "";
  if ((i.holds || []).some((h) => h.by === "loop")) return "looping";
  if (i.state === "blocked") return "waiting_permission";
  if (i.state === "error") return "error";
  if (!i.last_event_at) return "starting";
  if (i.state === "working") return i.stalled ? "silent" : "productive";
  return "idle";
}

// Pause and resume act on a running process only; colibri's own notifier
// is not the operator's to pause from here.
function pausable(i) {
  const running = i.running !== undefined ? i.running : i.pid != null;
  return running && i.name !== "colibri-notify";
}

function renderRow(id, p) {
  if (!p.row) { p.row = buildRow(id); tbody.appendChild(p.row); }
  const i = p.info, c = p.row.children;
  // A fleet row (colibri web --fleet) names its host.
  c[0].textContent = (i.host ? i.host + " · " : "") + (i.name || i.agent || id.slice(i.host ? i.host.length + 1 : 0).slice(0, 8));
  c[0].title = id;
  c[1].textContent = "";
  const shown = shownState(i);
  c[1].appendChild(el("span", "state s-" + shown, shown));
  if (i.paused) {
    const flag = el("span", "flag", "paused");
    // Why: each hold, as colibri snapshot says it (the title shows them).
    const why = (i.holds || []).map((h) =>
      "by " + (h.by === "operator" ? "the operator" : h.by + (h.rule ? " (" + h.rule + ")" : "")) +
      (h.reason ? ": " + h.reason : "") + (h.until ? "; resumes at " + h.until : "; until an operator resumes it"));
    if (why.length) { flag.title = why.join("\n"); flag.textContent = "paused " + why[0].split(":")[0]; }
    c[1].appendChild(flag);
  }
  if (i.stalled) c[1].appendChild(el("span", "flag", "stalled"));
  // Its host missed three heartbeats: the row stays, dimmed.
  if (i.unreachable_since) {
    const flag = el("span", "flag", "unreachable");
    flag.title = "no heartbeat from " + i.host + " since " + i.unreachable_since;
    c[1].appendChild(flag);
  }
  p.row.classList.toggle("unreachable", !!i.unreachable_since);
  const health = healthOf(i);
  if (health) c[1].appendChild(el("span", "health", health));
  p.row.dataset.state = shown;
  p.row.dataset.health = health;
  c[2].textContent = ago(i.state_since);
  // The timeline is redrawn only when it gained a state.
  const tlKey = p.timeline.length + ":" + (p.timeline.length ? p.timeline[p.timeline.length - 1][0] : "");
  if (p.tlKey !== tlKey) {
    p.tlKey = tlKey;
    c[3].textContent = "";
    c[3].appendChild(timelineSvg(p.timeline));
  }
  c[4].textContent = tokensOf(i).toLocaleString();
  c[5].textContent = "$" + (usageOf(i).cost_usd || 0).toFixed(4);
  c[6].textContent = i.last_tool ? i.last_tool.name + ": " + (i.last_tool.summary || "") : "";
  c[7].firstChild.textContent = i.paused ? "resume" : "pause";
  c[7].firstChild.hidden = !pausable(i);
  applyFilter(p.row);
  p.dirty = false;
}

function applyFilter(row) {
  const f = $("filter").value.trim().toLowerCase();
  row.hidden = f !== "" && !(row.textContent.toLowerCase().includes(f));
}

function renderApprovals() {
  const ul = $("approvals");
  ul.textContent = "";
  const list = approvals.slice();
  // A blocked pane with no listed approval still gets its buttons.
  for (const [id, p] of panes) {
    if (p.info.state === "blocked" && !list.some((a) => a.pane === id))
      list.push({ pane: id, question: p.info.blocked_reason || "blocked", kind: "blocked" });
  }
  $("approval-count").textContent = String(list.length);
  for (const a of list) {
    const li = el("li");
    li.dataset.pane = a.pane;
    li.appendChild(el("strong", "", paneName(a.pane)));
    li.appendChild(el("span", "q", a.question || a.summary || a.message || a.title || a.kind || ""));
    // What the question takes: one of its options, a text, or yes and no.
    if (a.kind === "select" && (a.options || []).length) {
      const pick = el("select", "answer-options");
      for (const o of a.options) { const opt = el("option", "", o); opt.value = o; pick.appendChild(opt); }
      const send = el("button", "answer", "answer");
      send.addEventListener("click", () => action("answer", a.pane, a.id, pick.value));
      li.append(pick, " ", send);
    } else if (a.kind === "input") {
      const text = el("input", "answer-text");
      text.placeholder = "your answer";
      const send = el("button", "answer", "answer");
      send.addEventListener("click", () => { if (text.value) action("answer", a.pane, a.id, text.value); });
      li.append(text, " ", send);
    } else {
      const yes = el("button", "approve", "approve");
      yes.addEventListener("click", () => action("approve", a.pane, a.id));
      li.append(yes);
    }
    const no = el("button", "deny", "deny");
    no.addEventListener("click", () => action("deny", a.pane, a.id));
    li.append(" ", no);
    ul.appendChild(li);
  }
}

function describe(ev) {
  switch (ev.event) {
    case "state": return ev.from + " → " + ev.to + (ev.reason ? " (" + ev.reason + ")" : "");
    case "exited": return "exited " + (ev.code !== undefined ? "code " + ev.code : "signal " + ev.signal);
    case "stalled": return "stalled (" + Math.round(ev.silent_ms / 1000) + "s silent)";
    case "task": return "task " + ev.task_id + " " + ev.status;
    case "runtime": return "runtime " + ev.runtime;
    default: return ev.event + (ev.message ? ": " + ev.message : "");
  }
}

function renderFeed() {
  const ol = $("feed");
  ol.textContent = "";
  for (let k = feedItems.length - 1; k >= 0; k--) {
    const ev = feedItems[k];
    const li = el("li");
    li.dataset.event = ev.event;
    li.appendChild(el("span", "at", (ev.at || "").slice(11, 19)));
    li.appendChild(el("strong", "", (ev.pane ? paneName(ev.pane) : "colibri") + " "));
    li.appendChild(document.createTextNode(describe(ev)));
    ol.appendChild(li);
  }
}

// Sums every pane's series on a common time axis (each pane's last value
// carries forward) and draws it as an SVG path.
function renderCharts() {
  const points = [];
  for (const p of panes.values()) for (const s of p.series) points.push([Date.parse(s[0]), p, s]);
  points.sort((a, b) => a[0] - b[0]);
  const last = new Map();
  let tok = 0, cost = 0;
  const tokens = [], costs = [];
  for (const [t, p, s] of points) {
    const prev = last.get(p) || [0, 0];
    tok += s[1] - prev[0]; cost += s[2] - prev[1];
    last.set(p, [s[1], s[2]]);
    tokens.push([t, tok]); costs.push([t, cost]);
  }
  drawSeries($("chart-tokens"), tokens, "#5fb3f9", tok.toLocaleString() + " tokens");
  drawSeries($("chart-cost"), costs, "#ff9800", "$" + cost.toFixed(4));
  $("total").textContent = tok.toLocaleString() + " tokens · $" + cost.toFixed(4);
}

function drawSeries(svg, series, colour, label) {
  const ns = "http://www.w3.org/2000/svg";
  svg.textContent = "";
  const title = document.createElementNS(ns, "text");
  title.setAttribute("x", "4"); title.setAttribute("y", "12");
  title.setAttribute("fill", "#7d8894"); title.setAttribute("font-size", "10");
  title.textContent = label;
  svg.appendChild(title);
  if (series.length < 1) return;
  const t0 = series[0][0], t1 = Math.max(series[series.length - 1][0], t0 + 1);
  const vmax = Math.max(...series.map((s) => s[1]), 1e-9);
  let d = "", y = 78;
  series.forEach(([t, v], k) => {
    const x = ((t - t0) / (t1 - t0)) * 400;
    y = 78 - (v / vmax) * 60;
    d += (k ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1);
  });
  // A lone point is a level line, not a slope.
  if (series.length === 1) d += "L400 " + y.toFixed(1);
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", d);
  path.setAttribute("stroke", colour);
  svg.appendChild(path);
}

function render() {
  frame = 0;
  const counts = {};
  for (const [id, p] of panes) {
    if (p.dirty || dirtyAll) renderRow(id, p);
    const shown = shownState(p.info);
    counts[shown] = (counts[shown] || 0) + 1;
  }
  $("counts").textContent = Object.entries(counts).map(([s, n]) => n + " " + s).join(" · ") || "no agents";
  const d = $("daemon");
  d.className = "daemon " + (daemon.connected ? "up" : "down");
  d.textContent = daemon.connected ? "colibrid connected" : "colibrid unreachable: " + (daemon.error || "");
  if (dirtyApprovals || dirtyAll) renderApprovals();
  if (dirtyFeed || dirtyAll) renderFeed();
  if (dirtyCharts || dirtyAll) renderCharts();
  dirtyAll = dirtyApprovals = dirtyFeed = dirtyCharts = false;
  document.body.dataset.ready = "1";
}

// --- the stream ------------------------------------------------------------

function connect() {
  // EventSource resends Last-Event-ID on its own reconnects: the server
  // resumes from there, or sends a snapshot.
  const es = new EventSource("/events?session=" + encodeURIComponent(session));
  es.addEventListener("snapshot", (e) => applySnapshot(JSON.parse(e.data)));
  es.addEventListener("batch", (e) => {
    for (const item of JSON.parse(e.data)) applyItem(item);
    // Blocked panes show in the approvals list.
    dirtyApprovals = true;
    schedule();
  });
  es.onerror = () => { daemon = { connected: false, error: "board connection lost; retrying" }; schedule(); };
}

$("filter").addEventListener("input", () => { for (const p of panes.values()) if (p.row) applyFilter(p.row); });
// The "since" ages move on their own: only that cell, every 5 seconds.
setInterval(() => {
  for (const p of panes.values()) if (p.row) p.row.children[2].textContent = ago(p.info.state_since);
}, 5000);
if (session) {
  connect();
} else {
  document.body.dataset.ready = "1";
  $("daemon").textContent = "401 unauthorized: open the URL colibri web printed (…/?token=…)";
}
