// 4. Worker restarts under a live page: a clean stop (pg_terminate_backend,
//    the worker comes back by itself) and a crash (kill -9 of the worker: the
//    postmaster restarts everything), with broadcasts committed before, during
//    and after. The browser's EventSource reconnects on its own (retry: 2000,
//    Last-Event-ID) and the DOM must end with every committed message exactly
//    once, in commit order. The ground truth is the queue table itself.
'use strict';
const assert = require('node:assert/strict');

const S = 'reconnect';

// Sequential producer, one transaction per message, one at a time (so msg_id
// order is commit order). A failed call may or may not have committed (the
// connection can die after COMMIT), hence the table is the truth.
class Producer {
  constructor(t, prefix) { this.t = t; this.prefix = prefix; this.ok = []; this.failed = []; this.i = 0; }
  start(intervalMs = 80) {
    this.stopped = false;
    this.done = (async () => {
      while (!this.stopped) {
        const label = `${this.prefix}-${++this.i}`;
        try { await this.t.broadcast(S, label); this.ok.push(label); }
        catch (e) { this.failed.push(label); }
        await this.t.sleep(intervalMs);
      }
    })();
  }
  async stop() { this.stopped = true; await this.done; }
}

module.exports = {
  name: 'reconnect: worker stop and worker crash under a live EventSource, every committed message exactly once',
  timeout: 150000,
  async run(t) {
    const page = await t.openPage('reconnect', `${t.cfg.pageOrigin}/eventsource.html?stream=${S}`);
    // Every request the EventSource makes (reconnects included), with the
    // headers Chromium really sent.
    const { reqUrls, sentHeaders } = await t.watchStreamRequests(page, S);
    const sse = () => page.evaluate(() => window.__sse);
    await t.waitFor(async () => (await sse()).connected.length >= 1, { timeout: 10000, what: 'pgbus:connected' });
    const run = Date.now().toString(36);

    const domMine = async () => (await page.$$eval('#log li', (lis) => lis.map((li) => li.lastChild.textContent)))
      .filter((d) => d.startsWith(`rc-${run}-`));
    const committedMine = async () => (await t.committedPayloads(S)).filter((d) => d.startsWith(`rc-${run}-`));

    async function phase(name, disrupt) {
      const before = [];
      for (let i = 1; i <= 3; i++) { const d = `rc-${run}-${name}-before-${i}`; await t.broadcast(S, d); before.push(d); }
      await t.waitFor(async () => (await domMine()).includes(before[2]), { timeout: 10000, what: `${name}: the "before" messages in the DOM` });
      const opensBefore = (await sse()).opens;
      const prod = new Producer(t, `rc-${run}-${name}-during`);
      prod.start();
      await t.sleep(700);
      const oldPids = await t.workerPids();
      assert.ok(oldPids.length >= 1, 'a pgbus_stream worker is running');
      const t0 = Date.now();
      await disrupt(oldPids);
      const newPids = await t.waitFor(async () => {
        const p = await t.workerPids();
        return p.length >= oldPids.length && p.every((x) => !oldPids.includes(x)) ? p : null;
      }, { timeout: 30000, interval: 200, what: `${name}: a new worker process` });
      t.note(`${name}: worker ${oldPids.join(',')} -> ${newPids.join(',')} in ${Date.now() - t0} ms`);
      await t.waitForWorker(S, 15000);
      await t.sleep(2500); // keep producing while the browser reconnects
      await prod.stop();
      const after = [];
      for (let i = 1; i <= 3; i++) { const d = `rc-${run}-${name}-after-${i}`; await t.broadcast(S, d); after.push(d); }

      const truth = await committedMine();
      for (const l of [...before, ...prod.ok, ...after]) assert.ok(truth.includes(l), `${l} reported committed but not in the table`);
      t.note(`${name}: producer ${prod.ok.length} ok, ${prod.failed.length} failed calls` +
             (prod.failed.length ? ` (of which committed anyway: ${prod.failed.filter((l) => truth.includes(l)).length})` : ''));
      await t.waitFor(async () => {
        const dom = await domMine();
        return truth.every((d) => dom.includes(d));
      }, { timeout: 20000, what: `${name}: every committed message in the DOM`,
           describe: async () => {
             const dom = await domMine();
             const missing = truth.filter((d) => !dom.includes(d));
             const s = await sse();
             return `missing ${missing.length}: ${JSON.stringify(missing.slice(0, 10))}; opens=${s.opens} errors=${s.errors} readyStates=${JSON.stringify(s.readyStates)} shutdowns=${s.shutdowns}`;
           } });
      await t.sleep(2000);
      const dom = await domMine();
      const dups = dom.filter((d, i) => dom.indexOf(d) !== i);
      assert.deepEqual(dups, [], `${name}: no message twice in the DOM`);
      assert.deepEqual(dom, truth, `${name}: the DOM is exactly the committed messages, in commit order`);
      const s = await sse();
      assert.ok(s.opens > opensBefore, `${name}: the EventSource reconnected by itself (opens ${opensBefore} -> ${s.opens})`);
      assert.equal(await page.evaluate(() => window.__es.readyState), 1, `${name}: EventSource OPEN at the end`);
      return s;
    }

    // (a) clean stop: SIGTERM through pg_terminate_backend; bgw_restart_time brings it back.
    const s1 = await phase('term', async (pids) => {
      for (const pid of pids) t.announce(`(PID ${pid}) exited with exit code 1`);
      await t.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pgbus_stream worker'`);
    });
    t.note(`term: page saw pgbus:shutdown ${s1.shutdowns} time(s), ${s1.errors} error event(s)`);

    // (b) crash: SIGKILL the worker; the postmaster resets shared memory and restarts all.
    const s2 = await phase('kill9', async (pids) => {
      for (const pid of pids) { t.announce(`(PID ${pid}) was terminated by signal 9`); process.kill(pid, 'SIGKILL'); }
      await t.waitFor(async () => (await t.sql('SELECT 1')) === '1', { timeout: 30000, interval: 250, what: 'PostgreSQL to accept connections after the crash' });
    });
    t.note(`kill9: page errors ${s2.errors}, opens ${s2.opens}`);

    await t.sleep(300);
    const reqs = [...reqUrls.entries()].sort((a, b) => a[1].at - b[1].at)
      .map(([id, r]) => ({ url: r.url, lastEventId: (sentHeaders.get(id) || {})['last-event-id'] }));
    const reconnects = reqs.slice(1);
    t.note(`requests: ${reqs.length}; Last-Event-ID on reconnects: ${JSON.stringify(reconnects.map((r) => r.lastEventId))}`);
    assert.ok(reconnects.length >= 2, 'at least one reconnect per phase');
    assert.equal(reqs[0].lastEventId, undefined, 'first request: no Last-Event-ID');
    assert.ok(reconnects.every((r) => r.lastEventId), 'every reconnect carries Last-Event-ID');
  },
};
