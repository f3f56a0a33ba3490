// 8. The edge (README "Scaling out"): the README's nginx configuration, as
//    it is there (addresses, port and certificate replaced), in front of two
//    nodes: the test's cluster (the primary) and a streaming hot standby of
//    it made here (pg_basebackup), both with the extension. First with the
//    standby not started yet (an upstream that is down), then with it up.
//    HTTPS and HTTP/2 with a certificate made here by openssl; 10 streams
//    open in one page on one origin (over HTTP/1.1 Chromium holds all but 6
//    back), all live at once, spread over both nodes. A full worker's 503
//    reaches the browser as a 200 with the worker's Retry-After as retry:.
//    Then the primary is stopped at once (immediate) mid-page and started
//    again while a producer writes to every stream: the streams it served
//    move to the standby with their Last-Event-ID, and each stream ends with
//    every committed message exactly once, in order; the browser never saw
//    an answer other than 200.
'use strict';
const assert = require('node:assert/strict');
const { execFile } = require('child_process');
const fs = require('fs');
const https = require('https');
const os = require('os');
const path = require('path');
const { startNginx, readmeBlock, substitute, makeCert, freePort } = require('../lib/nginx');

const N = 10;
const STREAMS = Array.from({ length: N }, (_, i) => `edge_${i}`);

// GET through nginx from Node (HTTP/1.1 over TLS, the test's own certificate).
function getVia(port, p, ms = 1500) {
  return new Promise((resolve) => {
    const out = { status: null, headers: null, body: '', error: null };
    const req = https.get({ host: '127.0.0.1', port, path: p, rejectUnauthorized: false }, (res) => {
      out.status = res.statusCode; out.headers = res.headers;
      res.setEncoding('utf8');
      res.on('data', (d) => { out.body += d; });
      res.on('end', () => resolve(out));
    });
    req.on('error', (e) => { out.error = e.message; resolve(out); });
    setTimeout(() => { req.destroy(); resolve(out); }, ms);
  });
}

// Runs argv (the cluster's OS user's prefix first when run as root).
function run(argv, timeout = 120000) {
  return new Promise((resolve, reject) => {
    execFile(argv[0], argv.slice(1), { timeout }, (err, stdout, stderr) => {
      if (err) { err.message = `${path.basename(argv[0])} failed: ${String(stderr).trim() || err.message}`; reject(err); }
      else resolve(String(stdout).trim());
    });
  });
}

// A streaming hot standby of the test's cluster, in the cluster's work
// directory (run.sh stops it if the test cannot): its own port and worker
// port, replication retried every 500 ms while the primary is down.
async function startStandby(t) {
  const work = path.dirname(t.cfg.pgData);
  const sb = { data: path.join(work, 'standby'), log: path.join(work, 'standby.log'),
               pgPort: await freePort(), ssePort: await freePort() };
  const bin = (b) => [...t.cfg.pgAs, path.join(t.cfg.pgBin, b)];
  await run([...bin('pg_basebackup'), '-D', sb.data, '-h', t.cfg.pgHost, '-p', String(t.cfg.pgPort),
             '-U', t.cfg.pgUser, '-R', '-X', 'stream', '-c', 'fast', '--no-sync']);
  fs.appendFileSync(path.join(sb.data, 'postgresql.conf'),
    `\n# the standby of 08-edge\nport = ${sb.pgPort}\npgbus_stream.port = ${sb.ssePort}\n` +
    'hot_standby = on\nwal_retrieve_retry_interval = 500ms\n');
  sb.ctl = (args) => run([...bin('pg_ctl'), '-D', sb.data, ...args]);
  sb.sql = (text) => run(['psql', '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-h', t.cfg.pgHost,
                          '-p', String(sb.pgPort), '-U', t.cfg.pgUser, '-d', t.cfg.pgDatabase, '-c', text], 20000);
  sb.start = () => sb.ctl(['-w', '-t', '60', '-l', sb.log, 'start']);
  sb.stop = async () => {
    if (fs.existsSync(path.join(sb.data, 'postmaster.pid'))) await sb.ctl(['-m', 'fast', '-w', '-t', '30', 'stop']).catch(() => {});
    try { fs.copyFileSync(sb.log, path.join(t.cfg.output, 'standby.log')); } catch (e) { /* none written */ }
  };
  return sb;
}

