// 2. Stock Turbo: <turbo-stream-source src=".../streams/chat"> and a
//    broadcast of a <turbo-stream action="append"> appends to #messages.
'use strict';
const assert = require('node:assert/strict');
const { sql } = require('../lib/harness');

module.exports = {
  name: 'Turbo <turbo-stream-source>: a broadcast turbo-stream append reaches the DOM',
  timeout: 60000,
  async run(t) {
    // Stock Turbo listens for unnamed ("message") events: configure the server
    // to send broadcasts without an event name by default (reloaded by SIGHUP).
    await sql(`ALTER SYSTEM SET pgbus_stream.default_event = ''`);
    await sql('SELECT pg_reload_conf()');
    await t.sleep(300);
    try {
      await this.turbo(t);
    } finally {
      await sql('ALTER SYSTEM RESET pgbus_stream.default_event');
      await sql('SELECT pg_reload_conf()');
    }
  },
  async turbo(t) {
    const page = await t.openPage('turbo', `${t.cfg.pageOrigin}/turbo.html`);
    assert.equal(await page.evaluate(() => typeof window.Turbo), 'object', 'Turbo loaded');
    await t.waitFor(() => page.evaluate(() => window.__probe.events.some((e) => e.type === 'pgbus:connected')),
      { timeout: 10000, what: 'the Turbo EventSource to connect',
        describe: () => page.evaluate(() => JSON.stringify(window.__probe)) });

    const run = Date.now().toString(36);
    const stream = (action, text) =>
      `<turbo-stream action="${action}" target="messages"><template><li data-run="${run}">${text}</li></template></turbo-stream>`;
    const lis = () => page.$$eval(`#messages li[data-run="${run}"]`, (l) => l.map((x) => x.textContent));
    const why = async () => {
      const p = await page.evaluate(() => window.__probe);
      const seen = p.events.filter((e) => e.type !== 'pgbus:connected').map((e) => e.type);
      return `SSE event types seen on Turbo's EventSource: ${JSON.stringify(seen)}, Turbo stream renders: ${p.turboRenders}` +
             (seen.includes('turbo-stream')
               ? ". Frames sent as named 'turbo-stream' events are ignored: stock Turbo's <turbo-stream-source> " +
                 "(StreamObserver) listens only to unnamed 'message' events."
               : '');
    };

    // The brief's case: a plain broadcast (default event name, here none), and
    // the same with the SSE event named 'message' explicitly.
    await t.broadcast('chat', stream('append', 'hi'));
    await t.broadcast('chat', stream('append', 'hi (event: message)'), 'message');
    await t.waitFor(async () => { const l = await lis(); return l.includes('hi') && l.includes('hi (event: message)'); },
      { timeout: 8000, what: 'both appended <li>' }).catch(() => {});
    const got = await lis();
    t.note(`#messages: ${JSON.stringify(got)}; ${await why()}`);
    assert.ok(got.includes('hi (event: message)'), `a broadcast with event => 'message' is applied by Turbo; ${await why()}`);
    assert.ok(got.includes('hi'),
      `broadcast('chat', '<turbo-stream action="append" ...>') appends <li>hi</li>; ${await why()}`);

    // Order: a further append and a prepend apply in commit order.
    await t.broadcast('chat', stream('append', 'second'));
    await t.broadcast('chat', stream('prepend', 'first'));
    await t.waitFor(async () => (await lis()).length >= 4, { timeout: 8000, what: 'four <li> in #messages', describe: why });
    await t.sleep(500);
    assert.deepEqual(await lis(), ['first', 'hi', 'hi (event: message)', 'second'],
      '#messages after append, append, append, prepend');
  },
};
