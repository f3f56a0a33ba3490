// 8. The pgbus gem's page element, same origin through Debian's nginx with
//    the location block the README shows ("Switching from the pgbus
//    streamer"), on a Rails signed stream name made by ruby-activesupport
//    (test/unit/fixtures/signed_names.tsv: turbo-rails' key from
//    secret_key_base, the gem's logical name with ':'). The page is born
//    stale (broadcasts between its watermark and its first fetch), receives
//    live broadcasts rendered by stock Turbo, and lives through a worker
//    restart (pg_terminate_backend) with broadcasts before, during and after:
//    every message exactly once in the DOM, in commit order.
'use strict';
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { startNginx, readmeLocation } = require('../lib/nginx');

const STREAM = 'ai_chat_3a4f9c21b7d20e18_messages';
const LOGICAL = 'ai_chat_3a4f9c21b7d20e18:messages';

// The Rails 6.1 signed name of LOGICAL under the secret_key_base run.sh
// configures (turbo-rails' SHA256 key), as ruby-activesupport made it.
function railsSignedName() {
  const tsv = fs.readFileSync(path.resolve(__dirname, '..', '..', 'unit', 'fixtures', 'signed_names.tsv'), 'utf8');
  for (const line of tsv.split('\n')) {
    const [expect, kind, , , name, token, note] = line.split('\t');
    if (expect === 'ok' && kind === 'skb' && name === LOGICAL && note === '6.1 plain') return token;
  }
  throw new Error(`no ruby-activesupport vector for ${LOGICAL} in signed_names.tsv`);
}

const turbo = (k) => `<turbo-stream action="append" target="messages"><template><li class="msg">${k}</li></template></turbo-stream>`;

module.exports = {
  name: 'nginx: the gem element (fetch ?since= then EventSource) on a Rails signed name, Turbo, worker restart, every message once',
  timeout: 120000,
  async run(t) {
    const token = railsSignedName();
    const run = Date.now().toString(36);
    const label = (s) => `gem-${run}-${s}`;
    const queue = await t.sql(`SELECT queue_schema || '.' || queue_table FROM pgbus_stream.streams WHERE name = ${t.lit(STREAM)}`);
    assert.ok(queue, `stream ${STREAM} exists (run.sh creates it)`);
    await t.broadcast(STREAM, turbo(label('old'))); // before the watermark: never shown
    const watermark = await t.sql(`SELECT coalesce(max(msg_id), 0) FROM ${queue}`);
    const sent = [];
    const send = async (s) => { const k = label(s); await t.broadcast(STREAM, turbo(k)); sent.push(k); };
    await send('stale-1'); // rendered, not yet connected: the watermark brings these
    await send('stale-2');

    const location = readmeLocation(t.cfg.ssePort);
    const nginx = await startNginx({
      label: 'nginx-gem',
      server: `${location}\n    location / { proxy_pass http://127.0.0.1:${t.cfg.pagePort}; }`,
    });
    t.note(`nginx ${nginx.origin} with the README's location block`);
    let passed = false;
    try {
      const page = await t.openPage('gem-element-nginx',
        `${nginx.origin}/gem-element.html?token=${encodeURIComponent(token)}&since=${watermark}`);
      const gem = () => page.evaluate(() => window.__gem);
      const dom = () => page.$$eval('#messages li.msg', (lis) => lis.map((li) => li.textContent))
        .then((l) => l.filter((x) => x.startsWith(`gem-${run}-`)));
      const describe = async () => { const g = await gem(); return `dom=${JSON.stringify(await dom())} gem=${JSON.stringify({ ...g, frames: g.frames.slice(-8) })}`; };
      const allThere = (what, timeout = 15000) => t.waitFor(async () => {
        const d = await dom();
        return sent.every((k) => d.includes(k));
      }, { timeout, what, describe });

      await allThere('the broadcasts committed after the watermark (fetch ?since=)');
      let g = await gem();
      assert.equal(g.fetchStatus, 200, 'the first fetch through nginx is 200');
      assert.equal(g.phase, 'fetch', 'still on the first fetch');
      assert.ok(g.urls[0].startsWith(`/pgbus/streams/${token}?since=${watermark}`), `first request: src?since=<watermark> (${g.urls[0]})`);

      for (let i = 1; i <= 3; i++) await send(`live-${i}`);
      await allThere('live broadcasts');

      // Worker restart mid-page, broadcasting before the stop, while it is
      // down and after it came back.
      const pids = await t.workerPids();
      for (const pid of pids) t.announce(`(PID ${pid}) exited with exit code 1`);
      await send('before-stop');
      await t.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pgbus_stream worker'`);
      await send('while-down-1');
      await send('while-down-2');
      await t.waitFor(async () => {
        const p = await t.workerPids();
        return p.length >= pids.length && p.every((x) => !pids.includes(x));
      }, { timeout: 30000, interval: 200, what: 'the worker to come back' });
      await t.waitForWorker('chat', 15000);
      for (let i = 1; i <= 3; i++) await send(`after-${i}`);
      await allThere('every broadcast after the restart, through nginx', 30000);
      await t.sleep(2500); // time for a duplicate to show up
      const d = await dom();
      assert.deepEqual(d, sent, 'the DOM holds every message exactly once, in commit order (none from before the watermark)');
      g = await gem();
      t.note(`element: fetch ended=${g.fetchEnded}, EventSource opens=${g.opens} errors=${g.errors}, shutdowns=${g.shutdowns}, urls=${JSON.stringify(g.urls)}`);
      assert.equal(g.dead, false, 'the element never gave up');
      assert.equal(g.phase, 'eventsource', 'after the restart the element is on its EventSource');
      assert.ok(g.shutdowns >= 1, 'the restart was announced (pgbus:shutdown)');
      assert.ok(g.urls.length >= 2 && g.urls[1].includes('?since='), 'the EventSource reconnects with ?since=<last id>');
      assert.equal(await page.evaluate(() => document.querySelector('pgbus-stream-source').es.readyState), 1,
        'the EventSource is OPEN at the end');
      passed = true;
    } finally {
      const log = nginx.errorLog();
      if (!passed && /\[(error|crit|alert|emerg)\]/.test(log)) t.note(`nginx error.log:\n${log.split('\n').filter((l) => /\[(error|crit|alert|emerg)\]/.test(l)).slice(0, 10).join('\n')}`);
      await nginx.stop();
    }
  },
};
