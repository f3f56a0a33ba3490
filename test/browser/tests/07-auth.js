// 7. Private streams from a real browser: an EventSource on a signed stream
//    name (the token rendered into the URL unescaped, '+', '/' and '=' as
//    they are, as the pgbus gem does) and one whose JWT travels in a cookie
//    (withCredentials) get their broadcasts; the same pages without the
//    credential get nothing and give up (401 is final for EventSource).
'use strict';
const assert = require('node:assert/strict');
const crypto = require('node:crypto');

// A MessageVerifier token (SHA256, JSON) for name, as Rails makes it.
function signedName(name, key) {
  const data = Buffer.from(JSON.stringify(name)).toString('base64');
  return `${data}--${crypto.createHmac('sha256', key).update(data).digest('hex')}`;
}

async function messagesOf(page) {
  return page.evaluate(() => window.__sse.messages.map((m) => m.data));
}

module.exports = {
  name: 'Private streams: signed stream name in the URL, JWT in a cookie; refused without',
  timeout: 90000,
  async run(t) {
    const run = Date.now().toString(36);
    // 'auth_signed' plus characters the gem's queue naming drops, chosen so
    // that the Base64 carries '+' or '/' (and '=' padding).
    let token = null;
    for (let k = 0; k < 300 && !token; k++) {
      const tok = signedName('auth_signed' + '?'.repeat(k % 7) + '>'.repeat(k % 5) + '~'.repeat(k % 3),
        'browser-signing-secret');
      if (/[+/]/.test(tok) && /=/.test(tok.split('--')[0])) token = tok;
    }
    assert.ok(token, 'a signed name with + or / and = in it');
    t.note(`signed name: ${token}`);
    const signed = await t.openPage('signed',
      // (?connected=1: the gem's route sends pgbus:connected only when asked)
      `${t.cfg.pageOrigin}/eventsource.html?src=${encodeURIComponent(`${t.cfg.sseOrigin}/pgbus/streams/${token}?connected=1`)}`);
    const anonymous = await t.openPage('signed-stream-anonymous',
      `${t.cfg.pageOrigin}/eventsource.html?stream=auth_signed`);

    const jwt = (await t.sql(`SELECT pgbus_stream.sign_token(ARRAY['auth_cookie'], '10 minutes')`)).trim();
    const cookiePage = await t.openPage('jwt-cookie', `${t.cfg.pageOrigin}/style.css`);
    await cookiePage.context().addCookies([{ name: 'pgbus_token', value: jwt, domain: '127.0.0.1', path: '/' }]);
    await cookiePage.goto(`${t.cfg.pageOrigin}/eventsource.html?stream=auth_cookie&credentials=1`);
    const noCookie = await t.openPage('jwt-cookie-missing',
      `${t.cfg.pageOrigin}/eventsource.html?stream=auth_cookie&credentials=1`);

    for (const [page, what] of [[signed, 'signed name'], [cookiePage, 'JWT cookie']])
      await t.waitFor(() => page.evaluate(() => window.__sse.connected.length >= 1),
        { timeout: 10000, what: `pgbus:connected with the ${what}`,
          describe: () => page.evaluate(() => JSON.stringify(window.__sse)) });
    for (const page of [anonymous, noCookie])
      await t.waitFor(() => page.evaluate(() => window.__es.readyState === 2),
        { timeout: 10000, what: 'the page without a credential to give up',
          describe: () => page.evaluate(() => JSON.stringify(window.__sse)) });

    await t.broadcast('auth_signed', `signed-${run}`);
    await t.broadcast('auth_cookie', `cookie-${run}`);
    await t.waitFor(async () => (await messagesOf(signed)).includes(`signed-${run}`),
      { timeout: 10000, what: 'the broadcast on the signed stream' });
    await t.waitFor(async () => (await messagesOf(cookiePage)).includes(`cookie-${run}`),
      { timeout: 10000, what: 'the broadcast on the cookie stream' });
    await t.sleep(500);
    assert.deepEqual(await messagesOf(signed), [`signed-${run}`], 'signed page: exactly its broadcast');
    assert.deepEqual(await messagesOf(cookiePage), [`cookie-${run}`], 'cookie page: exactly its broadcast');
    for (const page of [anonymous, noCookie]) {
      const s = await page.evaluate(() => window.__sse);
      assert.equal(s.messages.length, 0, 'no credential: no message');
      assert.equal(s.connected.length, 0, 'no credential: not even pgbus:connected');
    }
    const probe = await t.probeSSE('/streams/auth_cookie', { ms: 300 });
    assert.equal(probe.status, 401, 'the refusal the browser saw is a 401');
  },
};
