'use strict';
// Merges the per-scenario pieces written by bench/run.sh into <name>.json,
// summary.json and results.md, and draws throughput.png / latency.png with
// gnuplot when it is installed.
//   node bench/lib/report.js <results-dir>
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const dir = process.argv[2];
if (!dir) { console.error('usage: report.js <results-dir>'); process.exit(2); }

const readJson = (f) => {
  try { return JSON.parse(fs.readFileSync(f, 'utf8')); } catch (e) { return null; }
};

const raw = fs.existsSync(path.join(dir, 'raw')) ? path.join(dir, 'raw') : dir;
const run = readJson(path.join(raw, '_run.meta.json')) || {};
const metas = fs.readdirSync(raw)
  .filter((f) => f.endsWith('.meta.json') && f !== '_run.meta.json')
  .map((f) => f.slice(0, -'.meta.json'.length))
  .sort();

const rows = [];
for (const name of metas) {
  const meta = readJson(path.join(raw, `${name}.meta.json`)) || {};
  const r = { name, ...meta };
  const client = readJson(path.join(raw, `${name}.client.json`));
  const pub = readJson(path.join(raw, `${name}.publisher.json`));
  if (client) r.client = client;
  if (pub) r.publisher = pub;
  const pgb = path.join(raw, `${name}.pgbench.txt`);
  if (fs.existsSync(pgb)) r.pgbench_output = fs.readFileSync(pgb, 'utf8');
  fs.writeFileSync(path.join(dir, `${name}.json`), JSON.stringify(r, null, 2) + '\n');
  rows.push(r);
}
fs.writeFileSync(path.join(dir, 'summary.json'), JSON.stringify({ run, scenarios: rows }, null, 2) + '\n');

// ---------------------------------------------------------------- table ----
const SYS_ORDER = { pgbus: 0, nchan: 1, relay: 2 };
const SYS_NAME = { pgbus: 'pgbus_stream', nchan: 'nginx+nchan', relay: 'NOTIFY relay (node)' };
const fmt = (v, d = 0) => (v === undefined || v === null || Number.isNaN(v) ? '–' : Number(v).toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }));
const ms = (us) => (us === undefined || us === null ? '–' : fmt(us / 1000, us < 10000 ? 2 : 1));
const mb = (kb) => (kb ? fmt(kb / 1024, 1) : '–');
const pct = (cpu, wall) => (cpu !== undefined && wall ? fmt((100 * cpu) / wall, 0) + '%' : '–');
const bySys = (a, b) => (a.conns - b.conns) || ((SYS_ORDER[a.system] ?? 9) - (SYS_ORDER[b.system] ?? 9));
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const n = s.length; return n ? (n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : undefined; };
const num = (x) => typeof x === 'number' && !Number.isNaN(x);
// The median of f over the runs rs and its range, over the runs where f is a number.
function agg(rs, f) {
  const xs = rs.map(f).filter(num);
  return xs.length ? { m: median(xs), lo: Math.min(...xs), hi: Math.max(...xs), n: xs.length } : undefined;
}
// "median [min–max]" (the range only when there was more than one run)
const withRange = (a, f) => (a === undefined ? '–' : a.n > 1 ? `${f(a.m)} [${f(a.lo)}–${f(a.hi)}]` : f(a.m));
const mid = (a, f) => (a === undefined ? '–' : f(a.m));
const worst = (a, f) => (a === undefined ? '–' : f(a.hi));
const statusOf = (rs) => (rs.every((r) => r.status === 'ok') ? 'ok' : rs.map((r) => r.status || '?').filter((x) => x !== 'ok').join(','));
// The load and idle scenarios are repeated --rounds times: one group per
// system and setting, its runs in round order.
function groupRuns(rs, keyOf) {
  const groups = new Map();
  for (const r of rs) {
    const k = keyOf(r);
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(r);
  }
  for (const g of groups.values()) g.sort((a, b) => (a.round ?? 1) - (b.round ?? 1));
  return [...groups.values()];
}
const loadKey = (r) => `${r.scenario}|${r.system}|${r.conns}|${r.streams}|${r.stalled || 0}`;
const sameRound = (g, round) => g.find((x) => (x.round ?? 1) === (round ?? 1));

const md = [];
md.push(`# pgbus_stream benchmark — ${run.started || ''}`);
md.push('');
md.push(`Machine: ${run.host || '?'}, ${run.cores || '?'} cores; load client, publisher and servers share it. ` +
  `Run took ${run.elapsed_s || '?'} s${run.quick ? ' (--quick)' : ''}. Fixed rate ${run.rate} msg/s, ` +
  `${run.duration_s} s per run (first ${run.warmup_s} s not measured), pgbus_stream.workers = ${run.workers}.`);
