// 6. The stream viewer (GET /viewer?stream=<name> on the worker's own origin)
//    opens an EventSource on /streams/<name>: #state goes to "open", the
//    pgbus:connected event is listed, and broadcasts appear in #messages in
//    commit order as text (an HTML payload is shown, never rendered), each
//    with its event type and id.
'use strict';
const assert = require('node:assert/strict');

module.exports = {
  name: 'Viewer page: #state open; broadcasts listed in order as text, with event and id',
  timeout: 60000,
  async run(t) {
    const page = await t.openPage('viewer', `${t.cfg.sseOrigin}/viewer?stream=chat`);
    assert.match(await page.title(), /^pgbus_stream viewer/);
    const items = () => page.$$eval('#messages li', (lis) => lis.map((li) => ({
      event: li.dataset.event, id: li.dataset.id,
      shownEvent: li.querySelector('.event').textContent,
      data: li.querySelector('.data').textContent,
      elements: li.querySelector('.data').children.length })));
    const state = async () => JSON.stringify({
      state: await page.textContent('#state'), items: (await items()).slice(-6), console: page.consoleLog.slice(-5) });
    await t.waitFor(async () => (await page.textContent('#state')) === 'open',
      { timeout: 10000, what: '#state to be "open"', describe: state });
    assert.equal(await page.textContent('#stream'), 'chat');
    await t.waitFor(async () => (await items()).some((m) => m.event === 'pgbus:connected'),
      { timeout: 5000, what: 'pgbus:connected in #messages', describe: state });

    const run = Date.now().toString(36);
    const sent = [`viewer-${run}-1 plain`, `viewer-${run}-2 <b>html</b> & <script>window.__pwned = 1</script>`,
                  `viewer-${run}-3 line one\nline two`];
    const ids = [];
    for (const data of sent) ids.push(await t.broadcast('chat', data));
    const mine = async () => (await items()).filter((m) => m.data.startsWith(`viewer-${run}-`));
    await t.waitFor(async () => (await mine()).length >= sent.length,
      { timeout: 10000, what: `${sent.length} broadcasts in #messages`, describe: state });
    await t.sleep(500); // a duplicate would show up by now
    const got = await mine();
    t.note(`ids ${got.map((m) => m.id).join(' ')} (msg_ids ${ids.join(' ')})`);
    assert.deepEqual(got.map((m) => m.data), sent, 'the three payloads, once each, in commit order, as text');
    for (const m of got) {
      assert.equal(m.event, 'turbo-stream');
      assert.equal(m.shownEvent, 'turbo-stream');
      assert.equal(m.elements, 0, `payload shown as text, not markup: ${m.data}`);
    }
    const highest = got.map((m) => t.tokenHighest(m.id));
    for (let i = 0; i < highest.length; i++) {
      assert.ok(highest[i] >= ids[i], `id ${got[i].id} covers msg_id ${ids[i]}`);
      if (i) assert.ok(highest[i] > highest[i - 1], `ids increase: ${got[i - 1].id} then ${got[i].id}`);
    }
    // Newest at the bottom; no element from the payload anywhere in the list.
    const last = await page.$eval('#messages li:last-child .data', (e) => e.textContent);
    assert.equal(last, sent[sent.length - 1]);
    assert.equal(await page.$$eval('#messages b, #messages script', (l) => l.length), 0, 'no <b> or <script> element in #messages');
    assert.equal(await page.evaluate(() => window.__pwned), undefined, 'payload script never ran');
    assert.equal(await page.textContent('#last-id'), got[got.length - 1].id);
    const errors = page.consoleLog.filter((l) => /^(error|pageerror)/.test(l));
    assert.deepEqual(errors, [], 'no errors in the viewer console');
  },
};
