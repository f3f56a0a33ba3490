// 10. A plain EventSource whose connection drops before its first message
//     loses nothing. The page opens a stream nobody has written to yet; the
//     worker is stopped (pg_terminate_backend) before the first broadcast;
//     three broadcasts commit while the worker restarts and before Chromium
//     comes back; then three more after. Chromium reconnects on its own with
//     the opening frame's id as Last-Event-ID (the starting cursor), and the
//     DOM must end with the six messages, each once, in commit order.
//     Without an id on the opening frame the reconnect carries no
//     Last-Event-ID, starts from now, and the three are lost.
'use strict';
const assert = require('node:assert/strict');

const S = 'firstdrop';

module.exports = {
  name: 'first drop: an EventSource dropped before its first message gets what committed meanwhile, once each',
  timeout: 90000,
  async run(t) {
    await t.waitForWorker(S, 15000);
    const page = await t.openPage('firstdrop', `${t.cfg.pageOrigin}/eventsource.html?stream=${S}`);
    // Every request the EventSource makes (reconnects included), with the
    // headers Chromium really sent.
    const { reqUrls, sentHeaders } = await t.watchStreamRequests(page, S);
    const sse = () => page.evaluate(() => window.__sse);
    await t.waitFor(async () => (await sse()).connected.length >= 1, { timeout: 10000, what: 'pgbus:connected' });
    const first = await sse();
    assert.equal(first.messages.length, 0, 'no message before the drop');
    const run = Date.now().toString(36);
    const mine = (list) => list.filter((d) => d.startsWith(`fd-${run}-`));

    // The worker stops before any broadcast; the connection ends with it.
    const oldPids = await t.workerPids();
    assert.ok(oldPids.length >= 1, 'a pgbus_stream worker is running');
    for (const pid of oldPids) t.announce(`(PID ${pid}) exited with exit code 1`);
    await t.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pgbus_stream worker'`);
    await t.waitFor(async () => (await sse()).errors >= 1, { timeout: 10000, what: 'the EventSource to see the drop' });
    // Broadcasts during the restart: Chromium waits its retry: (at least 1 s)
    // before it comes back, so these commit while it is away.
    const during = [];
    for (let i = 1; i <= 3; i++) { const d = `fd-${run}-during-${i}`; await t.broadcast(S, d); during.push(d); }
    assert.equal((await sse()).opens, first.opens, 'the broadcasts committed before Chromium reconnected');
    await t.waitFor(async () => {
      const p = await t.workerPids();
      return p.length >= oldPids.length && p.every((x) => !oldPids.includes(x)) ? p : null;
    }, { timeout: 30000, interval: 200, what: 'a new worker process' });
    await t.waitForWorker(S, 15000);
    await t.waitFor(async () => (await sse()).opens > first.opens, { timeout: 15000, what: 'the EventSource to reconnect' });
    const after = [];
    for (let i = 1; i <= 3; i++) { const d = `fd-${run}-after-${i}`; await t.broadcast(S, d); after.push(d); }

    const truth = mine(await t.committedPayloads(S));
    assert.deepEqual(truth, [...during, ...after], 'the table holds the six broadcasts, in order');
    const domMine = async () => mine(await page.$$eval('#log li', (lis) => lis.map((li) => li.lastChild.textContent)));
    await t.waitFor(async () => { const dom = await domMine(); return truth.every((d) => dom.includes(d)); }, {
      timeout: 15000, what: 'every committed message in the DOM',
      describe: async () => {
        const dom = await domMine();
        return `DOM ${JSON.stringify(dom)}; missing ${JSON.stringify(truth.filter((d) => !dom.includes(d)))}`;
      },
    });
    await t.sleep(1500); // a late duplicate would show up here
    assert.deepEqual(await domMine(), truth, 'the DOM is exactly the committed messages, once each, in commit order');

    const reqs = [...reqUrls.entries()].sort((a, b) => a[1].at - b[1].at)
      .map(([id, r]) => ({ url: r.url, lastEventId: (sentHeaders.get(id) || {})['last-event-id'] }));
    t.note(`requests: ${reqs.length}; Last-Event-ID: ${JSON.stringify(reqs.map((r) => r.lastEventId))}`);
    assert.ok(reqs.length >= 2, 'Chromium reconnected');
    assert.equal(reqs[0].lastEventId, undefined, 'first request: no Last-Event-ID');
    assert.ok(reqs[1].lastEventId, 'the reconnect carries the opening frame\'s id as Last-Event-ID');
  },
};
