#!/usr/bin/env node
// Runs tests/*.js against a running cluster (run.sh sets the environment),
// in a real headless Chromium. Each test gets its own browser context(s),
// a deadline, and screenshots of its pages in output/ whatever the outcome.
// Usage: node run-tests.js [name-filter ...]
'use strict';
const fs = require('fs');
const path = require('path');
const h = require('./lib/harness');
const { startStaticServer } = require('./lib/static-server');

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => { console.log(`# interrupted (${sig})`); console.log('0 passed, 1 failed'); process.exit(1); });
}

async function main() {
  const filters = process.argv.slice(2);
  const files = fs.readdirSync(path.join(__dirname, 'tests')).filter((f) => /^\d+.*\.js$/.test(f)).sort();
  const tests = files.map((f) => ({ file: f, ...require(path.join(__dirname, 'tests', f)) }))
    .filter((t) => filters.length === 0 || filters.some((x) => t.file.includes(x) || t.name.includes(x)));
  fs.mkdirSync(h.cfg.output, { recursive: true });

  const servers = [];
  servers.push(await startStaticServer({ port: h.cfg.pagePort, host: '127.0.0.1', sseOrigin: h.cfg.sseOrigin, label: 'listed' }));
  // The "other" origin is http://localhost:<port>; Chromium may try ::1 first.
  servers.push(await startStaticServer({ port: h.cfg.otherPort, host: '127.0.0.1', sseOrigin: h.cfg.sseOrigin, label: 'other' }));
  try { servers.push(await startStaticServer({ port: h.cfg.otherPort, host: '::1', sseOrigin: h.cfg.sseOrigin, label: 'other' })); }
  catch (e) { /* no IPv6 loopback: 127.0.0.1 is enough */ }

  console.log(`# worker ${h.cfg.sseOrigin}, pages ${h.cfg.pageOrigin} (CORS-listed) and ${h.cfg.otherOrigin} (not listed)`);
  await h.waitForWorker('chat', 30000);
  // Diagnostic knob, off by default: PGB_WAKE_MS=N commits a broadcast to an
  // unrelated stream every N ms, which wakes the worker's loop. A test that
  // passes only with it points at work the worker leaves for its next wake-up.
  let waker = null;
  if (Number(process.env.PGB_WAKE_MS) > 0) {
    await h.sql(`SELECT pgbus_stream.create_stream('wake', public => true) WHERE NOT EXISTS (SELECT 1 FROM pgbus_stream.streams WHERE name = 'wake')`);
    waker = setInterval(() => h.broadcast('wake', 'tick').catch(() => {}), Number(process.env.PGB_WAKE_MS));
    console.log(`# PGB_WAKE_MS=${process.env.PGB_WAKE_MS}: waking the worker with a broadcast to 'wake' periodically`);
  }
  const browser = await h.launchBrowser();
  console.log(`# chromium ${browser.version()}`);
  console.log(`1..${tests.length}`);

  let passed = 0, failed = 0, n = 0;
  for (const t of tests) {
    n++;
    const started = Date.now();
    const contexts = [];
    const shots = [];
    const notes = [];
    const ctx = {
      ...h,
      browser,
      note: (s) => { notes.push(s); console.log(`#   ${s}`); },
      // Opens a page in a fresh browser context; console output and page
      // errors are kept for the report. label names the screenshot.
      async openPage(label, url, contextOptions = {}) {
        const context = await browser.newContext({ viewport: { width: 1000, height: 700 }, ...contextOptions });
        contexts.push(context);
        const page = await context.newPage();
        page.consoleLog = [];
        page.on('console', (m) => page.consoleLog.push(`${m.type()}: ${m.text()}`));
        page.on('pageerror', (e) => page.consoleLog.push(`pageerror: ${e.message}`));
        page.setDefaultTimeout(15000);
        await page.goto(url, { waitUntil: 'load', timeout: 15000 });
        shots.push({ label, page });
        return page;
      },
      // Watches every request the page makes to /streams/<stream>, with the
      // headers Chromium really sent (DevTools protocol: Last-Event-ID is
      // added below the page, so it is only in the ExtraInfo event), and
      // reloads the page so that its first request is seen too.
      // Returns { reqUrls, sentHeaders }, both by request id.
      async watchStreamRequests(page, stream) {
        const reqUrls = new Map(), sentHeaders = new Map();
        const cdp = await page.context().newCDPSession(page);
        cdp.on('Network.requestWillBeSent', (e) => {
          if (e.request.url.includes(`/streams/${stream}`)) reqUrls.set(e.requestId, { url: e.request.url, at: e.timestamp });
        });
        cdp.on('Network.requestWillBeSentExtraInfo', (e) => {
          const hdr = {};
          for (const [k, v] of Object.entries(e.headers)) hdr[k.toLowerCase()] = v;
          sentHeaders.set(e.requestId, hdr);
        });
        await cdp.send('Network.enable');
        await page.reload({ waitUntil: 'load' });
        return { reqUrls, sentHeaders };
      },
    };
    let error = null;
    let timer;
    try {
      await Promise.race([
        t.run(ctx),
        new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`test timed out after ${t.timeout} ms`)), t.timeout); }),
      ]);
    } catch (e) { error = e; }
    clearTimeout(timer);
    for (const s of shots) {
      const file = path.join(h.cfg.output, `${path.basename(t.file, '.js')}-${s.label}.png`);
      try { await s.page.screenshot({ path: file, fullPage: true, timeout: 10000 }); console.log(`#   screenshot ${path.relative(process.cwd(), file)}`); }
      catch (e) { console.log(`#   screenshot ${s.label} failed: ${e.message}`); }
    }
    if (error) {
      for (const s of shots) for (const l of s.page.consoleLog.slice(-8)) console.log(`#   [${s.label} console] ${l}`);
    }
    for (const c of contexts) await c.close().catch(() => {});
    const secs = ((Date.now() - started) / 1000).toFixed(1);
    if (error) {
      failed++;
      console.log(`not ok ${n} - ${t.name} (${secs} s)`);
      console.log(String(error.stack || error).split('\n').map((l) => '#   ' + l).join('\n'));
    } else {
      passed++;
      console.log(`ok ${n} - ${t.name} (${secs} s)`);
    }
  }
  if (waker) clearInterval(waker);
  await browser.close().catch(() => {});
  for (const s of servers) s.close();
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 && passed > 0 ? 0 : 1;
}

main().then((rc) => process.exit(rc), (e) => { console.error(e.stack || e); console.log('0 passed, 1 failed'); process.exit(1); });
