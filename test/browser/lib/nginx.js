// Debian's nginx for the browser tests: a private instance (its own prefix
// directory with config, logs and temp paths) started as a child process and
// stopped by the test, plus a throw-away TLS certificate made with openssl.
// The configuration under test comes from README.md (readmeBlock), so the
// text people copy is the text the browser goes through.
'use strict';
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');

const NGINX = process.env.PGB_NGINX || '/usr/sbin/nginx';
const README = path.resolve(__dirname, '..', '..', '..', 'README.md');

// The first ```nginx block after the line `heading` of README.md.
function readmeBlock(heading) {
  const text = fs.readFileSync(README, 'utf8');
  const at = text.indexOf(`\n${heading}\n`);
  if (at < 0) throw new Error(`README.md has no section "${heading}"`);
  const m = /```nginx\n([\s\S]*?)```/.exec(text.slice(at));
  if (!m) throw new Error(`README.md: no nginx block under "${heading}"`);
  return m[1];
}

// The ```nginx block of "Switching from the pgbus streamer" (or `heading`)
// with the worker's address (127.0.0.1:8080 there) pointed at `ssePort`.
function readmeLocation(ssePort, heading = '## Switching from the pgbus streamer') {
  return substitute(readmeBlock(heading), [['127.0.0.1:8080', `127.0.0.1:${ssePort}`]]);
}

// Replaces each [from, to] in text; every `from` must be there.
function substitute(text, pairs) {
  for (const [from, to] of pairs) {
    if (!text.includes(from)) throw new Error(`nginx configuration: "${from}" not found`);
    text = text.split(from).join(to);
  }
  return text;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

function waitListening(port, child, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const attempt = () => {
      if (child.exitCode !== null) return reject(new Error(`nginx exited with ${child.exitCode}`));
      const c = net.connect(port, '127.0.0.1');
      c.once('connect', () => { c.destroy(); resolve(); });
      c.once('error', () => {
        c.destroy();
        if (Date.now() > deadline) reject(new Error(`nginx did not listen on ${port} within ${timeoutMs} ms`));
        else setTimeout(attempt, 100);
      });
    };
    attempt();
  });
}

// A self-signed certificate for 127.0.0.1 (and localhost), valid one day.
function makeCert(dir) {
  const cert = path.join(dir, 'cert.pem'), key = path.join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
    '-keyout', key, '-out', cert], { stdio: 'pipe' });
  fs.chmodSync(key, 0o644); // read by nginx's worker user as well
  return { cert, key };
}

// Starts nginx. Either `conf`, the whole inside of the http block (its own
// server blocks; `port` is the one to wait for), or `server`, the inside of
// one server block that listens on `listen` (default 127.0.0.1:<port>).
// `http`: extra lines in the http block; `dir`: prefix directory (default: a
// new one); `label` names it. Resolves with
// { port, origin, dir, conf, errorLog(), accessLog(), stop() }.
async function startNginx({ conf, server, port, listen, http = '', label = 'nginx', dir } = {}) {
  port = port || await freePort();
  dir = dir || fs.mkdtempSync(path.join(os.tmpdir(), `pgbus-${label}-`));
  fs.chmodSync(dir, 0o755);
  const root = process.getuid && process.getuid() === 0;
  const body = conf !== undefined ? conf : `  server {\n    listen ${listen || `127.0.0.1:${port}`};\n${server}\n  }\n`;
  const text = `daemon off;
worker_processes 1;
${root ? 'user nobody nogroup;' : ''}
pid ${dir}/nginx.pid;
error_log ${dir}/error.log info;
events { worker_connections 512; }
http {
  access_log ${dir}/access.log;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
${http}
${body}
}
`;
  fs.writeFileSync(path.join(dir, 'nginx.conf'), text);
  const args = ['-p', dir, '-e', `${dir}/error.log`, '-c', `${dir}/nginx.conf`];
  try {
    execFileSync(NGINX, ['-t', '-q', ...args], { stdio: 'pipe' });
  } catch (e) {
    throw new Error(`nginx -t refused the configuration: ${String(e.stderr || e.message).trim()}\n${text}`);
  }
  const child = spawn(NGINX, args, { stdio: 'ignore' });
  await waitListening(port, child, 10000);
  const read = (f) => () => { try { return fs.readFileSync(path.join(dir, f), 'utf8'); } catch (e) { return ''; } };
  // Fast stop (SIGTERM): a graceful one would wait for the open streams.
  const stop = () => new Promise((resolve) => {
    const done = () => { if (process.env.KEEP_CLUSTER !== '1') fs.rmSync(dir, { recursive: true, force: true }); resolve(); };
    if (child.exitCode !== null) return done();
    child.once('exit', done);
    child.kill('SIGTERM');
    setTimeout(() => { if (child.exitCode === null) child.kill('SIGKILL'); }, 5000).unref();
  });
  return { port, origin: `http://127.0.0.1:${port}`, dir, conf: text, errorLog: read('error.log'),
           accessLog: read('access.log'), stop };
}

module.exports = { startNginx, readmeBlock, readmeLocation, substitute, makeCert, freePort };
