'use strict';
// LISTEN/NOTIFY -> SSE relay: the hand-written fan-out that pgbus_stream replaces.
//
//   GET /streams/<channel>  SSE; the relay LISTENs on <channel> (once, on first
//                           subscriber) and writes every NOTIFY payload on it to
//                           every subscriber as  "id: <n>\ndata: <payload>\n\n"
//                           (n counts notifications per channel).
//   GET /healthz            200 "ok"
//
// Environment: PORT (default 8090), HOST (127.0.0.1), PG* / DATABASE_URL for
// the LISTEN connection (libpq-style variables, as the pg package reads them),
// HEARTBEAT_MS (15000), MAX_RSS_MB (4096).
//
// Like most hand-written relays it has no backpressure: a subscriber that
// cannot keep up makes node buffer without bound. As a guard for the shared
// benchmark machine (not a feature) the process exits with code 70 once its
// RSS passes MAX_RSS_MB; the benchmark reports that as "server_died".
const http = require('http');
const { Client } = require('pg');

const PORT = parseInt(process.env.PORT || '8090', 10);
const HOST = process.env.HOST || '127.0.0.1';
const HEARTBEAT_MS = parseInt(process.env.HEARTBEAT_MS || '15000', 10);
const CHANNEL_RE = /^\/streams\/([A-Za-z0-9_]{1,63})$/;

const channels = new Map(); // name -> { subs: Set<ServerResponse>, n: number, listening: Promise }
let listenChain = Promise.resolve(); // one LISTEN at a time on the single connection
let notifications = 0;

const pg = new Client(process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {});

pg.on('notification', (msg) => {
  notifications++;
  const ch = channels.get(msg.channel);
  if (!ch) return;
  ch.n++;
  const payload = (msg.payload || '').replace(/\r\n|\r|\n/g, '\ndata: ');
  const frame = `id: ${ch.n}\ndata: ${payload}\n\n`;
  for (const res of ch.subs) res.write(frame);
});
pg.on('error', (err) => {
  console.error('relay: postgres connection error:', err.message);
  process.exit(1);
});

function channel(name) {
  let ch = channels.get(name);
  if (!ch) {
    ch = { subs: new Set(), n: 0, listening: null };
    ch.listening = listenChain.then(() => pg.query(`LISTEN "${name}"`));
    listenChain = ch.listening.catch(() => {});
    channels.set(name, ch);
  }
  return ch;
}

const server = http.createServer((req, res) => {
  const path = req.url.split('?')[0];
  if (req.method === 'GET' && path === '/healthz') {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end(`ok subscribers=${server.subscribers} notifications=${notifications}\n`);
    return;
  }
  const m = CHANNEL_RE.exec(path);
  if (!m) { res.writeHead(404); res.end('not found\n'); return; }
  if (req.method !== 'GET') { res.writeHead(405); res.end('method not allowed\n'); return; }
  const ch = channel(m[1]);
  ch.listening.then(() => {
    if (req.destroyed) return;
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-cache, no-transform',
      'x-accel-buffering': 'no',
    });
    res.write('retry: 2000\n: relay open\n\n');
    ch.subs.add(res);
    server.subscribers++;
    req.on('close', () => {
      if (ch.subs.delete(res)) server.subscribers--;
    });
  }, (err) => {
    res.writeHead(500); res.end(`listen failed: ${err.message}\n`);
  });
});
server.subscribers = 0;
server.keepAliveTimeout = 0;
server.requestTimeout = 0;
server.headersTimeout = 60000;
server.maxConnections = 1000000;

const MAX_RSS = parseInt(process.env.MAX_RSS_MB || '4096', 10) * 1024 * 1024;
const guard = setInterval(() => {
  const rss = process.memoryUsage.rss();
  if (rss > MAX_RSS) {
    console.error(`relay: RSS ${Math.round(rss / 1048576)} MB above MAX_RSS_MB, exiting (unbounded buffering)`);
    process.exit(70);
  }
}, 100);
guard.unref();

const hb = setInterval(() => {
  const line = `: heartbeat ${Math.floor(Date.now() / 1000)}\n\n`;
  for (const ch of channels.values()) for (const res of ch.subs) res.write(line);
}, HEARTBEAT_MS);
hb.unref();

function shutdown() {
  server.close();
  for (const ch of channels.values()) for (const res of ch.subs) res.end();
  pg.end().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

pg.connect().then(() => {
  server.listen({ port: PORT, host: HOST, backlog: 8192 }, () => {
    console.error(`relay: listening on ${HOST}:${PORT}`);
  });
}, (err) => {
  console.error('relay: cannot connect to postgres:', err.message);
  process.exit(1);
});