md.push('');
if ((run.rounds || 1) > 1) {
  md.push(`Every load and idle scenario ran ${run.rounds} times, every system once per round (rounds one after another), ` +
    'so a slow spell of the machine hits every system of its round. A cell is the median over the runs; ' +
    '[min–max] follows the headline figures; loss and duplicate columns give the worst run.');
  md.push('');
}
if (run.failures) md.push(`**${run.failures} scenario(s) failed** — see the status column.\n`);

// The client's, publisher's, latency and loss parts of a load run's row.
function parts(r) {
  const c = r.client || {};
  return { c, p: r.publisher || {}, lat: (c.latency_us && c.latency_us.count) ? c.latency_us : {}, loss: c.loss || {} };
}

function loadTable(title, scen, note) {
  const groups = groupRuns(rows.filter((r) => r.scenario === scen), loadKey).sort((a, b) => bySys(a[0], b[0]));
  if (!groups.length) return;
  md.push(`## ${title}`);
  md.push('');
  if (note) { md.push(note); md.push(''); }
  md.push('| system | subscribers | runs | published msg/s | deliveries/s | p50 ms | p99 ms | max ms | lost (gaps) | not delivered at end | dups | conns ok/failed | server CPU | server peak RSS / PSS MB | client CPU s | status |');
  md.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|');
  for (const g of groups) {
    const r = g[0];
    const a = (f) => agg(g, (x) => f(parts(x)));
    const unknownTail = g.some((x) => parts(x).loss.expectation_known === false);
    md.push(`| ${SYS_NAME[r.system] || r.system} | ${fmt(r.conns)}${r.streams > 1 ? ` (${fmt(r.streams)} streams)` : ''} | ${g.length} | ` +
      `${mid(a((q) => q.p.rate_achieved), fmt)} | ${withRange(a((q) => q.c.deliveries_per_s), fmt)} | ` +
      `${withRange(a((q) => q.lat.p50), ms)} | ${withRange(a((q) => q.lat.p99), ms)} | ${mid(a((q) => q.lat.max), ms)} | ` +
      `${worst(a((q) => q.loss.missing_in_gaps), fmt)} | ${unknownTail ? '?' : worst(a((q) => q.loss.missing_tail), fmt)} | ` +
      `${worst(a((q) => q.loss.duplicates_total), fmt)} | ` +
      `${mid(a((q) => q.c.connections_ok), fmt)}/${worst(a((q) => q.c.connections_failed), fmt)} | ` +
      `${mid(agg(g, (x) => (x.wall_s ? x.server_cpu_s / x.wall_s : undefined)), (v) => fmt(100 * v, 0) + '%')} | ` +
      `${mid(agg(g, (x) => x.server_peak_rss_kb), mb)} / ${mid(agg(g, (x) => x.server_peak_pss_kb), mb)} | ` +
      `${mid(a((q) => (q.c.client ? q.c.client.cpu_user_s + q.c.client.cpu_sys_s : undefined)), (v) => fmt(v, 1))} | ${statusOf(g)} |`);
  }
  md.push('');
}

loadTable(`Fan-out at a fixed rate (${run.rate} msg/s, one stream)`, 'fanout',
  `Publisher: ${rows.find((r) => r.scenario === 'fanout')?.publisher_conns ?? '?'} connection(s) sharing the rate. ` +
  'Offered load is rate × subscribers deliveries/s. "published msg/s" below the rate means the publish call itself was too slow (a late publisher stops at duration + max(5 s, duration)); a server that cannot keep up shows lower deliveries/s, growing latency and undelivered messages.');
loadTable('Fan-out at saturation (publisher as fast as it can)', 'saturation',
  `Publisher: ${rows.find((r) => r.scenario === 'saturation')?.publisher_conns ?? '?'} connections, one message per transaction / request, no pacing.`);
loadTable('Fan-out at half the saturation rate (1,000 subscribers)', 'halfsat',
  'Each system at half the publish rate it reached in its own saturation run at 1,000 subscribers (see the rate column).');
loadTable('Many streams', 'streams', 'Each subscriber listens to one stream; the publisher round-robins over all streams.');

const slow = groupRuns(rows.filter((r) => r.scenario === 'slow'), loadKey)
  .sort((a, b) => ((SYS_ORDER[a[0].system] ?? 9) - (SYS_ORDER[b[0].system] ?? 9)) || ((a[0].stalled || 0) - (b[0].stalled || 0)));