// The edge streams each node's worker holds a connection for.
async function servedBy(query) {
  const out = await query(`SELECT coalesce(string_agg(streams, ','), '') FROM pgbus_stream.connections()`);
  return new Set(out.split(',').filter((s) => STREAMS.includes(s)));
}

module.exports = {
  name: 'edge: README nginx over HTTPS + HTTP/2 to a primary and its hot standby, 10 streams on one origin, primary stopped and restarted, every message once, never a non-200',
  timeout: 240000,
  async run(t) {
    for (const s of STREAMS)
      await t.sql(`SELECT pgbus_stream.create_stream(${t.lit(s)}, public => true)
                   WHERE NOT EXISTS (SELECT 1 FROM pgbus_stream.streams WHERE name = ${t.lit(s)})`);
    await t.waitForWorker(STREAMS[N - 1], 15000);
    const sb = await startStandby(t);

    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgbus-edge-'));
    fs.chmodSync(dir, 0o755);
    const { cert, key } = makeCert(dir);
    const port = await freePort();
    const conf = substitute(readmeBlock('## Scaling out'), [
      ['server 10.0.0.1:8080', `server 127.0.0.1:${t.cfg.ssePort}`],
      ['server 10.0.0.2:8080', `server 127.0.0.1:${sb.ssePort}`],
      ['server 127.0.0.1:3000', `server 127.0.0.1:${t.cfg.pagePort}`],
      ['listen 443 ssl http2', `listen 127.0.0.1:${port} ssl http2`],
      ['/etc/ssl/certs/www.example.com.pem', cert],
      ['/etc/ssl/private/www.example.com.key', key],
    ]);
    const nginx = await startNginx({ conf, port, dir, label: 'edge' });
    try {
      await edge(t, nginx, port, sb);
    } catch (e) {
      t.note(`nginx error log (tail):\n${nginx.errorLog().split('\n').slice(-15).join('\n')}`);
      throw e;
    } finally {
      await t.sql('ALTER SYSTEM RESET pgbus_stream.max_connections; SELECT pg_reload_conf()').catch(() => {});
      await nginx.stop();
      await sb.stop();
    }
  },
};

