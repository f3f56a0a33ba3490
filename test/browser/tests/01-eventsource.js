// 1. A plain EventSource on a CORS-listed origin gets every committed
//    broadcast in commit order (never an aborted one); a page on an origin
//    that is not listed cannot read the stream.
'use strict';
const assert = require('node:assert/strict');

module.exports = {
  name: 'EventSource: committed broadcasts in order; unlisted origin refused (CORS)',
  timeout: 60000,
  async run(t) {
    const listed = await t.openPage('listed', `${t.cfg.pageOrigin}/eventsource.html?stream=chat&events=chat-note`);
    const other = await t.openPage('other-origin', `${t.cfg.otherOrigin}/eventsource.html?stream=chat`);
    await t.waitFor(() => listed.evaluate(() => window.__sse.connected.length >= 1),
      { timeout: 10000, what: 'pgbus:connected on the listed origin',
        describe: () => listed.evaluate(() => JSON.stringify(window.__sse)) });
    // Give the unlisted page the same chance to connect before publishing.
    await t.waitFor(() => other.evaluate(() => window.__sse.errors >= 1 || window.__sse.connected.length >= 1),
      { timeout: 10000, what: 'the unlisted-origin page to either fail or connect' });

    const run = Date.now().toString(36);
    const expected = [];
    for (let i = 1; i <= 8; i++) {
      const data = `es-${run}-${i}`;
      await t.broadcast('chat', data); expected.push({ data, event: 'turbo-stream' });
    }
    // Several broadcasts in one transaction keep their order.
    await t.sql(`BEGIN; SELECT pgbus_stream.broadcast('chat', 'es-${run}-tx-a');
                 SELECT pgbus_stream.broadcast('chat', 'es-${run}-tx-b'); COMMIT;`);
    expected.push({ data: `es-${run}-tx-a`, event: 'turbo-stream' }, { data: `es-${run}-tx-b`, event: 'turbo-stream' });
    // Aborted: never delivered.
    await t.sql(`BEGIN; SELECT pgbus_stream.broadcast('chat', 'es-${run}-ABORTED'); ROLLBACK;`);
    // Multi-line payload, HTML, non-ASCII, a named event.
    const multi = `es-${run}-line1\nline2\r\nline3`;
    await t.broadcast('chat', multi); expected.push({ data: `es-${run}-line1\nline2\nline3`, event: 'turbo-stream' });
    const html = `<b>es-${run}-bold</b> & é ✓`;
    await t.broadcast('chat', html); expected.push({ data: html, event: 'turbo-stream' });
    await t.broadcast('chat', `es-${run}-named`, 'chat-note'); expected.push({ data: `es-${run}-named`, event: 'chat-note' });
    await t.broadcast('chat', `es-${run}-last`); expected.push({ data: `es-${run}-last`, event: 'turbo-stream' });

    const mine = () => listed.evaluate((run) => window.__sse.messages.filter((m) => m.data.startsWith('es-' + run) ||
      m.data.includes('es-' + run)), run);
    await t.waitFor(async () => (await mine()).some((m) => m.data === `es-${run}-last`),
      { timeout: 15000, what: 'the last broadcast in the listed page',
        describe: async () => JSON.stringify(await mine()) });
    await t.sleep(1500); // anything extra (duplicates, the aborted one) would show up by now
    const got = await mine();
    assert.deepEqual(got.map((m) => ({ data: m.data, event: m.event })), expected,
      'listed page: the committed broadcasts, each once, in commit order');
    const highest = got.map((m) => t.tokenHighest(m.id));
    for (let i = 1; i < highest.length; i++)
      assert.ok(highest[i] > highest[i - 1], `ids increase: ${got[i - 1].id} then ${got[i].id}`);
    const dom = await listed.$$eval('#log li', (lis) => lis.map((li) => li.lastChild.textContent));
    const domMine = dom.filter((d) => d.includes('es-' + run));
    assert.deepEqual(domMine, expected.map((e) => e.data), 'listed page DOM shows the same list');

    // Unlisted origin: the browser must refuse to expose the stream.
    const o = await other.evaluate(() => ({ ...window.__sse, readyState: window.__es.readyState }));
    const probe = await t.probeSSE('/streams/chat', { headers: { Origin: t.cfg.otherOrigin }, ms: 500 });
    t.note(`unlisted origin: status ${probe.status}, access-control-allow-origin=${JSON.stringify(probe.headers && probe.headers['access-control-allow-origin'])}; ` +
           `page errors=${o.errors} readyState=${o.readyState} messages=${o.messages.length}`);
    assert.equal(o.messages.length, 0, `unlisted origin must read no message, got ${JSON.stringify(o.messages.slice(0, 3))}`);
    assert.equal(o.connected.length, 0, 'unlisted origin must not even see pgbus:connected');
    assert.ok(o.errors >= 1, 'unlisted origin gets an EventSource error');
    assert.equal(o.readyState, 2, 'EventSource on the unlisted origin is CLOSED (CORS failure is final)');
    const cors = other.consoleLog.find((l) => /CORS|Access-Control-Allow-Origin/i.test(l));
    if (cors) t.note(`console: ${cors.slice(0, 200)}`);
  },
};
