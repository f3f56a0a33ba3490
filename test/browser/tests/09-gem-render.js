// 9. A multi-line Rails partial in the pgbus gem's element renders as the
//    gem's own streamer makes it render: the gem's route sends one data
//    line with every CR and LF removed, which the element's fetch parser
//    (each data line trimmed, lines joined with nothing) and its later
//    EventSource read alike. Same origin (the README's nginx location
//    block) and cross-origin (the gem's streams_path set to the worker's
//    absolute URL, cors_origins listing the page's origin), on the first
//    connection and after a reconnect (the worker restarted under the page).
'use strict';
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { startNginx, readmeLocation } = require('../lib/nginx');

const STREAM = 'gem_render';

function signedName(name, key) {
  const data = Buffer.from(JSON.stringify(name)).toString('base64');
  return `${data}--${crypto.createHmac('sha256', key).update(data).digest('hex')}`;
}

// A partial as Rails renders it: indented lines, LF and a CRLF.
const partial = (k) => `<turbo-stream action="append" target="messages">\n  <template>\n    <li class="msg" data-k="${k}">\n      Hello\r\n      world\n    </li>\n  </template>\n</turbo-stream>\n`;
// What the gem's streamer makes the page show: the payload without CR/LF.
const GEM_TEXT = '      Hello      world    ';

module.exports = {
  name: 'gem element: a multi-line partial renders as with the gem, same-origin and cross-origin, first connection and after a reconnect',
  timeout: 150000,
  async run(t) {
    if (!(await t.sql(`SELECT count(*) FROM pgbus_stream.streams WHERE name = ${t.lit(STREAM)}`)).startsWith('1'))
      await t.sql(`SELECT pgbus_stream.create_stream(${t.lit(STREAM)})`);
    const token = signedName(STREAM, 'browser-signing-secret');
    const run = Date.now().toString(36);
    const nginx = await startNginx({
      label: 'nginx-gem-render',
      server: `${readmeLocation(t.cfg.ssePort)}\n    location / { proxy_pass http://127.0.0.1:${t.cfg.pagePort}; }`,
    });
    try {
      const queue = await t.sql(`SELECT queue_schema || '.' || queue_table FROM pgbus_stream.streams WHERE name = ${t.lit(STREAM)}`);
      const watermark = await t.sql(`SELECT coalesce(max(msg_id), 0) FROM ${queue}`);
      const pages = {
        'same-origin': await t.openPage('gem-render-same-origin',
          `${nginx.origin}/gem-element.html?token=${encodeURIComponent(token)}&since=${watermark}`),
        'cross-origin': await t.openPage('gem-render-cross-origin',
          `${t.cfg.pageOrigin}/gem-element.html?token=${encodeURIComponent(token)}&since=${watermark}` +
          `&streams_path=${encodeURIComponent(`${t.cfg.sseOrigin}/pgbus/streams`)}`),
      };
      const rendered = (page) => page.$$eval('#messages li.msg', (lis) =>
        lis.map((li) => ({ k: li.dataset.k, text: li.textContent })));
      const ofRun = async (page) => (await rendered(page)).filter((m) => m.k && m.k.startsWith(run));
      const sent = [];
      const send = async (k) => { await t.broadcast(STREAM, partial(`${run}-${k}`)); sent.push(`${run}-${k}`); };
      const allThere = (what, timeout = 15000) => Promise.all(Object.entries(pages).map(([where, page]) =>
        t.waitFor(async () => (await ofRun(page)).length >= sent.length,
          { timeout, what: `${where}: ${what}`,
            describe: async () => JSON.stringify({ dom: await ofRun(page), gem: await page.evaluate(() => window.__gem) }) })));
      const check = async (phase) => {
        for (const [where, page] of Object.entries(pages)) {
          const got = await ofRun(page);
          assert.deepEqual(got.map((m) => m.k), sent, `${where}: every partial once, in order (${phase})`);
          for (const m of got)
            assert.equal(m.text, GEM_TEXT, `${where}: ${m.k} reads as the gem renders it (${phase}), not glued`);
          const g = await page.evaluate(() => window.__gem);
          assert.equal(g.dead, false, `${where}: the element is alive`);
        }
      };

      await send('first-1');
      await send('first-2');
      await allThere('partials on the first connection (fetch)');
      await check('first connection, fetch parser');
      for (const [where, page] of Object.entries(pages)) {
        const g = await page.evaluate(() => window.__gem);
        assert.equal(g.fetchStatus, 200, `${where}: the first fetch is 200`);
        assert.equal(g.phase, 'fetch', `${where}: still on the first fetch`);
        // (the gem's "retry: 2000" block counts as an empty message here, as in the gem's element)
        assert.ok(g.frames.every((f) => f.event === 'turbo-stream' || (f.event === 'message' && f.id === null)),
          `${where}: no pgbus:connected, nothing but turbo-stream (${JSON.stringify(g.frames)})`);
      }

      // The worker restarts under the pages: each element moves to its
      // EventSource with ?since=<last id>.
      const pids = await t.workerPids();
      for (const pid of pids) t.announce(`(PID ${pid}) exited with exit code 1`);
      await t.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pgbus_stream worker'`);
      await send('while-down');
      await t.waitFor(async () => {
        const p = await t.workerPids();
        return p.length >= pids.length && p.every((x) => !pids.includes(x));
      }, { timeout: 30000, interval: 200, what: 'the worker to come back' });
      await t.waitForWorker('chat', 15000);
      await send('after-1');
      await send('after-2');
      await allThere('partials after the reconnect (EventSource)', 30000);
      await t.sleep(1500); // time for a duplicate to show up
      for (const [where, page] of Object.entries(pages)) {
        const g = await page.evaluate(() => window.__gem);
        assert.equal(g.phase, 'eventsource', `${where}: on its EventSource after the restart`);
        assert.ok(g.frames.some((f) => f.phase === 'eventsource' && f.event === 'turbo-stream'),
          `${where}: partials read by the EventSource`);
      }
      await check('after the reconnect, EventSource');
    } finally {
      await nginx.stop();
    }
  },
};