async function edge(t, nginx, port, sb) {
  await sb.start();
  await t.waitFor(async () => {
    const r = await t.probeSSE(`/streams/${STREAMS[N - 1]}`, { ms: 700, port: sb.ssePort });
    return r.status === 200 && r.events.some((e) => e.type === 'pgbus:connected');
  }, { timeout: 30000, interval: 300, what: `the standby's worker to serve on port ${sb.ssePort}` });
  assert.equal(await sb.sql('SELECT in_recovery FROM pgbus_stream.replication()'), 't', 'the second node is a standby');

  const origin = `https://127.0.0.1:${port}`;
  const page = await t.openPage('edge', `${origin}/edge.html?streams=${STREAMS.join(',')}`, { ignoreHTTPSErrors: true });
  // Every answer to a stream request as the browser got it (DevTools protocol).
  const answers = [];
  const cdp = await page.context().newCDPSession(page);
  cdp.on('Network.responseReceived', (e) => {
    if (!e.response.url.includes('/streams/')) return;
    const hdr = {};
    for (const [k, v] of Object.entries(e.response.headers)) hdr[k.toLowerCase()] = v;
    answers.push({ url: e.response.url, status: e.response.status, protocol: e.response.protocol,
                   type: hdr['content-type'] || '', length: hdr['content-length'], at: Date.now() });
  });
  await cdp.send('Network.enable');
  await page.reload({ waitUntil: 'load' });
  const state = () => page.evaluate(() => window.__edge);
  await t.waitFor(async () => Object.values(await state()).every((s) => s.connected >= 1),
    { timeout: 20000, what: `all ${N} streams connected`,
      describe: async () => JSON.stringify(Object.entries(await state()).map(([k, s]) => [k, s.connected, s.readyStates])) });

  const run = Date.now().toString(36);
  const mine = (d) => d.startsWith(`e-${run}-`);
  const dom = async () => Object.fromEntries(Object.entries(await state())
    .map(([k, s]) => [k, s.messages.map((m) => m.data).filter(mine)]));

  // All ten live at once: one message each, all arrive while all stay open.
  for (const s of STREAMS) await t.broadcast(s, `e-${run}-first-${s}`);
  await t.waitFor(async () => { const d = await dom(); return STREAMS.every((s) => d[s].length === 1); },
    { timeout: 15000, what: 'the first message on every one of the 10 streams' });
  const protocols = [...new Set(answers.map((a) => a.protocol))];
  assert.deepEqual(protocols, ['h2'], `every stream over HTTP/2 (saw ${protocols})`);
  const onPrimary = await servedBy(t.sql), onStandbyFirst = await servedBy(sb.sql);
  t.note(`${N} streams live over ${protocols}, one origin ${origin}: ${onPrimary.size} on the primary, ${onStandbyFirst.size} on the standby`);
  assert.ok(onPrimary.size > 0 && onStandbyFirst.size > 0 && onPrimary.size + onStandbyFirst.size === N,
    `nginx spread the ${N} streams over both nodes (${[...onPrimary]} | ${[...onStandbyFirst]})`);

  // A full worker: its 503 + Retry-After becomes a 200 with that retry.
  const live = Number(await t.sql('SELECT sum(connections) FROM pgbus_stream.workers()'));
  await t.sql(`ALTER SYSTEM SET pgbus_stream.max_connections = ${live}`);
  await t.sql('SELECT pg_reload_conf()');
  const direct = await t.waitFor(async () => {
    const r = await t.probeSSE(`/streams/${STREAMS[0]}`, { ms: 600 });
    return r.status === 503 ? r : null;
  }, { timeout: 10000, what: 'the worker to answer 503 once full' });
  // Round robin: within a few requests one lands on the full primary (the
  // others are the standby's streams, cut after 1.5 s).
  const tries = [];
  let full;
  while (!full && tries.length < 6) {
    const r = await getVia(port, `/streams/${STREAMS[0]}`);
    tries.push(r);
    if (r.body.startsWith('retry:')) full = r;
  }
  assert.deepEqual(tries.map((r) => r.status), tries.map(() => 200), 'every answer through nginx a 200');
  assert.ok(full, `one of ${tries.length} requests met the full primary`);
  t.note(`full: worker says ${direct.status} Retry-After ${direct.headers['retry-after']}; through nginx ${full.status} ${JSON.stringify(full.body)}`);
  assert.equal(full.status, 200, 'a full node reaches the browser as 200');
  assert.match(full.headers['content-type'] || '', /^text\/event-stream/, '... text/event-stream');
  assert.equal(full.body.split('\n')[0], `retry: ${Number(direct.headers['retry-after']) * 1000}`,
    '... retry: the worker\'s Retry-After');
  await t.sql('ALTER SYSTEM RESET pgbus_stream.max_connections');
  await t.sql('SELECT pg_reload_conf()');
  await t.waitFor(async () => (await t.probeSSE(`/streams/${STREAMS[0]}`, { ms: 600 })).status === 200,
    { timeout: 10000, what: 'room again' });

  // The primary stopped at once and started again, a producer on every stream.
  const ok = [], failed = [];
  let stop = false, i = 0;
  const producing = (async () => {
    while (!stop) {
      const s = STREAMS[i % N], label = `e-${run}-p${++i}-${s}`;
      try { await t.broadcast(s, label); ok.push(label); } catch (e) { failed.push(label); }
      await t.sleep(60);
    }
  })();
  await t.sleep(1500);
  const opensBefore = Object.fromEntries(Object.entries(await state()).map(([k, s]) => [k, s.opens]));
  // Counted before the stop is sent: pg_ctl returns only once the postmaster
  // is gone, and the browser may have reconnected by then.
  const answersAtStop = answers.length;
  const t0 = Date.now();
  await t.pgCtl(['-m', 'immediate', '-w', 'stop']);
  const stopMs = Date.now() - t0;
  // The browser reconnects meanwhile, each stream with its Last-Event-ID:
  // nginx, refused by the primary, hands it to the standby. The standby's
  // worker counts a connection once its answer is on the way, so the wait
  // also takes the browser's own record of the answers.
  const onStandby = await t.waitFor(async () => {
    const got = await servedBy(sb.sql);
    if (got.size !== N || answers.length - answersAtStop < onPrimary.size) return null;
    const st = await state();
    return [...onPrimary].every((s) => st[s].opens > opensBefore[s]) ? got : null;
  }, { timeout: 20000, what: `the standby to serve all ${N} streams while the primary is down, each of the primary's answered again`,
       describe: async () => `standby serves ${JSON.stringify([...(await servedBy(sb.sql))])}; ` +
         `${answers.length - answersAtStop} answers since the stop: ${JSON.stringify(answers.slice(answersAtStop).map((a) => a.url.replace(/^.*\/streams\//, '')))}; ` +
         `opens ${JSON.stringify(Object.entries(await state()).map(([k, v]) => [k, opensBefore[k], v.opens]))}` });
  const whileDown = answers.slice(answersAtStop);
  await t.sleep(1000);
  await t.pgCtl(['-w', '-t', '60', '-l', t.cfg.pgLog, 'start']);
  await t.waitForWorker(STREAMS[0], 30000);
  t.note(`primary down and back in ${Date.now() - t0} ms (pg_ctl stop ${stopMs} ms); ${whileDown.length} stream answers while it was down, ` +
         `${onStandby.size} streams on the standby`);
  await t.sleep(3000);
  stop = true;
  await producing;
  for (const s of STREAMS) await t.broadcast(s, `e-${run}-last-${s}`);

  const truth = {};
  for (const s of STREAMS) truth[s] = (await t.committedPayloads(s)).filter(mine);
  t.note(`producer: ${ok.length} ok, ${failed.length} failed calls (committed anyway: ${failed.filter((l) => Object.values(truth).some((v) => v.includes(l))).length})`);
  for (const l of ok) assert.ok(Object.values(truth).some((v) => v.includes(l)), `${l} reported committed but not in the table`);
  await t.waitFor(async () => { const d = await dom(); return STREAMS.every((s) => truth[s].every((x) => d[s].includes(x))); },
    { timeout: 30000, what: 'every committed message on its stream',
      describe: async () => { const d = await dom(); return JSON.stringify(STREAMS.map((s) => [s, truth[s].filter((x) => !d[s].includes(x)).slice(0, 5)])); } });
  await t.sleep(1500);
  const d = await dom(), st = await state();
  for (const s of STREAMS) {
    assert.deepEqual(d[s], truth[s], `${s}: exactly the committed messages, once each, in commit order`);
    if (onPrimary.has(s))
      assert.ok(st[s].opens > opensBefore[s], `${s}: moved to the standby by itself (opens ${opensBefore[s]} -> ${st[s].opens})`);
  }
  assert.ok(await page.evaluate(() => Object.values(window.__es).every((es) => es.readyState === 1)), 'every EventSource OPEN at the end');
  const bad = answers.filter((a) => a.status !== 200 || !/^text\/event-stream/.test(a.type));
  assert.deepEqual(bad, [], 'the browser never got a stream answer other than 200 text/event-stream');
  const retries = whileDown.filter((a) => a.length !== undefined).length;
  t.note(`${answers.length} stream answers in all, every one 200 text/event-stream; ${retries} short retry answers while the primary was down`);
  assert.ok(whileDown.length >= onPrimary.size,
    `while the primary was down each of its ${onPrimary.size} streams was answered again (${whileDown.length} answers)`);
  assert.match(nginx.errorLog(), /connect\(\) failed \(111: Connection refused\)/, 'nginx met the node that is down');
}