if (slow.length) {
  md.push('## Slow clients (live subscribers beside clients that stop reading)');
  md.push('');
  md.push('Stalled clients read their first event, then never read again (4 KiB receive buffer). ' +
    '"p99 vs none" is the live subscribers\' p99 over the same system\'s run without stalled clients (of the same round); ' +
    '"server memory" is the RSS of the serving processes with every connection up and nothing published → its peak while publishing and draining; ' +
    '"growth per stalled client" is that rise less the rise of the run without stalled clients, per stalled client; ' +
    '"stalled connected at end" counts stalled clients still connected when the run ended (not disconnected by the server).');
  md.push('');
  md.push('| system | stalled (up) | live subscribers | runs | payload B | published msg/s | live deliveries/s | live p50 ms | live p99 ms | live max ms | live lost | dups | p99 vs none | server memory MB | growth per stalled client kB | stalled connected at end | status |');
  md.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|');
  const rise = (x) => (x && x.server_peak_rss_kb && x.rss_before_kb ? x.server_peak_rss_kb - x.rss_before_kb : undefined);
  for (const g of slow) {
    const r = g[0];
    const baseRuns = slow.find((b) => b[0].system === r.system && !b[0].stalled) || [];
    const a = (f) => agg(g, (x) => f(parts(x)));
    const p99 = (x) => (x && x.client && x.client.latency_us && x.client.latency_us.count ? x.client.latency_us.p99 : undefined);
    // against the run without stalled clients of the same round
    const ratio = agg(g, (x) => { const b = sameRound(baseRuns, x.round); return p99(b) && p99(x) ? p99(x) / p99(b) : undefined; });
    const growth = agg(g, (x) => { const b = sameRound(baseRuns, x.round); return rise(x) !== undefined && rise(b) !== undefined ? (rise(x) - rise(b)) / x.stalled : undefined; });
    md.push(`| ${SYS_NAME[r.system] || r.system} | ${fmt(r.stalled || 0)}${r.stalled ? ` (${mid(agg(g, (x) => x.stalled_up), fmt)})` : ''} | ${fmt(r.conns)} | ${g.length} | ${fmt(r.pad)} | ` +
      `${mid(a((q) => q.p.rate_achieved), fmt)} | ${withRange(a((q) => q.c.deliveries_per_s), fmt)} | ` +
      `${withRange(a((q) => q.lat.p50), ms)} | ${withRange(a((q) => q.lat.p99), ms)} | ${mid(a((q) => q.lat.max), ms)} | ` +
      `${worst(a((q) => q.loss.missing_in_gaps), fmt)} | ${worst(a((q) => q.loss.duplicates_total), fmt)} | ` +
      `${r.stalled ? withRange(ratio, (v) => fmt(v, 2) + '×') : '–'} | ` +
      `${mid(agg(g, (x) => x.rss_before_kb), mb)} → ${mid(agg(g, (x) => x.server_peak_rss_kb), mb)} | ` +
      `${r.stalled ? withRange(growth, (v) => fmt(v, 1)) : '–'} | ` +
      `${r.established_at_end === undefined ? '–' : mid(agg(g, (x) => x.established_at_end), fmt)} | ${statusOf(g)} |`);
  }
  md.push('');
}

const idle = groupRuns(rows.filter((r) => r.scenario === 'idle'), loadKey).sort((a, b) => bySys(a[0], b[0]));
if (idle.length) {
  md.push('## Idle connections (memory per connection)');
  md.push('');
  md.push('| system | held | runs | RSS before → after MB | PSS before → after MB | per connection RSS / PSS kB | server CPU s while held | status |');
  md.push('|---|---:|---:|---:|---:|---:|---:|---|');
  for (const g of idle) {
    const r = g[0];
    const per = (k0, k1) => agg(g, (x) => (x.connections_held ? (x[k1] - x[k0]) / x.connections_held : undefined));
    const one = (v) => fmt(v, 1);
    md.push(`| ${SYS_NAME[r.system] || r.system} | ${mid(agg(g, (x) => x.connections_held || 0), fmt)} of ${fmt(r.conns)} | ${g.length} | ` +
      `${mid(agg(g, (x) => x.rss_before_kb), mb)} → ${mid(agg(g, (x) => x.rss_after_kb), mb)} | ` +
      `${mid(agg(g, (x) => x.pss_before_kb), mb)} → ${mid(agg(g, (x) => x.pss_after_kb), mb)} | ` +
      `${withRange(per('rss_before_kb', 'rss_after_kb'), one)} / ${withRange(per('pss_before_kb', 'pss_after_kb'), one)} | ` +
      `${mid(agg(g, (x) => x.server_cpu_s), (v) => fmt(v, 2))} | ${statusOf(g)} |`);
  }
  md.push('');
}

