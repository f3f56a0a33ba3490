// Debian's nginx in front of the worker, for the browser tests: a private
// instance (its own prefix directory, config, logs and temp paths) on a port
// of its choosing, started as a child process and stopped by the test. The
// server block is the caller's; readmeLocation() gives the location block the
// README shows ("Switching from the pgbus streamer"), so that the text people
// copy is the text under test.
'use strict';
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');

const NGINX = process.env.PGB_NGINX || '/usr/sbin/nginx';
const README = path.resolve(__dirname, '..', '..', '..', 'README.md');

// The ```nginx block that follows `heading` in README.md, with the worker's
// address (127.0.0.1:8080 there) pointed at `ssePort`.
function readmeLocation(ssePort, heading = '## Switching from the pgbus streamer') {
  const text = fs.readFileSync(README, 'utf8');
  const at = text.indexOf(heading);
  if (at < 0) throw new Error(`README.md has no section "${heading}"`);
  const m = /```nginx\n([\s\S]*?)```/.exec(text.slice(at));
  if (!m) throw new Error(`README.md: no nginx block under "${heading}"`);
  if (!m[1].includes('127.0.0.1:8080')) throw new Error('README.md: the nginx block does not name 127.0.0.1:8080');
  return m[1].split('127.0.0.1:8080').join(`127.0.0.1:${ssePort}`);
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

// Starts nginx with `server` (the text inside `server { }` after the listen
// line). Options: port (default: a free one), listen (default
// "127.0.0.1:<port>"), http (extra lines in the http block), label (names
// the directory). Resolves with { port, origin, dir, errorLog(), stop() }.
async function startNginx({ server, port, listen, http = '', label = 'nginx' }) {
  port = port || await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `pgbus-${label}-`));
  fs.chmodSync(dir, 0o755);
  const root = process.getuid && process.getuid() === 0;
  const conf = `daemon off;
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
  server {
    listen ${listen || `127.0.0.1:${port}`};
${server}
  }
}
`;
  fs.writeFileSync(path.join(dir, 'nginx.conf'), conf);
  try {
    execFileSync(NGINX, ['-t', '-q', '-p', dir, '-e', `${dir}/error.log`, '-c', `${dir}/nginx.conf`], { stdio: 'pipe' });
  } catch (e) {
    throw new Error(`nginx -t refused the configuration: ${String(e.stderr || e.message).trim()}\n${conf}`);
  }
  const child = spawn(NGINX, ['-p', dir, '-e', `${dir}/error.log`, '-c', `${dir}/nginx.conf`], { stdio: 'ignore' });
  await waitListening(port, child, 10000);
  const errorLog = () => { try { return fs.readFileSync(path.join(dir, 'error.log'), 'utf8'); } catch (e) { return ''; } };
  const stop = () => new Promise((resolve) => {
    const done = () => { if (process.env.KEEP_CLUSTER !== '1') fs.rmSync(dir, { recursive: true, force: true }); resolve(); };
    if (child.exitCode !== null) return done();
    child.once('exit', done);
    child.kill('SIGQUIT'); // graceful; SIGTERM would be fast
    setTimeout(() => { if (child.exitCode === null) child.kill('SIGKILL'); }, 5000).unref();
  });
  return { port, origin: `http://127.0.0.1:${port}`, dir, conf, errorLog, stop };
}

module.exports = { startNginx, readmeLocation };
