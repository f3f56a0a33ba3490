// Prints N distinct TCP ports, free on 127.0.0.1 (and ::1 when it exists),
// taken below the kernel's ephemeral range so that outgoing connections of
// other processes cannot grab them between this check and their use.
// Usage: node lib/free-ports.js N
'use strict';
const net = require('net');

function tryListen(port, host) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', (e) => resolve(e.code === 'EADDRNOTAVAIL' || e.code === 'EAFNOSUPPORT' ? 'n/a' : false));
    s.listen({ port, host, exclusive: true }, () => s.close(() => resolve(true)));
  });
}

async function main() {
  const n = Number(process.argv[2] || 1);
  const out = [];
  const lo = 20000, hi = 32000;
  let p = lo + Math.floor(Math.random() * (hi - lo));
  for (let tries = 0; out.length < n && tries < 2000; tries++, p = p + 1 >= hi ? lo : p + 1) {
    if (out.includes(p)) continue;
    if ((await tryListen(p, '127.0.0.1')) !== true) continue;
    if ((await tryListen(p, '::1')) === false) continue;
    out.push(p);
  }
  if (out.length < n) { console.error('free-ports: not enough free ports'); process.exit(1); }
  console.log(out.join(' '));
}
main();
