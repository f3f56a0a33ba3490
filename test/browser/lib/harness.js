// Shared helpers for the browser tests: configuration (from run.sh's
// environment), SQL through psql, polling with deadlines, the browser, a
// cuttable TCP proxy and a direct SSE probe. Plain Node, no test framework.
'use strict';
const { execFile } = require('child_process');
const fs = require('fs');
const http = require('http');
const net = require('net');
const path = require('path');
const { createSSEParser } = require('./sse-parse');

const env = (k, d) => (process.env[k] !== undefined && process.env[k] !== '' ? process.env[k] : d);
const cfg = {
  pgHost: env('PGB_PGHOST', '/tmp'),
  pgPort: Number(env('PGB_PGPORT', '5432')),
  pgUser: env('PGB_PGUSER', 'pgbus'),
  pgDatabase: env('PGB_PGDATABASE', 'postgres'),
  ssePort: Number(env('PGB_SSE_PORT', '8080')),
  pagePort: Number(env('PGB_PAGE_PORT', '8090')),
  otherPort: Number(env('PGB_OTHER_PORT', '8091')),
  output: env('PGB_OUTPUT', path.resolve(__dirname, '..', 'output')),
  chromium: env('PGB_CHROMIUM', '/usr/bin/chromium'),
  pgData: env('PGB_PGDATA', ''),
  pgBin: env('PGB_PGBIN', '/usr/lib/postgresql/15/bin'),
  pgLog: env('PGB_PGLOG', ''),
  pgAs: env('PGB_PG_AS', '').split(' ').filter(Boolean), // runuser prefix when run as root
};
cfg.sseOrigin = `http://127.0.0.1:${cfg.ssePort}`;
cfg.pageOrigin = `http://127.0.0.1:${cfg.pagePort}`;  // listed in pgbus_stream.cors_origins
cfg.otherOrigin = `http://localhost:${cfg.otherPort}`; // not listed

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// SQL string literal (standard_conforming_strings is on).
const lit = (s) => "'" + String(s).replace(/'/g, "''") + "'";

// Runs SQL through psql (-At, ON_ERROR_STOP); resolves with stdout trimmed.
function sql(text, { timeout = 20000 } = {}) {
  const args = ['-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-h', cfg.pgHost, '-p', String(cfg.pgPort),
                '-U', cfg.pgUser, '-d', cfg.pgDatabase, '-c', text];
  return new Promise((resolve, reject) => {
    execFile('psql', args, { timeout, env: { ...process.env, PGCONNECT_TIMEOUT: '5' } }, (err, stdout, stderr) => {
      if (err) {
        err.message = `psql failed (${err.code ?? err.signal}): ${String(stderr).trim() || err.message}\n  SQL: ${text.slice(0, 300)}`;
        reject(err);
      } else resolve(String(stdout).trim());
    });
  });
}

// One committed broadcast (its own transaction); resolves with the msg_id.
async function broadcast(stream, data, event) {
  const q = `SELECT pgbus_stream.broadcast(${lit(stream)}, ${lit(data)}${event ? ', ' + lit(event) : ''})`;
  return Number(await sql(q));
}

// Payloads of every row a stream's queue and archive hold, in msg_id order:
// the ground truth of what was committed.
async function committedPayloads(stream) {
  const meta = await sql(`SELECT queue_schema || '|' || queue_table || '|' || coalesce(archive_table, '')
                          FROM pgbus_stream.streams WHERE name = ${lit(stream)}`);
  const [schema, table, archive] = meta.split('|');
  const qi = (s) => '"' + s.replace(/"/g, '""') + '"';
  let q = `SELECT msg_id, message->>'html' FROM ${qi(schema)}.${qi(table)}`;
  if (archive) q += ` UNION ALL SELECT msg_id, message->>'html' FROM ${qi(schema)}.${qi(archive)}`;
  const out = await sql(`SELECT coalesce(json_agg(html ORDER BY msg_id), '[]') FROM (${q}) AS r(msg_id, html)`);
  return JSON.parse(out);
}

// pg_ctl on the test cluster (as its OS user): pgCtl(['-m', 'immediate', 'stop']).
function pgCtl(args, { timeout = 90000 } = {}) {
  if (!cfg.pgData) return Promise.reject(new Error('PGB_PGDATA is not set (run through run.sh)'));
  const argv = [...cfg.pgAs, path.join(cfg.pgBin, 'pg_ctl'), '-D', cfg.pgData, ...args];
  return new Promise((resolve, reject) => {
    execFile(argv[0], argv.slice(1), { timeout }, (err, stdout, stderr) => {
      if (err) { err.message = `pg_ctl ${args.join(' ')} failed: ${String(stderr).trim() || err.message}`; reject(err); }
      else resolve(String(stdout).trim());
    });
  });
}

async function workerPids() {
  const out = await sql(`SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgbus_stream worker' ORDER BY pid`);
  return out ? out.split('\n').map(Number) : [];
}

// Announces a kill or exit the test causes on purpose ("(PID 123) was
// terminated by signal 9", "(PID 123) exited with exit code 1"): the logs
// stage of test/run_all.sh does not count it against the server log.
function announce(line) {
  fs.appendFileSync(path.join(cfg.output, 'postgres.log.expected_signals'), line + '\n');
}

// Polls fn() until it returns a truthy value; throws with `what` and the last
// value (or error) seen when the deadline passes.
async function waitFor(fn, { timeout = 10000, interval = 100, what = 'condition', describe } = {}) {
  const deadline = Date.now() + timeout;
  let last, lastErr;
  for (;;) {
    try { last = await fn(); lastErr = undefined; if (last) return last; } catch (e) { lastErr = e; }
    if (Date.now() >= deadline) {
      let detail = lastErr ? `last error: ${lastErr.message}` : `last value: ${JSON.stringify(last)}`;
      if (describe) { try { detail += `\n  state: ${await describe()}`; } catch (e) { /* ignore */ } }
      throw new Error(`timed out after ${timeout} ms waiting for ${what}; ${detail}`);
    }
    await sleep(interval);
  }
}

// Opens an SSE request from Node (no browser) and collects what arrives for
// `ms` milliseconds: status, headers, events, comments. For diagnostics and
// for "is the worker up" checks.
function probeSSE(pathAndQuery, { headers = {}, ms = 1000, port = cfg.ssePort } = {}) {
  return new Promise((resolve) => {
    const result = { status: null, headers: null, events: [], comments: [], error: null, raw: '' };
    const req = http.get({ host: '127.0.0.1', port, path: pathAndQuery, headers, timeout: ms + 2000 }, (res) => {
      result.status = res.statusCode; result.headers = res.headers;
      const p = createSSEParser({ onComment: (c) => result.comments.push(c) });
      res.setEncoding('utf8');
      res.on('data', (d) => { result.raw += d; result.events.push(...p.feed(d)); });
      res.on('error', () => {});
    });
    req.on('error', (e) => { result.error = e.message; });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    setTimeout(() => { req.destroy(); resolve(result); }, ms);
  });
}

// Waits until the worker answers GET /streams/<stream> with 200 and the
// pgbus:connected event.
async function waitForWorker(stream = 'chat', timeout = 30000) {
  return waitFor(async () => {
    const r = await probeSSE(`/streams/${stream}`, { ms: 700 });
    return r.status === 200 && r.events.some((e) => e.type === 'pgbus:connected');
  }, { timeout, interval: 300, what: `the worker to serve /streams/${stream} on port ${cfg.ssePort}` });
}

async function launchBrowser() {
  const { chromium } = require('playwright-core');
  // playwright-core gives every launch a fresh temporary --user-data-dir.
  return chromium.launch({
    executablePath: cfg.chromium,
    headless: true,
    chromiumSandbox: false,
    timeout: 60000,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync',
           '--disable-dev-shm-usage'],
  });
}

// A TCP proxy in front of the worker that the test can cut (every open
// connection reset) and pause (new connections held, not forwarded, until
// resume): a way to make the browser's EventSource reconnect on its own, at a
// moment the test chooses. Records each forwarded request's head.
class CutProxy {
  constructor(targetPort) {
    this.targetPort = targetPort;
    this.paused = false;
    this.pairs = new Set();
    this.held = [];
    this.requests = [];
    this.server = net.createServer((c) => this._accept(c));
  }
  listen() {
    return new Promise((resolve) => this.server.listen(0, '127.0.0.1', () => {
      this.port = this.server.address().port; resolve(this);
    }));
  }
  _accept(client) {
    const pair = { client, upstream: null, buf: [], head: '' };
    this.pairs.add(pair);
    client.on('error', () => {});
    client.on('close', () => { this.pairs.delete(pair); if (pair.upstream) pair.upstream.destroy(); });
    const onData = (d) => {
      if (pair.head !== null && pair.head.length < 16384) {
        pair.head += d.toString('latin1');
        const end = pair.head.indexOf('\r\n\r\n');
        if (end >= 0) { this._recordHead(pair.head.slice(0, end)); pair.head = null; }
      }
      if (pair.upstream && pair.upstream.readyState === 'open') pair.upstream.write(d); else pair.buf.push(d);
    };
    client.on('data', onData);
    if (this.paused) this.held.push(pair); else this._connect(pair);
  }
  _recordHead(head) {
    const [start, ...lines] = head.split('\r\n');
    const headers = {};
    for (const l of lines) { const i = l.indexOf(':'); if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim(); }
    this.requests.push({ at: Date.now(), start, headers });
  }
  _connect(pair) {
    if (pair.client.destroyed) return;
    const up = pair.upstream = net.connect(this.targetPort, '127.0.0.1', () => {
      for (const b of pair.buf) up.write(b);
      pair.buf = [];
    });
    up.on('data', (d) => pair.client.write(d));
    up.on('error', () => pair.client.destroy());
    up.on('close', () => pair.client.destroy());
  }
  cutAll() { for (const p of this.pairs) { p.client.resetAndDestroy ? p.client.resetAndDestroy() : p.client.destroy(); if (p.upstream) p.upstream.destroy(); } }
  pause() { this.paused = true; }
  resume() { this.paused = false; const h = this.held; this.held = []; for (const p of h) this._connect(p); }
  close() { this.cutAll(); return new Promise((r) => this.server.close(() => r())); }
}

// Highest msg_id a one-stream cursor token covers: "<epoch>~<H>[_<a>[-<b>](.<a>[-<b>])*]"
// or a plain "<H>" (the horizon, or the end of the last range above it).
function tokenHighest(tok) {
  const m = /^(?:\d+~)?(\d+)(?:_([0-9.\-]+))?$/.exec(tok || '');
  if (!m) return NaN;
  const nums = [m[1], ...(m[2] ? m[2].split(/[.\-]/) : [])].map(Number);
  return Math.max(...nums);
}

module.exports = { cfg, sleep, lit, sql, broadcast, committedPayloads, workerPids, pgCtl, announce, waitFor, probeSSE,
                   waitForWorker, launchBrowser, CutProxy, tokenHighest };
