// Tiny static file server for the browser pages (no framework). It serves
// pages/*.html with "__SSE_ORIGIN__" replaced by the worker's origin, the
// shared SSE parser and the Turbo bundle from node_modules. Nothing else.
//
// Standalone: node lib/static-server.js <port> <host> <sse-origin>
'use strict';
const http = require('http');
const fs = require('fs');
const path = require('path');

const ROOT = path.resolve(__dirname, '..');
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8',
                '.css': 'text/css; charset=utf-8' };

function routes() {
  const map = new Map();
  for (const f of fs.readdirSync(path.join(ROOT, 'pages'))) map.set('/' + f, path.join(ROOT, 'pages', f));
  map.set('/lib/sse-parse.js', path.join(ROOT, 'lib', 'sse-parse.js'));
  map.set('/vendor/turbo.js', require.resolve('@hotwired/turbo/dist/turbo.es2017-umd.js', { paths: [ROOT] }));
  return map;
}

function startStaticServer({ port, host = '127.0.0.1', sseOrigin, label = 'pages' }) {
  const files = routes();
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const pathname = url.pathname === '/' ? '/index.html' : url.pathname;
    const file = files.get(pathname);
    if (req.method !== 'GET' && req.method !== 'HEAD') { res.writeHead(405); res.end(); return; }
    if (pathname === '/favicon.ico') { res.writeHead(204); res.end(); return; }
    if (!file) { res.writeHead(404, { 'content-type': 'text/plain' }); res.end('not found\n'); return; }
    let body = fs.readFileSync(file);
    const ext = path.extname(file);
    if (ext === '.html') body = Buffer.from(body.toString('utf8').split('__SSE_ORIGIN__').join(sseOrigin));
    res.writeHead(200, { 'content-type': TYPES[ext] || 'application/octet-stream',
                         'cache-control': 'no-store', 'content-length': body.length,
                         'x-served-by': label });
    res.end(req.method === 'HEAD' ? undefined : body);
  });
  server.keepAliveTimeout = 1000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}

module.exports = { startStaticServer };

if (require.main === module) {
  const [port, host, sse] = process.argv.slice(2);
  startStaticServer({ port: Number(port), host, sseOrigin: sse }).then(() =>
    console.log(`serving ${path.join(ROOT, 'pages')} on http://${host}:${port}`));
}
