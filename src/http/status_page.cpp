// The status page (GET /). Everything it needs is inline so that it works
// with no other route than /stats.json and no network access beyond the
// worker. Stream names reach the DOM through textContent only.
#include "http/status_page.hpp"

namespace pgbs::http {

namespace {

// Chart: the last kPoints one-second samples. Deliveries/s come from the
// difference of two successive delivered totals (sum over streams, so all
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
  <div class="card"><span>delivered (all streams)</span><b id="total-delivered">-</b></div>
  <div class="card"><span>deliveries/s</span><b id="rate">-</b></div>
  <div class="card"><span>this worker: dropped / catch-ups / ring overflows</span><b id="worker-totals">-</b></div>
</div>
<div class="legend"><i style="background:#1565c0"></i>deliveries/s (left axis)<i style="background:#e65100"></i>worst p99 latency, ms (right axis) &mdash; last 5 minutes</div>
<canvas id="chart"></canvas>
<table>
  <thead><tr><th>stream</th><th>subscribers</th><th>emitted</th><th>delivered</th><th>dropped</th><th>failed</th><th>p50 ms</th><th>p99 ms</th></tr></thead>
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
  const delivered = s.streams.reduce((a, x) => a + x.delivered, 0);
  let rate = null;
  if (last && s.now_us > last.now_us && delivered >= last.delivered)
    rate = (delivered - last.delivered) * 1e6 / (s.now_us - last.now_us);
  last = { now_us: s.now_us, delivered };
  const p99s = s.streams.map((x) => x.latency_p99_ms).filter((v) => v !== null);
  history.push({ t: s.now_us / 1e6, rate, p99: p99s.length ? Math.max(...p99s) : null });
  while (history.length > POINTS) history.shift();

  $("worker").textContent = "worker " + s.worker;
  $("state").textContent = s.database_ok ? "up" : "database error";
  $("state").className = s.database_ok ? "ok" : "bad";
  $("connections").textContent = String(s.connections);
  $("total-delivered").textContent = String(delivered);
  $("rate").textContent = rate === null ? "-" : rate.toFixed(1);
  $("worker-totals").textContent = [s.totals.dropped, s.totals.catch_ups, s.totals.ring_overflows].join(" / ");
  const body = $("streams");
  body.textContent = "";
  for (const x of s.streams) {
    const row = body.insertRow();
    cell(row, x.name); cell(row, x.subscribers); cell(row, x.emitted); cell(row, x.delivered);
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

} // namespace

const std::string &status_page_html() {
  static const std::string page = kPage;
  return page;
}

} // namespace pgbs::http