const prod = rows.filter((r) => r.scenario === 'producer');
if (prod.length) {
  md.push('## Producer cost (pgbench, one INSERT per transaction into a PGMQ-layout table)');
  md.push('');
  md.push('Variants interleaved round by round; tps is the median over rounds [min–max], "vs plain INSERT" the median of the per-round ratios.');
  md.push('');
  md.push('| variant | clients | synchronous_commit | rounds | tps [range] | avg latency ms | PostgreSQL CPU | of it pgbus_stream workers | CPU µs per INSERT | vs plain INSERT [range] | status |');
  md.push('|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|');
  const order = { plain: 0, pgbus_unwatched: 1, pgbus_watched: 2, pgbus_hook: 2, notify_trigger: 3 };
  const VAR = {
    plain: 'plain INSERT',
    pgbus_unwatched: 'INSERT, attached, nobody connected',
    pgbus_watched: 'INSERT, attached, 1 live + 1 stalled subscriber',
    pgbus_hook: 'INSERT, table attached to pgbus_stream',
    notify_trigger: 'INSERT + row trigger pg_notify',
  };
  const prodKey = (r) => `${r.clients}|${r.synchronous_commit || 'on'}|${r.variant}`;
  const groups = new Map(groupRuns(prod, prodKey).map((g) => [prodKey(g[0]), g]));
  const keys = [...groups.keys()].sort((a, b) => {
    const [ca, sa, va] = a.split('|'), [cb, sb, vb] = b.split('|');
    return (ca - cb) || sa.localeCompare(sb) || ((order[va] ?? 9) - (order[vb] ?? 9));
  });
  for (const k of keys) {
    const g = groups.get(k);
    const [clients, sc, variant] = k.split('|');
    const base = groups.get(`${clients}|${sc}|plain`) || [];
    const tps = g.map((r) => r.tps);
    const ratios = g.map((r) => { const b = sameRound(base, r.round); return b && b.tps ? (100 * r.tps) / b.tps : undefined; })
      .filter((x) => x !== undefined);
    const rel = ratios.length ? `${fmt(median(ratios), 0)}% [${fmt(Math.min(...ratios), 0)}–${fmt(Math.max(...ratios), 0)}]` : '–';
    const cpu = median(g.map((r) => r.server_cpu_s));
    const wcpu = median(g.map((r) => r.workers_cpu_s ?? 0));
    // PostgreSQL CPU per committed INSERT, every PostgreSQL process included
    const us = median(g.map((r) => (r.tps ? (1e6 * r.server_cpu_s) / (r.tps * r.duration_s) : 0)));
    const st = statusOf(g);
    md.push(`| ${VAR[variant] || variant} | ${clients} | ${sc} | ${g.length} | ${fmt(median(tps))} [${fmt(Math.min(...tps))}–${fmt(Math.max(...tps))}] | ` +
      `${fmt(median(g.map((r) => r.latency_avg_ms)), 3)} | ${pct(cpu, g[0].duration_s)} | ${pct(wcpu, g[0].duration_s)} | ${fmt(us, 1)} | ${rel} | ${st} |`);
  }
  md.push('');
}

md.push('## How to read this');
md.push('');
md.push('- Latency: publisher clock just before the publish call (SQL statement incl. commit, or HTTP POST) to the client reading the event; same host, CLOCK_REALTIME. Log-linear histogram, ~1% resolution.');
md.push('- deliveries/s: stamped events received by all subscribers in the measurement window, divided by the time between the first and last of them.');
md.push('- Loss, summed over connections: per connection and publisher, `seq` must go 1, 2, 3, … up to the last one the publisher committed. "lost (gaps)": seqs skipped while later ones arrived. "not delivered at end": seqs after the last one received, 3 s after the publisher stopped (lost, or still queued in a lagging server); `?` = the publisher\'s final counts never reached the client. dups: a seq at or below one already seen.');
md.push('- server CPU: 100% = one core, over the publish + drain time. pgbus_stream and the relay include every PostgreSQL process (the publisher\'s backend too; the relay adds node); nchan counts nginx master + worker.');
md.push('- server memory: pgbus_stream worker processes; the nginx worker; the node process. PSS splits shared pages (shared_buffers, nchan shm) among their users.');
md.push('- Producer cost: the NOTIFY trigger has no listener attached; the watched pgbus_stream table has one live subscriber and one that stopped reading (4 kB receive buffer) connected for the whole scenario, the unwatched one none. synchronous_commit is set for the pgbench sessions only.');
md.push('');
fs.writeFileSync(path.join(dir, 'results.md'), md.join('\n'));

