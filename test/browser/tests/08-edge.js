// 8. The edge (README "Scaling out"): the README's nginx configuration, as
//    it is there (addresses, port and certificate replaced), in front of the
//    worker, with a second upstream that is down the whole time. HTTPS and
//    HTTP/2 with a certificate made here by openssl; 10 streams open in one
//    page on one origin (over HTTP/1.1 Chromium holds all but 6 back), all
//    live at once. A full worker's 503 reaches the browser as a 200 with the
//    worker's Retry-After as retry:. Then the PostgreSQL node is stopped at
//    once (immediate) mid-page and started again while a producer writes to
//    every stream: each stream ends with every committed message exactly
//    once, in order, and the browser never saw an answer other than 200.
'use strict';
const assert = require('node:assert/strict');
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

module.exports = {
  name: 'edge: README nginx over HTTPS + HTTP/2, 10 streams on one origin, node stopped and restarted, every message once, never a non-200',
  timeout: 180000,
  async run(t) {
    for (const s of STREAMS)
      await t.sql(`SELECT pgbus_stream.create_stream(${t.lit(s)}, public => true)
                   WHERE NOT EXISTS (SELECT 1 FROM pgbus_stream.streams WHERE name = ${t.lit(s)})`);
    await t.waitForWorker(STREAMS[N - 1], 15000);

    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgbus-edge-'));
    fs.chmodSync(dir, 0o755);
    const { cert, key } = makeCert(dir);
    const port = await freePort(), dead = await freePort();
    const conf = substitute(readmeBlock('## Scaling out'), [
      ['server 10.0.0.1:8080', `server 127.0.0.1:${t.cfg.ssePort}`],
      ['server 10.0.0.2:8080', `server 127.0.0.1:${dead}`], // a node that is down all along
      ['server 127.0.0.1:3000', `server 127.0.0.1:${t.cfg.pagePort}`],
      ['listen 443 ssl http2', `listen 127.0.0.1:${port} ssl http2`],
      ['/etc/ssl/certs/www.example.com.pem', cert],
      ['/etc/ssl/private/www.example.com.key', key],
    ]);
    const nginx = await startNginx({ conf, port, dir, label: 'edge' });
    try {
      await edge(t, nginx, port);
    } catch (e) {
      t.note(`nginx error log (tail):\n${nginx.errorLog().split('\n').slice(-15).join('\n')}`);
      throw e;
    } finally {
      await t.sql('ALTER SYSTEM RESET pgbus_stream.max_connections; SELECT pg_reload_conf()').catch(() => {});
      await nginx.stop();
    }
  },
};

async function edge(t, nginx, port) {
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
  t.note(`${N} streams live over ${protocols}, one origin ${origin}`);

  // A full worker: its 503 + Retry-After becomes a 200 with that retry.
  const live = Number(await t.sql('SELECT sum(connections) FROM pgbus_stream.workers()'));
  await t.sql(`ALTER SYSTEM SET pgbus_stream.max_connections = ${live}`);
  await t.sql('SELECT pg_reload_conf()');
  const direct = await t.waitFor(async () => {
    const r = await t.probeSSE(`/streams/${STREAMS[0]}`, { ms: 600 });
    return r.status === 503 ? r : null;
  }, { timeout: 10000, what: 'the worker to answer 503 once full' });
  const full = await getVia(port, `/streams/${STREAMS[0]}`);
  t.note(`full: worker says ${direct.status} Retry-After ${direct.headers['retry-after']}; through nginx ${full.status} ${JSON.stringify(full.body)}`);
  assert.equal(full.status, 200, 'a full node reaches the browser as 200');
  assert.match(full.headers['content-type'] || '', /^text\/event-stream/, '... text/event-stream');
  assert.equal(full.body.split('\n')[0], `retry: ${Number(direct.headers['retry-after']) * 1000}`,
    '... retry: the worker\'s Retry-After');
  await t.sql('ALTER SYSTEM RESET pgbus_stream.max_connections');
  await t.sql('SELECT pg_reload_conf()');
  await t.waitFor(async () => (await t.probeSSE(`/streams/${STREAMS[0]}`, { ms: 600 })).status === 200,
    { timeout: 10000, what: 'room again' });

  // The node stopped at once and started again, a producer on every stream.
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
  const t0 = Date.now();
  await t.pgCtl(['-m', 'immediate', '-w', 'stop']);
  const answersAtStop = answers.length;
  await t.sleep(4000); // the browser reconnects meanwhile: nginx answers for the node
  const whileDown = answers.slice(answersAtStop);
  await t.pgCtl(['-w', '-t', '60', '-l', t.cfg.pgLog, 'start']);
  await t.waitForWorker(STREAMS[0], 30000);
  t.note(`node down and back in ${Date.now() - t0} ms; ${whileDown.length} stream answers while it was down`);
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
    assert.ok(st[s].opens > opensBefore[s], `${s}: reconnected by itself (opens ${opensBefore[s]} -> ${st[s].opens})`);
  }
  assert.ok(await page.evaluate(() => Object.values(window.__es).every((es) => es.readyState === 1)), 'every EventSource OPEN at the end');
  const bad = answers.filter((a) => a.status !== 200 || !/^text\/event-stream/.test(a.type));
  assert.deepEqual(bad, [], 'the browser never got a stream answer other than 200 text/event-stream');
  const retries = whileDown.filter((a) => a.length !== undefined).length;
  t.note(`${answers.length} stream answers in all, every one 200 text/event-stream; ${retries} short retry answers while the node was down`);
  assert.ok(retries > 0, 'while the node was down the browser got short 200 retry answers');
  assert.match(nginx.errorLog(), /connect\(\) failed \(111: Connection refused\)/, 'nginx met the node that is down');
}
