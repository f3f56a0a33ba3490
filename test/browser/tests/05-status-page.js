// 5. The status page (GET / on the worker's own origin) polls /stats.json:
//    with a live EventSource subscriber, broadcasts make #total-queued
//    grow, #connections counts the subscriber, the chart draws queued/s,
//    and /stats.json and /metrics answer with their content types.
'use strict';
const assert = require('node:assert/strict');
const http = require('http');

// GET on the worker from Node: { status, type, body }.
function get(port, path) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, timeout: 5000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, type: res.headers['content-type'], body }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path}: timeout`)));
    req.on('error', reject);
  });
}

module.exports = {
  name: 'Status page: #total-queued and #connections follow live broadcasts; chart drawn',
  timeout: 60000,
  async run(t) {
    const page = await t.openPage('status', `${t.cfg.sseOrigin}/`);
    assert.equal(await page.title(), 'pgbus_stream status');
    const number = (id) => page.$eval(`#${id}`, (e) => (/^\d+$/.test(e.textContent) ? Number(e.textContent) : null));
    const state = async () => JSON.stringify({
      state: await page.textContent('#state'), queued: await page.textContent('#total-queued'),
      connections: await page.textContent('#connections'), console: page.consoleLog.slice(-5) });
    await t.waitFor(async () => (await number('total-queued')) !== null,
      { timeout: 5000, what: 'the status page to show figures from /stats.json', describe: state });
    assert.equal(await page.textContent('#state'), 'up');

    // A subscriber in another page (CORS-listed origin), as a browser app would be.
    const sub = await t.openPage('subscriber', `${t.cfg.pageOrigin}/eventsource.html?stream=chat`);
    await t.waitFor(() => sub.evaluate(() => window.__sse.connected.length >= 1),
      { timeout: 10000, what: 'the subscriber to connect' });
    await t.waitFor(async () => (await number('connections')) >= 1,
      { timeout: 5000, what: '#connections to count the subscriber', describe: state });

    const before = await number('total-queued');
    const run = Date.now().toString(36);
    const n = 5;
    for (let i = 1; i <= n; i++) await t.broadcast('chat', `status-${run}-${i}`);
    await t.waitFor(() => sub.evaluate((run) => window.__sse.messages.filter((m) => m.data.startsWith(`status-${run}-`)).length, run)
      .then((k) => k === n), { timeout: 10000, what: `the subscriber to get ${n} messages` });
    const after = await t.waitFor(async () => {
      const v = await number('total-queued');
      return v >= before + n ? v : null;
    }, { timeout: 5000, what: `#total-queued to grow by at least ${n} from ${before}`, describe: state });
    t.note(`#total-queued ${before} -> ${after}, #connections ${await number('connections')}`);

    // The table has a row for the stream; the chart drew the queued/s line
    // (its colour, #1565c0) high up: the burst is the chart's maximum.
    const row = await page.$$eval('#streams tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent))
      .find((c) => c[0] === 'chat'));
    assert.ok(row, 'a table row for chat');
    assert.ok(Number(row[3]) >= n, `chat row shows queued (${row})`);
    await t.waitFor(() => page.evaluate(() => {
      const c = document.getElementById('chart');
      const d = c.getContext('2d').getImageData(0, 0, c.width, Math.floor(c.height / 2)).data;
      let blue = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i] < 60 && d[i + 2] > 150 && d[i + 3] > 200) blue++;
      return blue > 20;
    }), { timeout: 5000, what: 'the queued/s line on the canvas' });

    // Content types of the routes the page and Prometheus read.
    const stats = await get(t.cfg.ssePort, '/stats.json');
    assert.equal(stats.status, 200);
    assert.match(stats.type, /^application\/json/);
    const j = JSON.parse(stats.body);
    assert.ok(j.streams.some((s) => s.name === 'chat' && s.queued >= n), 'stats.json lists chat');
    const metrics = await get(t.cfg.ssePort, '/metrics');
    assert.equal(metrics.status, 200);
    assert.match(metrics.type, /^text\/plain; ?version=0\.0\.4/);
    assert.match(metrics.body, /^pgbus_stream_stream_queued_total\{stream="chat"\} \d+$/m);
    const errors = page.consoleLog.filter((l) => /^(error|pageerror)/.test(l));
    assert.deepEqual(errors, [], 'no errors in the status page console');
  },
};
