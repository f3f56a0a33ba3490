// 3. The pgbus element contract: first connect with fetch() streaming
//    ?since=<id> (body read as a stream, frames parsed in the page), then with
//    an EventSource whose automatic reconnect carries Last-Event-ID. Each path
//    must deliver exactly the messages missed while disconnected. Also: fetch()
//    with a Last-Event-ID header (CORS preflight) beats a stale ?since.
'use strict';
const assert = require('node:assert/strict');

const S = 'contract';

module.exports = {
  name: 'contract: fetch() ?since=<id> then EventSource Last-Event-ID each deliver exactly the missed messages',
  timeout: 90000,
  async run(t) {
    const page = await t.openPage('contract', `${t.cfg.pageOrigin}/contract.html`);
    const view = (name) => page.evaluate((n) => window.runView(n), name);
    const data = async (name) => (await view(name)).events.filter((e) => !e.type.startsWith('pgbus:'));
    const run = Date.now().toString(36);
    const tag = (s) => `ct-${run}-${s}`;
    const waitData = (name, last, what) => t.waitFor(async () => (await data(name)).some((e) => e.data === last),
      { timeout: 15000, what, describe: async () => JSON.stringify(await view(name)) });
    const settleAndGet = async (name) => { await t.sleep(1500); return (await data(name)).map((e) => e.data); };
    const pub = async (...names) => { for (const n of names) await t.broadcast(S, tag(n)); return names.map(tag); };

    // --- fetch(), no cursor: live from now.
    const url = `${t.cfg.sseOrigin}/streams/${S}`;
    const r1 = await page.evaluate(([u]) => window.startFetch('fetch-1', u), [url]);
    assert.equal(r1.status, 200, `fetch-1 status: ${JSON.stringify(r1)}`);
    assert.match(r1.headers['content-type'] || '', /^text\/event-stream/, 'content-type');
    await t.waitFor(async () => (await view('fetch-1')).connected >= 1, { timeout: 10000, what: 'fetch-1 pgbus:connected' });
    const a = await pub('A1', 'A2', 'A3');
    await waitData('fetch-1', a[2], 'fetch-1 to get A3');
    assert.deepEqual(await settleAndGet('fetch-1'), a, 'fetch-1 gets A1..A3 live');
    const evA = await data('fetch-1');
    const idA3 = evA[2].id;
    assert.ok(idA3, 'A3 has an id');
    await page.evaluate(() => window.stopFetch('fetch-1'));

    // --- missed while disconnected, then fetch() ?since=<id of A3>.
    const b = await pub('B1', 'B2', 'B3');
    await t.sql(`BEGIN; SELECT pgbus_stream.broadcast('${S}', '${tag('B4')}'); SELECT pgbus_stream.broadcast('${S}', '${tag('B5')}'); COMMIT;`);
    b.push(tag('B4'), tag('B5'));
    const r2 = await page.evaluate(([u]) => window.startFetch('fetch-since', u), [`${url}?since=${encodeURIComponent(idA3)}`]);
    assert.equal(r2.status, 200, `fetch ?since status: ${JSON.stringify(r2)}`);
    await waitData('fetch-since', b[4], 'fetch ?since to replay B1..B5');
    const c0 = await pub('C0');  // live after the replay, same connection
    await waitData('fetch-since', c0[0], 'fetch ?since to get the live C0 after the replay');
    assert.deepEqual(await settleAndGet('fetch-since'), [...b, ...c0],
      'fetch ?since=<A3> gets exactly B1..B5 (missed) then C0 (live): no A, no duplicate');
    const fs = await view('fetch-since');
    const open = fs.comments.find((c) => c.startsWith('pgbus stream open'));
    t.note(`fetch ?since open comment: ${open}`);
    const idC0 = (await data('fetch-since')).at(-1).id;
    await page.evaluate(() => window.stopFetch('fetch-since'));

    // --- fetch() with a Last-Event-ID header (a CORS preflight) and a stale
    //     ?since: the header wins.
    const c = await pub('C1', 'C2');
    const r3 = await page.evaluate(([u, id]) => window.startFetch('fetch-header', u, { 'Last-Event-ID': id }),
      [`${url}?since=${encodeURIComponent(idA3)}`, idC0]);
    assert.equal(r3.status, 200, `fetch with Last-Event-ID: ${JSON.stringify(r3)}`);
    await waitData('fetch-header', c[1], 'fetch with Last-Event-ID to replay C1, C2');
    assert.deepEqual(await settleAndGet('fetch-header'), c,
      'fetch with Last-Event-ID=<C0> and a stale ?since=<A3> gets exactly C1, C2');
    const idC2 = (await data('fetch-header')).at(-1).id;
    await page.evaluate(() => window.stopFetch('fetch-header'));

    // --- EventSource through a cuttable proxy: first with ?since=<id of C2>.
    const d = await pub('D1', 'D2');
    const proxy = await new t.CutProxy(t.cfg.ssePort).listen();
    try {
      const esUrl = `http://127.0.0.1:${proxy.port}/streams/${S}?since=${encodeURIComponent(idC2)}`;
      await page.evaluate(([u]) => window.startES('eventsource', u), [esUrl]);
      await waitData('eventsource', d[1], 'EventSource ?since to replay D1, D2');
      const idD2 = (await data('eventsource')).at(-1).id;

      // Cut the connection and hold the reconnect while E1..E3 are committed.
      proxy.pause();
      proxy.cutAll();
      await t.waitFor(async () => (await view('eventsource')).errors >= 1, { timeout: 5000, what: 'EventSource error after the cut' });
      const e = await pub('E1', 'E2', 'E3');
      await t.waitFor(() => proxy.held.length >= 1, { timeout: 6000, what: 'the browser to reconnect on its own (retry: 2000)' });
      proxy.resume();
      await waitData('eventsource', e[2], 'EventSource reconnect to replay E1..E3');
      const f = await pub('F1');
      await waitData('eventsource', f[0], 'EventSource to get the live F1 after reconnecting');
      assert.deepEqual(await settleAndGet('eventsource'), [...d, ...e, ...f],
        'EventSource: D1, D2 (?since), then exactly E1..E3 after its reconnect (Last-Event-ID wins over the stale ?since), then F1');
      const v = await view('eventsource');
      assert.equal(v.readyState, 1, 'EventSource is OPEN again');
      assert.equal(v.connected, 2, 'two pgbus:connected: first connect and the reconnect');
      assert.ok(proxy.requests.length >= 2, `two requests went through the proxy: ${JSON.stringify(proxy.requests)}`);
      const first = proxy.requests[0].headers, again = proxy.requests.at(-1).headers;
      assert.equal(first['last-event-id'], undefined, 'the first EventSource request has no Last-Event-ID');
      assert.equal(again['last-event-id'], idD2, 'the browser reconnect sends Last-Event-ID = id of D2');
      t.note(`reconnect request: ${proxy.requests.at(-1).start}  Last-Event-ID: ${again['last-event-id']}`);
    } finally {
      await page.evaluate(() => window.__runs.eventsource && window.stopES('eventsource')).catch(() => {});
      await proxy.close();
    }
  },
};