// ---------------------------------------------------------------- plots ----
const gp = spawnSync('sh', ['-c', 'command -v gnuplot'], { encoding: 'utf8' });
if (gp.status !== 0) {
  console.error('report: gnuplot not installed, no plots');
  process.exit(0);
}
const series = {};   // mode -> system -> [[n, dps, p50ms, p99ms]], medians over the rounds
const plotted = rows.filter((r) => (r.scenario === 'fanout' || r.scenario === 'saturation') && r.client && r.status === 'ok' &&
  r.client.deliveries_per_s && r.client.latency_us && r.client.latency_us.count);
for (const g of groupRuns(plotted, loadKey)) {
  const r = g[0];
  const m = (f) => agg(g, f).m;
  ((series[r.scenario] ||= {})[r.system] ||= []).push([r.conns, m((x) => x.client.deliveries_per_s),
    m((x) => x.client.latency_us.p50 / 1000), m((x) => x.client.latency_us.p99 / 1000)]);
}
const plotDir = path.join(dir, 'plot');
fs.mkdirSync(plotDir, { recursive: true });
const COLORS = { pgbus: '#1f77b4', nchan: '#2ca02c', relay: '#d62728' };
const panels = { thr: [], lat: [] };
for (const mode of ['fanout', 'saturation']) {
  const thr = [];
  const lat = [];
  for (const sys of Object.keys(series[mode] || {}).sort((a, b) => (SYS_ORDER[a] ?? 9) - (SYS_ORDER[b] ?? 9))) {
    const pts = series[mode][sys].sort((a, b) => a[0] - b[0]);
    const f = path.join(plotDir, `${mode}_${sys}.dat`);
    fs.writeFileSync(f, '# subscribers deliveries_per_s p50_ms p99_ms\n' + pts.map((p) => p.join(' ')).join('\n') + '\n');
    const col = COLORS[sys] || '#000000';
    thr.push(`'${f}' using 1:2 with linespoints lw 2 pt 7 lc rgb '${col}' title '${SYS_NAME[sys] || sys}'`);
    lat.push(`'${f}' using 1:3 with linespoints lw 2 pt 7 lc rgb '${col}' title '${SYS_NAME[sys] || sys} p50'`);
    lat.push(`'${f}' using 1:4 with linespoints lw 2 dt 2 pt 5 lc rgb '${col}' title '${SYS_NAME[sys] || sys} p99'`);
  }
  const title = mode === 'fanout' ? `fixed rate ${run.rate} msg/s` : 'saturation';
  if (thr.length) panels.thr.push({ title, plots: thr });
  if (lat.length) panels.lat.push({ title, plots: lat });
}
function draw(file, list, ylabel) {
  if (!list.length) return;
  const g = [];
  g.push(`set terminal pngcairo noenhanced size ${600 * list.length},520 font 'sans,10'`);
  g.push(`set output '${path.join(dir, file)}'`);
  g.push(`set multiplot layout 1,${list.length}`);
  g.push('set logscale xy');
  g.push("set xlabel 'subscribers'");
  g.push(`set ylabel '${ylabel}'`);
  g.push('set grid');
  g.push('set key below');
  for (const p of list) {
    g.push(`set title '${p.title}'`);
    g.push('plot ' + p.plots.join(', \\\n     '));
  }
  g.push('unset multiplot');
  const script = path.join(plotDir, file.replace('.png', '.gp'));
  fs.writeFileSync(script, g.join('\n') + '\n');
  const res = spawnSync('gnuplot', [script], { encoding: 'utf8' });
  if (res.status !== 0) console.error(`report: gnuplot failed for ${file}: ${res.stderr}`);
}
draw('throughput.png', panels.thr, 'deliveries/s');
draw('latency.png', panels.lat, 'latency (ms)');
const pngs = ['throughput.png', 'latency.png'].filter((f) => fs.existsSync(path.join(dir, f)));
if (pngs.length) {
  fs.appendFileSync(path.join(dir, 'results.md'), '\n## Plots\n\n' + pngs.map((f) => `![${f}](${f})`).join('\n') + '\n');
}
