// The status page (GET /) and the stream viewer (GET /viewer). Everything
// they need is inline so that they work with no other route than /stats.json
// and /streams/<name> and no network access beyond the worker. Stream names,
// payloads and ids reach the DOM through textContent (or an input's value)
// only, never as markup.
#include "http/status_page.hpp"

namespace pgbs::http {

namespace {

// Chart: the last kPoints one-second samples. Frames/s come from the
// difference of two successive queued totals (sum over streams, so all
// workers); a total that goes down (a worker restart, a dropped stream)
// leaves a gap instead of a negative rate. p99 is the worst stream's.
constexpr const char *kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pgbus_stream status</title>
<link rel="icon" href="data:,">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
  h1 { font-size: 1.3em; margin: 0 0 .6em; }
  .cards { display: flex; flex-wrap: wrap; gap: .8em; margin-bottom: 1em; }
  .card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .5em .9em; min-width: 8em; }
  .card b { display: block; font-size: 1.5em; font-variant-numeric: tabular-nums; }
  .card span { color: #666; font-size: .85em; }
  #state.ok { color: #1a7f37; } #state.bad { color: #c62828; }
  table { border-collapse: collapse; background: #fff; margin-top: 1em; min-width: 40em; }
  th, td { border: 1px solid #ddd; padding: .3em .7em; text-align: right; font-variant-numeric: tabular-nums; }
  th:first-child, td:first-child { text-align: left; }
  th { background: #f0f0f0; }
  canvas { background: #fff; border: 1px solid #ddd; border-radius: 6px; width: 100%; max-width: 900px; height: 260px; }
  .legend { font-size: .85em; color: #555; }
  .legend i { display: inline-block; width: 1.2em; height: 3px; vertical-align: middle; margin: 0 .3em 0 1em; }
</style>
</head>
<body>
<h1>pgbus_stream <small id="worker"></small></h1>
<div class="cards">
  <div class="card"><span>state</span><b id="state">loading</b></div>
  <div class="card"><span>connections (all workers)</span><b id="connections">-</b></div>
  <div class="card"><span>queued (all streams)</span><b id="total-queued">-</b></div>
  <div class="card"><span>queued/s</span><b id="rate">-</b></div>
  <div class="card"><span>this worker: overflow-dropped / catch-ups / ring overflows</span><b id="worker-totals">-</b></div>
</div>
<div class="legend"><i style="background:#1565c0"></i>queued/s (left axis)<i style="background:#e65100"></i>worst p99 latency, ms (right axis) &mdash; last 5 minutes</div>
<canvas id="chart"></canvas>
<table>
  <thead><tr><th>stream</th><th>subscribers</th><th>emitted</th><th>queued</th><th>overflow-dropped</th><th>failed</th><th>p50 ms</th><th>p99 ms</th></tr></thead>
  <tbody id="streams"><tr><td colspan="8">no streams yet</td></tr></tbody>
</table>
<script>
"use strict";
const POINTS = 300, history = [];
let last = null;
const $ = (id) => document.getElementById(id);
const ms = (v) => (v === null || v === undefined ? "\u2013" : String(+v.toPrecision(3)));

function cell(row, text) { const td = row.insertCell(); td.textContent = text; }

function render(s) {
  const queued = s.streams.reduce((a, x) => a + x.queued, 0);
  let rate = null;
  if (last && s.now_us > last.now_us && queued >= last.queued)
    rate = (queued - last.queued) * 1e6 / (s.now_us - last.now_us);
  last = { now_us: s.now_us, queued };
  const p99s = s.streams.map((x) => x.latency_p99_ms).filter((v) => v !== null);
  history.push({ t: s.now_us / 1e6, rate, p99: p99s.length ? Math.max(...p99s) : null });
  while (history.length > POINTS) history.shift();

  $("worker").textContent = "worker " + s.worker;
  $("state").textContent = s.database_ok ? "up" : "database error";
  $("state").className = s.database_ok ? "ok" : "bad";
  $("connections").textContent = String(s.connections);
  $("total-queued").textContent = String(queued);
  $("rate").textContent = rate === null ? "-" : rate.toFixed(1);
  $("worker-totals").textContent = [s.totals.overflow_dropped, s.totals.catch_ups, s.totals.ring_overflows].join(" / ");
  const body = $("streams");
  body.textContent = "";
  for (const x of s.streams) {
    const row = body.insertRow();
    cell(row, x.name); cell(row, x.subscribers); cell(row, x.emitted); cell(row, x.queued);
    cell(row, x.overflow_dropped); cell(row, x.failed); cell(row, ms(x.latency_p50_ms)); cell(row, ms(x.latency_p99_ms));
  }
  if (!s.streams.length) cell(body.insertRow(), "no streams yet");
  draw();
}

// A "nice" axis maximum: 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map((k) => k * p).find((m) => m >= v);
}

function draw() {
  const c = $("chart"), dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth, h = c.clientHeight;
  if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
  }
  const g = c.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const L = 55, R = 55, T = 12, B = 24, pw = w - L - R, ph = h - T - B;
  const now = history.length ? history[history.length - 1].t : 0;
  const x = (t) => L + pw * (1 - (now - t) / POINTS);
  const rateMax = niceMax(Math.max(0, ...history.map((p) => p.rate || 0)));
  const p99Max = niceMax(Math.max(0, ...history.map((p) => p.p99 || 0)));
  g.font = "11px system-ui, sans-serif";
  g.strokeStyle = "#eee"; g.fillStyle = "#666"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = T + ph * (1 - i / 4);
    g.beginPath(); g.moveTo(L, y); g.lineTo(L + pw, y); g.stroke();
    g.textAlign = "right"; g.fillText(String(+(rateMax * i / 4).toPrecision(3)), L - 6, y + 4);
    g.textAlign = "left"; g.fillText(String(+(p99Max * i / 4).toPrecision(3)), L + pw + 6, y + 4);
  }
  g.textAlign = "center";
  for (let m = 0; m <= 5; m++) g.fillText(m ? "-" + m + " min" : "now", x(now - 60 * m), h - 6);
  const line = (key, max, color) => {
    g.strokeStyle = color; g.lineWidth = 2; g.beginPath();
    let pen = false;
    for (const p of history) {
      if (p[key] === null) { pen = false; continue; }
      const px = x(p.t), py = T + ph * (1 - Math.min(p[key], max) / max);
      if (pen) g.lineTo(px, py); else g.moveTo(px, py);
      pen = true;
    }
    g.stroke();
  };
  line("rate", rateMax, "#1565c0");
  line("p99", p99Max, "#e65100");
}

async function poll() {
  try {
    const r = await fetch("stats.json", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
  } catch (e) {
    $("state").textContent = "unreachable";
    $("state").className = "bad";
  }
  setTimeout(poll, 1000);
}
window.addEventListener("resize", draw);
poll();
</script>
</body>
</html>
)HTML";

// The viewer: one EventSource on /streams/<stream> (same origin, so no CORS
// setting is involved). An EventSource only dispatches the event names a
// listener was added for, and there is no "any name" listener, so the page
// listens for the names below plus those of ?events=a,b and says so. The
// list keeps the last kKeep entries; #count counts every one received.
constexpr const char *kViewer = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pgbus_stream viewer</title>
<link rel="icon" href="data:,">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
  h1 { font-size: 1.3em; margin: 0 0 .4em; }
  h1 code { font-size: .95em; }
  .bar { display: flex; flex-wrap: wrap; align-items: center; gap: .4em 1.2em; margin-bottom: .6em; }
  #state { font-weight: bold; padding: .1em .6em; border-radius: 1em; background: #eee; }
  #state.open { background: #d9f2de; color: #1a7f37; }
  #state.connecting, #state.reconnecting { background: #fff1d6; color: #9a5b00; }
  #state.closed { background: #fde0e0; color: #c62828; }
  form { display: inline-flex; gap: .4em; align-items: center; }
  input { font: inherit; padding: .15em .4em; width: 10em; }
  .note { color: #666; font-size: .85em; margin: 0 0 1em; max-width: 60em; }
  #messages { list-style: none; margin: 0; padding: 0; max-width: 70em; }
  #messages li { display: grid; grid-template-columns: 6em 12em 1fr; gap: .2em .8em; background: #fff;
    border: 1px solid #ddd; border-radius: 5px; padding: .35em .7em; margin-bottom: .35em; }
  #messages li.control { background: #f3f6fb; border-color: #d5deeb; }
  #messages li.gap, #messages li.shutdown { background: #fff6e5; border-color: #f0d9a8; }
  .time { color: #888; font-variant-numeric: tabular-nums; }
  .event { font-weight: bold; color: #1565c0; overflow-wrap: anywhere; }
  .control .event { color: #555; }
  .data { grid-column: 1 / -1; font-family: ui-monospace, monospace; white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; }
  .id { color: #666; font-family: ui-monospace, monospace; font-size: .9em; text-align: right; overflow-wrap: anywhere; }
  #empty { color: #888; }
</style>
</head>
<body>
<h1>pgbus_stream viewer &mdash; stream <code id="stream"></code></h1>
<div class="bar">
  <span id="state" class="connecting">connecting</span>
  <span>messages <b id="count">0</b></span>
  <span>last id <code id="last-id">-</code></span>
  <form method="get">
    <label>stream <input name="stream" id="stream-input" autocomplete="off"></label>
    <label>extra events <input name="events" id="events-input" placeholder="a,b" autocomplete="off"></label>
    <button type="submit">open</button>
  </form>
  <a href="/">status page</a>
</div>
<p class="note">Listening on <code id="url"></code> for the events <span id="names"></span>.
An EventSource only reports event names it listens for, so broadcasts sent with any other event name
are received but not shown here: add their names with <code>?events=a,b</code>.
Heartbeats are SSE comments and never show.</p>
<p id="empty">no messages yet</p>
<ol id="messages"></ol>
<script>
"use strict";
const KEEP = 1000;
const BASE = ["turbo-stream", "message", "pgbus:connected", "pgbus:gap-detected", "pgbus:shutdown"];
const $ = (id) => document.getElementById(id);
const q = new URLSearchParams(location.search);
const stream = q.get("stream") || "demo";
const extra = (q.get("events") || "").split(",").map((s) => s.trim())
  .filter((s) => s && s !== "open" && s !== "error"); // those two are the connection's own
const names = [...new Set(BASE.concat(extra))];
const url = "/streams/" + encodeURIComponent(stream);
let count = 0;

document.title = "pgbus_stream viewer: " + stream;
$("stream").textContent = stream;
$("stream-input").value = stream;
$("events-input").value = extra.join(",");
$("url").textContent = url;
$("names").textContent = names.join(", ");

function setState(s) { $("state").textContent = s; $("state").className = s; }

function two(n) { return String(n).padStart(2, "0"); }
function clock(d) { return two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds()); }

function part(tag, cls, text) {
  const e = document.createElement(tag);
  e.className = cls;
  e.textContent = text;
  return e;
}

function show(e) {
  const list = $("messages");
  const atBottom = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40;
  const li = document.createElement("li");
  // pgbus:* events carry no id of their own (lastEventId is the previous
  // message's, kept by the EventSource), so none is shown for them.
  const control = e.type.startsWith("pgbus:");
  li.dataset.event = e.type;
  li.dataset.id = e.lastEventId;
  if (control) li.className = "control " + e.type.slice(6).replace(/-.*/, "");
  li.append(part("span", "time", clock(new Date())), part("span", "event", e.type),
            part("span", "id", (!control && e.lastEventId) || "-"), part("pre", "data", e.data));
  list.append(li);
  while (list.children.length > KEEP) list.firstElementChild.remove();
  count++;
  $("count").textContent = String(count);
  if (e.lastEventId) $("last-id").textContent = e.lastEventId;
  $("empty").hidden = true;
  if (atBottom) window.scrollTo(0, document.documentElement.scrollHeight);
}

setState("connecting");
const es = new EventSource(url);
es.addEventListener("open", () => setState("open"));
es.addEventListener("error", () => {
  // CONNECTING: the browser retries on its own; CLOSED: it gave up (for
  // example a 404 for an unknown stream) and the page must be reloaded.
  setState(es.readyState === EventSource.CLOSED ? "closed" : "reconnecting");
});
for (const name of names) es.addEventListener(name, show);
</script>
</body>
</html>
)HTML";

} // namespace

const std::string &status_page_html() {
  static const std::string page = kPage;
  return page;
}

const std::string &viewer_page_html() {
  static const std::string page = kViewer;
  return page;
}

} // namespace pgbs::http
